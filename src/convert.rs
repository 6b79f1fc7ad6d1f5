//! `gilsample convert`: the reference tool's raw files (a JSON array of `take_gil` / `drop_gil` complete
//! events, `ts` and `dur` as numbers or decimal strings) to Chrome Trace with `hold_gil` between each
//! take and the next drop of the same thread, as `gil_trace_convert.py` does.
//!
//! The reference sorts each thread's events by `ts` before pairing, and files are not guaranteed to
//! be sorted, so the result must not depend on the input's order. It reads the file twice: the first
//! pass finds the threads whose events are out of order (one timestamp per thread kept), the second
//! streams every other thread's events through as they come and holds back only the out-of-order
//! threads' events, which are sorted (stably, by exact decimal `ts`, as the reference's sort keeps ties
//! in file order) and paired at the end. A sorted file of millions of events thus converts in flat
//! memory. Malformed input is an error naming the event index and the field. `ts` and `dur` are
//! written as exact decimals of the nanoseconds read (`decimal.rs`), holds computed from them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::decimal::{ExactMicros, decimal_micros, parse_micros};
use crate::error::{Error, Result};
use crate::merge::document::{event_object, field_error, for_each_event, string_field};
use crate::trace::output::{check_file_output, create_partial, end_trace, ends_in_slash, publish};

/// What a conversion saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvertReport {
    /// Trace events read from the input.
    pub events: u64,
    /// `hold_gil` slices written.
    pub holds: u64,
    /// Takes never followed by a drop of their thread (the recording ended while holding).
    pub unpaired_takes: u64,
    /// Threads whose events were not in time order in the file (sorted before pairing).
    pub sorted_threads: u64,
}

/// How far a conversion has gone, for a display: said every `PROGRESS_EVERY` events of each pass
/// and at its end. A file of millions of events takes seconds a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvertProgress {
    /// The first pass, which finds the threads whose events are out of order.
    Checking {
        /// Events read so far.
        events: u64,
    },
    /// The second pass, which writes.
    Writing {
        /// Events read so far.
        events: u64,
        /// Events in the file.
        of: u64,
    },
}

/// Events between two `ConvertProgress` reports: a few a second, at the pace events are read.
const PROGRESS_EVERY: u64 = 1 << 16;

/// Tells `progress` how far a pass has gone (`said`) where `events` closes a stretch of
/// `PROGRESS_EVERY` of them.
fn report_every_stretch(
    events: u64,
    progress: &mut dyn FnMut(ConvertProgress),
    said: impl FnOnce(u64) -> ConvertProgress,
) {
    if events.is_multiple_of(PROGRESS_EVERY) {
        progress(said(events));
    }
}

/// The output name the reference uses: `.json` appended when missing.
pub fn output_name(output: &Path) -> PathBuf {
    if output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        output.to_path_buf()
    } else {
        PathBuf::from(format!("{}.json", output.display()))
    }
}

/// One validated input event.
struct RawEvent {
    take: bool,
    start_ns: i128,
    dur_ns: i128,
    pid: u64,
    tid: u64,
    /// `ts` exactly, for ordering.
    order: ExactMicros,
}

type ThreadKey = (u64, u64);

fn validate(index: u64, event: &Value) -> std::result::Result<Option<RawEvent>, String> {
    let object = event_object(index, event)?;
    let name = string_field(index, object, "name")?;
    let take = match name {
        "take_gil" => true,
        "drop_gil" => false,
        // Other events (metadata, a hold written by another converter) are passed over.
        _ => return Ok(None),
    };
    let number = |field: &str| -> std::result::Result<i128, String> {
        let value = object
            .get(field)
            .ok_or_else(|| field_error(index, field, "missing"))?;
        parse_micros(value).map_err(|why| field_error(index, field, why))
    };
    let id = |field: &str| -> std::result::Result<u64, String> {
        match object.get(field) {
            Some(Value::Number(n)) => n
                .as_u64()
                .filter(|&v| v <= u32::MAX as u64)
                .ok_or_else(|| field_error(index, field, "not a process/thread id")),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .ok()
                .filter(|&v| v <= u32::MAX as u64)
                .ok_or_else(|| field_error(index, field, "not a process/thread id")),
            Some(_) => Err(field_error(index, field, "not a process/thread id")),
            None => Err(field_error(index, field, "missing")),
        }
    };
    let dur_ns = number("dur")?;
    if dur_ns < 0 {
        return Err(field_error(index, "dur", "negative"));
    }
    let start_ns = number("ts")?;
    let order = ExactMicros::parse(&object["ts"]).map_err(|why| field_error(index, "ts", why))?;
    Ok(Some(RawEvent {
        take,
        start_ns,
        dur_ns,
        pid: id("pid")?,
        tid: id("tid")?,
        order,
    }))
}

