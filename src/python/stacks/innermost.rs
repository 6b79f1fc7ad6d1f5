//! A thread's innermost frame alone: what the stack watch reads at every wait and hold it sees, to
//! tell whether the thread's stack is the one it read last (sampler/stack_watch.rs).
//!
//! Reached through its pointers it costs a read per pointer: the thread state's field, on 3.11 and
//! 3.12 the C frame's `current_frame`, then the frame itself, three system calls one after another.
//! A thread mostly waits and holds in a few places (a worker's `queue.get`, the call after its
//! native work), and on 3.11+ a frame lies at the same address of its thread's data stack each time
//! it is called from the same depth (before 3.11 a code object's frame object is reused), so
//! `innermost_watched_near` reads the pointer together with the places the thread was found at last
//! (`RecentTops`), in one `read_each`, and uses a guessed frame's bytes only where the pointers read
//! in that same call lead to it. A wrong guess costs the reads the pointers would have cost anyway.

use super::{FrameId, StackReader, Top, check_pointer};
use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::python::objects::ObjectResult;

/// Bytes of a frame's locals and value stack `innermost_watched` digests: the first 16 slots.
const SLOT_BYTES: u64 = 128;

/// Where a thread's innermost frame was found at its last two reads of it: (the C frame that
/// pointed to it on 3.11 and 3.12, else 0; the frame), most recent first, 0 for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentTops {
    places: [(u64, u64); 2],
}

impl RecentTops {
    fn note(&mut self, place: (u64, u64)) {
        if self.places[0] != place {
            self.places = [place, self.places[0]];
        }
    }

    /// The frames to read with the pointer, each once.
    fn frames(&self) -> impl Iterator<Item = u64> {
        let [(_, a), (_, b)] = self.places;
        distinct(a, b)
    }

    /// The C frames to read `current_frame` of, each once.
    fn cframes(&self) -> impl Iterator<Item = u64> {
        let [(a, _), (b, _)] = self.places;
        distinct(a, b)
    }
}

/// `a`, then `b` where it is another address; never 0.
fn distinct(a: u64, b: u64) -> impl Iterator<Item = u64> {
    [a, if b == a { 0 } else { b }]
        .into_iter()
        .filter(|&at| at != 0)
}

impl StackReader {
    /// The innermost Python frame of `tstate`, to notice when a thread moves on (None: no Python
    /// frame). One or two reads.
    pub fn innermost(
        &self,
        mem: &dyn MemorySource,
        tstate: RemoteAddr,
    ) -> ObjectResult<Option<FrameId>> {
        let frame = self.top_frame(mem, tstate)?;
        if frame == 0 {
            return Ok(None);
        }
        let (code, instr, _) = self.read_frame(mem, frame)?;
        Ok(Some(FrameId { frame, code, instr }))
    }

    /// The innermost frame as `innermost` gives it, and a digest of the first `SLOT_BYTES` of its
    /// locals and value stack, read with it (`None` where the layout does not place them or they
    /// do not read): Python code changes them as it runs, a native call does not. Two or three
    /// reads (the pointers, then the frame).
    pub fn innermost_watched(
        &self,
        mem: &dyn MemorySource,
        tstate: RemoteAddr,
    ) -> ObjectResult<Option<(FrameId, Option<u64>)>> {
        let frame = self.top_frame(mem, tstate)?;
        if frame == 0 {
            return Ok(None);
        }
        self.watched_frame(mem, frame).map(Some)
    }

