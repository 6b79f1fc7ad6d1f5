//! What a trace's `otherData` says about its processes: gilsample's pid, rank, host, the
//! recording's window and how its holds were judged (load.rs puts it into each `ProcessTrace`).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::report::stopped;

/// What `otherData` says of one process: its pid there, and what it says of the recording.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ProcessFacts {
    pub pid: u32,
    pub facts: RecordingFacts,
}

/// What a gilsample trace's `otherData` says of the recording of one process, beside its events:
/// kept whole from the file to the answer (`ProcessTrace::facts`, `ProcessAnswer::facts`). Only
/// rank and host are in `report --json`; the rest decides how the answer is read and said.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RecordingFacts {
    /// Its rank in a distributed job, where the trace says it.
    pub rank: Option<u32>,
    /// The host it ran on, where the trace says it.
    pub host: Option<String>,
    /// Its parent process when its recording began, where the trace says it.
    pub parent_pid: Option<u32>,
    /// Its parent is another process of the same report or summary, on the same host
    /// (`analyze::note_children`): a worker (a DataLoader's, a pool's) of that process. Found among
    /// the answers, not in the trace.
    #[serde(skip)]
    pub parent_among_answers: bool,
    /// Its trace is on the recording host's monotonic clock (`--clock monotonic`), which does not
    /// compare with another host's.
    #[serde(skip)]
    pub monotonic_clock: bool,
    /// Written by the gilsample versions that judge each hold: a hold whose args do not say is
    /// Python code.
    #[serde(skip)]
    pub holds_judged: bool,
    /// The switch interval the trace recorded (`switch_interval_us`).
    #[serde(skip)]
    pub switch_interval_us: Option<u64>,
    /// Threads found waiting, summed over the samples, and of those the ones at samples that
    /// found the GIL free.
    #[serde(skip)]
    pub waiting_samples: Option<(u64, u64)>,
    /// The recording's window on the trace clock (a live view's, for `top`).
    #[serde(skip)]
    pub window_ns: Option<(i128, i128)>,
    /// Which recording this is, the same in its own file and in a merged file that holds it: the
    /// same process given twice is counted once.
    #[serde(skip)]
    pub recording: Option<RecordingId>,
    /// Read from a merged file's `merge.inputs`: a copy of the recording, on the merge's clock;
    /// the recording's own file, where given too, is the one counted.
    #[serde(skip)]
    pub from_merge: bool,
    /// The sampling rate the recording asked for.
    #[serde(skip)]
    pub rate_requested_hz: Option<f64>,
    /// How many samples the recording took of the process, where the trace says it: under
    /// `SAMPLES_TO_TELL`, the answer cannot tell (in the JSON too, for a program reading it).
    pub samples: Option<u64>,
    /// When the process was found stopped (`process_stopped`: "at the start", ...).
    #[serde(skip)]
    pub stopped: Option<String>,
    /// The spans during which it was found stopped, on the trace clock (report/stopped.rs): left
    /// out of every figure.
    #[serde(skip)]
    pub stops_ns: Vec<(i128, i128)>,
    /// The share of one CPU gilsample's sampler took while recording it, where the sampler shared
    /// the machine's cores with it (no `--cpus`: `sampler_cpus` null); on busy cores, the job's time.
    #[serde(skip)]
    pub sampler_cpu_share: Option<f64>,
}

/// A gilsample recording as its `otherData` names it: the pid it recorded (before any merge
/// renumbered it), on which host, from which moment of that host's monotonic clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordingId {
    /// The pid recorded, in the recorder's PID namespace.
    pub pid: u32,
    /// The host it was recorded on.
    pub host: Option<String>,
    /// When the recording started, on that host's monotonic clock.
    pub start_monotonic_ns: i64,
}

