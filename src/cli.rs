//! The command line: arguments, their parsing and validation. Nothing here samples or prints.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::merge::Offset;
use crate::python::attach::LayoutChoice;
use crate::sample::priority::Priority;
use crate::trace::chrome::TraceClock;

/// Highest sampling rate accepted. Above this, each tick's reads take longer than the period on
/// ordinary machines and the sampler would only measure itself.
pub const MAX_RATE_HZ: f64 = 100_000.0;
pub const MIN_RATE_HZ: f64 = 1.0;

const ABOUT: &str = "Show when each Python thread waits for the GIL, holds it, and lets it go — on a timeline, \
for a process that is already running, without eBPF.";

const LONG_ABOUT: &str = "Show when each Python thread waits for the GIL, holds it, and lets it go — on a timeline, \
for a process that is already running, without eBPF.

gilsample reads the interpreter's GIL state from the target's memory (process_vm_readv) and each thread's \
kernel state from /proc at a high rate (10 kHz by default), infers take_gil / hold_gil / drop_gil intervals \
per thread, and writes Chrome Trace JSON (GIL_<pid>_rank_<rank>.json) that opens in Perfetto UI, \
chrome://tracing or MindStudio Insight. The target is never stopped or written to.

Needs ptrace-read access to the target: root, CAP_SYS_PTRACE, or the same user with \
kernel.yama.ptrace_scope=0. No BPF privileges.";

const EXAMPLES: &str = "Examples:
  gilsample --pid 12345 --rate 10khz            record until Ctrl+C, SIGTERM or the target exits
  gilsample --pid 12345,678 --duration 10 -o traces/
  gilsample -- python3 train.py --epochs 1      launch and record from the first instruction
  gilsample --pid 12345 --cpus 3                keep the sampler on CPU 3, off the target's cores
  gilsample info --pid 12345                    what gilsample sees in a process (for support requests)
  gilsample merge gil_traces/GIL_*.json prof.pt.trace.json -o merged.json   next to the profiler's trace

From Python: `import gilsample; with gilsample.start(): ...` (pip install gilsample).";

#[derive(Parser, Debug)]
#[command(name = "gilsample", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub record: RecordArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Describe a running Python process: binary, version, layout source, GIL address, threads and their state.
    Info(InfoArgs),
    /// Generate a layout file from a CPython build with DWARF (used by scripts/generate-layouts.sh).
    Layout(LayoutArgs),
    /// Convert the reference tool's raw GIL file (take_gil/drop_gil events) to Chrome Trace with
    /// hold_gil between each take and the next drop of a thread, like gil_trace_convert.py.
    Convert(ConvertArgs),
    /// Put GIL traces and profiler traces (PyTorch/Kineto, Ascend msprof trace_view.json, any Chrome
    /// Trace) on one wall-clock timeline in one file.
    #[command(after_help = MERGE_EXAMPLES)]
    Merge(MergeArgs),
    /// Who waited for the GIL, for whom and in what code: per process, then which process, rank and
    /// host waited most. Reads gilsample traces and the reference tool's files.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
}

const REPORT_EXAMPLES: &str = "Examples:
  gilsample report gil_traces/GIL_1234_rank_0.json
  gilsample report /shared/job-42/            every GIL_*.json below it, all hosts and ranks
  gilsample report /shared/job-42/ --json     one JSON document (docs/report-json.md)";

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace files, or directories searched for GIL_*.json.
    #[arg(required = true, value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

const MERGE_EXAMPLES: &str = "Clocks: gilsample traces say their clock in otherData; Kineto traces are \
absolute epoch µs or relative to baseTimeNanoseconds; msprof and other traces are taken as epoch µs. \
What was aligned how is printed and kept in otherData.merge. Process ids that two inputs share are \
renumbered in the later, non-GIL one.

