//! What `gilsample top` knows of each process it records, and the answer for a window of it.
//!
//! Each target's trace writer hands its tap (trace/tap.rs) every slice it writes, with the times and
//! `args` the file gets; they are added with `ProcessTrace::add_slice`, the code `report` reads a
//! file with. Each live snapshot adds the intervals still open (the slices they will become) and the
//! threads' names. The answer for a window is `report`'s own `analyze` over the slices inside it,
//! cut at its edges: the same engine, the same analysis, never a second one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use crate::report::analyze::{ProcessAnswer, analyze};
use crate::report::load::{ProcessTrace, Slice, SliceKind};
use crate::trace::tap::{TappedProgress, TappedSlice, TraceTap};

/// Slices kept per process for the view since the start (about 48 bytes each, so about 100 MB);
/// past it the oldest quarter is let go, and "since the start" says from when it counts.
pub const MAX_SLICES_KEPT: usize = 2_000_000;

/// Which time an answer is about.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Span {
    /// The last this many nanoseconds.
    Last(i128),
    /// Everything since the recording's first sample.
    SinceStart,
}

/// One process as recorded so far.
struct LiveProcess {
    rank: Option<u32>,
    /// `MAX_SLICES_KEPT`, smaller in tests.
    max_slices: usize,
    /// Closed slices in the order written, names and labels, as `report` holds a file's.
    trace: ProcessTrace,
    /// The slices still open at the last snapshot.
    open: Vec<Slice>,
    started_ns: Option<i128>,
    /// The last snapshot's sample, on the trace clock: what the recording knows up to.
    now_ns: Option<i128>,
    /// Where the slices kept begin, once the oldest were let go.
    kept_from_ns: Option<i128>,
    python: Option<String>,
    command_line: String,
    ended: bool,
}

/// What the view shows of one process besides its answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Described {
    /// The process's pid in gilsample's PID namespace.
    pub pid: u32,
    /// Its rank in a distributed job, where it has one.
    pub rank: Option<u32>,
    /// Its interpreter's version, once attached.
    pub python: Option<String>,
    /// Its command line.
    pub command_line: String,
    /// The recording's first sample, on the trace clock; `None` before the first snapshot.
    pub started_ns: Option<i128>,
    /// The recording of it ended (the process exited, or the recording failed).
    pub ended: bool,
}

/// Every process of a `top` session, shared by the writers' taps and the view.
#[derive(Default)]
pub struct Live {
    processes: Mutex<BTreeMap<u32, LiveProcess>>,
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u32, LiveProcess>> {
        // A tap that panicked (a bug) leaves what it added; the view goes on with it.
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tap for the trace of process `pid`: what its writer writes comes here.
    pub fn tap(self: &Arc<Live>, pid: u32, rank: Option<u32>) -> Box<dyn TraceTap> {
        let command_line = crate::process::tasks::read_cmdline(pid)
            .map(|line| crate::process::tasks::one_line(&line))
            .unwrap_or_default();
        let mut processes = self.lock();
        let process = processes.entry(pid).or_default();
        process.trace.pid = pid;
        process.trace.facts.rank = rank;
        process.trace.facts.host = crate::record::host_name();
        process.rank = rank;
        process.command_line = command_line;
        Box::new(Tap {
            live: self.clone(),
            pid,
        })
    }

    /// The interpreter's version, once its recording has started.
    pub fn note_python(&self, pid: u32, python: &str) {
        if let Some(process) = self.lock().get_mut(&pid) {
            process.python = Some(python.to_string());
        }
    }

    /// The processes, by pid, with what the view shows of each.
    pub fn processes(&self) -> Vec<Described> {
        self.lock()
            .iter()
            .map(|(&pid, p)| Described {
                pid,
                rank: p.rank,
                python: p.python.clone(),
                command_line: p.command_line.clone(),
                started_ns: p.started_ns,
                ended: p.ended,
            })
            .collect()
    }

    /// The first sample of any process's recording, on the trace clock.
    pub fn started_ns(&self) -> Option<i128> {
        self.lock().values().filter_map(|p| p.started_ns).min()
    }

    /// The latest sample any process's recording knows, on the trace clock.
    pub fn now_ns(&self) -> Option<i128> {
        self.lock().values().filter_map(|p| p.now_ns).max()
    }

    /// The answer for process `pid` over `span`, ending at `at` (or at what its recording knows now,
    /// whichever is earlier); `None` before its first snapshot. The slices are copied out under the
    /// lock and analysed outside it, so a writer never waits for an analysis.
    pub fn answer(&self, pid: u32, span: Span, at: Option<i128>) -> Option<ProcessAnswer> {
        let view = {
            let processes = self.lock();
            processes.get(&pid)?.window(span, at)?
        };
        Some(analyze(&view))
    }
}

impl Default for LiveProcess {
    fn default() -> LiveProcess {
        LiveProcess {
            rank: None,
            max_slices: MAX_SLICES_KEPT,
            trace: ProcessTrace::default(),
            open: Vec::new(),
            started_ns: None,
            now_ns: None,
            kept_from_ns: None,
            python: None,
            command_line: String::new(),
            ended: false,
        }
    }
}

impl LiveProcess {
    /// The trace of the window `span` ends at `at`: its slices cut at the window's edges, as a
    /// file of just that window would have them.
    fn window(&self, span: Span, at: Option<i128>) -> Option<ProcessTrace> {
        let (started, now) = (self.started_ns?, self.now_ns?);
        let end = at.map_or(now, |at| at.min(now));
        let first = self.kept_from_ns.unwrap_or(started).max(started);
        let start = match span {
            Span::Last(ns) => (end - ns).max(first),
            Span::SinceStart => first,
        };
        let mut view = self.trace.without_slices();
        view.facts.window_ns = Some((start, end));
        let inside = self
            .trace
            .slices
            .iter()
            .chain(&self.open)
            .filter(|s| s.end_ns > start && s.start_ns < end)
            .map(|s| Slice {
                start_ns: s.start_ns.max(start),
                end_ns: s.end_ns.min(end),
                ..*s
            });
        view.slices.extend(inside);
        let gaps = self.trace.gaps_ns.iter();
        let gaps_inside = gaps.filter(|&&(from, to)| to > start && from < end);
        view.gaps_ns
            .extend(gaps_inside.map(|&(from, to)| (from.max(start), to.min(end))));
        // In the order `load` leaves a file's slices.
        view.slices.sort_by_key(|s| (s.start_ns, s.tid, s.kind));
        Some(view)
    }

