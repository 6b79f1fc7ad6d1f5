//! The target being sampled and every read of it: its thread states and the GIL, as the sampler
//! reads them on every tick. The GIL read is the hot path: one bounded read of the GIL structure and
//! a decode (python/gil_span.rs), with no allocation. Attaching (python/attach.rs) builds a `Target`;
//! nothing here looks anything up.

use crate::addr::RemoteAddr;
use crate::error::Result;
use crate::observed::GilWaitRanges;
use crate::observed::{GilWord, Waiters};
use crate::process::glibc::PTHREAD_COND_SIZE;
use crate::process::maps::read_file_mappings;
use crate::process::memory::{MemorySource, ProcessMemory, ReadError};
use crate::python::find_binary::Binary;
use crate::python::gil_span::{CondStamp, GIL_SPAN_MAX, GilReading, WaiterCountAddrs, WaiterWords};
use crate::python::layout::{Flavour, Layout};
use crate::python::layout_choice::LayoutSource;
use crate::python::objects::ObjectReader;
use crate::python::runtime::{GilWordFields, ThreadRef, TidSource, WalkError};
use crate::python::thread_list::ThreadWalker;
use crate::python::version::PyVersion;

/// A target ready to be sampled: everything the sampler needs, checked against the live process.
pub struct Target {
    /// The target's pid in gilsample's PID namespace.
    pub pid: u32,
    /// The ELF that defines `_PyRuntime` and where it is mapped.
    pub binary: Binary,
    /// The interpreter's version.
    pub version: PyVersion,
    /// Its build flavour (default, debug or free-threaded).
    pub flavour: Flavour,
    /// The offsets of the fields the sampler reads.
    pub layout: Layout,
    /// Where `layout` came from (debug offsets, DWARF, a shipped table).
    pub layout_source: LayoutSource,
    /// The address of `_PyRuntime` in the target (load bias applied).
    pub runtime: RemoteAddr,
    /// The address of the GIL struct (`_gil_runtime_state`) in the target.
    pub gil: RemoteAddr,
    /// Where the GIL's words (locked, last holder, switch number, interval) lie in it.
    pub gil_word: GilWordFields,
    /// How a thread state gives its OS thread id.
    pub tids: TidSource,
    /// Reads the target's memory.
    pub memory: ProcessMemory,
    /// Where the GIL's condition variables count their waiters, or why they cannot be read.
    pub waiter_counts: std::result::Result<WaiterCountAddrs, String>,
}

impl Target {
    /// A reader of the target's Python objects (thread names), or why its layout cannot give one.
    pub fn object_reader(&self) -> std::result::Result<ObjectReader, String> {
        ObjectReader::new(&self.layout, self.version, self.binary.types)
    }

    /// The target's thread states, walked with `walker` (which keeps what it needs between walks).
    pub fn walk_threads(
        &self,
        walker: &mut ThreadWalker,
        out: &mut Vec<ThreadRef>,
    ) -> std::result::Result<(), WalkError> {
        walker.walk(&self.memory, &self.layout, self.runtime, self.tids, out)
    }

    /// Whether the target still maps the same interpreter file where it did at attach time; false
    /// after an exec. Reads /proc/PID/maps, so it is for the rare check after persistent faults.
    pub fn still_mapped(&self) -> Result<bool> {
        let runtime = self.binary.runtime_symbol.0;
        // The mapping that holds `_PyRuntime` is the file's writable data; the same file mapped anywhere
        // in the same place means the same interpreter (an exec of the same non-PIE binary re-creates
        // it there, and reading on is then right).
        let base = self
            .binary
            .mapping
            .start
            .wrapping_sub(self.binary.mapping.offset);
        Ok(read_file_mappings(self.pid)?.iter().any(|m| {
            m.same_file(&self.binary.mapping)
                && m.start.wrapping_sub(m.offset) == base
                && runtime >= base
        }))
    }
}

impl Target {
    /// Reads the GIL words in one read.
    pub fn read_gil_word(&self) -> std::result::Result<GilWord, ReadError> {
        self.read_gil(None).map(|reading| reading.word)
    }

    /// Reads the GIL words and, where `counts` is given, the waiter counts and the mutex's owner at the
    /// same moment, in one read of the GIL structure that holds them all: a read costs the same for
    /// 24 bytes as for 200 (a syscall each), and the sampler does this on every tick.
    pub fn read_gil(
        &self,
        counts: Option<&WaiterCountAddrs>,
    ) -> std::result::Result<GilReading, ReadError> {
        self.read_gil_watching(counts, None)
            .map(|(reading, _)| reading)
    }

