//! The decoder: a stream read one record at a time, so memory stays that of one record and the last
//! sample however long the recording.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use super::codec::{FrameNamesRead, decode_sample, decode_stack};
use super::wire::{Bad, Input};
use super::{
    FORMAT_VERSION, Item, MAGIC, MAX_RECORD_BYTES, MAX_SKIPPED_PERIODS, StreamError, StreamHeader,
    kind,
};
use crate::infer::sample::Sample;
use crate::observed::GilWord;

/// Reads a sample stream (docs/sample-stream.md) one record at a time: the header first, then each
/// `Item` in the order it was saved.
pub struct StreamReader<R: Read> {
    records: Records<R>,
    header: StreamHeader,
    prev: Sample,
    frame_names: FrameNamesRead,
    ended: bool,
    /// Periods skipped before each sample, as the last pace record said (0 before any).
    skipped_periods: u32,
    /// The word-again record read since the last sample: the next sample's.
    word_again: Option<GilWord>,
    /// The error already returned: returned again rather than reading on from a broken place.
    failed: Option<StreamError>,
}

impl StreamReader<BufReader<File>> {
    /// Opens `path` and reads its preamble and header.
    pub fn open(path: &Path) -> Result<StreamReader<BufReader<File>>, StreamError> {
        let file = File::open(path).map_err(|e| {
            let per_process = match e.kind() {
                io::ErrorKind::NotFound => per_process_streams(path),
                _ => Vec::new(),
            };
            let why = match per_process.as_slice() {
                [] => format!("cannot open: {e}"),
                some => format!(
                    "cannot open: {e}; a recording of several processes saved one stream each, \
                     with the pid before the suffix: {}",
                    some.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            StreamError {
                path: path.to_path_buf(),
                offset: 0,
                why,
                opened: false,
            }
        })?;
        StreamReader::new(BufReader::with_capacity(1 << 16, file), path)
    }
}

/// The streams `--save-samples PATH` wrote for several processes (`PATH` with `.PID` before its
/// suffix: `run.gilsamples` → `run.1234.gilsamples`), where `path` itself is not there; at most 8.
fn per_process_streams(path: &Path) -> Vec<PathBuf> {
    let (Some(stem), Some(ext)) = (
        path.file_stem().and_then(|s| s.to_str()),
        path.extension().and_then(|s| s.to_str()),
    ) else {
        return Vec::new();
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix(stem)?.strip_prefix('.'))
                .and_then(|n| n.strip_suffix(ext)?.strip_suffix('.'));
            pid.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|entry| path.with_file_name(entry.file_name()))
        .collect();
    found.sort();
    found.truncate(8);
    found
}

impl<R: Read> StreamReader<R> {
    /// Reads the preamble and header from `input`; `path` names it in errors.
    pub fn new(mut input: R, path: impl Into<PathBuf>) -> Result<StreamReader<R>, StreamError> {
        let path = path.into();
        let err = |offset: u64, why: String| StreamError {
            path: path.clone(),
            offset,
            why,
            opened: true,
        };
        let mut preamble = [0u8; 10];
        let got = read_full(&mut input, &mut preamble).map_err(|e| err(0, io_why(&e)))?;
        if got == 0 {
            return Err(err(
                0,
                "empty file, not a gilsample sample stream (was anything recorded?)".into(),
            ));
        }
        let magic_len = got.min(MAGIC.len());
        if preamble[..magic_len] != MAGIC[..magic_len] {
            return Err(err(
                0,
                "not a gilsample sample stream (it does not start with \"GILSMPL\")".into(),
            ));
        }
        if got < preamble.len() {
            return Err(err(
                got as u64,
                "truncated in the middle of the preamble (the recording was cut off?)".into(),
            ));
        }
        let version = u16::from_le_bytes([preamble[8], preamble[9]]);
        if version > FORMAT_VERSION {
            return Err(err(
                8,
                format!(
                    "written by a newer gilsample (format {version}); this one reads format \
                     {FORMAT_VERSION}: upgrade"
                ),
            ));
        }
        if version == 0 {
            return Err(err(8, "format version 0 does not exist (garbage?)".into()));
        }
        let mut records = Records {
            input,
            path: path.clone(),
            offset: preamble.len() as u64,
            payload: Vec::new(),
        };
        let start = records.offset;
        let Some(k) = records.record()? else {
            return Err(err(
                start,
                "the stream ends before its header (the recording was cut off?)".into(),
            ));
        };
        if k != kind::HEADER {
            return Err(err(
                start,
                format!(
                    "a {} record before the header: a stream starts with its header",
                    kind::name(k)
                ),
            ));
        }
        let header: StreamHeader = serde_json::from_slice(&records.payload)
            .map_err(|e| err(start, format!("the header is not a stream header: {e}")))?;
        if header.format_version != version {
            return Err(err(
                start,
                format!(
                    "the header says format {} but the preamble format {version}",
                    header.format_version
                ),
            ));
        }
        Ok(StreamReader {
            records,
            header,
            prev: Sample::default(),
            frame_names: FrameNamesRead::default(),
            ended: false,
            skipped_periods: 0,
            word_again: None,
            failed: None,
        })
    }

