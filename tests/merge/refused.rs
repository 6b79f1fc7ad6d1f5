//! Inputs `gilsample merge` refuses, and its usage errors: each named in the message, with nothing
//! written.

use super::*;
use gilsample::error::exit::USAGE;

fn refused(content: &str, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("profiler.json");
    std::fs::write(&input, content).unwrap();
    let output = dir.path().join("merged.json");
    let gil = gil_fixture();
    let (code, stderr) = merge(&[&gil, &input], &[], &output);
    assert_eq!(code, INPUT, "{content:?}: {stderr}");
    assert!(
        stderr.contains("profiler.json") && stderr.contains(message),
        "{content:?}: expected {message:?} in {stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "nothing written for a bad input: {left:?}");
}

#[test]
fn empty_input() {
    refused("", "the file is empty");
}

#[test]
fn not_json() {
    refused(
        "<html>profile</html>",
        "not a Chrome Trace: a trace is a JSON file",
    );
    refused("{html: profile}", "not valid JSON");
}

#[test]
fn truncated_input() {
    refused(
        r#"{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": "X", "ts"#,
        "truncated",
    );
}

#[test]
fn wrong_shape() {
    refused("42", "not a Chrome Trace");
    refused(r#"{"events": []}"#, "without a `traceEvents` array");
    refused(
        r#"{"traceEvents": {"ph": "X"}}"#,
        "an array of trace events",
    );
    refused(r#"[[1]]"#, "event 0: not a JSON object");
}

#[test]
fn huge_numbers() {
    refused(
        r#"[{"ph": "X", "ts": 1e300, "dur": 1, "pid": 1, "tid": 1}]"#,
        "event 0: field `ts`: out of range",
    );
    refused(
        r#"{"traceEvents": [{"ph": "X", "ts": 1, "dur": "123456789012345678901234", "pid": 1}]}"#,
        "event 0: field `dur`",
    );
}

#[test]
fn missing_fields() {
    refused(
        r#"[{"ph": "M", "name": "process_name", "pid": 1}, {"ph": "X", "dur": 1, "pid": 1, "tid": 1}]"#,
        "event 1: field `ts`: missing",
    );
    refused(
        r#"[{"name": "aten::mm", "ts": 1, "pid": 1}]"#,
        "event 0: field `ph`: missing",
    );
}

#[test]
fn missing_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = merge(
        &[&dir.path().join("nope.json")],
        &[],
        &dir.path().join("out.json"),
    );
    assert_eq!(code, INPUT, "{stderr}");
    assert!(stderr.contains("nope.json"), "{stderr}");
}

#[test]
fn usage_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let gil = gil_fixture();
    let output = dir.path().join("out.json");
    let (code, stderr) = merge(&[&gil], &["--offset", "soon"], &output);
    assert_eq!(code, USAGE, "{stderr}");
    assert!(stderr.contains("[INPUT=]MICROSECONDS"), "{stderr}");
    let (code, stderr) = merge(&[&gil], &["--offset", "other.json=5"], &output);
    assert_eq!(code, USAGE, "{stderr}");
    assert!(stderr.contains("not one of the inputs"), "{stderr}");
    std::fs::copy(&gil, &output).unwrap();
    let (code, stderr) = merge(&[&output], &["--force"], &output);
    assert_eq!(code, USAGE, "{stderr}");
    assert!(stderr.contains("both an input and the output"), "{stderr}");
    let (code, stderr) = merge(&[&gil], &[], &output);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--force"),
        "an existing output is kept: {stderr}"
    );
}
