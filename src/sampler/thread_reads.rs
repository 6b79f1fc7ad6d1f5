//! Each tick's reading of every Python thread's kernel state, and what spares the reads of idle
//! threads: a thread asleep 20 ms in the same non-GIL wait is read only every few ticks, or not at
//! all while the GIL's waiter counts rule it out of every GIL wait (infer/counted_out.rs), and a
//! sleeper's reading is proven unchanged by schedstat where it can be.

use crate::infer::classify::asleep_elsewhere;
use crate::infer::counted_out::{ReadThreads, asleep_in_waits, unread_are_outside_the_gil};
use crate::infer::sample::{Sample, ThreadSample};
use crate::observed::{GilWaitRanges, KernelState, Waiters};
use crate::process::kernel::{KernelReading, SleepProof, ThreadFiles};
use crate::python::gil_span::WaiterCountAddrs;
use crate::python::runtime::ThreadRef;
use crate::python::target::Target;
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

/// Set in the environment, every tick also reads the waiter counts a second time after the kernel
/// readings and saves them (`Sample::waiters_again`), so that a stream recorded with
/// `--no-idle-backoff` shows what the counted-out rule would have decided at every tick, next to every
/// thread's real state (tests/counted_out.rs).
pub const CHECK_COUNTED_OUT: &str = "GILSAMPLE_CHECK_COUNTED_OUT";

/// What the sampler keeps per thread to read it: its /proc files and what spares reads.
pub(super) struct WatchedThread {
    pub(super) thread: ThreadRef,
    pub(super) files: ThreadFiles,
    /// The last kernel reading, and since when the thread has been asleep in that same non-GIL wait.
    pub(super) last_kernel: Option<KernelState>,
    pub(super) idle_since: Option<u64>,
    /// What proves a sleeping thread's last reading still current (`ThreadFiles::read_state_since`).
    pub(super) sleep_proof: SleepProof,
}

/// The threads the sampler reads, in the sample's order, and the tick's idle ones left unread.
#[derive(Default)]
pub(super) struct ThreadTable {
    pub(super) threads: Vec<WatchedThread>,
    /// The tick's idle threads left unread for now (indices into `threads` and the sample's threads).
    unread: Vec<usize>,
    /// How many threads were idle (and outside the GIL) at the last tick.
    idle_last_tick: usize,
}

impl ThreadTable {
    /// Each thread's kernel state into `sample.threads` (in the thread table's order), and
    /// `sample.all_kernel_read`: none was carried over from an earlier tick. Idle threads are left
    /// unread as `idle` allows; where the waiter counts were read again to rule them out, and
    /// nothing was read after that, those counts are returned for the engine's recount.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_kernel_states(
        &mut self,
        target: &Target,
        report: &mut SamplerReport,
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
        let tick = report.samples;
        let skipped_before = report.kernel_reads_skipped;
        let count_out = idle.counted_out && self.idle_last_tick >= COUNTED_OUT_FROM;
        let mut idle_now = 0;
        for (index, tracked) in self.threads.iter_mut().enumerate() {
            let is_idle = tracked
                .idle_since
                .is_some_and(|since| now.saturating_sub(since) >= IDLE_AFTER_NS);
            // Never the holder, nor the mutex's owner: they are inside the GIL.
            let in_gil = tracked.thread.tstate == word.last_holder
                || sample.mutex_owner == Some(tracked.thread.their_tid);
            idle_now += usize::from(is_idle && !in_gil);
            let turn = |every: u64| (tick + u64::from(tracked.thread.tid)).is_multiple_of(every);
            let kernel = if is_idle && !in_gil && count_out && !turn(COUNTED_OUT_READ_EVERY) {
                self.unread.push(index);
                tracked.last_kernel
            } else if is_idle
                && !in_gil
                && !count_out
                && idle.every_few_ticks
                && !turn(IDLE_READ_EVERY)
            {
                report.kernel_reads_skipped += 1;
                tracked.last_kernel
            } else {
                read_tracked(tracked, now, ranges, report)
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
        sample.all_kernel_read = report.kernel_reads_skipped == skipped_before;
        let (Some(at), Some(counted), false) = (counts, sample.waiters, self.unread.is_empty())
        else {
            return None;
        };
        // The idle threads left unread: the counts, read again now, must show every waiter among
        // the threads read, or the idle ones are read too.
        let again = target.read_waiters(at).ok();
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
            report.kernel_reads_counted_out += unread.len() as u64;
            sample.all_kernel_read = false;
            return again;
        }
        report.counted_out_refuted += 1;
        for &index in &self.unread {
            let tracked = &mut self.threads[index];
            out[index].kernel = read_tracked(tracked, now, ranges, report);
            out[index].slices_before_sleep = tracked.sleep_proof.timeslices_asleep();
        }
        None
    }
}

/// How a tick may spare the reads of idle threads (`IDLE_AFTER_NS`).
#[derive(Clone, Copy)]
pub(super) struct IdleReads {
    /// Read them only every `IDLE_READ_EVERY`th tick.
    pub(super) every_few_ticks: bool,
    /// Leave them unread while the waiter counts rule them out (infer/counted_out.rs).
    pub(super) counted_out: bool,
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
