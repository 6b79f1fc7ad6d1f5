//! Walking the interpreters' thread lists: each `PyThreadState` with its OS thread id.
//!
//! The sampler re-walks every `refresh_ns` and whenever the list's head moves. Read one state at a
//! time, a list of 400 threads took 800 system calls and about 3 ms (2 spinners beside 398 blocked
//! threads, 3.11, 10 kHz: a walk cost 30 samples). Thread lists rarely change between walks, so each
//! walk reads ahead where the last one says the list goes, many states in one `process_vm_readv`,
//! and still follows every `next` pointer it read: a prediction only says which addresses to read,
//! never what the list is. Where the list differs, the walk goes on from the pointer it read.
//!
//! Every pointer comes from the target and is untrusted: each is checked before use, the walk is
//! bounded and detects cycles.

use std::collections::HashSet;

use crate::addr::RemoteAddr;
use crate::process::memory::{MemorySource, ReadError};
use crate::python::layout::Layout;
use crate::python::runtime::{
    MAX_THREADS, ThreadRef, TidSource, WalkError, check_pointer, read_field, read_interpreters,
};

/// How far into glibc's `struct pthread` the `tid` field is searched for.
const PTHREAD_SEARCH_BYTES: usize = 2048;

/// How many thread states one read-ahead asks for (`MemorySource::read_each` takes them 16 to a
/// system call).
const READ_AHEAD: usize = 64;

/// The two fields of a thread state a walk reads, as one byte range `[start, start + len)` of the
/// state: one range per state, however many states a system call reads.
#[derive(Clone, Copy)]
struct StateFields {
    start: u64,
    len: usize,
    /// Where the id and `next` are, from `start`.
    id_at: usize,
    next_at: usize,
}

impl StateFields {
    fn new(layout: &Layout, id_field: &str) -> Result<StateFields, WalkError> {
        let offset = |name: &str| {
            layout.field(name).map(|f| f.offset).ok_or_else(|| {
                WalkError::Corrupt(format!("layout {} has no field {name}", layout.key()))
            })
        };
        let (id, next) = (offset(id_field)?, offset("tstate.next")?);
        let start = id.min(next);
        Ok(StateFields {
            start,
            len: (id.max(next) - start + 8) as usize,
            id_at: (id - start) as usize,
            next_at: (next - start) as usize,
        })
    }

    /// (id, next) from the range's bytes.
    fn decode(&self, bytes: &[u8]) -> (u64, RemoteAddr) {
        let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
        (word(self.id_at), RemoteAddr(word(self.next_at)))
    }
}

/// Reads thread states' fields, ahead along the last walk's list where it can.
struct ReadAhead<'a> {
    mem: &'a dyn MemorySource,
    fields: StateFields,
    /// The last walk's thread states, in list order.
    predicted: &'a [(RemoteAddr, u64)],
    /// Where in `predicted` the next state is looked for first.
    hint: usize,
    /// States read ahead and not yet reached: (state, id, next), in list order.
    ahead: Vec<(RemoteAddr, u64, RemoteAddr)>,
    next_ahead: usize,
    bytes: &'a mut Vec<u8>,
}

impl ReadAhead<'_> {
    /// The id and `next` of the thread state at `tstate`.
    fn fields_of(&mut self, tstate: RemoteAddr) -> Result<(u64, RemoteAddr), WalkError> {
        if let Some(&(at, id, next)) = self.ahead.get(self.next_ahead)
            && at == tstate
        {
            self.next_ahead += 1;
            return Ok((id, next));
        }
        if self.read_ahead_from(tstate) {
            self.next_ahead = 1;
            let (_, id, next) = self.ahead[0];
            return Ok((id, next));
        }
        self.bytes.resize(self.fields.len, 0);
        let bytes = &mut self.bytes[..self.fields.len];
        let at = tstate.offset(self.fields.start).ok_or(ReadError::Fault)?;
        self.mem.read_into(at, bytes)?;
        Ok(self.fields.decode(bytes))
    }

    /// Reads `tstate` and the states the last walk found after it in one go; false when the last
    /// walk did not have `tstate` or the read failed (the caller then reads it alone, and reports
    /// the error that gives).
    fn read_ahead_from(&mut self, tstate: RemoteAddr) -> bool {
        self.ahead.clear();
        let n = self.predicted.len();
        let Some(from) = (0..n)
            .map(|i| (self.hint + i) % n)
            .find(|&i| self.predicted[i].0 == tstate)
        else {
            return false;
        };
        let states: Vec<RemoteAddr> = self.predicted[from..]
            .iter()
            .take(READ_AHEAD)
            .map(|&(s, _)| s)
            .take_while(|s| s.is_plausible_pointer(8))
            .collect();
        let len = self.fields.len;
        self.bytes.resize(states.len() * len, 0);
        let mut reads: Vec<(RemoteAddr, &mut [u8])> = Vec::with_capacity(states.len());
        for (state, buf) in states.iter().zip(self.bytes.chunks_mut(len)) {
            let Some(at) = state.offset(self.fields.start) else {
                break;
            };
            reads.push((at, buf));
        }
        let filled = self.mem.read_each(&mut reads);
        drop(reads);
        for (state, bytes) in states.iter().zip(self.bytes.chunks(len)).take(filled) {
            let (id, next) = self.fields.decode(bytes);
            self.ahead.push((*state, id, next));
        }
        self.hint = from + filled;
        !self.ahead.is_empty()
    }
}

