//! What one sample does to one tracked thread, beside its timeline: the evidence `classify` is
//! given, the shortcut for threads asleep outside the GIL, a sample held back for rule 9, a hold's
//! hand-off, and what the thread wants read at the next sample. The engine (engine.rs) calls these
//! once per thread and sample; they touch that thread's state only.

use crate::infer::classify::{Basis, Census, ThreadEvidence, classify};
use crate::infer::findings::{Finding, Handoff};
use crate::infer::handoff_age::may_have_lasted;
use crate::infer::intervals::{GilState, TimelineParams};
use crate::infer::rules::{Decision, DecisionCounts};
use crate::infer::sample::{Sample, ThreadSample, Wants};
use crate::infer::thread::{MAX_STRETCH_NS, Stretch, ThreadInference};
use crate::observed::{GilWaitRanges, KernelState};

/// How `classify` places one thread at `sample`. A thread asleep in a syscall other than a GIL
/// wait (`asleep_outside_gil`: `classify::asleep_elsewhere`, which the engine has already asked),
/// and not the holder, is released whatever else the sample says (rule 5, and `classify` checks
/// nothing before it that could apply): most threads of a large process sleep so, and placing them
/// needs none of the rest of the evidence (tests check that `classify` agrees).
pub fn decide(
    thread: &mut ThreadInference,
    seen: &ThreadSample,
    asleep_outside_gil: bool,
    sample: &Sample,
    census: Census,
    no_switch_request: bool,
    ranges: &GilWaitRanges,
) -> (GilState, Basis) {
    if asleep_outside_gil && !sample.holds(seen) {
        thread.owned_gil_mutex = sample.mutex_owner == Some(seen.their_tid);
        return (GilState::Released, Basis::Direct);
    }
    let evidence = evidence_for(thread, seen, sample, census, no_switch_request);
    thread.owned_gil_mutex = evidence.owns_gil_mutex == Some(true);
    classify(&evidence, ranges)
}

/// A thread placed in `hold_gil` at `t`: its schedstat is kept for the stretch that may follow,
/// and a hand-off from the last holder goes out. Returns the new last hold.
pub fn note_hold(
    thread: &mut ThreadInference,
    seen: &ThreadSample,
    last_hold: Option<(u32, u64)>,
    t: u64,
    sink: &mut dyn FnMut(Finding),
) -> (u32, u64) {
    thread.at_hold = seen.schedstat;
    if let Some((from_tid, last_held_ns)) = last_hold
        && from_tid != thread.tid
    {
        sink(Finding::Handoff(Handoff {
            from_tid,
            to_tid: thread.tid,
            last_held_ns,
            taken_ns: t,
        }));
    }
    (thread.tid, t)
}

/// What `thread`, as stepped, wants read at the next sample (`Engine::wants`).
pub fn want_for_next(thread: &ThreadInference, wanted: &mut Wants) {
    if thread.pending.is_some() {
        wanted.schedstat_always.push(thread.tid);
    } else if matches!(
        thread.timeline.current(),
        Some(GilState::Take | GilState::Hold | GilState::Drop)
    ) {
        wanted.schedstat_if_running.push(thread.tid);
    }
}

/// What one sample says about one tracked thread, for `classify`.
fn evidence_for(
    thread: &ThreadInference,
    seen: &ThreadSample,
    sample: &Sample,
    census: Census,
    no_switch_request: bool,
) -> ThreadEvidence {
    let word = sample.word;
    let holds = sample.holds(seen);
    let previous = thread.timeline.current();
    let owns_gil_mutex = sample.mutex_owner.map(|owner| owner == seen.their_tid);
    // Rule 8 compares a running thread last seen asleep in take_gil with that sleep, at a sample
    // where the counts place nobody running in a wait.
    let arrivals_since_take_sleep = thread
        .take_sleep_slices
        .filter(|_| {
            census == Census::NoneWaiting
                && previous == Some(GilState::Take)
                && seen.kernel == Some(KernelState::Running)
                && !holds
        })
        .and_then(|slices| Some(seen.schedstat?.timeslices.saturating_sub(slices)));
    ThreadEvidence {
        holds,
        released_last: seen.tstate == word.last_holder && !word.locked,
        kernel: seen.kernel,
        previous,
        handoffs_since_previous: thread
            .definite_switch
            .map(|p| word.switch_number.wrapping_sub(p)),
        census,
        owns_gil_mutex,
        left_gil_mutex: thread.owned_gil_mutex && owns_gil_mutex == Some(false),
        no_switch_request,
        arrivals_since_take_sleep,
    }
}

