//! What CPython 3.15's own per-thread GIL flags (`holds_gil`, `gil_requested`) decide: a thread
//! that has asked for the GIL and does not hold it is inside `take_gil`, with no inference. The
//! sampler reads them (sampler/gil_flag_reader.rs) only where this can use them; see there for why.

use crate::infer::classify::Basis;
use crate::infer::intervals::GilState;
use crate::infer::rules::Decision;
use crate::infer::sample::GilFlagsReading;

/// What the flags did over a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct FlagStats {
    /// Readings consulted where the rules infer.
    pub read: u64,
    /// Of those, the ones that said `take_gil`.
    pub decided_take: u64,
    /// Of those, the ones where the rules had said something else (or not yet decided).
    pub changed: u64,
    /// With `GILSAMPLE_CHECK_GIL_FLAGS`: direct decisions the flags agreed and disagreed with.
    pub agreed_with_direct: u64,
    /// Direct decisions the flags disagreed with (with `GILSAMPLE_CHECK_GIL_FLAGS`).
    pub disagreed_with_direct: u64,
}

/// Decides threads from 3.15's `holds_gil`/`gil_requested` flags where the rules could not read the
/// state directly, and counts what it decided.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlagDecider {
    /// Compare the flags with direct decisions too (`GILSAMPLE_CHECK_GIL_FLAGS`).
    pub check_direct: bool,
    /// What the flags decided so far.
    pub stats: FlagStats,
}

impl FlagDecider {
    /// The state of a thread whose flags read `reading` (if read), given what the rules said.
    /// `gil_free_or_ours`: the GIL is free or this thread holds it; a request then is take_gil's
    /// uncontended fast path (nanoseconds, no wait), so the flags decide only while another holds it.
    pub fn decide(
        &mut self,
        reading: Option<GilFlagsReading>,
        rules: (GilState, Basis),
        gil_free_or_ours: bool,
    ) -> (GilState, Basis) {
        let (state, basis) = rules;
        if basis == Basis::Direct {
            if self.check_direct
                && let Some(GilFlagsReading { holds, requested }) = reading
            {
                let agrees = match state {
                    GilState::Hold => holds && !requested,
                    GilState::Take => waiting(holds, requested),
                    _ => !waiting(holds, requested),
                };
                if agrees {
                    self.stats.agreed_with_direct += 1;
                } else {
                    self.stats.disagreed_with_direct += 1;
                }
            }
            return rules;
        }
        if gil_free_or_ours || basis == Basis::Rule(Decision::RunningReleased) {
            return rules;
        }
        let Some(GilFlagsReading { holds, requested }) = reading else {
            return rules;
        };
        self.stats.read += 1;
        if !waiting(holds, requested) {
            return rules;
        }
        self.stats.decided_take += 1;
        if state != GilState::Take || matches!(basis, Basis::Ambiguous { .. }) {
            self.stats.changed += 1;
        }
        // "Running, and proven still inside take_gil": what the interpreter's flag says.
        (GilState::Take, Basis::Rule(Decision::RunningStillWaiting))
    }
}

/// What the flags call waiting in `take_gil`: asked for the GIL, not holding it.
fn waiting(holds: bool, requested: bool) -> bool {
    requested && !holds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(holds: bool, requested: bool) -> Option<GilFlagsReading> {
        Some(GilFlagsReading { holds, requested })
    }

    #[test]
    fn a_thread_that_asked_and_does_not_hold_is_in_take_gil() {
        let mut decider = FlagDecider::default();
        let rules = (GilState::Released, Basis::Rule(Decision::RunningByGilMutex));
        assert_eq!(
            decider.decide(flags(false, true), rules, false),
            (GilState::Take, Basis::Rule(Decision::RunningStillWaiting))
        );
        assert_eq!((decider.stats.decided_take, decider.stats.changed), (1, 1));
        // The rules already said so: decided by the flags, not changed.
        let rules = (GilState::Take, Basis::Rule(Decision::RunningCounted));
        decider.decide(flags(false, true), rules, false);
        assert_eq!((decider.stats.decided_take, decider.stats.changed), (2, 1));
    }

    #[test]
    fn direct_evidence_unread_flags_and_the_holder_are_left_to_the_rules() {
        let mut decider = FlagDecider::default();
        let direct = (GilState::Released, Basis::Direct);
        assert_eq!(decider.decide(flags(false, true), direct, false), direct);
        let inferred = (GilState::Released, Basis::Rule(Decision::RunningByGilMutex));
        assert_eq!(decider.decide(flags(false, true), inferred, true), inferred);
        let never_in_a_gil_state = (GilState::Released, Basis::Rule(Decision::RunningReleased));
        assert_eq!(
            decider.decide(flags(false, true), never_in_a_gil_state, false),
            never_in_a_gil_state
        );
        assert_eq!(decider.decide(None, inferred, false), inferred);
        assert_eq!(decider.stats.read, 0);
        assert_eq!(
            decider.decide(flags(false, false), inferred, false),
            inferred
        );
        assert_eq!(
            decider.stats,
            FlagStats {
                read: 1,
                ..FlagStats::default()
            }
        );
    }

    #[test]
    fn checking_direct_decisions_counts_agreement() {
        let mut decider = FlagDecider {
            check_direct: true,
            ..FlagDecider::default()
        };
        decider.decide(flags(true, false), (GilState::Hold, Basis::Direct), false);
        decider.decide(
            flags(false, true),
            (GilState::Released, Basis::Direct),
            false,
        );
        assert_eq!(decider.stats.agreed_with_direct, 1);
        assert_eq!(decider.stats.disagreed_with_direct, 1);
    }
}
