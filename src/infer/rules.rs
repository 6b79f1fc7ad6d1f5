//! How often each rule that infers (rather than reads) a thread's state decided, as one table: the
//! trace's metadata keys and the summary's counts come from it, so a new rule is one row here and
//! one `count` where it decides (docs/classification.md names the rules by number).

use serde::{Deserialize, Serialize};

/// A decision taken by a rule of docs/classification.md for a thread the GIL's words and the kernel
/// did not place by themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A running thread still inside `take_gil`/`drop_gil` (rule 7).
    RunningStillWaiting,
    /// A running thread taken as released: nothing places it in a GIL call (rule 10).
    RunningReleased,
    /// A running thread the GIL's waiter counts placed (rule 8).
    RunningCounted,
    /// A running thread that who owns the GIL's mutex placed (rule 6).
    RunningByGilMutex,
    /// An ambiguous stretch decided as still inside `take_gil`/`drop_gil` (rule 9).
    StretchInGilCall,
    /// An ambiguous stretch decided as released (rule 9).
    StretchReleased,
    /// Of the stretches, those the hand-off count decided (rule 9, `settle_in_hindsight`).
    StretchByHandoffs,
    /// Stretches after `Hold` taken as `take_gil`: woken twice straight onto a CPU since holding.
    StretchWokenTwice,
    /// Stretches after a hold long enough to be asked to switch, taken as `take_gil`: the thread got
    /// a CPU three times since.
    StretchBackAfterSwitchRequest,
    /// Stretches begun as after `drop_gil` for a thread last seen asleep in `take_gil` that has got a
    /// CPU three times since (rule 8).
    StretchAfterUnseenHold,
}

impl Decision {
    /// Its row of `DECISIONS`: the rule's number and the metadata key of its count.
    pub fn info(self) -> &'static DecisionInfo {
        &DECISIONS[self as usize]
    }

    /// Its name where it is written out (`replay --explain`), the same as in the code.
    pub fn name(self) -> &'static str {
        match self {
            Decision::RunningStillWaiting => "RunningStillWaiting",
            Decision::RunningReleased => "RunningReleased",
            Decision::RunningCounted => "RunningCounted",
            Decision::RunningByGilMutex => "RunningByGilMutex",
            Decision::StretchInGilCall => "StretchInGilCall",
            Decision::StretchReleased => "StretchReleased",
            Decision::StretchByHandoffs => "StretchByHandoffs",
            Decision::StretchWokenTwice => "StretchWokenTwice",
            Decision::StretchBackAfterSwitchRequest => "StretchBackAfterSwitchRequest",
            Decision::StretchAfterUnseenHold => "StretchAfterUnseenHold",
        }
    }
}

/// One row of the decision table: a decision, its rule and where its count goes in the trace.
pub struct DecisionInfo {
    /// The decision this row is about.
    pub decision: Decision,
    /// The rule's number in docs/classification.md.
    pub rule: u8,
    /// The key of its count in the trace's metadata.
    pub metadata_key: &'static str,
}

/// The decision table, one row per `Decision` in its declaration order (`DecisionCounts` indexes by
/// it).
pub const DECISIONS: [DecisionInfo; 10] = [
    // Counts the threads still in `drop_gil`'s forced-switch wait too: the key is older than that
    // case, and kept so that saved traces stay comparable (docs/classification.md, rule 7).
    row(Decision::RunningStillWaiting, 7, "running_classified_take"),
    row(Decision::RunningReleased, 10, "running_classified_released"),
    row(
        Decision::RunningCounted,
        8,
        "running_classified_by_waiter_counts",
    ),
    row(
        Decision::RunningByGilMutex,
        6,
        "running_classified_by_gil_mutex_owner",
    ),
    row(
        Decision::StretchInGilCall,
        9,
        "ambiguous_stretches_in_gil_call",
    ),
    row(Decision::StretchReleased, 9, "ambiguous_stretches_released"),
    row(
        Decision::StretchByHandoffs,
        9,
        "ambiguous_stretches_decided_by_handoffs",
    ),
    row(
        Decision::StretchWokenTwice,
        9,
        "ambiguous_stretches_in_take_after_two_wakeups",
    ),
    row(
        Decision::StretchBackAfterSwitchRequest,
        9,
        "ambiguous_stretches_in_take_after_a_switch_request",
    ),
    row(
        Decision::StretchAfterUnseenHold,
        8,
        "ambiguous_stretches_after_a_hold_between_samples",
    ),
];

const fn row(decision: Decision, rule: u8, metadata_key: &'static str) -> DecisionInfo {
    DecisionInfo {
        decision,
        rule,
        metadata_key,
    }
}

/// How often each decision was taken over a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionCounts([u64; DECISIONS.len()]);

impl DecisionCounts {
    /// Counts one more taking of `decision`.
    pub fn count(&mut self, decision: Decision) {
        self.0[decision as usize] += 1;
    }

    /// How many times `decision` was taken.
    pub fn get(&self, decision: Decision) -> u64 {
        self.0[decision as usize]
    }

    /// Each decision's row and count, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static DecisionInfo, u64)> + '_ {
        DECISIONS.iter().map(|info| (info, self.get(info.decision)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_enums_order_and_its_keys_are_unique() {
        for (i, info) in DECISIONS.iter().enumerate() {
            assert_eq!(info.decision as usize, i, "{}", info.metadata_key);
        }
        let mut keys: Vec<_> = DECISIONS.iter().map(|d| d.metadata_key).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), DECISIONS.len());
    }

    #[test]
    fn counts_are_kept_per_decision() {
        let mut counts = DecisionCounts::default();
        counts.count(Decision::StretchWokenTwice);
        counts.count(Decision::StretchWokenTwice);
        counts.count(Decision::RunningCounted);
        assert_eq!(counts.get(Decision::StretchWokenTwice), 2);
        assert_eq!(counts.get(Decision::RunningCounted), 1);
        assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 3);
    }
}
