//! Inference over a stream of samples: each `Sample` (infer/sample.rs) in, the intervals, hand-offs,
//! held-while-blocked stretches and waiter counts it settles out, as `Finding`s. Pure: it never reads
//! memory, /proc or a clock, so a saved stream replays into the same records as the live run, and
//! every rule can be run on recorded samples (docs/classification.md has the rules).

use crate::infer::classify::{Basis, Census, asleep_elsewhere, census};
use crate::infer::counted_out::count_if_asleep_in_wait;
use crate::infer::findings::{Finding, LiveSnapshot};
use crate::infer::gil_flag_rule::{FlagDecider, FlagStats};
use crate::infer::handoff_age::HandoffAge;
use crate::infer::held_blocked::blocking_syscall;
use crate::infer::intervals::{GilState, TimelineParams};
use crate::infer::parked::{Parked, placed_asleep_outside};
use crate::infer::quiet::{QuietWatch, params_for};
use crate::infer::rules::DecisionCounts;
use crate::infer::sample::{Sample, SampleContext, ThreadSample, Wants};
use crate::infer::thread::ThreadInference;
use crate::infer::thread_step::{decide, hold_back, note_hold, want_for_next};
use crate::observed::Waiters;

/// What inference counted over a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct InferenceCounts {
    /// How often each rule decided a thread, by decision.
    pub decisions: DecisionCounts,
    /// Threads classified, summed over the samples.
    pub thread_samples: u64,
    /// Hand-offs seen between two samples' holders.
    pub handoffs_seen: u64,
    /// `switch_number` advanced by this much over the recording: the interpreter's own count.
    pub handoffs_counted: u64,
    /// Threads decided in `take_gil` at their sample, summed over the samples (held-back stretches
    /// settled later are not in it, as in the `GIL waiters` track).
    pub waiting_samples: u64,
    /// Of those, the ones at samples that found the GIL free: most likely woken to take it and
    /// without a CPU yet (busy cores, report/text.rs).
    pub waiting_samples_gil_free: u64,
    /// What 3.15's own GIL flags decided; `None` where the target has none.
    pub gil_flags: Option<FlagStats>,
}

/// One thread's outcome at the last sample, where it was decided then (a thread in a held-back
/// stretch is not): what the sampler needs to read stacks (sampler/stack_watch.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    /// The thread's position in the last sample's `threads`.
    pub index: usize,
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    /// Its state at the sample before, if that one decided it.
    pub previous: Option<GilState>,
    /// Its state at the last sample.
    pub state: GilState,
    /// The samples before this one left a gap (`TimelineParams::max_gap_ns`): the trace's interval
    /// ended before this sample though the state may go on. A hold watched across it is written as
    /// two `hold_gil` slices, and each needs what the watch saw so far.
    pub after_gap: bool,
    /// The samples before this one were held back (rule 9) and settle now: whatever they settle
    /// as, the trace's interval before them ended there (a hold on both sides is two holds).
    pub after_stretch: bool,
}

/// How one thread was decided at a sample (`gilsample replay --explain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explained {
    /// The state the thread was placed in at that sample.
    pub state: GilState,
    /// How it was decided: read directly, by which rule, or held back (rule 9).
    pub basis: Basis,
}

