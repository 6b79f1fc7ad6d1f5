//! `gilsample top` without a terminal: it refuses, or prints plain tables with --once and --lines,
//! each interval whole and in order until stopped or the duration ends; -o saves the trace. Each
//! test waits on what top prints (a pipe), never on a sleep.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::top_table::figures;
use common::{
    KilledOnDrop, Trace, Workload, file_names, gilsample, interpreter, read_until, running,
    stdout_nobody_reads,
};
use gilsample::error::exit::{OK, USAGE};

/// stdout, stderr and status of a `top` run with its output piped, in a directory of its own.
fn piped(args: &[&str]) -> (String, String, Option<i32>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = gilsample()
        .arg("top")
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.code(),
        dir,
    )
}

#[test]
fn without_a_terminal_top_refuses_and_says_what_works() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let (stdout, stderr, code, dir) = piped(&["--pid", &workload.pid.to_string()]);
    assert_eq!(code, Some(USAGE), "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("not a terminal"), "{stderr}");
    assert!(
        stderr.contains("--once") && stderr.contains("--lines N"),
        "{stderr}"
    );
    assert!(file_names(dir.path()).is_empty());
    for (args, says) in [
        (&["--once", "--control-fd", "3"][..], "--control-fd"),
        (&["--once", "--merge"], "give -o a directory"),
        (&["--interval", "0"], "from 100ms to 1h"),
    ] {
        let (_, stderr, code, _) = piped(args);
        assert_eq!(code, Some(USAGE), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// The plain table's rows of `table` by thread name, with their figures.
fn plain_rows(table: &str) -> Vec<(String, [f64; 3])> {
    table
        .lines()
        .filter_map(|l| Some((l.split_whitespace().next()?.to_string(), figures(l)?)))
        .collect()
}

fn top_once_prints_one_plain_table(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["contention", "--threads", "3"]);
    let pid = workload.pid.to_string();
    let (stdout, stderr, code, dir) = piped(&["--once", "--pid", &pid]);
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(!stdout.contains('\x1b'), "escape codes in\n{stdout}");
    assert_eq!(stdout.matches("THREAD ").count(), 1, "{stdout}");
    assert!(
        stdout.starts_with(&format!("process {pid} Python 3.")),
        "{stdout}"
    );
    assert!(stdout.contains(", 0.0-1.0 s: GIL busy "), "{stdout}");
    let rows = plain_rows(&stdout);
    let mut held = 0.0;
    for name in ["spinner-0", "spinner-1", "spinner-2"] {
        let (_, [wait, hold, _]) = rows
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"));
        assert!(wait + hold <= 100.5, "{name}\n{stdout}");
        held += hold;
    }
    assert!(held > 0.0, "nobody held the GIL\n{stdout}");
    assert!(
        file_names(dir.path()).is_empty(),
        "without -o nothing is written"
    );
    assert!(running(workload.pid), "the process keeps running");
}

/// A reader that stops reading (`top --lines 1 | head`) ends top at its next table, with a line
/// that says why, exit 0, and the process it watched runs on.
#[test]
fn a_plain_tables_reader_that_left_ends_top_quietly() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    // The first table's write fails with EPIPE.
    let out = gilsample()
        .args(["top", "--lines", "1", "--interval", "200ms", "--pid"])
        .arg(workload.pid.to_string())
        .stdout(stdout_nobody_reads())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(OK), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    assert!(
        stderr.contains("top stopped: the reader of its table closed the pipe"),
        "{stderr}"
    );
    assert!(running(workload.pid), "the process keeps running");
}

#[test]
fn top_once_prints_one_plain_table_py312() {
    top_once_prints_one_plain_table("3.12")
}

#[test]
fn top_once_prints_one_plain_table_sid315() {
    top_once_prints_one_plain_table("sid-3.15")
}

/// `--subprocesses` finds the Python a launched shell starts; `--once` then ends the recording and
/// stops what top launched.
#[test]
fn top_once_follows_subprocesses_and_stops_what_it_launched() {
    let python = interpreter("3.12");
    let script = format!(
        "{} {} contention --threads 2; echo the shell outlived its child",
        python.command.join(" "),
        python.workload
    );
    let (stdout, stderr, code, _) = piped(&["--once", "--subprocesses", "--", "sh", "-c", &script]);
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(
        stderr.contains("not Python: watching the Python processes it starts"),
        "{stderr}"
    );
    // The launched command writes to the same stdout (its READY line).
    let pid: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("process "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process line:\n{stdout}"));
    let rows = plain_rows(&stdout);
    assert!(
        ["spinner-0", "spinner-1"]
            .iter()
            .all(|name| rows.iter().any(|(n, _)| n == name)),
        "{stdout}"
    );
    assert!(
        !running(pid),
        "the Python the shell started is left running"
    );
    assert!(!stdout.contains("outlived"), "{stdout}");
    // Said, with how to let a command run to its end.
    assert!(
        stderr.contains("top ended, and with it the command it launched")
            && stderr.contains("gilsample record -o DIR -- COMMAND"),
        "{stderr}"
    );
}

/// `--lines N`: a table every interval, each with at most N threads and a count of the rest, until
/// SIGTERM, which exits 0.
#[test]
fn top_lines_prints_a_table_every_interval_until_stopped() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "3"]);
    let mut top = KilledOnDrop::spawn(
        gilsample()
            .args(["top", "--lines", "2", "--interval", "200ms", "--pid"])
            .arg(workload.pid.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stdout = BufReader::new(top.stdout.take().unwrap());
    let mut tables: Vec<Vec<String>> = Vec::new();
    let mut line = String::new();
    // Three whole tables: read until the fourth begins.
    while tables.len() < 4 {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "top ended early");
        if line.starts_with("process ") {
            tables.push(Vec::new());
        }
        if let Some(table) = tables.last_mut() {
            table.push(line.trim_end().to_string());
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(top.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = top.wait().unwrap();
    assert_eq!(status.code(), Some(OK));
    // Without -o there is no trace to finish: the signal's line says so.
    let mut said = String::new();
    std::io::Read::read_to_string(&mut top.stderr.take().unwrap(), &mut said).unwrap();
    assert!(said.contains("SIGTERM received, stopping"), "{said}");
    assert!(!said.contains("finishing the trace"), "{said}");
    let spans: Vec<&str> = tables
        .iter()
        .map(|t| t[0].split(", ").nth(1).unwrap().split(':').next().unwrap())
        .collect();
    // Consecutive intervals of the recording, one after the other.
    assert_eq!(
        &spans[..3],
        ["0.0-0.2 s", "0.2-0.4 s", "0.4-0.6 s"],
        "{tables:?}"
    );
    for table in &tables[..3] {
        assert_eq!(
            table[1].split_whitespace().next(),
            Some("THREAD"),
            "{table:?}"
        );
        let rows = plain_rows(&table.join("\n"));
        assert_eq!(rows.len(), 2, "{table:?}");
        // The third spinner, and the main thread in a window where it still waited for the GIL on
        // its way from printing READY to its endless wait (on a loaded machine that can fall
        // in any early window): a count with the right plural, never a third row.
        assert!(
            ["(and 1 more thread)", "(and 2 more threads)"].contains(&table[4].as_str()),
            "{table:?}"
        );
    }
}

/// Aborted by a second signal, `top` without `-o` leaves no temporary trace behind.
#[test]
fn an_aborted_top_leaves_no_temporary_trace() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let temp = tempfile::tempdir().unwrap();
    let mut top = KilledOnDrop::spawn(
        gilsample()
            .args(["top", "--lines", "1", "--interval", "200ms", "--pid"])
            .arg(workload.pid.to_string())
            .env("TMPDIR", temp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut stdout = BufReader::new(top.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("process ") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "top ended early");
    }
    assert_eq!(file_names(temp.path()).len(), 1, "its temporary directory");
    let pid = top.id().to_string();
    // Two senders: two requests, the second an abort where it comes before the end.
    for _ in 0..2 {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
    }
    let status = top.wait().unwrap();
    assert!(matches!(status.code(), Some(OK) | Some(130)), "{status}");
    assert_eq!(file_names(temp.path()), Vec::<String>::new());
}

/// `--lines N --duration D`: the tables cover the whole recording, the last interval included,
/// each starting where the one before ended.
#[test]
fn top_lines_with_a_duration_prints_the_last_interval_too() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let pid = workload.pid.to_string();
    let args = [
        "--lines",
        "1",
        "--interval",
        "200ms",
        "--duration",
        "600ms",
        "--pid",
        &pid,
    ];
    let (stdout, stderr, code, _) = piped(&args);
    assert_eq!(code, Some(OK), "{stderr}");
    let spans: Vec<(f64, f64)> = stdout
        .lines()
        .filter(|l| l.starts_with("process "))
        .map(|l| {
            let span = l.split(", ").nth(1).unwrap().split(" s:").next().unwrap();
            let (from, to) = span.split_once('-').unwrap();
            (from.parse().unwrap(), to.parse().unwrap())
        })
        .collect();
    // From the first sample to the last (about 0.6 s later: the duration counts from just before
    // the first sample), one after the other, each a whole interval but the last; the tables
    // before this change stopped at 0.4.
    let (first, last) = (spans[0], spans[spans.len() - 1]);
    assert_eq!(first.0, 0.0, "{stdout}");
    assert!(
        last.1 > 0.4 && last.1 > last.0,
        "the last interval is missing: {stdout}"
    );
    for pair in spans.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "not one after the other: {stdout}");
        assert!((pair[0].1 - pair[0].0 - 0.2).abs() < 0.01, "{stdout}");
    }
}

