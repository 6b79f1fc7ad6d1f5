//! `gilsample convert` on the reference tool's raw format, and every way its input can be wrong.

mod common;

use std::path::Path;

use common::{Trace, gilsample};

const INPUT: i32 = 7;

fn convert(input: &Path, output: &Path) -> (i32, String) {
    let out = gilsample()
        .arg("convert")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn converts_the_reference_format_with_holds_between_take_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let input =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    let (code, stderr) = convert(&input, &dir.path().join("out"));
    assert_eq!(code, 0, "{stderr}");
    let trace = Trace::load(&dir.path().join("out.json")); // `.json` appended, as the reference does
    let holds: Vec<_> = trace
        .events()
        .into_iter()
        .filter(|e| e.name == "hold_gil")
        .collect();
    assert_eq!(holds.len(), 2);
    let first = holds.iter().find(|e| e.tid == 12346).unwrap();
    assert!(
        (first.ts - 1_795_985_719_635_121.0).abs() < 0.5 && (first.dur - 180.0).abs() < 0.01,
        "{first:?}"
    );
    assert_eq!(
        trace
            .events()
            .iter()
            .filter(|e| e.name == "take_gil")
            .count(),
        3
    );
    let names: Vec<&str> = trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(names.contains(&"process_name") && names.contains(&"thread_name"));
    assert!(stderr.contains("1 takes without a drop"), "{stderr}");
}

fn refused(content: &str, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("raw.json");
    std::fs::write(&input, content).unwrap();
    let output = dir.path().join("out.json");
    let (code, stderr) = convert(&input, &output);
    assert_eq!(code, INPUT, "{content:?}: {stderr}");
    assert!(
        stderr.contains(message),
        "{content:?}: expected {message:?} in {stderr}"
    );
    assert!(!output.exists(), "no output for a bad input");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "partial output left behind");
}

#[test]
fn empty_input() {
    refused("", "empty");
}

#[test]
fn not_json() {
    refused("take_gil at noon", "not valid JSON");
}

#[test]
fn truncated_input() {
    refused(
        r#"[{"name": "take_gil", "ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}, {"name": "dr"#,
        "truncated",
    );
}

#[test]
fn wrong_shape() {
    refused(r#"{"events": []}"#, "without a `traceEvents` array");
    refused("7", "expected a Chrome Trace");
    refused(r#"[1, 2]"#, "event 0: not a JSON object");
}

#[test]
fn huge_numbers() {
    refused(
        r#"[{"name": "take_gil", "ts": 1e300, "dur": 1, "pid": 1, "tid": 1}]"#,
        "event 0: field `ts`: out of range",
    );
    refused(
        r#"[{"name": "take_gil", "ts": 1, "dur": 1, "pid": 99999999999, "tid": 1}]"#,
        "event 0: field `pid`",
    );
}

#[test]
fn missing_fields() {
    refused(
        r#"[{"name": "take_gil", "ts": 1, "dur": 1, "pid": 1, "tid": 1}, {"name": "drop_gil", "dur": 1, "pid": 1, "tid": 1}]"#,
        "event 1: field `ts`: missing",
    );
    refused(
        r#"[{"ts": 1, "dur": 1, "pid": 1, "tid": 1}]"#,
        "event 0: field `name`: missing",
    );
}

#[test]
fn missing_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = convert(&dir.path().join("nope.json"), &dir.path().join("out.json"));
    assert_eq!(code, INPUT, "{stderr}");
    assert!(stderr.contains("nope.json"));
}
