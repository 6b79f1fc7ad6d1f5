//! Each `hold_gil` slice's kind as the writer writes it: Python code or one native call
//! (infer/native_call.rs), judged from what the sampler saw of the holder's frame during the hold,
//! the `GIL waiters` track and the switch interval. A native call's args name its call site (file,
//! line and that line's source, read from the target's own files where this is a live recording)
//! and its callee where it was read.

use std::collections::VecDeque;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use crate::infer::intervals::Interval;
use crate::infer::native_call::{
    DEFAULT_SWITCH_INTERVAL_US, FrameWatch, HoldEvidence, is_native_call,
};
use crate::trace::pending::PerThread;
use crate::trace::source::SourceLines;
use crate::trace::stacks::StackArgs;

/// Stretches with waiters kept after they ended: a hold is written when it closes, at most a held-back
/// stretch (50 ms) and a batch later than its end.
const KEEP_RUNS_NS: u64 = 1_000_000_000;

/// Frame watches kept per thread while its hold is open (a hold whose frame keeps changing).
const MAX_WATCHES_PER_THREAD: usize = 64;

/// A run of waiters broken for no longer than this is one run. A waiter leaves `take_gil` only with
/// the GIL, so inside one hold the count cannot drop: a sample or two that counted none there misread
/// a waiter (one woken from its timed wait and waiting for a CPU looks like a thread running
/// native code: docs/classification.md, "Where it is still wrong"). In the saved streams of
/// `tests/native_calls.rs` under load, 28 of 3,079 holds of 30 ms or more had such a break, every
/// one under 0.2 ms; counted from such a break, a long call that ends 5–10 ms after it looks like
/// Python code letting go when asked.
const MISREAD_BREAK_NS: u64 = 1_000_000;

/// When some thread waited for the GIL: each run of samples with one waiter or more, from the
/// sample that first counted one to the one that counted none (open while it lasts).
#[derive(Default)]
struct WaiterRuns {
    runs: VecDeque<(u64, Option<u64>)>,
}

impl WaiterRuns {
    /// `count` waiters from `t_ns` on; a break of up to `join_ns` before it is joined.
    fn observe(&mut self, t_ns: u64, count: u32, join_ns: u64) {
        match (self.runs.back_mut(), count > 0) {
            (Some((_, end @ None)), false) => *end = Some(t_ns),
            (Some((_, None)), true) => {}
            (Some((_, end @ Some(_))), true)
                if end.is_some_and(|e| t_ns.saturating_sub(e) <= join_ns) =>
            {
                *end = None
            }
            (_, true) => self.runs.push_back((t_ns, None)),
            (_, false) => {}
        }
        while self
            .runs
            .front()
            .is_some_and(|&(_, end)| end.is_some_and(|e| e + KEEP_RUNS_NS < t_ns))
        {
            self.runs.pop_front();
        }
    }

    /// How long before `end_ns`, and not before `start_ns`, threads had been waiting without a break.
    fn waited_until(&self, start_ns: u64, end_ns: u64) -> u64 {
        self.runs
            .iter()
            .rev()
            .find(|&&(from, to)| from <= end_ns && to.is_none_or(|to| to > end_ns))
            .map_or(0, |&(from, _)| end_ns - from.max(start_ns))
    }
}

/// A slice's `args`: its stacks where it has them, and a hold's kind. Written straight into the
/// trace; the keys come in the order the trace has always had them (alphabetical).
#[derive(Debug, Serialize)]
pub struct SliceArgs {
    /// A hold's kind; none for a wait, a drop, or a hold of Python code with no stack read.
    #[serde(flatten)]
    pub kind: Option<HoldKind>,
    /// The stacks read inside the slice.
    #[serde(flatten)]
    pub stacks: Option<StackArgs>,
}

impl SliceArgs {
    /// Whether the slice gets no `args` at all.
    pub fn is_empty(&self) -> bool {
        self.kind.is_none() && self.stacks.is_none()
    }
}

/// What held the GIL through a hold: Python code (`"native_call": false`), or one native call with
/// where it was made from (`call_site`: null when no frame of it was read) and what it called.
#[derive(Debug, PartialEq)]
pub enum HoldKind {
    /// Python code: it moved from instruction to instruction, or let go when asked.
    Python,
    /// One native call that kept the GIL.
    NativeCall {
        /// The frame it was called from.
        call_site: Option<CallSite>,
        /// The function called, where the interpreter keeps it readable.
        callee: Option<String>,
    },
}

impl Serialize for HoldKind {
    fn serialize<S: Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        let mut fields = to.serialize_struct("HoldKind", 3)?;
        if let HoldKind::NativeCall { call_site, callee } = self {
            fields.serialize_field("call_site", call_site)?;
            fields.serialize_field("callee", callee)?;
        }
        fields.serialize_field("native_call", &matches!(self, HoldKind::NativeCall { .. }))?;
        fields.end()
    }
}

