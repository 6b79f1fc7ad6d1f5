//! `gilsample top` in a real terminal (tmux) and as plain tables: thread names and figures appear
//! and change, the keys work, quitting (q, Ctrl+C, SIGTERM, a panic) leaves the terminal as it was
//! with the right exit status; without a terminal it refuses, or prints plain tables with --once and
//! --lines; -o saves the trace. The screen is polled for what is expected a bounded number of
//! times, never waited for with a sleep that must be long enough.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{KilledOnDrop, Trace, Workload, gilsample, interpreter};
use gilsample::error::exit::{OK, USAGE};

/// Looks at the screen up to this many times, `POLL` apart: a minute, for a loaded machine.
const ATTEMPTS: usize = 600;
const POLL: Duration = Duration::from_millis(100);

/// A tmux server of its own running one command in a pane of a given size; killed when dropped.
struct Tmux {
    socket: String,
    dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `gilsample top ARGS` in a `width`×`height` pane; when it exits, the shell writes its
    /// exit status on the screen and the terminal's settings (`stty -a`) into a file.
    fn top(width: u16, height: u16, args: &[&str], env: &[(&str, &str)]) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = format!(
            "gilsample-top-{}-{}",
            std::process::id(),
            dir_id(dir.path())
        );
        let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_gilsample").to_string())
            .chain(std::iter::once("top".to_string()))
            .chain(args.iter().map(|a| a.to_string()))
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let exports: String = env
            .iter()
            .map(|(k, v)| format!("export {k}='{v}'; "))
            .collect();
        let script = format!(
            "cd '{dir}'; {exports}{top}; status=$?; stty -a > '{dir}/stty'; echo \"top exited with $status\"; exec sleep 600",
            dir = dir.path().display(),
            top = quoted.join(" "),
        );
        let tmux = Tmux { socket, dir };
        let out = tmux
            .command()
            .args(["new-session", "-d", "-s", "top", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .args(["sh", "-c", &script])
            .output()
            .expect("tmux is needed for these tests (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.socket, "-f", "/dev/null"]);
        cmd
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    fn pane(&self, format: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", "top", format])
            .trim()
            .to_string()
    }

    /// Polls the screen until `wanted` holds, and returns that screen.
    fn wait_for(&self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        for _ in 0..ATTEMPTS {
            screen = self.screen();
            if wanted(&screen) {
                return screen;
            }
            std::thread::sleep(POLL);
        }
        panic!("the screen never showed {what}:\n{screen}");
    }

    /// Waits for top to exit; returns its exit status.
    fn exit_status(&self) -> i32 {
        let screen = self.wait_for("top's exit", |s| s.contains("top exited with "));
        let line = screen
            .lines()
            .find_map(|l| l.strip_prefix("top exited with "))
            .unwrap();
        line.trim().parse().unwrap()
    }

    /// The terminal is as it was: off the alternate screen, the cursor shown, not raw.
    fn assert_restored(&self) {
        assert_eq!(
            self.pane("#{alternate_on}"),
            "0",
            "still on the alternate screen"
        );
        assert_eq!(self.pane("#{cursor_flag}"), "1", "the cursor is hidden");
        let stty = std::fs::read_to_string(self.dir.path().join("stty")).unwrap();
        let words: Vec<&str> = stty.split([' ', ';', '\n']).collect();
        for mode in ["icanon", "echo", "isig", "opost"] {
            assert!(words.contains(&mode), "{mode} is off after top:\n{stty}");
        }
    }

    /// The pid of the gilsample running in the pane.
    fn gilsample_pid(&self) -> u32 {
        let shell: u32 = self.pane("#{pane_pid}").parse().unwrap();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        children
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "gilsample")
            })
            .expect("gilsample is running in the pane")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

fn dir_id(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().replace('.', "")
}

/// Whether `pid` runs: it exists and is not a zombie (an orphan waits for init to reap it).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// The line of `screen` that starts with `name` (a thread's row).
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
}

/// A row's figures: wait %, hold %, waits per second.
fn figures(row: &str) -> Option<[f64; 3]> {
    let words: Vec<&str> = row.split_whitespace().collect();
    let number = |i: usize| words.get(i)?.parse::<f64>().ok();
    Some([number(1)?, number(2)?, number(3)?])
}

fn spinners(screen: &str) -> bool {
    ["spinner-0", "spinner-1", "spinner-2"]
        .iter()
        .all(|name| row(screen, name).and_then(figures).is_some())
}

/// The table's rows of the spinners, as shown.
fn spinner_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .filter(|l| l.starts_with("spinner-"))
        .map(str::to_string)
        .collect()
}

