//! Trace time: Chrome Trace's timestamps in whole microseconds, from the sampler's nanoseconds,
//! rounded so that adjacent intervals stay adjacent. Used by the trace writer and the live tap alike.

/// Nanoseconds as whole microseconds, rounded to the nearest.
///
/// Epoch timestamps are written as whole microseconds: viewers read a fractional `ts` as a double,
/// which at ~1.8e15 µs resolves only 0.25 µs, so an interval's end (`ts + dur`) and the next one's
/// start stop being equal and Perfetto drops "overlapping" slices. Integers are read exactly. A
/// 10 kHz sampler places boundaries to ~100 µs, so nothing real is lost. Each boundary is rounded
/// once, so adjacent intervals stay adjacent.
pub fn whole_micros(ns: i128) -> i128 {
    (ns + 500).div_euclid(1000)
}

/// `ts` and `dur` of an interval, in whole microseconds.
pub fn span_micros(start_ns: i128, end_ns: i128) -> (i128, i128) {
    let ts = whole_micros(start_ns);
    (ts, whole_micros(end_ns) - ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_microsecond_spans_stay_adjacent() {
        // Each boundary is rounded once, so one interval's end is the next one's start.
        let boundaries = [
            1_795_994_314_349_075_812i128,
            1_795_994_314_349_176_499,
            1_795_994_314_349_276_500,
        ];
        let (ts_a, dur_a) = span_micros(boundaries[0], boundaries[1]);
        let (ts_b, dur_b) = span_micros(boundaries[1], boundaries[2]);
        assert_eq!(ts_a + dur_a, ts_b);
        assert_eq!((ts_a, dur_a, dur_b), (1_795_994_314_349_076, 100, 101));
        assert_eq!(whole_micros(-1_500), -1);
    }
}
