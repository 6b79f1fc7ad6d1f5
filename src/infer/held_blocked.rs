//! Stretches in which the GIL holder sleeps in a syscall that is not one of the GIL's own waits: a
//! `read`, an `ioctl` on an accelerator, `clock_nanosleep`, a futex of another lock. Every other
//! thread that wants the GIL waits meanwhile for nothing: the classic C extension (or ctypes.PyDLL
//! call) that does not release the GIL around a blocking call. Pure: fed the sample's state.
//!
//! A stretch seen at one sample only is not reported. The sampler reads the GIL's words before the
//! threads' kernel states, so a holder that lets the GIL go and then sleeps in a syscall between the
//! two reads (`time.sleep` does exactly that) is, at that one sample, indistinguishable from a
//! holder asleep with the GIL; at the next sample it no longer holds. A real stretch that short is
//! below the sampling period's resolution anyway.

use crate::infer::intervals::TimelineParams;
use crate::process::kernel::{KernelState, SYS_FUTEX};

/// One finished stretch: the holder `tid` asleep in syscall `nr` from `start_ns` to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedStretch {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub nr: i64,
}

/// A stretch is reported from this many samples on (module docs).
pub const MIN_SAMPLES: u32 = 2;

/// Per thread: the stretch being seen, if any, and the thread's previous sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeldWhileBlocked {
    open: Option<Open>,
    last_sample_ns: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Open {
    start_ns: u64,
    last_ns: u64,
    nr: i64,
    samples: u32,
}

impl Open {
    /// The stretch as reported, ending toward `next` (the following sample, if any): `None` when
    /// it was seen too few times to be told from the read-order artifact (module docs).
    fn finish(
        self,
        tid: u32,
        next: Option<u64>,
        params: &TimelineParams,
    ) -> Option<BlockedStretch> {
        (self.samples >= MIN_SAMPLES).then(|| BlockedStretch {
            tid,
            start_ns: self.start_ns,
            end_ns: self.last_ns + toward(self.last_ns, next, params),
            nr: self.nr,
        })
    }
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

/// Half the way from `a` to `b`, but at most half a period: the timeline puts a state change at
/// the midpoint of two samples and ends an interval half a period after its last sample across a
/// gap, so a stretch bounded this way always lies inside the `hold_gil` slice that holds it
/// (viewers drop a slice that sticks out of its parent).
fn toward(a: u64, b: Option<u64>, params: &TimelineParams) -> u64 {
    let half = params.period_ns / 2;
    b.map_or(half, |b| (a.abs_diff(b) / 2).min(half))
}

impl HeldWhileBlocked {
    /// The thread's state at sample `t`: `blocked_in` is the syscall it sleeps in while holding the
    /// GIL, `None` when it does not hold it or is not asleep in one.
    pub fn observe(
        &mut self,
        tid: u32,
        t: u64,
        blocked_in: Option<i64>,
        params: &TimelineParams,
        emit: &mut dyn FnMut(BlockedStretch),
    ) {
        // Across a gap the timeline splits the hold into two slices: the stretch splits with it.
        let gap = self
            .last_sample_ns
            .is_some_and(|last| t.saturating_sub(last) > params.max_gap_ns);
        match (self.open.as_mut(), blocked_in) {
            (Some(open), Some(now)) if open.nr == now && !gap => {
                open.last_ns = t;
                open.samples += 1;
            }
            (_, now) => {
                if let Some(stretch) = self
                    .open
                    .take()
                    .and_then(|open| open.finish(tid, Some(t).filter(|_| !gap), params))
                {
                    emit(stretch);
                }
                let previous = self.last_sample_ns.filter(|_| !gap);
                self.open = now.map(|nr| Open {
                    start_ns: t - toward(t, previous, params).min(t),
                    last_ns: t,
                    nr,
                    samples: 1,
                });
            }
        }
        self.last_sample_ns = Some(t);
    }

    /// Ends an open stretch: the thread was gone at `at`, or the recording ended (`None`).
    pub fn close(
        &mut self,
        tid: u32,
        at: Option<u64>,
        params: &TimelineParams,
        emit: &mut dyn FnMut(BlockedStretch),
    ) {
        if let Some(stretch) = self
            .open
            .take()
            .and_then(|open| open.finish(tid, at, params))
        {
            emit(stretch);
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
    fn a_stretch_has_the_timelines_boundaries() {
        let params = TimelineParams::for_period(100);
        let mut tracker = HeldWhileBlocked::default();
        let mut out = Vec::new();
        let mut emit = |s| out.push(s);
        tracker.observe(7, 100, None, &params, &mut emit);
        tracker.observe(7, 200, Some(READ), &params, &mut emit);
        tracker.observe(7, 300, Some(READ), &params, &mut emit);
        tracker.observe(7, 400, None, &params, &mut emit);
        // After a gap the stretch starts half a period before its sample, not halfway.
        tracker.observe(7, 1000, Some(READ), &params, &mut emit);
        tracker.observe(7, 1100, Some(READ), &params, &mut emit);
        // A gap (the sampler fell behind) splits it, as it splits the hold.
        tracker.observe(7, 2000, Some(READ), &params, &mut emit);
        tracker.observe(7, 2100, Some(READ), &params, &mut emit);
        tracker.close(7, None, &params, &mut emit);
        let spans: Vec<(u64, u64)> = out.iter().map(|s| (s.start_ns, s.end_ns)).collect();
        assert_eq!(spans, vec![(150, 350), (950, 1150), (1950, 2150)]);
        assert!(out.iter().all(|s| s.tid == 7 && s.nr == READ));
    }

    #[test]
    fn a_stretch_seen_at_one_sample_is_not_reported() {
        let params = TimelineParams::for_period(100);
        let mut tracker = HeldWhileBlocked::default();
        let mut out = Vec::new();
        let mut emit = |s| out.push(s);
        // Holding at the GIL's read, asleep by the kernel's read: it let go in between.
        tracker.observe(7, 100, Some(READ), &params, &mut emit);
        tracker.observe(7, 200, None, &params, &mut emit);
        // Another syscall at the next sample is a new stretch, seen once too.
        tracker.observe(7, 300, Some(READ), &params, &mut emit);
        tracker.observe(7, 400, Some(libc::SYS_ioctl), &params, &mut emit);
        tracker.close(7, None, &params, &mut emit);
        assert!(out.is_empty(), "{out:?}");
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