Examples:
  gilsample merge gil_traces/GIL_*.json prof/worker0.pt.trace.json -o merged.json
  gilsample merge GIL_1234_rank_0.json trace_view.json --offset trace_view.json=-1500 -o merged.json";

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Process ids to record, comma-separated (e.g. 123,456). Without --pid, --all-gpu or a command,
    /// every Python process using an Ascend NPU is recorded (--all-npu), as the reference tool does.
    #[arg(short, long, value_name = "PID[,PID...]", value_parser = parse_pids, conflicts_with_all = ["all_npu", "all_gpu"])]
    pub pid: Option<PidList>,

    /// Every Python process with an Ascend NPU open (/dev/davinciN), also ones that start later.
    #[arg(long, conflicts_with = "all_gpu")]
    pub all_npu: bool,

    /// Every Python process with an NVIDIA GPU open (/dev/nvidiaN), also ones that start later.
    #[arg(long)]
    pub all_gpu: bool,

    /// Also record every Python descendant of the given or launched processes (torchrun, mpirun,
    /// multiprocessing workers), including ones started later.
    #[arg(long)]
    pub subprocesses: bool,

    /// Also write GIL_merged.json: every target on one timeline, one process track each.
    #[arg(long)]
    pub merge: bool,

    /// Sampling rate: 10khz, 10kHz, 500hz or a plain number of Hz (1 Hz to 100 kHz).
    #[arg(short, long, default_value = "10khz", allow_negative_numbers = true, value_parser = parse_rate)]
    pub rate: Rate,

    /// Seconds to record; -1 (the default) records until Ctrl+C, SIGTERM or the target exits.
    #[arg(short, long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = parse_duration)]
    pub duration: Option<DurationArg>,

    /// Output directory (files are named GIL_<pid>_rank_<rank>.json) or, for one target, a file ending
    /// in .json. Default: $GILSAMPLE_DIR, else ./gil_traces/.
    #[arg(short, long, value_name = "DIR|FILE.json")]
    pub output: Option<PathBuf>,

    /// Overwrite existing trace files.
    #[arg(long)]
    pub force: bool,

    /// No progress bar and no summary.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// After the answer, the sampler's own account in the summary: achieved rate, late samples,
    /// hand-offs seen and counted, how each running thread was classified.
    #[arg(short, long)]
    pub verbose: bool,

    /// Where struct layouts come from: DWARF of the target's binary or its debug file, the layout files
    /// shipped in gilsample, or the first that works.
    #[arg(long, value_enum, default_value = "auto")]
    pub layout_source: LayoutChoice,

    /// Clock of trace timestamps: wall (epoch µs, lines up with msprof/Kineto traces) or monotonic.
    #[arg(long, value_enum, default_value = "wall")]
    pub clock: TraceClock,

    /// Scheduling of the sampler thread: realtime (SCHED_FIFO 1, needs root or CAP_SYS_NICE; falls
    /// back to high, then normal), high (nice -10), or normal. A sampler that waits behind busy target
    /// threads leaves gaps in the trace.
    #[arg(long, value_enum, default_value = "realtime")]
    pub priority: Priority,

    /// Read every thread's kernel state at every sample, also threads asleep in the same non-GIL wait
    /// for 20 ms (normally read every 4th sample: a wake-up into a GIL wait is then seen up to 3
    /// samples late, for less than half the sampler CPU on a target with many idle threads).
    #[arg(long, hide_short_help = true)]
    pub no_idle_backoff: bool,

    /// Do not draw GIL hand-offs as arrows between threads (Chrome trace flow events): a smaller file
    /// when the GIL changes hands very often.
    #[arg(long)]
    pub no_handoff_arrows: bool,

    /// Do not read glibc's count of threads waiting on the GIL's condition variables. Without it, a
    /// thread woken inside take_gil that waits for a CPU is told from one running native code only
    /// by what the kernel says afterwards (measured: `dispatch` 92% vs 87% agreement with it).
    #[arg(long, hide_short_help = true)]
    pub no_waiter_counts: bool,

    /// Do not read Python stacks: take_gil and hold_gil slices then carry no `stack` in their args.
    #[arg(long)]
    pub no_stacks: bool,

    /// For programs that drive gilsample (the Python API): an inherited socket. gilsample waits for a
    /// byte on it before attaching, reports progress on it as JSON lines, and stops when it reads
    /// another byte or the other end closes.
    #[arg(long, value_name = "FD", hide_short_help = true)]
    pub control_fd: Option<i32>,

    /// Run gilsample's threads only on these CPUs, e.g. a housekeeping core (3, or 0,2-3), so the
    /// sampler never takes a core from the target. A launched command is not restricted. Without it,
    /// a real-time sampler moves off whichever CPU the GIL holder runs on; that is enough while the
    /// target leaves a core mostly idle, but a target that keeps every core busy handing the GIL
    /// around is preempted on each tick (measured 1.2-1.3x slower at 10 kHz on 2 cores; README
    /// "What it costs").
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,

    /// A command to launch and record from its start until it exits (put it after --).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The process to describe.
    #[arg(short, long)]
    pub pid: u32,
    #[arg(long, value_enum, default_value = "auto")]
    pub layout_source: LayoutChoice,
}

