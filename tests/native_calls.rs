//! Holds told apart, on every interpreter of the suite: threads in json's C encoder, in a regular
//! expression that backtracks, and in `torch.tensor` of nested lists (where torch imports) hold the
//! GIL in one native call, named by its call site and that line's source; the same threads walking
//! the same dict in Python hold it in Python code. The summary's hint says which, with its advice.

#[macro_use]
mod common;

use common::{Python, Trace, Workload, gilsample, interpreter, report_json};
use serde_json::Value;

/// Records `scenario` (two holders and a stepper that waits for them) for a second once its threads
/// run: the summary, `report --json`'s process, the trace and the workload.
fn record(label: &str, scenario: &str) -> (String, Value, Trace, Workload) {
    let python = interpreter(label);
    record_with(&python, label, scenario, &[])
}

fn record_with(
    python: &Python,
    label: &str,
    scenario: &str,
    extra: &[&str],
) -> (String, Value, Trace, Workload) {
    let workload = Workload::start(python, &[scenario, "--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let out = gilsample()
        .args(["--pid", &workload.pid.to_string(), "--duration", "1", "-o"])
        .arg(dir.path())
        .args(extra)
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{label}: {summary}");
    let trace = Trace::load_single(dir.path());
    let process = report_json(&[dir.path()]).0["processes"][0].clone();
    (summary, process, trace, workload)
}

/// Where each of `tids` that held the GIL in the recording held it (`hold_functions`, sorted by
/// seconds); at least one of them did. A thread can wait through the whole second while another
/// keeps the GIL in one long call.
fn places_of<'a>(process: &'a Value, tids: &[u32], label: &str) -> Vec<(u32, &'a [Value])> {
    let places: Vec<(u32, &[Value])> = tids
        .iter()
        .filter_map(|&tid| {
            let thread = process["threads"]
                .as_array()?
                .iter()
                .find(|t| t["tid"] == tid)?;
            let places = thread["hold_functions"].as_array()?;
            (!places.is_empty()).then_some((tid, places.as_slice()))
        })
        .collect();
    assert!(
        !places.is_empty(),
        "{label}: none of {tids:?} held the GIL: {process}"
    );
    places
}

/// Of `tids`, the thread that held the GIL longest in the recording, and where. Its holds are what
/// the second was about; another may have held it only once, briefly, at the recording's edge or
/// between the other's long calls on a loaded machine, too short for any rule to tell its kind (a
/// waiter has to have waited an interval first), and is then called Python code by default.
fn longest_holder<'a>(process: &'a Value, tids: &[u32], label: &str) -> (u32, &'a [Value]) {
    let held = |places: &[Value]| -> f64 { places.iter().filter_map(|p| p["s"].as_f64()).sum() };
    places_of(process, tids, label)
        .into_iter()
        .max_by(|a, b| held(a.1).total_cmp(&held(b.1)))
        .expect("places_of returns at least one thread")
}

/// The workload's line that holds `text` (the call a scenario's threads make), from 1.
fn workload_line(text: &str) -> u64 {
    let source = std::fs::read_to_string(common::fixture("workloads/gil_workload.py")).unwrap();
    let at = source.lines().position(|l| l.trim() == text).unwrap();
    at as u64 + 1
}

/// What a native call's entry must say: its kind, a call site in `file_suffix` at the line whose
/// source is `source`, and no callee (none is read yet on any version).
fn assert_native_call(entry: &Value, file_suffix: &str, source: &str, label: &str) {
    assert_eq!(entry["native_call"], true, "{label}: {entry}");
    let site = &entry["call_site"];
    let file = site["file"].as_str().unwrap_or_default();
    assert!(file.ends_with(file_suffix), "{label}: {entry}");
    assert_eq!(site["source"], source, "{label}: {entry}");
    assert!(site["line"].as_u64().is_some(), "{label}: {entry}");
    assert!(entry["callee"].is_null(), "{label}: {entry}");
    assert!(
        entry["longest_ms"].as_f64().unwrap() > 0.0,
        "{label}: {entry}"
    );
}

/// The hold_gil slices of `tid` that say they were one native call, with their args.
fn native_slices(trace: &Trace, tid: u32) -> Vec<Value> {
    trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "hold_gil" && e["tid"] == tid)
        .filter(|e| e["args"]["native_call"] == true)
        .map(|e| e["args"].clone())
        .collect()
}

fn the_hint(summary: &str, label: &str) -> String {
    summary
        .lines()
        .find(|l| l.trim_start().starts_with("hint:"))
        .unwrap_or_else(|| panic!("{label}: no hint: {summary}"))
        .to_string()
}