    /// `read_gil`, and in the same system call the pointer at `watch` (the sampler watches the
    /// thread list's head there): `None` for it where that word alone could not be read.
    pub fn read_gil_watching(
        &self,
        counts: Option<&WaiterCountAddrs>,
        watch: Option<RemoteAddr>,
    ) -> std::result::Result<(GilReading, Option<u64>), ReadError> {
        let (word_start, word_end) = (
            self.gil.0 + self.gil_word.start,
            self.gil.0 + self.gil_word.end,
        );
        let (start, end) = match counts {
            Some(at) => (word_start.min(at.cond.0), word_end.max(at.span_end())),
            None => (word_start, word_end),
        };
        let mut buf = [0u8; GIL_SPAN_MAX];
        let mut watched = [0u8; 8];
        let (span, watched) = self.read_span(start, end, &mut buf, watch, &mut watched)?;
        let word_bytes = &span[(word_start - start) as usize..(word_end - start) as usize];
        let word = self.gil_word.decode(word_bytes)?;
        let counted = counts.map(|at| &span[(at.take_wrefs.0 - start) as usize..]);
        let reading = GilReading {
            word,
            waiters: counts
                .zip(counted)
                .and_then(|(at, bytes)| at.decode(bytes).ok()),
            mutex_owner: counts
                .zip(counted)
                .and_then(|(at, bytes)| at.decode_mutex_owner(bytes)),
            mutex_contended: counts
                .zip(counted)
                .and_then(|(at, bytes)| at.decode_mutex_contended(bytes)),
            cond_stamp: counts.and_then(|at| {
                let from = (at.cond.0 - start) as usize;
                let bytes = span.get(from..from + PTHREAD_COND_SIZE as usize)?;
                CondStamp::new(word.switch_number, bytes)
            }),
        };
        Ok((reading, watched))
    }

    /// The byte ranges of the GIL's condition variables and mutexes: a thread sleeping in futex on an
    /// address inside one of these is waiting for (`take`) or handing off (`drop`) the GIL.
    pub fn gil_wait_ranges(&self) -> GilWaitRanges {
        let range = |name: &str| {
            self.layout
                .field(name)
                .map(|f| (self.gil.0 + f.offset, self.gil.0 + f.offset + f.size))
        };
        GilWaitRanges {
            cond: range("gil.cond"),
            mutex: range("gil.mutex"),
            switch_cond: range("gil.switch_cond"),
            switch_mutex: range("gil.switch_mutex"),
            // glibc's `__g_signals[2]` follows `__wrefs` in every layout that has it.
            cond_waiter_words: self
                .waiter_counts
                .as_ref()
                .ok()
                .map(|c| (c.take_wrefs.0 + 4, c.take_wrefs.0 + 12)),
        }
    }
}

impl Target {
    /// Reads both waiter counts in one read.
    pub fn read_waiters(&self, at: &WaiterCountAddrs) -> std::result::Result<Waiters, ReadError> {
        self.read_waiter_words(at).map(|words| words.waiters)
    }

    /// Reads both waiter counts and the GIL mutex's owner and lock word, in one read (they lie in
    /// the span `WaiterCountAddrs::span_end` bounds).
    pub fn read_waiter_words(
        &self,
        at: &WaiterCountAddrs,
    ) -> std::result::Result<WaiterWords, ReadError> {
        let mut buf = [0u8; GIL_SPAN_MAX];
        let (span, _) =
            self.read_span(at.take_wrefs.0, at.span_end(), &mut buf, None, &mut [0; 8])?;
        Ok(WaiterWords {
            waiters: at.decode(span)?,
            mutex_owner: at.decode_mutex_owner(span),
            mutex_contended: at.decode_mutex_contended(span),
        })
    }

    /// Target bytes `start..end`, one read into `buf`; a span longer than the buffer is refused as
    /// a fault (its length comes from the layout's and the C library's offsets, not the target).
    /// With `watch`, the word there is read in the same system call (`read_each`).
    fn read_span<'b>(
        &self,
        start: u64,
        end: u64,
        buf: &'b mut [u8; GIL_SPAN_MAX],
        watch: Option<RemoteAddr>,
        watched: &mut [u8; 8],
    ) -> std::result::Result<(&'b [u8], Option<u64>), ReadError> {
        let span = buf
            .get_mut(..end.saturating_sub(start) as usize)
            .ok_or(ReadError::Fault)?;
        let Some(watch) = watch else {
            self.memory.read_into(RemoteAddr(start), span)?;
            return Ok((span, None));
        };
        let mut reads = [
            (RemoteAddr(start), &mut span[..]),
            (watch, &mut watched[..]),
        ];
        match self.memory.read_each(&mut reads) {
            2 => Ok((span, Some(u64::from_ne_bytes(*watched)))),
            1 => Ok((span, None)),
            // Read alone again for the reason (the target gone, permission lost, a fault).
            _ => {
                self.memory.read_into(RemoteAddr(start), span)?;
                Ok((span, None))
            }
        }
    }

    /// The waiter counts' source, with what they read now, or why there are none.
    pub fn describe_waiter_counts(&self) -> String {
        // The sampler's own read (GIL words and counts at once), so what this says is what it sees.
        let read = self.read_gil(self.waiter_counts.as_ref().ok());
        self.describe_waiters(read)
    }

    /// The waiter counts' source, with what `read` found, or why there are none.
    pub fn describe_waiters(&self, read: std::result::Result<GilReading, ReadError>) -> String {
        match &self.waiter_counts {
            Ok(at) => {
                let (major, minor) = at.glibc;
                match read.map(|reading| reading.waiters) {
                    Ok(Some(w)) => format!(
                        "counted by glibc {major}.{minor} (now {} in take_gil's wait, {} in drop_gil's)",
                        w.take, w.drop
                    ),
                    Ok(None) => format!("counted by glibc {major}.{minor} (invalid now)"),
                    Err(e) => format!("counted by glibc {major}.{minor} (unreadable now: {e:?})"),
                }
            }
            Err(why) => format!("not counted: {why}"),
        }
    }
}
