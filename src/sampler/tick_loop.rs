//! The sampling loop of one target: reading only. Inference is infer/engine.rs's.
//!
//! Each tick, at an absolute CLOCK_MONOTONIC deadline: one read of the GIL words from target memory,
//! one of glibc's waiter counts of the GIL's condition variables (again after the kernel readings when
//! a thread runs without the GIL), one `pread` of each Python thread's syscall file, and what the
//! engine asked for at the last tick (schedstat of some threads, 3.15's GIL flags). That is one
//! `Sample`; the engine turns it into records, and the stacks of threads that began to wait or hold
//! are read after. The thread list is re-walked when its head moves (CPython puts every new thread
//! state at the head; the head is read with the GIL words, in the same system call), whenever the
//! GIL holder is not a known thread, and every `refresh_ns` for threads that exit elsewhere in the
//! list: a thread that starts is seen at the next tick, one that exits within `refresh_ns` (its
//! kernel state reads as unknown meanwhile). Nothing on the per-tick path allocates once the
//! thread table is built.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::infer::classify::asleep_elsewhere;
use crate::infer::counted_out::{ReadThreads, asleep_in_waits, unread_are_outside_the_gil};
use crate::infer::engine::Engine;
use crate::infer::sample::{Sample, SampleContext, ThreadSample, Wants};
use crate::observed::KernelState;
use crate::observed::{GilWaitRanges, Waiters};
use crate::process::kernel::{KernelReading, SleepProof, ThreadFiles};
use crate::process::memory::ReadError;
use crate::process::syscalls::counted;
use crate::process::tasks::TidMap;
use crate::python::gil_span::{GilReading, WaiterCountAddrs};
use crate::python::names::ThreadNamer;
use crate::python::runtime::{ThreadRef, ThreadWalker, WalkError};
use crate::python::target::Target;
use crate::sampler::clock::{monotonic_ns, sleep_until, thread_cpu_ns};
use crate::sampler::dodge::CpuDodge;
use crate::sampler::gil_flag_reader::GilFlagReader;
use crate::sampler::priority::{Priority, Scheduling, apply_to_current_thread};
pub use crate::sampler::report::{EndReason, SamplerReport};
use crate::sampler::stack_watch::StackWatch;

use crate::infer::findings::{Finding, LiveSnapshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    pub period_ns: u64,
    /// Stop at this CLOCK_MONOTONIC time (a session-wide deadline, so targets that join late end
    /// with the others); `None`: until stopped or the target exits.
    pub end_at_ns: Option<u64>,
    /// How often the thread list is re-walked.
    pub refresh_ns: u64,
    pub priority: Priority,
    /// Read threads idle in a non-GIL wait only every few samples (see `IDLE_READ_EVERY`).
    pub idle_backoff: bool,
    /// Skip periods while the target is quiet, as inference suggests (infer/quiet.rs).
    pub adaptive_rate: bool,
    /// Use the GIL's waiter counts where the target has them (classify.rs, rule 8).
    pub waiter_counts: bool,
    /// Keep a real-time sampler off the GIL holder's CPU (dodge.rs); off when `--cpus` chose.
    pub dodge_holder: bool,
    /// Read the Python stacks of waiters and holders (stack_watch.rs).
    pub stacks: bool,
    /// For a live view (`gilsample top`): send a `Finding::Live` this often, what is still open and
    /// the threads' names. `None` (recording alone): never.
    pub live_every_ns: Option<u64>,
}

impl SamplerConfig {
    /// The walk for threads that exited: new ones are found at once by the head (module docs).
    pub const DEFAULT_REFRESH_NS: u64 = 100_000_000;
}

/// Counters other threads (the progress bar) read while sampling runs.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub samples: AtomicU64,
    pub late: AtomicU64,
    pub skipped_periods: AtomicU64,
    pub threads: AtomicU64,
    pub done: AtomicBool,
}

/// Where the samples and the stacks read go besides inference (`--save-samples`, stream/).
pub trait SampleLog {
    fn sample(&mut self, sample: &Sample);
    fn stack(&mut self, stack: &Finding);
    /// Saving failed (the disk is full): the recording stops.
    fn failed(&self) -> bool;
}

