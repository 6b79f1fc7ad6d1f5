//! Stretches in which the GIL holder sleeps in a syscall that is not one of the GIL's own waits: a
//! `read`, an `ioctl` on an accelerator, `clock_nanosleep`, a futex of another lock. Every other
//! thread that wants the GIL waits meanwhile for nothing: the classic C extension (or ctypes.PyDLL
//! call) that does not release the GIL around a blocking call. Pure: fed the sample's state.

use crate::process::kernel::{KernelState, SYS_FUTEX};

/// One finished stretch: the holder `tid` asleep in syscall `nr` from `start_ns` to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedStretch {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub nr: i64,
}

/// Per thread: the stretch being seen, if any.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeldWhileBlocked {
    open: Option<(u64, u64, i64)>,
}

/// The syscall a holder sleeps in, unless it is a futex wait on one of the GIL's own words (which
/// the classification reads as take/drop, never as a hold).
pub fn blocking_syscall(
    kernel: Option<KernelState>,
    is_gil_word: impl Fn(u64) -> bool,
) -> Option<i64> {
    match kernel? {
        KernelState::InSyscall { nr, arg0, .. } if nr == SYS_FUTEX && is_gil_word(arg0) => None,
        KernelState::InSyscall { nr, .. } => Some(nr),
        _ => None,
    }
}

impl HeldWhileBlocked {
    /// The thread's state at sample `t`: `blocked_in` is the syscall it sleeps in while holding the
    /// GIL, `None` when it does not hold it or is not asleep in one. A stretch runs from its first
    /// such sample to the first sample that differs (or that shows another syscall).
    pub fn observe(
        &mut self,
        tid: u32,
        t: u64,
        blocked_in: Option<i64>,
        emit: &mut dyn FnMut(BlockedStretch),
    ) {
        match (self.open, blocked_in) {
            (Some((start, _, nr)), Some(now)) if nr == now => self.open = Some((start, t, nr)),
            (open, now) => {
                if let Some((start_ns, _, nr)) = open {
                    emit(BlockedStretch {
                        tid,
                        start_ns,
                        end_ns: t,
                        nr,
                    });
                }
                self.open = now.map(|nr| (t, t, nr));
            }
        }
    }

    /// Ends an open stretch: at `at`, or at its last sample when the thread was not seen again.
    pub fn close(&mut self, tid: u32, at: Option<u64>, emit: &mut dyn FnMut(BlockedStretch)) {
        if let Some((start_ns, last, nr)) = self.open.take() {
            let end_ns = at.unwrap_or(last);
            if end_ns > start_ns {
                emit(BlockedStretch {
                    tid,
                    start_ns,
                    end_ns,
                    nr,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: i64 = libc::SYS_read;

    fn in_syscall(nr: i64, arg0: u64) -> Option<KernelState> {
        Some(KernelState::InSyscall { nr, arg0, arg1: 0 })
    }

    #[test]
    fn a_stretch_runs_from_its_first_sample_to_the_first_that_differs() {
        let mut tracker = HeldWhileBlocked::default();
        let mut out = Vec::new();
        let mut emit = |s| out.push(s);
        tracker.observe(7, 100, None, &mut emit);
        tracker.observe(7, 200, Some(READ), &mut emit);
        tracker.observe(7, 300, Some(READ), &mut emit);
        tracker.observe(7, 400, None, &mut emit);
        tracker.observe(7, 500, Some(READ), &mut emit);
        tracker.close(7, None, &mut emit);
        assert_eq!(
            out,
            vec![BlockedStretch {
                tid: 7,
                start_ns: 200,
                end_ns: 400,
                nr: READ
            }],
            "a one-sample stretch at the end has no length and is not shown"
        );
    }

    #[test]
    fn the_gils_own_futex_is_not_a_blocking_call() {
        let gil = |addr| addr == 0x1000;
        assert_eq!(blocking_syscall(in_syscall(SYS_FUTEX, 0x1000), gil), None);
        assert_eq!(
            blocking_syscall(in_syscall(SYS_FUTEX, 0x2000), gil),
            Some(SYS_FUTEX)
        );
        assert_eq!(blocking_syscall(in_syscall(READ, 3), gil), Some(READ));
        assert_eq!(blocking_syscall(Some(KernelState::Running), gil), None);
        assert_eq!(blocking_syscall(None, gil), None);
    }
}
