//! The idle threads a tick's first pass left unread: ruled out of every GIL wait by the waiter
//! counts (infer/counted_out.rs), or read after all. A child of thread_reads.rs: the same table.

use super::{FirstRead, ThreadTable, read_into};
use crate::infer::counted_out::{ReadThreads, asleep_in_waits, unread_are_outside_the_gil};
use crate::infer::sample::{Sample, ThreadSample};
use crate::observed::{GilWaitRanges, KernelState, Waiters};
use crate::python::gil_span::{WaiterCountAddrs, WaiterWords};
use crate::python::target::Target;
use crate::sampler::clock::{monotonic_ns, sleep_until};
use crate::sampler::report::SamplerReport;

/// How many times a tick whose counts did not rule its idle threads out reads its other threads and
/// the counts again before it reads the idle ones (`ThreadTable::count_out`). On a 2-core machine
/// with 2 spinners beside 398 threads in `Event.wait`, most refuted ticks were a hand-off under way
/// (a waiter registered on `gil.cond` but not asleep yet, the GIL's mutex retaken, the counts
/// moving between their two reads).
const COUNT_OUT_RETRIES: usize = 4;

/// The retries while a round of refuted ticks is under way (`ThreadTable::put_off_beyond`): one,
/// without sleeping. A thread among those not read yet that woke into a GIL wait keeps the counts
/// from ruling the idle threads out until a tick reads it, and no retry settles that: with a thread
/// waking every 50 ms beside 398 in `Event.wait` and the round taken in list order, each wake-up
/// cost about 6 refuted ticks, each one sleeping through its retries (350 refuted ticks and 701
/// late ones in a 3 s window, against 58 and 458 for reading every idle thread at once).
const COUNT_OUT_RETRIES_IN_A_ROUND: usize = 1;

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

/// At most this many idle threads are read at a tick whose counts did not rule them out after every
/// retry; the others keep their last readings, and the refuted ticks after read the next ones, those
/// that fell asleep last first (`put_off_beyond`). Reading them all at once made that tick a hole in
/// the recording as long as the thread list: 1.3–2.8 ms (10–25 periods) with 398 threads in
/// `Event.wait`, and with 1,500 such threads 37–57 refuted ticks held a 3 s window to 5,300–8,500
/// Hz. 32 reads take about 50 µs; an idle thread that began to wait keeps the counts from ruling
/// the others out, so it is found within one refuted tick per 32 idle threads, and mostly at the
/// first (docs/cost.md, "A refuted tick reads 32 idle threads").
pub(super) const IDLE_READS_PER_REFUTED_TICK: usize = 32;

impl ThreadTable {
    /// The idle threads the first pass left unread: ruled out by the waiter counts
    /// (`count_out`), or read now (at a refuted tick, `IDLE_READS_PER_REFUTED_TICK` of them).
    /// Returns the counts read last where they bracket the tick's first readings (no thread was
    /// read again before them), for the engine's recount.
    pub(super) fn settle_unread(
        &mut self,
        target: &Target,
        sample: &mut Sample,
        ranges: &GilWaitRanges,
        gil: FirstRead,
        report: &mut SamplerReport,
    ) -> Option<Waiters> {
        if self.nothing_left_unread() {
            return None;
        }
        let proof = match (gil.counts, sample.waiters) {
            (Some(at), Some(counted)) => {
                let first = WaiterWords {
                    waiters: counted,
                    mutex_owner: sample.mutex_owner,
                    mutex_contended: gil.mutex_contended,
                };
                self.count_out(target, at, first, &mut sample.threads, ranges, report)
            }
            // The counts did not read at this tick: nothing rules the idle threads out.
            _ => Err(NotCountedOut::Refuted),
        };
        match proof {
            Ok(proof) => {
                self.round.clear();
                report.kernel_reads_counted_out += self.unread.len() as u64;
                sample.all_kernel_read = false;
                if self.unread_entries_kept {
                    // Each one's entry is the sample before's, asleep outside the GIL's waits, and
                    // neither the holder nor the mutex's owner (`first_pass`): the engine may leave
                    // it as it is (`Sample::unchanged_outside`).
                    for &index in &self.unread {
                        sample.unchanged_outside[index] = true;
                    }
                }
                // Counts read after re-readings no longer bracket the tick's first readings.
                (proof.rereads == 0).then_some(proof.again)
            }
            Err(why) => {
                let budget = match why {
                    NotCountedOut::Refuted => {
                        report.counted_out_refuted += 1;
                        IDLE_READS_PER_REFUTED_TICK
                    }
                    NotCountedOut::CheaperToRead => {
                        report.counted_out_read_instead += 1;
                        self.unread.len()
                    }
                };
                self.put_off_beyond(budget, sample, report);
                let reading = (sample.read_ns, self.tick_stamp);
                for &index in &self.unread {
                    let seen = &mut sample.threads[index];
                    let (tracked, look) = (&mut self.threads[index], &mut self.looks[index]);
                    read_into(
                        (tracked, &mut look.idle_since),
                        seen,
                        reading,
                        ranges,
                        report,
                    );
                }
                None
            }
        }
    }