/// `-o` keeps the trace, as `record -o` writes it, and ends with record's summary.
#[test]
fn top_with_o_saves_the_trace() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let out = tempfile::tempdir().unwrap();
    let trace_path = out.path().join("watched.json");
    let (_, stderr, code, _) = piped(&[
        "--once",
        "--pid",
        &workload.pid.to_string(),
        "-o",
        trace_path.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(
        stderr.contains(&format!("trace: {}", trace_path.display())),
        "{stderr}"
    );
    let trace = Trace::load(&trace_path);
    for tid in workload.tids_named("spinner-") {
        assert!(trace.total(tid, "hold_gil") > 0.0, "{tid} never held");
    }
}

/// A launched shell that is not Python gets, in top as in record, the way to its Python children:
/// said while top waits (read from its stderr as it comes), and again in the error once it exits.
#[test]
fn top_tells_a_launched_shell_how_to_record_its_children() {
    let mut top = KilledOnDrop::spawn(
        gilsample()
            .args(["top", "--once", "--", "sh", "-c", "read line"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let mut stderr = BufReader::new(top.stderr.take().unwrap());
    let seen = read_until(&mut stderr, "keeps waiting");
    let line = seen.lines().last().unwrap_or_default();
    assert!(line.contains("which is not Python"), "{line}");
    assert!(line.contains("add --subprocesses"), "{line}");
    // The shell reads its line and exits: nothing was Python.
    drop(top.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(rest.contains("add --subprocesses"), "{rest}");
    assert_ne!(top.wait().unwrap().code(), Some(OK), "{rest}");
}
