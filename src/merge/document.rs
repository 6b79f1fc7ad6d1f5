//! Reading a Chrome Trace file one event at a time: a top-level array of events, or an object whose
//! `traceEvents` array holds them beside header keys (Kineto's `baseTimeNanoseconds`, gilsample's
//! `otherData`). Header keys may come before or after the events, so they are collected on the way.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use memmap2::Mmap;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::trace::output::is_partial;

/// Top-level keys kept from an object trace; everything else beside `traceEvents` is skipped unread.
const HEADER_KEYS: &[&str] = &[
    "otherData",
    "baseTimeNanoseconds",
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "traceName",
    "displayTimeUnit",
];

/// What a document holds besides its events.
#[derive(Debug, Default)]
pub struct Header {
    /// True for `{ "traceEvents": [...] }`, false for a bare array.
    pub object: bool,
    /// The document's other top-level keys (`otherData`, `displayTimeUnit`, ...), kept for the
    /// merged file.
    pub keys: Map<String, Value>,
}

/// How a file's bytes reach the JSON parser.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bytes {
    /// Through a buffered reader: any file, at the memory of one buffer.
    Streamed,
    /// Mapped into memory: serde_json parses a byte slice about a third faster than a reader it
    /// takes a byte at a time (a 66 MB trace read back for its summary: 0.95 s streamed, 0.62 s
    /// mapped), but a mapped file that another process truncates under the read kills this one
    /// (SIGBUS). Only for a file this process wrote and nothing else writes: the trace a
    /// recording just finished.
    Mapped,
}

/// Calls `on_event(index, event)` for every event of `path`, in order; an error it returns stops the
/// read and is reported with the file's name.
pub fn for_each_event<F>(path: &Path, on_event: F) -> Result<Header>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    read_events(path, on_event, false, Bytes::Streamed).map(|(header, _)| header)
}

/// `for_each_event` for a complete trace this process wrote and no other process writes (a
/// recording's own, read back for its summary), read from a map of the file: faster, and unsafe
/// for a file someone may truncate meanwhile (`Bytes::Mapped`).
pub fn for_each_event_of_own_trace<F>(path: &Path, on_event: F) -> Result<Header>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    read_events(path, on_event, false, Bytes::Mapped).map(|(header, _)| header)
}

/// `for_each_event` for a file that may have been cut off while it was written (an interrupted
/// recording's `.partial` file, a full disk): every complete event before the cut is passed on, and
/// the cut, when there is one, is said in the second value instead of failing the read.
pub fn for_each_event_to_cut<F>(path: &Path, on_event: F) -> Result<(Header, Option<String>)>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    read_events(path, on_event, true, Bytes::Streamed)
}

/// `for_each_event`, or `for_each_event_to_cut` where `path` is an interrupted recording's
/// temporary file (`.GIL_<pid>_rank_<rank>.json.<pid>.partial`): `report` reads those to their cut,
/// and `merge` puts them beside a profiler's trace the same way.
pub fn for_each_event_of_trace<F>(path: &Path, on_event: F) -> Result<(Header, Option<String>)>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    read_events(path, on_event, is_partial(path), Bytes::Streamed)
}

