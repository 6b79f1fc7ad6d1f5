//! Saved sample streams replayed: a live recording on every expected interpreter replays into the
//! same take/hold/drop slices and the same summary, and the golden streams under fixtures/samples/
//! replay into their expected traces (`GILSAMPLE_BLESS=1` rewrites those, so a rule change shows as
//! a diff of the expected files).

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Trace, Workload, gilsample, interpreter, saved_samples};
use gilsample::infer::classify::asleep_elsewhere;
use gilsample::infer::engine::Engine;
use gilsample::infer::sample::Sample;
use gilsample::observed::GilWaitRanges;
use serde_json::Value;

/// The GIL slices of a trace, as (tid, name, ts, dur) with ts and dur as the file writes them.
fn gil_slices(trace: &Trace) -> Vec<(u64, String, String, String)> {
    slice_args(trace)
        .into_iter()
        .map(|(slice, _)| slice)
        .collect()
}

/// Each GIL slice (as `gil_slices` has it) with its `args`, less the source line of a native call's
/// call site: a live recording reads it from the target's files, a replay has none to read.
fn slice_args(trace: &Trace) -> Vec<((u64, String, String, String), Value)> {
    let events = trace.value["traceEvents"].as_array().unwrap();
    let slices = events.iter().filter(|e| {
        e["ph"] == "X"
            && matches!(
                e["name"].as_str(),
                Some("take_gil" | "hold_gil" | "drop_gil")
            )
    });
    let with_args = slices.map(|e| {
        let mut args = e["args"].clone();
        if let Some(site) = args.get_mut("call_site").and_then(Value::as_object_mut) {
            site.remove("source");
        }
        let slice = (
            e["tid"].as_u64().unwrap(),
            e["name"].as_str().unwrap().to_string(),
            e["ts"].to_string(),
            e["dur"].to_string(),
        );
        (slice, args)
    });
    with_args.collect()
}

/// The summary gilsample printed, with the trace's path (which differs between runs) taken out,
/// and without the line a recording prints when it starts.
fn summary(output: &Output, trace: &Path) -> String {
    String::from_utf8_lossy(&output.stderr)
        .replace(&trace.display().to_string(), "TRACE")
        .lines()
        // The live run's start lines (the process, how the recording ends), which a replay has not.
        .filter(|l| !l.starts_with("gilsample: recording "))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn replay(samples: &Path, out: &Path, extra: &[&str]) -> Output {
    let output = gilsample()
        .arg("replay")
        .arg(samples)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn live_recording_replays_identically(label: &str) {
    let python = interpreter(label);
    let workload = Workload::start(&python, &["dispatch", "--threads", "3"]);
    let dir = tempfile::tempdir().unwrap();
    // The stream and the replay go into directories that do not exist yet: made as -o's is.
    let (live, samples) = (
        dir.path().join("live.json"),
        dir.path().join("streams/run.gilsamples"),
    );
    let recorded = gilsample()
        .args(["--pid", &workload.pid.to_string(), "--duration", "1"])
        .arg("--save-samples")
        .arg(&samples)
        .arg("-o")
        .arg(&live)
        .output()
        .unwrap();
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let replayed_path = dir.path().join("replays/replayed.json");
    let replayed = replay(&samples, &replayed_path, &[]);
    // A directory is not a file name: refused, with one that would do.
    let into_dir = gilsample()
        .arg("replay")
        .arg(&samples)
        .arg("-o")
        .arg(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&into_dir.stderr);
    assert!(!into_dir.status.success(), "{said}");
    assert!(
        said.contains("it is a directory, and this writes one file")
            && said.contains("_rank_0.replay.json"),
        "{said}"
    );
    let (live_trace, replayed_trace) = (Trace::load(&live), Trace::load(&replayed_path));
    let slices = gil_slices(&live_trace);
    assert!(
        slices.iter().any(|s| s.1 == "hold_gil") && slices.iter().any(|s| s.1 == "take_gil"),
        "the live run saw no contention: {slices:?}"
    );
    assert_eq!(gil_slices(&replayed_trace), slices);
    // And each slice's args: the stacks filed into it, its hold's kind.
    let (live_args, replayed_args) = (slice_args(&live_trace), slice_args(&replayed_trace));
    if let Some(((slice, live), (_, replayed))) =
        live_args.iter().zip(&replayed_args).find(|(a, b)| a != b)
    {
        panic!("{slice:?} has args {live} live and {replayed} replayed");
    }
    assert_eq!(
        summary(&replayed, &replayed_path),
        summary(&recorded, &live)
    );
    // The metadata describes the same process and the same sampler.
    for key in [
        "pid",
        "python_version",
        "samples",
        "thread_samples",
        "handoffs_seen",
    ] {
        assert_eq!(
            replayed_trace.other(key),
            live_trace.other(key),
            "otherData.{key}"
        );
    }
}

macro_rules! interpreter_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn live_recording_replays_identically() {
                    super::live_recording_replays_identically($label)
                }
            }
        )*
    };
}

