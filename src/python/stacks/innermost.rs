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
//! in that same call lead to it. A wrong guess costs what the pointers would have cost, in a larger
//! first read; a guessed place that no longer reads (a freed data-stack chunk) ends that first read
//! there, and what it did not bring is read as without guesses.

use super::{FrameId, StackReader, Top, check_pointer};
use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::python::objects::ObjectResult;

/// Bytes of a frame's locals and value stack `innermost_watched` digests: the first 16 slots.
const SLOT_BYTES: u64 = 128;

/// How many of a thread's last places (C frame and frame) `RecentTops` keeps. A thread that runs
/// Python called back from native code (a training step: torch's dispatcher calling Python
/// operators and hooks) is found in several C frames, one per nesting of the interpreter loop:
/// keeping 8 places cut the loader workload's innermost reads that took three system calls from
/// 2,810 to 845 of 5,672 in 3 s, but those reads then took more of the sampler's CPU, not less
/// (`perf`, docs/cost.md "Names and stacks": the wider first read costs more than the calls it
/// saves).
const PLACES_KEPT: usize = 2;

/// The places' C frames' `current_frame` words that lie within this many bytes of each other are
/// read as one range: the kernel pins a page for each range, and copying a few hundred bytes more
/// costs less. A thread's C frames lie near each other on its C stack (on the loader workload,
/// those of its last 8 places within 544 bytes at the median read, 3.5 KiB at the 90th
/// percentile, 18 KiB at most), so a C frame between two places is found in the first read too.
pub(super) const CSTACK_SPAN: u64 = 4096;

/// How many of those places' frames the first read brings whole (a frame's header and first slots,
/// about 200 bytes each): the innermost frame is mostly where it was at one of the last two reads.
const FRAMES_GUESSED: usize = 2;

/// Where a thread's innermost frame was found at its last reads of it: (the C frame that pointed
/// to it on 3.11 and 3.12, else 0; the frame), most recent first, each place once, 0 for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentTops {
    places: [(u64, u64); PLACES_KEPT],
}

impl RecentTops {
    fn note(&mut self, place: (u64, u64)) {
        let at = self
            .places
            .iter()
            .position(|&p| p == place)
            .unwrap_or(PLACES_KEPT - 1);
        self.places[..=at].rotate_right(1);
        self.places[0] = place;
    }

    /// The frames to read with the pointer, each once; 0 for none.
    fn frames(&self) -> [u64; FRAMES_GUESSED] {
        distinct(self.places.iter().map(|&(_, frame)| frame))
    }

    /// The C frames to read `current_frame` of, each once; 0 for none.
    fn cframes(&self) -> [u64; PLACES_KEPT] {
        distinct(self.places.iter().map(|&(cframe, _)| cframe))
    }
}

/// The first `N` distinct addresses of `all` that are not 0, in order; 0 after them.
fn distinct<const N: usize>(all: impl Iterator<Item = u64>) -> [u64; N] {
    let mut out = [0; N];
    let mut n = 0;
    for addr in all {
        if n == N {
            break;
        }
        if addr != 0 && !out[..n].contains(&addr) {
            out[n] = addr;
            n += 1;
        }
    }
    out
}

/// The C frames' `current_frame` words the first read brings: ranges of the C stack, each holding
/// the words that lie within `CSTACK_SPAN` bytes of each other, lowest first.
struct CurrentWords {
    /// (start, bytes); the first `count` are used.
    ranges: [(u64, usize); PLACES_KEPT],
    count: usize,
}

impl CurrentWords {
    /// The ranges for the words of `cframes` (0 for none).
    fn of(cframes: &[u64; PLACES_KEPT], current: u64) -> CurrentWords {
        let mut words = cframes.map(|cframe| {
            let word = cframe.checked_add(current)?;
            (cframe != 0 && word.checked_add(8).is_some()).then_some(word)
        });
        words.sort_unstable();
        let mut out = CurrentWords {
            ranges: [(0, 0); PLACES_KEPT],
            count: 0,
        };
        for word in words.into_iter().flatten() {
            match out.ranges[..out.count].last_mut() {
                Some((start, len)) if word + 8 - *start <= CSTACK_SPAN => {
                    *len = (word + 8 - *start) as usize;
                }
                _ => {
                    out.ranges[out.count] = (word, 8);
                    out.count += 1;
                }
            }
        }
        out
    }

    fn used(&self) -> &[(u64, usize)] {
        &self.ranges[..self.count]
    }

    /// The bytes of every range, one after another.
    fn total_len(&self) -> usize {
        self.used().iter().map(|&(_, len)| len).sum()
    }

