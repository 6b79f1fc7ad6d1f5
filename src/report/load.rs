//! Reading a GIL trace into what the analysis needs: per process its slices (compact: state, thread,
//! start, end, and the holder's code where the trace has it), thread names and header facts. Reads
//! gilsample traces (one process, or a merged file of many) and the reference tool's files, raw
//! (`take_gil`/`drop_gil` only: holds are inferred between a take and the next drop, as its converter
//! does) or converted.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::decimal::parse_micros;
use crate::error::{Error, Result};
use crate::merge::document::{
    event_object, field_error, for_each_event, for_each_event_of_own_trace, for_each_event_to_cut,
};
use crate::report::gaps::TrackSpans;
use crate::report::other_data::{self, ProcessFacts, RecordingFacts};
use crate::report::stopped;
use crate::trace::chrome::{GAP_KEY, GAP_TRACK, STOPPED_KEY, STOPPED_TRACK};

/// What a slice shows a thread doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SliceKind {
    /// A `take_gil` slice: waiting for the GIL.
    Take,
    /// A `hold_gil` slice: holding it.
    Hold,
    /// A `drop_gil` slice: handing it off.
    Drop,
    /// A stretch of a hold during which the holder slept in a syscall (`held_while_blocked`).
    HeldWhileBlocked,
}

impl SliceKind {
    /// The kind of a trace event by its name; `None` for events that are not GIL slices.
    pub fn from_name(name: &str) -> Option<SliceKind> {
        Some(match name {
            "take_gil" => SliceKind::Take,
            "hold_gil" => SliceKind::Hold,
            "drop_gil" => SliceKind::Drop,
            "held_while_blocked" => SliceKind::HeldWhileBlocked,
            _ => return None,
        })
    }
}

/// One slice of a trace: a take, hold, drop or held-while-blocked stretch of one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Which kind of slice.
    pub kind: SliceKind,
    /// The thread's id as the trace names it.
    pub tid: u32,
    /// Start, trace-clock nanoseconds (the file's microseconds times 1000).
    pub start_ns: i128,
    /// End, trace-clock nanoseconds.
    pub end_ns: i128,
    /// Index into `ProcessTrace::labels`: the holder's innermost function for a hold, the syscall for
    /// a held-while-blocked stretch; `None` when the trace does not say.
    pub label: Option<u32>,
    /// A hold's kind as the trace says it (`args.native_call`), with the call's index into
    /// `ProcessTrace::calls`.
    pub held: Held,
    /// A hold whose stack passes through the import system (`importlib._bootstrap`): the program
    /// was importing a module.
    pub importing: bool,
}

impl stopped::Span for Slice {
    fn span(&self) -> (i128, i128) {
        (self.start_ns, self.end_ns)
    }
    fn part(self, start_ns: i128, end_ns: i128) -> Slice {
        Slice {
            start_ns,
            end_ns,
            ..self
        }
    }
}

/// What a hold's args say it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Held {
    /// The trace does not say (another tool's, an older gilsample's, not a hold).
    #[default]
    Unsaid,
    /// Python code (`args.native_call` false).
    PythonCode,
    /// One native call: its call site and callee, `ProcessTrace::calls[i]`.
    NativeCall(u32),
}

/// A native call as a hold's args name it (docs/report-json.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct CallSite {
    /// The call's source file, where the trace has it.
    pub file: Option<String>,
    /// The call's line in it.
    pub line: Option<u32>,
    /// The text of that line, where the trace has it.
    pub source: Option<String>,
}

/// One native call a hold was spent in: where it is called and what it calls.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NativeCall {
    /// `None` where the trace has no stack for the hold.
    pub call_site: Option<CallSite>,
    /// The function called, where the trace names it.
    pub callee: Option<String>,
}

