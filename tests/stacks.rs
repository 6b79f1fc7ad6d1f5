//! Python stacks in the slices' args, on every interpreter of the suite: a spinner's `hold_gil`
//! slices name the function it runs, its `take_gil` slices the function it waits in, and
//! `--no-stacks` leaves them out.

#[macro_use]
mod common;

use common::{Trace, Workload, interpreter, run};
use serde_json::Value;

/// The slices named `name` of thread `tid` with their args.
fn slices<'t>(trace: &'t Trace, tid: u32, name: &str) -> Vec<&'t Value> {
    trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == name && e["tid"] == tid)
        .collect()
}

/// The innermost frame of a slice's stack, where it has one.
fn innermost(slice: &Value) -> Option<&str> {
    slice["args"]["stack"][0].as_str()
}

fn record_contention(label: &str, extra: &[&str]) -> (Workload, Trace) {
    record(label, &["contention", "--threads", "3"], extra)
}

/// 0.5 s of the workload `scenario` (fixtures/workloads/gil_workload.py) on `label`'s interpreter,
/// recorded with `extra` arguments.
fn record(label: &str, scenario: &[&str], extra: &[&str]) -> (Workload, Trace) {
    let python = interpreter(label);
    let workload = Workload::start(&python, scenario);
    let dir = tempfile::tempdir().unwrap();
    let pid = workload.pid.to_string();
    let mut args = vec!["--pid", &pid, "--duration", "0.5"];
    args.extend(extra);
    let (status, stderr) = run(&args, dir.path());
    assert!(status.success(), "{label}: {stderr}");
    let trace = Trace::load_single(dir.path());
    (workload, trace)
}

fn spinners_hold_and_wait_in_spin(label: &str) {
    let (workload, trace) = record_contention(label, &[]);
    // `spin` is the function each spinner runs (fixtures/workloads/gil_workload.py), at one of its
    // lines; the frames below it are threading's.
    let in_spin = |frame: &str| {
        frame.starts_with("spin (")
            && frame.contains("gil_workload.py:")
            && frame.ends_with(|c: char| c.is_ascii_digit() || c == ')')
    };
    for tid in workload.tids_named("spinner-") {
        for name in ["hold_gil", "take_gil"] {
            let all = slices(&trace, tid, name);
            let with_stack: Vec<&&Value> = all.iter().filter(|s| innermost(s).is_some()).collect();
            assert!(
                !with_stack.is_empty(),
                "{label}: no {name} slice of {tid} has a stack (of {})",
                all.len()
            );
            for slice in &with_stack {
                // Innermost first: `spin`, or `Event.is_set` (the loop's condition, where the
                // interpreter also lets the GIL go) called from `spin`.
                let stack: Vec<&str> = slice["args"]["stack"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap())
                    .collect();
                let spin_at = stack.iter().position(|f| in_spin(f));
                let called_from_spin = match spin_at {
                    Some(0) => true,
                    Some(1) => stack[0].contains("is_set (") && stack[0].contains("threading.py:"),
                    _ => false,
                };
                assert!(called_from_spin, "{label}: {name} of {tid}: {stack:?}");
                assert!(
                    stack.last().unwrap().contains("_bootstrap (")
                        && stack.last().unwrap().contains("threading.py:"),
                    "{label}: {name} stack does not end in threading's bootstrap: {stack:?}"
                );
            }
        }
    }
    assert_eq!(trace.other("stacks").as_str(), Some("read"), "{label}");
    assert!(trace.other("stacks_read").as_u64().unwrap() > 0, "{label}");
}

/// A hold that moved from one function to another says so, with each stack and its samples.
fn a_hold_that_moved_lists_its_stacks(label: &str) {
    let python = common::interpreter_running(label, "stack_workload.py");
    let workload = Workload::start(&python, &[]);
    let dir = tempfile::tempdir().unwrap();
    let pid = workload.pid.to_string();
    let (status, stderr) = run(&["--pid", &pid, "--duration", "0.5"], dir.path());
    assert!(status.success(), "{label}: {stderr}");
    let trace = Trace::load_single(dir.path());
    let holds = slices(&trace, workload.tid("phases"), "hold_gil");
    // The stacks a hold that moved lists: each seen in some samples.
    let seen_in = |hold: &Value, function: &str| {
        hold["args"]["stacks"].as_array().is_some_and(|stacks| {
            stacks.iter().any(|s| {
                s["samples"].as_u64().unwrap() > 0
                    && s["stack"][0]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("{function} ("))
            })
        })
    };
    // One hold runs through both phases. Not necessarily the first that moved: on a loaded
    // machine a gap in the samples can end a hold between the two (docs/classification.md).
    assert!(
        holds.iter().any(|h| h["args"]["stack_changed"] == true
            && seen_in(h, "in_phase_a")
            && seen_in(h, "in_phase_b")),
        "{label}: no hold_gil slice lists both phases' stacks: {holds:?}"
    );
}

