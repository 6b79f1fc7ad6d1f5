//! The gilsample command: parses arguments, runs the job, prints, and exits with a documented status.
//! The only module that exits, and the only one that prints but two commands that print as they go:
//! `top/` draws its view on the terminal, and `replay.rs` prints its warnings and the summary of the
//! trace it wrote, the same summary as `record`'s (summary.rs), since nothing else runs meanwhile.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use clap::error::{ContextKind, ContextValue};
use serde_json::json;

use gilsample::cli::suggest::{option_suggestion, suggestion_for_stray};
use gilsample::cli::{COMMON_COMMANDS, Cli, Command, LayoutArgs, RecordArgs, TopArgs};
use gilsample::control::{Control, error_event, event_for};
use gilsample::discover::DeviceKind;
use gilsample::error::{Error, Result, exit};
use gilsample::info::describe;
use gilsample::launch::Launched;
use gilsample::python::attach::detect_flavour;
use gilsample::python::layout::Layout;
use gilsample::python::version::PyVersion;
use gilsample::record::{RecordOptions, RecordReport, Targets, Update, record};
use gilsample::report::analyze::ProcessAnswer;
use gilsample::sampler::priority::{
    Priority, realtime_allowed, realtime_refused_warning, why_realtime_refused,
};
use gilsample::signals::SessionState;
use gilsample::summary::{answers, format_summary};
use gilsample::symbols::elf::{self, ElfImage};
use gilsample::trace::output::OutputSpec;

mod convert_lines;
mod merge_lines;
mod output_lines;
mod record_progress;
mod report_lines;
mod signal_lines;
mod stdout_text;

use convert_lines::run_convert;
use merge_lines::run_merge;
use output_lines::{default_output_dir, output_taken_as_a_directory};
use record_progress::ProgressDisplay;
use report_lines::run_report;
use signal_lines::install_signal_thread;
use stdout_text::print_text;

