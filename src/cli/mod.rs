//! The command line: arguments, their parsing and validation. Nothing here samples or prints.

// The doc comments here are `--help`'s text, where `GIL_<pid>_rank_<rank>.json` is what the user
// reads; rustdoc takes `<pid>` for an HTML tag, and backticks would show in the help.
#![allow(rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::merge::Offset;
use crate::python::attach::LayoutChoice;

pub mod record;
pub mod suggest;
pub mod top;
pub mod values;

pub use record::RecordArgs;
pub use top::TopArgs;
pub use values::{
    CpuList, DurationArg, MAX_RATE_HZ, MIN_RATE_HZ, PidList, Rate, parse_cpus, parse_duration,
    parse_one_pid, parse_pids, parse_rate,
};

const ABOUT: &str = "Show when each Python thread waits for the GIL, holds it, and lets it go — on a timeline, \
for a process that is already running, without eBPF.";

/// What reading a process needs, in the top-level and `record`'s long help alike.
macro_rules! permissions {
    () => {
        "Needs the access a debugger has to the target (ptrace \"attach\" mode; the target is never \
stopped or written to): root or CAP_SYS_PTRACE, or the target's own user where the kernel's Yama module \
allows it (kernel.yama.ptrace_scope 0; 1 for a command gilsample launches). No BPF privileges. A refusal \
says which check failed on this machine and what to do."
    };
}

const LONG_ABOUT: &str = concat!(
    "Show when each Python thread waits for the GIL, holds it, and lets it go — on a timeline, \
for a process that is already running, without eBPF.

gilsample reads the interpreter's GIL state from the target's memory (process_vm_readv) and each thread's \
kernel state from /proc at a high rate (10 kHz by default), infers take_gil / hold_gil / drop_gil intervals \
per thread, and writes Chrome Trace JSON (GIL_<pid>_rank_<rank>.json) that opens in Perfetto UI, \
chrome://tracing or MindStudio Insight. The target is never stopped or written to.

",
    permissions!()
);

const RECORD_LONG_ABOUT: &str = concat!(
    "Record GIL timelines (the default: `gilsample --pid 12345` is `gilsample record --pid 12345`).

One trace file per process, GIL_<pid>_rank_<rank>.json, and at the end the answer: who waited for the \
GIL, for whom, in what code. In launch mode (a command after --), a recording that ends first (a \
--duration, Ctrl+C) gives its answer at once, then waits for the command.

",
    permissions!()
);

/// Literals (macros, so that `concat!` can join them) for the help's examples and footer.
macro_rules! examples {
    () => {
        "Examples:
  gilsample record --pid 12345                  record until Ctrl+C, SIGTERM or the target exits
  gilsample record --pid 12345,678 --duration 30s -o traces/
  gilsample record -- python3 train.py          launch a command and record it from its start
  gilsample record --subprocesses -- torchrun --nproc-per-node 8 train.py
  gilsample record --pid 12345 --cpus 3         keep the sampler on CPU 3, off the target's cores
  gilsample                                     every Python process with an Ascend NPU open
  gilsample top --pid 12345                     watch it live: who waits for whom, refreshed every second
  gilsample info --pid 12345                    what gilsample sees in a process (for support requests)
  gilsample merge gil_traces/GIL_*.json prof.pt.trace.json -o merged.json   next to the profiler's trace

`gilsample --pid ...` without `record` is the same command, as in the reference tool."
    };
}

/// How to install and where the documentation is.
macro_rules! footer {
    () => {
        "Install: in gilsample's source, scripts/build-wheels.sh builds wheels into target/wheels/; \
`pip install gilsample-<version>-py3-none-manylinux2014_<arch>.manylinux_2_17_<arch>.whl` installs this \
command and the Python package (`import gilsample; with gilsample.start(): ...`). \
Or `cargo install --path .` in the source. \
Documentation (reading the trace, accuracy, what it costs): README.md in the source."
    };
}

