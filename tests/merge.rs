//! `gilsample merge`: a real PyTorch profiler trace and the GIL trace of the same run on one timeline,
//! Kineto's two clock forms, msprof timelines, manual offsets, pid collisions, and every way an input
//! can be wrong (the last: merge/refused.rs).

mod common;
#[path = "merge/refused.rs"]
mod refused;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use common::{gilsample, report_json};
use gilsample::error::exit::INPUT;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/torch-profiler")
        .join(name)
}

/// The GIL trace of the torch fixture (its name carries the pid of the run that made it).
fn gil_fixture() -> PathBuf {
    let dir = fixture("");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("GIL_"))
        .expect("a GIL_<pid>_rank_0.json in fixtures/torch-profiler")
}

/// The recorded process's pid, and where it lands when another input uses it too.
fn fixture_pid() -> (i64, i64) {
    let pid = load(&gil_fixture())["otherData"]["pid"].as_i64().unwrap();
    (pid, pid + 10_000_000)
}

/// Exact nanoseconds of a JSON number of microseconds, from its text.
fn ns_of(value: &Value) -> i128 {
    let text = value.to_string();
    let text = text.trim_matches('"');
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let frac: String = frac.chars().chain("000".chars()).take(3).collect();
    whole.parse::<i128>().unwrap() * 1000 + frac.parse::<i128>().unwrap()
}

fn micros_text(ns: i128) -> String {
    format!("{}.{:03}", ns.div_euclid(1000), ns.rem_euclid(1000))
}

fn merge(args: &[&Path], extra: &[&str], output: &Path) -> (i32, String) {
    let out = gilsample()
        .arg("merge")
        .args(args)
        .args(extra)
        .arg("-o")
        .arg(output)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn load(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn events(trace: &Value) -> &Vec<Value> {
    trace["traceEvents"].as_array().unwrap()
}

fn is_gil(event: &Value) -> bool {
    matches!(
        event["name"].as_str(),
        Some("take_gil" | "hold_gil" | "drop_gil")
    )
}

/// Earliest start and latest end (µs) of the complete events that pass `keep`.
fn span(trace: &Value, keep: impl Fn(&Value) -> bool) -> (f64, f64) {
    let timed: Vec<&Value> = events(trace)
        .iter()
        .filter(|e| e["ph"] == "X" && keep(e))
        .collect();
    assert!(!timed.is_empty());
    let start = timed.iter().map(|e| e["ts"].as_f64().unwrap());
    let end = timed
        .iter()
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap());
    (start.fold(f64::MAX, f64::min), end.fold(f64::MIN, f64::max))
}

#[test]
fn a_real_pytorch_trace_lands_inside_the_gil_recording_of_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("merged.json");
    let gil = gil_fixture();
    let torch = fixture("torch_cpu.pt.trace.json");
    let (pid, moved_pid) = fixture_pid();
    let (code, stderr) = merge(&[&gil, &torch], &[], &output);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("PyTorch profiler (Kineto) trace")
            && stderr.contains("moved by baseTimeNanoseconds")
            && stderr.contains(&format!("pid {pid} renumbered {moved_pid}")),
        "{stderr}"
    );
    let merged = load(&output);
    // gilsample.start() returned before the profiler started and stop() came after its export: on the
    // wall clock the profiler's work must sit inside the GIL recording.
    let (gil_start, gil_end) = span(&merged, is_gil);
    let (torch_start, torch_end) = span(&merged, |e| !is_gil(e));
    assert!(
        gil_start < torch_start && torch_end < gil_end,
        "GIL {gil_start}..{gil_end} vs profiler {torch_start}..{torch_end}"
    );
    // The same process in both traces: GIL tracks keep the real pid, the profiler's move aside.
    let gil_pids: Vec<&Value> = events(&merged)
        .iter()
        .filter(|e| is_gil(e))
        .map(|e| &e["pid"])
        .collect();
    assert!(gil_pids.iter().all(|&p| *p == json!(pid)));
    let torch_pids: Vec<&Value> = events(&merged)
        .iter()
        .filter(|e| e["cat"] == "cpu_op")
        .map(|e| &e["pid"])
        .collect();
    assert!(!torch_pids.is_empty() && torch_pids.iter().all(|&p| *p == json!(moved_pid)));
    // `report` reads the GIL tracks of the merged file and passes over the profiler's events
    // (Kineto's "Spans" and "Traces" processes have words for pids).
    let report = gilsample().arg("report").arg(&output).output().unwrap();
    let said = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&report.stderr)
    );
    // Its rank, from the recording's otherData that the merged file keeps.
    assert!(said.contains(&format!("process {pid} (rank 0)")), "{said}");
    // The profiler's process (thread names, no GIL slice, no recording of it) is not an answer.
    assert!(!said.contains(&format!("process {moved_pid}")), "{said}");
    assert!(!said.contains("-0.00"), "{said}");
    assert!(
        events(&merged).iter().any(|e| e["name"] == "process_name"
            && e["pid"] == json!(moved_pid)
            && e["args"]["name"] == "python [torch_cpu.pt.trace.json]"),
        "the moved process says where it came from"
    );
    // Timestamps are exact: Kineto's relative ts + its baseTimeNanoseconds - the merged base (a whole
    // second before the first event), to the nanosecond.
    let kineto = load(&torch);
    let kineto_base = kineto["baseTimeNanoseconds"].as_i64().unwrap() as i128;
    let merged_base = merged["baseTimeNanoseconds"].as_i64().unwrap() as i128;
    assert_eq!(merged_base % 1_000_000_000, 0);
    let op = events(&kineto)
        .iter()
        .find(|e| e["cat"] == "cpu_op")
        .unwrap();
    let expected = micros_text(ns_of(&op["ts"]) + kineto_base - merged_base);
    let text = std::fs::read_to_string(&output).unwrap();
    assert!(
        text.contains(&format!("\"ts\":{expected}")),
        "{} µs exactly",
        expected
    );
    let inputs = &merged["otherData"]["merge"]["inputs"];
    assert_eq!(inputs[0]["kind"], "gilsample GIL trace");
    assert_eq!(
        inputs[1]["shift_us"].as_f64().unwrap() * 1000.0,
        kineto_base as f64
    );
    assert_eq!(inputs[1]["overlaps_gil_traces"], json!(true));
    assert_eq!(inputs[0]["otherData"]["pid"], json!(pid));
}

