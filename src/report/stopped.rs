//! The spans during which a recorded process was stopped (SIGSTOP, Ctrl+Z, a debugger: otherData's
//! `process_stopped_monotonic_ns`, sampler/stop_watch.rs). Its threads did not run then, and the
//! one holding the GIL kept it: the waits of those spans were the stop's, not the GIL's, and blaming
//! them on the holder's code would send its user to the wrong code. So they are left out of every
//! figure: the slices are cut at them and at the recording's ends (`keep_time_it_ran`), and the
//! window is the time the process ran.

use serde_json::Value;

use crate::report::gaps;

/// Spans read from one trace, at most: a recording with more is a debugger's stepping session.
const MAX_STOPS: usize = 100_000;

/// The stop spans `value` holds (`[[from, to], ...]`, monotonic nanoseconds), moved onto the trace's
/// clock by `to_trace`: sorted, each with its end after its start, overlaps joined. Malformed pairs
/// are passed over.
pub fn read(value: Option<&Value>, to_trace: i128) -> Vec<(i128, i128)> {
    let pairs = value.and_then(Value::as_array).into_iter().flatten();
    let monotonic = pairs.filter_map(|pair| {
        let [from, to] = pair.as_array()?.as_slice() else {
            return None;
        };
        Some((i128::from(from.as_i64()?), i128::from(to.as_i64()?)))
    });
    on_trace_clock(monotonic, to_trace)
}

/// `monotonic` spans (the sampler's, or as a trace keeps them) moved onto the trace's clock by
/// `to_trace`, as `read` gives them.
pub fn on_trace_clock(
    monotonic: impl Iterator<Item = (i128, i128)>,
    to_trace: i128,
) -> Vec<(i128, i128)> {
    let spans: Vec<(i128, i128)> = monotonic
        .take(MAX_STOPS)
        .filter(|&(from, to)| to > from)
        .map(|(from, to)| (from + to_trace, to + to_trace))
        .collect();
    gaps::sorted_and_joined(spans)
}

/// What `cut_out` cuts: something that lasts from one moment to another (trace-clock ns), and the
/// same thing over a part of that time.
pub trait Span: Copy {
    /// Its start and end.
    fn span(&self) -> (i128, i128);
    /// The same, from `start` to `end`.
    fn part(self, start: i128, end: i128) -> Self;
}

/// `slices` without their parts inside `stops` (as `read` gives them): a slice across a stop
/// becomes its part before and its part after.
pub fn cut_out<S: Span>(slices: &mut Vec<S>, stops: &[(i128, i128)]) {
    if stops.is_empty() {
        return;
    }
    let mut kept = Vec::with_capacity(slices.len());
    for slice in slices.drain(..) {
        // The first stop that ends after the slice starts; those after it, while they start
        // before the slice ends, cut it.
        let first = stops.partition_point(|&(_, to)| to <= slice.span().0);
        let mut rest = Some(slice);
        for &(from, to) in &stops[first..] {
            let Some(s) = rest.take() else { break };
            let (start, end) = s.span();
            if from >= end {
                rest = Some(s);
                break;
            }
            if start < from {
                kept.push(s.part(start, from));
            }
            if end > to {
                rest = Some(s.part(to, end));
            }
        }
        kept.extend(rest);
    }
    *slices = kept;
}

/// `slices` cut to the time the recorded process ran: without their parts inside `stops` and, where
/// the recording's `window` is known, outside it. A slice ends at the sample after its last, which
/// can come after the recording's end on the trace's clock (tens of microseconds): a process
/// stopped to the end would keep that piece, and its waits would outgrow a window of nothing.
pub fn keep_time_it_ran<S: Span>(
    slices: &mut Vec<S>,
    stops: &[(i128, i128)],
    window: Option<(i128, i128)>,
) {
    cut_out(slices, stops);
    if let Some((start, end)) = window {
        slices.retain_mut(|slice| {
            let (from, to) = slice.span();
            let (from, to) = (from.max(start), to.min(end));
            if from >= to {
                return false;
            }
            *slice = slice.part(from, to);
            true
        });
    }
}

/// The sampler's first check of the process's state comes at its first tick, and a check every
/// 10 ms (sampler/stop_watch.rs): a stop found then begins within this of the recording's start
/// (at 100 Hz or faster; slower rates add their period).
const FIRST_CHECK_WITHIN_NS: i128 = 20_000_000;

