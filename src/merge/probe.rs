//! The first pass over an input: check every event, find what kind of trace it is, its time range and
//! process ids, and so how to put it on the common timeline.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::decimal::parse_micros;
use crate::error::Result;
use crate::merge::document::{
    Header, event_object, field_error, for_each_event_of_trace, string_field,
};
use crate::trace::output::is_partial;

/// Process names that only Ascend msprof / torch_npu timelines use.
const MSPROF_PROCESSES: &[&str] = &[
    "Ascend Hardware",
    "CANN",
    "AscendCL",
    "HCCL",
    "Overlap Analysis",
    "Communication",
    "Task Scheduler",
    "NPU MEM",
    "Stars Soc Info",
];

/// What produced a trace, which decides how its clock is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Recorded by gilsample; its `otherData` says the clock and the offsets.
    GilsampleRecording,
    /// A GIL trace of the reference tool (raw or converted): taken as wall-clock µs.
    GilReference,
    /// PyTorch profiler / Kineto: absolute µs, or relative to `baseTimeNanoseconds`.
    Kineto,
    /// Ascend msprof / torch_npu `trace_view.json`: wall-clock µs.
    Msprof,
    /// Any other Chrome Trace: taken as it is.
    Chrome,
}

impl Kind {
    /// The kind in words, for the merge's report.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::GilsampleRecording => "gilsample GIL trace",
            Kind::GilReference => "GIL trace (reference format)",
            Kind::Kineto => "PyTorch profiler (Kineto) trace",
            Kind::Msprof => "Ascend msprof timeline",
            Kind::Chrome => "Chrome trace",
        }
    }

    /// GIL traces keep their process ids; other traces give way when ids collide.
    pub fn is_gil(self) -> bool {
        matches!(self, Kind::GilsampleRecording | Kind::GilReference)
    }
}

/// One event, checked: what the merge needs of it.
pub struct Checked {
    /// It is a metadata event (`ph` is `M`), which has no time.
    pub metadata: bool,
    /// Its `ts`, nanoseconds as written; `None` for metadata without one.
    pub ts_ns: Option<i128>,
    /// `ts` plus `dur` (or `ts` alone), nanoseconds as written.
    pub end_ns: Option<i128>,
}

/// The checks every event passes (in both passes): an object with a string `ph`; a `ts` (number or
/// decimal string of µs) unless it is metadata; `dur` likewise when present; `pid`/`tid` numbers or
/// strings when present.
pub fn check_event(index: u64, event: &Value) -> std::result::Result<Checked, String> {
    let object = event_object(index, event)?;
    let ph = string_field(index, object, "ph")?;
    for field in ["pid", "tid"] {
        match object.get(field) {
            None | Some(Value::String(_)) => {}
            Some(Value::Number(n)) if n.is_u64() || n.is_i64() => {}
            Some(_) => return Err(field_error(index, field, "not a process/thread id")),
        }
    }
    let metadata = ph == "M";
    let ts_ns = match object.get("ts") {
        Some(ts) => Some(parse_micros(ts).map_err(|why| field_error(index, "ts", why))?),
        None if metadata => None,
        None => return Err(field_error(index, "ts", "missing")),
    };
    let dur_ns = match object.get("dur") {
        Some(dur) => Some(parse_micros(dur).map_err(|why| field_error(index, "dur", why))?),
        None => None,
    };
    Ok(Checked {
        metadata,
        ts_ns,
        end_ns: ts_ns.map(|ts| ts + dur_ns.unwrap_or(0).max(0)),
    })
}

/// What the first pass learned about an input.
#[derive(Debug)]
pub struct Probe {
    /// What kind of trace it is, from its header and events.
    pub kind: Kind,
    /// What the document holds besides its events.
    pub header: Header,
    /// How many events it has.
    pub events: u64,
    /// Earliest start and latest end of timed events, as written (before alignment).
    pub first_ns: Option<i128>,
    /// Latest end of its timed events, as written.
    pub last_ns: Option<i128>,
    /// Every distinct `pid`, as its JSON text.
    pub pids: BTreeSet<String>,
    /// An interrupted recording's temporary file: read to its last complete event; where it was
    /// cut off, if it was.
    pub partial: Option<Option<String>>,
}