/// The torch fixture rewritten the way older Kineto wrote it: absolute epoch µs.
fn absolute_kineto(dir: &Path, with_base: bool) -> PathBuf {
    let mut trace = load(&fixture("torch_cpu.pt.trace.json"));
    let base_us = trace["baseTimeNanoseconds"].as_f64().unwrap() / 1000.0;
    for event in trace["traceEvents"].as_array_mut().unwrap() {
        if let Some(ts) = event["ts"].as_f64() {
            event["ts"] = json!(ts + base_us);
        }
    }
    if !with_base {
        trace.as_object_mut().unwrap().remove("baseTimeNanoseconds");
    }
    let path = dir.join(format!("absolute_{with_base}.json"));
    std::fs::write(&path, trace.to_string()).unwrap();
    path
}

/// Two nodes' recordings of the same pid (containers number alike): the merge renumbers the second,
/// and `report` of the merged file gives each its own rank and host, under the pid its events have.
/// The GIL fixture as two nodes' recordings in `dir` (`GIL_node0.json`, `GIL_node1.json`): the same
/// pid, each node's rank and host.
fn two_nodes(dir: &Path) -> Vec<PathBuf> {
    (0..2)
        .map(|node| {
            let mut trace = load(&gil_fixture());
            trace["otherData"]["rank"] = json!(node);
            trace["otherData"]["host"] = json!(format!("node{node}"));
            let path = dir.join(format!("GIL_node{node}.json"));
            std::fs::write(&path, trace.to_string()).unwrap();
            path
        })
        .collect()
}

#[test]
fn report_of_a_merge_keeps_each_nodes_rank_and_host_when_their_pids_are_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, moved_pid) = fixture_pid();
    let inputs = two_nodes(dir.path());
    let output = dir.path().join("merged.json");
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let (code, stderr) = merge(&inputs, &[], &output);
    assert_eq!(code, 0, "{stderr}");
    let (doc, _) = report_json(&[&output]);
    let mut seen: Vec<(i64, i64, String)> = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let host = p["host"].as_str().unwrap_or("(none)").to_string();
            (
                p["pid"].as_i64().unwrap(),
                p["rank"].as_i64().unwrap_or(-1),
                host,
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (pid, 0, "node0".to_string()),
            (moved_pid, 1, "node1".to_string())
        ]
    );
}

