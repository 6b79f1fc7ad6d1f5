//! Whether one hold of the GIL ran Python code or was one native call (docs/classification.md,
//! "Holds: Python code or one native call"). Pure: the evidence comes from the holder's innermost
//! frame as the sampler watched it during the hold (sampler/stack_watch.rs), the waiters seen
//! meanwhile and the switch interval read from the target's `_PyRuntime`.
//!
//! Python code is asked to let the GIL go once a waiter has waited one switch interval, and it does
//! so at its next instruction boundary. A call into native code reaches no such boundary until it
//! returns: its frame stays at the one instruction (the call, or one huge bytecode) however long it
//! keeps the GIL, and waiters' requests go unanswered.

use serde::{Deserialize, Serialize};

/// CPython's default switch interval (`sys.getswitchinterval()`), for traces that do not record one.
pub const DEFAULT_SWITCH_INTERVAL_US: u64 = 5000;

/// Reads of the innermost frame a hold needs (the one when it began and two checks) before "it did
/// not move" means anything: two reads of a busy Python loop can land on the same instruction.
pub const MIN_FRAME_READS: u32 = 3;

/// Without the holder's frame, a hold is one native call only when another thread waited this many
/// switch intervals inside it, and at least `WAITED_NS_WITHOUT_FRAMES`: a Python holder that lost its
/// CPU right after a request answers it late too, by the scheduler's delay, whatever the interval
/// (up to 24 ms in the golden `many` stream, 34 threads on 2 CPUs; 6 ms at a 0.5 ms interval in
/// `fastswitch`).
pub const WAITED_INTERVALS_WITHOUT_FRAMES: u64 = 10;
/// The least nanoseconds another thread must have waited inside a hold without the holder's frame
/// for it to count as one native call (with `WAITED_INTERVALS_WITHOUT_FRAMES`).
pub const WAITED_NS_WITHOUT_FRAMES: u64 = 50_000_000;

/// What the sampler saw of the holder's innermost frame during one hold (or one part of it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameWatch {
    /// Reads of the innermost frame: when the hold began, then every `CHECK_EVERY` samples.
    pub reads: u32,
    /// Reads that found the frame, code object and instruction the read before found while the
    /// holder ran (or slept in a syscall) in between: a native call (or one long bytecode) keeps
    /// its instruction for as long as it runs; Python code moves on.
    pub still_reads: u32,
    /// Reads that found the instruction of the read before while the holder neither ran nor slept
    /// (it waited for a CPU, or the kernel had not counted its CPU time yet): they say nothing.
    pub idle_reads: u32,
    /// From the first read to the last.
    pub span_ns: u64,
    /// The innermost frame, `function (file:line)`, at the instruction that stood still longest:
    /// the call site.
    pub innermost: Option<String>,
    /// The function the instruction calls, where the interpreter keeps it readable.
    pub callee: Option<String>,
}

impl FrameWatch {
    /// A hold watched in parts (its innermost frame changed: Python code that then called into
    /// native code, or a loop calling one native function again and again while no request
    /// reached it): the reads add up, and the part that stood still most names the call.
    pub fn dominant(parts: Vec<FrameWatch>) -> Option<FrameWatch> {
        let sum = |f: fn(&FrameWatch) -> u32| parts.iter().map(f).sum::<u32>();
        let (reads, still_reads, idle_reads) = (
            sum(|p| p.reads),
            sum(|p| p.still_reads),
            sum(|p| p.idle_reads),
        );
        let span_ns = parts.iter().map(|p| p.span_ns).sum();
        let most = parts.into_iter().max_by_key(|p| p.still_reads)?;
        Some(FrameWatch {
            reads,
            still_reads,
            idle_reads,
            span_ns,
            ..most
        })
    }

    /// Reads that found another instruction than the read before (or another frame).
    pub fn moved_reads(&self) -> u32 {
        (self.reads - 1).saturating_sub(self.still_reads + self.idle_reads)
    }