    /// The stream's header, read when it was opened.
    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// The file it reads, as named in errors.
    pub fn path(&self) -> &Path {
        &self.records.path
    }

    /// Whether the End record was read: false for a stream cut off (a crash, a full disk) even where
    /// every record before the cut was whole.
    pub fn ended_cleanly(&self) -> bool {
        self.ended
    }

    /// The next item; `Ok(None)` at the end of the file at a record boundary, with or without an End
    /// record (`ended_cleanly` says which). After an error, the same error again.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Item>, StreamError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.next_item();
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn next_item(&mut self) -> Result<Option<Item>, StreamError> {
        // A pace or word-again record is no item: it changes the sample(s) after it. A loop, not
        // recursion, so a file of nothing but such records cannot exhaust the stack.
        loop {
            if let Some(read) = self.next_record()? {
                return Ok(read);
            }
        }
    }

    /// The next item (`Some(None)` at the end of the file), or `None` after a pace or word-again
    /// record.
    fn next_record(&mut self) -> Result<Option<Option<Item>>, StreamError> {
        let start = self.records.offset;
        let Some(k) = self.records.record()? else {
            return Ok(Some(None));
        };
        let records = &self.records;
        if self.ended {
            return Err(records.error(start, "a record after the end record (garbage?)".into()));
        }
        let payload_start = records.offset - records.payload.len() as u64;
        let bad = |b: Bad| StreamError {
            path: records.path.clone(),
            offset: payload_start + b.at as u64,
            why: format!("in a {} record: {}", kind::name(k), b.why),
            opened: true,
        };
        let mut input = Input::new(&records.payload);
        // `None`: a pace or word-again record, which is no item.
        let item = match k {
            kind::SAMPLE => {
                let mut cur = Sample::default();
                let period = self.header.context.period_ns;
                decode_sample(&self.prev, period, &mut input, &mut cur).map_err(bad)?;
                cur.skipped_periods = self.skipped_periods;
                cur.word_again = self.word_again.take();
                self.prev.copy_readings_from(&cur);
                Some(Item::Sample(cur))
            }
            kind::STACK | kind::STACK_BEGINS_SLICE => {
                let begins_slice = k == kind::STACK_BEGINS_SLICE;
                let names = &mut self.frame_names;
                let reading = decode_stack(&mut input, names, begins_slice).map_err(bad)?;
                Some(Item::Stack(reading))
            }
            kind::HOLD_FRAMES => {
                let (tid, t_ns, watch) = super::hold_frames::decode(&mut input).map_err(bad)?;
                Some(Item::HoldFrames { tid, t_ns, watch })
            }
            kind::END => {
                let v = serde_json::from_slice(&records.payload).map_err(|e| {
                    records.error(start, format!("the end record is not JSON: {e}"))
                })?;
                self.ended = true;
                return Ok(Some(Some(Item::End(v))));
            }
            kind::PACE => {
                let skipped = input.varint().map_err(bad)?;
                if skipped > u64::from(MAX_SKIPPED_PERIODS) {
                    return Err(bad(Bad {
                        at: 0,
                        why: format!(
                            "{skipped} periods skipped per tick, over the {MAX_SKIPPED_PERIODS} \
                             a sampler may skip (garbage?)"
                        ),
                    }));
                }
                self.skipped_periods = skipped as u32;
                None
            }
            kind::WORD_AGAIN => {
                let word = super::word_again::decode(&mut input).map_err(bad)?;
                self.word_again = Some(word);
                None
            }
            kind::HEADER => {
                return Err(records.error(start, "a second header record (garbage?)".into()));
            }
            _ => unreachable!("record() refuses unknown kinds"),
        };
        if !input.at_end() {
            return Err(bad(Bad {
                at: input.pos,
                why: "bytes left over after the record's content (its length is wrong)".into(),
            }));
        }
        Ok(item.map(Some))
    }
}

/// The record layer: kind, length, payload, and where in the file they lie.
struct Records<R> {
    input: R,
    path: PathBuf,
    /// Bytes of the file consumed so far: where the next record starts.
    offset: u64,
    payload: Vec<u8>,
}

impl<R: Read> Records<R> {
    fn error(&self, offset: u64, why: String) -> StreamError {
        StreamError {
            path: self.path.clone(),
            offset,
            why,
            opened: true,
        }
    }

