//! Each tick's reading of every Python thread's kernel state, and what spares reads: a thread
//! asleep 20 ms in the same non-GIL wait is read only every few ticks, or not at all while the GIL's
//! waiter counts rule it out of every GIL wait (infer/counted_out.rs); a thread asleep in
//! `take_gil`'s wait is not read while `gil.cond` reads the same as before its last reading
//! (`CondStamp`); and a sleeper's reading is proven unchanged by schedstat where it can be.

use std::collections::{HashMap, HashSet};

use crate::addr::RemoteAddr;
use crate::infer::classify::asleep_elsewhere;
use crate::infer::counted_out::{ReadThreads, asleep_in_waits, unread_are_outside_the_gil};
use crate::infer::sample::{Sample, ThreadSample};
use crate::observed::{GilWaitRanges, KernelState, Waiters};
use crate::process::kernel::{KernelReading, SleepProof, ThreadFiles};
use crate::python::gil_span::{CondStamp, WaiterCountAddrs, WaiterWords};
use crate::python::runtime::ThreadRef;
use crate::python::target::Target;
use crate::sampler::clock::{monotonic_ns, sleep_until};
use crate::sampler::report::SamplerReport;

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

/// Counting idle threads out costs one more read of the waiter counts at every tick that leaves one
/// unread; reading them every `IDLE_READ_EVERY`th tick instead costs a quarter read each. So with
/// fewer idle threads than this the every-few-ticks reads are the cheaper, and they are used (the
/// cost zoo's small targets, one idle main thread beside the workers: 0.8–1 more system call per
/// tick before this, docs/cost.md).
const COUNTED_OUT_FROM: usize = IDLE_READ_EVERY as usize;

/// How many times a tick whose counts did not rule its idle threads out reads its other threads and
/// the counts again before it reads the idle ones (`ThreadTable::count_out`). On a 2-core machine
/// with 2 spinners beside 398 threads in `Event.wait`, most refuted ticks were a hand-off under way
/// (a waiter registered on `gil.cond` but not asleep yet, the GIL's mutex retaken, the counts
/// moving between their two reads).
const COUNT_OUT_RETRIES: usize = 4;

/// Before each retry after the first, the tick sleeps this long: a real-time sampler keeps the
/// target's threads off its own CPU, and the one whose next step settles the counts is often among
/// them. On that machine the GIL's mutex, once found contended, stayed so until the next hand-off
/// moved the counts, 100–200 µs later whatever the sleep: after 5 µs sleeps nearly every such tick
/// was refuted; after 20 µs ones, settled at the fourth retry or refuted (14–30 a 3 s run, each
/// then reading 398 threads: a hole of 10 periods); after 50 µs ones, settled at the third, 0–4
/// refuted, with the rate, the sampler's CPU and the target's work the same (5 rounds side by side).
const LET_THE_TARGET_RUN_NS: u64 = 50_000;

/// What a retry after that sleep costs, in kernel-state reads (about 1.4 µs each): such a retry
/// took 60–90 µs of the tick on that machine (the sleep, the wake-up on a busy CPU, the reads). A
/// target with 4 idle threads beside 2 spinners ran 100–300 µs ticks of retries where reading the 4
/// would have taken 6 µs, and missed 1–2 periods each time. A sleeping retry is made only where the
/// unread threads cost more than this.
const SLEEPING_RETRY_IN_READS: usize = 50;

/// Set in the environment, every tick also reads the waiter counts a second time after the kernel
/// readings and saves them (`Sample::waiters_again`), so that a stream recorded with
/// `--no-idle-backoff` shows what the counted-out rule would have decided at every tick, next to every
/// thread's real state (tests/counted_out.rs).
pub const CHECK_COUNTED_OUT: &str = "GILSAMPLE_CHECK_COUNTED_OUT";

/// Set in the environment, every thread that the unchanged `gil.cond` proves still waiting is read
/// anyway, and the GIL read again after the tick's first pass; where that read finds the same stamp
/// (so it brackets the thread's reading), the reading is judged: asleep on `gil.cond`, or running
/// inside the wait (woken by its timeout and not yet out of glibc's wait), and never the holder.
/// The trace's metadata counts what was judged and refuted (`proven_waiting_check`;
/// tests/proven_waiting.rs).
pub const CHECK_PROVEN_WAITING: &str = "GILSAMPLE_CHECK_PROVEN_WAITING";

