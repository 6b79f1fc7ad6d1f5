//! Property-based fuzzing of `gilsample report`'s reader and analysis: any bytes are refused or read,
//! never a panic or an endless loop; any well-formed trace is analysed so that every moment of a wait
//! is blamed once (on a holder, or on "no holder seen": the shares add up to the wait) and shares
//! stay within [0, 1].
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs these longer); failures found are persisted in
//! fixtures/fuzz-corpus/ so they are replayed on every run.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Value, json};

use gilsample::report::analyze::analyze;
use gilsample::report::load::load;

fn config(name: &str) -> Config {
    Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            format!(
                "{}/fixtures/fuzz-corpus/{name}.txt",
                env!("CARGO_MANIFEST_DIR")
            )
            .into_boxed_str(),
        )))),
        ..Config::default()
    }
}

fn load_bytes(bytes: &[u8]) -> Option<Vec<gilsample::report::load::ProcessTrace>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("GIL_1_rank_0.json");
    std::fs::write(&path, bytes).unwrap();
    load(&path).ok()
}

fn event() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        Just("take_gil"),
        Just("hold_gil"),
        Just("drop_gil"),
        Just("held_while_blocked"),
        Just("thread_name"),
        Just("other"),
    ];
    let ts = prop_oneof![
        (0u64..1_000_000).prop_map(|v| json!(v)),
        (0u64..1_000_000).prop_map(|v| json!(format!("{v}.5"))),
        Just(json!(-5)),
        Just(json!("1e400")),
        Just(json!(null)),
    ];
    let dur = prop_oneof![(0u64..10_000).prop_map(|v| json!(v)), Just(json!(-1))];
    let ph = prop_oneof![Just("X"), Just("M"), Just("C")];
    (name, ts, dur, 0u64..3, 0u64..5, ph).prop_map(|(name, ts, dur, pid, tid, ph)| {
        json!({"name": name, "ph": ph, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
               "args": {"name": "t", "syscall": "read", "stack": [{"function": "f"}]}})
    })
}

proptest! {
    #![proptest_config(config("report_bytes"))]
    #[test]
    fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Some(processes) = load_bytes(&bytes) {
            for p in &processes {
                let _ = analyze(p);
            }
        }
    }
}

proptest! {
    #![proptest_config(config("report_events"))]
    #[test]
    fn every_wait_is_blamed_once(events in proptest::collection::vec(event(), 0..200)) {
        let text = serde_json::to_vec(&json!({"traceEvents": events})).unwrap();
        if let Some(processes) = load_bytes(&text) {
            for p in &processes {
                let answer = analyze(p);
                prop_assert!((0.0..=1.0).contains(&answer.gil_busy_share));
                prop_assert!(answer.mean_waiters >= 0.0);
                for t in &answer.threads {
                    let blamed: f64 = t.waited_for.iter().map(|h| h.s).sum();
                    prop_assert!((blamed - t.wait_s).abs() < 1e-6, "{} != {}", blamed, t.wait_s);
                    prop_assert!(t.waits.p50_ms <= t.waits.p99_ms && t.waits.p99_ms <= t.waits.max_ms);
                }
            }
        }
    }
}