fn main() -> ExitCode {
    let cli = parse_command_line();
    let result = match cli.command {
        Some(Command::Info(args)) => gilsample::process::proc_view::check()
            .and_then(|()| describe(args.pid, args.layout_source))
            .and_then(|text| print_text(&text))
            .map(|()| exit::OK),
        Some(Command::Layout(args)) => run_layout(&args).map(|()| exit::OK),
        Some(Command::Convert(args)) => run_convert(&args).map(|()| exit::OK),
        Some(Command::Merge(args)) => run_merge(&args).map(|()| exit::OK),
        Some(Command::Report(args)) => run_report(&args).map(|()| exit::OK),
        Some(Command::Replay(args)) => gilsample::replay::run(&args).map(|()| exit::OK),
        Some(Command::Record(args)) => record_command(args),
        Some(Command::Top(args)) => run_top(args),
        None => record_command(cli.record),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            gilsample::stderr_line!("gilsample: error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// The command line, or an exit with clap's message; a stray word where options belong gets what
/// the user most likely meant (cli/suggest.rs): a unit written apart from its number (`--rate 10
/// kHz`), or a command to launch without its `--` (`gilsample record python3 x.py`).
fn parse_command_line() -> Cli {
    let args: Vec<String> = std::env::args().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(mut e) => {
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(ContextValue::String(stray)) = e.get(ContextKind::InvalidArg)
            {
                let stray = stray.clone();
                // Replaces clap's own tips, "to pass '--pdi' as a value, use '-- --pdi'" among them,
                // which for an option would launch a program named --pdi: after `--` comes the
                // command to launch. Its "a similar argument exists" is kept apart and stays.
                let clap_has_one = e.get(ContextKind::SuggestedArg).is_some();
                let tip = if stray.starts_with('-') {
                    option_suggestion(&args, &stray, clap_has_one)
                } else {
                    suggestion_for_stray(&args, &stray)
                };
                if tip.is_some() || clap_has_one {
                    e.insert(
                        ContextKind::Suggested,
                        ContextValue::StyledStrs(tip.into_iter().map(Into::into).collect()),
                    );
                }
            }
            e.exit()
        }
    }
}

/// Records, reporting to the driving program over `--control-fd` when there is one.
fn record_command(args: RecordArgs) -> Result<i32> {
    let control = match args.control_fd {
        Some(fd) => Some(Control::open(fd)?),
        None => None,
    };
    let (control, reader) = match control {
        Some((control, reader)) => (Some(control), Some(reader)),
        None => (None, None),
    };
    let result = run_record(args, control.as_ref(), reader);
    if let Some(control) = &control {
        match &result {
            Ok(_) => {}
            Err(e) => control.send(&error_event(e)),
        }
    }
    result
}

/// What to record, from `record`'s options (also `top`'s): the targets, checked against the output.
fn record_options(args: &RecordArgs) -> Result<RecordOptions> {
    gilsample::process::proc_view::check()?;
    let device = if args.all_gpu {
        DeviceKind::Gpu
    } else {
        DeviceKind::Npu
    };
    let targets = match (&args.pid, args.command.is_empty()) {
        (Some(_), false) => {
            return Err(Error::Usage(
                "give either --pid or a command after --, not both".into(),
            ));
        }
        (_, false) if args.all_npu || args.all_gpu => {
            return Err(Error::Usage(
                "--all-npu/--all-gpu record running processes; they do not launch a command".into(),
            ));
        }
        (Some(pids), true) => Targets::Pids(pids.0.clone()),
        (None, false) => Targets::Launch(args.command.clone()),
        // The reference tool's default: every Python process on an NPU.
        (None, true) => Targets::Devices(device),
    };
    if args.subprocesses && matches!(targets, Targets::Devices(_)) {
        return Err(Error::Usage(
            "--subprocesses needs --pid or a command to start from".into(),
        ));
    }
    let output = OutputSpec::resolve(args.output.as_deref(), default_output_dir());
    if let (OutputSpec::File(path), Targets::Pids(pids)) = (&output, &targets)
        && pids.len() > 1
    {
        return Err(Error::Usage(format!(
            "{} is one file, but {} processes were given: give a directory",
            path.display(),
            pids.len()
        )));
    }
    if let OutputSpec::File(path) = &output
        && (args.subprocesses || matches!(targets, Targets::Devices(_)))
    {
        return Err(Error::Usage(format!(
            "{} is one file, but --subprocesses, --all-npu and --all-gpu may record several \
             processes: give -o a directory",
            path.display()
        )));
    }
    if args.merge && matches!(output, OutputSpec::File(_)) {
        return Err(Error::Usage(
            "--merge writes one file per process plus GIL_merged.json: give -o a directory".into(),
        ));
    }
    Ok(RecordOptions {
        targets,
        subprocesses: args.subprocesses,
        merge: args.merge,
        rate_hz: args.rate.0,
        duration: args.duration.and_then(|d| d.0),
        output,
        force: args.force,
        layout: args.layout_source,
        clock: args.clock,
        priority: args.priority,
        cpus: args.cpus.as_ref().map(|c| c.0.clone()),
        idle_backoff: !args.no_idle_backoff,
        adaptive_rate: !args.fixed_rate,
        waiter_counts: !args.no_waiter_counts,
        handoff_arrows: !args.no_handoff_arrows,
        stacks: !args.no_stacks,
        cpu_dodge: !args.no_cpu_dodge,
        save_samples: args.save_samples.clone(),
        watch: None,
        stop_command_when_stopped: false,
    })
}

fn run_record(
    args: RecordArgs,
    control: Option<&Control>,
    reader: Option<std::fs::File>,
) -> Result<i32> {
    let opts = record_options(&args)?;
    if let Some(note) = output_taken_as_a_directory(&opts.output).filter(|_| !args.quiet) {
        gilsample::stderr_line!("{note}");
    }
    let state = SessionState::default();
    let (stop, waiting_for_command) = (state.stop.clone(), state.waiting_for_command.clone());
    let searching = state.searching.clone();
    // Only a device search can go on with nothing found; given and launched targets are attached
    // at once (or the session fails).
    searching.store(
        matches!(opts.targets, Targets::Devices(_)),
        Ordering::SeqCst,
    );
    install_signal_thread(state, &opts.output, true, args.quiet);
    if let Some(reader) = reader {
        wait_for_go(reader, &stop)?;
    }
    let progress = ProgressDisplay::new(
        args.quiet,
        args.verbose,
        opts.duration,
        realtime_refused_warning_for(&opts),
        matches!(opts.targets, Targets::Launch(_)),
    );
    let mut on_progress = |update: Update<'_>| {
        if matches!(update, Update::Started { .. }) {
            searching.store(false, Ordering::SeqCst);
        }
        if let Some(control) = control
            && let Some(event) = event_for(&update)
        {
            control.send(&event);
        }
        progress.show(update)
    };
    let report = record(&opts, stop, &mut on_progress);
    progress.finish();
    // The Python API (`control`) words its own way out; the commands are for a command line.
    let for_people = |e: Error| match control {
        None => with_common_commands(e, &opts.targets),
        Some(_) => e,
    };
    let mut report = report.map_err(for_people)?;
    // From now on a signal is for the command that outlived the recording, if one does.
    if let Some(command) = report.command.as_mut()
        && command.try_status().is_none()
    {
        waiting_for_command.store(command.pid(), Ordering::SeqCst);
    }
    if let Some(control) = control {
        send_failures(control, &report);
    }
    if let Err(error) = something_recorded(&report, &opts.targets).map_err(for_people) {
        // A launched command still running is waited for, as after a recording; the error is
        // said first.
        if let Some(command) = report.command.as_mut()
            && command.try_status().is_none()
        {
            gilsample::stderr_line!("gilsample: error: {error}");
            wait_for_command(command, args.quiet)?;
            return Ok(error.exit_code());
        }
        return Err(error);
    }
    let answers = answers(&report);
    print_summary(&report, &answers, &args, opts.rate_hz);
    let mut code = exit_status(&report);
    // The answer is out; a command that outlives the recording is waited for, for its status.
    if let Some(command) = report.command.as_mut() {
        let status = wait_for_command(command, args.quiet)?;
        if code == exit::OK {
            code = status;
        }
    }
    if let Some(control) = control {
        send_finished(control, &report, &answers, code);
    }
    Ok(code)
}

/// Said when the first target starts: the sampler will run at a lower priority than asked.
fn realtime_refused_warning_for(opts: &RecordOptions) -> Option<String> {
    (opts.priority == Priority::Realtime && !realtime_allowed()).then(|| {
        format!(
            "gilsample: {}",
            realtime_refused_warning(opts.cpus.is_some(), &why_realtime_refused())
        )
    })
}

/// Waits for the caller's go on `--control-fd`, then watches it for the stop.
fn wait_for_go(mut reader: std::fs::File, stop: &Arc<AtomicBool>) -> Result<()> {
    if !Control::wait_for_go(&mut reader) {
        return Err(Error::Usage(
            "the program driving gilsample closed --control-fd before saying go".into(),
        ));
    }
    Control::watch_for_stop(reader, stop.clone());
    Ok(())
}

/// Each target that failed, told to the program driving `--control-fd`.
fn send_failures(control: &Control, report: &RecordReport) {
    for (pid, error) in report.errors() {
        control.send(&json!({
            "event": "failed", "pid": pid, "message": error.to_string(), "exit_code": error.exit_code(),
        }));
    }
}

fn print_summary(
    report: &RecordReport,
    answers: &[Option<ProcessAnswer>],
    args: &RecordArgs,
    rate_hz: f64,
) {
    if !args.quiet {
        gilsample::stderr_text!("{}", format_summary(report, answers, args.verbose, rate_hz));
    } else {
        // Quiet drops the summary, never an error.
        for (pid, error) in report.errors() {
            gilsample::stderr_line!("gilsample: error: process {pid}: {error}");
        }
    }
}

/// The files written, the answer and the exit status, for the program driving `--control-fd`.
fn send_finished(
    control: &Control,
    report: &RecordReport,
    answers: &[Option<ProcessAnswer>],
    code: i32,
) {
    let files: Vec<String> = report
        .targets
        .iter()
        .filter(|t| t.write_error.is_none())
        .map(|t| t.path.display().to_string())
        .collect();
    control.send(&json!({
        "event": "finished",
        "files": files,
        "merged": report.merged.as_ref().map(|p| p.display().to_string()),
        "summary": {"processes": answers.iter().flatten().collect::<Vec<_>>()},
        "exit_code": code,
    }));
}

/// A recording that found nothing to record says what it looked for.
fn something_recorded(report: &RecordReport, targets: &Targets) -> Result<()> {
    if report.targets.is_empty() && report.failures.is_empty() {
        let what = match targets {
            Targets::Devices(kind) => {
                format!(
                    "no Python process with {} open was found{}",
                    kind.describe(),
                    gilsample::discover::closed_processes_note()
                )
            }
            _ if !report.launchers.is_empty() => {
                let launchers: Vec<String> = report
                    .launchers
                    .iter()
                    .map(|(pid, program)| format!("{pid} ({program})"))
                    .collect();
                format!(
                    "no Python process was found among the processes started by {}",
                    launchers.join(", ")
                )
            }
            _ => "no Python process was found to record".into(),
        };
        let devices = match targets {
            Targets::Devices(kind) => kind.other_option(),
            _ => "--all-npu or --all-gpu for the processes using accelerators",
        };
        return Err(Error::NothingFound(format!(
            "{what}; give --pid PID[,PID...], or {devices}, or a command after --"
        )));
    }
    Ok(())
}

/// A finished recording's exit status, before a launched command's own: the first failure's when
/// no trace is complete, 1 when some failed, else 0.
fn exit_status(report: &RecordReport) -> i32 {
    // One target's only errors are its outputs' (its samples could not be saved): their status.
    let one_target = report.failures.is_empty() && report.targets.len() == 1;
    match report.errors().next() {
        Some((_, first)) if report.nothing_complete() || one_target => first.exit_code(),
        Some(_) => exit::FAILURE,
        None => exit::OK,
    }
}

/// `top`: a recording shown live; with `-o` it ends like `record`, with the summary.
fn run_top(mut args: TopArgs) -> Result<i32> {
    let plan = gilsample::top::Plan::new(&mut args)?;
    let opts = record_options(&args.record)?;
    let state = SessionState::default();
    let stop = state.stop.clone();
    install_signal_thread(state, &opts.output, plan.saves(), args.record.quiet);
    let outcome = gilsample::top::run(&plan, opts.clone(), stop, Box::new(std::io::stdout()))?;
    let mut report = outcome.report?;
    if outcome.reader_left && !args.record.quiet {
        gilsample::stderr_line!(
            "gilsample: top stopped: the reader of its table closed the pipe (as | head does){}",
            if plan.saves() {
                "; the trace holds what was recorded until then"
            } else {
                ""
            }
        );
    }
    something_recorded(&report, &opts.targets)?;
    if plan.saves() && !args.record.quiet {
        let answers = answers(&report);
        gilsample::stderr_text!(
            "{}",
            format_summary(&report, &answers, args.record.verbose, opts.rate_hz)
        );
    } else {
        for (pid, error) in report.errors() {
            gilsample::stderr_line!("gilsample: error: process {pid}: {error}");
        }
        if !outcome.quit && !args.record.quiet {
            gilsample::stderr_line!("gilsample: the recording ended: {}", how_top_ended(&report));
        }
    }
    let mut code = exit_status(&report);
    // A command top launched was stopped with it (`stop_command_when_stopped`), or ended first.
    if let Some(command) = report.command.as_mut() {
        if let Some(how) = command.stopped()
            && !args.record.quiet
        {
            gilsample::stderr_line!(
                "gilsample: top ended, and with it the command it launched (pid {}): {}. To let a \
                 command run to its end, record it (gilsample record -o DIR -- COMMAND)",
                command.pid(),
                how.describe()
            );
        }
        let status = command.wait()?;
        if code == exit::OK && !outcome.quit {
            code = status;
        }
    }
    // Quitting is how a top session ends: a launched command it stopped is not a failure.
    Ok(if outcome.quit && report.errors().next().is_none() {
        exit::OK
    } else {
        code
    })
}

/// Why a `top` session that was not quit ended, as far as its targets tell.
fn how_top_ended(report: &RecordReport) -> &'static str {
    use gilsample::sampler::report::EndReason;
    let all = |why: EndReason| report.targets.iter().all(|t| t.sampler.end == why);
    if report.targets.is_empty() {
        "nothing was left to watch"
    } else if all(EndReason::Duration) {
        "the duration elapsed"
    } else if all(EndReason::TargetExited) {
        "the processes watched exited"
    } else {
        "the processes watched exited or changed program, or the duration elapsed"
    }
}

