//! Launching and following processes without surprises: outputs checked before a command runs, a
//! command stopped (never orphaned) when the recording fails after it started, Python children found
//! behind shells given or launched with `--subprocesses` (one that execs Python after it was passed
//! over too), a thread id given as `--pid`, and the
//! launched command line in the trace. A recording that ends before its command (a duration, a
//! signal) gives its answer at once and says the command still runs; a command without Python yet
//! is said to be waited for, once.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{
    KilledOnDrop, LaunchedRecording, Trace, gilsample, interpreter, pyenv_root, read_until,
    ready_pid, running, stop_once_recording, succeeded,
};
use gilsample::error::exit::{NO_SUCH_PROCESS, OUTPUT, UNSUPPORTED, USAGE};

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn an_existing_output_is_refused_before_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("existing.json");
    std::fs::write(&existing, "{}").unwrap();
    let marker = dir.path().join("the-command-ran");
    let out = gilsample()
        .arg("-o")
        .arg(&existing)
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(OUTPUT), "{stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(!marker.exists(), "the command was launched: {stderr}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "{}");

    // The merged trace is checked as early.
    std::fs::write(dir.path().join("GIL_merged.json"), "{}").unwrap();
    let out = gilsample()
        .arg("--merge")
        .arg("-o")
        .arg(dir.path())
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(OUTPUT));
    assert!(!marker.exists(), "the command was launched");
}

#[test]
fn a_command_is_stopped_when_the_recording_fails_after_it_started() {
    // CPython 3.6 is found and refused once it runs: the failure comes after the launch.
    let python36 = pyenv_root().join("versions/3.6.15/bin/python3.6");
    assert!(python36.exists(), "{} is needed", python36.display());
    let marker = format!("gilsample-stop-test-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let out = gilsample()
        .arg("-o")
        .arg(dir.path())
        .arg("--")
        .arg(&python36)
        .args(["-c", "import sys, time; time.sleep(600)", &marker])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(UNSUPPORTED), "{stderr}");
    assert!(
        stderr.contains("launched command") && stderr.contains("stopped"),
        "{stderr}"
    );
    // Why it failed is said, after the line that promises it.
    let stopped = stderr.find("(the error follows)").expect("the stop said");
    let why = stderr
        .find("Python 3.6 is not supported")
        .expect("the reason said");
    assert!(stopped < why, "{stderr}");
    assert_eq!(processes_with(&marker), Vec::<u32>::new(), "left running");
}

#[test]
fn python_behind_a_launched_shell_is_recorded_with_subprocesses() {
    let python = interpreter("3.12");
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "{} {} short --threads 2 --seconds 0.5; true",
        python.command[0], python.workload
    );
    let out = gilsample()
        .args(["--subprocesses", "-o"])
        .arg(dir.path())
        .args(["--", "bash", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not Python: recording the Python processes it starts"),
        "{stderr}"
    );
    let child = ready_pid(String::from_utf8_lossy(&out.stdout).lines().next().unwrap());
    let trace = Trace::load(&dir.path().join(format!("GIL_{child}_rank_0.json")));
    assert!(trace.events().iter().any(|e| e.name == "hold_gil"));
    assert!(
        !stderr.contains("skipping process"),
        "the shell is the job's plumbing, not a failure: {stderr}"
    );
    // Piped and without --duration: how a launched command's recording ends, said once.
    assert_eq!(
        stderr.matches("recording until the command exits").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_descendant_that_execs_python_after_it_was_passed_over_is_recorded() {
    // pyenv's `python3` is a bash script that execs Python once it has found the version: a
    // descendant first judged not Python, then Python, however late the exec comes.
    let python = interpreter("3.12");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("release");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let script = format!(
        "sh -c 'read x < {}; exec {} {} short --threads 2 --seconds 0.5'; true",
        fifo.display(),
        python.command[0],
        python.workload
    );
    let mut recording = gilsample()
        .args(["--subprocesses", "--verbose", "-o"])
        .arg(dir.path().join("out"))
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(recording.stderr.take().unwrap());
    // The inner shell blocks opening the FIFO until the test writes to it: it has been looked at
    // and passed over by then.
    let seen = read_until(&mut stderr, "not Python: passed over");
    std::fs::write(&fifo, "go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut recording.stdout.take().unwrap(), &mut stdout).unwrap();
    let status = recording.wait().unwrap();
    assert!(status.success(), "{seen}{rest}");
    let child = ready_pid(stdout.lines().next().unwrap());
    assert!(
        seen.contains(&format!("process {child} runs /")),
        "the shell that became Python was passed over first: {seen}"
    );
    assert!(
        rest.contains(&format!("recording process {child}")),
        "{rest}"
    );
    let trace = Trace::load(&dir.path().join(format!("out/GIL_{child}_rank_0.json")));
    assert!(trace.events().iter().any(|e| e.name == "hold_gil"));
}

#[test]
fn a_shell_given_as_pid_with_subprocesses_is_a_launcher_not_a_failure() {
    let python = interpreter("3.12");
    let script = format!(
        "{} {} contention --threads 2; true",
        python.command[0], python.workload
    );
    let (mut shell, line) = KilledOnDrop::spawn_until_first_line(
        Command::new("bash")
            .args(["-c", &script])
            // bash reports the child the test kills at the end ("Terminated").
            .stderr(Stdio::null()),
    );
    let child = ready_pid(&line);
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = stop_once_recording(
        gilsample()
            .args(["--pid", &shell.id().to_string(), "--subprocesses", "-o"])
            .arg(dir.path()),
        child,
    );
    let _ = Command::new("kill").arg(child.to_string()).status();
    let _ = shell.wait();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("runs /usr/bin/bash, not Python"),
        "{stderr}"
    );
    let trace = Trace::load(&dir.path().join(format!("GIL_{child}_rank_0.json")));
    assert!(!trace.events().is_empty());
}

#[test]
fn a_thread_id_given_as_pid_records_its_process() {
    let python = interpreter("3.12");
    let workload = common::Workload::start(&python, &["contention", "--threads", "2"]);
    let tid = workload.tid("spinner-1");
    assert_ne!(tid, workload.pid);
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = stop_once_recording(
        gilsample()
            .args(["--pid", &tid.to_string(), "-o"])
            .arg(dir.path()),
        workload.pid,
    );
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{tid} is a thread of process {}", workload.pid)),
        "{stderr}"
    );
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("pid").as_u64(), Some(workload.pid as u64));
    assert!(
        dir.path()
            .join(format!("GIL_{}_rank_0.json", workload.pid))
            .exists()
    );
}