/// The inference engine of one target: takes its samples one by one (`step`) and hands out the
/// `Finding`s they settle; it keeps each thread's open interval and held-back stretch in between.
pub struct Engine {
    ctx: SampleContext,
    /// Per thread of the last sample (by index), how it was decided; kept only when explaining.
    explained: Option<Vec<(usize, Explained)>>,
    params: TimelineParams,
    /// In the order of the last sample's threads.
    threads: Vec<ThreadInference>,
    /// The tid of the holder at the last sample that saw one (hand-offs seen).
    prev_holder_tid: Option<u32>,
    /// The thread last classified as holding, and when: hand-off arrows join two such samples, so
    /// both ends lie inside `hold_gil` slices (the GIL's own words can name a holder that the rules
    /// place in take/drop, e.g. one asleep on the GIL's mutex).
    last_hold: Option<(u32, u64)>,
    /// The threads placed in `take_gil` at the last sample (`Finding::WaitingThreads`).
    waiting_threads: Option<u32>,
    /// The switch interval last passed on (`Finding::SwitchInterval`).
    switch_interval_us: Option<u64>,
    first_switch: Option<u64>,
    handoff_age: HandoffAge,
    flags: Option<FlagDecider>,
    counts: InferenceCounts,
    decided: Vec<Decided>,
    holder_tid: Option<u32>,
    quiet: QuietWatch,
    /// What the threads of the last sample want read at the next (`wants`).
    wanted: Wants,
    /// The tids of `threads`, in their order: matched against each sample's without touching the
    /// threads' own state.
    tids: Vec<u32>,
    /// Threads asleep outside the GIL, left unstepped (infer/parked.rs).
    parked: Parked,
}

/// What every thread of one sample is stepped against.
struct SampleFacts {
    /// What the waiter counts say about the threads running without the GIL.
    census: Census,
    /// The last hand-off is younger than the switch interval: nobody can have asked for a switch.
    no_switch_request: bool,
    params: TimelineParams,
    /// The sample comes after a gap, which ends every open interval: no parked thread stays parked.
    gap: bool,
}

/// What a sample's threads moved, gathered while they are stepped, for the whole sample's counts.
#[derive(Clone, Copy, Default)]
struct Moved {
    /// Threads placed in `take_gil`.
    taking: u32,
    /// A thread was placed in `take_gil` or `drop_gil`, or held back undecided (quiet.rs).
    gil_waits: bool,
    /// A stretch is held back after the sample.
    pending: bool,
}

impl Engine {
    /// An engine for one recording of the target that `ctx` describes.
    pub fn new(ctx: SampleContext) -> Engine {
        let flags = ctx.gil_flags.then_some(FlagDecider {
            check_direct: ctx.check_gil_flags,
            ..FlagDecider::default()
        });
        Engine {
            params: TimelineParams::for_period(ctx.period_ns.max(1)),
            ctx,
            explained: None,
            threads: Vec::with_capacity(64),
            prev_holder_tid: None,
            last_hold: None,
            waiting_threads: None,
            switch_interval_us: None,
            first_switch: None,
            handoff_age: HandoffAge::default(),
            flags,
            counts: InferenceCounts::default(),
            decided: Vec::with_capacity(64),
            holder_tid: None,
            quiet: QuietWatch::default(),
            wanted: Wants::default(),
            tids: Vec::with_capacity(64),
            parked: Parked::default(),
        }
    }

    /// Keep how each thread was decided at each sample, for `explained`.
    pub fn explain(&mut self) {
        self.explained = Some(Vec::new());
        self.parked.disable(&mut self.threads);
    }

    /// Step every thread at every sample, parked or not (infer/parked.rs): what tests compare
    /// parking against.
    pub fn without_parking(&mut self) {
        self.parked.disable(&mut self.threads);
    }

    /// Thread-samples left unstepped because the thread was parked (infer/parked.rs).
    pub fn parked_thread_samples(&self) -> u64 {
        self.parked.skipped()
    }

    /// How each thread of the last sample was decided (by its index in the sample); empty unless
    /// `explain` was called.
    pub fn explained(&self) -> &[(usize, Explained)] {
        self.explained.as_deref().unwrap_or(&[])
    }

    /// What stays the same for the whole recording: the sampling period, the GIL's wait ranges and
    /// which readings the target has.
    pub fn context(&self) -> &SampleContext {
        &self.ctx
    }

    /// What inference has counted so far (decisions, hand-offs, waiting samples, 3.15 flag
    /// decisions).
    pub fn counts(&self) -> InferenceCounts {
        InferenceCounts {
            gil_flags: self.flags.map(|f| f.stats),
            ..self.counts
        }
    }

    /// The threads decided at the last sample, with their states before and now. A parked thread
    /// (infer/parked.rs) is not among them: it stayed released, asleep outside the GIL, as it was
    /// decided at a sample before, which nothing that watches decisions needs to see again.
    pub fn decided(&self) -> &[Decided] {
        &self.decided
    }

