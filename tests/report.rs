//! Who made whom wait: the answer-first summary of a recording, `gilsample report` on files and
//! directories of many processes, ranks and hosts, the GIL held while blocked in a syscall (which
//! files report reads, and every way its input can be wrong: report_inputs.rs).

mod common;

use std::path::Path;
use std::process::Command;

use common::{Trace, Workload, gilsample, interpreter, report_json, report_text};
use gilsample::error::exit::{INPUT, OK};
use serde_json::Value;

/// Records `pid` for `seconds` of its own time (the clock starts once attached): the stderr.
fn record_for(pid: u32, out: &Path, seconds: &str, extra: &[&str]) -> String {
    let recording = gilsample()
        .args(["--pid", &pid.to_string(), "--duration", seconds, "-o"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&recording.stderr).into_owned();
    assert!(recording.status.success(), "{stderr}");
    stderr
}

fn thread(process: &Value, tid: u32) -> &Value {
    process["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("no thread {tid} in {process}"))
}

#[test]
fn a_holder_blocked_in_a_syscall_is_named_with_the_time_others_waited() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["blocker", "--threads", "2"]);
    let blocker = workload.tid("blocker");
    let dir = tempfile::tempdir().unwrap();
    // The blocker keeps the GIL 20 ms of every 22 asleep in usleep: any recording of more than a
    // few samples sees it.
    let stderr = record_for(workload.pid, dir.path(), "1", &[]);
    let trace = Trace::load_single(dir.path());
    let blocked: Vec<_> = trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "held_while_blocked")
        .cloned()
        .collect();
    assert!(!blocked.is_empty(), "no held_while_blocked slice");
    // Each stretch's samples were confirmed by a second read of the GIL after the kernel states.
    assert!(trace.other("gil_read_again").as_u64().unwrap() > 0);
    let events = trace.value["traceEvents"].as_array().unwrap();
    for e in &blocked {
        assert_eq!(e["tid"], blocker, "{e}");
        assert_eq!(e["args"]["syscall"], "clock_nanosleep", "{e}");
        // Inside one hold_gil slice of the blocker: viewers drop a child that sticks out.
        let (start, end) = (
            e["ts"].as_f64().unwrap(),
            e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap(),
        );
        assert!(
            events.iter().any(|h| h["name"] == "hold_gil"
                && h["tid"] == blocker
                && h["ts"].as_f64().unwrap() <= start
                && end <= h["ts"].as_f64().unwrap() + h["dur"].as_f64().unwrap()),
            "{e} is not inside a hold of its thread"
        );
    }
    assert!(
        stderr.contains("held the GIL while blocked in clock_nanosleep"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");

    let (doc, _) = report_json(&[dir.path()]);
    let process = &doc["processes"][0];
    let holder = thread(process, blocker);
    assert_eq!(
        holder["held_while_blocked"][0]["syscall"],
        "clock_nanosleep"
    );
    assert!(
        holder["held_while_blocked"][0]["others_waited_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // A spinner's wait is blamed on the threads that held the GIL meanwhile, the blocker among them.
    let spinner = thread(process, workload.tid("spinner-0"));
    let holders: Vec<u64> = spinner["waited_for"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["tid"].as_u64().unwrap())
        .collect();
    assert!(holders.contains(&(blocker as u64)), "{spinner}");
}

#[test]
fn the_summary_answers_first_and_keeps_the_internals_for_verbose() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let plain = record_for(workload.pid, dir.path(), "0.5", &[]);
    assert!(plain.contains("the GIL was held"), "{plain}");
    // The same statistics are in the trace's own metadata, as report computes them from it.
    let trace = Trace::load_single(dir.path());
    let statistics = trace.other("statistics");
    let (doc, _) = report_json(&[dir.path()]);
    // Also the file: the trace's name in place, not the temporary one it was analysed under.
    let final_path = dir.path().join(format!("GIL_{}_rank_0.json", workload.pid));
    assert_eq!(statistics["file"], final_path.display().to_string());
    assert_eq!(statistics, &doc["processes"][0]);
    let spinner = thread(statistics, workload.tid("spinner-0"));
    assert!(spinner["waits"]["count"].as_u64().unwrap() > 0, "{spinner}");
    assert!(
        spinner["holds"]["p99_ms"].as_f64().unwrap() > 0.0,
        "{spinner}"
    );
    assert!(plain.contains(" waited "), "{plain}");
    // The sampler's own account (rate achieved, late samples) is the verbose line's alone.
    assert!(
        !plain.contains("Hz achieved"),
        "internals without --verbose: {plain}"
    );
    let verbose_dir = tempfile::tempdir().unwrap();
    let verbose = record_for(workload.pid, verbose_dir.path(), "0.5", &["--verbose"]);
    assert!(verbose.contains("Hz achieved"), "{verbose}");
    assert!(verbose.contains("GIL hand-offs"), "{verbose}");
    // Every share says what it is of: the answer's of the recording (and of a thread's waiting),
    // the per-thread table's of each thread's own lifetime, late samples of the ticks.
    assert!(verbose.contains("% of the recording ("), "{verbose}");
    assert!(
        verbose.contains(
            "\"waited N%\" is of the recording, \"for HOLDER N%\" of that thread's waiting"
        ),
        "{verbose}"
    );
    assert!(
        verbose
            .contains("per thread, the share of its own lifetime (its first sample to its last)"),
        "{verbose}"
    );
    assert!(verbose.contains("% of the ticks)"), "{verbose}");
}

/// A recording too short for its rate to take two samples (0.3 s at 1 Hz: one at most) says it
/// cannot tell, not that nothing waited: two spinners contend all the while.
#[test]
fn a_recording_without_two_samples_says_it_cannot_tell() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let summary = record_for(workload.pid, dir.path(), "0.3", &["--rate", "1hz"]);
    assert!(
        summary.contains(&format!(
            "process {} (host {}): too few samples to tell how its GIL was used",
            workload.pid,
            Trace::load_single(dir.path())
                .other("host")
                .as_str()
                .unwrap()
        )),
        "{summary}"
    );
    assert!(!summary.contains("no thread waited"), "{summary}");
    assert!(!summary.contains("the GIL was held"), "{summary}");
    // `report` on the file says the same.
    let (code, report, stderr) = report_text(dir.path());
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(report.contains("too few samples to tell"), "{report}");
    // And --json gives what it was told from.
    let (doc, _) = report_json(&[dir.path()]);
    let samples = doc["processes"][0]["samples"].as_u64().unwrap();
    assert!(samples < 2, "{samples}");
}

/// Threads that queue for one core find the GIL free while they wait (woken to take it, with no CPU
/// yet): the summary says the cores are busy, and `report --json` gives the share. A main thread that
/// keeps the GIL in one C call never leaves it free, however loaded the machine: no such line there.
#[test]
fn waiting_with_the_gil_free_says_the_cores_are_busy() {
    let python = interpreter("3.12");
    let share_and_summary = |args: &[&str]| {
        let workload = Workload::start(&python, args);
        let dir = tempfile::tempdir().unwrap();
        let summary = record_for(workload.pid, dir.path(), "1", &[]);
        let (doc, _) = report_json(&[dir.path()]);
        let share = doc["processes"][0]["waiting_with_gil_free_share"].as_f64();
        (share.unwrap_or_else(|| panic!("{args:?}: {doc}")), summary)
    };
    let (crowded, summary) = share_and_summary(&["dispatch", "--threads", "3", "--cpu", "0"]);
    assert!(crowded >= 0.2, "{crowded}: {summary}");
    assert!(summary.contains("busy cores: at"), "{summary}");
    // Its waiters wait for the GIL, not for a CPU (a hand-off at the very start aside).
    let (hogged, summary) = share_and_summary(&["hog", "--threads", "2"]);
    assert!(hogged < 0.2, "{hogged}: {summary}");
    assert!(!summary.contains("busy cores"), "{summary}");
}

/// Starts a workload with `RANK` set, as torchrun sets it for each rank.
fn ranked(args: &[&str], rank: u32) -> Workload {
    let python = interpreter("3.12");
    let mut cmd = python.workload_command(args);
    cmd.env("RANK", rank.to_string());
    Workload::from_command(cmd)
}

#[test]
fn report_over_two_hosts_and_four_ranks_ranks_the_contended_one_first() {
    // Rank 2 has four spinners; the others one napper each. Two "hosts" (UTS namespaces with their
    // own host names) record two ranks each into their own folder of one tree.
    let workloads = [
        ranked(&["sleeper"], 0),
        ranked(&["sleeper"], 1),
        ranked(&["contention", "--threads", "4"], 2),
        ranked(&["sleeper"], 3),
    ];
    let tree = tempfile::tempdir().unwrap();
    for (host, pair) in [("node-a", &workloads[..2]), ("node-b", &workloads[2..])] {
        let out = tree.path().join(host);
        let pids: Vec<String> = pair.iter().map(|w| w.pid.to_string()).collect();
        let script = format!(
            "hostname {host} && exec {} --pid {} --duration 0.5 --quiet -o {}",
            env!("CARGO_BIN_EXE_gilsample"),
            pids.join(","),
            out.display()
        );
        let status = Command::new("unshare")
            .args(["--uts", "sh", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success(), "recording on {host}");
    }
    let (doc, _) = report_json(&[tree.path()]);
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 4, "{doc}");
    assert_eq!(processes[0]["pid"], workloads[2].pid, "{doc}");
    assert_eq!(processes[0]["rank"], 2);
    assert_eq!(processes[0]["host"], "node-b");
    let hosts: std::collections::BTreeSet<&str> = processes
        .iter()
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.into_iter().collect::<Vec<_>>(), ["node-a", "node-b"]);
    // And the text says the same, the contended rank first.
    let out = gilsample().arg("report").arg(tree.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ranking = text.split("across 4 processes").nth(1).unwrap_or_default();
    let first = ranking
        .lines()
        .find(|l| l.contains("thread-s waiting"))
        .unwrap_or_default();
    assert!(
        first.contains(&format!("process {}", workloads[2].pid)) && first.contains("host node-b"),
        "{text}"
    );
    // The two hosts recorded one after the other: the ranking says their times do not overlap.
    assert!(
        ranking.contains("these recordings fall in 2 spans of time that do not overlap"),
        "{text}"
    );
}

#[test]
fn hand_offs_are_arrows_from_the_thread_that_let_go_to_the_one_that_took() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["contention", "--threads", "3"]);
    let dir = tempfile::tempdir().unwrap();
    record_for(workload.pid, dir.path(), "0.5", &["--quiet"]);
    let trace = Trace::load_single(dir.path());
    let events = trace.value["traceEvents"].as_array().unwrap();
    let flows = |ph: &str| -> std::collections::BTreeMap<u64, (u64, f64)> {
        events
            .iter()
            .filter(|e| e["name"] == "GIL hand-off" && e["ph"] == ph)
            .map(|e| {
                (
                    e["id"].as_u64().unwrap(),
                    (e["tid"].as_u64().unwrap(), e["ts"].as_f64().unwrap()),
                )
            })
            .collect()
    };
    let (starts, ends) = (flows("s"), flows("f"));
    assert!(!starts.is_empty(), "no hand-off arrows");
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        ends.keys().collect::<Vec<_>>()
    );
    for (id, (from, from_ts)) in &starts {
        let (to, to_ts) = ends[id];
        assert_ne!(*from, to, "arrow {id} goes nowhere");
        assert!(*from_ts <= to_ts, "arrow {id} goes back in time");
        // Each end lies inside a hold of its thread, the slice a viewer binds it to.
        let inside_hold = |tid: u64, ts: f64| {
            events.iter().any(|e| {
                e["name"] == "hold_gil" && e["tid"] == tid && {
                    let start = e["ts"].as_f64().unwrap();
                    start <= ts && ts <= start + e["dur"].as_f64().unwrap()
                }
            })
        };
        assert!(
            inside_hold(*from, *from_ts),
            "arrow {id} starts outside a hold of {from}"
        );
        assert!(
            inside_hold(to, to_ts),
            "arrow {id} ends outside a hold of {to}"
        );
    }

    let off = tempfile::tempdir().unwrap();
    record_for(
        workload.pid,
        off.path(),
        "0.3",
        &["--quiet", "--no-handoff-arrows"],
    );
    let trace = Trace::load_single(off.path());
    assert!(
        !trace.value["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "GIL hand-off")
    );
}

