//! Faults while recording, each with a real process: the target execs, forks, is stopped, churns
//! threads; gilsample is signalled (once, twice) (a full or read-only disk: full_disk.rs). In every
//! case: no crash, no hang, no interval on a thread that is not the target's, and either a complete
//! file or an error that says where the data is.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{
    Event, KilledOnDrop, Trace, Workload, interpreter, partial_files, run, start_recording,
};
use gilsample::error::exit::{INTERRUPTED, OK};

fn assert_tids_belong(trace: &Trace, allowed: &HashSet<u32>) {
    for event in trace.events() {
        assert!(
            allowed.contains(&event.tid),
            "event on tid {} that is not the target's: {event:?}",
            event.tid
        );
    }
}

/// A thread's GIL states never overlap, and a `held_while_blocked` stretch lies inside a hold of
/// its thread.
fn assert_no_overlaps(trace: &Trace) {
    let (blocked, mut events): (Vec<_>, Vec<_>) = trace
        .events()
        .into_iter()
        .partition(|e| e.name == "held_while_blocked");
    for stretch in &blocked {
        assert!(
            events.iter().any(|h| h.name == "hold_gil"
                && h.tid == stretch.tid
                && h.ts <= stretch.ts + 0.5
                && stretch.ts + stretch.dur <= h.ts + h.dur + 0.5),
            "{stretch:?} is not inside a hold of its thread"
        );
    }
    events.sort_by(|a, b| (a.tid, a.ts).partial_cmp(&(b.tid, b.ts)).unwrap());
    for pair in events.windows(2) {
        if pair[0].tid == pair[1].tid {
            // Timestamps are epoch µs parsed into f64: about 0.25 µs of resolution.
            assert!(
                pair[0].ts + pair[0].dur <= pair[1].ts + 0.5,
                "overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }
}

fn stop_signal_finishes_the_file(sig: Signal) {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &[]);
    recording.signal(sig);
    let (status, stderr) = recording.finish();
    assert!(status.success(), "{sig:?}: exit {status}: {stderr}");
    // Piped: the signal's line follows the others, with no blank line (that is for a terminal's
    // echoed ^C).
    let line = format!("gilsample: {sig:?} received");
    assert!(
        stderr.contains(&line) && !stderr.contains(&format!("\n\n{line}")),
        "{stderr}"
    );
    // Piped, without a duration: how the recording ends is said once it starts.
    assert_eq!(
        stderr.matches("recording until Ctrl+C").count(),
        1,
        "{stderr}"
    );
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("Stopped"));
}

#[test]
fn a_duration_is_said_in_words_as_the_recording_starts() {
    // `-d 500` is 500 seconds: a user who meant milliseconds reads it at once.
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &["-d", "500"]);
    recording.signal(Signal::SIGINT);
    let (status, stderr) = recording.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(
        stderr.contains("recording for 8.3 min (--duration), or until Ctrl+C"),
        "{stderr}"
    );
}

#[test]
fn sigterm_finishes_the_file() {
    stop_signal_finishes_the_file(Signal::SIGTERM);
}

#[test]
fn sighup_finishes_the_file() {
    stop_signal_finishes_the_file(Signal::SIGHUP);
}

/// `-q` prints nothing but errors: a Ctrl+C that finishes the file is not one.
#[test]
fn quiet_ctrl_c_finishes_the_file_without_a_word() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &["-q"]);
    recording.signal(Signal::SIGINT);
    let (status, stderr) = recording.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert_eq!(stderr, "");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("Stopped"));
}

#[test]
fn second_ctrl_c_exits_at_once_without_a_corrupt_file() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &[]);
    recording.signal(Signal::SIGINT);
    // From another process: the same signal from the same one at once is one request (below).
    let pid = recording.child.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let (status, stderr) = recording.finish();
    let code = status.code();
    assert!(
        matches!(code, Some(OK) | Some(INTERRUPTED)),
        "exit {code:?}"
    );
    let final_path = dir.path().join(format!("GIL_{}_rank_0.json", workload.pid));
    if final_path.exists() {
        Trace::load(&final_path); // complete and valid, or absent: never half-written
    } else {
        assert_eq!(code, Some(INTERRUPTED));
        // Where what was recorded lies, and what reads it.
        let dir = dir.path().display();
        assert!(
            stderr.contains(&format!("files in {dir}")) && stderr.contains("gilsample report"),
            "{stderr}"
        );
    }
}

