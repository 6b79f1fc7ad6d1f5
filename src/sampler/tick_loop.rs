//! The sampling loop of one target: reading only. Inference is infer/engine.rs's.
//!
//! Each tick, at an absolute CLOCK_MONOTONIC deadline: one read of the GIL words from target memory,
//! which brings glibc's waiter counts and `gil.cond` in the same system call (the counts are read
//! again after the kernel readings when a thread runs without the GIL), one `pread` of each Python
//! thread's syscall file where thread_reads.rs cannot spare it (idle threads, waiters proven still
//! waiting, sleeps schedstat proves unchanged, running threads whose schedstat the engine wants and
//! which it proves still running: that schedstat is read just before the thread's syscall file),
//! and what else the engine asked for at the last tick (the other threads' schedstat, after the
//! kernel readings; 3.15's GIL flags). That is one
//! `Sample`; the engine turns it into findings, and the stacks of threads that began to wait or hold
//! are read after. The thread list is re-walked when its head moves (CPython puts every new thread
//! state at the head; the head is read with the GIL words, in the same system call), whenever the
//! GIL holder is not a known thread, after one, two, four… periods while two thread states name one
//! thread (a starting thread before 3.11; `pace.rs`), and for threads that exit elsewhere in the
//! list when the target's thread count moved (looked at every `refresh_ns`, one `fstat`): a thread
//! that starts is seen at the next tick, one that exits within `refresh_ns` (its kernel state reads
//! as unknown meanwhile; tick_loop/thread_walks.rs). Once the thread table is built, the tick's GIL
//! and kernel reads allocate nothing; reading a stack does (python/stacks/).

use std::sync::atomic::Ordering;

use crate::infer::engine::{Engine, StacksFirst};
use crate::infer::sample::{Sample, SampleContext, Wants};
use crate::observed::GilWaitRanges;
use crate::process::memory::ReadError;
use crate::process::syscalls::SyscallCounts;
use crate::process::tasks::{ThreadCountWatch, TidMap, is_stopped};
use crate::python::gil_span::{GilReading, WaiterCountAddrs};
use crate::python::runtime::ThreadRef;
use crate::python::target::Target;
use crate::python::thread_list::ThreadWalker;
use crate::sampler::clock::monotonic_ns;
use crate::sampler::config::{LiveCounters, SampleLog, SamplerConfig};
use crate::sampler::dodge::CpuDodge;
use crate::sampler::gil_flag_reader::GilFlagReader;
use crate::sampler::pace::Pace;
use crate::sampler::priority::Scheduling;
use crate::sampler::report::{EndReason, SamplerReport};
use crate::sampler::stack_watch::StackWatch;
use crate::sampler::stop_watch::StopWatch;
use crate::sampler::thread_naming::ThreadNaming;
use crate::sampler::thread_reads::{
    CHECK_COUNTED_OUT, CHECK_PROVEN_WAITING, CHECK_RUNNING_PROOF, FirstRead, ReadsSpared,
    ThreadTable,
};

use crate::infer::findings::{Finding, LiveSnapshot};

mod thread_walks;

/// Reads that keep failing for this long make the sampler check whether the target exec'd.
const FAULTS_BEFORE_CHECK_NS: u64 = 20_000_000;

/// The sampler's context for inference, from the target and the configuration.
pub fn sample_context(target: &Target, config: &SamplerConfig) -> SampleContext {
    SampleContext {
        period_ns: config.period_ns,
        ranges: target.gil_wait_ranges(),
        waiter_counts: config.waiter_counts && target.waiter_counts.is_ok(),
        gil_flags: GilFlagReader::new(&target.layout).is_some(),
        check_gil_flags: std::env::var_os("GILSAMPLE_CHECK_GIL_FLAGS").is_some(),
    }
}

/// One target's sampling: what it reads through, what inference keeps, and the tick loop's own
/// state from one tick to the next. A sampler thread drives one or several of these
/// (sampler/shared_thread.rs): `wake_at`, sleep, `tick`, until `ended` or a tick ends it, then
/// `finish`.
pub struct Sampler<'a> {
    target: &'a Target,
    config: &'a SamplerConfig,
    tid_map: Option<TidMap>,
    thread_count: ThreadCountWatch,
    table: ThreadTable,
    refs: Vec<ThreadRef>,
    walker: ThreadWalker,
    naming: ThreadNaming,
    stacks: Option<StackWatch>,
    gil_flags: Option<GilFlagReader>,
    engine: Engine,
    report: SamplerReport,
    pace: Pace,
    dodge: Option<CpuDodge>,
    reads: TickReads<'a>,
    sample: Sample,
    wants: Wants,
    stacks_first: StacksFirst,
    stops: StopWatch,
}