/// Reads the `PyThreadState` list of every interpreter into `out` as (tstate, pthread_t or tid) pairs,
/// before tid resolution, reading ahead along `predicted` (the last walk's `out`; empty for none).
/// Bounded and cycle-checked.
#[allow(clippy::too_many_arguments)]
pub(super) fn read_thread_states(
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
    id_field: &str,
    out: &mut Vec<(RemoteAddr, u64)>,
    seen: &mut HashSet<RemoteAddr>,
    head_field: &mut Option<RemoteAddr>,
    (predicted, bytes): (&[(RemoteAddr, u64)], &mut Vec<u8>),
) -> Result<(), WalkError> {
    out.clear();
    seen.clear();
    let mut reader = ReadAhead {
        mem,
        fields: StateFields::new(layout, id_field)?,
        predicted,
        hint: 0,
        ahead: Vec::new(),
        next_ahead: 0,
        bytes,
    };
    for (i, interp) in read_interpreters(mem, layout, runtime)?
        .into_iter()
        .enumerate()
    {
        if i == 0 {
            *head_field = layout
                .field("interp.threads.head")
                .and_then(|f| interp.offset(f.offset));
        }
        let mut tstate = read_field(mem, interp, layout, "interp.threads.head")?;
        while !tstate.is_null() {
            check_pointer(tstate, "thread state pointer")?;
            if out.len() >= MAX_THREADS || !seen.insert(tstate) {
                return Err(WalkError::Corrupt(
                    "the thread list loops or is implausibly long".into(),
                ));
            }
            let (id, next) = reader.fields_of(tstate)?;
            out.push((tstate, id));
            tstate = next;
        }
    }
    Ok(())
}

/// Walks the thread lists and resolves each thread state to its OS tid. It keeps the last walk's
/// list to read ahead along, and reuses its buffers from one walk to the next (a read-ahead still
/// makes a few small vectors: walks are far rarer than ticks).
#[derive(Default)]
pub struct ThreadWalker {
    raw: Vec<(RemoteAddr, u64)>,
    /// The last walk's `raw`: where the next walk reads ahead.
    last: Vec<(RemoteAddr, u64)>,
    seen: HashSet<RemoteAddr>,
    head_field: Option<RemoteAddr>,
    bytes: Vec<u8>,
    /// Where each state's pthread `tid` is read (before 3.11), and the bytes read there.
    tid_addrs: Vec<RemoteAddr>,
    tid_bytes: Vec<[u8; 4]>,
}

impl ThreadWalker {
    /// Where the first interpreter keeps the head of its thread list, as the last walk found it:
    /// CPython puts every new thread state at the head, so a change there says a thread started.
    pub fn head_field(&self) -> Option<RemoteAddr> {
        self.head_field
    }