/// A sample rule 9 holds back: it joins the thread's stretch (begun here if none is open), which is
/// settled at a gap in the samples or once it has lasted `MAX_STRETCH_NS`.
#[allow(clippy::too_many_arguments)]
pub fn hold_back(
    thread: &mut ThreadInference,
    seen: &ThreadSample,
    after: GilState,
    previous: Option<GilState>,
    sample: &Sample,
    params: &TimelineParams,
    decisions: &mut DecisionCounts,
    sink: &mut dyn FnMut(Finding),
) {
    let t = sample.t_ns;
    // A stretch is a run of consecutive samples: where the sampler fell behind, the one open is
    // settled at the gap, and this sample begins the next (dropped, it would leave the time from
    // half a period before it to the next sample in no slice, and no gap: released to `report`).
    let broken = thread
        .pending
        .as_ref()
        .is_some_and(|stretch| t.saturating_sub(stretch.last_ns) > params.max_gap_ns);
    if broken {
        thread.settle(Some((t, seen.schedstat)), None, params, decisions, sink);
    }
    if thread.pending.is_none() && after == GilState::Drop && previous == Some(GilState::Take) {
        decisions.count(Decision::StretchAfterUnseenHold);
    }
    let interval_us = sample.word.interval_us;
    let stretch = thread.pending.get_or_insert_with(|| Stretch {
        before: after,
        // Judged once, when the stretch begins: the hold ended before it.
        switch_request_possible: after == GilState::Hold
            && interval_us
                .zip(thread.hold_handoff_after)
                .is_some_and(|(interval_us, since)| may_have_lasted(since, interval_us, t)),
        first_ns: t,
        last_ns: t,
        at_start: seen.schedstat,
        arrival: None,
    });
    if stretch.last_ns != t {
        stretch.watch(seen.schedstat, t);
        stretch.last_ns = t;
    }
    if t.saturating_sub(stretch.first_ns) > MAX_STRETCH_NS {
        thread.settle(Some((t, seen.schedstat)), None, params, decisions, sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asleep_outside_the_gil_is_released_whatever_else_is_known() {
        // The shortcut in `decide` must place a thread as `classify` would, on any other evidence.
        let ranges = GilWaitRanges {
            cond: Some((0x1000, 0x1030)),
            mutex: Some((0x1040, 0x1068)),
            switch_cond: Some((0x2000, 0x2030)),
            switch_mutex: Some((0x2040, 0x2068)),
            cond_waiter_words: None,
        };
        let asleep = [
            KernelState::InSyscall {
                nr: 0,
                arg0: 3,
                arg1: 0,
            },
            KernelState::InSyscall {
                nr: crate::observed::SYS_FUTEX,
                arg0: 0x9000,
                arg1: 0,
            },
            KernelState::Blocked,
        ];
        let previous = [
            None,
            Some(GilState::Take),
            Some(GilState::Hold),
            Some(GilState::Drop),
        ];
        let censuses = [
            Census::Unknown,
            Census::NoneWaiting,
            Census::AllTaking,
            Census::AllDropping,
        ];
        let mut checked = 0;
        for kernel in asleep {
            for previous in previous {
                for census in censuses {
                    for flags in 0..8u8 {
                        let evidence = ThreadEvidence {
                            holds: false,
                            released_last: flags & 1 != 0,
                            kernel: Some(kernel),
                            previous,
                            handoffs_since_previous: Some(u64::from(flags & 2 != 0)),
                            census,
                            owns_gil_mutex: Some(flags & 4 != 0),
                            left_gil_mutex: flags & 4 == 0,
                            no_switch_request: flags & 1 == 0,
                            arrivals_since_take_sleep: Some(5),
                        };
                        let placed = classify(&evidence, &ranges);
                        assert_eq!(placed, (GilState::Released, Basis::Direct), "{evidence:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 4 * 4 * 8);
    }
    #[test]
    fn a_stretch_broken_by_a_gap_is_settled_and_the_sample_after_it_begins_the_next() {
        let params = TimelineParams::for_period(100_000);
        let mut thread = ThreadInference::new(7);
        let mut intervals = Vec::new();
        let mut sink = |f: Finding| {
            if let Finding::Interval(iv) = f {
                intervals.push((iv.state, iv.start_ns, iv.end_ns));
            }
        };
        let mut decisions = DecisionCounts::default();
        let seen = ThreadSample::default();
        let at = |t_ns: u64| Sample {
            t_ns,
            ..Sample::default()
        };
        // Held back at 1.0 and 1.1 ms; the sampler then fell 0.9 ms behind (over 4 periods).
        for t in [1_000_000, 1_100_000, 2_000_000] {
            let (state, sample) = (GilState::Hold, at(t));
            hold_back(
                &mut thread,
                &seen,
                state,
                None,
                &sample,
                &params,
                &mut decisions,
                &mut sink,
            );
        }
        let stretch = thread
            .pending
            .as_ref()
            .expect("the sample after the gap is held back");
        assert_eq!((stretch.first_ns, stretch.last_ns), (2_000_000, 2_000_000));
        // The stretch before the gap ends where the gap begins: half a period after its last.
        thread.close(None, &params, &mut decisions, &mut sink);
        assert_eq!(intervals.len(), 2, "{intervals:?}");
        assert_eq!(intervals[0].2, 1_150_000);
        assert_eq!((intervals[1].1, intervals[1].2), (1_950_000, 2_050_000));
    }
}
