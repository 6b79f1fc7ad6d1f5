//! Stretches in which the GIL holder sleeps in a syscall that is not one of the GIL's own waits: a
//! `read`, an `ioctl` on an accelerator, `clock_nanosleep`, a futex of another lock. Every other
//! thread that wants the GIL waits meanwhile for nothing: the classic C extension (or ctypes.PyDLL
//! call) that does not release the GIL around a blocking call. Pure: fed the sample's state.
//!
//! One read-order artifact is left out. The sampler reads the GIL's words before the threads'
//! kernel states, so a holder that lets the GIL go and then sleeps in a syscall between the two
//! reads (`time.sleep` does exactly that) is, at that one sample, a holder asleep with the GIL.
//! Where it sees a holder asleep so, the sampler reads the GIL's words again after the kernel
//! states (`Sample::word_again`); if they changed, the holder let go between the reads and the
//! engine does not take it for asleep with the GIL (one that really slept with it and let go in the
//! microseconds between the reads loses that one sample: its stretch ends a sample early, and none
//! begins wrongly). Streams older than format 4 lack that read: for them a stretch seen at one
//! sample and followed by the thread still asleep in that call without the GIL is not reported (a
//! real short stretch has left the call by the next sample, or still holds the GIL in it). That
//! rule alone fails at low rates, where the next sample comes long after the sleep ended.

use crate::infer::intervals::TimelineParams;
use crate::observed::{KernelState, SYS_FUTEX};

/// One finished stretch: the holder `tid` asleep in syscall `nr` from `start_ns` to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedStretch {
    /// The holder's thread id (our PID namespace).
    pub tid: u32,
    /// Monotonic nanoseconds of the first sample that saw it asleep in the syscall while holding
    /// the GIL.
    pub start_ns: u64,
    /// Monotonic nanoseconds where it ended: its last sample plus part of the way to the next.
    pub end_ns: u64,
    /// The syscall's number, as `/proc/PID/task/TID/syscall` gives it (the machine's own
    /// numbering).
    pub nr: i64,
}

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
    /// Seen at its first sample only, so far.
    once: bool,
}