    /// Walks every interpreter's thread list from `runtime` into `out`, each thread state with its
    /// OS thread id found through `tids`.
    pub fn walk(
        &mut self,
        mem: &dyn MemorySource,
        layout: &Layout,
        runtime: RemoteAddr,
        tids: TidSource,
        out: &mut Vec<ThreadRef>,
    ) -> Result<(), WalkError> {
        let id_field = match tids {
            TidSource::NativeThreadId => "tstate.native_thread_id",
            TidSource::PthreadTid { .. } => "tstate.thread_id",
        };
        std::mem::swap(&mut self.raw, &mut self.last);
        let walked = read_thread_states(
            mem,
            layout,
            runtime,
            id_field,
            &mut self.raw,
            &mut self.seen,
            &mut self.head_field,
            (&self.last, &mut self.bytes),
        );
        if walked.is_err() {
            // Nothing to read ahead along next time but what the list really was.
            self.raw.clear();
        }
        walked?;
        if let TidSource::PthreadTid { offset } = tids {
            self.read_pthread_tids(mem, offset)?;
        }
        out.clear();
        // A thread state being created or freed while it is read (a target that churns threads)
        // can hold any id: such a state is passed over. Only when every id is impossible does the
        // layout itself look wrong.
        let mut impossible = None;
        let mut pthread_tids = self.tid_bytes.iter();
        for &(tstate, id) in &self.raw {
            let tid = match tids {
                TidSource::NativeThreadId => id,
                // A thread state not yet bound to an OS thread has no pthread_t.
                TidSource::PthreadTid { .. } if id == 0 => continue,
                TidSource::PthreadTid { .. } => match pthread_tids.next() {
                    Some(bytes) => u32::from_ne_bytes(*bytes) as u64,
                    None => continue,
                },
            };
            if tid == 0 {
                continue;
            }
            let Ok(tid) = u32::try_from(tid) else {
                impossible.get_or_insert(tid);
                continue;
            };
            out.push(ThreadRef {
                tstate,
                tid,
                their_tid: tid,
            });
        }
        match impossible {
            Some(tid) if out.is_empty() => Err(WalkError::Corrupt(format!(
                "thread id {tid} is out of range"
            ))),
            _ => Ok(()),
        }
    }

    /// Before 3.11: the `tid` in glibc's `struct pthread` of every bound thread state (`pthread_t`
    /// not 0), in `raw`'s order, read many to a system call.
    fn read_pthread_tids(&mut self, mem: &dyn MemorySource, offset: u64) -> Result<(), WalkError> {
        self.tid_addrs.clear();
        for &(_, pthread) in self.raw.iter().filter(|(_, id)| *id != 0) {
            let addr = RemoteAddr(pthread).offset(offset).ok_or(ReadError::Fault)?;
            self.tid_addrs.push(addr);
        }
        self.tid_bytes.clear();
        self.tid_bytes.resize(self.tid_addrs.len(), [0; 4]);
        let mut reads: Vec<(RemoteAddr, &mut [u8])> = self
            .tid_addrs
            .iter()
            .zip(self.tid_bytes.iter_mut())
            .map(|(addr, bytes)| (*addr, &mut bytes[..]))
            .collect();
        let filled = mem.read_each(&mut reads);
        // Where one could not be read with the rest, reading it alone says why.
        for (addr, bytes) in reads.into_iter().skip(filled) {
            mem.read_into(addr, bytes)?;
        }
        Ok(())
    }
}

/// Decides how thread states map to tids. For 3.11+ that is `native_thread_id`; before, it finds the
/// offset of `tid` inside glibc's `struct pthread` as the one offset at which every thread's
/// `pthread_t` block holds a distinct tid of the process.
pub fn find_tid_source(
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
    process_tids: &HashSet<u32>,
) -> Result<TidSource, WalkError> {
    if layout.field("tstate.native_thread_id").is_some() {
        return Ok(TidSource::NativeThreadId);
    }
    let mut raw = Vec::new();
    read_thread_states(
        mem,
        layout,
        runtime,
        "tstate.thread_id",
        &mut raw,
        &mut HashSet::new(),
        &mut None,
        (&[], &mut Vec::new()),
    )?;
    let mut pthreads: Vec<u64> = raw
        .iter()
        .map(|&(_, id)| id)
        .filter(|&id| id != 0)
        .collect();
    // A thread state created for a thread that has not started yet still carries its creator's
    // pthread_t (CPython < 3.11 sets it in the new thread): count each pthread once.
    pthreads.sort_unstable();
    pthreads.dedup();
    if pthreads.is_empty() {
        return Err(WalkError::NotInitialized);
    }
    let mut blocks = Vec::with_capacity(pthreads.len());
    for &pthread in &pthreads {
        check_pointer(RemoteAddr(pthread), "pthread_t")?;
        let mut block = vec![0u8; PTHREAD_SEARCH_BYTES];
        mem.read_into(RemoteAddr(pthread), &mut block)?;
        blocks.push(block);
    }
    let offset = (0..PTHREAD_SEARCH_BYTES - 4).step_by(4).find(|&off| {
        let values: Vec<u32> = blocks
            .iter()
            .map(|b| u32::from_ne_bytes(b[off..off + 4].try_into().unwrap()))
            .collect();
        let distinct: HashSet<u32> = values.iter().copied().collect();
        values.iter().all(|v| process_tids.contains(v)) && distinct.len() == values.len()
    });
    match offset {
        Some(offset) => Ok(TidSource::PthreadTid {
            offset: offset as u64,
        }),
        None => Err(WalkError::Corrupt(
            "no tid field found in the threads' struct pthread (is this glibc?)".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
