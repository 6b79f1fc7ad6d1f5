//! Shared pieces of the live tests: the interpreters under test, workloads that signal readiness on
//! stdout, and running gilsample and reading its trace.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};

use serde_json::Value;

mod child;
pub mod fuzz;
mod recording;
pub mod top_table;

pub use child::KilledOnDrop;
#[allow(unused_imports)]
pub use child::{running, stdout_nobody_reads};
// Each test file compiles this module and uses only some of it (as `dead_code` above).
#[allow(unused_imports)]
pub use recording::{
    Control, ControlSocket, LaunchedRecording, Recording, read_until, start_recording,
    stop_once_recording,
};

/// The interpreters every live test runs under, the one list of them: invokes `$tests!` with
/// `module => label` for each (and the extra ones given), so a live test file names them in one
/// place, and `EXPECTED` below is the same list. A missing one fails the suite: a green run must mean
/// every one of them was tested. `sid-*` run inside the Debian sid root that scripts/make-sid-root.sh
/// makes (static, non-PIE, stripped, with detached DWARF from the -dbg packages; `d` = debug build).
/// Needs `#[macro_use] mod common;`.
#[allow(unused_macros)]
macro_rules! every_expected_interpreter {
    ($tests:ident $(, $extra:ident => $label:expr)* $(,)?) => {
        $tests! {
            py37 => "3.7",
            py38 => "3.8",
            py39 => "3.9",
            py310 => "3.10",
            py311 => "3.11",
            py312 => "3.12",
            py313 => "3.13",
            debian311 => "debian-3.11",
            sid313 => "sid-3.13",
            sid314 => "sid-3.14",
            sid315 => "sid-3.15",
            sid314d => "sid-3.14d",
            $($extra => $label,)*
        }
    };
}

/// The labels of a list of `module => label` pairs.
macro_rules! labels_of {
    ($($module:ident => $label:expr,)*) => {
        &[$($label),*]
    };
}

/// Every interpreter's label, in `every_expected_interpreter!`'s order.
pub const EXPECTED: &[&str] = every_expected_interpreter!(labels_of);

pub fn pyenv_root() -> PathBuf {
    if let Some(root) = std::env::var_os("PYENV_ROOT") {
        return root.into();
    }
    if let Ok(out) = Command::new("pyenv").arg("root").output()
        && out.status.success()
    {
        return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    }
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".pyenv")
}

pub fn sid_root() -> PathBuf {
    std::env::var_os("GILSAMPLE_SID_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/tmp/gilsample-sid".into())
}

/// How to run one interpreter under test, and where it sees the workload script.
#[derive(Clone, Debug)]
pub struct Python {
    /// The command line that starts the interpreter (a `chroot` prefix for the sid root).
    pub command: Vec<String>,
    /// The workload script's path as the interpreter sees it.
    pub workload: String,
}

impl Python {
    /// A command running `script_args` on the workload script.
    pub fn workload_command(&self, script_args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .arg(&self.workload)
            .args(script_args);
        cmd
    }
}

/// The interpreter for a label of `EXPECTED`; panics (fails the test) when it is not installed.
pub fn interpreter(label: &str) -> Python {
    interpreter_running(label, "gil_workload.py")
}

/// The interpreter for `label`, with `script` (a file of fixtures/workloads/) as its workload.
pub fn interpreter_running(label: &str, script: &str) -> Python {
    let workload = fixture(&format!("workloads/{script}"))
        .display()
        .to_string();
    if let Some(minor) = label.strip_prefix("debian-") {
        let path = PathBuf::from(format!("/usr/bin/python{minor}"));
        assert!(
            path.exists(),
            "expected interpreter {} is missing (apt-get install python{minor})",
            path.display()
        );
        return Python {
            command: vec![path.display().to_string()],
            workload,
        };
    }
    if let Some(name) = label.strip_prefix("sid-") {
        let root = sid_root();
        let inside = format!("/usr/bin/python{name}");
        let exe = root.join(inside.trim_start_matches('/'));
        assert!(
            exe.exists(),
            "expected interpreter {} is missing: run scripts/make-sid-root.sh",
            exe.display()
        );
        // The chroot sees only its own tree: give it the workload under a unique name, then rename
        // into place, so concurrent tests never see a half-written script.
        let staged = tempfile::NamedTempFile::new_in(root.join("tmp")).unwrap();
        std::fs::copy(&workload, staged.path()).unwrap();
        staged.persist(root.join("tmp").join(script)).unwrap();
        return Python {
            command: vec!["chroot".into(), root.display().to_string(), inside],
            workload: format!("/tmp/{script}"),
        };
    }
    let versions = pyenv_root().join("versions");
    let found = std::fs::read_dir(&versions)
        .unwrap_or_else(|e| panic!("expected pyenv builds under {}: {e}", versions.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{label}.")))
        })
        .map(|p| p.join("bin").join(format!("python{label}")))
        .find(|p| p.exists());
    let path = found.unwrap_or_else(|| {
        panic!(
            "expected interpreter Python {label} is missing under {}",
            versions.display()
        )
    });
    Python {
        command: vec![path.display().to_string()],
        workload,
    }
}