/// Waits for a launched command that may outlive its recording, saying so first when it does; its
/// exit status.
fn wait_for_command(command: &mut Launched, quiet: bool) -> Result<i32> {
    if command.try_status().is_none() && !quiet {
        let pid = command.pid();
        gilsample::stderr_line!(
            "gilsample: the recording has ended, but the command (pid {pid}) is still running; \
             gilsample waits for it and exits with its status. To stop it: Ctrl+C, or kill {pid}"
        );
    }
    let status = command.wait()?;
    // Said where it failed: where gilsample's own run went well its status is the command's, whose
    // numbers are not gilsample's own (README, "Exit status").
    if status != exit::OK && !quiet {
        gilsample::stderr_line!(
            "gilsample: the command (pid {}) {}",
            command.pid(),
            ended_in_words(status)
        );
    }
    Ok(status)
}

/// How a command with exit status `status` ended: 128 + N is signal N, as a shell reports it.
fn ended_in_words(status: i32) -> String {
    match nix::sys::signal::Signal::try_from(status - 128) {
        Ok(signal) if status > 128 => format!("was ended by {signal} (status {status})"),
        _ => format!("exited with status {status}"),
    }
}

/// A search for accelerator users that found none also shows the commands a new user needs most:
/// a bare `gilsample` is often the first thing run.
fn with_common_commands(error: Error, targets: &Targets) -> Error {
    match (error, targets) {
        (Error::NothingFound(what), Targets::Devices(kind)) => {
            // Not the command that just found nothing.
            let commands: Vec<&str> = COMMON_COMMANDS
                .lines()
                .filter(|line| !line.contains(kind.option()))
                .collect();
            Error::NothingFound(format!("{what}\n\n{}", commands.join("\n")))
        }
        (error, _) => error,
    }
}