#[derive(Args, Debug)]
pub struct LayoutArgs {
    /// A libpython or python executable with DWARF (or a separate debug file of one).
    #[arg(long, value_name = "ELF")]
    pub from: PathBuf,
    /// The version, when the file's name and symbols do not tell it (e.g. a .debug file): 3.11.7
    #[arg(long)]
    pub python_version: Option<String>,
    /// The binary the debug file belongs to, for the flavour and architecture when --from is a .debug file.
    #[arg(long, value_name = "ELF")]
    pub binary: Option<PathBuf>,
    /// Write <version>-<flavour>-<arch>.json into this directory instead of printing it.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The raw file, e.g. GIL_12345_rank_0.json.
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// The Chrome Trace to write (.json is appended when missing).
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
    /// Overwrite an existing output.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Traces to merge: GIL_<pid>_rank_<rank>.json files and profiler traces.
    #[arg(required = true, value_name = "TRACE")]
    pub inputs: Vec<PathBuf>,
    /// The merged trace to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Clock correction in µs added to an input's timestamps: INPUT=MICROS for one input, or MICROS
    /// for every input that is not a GIL trace. Repeatable.
    #[arg(long, value_name = "[INPUT=]MICROS", allow_negative_numbers = true)]
    pub offset: Vec<Offset>,
    /// Overwrite an existing output.
    #[arg(long)]
    pub force: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CpuList(pub Vec<usize>);

fn parse_cpus(text: &str) -> Result<CpuList, String> {
    crate::sample::affinity::parse_cpu_list(text).map(CpuList)
}

#[derive(Clone, Debug, PartialEq)]
pub struct PidList(pub Vec<u32>);

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

/// `None` inside means "until stopped" (-1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DurationArg(pub Option<f64>);

pub fn parse_pids(text: &str) -> Result<PidList, String> {
    let mut pids = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let pid: u32 = part
            .parse()
            .map_err(|_| format!("'{part}' is not a process id"))?;
        if pid == 0 {
            return Err("0 is not a process id".into());
        }
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    if pids.is_empty() {
        return Err("give at least one process id".into());
    }
    Ok(PidList(pids))
}

pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = if let Some(n) = lower.strip_suffix("khz") {
        (n, 1000.0)
    } else if let Some(n) = lower.strip_suffix("hz") {
        (n, 1.0)
    } else {
        (lower.as_str(), 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a rate; write e.g. 10khz, 500hz or 2000"))?;
    let hz = value * scale;
    if !hz.is_finite() || !(MIN_RATE_HZ..=MAX_RATE_HZ).contains(&hz) {
        return Err(format!(
            "{text} is out of range: the rate must be between {MIN_RATE_HZ} Hz and {} kHz",
            MAX_RATE_HZ / 1000.0
        ));
    }
    Ok(Rate(hz))
}

pub fn parse_duration(text: &str) -> Result<DurationArg, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if value == -1.0 {
        return Ok(DurationArg(None));
    }
    if !value.is_finite() || value <= 0.0 || value > 365.0 * 86400.0 {
        return Err(format!(
            "{text} is not a valid duration: give seconds > 0, or -1 to record until stopped"
        ));
    }
    Ok(DurationArg(Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_every_spelling() {
        assert_eq!(parse_rate("10khz"), Ok(Rate(10_000.0)));
        assert_eq!(parse_rate("10kHz"), Ok(Rate(10_000.0)));
        assert_eq!(parse_rate("500hz"), Ok(Rate(500.0)));
        assert_eq!(parse_rate("2000"), Ok(Rate(2000.0)));
        assert_eq!(parse_rate("2.5kHz"), Ok(Rate(2500.0)));
    }

    #[test]
    fn absurd_rates_are_refused() {
        for bad in ["0", "-5", "fast", "1mhz", "200khz", "nan", "inf", ""] {
            assert!(parse_rate(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(DurationArg(Some(10.0))));
        assert_eq!(parse_duration("-1"), Ok(DurationArg(None)));
        for bad in ["0", "-2", "ten", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn pid_lists() {
        assert_eq!(parse_pids("123,456, 123"), Ok(PidList(vec![123, 456])));
        assert!(parse_pids("12a").is_err());
        assert!(parse_pids(",").is_err());
        assert!(parse_pids("0").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
