//! Classifying one thread at one sample from what memory and the kernel say.
//!
//! Memory tells who holds the GIL; the kernel tells who sleeps where. The rules, in order:
//! 1. No kernel reading → `Unknown`.
//! 2. The holder (`gil.locked` and `last_holder` is this thread) → `Hold`, unless it sleeps on the GIL's
//!    own mutex, which the holder only does inside `drop_gil` → `Drop`.
//! 3. Asleep in futex on the GIL's `cond` or `mutex` → `Take` (waiting in `take_gil`).
//! 4. Asleep in futex on `switch_cond` or `switch_mutex` → `Drop` (FORCE_SWITCHING hand-off in `drop_gil`).
//! 5. Asleep anywhere else (another futex, I/O, sleep) or stopped → `Released`.
//! 6. Running (on a CPU or runnable) and not the holder is ambiguous: a waiter that was woken and has
//!    not yet taken the GIL, or a thread running native code without it. A thread that was waiting at
//!    its previous sample, has used less than half of the time since on a CPU (runnable, not running
//!    native work), and did not take and drop the GIL meanwhile (it is not `last_holder` of an unlocked
//!    GIL) is still `Take`. Everything else running is `Released`. Both cases are counted.

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
    /// CPU time used since the previous sample and the wall time elapsed, when both are known.
    pub cpu_ns: Option<u64>,
    pub elapsed_ns: u64,
}

/// Why a thread was given its state, for the ambiguity counters in the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Memory or the kernel said so directly.
    Direct,
    /// Running and judged still waiting for the GIL (rule 6).
    RunningStillWaiting,
    /// Running and judged to run without the GIL (rule 6).
    RunningReleased,
}

fn inside(addr: u64, ranges: &[Option<(u64, u64)>]) -> bool {
    ranges.iter().flatten().any(|&(start, end)| addr >= start && addr < end)
}

pub fn classify(evidence: &ThreadEvidence, gil: &GilWaitRanges) -> (GilState, Basis) {
    let Some(kernel) = evidence.kernel else { return (GilState::Unknown, Basis::Direct) };
    let futex = kernel.futex_addr();
    if evidence.holds {
        let on_mutex = futex.is_some_and(|a| inside(a, &gil.take[1..]));
        return (if on_mutex { GilState::Drop } else { GilState::Hold }, Basis::Direct);
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
    let was_waiting = evidence.previous == Some(GilState::Take);
    let mostly_off_cpu = evidence.cpu_ns.is_some_and(|cpu| cpu.saturating_mul(2) < evidence.elapsed_ns);
    if was_waiting && mostly_off_cpu && !evidence.released_last {
        (GilState::Take, Basis::RunningStillWaiting)
    } else {
        (GilState::Released, Basis::RunningReleased)
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
        Some(KernelState::InSyscall { nr: SYS_FUTEX, arg0: addr, arg1: 0x189 })
    }

    fn evidence(kernel: Option<KernelState>) -> ThreadEvidence {
        ThreadEvidence { holds: false, released_last: false, kernel, previous: None, cpu_ns: None, elapsed_ns: 100_000 }
    }

    #[test]
    fn holder_holds_even_when_blocked_elsewhere() {
        let e = ThreadEvidence { holds: true, ..evidence(Some(KernelState::InSyscall { nr: 0, arg0: 3, arg1: 0 })) };
        assert_eq!(classify(&e, &GIL).0, GilState::Hold);
    }

    #[test]
    fn holder_on_the_gil_mutex_is_dropping() {
        let e = ThreadEvidence { holds: true, ..evidence(futex(1080)) };
        assert_eq!(classify(&e, &GIL).0, GilState::Drop);
    }

    #[test]
    fn sleeper_on_cond_or_mutex_is_taking() {
        assert_eq!(classify(&evidence(futex(1032 + 40)), &GIL).0, GilState::Take);
        assert_eq!(classify(&evidence(futex(1080)), &GIL).0, GilState::Take);
    }

    #[test]
    fn sleeper_on_switch_cond_is_dropping() {
        assert_eq!(classify(&evidence(futex(1120 + 40)), &GIL).0, GilState::Drop);
    }

    #[test]
    fn sleeper_on_another_futex_or_syscall_is_released() {
        assert_eq!(classify(&evidence(futex(5000)), &GIL).0, GilState::Released);
        assert_eq!(classify(&evidence(Some(KernelState::InSyscall { nr: 0, arg0: 0, arg1: 0 })), &GIL).0, GilState::Released);
        assert_eq!(classify(&evidence(Some(KernelState::Blocked)), &GIL).0, GilState::Released);
    }

    #[test]
    fn no_kernel_reading_is_unknown() {
        assert_eq!(classify(&evidence(None), &GIL).0, GilState::Unknown);
    }

    #[test]
    fn woken_waiter_without_cpu_time_is_still_taking() {
        let e = ThreadEvidence { previous: Some(GilState::Take), cpu_ns: Some(1_000), ..evidence(Some(KernelState::Running)) };
        assert_eq!(classify(&e, &GIL), (GilState::Take, Basis::RunningStillWaiting));
    }

    #[test]
    fn running_thread_that_used_the_cpu_is_released() {
        let e = ThreadEvidence { previous: Some(GilState::Take), cpu_ns: Some(90_000), ..evidence(Some(KernelState::Running)) };
        assert_eq!(classify(&e, &GIL), (GilState::Released, Basis::RunningReleased));
    }

    #[test]
    fn running_thread_that_took_and_dropped_the_gil_meanwhile_is_released() {
        let e = ThreadEvidence {
            previous: Some(GilState::Take),
            cpu_ns: Some(1_000),
            released_last: true,
            ..evidence(Some(KernelState::Running))
        };
        assert_eq!(classify(&e, &GIL).0, GilState::Released);
    }

    #[test]
    fn running_thread_not_waiting_before_is_released() {
        let e = ThreadEvidence { previous: Some(GilState::Hold), cpu_ns: Some(0), ..evidence(Some(KernelState::Running)) };
        assert_eq!(classify(&e, &GIL).0, GilState::Released);
    }
}