/// Whether the first of `stops` is the one found when the recording began (window `start`), at
/// `rate_hz`: the stop that `process_stopped` calls "at the start", left out already.
pub fn began_with_the_recording(stops: &[(i128, i128)], start: i128, rate_hz: f64) -> bool {
    let period = if rate_hz > 0.0 {
        (1e9 / rate_hz) as i128
    } else {
        0
    };
    stops
        .first()
        .is_some_and(|&(from, _)| from - start <= FIRST_CHECK_WITHIN_NS + 2 * period)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A slice of thread `.0` from `.1` to `.2`.
    type Piece = (u32, i128, i128);

    impl Span for Piece {
        fn span(&self) -> (i128, i128) {
            (self.1, self.2)
        }
        fn part(self, start: i128, end: i128) -> Piece {
            (self.0, start, end)
        }
    }

    #[test]
    fn spans_are_read_onto_the_trace_clock_sorted_and_joined_and_bad_ones_passed_over() {
        let value = json!([
            [50, 60],
            [10, 20],
            [15, 30],
            [40, 40],
            [70],
            "x",
            [80, 90.5]
        ]);
        assert_eq!(read(Some(&value), 1000), vec![(1010, 1030), (1050, 1060)]);
        assert!(read(None, 0).is_empty());
        assert!(read(Some(&json!({"a": 1})), 0).is_empty());
    }

    #[test]
    fn a_process_stopped_to_the_end_keeps_nothing_past_the_recording() {
        // Stopped from the recording's start (100) to its end (1000); the samples' slices run
        // from 90 to 1050 on the trace's clock: nothing of them is time the process ran.
        let mut slices: Vec<Piece> = vec![(1, 90, 500), (1, 500, 1050), (2, 90, 1050)];
        keep_time_it_ran(&mut slices, &[(100, 1000)], Some((100, 1000)));
        assert_eq!(slices, Vec::<Piece>::new());
        // Running, the window still bounds them.
        let mut running: Vec<Piece> = vec![(1, 90, 500), (2, 600, 1050)];
        keep_time_it_ran(&mut running, &[], Some((100, 1000)));
        assert_eq!(running, vec![(1, 100, 500), (2, 600, 1000)]);
        // Without a window (another tool's file), only the stops cut.
        let mut unknown: Vec<Piece> = vec![(1, 90, 1050)];
        keep_time_it_ran(&mut unknown, &[(100, 1000)], None);
        assert_eq!(unknown, vec![(1, 90, 100), (1, 1000, 1050)]);
    }

    #[test]
    fn a_slice_is_cut_where_a_stop_lies_inside_it_and_dropped_where_a_stop_covers_it() {
        let mut slices: Vec<Piece> = vec![
            (1, 0, 100),   // two stops inside: three parts
            (2, 25, 35),   // inside the first stop: gone
            (3, 110, 120), // after every stop: kept whole
            (4, 5, 30),    // ends inside the first stop: its start kept
            (5, 40, 60),   // between the stops, touching both: kept whole
        ];
        cut_out(&mut slices, &[(20, 40), (60, 70)]);
        assert_eq!(
            slices,
            vec![
                (1, 0, 20),
                (1, 40, 60),
                (1, 70, 100),
                (3, 110, 120),
                (4, 5, 20),
                (5, 40, 60)
            ]
        );
    }

    #[test]
    fn a_stop_found_at_the_first_checks_began_with_the_recording() {
        let ms = 1_000_000;
        assert!(began_with_the_recording(
            &[(1000 + 3 * ms, 1000 + 900 * ms)],
            1000,
            10_000.0
        ));
        // A stop that came later is another: the one at the start was not a span.
        assert!(!began_with_the_recording(
            &[(1000 + 400 * ms, 1000 + 900 * ms)],
            1000,
            10_000.0
        ));
        assert!(!began_with_the_recording(&[], 1000, 10_000.0));
        // At 1 Hz the first check may come a second in.
        assert!(began_with_the_recording(
            &[(1000 + 1500 * ms, 1000 + 9000 * ms)],
            1000,
            1.0
        ));
    }
}