every_expected_interpreter!(interpreter_tests);

fn golden_cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/samples");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("samples.gilsamples").exists())
        .collect();
    cases.sort();
    cases
}

/// What a golden case's replay gives: its GIL slices as JSON lines, and its summary.
fn replay_case(case: &Path) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.json");
    let output = replay(&case.join("samples.gilsamples"), &out, &["--verbose"]);
    let slices: String = gil_slices(&Trace::load(&out))
        .into_iter()
        .map(|s| serde_json::to_string(&s).unwrap() + "\n")
        .collect();
    (slices, summary(&output, &out))
}

#[test]
fn golden_streams_replay_into_their_expected_traces() {
    let cases = golden_cases();
    assert!(
        cases.len() >= 5,
        "fixtures/samples/ should hold the five golden cases: {cases:?}"
    );
    let bless = std::env::var_os("GILSAMPLE_BLESS").is_some();
    let mut differing = Vec::new();
    for case in &cases {
        let (slices, summary) = replay_case(case);
        let (slices_file, summary_file) = (
            case.join("expected-slices.jsonl"),
            case.join("expected-summary.txt"),
        );
        if bless {
            std::fs::write(&slices_file, &slices).unwrap();
            std::fs::write(&summary_file, &summary).unwrap();
            continue;
        }
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("{}: {e} (GILSAMPLE_BLESS=1 writes it)", p.display()))
        };
        if read(&slices_file) != slices || read(&summary_file) != summary {
            let actual = case.join("actual-slices.jsonl");
            std::fs::write(&actual, &slices).unwrap();
            std::fs::write(case.join("actual-summary.txt"), &summary).unwrap();
            differing.push(case.display().to_string());
        }
    }
    assert!(
        differing.is_empty(),
        "replays differ from the expected files (actual-*.jsonl/txt written beside them; diff them, \
         and if the change is intended rerun with GILSAMPLE_BLESS=1): {differing:?}"
    );
}

/// The spans a trace's "sampler saw nothing" track marks, (from, to) in the file's µs.
fn gaps(trace: &Trace) -> Vec<(f64, f64)> {
    let events = trace.value["traceEvents"].as_array().unwrap();
    let marks: Vec<(f64, u64)> = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "sampler saw nothing")
        .map(|e| {
            (
                e["ts"].as_f64().unwrap(),
                e["args"]["gap"].as_u64().unwrap(),
            )
        })
        .collect();
    // Each gap is written as its start (1), then its end (0).
    marks
        .chunks(2)
        .map(|pair| {
            assert_eq!((pair[0].1, pair[1].1), (1, 0), "{pair:?}");
            (pair[0].0, pair[1].0)
        })
        .collect()
}

#[test]
fn gaps_in_the_samples_lie_between_slices_and_report_leaves_them_out() {
    // Golden streams whose sampler fell behind now and then: the time it saw nothing of is marked,
    // no slice of any thread reaches into it, and the answer's window is the rest.
    let mut gaps_seen = 0;
    for case in golden_cases() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("trace.json");
        replay(&case.join("samples.gilsamples"), &out, &[]);
        let trace = Trace::load(&out);
        let gaps = gaps(&trace);
        gaps_seen += gaps.len();
        let events = trace.value["traceEvents"].as_array().unwrap();
        for slice in events.iter().filter(|e| e["ph"] == "X") {
            let (ts, dur) = (
                slice["ts"].as_f64().unwrap(),
                slice["dur"].as_f64().unwrap(),
            );
            for &(from, to) in &gaps {
                assert!(to > from, "{}: gap {from}..{to}", case.display());
                assert!(
                    ts + dur <= from || ts >= to,
                    "{}: {slice} reaches into the gap {from}..{to}",
                    case.display()
                );
            }
        }
        let (report, _) = common::report_json(&[&out]);
        let process = &report["processes"][0];
        let unseen_s = process["unseen_s"].as_f64().unwrap();
        let [start, end] = ["recording_start_monotonic_ns", "recording_end_monotonic_ns"]
            .map(|key| trace.other(key).as_f64().unwrap());
        let to_trace = trace
            .other("monotonic_to_trace_offset_ns")
            .as_f64()
            .unwrap();
        let (start, end) = ((start + to_trace) / 1000.0, (end + to_trace) / 1000.0);
        let in_window_us: f64 = gaps
            .iter()
            .map(|&(from, to)| (to.min(end) - from.max(start)).max(0.0))
            .sum();
        assert!(
            (unseen_s * 1e6 - in_window_us).abs() <= 1.0,
            "{}: {unseen_s} s unseen, the gaps {in_window_us} µs",
            case.display()
        );
    }
    assert!(
        gaps_seen > 0,
        "no golden stream has a gap: this test tests nothing"
    );
}