/// On an 80×24 terminal: the three spinners with figures that add up, figures that change from one
/// refresh to the next, the keys; q quits with 0, the terminal restored, the process still running.
fn top_in_a_terminal(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["contention", "--threads", "3"]);
    let pid = workload.pid.to_string();
    let tmux = Tmux::top(80, 24, &["--pid", &pid, "--interval", "300ms"], &[]);
    let first = tmux.wait_for("the three spinners with figures", spinners);
    let lines: Vec<&str> = first.lines().collect();
    assert!(
        lines[0].starts_with("gilsample top   last 0.") && lines[0].contains("sorted by wait"),
        "{first}"
    );
    assert!(
        lines[1].starts_with(&format!("> pid {pid} rank 0 Python 3.")),
        "{first}"
    );
    assert!(lines[1].contains("GIL busy"), "{first}");
    assert!(lines.iter().any(|l| l.starts_with("THREAD ")), "{first}");
    assert!(
        lines.len() == 24 && lines[23].starts_with("q quit  s sort by hold"),
        "the keys on the last of 24 lines:\n{first}"
    );
    let mut held = 0.0;
    for name in ["spinner-0", "spinner-1", "spinner-2"] {
        let [wait, hold, waits] = figures(row(&first, name).unwrap()).unwrap();
        assert!(wait + hold <= 100.5 && waits >= 0.0, "{name}\n{first}");
        held += hold;
    }
    // A loaded machine may keep one spinner off the CPUs for a whole interval, not all three.
    assert!(held > 0.0, "nobody held the GIL\n{first}");
    let before = spinner_rows(&first);
    tmux.wait_for("figures that change", |s| {
        spinners(s) && spinner_rows(s) != before
    });

    tmux.keys(&["t"]);
    tmux.wait_for("since the start", |s| s.contains("since the start, "));
    tmux.keys(&["s"]);
    tmux.wait_for("the hold sort", |s| {
        s.lines()
            .next()
            .is_some_and(|l| l.contains("sorted by hold"))
    });
    tmux.keys(&["p"]);
    tmux.wait_for("the pause", |s| s.contains("PAUSED"));
    tmux.keys(&["q"]);
    assert_eq!(tmux.exit_status(), 0);
    tmux.assert_restored();
    let after = tmux.screen();
    assert!(
        !after.contains("WAIT%"),
        "the table is left on screen:\n{after}"
    );
    assert!(running(workload.pid), "top --pid must not stop the process");
    // Without -o nothing is left behind.
    let left: Vec<PathBuf> = std::fs::read_dir(tmux.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.ends_with("stty"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

macro_rules! interpreter_tests {
    ($($name:ident => $label:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() { top_in_a_terminal($label) }
        )*
    };
}

interpreter_tests!(
    top_in_a_terminal_py312 => "3.12",
    top_in_a_terminal_sid315 => "sid-3.15",
);

/// A launched command in a large terminal: the code is shown whole; SIGTERM ends top (exit 0), the
/// terminal restored, and the command it launched stopped.
#[test]
fn sigterm_ends_top_and_the_command_it_launched_in_a_large_terminal() {
    let python = interpreter("3.12");
    let mut args: Vec<&str> = vec!["--interval", "300ms", "--"];
    args.extend(python.command.iter().map(String::as_str));
    args.extend([python.workload.as_str(), "contention", "--threads", "3"]);
    let tmux = Tmux::top(200, 50, &args, &[]);
    let screen = tmux.wait_for("the spinners' code in full", |s| {
        spinners(s) && s.contains("spin (gil_workload.py:")
    });
    let header = screen.lines().find(|l| l.starts_with("THREAD ")).unwrap();
    for column in ["WAITED FOR", "IN CODE", "HOLDING"] {
        assert!(header.contains(column), "{header}");
    }
    let launched: u32 = screen
        .lines()
        .find_map(|l| l.strip_prefix("> pid "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process line:\n{screen}"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tmux.gilsample_pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(tmux.exit_status(), 0);
    tmux.assert_restored();
    assert!(!running(launched), "the launched command was left running");
}

/// Two processes: the arrows go from one to the other; Ctrl+C quits with 0.
#[test]
fn arrows_go_from_process_to_process_and_ctrl_c_quits() {
    let python = interpreter("3.12");
    let a = Workload::start(&python, &["contention", "--threads", "3"]);
    let b = Workload::start(&python, &["blocker", "--threads", "2"]);
    let pids = format!("{},{}", a.pid, b.pid);
    let tmux = Tmux::top(80, 24, &["--pid", &pids, "--interval", "300ms"], &[]);
    let (first, second) = (a.pid.min(b.pid), a.pid.max(b.pid));
    tmux.wait_for("the first process selected", |s| {
        s.contains(&format!("> [1/2] pid {first} "))
            && s.contains(&format!("  [2/2] pid {second} "))
    });
    tmux.keys(&["Right"]);
    let screen = tmux.wait_for("the second process selected", |s| {
        s.contains(&format!("> [2/2] pid {second} "))
    });
    assert!(screen.contains("<- -> process"), "{screen}");
    let blocker_first = first == b.pid;
    let (shown, hidden) = if blocker_first {
        ("spinner-2", "blocker")
    } else {
        ("blocker", "spinner-2")
    };
    let screen = tmux.wait_for("the second process's threads", |s| row(s, shown).is_some());
    assert!(row(&screen, hidden).is_none(), "{screen}");
    tmux.keys(&["C-c"]);
    assert_eq!(tmux.exit_status(), 0);
    tmux.assert_restored();
}

/// A panic in the view leaves the terminal as it was, says what happened, and exits 1.
#[test]
fn a_panic_in_the_view_restores_the_terminal() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let pid = workload.pid.to_string();
    let tmux = Tmux::top(
        80,
        24,
        &["--pid", &pid],
        &[("GILSAMPLE_TEST_PANIC_IN_TOP", "1")],
    );
    assert_eq!(tmux.exit_status(), 1);
    tmux.assert_restored();
    let screen = tmux.screen();
    assert!(screen.contains("GILSAMPLE_TEST_PANIC_IN_TOP"), "{screen}");
}

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

fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
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
    assert!(files_in(dir.path()).is_empty());
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
        stdout.starts_with(&format!("process {pid} (rank 0) Python 3.")),
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
        files_in(dir.path()).is_empty(),
        "without -o nothing is written"
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
    assert_eq!(files_in(temp.path()).len(), 1, "its temporary directory");
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
    assert_eq!(files_in(temp.path()), Vec::<String>::new());
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
