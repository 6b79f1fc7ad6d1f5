//! Each tick's reading of every Python thread's kernel state, and what spares reads: a thread
//! asleep 20 ms in the same non-GIL wait is read only every few ticks, or not at all while the GIL's
//! waiter counts rule it out of every GIL wait (infer/counted_out.rs); a thread asleep in
//! `take_gil`'s wait is not read while `gil.cond` reads the same as before its last reading
//! (`CondStamp`); a sleeper's reading is proven unchanged by schedstat where it can be, and so is a
//! running thread's where its schedstat is wanted at the tick anyway (the holder's). An idle
//! thread left unread is not even looked at beyond its `FirstLook`: its entry in the sample is the
//! last tick's, marked so for the engine (`Sample::unchanged_outside`).

use std::collections::{HashMap, HashSet};

use crate::addr::RemoteAddr;
use crate::infer::classify::asleep_elsewhere;
use crate::infer::sample::{Sample, ThreadSample, Wants};
use crate::observed::{GilWaitRanges, KernelState, SchedStat, Waiters};
use crate::process::kernel::{KernelReading, StateProof, ThreadFiles};
use crate::python::gil_span::{CondStamp, WaiterCountAddrs};
use crate::python::runtime::ThreadRef;
use crate::python::target::Target;
use crate::sampler::report::SamplerReport;

mod unread_idle;

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

/// Set in the environment, every thread whose running schedstat proves still running
/// (`ThreadFiles::read_state_since`) has its syscall file read anyway, and its schedstat again after
/// that; where the second schedstat still proves it (so it brackets the reading), the reading is
/// judged: running, or the proof is refuted. The trace's metadata counts what was judged and
/// refuted (`running_proof_check`; tests/running_proof.rs).
pub const CHECK_RUNNING_PROOF: &str = "GILSAMPLE_CHECK_RUNNING_PROOF";

/// What the tick's first pass looks at of every thread, kept apart from the rest of its entry
/// (`WatchedThread`): for an idle thread it leaves unread, these 32 bytes are all the tick touches.
/// With 398 threads in `Event.wait` beside 2 spinners, touching each one's whole entry and its
/// sample at every tick was a sixth of the sampler's CPU, most of it cache misses (docs/cost.md).
#[derive(Clone, Copy)]
struct FirstLook {
    thread: ThreadRef,
    /// Since when the thread has been asleep in the same non-GIL wait (its last reading's).
    idle_since: Option<u64>,
}

/// What the sampler keeps per thread to read it: its /proc files and what spares reads.
pub(super) struct WatchedThread {
    files: ThreadFiles,
    /// The last kernel reading.
    last_kernel: Option<KernelState>,
    /// What proves a sleeping or running thread's last reading still current
    /// (`ThreadFiles::read_state_since`).
    state_proof: StateProof,
    /// The GIL's `CondStamp` of the tick of its last reading, read before that reading.
    stamp_at_reading: Option<CondStamp>,
    /// Found by the walk made before the first tick, and not read since (`read_tracked`).
    unread_since_attach: bool,
}