/// Workers that hand the GIL round every few samples, each hold in the same code: every hold keeps
/// its own stack, though the sampler reads the next before the trace has written the last (before
/// format 5's marks, the trace summed a hold's stack into the one before, and 5% of holds had none).
fn each_hold_keeps_its_own_stack(label: &str) {
    let (_workload, trace) = record(label, &["queue", "--threads", "3"], &[]);
    // A read torn by the target's own writes gives no stack, and one can land where the thread has
    // no Python frame to show: a hundredth of the holds may go without (before format 5's marks,
    // 3% to 10% of them did, on every interpreter of the suite).
    let torn = trace.other("stack_reads_torn").as_u64().unwrap();
    // The workers are the producer's threads, named in the trace only.
    let events = trace.value["traceEvents"].as_array().unwrap();
    let workers = events.iter().filter(|e| {
        e["name"] == "thread_name"
            && e["args"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("worker-"))
    });
    let workers: std::collections::BTreeSet<u32> =
        workers.map(|e| e["tid"].as_u64().unwrap() as u32).collect();
    let holds: Vec<&Value> = workers
        .iter()
        .flat_map(|&tid| slices(&trace, tid, "hold_gil"))
        .collect();
    let without: Vec<&&Value> = holds.iter().filter(|h| innermost(h).is_none()).collect();
    assert!(
        !holds.is_empty(),
        "{label}: none of {workers:?} held the GIL"
    );
    assert!(
        without.len() as u64 <= torn + holds.len() as u64 / 100,
        "{label}: {} of {} holds have no stack, {torn} reads torn: {:?}",
        without.len(),
        holds.len(),
        &without[..without.len().min(3)]
    );
}

/// A spinner of the `bench` workload lets the GIL go at its loop's back edge, a jump that 3.10,
/// 3.11 and 3.12 compile without a line: its waits still show one (on 3.10 and 3.11 the loop
/// head's, src/python/back_jumps.rs).
fn waits_at_a_loops_back_edge_have_a_line(label: &str) {
    let (workload, trace) = record(label, &["bench", "--threads", "3"], &[]);
    let version = trace.other("python_version").as_str().unwrap().to_string();
    let waits: Vec<&str> = workload
        .tids_named("spinner-")
        .into_iter()
        .flat_map(|tid| slices(&trace, tid, "take_gil"))
        .filter_map(innermost)
        .collect();
    assert!(!waits.is_empty(), "{label}: no spinner's wait has a stack");
    let has_line = |frame: &&str| {
        let (_, at) = frame.rsplit_once(':').unwrap_or_default();
        at.strip_suffix(')')
            .is_some_and(|n| n.parse::<u32>().is_ok())
    };
    let without: Vec<&&str> = waits.iter().filter(|f| !has_line(f)).collect();
    assert!(
        without.is_empty(),
        "{label} ({version}): {} of {} waits show no line: {:?}",
        without.len(),
        waits.len(),
        &without[..without.len().min(3)]
    );
}

macro_rules! stack_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn spinners_hold_and_wait_in_spin() { super::spinners_hold_and_wait_in_spin($label) }
                #[test]
                fn a_hold_that_moved_lists_its_stacks() { super::a_hold_that_moved_lists_its_stacks($label) }
                #[test]
                fn each_hold_keeps_its_own_stack() { super::each_hold_keeps_its_own_stack($label) }
                #[test]
                fn waits_at_a_loops_back_edge_have_a_line() { super::waits_at_a_loops_back_edge_have_a_line($label) }
            }
        )*
    };
}

every_expected_interpreter!(
    stack_tests,
    sid313d => "sid-3.13d",
    sid315d => "sid-3.15d",
);

#[test]
fn no_stacks_leaves_them_out() {
    let (_workload, trace) = record_contention("3.12", &["--no-stacks"]);
    let with_args = trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        // held_while_blocked slices carry their syscall in args; no slice carries a stack.
        .filter(|e| {
            e["ph"] == "X"
                && (e["args"].get("stack").is_some() || e["args"].get("stacks").is_some())
        })
        .count();
    assert_eq!(with_args, 0);
    assert_eq!(
        trace.other("stacks").as_str(),
        Some("not read: --no-stacks")
    );
    assert_eq!(trace.other("stacks_read").as_u64(), Some(0));
}