    fn add(&mut self, slice: &TappedSlice<'_>) {
        let Some(kind) = SliceKind::from_name(slice.name) else {
            return;
        };
        let args = slice.args.and_then(Value::as_object);
        self.trace
            .add_slice(kind, slice.tid, (slice.start_ns, slice.end_ns), args);
        // The slice an open one became: it has the open one's start (infer/intervals.rs).
        let stretch = kind == SliceKind::HeldWhileBlocked;
        self.open.retain(|open| {
            open.tid != slice.tid
                || (open.kind == SliceKind::HeldWhileBlocked) != stretch
                || open.start_ns > slice.start_ns
        });
        if self.trace.slices.len() > self.max_slices {
            let oldest = self.trace.slices.drain(..self.max_slices.div_ceil(4));
            let until = oldest.map(|s| s.end_ns).max();
            self.kept_from_ns = self.kept_from_ns.max(until);
        }
    }

    /// A gap the sampler saw nothing of: left out of the answers as `report` leaves it out. Kept
    /// within `max_slices` as the slices are.
    fn gap(&mut self, from_ns: i128, to_ns: i128) {
        let gaps = &mut self.trace.gaps_ns;
        if to_ns > from_ns {
            crate::report::gaps::push_joined(gaps, (from_ns, to_ns));
        }
        if gaps.len() > self.max_slices {
            // As with the slices: the view counts from where what it keeps begins.
            let until = gaps
                .drain(..self.max_slices.div_ceil(4))
                .map(|(_, to)| to)
                .max();
            self.kept_from_ns = self.kept_from_ns.max(until);
        }
    }

    fn progress(&mut self, progress: &TappedProgress<'_>) {
        self.started_ns = Some(progress.started_ns);
        self.now_ns = Some(progress.now_ns);
        // Added as closed slices are (their labels interned with theirs), then set apart.
        let closed = self.trace.slices.len();
        for slice in progress.open {
            if let Some(kind) = SliceKind::from_name(slice.name) {
                let args = slice.args.and_then(Value::as_object);
                self.trace
                    .add_slice(kind, slice.tid, (slice.start_ns, slice.end_ns), args);
            }
        }
        self.open = self.trace.slices.split_off(closed);
        for (tid, name) in progress.names {
            self.trace.name_thread(*tid, name);
        }
    }
}

/// A writer's tap: adds what it writes to its process.
struct Tap {
    live: Arc<Live>,
    pid: u32,
}

impl TraceTap for Tap {
    fn slice(&mut self, slice: &TappedSlice<'_>) {
        if let Some(process) = self.live.lock().get_mut(&self.pid) {
            process.add(slice);
        }
    }

    fn progress(&mut self, progress: &TappedProgress<'_>) {
        if let Some(process) = self.live.lock().get_mut(&self.pid) {
            process.progress(progress);
        }
    }

    fn gap(&mut self, from_ns: i128, to_ns: i128) {
        if let Some(process) = self.live.lock().get_mut(&self.pid) {
            process.gap(from_ns, to_ns);
        }
    }
}

impl Drop for Tap {
    /// The writer is done with the trace: the recording of this process ended.
    fn drop(&mut self) {
        if let Some(process) = self.live.lock().get_mut(&self.pid) {
            process.ended = true;
            process.open.clear();
        }
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