/// One process of one trace file.
#[derive(Clone, Debug, Default)]
pub struct ProcessTrace {
    /// The trace file.
    pub file: PathBuf,
    /// The process's pid as the trace names it.
    pub pid: u32,
    /// What the trace's `otherData` says of the recording (gilsample's; default for other traces).
    pub facts: RecordingFacts,
    /// Thread names, by tid.
    pub names: BTreeMap<u32, String>,
    /// Every slice of the process, sorted by start.
    pub slices: Vec<Slice>,
    /// Interned labels (function names, syscall names).
    pub labels: Vec<String>,
    label_index: HashMap<String, u32>,
    /// Interned native calls of `Held::NativeCall`.
    pub calls: Vec<NativeCall>,
    call_index: HashMap<NativeCall, u32>,
    /// The spans the sampler saw nothing of (report/gaps.rs), trace clock, sorted and joined.
    pub gaps_ns: Vec<(i128, i128)>,
    /// Their counter samples as read, until the file is read whole.
    gap_marks: TrackSpans,
    /// The stops' counter samples (`STOPPED_TRACK`): the stops where `otherData` does not give
    /// them on this file's clock (a merged file's copy of a recording).
    stop_marks: TrackSpans,
}

impl ProcessTrace {
    /// What the trace's `otherData` says of this process (other_data.rs); a window only where
    /// it gives one.
    fn take_facts(&mut self, facts: RecordingFacts) {
        let window_ns = facts.window_ns.or(self.facts.window_ns);
        self.facts = RecordingFacts { window_ns, ..facts };
    }

    fn label(&mut self, text: &str) -> u32 {
        if let Some(&i) = self.label_index.get(text) {
            return i;
        }
        let i = self.labels.len() as u32;
        self.labels.push(text.to_string());
        self.label_index.insert(text.to_string(), i);
        i
    }

    /// Adds one slice as a reader of the trace gets it: times on the trace clock, and the event's
    /// `args`, which label it. What `load` does with each slice event of a file, and what
    /// `gilsample top` does with each slice the writer of a live recording writes (trace/tap.rs).
    pub fn add_slice(
        &mut self,
        kind: SliceKind,
        tid: u32,
        (start_ns, end_ns): (i128, i128),
        args: Option<&Map<String, Value>>,
    ) {
        let call = args.filter(|_| kind == SliceKind::Hold).and_then(held_in);
        // One native call is shown where it was called, which its stack may not show first.
        let label = match &call {
            Some(Some((_, Some(frame)))) => Some(frame.clone()),
            _ => args.and_then(|args| slice_label(kind, args)),
        }
        .map(|text| self.label(&text));
        let held = match call {
            Some(Some((call, _))) => Held::NativeCall(self.call(call)),
            Some(None) => Held::PythonCode,
            None => Held::Unsaid,
        };
        let importing = kind == SliceKind::Hold
            && args
                .and_then(hold_stack)
                .is_some_and(|frames| frames.iter().any(is_import_frame));
        self.slices.push(Slice {
            kind,
            tid,
            start_ns,
            end_ns,
            label,
            held,
            importing,
        });
    }

    /// Everything but the slices and gaps (names, labels, header facts): for a trace of some of
    /// them.
    pub fn without_slices(&self) -> ProcessTrace {
        ProcessTrace {
            file: self.file.clone(),
            pid: self.pid,
            facts: self.facts.clone(),
            names: self.names.clone(),
            slices: Vec::new(),
            labels: self.labels.clone(),
            label_index: self.label_index.clone(),
            calls: self.calls.clone(),
            call_index: self.call_index.clone(),
            gaps_ns: Vec::new(),
            gap_marks: TrackSpans::default(),
            stop_marks: TrackSpans::default(),
        }
    }

    /// Names a thread as its `thread_name` event does.
    pub fn name_thread(&mut self, tid: u32, text: &str) {
        self.names.insert(tid, thread_label(text));
    }

    fn call(&mut self, call: NativeCall) -> u32 {
        if let Some(&i) = self.call_index.get(&call) {
            return i;
        }
        let i = self.calls.len() as u32;
        self.calls.push(call.clone());
        self.call_index.insert(call, i);
        i
    }

    /// The name a person knows a thread by: its Python or kernel name, else its id; with the id
    /// beside it when another thread of the process has the same name.
    pub fn thread_name(&self, tid: u32) -> String {
        match self.names.get(&tid) {
            Some(name) if self.names.iter().any(|(t, n)| *t != tid && n == name) => {
                format!("{name} [{tid}]")
            }
            Some(name) => name.clone(),
            None => format!("thread {tid}"),
        }
    }
}

