//! Every refusal names the problem and exits with the documented status (README, "Exit status").

mod common;

use std::process::Command;

use common::{KilledOnDrop, Workload, file_names, gilsample, interpreter, pyenv_root, succeeded};
use gilsample::error::exit::{NO_SUCH_PROCESS, OUTPUT, PERMISSION, UNSUPPORTED, USAGE};

/// Runs gilsample with `args` and returns (exit code, stderr).
fn refuse(args: &[&str]) -> (i32, String) {
    let out = gilsample().args(args).arg("--quiet").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_refused(args: &[&str], code: i32, message: &str) {
    let (got, stderr) = refuse(args);
    assert_eq!(
        got, code,
        "{args:?}: expected exit {code}, got {got}: {stderr}"
    );
    assert!(
        stderr.contains(message),
        "{args:?}: message lacks {message:?}: {stderr}"
    );
}

/// `program args`, running until dropped, once it printed its first line (it is up).
fn start_ready(program: &str, args: &[&str]) -> KilledOnDrop {
    KilledOnDrop::spawn_until_first_line(Command::new(program).args(args)).0
}

#[test]
fn nonexistent_pid() {
    assert_refused(&["--pid", "999999999"], NO_SUCH_PROCESS, "does not exist");
}

#[test]
fn non_python_process() {
    let sleeper = start_ready("sh", &["-c", "echo up; exec sleep 60"]);
    let pid = sleeper.id().to_string();
    assert_refused(&["--pid", &pid], UNSUPPORTED, "not a Python process");
    // It names the program, and the two ways on.
    assert_refused(&["--pid", &pid], UNSUPPORTED, "it runs /");
    assert_refused(&["--pid", &pid], UNSUPPORTED, "pgrep -af python");
    assert_refused(&["--pid", &pid], UNSUPPORTED, "add --subprocesses");
    // `info` gives the same way on (it has no --subprocesses).
    let info = gilsample().args(["info", "--pid", &pid]).output().unwrap();
    let said = String::from_utf8_lossy(&info.stderr);
    assert_eq!(info.status.code(), Some(UNSUPPORTED), "{said}");
    assert!(
        said.contains("it runs /") && said.contains("pgrep -af python"),
        "{said}"
    );
    assert!(!said.contains("--subprocesses"), "{said}");
}

#[test]
fn kernel_thread() {
    let kthread = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let flags: u64 = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(6)?.parse().ok())
                .unwrap_or(0);
            flags & 0x0020_0000 != 0
        })
        .expect("no kernel thread visible in /proc");
    assert_refused(
        &["--pid", &kthread.to_string()],
        UNSUPPORTED,
        "kernel thread",
    );
}

#[test]
fn zombie() {
    // A child of this test that exits and is not waited for stays a zombie until the test ends.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let is_zombie = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit_once(')').unwrap().1.split_whitespace().next() == Some("Z")
    };
    while !is_zombie() {
        std::thread::yield_now();
    }
    assert_refused(&["--pid", &pid.to_string()], UNSUPPORTED, "zombie");
    child.wait().unwrap();
}

#[test]
fn init_process() {
    let (code, stderr) = refuse(&["--pid", "1"]);
    assert!(
        matches!(code, PERMISSION | UNSUPPORTED),
        "pid 1: exit {code}: {stderr}"
    );
    assert!(stderr.contains("process 1"), "{stderr}");
}

#[test]
fn own_pid() {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec {} --quiet --pid $$",
            env!("CARGO_BIN_EXE_gilsample")
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gilsample itself"));
}

fn old_python(version_prefix: &str) -> String {
    let versions = pyenv_root().join("versions");
    let dir = std::fs::read_dir(&versions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(version_prefix)
        })
        .unwrap_or_else(|| panic!("expected pyenv build {version_prefix}* for the refusal test"));
    let major = &version_prefix[..1];
    dir.join("bin")
        .join(format!("python{major}"))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn python2_process() {
    let python = start_ready(
        &old_python("2.7."),
        &[
            "-c",
            "import sys; print('up'); sys.stdout.flush(); import time; time.sleep(60)",
        ],
    );
    assert_refused(
        &["--pid", &python.id().to_string()],
        UNSUPPORTED,
        "Python 2.7 is not supported",
    );
}

#[test]
fn unsupported_python3_version() {
    let python = start_ready(
        &old_python("3.6."),
        &[
            "-c",
            "import sys; print('up'); sys.stdout.flush(); import time; time.sleep(60)",
        ],
    );
    assert_refused(
        &["--pid", &python.id().to_string()],
        UNSUPPORTED,
        "Python 3.6 is not supported",
    );
}

#[test]
fn bad_rates() {
    for rate in ["fast", "0", "-5", "0hz", "1000khz", "nan"] {
        assert_refused(&["--pid", "1", "--rate", rate], USAGE, "--rate");
    }
}

#[test]
fn bad_cpu_lists() {
    for cpus in ["", "x", "3-1", "5000"] {
        assert_refused(&["--pid", "1", "--cpus", cpus], USAGE, "CPU numbers");
    }
    // A CPU this machine does not have is refused once known, with how many it has.
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let dir = tempfile::tempdir().unwrap();
    let pid = workload.pid.to_string();
    let out = dir.path().to_str().unwrap();
    assert_refused(&["--pid", &pid, "-o", out, "--cpus", "1000"], USAGE, "CPUs");
}

#[test]
fn bad_durations() {
    for duration in ["-2", "ten", "0"] {
        assert_refused(&["--pid", "1", "--duration", duration], USAGE, "--duration");
    }
}

