//! The spans a recording saw nothing of: its sampler fell behind by more than the timeline bridges
//! (`Finding::Gap`, most often a sampler without real-time priority waiting for a CPU), so no
//! thread's slices cover them. Counted as anything, they would be wrong: a thread has no slice
//! there, which reads as time outside the GIL, and a recording whose sampler lost a quarter of its
//! ticks said the GIL was held 73% of the time where every tick it took found it held. So they are
//! left out of the window and of each thread's time, as the stops are (report/stopped.rs), and
//! said beside the length (`ProcessAnswer::unseen_s`).
//!
//! The trace keeps them as a counter track (`GAP_TRACK`: 1 from a gap's start, 0 from its end), so
//! that they move with the events when `merge` moves a file's clock, and a viewer shows them. The
//! stops have such a track too (`STOPPED_TRACK`), read the same way where a merged file's
//! `otherData` no longer gives them on its clock.

use serde_json::Value;

/// Gaps read from one process's track, at most: a gap is over 4 periods, so 10 minutes at 10 kHz
/// has at most 1.2 million; past this the track is not a gilsample recording's.
const MAX_GAPS: usize = 4_000_000;

/// The spans one process's counter track marks (`GAP_TRACK`, `STOPPED_TRACK`), read from its
/// samples in file order (the order gilsample writes them: each span's start, 1, then its end, 0).
#[derive(Clone, Debug, Default)]
pub struct TrackSpans {
    /// The spans paired so far.
    spans: Vec<(i128, i128)>,
    /// A start read, its end not yet.
    open: Option<i128>,
}

impl TrackSpans {
    /// One counter sample: `value` is the event's value under the track's key (`args.gap`,
    /// `args.stopped`: 1 from a span's start, 0 from its end). A start pairs with the end right
    /// after it: a start after a start replaces it, so a stray mark (a file edited, another tool's
    /// track of the name) can only shorten a span, never widen one over slices; an end without its
    /// start, and any other value, are passed over.
    pub fn add(&mut self, t_ns: i128, value: Option<&Value>) {
        match value.and_then(Value::as_f64) {
            Some(1.0) => self.open = Some(t_ns),
            Some(0.0) => {
                if let Some(from) = self.open.take()
                    && t_ns > from
                    && self.spans.len() < MAX_GAPS
                {
                    self.spans.push((from, t_ns));
                }
            }
            _ => {}
        }
    }

    /// The spans read: sorted, joined where they meet. A start with no end after it (a file cut
    /// off there) ends nothing and is passed over.
    pub fn spans(self) -> Vec<(i128, i128)> {
        sorted_and_joined(self.spans)
    }
}

/// Adds `span` (starting at or after the last one's start) to `spans`, joined with the last where
/// they meet or overlap.
pub fn push_joined(spans: &mut Vec<(i128, i128)>, (from, to): (i128, i128)) {
    match spans.last_mut() {
        Some(last) if from <= last.1 => last.1 = last.1.max(to),
        _ => spans.push((from, to)),
    }
}

/// `spans` sorted, and joined where they meet or overlap: the form `covered` and `union` take.
pub fn sorted_and_joined(mut spans: Vec<(i128, i128)>) -> Vec<(i128, i128)> {
    spans.sort_unstable();
    let mut joined = Vec::with_capacity(spans.len());
    for span in spans {
        push_joined(&mut joined, span);
    }
    joined
}

/// The union of two sorted, joined span lists (the stops and the gaps): what is left out of the
/// figures, sorted and joined.
pub fn union(a: &[(i128, i128)], b: &[(i128, i128)]) -> Vec<(i128, i128)> {
    sorted_and_joined(a.iter().chain(b).copied().collect())
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
        let mut marks = TrackSpans::default();
        for (t, value) in samples {
            marks.add(*t, Some(value));
        }
        marks.spans()
    }

    #[test]
    fn each_start_pairs_with_the_end_after_it_and_the_gaps_come_out_sorted() {
        // Two files merged: each one's gaps in order, the other's after them.
        let spans = marks(&[
            (400, json!(1)),
            (500, json!(0)),
            (100, json!(1.0)),
            (200, json!(0)),
        ]);
        assert_eq!(spans, vec![(100, 200), (400, 500)]);
    }

    #[test]
    fn gaps_that_meet_join_and_stray_or_unended_marks_are_passed_over() {
        let spans = marks(&[
            (100, json!(1)),
            (200, json!(0)),
            (200, json!(1)),
            (300, json!(0)),
            (350, json!(0)),   // ends nothing
            (360, json!(7)),   // not a counter value of this track
            (370, json!("1")), // nor this
            (400, json!(1)),   // a stray start: the next one replaces it
            (600, json!(1)),
            (650, json!(0)),
            (700, json!(1)),
            (700, json!(0)), // ends nothing long
            (900, json!(1)), // cut off: no end
        ]);
        assert_eq!(spans, vec![(100, 300), (600, 650)]);
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
        // The stops alone, as report counts stopped_s.
        assert_eq!(covered(&[(0, 50), (90, 200)], (10, 100)), 50);
        assert_eq!(covered(&[], (10, 100)), 0);
    }
}