/// The file's own `otherData`, then in a merged file each gilsample recording's, which `merge`
/// keeps under `merge.inputs`: its rank, host and how its holds were judged. Not its window: the
/// merge moved its clock. A recording whose pid another input had already (two nodes' pid 7) is
/// under the pid the merge gave it (`renumbered_pids`), as its events are.
pub(super) fn facts(other: &Map<String, Value>) -> Vec<ProcessFacts> {
    let inputs = other
        .get("merge")
        .and_then(|m| m.get("inputs"))
        .and_then(Value::as_array);
    let merged = inputs.into_iter().flatten().filter_map(|input| {
        let mut facts = facts_of(input.get("otherData")?.as_object()?, false)?;
        facts.pid = renumbered(input, facts.pid).unwrap_or(facts.pid);
        facts.facts.from_merge = true;
        Some(facts)
    });
    facts_of(other, true).into_iter().chain(merged).collect()
}

/// The pid `merge` gave an input's process `pid`, where it renumbered it.
fn renumbered(input: &Value, pid: u32) -> Option<u32> {
    input
        .get("renumbered_pids")?
        .as_array()?
        .iter()
        .find(|pair| pair.get("from").and_then(Value::as_u64) == Some(u64::from(pid)))?
        .get("to")?
        .as_u64()
        .and_then(|to| u32::try_from(to).ok())
}

/// gilsample's `otherData` of one recording (None without its pid); its window where `window`
/// (the file's clock is the recording's).
fn facts_of(other: &Map<String, Value>, window: bool) -> Option<ProcessFacts> {
    let pid = other
        .get("pid")
        .and_then(Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())?;
    let int = |key: &str| other.get(key).and_then(Value::as_i64).map(i128::from);
    let text = |key: &str| other.get(key).and_then(Value::as_str).map(str::to_string);
    let host = text("host");
    let to_trace = int("monotonic_to_trace_offset_ns").filter(|_| window);
    let window_ns = match (
        int("recording_start_monotonic_ns"),
        int("recording_end_monotonic_ns"),
        to_trace,
    ) {
        (Some(start), Some(end), Some(to_trace)) if end > start => {
            Some((start + to_trace, end + to_trace))
        }
        _ => None,
    };
    // On the file's own clock only, as the window: a merge moved its inputs' clocks.
    let stops_ns = to_trace
        .map(|to_trace| stopped::read(other.get("process_stopped_monotonic_ns"), to_trace))
        .unwrap_or_default();
    Some(ProcessFacts {
        pid,
        facts: RecordingFacts {
            rank: other
                .get("rank")
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok()),
            host: host.clone(),
            parent_pid: other
                .get("parent_pid")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok()),
            parent_among_answers: false,
            monotonic_clock: text("clock").as_deref() == Some("CLOCK_MONOTONIC"),
            // Null where the layout has no interval: the holds were judged against the default.
            holds_judged: other.contains_key("switch_interval_us"),
            switch_interval_us: other
                .get("switch_interval_us")
                .and_then(Value::as_u64)
                .filter(|&us| us > 0),
            waiting_samples: other
                .get("waiting_samples")
                .and_then(Value::as_u64)
                .zip(
                    other
                        .get("waiting_samples_gil_free")
                        .and_then(Value::as_u64),
                )
                .filter(|(all, free)| free <= all),
            window_ns,
            recording: other
                .get("recording_start_monotonic_ns")
                .and_then(Value::as_i64)
                .map(|start_monotonic_ns| RecordingId {
                    pid,
                    host,
                    start_monotonic_ns,
                }),
            from_merge: false,
            rate_requested_hz: other
                .get("rate_requested_hz")
                .and_then(Value::as_f64)
                .filter(|&hz| hz > 0.0),
            samples: other.get("samples").and_then(Value::as_u64),
            stopped: text("process_stopped"),
            stops_ns,
            sampler_cpu_share: sampler_cpu_share(other),
        },
    })
}

