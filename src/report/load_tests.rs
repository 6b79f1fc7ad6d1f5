//! Reading slices, names and holds out of a trace's events.

use super::*;
use serde_json::json;

#[test]
fn frames_read_as_function_file_and_line() {
    assert_eq!(
        frame_text(&json!({"function": "parse", "file": "/a/b/pipe.py", "line": 41})),
        Some("parse (pipe.py:41)".into())
    );
    assert_eq!(frame_text(&json!("f (x.py:1)")), Some("f (x.py:1)".into()));
    assert_eq!(
        frame_text(&json!("f (/srv/app/x.py:1)")),
        Some("f (x.py:1)".into())
    );
    assert_eq!(frame_text(&json!(3)), None);
}

#[test]
fn a_native_call_is_labelled_where_it_was_called_and_keeps_its_call_site() {
    let args = json!({
        "stack": ["main (/srv/w.py:147)"],
        "native_call": true,
        "call_site": {"function": "iterencode", "file": "/usr/lib/json/encoder.py", "line": 258,
                      "source": "return _iterencode(o, 0)"},
        "callee": null,
    });
    let (call, frame) = held_in(args.as_object().unwrap()).unwrap().unwrap();
    assert_eq!(frame.as_deref(), Some("iterencode (encoder.py:258)"));
    assert_eq!(call.callee, None);
    let site = call.call_site.unwrap();
    assert_eq!(
        (site.file.as_deref(), site.line, site.source.as_deref()),
        (
            Some("/usr/lib/json/encoder.py"),
            Some(258),
            Some("return _iterencode(o, 0)")
        )
    );
    let python = json!({"stack": ["f (a.py:1)"], "native_call": false});
    assert_eq!(held_in(python.as_object().unwrap()), Some(None));
    assert_eq!(held_in(json!({"stack": []}).as_object().unwrap()), None);
    // Judged native without a stack: no call site.
    let bare = json!({"native_call": true, "call_site": null, "callee": null});
    let (call, frame) = held_in(bare.as_object().unwrap()).unwrap().unwrap();
    assert_eq!((call.call_site, frame), (None, None));
}

#[test]
fn a_hold_is_labelled_by_its_most_seen_stack() {
    let args = json!({"stacks": [
        {"stack": [{"function": "a"}], "samples": 2},
        {"stack": [{"function": "b"}, {"function": "main"}], "samples": 5},
    ]});
    assert_eq!(
        slice_label(SliceKind::Hold, args.as_object().unwrap()),
        Some("b".into())
    );
    let blocked = json!({"syscall": "read"});
    assert_eq!(
        slice_label(SliceKind::HeldWhileBlocked, blocked.as_object().unwrap()),
        Some("read".into())
    );
}

#[test]
fn a_hold_whose_stack_passes_through_the_import_system_is_importing() {
    let mut process = ProcessTrace::default();
    let hold = |process: &mut ProcessTrace, args: Value| {
        process.add_slice(SliceKind::Hold, 1, (0, 10), args.as_object());
        process.slices.last().unwrap().importing
    };
    let importing = json!({"stack": [
        "<module> (/srv/heavy.py:3)",
        "_call_with_frames_removed (<frozen importlib._bootstrap>:241)",
        "<module> (/srv/train.py:1)",
    ]});
    assert!(hold(&mut process, importing));
    let as_objects = json!({"stacks": [{"samples": 1, "stack": [
        {"function": "exec_module", "file": "<frozen importlib._bootstrap_external>", "line": 940},
    ]}]});
    assert!(hold(&mut process, as_objects));
    // At work, or without a stack: not importing.
    assert!(!hold(
        &mut process,
        json!({"stack": ["step (/srv/train.py:9)"]})
    ));
    assert!(!hold(&mut process, json!({})));
    process.add_slice(SliceKind::Take, 2, (0, 10), importing_args().as_object());
    assert!(!process.slices.last().unwrap().importing, "only holds");
}

fn importing_args() -> Value {
    json!({"stack": ["f (<frozen importlib._bootstrap>:1)"]})
}

#[test]
fn stops_and_gaps_are_read_from_their_tracks_where_other_data_does_not_give_them() {
    // As a merged file holds a recording: its events on the merge's clock, no stops in otherData.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("merged.json");
    let counter = |name: &str, key: &str, ts: u64, value: u32| json!({"name": name, "ph": "C", "ts": ts, "pid": 1, "args": {key: value}});
    let trace = json!({"traceEvents": [
        {"name": "take_gil", "ph": "X", "ts": 0, "dur": 1000, "pid": 1, "tid": 2},
        {"name": "hold_gil", "ph": "X", "ts": 0, "dur": 600, "pid": 1, "tid": 3},
        counter("process stopped", "stopped", 200, 1),
        counter("process stopped", "stopped", 500, 0),
        counter("sampler saw nothing", "gap", 600, 1),
        counter("sampler saw nothing", "gap", 800, 0),
    ]});
    std::fs::write(&path, trace.to_string()).unwrap();
    let processes = load(&path).unwrap();
    let process = &processes[0];
    assert_eq!(process.facts.stops_ns, vec![(200_000, 500_000)]);
    assert_eq!(process.gaps_ns, vec![(600_000, 800_000)]);
    // The wait is cut at the stop, and at the gap (gilsample writes none into one).
    let waits: Vec<(i128, i128)> = process
        .slices
        .iter()
        .filter(|s| s.kind == SliceKind::Take)
        .map(|s| (s.start_ns / 1000, s.end_ns / 1000))
        .collect();
    assert_eq!(waits, vec![(0, 200), (500, 600), (800, 1000)]);
    let answer = crate::report::analyze::analyze(process);
    assert!(
        (answer.stopped_s - 0.0003).abs() < 1e-12,
        "{}",
        answer.stopped_s
    );
    assert!(
        (answer.unseen_s - 0.0002).abs() < 1e-12,
        "{}",
        answer.unseen_s
    );
    assert!(
        (answer.window_s - 0.0005).abs() < 1e-12,
        "{}",
        answer.window_s
    );
}