/// The layout sources a label's interpreter supports, each of which the suite forces in turn.
pub fn layout_sources(label: &str) -> &'static [&'static str] {
    match label {
        "debian-3.11" => &["file"],
        "3.13" => &["debug-offsets", "dwarf", "file"],
        l if l.starts_with("sid-") => &["debug-offsets", "dwarf", "file"],
        _ => &["dwarf", "file"],
    }
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A running workload from fixtures/workloads/gil_workload.py; killed when dropped.
pub struct Workload {
    pub child: KilledOnDrop,
    pub pid: u32,
    /// Thread name → OS tid, as the workload reported them.
    pub threads: HashMap<String, u32>,
}

impl Workload {
    /// Starts a scenario and waits for its READY line (the readiness signal; no sleeps).
    pub fn start(python: &Python, args: &[&str]) -> Workload {
        Workload::start_with_stdin(python, args, Stdio::inherit())
    }

    /// Like `start`, with the scenario's stdin from `stdin` (`Stdio::piped()` keeps it in `child`).
    pub fn start_with_stdin(python: &Python, args: &[&str], stdin: Stdio) -> Workload {
        let mut cmd = python.workload_command(args);
        cmd.stdin(stdin);
        Workload::from_command(cmd)
    }

    /// Starts a workload command prepared by the caller (its environment, say) and waits for READY.
    pub fn from_command(mut cmd: Command) -> Workload {
        let (child, line) = KilledOnDrop::spawn_until_first_line(cmd.stderr(Stdio::inherit()));
        let json = line
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("workload did not get ready: {line:?}"));
        let value: Value = serde_json::from_str(json).unwrap();
        let threads = value["threads"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap() as u32))
            .collect();
        Workload {
            pid: value["pid"].as_u64().unwrap() as u32,
            child,
            threads,
        }
    }

    pub fn tid(&self, name: &str) -> u32 {
        self.threads[name]
    }

    /// The ids of the threads whose names start with `prefix`.
    pub fn tids_named(&self, prefix: &str) -> Vec<u32> {
        self.threads
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, &tid)| tid)
            .collect()
    }
}

pub fn gilsample() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gilsample"))
}

