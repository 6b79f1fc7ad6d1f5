//! A streaming Chrome Trace JSON writer.
//!
//! Events are written as they arrive (memory stays flat however long the recording), to a temporary
//! file beside the final name; `finish` appends the metadata, syncs, and renames. A recording that is cut
//! short therefore never leaves a truncated file at the final name.
//!
//! Timestamps are whole microseconds (`span_micros`), on the wall clock by default (what Ascend msprof
//! and PyTorch/Kineto traces use, so they line up when opened together); `otherData` records the
//! clock and `trace_to_monotonic_offset_ns` (monotonic_ns = ts_us * 1000 + offset).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::infer::findings::{Handoff, LiveSnapshot};
use crate::infer::held_blocked::BlockedStretch;
use crate::infer::intervals::{GilState, Interval};
use crate::infer::native_call::FrameWatch;
use crate::observed::syscall_name;
use crate::trace::micros::{span_micros, whole_micros};
use crate::trace::native_call::{HoldKinds, SliceArgs};
use crate::trace::output::{check_not_exists, create_partial, end_trace, publish};
use crate::trace::stacks::{PendingStacks, StackReading};
use crate::trace::tap::{TappedSlice, TraceTap, hand_live, tapped};

/// The counter track of the spans the sampler saw nothing of (`ChromeWriter::write_gap`), and its
/// key: 1 from a gap's start, 0 from its end.
pub const GAP_TRACK: &str = "sampler saw nothing";
/// The key of `GAP_TRACK`'s counter samples.
pub const GAP_KEY: &str = "gap";

/// The counter track of the spans the process was found stopped (`ChromeWriter::write_stopped`),
/// and its key.
pub const STOPPED_TRACK: &str = "process stopped";
/// The key of `STOPPED_TRACK`'s counter samples.
pub const STOPPED_KEY: &str = "stopped";

/// Which clock trace timestamps use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceClock {
    /// CLOCK_REALTIME (epoch) microseconds, as profilers write.
    Wall,
    /// CLOCK_MONOTONIC microseconds.
    Monotonic,
}

/// Writes one target's Chrome Trace JSON as it goes, to a partial file renamed to the final path
/// when the trace is finished.
pub struct ChromeWriter {
    out: BufWriter<File>,
    partial: PathBuf,
    final_path: PathBuf,
    pid: u32,
    /// Added to monotonic nanoseconds to get trace nanoseconds.
    offset_ns: i64,
    events: u64,
    /// Flow arrows written, which also numbers them.
    flows: u64,
    /// Stacks waiting for the slice they belong in.
    stacks: PendingStacks,
    /// A live watcher of what is written (trace/tap.rs), if any.
    tap: Option<Box<dyn TraceTap>>,
    /// What decides each hold's kind (trace/native_call.rs).
    holds: HoldKinds,
    /// The process's and threads' names written so far (`write_process_name`,
    /// `write_thread_names`): the end writes only what changed.
    process_named: Option<String>,
    threads_named: BTreeMap<u32, String>,
}

