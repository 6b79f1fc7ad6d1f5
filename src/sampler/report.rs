//! What one target's sampling loop measured about itself and how it ended; the summary and the
//! trace's metadata print it, and a saved sample stream ends with it (so a replay reports the same).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::infer::engine::InferenceCounts;
use crate::process::syscalls::SyscallCounts;
use crate::python::names::NameStats;
use crate::sampler::priority::Scheduling;
use crate::sampler::stack_watch::StackReport;

/// Why a sampler stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// The requested duration was reached.
    Duration,
    /// Stopped by the user (Ctrl+C, a signal) or the session.
    Stopped,
    /// The target exited.
    TargetExited,
    /// The target replaced its program (exec): what was recorded up to then is kept.
    TargetExec,
    /// Sampling failed, for this reason.
    Failed(String),
}

/// Saved at a stream's end: a field added later reads as its default from an older stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerReport {
    /// CLOCK_MONOTONIC nanoseconds of the first tick.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC nanoseconds of the last tick.
    pub end_ns: u64,
    /// Samples taken.
    pub samples: u64,
    /// Ticks that started more than one period after their deadline.
    pub late_samples: u64,
    /// Of `late_samples`, those at the quiet rate (infer/quiet.rs). The hand-off count covers the
    /// periods such a tick let pass as it covers the ones skipped on purpose, so they leave no hole
    /// a hand-off could go unseen in; on an idle machine most late ticks are these (a CPU, or a
    /// VM's vCPU, woken from a deep sleep takes its time).
    pub late_samples_while_quiet: u64,
    /// Reads of the GIL that took longer than a period, and the longest: the target's memory map
    /// lock is held for writing (mmap, munmap, mprotect) by a thread that lost its CPU, and the read
    /// waits for it.
    pub stalled_reads: u64,
    /// The longest of those reads, nanoseconds.
    pub longest_stall_ns: u64,
    /// Samples taken at the slow rate while the target was quiet, and the periods skipped before
    /// them (infer/quiet.rs).
    pub quiet_samples: u64,
    /// Periods let pass without a tick while the target was quiet.
    pub skipped_periods: u64,
    /// Ticks skipped because a read was torn or the thread list was inconsistent.
    pub faulted_samples: u64,
    /// What inference decided and counted (infer/engine.rs).
    pub inference: InferenceCounts,
    /// Kernel readings that schedstat proved unchanged (`ThreadFiles::read_state_since`): asleep
    /// in the same call.
    pub kernel_reads_unchanged: u64,
    /// The same, running: the thread neither left nor got a CPU since its last reading.
    pub kernel_reads_proven_running: u64,
    /// With `GILSAMPLE_CHECK_RUNNING_PROOF`: those readings taken anyway, between two schedstat
    /// reads that still prove it, and judged; and those that found the thread not running (none
    /// should).
    pub running_proof_checked: u64,
    /// See `running_proof_checked`.
    pub running_proof_refuted: u64,
    /// Kernel readings not taken because the thread was idle in a non-GIL wait.
    pub kernel_reads_skipped: u64,
    /// Kernel readings not taken because the thread was idle and the waiter counts showed it
    /// outside every GIL wait (infer/counted_out.rs).
    pub kernel_reads_counted_out: u64,
    /// Kernel readings not taken because the thread slept in `take_gil`'s wait and `gil.cond` read
    /// the same as before its last reading (sampler/thread_reads.rs, `still_waiting`).
    pub kernel_reads_proven_waiting: u64,
    /// With `GILSAMPLE_CHECK_PROVEN_WAITING`: those readings taken anyway and judged, and those
    /// that found the thread out of the wait (none should).
    pub proven_waiting_checked: u64,
    /// See `proven_waiting_checked`.
    pub proven_waiting_refuted: u64,
    /// Ticks whose counts did not rule the idle threads out, after every retry, so that they were
    /// read after all (up to `IDLE_READS_PER_REFUTED_TICK` of them a tick).
    pub counted_out_refuted: u64,
    /// Readings of idle threads that refuted ticks left for later, beyond the ones each reads
    /// (`IDLE_READS_PER_REFUTED_TICK`): those ticks show their last readings.
    pub counted_out_put_off: u64,
    /// Ticks whose counts did not rule the idle threads out at once, where reading them cost less
    /// than a retry (few idle threads), so that they were read.
    pub counted_out_read_instead: u64,
    /// Ticks whose counts ruled the idle threads out only once the other threads and the counts
    /// were read again (`ThreadTable::count_out`).
    pub counted_out_on_retry: u64,
    /// Ticks at which the GIL's words were read again after the kernel readings (a holder was seen
    /// asleep in a syscall: `Engine::wants_word_again`), and those at which the second read found
    /// the GIL let go or handed on: a holder that slept only after letting go.
    pub gil_read_again: u64,
    /// See `gil_read_again`.
    pub gil_let_go_between_reads: u64,
    /// The Python names of the threads seen, by tid (our PID namespace).
    pub thread_names: BTreeMap<u32, String>,
    /// How reading the threads' Python names went (python/names.rs).
    pub name_reads: NameStats,
    /// How reading stacks went (stack_watch.rs).
    pub stacks: StackReport,
    /// The most Python threads one sample held.
    pub max_threads: usize,
    /// Walks of the thread list: at the start, when its head moved, when the holder was not a known
    /// thread, and when the thread count moved (looked at every `refresh_ns`; sampler/pace.rs).
    pub thread_walks: u64,
    /// Looks at the thread count, every `refresh_ns`, that found it unmoved and spared the walk.
    pub thread_walks_spared: u64,
    /// The scheduling the sampler thread actually ran with.
    pub scheduling: Scheduling,
    /// Times the sampler left the GIL holder's CPU (dodge.rs).
    pub cpu_moves: u64,
    /// CPU time the sampler thread used for this target: its share of the thread's, by the time its
    /// ticks took (sampler/shared_thread.rs).
    pub cpu_ns: u64,
    /// The system calls the sampler thread made for this target (process/syscalls.rs).
    pub syscalls: SyscallCounts,
    /// The sampler thread that sampled it last, numbered in the order they started.
    pub sampler_thread: u64,
    /// How many targets that thread was given, this one included.
    pub targets_on_thread: usize,
    /// Bytes of samples saved (`--save-samples`).
    pub saved_bytes: u64,
    /// Why sampling ended.
    pub end: EndReason,
    /// The process was stopped (SIGSTOP, Ctrl+Z, a debugger) when sampling started, and when it
    /// ended: none of its threads ran then, and the holder kept the GIL.
    pub stopped_at_start: bool,
    /// See `stopped_at_start`.
    pub stopped_at_end: bool,
    /// When the process was found stopped during the recording, monotonic nanoseconds (from, to),
    /// to within `stop_watch::CHECK_EVERY_NS`; a stop at its start or end included.
    pub stopped_spans: Vec<(u64, u64)>,
}