/// gilsample killed outright (SIGKILL: the OOM killer, a job scheduler's end) cannot finish its
/// file. The names go to disk as the sampler learns them, so the `.partial` file it leaves still says
/// whose process it was and names its threads, and `report` over it says who waited in words.
#[test]
fn a_recording_killed_outright_leaves_a_file_that_names_its_process_and_threads() {
    let workload = Workload::start(&interpreter("3.11"), &["bench", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &[]);
    let [partial] = partial_files(dir.path()).try_into().unwrap();
    // The names and the first slices reach the disk on the writer's own thread, after the sampling
    // began: wait for them there (each check a read of the file), then kill.
    let on_disk = |text: &str| {
        text.contains("\"spinner-0\"")
            && text.contains("\"spinner-1\"")
            && text.contains("take_gil")
    };
    let seen = (0..3000).find_map(|_| {
        let text = std::fs::read_to_string(&partial).unwrap_or_default();
        if on_disk(&text) {
            return Some(text);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        None
    });
    recording.signal(Signal::SIGKILL);
    let (status, _) = recording.finish();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let text = seen.expect("the partial file never named both spinners beside its slices");
    assert!(
        text.contains("\"name\":\"Python 3.11.")
            && text.contains(&format!(" pid {}", workload.pid)),
        "the process is not named: {}",
        &text[..text.len().min(2000)]
    );
    let (code, stdout, stderr) = common::report_text(dir.path());
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(!stderr.contains("without thread names"), "{stderr}");
    assert!(
        stdout.contains("an interrupted recording")
            && ["spinner-0 waited", "spinner-1 waited"]
                .iter()
                .any(|w| stdout.contains(w)),
        "{stdout}"
    );
}

/// GNU `timeout` sends its signal to gilsample and then to its process group: the same signal from
/// the same process twice, at once. That is one request to stop, and the files are finished. (The
/// kernel may merge the two into one; where it does not, the second is a repeat: signals.rs's unit
/// test has the decision itself.)
#[test]
fn the_same_signal_twice_from_one_process_at_once_finishes_the_file() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &[]);
    recording.signal(Signal::SIGTERM);
    recording.signal(Signal::SIGTERM);
    let (status, stderr) = recording.finish();
    assert_eq!(status.code(), Some(OK), "{stderr}");
    assert!(!stderr.contains("aborted"), "{stderr}");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("Stopped"));
}

#[test]
fn target_exec_ends_the_recording_with_a_complete_file() {
    let python = interpreter("3.12");
    let mut workload = KilledOnDrop::spawn(
        python
            .workload_command(&["exec"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut out = BufReader::new(workload.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid = workload.id();
    let mut allowed = ready_tids(&line);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(pid, dir.path(), &[]);
    workload
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"exec\n")
        .unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("READY"),
        "the re-executed program did not start: {line}"
    );
    allowed.extend(ready_tids(&line));
    // The shared libpython lands elsewhere after exec (ASLR): gilsample notices and finishes.
    let (status, stderr) = recording.finish();
    drop(workload);
    assert!(status.success(), "exit {status}: {stderr}");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("TargetExec"));
    assert_tids_belong(&trace, &allowed);
}

/// The thread ids a workload's READY line reports.
fn ready_tids(line: &str) -> HashSet<u32> {
    let ready: serde_json::Value =
        serde_json::from_str(line.trim().strip_prefix("READY ").unwrap()).unwrap();
    ready["threads"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn children_forked_by_the_target_never_appear() {
    let workload = Workload::start(&interpreter("3.12"), &["forker", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run(
        &["--pid", &workload.pid.to_string(), "--duration", "0.5"],
        dir.path(),
    );
    assert!(status.success(), "{stderr}");
    let trace = Trace::load_single(dir.path());
    let own: HashSet<u32> = workload.threads.values().copied().collect();
    assert_tids_belong(&trace, &own);
    assert!(trace.total(workload.tid("spinner-0"), "hold_gil") > 0.0);
}

#[test]
fn stopped_target_does_not_hang_the_recording() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &["--duration", "0.5"]);
    kill(Pid::from_raw(workload.pid as i32), Signal::SIGSTOP).unwrap();
    let (status, stderr) = recording.finish();
    kill(Pid::from_raw(workload.pid as i32), Signal::SIGCONT).unwrap();
    assert!(status.success(), "exit {status}: {stderr}");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("end_reason").as_str(), Some("Duration"));
    assert_no_overlaps(&trace);
}

#[test]
fn a_target_stopped_while_recorded_is_said_to_be_stopped() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &[]);
    kill(Pid::from_raw(workload.pid as i32), Signal::SIGSTOP).unwrap();
    // The recording ends once the target is stopped (each of its threads stops when it next runs).
    let stat = format!("/proc/{}/stat", workload.pid);
    let state = || {
        let text = std::fs::read_to_string(&stat).unwrap();
        text.rsplit(") ").next().unwrap().chars().next().unwrap()
    };
    while state() != 'T' {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    recording.signal(Signal::SIGINT);
    let (status, stderr) = recording.finish();
    kill(Pid::from_raw(workload.pid as i32), Signal::SIGCONT).unwrap();
    assert!(status.success(), "exit {status}: {stderr}");
    let trace = Trace::load_single(dir.path());
    assert_eq!(trace.other("process_stopped").as_str(), Some("at the end"));
    // The hint is about the stop, not about the code that held the GIL.
    let report = common::gilsample()
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&report.stdout);
    assert!(
        said.contains("hint: the process was stopped at the end of the recording")
            && said.contains(&format!("kill -CONT {}", workload.pid)),
        "{said}"
    );
}