/// Whether a file is a GIL trace at all, as found while reading it.
#[derive(Default)]
struct Shape {
    gil_slices: u64,
    holds: u64,
}

/// Reads every process of a GIL trace. A file with no GIL slice is refused: it is not a GIL trace.
pub fn load(path: &Path) -> Result<Vec<ProcessTrace>> {
    load_events(path, Reading::Whole).map(|(processes, _)| processes)
}

/// `load` for the complete trace a recording of this process just wrote, read back for its
/// summary: faster, from a map of the file, which no other process may change meanwhile
/// (merge/document.rs, `for_each_event_of_own_trace`).
pub fn load_own_trace(path: &Path) -> Result<Vec<ProcessTrace>> {
    load_events(path, Reading::OwnTrace).map(|(processes, _)| processes)
}

/// Reads a trace that may have been cut off while it was written (a `.partial` file of an
/// interrupted recording): its events up to the cut, and what the cut was, if there was one. A cut
/// file has no `otherData` (its window is that of its slices), and the thread names written before
/// the cut.
pub fn load_to_cut(path: &Path) -> Result<(Vec<ProcessTrace>, Option<String>)> {
    load_events(path, Reading::ToCut)
}

/// `load`, or `load_to_cut` where `path` is an interrupted recording's temporary file
/// (`is_partial`), as `for_each_event_of_trace` reads events.
pub fn load_trace(path: &Path) -> Result<(Vec<ProcessTrace>, Option<String>)> {
    if crate::trace::output::is_partial(path) {
        load_events(path, Reading::ToCut)
    } else {
        load_events(path, Reading::Whole)
    }
}

/// How a trace is read: whole (an error where it is cut off), to its cut, or as this process's own
/// finished trace.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    Whole,
    ToCut,
    OwnTrace,
}

fn load_events(path: &Path, reading: Reading) -> Result<(Vec<ProcessTrace>, Option<String>)> {
    let mut processes: BTreeMap<u32, ProcessTrace> = BTreeMap::new();
    let mut shape = Shape::default();
    let accept_event = |index, event: Value| accept(index, &event, &mut processes, &mut shape);
    let (header, cut) = match reading {
        Reading::Whole => (for_each_event(path, accept_event)?, None),
        Reading::ToCut => for_each_event_to_cut(path, accept_event)?,
        Reading::OwnTrace => (for_each_event_of_own_trace(path, accept_event)?, None),
    };
    let other = header.keys.get("otherData").and_then(Value::as_object);
    // A gilsample recording in which no thread touched the GIL (all asleep) is a real answer.
    let recorded_pid = other
        .filter(|o| {
            o.get("producer")
                .and_then(Value::as_str)
                .is_some_and(|p| p.starts_with("gilsample"))
        })
        .and_then(|o| o.get("pid")?.as_u64())
        .and_then(|p| u32::try_from(p).ok());
    if let Some(pid) = recorded_pid {
        processes.entry(pid).or_default().pid = pid;
    } else if shape.gil_slices == 0 {
        return Err(Error::Input {
            path: path.to_path_buf(),
            why: "no take_gil, hold_gil or drop_gil events: not a GIL trace".into(),
        });
    }
    let mut described = Vec::new();
    for ProcessFacts { pid, facts } in other.map(other_data::facts).unwrap_or_default() {
        // Another process's metadata says nothing about this file's.
        if let Some(process) = processes.get_mut(&pid) {
            process.take_facts(facts);
            described.push(pid);
        }
    }
    // A process with thread names but no GIL slice that no recording describes is another tool's
    // (a profiler trace merged beside ours): not a GIL answer, where "0% held" would mislead.
    processes.retain(|pid, process| {
        !process.slices.is_empty() || Some(*pid) == recorded_pid || described.contains(pid)
    });
    let mut out: Vec<ProcessTrace> = processes.into_values().collect();
    for process in &mut out {
        process.file = path.to_path_buf();
        if shape.holds == 0 && recorded_pid.is_none() {
            infer_holds(process);
        }
        let stops_on_track = std::mem::take(&mut process.stop_marks).spans();
        if process.facts.stops_ns.is_empty() {
            process.facts.stops_ns = stops_on_track;
        }
        let (stops, window) = (&process.facts.stops_ns, process.facts.window_ns);
        stopped::keep_time_it_ran(&mut process.slices, stops, window);
        process.gaps_ns = std::mem::take(&mut process.gap_marks).spans();
        // gilsample writes no slice into a gap; a file that has one (edited, or another writer's)
        // still gets an answer whose parts add up.
        stopped::cut_out(&mut process.slices, &process.gaps_ns);
        process.slices.sort_by_key(|s| (s.start_ns, s.tid, s.kind));
    }
    Ok((out, cut))
}