/// The first pass's state: per thread the latest `ts` seen, and the threads that went back in time.
#[derive(Default)]
struct OrderCheck {
    last: HashMap<ThreadKey, ExactMicros>,
    out_of_order: HashSet<ThreadKey>,
}

impl OrderCheck {
    fn see(&mut self, raw: RawEvent) {
        let key = (raw.pid, raw.tid);
        match self.last.get_mut(&key) {
            Some(previous) if raw.order < *previous => {
                self.out_of_order.insert(key);
            }
            Some(previous) => *previous = raw.order,
            None => {
                self.last.insert(key, raw.order);
            }
        }
    }
}

/// The first pass: the threads whose events are not in time order in the file. A file that has
/// `hold_gil` slices already (a gilsample recording, or one converted before) is refused: pairing
/// its takes and drops again would put a second hold over each.
/// Also the number of events in the file.
fn out_of_order_threads(
    input: &Path,
    progress: &mut dyn FnMut(ConvertProgress),
) -> Result<(HashSet<ThreadKey>, u64)> {
    let mut check = OrderCheck::default();
    let (mut holds, mut events) = (0u64, 0u64);
    for_each_event(input, |index, event| {
        events = index + 1;
        report_every_stretch(events, progress, |events| ConvertProgress::Checking {
            events,
        });
        holds += u64::from(event.get("name").and_then(Value::as_str) == Some("hold_gil"));
        if let Some(raw) = validate(index, &event)? {
            check.see(raw);
        }
        Ok(())
    })?;
    if holds > 0 {
        return Err(Error::Input {
            path: input.to_path_buf(),
            why: format!(
                "it has {holds} hold_gil slices already (a gilsample recording, or a file converted \
                 before): there is nothing to convert. Open it as it is, merge it with `gilsample \
                 merge`, or read it with `gilsample report`"
            ),
        });
    }
    progress(ConvertProgress::Checking { events });
    Ok((check.out_of_order, events))
}

/// The second pass: the output, per thread the end of its last unpaired take, and the events of the
/// out-of-order threads, held back until the end.
struct Converter<W: Write> {
    out: W,
    first: bool,
    index: u64,
    pending_take_end: HashMap<ThreadKey, i128>,
    threads: BTreeSet<ThreadKey>,
    held_back: HashMap<ThreadKey, Vec<RawEvent>>,
    report: ConvertReport,
}

impl<W: Write> Converter<W> {
    fn new(out: W, out_of_order: HashSet<ThreadKey>) -> Converter<W> {
        Converter {
            out,
            first: true,
            index: 0,
            pending_take_end: HashMap::new(),
            threads: BTreeSet::new(),
            report: ConvertReport {
                sorted_threads: out_of_order.len() as u64,
                ..ConvertReport::default()
            },
            held_back: out_of_order.into_iter().map(|k| (k, Vec::new())).collect(),
        }
    }

    fn write_event(
        &mut self,
        name: &str,
        start_ns: i128,
        dur_ns: i128,
        pid: u64,
        tid: u64,
    ) -> std::io::Result<()> {
        // Exact decimals, as the reference computes: a hold starts at its take's end to the
        // nanosecond, and a 2.1 µs drop stays 2.1 µs.
        let (ts, dur) = (decimal_micros(start_ns), decimal_micros(dur_ns));
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        write!(
            self.out,
            "{{\"name\":\"{name}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{pid},\"tid\":{tid}}}",
            ts, dur
        )
    }

    fn accept(&mut self, event: Value) -> std::result::Result<(), String> {
        let index = self.index;
        self.index += 1;
        let Some(raw) = validate(index, &event)? else {
            return Ok(());
        };
        self.report.events += 1;
        let key = (raw.pid, raw.tid);
        self.threads.insert(key);
        match self.held_back.get_mut(&key) {
            Some(held) => held.push(raw),
            None => self.pair(raw).map_err(|e| e.to_string())?,
        }
        Ok(())
    }

    /// Sorts each held-back thread's events (stably: ties stay in file order) and pairs them.
    fn finish_held_back(&mut self) -> std::io::Result<()> {
        let mut held: Vec<(ThreadKey, Vec<RawEvent>)> = self.held_back.drain().collect();
        held.sort_by_key(|(key, _)| *key);
        for (_, mut events) in held {
            events.sort_by(|a, b| a.order.cmp(&b.order));
            for raw in events {
                self.pair(raw)?;
            }
        }
        Ok(())
    }