const EXAMPLES_AND_FOOTER: &str = concat!(examples!(), "\n\n", footer!());

/// The commands a new user needs most, shown when a bare `gilsample` finds nothing to record.
pub const COMMON_COMMANDS: &str = "The most common commands:
  gilsample record --pid 12345                  record a running process until Ctrl+C
  gilsample record -- python3 train.py          launch a command and record it from its start
  gilsample record --all-gpu --duration 2m      every Python process with an NVIDIA GPU open, for 2 minutes
(gilsample --help for the rest)";

/// gilsample's command line: a subcommand, or without one the options of `record`.
#[derive(Parser, Debug)]
#[command(name = "gilsample", version, about = ABOUT, long_about = LONG_ABOUT)]
#[command(after_help = EXAMPLES_AND_FOOTER)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// The subcommand given; `None`: `record`, with the options in `record`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand: the options of `record`.
    #[command(flatten)]
    pub record: RecordArgs,
}

/// gilsample's subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Record GIL timelines (the default: `gilsample --pid 12345` is `gilsample record --pid 12345`).
    #[command(long_about = RECORD_LONG_ABOUT, after_help = EXAMPLES_AND_FOOTER)]
    Record(RecordArgs),
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
    /// Rerun the classification on samples saved with --save-samples and write the trace it gives:
    /// the same slices as the recording that saved them.
    #[command(after_help = REPLAY_EXAMPLES)]
    Replay(ReplayArgs),
    /// Watch the GIL live, like `top`: per process how busy the GIL is, per thread how much it waits
    /// and holds and whom it waits for, in what code; refreshed every second until `q`.
    #[command(after_help = top::TOP_EXAMPLES)]
    Top(TopArgs),
}

const REPLAY_EXAMPLES: &str = "Examples:
  gilsample --pid 1234 --duration 5 --save-samples run.gilsamples -o run.json
  gilsample replay run.gilsamples -o replayed.json      the same take/hold/drop slices as run.json
  gilsample replay run.gilsamples --explain why.jsonl  also every thread of every sample, decided how";

/// `gilsample replay`'s options.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A sample stream written by --save-samples.
    #[arg(value_name = "SAMPLES")]
    pub input: PathBuf,
    /// The trace to write (default: GIL_<pid>_rank_<rank>.replay.json in the current directory).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace an existing output file.
    #[arg(short, long)]
    pub force: bool,
    /// Also write every thread of every sample as a JSON line: what was read, the state decided
    /// and the rule that decided it (scripts/accuracy_breakdown.py reads it).
    #[arg(long, value_name = "FILE")]
    pub explain: Option<PathBuf>,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
    /// The summary with the sampler's own counts, as `record --verbose` prints it.
    #[arg(short, long)]
    pub verbose: bool,
}

const REPORT_EXAMPLES: &str = "What the percentages are shares of: in the headline, `the GIL was held N% \
of the time` is of the recording's window. For each thread, `waited N%` is of the window too; below it, \
`for HOLDER N%` is of that thread's waiting (the moments HOLDER held the GIL), and `in FUNCTION N%` is \
of that holder's part, by the function it ran. `nobody holding it` is waiting during which no hold was \
seen.

Examples:
  gilsample report                            the traces record wrote by default (./gil_traces/)
  gilsample report gil_traces/GIL_1234_rank_0.json
  gilsample report /shared/job-42/            every GIL_*.json below it, all hosts and ranks
  gilsample report /shared/job-42/ --json     one JSON document (docs/report-json.md)";

/// `gilsample report`'s options.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace files, or directories searched for GIL_*.json (and interrupted recordings' .partial
    /// files).
    ///
    /// Default: where record writes by default, $GILSAMPLE_DIR, else ./gil_traces/.
    #[arg(value_name = "PATH")]
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

/// `gilsample info`'s options.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The process to describe.
    #[arg(short, long, value_parser = parse_one_pid)]
    pub pid: u32,
    /// Where the interpreter's struct layouts come from, as record's --layout-source: to see what
    /// gilsample reads through a given source.
    #[arg(long, value_enum, default_value = "auto")]
    pub layout_source: LayoutChoice,
}

