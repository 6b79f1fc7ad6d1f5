//! Per-thread totals for the summary: time in each state and GIL acquisitions seen.

use std::collections::BTreeMap;

use crate::infer::intervals::{GilState, Interval};

/// One thread's totals over a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// Nanoseconds per state, indexed by `GilState::index`.
    pub ns: [u64; 5],
    /// `hold_gil` intervals that began after a non-hold interval: acquisitions the sampler saw.
    pub acquisitions: u64,
    last: Option<(GilState, u64)>,
}

impl ThreadStats {
    /// Nanoseconds in any state: the thread's covered time.
    pub fn total_ns(&self) -> u64 {
        self.ns.iter().sum()
    }

    /// The share of the covered time spent in `state`, 0 to 1 (0 where nothing is covered).
    pub fn fraction(&self, state: GilState) -> f64 {
        let total = self.total_ns();
        if total == 0 {
            0.0
        } else {
            self.ns[state.index()] as f64 / total as f64
        }
    }
}

/// Totals of every thread of one target.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Each thread's totals, by thread id (our PID namespace).
    pub threads: BTreeMap<u32, ThreadStats>,
}

impl Totals {
    /// Adds a closed interval to its thread's totals.
    pub fn add(&mut self, interval: &Interval) {
        let stats = self.threads.entry(interval.tid).or_default();
        stats.ns[interval.state.index()] += interval.end_ns - interval.start_ns;
        let continues_hold = stats
            .last
            .is_some_and(|(s, end)| s == GilState::Hold && end == interval.start_ns);
        if interval.state == GilState::Hold && !continues_hold {
            stats.acquisitions += 1;
        }
        stats.last = Some((interval.state, interval.end_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_time_per_state_and_acquisitions() {
        let mut totals = Totals::default();
        let iv = |state, start_ns, end_ns| Interval {
            tid: 1,
            state,
            start_ns,
            end_ns,
        };
        for interval in [
            iv(GilState::Take, 0, 10),
            iv(GilState::Hold, 10, 40),
            iv(GilState::Take, 40, 50),
            iv(GilState::Hold, 50, 60),
        ] {
            totals.add(&interval);
        }
        let stats = &totals.threads[&1];
        assert_eq!(stats.ns[GilState::Hold.index()], 40);
        assert_eq!(stats.ns[GilState::Take.index()], 20);
        assert_eq!(stats.acquisitions, 2);
        assert!((stats.fraction(GilState::Hold) - 40.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn a_hold_split_by_a_gap_counts_twice_but_a_contiguous_one_once() {
        let mut totals = Totals::default();
        totals.add(&Interval {
            tid: 1,
            state: GilState::Hold,
            start_ns: 0,
            end_ns: 10,
        });
        totals.add(&Interval {
            tid: 1,
            state: GilState::Hold,
            start_ns: 20,
            end_ns: 30,
        });
        assert_eq!(totals.threads[&1].acquisitions, 2);
    }
}