    /// The tid of the GIL's holder at the last sample, where it was one of the threads.
    pub fn holder_tid(&self) -> Option<u32> {
        self.holder_tid
    }

    /// Whether the GIL's words should be read again after the kernel readings of `sample`: where
    /// the holder they name was seen asleep in a syscall other than the GIL's own waits. It may
    /// have let the GIL go between the reads and then slept (`time.sleep` does), which the second
    /// read tells apart from a holder asleep with the GIL (infer/held_blocked.rs). Rare: a holder
    /// runs.
    pub fn wants_word_again(&self, sample: &Sample) -> bool {
        let ranges = &self.ctx.ranges;
        let entries = sample.threads.iter().enumerate();
        let looked_at = entries.filter(|&(index, _)| !sample.is_unchanged_outside(index));
        looked_at.map(|(_, seen)| seen).any(|seen| {
            sample.holds(seen)
                && blocking_syscall(seen.kernel, |addr| ranges.contains(addr)).is_some()
        })
    }

    /// Whether the waiter counts should be read again after the kernel readings of `sample` (before
    /// it is stepped): only when the census they confirm would decide something. It is computed from
    /// the first counts alone, so where that census is `Unknown` a second read cannot change it; a
    /// `NoneWaiting` census decides only threads last seen in `take_gil` that now run without the
    /// GIL. Skipping the read where it decides nothing leaves every classification as it was (the
    /// golden streams' replays are checked so in tests/replay.rs).
    pub fn wants_recount(&self, sample: &Sample) -> bool {
        let Some(counted) = sample.waiters else {
            return false;
        };
        // As if the second read agreed with the first.
        match self.census_of(sample, Some(counted)) {
            Census::Unknown => false,
            Census::AllTaking | Census::AllDropping => true,
            Census::NoneWaiting => {
                // New or gone threads: their last states are not matched up yet.
                !self.has_the_threads_of(sample)
                    || self.threads.iter().zip(&sample.threads).enumerate().any(
                        |(index, (thread, seen))| {
                            !sample.is_unchanged_outside(index)
                                && seen.runs()
                                && !sample.holds(seen)
                                && thread.timeline.current() == Some(GilState::Take)
                        },
                    )
            }
        }
    }

    /// What the next sample should read beyond the GIL and the kernel states: schedstat where a rule
    /// compares it with an earlier one (a held-back stretch's CPU arrival, rule 8's arrivals since a
    /// sleep in `take_gil`, rule 9's wake-ups since holding). Gathered while the last sample was
    /// stepped (`want_for_next`), not in another walk over the threads.
    pub fn wants(&self, out: &mut Wants) {
        out.schedstat_always
            .clone_from(&self.wanted.schedstat_always);
        out.schedstat_if_running
            .clone_from(&self.wanted.schedstat_if_running);
        out.skip_periods = self.quiet.skip_periods(self.ctx.period_ns);
    }

    /// One sample in; what it settles goes to `sink`.
    pub fn step(&mut self, sample: &Sample, sink: &mut dyn FnMut(Finding)) {
        let params = params_for(self.params, sample);
        let gap = self.note_gap(sample.t_ns, &params, sink);
        self.follow_threads(sample, &params, gap, sink);
        self.note_switch_interval(sample, sink);
        let word = sample.word;
        self.handoff_age.observe(word.switch_number, sample.woke_ns);
        let facts = SampleFacts {
            census: self.census(sample),
            no_switch_request: word.interval_us.is_some_and(|interval_us| {
                self.handoff_age.younger_than(interval_us, sample.read_ns)
            }),
            params,
            gap,
        };
        self.decided.clear();
        self.holder_tid = None;
        self.wanted.schedstat_always.clear();
        self.wanted.schedstat_if_running.clear();
        if let Some(explained) = self.explained.as_mut() {
            explained.clear();
        }
        // Taken out for the loop, so that each thread's step may use the rest of the engine.
        let mut threads = std::mem::take(&mut self.threads);
        let mut moved = Moved::default();
        for (index, (thread, seen)) in threads.iter_mut().zip(&sample.threads).enumerate() {
            // Placed outside as at the sample before, which parked it: left there unlooked at.
            if sample.is_unchanged_outside(index) && self.parked.stays(index, true, facts.gap) {
                continue;
            }
            let step = self.step_thread(index, thread, seen, sample, &facts, sink);
            moved.taking += step.taking;
            moved.gil_waits |= step.gil_waits;
            moved.pending |= step.pending;
        }
        self.threads = threads;
        self.parked.stepped(sample.t_ns, word.switch_number);
        self.after_sample(sample, moved, sink);
    }