/// `gilsample layout`'s options.
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

/// `gilsample convert`'s options.
#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The raw file, e.g. GIL_12345_rank_0.json (a regular file: it is read twice, so not a pipe).
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// The Chrome Trace to write (.json is appended when missing).
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
    /// Overwrite an existing output.
    #[arg(short, long)]
    pub force: bool,
}

/// `gilsample merge`'s options.
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
    #[arg(short, long)]
    pub force: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("gilsample").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// The record options, from `gilsample record ARGS` or the flat `gilsample ARGS`.
    fn record_args(cli: Cli) -> RecordArgs {
        match cli.command {
            Some(Command::Record(args)) => args,
            None => cli.record,
            Some(other) => panic!("not a recording: {other:?}"),
        }
    }

    #[test]
    fn every_command_that_writes_a_file_takes_dash_f_for_force() {
        assert!(record_args(parse(&["-p", "1", "-o", "d", "-f"])).force);
        assert!(record_args(parse(&["record", "-p", "1", "-f"])).force);
        for args in [
            &["convert", "--input", "a", "--output", "b", "-f"][..],
            &["merge", "a.json", "-o", "m.json", "-f"],
            &["replay", "s", "-o", "t.json", "-f"],
            &["top", "-p", "1", "-o", "d", "-f"],
        ] {
            let forced = match parse(args).command {
                Some(Command::Convert(a)) => a.force,
                Some(Command::Merge(a)) => a.force,
                Some(Command::Replay(a)) => a.force,
                Some(Command::Top(a)) => a.record.force,
                other => panic!("{args:?}: {other:?}"),
            };
            assert!(forced, "{args:?}");
        }
    }

    #[test]
    fn record_is_the_default_command_and_the_flat_form_still_works() {
        for args in [
            &["--pid", "12,34", "--duration", "2m", "--rate", "5khz"][..],
            &["-p", "12,34", "-d", "120", "-r", "5000"],
        ] {
            let mut with_record = vec!["record"];
            with_record.extend_from_slice(args);
            let (flat, sub) = (parse(args), parse(&with_record));
            assert!(flat.command.is_none(), "{args:?}");
            assert!(matches!(sub.command, Some(Command::Record(_))), "{args:?}");
            for parsed in [record_args(flat), record_args(sub)] {
                assert_eq!(parsed.pid, Some(PidList(vec![12, 34])));
                assert_eq!(
                    parsed.duration,
                    Some(DurationArg(Some(Duration::from_secs(120))))
                );
                assert_eq!(parsed.rate, Rate(5000.0));
            }
        }
    }

    #[test]
    fn a_bare_command_and_a_bare_record_mean_every_npu_process() {
        for args in [&[][..], &["record"]] {
            let parsed = record_args(parse(args));
            assert_eq!(parsed.pid, None);
            assert!(!parsed.all_gpu && parsed.command.is_empty(), "{args:?}");
            assert_eq!(parsed.duration, None, "{args:?}: until stopped");
        }
    }

    #[test]
    fn a_launched_command_keeps_its_own_arguments() {
        for prefix in [&[][..], &["record"]] {
            let mut args = prefix.to_vec();
            args.extend([
                "--duration",
                "10s",
                "--",
                "python3",
                "train.py",
                "--duration",
                "5",
            ]);
            let parsed = record_args(parse(&args));
            assert_eq!(parsed.command, ["python3", "train.py", "--duration", "5"]);
            assert_eq!(
                parsed.duration,
                Some(DurationArg(Some(Duration::from_secs(10))))
            );
        }
    }

    #[test]
    fn record_and_the_flat_form_together_are_refused() {
        let flat_then_record = ["gilsample", "--pid", "1", "record", "--pid", "2"];
        assert!(Cli::try_parse_from(flat_then_record).is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