/// A stack watch's finding: into the saved stream first (where there is one), then downstream.
fn log_and_send(
    log: &mut Option<&mut dyn SampleLog>,
    sink: &mut dyn FnMut(Finding),
    finding: Finding,
) {
    if let Some(log) = log.as_mut() {
        log.stack(&finding);
    }
    sink(finding)
}

impl<'a> Sampler<'a> {
    /// Gets ready to sample `target`: its thread table (the first walk of its thread list), its
    /// stack watch and engine. The first tick is on the session's grid of periods (`Pace::new`).
    /// `scheduling` is what the thread that drives it was given; `may_dodge`: that thread samples
    /// this target alone, so it may move off its GIL holder's CPU (dodge.rs).
    pub fn start(
        target: &'a Target,
        config: &'a SamplerConfig,
        live: &LiveCounters,
        scheduling: Scheduling,
        may_dodge: bool,
    ) -> Sampler<'a> {
        let engine = Engine::new(sample_context(target, config));
        let reads = TickReads {
            ranges: engine.context().ranges,
            counts: target
                .waiter_counts
                .as_ref()
                .ok()
                .filter(|_| config.waiter_counts),
            check_gil_flags: engine.context().check_gil_flags,
            check_counted_out: std::env::var_os(CHECK_COUNTED_OUT).is_some(),
            check_proven_waiting: std::env::var_os(CHECK_PROVEN_WAITING).is_some(),
            check_running_proof: std::env::var_os(CHECK_RUNNING_PROOF).is_some(),
        };
        let start = monotonic_ns();
        let mut state = Sampler {
            target,
            config,
            // Without it (the process is gone already) every thread is skipped and the loop ends.
            tid_map: TidMap::new(target.pid).ok(),
            thread_count: ThreadCountWatch::open(target.pid),
            table: ThreadTable::default(),
            refs: Vec::with_capacity(64),
            walker: ThreadWalker::default(),
            naming: ThreadNaming::new(target),
            stacks: None,
            gil_flags: GilFlagReader::new(&target.layout),
            engine,
            report: SamplerReport {
                stopped_at_start: is_stopped(target.pid),
                ..SamplerReport::new(start, scheduling)
            },
            pace: Pace::new(start, config.period_ns),
            dodge: None,
            reads,
            sample: Sample::default(),
            wants: Wants::default(),
            stacks_first: StacksFirst::default(),
            stops: StopWatch::new(target.pid, start),
        };
        if config.stacks {
            match StackWatch::new(target) {
                Ok(watch) => state.stacks = Some(watch),
                Err(why) => state.report.stacks.unavailable = Some(why),
            }
        }
        // The first walk opens every thread's /proc files and reads every thread's name: with 400
        // threads about 40 ms, which at the first tick was a hole of 400 samples at the start of
        // the recording. Taken before the recording's start instead; where it fails, the first
        // tick walks again.
        let first_walk = state.refresh().ok();
        state.report.start_ns = monotonic_ns();
        state.report.end_ns = state.report.start_ns;
        state.pace = Pace::new(state.report.start_ns, config.period_ns);
        match first_walk {
            Some(unbound) => state.walked(state.report.start_ns, unbound, live),
            None => live
                .threads
                .store(state.table.len() as u64, Ordering::Relaxed),
        }
        if may_dodge && config.dodge_holder && scheduling == Scheduling::Fifo {
            state.dodge = CpuDodge::new(target.pid);
        }
        state
    }

    /// The pid of the target sampled.
    pub fn pid(&self) -> u32 {
        self.target.pid
    }

    /// When the next tick may start: its deadline, or the end of the last tick's rest.
    pub fn wake_at(&self) -> u64 {
        self.pace.deadline.max(self.pace.rest_until)
    }

    /// Why sampling ends before the next tick, if it does: `stopped` (the session's stop, or this
    /// target's output failed), or the duration reached.
    pub fn ended(&self, stopped: bool) -> Option<EndReason> {
        if stopped {
            return Some(EndReason::Stopped);
        }
        if self
            .config
            .end_at_ns
            .is_some_and(|end| self.pace.deadline >= end)
        {
            return Some(EndReason::Duration);
        }
        None
    }

    /// One tick, once `wake_at` has passed: the sample's reads, inference, and the stacks of the
    /// threads that began to wait or hold. `Some` when the target is gone or unreadable.
    pub fn tick(
        &mut self,
        live: &LiveCounters,
        sink: &mut dyn FnMut(Finding),
        log: &mut Option<&mut dyn SampleLog>,
    ) -> Option<EndReason> {
        let config = self.config;
        let period = config.period_ns;
        let woke = self.count_lateness(period, live);
        let reading = match self.read_gil(woke) {
            Ok(reading) => reading,
            Err(end) => return end,
        };
        // The sample is of the target as it was when the read returned, however long it waited.
        let t0 = monotonic_ns();
        if t0 - woke > period {
            self.report.stalled_reads += 1;
            self.report.longest_stall_ns = self.report.longest_stall_ns.max(t0 - woke);
        }
        live.set_stopped(self.stops.tick(t0));
        if let Err(end) = self.walk_if_due(t0, &reading, live) {
            return end;
        }
        if let Some(names) = self.naming.take_unsent(t0, &self.report.thread_names) {
            sink(names);
        }
        self.pace.faulting_since = None;
        let mut sample = std::mem::take(&mut self.sample);
        self.fill_sample(&mut sample, &reading, (woke, t0));
        if let Some(log) = log.as_mut() {
            log.sample(&sample);
        }
        self.infer(&sample, sink, log);
        if let Some(every) = config.live_every_ns
            && sample.t_ns >= self.pace.next_live_ns
        {
            self.pace.next_live_ns = sample.t_ns + every;
            sink(Finding::Live(Box::new(self.live_snapshot(sample.t_ns))));
        }
        self.engine.wants(&mut self.wants);
        self.after_tick(&sample, live);
        self.sample = sample;
        None
    }

    /// Ends the sampling: names read again (threads renamed since they were first seen), what the
    /// stack watch and the engine still hold sent to `sink`, and the report, with the CPU time and
    /// system calls the driving thread spent on this target (`cost`).
    pub fn finish(
        mut self,
        end: EndReason,
        cost: (u64, SyscallCounts),
        live: &LiveCounters,
        sink: &mut dyn FnMut(Finding),
        log: &mut Option<&mut dyn SampleLog>,
    ) -> SamplerReport {
        let (refs, names) = (&self.refs, &mut self.report.thread_names);
        self.report.name_reads = self.naming.rename_all(self.target, refs, names);
        if let Some(watch) = self.stacks.as_mut() {
            watch.finish(&mut |finding| log_and_send(log, sink, finding));
            watch.report_into(&mut self.report.stacks);
        }
        // What the last sample settled, after those last stacks, as a replay orders them (`infer`).
        self.stacks_first.release(sink);
        // A watcher (`top`) is told up to the last sample, not the last periodic snapshot: its
        // tables then cover the recording to its end.
        let last_ns = self.sample.t_ns;
        if let Some(every) = self.config.live_every_ns
            && last_ns > 0
            && last_ns + every > self.pace.next_live_ns
        {
            sink(Finding::Live(Box::new(self.live_snapshot(last_ns))));
        }
        self.engine.finish(sink);
        self.report.inference = self.engine.counts();
        self.report.end = end;
        self.report.stopped_at_end = is_stopped(self.target.pid);
        self.report.stopped_spans = self.stops.finish(self.report.end_ns);
        (self.report.cpu_ns, self.report.syscalls) = cost;
        live.set_done();
        self.report
    }

    /// Called once the tick's deadline has passed: moves it on. A tick that started over a period
    /// late is counted, and the deadlines it missed are let go. Returns when it woke.
    fn count_lateness(&mut self, period: u64, live: &LiveCounters) -> u64 {
        let woke = monotonic_ns();
        let pace = &mut self.pace;
        if woke > pace.deadline + period {
            self.report.late_samples += 1;
            self.report.late_samples_while_quiet += u64::from(pace.skipping > 0);
            live.late.fetch_add(1, Ordering::Relaxed);
            pace.deadline += (woke - pace.deadline) / period * period;
        }
        pace.deadline += period;
        woke
    }

    /// The tick's one read of the GIL (with the waiter counts and the thread list's head). `Err`
    /// with the end when the target is gone or unreadable, `Err(None)` to skip a faulted tick.
    fn read_gil(&mut self, woke: u64) -> Result<GilReading, Option<EndReason>> {
        let watch = self.walker.head_field();
        match self.target.read_gil_watching(self.reads.counts, watch) {
            Ok((read, head)) => {
                let pace = &mut self.pace;
                // A new thread state goes to the head of the list: walk again when it moves.
                if head != pace.thread_list_head {
                    pace.walk_now |= pace.thread_list_head.is_some() || head.is_none();
                    pace.thread_list_head = head;
                }
                Ok(read)
            }
            Err(ReadError::Gone) => Err(Some(EndReason::TargetExited)),
            Err(ReadError::Permission) => Err(Some(EndReason::Failed(
                "permission to read the target was lost".into(),
            ))),
            Err(_) => {
                self.report.faulted_samples += 1;
                Err(self.after_fault(woke))
            }
        }
    }

    /// The rest of the tick's reads into `sample`: each thread's kernel state, the waiter counts
    /// again where the engine wants them, and what it asked for at the last tick.
    fn fill_sample(&mut self, sample: &mut Sample, reading: &GilReading, (woke, t0): (u64, u64)) {
        let (config, pace, reads) = (self.config, &self.pace, &self.reads);
        sample.woke_ns = woke;
        sample.read_ns = t0;
        sample.word = reading.word;
        sample.waiters = reading.waiters;
        sample.mutex_owner = reading.mutex_owner;
        sample.skipped_periods = pace.skipping;
        let spare = ReadsSpared {
            // At the slow rate every thread is read at every tick unless the counts rule it out: a
            // sleeper read only every few slow ticks could start to wait unseen for longer than the
            // quiet rule allows.
            every_few_ticks: config.idle_backoff && pace.skipping == 0,
            counted_out: config.idle_backoff && reads.counts.is_some(),
            proven_waiting: config.idle_backoff,
            proven_running: config.idle_backoff,
            check_proven_waiting: reads.check_proven_waiting,
            check_running_proof: reads.check_running_proof,
        };
        let (counts, check_counted_out) = (reads.counts, reads.check_counted_out);
        let gil = FirstRead {
            counts,
            mutex_contended: reading.mutex_contended,
            cond_stamp: reading.cond_stamp,
        };
        let again = self.table.read_kernel_states(
            self.target,
            &mut self.report,
            sample,
            &self.reads.ranges,
            gil,
            (spare, &self.wants),
        );
        sample.waiters_again = match counts {
            Some(at) if self.engine.wants_recount(sample) => {
                again.or_else(|| self.target.read_waiters(at).ok())
            }
            // Both counts of every tick, for tests/counted_out.rs to judge the rule on.
            Some(at) if check_counted_out => self.target.read_waiters(at).ok(),
            _ => None,
        };
        sample.word_again = None;
        if self.engine.wants_word_again(sample) {
            self.report.gil_read_again += 1;
            sample.word_again = self.target.read_gil_word().ok();
            if sample.holder_let_go_during_reads() {
                self.report.gil_let_go_between_reads += 1;
            } else {
                // Kept only where it tells something: the stream saves it.
                sample.word_again = None;
            }
        }
        let t1 = monotonic_ns();
        sample.t_ns = t0 + (t1 - t0) / 2;
        self.read_wanted(sample);
    }

    /// The engine's step on the sample, and the stacks of the threads it decided began to wait or
    /// hold, read now and sent before what the sample settled (`StacksFirst`). What it settled goes
    /// out at the next step, or in `finish` after the stack watch's last stacks: the order a replay
    /// of the saved stream gives, where nothing marks where the last sample's stacks end and those
    /// last stacks begin. Released here instead, the last hold's stack could land in a slice live
    /// and be folded into the slice before it in the replay (tests/replay.rs).
    fn infer(
        &mut self,
        sample: &Sample,
        sink: &mut dyn FnMut(Finding),
        log: &mut Option<&mut dyn SampleLog>,
    ) {
        self.stacks_first.step(&mut self.engine, sample, sink);
        if let Some(watch) = self.stacks.as_mut() {
            let memory = &self.target.memory;
            for decided in self.engine.decided() {
                let seen = &sample.threads[decided.index];
                watch.observe(memory, seen, decided, sample.t_ns, &mut |stack| {
                    log_and_send(log, sink, stack)
                });
            }
        }
    }

    /// What the tick leaves for the next: the periods to skip while quiet, a move off the holder's
    /// CPU, the counts, and a quarter period's rest (`Pace::rest_until`).
    fn after_tick(&mut self, sample: &Sample, live: &LiveCounters) {
        let (config, pace) = (self.config, &mut self.pace);
        let period = config.period_ns;
        pace.skipping = if config.adaptive_rate {
            self.wants.skip_periods
        } else {
            0
        };
        pace.deadline += u64::from(pace.skipping) * period;
        if sample.skipped_periods > 0 {
            self.report.quiet_samples += 1;
            self.report.skipped_periods += u64::from(sample.skipped_periods);
            live.skipped_periods
                .store(self.report.skipped_periods, Ordering::Relaxed);
        }
        let dodge = self.dodge.as_mut();
        if dodge.is_some_and(|d| d.check(sample.t_ns, self.engine.holder_tid())) {
            self.report.cpu_moves += 1;
        }
        self.report.samples += 1;
        self.report.end_ns = sample.t_ns;
        live.set_samples(self.report.samples);
        self.pace.rest_until = monotonic_ns() + period / 4;
    }

    /// What a live view gets at sample `t_ns` (`SamplerConfig::live_every_ns`).
    fn live_snapshot(&self, t_ns: u64) -> LiveSnapshot {
        let mut snapshot = LiveSnapshot {
            t_ns,
            started_ns: self.report.start_ns,
            names: self
                .report
                .thread_names
                .iter()
                .map(|(tid, name)| (*tid, name.clone()))
                .collect(),
            ..LiveSnapshot::default()
        };
        self.engine.open_so_far(&mut snapshot);
        snapshot
    }

    /// The readings the engine asked for at the last tick.
    fn read_wanted(&mut self, sample: &mut Sample) {
        self.read_extra_readings(sample);
        // An entry given a reading the sample before's lacked is not unchanged.
        self.table.unmark_extras(&mut sample.unchanged_outside);
    }

    /// Schedstat of the threads `wants` names and of the holder, and 3.15's flags where read.
    fn read_extra_readings(&mut self, sample: &mut Sample) {
        let (locked, last_holder) = (sample.word.locked, sample.word.last_holder);
        // Looked up, not asked of every entry: a few threads of hundreds.
        let holder = locked
            .then(|| self.table.index_of_thread_state(last_holder))
            .flatten();
        self.table
            .read_wanted_schedstat(sample, &self.wants, holder);
        let Some(flags) = &self.gil_flags else {
            return;
        };
        // The flags of each thread that runs without the GIL (of every one, with the check). An
        // entry left unchanged outside the GIL is asleep, and not the holder: passed over without
        // touching it, as the engine does (`Sample::unchanged_outside`).
        let check = self.reads.check_gil_flags;
        let (threads, marks) = (&mut sample.threads, &sample.unchanged_outside);
        for (index, seen) in threads.iter_mut().enumerate() {
            if !check && marks.get(index).copied().unwrap_or(false) {
                continue;
            }
            let holds = locked && seen.tstate == last_holder;
            if GilFlagReader::wanted(check, seen.runs(), locked, holds) {
                seen.gil_flags = flags.read(&self.target.memory, seen.tstate);
                self.table.wrote_flags(index);
            }
        }
    }

    /// After a failed read: once reads have failed for a while, checks whether the target exec'd (its
    /// interpreter is no longer mapped) or exited, which end the recording; a torn read does not.
    fn after_fault(&mut self, now: u64) -> Option<EndReason> {
        let since = *self.pace.faulting_since.get_or_insert(now);
        if now - since < FAULTS_BEFORE_CHECK_NS {
            return None;
        }
        self.pace.faulting_since = Some(now);
        match self.target.still_mapped() {
            Ok(true) => None,
            Ok(false) => Some(EndReason::TargetExec),
            Err(_) => Some(EndReason::TargetExited),
        }
    }
}

/// What every tick reads the same way, set once per run.
struct TickReads<'a> {
    ranges: GilWaitRanges,
    /// Where the waiter counts lie, where they are read.
    counts: Option<&'a WaiterCountAddrs>,
    check_gil_flags: bool,
    check_counted_out: bool,
    check_proven_waiting: bool,
    check_running_proof: bool,
}