    /// Whether the tick's first pass left no idle thread unread (counting out off at this tick, or
    /// every idle thread read). Such a tick is not refuted: it ends any round under way, as a
    /// count-out does, so the next refuted tick starts from the newest sleepers again and retries
    /// as often as a first one (`count_out`).
    pub(super) fn nothing_left_unread(&mut self) -> bool {
        if self.unread.is_empty() {
            self.round.clear();
        }
        self.unread.is_empty()
    }

    /// Keeps in `unread` the `budget` idle threads a refuted tick reads and leaves the others with
    /// their last readings: asleep outside the GIL's waits, what the trace shows of them until a
    /// later tick reads them or the counts rule them out again (`counted_out_put_off`). So a tick
    /// that reads some of the idle threads is not one that read every thread
    /// (`Sample::all_kernel_read`).
    ///
    /// The first refuted tick orders the idle threads into a round, those that fell asleep last
    /// first, and each refuted tick after reads the next `budget` of it, until the round is read
    /// or the counts rule the idle threads out again. A thread that sleeps in a loop (a timer, a
    /// poller) is idle only between its wake-ups, so its wait is always among the newest: with one
    /// waking every 50 ms beside 398 threads in `Event.wait`, taking the round in list order found
    /// it after 6–7 refuted ticks a wake-up, newest first at the first (docs/cost.md).
    pub(super) fn put_off_beyond(
        &mut self,
        budget: usize,
        sample: &mut Sample,
        report: &mut SamplerReport,
    ) {
        if budget >= self.unread.len() {
            self.round.clear();
            return;
        }
        if self.round.is_empty() {
            let looks = &self.looks;
            // Taken from the back: the newest sleepers last in the vector.
            self.round.extend_from_slice(&self.unread);
            self.round.sort_by_key(|&index| looks[index].idle_since);
        }
        let mut reading = Vec::with_capacity(budget);
        while reading.len() < budget {
            let Some(index) = self.round.pop() else {
                break;
            };
            // Only those still unread at this tick: one read or gone since is left out.
            if self.unread.binary_search(&index).is_ok() {
                reading.push(index);
            }
        }
        reading.sort_unstable();
        let put_off = self.unread.len() - reading.len();
        report.counted_out_put_off += put_off as u64;
        sample.all_kernel_read = false;
        if self.unread_entries_kept {
            // Each one's entry is the sample before's (`first_pass`), as for those counted out.
            for &index in &self.unread {
                sample.unchanged_outside[index] = reading.binary_search(&index).is_err();
            }
        }
        self.unread = reading;
    }

    /// Whether the idle threads left unread are outside the GIL (infer/counted_out.rs): the waiter
    /// words `before` (read with the GIL's), the threads' readings, and the counts read again now.
    /// Where that fails, the read threads are read again and then the counts, up to
    /// `COUNT_OUT_RETRIES` times (`COUNT_OUT_RETRIES_IN_A_ROUND` while a refuted round is under
    /// way), while that costs less than reading the unread threads (the sleep
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
        let retries = if !self.round.is_empty() {
            COUNT_OUT_RETRIES_IN_A_ROUND
        } else {
            COUNT_OUT_RETRIES
        };
        for rereads in 0..=retries {
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
            if rereads == retries {
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
                let (tracked, look) = (&mut self.threads[index], &mut self.looks[index]);
                let entry = (tracked, &mut look.idle_since);
                read_into(entry, &mut out[index], (now, at_stamp), ranges, report);
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