fn run_layout(args: &LayoutArgs) -> Result<()> {
    let image = ElfImage::open(&args.from)?;
    let binary_image = match &args.binary {
        Some(path) => ElfImage::open(path)?,
        None => ElfImage::open(&args.from)?,
    };
    let binary = binary_image.parse()?;
    let version = match &args.python_version {
        Some(text) => text.clone(),
        None => elf::find_symbol(&binary, "Py_Version")
            .and_then(|s| elf::read_vaddr(&binary, binary_image.bytes(), s.vaddr, 8))
            .map(|b| PyVersion::from_hex(u64::from_le_bytes(b.try_into().unwrap())).to_string())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "{}: no Py_Version symbol; give --python-version",
                    args.from.display()
                ))
            })?,
    };
    let minor: String = version.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
    let flavour = detect_flavour(&binary_image)?;
    let arch = elf::arch_name(&binary);
    let mut layout = Layout::from_dwarf(&image, &minor, &version, flavour, arch)?;
    layout.binary = args.binary.as_ref().map(|b| b.display().to_string());
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::Output {
                path: dir.clone(),
                why: e.to_string(),
            })?;
            let path = dir.join(format!("{}.json", layout.key()));
            std::fs::write(&path, layout.to_json()).map_err(|e| Error::Output {
                path: path.clone(),
                why: e.to_string(),
            })?;
            gilsample::stderr_line!("wrote {}", Path::new(&path).display());
        }
        None => print_text(&layout.to_json())?,
    }
    Ok(())
}
