//! The sampling loop of one target.
//!
//! Each tick, at an absolute CLOCK_MONOTONIC deadline: one read of the GIL words from target memory,
//! one of glibc's waiter counts of the GIL's condition variables (again after the kernel readings when
//! a thread runs without the GIL), one `pread` of each Python thread's syscall file, classification,
//! and the per-thread state machines. The thread list is re-walked every `refresh_ns` and whenever the
//! GIL holder is not a known thread, so threads that start or exit are picked up within that time.
//! Nothing on the per-tick path allocates once the thread table is built.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::addr::RemoteAddr;
use crate::infer::held_blocked::{BlockedStretch, HeldWhileBlocked, blocking_syscall};
use crate::infer::intervals::{GilState, Interval, ThreadTimeline, TimelineParams};
use crate::process::kernel::{KernelReading, KernelState, SchedStat, SleepProof, ThreadFiles};
use crate::process::memory::ReadError;
use crate::process::tasks::TidMap;
use crate::python::attach::{GilReading, GilWaitRanges, Target, WaiterCounts, Waiters};
use crate::python::names::{NameStats, ThreadNamer};
use crate::python::runtime::{GilWord, ThreadRef, ThreadWalker, WalkError};
use crate::sample::classify::{
    Arrival, Basis, Census, ThreadEvidence, asleep_elsewhere, back_in_take_after_a_switch_request,
    census, classify, inside, settle_in_hindsight, settle_stretch, woke_twice_since_holding,
};
use crate::sample::clock::{monotonic_ns, sleep_until, thread_cpu_ns};
use crate::sample::dodge::CpuDodge;
use crate::sample::gil_flags::{FlagStats, GilFlags};
use crate::sample::handoff_age::{HandoffAge, may_have_lasted};
use crate::sample::priority::{Priority, Scheduling, apply_to_current_thread};
use crate::sample::stack_watch::{StackReport, StackWatch};
use crate::trace::stacks::Frames;

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
    /// Use the GIL's waiter counts where the target has them (classify.rs, rule 8).
    pub waiter_counts: bool,
    /// Keep a real-time sampler off the GIL holder's CPU (dodge.rs); off when `--cpus` chose.
    pub dodge_holder: bool,
    /// Read the Python stacks of waiters and holders (stack_watch.rs).
    pub stacks: bool,
}

impl SamplerConfig {
    pub const DEFAULT_REFRESH_NS: u64 = 5_000_000;
}

/// Counters other threads (the progress bar) read while sampling runs.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub samples: AtomicU64,
    pub late: AtomicU64,
    pub threads: AtomicU64,
    pub done: AtomicBool,
}

/// A hand-off of the GIL seen by the sampler: `from_tid` held it at `last_held_ns`, `to_tid` at
/// `taken_ns`, the next sample that saw a holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub from_tid: u32,
    pub to_tid: u32,
    pub last_held_ns: u64,
    pub taken_ns: u64,
}

/// What the sampler hands downstream, in time order per thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Interval(Interval),
    /// The holder slept in a syscall while holding the GIL (infer/held_blocked.rs).
    HeldWhileBlocked(BlockedStretch),
    /// The GIL went from one thread to another between two samples.
    Handoff(Handoff),
    /// A Python stack read at `t_ns` while the thread was in `state`, standing for `samples` samples
    /// (stack_watch.rs); the trace puts it into the args of the slice that covers `t_ns`.
    Stack {
        tid: u32,
        t_ns: u64,
        state: GilState,
        frames: Frames,
        samples: u64,
    },
    /// The number of threads waiting for the GIL changed to `count` at `t_ns`.
    Waiters {
        t_ns: u64,
        count: u32,
    },
}