#[test]
fn launch_mode_keeps_the_command_line() {
    let python = interpreter("3.12");
    let dir = tempfile::tempdir().unwrap();
    succeeded(
        gilsample()
            .args(["--quiet", "-o"])
            .arg(dir.path())
            .arg("--")
            .args(&python.command)
            .arg(&python.workload)
            .args(["short", "--threads", "1", "--seconds", "0.2"]),
    );
    let trace = Trace::load_single(dir.path());
    let command_line = trace.other("command_line").as_str().unwrap().to_string();
    assert!(
        command_line.contains("gil_workload.py short --threads 1"),
        "{command_line:?}"
    );
}

#[test]
fn python_exec_d_by_env_is_recorded_with_and_without_subprocesses() {
    let python = interpreter("3.12");
    for follow in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = gilsample();
        if follow {
            cmd.arg("--subprocesses");
        }
        let out = cmd
            .args(["--quiet", "-o"])
            .arg(dir.path())
            .args(["--", "env", "GILSAMPLE_TEST=1"])
            .arg(&python.command[0])
            .arg(&python.workload)
            .args(["short", "--threads", "1", "--seconds", "0.3"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "follow={follow}: {stderr}");
        // env execs the interpreter: same pid.
        let pid = ready_pid(String::from_utf8_lossy(&out.stdout).lines().next().unwrap());
        let trace = Trace::load(&dir.path().join(format!("GIL_{pid}_rank_0.json")));
        assert!(
            trace.events().iter().any(|e| e.name == "hold_gil"),
            "follow={follow}"
        );
    }
}

#[test]
fn one_file_for_what_may_be_several_processes_is_refused_before_launching() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("the-command-ran");
    let out = gilsample()
        .arg("--subprocesses")
        .arg("-o")
        .arg(dir.path().join("one.json"))
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(USAGE),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!marker.exists());
}

#[test]
fn a_python_caught_before_the_loader_mapped_libpython_is_not_ready_not_not_python() {
    // A Python exec'd a moment ago is the executable and the dynamic loader only; judged "not
    // Python" then, a launched `env python3 ...` was once taken for a launcher for good. The child
    // here stops at its exec (PTRACE_TRACEME), before the loader runs, and is looked at there.
    use std::os::unix::process::CommandExt;
    let python = interpreter("3.12");
    let mut cmd = Command::new(&python.command[0]);
    cmd.args(["-c", "pass"]);
    // SAFETY: ptrace(PTRACE_TRACEME) is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = KilledOnDrop::spawn(&mut cmd);
    let pid = child.id();
    let mut status = 0;
    // The exec stops the traced child with SIGTRAP.
    assert_eq!(
        unsafe { libc::waitpid(pid as i32, &mut status, 0) },
        pid as i32
    );
    assert!(libc::WIFSTOPPED(status), "status {status:#x}");
    let judged = gilsample::python::attach::locate(
        pid,
        gilsample::python::layout_choice::LayoutChoice::Auto,
    );
    drop(child);
    match judged {
        Err(gilsample::error::Error::NotReady { why, .. }) => {
            assert!(why.contains("libpython3.12"), "{why}")
        }
        Err(e) => panic!("judged {e:?}, not NotReady"),
        Ok(_) => panic!("a Python without its libpython was located"),
    }
}

const STILL_RUNNING: &str = "is still running";

