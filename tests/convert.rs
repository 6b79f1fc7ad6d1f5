//! `gilsample convert` on the reference tool's raw format, and every way its input can be wrong.

mod common;

use std::path::Path;

use common::{Trace, gilsample};
use gilsample::error::exit::INPUT;

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
    assert!(stderr.contains("1 take without a drop"), "{stderr}");
}

#[test]
fn keeps_the_inputs_fractions_to_the_nanosecond_as_the_reference_does() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("raw.json");
    // The issue's numbers: a take of 100.53 µs, then a drop of 2.1 µs; the hold between them begins
    // at the take's end, 1732900000004342.53, as the reference computes it with decimals.
    std::fs::write(
        &input,
        r#"[{"name": "take_gil", "ph": "X", "ts": 1732900000004242.0, "dur": 100.53, "pid": 7, "tid": 8},
            {"name": "drop_gil", "ph": "X", "ts": "1732900000004400.4", "dur": "2.1", "pid": 7, "tid": 8}]"#,
    )
    .unwrap();
    let (code, stderr) = convert(&input, &dir.path().join("out.json"));
    assert_eq!(code, 0, "{stderr}");
    let trace = Trace::load(&dir.path().join("out.json"));
    // (name, ts, dur) in nanoseconds, read exactly from the numbers' text.
    let ns = |v: &serde_json::Value| gilsample::decimal::parse_micros(v).unwrap();
    let mut got: Vec<(String, i128, i128)> = trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                ns(&e["ts"]),
                ns(&e["dur"]),
            )
        })
        .collect();
    got.sort_by_key(|(_, ts, _)| *ts);
    let expected = [
        ("take_gil", 1_732_900_000_004_242_000, 100_530),
        ("hold_gil", 1_732_900_000_004_342_530, 57_870),
        ("drop_gil", 1_732_900_000_004_400_400, 2_100),
    ];
    let expected: Vec<(String, i128, i128)> = expected
        .iter()
        .map(|(n, ts, dur)| (n.to_string(), *ts, *dur))
        .collect();
    assert_eq!(got, expected);
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
fn a_directory_is_refused_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.json");
    let (code, stderr) = convert(dir.path(), &output);
    assert_eq!(code, INPUT, "{stderr}");
    assert!(
        stderr.contains("a directory: convert takes one trace file"),
        "{stderr}"
    );
}

#[test]
fn an_output_that_is_a_directory_is_refused_and_a_missing_one_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let input = common::fixture("reference/GIL_12345_rank_0.json");
    // A path ending in /, there or not: a directory.
    std::fs::create_dir(dir.path().join("there")).unwrap();
    for output in [dir.path().join("there/"), dir.path().join("new/")] {
        let (code, stderr) = convert(&input, &output);
        assert_eq!(code, gilsample::error::exit::OUTPUT, "{stderr}");
        assert!(
            stderr.contains("and this writes one file: give the file's name, e.g. ")
                && stderr.contains("converted.json"),
            "{stderr}"
        );
    }
    assert_eq!(common::file_names(dir.path()), ["there"]);
    assert_eq!(
        common::file_names(&dir.path().join("there")),
        Vec::<String>::new()
    );
    let (code, stderr) = convert(&input, &dir.path().join("new/converted"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        common::file_names(&dir.path().join("new")),
        ["converted.json"]
    );
    // A name without .json gets it: a file or a directory of the bare name is no obstacle.
    std::fs::write(dir.path().join("new/plain"), b"").unwrap();
    std::fs::create_dir(dir.path().join("new/results")).unwrap();
    for name in ["plain", "results"] {
        let (code, stderr) = convert(&input, &dir.path().join("new").join(name));
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(dir.path().join(format!("new/{name}.json")).is_file());
    }
}