#[test]
fn a_target_stopped_for_the_whole_recording_gets_no_figures() {
    // Stopped before the recording starts and through its end: the threads' slices of those
    // samples are the stop's, none of it is time the process ran (it printed "waited 234% of the
    // recording": slices past the recording's end, and a stop placed at its first read).
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let target = Pid::from_raw(workload.pid as i32);
    kill(target, Signal::SIGSTOP).unwrap();
    let stat = format!("/proc/{}/stat", workload.pid);
    let stopped = || {
        std::fs::read_to_string(&stat)
            .unwrap()
            .rsplit(") ")
            .next()
            .unwrap()
            .starts_with('T')
    };
    while !stopped() {
        std::thread::yield_now();
    }
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), &["--duration", "0.3"]);
    let (status, stderr) = recording.finish();
    kill(target, Signal::SIGCONT).unwrap();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("stopped for all of it"), "{stderr}");
    let (report, _) = common::report_json(&[dir.path()]);
    let process = &report["processes"][0];
    assert_eq!(process["window_s"].as_f64(), Some(0.0), "{process}");
    let waits: Vec<f64> = process["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["wait_s"].as_f64().unwrap())
        .collect();
    assert!(waits.iter().all(|&w| w == 0.0), "{waits:?}");
}

#[test]
fn a_stop_and_continue_while_recorded_is_said_and_left_out_of_the_answer() {
    // Three spinners: one holds the GIL and two wait, so whenever the stop comes (a hand-off
    // included) at least one of them is in take_gil through it.
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let mut recording = start_recording(workload.pid, dir.path(), &[]);
    let target = Pid::from_raw(workload.pid as i32);
    kill(target, Signal::SIGSTOP).unwrap();
    recording.wait_until("stopped", Some(workload.pid));
    kill(target, Signal::SIGCONT).unwrap();
    recording.wait_until("continued", Some(workload.pid));
    recording.signal(Signal::SIGINT);
    let (status, stderr) = recording.finish();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(
        stderr.contains(&format!("process {} is stopped (SIGSTOP", workload.pid))
            && stderr.contains(&format!("process {} runs again", workload.pid)),
        "{stderr}"
    );
    let trace = Trace::load_single(dir.path());
    // Running at the start and at the end: only the span says it.
    assert!(trace.other("process_stopped").is_null());
    let spans = trace
        .other("process_stopped_monotonic_ns")
        .as_array()
        .unwrap();
    assert_eq!(spans.len(), 1, "{spans:?}");
    let to_trace = trace
        .other("monotonic_to_trace_offset_ns")
        .as_f64()
        .unwrap();
    let [from, to] = [0, 1].map(|i| (spans[0][i].as_f64().unwrap() + to_trace) / 1000.0);
    assert!(to > from, "{spans:?}");
    // The trace shows it on its own track.
    let track: Vec<(f64, u64)> = trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process stopped")
        .map(|e| {
            (
                e["ts"].as_f64().unwrap(),
                e["args"]["stopped"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(track.len(), 2, "{track:?}");
    assert_eq!((track[0].1, track[1].1), (1, 0));
    // The answer leaves the span out: the waiting it counts is the trace's outside it, and its
    // window is the time the process ran.
    let waits: Vec<Event> = trace
        .events()
        .into_iter()
        .filter(|e| e.name == "take_gil")
        .collect();
    let inside = |e: &Event| ((e.ts + e.dur).min(to) - e.ts.max(from)).max(0.0);
    // The answer counts the recording's window only: a last slice runs to the sample after it.
    let [start, end] = ["recording_start_monotonic_ns", "recording_end_monotonic_ns"]
        .map(|key| (trace.other(key).as_f64().unwrap() + to_trace) / 1000.0);
    let in_window = |e: &Event| ((e.ts + e.dur).min(end) - e.ts.max(start)).max(0.0);
    let outside_us: f64 = waits.iter().map(|e| in_window(e) - inside(e)).sum();
    // While one spinner held the GIL through the stop, the others waited through it.
    let inside_us: f64 = waits.iter().map(inside).sum();
    assert!(
        inside_us > waits.len() as f64,
        "{inside_us} µs of waiting inside the stop"
    );
    let (report, _) = common::report_json(&[dir.path()]);
    let process = &report["processes"][0];
    let counted_s: f64 = process["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["wait_s"].as_f64().unwrap())
        .sum();
    let slack_us = waits.len() as f64;
    assert!(
        (counted_s * 1e6 - outside_us).abs() <= slack_us,
        "{counted_s} s counted, {outside_us} µs outside the stop"
    );
    let stopped_s = process["stopped_s"].as_f64().unwrap();
    assert!((stopped_s * 1e6 - (to - from)).abs() <= 1.0, "{stopped_s}");
    // The window is the time the process ran and the sampler saw (a loaded machine leaves gaps).
    let [window_s, unseen_s] = ["window_s", "unseen_s"].map(|key| process[key].as_f64().unwrap());
    assert!(((window_s + stopped_s + unseen_s) * 1e6 - trace.span_us()).abs() <= 1.0);
}

#[test]
fn a_steady_thread_list_is_walked_at_the_start_only() {
    // New threads are found by the list's head moving (read with the GIL words), threads that exit
    // elsewhere in the list by the thread count moving, looked at every 100 ms: a target whose
    // threads neither start nor exit is walked once in 0.5 s, and its count looked at up to 5 times
    // (walks were one every 5 ms once, then one every 100 ms).
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let pid = workload.pid.to_string();
    let (status, stderr) = run(&["--pid", &pid, "--duration", "0.5"], dir.path());
    assert!(status.success(), "{stderr}");
    let trace = Trace::load_single(dir.path());
    let walks = trace.other("thread_list_walks").as_u64().unwrap();
    let spared = trace.other("thread_list_walks_spared").as_u64().unwrap();
    assert_eq!(walks, 1, "{spared} looks at the count spared a walk");
    assert!((1..=5).contains(&spared), "{spared} walks spared");
}

#[test]
fn thread_churn_is_attributed_to_the_right_threads() {
    let python = interpreter("3.12");
    let mut workload = KilledOnDrop::spawn(
        python
            .workload_command(&["churn", "--seconds", "1"])
            .stdout(Stdio::piped()),
    );
    let mut out = BufReader::new(workload.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let ready: serde_json::Value =
        serde_json::from_str(line.trim().strip_prefix("READY ").unwrap()).unwrap();
    // Its RESULT line lists every tid it churned, more than a pipe holds on a fast machine: read
    // it while gilsample records, or the workload blocks writing it and never exits.
    let result_line = std::thread::spawn(move || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        line
    });
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run(&["--pid", &workload.id().to_string()], dir.path());
    assert!(status.success(), "{stderr}");
    let line = result_line.join().unwrap();
    workload.wait().unwrap();
    let result: serde_json::Value =
        serde_json::from_str(line.trim().strip_prefix("RESULT ").unwrap()).unwrap();
    let mut allowed: HashSet<u32> = result["tids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    allowed.extend(
        ready["threads"]
            .as_object()
            .unwrap()
            .values()
            .map(|t| t.as_u64().unwrap() as u32),
    );
    assert!(
        allowed.len() > 100,
        "the workload churned only {} threads",
        allowed.len()
    );
    let trace = Trace::load_single(dir.path());
    assert_tids_belong(&trace, &allowed);
    assert_no_overlaps(&trace);
}