/// Nanoseconds as exact decimal microseconds (`123.456`).
pub fn micros(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

impl ChromeWriter {
    /// Starts a trace for `pid` that will end up at `final_path`. `offset_ns` maps monotonic to trace time.
    pub fn create(
        final_path: &Path,
        force: bool,
        pid: u32,
        offset_ns: i64,
    ) -> Result<ChromeWriter> {
        check_not_exists(final_path, force)?;
        let (file, partial) = create_partial(final_path)?;
        let mut writer = ChromeWriter {
            out: BufWriter::with_capacity(1 << 16, file),
            partial,
            final_path: final_path.to_path_buf(),
            pid,
            offset_ns,
            events: 0,
            flows: 0,
            stacks: PendingStacks::default(),
            tap: None,
            holds: HoldKinds::default(),
            process_named: None,
            threads_named: BTreeMap::new(),
        };
        writer.put("{\"traceEvents\":[\n")?;
        Ok(writer)
    }

    /// The partial file being written, where the data is if the trace is never finished.
    pub fn partial_path(&self) -> &Path {
        &self.partial
    }

    /// Where the trace goes once complete.
    pub fn final_path(&self) -> &Path {
        &self.final_path
    }

    /// Hands every slice written from now on, and each `Finding::Live`, to `tap` (trace/tap.rs).
    pub fn set_tap(&mut self, tap: Box<dyn TraceTap>) {
        self.tap = Some(tap);
    }

    /// Hands a written slice to the tap, with its args.
    fn tap_slice(&mut self, name: &'static str, tid: u32, span: (u64, u64), args: Option<&Value>) {
        if let Some(tap) = self.tap.as_mut() {
            let slice = TappedSlice {
                args,
                ..tapped(name, tid, span, self.offset_ns)
            };
            tap.slice(&slice);
        }
    }

    /// Hands a live snapshot to the tap (trace/tap.rs), with the stacks read so far; without a tap,
    /// nothing.
    pub fn tap_live(&mut self, snapshot: &LiveSnapshot) {
        if let Some(tap) = self.tap.as_mut() {
            hand_live(tap.as_mut(), snapshot, &self.stacks, self.offset_ns);
        }
    }

    fn put(&mut self, text: &str) -> Result<()> {
        self.out
            .write_all(text.as_bytes())
            .map_err(|e| self.output_error(e))
    }

    fn output_error(&self, e: std::io::Error) -> Error {
        Error::Output {
            path: self.final_path.clone(),
            why: format!("{e} (partial data is in {})", self.partial.display()),
        }
    }

    fn separator(&mut self) -> Result<()> {
        if self.events > 0 {
            self.put(",\n")?;
        }
        self.events += 1;
        Ok(())
    }

    /// Starts a complete event (`"ph":"X"`) named `name` on thread `tid` over `span` (monotonic
    /// ns), up to its args: the caller closes it. Straight into the buffered file: a String per
    /// event was a twentieth of gilsample's CPU.
    fn slice_start(&mut self, name: &str, tid: u32, span: (u64, u64)) -> Result<()> {
        self.separator()?;
        let offset = self.offset_ns as i128;
        let (ts, dur) = span_micros(span.0 as i128 + offset, span.1 as i128 + offset);
        write!(
            self.out,
            "{{\"name\":\"{name}\",\"ph\":\"X\",\"ts\":{ts},\"dur\":{dur},\"pid\":{},\"tid\":{tid}",
            self.pid
        )
        .map_err(|e| self.output_error(e))
    }

    /// Writes a complete event for `interval` if its state is one the trace shows.
    pub fn write_interval(&mut self, interval: &Interval) -> Result<()> {
        let Some(name) = interval.state.event_name() else {
            return Ok(());
        };
        self.slice_start(name, interval.tid, (interval.start_ns, interval.end_ns))?;
        let stacks = self.stacks.args_for(interval);
        let kind = match interval.state {
            GilState::Hold => self.holds.kind_of(interval, stacks.as_ref()),
            _ => None,
        };
        let args = SliceArgs { kind, stacks };
        if self.tap.is_some() {
            let span = (interval.start_ns, interval.end_ns);
            let value = (!args.is_empty())
                .then(|| serde_json::to_value(&args))
                .transpose();
            let value = value.map_err(|e| self.output_error(e.into()))?;
            self.tap_slice(name, interval.tid, span, value.as_ref());
        }
        if args.is_empty() {
            return self.put("}");
        }
        self.put(",\"args\":")?;
        serde_json::to_writer(&mut self.out, &args).map_err(|e| self.output_error(e.into()))?;
        self.put("}")
    }

    /// Writes a stretch in which the holder slept in a syscall while holding the GIL: a slice named
    /// `held_while_blocked` inside the thread's `hold_gil`, with the syscall by name in its args.
    pub fn write_held_while_blocked(&mut self, stretch: &BlockedStretch) -> Result<()> {
        let span = (stretch.start_ns, stretch.end_ns);
        self.slice_start("held_while_blocked", stretch.tid, span)?;
        write!(
            self.out,
            ",\"args\":{{\"syscall\":\"{}\"}}}}",
            syscall_name(stretch.nr)
        )
        .map_err(|e| self.output_error(e))?;
        if self.tap.is_some() {
            let args = json!({"syscall": syscall_name(stretch.nr)});
            self.tap_slice("held_while_blocked", stretch.tid, span, Some(&args));
        }
        Ok(())
    }

    /// Writes a hand-off as a flow arrow (Chrome trace flow events, drawn by Perfetto UI) from the
    /// thread that let the GIL go, at its last sample holding it, to the one that took it, at the
    /// start of its hold. Each arrow has its own id.
    pub fn write_handoff(&mut self, handoff: &Handoff) -> Result<()> {
        self.flows += 1;
        let offset = self.offset_ns as i128;
        let from = whole_micros(handoff.last_held_ns as i128 + offset);
        let to = whole_micros(handoff.taken_ns as i128 + offset);
        self.separator()?;
        write!(
            self.out,
            "{{\"name\":\"GIL hand-off\",\"cat\":\"gil\",\"ph\":\"s\",\"id\":{id},\"ts\":{from},\"pid\":{pid},\"tid\":{}}},\n\
             {{\"name\":\"GIL hand-off\",\"cat\":\"gil\",\"ph\":\"f\",\"bp\":\"e\",\"id\":{id},\"ts\":{to},\"pid\":{pid},\"tid\":{}}}",
            handoff.from_tid,
            handoff.to_tid,
            id = self.flows,
            pid = self.pid,
        )
        .map_err(|e| self.output_error(e))
    }

    /// A stack the sampler read: it goes into the `args` of its thread's slice that covers the
    /// time it was read.
    pub fn note_stack(&mut self, reading: StackReading) {
        self.stacks.note(reading);
    }

    /// What the sampler saw of thread `tid`'s innermost frame during a hold, read last at `t_ns`.
    pub fn note_hold_frames(&mut self, tid: u32, t_ns: u64, watch: FrameWatch) {
        self.holds.note_frames(tid, t_ns, watch);
    }

    /// The target's switch interval from now on.
    pub fn note_switch_interval(&mut self, us: u64) {
        self.holds.note_interval(us);
    }

    /// The sampling rate the recording asked for.
    pub fn note_sampling_rate(&mut self, hz: f64) {
        self.holds.note_sampling_rate(hz);
    }

    /// Read native calls' source lines from the target's files (a live recording).
    pub fn read_sources_of_target(&mut self) {
        self.holds.read_sources_of(self.pid);
    }

    /// Writes a counter sample on the process's "GIL waiters" track.
    pub fn write_waiters(&mut self, t_ns: u64, count: u32) -> Result<()> {
        self.holds.note_waiters(t_ns, count);
        self.write_counter("GIL waiters", "take_gil", t_ns, count)
    }

    /// Writes a counter sample on the process's "sampling rate" track: the rate the sampler ticked at
    /// from `t_ns` on (lower while the target was quiet).
    pub fn write_rate(&mut self, t_ns: u64, hz: u32) -> Result<()> {
        self.write_counter("sampling rate", "Hz", t_ns, hz)
    }

    /// A span during which the process was found stopped (sampler/stop_watch.rs), on a track of its
    /// own: 1 from `from_ns`, 0 from `to_ns`.
    pub fn write_stopped(&mut self, from_ns: u64, to_ns: u64) -> Result<()> {
        self.write_counter(STOPPED_TRACK, STOPPED_KEY, from_ns, 1)?;
        self.write_counter(STOPPED_TRACK, STOPPED_KEY, to_ns, 0)
    }

    /// A span the sampler saw nothing of (`Finding::Gap`), on a track of its own: 1 from
    /// `from_ns`, 0 from `to_ns`. `report` reads it back (`GAP_TRACK`) and leaves the span out of
    /// its figures; a live view's tap gets it too.
    pub fn write_gap(&mut self, from_ns: u64, to_ns: u64) -> Result<()> {
        if let Some(tap) = self.tap.as_mut() {
            // On the file's whole microseconds, as a reader of the file gets the span.
            let on_trace = |ns: u64| 1000 * whole_micros(ns as i128 + self.offset_ns as i128);
            tap.gap(on_trace(from_ns), on_trace(to_ns));
        }
        self.write_counter(GAP_TRACK, GAP_KEY, from_ns, 1)?;
        self.write_counter(GAP_TRACK, GAP_KEY, to_ns, 0)
    }

    fn write_counter(&mut self, track: &str, key: &str, t_ns: u64, value: u32) -> Result<()> {
        self.separator()?;
        let ts = whole_micros(t_ns as i128 + self.offset_ns as i128);
        write!(
            self.out,
            "{{\"name\":\"{track}\",\"ph\":\"C\",\"ts\":{ts},\"pid\":{},\"args\":{{\"{key}\":{value}}}}}",
            self.pid
        )
        .map_err(|e| self.output_error(e))
    }

    /// Names the process, written and flushed at once: a recording killed before its end leaves a
    /// file that still says whose it is (`finish` names it again only if the name changed).
    pub fn write_process_name(&mut self, name: &str) -> Result<()> {
        self.name_process(name)?;
        self.out.flush().map_err(|e| self.output_error(e))
    }

    fn name_process(&mut self, name: &str) -> Result<()> {
        if self.process_named.as_deref() == Some(name) {
            return Ok(());
        }
        let pid = self.pid;
        self.write_value(
            &json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}),
        )?;
        self.process_named = Some(name.to_string());
        Ok(())
    }

    /// Names threads as the sampler learns them, written and flushed to the file at once: a
    /// recording killed before its end (SIGKILL, the OOM killer) leaves a file whose threads are
    /// named.
    pub fn write_thread_names(&mut self, names: &[(u32, String)]) -> Result<()> {
        for (tid, name) in names {
            self.name_thread(*tid, name)?;
        }
        self.out.flush().map_err(|e| self.output_error(e))
    }

    fn name_thread(&mut self, tid: u32, name: &str) -> Result<()> {
        if self.threads_named.get(&tid).map(String::as_str) == Some(name) {
            return Ok(());
        }
        let pid = self.pid;
        self.write_value(&json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}))?;
        self.threads_named.insert(tid, name.to_string());
        Ok(())
    }

    /// Writes a metadata or other pre-built event.
    pub fn write_value(&mut self, event: &Value) -> Result<()> {
        self.separator()?;
        let text = event.to_string();
        self.put(&text)
    }

    /// Appends the process/thread names not written yet (or changed), the threads' order and
    /// `otherData`, syncs, and renames into place. Before the rename, `amend` may read the complete
    /// file (still at its temporary name) and return a key to add to `otherData` (what the analysis
    /// of the file says): the file's end is then written again with it.
    pub fn finish(
        mut self,
        process_name: &str,
        threads: &[(u32, String)],
        mut other: Map<String, Value>,
        force: bool,
        amend: &mut dyn FnMut(&Path) -> Option<(String, Value)>,
    ) -> Result<PathBuf> {
        let pid = self.pid;
        // What the holds' kinds were judged against (`report` reads it back).
        other.insert(
            "switch_interval_us".into(),
            json!(self.holds.switch_interval_us()),
        );
        self.name_process(process_name)?;
        self.write_value(&json!({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": 0}}))?;
        for (index, (tid, name)) in threads.iter().enumerate() {
            self.name_thread(*tid, name)?;
            self.write_value(&json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": index}}))?;
        }
        self.out.flush().map_err(|e| self.output_error(e))?;
        let tail_at = self
            .out
            .get_mut()
            .stream_position()
            .map_err(|e| self.output_error(e))?;
        end_trace(&mut self.out, &Value::Object(other.clone()))
            .map_err(|e| self.output_error(e))?;
        if let Some((key, value)) = amend(&self.partial) {
            other.insert(key, value);
            let file = self.out.get_mut();
            file.set_len(tail_at)
                .and_then(|()| file.seek(SeekFrom::Start(tail_at)).map(drop))
                .map_err(|e| self.output_error(e))?;
            end_trace(&mut self.out, &Value::Object(other)).map_err(|e| self.output_error(e))?;
        }
        publish(&self.partial, &self.final_path, force)?;
        Ok(self.final_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::intervals::GilState;

    #[test]
    fn micros_are_exact() {
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(5), "0.005");
        assert_eq!(micros(-1_500), "-1.500");
    }

    #[test]
    fn writes_a_valid_trace_and_renames_it_into_place() {
        let dir = std::env::temp_dir().join(format!("gilsample-chrome-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("GIL_1_rank_0.json");
        let _ = std::fs::remove_file(&path);
        let mut w = ChromeWriter::create(&path, false, 1, 1_000).unwrap();
        let partial = w.partial_path().to_path_buf();
        w.write_interval(&Interval {
            tid: 2,
            state: GilState::Hold,
            start_ns: 10_000,
            end_ns: 12_500,
        })
        .unwrap();
        w.write_interval(&Interval {
            tid: 2,
            state: GilState::Released,
            start_ns: 12_500,
            end_ns: 13_000,
        })
        .unwrap();
        w.write_waiters(11_000, 1).unwrap();
        // The amendment reads the complete file and adds a key to its metadata.
        let mut read_back = 0;
        let done = w
            .finish(
                "python",
                &[(2, "worker".into())],
                Map::new(),
                false,
                &mut |p| {
                    let text = std::fs::read_to_string(p).ok()?;
                    read_back = serde_json::from_str::<Value>(&text).ok()?["traceEvents"]
                        .as_array()?
                        .len();
                    Some(("amended".into(), serde_json::json!(true)))
                },
            )
            .unwrap();
        assert!(!partial.exists());
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&done).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let hold = events.iter().find(|e| e["name"] == "hold_gil").unwrap();
        // 11.0 µs to 13.5 µs, boundaries rounded to whole µs.
        assert_eq!(hold["ts"], serde_json::json!(11));
        assert_eq!(hold["dur"], serde_json::json!(3));
        assert!(events.iter().all(|e| e["name"] != "released"));
        assert_eq!(v["displayTimeUnit"], "ns");
        assert_eq!(v["otherData"]["amended"], true);
        assert_eq!(read_back, events.len(), "the amendment saw every event");
        assert!(
            ChromeWriter::create(&path, false, 1, 0).is_err(),
            "an existing trace is not overwritten"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_written_early_are_not_written_again_at_the_end_unless_they_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("GIL_1_rank_0.json");
        let mut w = ChromeWriter::create(&path, false, 1, 0).unwrap();
        w.write_process_name("Python 3.12.1 pid 1").unwrap();
        w.write_thread_names(&[(1, "MainThread (python3)".into()), (2, "python3".into())])
            .unwrap();
        // On the file already, before any end: what a killed recording leaves.
        let early = std::fs::read_to_string(w.partial_path()).unwrap();
        assert!(early.contains("\"MainThread (python3)\"") && early.contains("\"python3\""));
        assert!(early.contains("\"Python 3.12.1 pid 1\""));
        // Thread 2's Python name, read later; thread 1 unchanged; thread 3 named only at the end.
        w.write_thread_names(&[(2, "loader-0".into())]).unwrap();
        let threads = [
            (1, "MainThread (python3)".to_string()),
            (2, "loader-0".to_string()),
            (3, "writer".to_string()),
        ];
        let done = w
            .finish(
                "Python 3.12.1 pid 1",
                &threads,
                Map::new(),
                false,
                &mut |_| None,
            )
            .unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&done).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let names_of = |name: &str, tid: Option<u32>| -> Vec<&str> {
            events
                .iter()
                .filter(|e| e["name"] == name && tid.is_none_or(|t| e["tid"] == t))
                .map(|e| e["args"]["name"].as_str().unwrap())
                .collect()
        };
        assert_eq!(names_of("process_name", None), ["Python 3.12.1 pid 1"]);
        assert_eq!(names_of("thread_name", Some(1)), ["MainThread (python3)"]);
        assert_eq!(names_of("thread_name", Some(2)), ["python3", "loader-0"]);
        assert_eq!(names_of("thread_name", Some(3)), ["writer"]);
        let sorted = events.iter().filter(|e| e["name"] == "thread_sort_index");
        assert_eq!(sorted.count(), 3, "every thread's order, at the end");
    }
}