/// Reads that keep failing for this long make the sampler check whether the target exec'd.
const FAULTS_BEFORE_CHECK_NS: u64 = 20_000_000;

/// A thread asleep in the same non-GIL wait (a queue, a socket, `time.sleep`) for this long is read
/// only every `IDLE_READ_EVERY`th sample. It cannot wait for or take the GIL without waking first,
/// so this only delays seeing a wake-up into a GIL wait by at most that many periods, and it cuts the
/// sampler's cost for the mostly idle thread pools of real jobs (scripts/bench_sampler.py, docs/cost.md).
pub const IDLE_AFTER_NS: u64 = 20_000_000;
const IDLE_READ_EVERY: u64 = 4;

/// Where the target has waiter counts, an idle thread is left unread for as long as the counts show
/// every GIL waiter among the threads read (infer/counted_out.rs), and read anyway once every this many
/// ticks (spread over the ticks by tid; 100 ms at 10 kHz): its last reading is what the trace shows of
/// its kernel state, and a thread that changed the wait it sleeps in is seen within that time. The
/// sampler's cost then follows the threads that move, not the threads the job has.
const COUNTED_OUT_READ_EVERY: u64 = 1024;

/// Set in the environment, every tick also reads the waiter counts a second time after the kernel
/// readings and saves them (`Sample::waiters_again`), so that a stream recorded with
/// `--no-idle-backoff` shows what the counted-out rule would have decided at every tick, next to every
/// thread's real state (tests/counted_out.rs).
pub const CHECK_COUNTED_OUT: &str = "GILSAMPLE_CHECK_COUNTED_OUT";

/// What the sampler keeps per thread to read it: its /proc files and what spares reads.
struct WatchedThread {
    thread: ThreadRef,
    files: ThreadFiles,
    /// The last kernel reading, and since when the thread has been asleep in that same non-GIL wait.
    last_kernel: Option<KernelState>,
    idle_since: Option<u64>,
    /// What proves a sleeping thread's last reading still current (`ThreadFiles::read_state_since`).
    sleep_proof: SleepProof,
}

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

struct Sampler<'a> {
    target: &'a Target,
    tid_map: Option<TidMap>,
    threads: Vec<WatchedThread>,
    /// The tick's idle threads left unread for now (indices into `threads` and the sample's threads).
    unread: Vec<usize>,
    refs: Vec<ThreadRef>,
    walker: ThreadWalker,
    namer: ThreadNamer,
    stacks: Option<StackWatch>,
    gil_flags: Option<GilFlagReader>,
    engine: Engine,
    report: SamplerReport,
}

/// Samples `target` until the duration ends, `stop` is set, or the target exits. Intervals and counter
/// changes go to `sink` as they close; every sample and stack to `log` where there is one.
pub fn run_sampler(
    target: &Target,
    config: &SamplerConfig,
    stop: &dyn Fn() -> bool,
    live: &LiveCounters,
    sink: &mut dyn FnMut(Finding),
    mut log: Option<&mut dyn SampleLog>,
) -> SamplerReport {
    let start = monotonic_ns();
    let syscalls_before = counted();
    let mut state = Sampler {
        target,
        // Without it (the process is gone already) every thread is skipped and the loop ends.
        tid_map: TidMap::new(target.pid).ok(),
        threads: Vec::with_capacity(64),
        unread: Vec::with_capacity(64),
        refs: Vec::with_capacity(64),
        walker: ThreadWalker::default(),
        namer: ThreadNamer::new(target.object_reader()),
        stacks: None,
        gil_flags: GilFlagReader::new(&target.layout),
        engine: Engine::new(sample_context(target, config)),
        report: SamplerReport::new(start, apply_to_current_thread(config.priority)),
    };
    if config.stacks {
        match StackWatch::new(target) {
            Ok(watch) => state.stacks = Some(watch),
            Err(why) => state.report.stacks.unavailable = Some(why),
        }
    }
    let end = state.run(config, stop, live, sink, &mut log);
    // Names again at the end, for threads renamed since they were first seen.
    let (refs, names) = (&state.refs, &mut state.report.thread_names);
    let memory = &target.memory;
    state
        .namer
        .name_threads(memory, &target.layout, target.runtime, refs, names);
    state.report.name_reads = state.namer.stats;
    if let Some(watch) = &state.stacks {
        watch.report_into(&mut state.report.stacks);
    }
    state.engine.finish(sink);
    state.report.inference = state.engine.counts();
    state.report.end = end;
    state.report.cpu_ns = thread_cpu_ns();
    state.report.syscalls = counted().since(&syscalls_before);
    live.done.store(true, Ordering::Release);
    state.report
}

