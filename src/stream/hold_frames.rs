//! The hold-frames record (format 3): what the sampler saw of a holder's innermost frame over a hold
//! (infer/native_call.rs `FrameWatch`), saved so a replay judges each hold's kind as the live run did.

use super::wire::{Bad, Input, put_varint};
use crate::infer::native_call::FrameWatch;

/// Bytes of a frame text or callee name at most (a stack's frame texts are bounded alike).
const MAX_TEXT_BYTES: usize = 64 << 10;

/// tid, t_ns, reads, still_reads, idle_reads, span_ns varints; innermost and callee options (a tag
/// byte, then a length varint and UTF-8).
pub fn encode(tid: u32, t_ns: u64, watch: &FrameWatch, out: &mut Vec<u8>) {
    put_varint(out, tid.into());
    put_varint(out, t_ns);
    put_varint(out, watch.reads.into());
    put_varint(out, watch.still_reads.into());
    put_varint(out, watch.idle_reads.into());
    put_varint(out, watch.span_ns);
    for text in [&watch.innermost, &watch.callee] {
        match text {
            None => out.push(0),
            Some(text) => {
                out.push(1);
                put_varint(out, text.len() as u64);
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
}

pub fn decode(input: &mut Input<'_>) -> Result<(u32, u64, FrameWatch), Bad> {
    let tid = input.u32("a thread id")?;
    let t_ns = input.varint()?;
    let reads = input.u32("a count of frame reads")?;
    let still_reads = input.u32("a count of frame reads")?;
    let idle_reads = input.u32("a count of frame reads")?;
    let span_ns = input.varint()?;
    let mut text = |what: &str| -> Result<Option<String>, Bad> {
        if !input.tag(what)? {
            return Ok(None);
        }
        let len = input.count("bytes of text", MAX_TEXT_BYTES)?;
        let start = input.pos;
        match std::str::from_utf8(input.bytes(len)?) {
            Ok(s) => Ok(Some(s.to_string())),
            Err(e) => {
                input.pos = start + e.valid_up_to();
                input.bad(format!("a {what} that is not valid UTF-8"))
            }
        }
    };
    let innermost = text("frame")?;
    let callee = text("callee")?;
    Ok((
        tid,
        t_ns,
        FrameWatch {
            reads,
            still_reads,
            idle_reads,
            span_ns,
            innermost,
            callee,
        },
    ))
}