    /// Whether a sample at `t_ns` comes after a gap in the samples; if so, the time no interval
    /// will cover goes to `sink` (`Finding::Gap`): from half a period after the last sample to half
    /// a period before this one, where the timeline ends and begins the intervals around it.
    fn note_gap(&self, t_ns: u64, params: &TimelineParams, sink: &mut dyn FnMut(Finding)) -> bool {
        let Some(last_ns) = self.parked.gap_before(t_ns, params.max_gap_ns) else {
            return false;
        };
        let (from_ns, to_ns) = (last_ns + params.half(), t_ns.saturating_sub(params.half()));
        if to_ns > from_ns {
            sink(Finding::Gap { from_ns, to_ns });
        }
        true
    }

    /// Thread `index` of `sample` (`seen`): decided, its stretch held back or its interval
    /// observed; what it moved, for the sample's counts.
    fn step_thread(
        &mut self,
        index: usize,
        thread: &mut ThreadInference,
        seen: &ThreadSample,
        sample: &Sample,
        facts: &SampleFacts,
        sink: &mut dyn FnMut(Finding),
    ) -> Moved {
        let mut moved = Moved::default();
        let (t, word, params, ranges) = (sample.t_ns, sample.word, &facts.params, self.ctx.ranges);
        let asleep_outside_gil = seen.kernel.is_some_and(|k| asleep_elsewhere(&k, &ranges));
        let outside = placed_asleep_outside(asleep_outside_gil, seen, sample);
        if self.parked.stays(index, outside, facts.gap) {
            return moved;
        }
        self.parked.catch_up(index, thread);
        let holds = sample.holds(seen);
        if holds {
            self.holder_tid = Some(thread.tid);
        }
        let previous = thread.timeline.current();
        let mut decision = decide(
            thread,
            seen,
            asleep_outside_gil,
            sample,
            facts.census,
            facts.no_switch_request,
            &ranges,
        );
        if let Some(flags) = self.flags.as_mut() {
            decision = flags.decide(seen.gil_flags, decision, holds || !word.locked);
        }
        let (state, basis) = decision;
        if let Some(explained) = self.explained.as_mut() {
            explained.push((index, Explained { state, basis }));
        }
        let asleep_in = blocking_syscall(seen.kernel, |addr| ranges.contains(addr))
            .filter(|_| !(sample.holds(seen) && sample.holder_let_go_during_reads()));
        thread.blocked.observe(
            thread.tid,
            t,
            (state == GilState::Hold, asleep_in),
            params,
            &mut |s| sink(Finding::HeldWhileBlocked(s)),
        );
        thread.take_sleep_slices = match (state, basis) {
            (GilState::Take, Basis::Direct) => seen.slices_before_sleep,
            (_, Basis::Ambiguous { .. }) => thread.take_sleep_slices,
            _ => None,
        };
        let decisions = &mut self.counts.decisions;
        match basis {
            Basis::Ambiguous { after } => {
                hold_back(
                    thread, seen, after, previous, sample, params, decisions, sink,
                );
                moved.gil_waits = true;
            }
            Basis::Direct | Basis::Rule(_) => {
                if let Basis::Rule(decision) = basis {
                    decisions.count(decision);
                }
                let after_stretch = thread.pending.is_some();
                if after_stretch {
                    let next = thread
                        .definite_switch
                        .map(|before| (state, word.switch_number.wrapping_sub(before)));
                    thread.settle(Some((t, seen.schedstat)), next, params, decisions, sink);
                }
                thread.definite_switch = Some(word.switch_number);
                if state == GilState::Hold {
                    self.last_hold = Some(note_hold(thread, seen, self.last_hold, t, sink));
                    thread.hold_handoff_after = self.handoff_age.after_ns();
                }
                self.decided.push(Decided {
                    index,
                    tid: thread.tid,
                    previous,
                    state,
                    after_gap: thread.timeline.gap_before(t, params),
                    after_stretch,
                });
                thread
                    .timeline
                    .observe(t, state, params, &mut |iv| sink(Finding::Interval(iv)));
                moved.taking = u32::from(state == GilState::Take);
                moved.gil_waits = matches!(state, GilState::Take | GilState::Drop);
            }
        }
        moved.pending = thread.pending.is_some();
        want_for_next(thread, &mut self.wanted);
        self.parked.stepped_thread(index, outside);
        moved
    }

