//! The spans a recording saw nothing of: its sampler fell behind by more than the timeline bridges
//! (`Finding::Gap`, most often a sampler without real-time priority waiting for a CPU), so no
//! thread's slices cover them. Counted as anything, they would be wrong: a thread has no slice
//! there, which reads as time outside the GIL, and a recording whose sampler lost a quarter of its
//! ticks said the GIL was held 73% of the time where every tick it took found it held. So they are
//! left out of the window and of each thread's time, as the stops are (report/stopped.rs), and
//! said beside the length (`ProcessAnswer::unseen_s`).
//!
//! The trace keeps them as a counter track (`GAP_TRACK`: 1 from a gap's start, 0 from its end), so
//! that they move with the events when `merge` moves a file's clock, and a viewer shows them.

use serde_json::Value;

/// Counter samples read from one trace, at most: past that the file is not a gilsample recording's
/// (10 minutes at 10 kHz with every other tick late would be 3 million).
const MAX_MARKS: usize = 8_000_000;

/// The `GAP_TRACK` counter samples of one process, as read: (trace-clock ns, the counter's value).
#[derive(Clone, Debug, Default)]
pub struct GapMarks(Vec<(i128, bool)>);

impl GapMarks {
    /// One counter sample: `value` is the event's `args.gap` (1 from a gap's start, 0 from its end).
    /// Anything else is passed over.
    pub fn add(&mut self, t_ns: i128, value: Option<&Value>) {
        let Some(value) = value.and_then(Value::as_u64).filter(|&v| v <= 1) else {
            return;
        };
        if self.0.len() < MAX_MARKS {
            self.0.push((t_ns, value == 1));
        }
    }

    /// The gaps the samples mark: sorted, joined where they touch, each from a 1 to the next 0; a
    /// 1 with no 0 after it (a file cut off there) ends nothing and is passed over.
    pub fn spans(mut self) -> Vec<(i128, i128)> {
        // At one moment a gap's end (0) comes before the next one's start (1): they join.
        self.0.sort_unstable_by_key(|&(t, open)| (t, open));
        let mut spans: Vec<(i128, i128)> = Vec::new();
        let mut open: Option<i128> = None;
        for (t, starts) in self.0 {
            match (starts, open) {
                (true, None) => open = Some(t),
                (false, Some(from)) => {
                    open = None;
                    if t > from {
                        push_joined(&mut spans, (from, t));
                    }
                }
                _ => {}
            }
        }
        spans
    }
}

/// Adds `span` (starting at or after the last one's start) to `spans`, joined with the last where
/// they meet or overlap.
fn push_joined(spans: &mut Vec<(i128, i128)>, (from, to): (i128, i128)) {
    match spans.last_mut() {
        Some(last) if from <= last.1 => last.1 = last.1.max(to),
        _ => spans.push((from, to)),
    }
}

/// The union of two sorted, joined span lists (the stops and the gaps): what is left out of the
/// figures, sorted and joined.
pub fn union(a: &[(i128, i128)], b: &[(i128, i128)]) -> Vec<(i128, i128)> {
    let mut all: Vec<(i128, i128)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut joined = Vec::with_capacity(all.len());
    for span in all {
        push_joined(&mut joined, span);
    }
    joined
}

/// How long the sorted, joined `spans` cover of `(start, end)`, nanoseconds: the spans that end
/// after `start` found by bisection, so a thread's share costs a few of them, not all.
pub fn covered(spans: &[(i128, i128)], (start, end): (i128, i128)) -> i128 {
    let first = spans.partition_point(|&(_, to)| to <= start);
    spans[first..]
        .iter()
        .take_while(|&&(from, _)| from < end)
        .map(|&(from, to)| (to.min(end) - from.max(start)).max(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn marks(samples: &[(i128, Value)]) -> Vec<(i128, i128)> {
        let mut marks = GapMarks::default();
        for (t, value) in samples {
            marks.add(*t, Some(value));
        }
        marks.spans()
    }

    #[test]
    fn gaps_are_read_from_one_to_the_next_zero_in_time_order() {
        let spans = marks(&[
            (500, json!(0)),
            (100, json!(1)),
            (400, json!(1)),
            (200, json!(0)),
        ]);
        assert_eq!(spans, vec![(100, 200), (400, 500)]);
    }

    #[test]
    fn gaps_that_meet_join_and_bad_or_unended_marks_are_passed_over() {
        let spans = marks(&[
            (100, json!(1)),
            (200, json!(0)),
            (200, json!(1)),
            (300, json!(0)),
            (350, json!(0)),   // ends nothing
            (360, json!(7)),   // not a counter value of this track
            (370, json!("1")), // nor this
            (900, json!(1)),   // cut off: no end
        ]);
        assert_eq!(spans, vec![(100, 300)]);
    }

    #[test]
    fn the_union_joins_overlaps_and_covered_counts_only_inside_the_window() {
        let stops = [(100, 200), (600, 700)];
        let gaps = [(150, 250), (300, 400)];
        let left_out = union(&stops, &gaps);
        assert_eq!(left_out, vec![(100, 250), (300, 400), (600, 700)]);
        assert_eq!(covered(&left_out, (0, 1000)), 150 + 100 + 100);
        assert_eq!(covered(&left_out, (200, 350)), 50 + 50);
        assert_eq!(covered(&left_out, (400, 600)), 0);
        assert_eq!(covered(&[], (0, 10)), 0);
    }
}
