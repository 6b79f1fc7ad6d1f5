//! `gilsample merge`: GIL traces of several processes and profiler traces (PyTorch/Kineto, Ascend
//! msprof, any Chrome Trace) on one wall-clock timeline, in one file.
//!
//! Two passes over each input, both streamed: the first checks every event and learns the input's
//! kind, time range and process ids (so a malformed input is refused before anything is written);
//! the second writes its events moved onto the common clock, with process ids that collide with an
//! earlier input's renumbered. What was aligned how goes to `otherData.merge` and the report.

pub mod document;
pub mod probe;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::merge::document::for_each_event_of_trace;
use crate::merge::probe::{Kind, Probe, alignment, check_event, probe};
use crate::trace::chrome::micros;
use crate::trace::output::{check_file_output, create_partial, end_trace, publish};

/// A manual clock correction: `--offset [INPUT=]MICROSECONDS`.
#[derive(Clone, Debug, PartialEq)]
pub struct Offset {
    /// The input it applies to; `None`: every input that is not a GIL trace.
    pub input: Option<PathBuf>,
    /// The correction in nanoseconds, added to the input's timestamps.
    pub ns: i128,
}

impl std::str::FromStr for Offset {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<Offset, String> {
        let (input, number) = match text.rsplit_once('=') {
            Some((input, number)) => (Some(PathBuf::from(input)), number),
            None => (None, text),
        };
        let ns = crate::decimal::parse_micros(&Value::String(number.trim().to_string())).map_err(
            |why| {
                format!(
                    "{text:?}: give [INPUT=]MICROSECONDS, e.g. 1500 or trace.json=-250.5 ({why})"
                )
            },
        )?;
        Ok(Offset { input, ns })
    }
}

/// How to merge: whether to overwrite the output, and the manual clock corrections.
#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    /// Overwrite an existing output (`--force`).
    pub force: bool,
    /// The `--offset` corrections, in the order given.
    pub offsets: Vec<Offset>,
}

/// How one input was placed.
#[derive(Clone, Debug)]
pub struct InputReport {
    /// The input file.
    pub path: PathBuf,
    /// What kind of trace it was taken for.
    pub kind: Kind,
    /// Events copied from it.
    pub events: u64,
    /// How its clock was aligned, in words (printed and kept in `otherData.merge`).
    pub alignment: String,
    /// Added to every timestamp: alignment plus manual offset.
    pub shift_ns: i128,
    /// The `--offset` part of `shift_ns`, nanoseconds.
    pub manual_offset_ns: i128,
    /// Process ids renumbered because an earlier input uses them: (as written, as merged).
    pub renumbered: Vec<(String, String)>,
    /// Time range on the merged timeline.
    pub first_ns: Option<i128>,
    /// Latest end of its events on the merged timeline, nanoseconds.
    pub last_ns: Option<i128>,
    /// For a profiler input: whether its time range meets the GIL traces' (None without GIL traces).
    pub overlaps_gil: Option<bool>,
    /// Where it does not: how far it lies from them, nanoseconds, after them (positive: from their
    /// last end to its first event) or before them (negative: from its last end to their first).
    pub gil_gap_ns: Option<i128>,
    /// An interrupted recording's temporary file, merged up to its last complete event: where it
    /// was cut off, if it was.
    pub partial: Option<Option<String>>,
}

/// What `merge` wrote: the output and how each input was placed on it.
pub struct MergeReport {
    /// The merged trace.
    pub output: PathBuf,
    /// One report per input merged, in the order given.
    pub inputs: Vec<InputReport>,
    /// Inputs left out, and why (`repeated_merges`).
    pub left_out: Vec<(PathBuf, String)>,
}

const NS_PER_SECOND: i128 = 1_000_000_000;