/// What the sampler keeps per thread to read it: its /proc files and what spares reads.
pub(super) struct WatchedThread {
    pub(super) thread: ThreadRef,
    pub(super) files: ThreadFiles,
    /// The last kernel reading, and since when the thread has been asleep in that same non-GIL wait.
    pub(super) last_kernel: Option<KernelState>,
    pub(super) idle_since: Option<u64>,
    /// What proves a sleeping thread's last reading still current (`ThreadFiles::read_state_since`).
    pub(super) sleep_proof: SleepProof,
    /// The GIL's `CondStamp` of the tick of its last reading, read before that reading.
    pub(super) stamp_at_reading: Option<CondStamp>,
}

/// The threads the sampler reads, in the sample's order, and the tick's idle ones left unread.
#[derive(Default)]
pub(super) struct ThreadTable {
    pub(super) threads: Vec<WatchedThread>,
    /// The tick's idle threads left unread for now (indices into `threads` and the sample's threads).
    unread: Vec<usize>,
    /// The others (the same indices): the threads whose readings are the evidence for the unread.
    read: Vec<usize>,
    /// How many threads were idle (and outside the GIL) at the last tick.
    idle_last_tick: usize,
    /// The tick's threads, other than the holder, found asleep on `gil.cond` at their last reading
    /// and read again now (infer/counted_out.rs, `ReadThreads::woken_from_cond`).
    woken_from_cond: Vec<usize>,
    /// With `CHECK_PROVEN_WAITING`: the tick's threads proven still waiting, and what reading them
    /// anyway found.
    checks: Vec<(usize, Option<KernelState>)>,
    /// The tick's `CondStamp`, read before any of its threads.
    tick_stamp: Option<CondStamp>,
    /// Ticks read so far: spreads the threads' every-few-ticks turns over the ticks.
    ticks: u64,
    /// Where `index_of_thread_state` last found what it looked for.
    last_found: usize,
    /// Each thread's index by tid (`reindex`).
    index_by_tid: HashMap<u32, usize>,
    /// The tids of the last walk (`follow`).
    walked: HashSet<u32>,
}

impl ThreadTable {
    /// The index of the thread whose thread state is at `tstate`, if it is one of the table's.
    /// Asked for the GIL's holder at every tick, which changes far less often: where it was found
    /// last is looked at first, and the walk over every thread is left for a new holder.
    pub(super) fn index_of_thread_state(&mut self, tstate: RemoteAddr) -> Option<usize> {
        let at_last = self.threads.get(self.last_found);
        if at_last.is_some_and(|t| t.thread.tstate == tstate) {
            return Some(self.last_found);
        }
        let index = self
            .threads
            .iter()
            .position(|t| t.thread.tstate == tstate)?;
        self.last_found = index;
        Some(index)
    }

    /// The index of thread `tid` (ours), as of the last `reindex`.
    pub(super) fn index_of(&self, tid: u32) -> Option<usize> {
        self.index_by_tid.get(&tid).copied()
    }

    /// The threads changed: `index_of` follows.
    pub(super) fn reindex(&mut self) {
        self.index_by_tid.clear();
        let tids = self.threads.iter().map(|t| t.thread.tid);
        self.index_by_tid
            .extend(tids.enumerate().map(|(i, tid)| (tid, i)));
    }

    /// Makes the table the threads a walk found (`refs`, tids ours): drops those gone, takes each
    /// kept one's thread state from the walk, and adds those `open` gives /proc files for (one that
    /// exited since the walk has none: the next walk drops it). Looked up by tid, not searched: a
    /// search per thread cost about a millisecond a walk with 400 threads. True when two thread
    /// states named one thread (the later one is kept, `Sampler::refresh`).
    pub(super) fn follow(
        &mut self,
        refs: &[ThreadRef],
        mut open: impl FnMut(&ThreadRef) -> Option<ThreadFiles>,
    ) -> bool {
        self.walked.clear();
        self.walked.extend(refs.iter().map(|r| r.tid));
        let walked = &self.walked;
        self.threads.retain(|t| walked.contains(&t.thread.tid));
        self.reindex();
        for r in refs {
            if let Some(&index) = self.index_by_tid.get(&r.tid) {
                self.threads[index].thread.tstate = r.tstate;
                continue;
            }
            let Some(files) = open(r) else {
                continue;
            };
            self.index_by_tid.insert(r.tid, self.threads.len());
            self.threads.push(WatchedThread {
                thread: *r,
                files,
                last_kernel: None,
                idle_since: None,
                sleep_proof: SleepProof::default(),
                stamp_at_reading: None,
            });
        }
        self.walked.len() < refs.len()
    }

