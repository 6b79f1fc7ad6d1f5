//! Classifying one thread at one sample from what memory and the kernel say, and settling the
//! stretches a single sample cannot decide.
//!
//! Memory tells who holds the GIL; the kernel tells who sleeps where. The rules, in order:
//! 1. No kernel reading → `Unknown`.
//! 2. The holder (`gil.locked` and `last_holder` is this thread) → `Hold`, unless it sleeps on the GIL's
//!    own mutex, which the holder only does inside `drop_gil` → `Drop`.
//! 3. Asleep in futex on the GIL's `cond` or `mutex` → `Take` (waiting in `take_gil`).
//! 4. Asleep in futex on `switch_cond` or `switch_mutex` → `Drop` (FORCE_SWITCHING hand-off in `drop_gil`).
//! 5. Asleep anywhere else (another futex, I/O, sleep) or stopped → `Released`.
//! 6. Running (on a CPU or runnable) and not the holder. CPython increments `switch_number` on every
//!    change of holder, and a thread leaves `take_gil` only by taking the GIL, so a thread last seen
//!    `Take` is still `Take` if no hand-off happened since, or exactly one that went to another thread
//!    (it is not `last_holder`); the FORCE_SWITCHING wait in `drop_gil` ends only on a hand-off, so a
//!    thread last seen `Drop` is still `Drop` if none happened.
//! 7. Other running threads that were last seen in a GIL state (`Take`, `Hold`, `Drop`) are
//!    *ambiguous*: a thread woken inside `take_gil`/`drop_gil` that waits for a CPU (on a busy machine,
//!    for milliseconds) looks exactly like a thread running native code without the GIL. The sampler
//!    holds such a stretch back and `settle_stretch` decides it once the thread is seen in a definite
//!    state again, from the time the kernel says it spent waiting on a run queue meanwhile
//!    (schedstat's `run_delay`, updated when the thread gets a CPU).
//! 8. Any other running thread → `Released`.

use crate::infer::intervals::GilState;
use crate::process::kernel::{KernelState, SchedStat};
use crate::python::attach::GilWaitRanges;

/// What the sampler knows about one thread at one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadEvidence {
    /// `gil.locked` and `last_holder` is this thread.
    pub holds: bool,
    /// `last_holder` is this thread but the GIL is unlocked: it held the GIL last and let it go.
    pub released_last: bool,
    pub kernel: Option<KernelState>,
    /// The thread's last definite state.
    pub previous: Option<GilState>,
    /// How far `switch_number` advanced since that definite sample (`None`: no such sample).
    pub handoffs_since_previous: Option<u64>,
}

/// How sure a classification is; the sampler counts each kind for the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Memory or the kernel said so directly (rules 1–5).
    Direct,
    /// Running, and `switch_number` proves it is still inside `take_gil`/`drop_gil` (rule 6).
    RunningStillWaiting,
    /// Running after a GIL state: decided later by `settle_stretch` (rule 7).
    Ambiguous,
    /// Running, and not in a GIL state before (rule 8).
    RunningReleased,
}

fn inside(addr: u64, ranges: &[Option<(u64, u64)>]) -> bool {
    ranges
        .iter()
        .flatten()
        .any(|&(start, end)| addr >= start && addr < end)
}

pub fn classify(evidence: &ThreadEvidence, gil: &GilWaitRanges) -> (GilState, Basis) {
    let Some(kernel) = evidence.kernel else {
        return (GilState::Unknown, Basis::Direct);
    };
    let futex = kernel.futex_addr();
    if evidence.holds {
        let on_mutex = futex.is_some_and(|a| inside(a, &gil.take[1..]));
        let state = if on_mutex {
            GilState::Drop
        } else {
            GilState::Hold
        };
        return (state, Basis::Direct);
    }
    if let Some(addr) = futex {
        if inside(addr, &gil.take) {
            return (GilState::Take, Basis::Direct);
        }
        if inside(addr, &gil.drop) {
            return (GilState::Drop, Basis::Direct);
        }
    }
    if kernel != KernelState::Running {
        return (GilState::Released, Basis::Direct);
    }
    let handoffs = evidence.handoffs_since_previous;
    let one_elsewhere = handoffs == Some(1) && !evidence.released_last;
    match evidence.previous {
        Some(GilState::Take) if handoffs == Some(0) || one_elsewhere => {
            (GilState::Take, Basis::RunningStillWaiting)
        }
        Some(GilState::Drop) if handoffs == Some(0) => (GilState::Drop, Basis::RunningStillWaiting),
        Some(GilState::Take | GilState::Hold | GilState::Drop) => {
            (GilState::Released, Basis::Ambiguous)
        }
        _ => (GilState::Released, Basis::RunningReleased),
    }
}

