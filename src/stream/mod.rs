//! The saved sample stream: what `record --save-samples PATH` writes and `replay PATH` reads.
//!
//! A stream is the sampler's `Sample`s (infer/sample.rs) and the stacks it read, in the order it
//! produced them, so replaying it reruns inference on exactly what the live run saw. The layout is in
//! docs/sample-stream.md: a preamble (magic, format version), a JSON header, then records of
//! `kind, varint length, payload`, and a JSON end record the sampler writes last. Samples are
//! delta-encoded against the previous one (codec.rs): at 10 kHz most of a tick repeats the last.
//!
//! The reader treats every byte as untrusted (a cut-off recording, a file that is something else): it
//! refuses with the file and the byte offset, never panics, and bounds every length it is given.

mod codec;
mod hold_frames;
mod reader;
mod saver;
mod wire;
mod word_again;
mod writer;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::infer::findings::{Finding, StackReading};
use crate::infer::native_call::FrameWatch;
use crate::infer::sample::{Sample, SampleContext};

pub use reader::StreamReader;
pub use saver::{SampleSaver, SaveStats};
pub use writer::StreamWriter;

/// The first bytes of every stream; the newline makes a stream shown as text stop after it.
pub const MAGIC: [u8; 8] = *b"GILSMPL\n";

/// Bumped on any change an older reader would misread; readers refuse streams of a newer format
/// instead of guessing (docs/sample-stream.md, "Versioning").
/// Format 2 added pace records (the sampler's rate while the target was quiet); format 1 streams
/// have none and read as samples at the full rate. Format 3 added hold-frames records (what the
/// sampler saw of a holder's innermost frame, for the hold's kind); older streams have none, and
/// their holds are judged without them. Format 4 added word-again records (the GIL's words read again
/// after a tick's kernel readings, where they had changed); older streams have none, and a holder
/// asleep in a syscall at one of their samples is judged from the first read alone. Format 5 marks
/// the stack readings that begin a slice (their own record kind); in older streams none is marked,
/// and the trace sums a reading into an earlier one of the same stack across slices, as it did then.
pub const FORMAT_VERSION: u16 = 5;

/// The largest record payload written or read: far above any real record (a sample of 65536 threads
/// all changed is under 3 MiB), so a corrupt length is refused before it is allocated or waited for.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// The most threads one sample may hold and the most frames one stack may hold: far above what a
/// Python process runs, low enough that a corrupt count cannot ask for gigabytes.
pub const MAX_THREADS: usize = 65536;
/// The most frames one stack may hold (see `MAX_THREADS`).
pub const MAX_FRAMES: usize = 65536;

/// The most periods a pace record may say are skipped per tick: far above the sampler's (infer/quiet.rs).
pub const MAX_SKIPPED_PERIODS: u32 = 1_000_000;

/// What the stream says about itself and its target before any sample: enough to know who wrote it
/// and to rerun inference (`context`) without the live process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamHeader {
    /// Always "gilsample".
    pub producer: String,
    /// The gilsample version that wrote it (CARGO_PKG_VERSION).
    pub producer_version: String,
    /// The stream format's version (`FORMAT_VERSION` of the writer).
    pub format_version: u16,
    /// The target's pid as gilsample saw it when recording (its PID namespace).
    pub pid: u32,
    /// The interpreter's version, e.g. "3.12.3".
    pub python: String,
    /// The key of the layout the sampler read the interpreter with.
    pub layout: String,
    /// Samples per second asked for.
    pub rate_hz: f64,
    /// The clock of every time in the stream: "CLOCK_MONOTONIC".
    pub clock: String,
    /// Inference's inputs besides the samples: period, GIL wait ranges, which readings the target
    /// has.
    pub context: SampleContext,
    /// What the trace says about the process (record/recorded_process.rs, `RecordedProcess`), so a replay
    /// describes the same process.
    #[serde(default)]
    pub process: serde_json::Value,
}

impl StreamHeader {
    /// A header naming this gilsample as producer, the current format and CLOCK_MONOTONIC.
    pub fn new(
        pid: u32,
        python: impl Into<String>,
        layout: impl Into<String>,
        rate_hz: f64,
        context: SampleContext,
    ) -> StreamHeader {
        StreamHeader {
            producer: "gilsample".to_string(),
            producer_version: env!("CARGO_PKG_VERSION").to_string(),
            format_version: FORMAT_VERSION,
            pid,
            python: python.into(),
            layout: layout.into(),
            rate_hz,
            clock: "CLOCK_MONOTONIC".to_string(),
            context,
            process: serde_json::Value::Null,
        }
    }
}

