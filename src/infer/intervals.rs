//! The interval state machine of one thread.
//!
//! Rules (each has a unit test below):
//! - A state change between two samples is placed at their midpoint.
//! - When consecutive samples of a thread are further apart than `max_gap_ns` (the sampler fell behind,
//!   or samples of this thread were unreadable), the time between stays a gap: the open interval ends
//!   half a period after its last sample, the next starts half a period before its first.
//! - A thread first seen at `t` is taken to exist from half a period before `t`.
//! - A thread that exits closes its interval midway between its last sample and the first sample that
//!   no longer has it; at the end of a recording the interval ends half a period after its last sample.
//! - `Unknown` is a state like the others: it is never merged into a neighbour, and writers omit it.

use std::fmt;

/// What one thread is doing with the GIL at one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GilState {
    /// The thread holds the GIL.
    Hold,
    /// Waiting to take it.
    Take,
    /// Handing it off (3.x `drop_gil` waiting for another thread to take it).
    Drop,
    /// Neither: running native code without the GIL, or blocked elsewhere.
    Released,
    /// No usable reading.
    Unknown,
}

impl GilState {
    /// Every state, in the order of `index`.
    pub const ALL: [GilState; 5] = [
        GilState::Hold,
        GilState::Take,
        GilState::Drop,
        GilState::Released,
        GilState::Unknown,
    ];

    /// The Chrome trace event name, for the states that become events (the reference tool's names).
    pub fn event_name(self) -> Option<&'static str> {
        match self {
            GilState::Hold => Some("hold_gil"),
            GilState::Take => Some("take_gil"),
            GilState::Drop => Some("drop_gil"),
            GilState::Released | GilState::Unknown => None,
        }
    }

    /// The state's position in `ALL`: the index of per-state arrays such as `ThreadStats::ns`.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for GilState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GilState::Hold => "hold",
            GilState::Take => "take",
            GilState::Drop => "drop",
            GilState::Released => "released",
            GilState::Unknown => "unknown",
        })
    }
}

/// A closed interval of one thread in one state, in monotonic nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    /// The state it was in throughout.
    pub state: GilState,
    /// Start, monotonic nanoseconds.
    pub start_ns: u64,
    /// End, monotonic nanoseconds (exclusive).
    pub end_ns: u64,
}

/// The sampling geometry the rules need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineParams {
    /// Nanoseconds between ticks at the full rate.
    pub period_ns: u64,
    /// Nanoseconds without a sample after which an open interval is closed instead of extended
    /// (`GAP_PERIODS` periods).
    pub max_gap_ns: u64,
}

impl TimelineParams {
    /// Gaps longer than this many periods stay gaps.
    pub const GAP_PERIODS: u64 = 4;

    /// The geometry for ticks every `period_ns` nanoseconds.
    pub fn for_period(period_ns: u64) -> TimelineParams {
        TimelineParams {
            period_ns,
            max_gap_ns: period_ns * Self::GAP_PERIODS,
        }
    }

    /// Half a period: how far an interval reaches past its last sample, or before its first.
    pub fn half(&self) -> u64 {
        self.period_ns / 2
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Open {
    state: GilState,
    start_ns: u64,
    last_seen_ns: u64,
}

/// One thread's open interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadTimeline {
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    open: Option<Open>,
}

impl ThreadTimeline {
    /// A timeline of thread `tid` with no interval open yet.
    pub fn new(tid: u32) -> ThreadTimeline {
        ThreadTimeline { tid, open: None }
    }

    /// The state of the last observation, if the thread has an open interval.
    pub fn current(&self) -> Option<GilState> {
        self.open.map(|o| o.state)
    }

    /// Whether a sample at `t_ns` comes after a gap (`max_gap_ns`): the open interval ends before
    /// it even if the state goes on.
    pub fn gap_before(&self, t_ns: u64, params: &TimelineParams) -> bool {
        self.open
            .is_some_and(|o| t_ns.saturating_sub(o.last_seen_ns) > params.max_gap_ns)
    }

    /// The open interval as far as the samples have seen it, ended as `close(None, ..)` would end
    /// it now: for a live view, which gets the closed interval later, with the same start.
    pub fn open_so_far(&self, params: &TimelineParams) -> Option<Interval> {
        let open = self.open?;
        let end_ns = open.last_seen_ns + params.half();
        (end_ns > open.start_ns).then_some(Interval {
            tid: self.tid,
            state: open.state,
            start_ns: open.start_ns,
            end_ns,
        })
    }

    /// The open interval was seen, without a gap, at every sample up to `t_ns`, which the engine
    /// did not step one by one (infer/parked.rs).
    pub fn seen_until(&mut self, t_ns: u64) {
        if let Some(open) = self.open.as_mut() {
            open.last_seen_ns = open.last_seen_ns.max(t_ns);
        }
    }