#[test]
fn no_target_means_all_npu_processes_and_none_is_an_error() {
    // With no target the reference tool records every Python process on an NPU; there is none here.
    assert_refused(&[], NO_SUCH_PROCESS, "no Python process with an Ascend NPU");
}

#[test]
fn a_refused_run_creates_no_output_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let sleeper = start_ready("sh", &["-c", "echo up; exec sleep 60"]);
    let refused: [(&[&str], i32); 3] = [
        // The default ./gil_traces/.
        (&["--pid", "999999999"], NO_SUCH_PROCESS),
        (
            &["--pid", &sleeper.id().to_string(), "-o", "new/sub/"],
            UNSUPPORTED,
        ),
        (&["-o", "launched/", "--", "sh", "-c", "true"], UNSUPPORTED),
    ];
    for (args, code) in refused {
        let out = gilsample()
            .args(args)
            .current_dir(cwd.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(file_names(cwd.path()), Vec::<String>::new(), "{args:?}");
    }
    // A run that records makes the directories it needs.
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    succeeded(
        gilsample()
            .args(["--pid", &workload.pid.to_string(), "-q", "-d", "0.1"])
            .args(["-o", "made/here/"])
            .current_dir(cwd.path()),
    );
    assert_eq!(
        file_names(&cwd.path().join("made/here")),
        [format!("GIL_{}_rank_0.json", workload.pid)]
    );
}

#[test]
fn output_directory_that_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let target = format!("{}/", file.display());
    assert_refused(
        &[
            "--pid",
            &workload.pid.to_string(),
            "-o",
            &target,
            "--duration",
            "0.1",
        ],
        OUTPUT,
        "not-a-dir",
    );
}

#[test]
fn output_file_that_is_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let as_file = dir.path().join("trace.json");
    std::fs::create_dir(&as_file).unwrap();
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let target = as_file.display().to_string();
    assert_refused(
        &[
            "--pid",
            &workload.pid.to_string(),
            "-o",
            &target,
            "--duration",
            "0.1",
        ],
        OUTPUT,
        "is a directory",
    );
}

#[test]
fn existing_output_is_refused_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let pid = workload.pid.to_string();
    let existing = dir.path().join(format!("GIL_{pid}_rank_0.json"));
    std::fs::write(&existing, b"keep me").unwrap();
    let out_dir = dir.path().display().to_string();
    assert_refused(
        &["--pid", &pid, "-o", &out_dir, "--duration", "0.1"],
        OUTPUT,
        "--force",
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    let (code, stderr) = refuse(&[
        "--pid",
        &pid,
        "-o",
        &out_dir,
        "--duration",
        "0.1",
        "--force",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_ne!(std::fs::read(&existing).unwrap(), b"keep me");
}

#[test]
fn output_symlink_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let pid = workload.pid.to_string();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"untouched").unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join(format!("GIL_{pid}_rank_0.json"))).unwrap();
    let out_dir = dir.path().display().to_string();
    let (code, _) = refuse(&["--pid", &pid, "-o", &out_dir, "--duration", "0.1"]);
    assert_eq!(code, OUTPUT);
    assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
}

/// `replay` refuses what is not a whole sample stream with exit 7, naming the file and the byte, and
/// writes no trace.
#[test]
fn replay_refuses_bad_streams_with_the_file_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    let out_arg = out.to_str().unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("empty", b"", "byte 0"),
        (
            "not-a-stream",
            b"{\"traceEvents\": []}",
            "not a gilsample sample stream",
        ),
        ("newer", b"GILSMPL\n\x63\x00", "newer gilsample"),
        ("cut", b"GILSMPL\n\x01\x00\x01\x90\x4e{\"prod", "truncated"),
    ];
    for (name, bytes, why) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let path_arg = path.to_str().unwrap();
        let (code, stderr) = refuse(&["replay", path_arg, "-o", out_arg]);
        assert_eq!(code, 7, "{name}: {stderr}");
        assert!(stderr.contains(path_arg), "{name}: {stderr}");
        assert!(stderr.contains(why), "{name}: expected {why:?}: {stderr}");
        assert!(!out.exists(), "{name}: a trace was written");
    }
    assert_refused(
        &["replay", "/nonexistent/run.gilsamples"],
        7,
        "/nonexistent/run.gilsamples: cannot open",
    );
}

/// `--save-samples` to a path that exists is refused before anything is recorded, like an output.
#[test]
fn save_samples_refuses_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let existing = dir.path().join("run.gilsamples");
    std::fs::write(&existing, b"keep me").unwrap();
    let (pid, out_dir) = (workload.pid.to_string(), dir.path().display().to_string());
    let save = existing.display().to_string();
    let args = ["--pid", &pid, "-o", &out_dir, "--save-samples", &save];
    assert_refused(&args, OUTPUT, "--force");
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    assert!(
        !dir.path().join(format!("GIL_{pid}_rank_0.json")).exists(),
        "a trace was written"
    );
}

/// `nsenter -t PID -p` without `-m`: gilsample in a container's PID namespace with the host's
/// /proc, where every pid names another process than the one it reads. Said so, with the fix, not
/// "does not exist".
#[test]
fn a_proc_of_another_pid_namespace_is_said_with_the_fix() {
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    for args in [
        vec![
            "--pid".to_string(),
            workload.pid.to_string(),
            "-d".into(),
            "0.1".into(),
        ],
        vec!["info".to_string(), "--pid".into(), workload.pid.to_string()],
    ] {
        let out = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "--"])
            .arg(env!("CARGO_BIN_EXE_gilsample"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("/proc shows another PID namespace than gilsample's")
                && stderr.contains("nsenter -m"),
            "{args:?}: {stderr}"
        );
    }
}
