//! What inference keeps per thread between samples: its timeline, the stretch it is holding back
//! (classify.rs, rule 9), and the few readings of earlier samples the rules compare against.

use crate::infer::classify::{
    Arrival, back_in_take_after_a_switch_request, settle_in_hindsight, settle_stretch,
    woke_twice_since_holding,
};
use crate::infer::findings::Finding;
use crate::infer::held_blocked::HeldWhileBlocked;
use crate::infer::intervals::{GilState, ThreadTimeline, TimelineParams};
use crate::infer::rules::{Decision, DecisionCounts};
use crate::observed::SchedStat;

/// A stretch still undecided after this long is settled with what is known; a thread waiting for a CPU
/// that long is rare, and holding samples back longer would delay the trace.
pub const MAX_STRETCH_NS: u64 = 50_000_000;

/// What the engine keeps of one thread between samples: its timeline, its held-back stretch and
/// what the rules compare with the thread's earlier samples.
pub struct ThreadInference {
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    /// Its open interval.
    pub timeline: ThreadTimeline,
    /// `switch_number` at the thread's last definite sample.
    pub definite_switch: Option<u64>,
    /// Running samples after a GIL state, held back until the thread is seen in a definite state again.
    pub pending: Option<Stretch>,
    /// schedstat at the thread's last sample as the GIL holder: the one before a stretch after `Hold`,
    /// since a stretch ends before the thread can hold again.
    pub at_hold: Option<SchedStat>,
    /// It held the GIL's mutex at its last sample (classify.rs, rule 6).
    pub owned_gil_mutex: bool,
    /// At its last sample as the holder: the hand-off that made it the holder came after this.
    pub hold_handoff_after: Option<u64>,
    /// schedstat's arrival count while it slept in `take_gil` at its last definite sample, where
    /// the sleep proof covered that sleep (classify.rs, rule 8).
    pub take_sleep_slices: Option<u64>,
    /// A stretch of holding the GIL while asleep in a syscall, being seen.
    pub blocked: HeldWhileBlocked,
}

/// An ambiguous stretch of one thread (classify.rs, rule 9).
#[derive(Clone, Copy, Debug)]
pub struct Stretch {
    /// The thread's definite state before the stretch.
    pub before: GilState,
    /// Monotonic nanoseconds of the stretch's first sample.
    pub first_ns: u64,
    /// Monotonic nanoseconds of its last sample so far.
    pub last_ns: u64,
    /// schedstat at the stretch's first sample.
    pub at_start: Option<SchedStat>,
    /// When the thread got a CPU, once a sample has seen it.
    pub arrival: Option<Arrival>,
    /// After `Hold`: the hold may have lasted a switch interval by the stretch's first sample, so a
    /// waiter may have asked it to switch.
    pub switch_request_possible: bool,
}

impl Stretch {
    /// Looks at schedstat (`now`, read at sample `t`) for the thread getting a CPU.
    pub fn watch(&mut self, now: Option<SchedStat>, t: u64) {
        if self.arrival.is_some() {
            return;
        }
        if let (Some(start), Some(now)) = (self.at_start, now)
            && now.run_queue_ns > start.run_queue_ns
        {
            self.arrival = Some(Arrival {
                before_ns: self.last_ns,
                seen_ns: t,
                queued_ns: now.run_queue_ns - start.run_queue_ns,
            });
        }
    }
}

impl ThreadInference {
    /// A thread seen for the first time: nothing known yet.
    pub fn new(tid: u32) -> ThreadInference {
        ThreadInference {
            tid,
            timeline: ThreadTimeline::new(tid),
            definite_switch: None,
            pending: None,
            at_hold: None,
            owned_gil_mutex: false,
            hold_handoff_after: None,
            take_sleep_slices: None,
            blocked: HeldWhileBlocked::default(),
        }
    }

    /// Decides the pending stretch and feeds it to the timeline. `t` is the first sample after the
    /// stretch with its schedstat (`None` when the thread is gone or the recording ends), which may
    /// still show the thread's CPU arrival; `next` is that sample's definite state and the hand-offs
    /// since the definite sample before the stretch, when it has one.
    pub fn settle(
        &mut self,
        t: Option<(u64, Option<SchedStat>)>,
        next: Option<(GilState, u64)>,
        params: &TimelineParams,
        counts: &mut DecisionCounts,
        sink: &mut dyn FnMut(Finding),
    ) {
        let Some(mut stretch) = self.pending.take() else {
            return;
        };
        let emit = &mut |iv| sink(Finding::Interval(iv));
        if let Some(state) =
            next.and_then(|(next, handoffs)| settle_in_hindsight(stretch.before, next, handoffs))
        {
            counts.count(Decision::StretchByHandoffs);
            counts.count(if state == GilState::Released {
                Decision::StretchReleased
            } else {
                Decision::StretchInGilCall
            });
            self.timeline
                .observe_run(stretch.first_ns, stretch.last_ns, state, params, emit);
            return;
        }
        if let Some((t, schedstat)) = t
            && stretch.arrival.is_none()
        {
            stretch.watch(schedstat, t);
        }
        let (woke_twice, back_after_switch) = match (stretch.before, self.at_hold, stretch.at_start)
        {
            (GilState::Hold, Some(at_hold), Some(at_start)) => {
                let woke_twice = woke_twice_since_holding(at_hold, at_start);
                let back = !woke_twice
                    && stretch.switch_request_possible
                    && back_in_take_after_a_switch_request(at_hold, at_start);
                (woke_twice, back)
            }
            _ => (false, false),
        };
        let before = if woke_twice || back_after_switch {
            GilState::Take
        } else {
            stretch.before
        };
        let in_call = settle_stretch(before, stretch.first_ns, stretch.arrival, params.period_ns);
        let released_from = match in_call {
            Some((state, until)) => {
                counts.count(Decision::StretchInGilCall);
                if woke_twice {
                    counts.count(Decision::StretchWokenTwice);
                }
                if back_after_switch {
                    counts.count(Decision::StretchBackAfterSwitchRequest);
                }
                self.timeline
                    .observe_run(stretch.first_ns, until, state, params, emit);
                stretch.arrival.map(|a| a.seen_ns)
            }
            None => {
                counts.count(Decision::StretchReleased);
                Some(stretch.first_ns)
            }
        };
        if let Some(from) = released_from.filter(|&from| from <= stretch.last_ns) {
            self.timeline
                .observe_run(from, stretch.last_ns, GilState::Released, params, emit);
        }
    }

