//! What a trace's `otherData` says about its processes: gilsample's pid, rank, host, the
//! recording's window and how its holds were judged, read into the report's `ProcessTrace`s.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::report::load::ProcessTrace;

/// The file's own `otherData`, and in a merged file each gilsample recording's, which `merge`
/// keeps under `merge.inputs`: its rank, host and how its holds were judged. Not its window: the
/// merge moved its clock.
pub(super) fn apply(other: &Map<String, Value>, processes: &mut BTreeMap<u32, ProcessTrace>) {
    apply_other_data(other, processes, true);
    let inputs = other
        .get("merge")
        .and_then(|m| m.get("inputs"))
        .and_then(Value::as_array);
    for input in inputs.into_iter().flatten() {
        if let Some(other) = input.get("otherData").and_then(Value::as_object) {
            apply_other_data(other, processes, false);
        }
    }
}

/// gilsample's `otherData`: pid, rank, host, the recording's window on the trace clock (`window`:
/// where the file's clock is the recording's), and how many waiting threads the samples found with
/// the GIL free.
fn apply_other_data(
    other: &Map<String, Value>,
    processes: &mut BTreeMap<u32, ProcessTrace>,
    window: bool,
) {
    let Some(pid) = other
        .get("pid")
        .and_then(Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())
    else {
        return;
    };
    let Some(process) = processes.get_mut(&pid) else {
        return;
    };
    process.rank = other
        .get("rank")
        .and_then(Value::as_u64)
        .and_then(|r| u32::try_from(r).ok());
    process.host = other
        .get("host")
        .and_then(Value::as_str)
        .map(str::to_string);
    // Written by the gilsample versions that judge each hold (null where the layout has no
    // interval: the holds were judged against the default).
    process.holds_judged = other.contains_key("switch_interval_us");
    process.switch_interval_us = other
        .get("switch_interval_us")
        .and_then(Value::as_u64)
        .filter(|&us| us > 0);
    process.waiting_samples = other
        .get("waiting_samples")
        .and_then(Value::as_u64)
        .zip(
            other
                .get("waiting_samples_gil_free")
                .and_then(Value::as_u64),
        )
        .filter(|(all, free)| free <= all);
    let int = |key: &str| other.get(key).and_then(Value::as_i64).map(i128::from);
    if window
        && let (Some(start), Some(end), Some(to_trace)) = (
            int("recording_start_monotonic_ns"),
            int("recording_end_monotonic_ns"),
            int("monotonic_to_trace_offset_ns"),
        )
        && end > start
    {
        process.window_ns = Some((start + to_trace, end + to_trace));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_waiting_counts_are_taken_only_when_both_are_there_and_agree() {
        let read = |other: Value| {
            let mut processes = BTreeMap::from([(7, ProcessTrace::default())]);
            apply_other_data(other.as_object().unwrap(), &mut processes, true);
            processes[&7].waiting_samples
        };
        let both = json!({"pid": 7, "waiting_samples": 10, "waiting_samples_gil_free": 4});
        assert_eq!(read(both), Some((10, 4)));
        assert_eq!(read(json!({"pid": 7, "waiting_samples": 10})), None);
        let more_free_than_all =
            json!({"pid": 7, "waiting_samples": 3, "waiting_samples_gil_free": 4});
        assert_eq!(read(more_free_than_all), None);
        let negative = json!({"pid": 7, "waiting_samples": -3, "waiting_samples_gil_free": 0});
        assert_eq!(read(negative), None);
        // Another process's metadata says nothing about this one.
        let other_pid = json!({"pid": 8, "waiting_samples": 10, "waiting_samples_gil_free": 4});
        assert_eq!(read(other_pid), None);
    }

    #[test]
    fn a_merged_files_inputs_give_rank_and_host_but_not_the_window() {
        let mut processes = BTreeMap::from([(7, ProcessTrace::default())]);
        let recording = json!({"pid": 7, "rank": 3, "host": "vm",
            "recording_start_monotonic_ns": 10, "recording_end_monotonic_ns": 20,
            "monotonic_to_trace_offset_ns": 5});
        let merged = json!({"merge": {"inputs": [{"otherData": recording}, {"kind": "torch"}]}});
        apply(merged.as_object().unwrap(), &mut processes);
        let process = &processes[&7];
        assert_eq!(
            (process.rank, process.host.as_deref()),
            (Some(3), Some("vm"))
        );
        assert_eq!(process.window_ns, None);
    }
}
