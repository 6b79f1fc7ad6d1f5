//! Python thread names in the trace, the summary and `gilsample info`, on every interpreter of the
//! suite (`common::EXPECTED`, and the debug builds of sid's 3.13 and 3.15).

#[macro_use]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Stdio};

use common::{KilledOnDrop, Trace, gilsample, interpreter_running, start_recording, succeeded};
use serde_json::Value;

const LONG_NAME: &str = "data-loader-worker-with-a-name-much-longer-than-fifteen-bytes-07";

/// fixtures/workloads/names_workload.py, running: its pipes and the tids it reported.
struct Named {
    /// Kept for its drop.
    _child: KilledOnDrop,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
    tids: Value,
}

impl Named {
    fn start(label: &str) -> Named {
        let python = interpreter_running(label, "names_workload.py");
        let mut child = KilledOnDrop::spawn(
            python
                .workload_command(&[])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        );
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let ready: Value = serde_json::from_str(
            line.strip_prefix("READY ")
                .unwrap_or_else(|| panic!("{label}: workload did not get ready: {line:?}")),
        )
        .unwrap();
        Named {
            _child: child,
            stdin,
            stdout,
            pid: ready["pid"].as_u64().unwrap() as u32,
            tids: ready["threads"].clone(),
        }
    }

    fn tid(&self, label: &str) -> u32 {
        self.tids[label].as_u64().unwrap() as u32
    }

    /// Renames the `renamed` thread and waits for the workload to say it has.
    fn rename(&mut self) {
        self.stdin.write_all(b"rename\n").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "RENAMED");
    }
}

/// `thread_name` metadata of a trace: tid → name.
fn thread_names(trace: &Trace) -> std::collections::BTreeMap<u32, String> {
    trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap() as u32,
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Records `workload` with `args`, renaming its `renamed` thread once sampling has begun (every thread
/// has been seen, and named, by then); returns the output directory and gilsample's summary.
fn record_across_a_rename(workload: &mut Named, args: &[&str]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let recording = start_recording(workload.pid, dir.path(), args);
    workload.rename();
    recording.signal(nix::sys::signal::Signal::SIGINT);
    let (status, summary) = recording.finish();
    assert!(status.success(), "{summary}");
    (dir, summary)
}

fn names_in_trace_and_summary(label: &str, layout_source: Option<&str>) {
    let mut workload = Named::start(label);
    // --verbose: the summary's per-thread table names every thread (its answer-first part only
    // the threads that waited).
    let mut args = vec!["--rate", "1khz", "--verbose"];
    if let Some(source) = layout_source {
        args.extend(["--layout-source", source]);
    }
    let (dir, summary) = record_across_a_rename(&mut workload, &args);
    let trace = Trace::load_single(dir.path());
    let names = thread_names(&trace);
    let name_of = |label_: &str| names.get(&workload.tid(label_)).cloned();
    let context = format!("{label} ({layout_source:?}): names {names:?}");
    assert_eq!(
        name_of("prefetch-1").as_deref(),
        Some("prefetch-1"),
        "{context}"
    );
    assert_eq!(
        name_of("日志线程").as_deref(),
        Some("日志线程"),
        "{context}"
    );
    assert_eq!(name_of("long").as_deref(), Some(LONG_NAME), "{context}");
    assert_eq!(
        name_of("renamed").as_deref(),
        Some("after-rename"),
        "{context}"
    );
    assert_eq!(
        name_of("MainThread").as_deref(),
        Some("MainThread"),
        "{context}"
    );
    // Not a threading.Thread: the kernel's name, which is the interpreter's (never a Python one).
    let raw = name_of("raw").unwrap_or_default();
    let comm = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/comm",
        workload.pid,
        workload.tid("raw")
    ))
    .unwrap();
    assert_eq!(raw, comm.trim(), "{context}");
    assert!(
        trace.other("thread_names_read").as_u64().unwrap() >= 5,
        "{context}"
    );
    for name in ["prefetch-1", "日志线程", "after-rename"] {
        assert!(
            summary.contains(name),
            "{label}: the summary lacks {name}: {summary}"
        );
    }
}

fn info_names_threads(label: &str) {
    let workload = Named::start(label);
    let out = gilsample()
        .args(["info", "--pid", &workload.pid.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{label}: {text}");
    for (label_, name) in [
        ("prefetch-1", "prefetch-1"),
        ("日志线程", "日志线程"),
        ("long", LONG_NAME),
    ] {
        let tid = workload.tid(label_);
        let line = text
            .lines()
            .find(|l| l.contains(&format!("tid {tid:>8}")))
            .unwrap_or_else(|| panic!("{label}: info lists no tid {tid}: {text}"));
        assert!(line.ends_with(name), "{label}: {line}");
    }
}

/// A merged trace (here with a real PyTorch profiler trace) keeps the Python names.
#[test]
fn merged_traces_keep_the_names() {
    let mut workload = Named::start("3.12");
    let (dir, _) = record_across_a_rename(&mut workload, &["--rate", "1khz"]);
    let gil = dir.path().join(format!("GIL_{}_rank_0.json", workload.pid));
    let torch = common::fixture("torch-profiler/torch_cpu.pt.trace.json");
    let merged = dir.path().join("merged.json");
    succeeded(
        gilsample()
            .arg("merge")
            .arg(&torch)
            .arg(&gil)
            .arg("-o")
            .arg(&merged),
    );
    let names = thread_names(&Trace::load(&merged));
    for (label, name) in [
        ("prefetch-1", "prefetch-1"),
        ("日志线程", "日志线程"),
        ("renamed", "after-rename"),
    ] {
        assert_eq!(
            names.get(&workload.tid(label)).map(String::as_str),
            Some(name),
            "{names:?}"
        );
    }
}

/// Every layout source names threads the same.
fn every_layout_source_names(label: &str) {
    for source in common::layout_sources(label) {
        names_in_trace_and_summary(label, Some(source));
    }
}

macro_rules! name_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn names_in_trace_and_summary() { super::names_in_trace_and_summary($label, None) }
                #[test]
                fn info_names_threads() { super::info_names_threads($label) }
                #[test]
                fn every_layout_source_names() { super::every_layout_source_names($label) }
            }
        )*
    };
}

every_expected_interpreter!(
    name_tests,
    sid313d => "sid-3.13d",
    sid315d => "sid-3.15d",
);