impl Record {
    /// When it happened: an interval's end, a count's change.
    pub fn time_ns(&self) -> u64 {
        match self {
            Record::Interval(interval) => interval.end_ns,
            Record::HeldWhileBlocked(stretch) => stretch.end_ns,
            Record::Handoff(handoff) => handoff.taken_ns,
            Record::Waiters { t_ns, .. } => *t_ns,
            Record::Stack { t_ns, .. } => *t_ns,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    Duration,
    Stopped,
    TargetExited,
    /// The target replaced its program (exec): what was recorded up to then is kept.
    TargetExec,
    Failed(String),
}

/// Reads that keep failing for this long make the sampler check whether the target exec'd.
const FAULTS_BEFORE_CHECK_NS: u64 = 20_000_000;

/// What the loop measured about itself; the summary and trace metadata print it.
#[derive(Clone, Debug)]
pub struct SamplerReport {
    pub start_ns: u64,
    pub end_ns: u64,
    pub samples: u64,
    /// Ticks that started more than one period after their deadline.
    pub late_samples: u64,
    /// Reads of the GIL that took longer than a period, and the longest: the target's memory map
    /// lock is held for writing (mmap, munmap, mprotect) by a thread that lost its CPU, and the read
    /// waits for it.
    pub stalled_reads: u64,
    pub longest_stall_ns: u64,
    /// Ticks skipped because a read was torn or the thread list was inconsistent.
    pub faulted_samples: u64,
    pub thread_samples: u64,
    pub running_still_waiting: u64,
    pub running_released: u64,
    /// Running threads the GIL's waiter counts decided.
    pub running_counted: u64,
    /// Running threads that who owns the GIL's mutex decided (classify.rs, rule 6).
    pub running_by_gil_mutex: u64,
    /// Ambiguous stretches decided as still inside `take_gil`/`drop_gil`, and as released.
    pub stretches_in_gil_call: u64,
    pub stretches_released: u64,
    /// Of those, the ones the hand-off count decided (`settle_in_hindsight`).
    pub stretches_by_handoffs: u64,
    /// Stretches after `Hold` taken as `take_gil` because the thread had since woken twice straight
    /// onto a CPU (`woke_twice_since_holding`).
    pub stretches_woken_twice: u64,
    /// Stretches after a `Hold` long enough to be asked to switch taken as `take_gil` because the
    /// thread had since got a CPU three times (`back_in_take_after_a_switch_request`).
    pub stretches_back_after_switch_request: u64,
    /// Stretches begun as after `drop_gil` for a thread last seen asleep in `take_gil` that has got a
    /// CPU three times since (classify.rs, rule 8).
    pub stretches_after_unseen_hold: u64,
    pub handoffs_seen: u64,
    /// `switch_number` advanced by this much over the recording: the interpreter's own count.
    pub handoffs_counted: u64,
    /// Kernel readings that schedstat proved unchanged (`ThreadFiles::read_state_since`).
    pub kernel_reads_unchanged: u64,
    /// Kernel readings not taken because the thread was idle in a non-GIL wait.
    pub kernel_reads_skipped: u64,
    pub thread_names: BTreeMap<u32, String>,
    /// How reading the threads' Python names went (python/names.rs).
    pub name_reads: NameStats,
    /// How reading stacks went (stack_watch.rs).
    pub stacks: StackReport,
    /// What 3.15's own GIL flags decided (gil_flags.rs); `None` where the target has none.
    pub gil_flags: Option<FlagStats>,
    pub max_threads: usize,
    pub scheduling: Scheduling,
    /// Times the sampler left the GIL holder's CPU (dodge.rs).
    pub cpu_moves: u64,
    /// CPU time the sampler thread used.
    pub cpu_ns: u64,
    pub end: EndReason,
}

impl SamplerReport {
    /// All counts zero, for a loop that starts at `start_ns` with `scheduling`.
    pub fn new(start_ns: u64, scheduling: Scheduling) -> SamplerReport {
        SamplerReport {
            start_ns,
            end_ns: start_ns,
            samples: 0,
            late_samples: 0,
            stalled_reads: 0,
            longest_stall_ns: 0,
            faulted_samples: 0,
            thread_samples: 0,
            running_still_waiting: 0,
            running_released: 0,
            running_counted: 0,
            running_by_gil_mutex: 0,
            stretches_in_gil_call: 0,
            stretches_released: 0,
            stretches_by_handoffs: 0,
            stretches_woken_twice: 0,
            stretches_back_after_switch_request: 0,
            stretches_after_unseen_hold: 0,
            handoffs_seen: 0,
            handoffs_counted: 0,
            kernel_reads_skipped: 0,
            kernel_reads_unchanged: 0,
            thread_names: BTreeMap::new(),
            name_reads: NameStats::default(),
            stacks: StackReport::default(),
            gil_flags: None,
            max_threads: 0,
            scheduling,
            cpu_moves: 0,
            cpu_ns: 0,
            end: EndReason::Stopped,
        }
    }

    pub fn achieved_rate_hz(&self) -> f64 {
        let secs = (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9;
        if secs > 0.0 {
            self.samples as f64 / secs
        } else {
            0.0
        }
    }
}

struct Tracked {
    tid: u32,
    /// The id the target's own PID namespace gives it: what glibc records as a mutex's owner.
    their_tid: u32,
    tstate: RemoteAddr,
    files: ThreadFiles,
    timeline: ThreadTimeline,
    /// `switch_number` at the thread's last definite sample.
    definite_switch: Option<u64>,
    /// Running samples after a GIL state, held back until the thread is seen in a definite state again.
    pending: Option<Stretch>,
    /// The last kernel reading, and since when the thread has been asleep in that same non-GIL wait.
    last_kernel: Option<KernelState>,
    idle_since: Option<u64>,
    /// What proves a sleeping thread's last reading still current (`ThreadFiles::read_state_since`).
    sleep_proof: SleepProof,
    /// schedstat at the thread's last sample as the GIL holder: the one before a stretch after `Hold`,
    /// since a stretch ends before the thread can hold again.
    at_hold: Option<SchedStat>,
    /// It held the GIL's mutex at its last sample (classify.rs, rule 6).
    owned_gil_mutex: bool,
    /// At its last sample as the holder: the hand-off that made it the holder came after this.
    hold_handoff_after: Option<u64>,
    /// schedstat's arrival count while it slept in `take_gil` at its last definite sample, where
    /// the sleep proof covered that sleep (classify.rs, rule 8).
    take_sleep_slices: Option<u64>,
    /// A stretch of holding the GIL while asleep in a syscall, being seen.
    blocked: HeldWhileBlocked,
}

/// A thread asleep in the same non-GIL wait (a queue, a socket, `time.sleep`) for this long is read
/// only every `IDLE_READ_EVERY`th sample. It cannot wait for or take the GIL without waking first,
/// so this only delays seeing a wake-up into a GIL wait by at most that many periods, and it cuts the
/// sampler's cost for the mostly idle thread pools of real jobs (scripts/bench_sampler.py, README).
const IDLE_AFTER_NS: u64 = 20_000_000;
const IDLE_READ_EVERY: u64 = 4;

/// An ambiguous stretch of one thread (classify.rs, rule 9).
#[derive(Clone, Copy, Debug)]
struct Stretch {
    before: GilState,
    first_ns: u64,
    last_ns: u64,
    /// schedstat at the stretch's first sample.
    at_start: Option<SchedStat>,
    /// When the thread got a CPU, once a sample has seen it.
    arrival: Option<Arrival>,
    /// After `Hold`: the hold may have lasted a switch interval by the stretch's first sample, so a
    /// waiter may have asked it to switch.
    switch_request_possible: bool,
}

impl Stretch {
    /// Looks at schedstat (`now`, read at sample `t`) for the thread getting a CPU.
    fn watch(&mut self, now: Option<SchedStat>, t: u64) {
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

/// A stretch still undecided after this long is settled with what is known; a thread waiting for a CPU
/// that long is rare, and holding samples back longer would delay the trace.
const MAX_STRETCH_NS: u64 = 50_000_000;

/// `GILSAMPLE_DUMP_SAMPLES`'s write buffer: 3 s of `dispatch` at 10 kHz write ~38 MB.
const DUMP_BUFFER_BYTES: usize = 64 << 20;

impl Tracked {
    /// A thread seen for the first time: nothing known yet.
    fn new(thread: ThreadRef, files: ThreadFiles) -> Tracked {
        Tracked {
            tid: thread.tid,
            their_tid: thread.their_tid,
            tstate: thread.tstate,
            files,
            timeline: ThreadTimeline::new(thread.tid),
            definite_switch: None,
            pending: None,
            last_kernel: None,
            idle_since: None,
            sleep_proof: SleepProof::default(),
            at_hold: None,
            owned_gil_mutex: false,
            hold_handoff_after: None,
            take_sleep_slices: None,
            blocked: HeldWhileBlocked::default(),
        }
    }

    /// Decides the pending stretch and feeds it to the timeline. `t` is the first sample after the
    /// stretch (`None` when the thread is gone or the recording ends), whose schedstat may still show
    /// the thread's CPU arrival; `next` is that sample's definite state and the hand-offs since the
    /// definite sample before the stretch, when it has one.
    fn settle(
        &mut self,
        t: Option<u64>,
        next: Option<(GilState, u64)>,
        params: &TimelineParams,
        report: &mut SamplerReport,
        sink: &mut dyn FnMut(Record),
    ) {
        let Some(mut stretch) = self.pending.take() else {
            return;
        };
        let emit = &mut |iv| sink(Record::Interval(iv));
        if let Some(state) =
            next.and_then(|(next, handoffs)| settle_in_hindsight(stretch.before, next, handoffs))
        {
            report.stretches_by_handoffs += 1;
            if state == GilState::Released {
                report.stretches_released += 1;
            } else {
                report.stretches_in_gil_call += 1;
            }
            self.timeline
                .observe_run(stretch.first_ns, stretch.last_ns, state, params, emit);
            return;
        }
        if let Some(t) = t
            && stretch.arrival.is_none()
        {
            stretch.watch(self.files.read_schedstat(), t);
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
                report.stretches_in_gil_call += 1;
                if woke_twice {
                    report.stretches_woken_twice += 1;
                }
                if back_after_switch {
                    report.stretches_back_after_switch_request += 1;
                }
                self.timeline
                    .observe_run(stretch.first_ns, until, state, params, emit);
                stretch.arrival.map(|a| a.seen_ns)
            }
            None => {
                report.stretches_released += 1;
                Some(stretch.first_ns)
            }
        };
        if let Some(from) = released_from.filter(|&from| from <= stretch.last_ns) {
            self.timeline
                .observe_run(from, stretch.last_ns, GilState::Released, params, emit);
        }
    }
}

struct Loop<'a> {
    target: &'a Target,
    tid_map: Option<TidMap>,
    params: TimelineParams,
    threads: Vec<Tracked>,
    refs: Vec<ThreadRef>,
    walker: ThreadWalker,
    namer: ThreadNamer,
    stacks: Option<StackWatch>,
    gil_flags: Option<GilFlags>,
    report: SamplerReport,
}

/// Samples `target` until the duration ends, `stop` is set, or the target exits. Intervals and counter
/// changes go to `sink` as they close.
pub fn run_sampler(
    target: &Target,
    config: &SamplerConfig,
    stop: &dyn Fn() -> bool,
    live: &LiveCounters,
    sink: &mut dyn FnMut(Record),
) -> SamplerReport {
    let start = monotonic_ns();
    let mut state = Loop {
        target,
        // Without it (the process is gone already) every thread is skipped and the loop ends.
        tid_map: TidMap::new(target.pid).ok(),
        params: TimelineParams::for_period(config.period_ns),
        threads: Vec::with_capacity(64),
        refs: Vec::with_capacity(64),
        walker: ThreadWalker::default(),
        namer: ThreadNamer::new(target.object_reader()),
        stacks: None,
        gil_flags: GilFlags::new(&target.layout),
        report: SamplerReport::new(start, apply_to_current_thread(config.priority)),
    };
    if config.stacks {
        match StackWatch::new(target) {
            Ok(watch) => state.stacks = Some(watch),
            Err(why) => state.report.stacks.unavailable = Some(why),
        }
    }
    let end = state.run(config, stop, live, sink, start);
    // Names again at the end, for threads renamed since they were first seen.
    let (refs, names) = (&state.refs, &mut state.report.thread_names);
    let memory = &target.memory;
    state
        .namer
        .name_threads(memory, &target.layout, target.runtime, refs, names);
    state.report.name_reads = state.namer.stats;
    state.report.gil_flags = state.gil_flags.as_ref().map(|f| f.stats);
    if let Some(watch) = &state.stacks {
        watch.report_into(&mut state.report.stacks);
    }
    let last = state.report.end_ns;
    for tracked in &mut state.threads {
        tracked.settle(None, None, &state.params, &mut state.report, sink);
        tracked
            .timeline
            .close(None, &state.params, &mut |iv| sink(Record::Interval(iv)));
        tracked
            .blocked
            .close(tracked.tid, None, &state.params, &mut |s| {
                sink(Record::HeldWhileBlocked(s))
            });
    }
    state.report.end_ns = last;
    state.report.end = end;
    state.report.cpu_ns = thread_cpu_ns();
    live.done.store(true, Ordering::Release);
    state.report
}

impl Loop<'_> {
    fn run(
        &mut self,
        config: &SamplerConfig,
        stop: &dyn Fn() -> bool,
        live: &LiveCounters,
        sink: &mut dyn FnMut(Record),
        start: u64,
    ) -> EndReason {
        let period = config.period_ns;
        let end_at = config.end_at_ns;
        let mut deadline = start;
        let mut last_refresh = 0u64;
        let mut first_switch: Option<u64> = None;
        // The holder at the last sample that saw one (hand-offs seen).
        let mut last_holder: Option<u32> = None;
        // The thread last classified as holding, and when: hand-off arrows join two such samples,
        // so both ends lie inside `hold_gil` slices (the GIL's own words can name a holder that the
        // rules place in take/drop, e.g. one asleep on the GIL's mutex).
        let mut last_hold: Option<(u32, u64)> = None;
        let mut dodge = if config.dodge_holder && self.report.scheduling == Scheduling::Fifo {
            CpuDodge::new(self.target.pid)
        } else {
            None
        };
        let mut waiters: Option<u32> = None;
        let mut states: Vec<GilState> = Vec::with_capacity(64);
        let mut kernel: Vec<Option<KernelState>> = Vec::with_capacity(64);
        let ranges = self.target.gil_wait_ranges();
        let counts = self
            .target
            .waiter_counts
            .as_ref()
            .ok()
            .filter(|_| config.waiter_counts);
        let mut faulting_since: Option<u64> = None;
        let mut handoff_age = HandoffAge::default();
        // For engineers tuning classification: every thread of every sample, as text. The buffer
        // holds a few seconds of a busy target's lines, so the sampler does not stall on disk
        // writes in the short runs this is for (a stall is a hole in the very trace being studied).
        let mut dump = std::env::var_os("GILSAMPLE_DUMP_SAMPLES")
            .and_then(|path| std::fs::File::create(path).ok())
            .map(|file| std::io::BufWriter::with_capacity(DUMP_BUFFER_BYTES, file));
        loop {
            if stop() {
                return EndReason::Stopped;
            }
            if end_at.is_some_and(|end| deadline >= end) {
                return EndReason::Duration;
            }
            sleep_until(deadline);
            let t0 = monotonic_ns();
            if t0 > deadline + period {
                self.report.late_samples += 1;
                live.late.fetch_add(1, Ordering::Relaxed);
                deadline += (t0 - deadline) / period * period;
            }
            deadline += period;

            let reading = match self.target.read_gil(counts) {
                Ok(read) => read,
                Err(ReadError::Gone) => return EndReason::TargetExited,
                Err(ReadError::Permission) => {
                    return EndReason::Failed("permission to read the target was lost".into());
                }
                Err(_) => {
                    self.report.faulted_samples += 1;
                    if let Some(end) = self.after_fault(t0, &mut faulting_since) {
                        return end;
                    }
                    continue;
                }
            };
            let GilReading {
                word,
                waiters: counts_before,
                mutex_owner,
            } = reading;
            // The sample is of the target as it was when the read returned, however long it waited.
            let woke = t0;
            let t0 = monotonic_ns();
            if t0 - woke > period {
                self.report.stalled_reads += 1;
                self.report.longest_stall_ns = self.report.longest_stall_ns.max(t0 - woke);
            }
            handoff_age.observe(word.switch_number, woke);
            let no_switch_request = word
                .interval_us
                .is_some_and(|interval_us| handoff_age.younger_than(interval_us, t0));
            let holder_unknown =
                word.locked && !self.threads.iter().any(|t| t.tstate == word.last_holder);
            if t0 - last_refresh >= config.refresh_ns || holder_unknown {
                last_refresh = t0;
                match self.refresh(t0, sink) {
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
            kernel.clear();
            let tick = self.report.samples;
            let skipped_before = self.report.kernel_reads_skipped;
            for tracked in self.threads.iter_mut() {
                let idle = tracked
                    .idle_since
                    .is_some_and(|since| t0.saturating_sub(since) >= IDLE_AFTER_NS);
                // Idle threads are read in turn, spread over the ticks by tid.
                let skip = config.idle_backoff
                    && idle
                    && tracked.tstate != word.last_holder
                    && !(tick + u64::from(tracked.tid)).is_multiple_of(IDLE_READ_EVERY);
                if skip {
                    self.report.kernel_reads_skipped += 1;
                    kernel.push(tracked.last_kernel);
                    continue;
                }
                let reading = tracked
                    .files
                    .read_state_since(tracked.last_kernel, &mut tracked.sleep_proof);
                let state = match reading {
                    KernelReading::Unchanged(state) => {
                        self.report.kernel_reads_unchanged += 1;
                        state
                    }
                    KernelReading::Read(state) => state,
                };
                let same_wait = state.is_some() && state == tracked.last_kernel;
                tracked.idle_since = match state {
                    Some(k) if asleep_elsewhere(&k, &ranges) => {
                        if same_wait {
                            tracked.idle_since.or(Some(t0))
                        } else {
                            Some(t0)
                        }
                    }
                    _ => None,
                };
                tracked.last_kernel = state;
                kernel.push(state);
            }
            let census = match (counts, counts_before) {
                (Some(at), Some(before)) => self.census(
                    &word,
                    &kernel,
                    &ranges,
                    at,
                    before,
                    self.report.kernel_reads_skipped == skipped_before,
                ),
                _ => Census::Unknown,
            };
            let t1 = monotonic_ns();
            let t = t0 + (t1 - t0) / 2;

            states.clear();
            let mut holder_tid = None;
            let params = self.params;
            for (i, tracked) in self.threads.iter_mut().enumerate() {
                let is_last_holder = tracked.tstate == word.last_holder;
                if is_last_holder && word.locked {
                    holder_tid = Some(tracked.tid);
                }
                let owns_gil_mutex = mutex_owner.map(|owner| owner == tracked.their_tid);
                let previous = tracked.timeline.current();
                // Read only where rule 8 can use it: a running thread last seen asleep in
                // take_gil, at a sample where the counts place nobody running in a wait.
                let arrivals_since_take_sleep = tracked
                    .take_sleep_slices
                    .filter(|_| {
                        census == Census::NoneWaiting
                            && previous == Some(GilState::Take)
                            && kernel[i] == Some(KernelState::Running)
                            && !(is_last_holder && word.locked)
                    })
                    .and_then(|slices| {
                        let now = tracked.files.read_schedstat()?;
                        Some(now.timeslices.saturating_sub(slices))
                    });
                let evidence = ThreadEvidence {
                    holds: is_last_holder && word.locked,
                    released_last: is_last_holder && !word.locked,
                    kernel: kernel[i],
                    previous,
                    handoffs_since_previous: tracked
                        .definite_switch
                        .map(|p| word.switch_number.wrapping_sub(p)),
                    census,
                    owns_gil_mutex,
                    left_gil_mutex: tracked.owned_gil_mutex && owns_gil_mutex == Some(false),
                    no_switch_request,
                    arrivals_since_take_sleep,
                };
                tracked.owned_gil_mutex = owns_gil_mutex == Some(true);
                let (state, basis) = classify(&evidence, &ranges);
                let (state, basis) = match self.gil_flags.as_mut() {
                    Some(flags) => {
                        let memory = &self.target.memory;
                        // While the GIL is free a request is the uncontended fast path inside
                        // take_gil (nanoseconds, no wait): the flags decide only while another
                        // thread holds it.
                        let gil_free_or_ours = evidence.holds || !word.locked;
                        flags.decide(memory, tracked.tstate, (state, basis), gil_free_or_ours)
                    }
                    None => (state, basis),
                };
                let blocked_in = (state == GilState::Hold)
                    .then(|| blocking_syscall(kernel[i], |addr| ranges.contains(addr)))
                    .flatten();
                tracked
                    .blocked
                    .observe(tracked.tid, t, blocked_in, &params, &mut |s| {
                        sink(Record::HeldWhileBlocked(s))
                    });
                tracked.take_sleep_slices = match (state, basis) {
                    (GilState::Take, Basis::Direct) => tracked.sleep_proof.timeslices_asleep(),
                    (_, Basis::Ambiguous { .. }) => tracked.take_sleep_slices,
                    _ => None,
                };
                if let Some(dump) = dump.as_mut() {
                    let stat = tracked.files.read_schedstat();
                    let _ = writeln!(
                        dump,
                        "{t} {} {:?} holds={} last={} switch={} owner={:?} -> {state:?} {basis:?} {:?} {census:?}",
                        tracked.tid,
                        evidence.kernel,
                        evidence.holds,
                        evidence.released_last,
                        word.switch_number,
                        owns_gil_mutex,
                        stat
                    );
                }
                match basis {
                    Basis::Ambiguous { after } => {
                        if tracked.pending.is_none()
                            && after == GilState::Drop
                            && previous == Some(GilState::Take)
                        {
                            self.report.stretches_after_unseen_hold += 1;
                        }
                        let stretch = tracked.pending.get_or_insert_with(|| Stretch {
                            before: after,
                            // Judged once, when the stretch begins: the hold ended before it.
                            switch_request_possible: after == GilState::Hold
                                && word
                                    .interval_us
                                    .zip(tracked.hold_handoff_after)
                                    .is_some_and(|(interval_us, since)| {
                                        may_have_lasted(since, interval_us, t)
                                    }),
                            first_ns: t,
                            last_ns: t,
                            at_start: tracked.files.read_schedstat(),
                            arrival: None,
                        });
                        // A stretch is a run of consecutive samples: where the sampler fell behind it
                        // is settled at the gap (this sample is dropped; the next starts afresh).
                        let broken = t - stretch.last_ns > params.max_gap_ns;
                        if !broken && stretch.last_ns != t {
                            if stretch.arrival.is_none() {
                                stretch.watch(tracked.files.read_schedstat(), t);
                            }
                            stretch.last_ns = t;
                        }
                        if broken || t - stretch.first_ns > MAX_STRETCH_NS {
                            tracked.settle(Some(t), None, &params, &mut self.report, sink);
                        }
                        states.push(GilState::Released);
                        continue;
                    }
                    Basis::Direct => {}
                    Basis::GilMutex => self.report.running_by_gil_mutex += 1,
                    Basis::RunningStillWaiting => self.report.running_still_waiting += 1,
                    Basis::RunningReleased => self.report.running_released += 1,
                    Basis::Counted => self.report.running_counted += 1,
                }
                if tracked.pending.is_some() {
                    let next = tracked
                        .definite_switch
                        .map(|before| (state, word.switch_number.wrapping_sub(before)));
                    tracked.settle(Some(t), next, &params, &mut self.report, sink);
                }
                tracked.definite_switch = Some(word.switch_number);
                if state == GilState::Hold {
                    tracked.at_hold = tracked.files.read_schedstat();
                    tracked.hold_handoff_after = handoff_age.after_ns();
                    if let Some((from_tid, last_held_ns)) = last_hold
                        && from_tid != tracked.tid
                    {
                        sink(Record::Handoff(Handoff {
                            from_tid,
                            to_tid: tracked.tid,
                            last_held_ns,
                            taken_ns: t,
                        }));
                    }
                    last_hold = Some((tracked.tid, t));
                }
                if let Some(watch) = self.stacks.as_mut() {
                    let thread = (tracked.tid, tracked.tstate);
                    watch.observe(&self.target.memory, thread, previous, state, t, sink);
                }
                tracked
                    .timeline
                    .observe(t, state, &params, &mut |iv| sink(Record::Interval(iv)));
                states.push(state);
            }
            self.report.thread_samples += self.threads.len() as u64;

            let count = states.iter().filter(|&&s| s == GilState::Take).count() as u32;
            if waiters != Some(count) {
                waiters = Some(count);
                sink(Record::Waiters { t_ns: t, count });
            }
            if let Some(tid) = holder_tid {
                if last_holder.is_some_and(|from_tid| from_tid != tid) {
                    self.report.handoffs_seen += 1;
                }
                last_holder = Some(tid);
            }
            if dodge.as_mut().is_some_and(|d| d.check(t, holder_tid)) {
                self.report.cpu_moves += 1;
            }
            let first = *first_switch.get_or_insert(word.switch_number);
            self.report.handoffs_counted = word.switch_number.wrapping_sub(first);
            self.report.samples += 1;
            self.report.end_ns = t;
            live.samples.store(self.report.samples, Ordering::Relaxed);
            // Leave at least a quarter period idle even when a tick overran, so a real-time sampler
            // never monopolises a CPU.
            deadline = deadline.max(monotonic_ns() + period / 4);
        }
    }

    /// What the waiter counts say at this sample. They are read again after the kernel readings, only
    /// when some thread runs without the GIL (otherwise nothing is left to decide), and count only when
    /// both reads agree: a thread that entered or left a wait meanwhile would be counted at one moment
    /// and read by the kernel at another.
    fn census(
        &self,
        word: &GilWord,
        kernel: &[Option<KernelState>],
        ranges: &GilWaitRanges,
        at: &WaiterCounts,
        before: Waiters,
        all_read: bool,
    ) -> Census {
        let running = self
            .threads
            .iter()
            .zip(kernel)
            .filter(|(t, k)| {
                **k == Some(KernelState::Running) && !(word.locked && t.tstate == word.last_holder)
            })
            .count();
        if running == 0 || self.target.read_waiters(at).ok() != Some(before) {
            return Census::Unknown;
        }
        let asleep_in = |range: Option<(u64, u64)>| {
            kernel
                .iter()
                .filter_map(|k| k.and_then(|k| k.futex_addr()))
                .filter(|&a| inside(a, &[range]))
                .count() as u32
        };
        let asleep = Waiters {
            take: asleep_in(ranges.take[0]),
            drop: asleep_in(ranges.drop[0]),
        };
        census(before, asleep, running, all_read)
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

    /// Re-walks the thread list: closes threads that are gone, opens the /proc files of new ones.
    fn refresh(&mut self, now: u64, sink: &mut dyn FnMut(Record)) -> Result<(), WalkError> {
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
        let params = self.params;
        let report = &mut self.report;
        self.threads.retain_mut(|tracked| {
            if refs.iter().any(|r| r.tid == tracked.tid) {
                return true;
            }
            tracked.settle(None, None, &params, report, sink);
            tracked
                .timeline
                .close(Some(now), &params, &mut |iv| sink(Record::Interval(iv)));
            tracked
                .blocked
                .close(tracked.tid, Some(now), &params, &mut |s| {
                    sink(Record::HeldWhileBlocked(s))
                });
            false
        });
        for r in refs {
            if let Some(tracked) = self.threads.iter_mut().find(|t| t.tid == r.tid) {
                tracked.tstate = r.tstate;
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
            self.threads.push(Tracked::new(*r, files));
        }
        let names = &mut self.report.thread_names;
        self.namer
            .name_new_threads(&target.memory, &target.layout, target.runtime, refs, names);
        if let Some(watch) = self.stacks.as_mut() {
            watch.retain(|tid| refs.iter().any(|r| r.tid == tid));
        }
        self.report.max_threads = self.report.max_threads.max(self.threads.len());
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn this_thread() -> Tracked {
        let tid = nix::unistd::gettid().as_raw() as u32;
        Tracked::new(
            ThreadRef {
                tstate: RemoteAddr(0x1000),
                tid,
                their_tid: tid,
            },
            ThreadFiles::open(std::process::id(), tid).unwrap(),
        )
    }

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
    fn stretch_state(at_hold: SchedStat, at_start: SchedStat) -> (GilState, SamplerReport) {
        stretch_state_after(at_hold, at_start, false)
    }

    /// The same, for a hold that may (`long_hold`) or may not have lasted a switch interval.
    fn stretch_state_after(
        at_hold: SchedStat,
        at_start: SchedStat,
        long_hold: bool,
    ) -> (GilState, SamplerReport) {
        let params = TimelineParams::for_period(100_000);
        let mut report = SamplerReport::new(0, Scheduling::Inherited);
        let mut intervals = Vec::new();
        let mut sink = |record| {
            if let Record::Interval(iv) = record {
                intervals.push(iv)
            }
        };
        let mut tracked = this_thread();
        tracked.at_hold = Some(at_hold);
        tracked
            .timeline
            .observe(1_000_000, GilState::Hold, &params, &mut |iv| {
                sink(Record::Interval(iv))
            });
        tracked.pending = Some(Stretch {
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
        tracked.settle(
            Some(1_400_000),
            Some((GilState::Take, 1)),
            &params,
            &mut report,
            &mut sink,
        );
        tracked
            .timeline
            .observe(1_400_000, GilState::Take, &params, &mut |iv| {
                sink(Record::Interval(iv))
            });
        tracked
            .timeline
            .close(None, &params, &mut |iv| sink(Record::Interval(iv)));
        let at = |t: u64| {
            intervals
                .iter()
                .find(|iv| iv.start_ns <= t && t < iv.end_ns)
                .map(|iv| iv.state)
        };
        (at(1_200_000).unwrap(), report)
    }

    #[test]
    fn a_former_holder_woken_twice_onto_a_cpu_is_in_take_gil() {
        let (state, report) = stretch_state(stat(10, 500), stat(12, 500));
        assert_eq!(state, GilState::Take);
        assert_eq!(report.stretches_woken_twice, 1);
        assert_eq!(report.stretches_in_gil_call, 1);
    }

    #[test]
    fn a_long_holder_that_got_a_cpu_three_times_is_back_in_take_gil() {
        // Three arrivals with run-queue waits: after a switch request, drop_gil's wait and
        // take_gil's.
        let (state, report) = stretch_state_after(stat(10, 500), stat(13, 900), true);
        assert_eq!(state, GilState::Take);
        assert_eq!(report.stretches_back_after_switch_request, 1);
        assert_eq!(report.stretches_woken_twice, 0);
        // A hold too short to be asked to switch: preempted over and over inside drop_gil.
        let (state, report) = stretch_state_after(stat(10, 500), stat(13, 900), false);
        assert_eq!(state, GilState::Drop);
        assert_eq!(report.stretches_back_after_switch_request, 0);
        // Two arrivals with a wait are not enough, however long the hold.
        let (state, _) = stretch_state_after(stat(10, 500), stat(12, 900), true);
        assert_eq!(state, GilState::Drop);
    }

    #[test]
    fn a_former_holder_that_waited_on_a_run_queue_is_still_in_drop_gil() {
        for at_start in [stat(12, 900), stat(11, 500)] {
            let (state, report) = stretch_state(stat(10, 500), at_start);
            assert_eq!(state, GilState::Drop, "{at_start:?}");
            assert_eq!(report.stretches_woken_twice, 0);
        }
    }
}