fn json_encoder_is_one_native_call(label: &str) {
    let (summary, process, trace, workload) = record(label, "json");
    {
        let (tid, places) = longest_holder(&process, &workload.tids_named("encoder-"), label);
        // Where it held the GIL most was one native call; the C encoder's among them (others:
        // `''.join` of its chunks, freeing them).
        assert_eq!(places[0]["native_call"], true, "{label}: {places:?}");
        let encoder = places
            .iter()
            .find(|p| p["call_site"]["source"] == "return _iterencode(o, 0)")
            .unwrap_or_else(|| panic!("{label}: not in the C encoder: {places:?}"));
        assert_native_call(
            encoder,
            "json/encoder.py",
            "return _iterencode(o, 0)",
            label,
        );
        // The trace's slices carry the same.
        let slices = native_slices(&trace, tid);
        let at_site: Vec<&Value> = slices
            .iter()
            .filter(|s| s["call_site"]["source"] == encoder["call_site"]["source"])
            .collect();
        assert!(
            !at_site.is_empty(),
            "{label}: no such hold_gil of {tid}: {slices:?}"
        );
        for slice in at_site {
            assert_eq!(
                slice["call_site"]["line"], encoder["call_site"]["line"],
                "{label}"
            );
            assert!(slice["callee"].is_null(), "{label}");
        }
    }
    let hint = the_hint(&summary, label);
    assert!(hint.contains("one native call in "), "{label}: {hint}");
    assert!(hint.contains("keeps the GIL for up to "), "{label}: {hint}");
    assert!(hint.contains("switch interval"), "{label}: {hint}");
    // json's encoder is the standard library's: not code the user can make release the GIL.
    assert!(
        hint.contains("called from Python's standard library")
            && !hint.contains("release the GIL inside it")
            && hint.contains("call it on smaller pieces"),
        "{label}: {hint}"
    );
    assert!(
        trace.other("switch_interval_us").as_u64().is_some(),
        "{label}"
    );
}

fn a_python_loop_is_python_code(label: &str) {
    let (summary, process, _trace, workload) = record(label, "pyloop");
    for (_, places) in places_of(&process, &workload.tids_named("looper-"), label) {
        let most = &places[0];
        assert_eq!(most["native_call"], false, "{label}: {places:?}");
        let function = most["function"].as_str().unwrap();
        assert!(
            function.starts_with("python_loop (gil_workload.py:"),
            "{label}: {most}"
        );
        assert!(most.get("call_site").is_none(), "{label}: {most}");
    }
    let hint = the_hint(&summary, label);
    assert!(
        hint.contains("Python code there keeps the GIL"),
        "{label}: {hint}"
    );
    assert!(!hint.contains("one native call"), "{label}: {hint}");
}

fn a_backtracking_regex_is_one_native_call(label: &str) {
    let (summary, process, _trace, workload) = record(label, "regex");
    let call = "BACKTRACKING.match(BACKTRACKED)";
    {
        let (_, places) = longest_holder(&process, &workload.tids_named("matcher-"), label);
        assert_native_call(&places[0], "gil_workload.py", call, label);
        assert_eq!(
            places[0]["call_site"]["line"],
            workload_line(call),
            "{label}"
        );
    }
    let hint = the_hint(&summary, label);
    assert!(
        hint.contains("one native call in match_loop (gil_workload.py:"),
        "{label}: {hint}"
    );
}

fn torch_tensor_is_one_native_call(label: &str) {
    let python = interpreter(label);
    let mut probe = std::process::Command::new(&python.command[0]);
    let probe = probe
        .args(&python.command[1..])
        .args(["-c", "import torch"])
        .output()
        .unwrap();
    if !probe.status.success() {
        let why = String::from_utf8_lossy(&probe.stderr);
        let why = why.lines().last().unwrap_or("it failed");
        println!("skipped: torch is not importable by Python {label} ({why})");
        return;
    }
    let (summary, process, _trace, workload) = record_with(&python, label, "torch", &[]);
    {
        let (_, places) = longest_holder(&process, &workload.tids_named("tensorer-"), label);
        assert_native_call(&places[0], "gil_workload.py", "torch.tensor(rows)", label);
    }
    assert!(
        the_hint(&summary, label).contains("one native call"),
        "{label}: {summary}"
    );
}

#[test]
fn samples_further_apart_than_the_switch_interval_judge_no_hold_and_say_why() {
    // At 10 Hz every hold seen spans hand-offs the samples missed: the encoders' calls and a
    // Python loop's holds look alike. No hold is called one native call; the hint says why.
    for scenario in ["json", "pyloop"] {
        let label = "3.12";
        let python = interpreter(label);
        let (summary, _process, trace, workload) =
            record_with(&python, label, scenario, &["--rate", "10"]);
        for tid in workload.tids_named("") {
            assert!(
                native_slices(&trace, tid).is_empty(),
                "{scenario}: {summary}"
            );
        }
        let hint = the_hint(&summary, label);
        assert!(
            hint.contains("sampled every 100 ms (10 Hz)")
                && hint.contains("record at --rate 1khz or more")
                && !hint.contains("one native call in"),
            "{scenario}: {hint}"
        );
    }
}

macro_rules! native_call_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn json_encoder_is_one_native_call() { super::json_encoder_is_one_native_call($label) }
                #[test]
                fn a_python_loop_is_python_code() { super::a_python_loop_is_python_code($label) }
                #[test]
                fn a_backtracking_regex_is_one_native_call() {
                    super::a_backtracking_regex_is_one_native_call($label)
                }
                #[test]
                fn torch_tensor_is_one_native_call() { super::torch_tensor_is_one_native_call($label) }
            }
        )*
    };
}

every_expected_interpreter!(native_call_tests);
