//! A live recording's trace as it is written, for a watcher in the same process (`gilsample top`):
//! the trace writer hands it each slice it writes, with the times and `args` the file gets, so the
//! watcher reads the recording as `report` reads the finished file; and, when the sampler sends
//! one (`SamplerConfig::live_every_ns`), what the recording knows beyond the slices written: each
//! thread's interval still open, up to the last sample, and the threads' names. A writer without a
//! tap does none of this.

use serde_json::{Value, json};

use crate::infer::findings::LiveSnapshot;
use crate::observed::syscall_name;
use crate::trace::micros::span_micros;
use crate::trace::stacks::PendingStacks;

/// One slice, as a reader of the file gets it: its event name (`take_gil`, `hold_gil`, `drop_gil`,
/// `held_while_blocked`), thread, start and end on the trace clock in nanoseconds (the file's whole
/// microseconds times 1000), and its `args`.
#[derive(Clone, Copy, Debug)]
pub struct TappedSlice<'a> {
    /// The event name: `take_gil`, `hold_gil`, `drop_gil` or `held_while_blocked`.
    pub name: &'static str,
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    /// Start, trace-clock nanoseconds.
    pub start_ns: i128,
    /// End, trace-clock nanoseconds.
    pub end_ns: i128,
    /// The slice's `args`, if it has any.
    pub args: Option<&'a Value>,
}

/// What the recording knew at one sample beyond the slices written so far.
#[derive(Clone, Copy, Debug)]
pub struct TappedProgress<'a> {
    /// The first sample of the recording and this one, on the trace clock.
    pub started_ns: i128,
    /// This sample's time, trace-clock nanoseconds.
    pub now_ns: i128,
    /// Each thread's interval (and held-while-blocked stretch) still open, from its start to `now_ns`:
    /// not written yet, and written later as a slice with the same start.
    pub open: &'a [TappedSlice<'a>],
    /// Every thread's name so far (Python name, else the kernel's), by tid.
    pub names: &'a [(u32, String)],
}

/// The watcher of one target's trace. It runs on the writer thread: it must not block.
pub trait TraceTap: Send {
    /// A slice just written to the trace.
    fn slice(&mut self, slice: &TappedSlice<'_>);
    /// What the recording knew at a sample beyond the slices written (`Finding::Live`).
    fn progress(&mut self, progress: &TappedProgress<'_>);
    /// A span the sampler saw nothing of (`Finding::Gap`), on the trace clock, nanoseconds.
    fn gap(&mut self, from_ns: i128, to_ns: i128);
}

/// A slice as a tap gets it, its args still to be lent: `ts`/`dur` in whole microseconds (the
/// writer's own rounding) as nanoseconds on the trace clock, as a reader of the file gets them.
pub fn tapped(
    name: &'static str,
    tid: u32,
    (start, end): (u64, u64),
    offset_ns: i64,
) -> TappedSlice<'static> {
    let offset = offset_ns as i128;
    let (ts, dur) = span_micros(start as i128 + offset, end as i128 + offset);
    TappedSlice {
        name,
        tid,
        start_ns: ts * 1000,
        end_ns: (ts + dur) * 1000,
        args: None,
    }
}

/// Hands `tap` a live snapshot: the open intervals as the slices they will become, with the stacks
/// read inside them so far (left for the slices themselves), the open held-while-blocked stretches,
/// and the names.
pub fn hand_live(
    tap: &mut dyn TraceTap,
    snapshot: &LiveSnapshot,
    stacks: &PendingStacks,
    offset_ns: i64,
) {
    // The slices with their args owned here, then lent to the tap.
    let mut owned: Vec<(TappedSlice<'static>, Option<Value>)> = Vec::new();
    for interval in &snapshot.open {
        if let Some(name) = interval.state.event_name() {
            let span = (interval.start_ns, interval.end_ns);
            let slice = tapped(name, interval.tid, span, offset_ns);
            let args = stacks.peek_args_for(interval);
            owned.push((slice, args.and_then(|a| serde_json::to_value(a).ok())));
        }
    }
    for stretch in &snapshot.open_blocked {
        let span = (stretch.start_ns, stretch.end_ns);
        let slice = tapped("held_while_blocked", stretch.tid, span, offset_ns);
        owned.push((slice, Some(json!({"syscall": syscall_name(stretch.nr)}))));
    }
    let open: Vec<TappedSlice<'_>> = owned
        .iter()
        .map(|(slice, args)| TappedSlice {
            args: args.as_ref(),
            ..*slice
        })
        .collect();
    let offset = offset_ns as i128;
    tap.progress(&TappedProgress {
        started_ns: snapshot.started_ns as i128 + offset,
        now_ns: snapshot.t_ns as i128 + offset,
        open: &open,
        names: &snapshot.names,
    });
}