/// The first pass over the trace at `path`: every event checked, its kind, time range and pids.
pub fn probe(path: &Path) -> Result<Probe> {
    let mut events = 0u64;
    let mut first_ns: Option<i128> = None;
    let mut last_ns: Option<i128> = None;
    let mut pids = BTreeSet::new();
    let mut gil_events = false;
    let mut msprof_names = false;
    let (header, cut) = for_each_event_of_trace(path, |index, event| {
        let checked = check_event(index, &event)?;
        events += 1;
        if let Some(pid) = event.get("pid") {
            pids.insert(pid.to_string());
        }
        if let (Some(ts), Some(end)) = (checked.ts_ns, checked.end_ns)
            && !checked.metadata
        {
            first_ns = Some(first_ns.map_or(ts, |f| f.min(ts)));
            last_ns = Some(last_ns.map_or(end, |l| l.max(end)));
        }
        match event.get("name").and_then(Value::as_str) {
            Some("take_gil" | "drop_gil" | "hold_gil") => gil_events = true,
            Some("process_name") => {
                let name = event["args"]["name"].as_str().unwrap_or("");
                msprof_names |= MSPROF_PROCESSES.contains(&name);
            }
            _ => {}
        }
        Ok(())
    })?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let producer = header.keys.get("otherData").and_then(|o| o.get("producer"));
    let recorded_by_us = producer
        .and_then(Value::as_str)
        .is_some_and(|p| p.starts_with("gilsample") && !p.ends_with("convert"))
        && header.keys["otherData"].get("clock").is_some();
    let kind = if recorded_by_us {
        Kind::GilsampleRecording
    } else if gil_events {
        Kind::GilReference
    } else if header.keys.contains_key("baseTimeNanoseconds")
        || header.keys.contains_key("schemaVersion")
        || header.keys.contains_key("deviceProperties")
    {
        Kind::Kineto
    } else if msprof_names || file_name == "trace_view.json" || file_name.starts_with("msprof_") {
        Kind::Msprof
    } else {
        Kind::Chrome
    };
    Ok(Probe {
        kind,
        header,
        events,
        first_ns,
        last_ns,
        pids,
        partial: is_partial(path).then_some(cut),
    })
}

/// How an input is moved onto the wall clock: the shift in ns and the rule that gave it.
pub fn alignment(probe: &Probe) -> (i128, String) {
    let other = probe.header.keys.get("otherData");
    let int = |v: Option<&Value>| v.and_then(Value::as_i64).map(i128::from);
    match probe.kind {
        Kind::GilsampleRecording => {
            let other = other.expect("a gilsample recording has otherData");
            let clock = other["clock"].as_str().unwrap_or("");
            let to_trace = int(other.get("monotonic_to_trace_offset_ns"));
            let to_wall = int(other.get("monotonic_to_wall_offset_ns"));
            match (clock, to_trace, to_wall) {
                ("CLOCK_REALTIME", ..) => (0, "wall clock already (otherData.clock)".into()),
                (_, Some(to_trace), Some(to_wall)) => (
                    to_wall - to_trace,
                    format!(
                        "{clock} moved to the wall clock by otherData.monotonic_to_wall_offset_ns"
                    ),
                ),
                _ => (
                    0,
                    format!("{clock} without a wall-clock offset in otherData: left as is"),
                ),
            }
        }
        Kind::Kineto => match int(probe.header.keys.get("baseTimeNanoseconds")) {
            // Newer Kineto writes ts relative to baseTimeNanoseconds; older ones absolute epoch µs.
            Some(base) if probe.first_ns.is_none_or(|first| first < base / 2) => {
                (base, "relative µs, moved by baseTimeNanoseconds".into())
            }
            Some(_) => (
                0,
                "absolute epoch µs (baseTimeNanoseconds not needed)".into(),
            ),
            None => (0, "absolute epoch µs (no baseTimeNanoseconds)".into()),
        },
        Kind::Msprof => (0, "epoch µs as msprof writes them".into()),
        Kind::GilReference => (0, "epoch µs as the reference tool writes them".into()),
        Kind::Chrome => (0, "no clock metadata: taken as is".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_fields_and_names_the_event() {
        assert!(check_event(0, &json!({"ph": "M", "name": "process_name"})).is_ok());
        let ok = check_event(1, &json!({"ph": "X", "ts": "10.5", "dur": 2})).unwrap();
        assert_eq!((ok.ts_ns, ok.end_ns), (Some(10_500), Some(12_500)));
        let cases = [
            (json!(3), "event 4: not a JSON object"),
            (json!({"ts": 1}), "event 4: field `ph`: missing"),
            (json!({"ph": "X"}), "event 4: field `ts`: missing"),
            (
                json!({"ph": "X", "ts": 1e300}),
                "event 4: field `ts`: out of range",
            ),
            (
                json!({"ph": "X", "ts": 1, "dur": "x"}),
                "event 4: field `dur`",
            ),
            (
                json!({"ph": "X", "ts": 1, "pid": [1]}),
                "event 4: field `pid`",
            ),
        ];
        for (event, expected) in cases {
            let err = check_event(4, &event).err().unwrap();
            assert!(err.starts_with(expected), "{err} vs {expected}");
        }
    }
}
