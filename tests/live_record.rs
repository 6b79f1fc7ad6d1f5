//! Recording real processes of every expected interpreter (see `common::EXPECTED`); the options that
//! change what a recording reads, on one interpreter: live_record/options.rs.

#[macro_use]
mod common;
#[path = "live_record/options.rs"]
mod options;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use common::{Trace, Workload, gilsample, interpreter, layout_sources, run, start_recording};

fn contention(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["contention", "--threads", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run(
        &[
            "--pid",
            &workload.pid.to_string(),
            "--duration",
            "1",
            "--rate",
            "10khz",
        ],
        dir.path(),
    );
    assert!(status.success(), "gilsample failed: {stderr}");
    let trace = Trace::load(&dir.path().join(format!("GIL_{}_rank_0.json", workload.pid)));

    let real_tids: Vec<u32> = workload.threads.values().copied().collect();
    for event in trace.events() {
        assert!(
            real_tids.contains(&event.tid),
            "tid {} is not a thread of the target ({real_tids:?})",
            event.tid
        );
        assert!(event.dur > 0.0, "empty event {event:?}");
    }
    let mut worker_hold = 0.0;
    for i in 0..3 {
        let tid = workload.tid(&format!("spinner-{i}"));
        assert!(
            trace.total(tid, "hold_gil") > 0.0,
            "spinner-{i} never held the GIL"
        );
        assert!(
            trace.total(tid, "take_gil") > 0.0,
            "spinner-{i} never waited for the GIL"
        );
        worker_hold += trace.total(tid, "hold_gil");
    }
    let span = trace.span_us();
    assert!(
        worker_hold > 0.5 * span,
        "workers held the GIL {worker_hold:.0} µs of {span:.0} µs"
    );
    assert_eq!(trace.other("pid").as_u64(), Some(workload.pid as u64));
    let minor = label
        .trim_start_matches("debian-")
        .trim_start_matches("sid-")
        .trim_end_matches('d');
    let version = trace.other("python_version").as_str().unwrap().to_string();
    assert!(
        version.starts_with(minor),
        "{label}: the trace says Python {version}"
    );
    // The whole version, micro included, also where the binary has no Py_Version (before 3.11).
    let own = Command::new(&python.command[0])
        .args(&python.command[1..])
        .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        .output()
        .unwrap();
    assert_eq!(
        version,
        String::from_utf8_lossy(&own.stdout).trim(),
        "{label}"
    );
    // The interpreter's file as the target names it: in the sid chroot its own `/usr/...`, not the
    // host's path to it, so it opens through the target's root.
    let binary = trace.other("python_binary").as_str().unwrap().to_string();
    let through_root = format!("/proc/{}/root{binary}", workload.pid);
    assert!(
        binary.starts_with('/') && std::path::Path::new(&through_root).is_file(),
        "{label}: python_binary {binary} is not a file in the target's root"
    );
    assert!(trace.other("samples").as_u64().unwrap() > 0);
    // Stretches taken as take_gil after two wake-ups are some of those settled inside a GIL call.
    let woke_twice = trace
        .other("ambiguous_stretches_in_take_after_two_wakeups")
        .as_u64()
        .unwrap();
    let in_call = trace
        .other("ambiguous_stretches_in_gil_call")
        .as_u64()
        .unwrap();
    assert!(
        woke_twice <= in_call,
        "{woke_twice} stretches after two wake-ups, {in_call} in a GIL call"
    );
}

fn lone_sleeper_never_waits(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["sleeper"]);
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run(
        &["--pid", &workload.pid.to_string(), "--duration", "0.5"],
        dir.path(),
    );
    assert!(status.success(), "gilsample failed: {stderr}");
    let trace = Trace::load_single(dir.path());
    let takes: Vec<_> = trace
        .events()
        .into_iter()
        .filter(|e| e.name == "take_gil")
        .collect();
    assert!(
        takes.is_empty(),
        "a single sleeping thread waited for the GIL: {:?}",
        &takes[..takes.len().min(3)]
    );
    assert!(trace.other("thread_samples").as_u64().unwrap() > 0);
}