    /// Feeds one sample; closed intervals go to `emit`. Samples must come in time order.
    pub fn observe(
        &mut self,
        t_ns: u64,
        state: GilState,
        params: &TimelineParams,
        emit: &mut impl FnMut(Interval),
    ) {
        let half = params.half();
        match self.open {
            None => {
                self.open = Some(Open {
                    state,
                    start_ns: t_ns.saturating_sub(half),
                    last_seen_ns: t_ns,
                })
            }
            Some(open) if self.gap_before(t_ns, params) => {
                let end = open.last_seen_ns + half;
                self.emit(open.state, open.start_ns, end, emit);
                self.open = Some(Open {
                    state,
                    start_ns: t_ns.saturating_sub(half).max(end),
                    last_seen_ns: t_ns,
                });
            }
            Some(open) if open.state == state => {
                self.open = Some(Open {
                    last_seen_ns: t_ns.max(open.last_seen_ns),
                    ..open
                });
            }
            Some(open) => {
                let boundary = open.last_seen_ns + t_ns.saturating_sub(open.last_seen_ns) / 2;
                self.emit(open.state, open.start_ns, boundary, emit);
                self.open = Some(Open {
                    state,
                    start_ns: boundary,
                    last_seen_ns: t_ns,
                });
            }
        }
    }

    /// Feeds a run of consecutive samples, all in `state`, from `first_ns` to `last_ns` (a stretch the
    /// sampler decided afterwards). The run itself has no gaps, so only its first sample is checked
    /// against the previous one.
    pub fn observe_run(
        &mut self,
        first_ns: u64,
        last_ns: u64,
        state: GilState,
        params: &TimelineParams,
        emit: &mut impl FnMut(Interval),
    ) {
        self.observe(first_ns, state, params, emit);
        if let Some(open) = self.open.as_mut() {
            open.last_seen_ns = open.last_seen_ns.max(last_ns);
        }
    }

    /// Closes the open interval: `gone_at_ns` is the first sample without the thread (it exited), or
    /// `None` at the end of the recording.
    pub fn close(
        &mut self,
        gone_at_ns: Option<u64>,
        params: &TimelineParams,
        emit: &mut impl FnMut(Interval),
    ) {
        let Some(open) = self.open.take() else { return };
        let end = match gone_at_ns {
            Some(gone)
                if gone > open.last_seen_ns && gone - open.last_seen_ns <= params.max_gap_ns =>
            {
                open.last_seen_ns + (gone - open.last_seen_ns) / 2
            }
            _ => open.last_seen_ns + params.half(),
        };
        self.emit(open.state, open.start_ns, end, emit);
    }

    fn emit(&self, state: GilState, start_ns: u64, end_ns: u64, emit: &mut impl FnMut(Interval)) {
        if end_ns > start_ns {
            emit(Interval {
                tid: self.tid,
                state,
                start_ns,
                end_ns,
            });
        }
    }
}

/// Runs the state machine over a whole sequence of `(t_ns, state)` samples of one thread, closing at the
/// end of the recording: the pure form of what the engine (infer/engine.rs) does incrementally.
#[cfg(test)]
pub fn infer_intervals(
    tid: u32,
    samples: &[(u64, GilState)],
    params: &TimelineParams,
) -> Vec<Interval> {
    let mut out = Vec::new();
    let mut timeline = ThreadTimeline::new(tid);
    for &(t, state) in samples {
        timeline.observe(t, state, params, &mut |iv| out.push(iv));
    }
    timeline.close(None, params, &mut |iv| out.push(iv));
    out
}

#[cfg(test)]
mod tests {
    use super::GilState::*;
    use super::*;

    const P: TimelineParams = TimelineParams {
        period_ns: 100,
        max_gap_ns: 400,
    };

