//! The output's disk fills up or is read-only: an error that says where the data is, the answer
//! for what was written, and saved samples that fail without failing the trace. Each on a small
//! tmpfs mounted for the test (root).

mod common;

use std::io::Write;
use std::process::Command;

use common::{Trace, Workload, interpreter, partial_files, run};
use gilsample::error::exit::OUTPUT;

/// A small tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(options: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs needs root");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn full_disk_is_an_error_that_says_where_the_data_is() {
    let disk = Tmpfs::mount("size=64k");
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "3"]);
    let (status, stderr) = run(
        &["--pid", &workload.pid.to_string(), "--duration", "30"],
        disk.0.path(),
    );
    assert_eq!(status.code(), Some(OUTPUT), "{stderr}");
    let partial = partial_files(disk.0.path());
    assert_eq!(partial.len(), 1, "the partial data was removed: {stderr}");
    assert!(
        stderr.contains(&format!("partial data is in {}", partial[0].display())),
        "{stderr}"
    );
}

#[test]
fn full_disk_is_said_while_the_command_runs_with_the_answer_for_what_was_written() {
    let disk = Tmpfs::mount("size=64k");
    let mut launched =
        common::LaunchedRecording::start(&[], disk.0.path(), &["contention", "--threads", "3"]);
    let pid = launched.pid;
    // Everything up to the line saying the command still runs: the command waits for a line on
    // stdin that it gets only after, so all of it was said while it ran.
    let seen = launched.read_until("is still running");
    let partial = partial_files(disk.0.path());
    assert_eq!(partial.len(), 1, "{seen}");
    assert!(seen.contains("No space left on device"), "{seen}");
    assert!(
        seen.contains(&format!("partial data is in {}", partial[0].display())),
        "{seen}"
    );
    // The answer for what was written: the headline and what the threads did. What fits on the
    // disk is a few events, from the launch on: whether one of them is a wait that counts (and
    // whose) is chance, so the answer may name a thread that waited or say that none did.
    assert!(seen.contains(&format!("process {pid} (host ")), "{seen}");
    assert!(
        ["MainThread", "spinner-0", "spinner-1", "spinner-2"]
            .iter()
            .any(|name| seen.contains(&format!("{name} waited")))
            || seen.contains("no thread waited noticeably for the GIL"),
        "{seen}"
    );
    assert!(
        seen.contains("the answer above is for the events written before"),
        "{seen}"
    );
    launched.stdin.write_all(b"\n").unwrap();
    assert_eq!(launched.recording.wait().unwrap().code(), Some(OUTPUT));
}

#[test]
fn read_only_output_is_refused_with_exit_6() {
    let disk = Tmpfs::mount("size=64k,ro");
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let (status, stderr) = run(
        &["--pid", &workload.pid.to_string(), "--duration", "0.2"],
        disk.0.path(),
    );
    assert_eq!(status.code(), Some(OUTPUT), "{stderr}");
    assert!(stderr.contains("Read-only"), "{stderr}");
}

#[test]
fn saved_samples_that_do_not_fit_leave_the_trace_whole_and_say_so() {
    let disk = Tmpfs::mount("size=64k");
    let out = tempfile::tempdir().unwrap();
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "3"]);
    let samples = disk.0.path().join("run.gilsamples");
    let pid = workload.pid.to_string();
    let args = ["--pid", &pid, "--duration", "1", "--save-samples"];
    let output = common::gilsample()
        .args(args)
        .arg(&samples)
        .arg("-o")
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(OUTPUT), "{stderr}");
    // The trace is whole, to the duration asked, and the answer printed; the samples' failure is
    // said as theirs, not as the process "not recorded".
    let trace = Trace::load_single(out.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("Duration"));
    assert!(
        stderr.contains(&format!("process {pid} (host ")),
        "{stderr}"
    );
    assert!(
        stderr.contains("samples: not saved whole: cannot write"),
        "{stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!stderr.contains("not recorded"), "{stderr}");
}