#[test]
fn a_merged_trace_given_beside_the_files_it_holds_is_left_out() {
    // `record --merge` writes GIL_merged.json beside the per-process files, and `GIL_*.json`
    // matches it too.
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let merged = dir.path().join("GIL_merged.json");
    let (code, stderr) = merge(&[&gil], &[], &merged);
    assert_eq!(code, 0, "{stderr}");
    let once = events(&load(&merged)).len();
    let again = dir.path().join("again.json");
    let (code, stderr) = merge(&[&gil, &merged], &[], &again);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("GIL_merged.json: left out") && stderr.contains("there twice"),
        "{stderr}"
    );
    let trace = load(&again);
    assert_eq!(events(&trace).len(), once, "{stderr}");
    let (pid, renumbered) = fixture_pid();
    assert!(events(&trace).iter().all(|e| e["pid"] != json!(renumbered)));
    assert!(events(&trace).iter().any(|e| e["pid"] == json!(pid)));
    // Alone, or beside files it does not hold, a merged trace is merged like any other.
    let alone = dir.path().join("alone.json");
    let (code, stderr) = merge(&[&merged], &[], &alone);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("left out"), "{stderr}");
    assert_eq!(events(&load(&alone)).len(), once);
}

#[test]
fn a_file_given_twice_is_merged_once_and_a_directory_is_refused_with_the_files_to_give() {
    // Overlapping globs (`GIL_*.json *.json`) give one file twice, here once by another path.
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let once_path = dir.path().join("once.json");
    let (code, stderr) = merge(&[&gil], &[], &once_path);
    assert_eq!(code, 0, "{stderr}");
    let once = events(&load(&once_path)).len();
    let other_path = gil
        .parent()
        .unwrap()
        .join(".")
        .join(gil.file_name().unwrap());
    let twice_path = dir.path().join("twice.json");
    let (code, stderr) = merge(&[&gil, &other_path], &[], &twice_path);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: left out: the same file as {}",
            other_path.display(),
            gil.display()
        )),
        "{stderr}"
    );
    let trace = load(&twice_path);
    assert_eq!(events(&trace).len(), once, "{stderr}");
    let (_, renumbered) = fixture_pid();
    assert!(events(&trace).iter().all(|e| e["pid"] != json!(renumbered)));
    // A directory: the files in it are what to give.
    let (code, stderr) = merge(&[&gil, dir.path()], &[], &dir.path().join("d.json"));
    assert_eq!(code, INPUT, "{stderr}");
    assert!(
        stderr.contains("a directory: merge takes trace files, e.g. ")
            && stderr.contains("GIL_*.json"),
        "{stderr}"
    );
    assert!(!dir.path().join("d.json").exists());
}

/// A recording killed before its end leaves `.GIL_<pid>_rank_<rank>.json.<pid>.partial`, cut off
/// mid-event: merge takes its complete events, as report does, and says so; another file cut off
/// is still refused (`truncated_input`).
#[test]
fn an_interrupted_recordings_partial_file_is_merged_up_to_its_cut() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let text = std::fs::read_to_string(&gil).unwrap();
    let whole = events(&load(&gil)).iter().filter(|e| is_gil(e)).count();
    // Cut in the middle of the file, inside an event.
    let cut_at = text.len() / 2;
    let name = format!(
        ".{}.4242.partial",
        gil.file_name().unwrap().to_string_lossy()
    );
    let partial = dir.path().join(name);
    std::fs::write(&partial, &text[..cut_at]).unwrap();
    let output = dir.path().join("merged.json");
    let (code, stderr) = merge(
        &[&partial, &fixture("torch_cpu.pt.trace.json")],
        &[],
        &output,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: an interrupted recording's temporary file, cut off (",
            partial.display()
        )) && stderr.contains("merged up to its last complete event"),
        "{stderr}"
    );
    let kept = events(&load(&output)).iter().filter(|e| is_gil(e)).count();
    assert!(kept > 0 && kept < whole, "{kept} of {whole}");
}