    /// Reads one record's kind and payload (into `self.payload`); `None` at the end of the file
    /// before a record's first byte.
    fn record(&mut self) -> Result<Option<u8>, StreamError> {
        let start = self.offset;
        let mut k = [0u8];
        if read_full(&mut self.input, &mut k).map_err(|e| self.error(start, io_why(&e)))? == 0 {
            return Ok(None);
        }
        let k = k[0];
        if !(kind::HEADER..=kind::STACK_BEGINS_SLICE).contains(&k) {
            return Err(self.error(
                start,
                format!("unknown record kind {k} (garbage, or a damaged file)"),
            ));
        }
        self.offset += 1;
        let cut = |this: &Self| {
            this.error(
                start,
                format!(
                    "truncated in the middle of a {} record (the recording was cut off?)",
                    kind::name(k)
                ),
            )
        };
        // The length: a varint read byte by byte, so a cut inside it is told apart from garbage.
        let mut len = 0u64;
        let mut i = 0;
        loop {
            let mut b = [0u8];
            if read_full(&mut self.input, &mut b).map_err(|e| self.error(start, io_why(&e)))? == 0 {
                return Err(cut(self));
            }
            self.offset += 1;
            if i == 9 && b[0] > 1 {
                return Err(self.error(self.offset - 1, "a record length over 64 bits".into()));
            }
            len |= u64::from(b[0] & 0x7f) << (7 * i);
            if b[0] & 0x80 == 0 {
                break;
            }
            i += 1;
        }
        if len > MAX_RECORD_BYTES {
            return Err(self.error(
                start,
                format!(
                    "a {} record of {len} bytes, over the {MAX_RECORD_BYTES} a record may have \
                     (garbage, or a damaged file)",
                    kind::name(k)
                ),
            ));
        }
        // `take` reads what is there instead of allocating what the length claims.
        self.payload.clear();
        let got = (&mut self.input)
            .take(len)
            .read_to_end(&mut self.payload)
            .map_err(|e| self.error(start, io_why(&e)))?;
        self.offset += got as u64;
        if (got as u64) < len {
            return Err(cut(self));
        }
        Ok(Some(k))
    }
}

/// Fills `buf` as far as the input goes; the number of bytes read (less only at the end).
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn io_why(e: &io::Error) -> String {
    format!("cannot read: {e}")
}