/// One record of a stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// The stream's header, the first record.
    Header(StreamHeader),
    /// One tick's sample.
    Sample(Sample),
    /// A stack the live sampler read, replayed verbatim. Its `begins_slice` is written as its own
    /// record kind (format 5); readings of older streams read as not beginning a slice.
    Stack(StackReading),
    /// What the live sampler saw of a holder's innermost frame over a hold, replayed verbatim.
    HoldFrames {
        /// The holder's id as the recording saw it.
        tid: u32,
        /// The frame's last read, monotonic nanoseconds.
        t_ns: u64,
        /// What was seen of the frame.
        watch: FrameWatch,
    },
    /// What the sampler writes last (its report). A stream without it was cut off.
    End(serde_json::Value),
}

impl Item {
    /// The finding a saved stack or hold-frames item stands for, as the live sampler sent it:
    /// `from_stack` the other way (`None` for any other kind).
    pub fn into_stack_finding(self) -> Option<Finding> {
        match self {
            Item::Stack(reading) => Some(Finding::Stack(reading)),
            Item::HoldFrames { tid, t_ns, watch } => Some(Finding::HoldFrames {
                tid,
                t_ns,
                watch: Box::new(watch),
            }),
            _ => None,
        }
    }

    /// The item that saves a stack or hold-frames record the sampler read (`None` for any other
    /// record).
    pub fn from_stack(record: &Finding) -> Option<Item> {
        match record {
            Finding::HoldFrames { tid, t_ns, watch } => Some(Item::HoldFrames {
                tid: *tid,
                t_ns: *t_ns,
                watch: (**watch).clone(),
            }),
            Finding::Stack(reading) => Some(Item::Stack(reading.clone())),
            _ => None,
        }
    }
}

/// A stream that cannot be read, where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamError {
    /// The stream's file.
    pub path: PathBuf,
    /// The byte of the file where the problem lies (for a cut-off record: where that record starts).
    pub offset: u64,
    /// What is wrong there.
    pub why: String,
    /// Whether the file opened (else `offset` means nothing).
    pub opened: bool,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.place_and_why())
    }
}

/// A sample stream that cannot be read is a bad input file (exit 7), like `convert`'s; the offset
/// goes into the message so a damaged file can be looked at where it broke.
impl From<StreamError> for crate::error::Error {
    fn from(e: StreamError) -> crate::error::Error {
        let why = e.place_and_why();
        crate::error::Error::Input { path: e.path, why }
    }
}

impl std::error::Error for StreamError {}

impl StreamError {
    /// What is wrong, and where in the file where that is anywhere (a file that did not open is
    /// wrong at no byte).
    fn place_and_why(&self) -> String {
        if self.opened {
            format!("byte {}: {}", self.offset, self.why)
        } else {
            self.why.clone()
        }
    }
}

/// Finding kinds: the first byte of every record.
mod kind {
    pub const HEADER: u8 = 1;
    pub const SAMPLE: u8 = 2;
    pub const STACK: u8 = 3;
    pub const END: u8 = 4;
    /// The samples after it were taken this many periods (a varint) after the tick before, besides
    /// the first: written when that changes (0 before any), so a stream at the full rate has none.
    pub const PACE: u8 = 5;
    /// What the sampler saw of a holder's innermost frame over a hold (format 3).
    pub const HOLD_FRAMES: u8 = 6;
    /// The GIL's words read again after the next sample's kernel readings (format 4).
    pub const WORD_AGAIN: u8 = 7;
    /// A stack record whose reading begins a slice of its thread (format 5): the trace does not sum
    /// it into a reading before it.
    pub const STACK_BEGINS_SLICE: u8 = 8;

    /// The record's name in messages.
    pub fn name(kind: u8) -> &'static str {
        match kind {
            HEADER => "header",
            SAMPLE => "sample",
            STACK => "stack",
            END => "end",
            PACE => "pace",
            HOLD_FRAMES => "hold-frames",
            WORD_AGAIN => "word-again",
            STACK_BEGINS_SLICE => "stack (begins a slice)",
            _ => "unknown",
        }
    }
}