/// Where a native call was made from: the frame that stood still, and its source line where the
/// target's file could be read.
#[derive(Debug, PartialEq, Serialize)]
pub struct CallSite {
    /// The code object's file name.
    pub file: String,
    /// The function's (qualified) name.
    pub function: String,
    /// The line of the call, where the frame's line could be read.
    pub line: Option<u32>,
    /// That line's text, from the target's file (a live recording only).
    pub source: Option<String>,
}

/// The writer's view of holds: what decides their kind, and the source lines of call sites
/// (none until `read_sources_of`).
pub struct HoldKinds {
    interval_us: Option<u64>,
    /// The sampling period asked for, nanoseconds (0 until told).
    period_ns: u64,
    waiters: WaiterRuns,
    watches: PerThread<FrameWatch>,
    sources: Option<SourceLines>,
}

impl Default for HoldKinds {
    fn default() -> Self {
        HoldKinds {
            interval_us: None,
            period_ns: 0,
            waiters: WaiterRuns::default(),
            watches: PerThread::with_cap(MAX_WATCHES_PER_THREAD),
            sources: None,
        }
    }
}

impl HoldKinds {
    /// Read call sites' source lines from the files of process `pid` (a live recording; a replay
    /// does not read them: the pid may be another process by then).
    pub fn read_sources_of(&mut self, pid: u32) {
        self.sources = Some(SourceLines::of(pid));
    }

    /// The switch interval last read from the target.
    pub fn switch_interval_us(&self) -> Option<u64> {
        self.interval_us
    }

    /// The target's switch interval is `us` microseconds from now on.
    pub fn note_interval(&mut self, us: u64) {
        self.interval_us = Some(us);
    }

    /// The recording samples at `hz` (as asked: the quiet rate is used only while nobody waits).
    pub fn note_sampling_rate(&mut self, hz: f64) {
        if hz > 0.0 {
            self.period_ns = (1e9 / hz) as u64;
        }
    }

    /// `count` threads wait for the GIL from `t_ns` on.
    pub fn note_waiters(&mut self, t_ns: u64, count: u32) {
        // Never more than half an interval: a real hand-off and a new wait within it would add
        // to W what a short interval's "let go when asked" needs to tell.
        let interval_ns = self.interval_us.unwrap_or(DEFAULT_SWITCH_INTERVAL_US) * 1000;
        let join_ns = MISREAD_BREAK_NS.min(interval_ns / 2);
        self.waiters.observe(t_ns, count, join_ns);
    }

    /// What the sampler saw of thread `tid`'s innermost frame over a hold, last read at `t_ns`.
    pub fn note_frames(&mut self, tid: u32, t_ns: u64, watch: FrameWatch) {
        self.watches.push(tid, t_ns, watch);
    }

    /// The kind of the hold `interval`, whose stacks are `stacks`: none for Python code where no
    /// stack was read (such a slice gets no `args`).
    pub fn kind_of(&mut self, interval: &Interval, stacks: Option<&StackArgs>) -> Option<HoldKind> {
        let parts = self.watches.take_inside(interval);
        // A hold the samples left a gap in is written as several slices, each with the watch
        // from the hold's start: what waited is counted from there too.
        let watched_from = parts
            .iter()
            .map(|(t, w)| t.saturating_sub(w.span_ns))
            .min()
            .map_or(interval.start_ns, |from| from.min(interval.start_ns));
        let frames = FrameWatch::dominant(parts.into_iter().map(|(_, w)| w).collect());
        let evidence = HoldEvidence {
            waited_ns: self.waiters.waited_until(watched_from, interval.end_ns),
            interval_ns: self.interval_us.unwrap_or(DEFAULT_SWITCH_INTERVAL_US) * 1000,
            frames,
            period_ns: self.period_ns,
        };
        if !is_native_call(&evidence) {
            return stacks.map(|_| HoldKind::Python);
        }
        let frames = evidence.frames.unwrap_or_default();
        // The frame that stood still; without a watch, the stack the hold began in.
        let innermost = frames.innermost.or_else(|| stacks?.stack.first().cloned());
        let call_site = innermost
            .as_deref()
            .and_then(call_site)
            .map(|(function, file, line)| {
                let source = line.and_then(|l| self.sources.as_mut()?.line(file, l));
                CallSite {
                    file: file.to_string(),
                    function: function.to_string(),
                    line,
                    source,
                }
            });
        Some(HoldKind::NativeCall {
            call_site,
            callee: frames.callee,
        })
    }
}