/// Merges `inputs` into `output`.
pub fn merge(inputs: &[PathBuf], output: &Path, opts: &MergeOptions) -> Result<MergeReport> {
    if inputs.is_empty() {
        return Err(Error::Usage("give the traces to merge".into()));
    }
    for input in inputs {
        if input.is_dir() {
            return Err(Error::Input {
                path: input.clone(),
                why: format!(
                    "a directory: merge takes trace files, e.g. {}",
                    input.join("GIL_*.json").display()
                ),
            });
        }
        if same_file(input, output) {
            return Err(Error::Usage(format!(
                "{} is both an input and the output",
                input.display()
            )));
        }
    }
    for offset in &opts.offsets {
        if let Some(target) = &offset.input
            && !inputs.iter().any(|i| same_file(i, target))
        {
            return Err(Error::Usage(format!(
                "--offset names {}, which is not one of the inputs",
                target.display()
            )));
        }
    }
    check_file_output(output, opts.force, "merged.json")?;
    let probes: Vec<Probe> = inputs.iter().map(|p| probe(p)).collect::<Result<_>>()?;
    let repeats = repeated_inputs(inputs, &probes);
    let mut left_out = Vec::new();
    let (mut kept, mut kept_probes) = (Vec::new(), Vec::new());
    for ((input, probe), repeat) in inputs.iter().zip(probes).zip(repeats) {
        match repeat {
            Some(why) => left_out.push((input.clone(), why)),
            None => {
                kept.push(input.clone());
                kept_probes.push(probe);
            }
        }
    }
    let (inputs, probes) = (&kept[..], kept_probes);
    let reports = plan(inputs, &probes, opts);

    let (file, partial) = create_partial(output)?;
    let fail = |e: std::io::Error| Error::Output {
        path: output.to_path_buf(),
        why: format!("{e} (partial data is in {})", partial.display()),
    };
    // Timestamps are written relative to a whole second before the earliest event (exact as
    // doubles, which epoch µs with nanoseconds are not); the origin is kept as Kineto keeps it.
    let origin_ns = reports
        .iter()
        .filter_map(|r| r.first_ns)
        .min()
        .map_or(0, |first| first.div_euclid(NS_PER_SECOND) * NS_PER_SECOND);
    let mut writer = EventWriter::new(BufWriter::new(file));
    writeln!(
        writer.out,
        "{{\"baseTimeNanoseconds\":{origin_ns},\"traceEvents\":["
    )
    .map_err(fail)?;
    for (index, (input, report)) in inputs.iter().zip(&reports).enumerate() {
        let renumbered: BTreeMap<&str, &str> = report
            .renumbered
            .iter()
            .map(|(from, to)| (from.as_str(), to.as_str()))
            .collect();
        let label = file_label(input);
        let mut io_error = None;
        let copied = for_each_event_of_trace(input, |i, event| {
            // A `.partial` file still being written may have grown since it was probed: what
            // came after is not in the plan (its range, its pids), and is left for the next merge.
            if i >= report.events {
                return Ok(());
            }
            let checked = check_event(i, &event)?;
            let (event, ts) = rewrite(
                event,
                &checked,
                report.shift_ns - origin_ns,
                &renumbered,
                &label,
                index,
            );
            writer.write(&event, ts.as_deref()).map_err(|e| {
                let text = e.to_string();
                io_error = Some(e);
                text
            })
        });
        if let Some(e) = io_error {
            return Err(fail(e));
        }
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    }
    let other = json!({
        "producer": format!("gilsample {} merge", env!("CARGO_PKG_VERSION")),
        "merge": {
            "timeline": "wall clock (CLOCK_REALTIME): µs since baseTimeNanoseconds",
            "origin_unix_ns": origin_ns,
            "inputs": reports.iter().zip(&probes).map(|(r, p)| describe(r, p)).collect::<Vec<_>>(),
        },
    });
    end_trace(&mut writer.out, &other).map_err(fail)?;
    publish(&partial, output, opts.force)?;
    Ok(MergeReport {
        output: output.to_path_buf(),
        inputs: reports,
        left_out,
    })
}