#[test]
fn not_json() {
    refused(
        "take_gil at noon",
        "not a Chrome Trace: a trace is a JSON file",
    );
    refused("[take_gil at noon]", "not valid JSON");
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
    refused("7", "not a Chrome Trace");
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
fn a_trace_with_holds_already_is_not_converted_again() {
    refused(
        r#"[{"name": "take_gil", "ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}, {"name": "hold_gil", "ph": "X", "ts": 2, "dur": 5, "pid": 1, "tid": 1}, {"name": "drop_gil", "ph": "X", "ts": 7, "dur": 1, "pid": 1, "tid": 1}]"#,
        "1 hold_gil slices already",
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

#[test]
fn a_pipe_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("raw.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    // Refused without opening it: nothing ever writes to this FIFO, so an open would wait forever.
    let (code, stderr) = convert(&fifo, &dir.path().join("out.json"));
    assert_eq!(code, INPUT, "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    assert!(stderr.contains("save it to a file first"), "{stderr}");
    assert!(!dir.path().join("out.json").exists());
}

/// A reference-format raw file: `threads` threads taking and dropping the GIL in turn, `ts` and `dur`
/// alternately as numbers and as decimal strings, some `ts` equal across threads.
fn reference_events(threads: u64, rounds: u64) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    for round in 0..rounds {
        for thread in 0..threads {
            let base = 1_795_985_719_000_000u64 + round * 1000 + thread * 10;
            let ts = |offset: u64, as_string: bool| {
                if as_string {
                    serde_json::json!(format!("{}.{:03}", base + offset, round % 1000))
                } else {
                    serde_json::json!(base + offset)
                }
            };
            let string = (round + thread) % 2 == 0;
            events.push(
                serde_json::json!({"name": "take_gil", "ph": "X", "ts": ts(0, string),
                "dur": if string { serde_json::json!("3.5") } else { serde_json::json!(3) },
                "pid": 7, "tid": 100 + thread}),
            );
            events.push(
                serde_json::json!({"name": "drop_gil", "ph": "X", "ts": ts(8, !string),
                "dur": 1, "pid": 7, "tid": 100 + thread}),
            );
        }
    }
    events
}

/// The X events of a converted or merged trace, as comparable text, sorted.
fn slices(trace: &Trace) -> Vec<String> {
    let mut out: Vec<String> = trace
        .events()
        .iter()
        .map(|e| format!("{} {} {:.3} {:.3}", e.name, e.tid, e.ts, e.dur))
        .collect();
    out.sort();
    out
}

#[test]
fn any_input_order_converts_as_the_sorted_file_does() {
    let dir = tempfile::tempdir().unwrap();
    let sorted = reference_events(3, 100);
    // A fixed permutation (no randomness in tests): a stride coprime with the length.
    let n = sorted.len();
    let shuffled: Vec<serde_json::Value> = (0..n).map(|i| sorted[(i * 37) % n].clone()).collect();
    let write = |name: &str, events: &[serde_json::Value]| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_string(events).unwrap()).unwrap();
        path
    };
    let sorted_path = write("sorted_raw.json", &sorted);
    let shuffled_path = write("shuffled_raw.json", &shuffled);
    let (code, sorted_err) = convert(&sorted_path, &dir.path().join("sorted_out.json"));
    assert_eq!(code, 0, "{sorted_err}");
    let (code, shuffled_err) = convert(&shuffled_path, &dir.path().join("shuffled_out.json"));
    assert_eq!(code, 0, "{shuffled_err}");
    assert!(
        sorted_err.contains("300 hold_gil inserted, 0 takes without a drop"),
        "{sorted_err}"
    );
    assert!(
        shuffled_err.contains("300 hold_gil inserted, 0 takes without a drop"),
        "{shuffled_err}"
    );
    assert!(shuffled_err.contains("3 threads' events were not in time order"));
    let expected = slices(&Trace::load(&dir.path().join("sorted_out.json")));
    assert_eq!(expected.len(), 900);
    assert_eq!(
        slices(&Trace::load(&dir.path().join("shuffled_out.json"))),
        expected
    );

    // merge takes the reference's raw files in any order too.
    for (input, out) in [
        (&sorted_path, "sorted_merged.json"),
        (&shuffled_path, "shuffled_merged.json"),
    ] {
        let status = gilsample()
            .arg("merge")
            .arg(input)
            .arg("-o")
            .arg(dir.path().join(out))
            .output()
            .unwrap();
        assert!(status.status.success());
    }
    // Merged events keep the input's spelling of `ts`: compared as written.
    let raw_slices = |name: &str| {
        let trace = Trace::load(&dir.path().join(name));
        let mut out: Vec<String> = trace.value["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e.to_string())
            .collect();
        out.sort();
        out
    };
    let merged = raw_slices("sorted_merged.json");
    assert_eq!(merged.len(), 600);
    assert_eq!(raw_slices("shuffled_merged.json"), merged);
}
