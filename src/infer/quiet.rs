//! When the sampler may tick less often: the target has been quiet, so fewer ticks lose nothing a
//! user can see, and the first sign of anything happening brings back the full rate.
//!
//! A sample is quiet when, against the sample before it, nothing GIL-related moved: the same threads,
//! the same GIL words (`locked`, `last_holder`, `switch_number`), every thread in the same kernel
//! state, no thread waiting for the GIL or handing it off, no stretch held back undecided, and no
//! waiter counted by glibc. After `QUIET_AFTER` quiet samples in a row the engine lets the sampler
//! skip periods (`Wants::skip_periods`); the first sample that is not quiet ends that.
//!
//! Why nothing is lost: `switch_number` counts every acquisition of the GIL. A slow tick that finds
//! it, the holder and `locked` unchanged proves that no thread took the GIL in between, so no wait
//! ended and no hand-off happened unseen; a wait that began in between is still going on at the
//! tick, is seen there, and ends the quiet. What the slower ticks cost is the placement of that
//! first change: at most one slow period off, once per quiet stretch (docs/cost.md, "Adaptive rate").

use crate::infer::findings::Finding;
use crate::infer::intervals::TimelineParams;
use crate::infer::sample::Sample;
use crate::observed::GilWord;
use crate::observed::KernelState;

/// Quiet samples in a row before ticks are skipped (5 ms at 10 kHz): a target whose threads change
/// every few ticks keeps the full rate, and the one change a slow tick may place late comes at most
/// once per that many ticks.
pub const QUIET_AFTER: u32 = 50;

/// While quiet the sampler ticks `SLOW_DIVISOR` times less often, but never less often than every
/// `SLOWEST_PERIOD_NS`: the slower it ticks, the further off the first change after a quiet stretch
/// may be placed.
pub const SLOW_DIVISOR: u64 = 5;
/// The longest period the sampler slows to while quiet: 1 ms.
pub const SLOWEST_PERIOD_NS: u64 = 1_000_000;

/// The periods a quiet target lets the sampler skip per tick at `period_ns` (0: no slower rate
/// exists, the period is already at least `SLOWEST_PERIOD_NS`).
pub fn skip_for(period_ns: u64) -> u32 {
    let period = period_ns.max(1);
    let slow = (period * SLOW_DIVISOR).min(SLOWEST_PERIOD_NS.max(period));
    (slow / period).saturating_sub(1) as u32
}

/// The sampling rate, in Hz, of ticks `skipped` periods apart beyond the first.
pub fn rate_hz(period_ns: u64, skipped: u32) -> u32 {
    let spacing = period_ns.max(1) * (u64::from(skipped) + 1);
    (1e9 / spacing as f64).round() as u32
}

/// The timeline's geometry for one sample: a tick that came after skipped periods is not a gap.
pub fn params_for(base: TimelineParams, sample: &Sample) -> TimelineParams {
    TimelineParams {
        max_gap_ns: base.max_gap_ns + u64::from(sample.skipped_periods) * base.period_ns,
        ..base
    }
}

/// Follows quietness over the samples, and the rate each sample was taken at.
#[derive(Debug, Default)]
pub struct QuietWatch {
    /// Quiet samples in a row, up to the last.
    quiet: u32,
    last_word: Option<GilWord>,
    /// Per thread of the last sample, in its order.
    last_threads: Vec<(u32, Option<KernelState>)>,
    /// The skip of the last sample, once one was seen; its time.
    last_skip: Option<u32>,
    last_t_ns: u64,
}

impl QuietWatch {
    /// One sample, after inference decided it: `gil_waits` says whether it placed a thread in
    /// `take_gil` or `drop_gil` or held one back undecided, `pending` whether any stretch is held
    /// back. A change of the sampling rate is sent to `sink`, placed at the tick that chose it.
    pub fn observe(
        &mut self,
        sample: &Sample,
        period_ns: u64,
        gil_waits: bool,
        pending: bool,
        sink: &mut dyn FnMut(Finding),
    ) {
        if self.last_skip != Some(sample.skipped_periods) {
            let t_ns = match self.last_skip {
                Some(_) => self.last_t_ns,
                None => sample.t_ns,
            };
            sink(Finding::Rate {
                t_ns,
                hz: rate_hz(period_ns, sample.skipped_periods),
            });
            self.last_skip = Some(sample.skipped_periods);
        }
        self.last_t_ns = sample.t_ns;
        let word = sample.word;
        let same_word = self.last_word.is_some_and(|w| {
            (w.locked, w.last_holder, w.switch_number)
                == (word.locked, word.last_holder, word.switch_number)
        });
        let nobody_counted = sample.waiters.is_none_or(|w| w.take == 0 && w.drop == 0);
        // Compared and kept in place: with hundreds of threads, most unchanged from one tick to
        // the next, writing only what changed is what keeps this cheap.
        let same_threads = if self.last_threads.len() == sample.threads.len() {
            let mut same = true;
            let entries = self.last_threads.iter_mut().zip(&sample.threads);
            for (index, (last, t)) in entries.enumerate() {
                if sample.is_unchanged_outside(index) {
                    continue;
                }
                let now = (t.tid, t.kernel);
                if *last != now {
                    same = false;
                    *last = now;
                }
            }
            same
        } else {
            self.last_threads.clear();
            self.last_threads
                .extend(sample.threads.iter().map(|t| (t.tid, t.kernel)));
            false
        };
        let quiet = same_word && same_threads && !gil_waits && !pending && nobody_counted;
        self.quiet = if quiet {
            self.quiet.saturating_add(1)
        } else {
            0
        };
        self.last_word = Some(word);
    }