    /// `innermost_watched`, in one read where the thread is at one of the places `recent` holds
    /// (module docs), which it then updates. The same answer as `innermost_watched` from the same
    /// memory, whatever `recent` holds.
    pub fn innermost_watched_near(
        &self,
        mem: &dyn MemorySource,
        tstate: RemoteAddr,
        recent: &mut RecentTops,
    ) -> ObjectResult<Option<(FrameId, Option<u64>)>> {
        let (top_field, current_field) = match self.top {
            Top::Frame(offset) => (offset, None),
            Top::ViaCFrame { cframe, current } => (cframe, Some(current)),
        };
        let frame_len = self.watched_len() as usize;
        let cframes: Vec<u64> = match current_field {
            Some(_) => recent.cframes().collect(),
            None => Vec::new(),
        };
        let frames: Vec<u64> = recent.frames().collect();
        let mut top_word = [0u8; 8];
        let mut currents = vec![[0u8; 8]; cframes.len()];
        let mut frame_bytes = vec![0u8; frame_len * frames.len()];
        let filled = {
            let mut reads: Vec<(RemoteAddr, &mut [u8])> = Vec::with_capacity(5);
            reads.push((RemoteAddr(tstate.0.wrapping_add(top_field)), &mut top_word));
            for (&cframe, word) in cframes.iter().zip(currents.iter_mut()) {
                let current = current_field.unwrap_or(0);
                reads.push((RemoteAddr(cframe.wrapping_add(current)), word));
            }
            for (&frame, bytes) in frames.iter().zip(frame_bytes.chunks_mut(frame_len)) {
                reads.push((RemoteAddr(frame), bytes));
            }
            mem.read_each(&mut reads)
        };
        if filled == 0 {
            // The thread state's field did not read: the answer (an error) as without guesses.
            return self.innermost_watched(mem, tstate);
        }
        let top = u64::from_ne_bytes(top_word);
        let (cframe, frame) = match current_field {
            None => (0, top),
            Some(current) => {
                if top == 0 {
                    return Ok(None);
                }
                check_pointer(top)?;
                let guessed = cframes
                    .iter()
                    .zip(&currents)
                    .take(filled - 1)
                    .find(|(c, _)| **c == top)
                    .map(|(_, word)| u64::from_ne_bytes(*word));
                let frame = match guessed {
                    Some(frame) => frame,
                    None => mem.read_u64(RemoteAddr(top.wrapping_add(current)))?,
                };
                (top, frame)
            }
        };
        if frame == 0 {
            return Ok(None);
        }
        check_pointer(frame)?;
        recent.note((cframe, frame));
        let frames_filled = filled.saturating_sub(1 + cframes.len());
        let guessed = frames
            .iter()
            .zip(frame_bytes.chunks(frame_len))
            .take(frames_filled)
            .find(|(f, _)| **f == frame)
            .map(|(_, bytes)| bytes);
        match guessed {
            Some(bytes) => self.watched_from(frame, bytes).map(Some),
            None => self.watched_frame(mem, frame).map(Some),
        }
    }

    /// Bytes read of a watched frame: its header, and its first slots where the layout places them.
    fn watched_len(&self) -> u64 {
        self.slots.map_or(self.frame_header, |at| at + SLOT_BYTES)
    }

    /// The watched frame at `frame`, read now: with its slots where they read, else its header.
    fn watched_frame(
        &self,
        mem: &dyn MemorySource,
        frame: u64,
    ) -> ObjectResult<(FrameId, Option<u64>)> {
        if self.slots.is_some() {
            let mut bytes = vec![0u8; self.watched_len() as usize];
            // Past the end of the frame's memory the slots do not read: the header alone is.
            if mem.read_into(RemoteAddr(frame), &mut bytes).is_ok() {
                return self.watched_from(frame, &bytes);
            }
        }
        let (code, instr, _) = self.read_frame(mem, frame)?;
        Ok((FrameId { frame, code, instr }, None))
    }

    /// The watched frame from `bytes` read at `frame` (`watched_len` of them).
    fn watched_from(&self, frame: u64, bytes: &[u8]) -> ObjectResult<(FrameId, Option<u64>)> {
        let (code, instr, _) = self.decode_frame(bytes)?;
        let slots = self.slots.and_then(|at| bytes.get(at as usize..)).map(|s| {
            let mut digest = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(s, &mut digest);
            std::hash::Hasher::finish(&digest)
        });
        Ok((FrameId { frame, code, instr }, slots))
    }
}
