//! The encoder: items in, bytes out. It keeps the previous sample (what the next is written against)
//! and one scratch buffer for a record's payload, so a steady stream of samples allocates nothing.

use super::codec::{FrameNamesWritten, encode_sample, encode_stack};
use super::wire::put_varint;
use super::{FORMAT_VERSION, Item, MAGIC, StreamHeader, kind};
use crate::infer::sample::Sample;

/// Encodes a sample stream: each `Item` is written as a record against the previous sample (module
/// docs).
pub struct StreamWriter {
    header: StreamHeader,
    started: bool,
    pub(super) prev: Sample,
    pub(super) payload: Vec<u8>,
    frame_names: FrameNamesWritten,
}

impl StreamWriter {
    /// A stream that opens with `header`: the preamble and the header record are written before the
    /// first item pushed (or by `start`).
    pub fn new(header: StreamHeader) -> StreamWriter {
        StreamWriter {
            header,
            started: false,
            prev: Sample::default(),
            payload: Vec::with_capacity(4096),
            frame_names: FrameNamesWritten::default(),
        }
    }

    /// The header the stream opens with.
    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// Writes the preamble and the header, once.
    pub fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let json = serde_json::to_vec(&self.header).expect("a header serializes");
        record(out, kind::HEADER, &json);
    }

    /// Appends `item`'s record to `out`. The stream's header is written by `new`'s; pushing another
    /// `Item::Header` writes a second header record, which readers refuse.
    pub fn push(&mut self, item: &Item, out: &mut Vec<u8>) {
        self.start(out);
        self.payload.clear();
        let k = match item {
            Item::Header(h) => {
                serde_json::to_writer(&mut self.payload, h).expect("a header serializes");
                kind::HEADER
            }
            Item::Sample(s) => {
                if s.skipped_periods != self.prev.skipped_periods {
                    put_varint(&mut self.payload, s.skipped_periods.into());
                    record(out, kind::PACE, &self.payload);
                    self.payload.clear();
                }
                if let Some(word) = &s.word_again {
                    super::word_again::encode(word, &mut self.payload);
                    record(out, kind::WORD_AGAIN, &self.payload);
                    self.payload.clear();
                }
                encode_sample(
                    &self.prev,
                    s,
                    self.header.context.period_ns,
                    &mut self.payload,
                );
                // Reuses the thread vector: no allocation once it has grown.
                self.prev.copy_readings_from(s);
                kind::SAMPLE
            }
            Item::Stack(reading) => {
                encode_stack(reading, &mut self.frame_names, &mut self.payload);
                if reading.begins_slice {
                    kind::STACK_BEGINS_SLICE
                } else {
                    kind::STACK
                }
            }
            Item::HoldFrames { tid, t_ns, watch } => {
                super::hold_frames::encode(*tid, *t_ns, watch, &mut self.payload);
                kind::HOLD_FRAMES
            }
            Item::End(v) => {
                serde_json::to_writer(&mut self.payload, v).expect("a JSON value serializes");
                kind::END
            }
        };
        record(out, k, &self.payload);
    }
}

fn record(out: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    out.push(kind);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}