    /// Of the reads that say something, half or more found the instruction of the read before (and
    /// at least two did: one pair of reads at one instruction of a busy loop is not rare).
    pub fn stood_still(&self) -> bool {
        self.still_reads >= MIN_FRAME_READS - 1 && self.still_reads >= self.moved_reads()
    }
}

/// Everything one hold's kind is judged from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldEvidence {
    /// The longest time inside the hold, up to its end, during which another thread waited for the
    /// GIL (a waiter stays in `take_gil` until it gets the GIL, so that is since the first of them
    /// came).
    pub waited_ns: u64,
    /// The target's switch interval during the hold, nanoseconds.
    pub interval_ns: u64,
    /// `None` where stacks were not read (`--no-stacks`, other traces) or the hold was too short to
    /// be watched.
    pub frames: Option<FrameWatch>,
    /// The sampling period, nanoseconds; 0 where not known (other traces).
    pub period_ns: u64,
}

/// The hold's kind: `true` for one native call, `false` for Python code (or not to be told).
pub fn is_native_call(e: &HoldEvidence) -> bool {
    let interval = e.interval_ns.max(1);
    // Samples further apart than the interval miss the hand-offs Python code makes at every
    // interval: each hold seen spans several, and waits look unanswered (at 10 Hz every spinner's
    // hold was judged one native call). Nothing tells the kinds apart there.
    if e.period_ns > interval {
        return false;
    }
    // A waiter asked after one interval; a hold that ended within the next one let go when asked.
    let let_go_when_asked = e.waited_ns >= interval && e.waited_ns < 2 * interval;
    // Frames say something where enough pairs of reads found the holder running (or asleep).
    let telling = |f: &&FrameWatch| f.still_reads + f.moved_reads() >= MIN_FRAME_READS - 1;
    match e.frames.as_ref().filter(telling) {
        // It moved between instructions: it ran bytecode, which answers requests.
        Some(f) if !f.stood_still() => false,
        // At one instruction, running or blocked: one native call, unless it let go when asked (a
        // loop of short native calls at one instruction, checked between them).
        Some(_) => !let_go_when_asked,
        // No frames, or they hardly saw it run.
        None => {
            e.waited_ns
                >= (WAITED_INTERVALS_WITHOUT_FRAMES * interval).max(WAITED_NS_WITHOUT_FRAMES)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn still(reads: u32) -> Option<FrameWatch> {
        Some(FrameWatch {
            reads,
            still_reads: reads - 1,
            idle_reads: 0,
            span_ns: 100 * MS,
            innermost: None,
            callee: None,
        })
    }

    fn moved(reads: u32) -> FrameWatch {
        FrameWatch {
            still_reads: 0,
            ..still(reads).unwrap()
        }
    }

    fn hold(waited_ms: u64, frames: Option<FrameWatch>) -> HoldEvidence {
        HoldEvidence {
            waited_ns: waited_ms * MS,
            interval_ns: 5 * MS,
            frames,
            period_ns: 100_000,
        }
    }

    #[test]
    fn samples_further_apart_than_the_interval_judge_no_hold_native() {
        let at_10_hz = |e: HoldEvidence| HoldEvidence {
            period_ns: 100 * MS,
            ..e
        };
        assert!(!is_native_call(&at_10_hz(hold(300, None))));
        assert!(!is_native_call(&at_10_hz(hold(300, still(30)))));
        // At 200 Hz a sample every interval: judged as at 10 kHz.
        let at_200_hz = HoldEvidence {
            period_ns: 5 * MS,
            ..hold(300, None)
        };
        assert!(is_native_call(&at_200_hz));
    }

    #[test]
    fn a_frame_that_stood_at_one_instruction_is_one_native_call_with_or_without_waiters() {
        assert!(is_native_call(&hold(0, still(3))));
        assert!(is_native_call(&hold(100, still(100))));
        // Asked and kept it for another interval or more.
        assert!(is_native_call(&hold(10, still(10))));
    }

    #[test]
    fn a_frame_that_moved_is_python_code_however_long_others_waited() {
        assert!(!is_native_call(&hold(200, Some(moved(50)))));
        // Less than half the reads at the instruction of the read before.
        let mostly_moving = FrameWatch {
            still_reads: 24,
            ..moved(50)
        };
        assert!(!is_native_call(&hold(200, Some(mostly_moving.clone()))));
        assert!(is_native_call(&hold(
            200,
            Some(FrameWatch {
                still_reads: 25,
                ..mostly_moving
            })
        )));
    }

    #[test]
    fn a_hold_watched_in_parts_adds_them_up_and_is_named_by_the_stillest() {
        let call = FrameWatch {
            innermost: Some("iterencode (encoder.py:258)".into()),
            ..still(40).unwrap()
        };
        // Python code for a moment, then one native call for most of the hold.
        let parts = vec![moved(3), call.clone()];
        let hold_of = FrameWatch::dominant(parts).unwrap();
        assert_eq!((hold_of.reads, hold_of.still_reads), (43, 39));
        assert_eq!(hold_of.innermost, call.innermost);
        assert!(hold_of.stood_still());
        // The call three times over with Python between (a loop no request reached).
        let again =
            FrameWatch::dominant(vec![call.clone(), moved(2), call.clone(), moved(2), call]);
        assert!(again.unwrap().stood_still());
        // Mostly moving about.
        let about = FrameWatch::dominant(vec![moved(30), moved(30), still(20).unwrap()]);
        assert!(!about.unwrap().stood_still());
        assert_eq!(FrameWatch::dominant(Vec::new()), None);
    }

    #[test]
    fn a_holder_that_let_go_within_an_interval_of_being_asked_ran_python_code() {
        assert!(!is_native_call(&hold(5, still(6))));
        assert!(!is_native_call(&hold(9, still(9))));
    }

    #[test]
    fn reads_while_the_holder_waited_for_a_cpu_say_nothing() {
        // A Python holder preempted for its whole hold: its frame did not move, nor did it run.
        let queued = FrameWatch {
            still_reads: 0,
            idle_reads: 99,
            ..still(100).unwrap()
        };
        assert!(!is_native_call(&hold(49, Some(queued.clone()))));
        // Then only the waiters say (a tickless CPU counts no CPU time while a thread runs).
        assert!(is_native_call(&hold(50, Some(queued.clone()))));
        // It ran between two pairs of them and stood still there: that is all that counts.
        let ran = FrameWatch {
            still_reads: 2,
            idle_reads: 97,
            ..queued
        };
        assert!(is_native_call(&hold(100, Some(ran))));
    }

    #[test]
    fn too_few_reads_leave_it_to_the_waiters() {
        let once_still = FrameWatch {
            still_reads: 1,
            ..still(3).unwrap()
        };
        assert!(!is_native_call(&hold(0, Some(once_still))));
        assert!(!is_native_call(&hold(0, still(2))));
        assert!(!is_native_call(&hold(49, still(2))));
        assert!(is_native_call(&hold(50, still(2))));
        assert!(is_native_call(&hold(50, None)));
        assert!(!is_native_call(&hold(49, None)));
        // A short interval does not lower the bar below the scheduler's delays.
        let fast = |waited_ms| HoldEvidence {
            interval_ns: MS / 2,
            ..hold(waited_ms, None)
        };
        assert!(!is_native_call(&fast(49)));
        assert!(is_native_call(&fast(50)));
        // An interval of 0 (setswitchinterval below a microsecond) in a trace without a period.
        let zero = HoldEvidence {
            interval_ns: 0,
            period_ns: 0,
            ..hold(50, None)
        };
        assert!(is_native_call(&zero));
        // Sampled at any rate, it hands over between every two samples: nothing is told.
        assert!(!is_native_call(&HoldEvidence {
            period_ns: 100_000,
            ..zero
        }));
    }
}