impl Sampler<'_> {
    fn run(
        &mut self,
        config: &SamplerConfig,
        stop: &dyn Fn() -> bool,
        live: &LiveCounters,
        sink: &mut dyn FnMut(Finding),
        log: &mut Option<&mut dyn SampleLog>,
    ) -> EndReason {
        let period = config.period_ns;
        let end_at = config.end_at_ns;
        let mut deadline = self.report.start_ns;
        let mut last_refresh = 0u64;
        let mut dodge = if config.dodge_holder && self.report.scheduling == Scheduling::Fifo {
            CpuDodge::new(self.target.pid)
        } else {
            None
        };
        let ranges = self.target.gil_wait_ranges();
        let counts = self
            .target
            .waiter_counts
            .as_ref()
            .ok()
            .filter(|_| config.waiter_counts);
        let check_gil_flags = self.engine.context().check_gil_flags;
        let check_counted_out = std::env::var_os(CHECK_COUNTED_OUT).is_some();
        let mut faulting_since: Option<u64> = None;
        let mut sample = Sample::default();
        let mut wants = Wants::default();
        // Periods skipped before the coming tick (infer/quiet.rs).
        let mut skipping = 0u32;
        // The thread list's head at the last tick, and whether it moved since the last walk.
        let (mut thread_list_head, mut walk_now) = (None, false);
        let mut settled: Vec<Finding> = Vec::with_capacity(256);
        let mut next_live_ns = 0u64;
        loop {
            if stop() || log.as_ref().is_some_and(|l| l.failed()) {
                return EndReason::Stopped;
            }
            if end_at.is_some_and(|end| deadline >= end) {
                return EndReason::Duration;
            }
            sleep_until(deadline);
            let woke = monotonic_ns();
            if woke > deadline + period {
                self.report.late_samples += 1;
                live.late.fetch_add(1, Ordering::Relaxed);
                deadline += (woke - deadline) / period * period;
            }
            deadline += period;

            let watch = self.walker.head_field();
            let reading = match self.target.read_gil_watching(counts, watch) {
                Ok((read, head)) => {
                    // A new thread state goes to the head of the list: walk again when it moves.
                    if head != thread_list_head {
                        walk_now |= thread_list_head.is_some() || head.is_none();
                        thread_list_head = head;
                    }
                    read
                }
                Err(ReadError::Gone) => return EndReason::TargetExited,
                Err(ReadError::Permission) => {
                    return EndReason::Failed("permission to read the target was lost".into());
                }
                Err(_) => {
                    self.report.faulted_samples += 1;
                    if let Some(end) = self.after_fault(woke, &mut faulting_since) {
                        return end;
                    }
                    continue;
                }
            };
            let GilReading {
                word,
                waiters,
                mutex_owner,
                mutex_contended,
            } = reading;
            // The sample is of the target as it was when the read returned, however long it waited.
            let t0 = monotonic_ns();
            if t0 - woke > period {
                self.report.stalled_reads += 1;
                self.report.longest_stall_ns = self.report.longest_stall_ns.max(t0 - woke);
            }
            let holder_unknown = word.locked
                && !self
                    .threads
                    .iter()
                    .any(|t| t.thread.tstate == word.last_holder);
            if t0 - last_refresh >= config.refresh_ns || holder_unknown || walk_now {
                last_refresh = t0;
                walk_now = false;
                match self.refresh() {
                    Ok(()) => live
                        .threads
                        .store(self.threads.len() as u64, Ordering::Relaxed),
                    Err(WalkError::Read(ReadError::Gone)) => return EndReason::TargetExited,
                    Err(_) => {
                        self.report.faulted_samples += 1;
                        if let Some(end) = self.after_fault(t0, &mut faulting_since) {
                            return end;
                        }
                        continue;
                    }
                }
            }
            faulting_since = None;

            sample.woke_ns = woke;
            sample.read_ns = t0;
            sample.word = word;
            sample.waiters = waiters;
            sample.mutex_owner = mutex_owner;
            sample.skipped_periods = skipping;
            let idle = IdleReads {
                // At the slow rate every thread is read at every tick unless the counts rule it out:
                // a sleeper read only every few slow ticks could start to wait unseen for longer
                // than the quiet rule allows.
                every_few_ticks: config.idle_backoff && skipping == 0,
                counted_out: config.idle_backoff && counts.is_some(),
            };
            let again =
                self.read_kernel_states(&mut sample, &ranges, counts, idle, mutex_contended);
            sample.waiters_again = match counts {
                Some(at) if self.engine.wants_recount(&sample) => {
                    again.or_else(|| self.target.read_waiters(at).ok())
                }
                // Both counts of every tick, for tests/counted_out.rs to judge the rule on.
                Some(at) if check_counted_out => self.target.read_waiters(at).ok(),
                _ => None,
            };
            let t1 = monotonic_ns();
            sample.t_ns = t0 + (t1 - t0) / 2;
            self.read_wanted(&mut sample, &wants, check_gil_flags);
            if let Some(log) = log.as_mut() {
                log.sample(&sample);
            }

            // What the sample settles waits until the stacks read for it are out: a stack belongs
            // in a slice the records may close.
            self.engine
                .step(&sample, &mut |record| settled.push(record));
            if let Some(watch) = self.stacks.as_mut() {
                let memory = &self.target.memory;
                for decided in self.engine.decided() {
                    let seen = &sample.threads[decided.index];
                    let (previous, state) = (decided.previous, decided.state);
                    watch.observe(memory, seen, previous, state, sample.t_ns, &mut |stack| {
                        if let Some(log) = log.as_mut() {
                            log.stack(&stack);
                        }
                        sink(stack)
                    });
                }
            }
            settled.drain(..).for_each(&mut *sink);
            if let Some(every) = config.live_every_ns
                && sample.t_ns >= next_live_ns
            {
                next_live_ns = sample.t_ns + every;
                sink(Finding::Live(Box::new(self.live_snapshot(sample.t_ns))));
            }
            self.engine.wants(&mut wants);
            skipping = if config.adaptive_rate {
                wants.skip_periods
            } else {
                0
            };
            deadline += u64::from(skipping) * period;
            if sample.skipped_periods > 0 {
                self.report.quiet_samples += 1;
                self.report.skipped_periods += u64::from(sample.skipped_periods);
                live.skipped_periods
                    .store(self.report.skipped_periods, Ordering::Relaxed);
            }

            if dodge
                .as_mut()
                .is_some_and(|d| d.check(sample.t_ns, self.engine.holder_tid()))
            {
                self.report.cpu_moves += 1;
            }
            self.report.samples += 1;
            self.report.end_ns = sample.t_ns;
            live.samples.store(self.report.samples, Ordering::Relaxed);
            // Leave at least a quarter period idle even when a tick overran, so a real-time sampler
            // never monopolises a CPU.
            deadline = deadline.max(monotonic_ns() + period / 4);
        }
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

    /// Each thread's kernel state into `sample.threads` (in the thread table's order), and
    /// `sample.all_kernel_read`: none was carried over from an earlier tick. Idle threads are left
    /// unread as `idle` allows; where the waiter counts were read again to rule them out, and
    /// nothing was read after that, those counts are returned for the engine's recount.
    fn read_kernel_states(
        &mut self,
        sample: &mut Sample,
        ranges: &GilWaitRanges,
        counts: Option<&WaiterCountAddrs>,
        idle: IdleReads,
        mutex_contended: Option<bool>,
    ) -> Option<Waiters> {
        let (now, word) = (sample.read_ns, sample.word);
        let out = &mut sample.threads;
        // Kept from the last tick and written in place: most of a large thread table reads the same
        // from one tick to the next, and only what changed is written.
        out.truncate(self.threads.len());
        self.unread.clear();
        let tick = self.report.samples;
        let skipped_before = self.report.kernel_reads_skipped;
        for (index, tracked) in self.threads.iter_mut().enumerate() {
            let is_idle = tracked
                .idle_since
                .is_some_and(|since| now.saturating_sub(since) >= IDLE_AFTER_NS);
            // Never the holder, nor the mutex's owner: they are inside the GIL.
            let in_gil = tracked.thread.tstate == word.last_holder
                || sample.mutex_owner == Some(tracked.thread.their_tid);
            let turn = |every: u64| (tick + u64::from(tracked.thread.tid)).is_multiple_of(every);
            let kernel = if is_idle && !in_gil && idle.counted_out && !turn(COUNTED_OUT_READ_EVERY)
            {
                self.unread.push(index);
                tracked.last_kernel
            } else if is_idle
                && !in_gil
                && !idle.counted_out
                && idle.every_few_ticks
                && !turn(IDLE_READ_EVERY)
            {
                self.report.kernel_reads_skipped += 1;
                tracked.last_kernel
            } else {
                read_tracked(tracked, now, ranges, &mut self.report)
            };
            let seen = ThreadSample {
                tid: tracked.thread.tid,
                their_tid: tracked.thread.their_tid,
                tstate: tracked.thread.tstate,
                kernel,
                slices_before_sleep: tracked.sleep_proof.timeslices_asleep(),
                schedstat: None,
                gil_flags: None,
            };
            match out.get_mut(index) {
                Some(last) if *last == seen => {}
                Some(last) => *last = seen,
                None => out.push(seen),
            }
        }
        sample.all_kernel_read = self.report.kernel_reads_skipped == skipped_before;
        let (Some(at), Some(counted), false) = (counts, sample.waiters, self.unread.is_empty())
        else {
            return None;
        };
        // The idle threads left unread: the counts, read again now, must show every waiter among
        // the threads read, or the idle ones are read too.
        let again = self.target.read_waiters(at).ok();
        let unread = &self.unread;
        let read_threads = || {
            out.iter()
                .enumerate()
                .filter(|(i, _)| unread.binary_search(i).is_err())
                .map(|(_, t)| t)
        };
        let read = ReadThreads {
            asleep: asleep_in_waits(read_threads(), ranges),
            mutex_owner_read: match sample.mutex_owner {
                None | Some(0) => true,
                Some(owner) => read_threads().any(|t| t.their_tid == owner),
            },
        };
        if again
            .is_some_and(|again| unread_are_outside_the_gil(counted, again, read, mutex_contended))
        {
            self.report.kernel_reads_counted_out += unread.len() as u64;
            sample.all_kernel_read = false;
            return again;
        }
        self.report.counted_out_refuted += 1;
        for &index in &self.unread {
            let tracked = &mut self.threads[index];
            out[index].kernel = read_tracked(tracked, now, ranges, &mut self.report);
            out[index].slices_before_sleep = tracked.sleep_proof.timeslices_asleep();
        }
        None
    }

    /// The readings the engine asked for at the last tick.
    fn read_wanted(&self, sample: &mut Sample, wants: &Wants, check_gil_flags: bool) {
        let (locked, last_holder) = (sample.word.locked, sample.word.last_holder);
        for (seen, tracked) in sample.threads.iter_mut().zip(&self.threads) {
            let holds = locked && seen.tstate == last_holder;
            if wants.schedstat(seen.tid, seen.runs(), holds) {
                seen.schedstat = tracked.files.read_schedstat();
            }
            if let Some(flags) = &self.gil_flags
                && GilFlagReader::wanted(check_gil_flags, seen.runs(), locked, holds)
            {
                seen.gil_flags = flags.read(&self.target.memory, seen.tstate);
            }
        }
    }

    /// After a failed read: once reads have failed for a while, checks whether the target exec'd (its
    /// interpreter is no longer mapped) or exited, which end the recording; a torn read does not.
    fn after_fault(&mut self, now: u64, faulting_since: &mut Option<u64>) -> Option<EndReason> {
        let since = *faulting_since.get_or_insert(now);
        if now - since < FAULTS_BEFORE_CHECK_NS {
            return None;
        }
        *faulting_since = Some(now);
        match self.target.still_mapped() {
            Ok(true) => None,
            Ok(false) => Some(EndReason::TargetExec),
            Err(_) => Some(EndReason::TargetExited),
        }
    }

    /// Re-walks the thread list: forgets threads that are gone (the engine closes them at the next
    /// sample, which lacks them), opens the /proc files of new ones.
    fn refresh(&mut self) -> Result<(), WalkError> {
        let target = self.target;
        target.walk_threads(&mut self.walker, &mut self.refs)?;
        // The thread states hold ids of the target's PID namespace; /proc and the trace use ours.
        match self.tid_map.as_mut() {
            Some(map) if map.translates() => self.refs.retain_mut(|r| match map.to_ours(r.tid) {
                Some(ours) => {
                    r.tid = ours;
                    true
                }
                None => false,
            }),
            Some(_) => {}
            None => self.refs.clear(),
        }
        let refs = &self.refs;
        self.threads
            .retain(|tracked| refs.iter().any(|r| r.tid == tracked.thread.tid));
        for r in refs {
            if let Some(tracked) = self.threads.iter_mut().find(|t| t.thread.tid == r.tid) {
                tracked.thread.tstate = r.tstate;
                continue;
            }
            // A thread that exited between the walk and here has no files; the next walk drops it.
            let Ok(files) = ThreadFiles::open(target.pid, r.tid) else {
                continue;
            };
            self.report
                .thread_names
                .entry(r.tid)
                .or_insert_with(|| thread_name(target.pid, r.tid));
            self.threads.push(WatchedThread {
                thread: *r,
                files,
                last_kernel: None,
                idle_since: None,
                sleep_proof: SleepProof::default(),
            });
        }
        let names = &mut self.report.thread_names;
        self.namer
            .name_new_threads(&target.memory, &target.layout, target.runtime, refs, names);
        if let Some(watch) = self.stacks.as_mut() {
            watch.retain(|tid| refs.iter().any(|r| r.tid == tid));
        }
        self.report.max_threads = self.report.max_threads.max(self.threads.len());
        self.report.thread_walks += 1;
        Ok(())
    }
}

