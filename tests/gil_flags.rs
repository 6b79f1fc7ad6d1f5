//! CPython 3.15's own GIL flags (`holds_gil`, `gil_requested`): read on 3.15 and its debug build,
//! agreeing with what memory and the kernel say directly; absent before 3.15.

mod common;

use common::{Trace, record_checked};

fn record(label: &str) -> Trace {
    // Spinners taking turns: each sample has a holder, waiters asleep in take_gil, and some running.
    let scenario = ["contention", "--threads", "3"];
    record_checked(label, &scenario, "0.5", "GILSAMPLE_CHECK_GIL_FLAGS")
}

fn flags_agree_with_direct_evidence(label: &str) {
    let trace = record(label);
    let flags = trace.other("interpreter_gil_flags");
    let agreed = flags["agreed_with_direct_evidence"].as_u64().unwrap();
    let disagreed = flags["disagreed_with_direct_evidence"].as_u64().unwrap();
    // Two reads a few microseconds apart can straddle a hand-off; they agree far more often.
    assert!(agreed > 10 * disagreed, "{label}: {flags}");
    assert!(
        flags["changed_the_rules_answer"].as_u64().unwrap()
            <= flags["decided_take_gil"].as_u64().unwrap(),
        "{label}: {flags}"
    );
}

#[test]
fn sid315_flags_agree_with_direct_evidence() {
    flags_agree_with_direct_evidence("sid-3.15");
}

#[test]
fn sid315d_flags_agree_with_direct_evidence() {
    flags_agree_with_direct_evidence("sid-3.15d");
}

#[test]
fn before_315_there_are_no_flags() {
    for label in ["sid-3.14", "3.13"] {
        let trace = record(label);
        assert!(trace.other("interpreter_gil_flags").is_null(), "{label}");
    }
}
