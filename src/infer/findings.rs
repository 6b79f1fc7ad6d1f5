//! What inference finds and hands downstream (the trace writer), in time order per thread: a
//! `Finding` (an interval, a hand-off, a stack, ...), not to be confused with the saved stream's
//! records (stream/).

use crate::infer::held_blocked::BlockedStretch;
use crate::infer::intervals::{GilState, Interval};
use crate::infer::native_call::FrameWatch;
use std::sync::Arc;

/// A stack as read: `function (file:line)` lines, innermost first. Shared, because one reading stands
/// for many samples and goes to both the trace and the report.
pub type Frames = Arc<Vec<String>>;

/// A hand-off of the GIL seen by the sampler: `from_tid` held it at `last_held_ns`, `to_tid` at
/// `taken_ns`, the next sample that saw a holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// The thread (our PID namespace) that held the GIL at `last_held_ns`.
    pub from_tid: u32,
    /// The thread that held it at `taken_ns`.
    pub to_tid: u32,
    /// Monotonic nanoseconds of the last sample that saw `from_tid` hold the GIL.
    pub last_held_ns: u64,
    /// Monotonic nanoseconds of the next sample that saw a holder, `to_tid`.
    pub taken_ns: u64,
}

/// A Python stack read at `t_ns` while the thread was in `state`, standing for `samples` samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackReading {
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    /// When the stack was read, monotonic nanoseconds.
    pub t_ns: u64,
    /// The thread's GIL state at that sample.
    pub state: GilState,
    /// The stack, innermost frame first.
    pub frames: Frames,
    /// How many samples this one reading stands for.
    pub samples: u64,
    /// Whether the reading begins a slice of the thread: a wait, a hold, or a hold's part after a
    /// gap or a held-back stretch. The trace sums a reading into an earlier one of the same stack
    /// only back to the latest that began a slice: which slice a reading belongs to is settled
    /// only after it reaches the trace.
    pub begins_slice: bool,
}

/// What inference hands downstream (trace writer, summary, live view): each thing a sample settled,
/// in the order of `StacksFirst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A thread's closed interval in one GIL state.
    Interval(Interval),
    /// The holder slept in a syscall while holding the GIL (infer/held_blocked.rs).
    HeldWhileBlocked(BlockedStretch),
    /// The GIL went from one thread to another between two samples.
    Handoff(Handoff),
    /// A Python stack the sampler read (sampler/stack_watch.rs); the trace puts it into the args
    /// of the slice that covers its time (trace/stacks.rs).
    Stack(StackReading),
    /// What the sampler saw of a holder's innermost frame over a hold, or over the part of one in
    /// which that frame did not change (sampler/stack_watch.rs); `t_ns` is its last read, inside the
    /// hold. The trace judges the hold's kind from it (infer/native_call.rs).
    HoldFrames {
        /// The holder's id in gilsample's PID namespace.
        tid: u32,
        /// The frame's last read, monotonic nanoseconds.
        t_ns: u64,
        /// What was seen of the frame.
        watch: Box<FrameWatch>,
    },
    /// The switch interval read from the target was `us` from `t_ns` on (sent when it changes).
    SwitchInterval {
        /// From when, monotonic nanoseconds.
        t_ns: u64,
        /// The switch interval, microseconds.
        us: u64,
    },
    /// The number of threads waiting for the GIL changed to `count` at `t_ns`.
    WaitingThreads {
        /// When the count changed, monotonic nanoseconds.
        t_ns: u64,
        /// Threads waiting for the GIL from then on.
        count: u32,
    },
    /// From `t_ns` on the sampler ticked at `hz` (lower while the target was quiet, infer/quiet.rs).
    Rate {
        /// From when, monotonic nanoseconds.
        t_ns: u64,
        /// Ticks per second from then on.
        hz: u32,
    },
    /// Threads named since the last such finding (sampler/thread_naming.rs): the trace writes their
    /// names at once, so that a file cut short still has them.
    ThreadNames {
        /// When they were named, monotonic nanoseconds.
        t_ns: u64,
        /// Each thread's id in gilsample's PID namespace and its name.
        names: Vec<(u32, String)>,
    },
    /// The sampler saw nothing of the target from `from_ns` to `to_ns`: its samples came further
    /// apart than the timeline bridges (`TimelineParams::max_gap_ns`: it fell behind, most often for
    /// want of a CPU), so no thread's interval covers that time. `report` leaves it out of every
    /// figure, where it would otherwise count as time the threads spent outside the GIL.
    Gap {
        /// Half a period after the last sample before the gap, monotonic nanoseconds.
        from_ns: u64,
        /// Half a period before the first sample after it.
        to_ns: u64,
    },
    /// Only for a live view that asked for it (`SamplerConfig::live_every_ns`): what is known at a
    /// sample beyond the findings closed so far. The trace writer hands it to its tap, if any
    /// (trace/tap.rs), and writes nothing of it.
    Live(Box<LiveSnapshot>),
}

/// What a live view needs at one sample besides the closed findings: boxed in `Finding::Live`, so
/// that every other finding stays as small as it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveSnapshot {
    /// The sample's time and the recording's first sample's (monotonic).
    pub t_ns: u64,
    /// The first sample's time of the recording, monotonic nanoseconds.
    pub started_ns: u64,
    /// Each thread's interval still open, and its held-while-blocked stretch, up to this sample
    /// (`Engine::open_so_far`).
    pub open: Vec<Interval>,
    /// Each holder's held-while-blocked stretch still open at this sample.
    pub open_blocked: Vec<BlockedStretch>,
    /// Every thread's name so far, by tid.
    pub names: Vec<(u32, String)>,
}

impl Finding {
    /// When it happened: an interval's end, a count's change.
    pub fn time_ns(&self) -> u64 {
        match self {
            Finding::Interval(interval) => interval.end_ns,
            Finding::HeldWhileBlocked(stretch) => stretch.end_ns,
            Finding::Handoff(handoff) => handoff.taken_ns,
            Finding::WaitingThreads { t_ns, .. } | Finding::Rate { t_ns, .. } => *t_ns,
            Finding::Gap { to_ns, .. } => *to_ns,
            Finding::Stack(StackReading { t_ns, .. })
            | Finding::HoldFrames { t_ns, .. }
            | Finding::SwitchInterval { t_ns, .. }
            | Finding::ThreadNames { t_ns, .. } => *t_ns,
            Finding::Live(snapshot) => snapshot.t_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_snapshot_does_not_make_every_record_bigger() {
        // The largest other variant: a held-while-blocked stretch (or a stack), 32 bytes and a tag.
        assert!(std::mem::size_of::<BlockedStretch>() <= 32);
        assert_eq!(std::mem::size_of::<Finding>(), 40);
    }
}