#[test]
fn report_counts_a_process_once_when_its_file_and_a_merged_file_holding_it_are_both_given() {
    // `report sub/GIL_*.json` after `record --merge`: each process's own file and GIL_merged.json
    // (a directory given is searched without GIL_merged.json).
    // Two nodes' pid collides, so the merge renumbered the second; its window is the merge's.
    let dir = tempfile::tempdir().unwrap();
    let inputs = two_nodes(dir.path());
    let merged = dir.path().join("GIL_merged.json");
    let given: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let (code, stderr) = merge(&given, &[], &merged);
    assert_eq!(code, 0, "{stderr}");
    // The merged file first: the recordings' own files are still the ones counted.
    let (doc, stderr) = report_json(&[&merged, given[0], given[1]]);
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{stderr}");
    assert!(
        processes
            .iter()
            .all(|p| !p["file"].as_str().unwrap().ends_with("GIL_merged.json")),
        "the recordings' own files are counted: {doc}"
    );
    let skipped = doc["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{doc}");
    for (entry, node) in skipped.iter().zip(["GIL_node0.json", "GIL_node1.json"]) {
        assert!(entry["file"].as_str().unwrap().ends_with("GIL_merged.json"));
        let why = entry["why"].as_str().unwrap();
        assert!(
            why.starts_with("repeats process ") && why.ends_with(node),
            "{why}"
        );
    }
    // The merged file alone holds both.
    let (alone, _) = report_json(&[&merged]);
    assert_eq!(alone["processes"].as_array().unwrap().len(), 2, "{alone}");
}

#[test]
fn an_output_that_is_a_directory_is_refused_and_a_missing_one_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    for force in [&[][..], &["--force"][..]] {
        let (code, stderr) = merge(&[&gil], force, dir.path());
        assert_eq!(code, gilsample::error::exit::OUTPUT, "{stderr}");
        assert!(
            stderr.contains(
                "it is a directory, and this writes one file: give the file's name, \
                 e.g. "
            ) && stderr.contains("merged.json")
                && !stderr.contains("--force"),
            "{stderr}"
        );
    }
    assert_eq!(common::file_names(dir.path()), Vec::<String>::new());
    let output = dir.path().join("new/deeper/merged.json");
    let (code, stderr) = merge(&[&gil], &[], &output);
    assert_eq!(code, 0, "{stderr}");
    assert!(output.is_file());
}

#[test]
fn kineto_traces_with_absolute_timestamps_are_taken_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    for with_base in [true, false] {
        let torch = absolute_kineto(dir.path(), with_base);
        let output = dir.path().join(format!("merged_{with_base}.json"));
        let (code, stderr) = merge(&[&gil, &torch], &[], &output);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("absolute epoch µs"), "{stderr}");
        let merged = load(&output);
        let (gil_start, gil_end) = span(&merged, is_gil);
        let (torch_start, torch_end) = span(&merged, |e| !is_gil(e));
        assert!(gil_start < torch_start && torch_end < gil_end);
        assert_eq!(
            merged["otherData"]["merge"]["inputs"][1]["shift_us"],
            json!(0.0)
        );
    }
}

/// A small timeline in the shape torch_npu / msprof write `trace_view.json`: a bare array, `ts` as
/// decimal strings of epoch µs, msprof's process names; its Python process has `pid`.
fn msprof_timeline(dir: &Path, ts_us: &str, pid: i64) -> PathBuf {
    let trace = json!([
        {"name": "process_name", "ph": "M", "pid": 2_000_000, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"name": "aclnnMatmul", "ph": "X", "pid": 2_000_000, "tid": 3, "ts": ts_us, "dur": "12.5"},
        {"name": "torch/nn/modules/linear.py(114): forward", "ph": "X", "pid": pid, "tid": pid, "ts": ts_us, "dur": "30.25"},
        {"name": "async_npu", "ph": "s", "id": 7, "pid": pid, "tid": pid, "ts": ts_us, "cat": "async_npu"},
        {"name": "async_npu", "ph": "f", "id": 7, "bp": "e", "pid": 2_000_000, "tid": 3, "ts": ts_us, "cat": "async_npu"}
    ]);
    let path = dir.join("trace_view.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    path
}

/// A moment inside the GIL fixture's recording, in exact ns.
fn inside_gil_fixture_ns() -> i128 {
    let gil = load(&gil_fixture());
    let first = events(&gil)
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| ns_of(&e["ts"]))
        .min()
        .unwrap();
    first + 100_000_125
}