#[test]
fn every_golden_case_says_how_it_was_made() {
    for case in golden_cases() {
        let readme = std::fs::read_to_string(case.join("README.md")).unwrap();
        for what in ["gilsample", "Python", "kernel"] {
            assert!(readme.contains(what), "{}: no {what}", case.display());
        }
        let slices = std::fs::read_to_string(case.join("expected-slices.jsonl")).unwrap();
        let names: Vec<Value> = slices
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()[1].clone())
            .collect();
        assert!(
            names.iter().any(|n| n == "hold_gil"),
            "{}: no hold_gil slice",
            case.display()
        );
    }
}

#[test]
fn explain_writes_every_thread_of_every_sample_with_what_decided_it() {
    let case = golden_cases()
        .into_iter()
        .find(|c| c.ends_with("dispatch-3.12"))
        .expect("the dispatch-3.12 golden case");
    let dir = tempfile::tempdir().unwrap();
    let (out, why) = (dir.path().join("trace.json"), dir.path().join("why.jsonl"));
    let why_arg = why.to_str().unwrap();
    replay(
        &case.join("samples.gilsamples"),
        &out,
        &["--explain", why_arg],
    );
    let lines: Vec<Value> = std::fs::read_to_string(&why)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let trace = Trace::load(&out);
    assert_eq!(
        lines.len() as u64,
        trace.other("thread_samples").as_u64().unwrap(),
        "one line per thread per sample"
    );
    for key in [
        "t_ns", "tid", "kernel", "holds", "switch", "locked", "waiters", "state", "basis", "rule",
    ] {
        assert!(lines.iter().all(|l| l.get(key).is_some()), "{key} missing");
    }
    // The bases the rules give on this workload, the inferring ones among them.
    let bases: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l["basis"].as_str().unwrap()).collect();
    for basis in [
        "Direct",
        "RunningByGilMutex",
        "Ambiguous",
        "RunningReleased",
    ] {
        assert!(bases.contains(basis), "no {basis} in {bases:?}");
    }
    // Kernel states are data, not text to parse: a futex sleep names its call and its address.
    assert!(
        lines
            .iter()
            .any(|l| l["kernel"]["syscall"] == "futex" && l["kernel"]["arg0"].is_u64()),
        "no futex sleep in the explained kernel states"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l["basis"] == "Ambiguous")
            .all(|l| l["rule"] == 9 && l["after"].is_string()),
        "a held-back sample without its rule and the state it follows"
    );
    assert!(
        lines.iter().any(|l| l["waiters"].is_array()),
        "no waiter counts"
    );
}

#[test]
fn skipping_the_recount_where_it_decides_nothing_changes_no_record() {
    // The sampler reads glibc's waiter counts a second time only where `Engine::wants_recount`
    // says the census needs it. On every golden stream (recorded with a recount wherever a thread
    // ran without the GIL), dropping the recounts it would now skip must leave every record as it
    // was, while some are skipped.
    let (mut skipped, mut kept) = (0, 0);
    for case in golden_cases() {
        let (context, samples) = saved_samples(&case.join("samples.gilsamples"));
        let (mut all, mut asked) = (Engine::new(context.clone()), Engine::new(context));
        let (mut from_all, mut from_asked) = (Vec::new(), Vec::new());
        for sample in &samples {
            all.step(sample, &mut |r| from_all.push(r));
            let mut sample = sample.clone();
            if sample.waiters_again.is_some() {
                if asked.wants_recount(&sample) {
                    kept += 1;
                } else {
                    sample.waiters_again = None;
                    skipped += 1;
                }
            }
            asked.step(&sample, &mut |r| from_asked.push(r));
        }
        all.finish(&mut |r| from_all.push(r));
        asked.finish(&mut |r| from_asked.push(r));
        assert!(
            from_all == from_asked,
            "{}: the records differ",
            case.display()
        );
    }
    assert!(skipped > 0 && kept > 0, "skipped {skipped}, kept {kept}");
}