fn accept(
    index: u64,
    event: &Value,
    processes: &mut BTreeMap<u32, ProcessTrace>,
    shape: &mut Shape,
) -> std::result::Result<(), String> {
    let object = event_object(index, event)?;
    let name = object.get("name").and_then(Value::as_str).unwrap_or("");
    let id = |field: &str| -> std::result::Result<Option<u32>, String> {
        match object.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .map(Some)
                .ok_or_else(|| field_error(index, field, "not a process/thread id")),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| field_error(index, field, "not a process/thread id")),
            Some(_) => Err(field_error(index, field, "not a process/thread id")),
        }
    };
    let ph = object.get("ph").and_then(Value::as_str).unwrap_or("X");
    if ph == "M" {
        // Another tool's metadata beside ours (a merged profiler trace: Kineto names its "Spans"
        // and "Traces" processes with words for pids) is not this report's to read.
        if name == "thread_name"
            && let (Ok(Some(pid)), Ok(Some(tid))) = (id("pid"), id("tid"))
            && let Some(text) = object
                .get("args")
                .and_then(|a| a.get("name"))
                .and_then(Value::as_str)
        {
            let process = processes.entry(pid).or_default();
            process.pid = pid;
            process.name_thread(tid, text);
        }
        return Ok(());
    }
    if ph == "C" && (name == GAP_TRACK || name == STOPPED_TRACK) {
        // A malformed mark is passed over, as another tool's counter would be: these spans only
        // narrow the window, and the slices stand without them.
        if let (Ok(Some(pid)), Some(Ok(ts))) = (id("pid"), object.get("ts").map(parse_micros)) {
            let process = processes.entry(pid).or_default();
            process.pid = pid;
            let (key, marks) = if name == GAP_TRACK {
                (GAP_KEY, &mut process.gap_marks)
            } else {
                (STOPPED_KEY, &mut process.stop_marks)
            };
            marks.add(ts, object.get("args").and_then(|args| args.get(key)));
        }
        return Ok(());
    }
    let Some(kind) = SliceKind::from_name(name) else {
        return Ok(());
    };
    if ph != "X" {
        return Ok(());
    }
    let (Some(pid), Some(tid)) = (id("pid")?, id("tid")?) else {
        return Err(field_error(index, "pid", "missing"));
    };
    let number = |field: &str| -> std::result::Result<i128, String> {
        let value = object
            .get(field)
            .ok_or_else(|| field_error(index, field, "missing"))?;
        parse_micros(value).map_err(|why| field_error(index, field, why))
    };
    let start_ns = number("ts")?;
    let dur_ns = number("dur")?;
    if dur_ns < 0 {
        return Err(field_error(index, "dur", "negative"));
    }
    shape.gil_slices += 1;
    if kind == SliceKind::Hold {
        shape.holds += 1;
    }
    let process = processes.entry(pid).or_default();
    process.pid = pid;
    let args = object.get("args").and_then(Value::as_object);
    process.add_slice(kind, tid, (start_ns, start_ns + dur_ns), args);
    Ok(())
}

/// The thread name of a gilsample trace is `Python name (kernel name)`; the reference writes
/// `Thread <tid>`. Either is shown as written, less a kernel name that only repeats the process's.
fn thread_label(text: &str) -> String {
    text.to_string()
}

/// What a slice's `args` say about its code or syscall: for a hold the innermost function of the
/// stack it was seen in most (`stack`: frames innermost first, each `{"function", "file", "line"}`
/// or a string; or `stacks`: `[{"stack": [...], "samples": n}]`); for a held-while-blocked
/// stretch its `syscall`.
fn slice_label(kind: SliceKind, args: &Map<String, Value>) -> Option<String> {
    match kind {
        SliceKind::HeldWhileBlocked => args.get("syscall")?.as_str().map(str::to_string),
        SliceKind::Hold => frame_text(hold_stack(args)?.first()?),
        _ => None,
    }
}

