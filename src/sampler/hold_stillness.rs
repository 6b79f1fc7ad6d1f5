//! Whether a holder stood still in one frame: the stack watch's reads of its innermost frame over a
//! hold, judged against the holder's CPU time (infer/native_call.rs decides the hold's kind from
//! what this finds).

use crate::infer::native_call::FrameWatch;
use crate::infer::sample::ThreadSample;
use crate::observed::KernelState;
use crate::python::stacks::{FrameId, WatchedFrame};

/// The innermost frame's reads over one hold (while it stays in one frame), in runs of reads at one
/// instruction. A pair of reads at one instruction counts as standing still only where the holder
/// ran in between (its schedstat CPU time grew) or slept in a syscall: a holder waiting for a CPU
/// stands still at whatever it was running. The kernel adds a running thread's CPU time at its
/// ticks and when it leaves the CPU, so a Python holder preempted right after a read shows growth
/// in the first pair of its run without running then: the first pair of a run counts for neither.
/// The sampler reads the holder's schedstat at every sample anyway.
pub(super) struct Stillness {
    pub(super) last: Option<WatchedFrame>,
    last_cpu_ns: Option<u64>,
    reads: u32,
    /// Pairs of reads at one instruction while the holder ran or slept, and while it did neither.
    still_reads: u32,
    idle_reads: u32,
    /// The pairs so far of the run of reads at `last`, and of those the ones that stood still.
    run: (u32, u32),
    /// The run with the most pairs that stood still, and where.
    longest: (u32, Option<WatchedFrame>),
    first_ns: u64,
    last_ns: u64,
}

/// What one read of the holder found besides its frame: its CPU time so far, and whether it slept
/// in a syscall (not running: a native call that blocks, held while blocked).
#[derive(Clone, Copy)]
pub(super) struct Holder {
    cpu_ns: Option<u64>,
    asleep: bool,
}

impl Holder {
    pub(super) fn of(seen: &ThreadSample) -> Holder {
        Holder {
            cpu_ns: seen.schedstat.map(|s| s.cpu_ns),
            asleep: matches!(seen.kernel, Some(KernelState::InSyscall { .. })),
        }
    }
}

impl Stillness {
    pub(super) fn new(first: Option<WatchedFrame>, t_ns: u64, holder: Holder) -> Stillness {
        Stillness {
            last: first,
            last_cpu_ns: holder.cpu_ns,
            reads: 1,
            still_reads: 0,
            idle_reads: 0,
            run: (0, 0),
            longest: (0, None),
            first_ns: t_ns,
            last_ns: t_ns,
        }
    }

    pub(super) fn read(&mut self, now: Option<WatchedFrame>, t_ns: u64, holder: Holder) {
        self.reads += 1;
        self.last_ns = t_ns;
        let ran = match (self.last_cpu_ns, holder.cpu_ns) {
            (Some(before), Some(after)) => after > before,
            // No schedstat: nothing says it did not run.
            _ => true,
        };
        self.last_cpu_ns = holder.cpu_ns;
        if now.is_none() || now != self.last {
            self.last = now;
            self.run = (0, 0);
            return;
        }
        self.run.0 += 1;
        if holder.asleep || (ran && self.run.0 > 1) {
            self.still_reads += 1;
            self.run.1 += 1;
            if self.run.1 > self.longest.0 {
                self.longest = (self.run.1, now);
            }
        } else {
            self.idle_reads += 1;
        }
    }

    /// What the reads found; `innermost` gives the frame's text at an instruction. A part of one read,
    /// or without a Python frame, says nothing and is not passed on.
    pub(super) fn watch(
        &self,
        innermost: impl FnOnce(FrameId) -> Option<String>,
    ) -> Option<FrameWatch> {
        if self.reads < 2 || self.last.is_none() && self.longest.1.is_none() {
            return None;
        }
        Some(FrameWatch {
            reads: self.reads,
            still_reads: self.still_reads,
            idle_reads: self.idle_reads,
            span_ns: self.last_ns.saturating_sub(self.first_ns),
            innermost: self.longest.1.and_then(|w| innermost(w.id)),
            callee: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at(instr: u64, slots: u64) -> Option<WatchedFrame> {
        let id = FrameId {
            frame: 0x1000,
            code: 0x2000,
            instr,
        };
        Some(WatchedFrame {
            id,
            slots_digest: Some(slots),
        })
    }

    fn holder(cpu_ms: u64, asleep: bool) -> Holder {
        Holder {
            cpu_ns: Some(cpu_ms * MS),
            asleep,
        }
    }

    /// Reads one per millisecond at `instrs`, with the holder's CPU time `cpu` (ms) at each.
    fn watched(reads: &[(Option<WatchedFrame>, Holder)]) -> FrameWatch {
        let mut still = Stillness::new(reads[0].0, 0, reads[0].1);
        for (i, &(now, h)) in reads.iter().enumerate().skip(1) {
            still.read(now, i as u64 * MS, h);
        }
        still
            .watch(|id| Some(format!("f (a.py:{})", id.instr)))
            .unwrap()
    }

    #[test]
    fn a_native_call_that_runs_stands_still_where_the_kernel_counted_its_cpu() {
        // CPU time counted at ticks: every fourth read sees it grow.
        let reads: Vec<_> = (0..20)
            .map(|i| (at(7, 1), holder(i / 4 * 4, false)))
            .collect();
        let w = watched(&reads);
        assert_eq!((w.reads, w.still_reads, w.idle_reads), (20, 4, 15));
        assert!(w.stood_still());
        assert_eq!(w.innermost.as_deref(), Some("f (a.py:7)"));
    }

    #[test]
    fn a_holder_preempted_after_a_read_does_not_stand_still() {
        // It ran up to the first read; the kernel counted that when it left the CPU, in the first
        // pair of the run; then nothing.
        let mut reads = vec![(at(7, 1), holder(0, false))];
        reads.extend((1..20).map(|_| (at(7, 1), holder(3, false))));
        let w = watched(&reads);
        assert_eq!((w.still_reads, w.idle_reads), (0, 19));
        assert!(!w.stood_still());
    }

    #[test]
    fn python_code_moves_its_instruction_or_its_locals() {
        let reads: Vec<_> = (0..20)
            .map(|i| (at(7 + i % 2, 1), holder(i, false)))
            .collect();
        assert_eq!(watched(&reads).moved_reads(), 19);
        // The same instruction (the last call stored it), other locals.
        let reads: Vec<_> = (0..20).map(|i| (at(7, i), holder(i, false))).collect();
        let w = watched(&reads);
        assert_eq!((w.still_reads, w.moved_reads()), (0, 19));
    }

    #[test]
    fn a_holder_asleep_in_a_syscall_stands_still() {
        let reads: Vec<_> = (0..10).map(|_| (at(7, 1), holder(0, true))).collect();
        let w = watched(&reads);
        assert_eq!(w.still_reads, 9);
    }

    #[test]
    fn one_read_or_no_python_frame_says_nothing() {
        let one = Stillness::new(at(7, 1), 0, holder(0, false));
        assert_eq!(one.watch(|_| None), None);
        let mut none = Stillness::new(None, 0, holder(0, false));
        none.read(None, MS, holder(1, false));
        assert_eq!(none.watch(|_| None), None);
    }
}