    /// Periods the next tick may skip.
    pub fn skip_periods(&self, period_ns: u64) -> u32 {
        if self.quiet >= QUIET_AFTER {
            skip_for(period_ns)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::RemoteAddr;
    use crate::infer::intervals::GilState;
    use crate::infer::sample::ThreadSample;

    const PERIOD: u64 = 100_000;

    fn sample(t_ns: u64, switch_number: u64, kernel: KernelState) -> Sample {
        let mut s = Sample {
            t_ns,
            ..Sample::default()
        };
        s.word.locked = true;
        s.word.last_holder = RemoteAddr(0x1000);
        s.word.switch_number = switch_number;
        s.threads.push(ThreadSample {
            tid: 7,
            tstate: RemoteAddr(0x1000),
            kernel: Some(kernel),
            ..ThreadSample::default()
        });
        s
    }

    #[test]
    fn the_slow_rate_is_a_fifth_but_never_below_a_kilohertz() {
        assert_eq!(skip_for(100_000), 4);
        assert_eq!(rate_hz(100_000, 4), 2_000);
        assert_eq!(skip_for(50_000), 4);
        assert_eq!(skip_for(500_000), 1);
        assert_eq!(skip_for(1_000_000), 0);
        assert_eq!(skip_for(10_000_000), 0);
    }

    #[test]
    fn quiet_long_enough_skips_and_the_first_change_brings_the_full_rate_back() {
        let mut watch = QuietWatch::default();
        let mut rates = Vec::new();
        let mut sink = |r: Finding| rates.push(r);
        let no_waits = false;
        let mut t = 0;
        for _ in 0..=QUIET_AFTER {
            t += PERIOD;
            watch.observe(
                &sample(t, 3, KernelState::Running),
                PERIOD,
                no_waits,
                false,
                &mut sink,
            );
        }
        assert_eq!(watch.skip_periods(PERIOD), 4, "quiet: one tick in five");
        // A slow tick: the same, so still quiet.
        let mut slow = sample(t + 5 * PERIOD, 3, KernelState::Running);
        slow.skipped_periods = 4;
        watch.observe(&slow, PERIOD, no_waits, false, &mut sink);
        assert_eq!(watch.skip_periods(PERIOD), 4);
        // The GIL changed hands (or was taken again) in between: full rate at once.
        let moved = sample(t + 10 * PERIOD, 4, KernelState::Running);
        watch.observe(&moved, PERIOD, no_waits, false, &mut sink);
        assert_eq!(watch.skip_periods(PERIOD), 0);
        assert_eq!(
            rates,
            vec![
                Finding::Rate {
                    t_ns: PERIOD,
                    hz: 10_000
                },
                Finding::Rate { t_ns: t, hz: 2_000 },
                Finding::Rate {
                    t_ns: t + 5 * PERIOD,
                    hz: 10_000
                },
            ],
            "each rate from the tick that chose it"
        );
    }

    #[test]
    fn a_waiter_a_held_back_stretch_or_a_kernel_change_is_not_quiet() {
        let run = |states: &[Option<GilState>], pending: bool, second: KernelState| {
            let mut watch = QuietWatch::default();
            let mut sink = |_: Finding| {};
            for i in 0..=u64::from(QUIET_AFTER) {
                let kernel = if i == u64::from(QUIET_AFTER) {
                    second
                } else {
                    KernelState::Running
                };
                let s = sample(i * PERIOD, 3, kernel);
                let waits = states
                    .iter()
                    .any(|s| matches!(s, None | Some(GilState::Take | GilState::Drop)));
                watch.observe(&s, PERIOD, waits, pending, &mut sink);
            }
            watch.skip_periods(PERIOD)
        };
        let running = KernelState::Running;
        assert_eq!(run(&[Some(GilState::Hold)], false, running), 4);
        assert_eq!(run(&[Some(GilState::Take)], false, running), 0);
        assert_eq!(run(&[Some(GilState::Drop)], false, running), 0);
        assert_eq!(run(&[None], false, running), 0);
        assert_eq!(run(&[Some(GilState::Released)], true, running), 0);
        assert_eq!(run(&[Some(GilState::Hold)], false, KernelState::Blocked), 0);
    }
}
