//! The quiet rate, live on every interpreter of the suite (infer/quiet.rs): a target where nothing
//! GIL-related changes is sampled at a fifth of the rate after 50 ticks, and the trace says so; a
//! contended one never skips a tick right after a wait; `--fixed-rate` keeps the full rate always. That the first change after a
//! quiet stretch brings the full rate back is the engine's, tested in infer/quiet.rs and engine.rs.

#[macro_use]
mod common;

use common::{Trace, Workload, interpreter, run, saved_samples};
use gilsample::infer::engine::Engine;
use gilsample::infer::intervals::GilState;
use gilsample::infer::quiet::QUIET_AFTER;
use gilsample::infer::sample::{Sample, SampleContext};

/// The "sampling rate" counter's values, in the order written.
fn rates(trace: &Trace) -> Vec<u64> {
    trace.value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "sampling rate")
        .map(|e| e["args"]["Hz"].as_u64().unwrap())
        .collect()
}

/// A recording of `workload_args` for 0.5 s at 10 kHz with its samples saved: the trace, and the
/// saved samples.
fn record(
    label: &str,
    workload_args: &[&str],
    extra: &[&str],
) -> (Trace, Vec<Sample>, SampleContext) {
    record_when(label, workload_args, extra, |_| {})
}

/// `record`, started once `ready` returns for the workload's pid.
fn record_when(
    label: &str,
    workload_args: &[&str],
    extra: &[&str],
    ready: impl Fn(u32),
) -> (Trace, Vec<Sample>, SampleContext) {
    let python = interpreter(label);
    let workload = Workload::start(&python, workload_args);
    ready(workload.pid);
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("run.gilsamples");
    let pid = workload.pid.to_string();
    let mut args = vec!["--pid", &pid, "--duration", "0.5", "--rate", "10khz"];
    args.extend(["--save-samples", stream.to_str().unwrap()]);
    args.extend(extra);
    let (status, stderr) = run(&args, dir.path());
    assert!(status.success(), "{label}: {stderr}");
    let (context, samples) = saved_samples(&stream);
    let trace = Trace::load_single(dir.path());
    (trace, samples, context)
}

fn skips(samples: &[Sample]) -> Vec<u32> {
    samples.iter().map(|s| s.skipped_periods).collect()
}

/// Waits until every thread of `pid` sleeps (state `S` in /proc): READY comes before the main thread
/// and the idle ones have blocked, and a thread still running (or preempted) when sampling starts
/// would end the quiet stretch when it blocks. Polls the kernel's own account: readiness, not time.
fn wait_until_every_thread_sleeps(pid: u32) {
    let asleep = || -> Result<bool, String> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
        let mut states = String::new();
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            states.push(state.unwrap_or('?'));
        }
        Ok(states.chars().all(|c| c == 'S'))
    };
    for _ in 0..60_000 {
        if asleep().unwrap_or_else(|e| panic!("process {pid}: {e}")) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("the threads of process {pid} never all slept");
}

fn an_idle_target_is_sampled_at_the_quiet_rate(label: &str) {
    // Three threads blocked on an Event and a main thread waiting too: nothing changes.
    let (trace, samples, _) = record_when(
        label,
        &["contention", "--threads", "0", "--idle", "3"],
        &[],
        wait_until_every_thread_sleeps,
    );
    let skipped = skips(&samples);
    // The first sample has nothing to compare with; after the QUIET_AFTER quiet ones that follow it,
    // every tick skips.
    let quiet_from = QUIET_AFTER as usize + 1;
    assert!(
        skipped.len() > quiet_from,
        "{label}: {} samples",
        skipped.len()
    );
    assert!(
        skipped[..quiet_from].iter().all(|&s| s == 0),
        "{label}: the first {quiet_from} ticks are at the full rate"
    );
    assert!(
        skipped[quiet_from..].iter().all(|&s| s == 4),
        "{label}: quiet from then on, one tick in five: {:?}",
        &skipped[quiet_from..skipped.len().min(quiet_from + 20)]
    );
    assert_eq!(rates(&trace), vec![10_000, 2_000], "{label}");
    let quiet = trace.other("samples_at_quiet_rate").as_u64().unwrap();
    assert_eq!(quiet as usize, skipped.len() - quiet_from, "{label}");
    assert_eq!(trace.other("rate_while_quiet_hz"), 2_000, "{label}");
}

fn a_contended_target_skips_no_tick_right_after_a_wait(label: &str) {
    // Two spinners: one holds the GIL and the other waits for it, nearly always. A tick may skip
    // periods only after 50 samples in which no thread waited, handed off or was undecided (a
    // loaded machine can keep the waiter off a CPU long enough, still "running" to the kernel):
    // never right after a wait.
    let (trace, samples, context) = record(label, &["contention", "--threads", "2"], &[]);
    let mut engine = Engine::new(context);
    // Every thread decided at every sample: a thread missing from `decided` is then undecided.
    engine.without_parking();
    let mut waited = Vec::with_capacity(samples.len());
    for sample in &samples {
        engine.step(sample, &mut |_| {});
        let decided = engine.decided();
        let undecided = decided.len() < sample.threads.len();
        waited.push(
            undecided
                || decided
                    .iter()
                    .any(|d| matches!(d.state, GilState::Take | GilState::Drop)),
        );
    }
    assert!(
        waited.iter().filter(|&&w| w).count() > QUIET_AFTER as usize,
        "{label}: no contention"
    );
    for (i, sample) in samples.iter().enumerate().skip(1) {
        assert!(
            sample.skipped_periods == 0 || !waited[i - 1],
            "{label}: sample {i} skipped periods right after a wait"
        );
    }
    let quiet = samples.iter().filter(|s| s.skipped_periods > 0).count() as u64;
    assert_eq!(trace.other("samples_at_quiet_rate"), quiet, "{label}");
    assert_eq!(rates(&trace)[0], 10_000, "{label}");
}

macro_rules! adaptive_rate_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn an_idle_target_is_sampled_at_the_quiet_rate() {
                    super::an_idle_target_is_sampled_at_the_quiet_rate($label)
                }
                #[test]
                fn a_contended_target_skips_no_tick_right_after_a_wait() {
                    super::a_contended_target_skips_no_tick_right_after_a_wait($label)
                }
            }
        )*
    };
}

every_expected_interpreter!(adaptive_rate_tests);

#[test]
fn fixed_rate_samples_an_idle_target_at_the_full_rate() {
    let idle = ["contention", "--threads", "0", "--idle", "3"];
    let (trace, samples, _) = record("3.12", &idle, &["--fixed-rate"]);
    let skipped = skips(&samples);
    assert!(skipped.len() > QUIET_AFTER as usize);
    assert!(skipped.iter().all(|&s| s == 0));
    assert_eq!(rates(&trace), vec![10_000]);
}
