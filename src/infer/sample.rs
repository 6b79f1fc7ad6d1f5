//! The seam between sampling and inference: what one tick read of a target, as plain data.
//!
//! The sampler (sampler/tick_loop.rs) does the reading and builds one `Sample` per tick; inference
//! (infer/engine.rs) turns the stream of samples into intervals and never reads memory or /proc. A
//! reading that inference wants only for some threads (schedstat, 3.15's GIL flags) is asked for with
//! a `Wants` value before the tick is read. Because a sample holds everything inference uses, a saved
//! stream (stream/) replays into the very trace the live run wrote.

use serde::{Deserialize, Serialize};

use crate::addr::RemoteAddr;
use crate::observed::GilWord;
use crate::observed::{GilWaitRanges, Waiters};
use crate::observed::{KernelState, SchedStat};

/// One tick of one target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// CLOCK_MONOTONIC when the read of the GIL returned: the target as it was then.
    pub read_ns: u64,
    /// CLOCK_MONOTONIC when the tick began, before the read of the GIL.
    pub woke_ns: u64,
    /// The sample's time in the trace: midway between `read_ns` and the end of the kernel readings.
    pub t_ns: u64,
    /// The GIL's words as read at `read_ns`: locked, last holder, switch number and interval.
    pub word: GilWord,
    /// glibc's waiter counts of the GIL's condition variables, read with the GIL words.
    pub waiters: Option<Waiters>,
    /// The same counts read again after the kernel readings, where `Engine::wants_recount` asked for
    /// them.
    pub waiters_again: Option<Waiters>,
    /// The GIL's words read again after the kernel readings, kept only where they differ from
    /// `word`: asked for where a holder was seen asleep in a syscall (`Engine::wants_word_again`),
    /// so that one which let the GIL go between the reads (and then slept) is not taken for one
    /// asleep with it (infer/held_blocked.rs).
    pub word_again: Option<GilWord>,
    /// The tid (the target's namespace) that owns the GIL's mutex, where the layout places it.
    pub mutex_owner: Option<u32>,
    /// No thread's kernel state was carried over from an earlier tick that could have changed since
    /// (idle threads read only every few ticks, or counted out; sampler/thread_reads.rs).
    pub all_kernel_read: bool,
    /// Periods the sampler let pass without a tick before this one because the target was quiet
    /// (`Wants::skip_periods`): 0 at the full rate. The timeline's gap rule allows for them.
    pub skipped_periods: u32,
    /// Every tracked Python thread, in a stable order (new threads at the end).
    pub threads: Vec<ThreadSample>,
    /// Per thread, in `threads`' order: true where the entry is the same thread with the same
    /// kernel reading as in the sample before, which places it asleep outside the GIL's waits,
    /// neither the holder nor the GIL mutex's owner, with no schedstat or GIL flags: an idle thread
    /// the sampler left unread because the waiter counts ruled it out (sampler/thread_reads.rs).
    /// Inference's census, thread match and quiet watch then pass over the entry without reading
    /// it, and its step too where the thread is parked (infer/parked.rs): the same records
    /// (tests/replay.rs) at a cost that follows the threads that move. Empty where nothing says
    /// so: a saved stream does not keep it, and its replay reads every entry.
    pub unchanged_outside: Vec<bool>,
}

/// One Python thread at one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSample {
    /// The id in this process's PID namespace (/proc, the trace).
    pub tid: u32,
    /// The id in the target's PID namespace (what glibc records as a mutex's owner).
    pub their_tid: u32,
    /// The address of the thread's `PyThreadState` in the target.
    pub tstate: RemoteAddr,
    /// The syscall file's state; `None` where it could not be read.
    pub kernel: Option<KernelState>,
    /// schedstat's CPU-arrival count read just before the syscall file last said asleep, once the
    /// sleep proof covers that sleep (`StateProof::timeslices_asleep`).
    pub slices_before_sleep: Option<u64>,
    /// schedstat, where `Wants` asked for it and the kernel has it: read just before the thread's
    /// syscall file where its last reading said running (the running proof, process/kernel.rs),
    /// else after the tick's kernel readings.
    pub schedstat: Option<SchedStat>,
    /// 3.15's `holds_gil` and `gil_requested` flags of the thread state, where asked for and read.
    pub gil_flags: Option<GilFlagsReading>,
}