/// Runs `cmd` to its end; fails the test with what it printed on stderr where it did not succeed.
pub fn succeeded(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs gilsample to completion and returns its status, stderr and the output directory.
pub fn run(args: &[&str], out_dir: &Path) -> (ExitStatus, String) {
    let out = gilsample()
        .args(args)
        .arg("-o")
        .arg(out_dir)
        .arg("--quiet")
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The trace of a recording of `scenario` (the workload's arguments) on interpreter `label`, for
/// `seconds`, with `check` set in gilsample's environment (`record_checked_into`).
pub fn record_checked(label: &str, scenario: &[&str], seconds: &str, check: &str) -> Trace {
    let dir = tempfile::tempdir().unwrap();
    record_checked_into(label, scenario, &["--duration", seconds], check, dir.path());
    Trace::load_single(dir.path())
}

/// Records `scenario` (the workload's arguments) on interpreter `label` into `dir`, with gilsample's
/// `args` and `check` set in its environment: one of its `GILSAMPLE_CHECK_*` switches, which make
/// the sampler judge one of its rules live (counting the verdicts in the trace) or save what a test
/// judges it on.
pub fn record_checked_into(label: &str, scenario: &[&str], args: &[&str], check: &str, dir: &Path) {
    let python = interpreter(label);
    let workload = Workload::start(&python, scenario);
    let pid = workload.pid.to_string();
    let out = gilsample()
        .args(["--pid", &pid])
        .args(args)
        .args(["--quiet", "-o"])
        .arg(dir)
        .env(check, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// For a trace recorded with one of the `GILSAMPLE_CHECK_*` switches that judge a read-sparing
/// rule live: asserts that the rule left readings out (the count at `left_out_key`), that the check
/// judged some (`check_key`'s `judged`) and that no more of them refuted it than `refutations_allowed`
/// grants for that many judged (`|_| 0` for a rule the kernel makes exact). Returns how many were
/// judged.
pub fn assert_rule_held(
    label: &str,
    trace: &Trace,
    (left_out_key, check_key): (&str, &str),
    refutations_allowed: fn(u64) -> u64,
) -> u64 {
    let left_out = trace.other(left_out_key).as_u64();
    let check = trace.other(check_key);
    let judged = check["judged"].as_u64().unwrap_or(0);
    assert!(
        left_out.is_some_and(|n| n > 0) && judged > 0,
        "{label}: the rule had nothing to judge ({left_out_key} {left_out:?}, {check_key} {check})"
    );
    let refuted = check["refuted"].as_u64();
    let allowed = refutations_allowed(judged);
    assert!(
        refuted.is_some_and(|n| n <= allowed),
        "{label}: of {judged} readings the rule left out and the check took anyway, {refuted:?} \
         refuted it (at most {allowed} may)"
    );
    judged
}

/// `gilsample report --json` on `inputs`: the document and stderr.
pub fn report_json(inputs: &[&Path]) -> (Value, String) {
    let out = gilsample()
        .arg("report")
        .args(inputs)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// `gilsample report` on `dir`: its exit status, stdout and stderr.
pub fn report_text(dir: &Path) -> (Option<i32>, String, String) {
    let out = gilsample().arg("report").arg(dir).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A complete event of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub name: String,
    pub tid: u32,
    pub ts: f64,
    pub dur: f64,
}

/// A parsed trace file.
pub struct Trace {
    pub value: Value,
}

impl Trace {
    pub fn load(path: &Path) -> Trace {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
        Trace { value }
    }

    /// The only GIL_*.json in `dir`; also checks no partial file was left behind.
    pub fn load_single(dir: &Path) -> Trace {
        let names = file_names(dir);
        assert!(
            !names.iter().any(|n| n.ends_with(".partial")),
            "partial files left: {names:?}"
        );
        let traces: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("GIL_") && n.ends_with(".json"))
            .collect();
        assert_eq!(
            traces.len(),
            1,
            "expected one trace in {}: {names:?}",
            dir.display()
        );
        Trace::load(&dir.join(traces[0]))
    }

    pub fn events(&self) -> Vec<Event> {
        self.value["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| Event {
                name: e["name"].as_str().unwrap().to_string(),
                tid: e["tid"].as_u64().unwrap() as u32,
                ts: e["ts"].as_f64().unwrap(),
                dur: e["dur"].as_f64().unwrap(),
            })
            .collect()
    }

    /// Total µs per (tid, event name).
    pub fn totals(&self) -> BTreeMap<(u32, String), f64> {
        let mut totals = BTreeMap::new();
        for e in self.events() {
            *totals.entry((e.tid, e.name.clone())).or_insert(0.0) += e.dur;
        }
        totals
    }

    pub fn total(&self, tid: u32, name: &str) -> f64 {
        self.totals()
            .get(&(tid, name.to_string()))
            .copied()
            .unwrap_or(0.0)
    }

    pub fn other(&self, key: &str) -> &Value {
        &self.value["otherData"][key]
    }

    /// The recording's length in µs, from its metadata.
    pub fn span_us(&self) -> f64 {
        let start = self.other("recording_start_monotonic_ns").as_f64().unwrap();
        let end = self.other("recording_end_monotonic_ns").as_f64().unwrap();
        (end - start) / 1000.0
    }
}

/// The pid in a workload's `READY {...}` line.
pub fn ready_pid(line: &str) -> u32 {
    let ready: serde_json::Value =
        serde_json::from_str(line.trim().strip_prefix("READY ").unwrap()).unwrap();
    ready["pid"].as_u64().unwrap() as u32
}

/// Every sample of a saved stream (`--save-samples`), and the inference context its header carries.
pub fn saved_samples(
    path: &Path,
) -> (
    gilsample::infer::sample::SampleContext,
    Vec<gilsample::infer::sample::Sample>,
) {
    let mut reader = gilsample::stream::StreamReader::open(path).unwrap();
    let context = reader.header().context.clone();
    let mut samples = Vec::new();
    while let Some(item) = reader.next().unwrap() {
        if let gilsample::stream::Item::Sample(s) = item {
            samples.push(s);
        }
    }
    (context, samples)
}

/// The names of the entries of `dir`, hidden ones included.
pub fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The `.partial` files in `dir`.
pub fn partial_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".partial"))
        .collect()
}