impl Open {
    fn finish(self, tid: u32, next: Option<u64>, params: &TimelineParams) -> BlockedStretch {
        BlockedStretch {
            tid,
            start_ns: self.start_ns,
            end_ns: self.last_ns + toward(self.last_ns, next, params),
            nr: self.nr,
        }
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
    /// The thread's state at sample `t`: whether it holds the GIL, and the syscall it sleeps in
    /// (`blocking_syscall`), if any.
    pub fn observe(
        &mut self,
        tid: u32,
        t: u64,
        (holds, asleep_in): (bool, Option<i64>),
        params: &TimelineParams,
        emit: &mut dyn FnMut(BlockedStretch),
    ) {
        if !holds && self.open.is_none() {
            // What the rest would do for the many threads that neither hold nor were holding.
            self.last_sample_ns = Some(t);
            return;
        }
        // Across a gap the timeline splits the hold into two slices: the stretch splits with it.
        let gap = self
            .last_sample_ns
            .is_some_and(|last| t.saturating_sub(last) > params.max_gap_ns);
        let blocked_in = asleep_in.filter(|_| holds);
        match (self.open.as_mut(), blocked_in) {
            (Some(open), Some(now)) if open.nr == now && !gap => {
                open.last_ns = t;
                open.once = false;
            }
            (_, now) => {
                if let Some(open) = self.open.take() {
                    // Seen once, then asleep in the same call without the GIL: it let the GIL go
                    // between the sample's two reads (module docs).
                    let artifact = open.once && !gap && !holds && asleep_in == Some(open.nr);
                    if !artifact {
                        emit(open.finish(tid, Some(t).filter(|_| !gap), params));
                    }
                }
                let previous = self.last_sample_ns.filter(|_| !gap);
                self.open = now.map(|nr| Open {
                    start_ns: t - toward(t, previous, params).min(t),
                    last_ns: t,
                    nr,
                    once: true,
                });
            }
        }
        self.last_sample_ns = Some(t);
    }

    /// The thread neither held nor was seen holding at every sample up to `t_ns`, which the engine
    /// did not step one by one (infer/parked.rs).
    pub fn seen_until(&mut self, t_ns: u64) {
        debug_assert!(self.open.is_none());
        self.last_sample_ns = Some(t_ns);
    }

    /// The open stretch as far as the samples have seen it, once seen at two (a stretch seen at one
    /// may still turn out to be the read-order artifact), ended as `close` would end it now: for a
    /// live view, which gets the finished stretch later, with the same start.
    pub fn open_so_far(&self, tid: u32, params: &TimelineParams) -> Option<BlockedStretch> {
        self.open
            .filter(|open| !open.once)
            .map(|open| open.finish(tid, None, params))
    }

    /// Ends an open stretch: the thread was gone at `at`, or the recording ended (`None`).
    pub fn close(
        &mut self,
        tid: u32,
        at: Option<u64>,
        params: &TimelineParams,
        emit: &mut dyn FnMut(BlockedStretch),
    ) {
        if let Some(open) = self.open.take() {
            emit(open.finish(tid, at, params));
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
        let held = (true, Some(READ));
        tracker.observe(7, 100, (true, None), &params, &mut emit);
        tracker.observe(7, 200, held, &params, &mut emit);
        tracker.observe(7, 300, held, &params, &mut emit);
        tracker.observe(7, 400, (true, None), &params, &mut emit);
        // After a gap the stretch starts half a period before its sample, not halfway.
        tracker.observe(7, 1000, held, &params, &mut emit);
        // A gap (the sampler fell behind) splits it, as it splits the hold.
        tracker.observe(7, 2000, held, &params, &mut emit);
        tracker.close(7, None, &params, &mut emit);
        let spans: Vec<(u64, u64)> = out.iter().map(|s| (s.start_ns, s.end_ns)).collect();
        assert_eq!(spans, vec![(150, 350), (950, 1050), (1950, 2050)]);
        assert!(out.iter().all(|s| s.tid == 7 && s.nr == READ));
    }

    #[test]
    fn a_holder_seen_asleep_once_and_then_asleep_in_that_call_without_the_gil_had_let_it_go() {
        let params = TimelineParams::for_period(100);
        let mut tracker = HeldWhileBlocked::default();
        let mut out = Vec::new();
        let mut emit = |s| out.push(s);
        // time.sleep: holding at the GIL's read, asleep by the kernel's read, and at the next
        // sample still asleep there, without the GIL.
        tracker.observe(7, 100, (true, Some(READ)), &params, &mut emit);
        tracker.observe(7, 200, (false, Some(READ)), &params, &mut emit);
        // A short call that keeps the GIL, made again and again: gone from the call by the next
        // sample each time, so each is kept.
        for t in [300, 500, 700] {
            tracker.observe(7, t, (true, Some(libc::SYS_ioctl)), &params, &mut emit);
            tracker.observe(7, t + 100, (true, None), &params, &mut emit);
        }
        // Seen twice, it is kept whatever follows.
        tracker.observe(7, 900, (true, Some(READ)), &params, &mut emit);
        tracker.observe(7, 1000, (true, Some(READ)), &params, &mut emit);
        tracker.observe(7, 1100, (false, Some(READ)), &params, &mut emit);
        let spans: Vec<(u64, u64, i64)> =
            out.iter().map(|s| (s.start_ns, s.end_ns, s.nr)).collect();
        let ioctl = libc::SYS_ioctl;
        assert_eq!(
            spans,
            vec![
                (250, 350, ioctl),
                (450, 550, ioctl),
                (650, 750, ioctl),
                (850, 1050, READ)
            ]
        );
    }

    #[test]
    fn an_open_stretch_is_shown_so_far_once_seen_twice_with_the_start_it_keeps() {
        let params = TimelineParams::for_period(100);
        let mut tracker = HeldWhileBlocked::default();
        let mut out = Vec::new();
        let mut emit = |s| out.push(s);
        tracker.observe(7, 100, (true, None), &params, &mut emit);
        tracker.observe(7, 200, (true, Some(READ)), &params, &mut emit);
        assert_eq!(tracker.open_so_far(7, &params), None, "seen once");
        tracker.observe(7, 300, (true, Some(READ)), &params, &mut emit);
        let so_far = tracker.open_so_far(7, &params).unwrap();
        assert_eq!(
            (so_far.start_ns, so_far.end_ns, so_far.nr),
            (150, 350, READ)
        );
        tracker.observe(7, 400, (true, None), &params, &mut emit);
        assert_eq!(out[0].start_ns, so_far.start_ns);
        assert_eq!(tracker.open_so_far(7, &params), None);
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