    fn iv(state: GilState, start_ns: u64, end_ns: u64) -> Interval {
        Interval {
            tid: 7,
            state,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn steady_state_is_one_interval_widened_by_half_a_period() {
        let out = infer_intervals(7, &[(1000, Hold), (1100, Hold), (1200, Hold)], &P);
        assert_eq!(out, vec![iv(Hold, 950, 1250)]);
    }

    #[test]
    fn a_change_is_placed_at_the_midpoint_between_samples() {
        let out = infer_intervals(
            7,
            &[(1000, Take), (1100, Take), (1200, Hold), (1300, Hold)],
            &P,
        );
        assert_eq!(out, vec![iv(Take, 950, 1150), iv(Hold, 1150, 1350)]);
    }

    #[test]
    fn midpoint_uses_the_actual_sample_times_not_the_period() {
        let out = infer_intervals(7, &[(1000, Take), (1300, Hold)], &P);
        assert_eq!(out, vec![iv(Take, 950, 1150), iv(Hold, 1150, 1350)]);
    }

    #[test]
    fn a_gap_longer_than_max_gap_stays_a_gap() {
        let out = infer_intervals(7, &[(1000, Hold), (2000, Hold)], &P);
        assert_eq!(out, vec![iv(Hold, 950, 1050), iv(Hold, 1950, 2050)]);
    }

    #[test]
    fn a_gap_is_told_before_the_sample_after_it_is_fed() {
        let mut timeline = ThreadTimeline::new(7);
        assert!(!timeline.gap_before(1000, &P), "nothing open");
        timeline.observe(1000, Hold, &P, &mut |_| {});
        assert!(!timeline.gap_before(1000 + P.max_gap_ns, &P));
        assert!(timeline.gap_before(1001 + P.max_gap_ns, &P));
    }

    #[test]
    fn a_gap_across_a_state_change_is_not_bridged() {
        let out = infer_intervals(7, &[(1000, Take), (2000, Hold)], &P);
        assert_eq!(out, vec![iv(Take, 950, 1050), iv(Hold, 1950, 2050)]);
    }

    #[test]
    fn an_exiting_thread_closes_midway_to_the_sample_that_misses_it() {
        let mut out = Vec::new();
        let mut timeline = ThreadTimeline::new(7);
        timeline.observe(1000, Hold, &P, &mut |i| out.push(i));
        timeline.observe(1100, Hold, &P, &mut |i| out.push(i));
        timeline.close(Some(1200), &P, &mut |i| out.push(i));
        assert_eq!(out, vec![iv(Hold, 950, 1150)]);
        assert_eq!(timeline.current(), None);
    }

    #[test]
    fn an_exit_noticed_late_closes_half_a_period_after_the_last_sample() {
        let mut out = Vec::new();
        let mut timeline = ThreadTimeline::new(7);
        timeline.observe(1000, Take, &P, &mut |i| out.push(i));
        timeline.close(Some(9000), &P, &mut |i| out.push(i));
        assert_eq!(out, vec![iv(Take, 950, 1050)]);
    }

    #[test]
    fn a_run_decided_afterwards_is_one_interval_however_long() {
        let mut out = Vec::new();
        let mut timeline = ThreadTimeline::new(7);
        timeline.observe(1000, Hold, &P, &mut |i| out.push(i));
        timeline.observe_run(1100, 3000, Drop, &P, &mut |i| out.push(i));
        timeline.observe(3100, Take, &P, &mut |i| out.push(i));
        timeline.close(None, &P, &mut |i| out.push(i));
        assert_eq!(
            out,
            vec![
                iv(Hold, 950, 1050),
                iv(Drop, 1050, 3050),
                iv(Take, 3050, 3150)
            ]
        );
    }

    #[test]
    fn the_open_interval_so_far_ends_where_the_recording_ending_now_would_end_it() {
        let mut timeline = ThreadTimeline::new(7);
        assert_eq!(timeline.open_so_far(&P), None);
        let mut out = Vec::new();
        timeline.observe(1000, Take, &P, &mut |i| out.push(i));
        timeline.observe(1100, Take, &P, &mut |i| out.push(i));
        assert_eq!(timeline.open_so_far(&P), Some(iv(Take, 950, 1150)));
        timeline.observe(1200, Hold, &P, &mut |i| out.push(i));
        // The closed one has the start the open one had; the next one is open from the midpoint.
        assert_eq!(out, vec![iv(Take, 950, 1150)]);
        assert_eq!(timeline.open_so_far(&P), Some(iv(Hold, 1150, 1250)));
        timeline.close(None, &P, &mut |i| out.push(i));
        assert_eq!(out.last(), Some(&iv(Hold, 1150, 1250)));
        assert_eq!(timeline.open_so_far(&P), None);
    }

    #[test]
    fn unknown_stays_unknown_and_is_not_absorbed_by_neighbours() {
        let out = infer_intervals(7, &[(1000, Hold), (1100, Unknown), (1200, Hold)], &P);
        assert_eq!(
            out,
            vec![
                iv(Hold, 950, 1050),
                iv(Unknown, 1050, 1150),
                iv(Hold, 1150, 1250)
            ]
        );
    }

    #[test]
    fn intervals_of_a_thread_never_overlap_and_cover_its_span() {
        let states = [Take, Hold, Hold, Drop, Released, Take, Take, Hold];
        let samples: Vec<(u64, GilState)> = states
            .iter()
            .enumerate()
            .map(|(i, &s)| (1000 + 97 * i as u64, s))
            .collect();
        let out = infer_intervals(7, &samples, &P);
        for pair in out.windows(2) {
            assert_eq!(pair[0].end_ns, pair[1].start_ns);
            assert_ne!(pair[0].state, pair[1].state);
        }
        assert_eq!(out.first().unwrap().start_ns, 950);
        assert_eq!(out.last().unwrap().end_ns, samples.last().unwrap().0 + 50);
    }
}