/// Per input, why it is left out, if it is: a file given before it too, or a trace that `merge` or
/// `record --merge` wrote, given beside a file it already holds (a `GIL_*.json` glob over a
/// `--merge` directory matches `GIL_merged.json` too): either would put that file's events on the
/// timeline twice. The merged trace's inputs are matched by file name against those its
/// `otherData.merge` lists.
fn repeated_inputs(inputs: &[PathBuf], probes: &[Probe]) -> Vec<Option<String>> {
    let name = |path: &Path| path.file_name().map(|n| n.to_string_lossy().into_owned());
    // Each resolved once: a job's thousand files would otherwise be resolved a million times.
    let resolved: Vec<PathBuf> = inputs
        .iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .collect();
    probes
        .iter()
        .enumerate()
        .map(|(i, probe)| {
            // One file given twice (overlapping globs: GIL_*.json *.json) is merged once.
            if let Some(earlier) = resolved[..i].iter().position(|e| *e == resolved[i]) {
                return Some(format!(
                    "the same file as {}, given before it: its events would be there twice",
                    inputs[earlier].display()
                ));
            }
            let listed = probe
                .header
                .keys
                .get("otherData")?
                .get("merge")?
                .get("inputs")?
                .as_array()?;
            let holds: Vec<String> = listed
                .iter()
                .filter_map(|input| name(Path::new(input.get("file")?.as_str()?)))
                .collect();
            let also_given: Vec<String> = inputs
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .filter_map(|(_, other)| name(other))
                .filter(|other| holds.contains(other))
                .collect();
            (!also_given.is_empty()).then(|| {
                format!(
                    "it is a merged trace that already holds {}, also given: their events would be \
                     there twice",
                    also_given.join(", ")
                )
            })
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Decides each input's shift and process-id renumbering. GIL traces claim their ids first, so GIL
/// tracks keep the real pids that the summary and file names show.
fn plan(inputs: &[PathBuf], probes: &[Probe], opts: &MergeOptions) -> Vec<InputReport> {
    let mut used: HashSet<String> = HashSet::new();
    let mut renumbered: Vec<Vec<(String, String)>> = vec![Vec::new(); inputs.len()];
    let order = (0..inputs.len())
        .filter(|&i| probes[i].kind.is_gil())
        .chain((0..inputs.len()).filter(|&i| !probes[i].kind.is_gil()));
    for i in order {
        for pid in &probes[i].pids {
            if used.insert(pid.clone()) {
                continue;
            }
            let fresh = fresh_pid(pid, i, &used, &probes[i].pids);
            used.insert(fresh.clone());
            renumbered[i].push((pid.clone(), fresh));
        }
    }
    let mut reports: Vec<InputReport> = inputs
        .iter()
        .zip(probes)
        .zip(renumbered)
        .map(|((path, probe), renumbered)| {
            let (aligned_ns, rule) = alignment(probe);
            let manual_offset_ns: i128 = opts
                .offsets
                .iter()
                .filter(|o| match &o.input {
                    Some(target) => same_file(target, path),
                    None => !probe.kind.is_gil(),
                })
                .map(|o| o.ns)
                .sum();
            let shift_ns = aligned_ns + manual_offset_ns;
            InputReport {
                path: path.clone(),
                kind: probe.kind,
                events: probe.events,
                alignment: rule,
                shift_ns,
                manual_offset_ns,
                renumbered,
                first_ns: probe.first_ns.map(|t| t + shift_ns),
                last_ns: probe.last_ns.map(|t| t + shift_ns),
                overlaps_gil: None,
                gil_gap_ns: None,
                partial: probe.partial.clone(),
            }
        })
        .collect();
    let gil_ranges: Vec<(i128, i128)> = reports
        .iter()
        .filter(|r| r.kind.is_gil())
        .filter_map(|r| Some((r.first_ns?, r.last_ns?)))
        .collect();
    if !gil_ranges.is_empty() {
        for report in reports.iter_mut().filter(|r| !r.kind.is_gil()) {
            report.overlaps_gil = match (report.first_ns, report.last_ns) {
                (Some(first), Some(last)) => Some(
                    gil_ranges
                        .iter()
                        .any(|&(gil_first, gil_last)| first <= gil_last && gil_first <= last),
                ),
                _ => None,
            };
            if report.overlaps_gil == Some(false) {
                report.gil_gap_ns = gap_to(&gil_ranges, report.first_ns, report.last_ns);
            }
        }
    }
    reports
}

/// How far a range that meets none of `gil_ranges` lies from all of them: positive when it starts
/// after their last end, negative when it ends before their first start (None when it lies between
/// two of them: no one shift is the answer).
fn gap_to(gil_ranges: &[(i128, i128)], first: Option<i128>, last: Option<i128>) -> Option<i128> {
    let (first, last) = (first?, last?);
    let gil_first = gil_ranges.iter().map(|r| r.0).min()?;
    let gil_last = gil_ranges.iter().map(|r| r.1).max()?;
    if first > gil_last {
        Some(first - gil_last)
    } else if last < gil_first {
        Some(last - gil_first)
    } else {
        None
    }
}

/// A process id no input uses: numbers move up by multiples of 10,000,000 (above any Linux pid, so
/// the original stays readable), strings get the input's number.
fn fresh_pid(
    pid: &str,
    input: usize,
    used: &HashSet<String>,
    own: &std::collections::BTreeSet<String>,
) -> String {
    let taken = |candidate: &String| used.contains(candidate) || own.contains(candidate);
    if let Ok(number) = pid.parse::<i64>() {
        (1..)
            .map(|k| (number + k * 10_000_000).to_string())
            .find(|c| !taken(c))
            .expect("an unused id exists")
    } else {
        let text = serde_json::from_str::<String>(pid).unwrap_or_else(|_| pid.to_string());
        (1..)
            .map(|k| Value::String(format!("{text} #{}", input + k)).to_string())
            .find(|c| !taken(c))
            .expect("an unused id exists")
    }
}

/// One event as merged: timestamp moved by `shift_ns` (onto the merged timeline), process id renumbered (and its process name marked with
/// the file it came from), flow ids kept apart from other inputs'. A shifted `ts` is returned apart, as
/// an exact decimal: epoch microseconds with nanoseconds do not fit an f64.
fn rewrite(
    event: Value,
    checked: &probe::Checked,
    shift_ns: i128,
    renumbered: &BTreeMap<&str, &str>,
    label: &str,
    input: usize,
) -> (Map<String, Value>, Option<String>) {
    let Value::Object(mut object) = event else {
        unreachable!("check_event accepts only objects")
    };
    let original_pid = object.get("pid").map(Value::to_string);
    if let Some(new) = original_pid.as_deref().and_then(|p| renumbered.get(p)) {
        object.insert(
            "pid".into(),
            serde_json::from_str(new).expect("renumbered ids are JSON"),
        );
        if object.get("name").and_then(Value::as_str) == Some("process_name")
            && let Some(Value::String(name)) =
                object.get_mut("args").and_then(|a| a.get_mut("name"))
        {
            name.push_str(&format!(" [{label}]"));
        }
    }
    if input > 0
        && matches!(
            object.get("ph").and_then(Value::as_str),
            Some("s" | "t" | "f" | "b" | "e" | "n")
        )
    {
        for key in ["id", "bind_id"] {
            if let Some(id) = object.get(key).and_then(Value::as_u64) {
                object.insert(key.into(), json!(id.wrapping_add((input as u64) << 48)));
            }
        }
    }
    let shifted_ts = match checked.ts_ns {
        Some(ts) if !checked.metadata => Some(micros(ts + shift_ns)),
        _ => None,
    };
    (object, shifted_ts)
}

/// Writes events separated by commas.
struct EventWriter<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> EventWriter<W> {
    fn new(out: W) -> EventWriter<W> {
        EventWriter { out, first: true }
    }

    fn write(&mut self, event: &Map<String, Value>, ts: Option<&str>) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.out.write_all(b"{")?;
        let mut separator = "";
        for (key, value) in event {
            self.out.write_all(separator.as_bytes())?;
            separator = ",";
            serde_json::to_writer(&mut self.out, key)?;
            self.out.write_all(b":")?;
            match ts {
                Some(decimal) if key == "ts" => self.out.write_all(decimal.as_bytes())?,
                _ => serde_json::to_writer(&mut self.out, value)?,
            }
        }
        self.out.write_all(b"}")
    }
}

fn describe(report: &InputReport, probe: &Probe) -> Value {
    let mut value = json!({
        "file": report.path.display().to_string(),
        "kind": report.kind.describe(),
        "events": report.events,
        "alignment": report.alignment,
        "shift_us": report.shift_ns as f64 / 1000.0,
        "manual_offset_us": report.manual_offset_ns as f64 / 1000.0,
        "renumbered_pids": report.renumbered.iter().map(|(from, to)| json!({"from": serde_json::from_str::<Value>(from).unwrap_or(Value::Null), "to": serde_json::from_str::<Value>(to).unwrap_or(Value::Null)})).collect::<Vec<_>>(),
        "overlaps_gil_traces": report.overlaps_gil,
    });
    if report.kind == Kind::GilsampleRecording {
        value["otherData"] = probe.header.keys["otherData"].clone();
    }
    value
}