fn gil_free_calls_are_released(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["released", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run(
        &["--pid", &workload.pid.to_string(), "--duration", "1"],
        dir.path(),
    );
    assert!(status.success(), "gilsample failed: {stderr}");
    let trace = Trace::load_single(dir.path());
    let span = trace.span_us();
    for name in ["sleeper", "hasher"] {
        let tid = workload.tid(name);
        let gil_time = trace.total(tid, "take_gil")
            + trace.total(tid, "hold_gil")
            + trace.total(tid, "drop_gil");
        assert!(
            gil_time < 0.5 * span,
            "{name} spent {gil_time:.0} µs of {span:.0} µs in GIL states; it should be mostly released"
        );
    }
    // The spinners next to them do contend, so waiting is detected in the same recording.
    assert!(trace.total(workload.tid("spinner-0"), "take_gil") > 0.0);
}

fn launch_records_from_the_start(label: &str) {
    let python = interpreter(label);
    let dir = tempfile::tempdir().unwrap();
    // The script starts its spinners on a line on stdin, sent once the recording has its first
    // sample: a recording from the start sees the main thread before the second of them, however
    // slowly this machine starts either.
    let socket = common::ControlSocket::pair();
    let mut cmd = gilsample();
    cmd.args(["--quiet", "-o"])
        .arg(dir.path())
        .args(socket.args())
        .arg("--")
        .args(&python.command)
        .arg(&python.workload)
        .args([
            "short",
            "--threads",
            "2",
            "--seconds",
            "0.5",
            "--threads-on-stdin",
            "--switch-interval",
            "0.05",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut recording, mut control) = socket.spawn(&mut cmd);
    control.wait_for("started", None);
    let mut stdin = recording.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    let mut ready = String::new();
    BufReader::new(recording.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    // --quiet: what it says (errors only) fits in the pipe until it exits.
    let status = recording.wait().unwrap();
    let mut stderr = String::new();
    recording
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "launch failed: {stderr}");
    let info: serde_json::Value =
        serde_json::from_str(ready.trim().strip_prefix("READY ").unwrap()).unwrap();
    let pid = info["pid"].as_u64().unwrap() as u32;
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("TargetExited"));
    let events = trace.events();
    let first = |tid: u32| {
        events
            .iter()
            .filter(|e| e.tid == tid)
            .map(|e| e.ts)
            .fold(f64::INFINITY, f64::min)
    };
    let main_first = first(pid);
    assert!(main_first.is_finite(), "the main thread has no GIL events");
    let [spinner_0, spinner_1] = ["spinner-0", "spinner-1"]
        .map(|name| first(info["threads"][name].as_u64().unwrap() as u32));
    assert!(
        spinner_0.is_finite() && spinner_1.is_finite(),
        "a spinner has no events"
    );
    // The main thread starts the spinners one after another, and between them waits for the GIL
    // behind spinner-0 for a switch interval (`Thread.start` lets the GIL go until the new thread
    // runs, and spinner-0 keeps it): 50 ms here, so that a sampler kept off the CPUs for a while
    // still has ticks in it. A recording from the start sees that wait before spinner-1 exists.
    // (Its hold before spinner-0 can be shorter than a period: not asserted.)
    assert!(
        main_first < spinner_1,
        "main thread first seen at {main_first}, spinner-1 at {spinner_1}"
    );
}

fn sigint_leaves_a_complete_file(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    // Returns once sampling has begun (`started` on the control channel): the readiness signal.
    let recording = start_recording(workload.pid, dir.path(), &[]);
    recording.signal(nix::sys::signal::Signal::SIGINT);
    let (status, stderr) = recording.finish();
    assert!(
        status.success(),
        "gilsample exited with {status} after SIGINT: {stderr}"
    );
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("Stopped"));
    assert!(
        trace.value["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "thread_name")
    );
}

fn target_exit_leaves_a_complete_file(label: &str) {
    let python = interpreter(label);
    let mut workload = Workload::start(
        &python,
        &["contention", "--threads", "2", "--seconds", "0.5"],
    );
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run(&["--pid", &workload.pid.to_string()], dir.path());
    assert!(status.success(), "gilsample failed: {stderr}");
    assert!(workload.child.wait().unwrap().success());
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("TargetExited"));
    assert!(trace.events().iter().any(|e| e.name == "hold_gil"));
}

fn every_layout_source_records(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    for source in layout_sources(label) {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--pid",
            &workload.pid.to_string(),
            "--duration",
            "0.3",
            "--layout-source",
            source,
        ];
        let (status, stderr) = run(&args, dir.path());
        assert!(
            status.success(),
            "--layout-source {source} failed: {stderr}"
        );
        let trace = Trace::load_single(dir.path());
        let used = trace.other("layout_source").as_str().unwrap().to_string();
        assert!(
            used.starts_with(source),
            "asked for {source}, the trace says {used}"
        );
        for name in ["spinner-0", "spinner-1"] {
            let tid = workload.tid(name);
            assert!(
                trace.total(tid, "hold_gil") > 0.0,
                "{source}: {name} never held the GIL"
            );
            assert!(
                trace.total(tid, "take_gil") > 0.0,
                "{source}: {name} never waited"
            );
        }
    }
    // A source this build lacks, asked for by name, is refused with the one that fits.
    if !layout_sources(label).contains(&"debug-offsets") {
        let dir = tempfile::tempdir().unwrap();
        let pid = workload.pid.to_string();
        let args = [
            "--pid",
            &pid,
            "-d",
            "0.1",
            "--layout-source",
            "debug-offsets",
        ];
        let (status, stderr) = run(&args, dir.path());
        assert!(!status.success(), "{stderr}");
        assert!(
            stderr.contains("has no _Py_DebugOffsets")
                && stderr.contains("fits it: leave --layout-source out (auto)"),
            "{label}: {stderr}"
        );
    }
}