    /// The thread is gone (`at`: when that was seen) or the recording ends (`None`): everything held
    /// back is decided and the open interval closed.
    pub fn close(
        &mut self,
        at: Option<u64>,
        params: &TimelineParams,
        counts: &mut DecisionCounts,
        sink: &mut dyn FnMut(Finding),
    ) {
        self.settle(None, None, params, counts, sink);
        self.timeline
            .close(at, params, &mut |iv| sink(Finding::Interval(iv)));
        self.blocked.close(self.tid, at, params, &mut |s| {
            sink(Finding::HeldWhileBlocked(s))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(timeslices: u64, run_queue_ns: u64) -> SchedStat {
        SchedStat {
            cpu_ns: 1_000_000,
            run_queue_ns,
            timeslices,
        }
    }

    /// What a former holder is taken to be during a stretch, given schedstat at its hold sample and at
    /// the stretch's first sample. The stretch: held at 1.0 ms, running at 1.1–1.3 ms while waiting
    /// for a CPU since before 1.1 ms, got it by 1.4 ms, seen in `take_gil` there (one hand-off).
    fn stretch_state(at_hold: SchedStat, at_start: SchedStat) -> (GilState, DecisionCounts) {
        stretch_state_after(at_hold, at_start, false)
    }

    /// The same, for a hold that may (`long_hold`) or may not have lasted a switch interval.
    fn stretch_state_after(
        at_hold: SchedStat,
        at_start: SchedStat,
        long_hold: bool,
    ) -> (GilState, DecisionCounts) {
        let params = TimelineParams::for_period(100_000);
        let mut counts = DecisionCounts::default();
        let mut intervals = Vec::new();
        let mut sink = |record| {
            if let Finding::Interval(iv) = record {
                intervals.push(iv)
            }
        };
        let mut thread = ThreadInference::new(1234);
        thread.at_hold = Some(at_hold);
        thread
            .timeline
            .observe(1_000_000, GilState::Hold, &params, &mut |iv| {
                sink(Finding::Interval(iv))
            });
        thread.pending = Some(Stretch {
            before: GilState::Hold,
            first_ns: 1_100_000,
            last_ns: 1_300_000,
            at_start: Some(at_start),
            switch_request_possible: long_hold,
            arrival: Some(Arrival {
                before_ns: 1_300_000,
                seen_ns: 1_400_000,
                queued_ns: 350_000,
            }),
        });
        thread.settle(
            Some((1_400_000, None)),
            Some((GilState::Take, 1)),
            &params,
            &mut counts,
            &mut sink,
        );
        thread
            .timeline
            .observe(1_400_000, GilState::Take, &params, &mut |iv| {
                sink(Finding::Interval(iv))
            });
        thread
            .timeline
            .close(None, &params, &mut |iv| sink(Finding::Interval(iv)));
        let at = |t: u64| {
            intervals
                .iter()
                .find(|iv| iv.start_ns <= t && t < iv.end_ns)
                .map(|iv| iv.state)
        };
        (at(1_200_000).unwrap(), counts)
    }

    #[test]
    fn a_former_holder_woken_twice_onto_a_cpu_is_in_take_gil() {
        let (state, counts) = stretch_state(stat(10, 500), stat(12, 500));
        assert_eq!(state, GilState::Take);
        assert_eq!(counts.get(Decision::StretchWokenTwice), 1);
        assert_eq!(counts.get(Decision::StretchInGilCall), 1);
    }

    #[test]
    fn a_long_holder_that_got_a_cpu_three_times_is_back_in_take_gil() {
        // Three arrivals with run-queue waits: after a switch request, drop_gil's wait and
        // take_gil's.
        let (state, counts) = stretch_state_after(stat(10, 500), stat(13, 900), true);
        assert_eq!(state, GilState::Take);
        assert_eq!(counts.get(Decision::StretchBackAfterSwitchRequest), 1);
        assert_eq!(counts.get(Decision::StretchWokenTwice), 0);
        // A hold too short to be asked to switch: preempted over and over inside drop_gil.
        let (state, counts) = stretch_state_after(stat(10, 500), stat(13, 900), false);
        assert_eq!(state, GilState::Drop);
        assert_eq!(counts.get(Decision::StretchBackAfterSwitchRequest), 0);
        // Two arrivals with a wait are not enough, however long the hold.
        let (state, _) = stretch_state_after(stat(10, 500), stat(12, 900), true);
        assert_eq!(state, GilState::Drop);
    }

    #[test]
    fn a_former_holder_that_waited_on_a_run_queue_is_still_in_drop_gil() {
        for at_start in [stat(12, 900), stat(11, 500)] {
            let (state, counts) = stretch_state(stat(10, 500), at_start);
            assert_eq!(state, GilState::Drop, "{at_start:?}");
            assert_eq!(counts.get(Decision::StretchWokenTwice), 0);
        }
    }
}