#[test]
fn parking_idle_threads_changes_no_record() {
    use gilsample::infer::intervals::GilState::Released;
    // The engine leaves threads asleep outside the GIL unstepped until it must look at them again
    // (infer/parked.rs). Every golden stream, stepped with parking and without, must give the very
    // same records in the same order, while parking leaves some thread-samples unstepped.
    let mut parked = 0;
    for case in golden_cases() {
        let (context, samples) = saved_samples(&case.join("samples.gilsamples"));
        let (mut with, mut without) = (Engine::new(context.clone()), Engine::new(context));
        without.without_parking();
        let (mut from_with, mut from_without) = (Vec::new(), Vec::new());
        for sample in &samples {
            with.step(sample, &mut |r| from_with.push(r));
            without.step(sample, &mut |r| from_without.push(r));
            // What parking leaves out of `decided` is a thread that stayed released.
            let mut kept = with.decided().iter().peekable();
            for d in without.decided() {
                if kept.next_if(|k| *k == d).is_none() {
                    let stayed = (d.previous, d.state) == (Some(Released), Released);
                    assert!(stayed, "{}: {d:?} left out", case.display());
                }
            }
            assert!(
                kept.next().is_none(),
                "{}: parking decided more",
                case.display()
            );
        }
        with.finish(&mut |r| from_with.push(r));
        without.finish(&mut |r| from_without.push(r));
        assert_eq!(without.parked_thread_samples(), 0);
        gilsample::stderr_line!(
            "{}: {} parked",
            case.display(),
            with.parked_thread_samples()
        );
        parked += with.parked_thread_samples();
        assert!(
            from_with == from_without,
            "{}: the records differ",
            case.display()
        );
    }
    assert!(parked > 0, "no golden stream has a thread to park");
}

/// `Sample::unchanged_outside` as the sampler's contract gives it, worked out from two samples in a
/// row: the same thread with the same kernel reading at that index, asleep outside the GIL's waits,
/// neither the holder nor the mutex's owner, no schedstat or flags.
fn marks_of(before: Option<&Sample>, sample: &Sample, ranges: &GilWaitRanges) -> Vec<bool> {
    let Some(before) = before.filter(|b| b.threads.len() == sample.threads.len()) else {
        return Vec::new();
    };
    let pairs = before.threads.iter().zip(&sample.threads);
    pairs
        .map(|(was, now)| {
            (was.tid, was.tstate, was.kernel) == (now.tid, now.tstate, now.kernel)
                && now.kernel.is_some_and(|k| asleep_elsewhere(&k, ranges))
                && now.tstate != sample.word.last_holder
                && sample.mutex_owner != Some(now.their_tid)
                && (now.schedstat, now.gil_flags) == (None, None)
        })
        .collect()
}

#[test]
fn leaving_unchanged_idle_threads_unlooked_at_changes_no_record() {
    // The live sampler marks the idle threads it left unread (`Sample::unchanged_outside`), and
    // the engine, its quiet watch and its census then skip their entries. Every golden stream,
    // stepped with those marks and without, must give the very same records in the same order.
    let mut marked = 0;
    for case in golden_cases() {
        let (context, samples) = saved_samples(&case.join("samples.gilsamples"));
        let ranges = context.ranges;
        let (mut with, mut without) = (Engine::new(context.clone()), Engine::new(context));
        let (mut from_with, mut from_without) = (Vec::new(), Vec::new());
        let mut before: Option<&Sample> = None;
        for sample in &samples {
            let mut sample_marked = sample.clone();
            sample_marked.unchanged_outside = marks_of(before, sample, &ranges);
            marked += sample_marked
                .unchanged_outside
                .iter()
                .filter(|m| **m)
                .count();
            assert_eq!(
                with.wants_recount(&sample_marked),
                without.wants_recount(sample),
                "{}: the recount asked differs",
                case.display()
            );
            assert_eq!(
                with.wants_word_again(&sample_marked),
                without.wants_word_again(sample)
            );
            with.step(&sample_marked, &mut |r| from_with.push(r));
            without.step(sample, &mut |r| from_without.push(r));
            assert_eq!(with.decided(), without.decided(), "{}", case.display());
            before = Some(sample);
        }
        with.finish(&mut |r| from_with.push(r));
        without.finish(&mut |r| from_without.push(r));
        assert!(
            from_with == from_without,
            "{}: the records differ",
            case.display()
        );
    }
    assert!(marked > 0, "no golden stream has an idle thread to mark");
}
