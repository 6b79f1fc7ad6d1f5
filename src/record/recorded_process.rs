//! What a trace says about the process it is of besides what the sampler measured (its ids, host,
//! interpreter, the options it was recorded with), taken from the live target when recording, saved
//! in a sample stream's header and read back from it by `replay`, so a replayed trace describes the
//! same process.

use serde::{Deserialize, Serialize};

use crate::process::tasks::{read_cmdline, read_namespace_pid, read_parent_pid};
use crate::python::target::Target;
use crate::record::RecordOptions;
use crate::sampler::clock::monotonic_to_wall_offset_ns;
use crate::trace::chrome::TraceClock;

/// The name of the machine gilsample runs on (its UTS namespace's: a pod's or container's own name
/// where it has one), which tells the nodes of a multi-node job apart.
pub fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// What a trace says about the process it is of besides what the sampler measured: taken from the
/// live target when recording, saved in a sample stream's header, and read back from it by `replay`,
/// so a replayed trace describes the same process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedProcess {
    /// The target's pid in gilsample's PID namespace.
    pub pid: u32,
    /// The pid it sees for itself in its innermost PID namespace (`NSpid:`), where that was read.
    pub namespace_pid: Option<u32>,
    /// Its rank in a distributed job (`RANK`, `SLURM_PROCID`, ... at exec time); `None` without,
    /// where its files say rank 0 (`file_rank`).
    pub rank: Option<u32>,
    /// Its parent process when recording began: what tells a DataLoader or pool worker from the
    /// process that started it, which has the same command line.
    pub parent_pid: Option<u32>,
    /// This machine's host name, which tells the nodes of a multi-node job apart.
    pub host: Option<String>,
    /// The target's command line, read before sampling began.
    pub command_line: String,
    /// The interpreter's version, `3.12.3`.
    pub python_version: String,
    /// Its build flavour (default, debug or free-threaded).
    pub python_flavour: String,
    /// The path of the ELF that defines `_PyRuntime`, as the target names it (its own root's view:
    /// the host's path of a chroot's file has the chroot taken off).
    pub python_binary: String,
    /// The interpreter's architecture.
    pub arch: String,
    /// Where the struct layout came from.
    pub layout_source: String,
    /// Where the GIL's waiter counts were read, or why they were not.
    pub gil_waiter_counts: String,
    /// Samples per second asked for (`--rate`).
    pub rate_requested_hz: f64,
    /// The trace's clock: CLOCK_REALTIME or CLOCK_MONOTONIC.
    pub clock: String,
    /// Python stacks were read.
    pub stacks: bool,
    /// The CPUs the sampler threads were confined to (`--cpus`), if any.
    pub cpus: Option<Vec<usize>>,
    /// The trace draws hand-off arrows between holders.
    pub handoff_arrows: bool,
    /// Added to a CLOCK_MONOTONIC time to give the trace's timestamp, nanoseconds.
    pub monotonic_to_trace_offset_ns: i64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC when recording began, nanoseconds.
    pub monotonic_to_wall_offset_ns: i64,
}

impl RecordedProcess {
    /// The rank its files are named with: 0 without one, as the reference tool names them.
    pub fn file_rank(&self) -> u32 {
        self.rank.unwrap_or(0)
    }

    /// What to say of the live `target` recorded with `opts` at `rank`; `offset_ns` is added to
    /// monotonic times to give the trace's.
    pub fn of(
        target: &Target,
        rank: Option<u32>,
        opts: &RecordOptions,
        offset_ns: i64,
    ) -> RecordedProcess {
        RecordedProcess {
            pid: target.pid,
            namespace_pid: read_namespace_pid(target.pid),
            rank,
            parent_pid: read_parent_pid(target.pid),
            host: host_name(),
            // Read before sampling: a target that exits first (a launched command) has none at the end.
            command_line: read_cmdline(target.pid).unwrap_or_default(),
            python_version: target.version.to_string(),
            python_flavour: target.flavour.to_string(),
            python_binary: target.binary.in_target.display().to_string(),
            arch: target.binary.arch.to_string(),
            layout_source: target.layout_source.to_string(),
            gil_waiter_counts: if opts.waiter_counts {
                target.describe_waiter_counts()
            } else {
                "not counted: --no-waiter-counts".to_string()
            },
            rate_requested_hz: opts.rate_hz,
            clock: match opts.clock {
                TraceClock::Wall => "CLOCK_REALTIME",
                TraceClock::Monotonic => "CLOCK_MONOTONIC",
            }
            .to_string(),
            stacks: opts.stacks,
            cpus: opts.cpus.clone(),
            handoff_arrows: opts.handoff_arrows,
            monotonic_to_trace_offset_ns: offset_ns,
            monotonic_to_wall_offset_ns: monotonic_to_wall_offset_ns(),
        }
    }
}
