//! `gilsample convert`: the reference tool's raw files (a JSON array of `take_gil` / `drop_gil` complete
//! events, `ts` and `dur` as numbers or decimal strings) to Chrome Trace with `hold_gil` between each
//! take and the next drop of the same thread, as `gil_trace_convert.py` does.
//!
//! It streams: events are read one at a time (`merge::document`, shared with `merge`) and written as
//! they come, so a file of millions of events converts in flat memory. Malformed input is an error
//! naming the event index and the field.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::merge::document::{event_object, field_error, for_each_event, string_field};
use crate::trace::chrome::span_micros;
use crate::trace::output::{check_not_exists, create_partial, end_trace, publish};

/// What a conversion saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvertReport {
    pub events: u64,
    pub holds: u64,
    /// Takes never followed by a drop of their thread (the recording ended while holding).
    pub unpaired_takes: u64,
}

/// The output name the reference uses: `.json` appended when missing.
pub fn output_name(output: &Path) -> PathBuf {
    if output.extension().is_some_and(|e| e == "json") {
        output.to_path_buf()
    } else {
        PathBuf::from(format!("{}.json", output.display()))
    }
}

/// Nanoseconds from a JSON number or decimal string of microseconds, exactly for decimal strings.
pub fn parse_micros(value: &Value) -> std::result::Result<i128, String> {
    let out_of_range = || "out of range".to_string();
    match value {
        Value::Number(n) => {
            // Numbers keep their text (serde_json's arbitrary_precision): epoch µs with nanosecond
            // decimals do not survive a trip through f64.
            let text = n.to_string();
            if let Ok(ns) = parse_micros(&Value::String(text)) {
                return Ok(ns);
            }
            let us = n.as_f64().ok_or_else(out_of_range)?;
            if !us.is_finite() || us.abs() > 1e17 {
                return Err(out_of_range());
            }
            Ok((us * 1000.0).round() as i128)
        }
        Value::String(text) => {
            let text = text.trim();
            let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
            let negative = whole.starts_with('-');
            let digits = whole.trim_start_matches('-');
            let ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
            if digits.is_empty() || !ok(digits) || !ok(frac) || digits.len() > 17 {
                return Err(format!("{text:?} is not a decimal number of microseconds"));
            }
            let mut ns: i128 = digits.parse::<i128>().map_err(|_| out_of_range())? * 1000;
            let frac3: String = frac.chars().chain("000".chars()).take(3).collect();
            ns += frac3.parse::<i128>().unwrap_or(0);
            Ok(if negative { -ns } else { ns })
        }
        _ => Err("expected a number or a decimal string".into()),
    }
}

/// One validated input event.
struct RawEvent {
    take: bool,
    start_ns: i128,
    dur_ns: i128,
    pid: u64,
    tid: u64,
}

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
                .map_err(|_| field_error(index, field, "not a process/thread id")),
            Some(_) => Err(field_error(index, field, "not a process/thread id")),
            None => Err(field_error(index, field, "missing")),
        }
    };
    let dur_ns = number("dur")?;
    if dur_ns < 0 {
        return Err(field_error(index, "dur", "negative"));
    }
    Ok(Some(RawEvent {
        take,
        start_ns: number("ts")?,
        dur_ns,
        pid: id("pid")?,
        tid: id("tid")?,
    }))
}

/// The streaming state: the output and, per thread, the end of its last unpaired take.
struct Converter<W: Write> {
    out: W,
    first: bool,
    index: u64,
    pending_take_end: HashMap<(u64, u64), i128>,
    threads: BTreeSet<(u64, u64)>,
    report: ConvertReport,
}

impl<W: Write> Converter<W> {
    fn new(out: W) -> Converter<W> {
        Converter {
            out,
            first: true,
            index: 0,
            pending_take_end: HashMap::new(),
            threads: BTreeSet::new(),
            report: ConvertReport::default(),
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
        let (ts, dur) = span_micros(start_ns, start_ns + dur_ns);
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
        let io = |e: std::io::Error| e.to_string();
        if raw.take {
            self.write_event("take_gil", raw.start_ns, raw.dur_ns, raw.pid, raw.tid)
                .map_err(io)?;
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
                )
                .map_err(io)?;
                self.report.holds += 1;
            }
            self.write_event("drop_gil", raw.start_ns, raw.dur_ns, raw.pid, raw.tid)
                .map_err(io)?;
        }
        Ok(())
    }
}

/// Converts `input` into `output` (`.json` appended when missing).
pub fn convert(input: &Path, output: &Path, force: bool) -> Result<(PathBuf, ConvertReport)> {
    let output = output_name(output);
    // Checked before anything is created, so a missing input leaves nothing behind.
    File::open(input).map_err(|e| Error::Input {
        path: input.to_path_buf(),
        why: e.to_string(),
    })?;
    check_not_exists(&output, force)?;
    let (partial_file, partial) = create_partial(&output)?;
    let fail = |e: std::io::Error| Error::Output {
        path: output.clone(),
        why: format!("{e} (partial data is in {})", partial.display()),
    };
    let mut converter = Converter::new(BufWriter::new(partial_file));
    converter
        .out
        .write_all(b"{\"traceEvents\":[\n")
        .map_err(fail)?;
    if let Err(e) = for_each_event(input, |_, event| converter.accept(event)) {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
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
    fn parses_numbers_and_decimal_strings_exactly() {
        assert_eq!(parse_micros(&json!(12.5)), Ok(12_500));
        assert_eq!(
            parse_micros(&json!("1795985719635057.125")),
            Ok(1_795_985_719_635_057_125)
        );
        assert_eq!(parse_micros(&json!("7")), Ok(7_000));
        assert!(parse_micros(&json!("1e5")).is_err());
        assert!(parse_micros(&json!("99999999999999999999")).is_err());
        assert!(parse_micros(&json!(true)).is_err());
    }

    #[test]
    fn names_the_output_like_the_reference() {
        assert_eq!(output_name(Path::new("out")), PathBuf::from("out.json"));
        assert_eq!(
            output_name(Path::new("out.json")),
            PathBuf::from("out.json")
        );
    }

    #[test]
    fn pairs_each_take_with_the_next_drop_of_its_thread() {
        let mut c = Converter::new(Vec::new());
        for event in [
            json!({"name": "take_gil", "ph": "X", "ts": "100", "dur": "5", "pid": 1, "tid": 2}),
            json!({"name": "take_gil", "ph": "X", "ts": 101, "dur": 1, "pid": 1, "tid": 3}),
            json!({"name": "drop_gil", "ph": "X", "ts": "150.5", "dur": "1", "pid": 1, "tid": 2}),
        ] {
            c.accept(event).unwrap();
        }
        let text = String::from_utf8(c.out).unwrap();
        assert!(
            text.contains(r#"{"name":"hold_gil","ph":"X","ts":105,"dur":46,"pid":1,"tid":2}"#),
            "{text}"
        );
        assert_eq!(c.report.holds, 1);
        assert_eq!(c.pending_take_end.len(), 1, "thread 3's take is still open");
    }

    #[test]
    fn malformed_events_name_their_index_and_field() {
        let mut c = Converter::new(Vec::new());
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
}