#[test]
fn a_duration_that_ends_first_gives_the_answer_at_once_then_waits_for_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let mut launched = LaunchedRecording::start(&["-d", "0.3"], dir.path(), &["sleeper"]);
    let pid = launched.pid;
    // The command waits for a line on stdin, which it gets only after this: the answer and the
    // line below must come while it runs.
    let seen = launched.read_until(STILL_RUNNING);
    assert!(running(pid), "the command ended early: {seen}");
    let trace = dir.path().join(format!("GIL_{pid}_rank_0.json"));
    let answer = format!(
        "trace: {} (recording ended: the duration elapsed)",
        trace.display()
    );
    let (before, last) = seen.trim_end().rsplit_once('\n').unwrap();
    assert!(before.contains(&answer), "{seen}");
    assert!(before.contains(&format!("process {pid} (host ")), "{seen}");
    assert!(
        last.contains(&format!("(pid {pid})")) && last.contains(&format!("kill {pid}")),
        "{last}"
    );
    Trace::load(&trace);
    launched.stdin.write_all(b"\n").unwrap();
    let status = launched.recording.wait().unwrap();
    assert_eq!(status.code(), Some(0), "the command's own status");
}

#[test]
fn after_a_signal_the_answer_comes_at_once_and_the_next_signal_goes_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let mut launched = LaunchedRecording::start(&[], dir.path(), &["sleeper"]);
    let pid = launched.pid;
    let gilsample_pid = Pid::from_raw(launched.recording.id() as i32);
    launched.control.wait_for("started", Some(pid));
    kill(gilsample_pid, Signal::SIGINT).unwrap();
    let seen = launched.read_until(STILL_RUNNING);
    assert!(running(pid), "the command ended early: {seen}");
    assert!(seen.contains("(recording ended: stopped"), "{seen}");
    assert!(
        dir.path().join(format!("GIL_{pid}_rank_0.json")).exists(),
        "{seen}"
    );
    // Sent to gilsample alone, the next signal is passed on: the command dies of SIGTERM, and
    // gilsample exits with that status (128 + 15), not its own 130.
    kill(gilsample_pid, Signal::SIGTERM).unwrap();
    launched.read_until("passed on to the command");
    // Its status is said: it is the command's, not one of gilsample's own.
    launched.read_until(&format!(
        "the command (pid {pid}) was ended by SIGTERM (status 143)"
    ));
    let status = launched.recording.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15));
}

#[test]
fn a_command_without_python_is_said_to_be_waited_for_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("release");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut recording = gilsample()
        .arg("-o")
        .arg(dir.path().join("out"))
        .args(["--", "sh", "-c"])
        .arg(format!("echo $$; read x < {}", fifo.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(recording.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let shell: u32 = line.trim().parse().unwrap();
    let mut stderr = BufReader::new(recording.stderr.take().unwrap());
    // The shell blocks opening the FIFO until the test writes to it: the line comes meanwhile.
    let seen = read_until(&mut stderr, "which is not Python");
    assert!(running(shell), "{seen}");
    assert!(
        seen.contains(&format!("the command (pid {shell}) runs /")),
        "{seen}"
    );
    assert!(
        seen.contains("keeps waiting") && seen.contains("--subprocesses"),
        "{seen}"
    );
    std::fs::write(&fifo, "go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = recording.wait().unwrap();
    assert_eq!(status.code(), Some(UNSUPPORTED), "{seen}{rest}");
    assert!(
        rest.contains("before a Python interpreter was found in it"),
        "{rest}"
    );
    assert!(!rest.contains("which is not Python;"), "said twice: {rest}");
    assert!(!dir.path().join("out").exists());
}

#[test]
fn a_launcher_that_started_no_python_before_the_duration_is_said_and_waited_for_not_killed() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("release");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut recording = gilsample()
        .args(["--subprocesses", "-d", "0.3", "-o"])
        .arg(dir.path().join("out"))
        .args(["--", "sh", "-c"])
        .arg(format!("read x < {}; exit 3", fifo.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(recording.stderr.take().unwrap());
    let seen = read_until(&mut stderr, STILL_RUNNING);
    assert!(
        seen.contains("error: no Python process was found among the processes started by"),
        "{seen}"
    );
    std::fs::write(&fifo, "go\n").unwrap();
    // The error's status, once the command ended by itself (it was not stopped).
    assert_eq!(recording.wait().unwrap().code(), Some(NO_SUCH_PROCESS));
}

#[test]
fn a_closed_standard_error_neither_ends_the_recording_nor_changes_the_commands_status() {
    // `gilsample ... 2>&1 | head -1`: the reader has gone by the time the messages come. They are
    // dropped; the trace is finished and the command's exit status is gilsample's.
    let python = interpreter("3.12");
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let script = format!(
        "import runpy, sys; sys.argv = [{w:?}, 'short', '--threads', '1', '--seconds', '0.2']; \
         runpy.run_path({w:?}, run_name='__main__'); sys.exit(3)",
        w = python.workload
    );
    let status = gilsample()
        .arg("-o")
        .arg(dir.path())
        .arg("--")
        .args(&python.command)
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3), "{status:?}");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("TargetExited"));
}