/// The GIL's waiter counts are found at the place this interpreter's own glibc keeps them (the release
/// as its libc reports it: 2.36 on the host, 2.41+ in the sid root, where the word moved), and count
/// the threads stuck behind a main thread that keeps the GIL in one endless C call. The GIL's mutex,
/// read in the same span, is free then (the waiters hold it only for microseconds, when their timed
/// wait ends): an owner word read from the wrong place disagrees with the lock word next to it.
fn waiter_counts_see_threads_behind_a_hog(label: &str) {
    let python = interpreter(label);
    let libc = Command::new(&python.command[0])
        .args(&python.command[1..])
        .arg("-c")
        .arg("import os; print(os.confstr('CS_GNU_LIBC_VERSION'))")
        .output()
        .unwrap();
    let libc = String::from_utf8(libc.stdout).unwrap().trim().to_string();
    assert!(libc.starts_with("glibc 2."), "confstr says {libc:?}");
    let workload = Workload::start(&python, &["hog", "--threads", "3"]);
    let want = (
        format!("counted by {libc} (now 3 in take_gil's wait, 0 in drop_gil's)"),
        "free".to_string(),
    );
    // The main thread reaches its endless call only after it wins the GIL back from the waiters.
    let mut seen = Vec::new();
    for _ in 0..300 {
        let out = gilsample()
            .args(["info", "--pid", &workload.pid.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let line = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("info prints {name}"))
                .trim()
                .to_string()
        };
        let mutex = line("GIL mutex:");
        let lines = (
            line("GIL waiters:"),
            mutex.split(';').next().unwrap().to_string(),
        );
        if lines == want {
            return;
        }
        seen.push(lines);
    }
    panic!("never saw {want:?}; saw {:?}", &seen[seen.len() - 5..]);
}

/// A thread that locks the GIL's own mutex (the `squatter` workload) owns it for good: `info` names
/// that thread as the owner, which only the right words at the right place of the right glibc can say.
fn gil_mutex_owner_is_named(label: &str) {
    let python = interpreter(label);
    let mut workload = Workload::start_with_stdin(&python, &["squatter"], Stdio::piped());
    let pid = workload.pid.to_string();
    let info = || {
        let out = gilsample().args(["info", "--pid", &pid]).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("GIL mutex:"))
            .expect("info prints the GIL's mutex")
            .trim()
            .to_string()
    };
    let before = info();
    let address = before
        .rsplit("at ")
        .next()
        .unwrap_or_else(|| panic!("no address in {before:?}"));
    std::io::Write::write_all(
        workload.child.stdin.as_mut().unwrap(),
        format!("{address}\n").as_bytes(),
    )
    .unwrap();
    let want = format!(
        "held by thread {} (as the target numbers it)",
        workload.tid("squatter")
    );
    let mut seen = Vec::new();
    for _ in 0..300 {
        let now = info();
        if now.starts_with(&want) {
            return;
        }
        seen.push(now);
    }
    panic!("never saw {want:?}; saw {:?}", &seen[seen.len() - 3..]);
}

macro_rules! interpreter_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn contention_gives_every_worker_hold_and_take() { super::contention($label) }
                #[test]
                fn lone_sleeper_never_waits() { super::lone_sleeper_never_waits($label) }
                #[test]
                fn gil_free_calls_are_released() { super::gil_free_calls_are_released($label) }
                #[test]
                fn launch_records_from_the_start() { super::launch_records_from_the_start($label) }
                #[test]
                fn sigint_leaves_a_complete_file() { super::sigint_leaves_a_complete_file($label) }
                #[test]
                fn target_exit_leaves_a_complete_file() { super::target_exit_leaves_a_complete_file($label) }
                #[test]
                fn every_layout_source_records() { super::every_layout_source_records($label) }
                #[test]
                fn waiter_counts_see_threads_behind_a_hog() { super::waiter_counts_see_threads_behind_a_hog($label) }
                #[test]
                fn gil_mutex_owner_is_named() { super::gil_mutex_owner_is_named($label) }
            }
        )*
    };
}

every_expected_interpreter!(interpreter_tests);

#[test]
fn every_expected_interpreter_is_covered() {
    for label in common::EXPECTED {
        interpreter(label);
    }
}