/// The threads the sampler reads, in the sample's order, and the tick's idle ones left unread.
#[derive(Default)]
pub(super) struct ThreadTable {
    /// Per thread, in the sample's order: what the first pass looks at.
    looks: Vec<FirstLook>,
    /// Per thread, in the same order: the rest of what reading it takes.
    threads: Vec<WatchedThread>,
    /// Whether the sample's kept thread entries are this table's threads as the last tick left
    /// them (no walk of the thread list since, which may have moved them): an idle thread left
    /// unread then keeps its entry as it is.
    entries_current: bool,
    /// Whether this tick's unread threads kept their entries (`entries_current` at its start).
    unread_entries_kept: bool,
    /// Entries given a schedstat or GIL flags reading after the last tick's kernel readings
    /// (`read_schedstat`, `wrote_flags`): the next first pass takes those out again.
    extras: Vec<usize>,
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
    /// The idle threads a round of refuted ticks has yet to read, the next one last
    /// (`put_off_beyond`); empty where no round is under way. Indices: a walk ends the round.
    round: Vec<usize>,
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
        let at_last = self.looks.get(self.last_found);
        if at_last.is_some_and(|t| t.thread.tstate == tstate) {
            return Some(self.last_found);
        }
        let index = self.looks.iter().position(|t| t.thread.tstate == tstate)?;
        self.last_found = index;
        Some(index)
    }

    /// The index of thread `tid` (ours), as of the last `reindex`.
    pub(super) fn index_of(&self, tid: u32) -> Option<usize> {
        self.index_by_tid.get(&tid).copied()
    }

    /// How many threads the table holds.
    pub(super) fn len(&self) -> usize {
        self.looks.len()
    }

    /// The schedstat readings the engine asked for (`wants`) into the tick's sample: of the threads
    /// it named and of the holder (`holder`, its index), looked up rather than asked of every
    /// thread (hundreds, in a large process).
    pub(super) fn read_wanted_schedstat(
        &mut self,
        sample: &mut Sample,
        wants: &Wants,
        holder: Option<usize>,
    ) {
        let (locked, last_holder) = (sample.word.locked, sample.word.last_holder);
        let named = wants.schedstat_always.iter();
        let named = named.chain(&wants.schedstat_if_running);
        let by_tid = &self.index_by_tid;
        let indices = named.filter_map(|tid| by_tid.get(tid).copied());
        for index in indices.chain(holder) {
            let (Some(seen), Some(tracked)) =
                (sample.threads.get_mut(index), self.threads.get(index))
            else {
                continue;
            };
            let holds = locked && seen.tstate == last_holder;
            if seen.schedstat.is_none() && wants.schedstat(seen.tid, seen.runs(), holds) {
                seen.schedstat = tracked.files.read_schedstat();
                self.extras.push(index);
            }
        }
    }

    /// Thread `index`'s entry in the tick's sample was given GIL flags: the next tick's first pass
    /// takes them out again.
    pub(super) fn wrote_flags(&mut self, index: usize) {
        self.extras.push(index);
    }

    /// Takes the marks (`Sample::unchanged_outside`) off the entries given a schedstat or flags
    /// reading since this tick's first pass (`extras`): the engine reads those.
    pub(super) fn unmark_extras(&self, marks: &mut [bool]) {
        for &index in &self.extras {
            if let Some(mark) = marks.get_mut(index) {
                *mark = false;
            }
        }
    }

    /// The threads changed: `index_of` follows.
    fn reindex(&mut self) {
        self.index_by_tid.clear();
        let tids = self.looks.iter().map(|t| t.thread.tid);
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
        // Both lists the same way, in step: `retain` visits each entry once, in order.
        let mut kept = self.looks.iter().map(|t| walked.contains(&t.thread.tid));
        self.threads.retain(|_| kept.next().unwrap_or(false));
        self.looks.retain(|t| walked.contains(&t.thread.tid));
        self.reindex();
        // The sample's entries are by index: the next tick writes every one.
        self.entries_current = false;
        self.round.clear();
        let at_attach = self.ticks == 0;
        for r in refs {
            if let Some(&index) = self.index_by_tid.get(&r.tid) {
                self.looks[index].thread.tstate = r.tstate;
                continue;
            }
            let Some(files) = open(r) else {
                continue;
            };
            self.index_by_tid.insert(r.tid, self.looks.len());
            self.looks.push(FirstLook {
                thread: *r,
                idle_since: None,
            });
            self.threads.push(WatchedThread {
                files,
                last_kernel: None,
                state_proof: StateProof::default(),
                stamp_at_reading: None,
                unread_since_attach: at_attach,
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
        (spare, wants): (ReadsSpared, &Wants),
    ) -> Option<Waiters> {
        self.tick_stamp = gil.cond_stamp;
        self.ticks += 1;
        let carried_over = self.first_pass(sample, ranges, (spare, wants), report);
        sample.all_kernel_read = !carried_over;
        if !self.checks.is_empty() {
            self.check_proven_waiting(target, gil.counts, sample, ranges, report);
        }
        self.settle_unread(target, sample, ranges, gil, report)
    }

    /// The tick's pass over every thread: reads each one, or carries its last reading over where
    /// `spare` allows (an idle thread left for the counts to rule out goes into `unread`). True when
    /// a carried-over reading could have changed since (one skipped on an every-few-ticks turn).
    /// A thread whose schedstat `wants` asks for (or the holder's) gets it here, read before its
    /// syscall file, which it may spare (`ThreadFiles::read_state_since`).
    fn first_pass(
        &mut self,
        sample: &mut Sample,
        ranges: &GilWaitRanges,
        (spare, wants): (ReadsSpared, &Wants),
        report: &mut SamplerReport,
    ) -> bool {
        let (now, word, stamp, tick) = (sample.read_ns, sample.word, self.tick_stamp, self.ticks);
        let mutex_owner = sample.mutex_owner;
        let out = &mut sample.threads;
        // Kept from the last tick and written in place: most of a large thread table reads the same
        // from one tick to the next, and only what changed is written. What the engine asked for
        // after the last tick's readings is taken out first: no entry carries it into this tick.
        let entries_current = self.entries_current && out.len() == self.threads.len();
        out.truncate(self.threads.len());
        for index in self.extras.drain(..) {
            if let Some(entry) = out.get_mut(index) {
                (entry.schedstat, entry.gil_flags) = (None, None);
            }
        }
        sample.unchanged_outside.clear();
        sample.unchanged_outside.resize(self.threads.len(), false);
        self.unread_entries_kept = entries_current;
        self.unread.clear();
        self.read.clear();
        self.woken_from_cond.clear();
        self.checks.clear();
        let count_out = spare.counted_out && self.idle_last_tick >= COUNTED_OUT_FROM;
        let mut idle_now = 0;
        let mut carried_over = false;
        let threads = self.looks.iter_mut().zip(self.threads.iter_mut());
        for (index, (look, tracked)) in threads.enumerate() {
            let thread = look.thread;
            let is_idle = look
                .idle_since
                .is_some_and(|since| now.saturating_sub(since) >= IDLE_AFTER_NS);
            // Never the holder, nor the mutex's owner: they are inside the GIL.
            let in_gil = thread.tstate == word.last_holder || mutex_owner == Some(thread.their_tid);
            let holds = word.locked && thread.tstate == word.last_holder;
            idle_now += usize::from(is_idle && !in_gil);
            let turn = |every: u64| (tick + u64::from(thread.tid)).is_multiple_of(every);
            let left_unread = is_idle && !in_gil && count_out && !turn(COUNTED_OUT_READ_EVERY);
            if left_unread {
                self.unread.push(index);
                if entries_current {
                    // Its entry is the last tick's reading of it, what this tick would write.
                    debug_assert_eq!(
                        out.get(index),
                        Some(&entry_of(thread, tracked, tracked.last_kernel)),
                        "a kept entry differs from the thread's last reading"
                    );
                    continue;
                }
            } else {
                self.read.push(index);
            }
            let was_on_cond = tracked
                .last_kernel
                .and_then(|k| k.futex_addr())
                .is_some_and(|addr| ranges.on_cond(addr));
            let still_waiting =
                spare.proven_waiting && !in_gil && was_on_cond && still_waiting(tracked, stamp);
            let mut schedstat = None;
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
                let last_runs = tracked.last_kernel == Some(KernelState::Running);
                let asked = Asked {
                    schedstat: spare.proven_running
                        && wants.schedstat(thread.tid, last_runs, holds),
                    check_running_proof: spare.check_running_proof,
                };
                let reading = (now, stamp);
                let (kernel, before) = read_tracked(
                    tracked,
                    &mut look.idle_since,
                    reading,
                    (ranges, asked),
                    report,
                );
                let runs = kernel == Some(KernelState::Running);
                schedstat = before.filter(|_| wants.schedstat(thread.tid, runs, holds));
                kernel
            };
            let mut seen = entry_of(thread, tracked, kernel);
            if schedstat.is_some() {
                // Taken out again by the next first pass, should the thread then be left unread.
                seen.schedstat = schedstat;
                self.extras.push(index);
            }
            match out.get_mut(index) {
                Some(last) if *last == seen => {}
                Some(last) => *last = seen,
                None => out.push(seen),
            }
        }
        self.idle_last_tick = idle_now;
        self.entries_current = true;
        carried_over
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
    /// Read the schedstat the engine wants before the syscall file, and leave a running thread it
    /// proves still running unread (`ThreadFiles::read_state_since`).
    pub(super) proven_running: bool,
    /// `CHECK_RUNNING_PROOF` is set.
    pub(super) check_running_proof: bool,
}

/// What a thread's reading at this tick is asked for besides its kernel state.
#[derive(Clone, Copy, Default)]
struct Asked {
    /// Its schedstat is wanted at this tick whatever the reading finds (read first: it may spare
    /// the syscall file).
    schedstat: bool,
    /// `CHECK_RUNNING_PROOF` is set.
    check_running_proof: bool,
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

/// The sample's entry for `thread` at a tick whose kernel reading of it is `kernel`.
fn entry_of(
    thread: ThreadRef,
    tracked: &WatchedThread,
    kernel: Option<KernelState>,
) -> ThreadSample {
    ThreadSample {
        tid: thread.tid,
        their_tid: thread.their_tid,
        tstate: thread.tstate,
        kernel,
        slices_before_sleep: tracked.state_proof.timeslices_asleep(),
        schedstat: None,
        gil_flags: None,
    }
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
    (tracked, idle_since): (&mut WatchedThread, &mut Option<u64>),
    seen: &mut ThreadSample,
    reading: (u64, Option<CondStamp>),
    ranges: &GilWaitRanges,
    report: &mut SamplerReport,
) {
    let asked = Asked::default();
    (seen.kernel, _) = read_tracked(tracked, idle_since, reading, (ranges, asked), report);
    // A schedstat the first pass took belongs with the reading this one replaces: the engine's is
    // read again after the tick's last readings (`read_wanted_schedstat`), as where none was taken.
    seen.schedstat = None;
    seen.slices_before_sleep = tracked.state_proof.timeslices_asleep();
}

/// Reads one thread's kernel state (or proves its last one unchanged) at `now` and keeps what
/// spares later reads: the reading, since when it has been asleep in the same non-GIL wait
/// (`idle_since`), and the GIL's stamp read before it (`stamp`, the tick's). With it, the schedstat
/// read before the syscall file, where `asked` wanted one or the sleep proof read one.
///
/// A thread that the walk at attach found, met asleep outside the GIL at its first reading, counts
/// as idle from that reading on (`IDLE_AFTER_NS` before it): it was there before the recording, and
/// its wait may be hours old. Taken as just fallen asleep instead, every such thread was read at
/// every tick of the recording's first 20 ms: with 398 threads in `Event.wait`, about 20 ticks of
/// 1 ms each and some 190 periods lost, a fifth of all those lost in a 3 s recording (docs/cost.md).
/// A wrong guess costs what the counts' refutation costs: one tick that reads every idle thread.
fn read_tracked(
    tracked: &mut WatchedThread,
    idle_since: &mut Option<u64>,
    (now, stamp): (u64, Option<CondStamp>),
    (ranges, asked): (&GilWaitRanges, Asked),
    report: &mut SamplerReport,
) -> (Option<KernelState>, Option<SchedStat>) {
    tracked.stamp_at_reading = stamp;
    let (reading, before) = tracked.files.read_state_since(
        tracked.last_kernel,
        &mut tracked.state_proof,
        asked.schedstat,
    );
    let state = match reading {
        KernelReading::Unchanged(state @ Some(KernelState::Running)) => {
            report.kernel_reads_proven_running += 1;
            if asked.check_running_proof {
                check_running_proof(&tracked.files, before, report);
            }
            state
        }
        KernelReading::Unchanged(state) => {
            report.kernel_reads_unchanged += 1;
            state
        }
        KernelReading::Read(state) => state,
    };
    let same_wait = state.is_some() && state == tracked.last_kernel;
    let met_at_attach = std::mem::take(&mut tracked.unread_since_attach);
    *idle_since = match state {
        Some(k) if asleep_elsewhere(&k, ranges) => {
            if same_wait {
                idle_since.or(Some(now))
            } else if met_at_attach {
                Some(now.saturating_sub(IDLE_AFTER_NS))
            } else {
                Some(now)
            }
        }
        _ => None,
    };
    tracked.last_kernel = state;
    (state, before)
}

/// `CHECK_RUNNING_PROOF`: the syscall file of a thread schedstat proved running (`proof`: that
/// schedstat), read anyway, then its schedstat again; where that one proves the same, the reading
/// lies between two proofs and is judged.
fn check_running_proof(files: &ThreadFiles, proof: Option<SchedStat>, report: &mut SamplerReport) {
    let Some(running) = proof.and_then(|proof| files.still_running_between(proof)) else {
        return;
    };
    report.running_proof_checked += 1;
    report.running_proof_refuted += u64::from(!running);
}

#[cfg(test)]
mod tests;