    /// Writes one event of a thread whose events come in time order, with the hold it closes.
    fn pair(&mut self, raw: RawEvent) -> std::io::Result<()> {
        let key = (raw.pid, raw.tid);
        if raw.take {
            self.write_event("take_gil", raw.start_ns, raw.dur_ns, raw.pid, raw.tid)?;
            if self
                .pending_take_end
                .insert(key, raw.start_ns + raw.dur_ns)
                .is_some()
            {
                self.report.unpaired_takes += 1;
            }
        } else {
            if let Some(hold_start) = self.pending_take_end.remove(&key)
                && raw.start_ns >= hold_start
            {
                self.write_event(
                    "hold_gil",
                    hold_start,
                    raw.start_ns - hold_start,
                    raw.pid,
                    raw.tid,
                )?;
                self.report.holds += 1;
            }
            self.write_event("drop_gil", raw.start_ns, raw.dur_ns, raw.pid, raw.tid)?;
        }
        Ok(())
    }
}

/// Converts `input` into `output` (`.json` appended when missing), telling `progress` how far it is.
pub fn convert(
    input: &Path,
    output: &Path,
    force: bool,
    progress: &mut dyn FnMut(ConvertProgress),
) -> Result<(PathBuf, ConvertReport)> {
    // `-o results` writes results.json (beside a directory results/ too); `-o results/` is a
    // directory, refused with a name that would do.
    let output = if ends_in_slash(output) {
        output.to_path_buf()
    } else {
        output_name(output)
    };
    check_file_output(&output, force, "converted.json")?;
    // Checked before anything is created, so a missing input leaves nothing behind. The input is
    // read twice (first for threads whose events are out of order), which a pipe cannot be: refused
    // before it is opened, since opening a FIFO waits for its writer.
    let input_error = |why: String| Error::Input {
        path: input.to_path_buf(),
        why,
    };
    let meta = std::fs::metadata(input).map_err(|e| input_error(e.to_string()))?;
    if meta.is_dir() {
        return Err(input_error(
            "a directory: convert takes one trace file (GIL_<pid>_rank_0.json)".into(),
        ));
    }
    if !meta.is_file() {
        return Err(input_error(
            "not a regular file: convert reads its input twice, so a pipe or a device cannot be \
             converted; save it to a file first"
                .into(),
        ));
    }
    File::open(input).map_err(|e| input_error(e.to_string()))?;
    let (out_of_order, of) = out_of_order_threads(input, progress)?;
    let (partial_file, partial) = create_partial(&output)?;
    let fail = |e: std::io::Error| Error::Output {
        path: output.clone(),
        why: format!("{e} (partial data is in {})", partial.display()),
    };
    let mut converter = Converter::new(BufWriter::new(partial_file), out_of_order);
    converter
        .out
        .write_all(b"{\"traceEvents\":[\n")
        .map_err(fail)?;
    let written = for_each_event(input, |index, event| {
        let events = index + 1;
        report_every_stretch(events, progress, |events| ConvertProgress::Writing {
            events,
            of,
        });
        converter.accept(event)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    progress(ConvertProgress::Writing { events: of, of });
    converter.finish_held_back().map_err(fail)?;
    converter.report.unpaired_takes += converter.pending_take_end.len() as u64;
    let pids: BTreeSet<u64> = converter.threads.iter().map(|&(pid, _)| pid).collect();
    let mut metadata = Vec::new();
    for pid in &pids {
        metadata.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": format!("GIL pid {pid}")}}));
    }
    for (pid, tid) in &converter.threads {
        metadata.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": format!("thread {tid}")}}));
    }
    for event in metadata {
        if !converter.first {
            converter.out.write_all(b",\n").map_err(fail)?;
        }
        converter.first = false;
        serde_json::to_writer(&mut converter.out, &event).map_err(|e| fail(e.into()))?;
    }
    let other = json!({"converted_from": input.display().to_string(), "producer": format!("gilsample {} convert", env!("CARGO_PKG_VERSION"))});
    end_trace(&mut converter.out, &other).map_err(fail)?;
    publish(&partial, &output, force)?;
    Ok((output, converter.report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_output_like_the_reference() {
        assert_eq!(
            output_name(Path::new("out.JSON")),
            PathBuf::from("out.JSON")
        );
        assert_eq!(output_name(Path::new("out")), PathBuf::from("out.json"));
        assert_eq!(
            output_name(Path::new("out.json")),
            PathBuf::from("out.json")
        );
    }

    #[test]
    fn pairs_each_take_with_the_next_drop_of_its_thread() {
        let mut c = Converter::new(Vec::new(), HashSet::new());
        for event in [
            json!({"name": "take_gil", "ph": "X", "ts": "100", "dur": "5", "pid": 1, "tid": 2}),
            json!({"name": "take_gil", "ph": "X", "ts": 101, "dur": 1, "pid": 1, "tid": 3}),
            json!({"name": "drop_gil", "ph": "X", "ts": "150.5", "dur": "1", "pid": 1, "tid": 2}),
        ] {
            c.accept(event).unwrap();
        }
        let text = String::from_utf8(c.out).unwrap();
        assert!(
            text.contains(r#"{"name":"hold_gil","ph":"X","ts":105,"dur":45.5,"pid":1,"tid":2}"#),
            "{text}"
        );
        assert_eq!(c.report.holds, 1);
        assert_eq!(c.pending_take_end.len(), 1, "thread 3's take is still open");
    }

    #[test]
    fn malformed_events_name_their_index_and_field() {
        let mut c = Converter::new(Vec::new(), HashSet::new());
        c.accept(json!({"name": "take_gil", "ts": 1, "dur": 1, "pid": 1, "tid": 1}))
            .unwrap();
        let err = c
            .accept(json!({"name": "drop_gil", "ts": "x", "dur": 1, "pid": 1, "tid": 1}))
            .unwrap_err();
        assert_eq!(
            err,
            "event 1: field `ts`: \"x\" is not a decimal number of microseconds"
        );
        let err = c
            .accept(json!({"name": "drop_gil", "ts": 1, "pid": 1, "tid": 1}))
            .unwrap_err();
        assert!(err.starts_with("event 2: field `dur`: missing"), "{err}");
        assert!(
            c.accept(json!([1, 2]))
                .unwrap_err()
                .contains("event 3: not a JSON object")
        );
    }

    /// Both passes over events in memory; the output's events as sorted lines.
    fn convert_in_memory(events: &[Value]) -> (Vec<String>, ConvertReport) {
        let mut check = OrderCheck::default();
        for (index, event) in events.iter().enumerate() {
            if let Some(raw) = validate(index as u64, event).unwrap() {
                check.see(raw);
            }
        }
        let mut c = Converter::new(Vec::new(), check.out_of_order);
        for event in events {
            c.accept(event.clone()).unwrap();
        }
        c.finish_held_back().unwrap();
        c.report.unpaired_takes += c.pending_take_end.len() as u64;
        let text = String::from_utf8(c.out).unwrap();
        let mut lines: Vec<String> = text.split(",\n").map(str::to_string).collect();
        lines.sort();
        (lines, c.report)
    }

    #[test]
    fn any_input_order_gives_the_result_of_the_sorted_input() {
        // Two threads; ties, sub-nanosecond differences, and numbers mixed with decimal strings.
        let sorted = vec![
            json!({"name": "take_gil", "ts": "100", "dur": "5", "pid": 1, "tid": 2}),
            json!({"name": "take_gil", "ts": 100, "dur": 2, "pid": 1, "tid": 3}),
            json!({"name": "drop_gil", "ts": "120.0001", "dur": "1", "pid": 1, "tid": 2}),
            json!({"name": "drop_gil", "ts": "120.0002", "dur": "1", "pid": 1, "tid": 3}),
            json!({"name": "take_gil", "ts": 121.5, "dur": 3, "pid": 1, "tid": 2}),
            json!({"name": "drop_gil", "ts": "130", "dur": "1", "pid": 1, "tid": 2}),
            json!({"name": "take_gil", "ts": "131", "dur": 1, "pid": 1, "tid": 3}),
        ];
        let (expected, expected_report) = convert_in_memory(&sorted);
        assert_eq!(expected_report.sorted_threads, 0);
        assert_eq!(expected_report.holds, 3);
        assert_eq!(expected_report.unpaired_takes, 1);
        let mut reversed = sorted.clone();
        reversed.reverse();
        let mut interleaved = sorted.clone();
        interleaved.swap(0, 5);
        interleaved.swap(2, 4);
        for shuffled in [reversed, interleaved] {
            let (lines, report) = convert_in_memory(&shuffled);
            assert_eq!(lines, expected);
            assert_eq!(report.holds, expected_report.holds);
            assert_eq!(report.unpaired_takes, expected_report.unpaired_takes);
            assert!(report.sorted_threads > 0);
        }
    }

    #[test]
    fn each_pass_says_how_far_it_has_gone() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("GIL_1_rank_0.json");
        let n = PROGRESS_EVERY + 7;
        let events: Vec<Value> = (0..n)
            .map(|i| {
                let name = if i % 2 == 0 { "take_gil" } else { "drop_gil" };
                json!({"name": name, "ph": "X", "ts": i * 10, "dur": 1, "pid": 1, "tid": 2})
            })
            .collect();
        std::fs::write(&input, serde_json::to_vec(&events).unwrap()).unwrap();
        let mut said = Vec::new();
        let output = dir.path().join("out.json");
        let (_, report) = convert(&input, &output, false, &mut |p| said.push(p)).unwrap();
        assert_eq!(report.events, n);
        assert_eq!(
            said,
            [
                ConvertProgress::Checking {
                    events: PROGRESS_EVERY
                },
                ConvertProgress::Checking { events: n },
                ConvertProgress::Writing {
                    events: PROGRESS_EVERY,
                    of: n
                },
                ConvertProgress::Writing { events: n, of: n },
            ]
        );
    }
}