#[test]
fn a_waits_top_entry_names_the_holder_and_its_function() {
    let python = interpreter("3.12");
    let workload = Workload::start(&python, &["blocker", "--threads", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let stderr = record_for(workload.pid, dir.path(), "1", &[]);
    let (doc, _) = report_json(&[dir.path()]);
    let spinner = thread(&doc["processes"][0], workload.tid("spinner-0"));
    assert_eq!(spinner["name"], "spinner-0", "{spinner}");
    // The blocker keeps the GIL 20 ms of every 22: it is whom the spinner waits for most, in the
    // function it keeps it in.
    let top = &spinner["waited_for"][0];
    assert_eq!(top["name"], "blocker", "{spinner}");
    let function = top["functions"][0]["function"].as_str().unwrap();
    assert!(
        function.starts_with("keep_gil_in_usleep (gil_workload.py:"),
        "{function}"
    );
    assert!(
        stderr.contains("for blocker")
            && stderr.contains("in keep_gil_in_usleep (gil_workload.py:"),
        "{stderr}"
    );
}

#[test]
fn interrupted_recordings_partial_files_are_read_and_the_unreadable_named() {
    let workload = Workload::start(&interpreter("3.12"), &["contention", "--threads", "2"]);
    let recorded = tempfile::tempdir().unwrap();
    record_for(workload.pid, recorded.path(), "0.3", &["--quiet"]);
    let trace = recorded
        .path()
        .join(format!("GIL_{}_rank_0.json", workload.pid));
    let bytes = std::fs::read(&trace).unwrap();
    let partial_name = format!(".GIL_{}_rank_0.json.4242.partial", workload.pid);
    // A complete one, left by a second Ctrl+C between the end being written and the rename.
    let complete = tempfile::tempdir().unwrap();
    std::fs::write(complete.path().join(&partial_name), &bytes).unwrap();
    let (code, stdout, stderr) = report_text(complete.path());
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(stderr.contains("complete: read whole"), "{stderr}");
    let shown = complete.path().join(&partial_name).display().to_string();
    assert!(
        stdout.contains(&format!("trace: {shown} (an interrupted recording)")),
        "{stdout}"
    );
    // Read whole: the same answer as the finished file's (what the threads did under this
    // machine's load is not the point).
    let (_, finished, _) = report_text(recorded.path());
    let without_trace_line = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.trim_start().starts_with("trace: "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(without_trace_line(&stdout), without_trace_line(&finished));
    // One cut off in the middle (a full disk): read up to its last complete event.
    let cut = tempfile::tempdir().unwrap();
    std::fs::write(cut.path().join(&partial_name), &bytes[..bytes.len() / 2]).unwrap();
    let (code, stdout, stderr) = report_text(cut.path());
    assert_eq!(code, Some(OK), "{stderr}");
    assert!(
        stderr.contains("read up to its last complete event"),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("process {} ", workload.pid)) && stdout.contains(" waited "),
        "{stdout}"
    );
    // One that is not a trace at all is named.
    let garbage = tempfile::tempdir().unwrap();
    std::fs::write(garbage.path().join(&partial_name), "nonsense").unwrap();
    let (code, _, stderr) = report_text(garbage.path());
    assert_eq!(code, Some(INPUT), "{stderr}");
    assert!(stderr.contains(&partial_name), "{stderr}");
}

#[test]
fn report_names_the_trace_of_each_process() {
    let reference =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    let out = gilsample().arg("report").arg(&reference).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("  trace: {}\n", reference.display())),
        "{stdout}"
    );
}

