//! The command line as a new user meets it: `record` and the reference's flat form, a bare
//! `gilsample`, help that teaches, the warnings that say when the picture will be worse, and
//! `gilsample info`'s kernel states in words, on every expected interpreter.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use clap::CommandFactory;
use common::{Trace, Workload, gilsample, interpreter};
use gilsample::cli::Cli;
use gilsample::error::exit::{NO_SUCH_PROCESS, OK, OUTPUT, USAGE};

/// stdout and stderr of a gilsample run that must end with `code`.
fn run_expecting(args: &[&str], code: i32) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = gilsample()
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    (stdout, stderr)
}

fn help(args: &[&str]) -> String {
    run_expecting(args, OK).0
}

/// The part of `text` from the line `heading:` to the next heading (a line ending in `:` at the
/// start of the line), or None.
fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let start = text.find(&format!("\n{heading}:\n"))? + 1;
    let rest = &text[start..];
    let body_start = rest.find('\n')? + 1;
    let end = rest[body_start..]
        .find("\n\n")
        .map(|i| body_start + i)
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

const HEADINGS: [(&str, &[&str]); 4] = [
    (
        "What to record",
        &[
            "--pid",
            "--all-npu",
            "--all-gpu",
            "--subprocesses",
            "--duration",
            "[COMMAND]",
        ],
    ),
    (
        "Where to write",
        &["--output", "--force", "--merge", "--clock", "--quiet"],
    ),
    ("Sampling", &["--rate", "--priority", "--cpus"]),
    ("Advanced", &["--layout-source"]),
];

#[test]
fn short_help_puts_every_option_under_its_heading() {
    for args in [&["-h"][..], &["record", "-h"]] {
        let text = help(args);
        for (heading, options) in HEADINGS {
            let body = section(&text, heading)
                .unwrap_or_else(|| panic!("{args:?}: no '{heading}:' section in\n{text}"));
            for option in options {
                assert!(
                    body.lines().any(|l| l.trim_start().contains(option)),
                    "{args:?}: {option} is not under '{heading}':\n{body}"
                );
            }
        }
    }
}

#[test]
fn every_record_option_has_a_heading_and_says_what_it_does() {
    let command = Cli::command();
    let record = command.find_subcommand("record").expect("a record command");
    let headings: Vec<&str> = HEADINGS.iter().map(|(h, _)| *h).collect();
    for arg in record.get_arguments() {
        let name = arg.get_id().as_str();
        if name == "help" || name == "version" {
            continue;
        }
        let heading = arg.get_help_heading().unwrap_or("(none)");
        assert!(headings.contains(&heading), "{name}: heading {heading:?}");
        let text = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        assert!(text.len() > 30, "{name}: help {text:?} says too little");
    }
}

#[test]
fn help_has_no_benchmark_figures_or_workload_names() {
    let figure = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.iter().any(|w| {
            let w = w.trim_matches(|c: char| ",.;:()".contains(c));
            // 92%, 1.3x, 1.2-1.3x: measurements, which belong in the README.
            (w.ends_with('%') && w[..w.len() - 1].chars().any(|c| c.is_ascii_digit()))
                || (w.ends_with(['x', '×'])
                    && w.len() > 1
                    && w[..w.len() - 1]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '.' || c == '-'))
        }) || line.contains("measured")
    };
    for args in [
        &["--help"][..],
        &["record", "--help"],
        &["info", "--help"],
        &["merge", "--help"],
        &["convert", "--help"],
        &["report", "--help"],
    ] {
        let text = help(args);
        for line in text.lines() {
            assert!(!figure(line), "{args:?}: a measurement in help: {line}");
            for workload in [
                "fastswitch",
                "`dispatch`",
                "`contention`",
                "`mixed`",
                "`many`",
            ] {
                assert!(
                    !line.contains(workload),
                    "{args:?}: workload name in help: {line}"
                );
            }
        }
    }
}

#[test]
fn the_help_footer_says_how_to_install_and_where_the_docs_are() {
    for args in [&["-h"][..], &["--help"], &["record", "--help"]] {
        let text = help(args);
        let footer = text
            .rsplit("\n\n")
            .next()
            .expect("help has paragraphs")
            .trim();
        assert!(footer.contains("README.md"), "{args:?}: {footer}");
        assert!(
            footer.contains("scripts/build-wheels.sh"),
            "{args:?}: {footer}"
        );
        assert!(footer.contains(".whl"), "{args:?}: {footer}");
        assert!(
            footer.contains("cargo install --path ."),
            "{args:?}: {footer}"
        );
        // Not published on an index (yet): `pip install gilsample` alone would fail.
        for (at, _) in text.match_indices("pip install gilsample") {
            let next = text[at + "pip install gilsample".len()..].chars().next();
            assert_eq!(next, Some('-'), "{args:?}: a bare `pip install gilsample`");
        }
    }
}

