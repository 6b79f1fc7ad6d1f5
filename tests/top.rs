//! `gilsample top` in a real terminal (tmux): thread names and figures appear and change, the keys
//! work, quitting (q, Ctrl+C, SIGTERM, a panic) leaves the terminal as it was with the right exit
//! status. Without a terminal: tests/top_plain.rs. The screen is polled for what is expected a
//! bounded number of times, never waited for with a sleep that must be long enough.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::top_table::{figures, row};
use common::{Workload, interpreter, running};

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
        lines[1].starts_with(&format!("> pid {pid} Python 3.")),
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

/// `top` in a `width`×`height` pane, launching three spinners.
fn top_launching_spinners(width: u16, height: u16) -> Tmux {
    let python = interpreter("3.12");
    let mut args: Vec<&str> = vec!["--interval", "300ms", "--"];
    args.extend(python.command.iter().map(String::as_str));
    args.extend([python.workload.as_str(), "contention", "--threads", "3"]);
    Tmux::top(width, height, &args, &[])
}

/// What a process is doing, for a failure's message: its state and where it waits, per thread.
fn process_state(pid: u32) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    let tasks = tasks.flatten().map(|task| {
        let path = task.path();
        let read = |file: &str| std::fs::read_to_string(path.join(file)).unwrap_or_default();
        let stat = read("stat");
        let state = stat.rsplit_once(')').map_or("?", |(_, rest)| rest.trim());
        let state = state.split_whitespace().next().unwrap_or("?").to_string();
        format!(
            "{} {} {} in {}",
            read("comm").trim(),
            state,
            read("syscall").trim(),
            read("wchan")
        )
    });
    tasks.collect::<Vec<_>>().join("; ")
}

/// The pid of the process the screen shows (`> pid N ...`).
fn launched_pid(screen: &str) -> u32 {
    screen
        .lines()
        .find_map(|l| l.strip_prefix("> pid "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process line:\n{screen}"))
}

/// A launched command in a large terminal: the code is shown whole; SIGTERM ends top (exit 0), the
/// terminal restored, what the signal did said where it stays (after the view, not on its alternate
/// screen), and the command it launched stopped.
#[test]
fn sigterm_ends_top_and_the_command_it_launched_in_a_large_terminal() {
    let tmux = top_launching_spinners(200, 50);
    let screen = tmux.wait_for("the spinners' code in full", |s| {
        spinners(s) && s.contains("spin (gil_workload.py:") && s.contains("> pid ")
    });
    let header = screen.lines().find(|l| l.starts_with("THREAD ")).unwrap();
    for column in ["WAITED FOR", "IN CODE", "HOLDING"] {
        assert!(header.contains(column), "{header}");
    }
    let launched = launched_pid(&screen);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tmux.gilsample_pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(tmux.exit_status(), 0);
    tmux.assert_restored();
    let screen = tmux.screen();
    assert!(screen.contains("gilsample: SIGTERM "), "{screen}");
    assert!(!running(launched), "the launched command was left running");
}

/// The terminal goes away (the tmux server killed, as an ssh connection that drops): top ends, and
/// the command it launched with it, rather than read the dead terminal forever.
#[test]
fn a_terminal_that_goes_away_ends_top_and_the_command_it_launched() {
    let tmux = top_launching_spinners(80, 24);
    // Both on one screen: a capture taken while top redraws can hold the rows without the lines
    // above them.
    let screen = tmux.wait_for("the spinners and their process", |s| {
        spinners(s) && s.lines().any(|l| l.starts_with("> pid "))
    });
    let launched = launched_pid(&screen);
    let top = tmux.gilsample_pid();
    let killed = tmux.command().arg("kill-server").output().unwrap();
    assert!(killed.status.success(), "tmux kill-server");
    // Looked at up to a minute: it ends within moments, or never (it spun on the dead terminal).
    let ended = (0..ATTEMPTS).any(|_| {
        std::thread::sleep(POLL);
        !running(top)
    });
    assert!(
        ended,
        "top kept running after its terminal went away: {}",
        process_state(top)
    );
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