#[test]
fn msprof_timelines_take_a_manual_offset_and_keep_their_flows() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let (pid, moved_pid) = fixture_pid();
    let at_ns = inside_gil_fixture_ns();
    let npu = msprof_timeline(dir.path(), &micros_text(at_ns), pid);
    let output = dir.path().join("merged.json");
    let offset = format!("{}=-1500.5", npu.display());
    let (code, stderr) = merge(&[&npu, &gil], &["--offset", &offset], &output);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("Ascend msprof timeline"), "{stderr}");
    let merged = load(&output);
    let text = std::fs::read_to_string(&output).unwrap();
    // Moved by -1500.5 µs exactly, written from the merged base.
    let base = merged["baseTimeNanoseconds"].as_i64().unwrap() as i128;
    let expected = micros_text(at_ns - 1_500_500 - base);
    assert!(
        text.contains(&format!("\"ts\":{expected}")),
        "{expected} in {text}"
    );
    // Listed first, but the GIL trace keeps its pid and msprof's Python process moves.
    assert!(
        events(&merged)
            .iter()
            .filter(|e| is_gil(e))
            .all(|e| e["pid"] == json!(pid))
    );
    let moved = events(&merged)
        .iter()
        .find(|e| e["name"] == "torch/nn/modules/linear.py(114): forward")
        .unwrap();
    assert_eq!(moved["pid"], json!(moved_pid));
    let flow_ids: Vec<&Value> = events(&merged)
        .iter()
        .filter(|e| e["name"] == "async_npu")
        .map(|e| &e["id"])
        .collect();
    assert_eq!(
        flow_ids,
        [&json!(7), &json!(7)],
        "the first input's flow ids stay"
    );
    let input = &merged["otherData"]["merge"]["inputs"][0];
    assert_eq!(input["manual_offset_us"], json!(-1500.5));
}

#[test]
fn a_bare_offset_moves_profiler_traces_but_not_gil_traces() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let torch = fixture("torch_cpu.pt.trace.json");
    let plain = dir.path().join("plain.json");
    assert_eq!(merge(&[&gil, &torch], &[], &plain).0, 0);
    let shifted = dir.path().join("shifted.json");
    let (code, stderr) = merge(&[&gil, &torch], &["--offset", "-2500"], &shifted);
    assert_eq!(code, 0, "{stderr}");
    let (plain, shifted) = (load(&plain), load(&shifted));
    assert_eq!(span(&plain, is_gil), span(&shifted, is_gil));
    let before = span(&plain, |e| !is_gil(e)).0;
    let after = span(&shifted, |e| !is_gil(e)).0;
    // Epoch µs as f64 resolve to 0.25 µs.
    assert!((before - after - 2500.0).abs() < 0.5, "{before} {after}");
}

#[test]
fn traces_that_do_not_overlap_in_time_are_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let npu = msprof_timeline(dir.path(), "1000.0", 1);
    let (code, stderr) = merge(&[&gil, &npu], &[], &dir.path().join("merged.json"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("does not overlap the GIL traces") && stderr.contains("--offset"),
        "{stderr}"
    );
    // The offset it says brings the timeline into the GIL traces' time, and the warning goes.
    let offset = stderr
        .split(" s before the GIL traces start: an --offset of at least ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no distance said: {stderr}"));
    let given = format!("{}={offset}", npu.display());
    let (code, stderr) = merge(
        &[&gil, &npu],
        &["--offset", &given],
        &dir.path().join("moved.json"),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("does not overlap"), "{stderr}");
}

#[test]
fn the_same_pid_in_two_gil_traces_becomes_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let (pid, moved_pid) = fixture_pid();
    let copy = dir.path().join(format!("GIL_{pid}_rank_1.json"));
    std::fs::copy(&gil, &copy).unwrap();
    let output = dir.path().join("merged.json");
    let (code, stderr) = merge(&[&gil, &copy], &[], &output);
    assert_eq!(code, 0, "{stderr}");
    let merged = load(&output);
    let per_pid = |pid: i64| {
        events(&merged)
            .iter()
            .filter(|e| is_gil(e) && e["pid"] == json!(pid))
            .count()
    };
    assert!(per_pid(pid) > 0);
    assert_eq!(per_pid(pid), per_pid(moved_pid));
}
