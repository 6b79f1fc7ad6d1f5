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

use super::{FrameId, StackReader, Top, WatchedFrame, check_pointer};
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
    ) -> ObjectResult<Option<WatchedFrame>> {
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
    ) -> ObjectResult<Option<WatchedFrame>> {
        let frame_len = self.watched_len() as usize;
        if frame_len == 0 {
            // A layout without frame fields has nothing to guess.
            return self.innermost_watched(mem, tstate);
        }
        let (top_field, current_field) = match self.top {
            Top::Frame(offset) => (offset, None),
            Top::ViaCFrame { cframe, current } => (cframe, Some(current)),
        };
        let first = FirstRead::of(mem, tstate, top_field, current_field, recent, frame_len);
        if !first.has(0) {
            // The thread state's field did not read: the answer (an error) as without guesses.
            return self.innermost_watched(mem, tstate);
        }
        // `in_one_read`: the frame's pointer came from the first read, so a guessed frame's bytes
        // in it were read after it. A pointer read later may lead to a frame the first read saw
        // before the thread put it there.
        let (cframe, frame, in_one_read) = match current_field {
            None => (0, first.top(), true),
            Some(current) => {
                let cframe = first.top();
                if cframe == 0 {
                    return Ok(None);
                }
                check_pointer(cframe)?;
                match first.current_word(cframe.wrapping_add(current)) {
                    Some(frame) => (cframe, frame, true),
                    None => {
                        let frame = mem.read_u64(RemoteAddr(cframe.wrapping_add(current)))?;
                        (cframe, frame, false)
                    }
                }
            }
        };
        if frame == 0 {
            return Ok(None);
        }
        check_pointer(frame)?;
        recent.note((cframe, frame));
        match first.guessed_frame(frame).filter(|_| in_one_read) {
            Some(bytes) => self.watched_from(frame, bytes).map(Some),
            None => self.watched_frame(mem, frame).map(Some),
        }
    }

    /// Bytes read of a watched frame: its header, and its first slots where the layout places them.
    fn watched_len(&self) -> u64 {
        self.slots.map_or(self.frame_header, |at| at + SLOT_BYTES)
    }

    /// The watched frame at `frame`, read now: with its slots where they read, else its header.
    fn watched_frame(&self, mem: &dyn MemorySource, frame: u64) -> ObjectResult<WatchedFrame> {
        if self.slots.is_some() {
            let mut bytes = vec![0u8; self.watched_len() as usize];
            // Past the end of the frame's memory the slots do not read: the header alone is.
            if mem.read_into(RemoteAddr(frame), &mut bytes).is_ok() {
                return self.watched_from(frame, &bytes);
            }
        }
        let (code, instr, _) = self.read_frame(mem, frame)?;
        let id = FrameId { frame, code, instr };
        Ok(WatchedFrame {
            id,
            slots_digest: None,
        })
    }

    /// The watched frame from `bytes` read at `frame` (`watched_len` of them).
    fn watched_from(&self, frame: u64, bytes: &[u8]) -> ObjectResult<WatchedFrame> {
        let (code, instr, _) = self.decode_frame(bytes)?;
        let slots_digest = self.slots.and_then(|at| bytes.get(at as usize..)).map(|s| {
            let mut digest = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(s, &mut digest);
            std::hash::Hasher::finish(&digest)
        });
        let id = FrameId { frame, code, instr };
        Ok(WatchedFrame { id, slots_digest })
    }
}

/// The first read of `innermost_watched_near`: the thread state's pointer to the innermost frame
/// (or to its C frame), the C frames' `current_frame` words the thread was last found behind, and
/// the frames it was last found at, in one `read_each`, in this order: the kernel copies the
/// ranges one after another, so a guessed frame's bytes are read after the pointers that lead to it.
struct FirstRead {
    words: CurrentWords,
    frames: [u64; FRAMES_GUESSED],
    frame_len: usize,
    /// The pointer's 8 bytes, then the words' ranges, then `frame_len` bytes per guessed frame.
    bytes: Vec<u8>,
    /// Each range's place among the reads (the pointer's is 0), `usize::MAX` where not read.
    span_at: [usize; PLACES_KEPT],
    frame_at: [usize; FRAMES_GUESSED],
    /// How many of the reads were filled (they stop at the first that does not read).
    filled: usize,
}

impl FirstRead {
    fn of(
        mem: &dyn MemorySource,
        tstate: RemoteAddr,
        top_field: u64,
        current_field: Option<u64>,
        recent: &RecentTops,
        frame_len: usize,
    ) -> FirstRead {
        let cframes = match current_field {
            Some(_) => recent.cframes(),
            None => [0; PLACES_KEPT],
        };
        let words = CurrentWords::of(&cframes, current_field.unwrap_or(0));
        let span_len = words.total_len();
        let mut first = FirstRead {
            frames: recent.frames(),
            bytes: vec![0u8; 8 + span_len + FRAMES_GUESSED * frame_len],
            words,
            frame_len,
            span_at: [usize::MAX; PLACES_KEPT],
            frame_at: [usize::MAX; FRAMES_GUESSED],
            filled: 0,
        };
        let mut reads: [(RemoteAddr, &mut [u8]); 1 + PLACES_KEPT + FRAMES_GUESSED] =
            std::array::from_fn(|_| (RemoteAddr(0), &mut [][..]));
        let (top_word, rest) = first.bytes.split_at_mut(8);
        let (mut span_bytes, frame_bytes) = rest.split_at_mut(span_len);
        reads[0] = (RemoteAddr(tstate.0.wrapping_add(top_field)), top_word);
        let mut count = 1;
        for (&(start, len), at) in first.words.used().iter().zip(&mut first.span_at) {
            let (bytes, after) = std::mem::take(&mut span_bytes).split_at_mut(len);
            span_bytes = after;
            *at = count;
            reads[count] = (RemoteAddr(start), bytes);
            count += 1;
        }
        let chunks = frame_bytes.chunks_mut(frame_len);
        for ((&frame, bytes), at) in first.frames.iter().zip(chunks).zip(&mut first.frame_at) {
            if frame != 0 {
                *at = count;
                reads[count] = (RemoteAddr(frame), bytes);
                count += 1;
            }
        }
        first.filled = mem.read_each(&mut reads[..count]);
        first
    }

    /// Whether the read at place `at` was filled.
    fn has(&self, at: usize) -> bool {
        at < self.filled
    }

    /// The pointer the thread state's field held.
    fn top(&self) -> u64 {
        u64::from_ne_bytes(self.bytes[..8].try_into().expect("8 bytes"))
    }

    /// The `current_frame` word at `addr`, where a range that read holds it (read after the
    /// pointer to its C frame, as a read of its own would have been).
    fn current_word(&self, addr: u64) -> Option<u64> {
        let span = &self.bytes[8..8 + self.words.total_len()];
        self.words
            .word_of(span, |i| self.has(self.span_at[i]), addr)
    }

    /// The bytes of `frame` where it was among the guessed frames and read.
    fn guessed_frame(&self, frame: u64) -> Option<&[u8]> {
        let i =
            (0..FRAMES_GUESSED).find(|&i| self.frames[i] == frame && self.has(self.frame_at[i]))?;
        let start = 8 + self.words.total_len() + i * self.frame_len;
        self.bytes.get(start..start + self.frame_len)
    }
}