/// Asleep in a syscall other than a wait on the GIL (rule 5): such a thread cannot start waiting for
/// the GIL, or take it, without first waking up and running.
pub fn asleep_elsewhere(kernel: &KernelState, gil: &GilWaitRanges) -> bool {
    match kernel {
        KernelState::InSyscall { .. } => !kernel
            .futex_addr()
            .is_some_and(|a| inside(a, &gil.take) || inside(a, &gil.drop)),
        _ => false,
    }
}

/// Decides an ambiguous stretch (rule 7) of `length_ns`, which followed definite state `before`, from
/// what the kernel says the thread did meanwhile (`None` when schedstat is unavailable). A thread that
/// spent most of the stretch waiting on a run queue and barely ran cannot have left the GIL call it was
/// in: `Take` after `Take`, and after `Hold` or `Drop` the `drop_gil` whose hand-off woke it. A thread
/// that ran (native code, which competes for CPUs like anything else) was without the GIL.
pub fn settle_stretch(before: GilState, length_ns: u64, spent: Option<SchedStat>) -> GilState {
    let waited_for_cpu = spent.is_some_and(|s| {
        s.run_queue_ns.saturating_mul(2) >= length_ns && s.cpu_ns.saturating_mul(4) < length_ns
    });
    match before {
        GilState::Take if waited_for_cpu => GilState::Take,
        GilState::Hold | GilState::Drop if waited_for_cpu => GilState::Drop,
        _ => GilState::Released,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::kernel::SYS_FUTEX;

    const GIL: GilWaitRanges = GilWaitRanges {
        take: [Some((1032, 1080)), Some((1080, 1120))],
        drop: [Some((1120, 1168)), Some((1168, 1208))],
    };

    fn futex(addr: u64) -> Option<KernelState> {
        Some(KernelState::InSyscall {
            nr: SYS_FUTEX,
            arg0: addr,
            arg1: 0x189,
        })
    }

    fn evidence(kernel: Option<KernelState>) -> ThreadEvidence {
        ThreadEvidence {
            holds: false,
            released_last: false,
            kernel,
            previous: None,
            handoffs_since_previous: None,
        }
    }

    fn running(previous: GilState, handoffs: u64, released_last: bool) -> ThreadEvidence {
        ThreadEvidence {
            previous: Some(previous),
            handoffs_since_previous: Some(handoffs),
            released_last,
            ..evidence(Some(KernelState::Running))
        }
    }

    #[test]
    fn holder_holds_even_when_blocked_elsewhere() {
        let e = ThreadEvidence {
            holds: true,
            ..evidence(Some(KernelState::InSyscall {
                nr: 0,
                arg0: 3,
                arg1: 0,
            }))
        };
        assert_eq!(classify(&e, &GIL).0, GilState::Hold);
    }

    #[test]
    fn holder_on_the_gil_mutex_is_dropping() {
        let e = ThreadEvidence {
            holds: true,
            ..evidence(futex(1080))
        };
        assert_eq!(classify(&e, &GIL).0, GilState::Drop);
    }

    #[test]
    fn sleeper_on_cond_or_mutex_is_taking() {
        assert_eq!(
            classify(&evidence(futex(1032 + 40)), &GIL).0,
            GilState::Take
        );
        assert_eq!(classify(&evidence(futex(1080)), &GIL).0, GilState::Take);
    }

    #[test]
    fn sleeper_on_switch_cond_is_dropping() {
        assert_eq!(
            classify(&evidence(futex(1120 + 40)), &GIL).0,
            GilState::Drop
        );
    }

    #[test]
    fn sleeper_on_another_futex_or_syscall_is_released() {
        assert_eq!(classify(&evidence(futex(5000)), &GIL).0, GilState::Released);
        let read = Some(KernelState::InSyscall {
            nr: 0,
            arg0: 0,
            arg1: 0,
        });
        assert_eq!(classify(&evidence(read), &GIL).0, GilState::Released);
        assert_eq!(
            classify(&evidence(Some(KernelState::Blocked)), &GIL).0,
            GilState::Released
        );
    }

    #[test]
    fn no_kernel_reading_is_unknown() {
        assert_eq!(classify(&evidence(None), &GIL).0, GilState::Unknown);
    }

    #[test]
    fn woken_waiter_with_no_handoff_since_is_still_taking() {
        assert_eq!(
            classify(&running(GilState::Take, 0, false), &GIL),
            (GilState::Take, Basis::RunningStillWaiting)
        );
    }

    #[test]
    fn woken_waiter_is_still_taking_when_the_one_handoff_went_elsewhere() {
        assert_eq!(
            classify(&running(GilState::Take, 1, false), &GIL).0,
            GilState::Take
        );
    }

    #[test]
    fn waiter_that_may_have_taken_and_dropped_is_ambiguous() {
        assert_eq!(
            classify(&running(GilState::Take, 1, true), &GIL).1,
            Basis::Ambiguous
        );
        assert_eq!(
            classify(&running(GilState::Take, 2, false), &GIL).1,
            Basis::Ambiguous
        );
    }

    #[test]
    fn woken_dropper_stays_dropping_until_a_handoff() {
        assert_eq!(
            classify(&running(GilState::Drop, 0, true), &GIL).0,
            GilState::Drop
        );
        assert_eq!(
            classify(&running(GilState::Drop, 1, true), &GIL).1,
            Basis::Ambiguous
        );
    }

    #[test]
    fn former_holder_running_without_the_gil_is_ambiguous() {
        assert_eq!(
            classify(&running(GilState::Hold, 1, false), &GIL).1,
            Basis::Ambiguous
        );
    }

    #[test]
    fn running_thread_not_in_a_gil_state_before_is_released() {
        assert_eq!(
            classify(&running(GilState::Released, 0, false), &GIL),
            (GilState::Released, Basis::RunningReleased)
        );
        assert_eq!(
            classify(&evidence(Some(KernelState::Running)), &GIL).1,
            Basis::RunningReleased
        );
    }

    fn spent(cpu_us: u64, run_queue_us: u64) -> Option<SchedStat> {
        Some(SchedStat {
            cpu_ns: cpu_us * 1000,
            run_queue_ns: run_queue_us * 1000,
        })
    }

    #[test]
    fn a_stretch_spent_waiting_for_a_cpu_stays_in_the_gil_call() {
        assert_eq!(
            settle_stretch(GilState::Take, 3_000_000, spent(10, 2900)),
            GilState::Take
        );
        assert_eq!(
            settle_stretch(GilState::Hold, 3_000_000, spent(10, 2000)),
            GilState::Drop
        );
        assert_eq!(
            settle_stretch(GilState::Drop, 3_000_000, spent(0, 1500)),
            GilState::Drop
        );
    }

    #[test]
    fn a_stretch_spent_running_is_released() {
        assert_eq!(
            settle_stretch(GilState::Hold, 30_000_000, spent(29_000, 100)),
            GilState::Released
        );
        assert_eq!(
            settle_stretch(GilState::Take, 3_000_000, spent(3000, 0)),
            GilState::Released
        );
    }

    #[test]
    fn a_stretch_that_both_waited_and_ran_is_released() {
        // Native work on a busy machine: preempted for most of the stretch, but it did run.
        assert_eq!(
            settle_stretch(GilState::Hold, 3_000_000, spent(1000, 2000)),
            GilState::Released
        );
    }

    #[test]
    fn without_schedstat_a_stretch_is_released() {
        assert_eq!(
            settle_stretch(GilState::Hold, 3_000_000, None),
            GilState::Released
        );
    }
}
