//! `record`'s options, which `top` and a bare `gilsample` take too: what to record, where to write
//! it, and how to sample. Parsed by clap; checked further where they are combined (main.rs).

use std::path::PathBuf;

use clap::Args;

use crate::cli::values::{
    CpuList, DurationArg, PidList, Rate, parse_cpus, parse_duration, parse_pids, parse_rate,
};
use crate::python::attach::LayoutChoice;
use crate::sampler::priority::Priority;
use crate::trace::chrome::TraceClock;

const HELP_TARGETS: &str = "What to record";
const HELP_OUTPUT: &str = "Where to write";
const HELP_SAMPLING: &str = "Sampling";
const HELP_ADVANCED: &str = "Advanced";

/// `gilsample record`'s options (also those of `top`, and of gilsample without a subcommand).
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Record these processes (ids, comma-separated: 123,456).
    ///
    /// For a job that is already running (find its ids with `pgrep -f train.py`). Without --pid,
    /// --all-npu, --all-gpu or a command, every Python process with an Ascend NPU open is recorded, as
    /// the reference tool does.
    #[arg(short, long, value_name = "PID[,PID...]", value_parser = parse_pids, conflicts_with_all = ["all_npu", "all_gpu"], help_heading = HELP_TARGETS)]
    pub pid: Option<PidList>,

    /// Record every Python process with an Ascend NPU open (/dev/davinciN), also ones that start
    /// later.
    ///
    /// For an Ascend server: every rank, no pids to look up. The default without a target.
    #[arg(long, conflicts_with = "all_gpu", help_heading = HELP_TARGETS)]
    pub all_npu: bool,

    /// Record every Python process with an NVIDIA GPU open (/dev/nvidiaN), also ones that start
    /// later.
    ///
    /// For a GPU server, in place of --all-npu.
    #[arg(long, help_heading = HELP_TARGETS)]
    pub all_gpu: bool,

    /// Also record every Python descendant of the given or launched processes, also ones started
    /// later.
    ///
    /// For jobs whose Python work runs in children: torchrun, mpirun, multiprocessing or DataLoader
    /// workers.
    #[arg(long, help_heading = HELP_TARGETS)]
    pub subprocesses: bool,

    /// How long to record: 10 or 10s, 500ms, 2m, 1m30s, 1h; -1 (the default) records until Ctrl+C,
    /// SIGTERM or the targets exit.
    ///
    /// For unattended runs, and with --all-npu/--all-gpu to wait for processes that have not started
    /// yet.
    #[arg(short, long, value_name = "DURATION", allow_negative_numbers = true, value_parser = parse_duration, help_heading = HELP_TARGETS)]
    pub duration: Option<DurationArg>,

    /// A command to launch (after --) and record from its start until it exits; gilsample then exits
    /// with its status.
    ///
    /// For seeing start-up (imports, model loading) too.
    #[arg(last = true, value_name = "COMMAND", help_heading = HELP_TARGETS)]
    pub command: Vec<String>,

    /// Where traces go: a directory, with one GIL_<pid>_rank_<rank>.json per process, or a file
    /// ending in .json for a single target.
    ///
    /// Default: $GILSAMPLE_DIR, else ./gil_traces/. Give a directory per run to keep runs apart.
    #[arg(short, long, value_name = "DIR|FILE.json", help_heading = HELP_OUTPUT)]
    pub output: Option<PathBuf>,

    /// Overwrite trace files that already exist (refused otherwise).
    ///
    /// For re-running into the same directory.
    #[arg(short, long, help_heading = HELP_OUTPUT)]
    pub force: bool,

    /// Also write GIL_merged.json: every target on one timeline, one process track each.
    ///
    /// For comparing ranks or workers side by side.
    #[arg(long, help_heading = HELP_OUTPUT)]
    pub merge: bool,

    /// Clock of the trace's timestamps: wall (epoch µs) or monotonic.
    ///
    /// Keep wall to line the trace up with msprof and PyTorch profiler traces (`gilsample merge`);
    /// monotonic when the system clock may be set during the recording.
    #[arg(long, value_enum, default_value = "wall", help_heading = HELP_OUTPUT)]
    pub clock: TraceClock,

    /// Print no progress bar and no summary, only errors.
    ///
    /// For scripts and batch jobs.
    #[arg(short, long, conflicts_with = "verbose", help_heading = HELP_OUTPUT)]
    pub quiet: bool,

    /// After the answer, the sampler's own account in the summary: achieved rate, late samples,
    /// hand-offs seen and counted, how each running thread was classified.
    ///
    /// For judging how exact a recording is, or reporting a problem.
    #[arg(short, long, help_heading = HELP_OUTPUT)]
    pub verbose: bool,

    /// Samples per second: 10khz, 20khz, 500hz or a plain number of Hz (1 Hz to 100 kHz).
    ///
    /// Raise it when the GIL changes hands within a few periods; lower it to spend less CPU on long
    /// recordings. The summary says which rate was reached.
    #[arg(short, long, default_value = "10khz", allow_negative_numbers = true, value_parser = parse_rate, help_heading = HELP_SAMPLING)]
    pub rate: Rate,

    /// Scheduling of the sampler thread: realtime (SCHED_FIFO 1, needs root or CAP_SYS_NICE; falls
    /// back to high, then normal), high (nice -10), or normal.
    ///
    /// Keep realtime where a core is to spare (`--cpus`): a sampler that waits behind busy target
    /// threads leaves gaps in the trace. On cores the target keeps busy, normal takes less of the
    /// job's time and reaches a lower rate (the summary says which; docs/cost.md); and normal where
    /// real-time threads are not welcome.
    #[arg(long, value_enum, default_value = "realtime", help_heading = HELP_SAMPLING)]
    pub priority: Priority,

    /// Run gilsample's threads only on these CPUs, e.g. a housekeeping core (3, or 0,2-3).
    ///
    /// For a target that keeps every core busy: the sampler then never takes a core from it, and needs
    /// no real-time priority to keep its pace. A launched command is not restricted.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, help_heading = HELP_SAMPLING)]
    pub cpus: Option<CpuList>,

    /// Where the interpreter's struct layouts come from: the target's _Py_DebugOffsets (3.13+), the
    /// DWARF of its binary or debug file, the layout files shipped in gilsample, or the first that
    /// works.
    ///
    /// Change it only when `gilsample info` shows that a source gives wrong results.
    #[arg(long, value_enum, default_value = "auto", help_heading = HELP_ADVANCED)]
    pub layout_source: LayoutChoice,

    /// Read every thread's kernel state at every sample, also threads asleep in the same non-GIL wait
    /// for 20 ms (normally read every 4th sample, so their wake-up into a GIL wait is seen up to 3
    /// samples late).
    ///
    /// For targets with many sleeping threads that wake straight into take_gil; costs sampler CPU.
    #[arg(long, hide_short_help = true, help_heading = HELP_ADVANCED)]
    pub no_idle_backoff: bool,

    /// Sample at the asked rate all the time, also while the target is quiet (normally, after 50
    /// samples in which nothing GIL-related changed, the sampler ticks at a fifth of the rate, never
    /// below 1 kHz, and returns to the full rate at the first change: the trace's "sampling rate"
    /// track shows which rate held when).
    ///
    /// For timelines where the start of the first wait after a quiet stretch must be exact to a
    /// period rather than to five.
    #[arg(long, hide_short_help = true, help_heading = HELP_ADVANCED)]
    pub fixed_rate: bool,

    /// Do not move a real-time sampler off the CPU the GIL holder runs on (it normally leaves that
    /// CPU out of its affinity when it finds itself there; `--cpus` fixes its CPUs instead).
    ///
    /// For measuring what the move costs and saves (scripts/bench_overhead.py).
    #[arg(long, hide_short_help = true, help_heading = HELP_ADVANCED)]
    pub no_cpu_dodge: bool,

    /// Do not draw GIL hand-offs as arrows between threads (Chrome trace flow events).
    ///
    /// For a smaller file when the GIL changes hands very often.
    #[arg(long, hide_short_help = true, help_heading = HELP_OUTPUT)]
    pub no_handoff_arrows: bool,

    /// Do not read glibc's count of threads waiting on the GIL's condition variables; a thread woken
    /// inside take_gil that waits for a CPU is then told from one running native code only by what the
    /// kernel says afterwards.
    ///
    /// For comparing, or a C library whose counts read wrong.
    #[arg(long, hide_short_help = true, help_heading = HELP_ADVANCED)]
    pub no_waiter_counts: bool,

    /// Do not read Python stacks: take_gil and hold_gil slices then carry no `stack` in their args.
    ///
    /// For the lowest sampler cost when the code that holds the GIL is known.
    #[arg(long, help_heading = HELP_SAMPLING)]
    pub no_stacks: bool,

    /// Also save every sample to PATH, for `gilsample replay` (rerun the classification offline,
    /// golden tests, tuning). With several processes, each gets PATH with `.PID` before its suffix.
    ///
    /// About 170–340 KB per second at 10 kHz (docs/sample-stream.md).
    #[arg(long, value_name = "PATH", hide_short_help = true, help_heading = HELP_ADVANCED)]
    pub save_samples: Option<PathBuf>,

    /// For programs that drive gilsample (the Python API): an inherited socket. gilsample waits for a
    /// byte on it before attaching, reports progress on it as JSON lines, and stops when it reads
    /// another byte or the other end closes.
    #[arg(long, value_name = "FD", hide_short_help = true, help_heading = HELP_ADVANCED)]
    pub control_fd: Option<i32>,
}