    /// A new switch interval goes out before this sample's intervals: the trace judges the holds
    /// they close against it.
    fn note_switch_interval(&mut self, sample: &Sample, sink: &mut dyn FnMut(Finding)) {
        let interval_us = sample.word.interval_us;
        if interval_us.is_some() && interval_us != self.switch_interval_us {
            self.switch_interval_us = interval_us;
            sink(Finding::SwitchInterval {
                t_ns: sample.t_ns,
                us: interval_us.unwrap_or_default(),
            });
        }
    }

    /// The counts and tracks a whole sample moves once its threads are decided: waiters, the quiet
    /// rate, hand-offs seen and counted.
    fn after_sample(&mut self, sample: &Sample, moved: Moved, sink: &mut dyn FnMut(Finding)) {
        let (word, t) = (sample.word, sample.t_ns);
        let taking = moved.taking;
        self.counts.thread_samples += self.threads.len() as u64;
        self.counts.waiting_samples += u64::from(taking);
        if !word.locked {
            self.counts.waiting_samples_gil_free += u64::from(taking);
        }
        let waits = moved.gil_waits;
        self.quiet
            .observe(sample, self.ctx.period_ns, waits, moved.pending, sink);
        if self.waiting_threads != Some(taking) {
            self.waiting_threads = Some(taking);
            sink(Finding::WaitingThreads {
                t_ns: t,
                count: taking,
            });
        }
        if let Some(tid) = self.holder_tid {
            if self.prev_holder_tid.is_some_and(|from_tid| from_tid != tid) {
                self.counts.handoffs_seen += 1;
            }
            self.prev_holder_tid = Some(tid);
        }
        let first = *self.first_switch.get_or_insert(word.switch_number);
        self.counts.handoffs_counted = word.switch_number.wrapping_sub(first);
    }

    /// What is still open at the last sample, as far as it was seen: each thread's interval and
    /// held-while-blocked stretch, ended as `finish` would end them now (a held-back stretch is not
    /// in it: it is decided within `MAX_STRETCH_NS`). For a live view (`gilsample top`, through
    /// `Finding::Live`); the trace gets these later, closed, with the same starts.
    pub fn open_so_far(&self, out: &mut LiveSnapshot) {
        let last_ns = self.parked.last_ns();
        for (index, thread) in self.threads.iter().enumerate() {
            if let Some(last_ns) = last_ns.filter(|_| self.parked.is_parked(index)) {
                let mut timeline = thread.timeline.clone();
                timeline.seen_until(last_ns);
                out.open.extend(timeline.open_so_far(&self.params));
                continue;
            }
            out.open.extend(thread.timeline.open_so_far(&self.params));
            out.open_blocked
                .extend(thread.blocked.open_so_far(thread.tid, &self.params));
        }
    }

    /// The recording ended: every thread's held-back stretch is decided and its interval closed.
    pub fn finish(&mut self, sink: &mut dyn FnMut(Finding)) {
        self.parked.catch_up_all(&mut self.threads);
        let params = self.params;
        for thread in &mut self.threads {
            thread.close(None, &params, &mut self.counts.decisions, sink);
        }
    }