impl Default for SamplerReport {
    fn default() -> SamplerReport {
        SamplerReport::new(0, Scheduling::Inherited)
    }
}

impl SamplerReport {
    /// All counts zero, for a loop that starts at `start_ns` with `scheduling`.
    pub fn new(start_ns: u64, scheduling: Scheduling) -> SamplerReport {
        SamplerReport {
            start_ns,
            end_ns: start_ns,
            samples: 0,
            late_samples: 0,
            late_samples_while_quiet: 0,
            stalled_reads: 0,
            longest_stall_ns: 0,
            faulted_samples: 0,
            quiet_samples: 0,
            skipped_periods: 0,
            inference: InferenceCounts::default(),
            kernel_reads_skipped: 0,
            kernel_reads_counted_out: 0,
            kernel_reads_proven_waiting: 0,
            proven_waiting_checked: 0,
            proven_waiting_refuted: 0,
            counted_out_refuted: 0,
            counted_out_put_off: 0,
            counted_out_read_instead: 0,
            counted_out_on_retry: 0,
            gil_read_again: 0,
            gil_let_go_between_reads: 0,
            kernel_reads_unchanged: 0,
            kernel_reads_proven_running: 0,
            running_proof_checked: 0,
            running_proof_refuted: 0,
            thread_names: BTreeMap::new(),
            name_reads: NameStats::default(),
            stacks: StackReport::default(),
            max_threads: 0,
            thread_walks: 0,
            thread_walks_spared: 0,
            scheduling,
            cpu_moves: 0,
            cpu_ns: 0,
            syscalls: SyscallCounts::default(),
            sampler_thread: 0,
            targets_on_thread: 1,
            saved_bytes: 0,
            end: EndReason::Stopped,
            stopped_at_start: false,
            stopped_at_end: false,
            stopped_spans: Vec::new(),
        }
    }

    /// System calls per sample, by kind and in all.
    pub fn syscalls_per_sample(&self) -> serde_json::Value {
        let per = |n: u64| {
            let per = n as f64 / self.samples.max(1) as f64;
            (per * 100.0).round() / 100.0
        };
        let s = &self.syscalls;
        serde_json::json!({
            "all": per(s.total()),
            "memory_reads": per(s.memory_reads),
            "syscall_file_reads": per(s.syscall_file_reads),
            "schedstat_reads": per(s.schedstat_reads),
            "opens": per(s.opens),
            "affinity_changes": per(s.affinity_changes),
            "sleeps": per(s.sleeps),
        })
    }

    /// The rate the sampler kept against the one it aimed at: samples per second, counting the
    /// periods a quiet target let it skip as kept (they were skipped on purpose, not missed).
    pub fn achieved_rate_hz(&self) -> f64 {
        let secs = (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9;
        if secs > 0.0 {
            (self.samples + self.skipped_periods) as f64 / secs
        } else {
            0.0
        }
    }

    /// The share of the ticks that started over a period late (0 before any sample).
    pub fn late_share(&self) -> f64 {
        self.share_of_ticks(self.late_samples)
    }

    /// The share of the ticks that started late at the full rate: the holes in the timeline, where
    /// hand-offs can go unseen (0 before any sample).
    pub fn holes_share(&self) -> f64 {
        self.share_of_ticks(
            self.late_samples
                .saturating_sub(self.late_samples_while_quiet),
        )
    }

    /// `ticks` as a share of the ticks there were, late ones included (0 before any sample).
    fn share_of_ticks(&self, ticks: u64) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        ticks as f64 / (self.samples + self.late_samples) as f64
    }

    /// The share of the recording's ticks that a quiet target let the sampler skip.
    pub fn skipped_share(&self) -> f64 {
        self.skipped_periods as f64 / (self.samples + self.skipped_periods).max(1) as f64
    }
}