/// A recording that saw only the program starting (its main thread inside an import the whole time,
/// as a job's `import torch` is to a short recording) says so in its headline, and its hint says how
/// to record the work instead.
#[test]
fn a_recording_of_imports_says_it_shows_the_start_and_how_to_record_the_work() {
    let python = interpreter("3.12");
    let modules = tempfile::tempdir().unwrap();
    std::fs::write(
        modules.path().join("slow_to_import.py"),
        "import json, os, sys\n\
         sys.stdout.write('READY ' + json.dumps({'pid': os.getpid(), 'threads': {}}) + '\\n')\n\
         sys.stdout.flush()\n\
         n = 0\n\
         while True:\n    n += 1\n",
    )
    .unwrap();
    let mut command = Command::new(&python.command[0]);
    command.args(&python.command[1..]).arg("-c").arg(format!(
        "import sys; sys.path.insert(0, {:?}); import slow_to_import",
        modules.path().display().to_string()
    ));
    let workload = Workload::from_command(command);
    let recorded = tempfile::tempdir().unwrap();
    let stderr = record_for(workload.pid, recorded.path(), "0.3", &[]);
    assert!(stderr.contains("% importing modules)"), "{stderr}");
    assert!(
        stderr.contains("hint: imports held the GIL")
            && stderr.contains(&format!("gilsample --pid {}", workload.pid)),
        "{stderr}"
    );
    let (answer, _) = report_json(&[recorded.path()]);
    let share = answer["processes"][0]["importing_share"].as_f64();
    assert!(share.is_some_and(|s| s > 0.5), "{answer}");
    // A recording of the same program's threads at work says nothing of imports.
    let workers = Workload::start(&python, &["contention", "--threads", "2"]);
    let recorded = tempfile::tempdir().unwrap();
    let stderr = record_for(workers.pid, recorded.path(), "0.3", &[]);
    assert!(
        !stderr.contains("importing") && !stderr.contains("imports held"),
        "{stderr}"
    );
}