    /// The tracked threads are the sample's, in its order (an unchanged entry is the sample
    /// before's thread: not looked at).
    fn has_the_threads_of(&self, sample: &Sample) -> bool {
        self.tids.len() == sample.threads.len()
            && self
                .tids
                .iter()
                .zip(&sample.threads)
                .enumerate()
                .all(|(index, (a, b))| sample.is_unchanged_outside(index) || *a == b.tid)
    }

    /// Matches the tracked threads to the sample's: threads no longer in it are gone (closed at the
    /// sample's read time, when the sampler's walk saw them missing), new ones begin. After a
    /// `gap` a gone thread's interval ends where the gap begins: its read time, earlier than the
    /// sample's, can fall within the bridged distance of its last sample though the sample does
    /// not, and the interval would reach into the gap.
    fn follow_threads(
        &mut self,
        sample: &Sample,
        params: &TimelineParams,
        gap: bool,
        sink: &mut dyn FnMut(Finding),
    ) {
        if !self.has_the_threads_of(sample) {
            self.parked.catch_up_all(&mut self.threads);
            let counts = &mut self.counts.decisions;
            let mut kept: Vec<ThreadInference> = Vec::with_capacity(sample.threads.len());
            let mut old = std::mem::take(&mut self.threads);
            let gone_at = Some(sample.read_ns).filter(|_| !gap);
            for thread in old.iter_mut() {
                if !sample.threads.iter().any(|t| t.tid == thread.tid) {
                    thread.close(gone_at, params, counts, sink);
                }
            }
            for seen in &sample.threads {
                match old.iter().position(|t| t.tid == seen.tid) {
                    Some(at) => kept.push(old.swap_remove(at)),
                    None => kept.push(ThreadInference::new(seen.tid)),
                }
            }
            self.threads = kept;
            self.tids.clear();
            self.tids.extend(sample.threads.iter().map(|t| t.tid));
        }
    }

    /// What the waiter counts say at this sample. They count only when both reads agree: a thread
    /// that entered or left a wait between them would be counted at one moment and read by the
    /// kernel at another.
    fn census(&self, sample: &Sample) -> Census {
        self.census_of(sample, sample.waiters_again)
    }

    /// The census of `sample`, with `again` as the counts' second read.
    fn census_of(&self, sample: &Sample, again: Option<Waiters>) -> Census {
        let Some(before) = sample.waiters else {
            return Census::Unknown;
        };
        if again != Some(before) {
            return Census::Unknown;
        }
        // One walk for both: with hundreds of threads, each walk over them is a cost of every tick.
        let (mut running, mut asleep) = (0, Waiters::default());
        for (index, thread) in sample.threads.iter().enumerate() {
            if sample.is_unchanged_outside(index) {
                // Asleep outside the GIL's waits: neither running nor counted.
                continue;
            }
            running += usize::from(thread.runs() && !sample.holds(thread));
            count_if_asleep_in_wait(&mut asleep, thread, &self.ctx.ranges);
        }
        if running == 0 {
            return Census::Unknown;
        }
        census(before, asleep, running, sample.all_kernel_read)
    }
}

/// The order findings leave inference in, the one rule for the live sampler and replay alike: what a
/// sample settles is held until the stacks read for that sample are out, because a stack belongs in
/// a slice those findings may close (the trace writer files each stack into the open slice of its
/// thread). Live, the stacks are read right after the step; in a stream they follow the sample.
#[derive(Default)]
pub struct StacksFirst {
    settled: Vec<Finding>,
}

impl StacksFirst {
    /// Steps `engine` on `sample`, holding what it settles; what the sample before settled goes out
    /// first (its stacks are out by now).
    pub fn step(&mut self, engine: &mut Engine, sample: &Sample, sink: &mut dyn FnMut(Finding)) {
        self.release(sink);
        engine.step(sample, &mut |finding| self.settled.push(finding));
    }

    /// What the last sample settled, once its stacks are out (and at the end).
    pub fn release(&mut self, sink: &mut dyn FnMut(Finding)) {
        self.settled.drain(..).for_each(sink);
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