/// A hold's stack, innermost frame first: `stack`, or the one of `stacks` seen in most samples.
fn hold_stack(args: &Map<String, Value>) -> Option<&Vec<Value>> {
    let stack = match args.get("stacks").and_then(Value::as_array) {
        Some(stacks) => stacks
            .iter()
            .max_by_key(|s| s.get("samples").and_then(Value::as_u64).unwrap_or(0))?
            .get("stack")?,
        None => args.get("stack")?,
    };
    stack.as_array()
}

/// A frame of CPython's import system (`<frozen importlib._bootstrap>` and
/// `..._bootstrap_external>`, frozen in every version this reads): a stack through one is importing.
fn is_import_frame(frame: &Value) -> bool {
    const IMPORTLIB: &str = "<frozen importlib._bootstrap";
    match frame {
        Value::String(text) => text.contains(IMPORTLIB),
        Value::Object(f) => f
            .get("file")
            .and_then(Value::as_str)
            .is_some_and(|file| file.starts_with(IMPORTLIB)),
        _ => false,
    }
}

/// A hold's kind from its args: `None` where they do not say, `Some(None)` for Python code,
/// `Some(Some((call, frame)))` for one native call, with its call site's frame text
/// `function (file:line)` where the args name its function.
fn held_in(args: &Map<String, Value>) -> Option<Option<(NativeCall, Option<String>)>> {
    if !args.get("native_call")?.as_bool()? {
        return Some(None);
    }
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let site = args.get("call_site").filter(|site| site.is_object());
    let call_site = site.map(|site| CallSite {
        file: text(site, "file"),
        line: site
            .get("line")
            .and_then(Value::as_u64)
            .and_then(|l| u32::try_from(l).ok()),
        source: text(site, "source"),
    });
    let frame = site.and_then(|site| frame_text(site).filter(|_| site.get("function").is_some()));
    let callee = args
        .get("callee")
        .and_then(Value::as_str)
        .map(str::to_string);
    Some(Some((NativeCall { call_site, callee }, frame)))
}

/// `function (file:line)` of one frame, from an object or a string.
pub fn frame_text(frame: &Value) -> Option<String> {
    match frame {
        // gilsample's own `function (path:line)`: shown with the file's name, not its path.
        Value::String(s) => Some(match s.rsplit_once(" (") {
            Some((function, place)) if place.ends_with(')') => {
                let place = place.rsplit('/').next().unwrap_or(place);
                format!("{function} ({place}")
            }
            _ => s.clone(),
        }),
        Value::Object(f) => {
            let function = f.get("function")?.as_str()?;
            let file = f
                .get("file")
                .and_then(Value::as_str)
                .map(|p| p.rsplit('/').next().unwrap_or(p));
            Some(match (file, f.get("line").and_then(Value::as_u64)) {
                (Some(file), Some(line)) => format!("{function} ({file}:{line})"),
                (Some(file), None) => format!("{function} ({file})"),
                _ => function.to_string(),
            })
        }
        _ => None,
    }
}

/// A raw reference file has takes and drops only: the hold is from a take's end to the next drop's
/// start of the same thread, as the reference's converter inserts it.
fn infer_holds(process: &mut ProcessTrace) {
    let mut by_thread: BTreeMap<u32, Vec<Slice>> = BTreeMap::new();
    for slice in &process.slices {
        by_thread.entry(slice.tid).or_default().push(*slice);
    }
    for slices in by_thread.values_mut() {
        slices.sort_by_key(|s| s.start_ns);
        let mut open_take_end = None;
        for slice in slices.iter() {
            match slice.kind {
                SliceKind::Take => open_take_end = Some(slice.end_ns),
                SliceKind::Drop => {
                    if let Some(start) = open_take_end.take()
                        && slice.start_ns >= start
                    {
                        process.slices.push(Slice {
                            kind: SliceKind::Hold,
                            tid: slice.tid,
                            start_ns: start,
                            end_ns: slice.start_ns,
                            label: None,
                            held: Held::Unsaid,
                            importing: false,
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