#[test]
fn record_help_says_what_access_is_needed_as_the_top_level_help_does() {
    for args in [&["--help"][..], &["record", "--help"]] {
        let text = help(args);
        assert!(
            text.contains("root or CAP_SYS_PTRACE") && text.contains("No BPF privileges"),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn report_help_says_what_its_percentages_are_shares_of() {
    let text = help(&["report", "--help"]);
    assert!(
        text.contains("What the percentages are shares of"),
        "{text}"
    );
    for share in [
        "of the recording's window",
        "of that thread's waiting",
        "of that holder's part",
    ] {
        assert!(text.contains(share), "{share}: {text}");
    }
}

#[test]
fn a_command_without_dashes_is_shown_with_them() {
    for (args, tip) in [
        (
            &["record", "python3", "x.py"][..],
            "put it after --: gilsample record -- python3 x.py",
        ),
        (
            &["-d", "5", "python3", "my script.py"],
            "put it after --: gilsample -d 5 -- python3 'my script.py'",
        ),
    ] {
        let (_, stderr) = run_expecting(args, USAGE);
        assert!(stderr.contains("unexpected argument 'python3'"), "{stderr}");
        assert!(stderr.contains(tip), "{args:?}: {stderr}");
    }
    // An unknown option is not a command.
    let (_, stderr) = run_expecting(&["record", "--bogus"], USAGE);
    assert!(!stderr.contains("put it after --"), "{stderr}");
}

#[test]
fn a_command_that_cannot_start_says_what_to_give_instead() {
    let (_, stderr) = run_expecting(&["--", "no-such-command-here"], USAGE);
    assert!(
        stderr.contains("no command no-such-command-here on PATH"),
        "{stderr}"
    );
    // A script run by name, not through its interpreter.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("train.py");
    std::fs::write(&script, "print('hi')\n").unwrap();
    let script = script.display().to_string();
    let (_, stderr) = run_expecting(&["--", &script], USAGE);
    assert!(
        stderr.contains(&format!("gilsample -- python3 {script}")),
        "{stderr}"
    );
}

#[test]
fn an_option_with_two_letters_swapped_is_named_and_never_put_after_dashes() {
    let (_, stderr) = run_expecting(&["--pdi", "12", "-d", "5s"], USAGE);
    assert!(
        stderr.contains("a similar option exists, --pid: gilsample --pid 12 -d 5s"),
        "{stderr}"
    );
    // `-- --pdi` would launch a program named --pdi.
    assert!(!stderr.contains("'-- --pdi'"), "{stderr}");
    // Where clap finds the option itself, its tip stays, without the one about `--`.
    let (_, stderr) = run_expecting(&["top", "--rat", "10khz"], USAGE);
    assert!(stderr.contains("'--rate'"), "{stderr}");
    assert!(!stderr.contains("as a value, use"), "{stderr}");
    // Nothing similar: where the options of a launched command go, not `-- --bogus`.
    let (_, stderr) = run_expecting(&["--pid", "1", "--bogus"], USAGE);
    assert!(
        stderr.contains(
            "options of a command to launch go after it: gilsample [OPTIONS] -- COMMAND --bogus"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("as a value, use"), "{stderr}");
}

#[test]
fn a_negative_number_is_said_to_be_one_not_put_after_dashes() {
    let (_, stderr) = run_expecting(&["--pid", "-5"], USAGE);
    assert!(
        stderr.contains("tip: -5 is a negative number, and --pid takes a positive one"),
        "{stderr}"
    );
    assert!(!stderr.contains("-- COMMAND"), "{stderr}");
}

/// `-o run.json` naming an existing directory: refused before anything is recorded, with the
/// spelling that means the directory. Any pid: the output is checked first.
#[test]
fn an_output_directory_named_like_a_file_is_refused_with_the_slash_that_means_it() {
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("d.json");
    std::fs::create_dir(&named).unwrap();
    let out = gilsample()
        .args(["--pid", &std::process::id().to_string(), "-o"])
        .arg(&named)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(OUTPUT), "{stderr}");
    assert!(
        stderr.contains(&format!("end it with a slash: -o {}/", named.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&named).unwrap().count(), 0);
}

#[test]
fn a_unit_apart_from_its_number_is_shown_joined_not_as_a_command() {
    let (_, stderr) = run_expecting(&["--pid", "1", "--rate", "10", "kHz"], USAGE);
    assert!(
        stderr.contains("write the number and its unit together: --rate 10kHz"),
        "{stderr}"
    );
    assert!(!stderr.contains("put it after --"), "{stderr}");
}

#[test]
fn a_bare_gilsample_that_finds_no_npu_process_says_so_and_shows_the_common_commands() {
    // No NPU on this machine: the reference's default finds nothing.
    let (_, stderr) = run_expecting(&[], NO_SUCH_PROCESS);
    assert!(
        stderr.contains("no Python process with an Ascend NPU (/dev/davinciN) open was found"),
        "{stderr}"
    );
    assert!(stderr.contains("--all-gpu for NVIDIA GPUs"), "{stderr}");
    // --all-gpu that finds none points at the other kind, not at itself, nor lists itself among
    // the common commands.
    let (_, gpu) = run_expecting(&["--all-gpu"], NO_SUCH_PROCESS);
    assert!(
        gpu.contains("with an NVIDIA GPU (/dev/nvidiaN)")
            && gpu.contains("--all-npu for Ascend NPUs")
            && !gpu.contains("--all-gpu for")
            && !gpu.contains("gilsample record --all-gpu")
            && gpu.contains("gilsample record --pid"),
        "{gpu}"
    );
    // The same after waiting: --duration looks again until it ends.
    let (_, waited) = run_expecting(&["--all-gpu", "--duration", "0.2"], NO_SUCH_PROCESS);
    assert!(
        waited.contains("--all-npu for Ascend NPUs") && !waited.contains("--all-gpu for"),
        "{waited}"
    );
    // It said at once what it waits for, and that this machine has no such device at all.
    let waiting = waited
        .find("looking for one as they start, for the --duration (0.2 s)")
        .unwrap_or_else(|| panic!("no waiting line: {waited}"));
    assert!(waiting < waited.find("error:").unwrap(), "{waited}");
    let gpus_here = std::fs::read_dir("/dev").unwrap().flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.strip_prefix("nvidia")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    assert_eq!(
        waited.contains("This machine's /dev has no such device"),
        !gpus_here,
        "{waited}"
    );
    // Without --duration, the error says it, and waiting is no longer offered where no GPU is.
    assert_eq!(
        gpu.contains("and this machine's /dev has no such device"),
        !gpus_here,
        "{gpu}"
    );
    assert_eq!(gpu.contains("--duration to wait"), gpus_here, "{gpu}");
    let commands: Vec<&str> = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("gilsample record "))
        .collect();
    assert_eq!(commands.len(), 3, "{stderr}");
    assert!(commands.iter().any(|c| c.contains("--pid")), "{stderr}");
    assert!(
        commands.iter().any(|c| c.contains(" -- python3")),
        "{stderr}"
    );
    // The same with `record` and no target, and not for an explicit --pid that is missing.
    let (_, stderr) = run_expecting(&["record"], NO_SUCH_PROCESS);
    assert!(stderr.contains("The most common commands"), "{stderr}");
    let (_, stderr) = run_expecting(&["record", "--pid", "4194305"], NO_SUCH_PROCESS);
    assert!(!stderr.contains("The most common commands"), "{stderr}");
}

#[test]
fn record_subcommand_records_like_the_flat_form() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let pid = workload.pid.to_string();
    for form in [&["record", "--pid"][..], &["--pid"]] {
        let dir = tempfile::tempdir().unwrap();
        let out = gilsample()
            .args(form)
            .args([&pid, "--duration", "300ms", "--quiet", "-o"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{form:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let trace = Trace::load_single(dir.path());
        assert_eq!(
            trace.other("end_reason").as_str(),
            Some("Duration"),
            "{form:?}"
        );
        for tid in workload.tids_named("spinner-") {
            assert!(
                trace.total(tid, "hold_gil") > 0.0,
                "{form:?}: {tid} never held"
            );
        }
    }
}

/// gilsample run without CAP_SYS_NICE (and with no real-time budget), as an unprivileged user would.
fn without_cap_sys_nice(args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"])
        .arg(env!("CARGO_BIN_EXE_gilsample"))
        .args(args);
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        command.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_RTPRIO, &none) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

#[test]
fn refused_real_time_priority_is_warned_about_at_the_start() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let pid = workload.pid.to_string();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().display().to_string();
    let args = [
        "--pid",
        &pid,
        "--duration",
        "200ms",
        "--force",
        "-o",
        &out_dir,
    ];
    let record = |cpus: Option<&str>| {
        let mut args = args.to_vec();
        if let Some(cpus) = cpus {
            args.extend(["--cpus", cpus]);
        }
        let out = without_cap_sys_nice(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let stderr = record(None);
    let warning = stderr
        .lines()
        .find(|l| l.contains("warning: real-time scheduling"))
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert!(warning.contains("CAP_SYS_NICE"), "{warning}");
    assert!(warning.contains("--cpus LIST"), "{warning}");
    // It is said before sampling starts, and it is true: the sampler ran without SCHED_FIFO.
    let recording_at = stderr.find("recording process").expect("a start line");
    assert!(stderr.find(warning).unwrap() < recording_at, "{stderr}");
    let trace = Trace::load_single(dir.path());
    assert_ne!(
        trace.other("sampler_scheduling").as_str(),
        Some("SCHED_FIFO 1")
    );
    // With --cpus already given, the warning does not tell the user to give it.
    let stderr = record(Some("0"));
    assert!(
        stderr.contains("meanwhile --cpus keeps the sampler on CPUs of its own"),
        "{stderr}"
    );
    // Root may use SCHED_FIFO: no warning.
    let out = gilsample().args(args).output().unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning: real-time"));
}

/// `info` names what the kernel says in words: threads behind a hog wait on the GIL's cond; a thread
/// reading stdin is in `read`; no Rust `Debug` text anywhere.
fn info_prints_kernel_states_as_words(label: &str) {
    let python = interpreter(label);
    let info = |pid: u32| {
        let out = gilsample()
            .args(["info", "--pid", &pid.to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for debug in ["Some(", "None", "InSyscall", "Running", "nr:"] {
            assert!(!text.contains(debug), "Debug text {debug:?} in\n{text}");
        }
        text
    };
    let kernel_of = |text: &str, tid: u32| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("tid {tid:>8}")))
            .and_then(|l| l.split("kernel: ").nth(1))
            // The thread's Python name follows the kernel state.
            .map(|k| k.split("  name: ").next().unwrap_or(k).trim_end())
            .unwrap_or_else(|| panic!("no line for tid {tid} in\n{text}"))
            .to_string()
    };

    let reader =
        Workload::start_with_stdin(&python, &["sleeper", "--exit-on-stdin"], Stdio::piped());
    let main = reader.tid("MainThread");
    // The main thread reaches its read right after printing READY: poll, bounded.
    let seen: Vec<String> = (0..300)
        .map(|_| kernel_of(&info(reader.pid), main))
        .take_while(|k| k != "read")
        .collect();
    assert!(
        seen.len() < 300,
        "main thread never in read: {:?}",
        &seen[seen.len() - 3..]
    );

    let hog = Workload::start(&python, &["hog", "--threads", "2"]);
    let waiters = hog.tids_named("waiter-");
    let want = "futex wait on the GIL's cond";
    // The waiters time out every switch interval and ask the hog to drop the GIL: each is asleep on
    // the cond most of the time, but not at every look.
    let found = (0..300).any(|_| {
        let text = info(hog.pid);
        waiters.iter().all(|&tid| kernel_of(&text, tid) == want)
    });
    assert!(found, "{label}: the waiters were never seen in '{want}'");
}

macro_rules! interpreter_tests {
    ($($name:ident => $label:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() { info_prints_kernel_states_as_words($label) }
        )*
    };
}

interpreter_tests!(
    info_words_py37 => "3.7",
    info_words_py38 => "3.8",
    info_words_py39 => "3.9",
    info_words_py310 => "3.10",
    info_words_py311 => "3.11",
    info_words_py312 => "3.12",
    info_words_py313 => "3.13",
    info_words_debian311 => "debian-3.11",
    info_words_sid313 => "sid-3.13",
    info_words_sid314 => "sid-3.14",
    info_words_sid315 => "sid-3.15",
    info_words_sid314d => "sid-3.14d",
);

#[test]
fn info_words_cover_every_expected_interpreter() {
    let source = include_str!("command_line.rs");
    for label in common::EXPECTED {
        assert!(
            source.contains(&format!("=> \"{label}\",")),
            "no info-words test for {label}"
        );
    }
}

/// `-o` naming a file that exists, without `.json`: the way to one file is said.
#[test]
fn an_output_that_is_a_plain_file_says_how_to_name_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("traces");
    std::fs::write(&file, "x").unwrap();
    let pid = std::process::id().to_string();
    let output = file.display().to_string();
    let (_, stderr) = run_expecting(&["--pid", &pid, "-o", &output], OUTPUT);
    assert!(
        stderr.contains("a directory is needed") && stderr.contains("ending in .json"),
        "{stderr}"
    );
}

#[test]
fn ctrl_c_while_looking_for_accelerator_users_stops_the_search_without_a_trace_to_finish() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = gilsample()
        .args(["--all-npu", "--duration", "10m", "-o"])
        .arg(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    common::read_until(&mut stderr, "looking for one as they start");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(NO_SUCH_PROCESS), "{rest}");
    assert!(
        rest.contains("SIGINT received, stopping the search: no process found to record yet"),
        "{rest}"
    );
    assert!(!rest.contains("finishing the trace"), "{rest}");
    assert_eq!(common::file_names(dir.path()), Vec::<String>::new());
}