    /// Each thread's kernel state into `sample.threads` (in the thread table's order), and
    /// `sample.all_kernel_read`: none was carried over from an earlier tick that could have changed
    /// since (a waiter proven still waiting can not). Reads are spared as `spare` allows; where the
    /// waiter counts were read again to rule idle threads out, and nothing was read after that,
    /// those counts are returned for the engine's recount.
    pub(super) fn read_kernel_states(
        &mut self,
        target: &Target,
        report: &mut SamplerReport,
        sample: &mut Sample,
        ranges: &GilWaitRanges,
        gil: FirstRead,
        spare: ReadsSpared,
    ) -> Option<Waiters> {
        self.tick_stamp = gil.cond_stamp;
        self.ticks += 1;
        let carried_over = self.first_pass(sample, ranges, spare, report);
        sample.all_kernel_read = !carried_over;
        if !self.checks.is_empty() {
            self.check_proven_waiting(target, gil.counts, sample, ranges, report);
        }
        self.settle_unread(target, sample, ranges, gil, report)
    }

    /// The tick's pass over every thread: reads each one, or carries its last reading over where
    /// `spare` allows (an idle thread left for the counts to rule out goes into `unread`). True when
    /// a carried-over reading could have changed since (one skipped on an every-few-ticks turn).
    fn first_pass(
        &mut self,
        sample: &mut Sample,
        ranges: &GilWaitRanges,
        spare: ReadsSpared,
        report: &mut SamplerReport,
    ) -> bool {
        let (now, word, stamp, tick) = (sample.read_ns, sample.word, self.tick_stamp, self.ticks);
        let mutex_owner = sample.mutex_owner;
        let out = &mut sample.threads;
        // Kept from the last tick and written in place: most of a large thread table reads the same
        // from one tick to the next, and only what changed is written.
        out.truncate(self.threads.len());
        self.unread.clear();
        self.read.clear();
        self.woken_from_cond.clear();
        self.checks.clear();
        let count_out = spare.counted_out && self.idle_last_tick >= COUNTED_OUT_FROM;
        let mut idle_now = 0;
        let mut carried_over = false;
        for (index, tracked) in self.threads.iter_mut().enumerate() {
            let is_idle = tracked
                .idle_since
                .is_some_and(|since| now.saturating_sub(since) >= IDLE_AFTER_NS);
            // Never the holder, nor the mutex's owner: they are inside the GIL.
            let in_gil = tracked.thread.tstate == word.last_holder
                || mutex_owner == Some(tracked.thread.their_tid);
            idle_now += usize::from(is_idle && !in_gil);
            let turn = |every: u64| (tick + u64::from(tracked.thread.tid)).is_multiple_of(every);
            let left_unread = is_idle && !in_gil && count_out && !turn(COUNTED_OUT_READ_EVERY);
            if left_unread {
                self.unread.push(index);
            } else {
                self.read.push(index);
            }
            let was_on_cond = tracked
                .last_kernel
                .and_then(|k| k.futex_addr())
                .is_some_and(|addr| ranges.on_cond(addr));
            let still_waiting =
                spare.proven_waiting && !in_gil && was_on_cond && still_waiting(tracked, stamp);
            let kernel = if left_unread {
                tracked.last_kernel
            } else if still_waiting {
                report.kernel_reads_proven_waiting += 1;
                if spare.check_proven_waiting {
                    self.checks.push((index, tracked.files.read_state().ok()));
                }
                tracked.last_kernel
            } else if is_idle
                && !in_gil
                && !count_out
                && spare.every_few_ticks
                && !turn(IDLE_READ_EVERY)
            {
                report.kernel_reads_skipped += 1;
                carried_over = true;
                tracked.last_kernel
            } else {
                if was_on_cond && !in_gil {
                    self.woken_from_cond.push(index);
                }
                read_tracked(tracked, now, ranges, report, stamp)
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
        self.idle_last_tick = idle_now;
        carried_over
    }

    /// The idle threads the first pass left unread: ruled out by the waiter counts
    /// (`count_out`), or read now. Returns the counts read last where they bracket the tick's
    /// first readings (no thread was read again before them), for the engine's recount.
    fn settle_unread(
        &mut self,
        target: &Target,
        sample: &mut Sample,
        ranges: &GilWaitRanges,
        gil: FirstRead,
        report: &mut SamplerReport,
    ) -> Option<Waiters> {
        let (Some(at), Some(counted), false) = (gil.counts, sample.waiters, self.unread.is_empty())
        else {
            return None;
        };
        let first = WaiterWords {
            waiters: counted,
            mutex_owner: sample.mutex_owner,
            mutex_contended: gil.mutex_contended,
        };
        match self.count_out(target, at, first, &mut sample.threads, ranges, report) {
            Ok(proof) => {
                report.kernel_reads_counted_out += self.unread.len() as u64;
                sample.all_kernel_read = false;
                // Counts read after re-readings no longer bracket the tick's first readings.
                (proof.rereads == 0).then_some(proof.again)
            }
            Err(why) => {
                match why {
                    NotCountedOut::Refuted => report.counted_out_refuted += 1,
                    NotCountedOut::CheaperToRead => report.counted_out_read_instead += 1,
                }
                let (now, stamp) = (sample.read_ns, self.tick_stamp);
                for &index in &self.unread {
                    let (tracked, seen) = (&mut self.threads[index], &mut sample.threads[index]);
                    read_into(tracked, seen, (now, stamp), ranges, report);
                }
                None
            }
        }
    }

    /// `CHECK_PROVEN_WAITING`: the GIL read again; where its stamp is the tick's, each reading of
    /// a thread proven still waiting is judged (`CHECK_PROVEN_WAITING`'s rule) and counted.
    fn check_proven_waiting(
        &mut self,
        target: &Target,
        counts: Option<&WaiterCountAddrs>,
        sample: &Sample,
        ranges: &GilWaitRanges,
        report: &mut SamplerReport,
    ) {
        let Ok(after) = target.read_gil(counts) else {
            return;
        };
        if after.cond_stamp != self.tick_stamp {
            return;
        }
        for &(index, reading) in &self.checks {
            let Some(reading) = reading else {
                continue;
            };
            let in_the_wait = match reading {
                KernelState::Running => true,
                other => other.futex_addr().is_some_and(|addr| ranges.on_cond(addr)),
            };
            let holds = after.word.last_holder == sample.threads[index].tstate;
            report.proven_waiting_checked += 1;
            if !in_the_wait || holds {
                report.proven_waiting_refuted += 1;
            }
        }
    }

    /// Whether the idle threads left unread are outside the GIL (infer/counted_out.rs): the waiter
    /// words `before` (read with the GIL's), the threads' readings, and the counts read again now.
    /// Where that fails, the read threads are read again and then the counts, up to
    /// `COUNT_OUT_RETRIES` times, while that costs less than reading the unread threads (the sleep
    /// included: `SLEEPING_RETRY_IN_READS`): counts that moved, a mutex contended or a waiter not
    /// yet asleep are over once the target's threads get a CPU, and reading a few hundred idle
    /// threads would take longer than a period. `Err` says why the unread threads must be read.
    fn count_out(
        &mut self,
        target: &Target,
        at: &WaiterCountAddrs,
        mut before: WaiterWords,
        out: &mut [ThreadSample],
        ranges: &GilWaitRanges,
        report: &mut SamplerReport,
    ) -> Result<CountedOut, NotCountedOut> {
        let at_stamp = self.tick_stamp;
        for rereads in 0..=COUNT_OUT_RETRIES {
            let after = target
                .read_waiter_words(at)
                .map_err(|_| NotCountedOut::Refuted)?;
            let read = self.evidence(out, before.mutex_owner, ranges);
            if unread_are_outside_the_gil(
                before.waiters,
                after.waiters,
                read,
                before.mutex_contended,
            ) {
                if rereads > 0 {
                    report.counted_out_on_retry += 1;
                }
                return Ok(CountedOut {
                    again: after.waiters,
                    rereads,
                });
            }
            // The next retry reads the read threads and the counts, after a sleep but the first.
            let sleep_in_reads = if rereads > 0 {
                SLEEPING_RETRY_IN_READS
            } else {
                0
            };
            if rereads == COUNT_OUT_RETRIES {
                break;
            }
            if self.read.len() + 1 + sleep_in_reads >= self.unread.len() {
                return Err(NotCountedOut::CheaperToRead);
            }
            let mut now = monotonic_ns();
            if rereads > 0 {
                // Often the thread that would settle it (a waiter about to sleep, the mutex's
                // owner about to let it go) is runnable on this CPU, kept off it by this
                // real-time tick: let it run.
                sleep_until(now + LET_THE_TARGET_RUN_NS);
                now = monotonic_ns();
            }
            for &index in &self.read {
                read_into(
                    &mut self.threads[index],
                    &mut out[index],
                    (now, at_stamp),
                    ranges,
                    report,
                );
            }
            before = after;
        }
        Err(NotCountedOut::Refuted)
    }

    /// What the tick's readings of the threads it read show (`ReadThreads`).
    fn evidence(
        &self,
        out: &[ThreadSample],
        mutex_owner: Option<u32>,
        ranges: &GilWaitRanges,
    ) -> ReadThreads {
        let read_threads = || self.read.iter().map(|&i| &out[i]);
        ReadThreads {
            asleep: asleep_in_waits(read_threads(), ranges),
            woken_from_cond: self
                .woken_from_cond
                .iter()
                .filter(|&&i| out[i].kernel == Some(KernelState::Running))
                .count() as u32,
            mutex_owner_read: match mutex_owner {
                None | Some(0) => true,
                Some(owner) => read_threads().any(|t| t.their_tid == owner),
            },
        }
    }
}

/// The counts proved the unread threads outside the GIL: the counts read last, and how many times
/// the read threads were read again first.
struct CountedOut {
    again: Waiters,
    rereads: usize,
}

/// Why a tick read its idle threads after all.
enum NotCountedOut {
    /// The counts did not rule them out, after every retry (or could not be read again).
    Refuted,
    /// They did not yet, and reading the idle threads costs less than another retry (a small
    /// target: `SLEEPING_RETRY_IN_READS`).
    CheaperToRead,
}

/// How a tick may spare reads.
#[derive(Clone, Copy)]
pub(super) struct ReadsSpared {
    /// Read idle threads (`IDLE_AFTER_NS`) only every `IDLE_READ_EVERY`th tick.
    pub(super) every_few_ticks: bool,
    /// Leave idle threads unread while the waiter counts rule them out (infer/counted_out.rs).
    pub(super) counted_out: bool,
    /// Leave a thread asleep in `take_gil`'s wait unread while `gil.cond` reads the same as at the
    /// tick of its last reading (`still_waiting`).
    pub(super) proven_waiting: bool,
    /// `CHECK_PROVEN_WAITING` is set.
    pub(super) check_proven_waiting: bool,
}

/// What the tick's first read of the GIL brought that decides which threads are read.
#[derive(Clone, Copy)]
pub(super) struct FirstRead<'a> {
    /// Where the waiter counts lie, where they are read.
    pub(super) counts: Option<&'a WaiterCountAddrs>,
    /// As `GilReading::mutex_contended`.
    pub(super) mutex_contended: Option<bool>,
    /// As `GilReading::cond_stamp`.
    pub(super) cond_stamp: Option<CondStamp>,
}

/// For a thread whose last reading found it asleep in `take_gil`'s wait (the caller checks):
/// whether the GIL's `stamp` is the one read before that reading, so that it is inside that wait
/// still (`CondStamp`). Neither holding the GIL (the caller leaves the holder out) nor having left
/// the wait, it is waiting: its last reading stands for this tick's. Woken by its wait's timeout,
/// it may be running inside glibc's wait at this moment, and stays a waiter for the GIL all the same.
fn still_waiting(tracked: &WatchedThread, stamp: Option<CondStamp>) -> bool {
    stamp.is_some() && tracked.stamp_at_reading == stamp
}

/// A thread read again after the tick's first pass (at `now`, the tick's GIL read having brought
/// `stamp`): its kernel state and sleep proof into `seen`.
fn read_into(
    tracked: &mut WatchedThread,
    seen: &mut ThreadSample,
    (now, stamp): (u64, Option<CondStamp>),
    ranges: &GilWaitRanges,
    report: &mut SamplerReport,
) {
    seen.kernel = read_tracked(tracked, now, ranges, report, stamp);
    seen.slices_before_sleep = tracked.sleep_proof.timeslices_asleep();
}

/// Reads one thread's kernel state (or proves its last one unchanged) and keeps what spares later
/// reads: the reading, since when it has been asleep in the same non-GIL wait, and the GIL's stamp
/// read before it (`stamp`, the tick's).
fn read_tracked(
    tracked: &mut WatchedThread,
    now: u64,
    ranges: &GilWaitRanges,
    report: &mut SamplerReport,
    stamp: Option<CondStamp>,
) -> Option<KernelState> {
    tracked.stamp_at_reading = stamp;
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
