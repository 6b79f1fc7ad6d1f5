//! Which files `gilsample report` reads: the reference tool's format, directories searched (and
//! the .json files they pass over, named), its default directory, and every way its input can be
//! wrong; a reader that stops reading.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::{gilsample, report_json, stdout_nobody_reads};
use gilsample::error::exit::{INPUT, OK};

#[test]
fn report_reads_the_reference_format() {
    let input =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    let (doc, _) = report_json(&[&input]);
    let process = &doc["processes"][0];
    assert_eq!(process["pid"], 12345);
    // Holds are inferred between each take and the next drop, as the reference converter does.
    let total_hold: f64 = process["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["hold_s"].as_f64().unwrap())
        .sum();
    assert!(total_hold > 0.0, "{process}");
}

/// A reader that stops reading (`gilsample report dir/ | head`) ends the output quietly, as `cat`
/// does: no panic, exit 0, nothing said about it.
#[test]
fn a_reader_that_stops_reading_ends_the_output_quietly() {
    let input =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    for json in [false, true] {
        let mut cmd = gilsample();
        cmd.arg("report").arg(&input);
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .stdout(stdout_nobody_reads())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(OK), "--json {json}: {stderr}");
        assert!(stderr.is_empty(), "--json {json}: {stderr}");
    }
}

fn refused(content: &[u8], message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("GIL_1_rank_0.json");
    std::fs::write(&path, content).unwrap();
    let out = gilsample().arg("report").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(INPUT), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
    assert!(
        stderr.contains("GIL_1_rank_0.json"),
        "names the file: {stderr}"
    );
}

#[test]
fn bad_input_is_refused_with_exit_7() {
    refused(b"", "empty");
    refused(
        b"[{\"name\": \"take_gil\", \"ph\": \"X\", \"ts\": 1",
        "truncated",
    );
    refused(b"{\"hello\": 1}", "traceEvents");
    refused(
        b"[{\"name\": \"other\", \"ph\": \"X\", \"ts\": 1, \"dur\": 1}]",
        "not a GIL trace",
    );
    refused(b"\x00\xff garbage", "not a Chrome Trace");
    // The other file a recording may leave: replay is what reads it.
    refused(b"GILSMPL\n\x01\x00", "gilsample replay");
    // A byte-order mark is passed over: the events after it are read (and here not GIL ones).
    refused(
        b"\xEF\xBB\xBF[{\"name\": \"other\", \"ph\": \"X\", \"ts\": 1, \"dur\": 1}]",
        "not a GIL trace",
    );
    refused(b"[\x00\xff garbage", "not valid JSON");
    refused(
        b"[{\"name\": \"take_gil\", \"ph\": \"X\", \"ts\": \"x\", \"dur\": 1, \"pid\": 1, \"tid\": 1}]",
        "ts",
    );
}

#[test]
fn bad_files_among_good_ones_are_skipped_with_a_warning_and_duplicates_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let good =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    std::fs::copy(&good, dir.path().join("GIL_12345_rank_0.json")).unwrap();
    std::fs::create_dir(dir.path().join("copy")).unwrap();
    std::fs::copy(&good, dir.path().join("copy/GIL_12345_rank_0.json")).unwrap();
    std::fs::write(dir.path().join("GIL_9_rank_0.json"), "not json").unwrap();
    let (doc, stderr) = report_json(&[dir.path(), &dir.path().join("GIL_12345_rank_0.json")]);
    assert_eq!(doc["processes"].as_array().unwrap().len(), 1, "{doc}");
    let bad = dir.path().join("GIL_9_rank_0.json").display().to_string();
    assert!(
        stderr.contains(&format!("{bad}: skipped: not a Chrome Trace")),
        "the file named once: {stderr}"
    );
    assert!(stderr.contains("repeats process 12345"), "{stderr}");
    assert!(stderr.contains("given twice"), "{stderr}");
}

#[test]
fn other_json_files_in_a_directory_are_named_as_not_read() {
    // A recording with `-o NAME.json` beside the others: a directory is searched for GIL_*.json,
    // and the file passed over is said, so that it is given by name.
    let good =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&good, dir.path().join("single.json")).unwrap();
    let out = gilsample().arg("report").arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(INPUT), "{stderr}");
    let named = format!(
        "1 other .json file in the directories searched, not read (a trace among them is read when given by name): {}",
        dir.path().join("single.json").display()
    );
    assert!(stderr.contains(&named), "{stderr}");
    std::fs::copy(&good, dir.path().join("GIL_12345_rank_0.json")).unwrap();
    let (doc, stderr) = report_json(&[dir.path()]);
    assert_eq!(doc["processes"].as_array().unwrap().len(), 1, "{doc}");
    assert!(
        stderr.contains(&format!("gilsample: note: {named}")),
        "{stderr}"
    );
}

#[test]
fn a_missing_path_is_an_input_error() {
    let out = gilsample()
        .args(["report", "/nonexistent/gil_traces"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(INPUT));
}

#[test]
fn without_a_path_report_reads_where_record_writes_by_default() {
    let good =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference/GIL_12345_rank_0.json");
    let cwd = tempfile::tempdir().unwrap();
    let report = || {
        gilsample()
            .arg("report")
            .current_dir(cwd.path())
            .env_remove("GILSAMPLE_DIR")
            .output()
            .unwrap()
    };
    let out = report();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(INPUT), "{stderr}");
    assert!(
        stderr.contains("gil_traces: no such directory: record writes its traces there"),
        "{stderr}"
    );
    std::fs::create_dir(cwd.path().join("gil_traces")).unwrap();
    std::fs::copy(&good, cwd.path().join("gil_traces/GIL_12345_rank_0.json")).unwrap();
    let out = report();
    assert_eq!(
        out.status.code(),
        Some(OK),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("process 12345"));
    // $GILSAMPLE_DIR, as record's default.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::copy(&good, elsewhere.path().join("GIL_12345_rank_0.json")).unwrap();
    let out = gilsample()
        .arg("report")
        .current_dir(cwd.path())
        .env("GILSAMPLE_DIR", elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(OK),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