fn read_events<F>(
    path: &Path,
    mut on_event: F,
    cut_allowed: bool,
    bytes: Bytes,
) -> Result<(Header, Option<String>)>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    let bad = |why: String| Error::Input {
        path: path.to_path_buf(),
        why,
    };
    let file = File::open(path).map_err(|e| bad(e.to_string()))?;
    if file.metadata().map(|m| m.len() == 0).unwrap_or(false) {
        return Err(bad("the file is empty".into()));
    }
    let mut reader = BufReader::new(file);
    if reader
        .fill_buf()
        .map_err(|e| bad(e.to_string()))?
        .starts_with(&crate::stream::MAGIC)
    {
        // The other file a recording leaves: its samples, which only `replay` turns into slices.
        return Err(bad(format!(
            "a sample stream saved by --save-samples, not a trace; `gilsample replay {} -o trace.json` \
             writes the trace it holds",
            path.display()
        )));
    }
    // A UTF-8 byte-order mark (some Windows editors write one) is not JSON: passed over.
    let mark = b"\xEF\xBB\xBF";
    let marked = reader
        .fill_buf()
        .map_err(|e| bad(e.to_string()))?
        .starts_with(mark);
    if marked {
        reader.consume(mark.len());
    }
    if let Some(&first) = reader
        .fill_buf()
        .map_err(|e| bad(e.to_string()))?
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        && first != b'['
        && first != b'{'
    {
        // A script, a log, a saved sample stream: JSON's own message would name a column.
        return Err(bad(
            "not a Chrome Trace: a trace is a JSON file that starts with [ or {".into(),
        ));
    }
    let mut header = Header::default();
    let mut saw_events = false;
    let document = Document {
        on_event: &mut on_event,
        header: &mut header,
        saw_events: &mut saw_events,
    };
    let parsed = match bytes {
        Bytes::Streamed => parse(document, serde_json::Deserializer::from_reader(reader)),
        Bytes::Mapped => {
            // SAFETY: the file is one this process wrote and no other process writes
            // (`Bytes::Mapped`); the map lives until the parse is done.
            let map = unsafe { Mmap::map(reader.get_ref()) }.map_err(|e| bad(e.to_string()))?;
            let from = if marked { mark.len() } else { 0 };
            parse(document, serde_json::Deserializer::from_slice(&map[from..]))
        }
    };
    let mut cut = None;
    match parsed {
        Ok(()) => {}
        // Cut off inside the events: those before the cut stand.
        Err(e) if cut_allowed && saw_events && e.classify() == serde_json::error::Category::Eof => {
            cut = Some(describe_json_error(&e));
        }
        Err(e) => return Err(bad(describe_json_error(&e))),
    }
    if !saw_events {
        return Err(bad(
            "wrong shape: an object without a `traceEvents` array (expected a Chrome Trace)".into(),
        ));
    }
    Ok((header, cut))
}

/// The message for a bad field of input event `index`.
pub fn field_error(index: u64, field: &str, why: impl fmt::Display) -> String {
    format!("event {index}: field `{field}`: {why}")
}

/// Input event `index` as a JSON object, or why it is not one.
pub fn event_object(index: u64, event: &Value) -> std::result::Result<&Map<String, Value>, String> {
    event
        .as_object()
        .ok_or_else(|| format!("event {index}: not a JSON object"))
}

/// The required string field `name` of input event `index`, or why it is not there.
pub fn string_field<'e>(
    index: u64,
    object: &'e Map<String, Value>,
    name: &str,
) -> std::result::Result<&'e str, String> {
    match object.get(name) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(field_error(index, name, "not a string")),
        None => Err(field_error(index, name, "missing")),
    }
}

/// A JSON error in words a user can act on.
pub fn describe_json_error(e: &serde_json::Error) -> String {
    match e.classify() {
        serde_json::error::Category::Syntax => format!("not valid JSON: {e}"),
        serde_json::error::Category::Eof => format!("truncated: {e}"),
        _ => e.to_string(),
    }
}

/// Parses a whole document with `deserializer` (a reader's or a slice's).
fn parse<'de, R, F>(
    document: Document<'_, F>,
    mut deserializer: serde_json::Deserializer<R>,
) -> serde_json::Result<()>
where
    R: serde_json::de::Read<'de>,
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    document
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end())
}

struct Document<'a, F> {
    on_event: &'a mut F,
    header: &'a mut Header,
    saw_events: &'a mut bool,
}

