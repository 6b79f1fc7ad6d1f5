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