/// 3.15's per-thread GIL flags as read from a thread state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GilFlagsReading {
    /// `holds_gil`: the thread says it holds the GIL.
    pub holds: bool,
    /// `gil_requested`: the thread has asked for the GIL (set in `take_gil` while it waits).
    pub requested: bool,
}

/// What stays the same for a whole recording of one target: inference's inputs besides samples.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleContext {
    /// Nanoseconds between ticks at the full rate.
    pub period_ns: u64,
    /// Where the GIL's waits lie (futex addresses).
    pub ranges: GilWaitRanges,
    /// The sampler reads waiter counts (classify.rs, rule 8).
    pub waiter_counts: bool,
    /// The target has 3.15's GIL flags.
    pub gil_flags: bool,
    /// Compare the flags with every direct decision too (`GILSAMPLE_CHECK_GIL_FLAGS`).
    pub check_gil_flags: bool,
}

/// What inference wants read at the next tick beyond the GIL and the kernel states.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wants {
    /// Threads (ours) whose schedstat is wanted whatever their state.
    pub schedstat_always: Vec<u32>,
    /// Threads whose schedstat is wanted when the kernel says they run.
    pub schedstat_if_running: Vec<u32>,
    /// Periods the next tick may let pass first: the target has been quiet long enough that fewer
    /// ticks lose nothing (`Engine::wants`); 0 means the full rate.
    pub skip_periods: u32,
}

impl Wants {
    /// Whether to read the schedstat of thread `tid`, which `runs` or not and `holds` the GIL or
    /// not. The holder's is always read: a sample that places it in `hold_gil` keeps it, for the
    /// stretch that may follow the hold (rule 9). Asked for every thread at every tick.
    #[inline]
    pub fn schedstat(&self, tid: u32, runs: bool, holds: bool) -> bool {
        holds
            || self.schedstat_always.contains(&tid)
            || (runs && self.schedstat_if_running.contains(&tid))
    }
}

impl ThreadSample {
    /// Whether the syscall file said the thread was running (not in a syscall) at this tick.
    pub fn runs(&self) -> bool {
        self.kernel == Some(KernelState::Running)
    }
}

impl Sample {
    /// `self = src.clone()` without the engine's marks (`unchanged_outside`, left empty: a saved
    /// stream does not keep them), reusing `self`'s vectors: derived `Clone` has no `clone_from`
    /// of its own, and the stream's encoder, reader and saver keep a copy of every sample.
    /// Destructured, so a new field of `Sample` is not forgotten here.
    pub fn copy_readings_from(&mut self, src: &Sample) {
        let Sample {
            read_ns,
            woke_ns,
            t_ns,
            word,
            waiters,
            waiters_again,
            word_again,
            mutex_owner,
            all_kernel_read,
            skipped_periods,
            threads,
            unchanged_outside: _,
        } = src;
        self.read_ns = *read_ns;
        self.woke_ns = *woke_ns;
        self.t_ns = *t_ns;
        self.word = *word;
        self.waiters = *waiters;
        self.waiters_again = *waiters_again;
        self.word_again = *word_again;
        self.mutex_owner = *mutex_owner;
        self.all_kernel_read = *all_kernel_read;
        self.skipped_periods = *skipped_periods;
        self.threads.clone_from(threads);
        self.unchanged_outside.clear();
    }

    /// Whether thread `index`'s entry is the sample before's, asleep outside the GIL
    /// (`unchanged_outside`).
    #[inline]
    pub fn is_unchanged_outside(&self, index: usize) -> bool {
        self.unchanged_outside.get(index) == Some(&true)
    }

    /// The GIL's holder at this tick: locked, by this thread state.
    pub fn holds(&self, thread: &ThreadSample) -> bool {
        self.word.locked && thread.tstate == self.word.last_holder
    }

    /// Whether the GIL changed hands (or was let go) between the read of its words and the kernel
    /// readings' end, as far as the sampler read it again (`word_again`): the holder's kernel state
    /// may then be from after it let go.
    pub fn holder_let_go_during_reads(&self) -> bool {
        self.word_again.is_some_and(|again| {
            (again.locked, again.last_holder, again.switch_number)
                != (
                    self.word.locked,
                    self.word.last_holder,
                    self.word.switch_number,
                )
        })
    }
}
