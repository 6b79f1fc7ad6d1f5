//! How long the GIL has been with its current holder, bounded from above by the samples: while that is
//! shorter than the switch interval, no waiter can have asked the holder to switch (classify.rs,
//! rule 6), since a waiter asks only after waiting a whole interval without a hand-off.

/// The switch number the last read saw, and when the last hand-off can have happened at the earliest.
#[derive(Clone, Copy, Debug, Default)]
pub struct HandoffAge {
    /// The last read's switch number and when that read began.
    last: Option<(u64, u64)>,
    /// When the last read began that still saw the switch number before the current one: the hand-off
    /// came after it.
    handoff_after_ns: Option<u64>,
}

impl HandoffAge {
    /// Records a read of the GIL that began at `began_ns` and saw `switch_number`.
    pub fn observe(&mut self, switch_number: u64, began_ns: u64) {
        if let Some((number, at)) = self.last
            && number != switch_number
        {
            self.handoff_after_ns = Some(at);
        }
        self.last = Some((switch_number, began_ns));
    }

    /// Whether the last hand-off is certainly younger than `interval_us` at `now_ns`. False until a
    /// hand-off has been seen: the one before the first sample may be of any age.
    pub fn younger_than(&self, interval_us: u64, now_ns: u64) -> bool {
        self.handoff_after_ns
            .is_some_and(|after| !may_have_lasted(after, interval_us, now_ns))
    }

    /// The last hand-off came after this moment (`None` until one has been seen): kept by a holder's
    /// sample, it bounds from below when that hold began.
    pub fn after_ns(&self) -> Option<u64> {
        self.handoff_after_ns
    }
}

/// Whether a hand-off that came after `after_ns` may be `interval_us` old at `now_ns`: then a waiter
/// may have asked its holder to switch.
pub fn may_have_lasted(after_ns: u64, interval_us: u64, now_ns: u64) -> bool {
    // CPython waits at least 1 µs whatever the interval says.
    let interval_ns = interval_us.max(1).saturating_mul(1000);
    now_ns.saturating_sub(after_ns) >= interval_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_until_a_handoff_is_seen() {
        let mut age = HandoffAge::default();
        assert!(!age.younger_than(5000, 0));
        age.observe(7, 1_000);
        age.observe(7, 1_100_000);
        assert!(!age.younger_than(5000, 1_100_000));
    }

    #[test]
    fn counts_from_the_last_read_before_the_handoff() {
        let mut age = HandoffAge::default();
        age.observe(7, 1_000_000);
        age.observe(8, 1_100_000);
        // The hand-off came after the read at 1 ms: at 5.9 ms it is younger than 5 ms, at 6 ms it
        // may not be.
        assert!(age.younger_than(5000, 5_900_000));
        assert!(!age.younger_than(5000, 6_000_000));
        // Reads that see the same number do not move it.
        age.observe(8, 1_200_000);
        assert!(age.younger_than(5000, 5_900_000));
        age.observe(9, 1_300_000);
        assert!(age.younger_than(5000, 6_100_000));
    }

    #[test]
    fn a_hold_may_have_lasted_the_interval_once_that_long_after_the_read_before_it() {
        let mut age = HandoffAge::default();
        age.observe(3, 2_000_000);
        age.observe(4, 2_100_000);
        let after = age.after_ns().unwrap();
        assert_eq!(after, 2_000_000);
        assert!(!may_have_lasted(after, 500, 2_499_999));
        assert!(may_have_lasted(after, 500, 2_500_000));
    }

    #[test]
    fn a_zero_interval_is_one_microsecond() {
        let mut age = HandoffAge::default();
        age.observe(1, 1_000);
        age.observe(2, 1_500);
        assert!(age.younger_than(0, 1_900));
        assert!(!age.younger_than(0, 2_000));
    }
}