    /// The word at `addr` from `bytes` (the ranges' bytes as read), where a range that read
    /// (`read(i)`) holds it: a C frame's among the places or one lying between them.
    fn word_of(&self, bytes: &[u8], read: impl Fn(usize) -> bool, addr: u64) -> Option<u64> {
        let mut offset = 0;
        for (i, &(start, len)) in self.used().iter().enumerate() {
            let at = addr
                .checked_sub(start)
                .and_then(|at| usize::try_from(at).ok());
            if let Some(at) = at.filter(|&at| at.checked_add(8).is_some_and(|end| end <= len)) {
                let word = bytes.get(offset + at..offset + at + 8)?;
                return read(i).then(|| u64::from_ne_bytes(word.try_into().expect("8 bytes")));
            }
            offset += len;
        }
        None
    }
}

impl StackReader {
    /// The innermost Python frame of `tstate`, to notice when a thread moves on (None: no Python
    /// frame). Two reads, three on 3.11 and 3.12 (the C frame between).
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
    /// do not read): Python code changes them as it runs, a native call does not. The pointers,
    /// then the frame (again without its slots where they do not read): two to four reads.
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
    /// and the frame's slots read there too (module docs); `recent` is then updated. The same
    /// answer as `innermost_watched` from the same memory, whatever `recent` holds.
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
        if frame_len == 0 {
            // A layout without frame fields has nothing to guess.
            return self.innermost_watched(mem, tstate);
        }
        // Guesses are 0 where there is none; `at` is each one's place among the reads, where read.
        let cframes = match current_field {
            Some(_) => recent.cframes(),
            None => [0; PLACES_KEPT],
        };
        let current = current_field.unwrap_or(0);
        let words = CurrentWords::of(&cframes, current);
        let frames = recent.frames();
        let mut top_word = [0u8; 8];
        let mut span_bytes = vec![0u8; words.total_len()];
        let mut frame_bytes = vec![0u8; FRAMES_GUESSED * frame_len];
        let mut span_at = [usize::MAX; PLACES_KEPT];
        let mut frame_at = [usize::MAX; FRAMES_GUESSED];
        let filled = {
            // In this order: the kernel copies the ranges one after another, so a guessed frame's
            // bytes are read after the pointers that lead to it.
            let mut reads: Vec<(RemoteAddr, &mut [u8])> =
                Vec::with_capacity(1 + PLACES_KEPT + FRAMES_GUESSED);
            reads.push((RemoteAddr(tstate.0.wrapping_add(top_field)), &mut top_word));
            let mut rest = span_bytes.as_mut_slice();
            for (&(start, len), at) in words.used().iter().zip(&mut span_at) {
                let (bytes, after) = std::mem::take(&mut rest).split_at_mut(len);
                rest = after;
                *at = reads.len();
                reads.push((RemoteAddr(start), bytes));
            }
            let chunks = frame_bytes.chunks_mut(frame_len);
            for ((&frame, bytes), at) in frames.iter().zip(chunks).zip(&mut frame_at) {
                if frame != 0 {
                    *at = reads.len();
                    reads.push((RemoteAddr(frame), bytes));
                }
            }
            mem.read_each(&mut reads)
        };
        if filled == 0 {
            // The thread state's field did not read: the answer (an error) as without guesses.
            return self.innermost_watched(mem, tstate);
        }
        let top = u64::from_ne_bytes(top_word);
        // `in_one_read`: the frame's pointer came from the batch, so a guessed frame's bytes in it
        // were read after it. A pointer read later may lead to a frame the batch saw before the
        // thread put it there.
        let (cframe, frame, in_one_read) = match current_field {
            None => (0, top, true),
            Some(current) => {
                if top == 0 {
                    return Ok(None);
                }
                check_pointer(top)?;
                // The ranges were read after the pointer to the C frame, as a read of its own
                // would have been.
                let read = |i: usize| span_at[i] < filled;
                let guessed = words.word_of(&span_bytes, read, top.wrapping_add(current));
                match guessed {
                    Some(frame) => (top, frame, true),
                    None => {
                        let frame = mem.read_u64(RemoteAddr(top.wrapping_add(current)))?;
                        (top, frame, false)
                    }
                }
            }
        };
        if frame == 0 {
            return Ok(None);
        }
        check_pointer(frame)?;
        recent.note((cframe, frame));
        let guessed = (0..FRAMES_GUESSED)
            .find(|&i| in_one_read && frames[i] == frame && frame_at[i] < filled)
            .map(|i| &frame_bytes[i * frame_len..(i + 1) * frame_len]);
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
