//! Classifying one thread at one sample from what memory and the kernel say.
//!
//! Memory tells who holds the GIL; the kernel tells who sleeps where. The rules, in order:
//! 1. No kernel reading → `Unknown`.
//! 2. The holder (`gil.locked` and `last_holder` is this thread) → `Hold`, unless it sleeps on the GIL's
//!    own mutex, which the holder only does inside `drop_gil` → `Drop`.
//! 3. Asleep in futex on the GIL's `cond` or `mutex` → `Take` (waiting in `take_gil`).
//! 4. Asleep in futex on `switch_cond` or `switch_mutex` → `Drop` (FORCE_SWITCHING hand-off in `drop_gil`).
//! 5. Asleep anywhere else (another futex, I/O, sleep) or stopped → `Released`.
//! 6. Running (on a CPU or runnable) and not the holder is ambiguous: a thread woken inside `take_gil`
//!    or `drop_gil` that has not run yet (on a busy machine it may sit on the run queue for
//!    milliseconds, and it is still inside that call), or a thread running native code without the GIL.
//!    Two pieces of evidence decide, and either one is enough to keep the previous `Take` or `Drop`:
//!    - the thread has used no CPU time since it was last seen asleep on the GIL (schedstat's run time
//!      only grows while a thread is on a CPU), so it cannot have left the call;
//!    - `switch_number`, which CPython increments on every change of holder: a thread leaves
//!      `take_gil` only by taking the GIL, so a previous `Take` stands if no hand-off happened since
//!      the previous sample, or exactly one that went to another thread (this thread is not
//!      `last_holder`); the FORCE_SWITCHING wait in `drop_gil` ends only on a hand-off, so a previous
//!      `Drop` stands if none happened.
//!
//!    Otherwise the thread is `Released`. Both outcomes are counted and reported in the summary and the
//!    trace metadata.

use crate::infer::intervals::GilState;
use crate::process::kernel::KernelState;
use crate::python::attach::GilWaitRanges;

/// What the sampler knows about one thread at one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadEvidence {
    /// `gil.locked` and `last_holder` is this thread.
    pub holds: bool,
    /// `last_holder` is this thread but the GIL is unlocked: it held the GIL last and let it go.
    pub released_last: bool,
    pub kernel: Option<KernelState>,
    /// The thread's state at its previous sample.
    pub previous: Option<GilState>,
    /// How far `switch_number` advanced since the previous sample (`None` for the first sample).
    pub handoffs_since_previous: Option<u64>,
    /// Whether the thread used CPU time since it was last seen asleep on the GIL (`None`: not known).
    pub ran_since_gil_sleep: Option<bool>,
}

/// Why a thread was given its state, for the ambiguity counters in the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Memory or the kernel said so directly.
    Direct,
    /// Running and judged still inside `take_gil` or `drop_gil` (rule 6).
    RunningStillWaiting,
    /// Running and judged to run without the GIL (rule 6).
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
        return (
            if on_mutex {
                GilState::Drop
            } else {
                GilState::Hold
            },
            Basis::Direct,
        );
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
    let not_run = evidence.ran_since_gil_sleep == Some(false);
    let handoffs = evidence.handoffs_since_previous;
    let one_elsewhere = handoffs == Some(1) && !evidence.released_last;
    match evidence.previous {
        Some(GilState::Take) if not_run || handoffs == Some(0) || one_elsewhere => {
            (GilState::Take, Basis::RunningStillWaiting)
        }
        Some(GilState::Drop) if not_run || handoffs == Some(0) => {
            (GilState::Drop, Basis::RunningStillWaiting)
        }
        _ => (GilState::Released, Basis::RunningReleased),
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
            ran_since_gil_sleep: None,
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
        assert_eq!(
            classify(
                &evidence(Some(KernelState::InSyscall {
                    nr: 0,
                    arg0: 0,
                    arg1: 0
                })),
                &GIL
            )
            .0,
            GilState::Released
        );
        assert_eq!(
            classify(&evidence(Some(KernelState::Blocked)), &GIL).0,
            GilState::Released
        );
    }

    #[test]
    fn no_kernel_reading_is_unknown() {
        assert_eq!(classify(&evidence(None), &GIL).0, GilState::Unknown);
    }

    fn running(previous: GilState, handoffs: u64, released_last: bool) -> ThreadEvidence {
        ThreadEvidence {
            previous: Some(previous),
            handoffs_since_previous: Some(handoffs),
            ran_since_gil_sleep: Some(true),
            released_last,
            ..evidence(Some(KernelState::Running))
        }
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
    fn waiter_that_took_and_dropped_the_gil_meanwhile_is_released() {
        assert_eq!(
            classify(&running(GilState::Take, 1, true), &GIL),
            (GilState::Released, Basis::RunningReleased)
        );
    }

    #[test]
    fn several_handoffs_since_make_a_running_waiter_released() {
        assert_eq!(
            classify(&running(GilState::Take, 2, false), &GIL).0,
            GilState::Released
        );
    }

    #[test]
    fn woken_dropper_stays_dropping_until_a_handoff() {
        assert_eq!(
            classify(&running(GilState::Drop, 0, true), &GIL).0,
            GilState::Drop
        );
        assert_eq!(
            classify(&running(GilState::Drop, 1, true), &GIL).0,
            GilState::Released
        );
    }

    #[test]
    fn a_woken_thread_that_has_not_run_stays_in_its_gil_call() {
        for previous in [GilState::Take, GilState::Drop] {
            let e = ThreadEvidence {
                ran_since_gil_sleep: Some(false),
                ..running(previous, 3, true)
            };
            assert_eq!(classify(&e, &GIL), (previous, Basis::RunningStillWaiting));
        }
    }

    #[test]
    fn first_sample_of_a_running_thread_is_released() {
        let e = ThreadEvidence {
            previous: Some(GilState::Take),
            ..evidence(Some(KernelState::Running))
        };
        assert_eq!(classify(&e, &GIL).0, GilState::Released);
    }

    #[test]
    fn running_thread_not_waiting_before_is_released() {
        assert_eq!(
            classify(&running(GilState::Hold, 0, false), &GIL).0,
            GilState::Released
        );
        assert_eq!(
            classify(&running(GilState::Released, 0, false), &GIL).0,
            GilState::Released
        );
    }
}