/// The function, file and line of a stack's frame text, `function (file:line)` (or `function
/// (file)`). A function's qualified name has no " (" in it; a path may.
pub fn call_site(frame: &str) -> Option<(&str, &str, Option<u32>)> {
    let (function, place) = frame.split_once(" (")?;
    let place = place.strip_suffix(')')?;
    Some(match place.rsplit_once(':') {
        Some((file, line)) if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => {
            (function, file, line.parse().ok())
        }
        _ => (function, place, None),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::infer::intervals::GilState;
    use crate::trace::stacks::{Frames, StackCount};

    /// The hold's `args` as the trace writes them, from its stack (innermost first) where one was
    /// read.
    fn annotate(
        kinds: &mut HoldKinds,
        interval: &Interval,
        stack: Option<&[&str]>,
    ) -> Option<Value> {
        let stacks = stack
            .map(|frames| StackArgs::one(Arc::new(frames.iter().map(|f| f.to_string()).collect())));
        let kind = kinds.kind_of(interval, stacks.as_ref());
        let args = SliceArgs { kind, stacks };
        (!args.is_empty()).then(|| serde_json::to_value(&args).unwrap())
    }

    const MS: u64 = 1_000_000;

    fn hold(start_ms: u64, end_ms: u64) -> Interval {
        Interval {
            tid: 7,
            state: GilState::Hold,
            start_ns: start_ms * MS,
            end_ns: end_ms * MS,
        }
    }

    fn still(innermost: &str) -> FrameWatch {
        FrameWatch {
            reads: 50,
            still_reads: 49,
            idle_reads: 0,
            span_ns: 50 * MS,
            innermost: Some(innermost.into()),
            callee: Some("dumps".into()),
        }
    }

    #[test]
    fn waiting_is_measured_back_from_the_holds_end() {
        let mut runs = WaiterRuns::default();
        runs.observe(0, 0, MISREAD_BREAK_NS);
        runs.observe(10 * MS, 1, MISREAD_BREAK_NS);
        runs.observe(20 * MS, 2, MISREAD_BREAK_NS);
        runs.observe(60 * MS, 0, MISREAD_BREAK_NS);
        runs.observe(70 * MS, 1, MISREAD_BREAK_NS);
        assert_eq!(runs.waited_until(0, 55 * MS), 45 * MS);
        assert_eq!(runs.waited_until(30 * MS, 55 * MS), 25 * MS);
        assert_eq!(runs.waited_until(0, 65 * MS), 0, "nobody waited at its end");
        assert_eq!(
            runs.waited_until(60 * MS, 90 * MS),
            20 * MS,
            "a run still open"
        );
        assert_eq!(runs.waited_until(0, 5 * MS), 0);
    }

    #[test]
    fn a_waiter_misread_for_a_sample_does_not_break_its_wait() {
        let mut runs = WaiterRuns::default();
        runs.observe(0, 1, MISREAD_BREAK_NS);
        runs.observe(293 * MS, 0, MISREAD_BREAK_NS);
        runs.observe(293 * MS + 100_000, 1, MISREAD_BREAK_NS);
        assert_eq!(runs.waited_until(0, 300 * MS), 300 * MS);
        // Nobody for longer: a new run.
        runs.observe(301 * MS, 0, MISREAD_BREAK_NS);
        runs.observe(303 * MS, 1, MISREAD_BREAK_NS);
        assert_eq!(runs.waited_until(0, 310 * MS), 7 * MS);
    }

    #[test]
    fn a_long_native_call_with_a_misread_waiter_near_its_end_stays_one_native_call() {
        // A 300 ms call that stood still, waited for from its start; 7 ms before its end one sample
        // counted no waiter. Counted from there, the hold let go within two intervals of a request.
        let mut kinds = HoldKinds::default();
        kinds.note_interval(5000);
        kinds.note_waiters(0, 1);
        kinds.note_waiters(293 * MS, 0);
        kinds.note_waiters(293 * MS + 100_000, 2);
        let mut watch = still("iterencode (/usr/lib/json/encoder.py:257)");
        watch.span_ns = 299 * MS;
        kinds.note_frames(7, 299 * MS, watch);
        let out = annotate(&mut kinds, &hold(0, 300), None).unwrap();
        assert_eq!(out["native_call"], true);
    }

    #[test]
    fn a_hold_that_stood_still_is_a_native_call_with_its_call_site() {
        let mut kinds = HoldKinds::default();
        kinds.note_interval(5000);
        kinds.note_frames(
            7,
            40 * MS,
            still("iterencode (/usr/lib/json/encoder.py:258)"),
        );
        let stack = ["iterencode (/usr/lib/json/encoder.py:258)", "main (m.py:1)"];
        let out = annotate(&mut kinds, &hold(0, 60), Some(&stack)).unwrap();
        assert_eq!(out["native_call"], true);
        assert_eq!(
            out["call_site"],
            json!({"function": "iterencode", "file": "/usr/lib/json/encoder.py", "line": 258,
                   "source": null})
        );
        assert_eq!(out["callee"], "dumps");
        assert_eq!(out["stack"][1], "main (m.py:1)");
        // The watch was used up: the next hold of the thread has none.
        assert_eq!(
            annotate(&mut kinds, &hold(60, 70), Some(&[])).unwrap()["native_call"],
            false
        );
    }

    #[test]
    fn without_frames_only_a_long_wait_makes_a_native_call() {
        let mut kinds = HoldKinds::default();
        // No interval read: the default 5 ms. A waiter from 10 ms on.
        kinds.note_waiters(10 * MS, 1);
        assert_eq!(
            annotate(&mut kinds, &hold(0, 40), None),
            None,
            "30 ms: 6 intervals"
        );
        let out = annotate(&mut kinds, &hold(0, 70), None).unwrap();
        assert_eq!(
            out,
            json!({"native_call": true, "call_site": null, "callee": null})
        );
        // A watch that is not the thread's, or outside the hold, does not count.
        kinds.note_waiters(72 * MS, 0);
        kinds.note_frames(8, 80 * MS, still("f (a.py:1)"));
        kinds.note_frames(7, 200 * MS, still("f (a.py:1)"));
        let mut short = hold(75, 80);
        assert_eq!(annotate(&mut kinds, &short, None), None);
        short.tid = 8;
        assert_eq!(
            annotate(&mut kinds, &short, None).unwrap()["native_call"],
            true
        );
    }

    #[test]
    fn a_hold_the_samples_left_a_gap_in_is_judged_whole_in_each_slice() {
        // One native call from 0 to 47 ms, the sampler away from 32 to 40 ms (a loaded machine):
        // two slices, the watch so far sent at the gap and the whole watch at the end. A waiter
        // throughout.
        let mut kinds = HoldKinds::default();
        kinds.note_interval(5000);
        kinds.note_waiters(0, 1);
        let mut watch = still("match (a.py:3)");
        watch.span_ns = 30 * MS;
        kinds.note_frames(7, 31 * MS, watch.clone());
        let first = annotate(&mut kinds, &hold(0, 32), None).unwrap();
        assert_eq!(first["native_call"], true);
        // The slice after the gap lasted 7 ms: alone, a hold that let go within two intervals of
        // being asked. It is the same hold, asked 46 ms before.
        watch.span_ns = 46 * MS;
        kinds.note_frames(7, 46 * MS, watch);
        let second = annotate(&mut kinds, &hold(40, 47), None).unwrap();
        assert_eq!(second["native_call"], true);
        assert_eq!(second["call_site"]["line"], 3);
    }

    #[test]
    fn args_keep_the_traces_key_order() {
        // Written straight out, the keys come in the order the trace has always had (alphabetical),
        // so a trace stays byte for byte what an earlier build wrote.
        let stack: Frames = Arc::new(vec!["f (a.py:3)".to_string()]);
        let native = SliceArgs {
            kind: Some(HoldKind::NativeCall {
                call_site: Some(CallSite {
                    file: "a.py".into(),
                    function: "f".into(),
                    line: Some(3),
                    source: None,
                }),
                callee: Some("dumps".into()),
            }),
            stacks: Some(StackArgs {
                stack: stack.clone(),
                stack_changed: true,
                stacks: vec![StackCount {
                    samples: 2,
                    stack: stack.clone(),
                }],
            }),
        };
        assert_eq!(
            serde_json::to_string(&native).unwrap(),
            r#"{"call_site":{"file":"a.py","function":"f","line":3,"source":null},"callee":"dumps","native_call":true,"stack":["f (a.py:3)"],"stack_changed":true,"stacks":[{"samples":2,"stack":["f (a.py:3)"]}]}"#
        );
        let python = SliceArgs {
            kind: Some(HoldKind::Python),
            stacks: Some(StackArgs::one(stack)),
        };
        assert_eq!(
            serde_json::to_string(&python).unwrap(),
            r#"{"native_call":false,"stack":["f (a.py:3)"]}"#
        );
        let nothing = SliceArgs {
            kind: None,
            stacks: None,
        };
        assert!(nothing.is_empty());
    }

    #[test]
    fn frame_texts_give_function_file_and_line() {
        assert_eq!(call_site("f (a/b.py:12)"), Some(("f", "a/b.py", Some(12))));
        assert_eq!(
            call_site("<lambda> (x (1).py:3)"),
            Some(("<lambda>", "x (1).py", Some(3)))
        );
        assert_eq!(call_site("f (a.py)"), Some(("f", "a.py", None)));
        assert_eq!(call_site("C:weird (c:)"), Some(("C:weird", "c:", None)));
        assert_eq!(call_site("no place"), None);
    }
}