/// `sampler_cpu_seconds` over the recording's length, where the sampler was not given cores of its
/// own (`sampler_cpus` written, and null).
fn sampler_cpu_share(other: &Map<String, Value>) -> Option<f64> {
    let shared_cores = other.get("sampler_cpus").is_some_and(Value::is_null);
    let cpu_s = other.get("sampler_cpu_seconds").and_then(Value::as_f64)?;
    let ns = |key: &str| other.get(key).and_then(Value::as_i64);
    let (start, end) = (
        ns("recording_start_monotonic_ns")?,
        ns("recording_end_monotonic_ns")?,
    );
    let seconds = (end - start) as f64 / 1e9;
    (shared_cores && seconds > 0.0 && cpu_s >= 0.0).then(|| cpu_s / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_samplers_share_is_taken_only_where_it_shared_the_jobs_cores() {
        let read = |other: Value| facts_of(other.as_object().unwrap(), true).unwrap();
        let shared = json!({"pid": 7, "sampler_cpus": null, "sampler_cpu_seconds": 1.5,
            "recording_start_monotonic_ns": 1_000_000_000, "recording_end_monotonic_ns": 4_000_000_000i64});
        assert_eq!(read(shared.clone()).facts.sampler_cpu_share, Some(0.5));
        let mut own = shared.clone();
        own["sampler_cpus"] = json!([3]);
        assert_eq!(read(own).facts.sampler_cpu_share, None);
        // An older trace that does not say where the sampler ran.
        let mut unknown = shared;
        unknown.as_object_mut().unwrap().remove("sampler_cpus");
        assert_eq!(read(unknown).facts.sampler_cpu_share, None);
    }

    #[test]
    fn the_waiting_counts_are_taken_only_when_both_are_there_and_agree() {
        let read = |other: Value| facts_of(other.as_object().unwrap(), true).unwrap();
        let both = json!({"pid": 7, "waiting_samples": 10, "waiting_samples_gil_free": 4});
        assert_eq!(read(both).facts.waiting_samples, Some((10, 4)));
        let one = json!({"pid": 7, "waiting_samples": 10});
        assert_eq!(read(one).facts.waiting_samples, None);
        let more_free_than_all =
            json!({"pid": 7, "waiting_samples": 3, "waiting_samples_gil_free": 4});
        assert_eq!(read(more_free_than_all).facts.waiting_samples, None);
        let negative = json!({"pid": 7, "waiting_samples": -3, "waiting_samples_gil_free": 0});
        assert_eq!(read(negative).facts.waiting_samples, None);
        // Without a pid it says nothing of any process.
        let no_pid = json!({"waiting_samples": 10, "waiting_samples_gil_free": 4});
        assert_eq!(facts_of(no_pid.as_object().unwrap(), true), None);
    }

    #[test]
    fn a_renumbered_input_is_known_by_its_new_pid() {
        let node = |rank: u32| json!({"pid": 7, "rank": rank, "host": format!("node{rank}")});
        let merged = json!({"merge": {"inputs": [
            {"otherData": node(0), "renumbered_pids": []},
            {"otherData": node(1), "renumbered_pids": [{"from": 7, "to": 10000007}]},
        ]}});
        let facts = facts(merged.as_object().unwrap());
        let by_pid: Vec<(u32, Option<&str>)> = facts
            .iter()
            .map(|f| (f.pid, f.facts.host.as_deref()))
            .collect();
        assert_eq!(by_pid, [(7, Some("node0")), (10000007, Some("node1"))]);
    }

    #[test]
    fn a_merged_files_inputs_give_rank_and_host_but_not_the_window() {
        let recording = json!({"pid": 7, "rank": 3, "host": "vm",
            "recording_start_monotonic_ns": 10, "recording_end_monotonic_ns": 20,
            "monotonic_to_trace_offset_ns": 5});
        assert_eq!(
            facts_of(recording.as_object().unwrap(), true)
                .unwrap()
                .facts
                .window_ns,
            Some((15, 25))
        );
        let merged = json!({"merge": {"inputs": [{"otherData": recording}, {"kind": "torch"}]}});
        let facts = facts(merged.as_object().unwrap());
        assert_eq!(facts.len(), 1);
        let (rank, host) = (facts[0].facts.rank, facts[0].facts.host.as_deref());
        assert_eq!((facts[0].pid, rank, host), (7, Some(3), Some("vm")));
        assert_eq!(facts[0].facts.window_ns, None);
    }
}