/// How a tick may spare the reads of idle threads (`IDLE_AFTER_NS`).
#[derive(Clone, Copy)]
struct IdleReads {
    /// Read them only every `IDLE_READ_EVERY`th tick.
    every_few_ticks: bool,
    /// Leave them unread while the waiter counts rule them out (infer/counted_out.rs).
    counted_out: bool,
}

/// Reads one thread's kernel state (or proves its last one unchanged) and keeps what spares later
/// reads: the reading, and since when it has been asleep in the same non-GIL wait.
fn read_tracked(
    tracked: &mut WatchedThread,
    now: u64,
    ranges: &GilWaitRanges,
    report: &mut SamplerReport,
) -> Option<KernelState> {
    let state = match tracked
        .files
        .read_state_since(tracked.last_kernel, &mut tracked.sleep_proof)
    {
        KernelReading::Unchanged(state) => {
            report.kernel_reads_unchanged += 1;
            state
        }
        KernelReading::Read(state) => state,
    };
    let same_wait = state.is_some() && state == tracked.last_kernel;
    tracked.idle_since = match state {
        Some(k) if asleep_elsewhere(&k, ranges) => {
            if same_wait {
                tracked.idle_since.or(Some(now))
            } else {
                Some(now)
            }
        }
        _ => None,
    };
    tracked.last_kernel = state;
    state
}

/// The OS thread name (`comm`), or the main thread's label.
fn thread_name(pid: u32, tid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    if tid == pid {
        format!("MainThread ({comm})")
    } else {
        comm.to_string()
    }
}