impl<'de, F> DeserializeSeed<'de> for Document<'_, F>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, F> Visitor<'de> for Document<'_, F>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Chrome Trace: an array of events or an object with `traceEvents`")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<(), A::Error> {
        *self.saw_events = true;
        Events(self.on_event).visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        self.header.object = true;
        while let Some(key) = map.next_key::<String>()? {
            if key == "traceEvents" {
                if *self.saw_events {
                    return Err(serde::de::Error::custom("two `traceEvents` keys"));
                }
                *self.saw_events = true;
                map.next_value_seed(Events(&mut *self.on_event))?;
            } else if HEADER_KEYS.contains(&key.as_str()) {
                let value = map.next_value::<Value>()?;
                self.header.keys.insert(key, value);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct Events<'a, F>(&'a mut F);

impl<'de, F> DeserializeSeed<'de> for Events<'_, F>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, F> Visitor<'de> for Events<'_, F>
where
    F: FnMut(u64, Value) -> std::result::Result<(), String>,
{
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let mut index = 0u64;
        while let Some(event) = seq.next_element::<Value>()? {
            (self.0)(index, event).map_err(serde::de::Error::custom)?;
            index += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `text`'s header and events, read streamed; read mapped too, which must give the same.
    fn read(text: &str) -> Result<(Header, Vec<Value>)> {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let mut events = Vec::new();
        let streamed = for_each_event(file.path(), |_, e| {
            events.push(e);
            Ok(())
        });
        let mut mapped_events = Vec::new();
        let mapped = for_each_event_of_own_trace(file.path(), |_, e| {
            mapped_events.push(e);
            Ok(())
        });
        match (&streamed, &mapped) {
            (Ok(one), Ok(other)) => {
                assert_eq!(
                    (one.object, &one.keys),
                    (other.object, &other.keys),
                    "{text}"
                );
                assert_eq!(events, mapped_events, "{text}");
            }
            // The same error, though the column serde_json names can differ by one.
            (Err(one), Err(other)) => {
                let (one, other) = (one.to_string(), other.to_string());
                let before_place = |e: &str| e.split(" at line ").next().unwrap().to_string();
                assert_eq!(before_place(&one), before_place(&other), "{text}");
            }
            _ => panic!("{text}: streamed {streamed:?}, mapped {mapped:?}"),
        }
        Ok((streamed?, events))
    }

    #[test]
    fn reads_arrays_and_objects_with_header_keys_on_either_side() {
        let (header, events) = read(r#"[{"ph":"X"},{"ph":"M"}]"#).unwrap();
        assert!(!header.object);
        assert_eq!(events.len(), 2);
        let (header, events) = read(
            r#"{"schemaVersion":1,"traceEvents":[{"ph":"X"}],"baseTimeNanoseconds":7,"big":[1,2]}"#,
        )
        .unwrap();
        assert!(header.object);
        assert_eq!(header.keys["baseTimeNanoseconds"], 7);
        assert!(!header.keys.contains_key("big"));
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn refuses_other_shapes() {
        for text in ["7", "\"x\"", r#"{"a":1}"#, r#"{"traceEvents":{}}"#] {
            assert!(read(text).is_err(), "{text}");
        }
        let err = read(r#"{"traceEvents":[1"#).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn a_byte_order_mark_is_passed_over_either_way() {
        let (header, events) = read("\u{FEFF}{\"traceEvents\":[{\"ph\":\"X\"}]}").unwrap();
        assert!(header.object);
        assert_eq!(events, vec![serde_json::json!({"ph": "X"})]);
    }

    #[test]
    fn a_file_cut_off_gives_the_events_before_the_cut_when_asked() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(br#"{"traceEvents":[{"ph":"X"},{"ph":"M"},{"ph":"X","ts":17"#)
            .unwrap();
        let mut events = 0;
        let (_, cut) = for_each_event_to_cut(file.path(), |_, _| {
            events += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(events, 2);
        assert!(cut.unwrap().contains("truncated"));
        // Not JSON at all, or no events array, is still an error.
        for text in ["nonsense", r#"{"otherData":{"#] {
            let mut file = tempfile::NamedTempFile::new().unwrap();
            file.write_all(text.as_bytes()).unwrap();
            assert!(
                for_each_event_to_cut(file.path(), |_, _| Ok(())).is_err(),
                "{text}"
            );
        }
    }
}
