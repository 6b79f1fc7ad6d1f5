//! Walking the interpreter's state in target memory: `_PyRuntime` → interpreters → thread states, the
//! GIL's address, and the GIL's three words (holder, locked, switch count).
//!
//! Every pointer comes from the target and is untrusted: each is checked for plausibility before use,
//! every list walk is bounded and detects cycles, and a read that fails is reported, never unwrapped.

use std::collections::HashSet;

use crate::addr::RemoteAddr;
use crate::observed::GilWord;
use crate::process::memory::{MemorySource, ReadError};
use crate::python::layout::Layout;
use crate::python::thread_list::read_thread_states;
use crate::symbols::dwarf::FieldInfo;

/// More threads than any real program has; a longer list means the walk is reading garbage.
pub const MAX_THREADS: usize = 10_000;
/// Subinterpreters are few; more means garbage.
pub const MAX_INTERPRETERS: usize = 256;
/// How far into glibc's `struct pthread` the `tid` field is searched for.
const PTHREAD_SEARCH_BYTES: usize = 2048;

/// Why a walk of the thread list failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalkError {
    /// Reading the target's memory failed.
    Read(ReadError),
    /// `_PyRuntime` is still zeroed: the interpreter has not started (or has finalized).
    NotInitialized,
    /// The memory does not form the structure the layout describes.
    Corrupt(String),
}

impl From<ReadError> for WalkError {
    fn from(e: ReadError) -> WalkError {
        WalkError::Read(e)
    }
}

/// How a thread state leads to an OS thread id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TidSource {
    /// 3.11+: `PyThreadState.native_thread_id`.
    NativeThreadId,
    /// Before 3.11: `PyThreadState.thread_id` is a `pthread_t`, the address of glibc's `struct pthread`,
    /// whose `tid` field sits at this offset (found on the live process, not assumed).
    PthreadTid {
        /// Byte offset of `tid` inside glibc's `struct pthread`.
        offset: u64,
    },
}

/// One Python thread: its `PyThreadState` and its OS thread id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadRef {
    /// The address of the thread's `PyThreadState` in the target.
    pub tstate: RemoteAddr,
    /// The id as this process sees it (/proc, the trace); the walk reads the target's own.
    pub tid: u32,
    /// The id as the target's PID namespace numbers it, which is what its C library records (a
    /// mutex's owner).
    pub their_tid: u32,
}

/// Where `last_holder`, `locked`, `switch_number` and `interval` lie in the GIL struct, looked up in
/// the layout once: the sampler decodes them on every tick, and looking them up by name there was a
/// tenth of its CPU (perf, 10 kHz).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GilWordFields {
    locked: FieldInfo,
    last_holder: FieldInfo,
    switch_number: FieldInfo,
    interval: Option<FieldInfo>,
    /// The byte range `[start, end)` of the GIL struct that holds them, so one read fetches all.
    pub start: u64,
    /// End of that byte range (exclusive), offset in the GIL struct.
    pub end: u64,
}

impl GilWordFields {
    /// Looks the GIL's word fields up in `layout` (they are required).
    pub fn new(layout: &Layout) -> GilWordFields {
        let [locked, last_holder, switch_number] =
            ["gil.locked", "gil.last_holder", "gil.switch_number"].map(|n| layout.required(n));
        let interval = layout.field("gil.interval");
        let fields = [
            Some(locked),
            Some(last_holder),
            Some(switch_number),
            interval,
        ];
        let fields = fields.iter().flatten();
        GilWordFields {
            locked,
            last_holder,
            switch_number,
            interval,
            start: fields.clone().map(|f| f.offset).min().unwrap_or(0),
            end: fields.map(|f| f.offset + f.size).max().unwrap_or(0),
        }
    }

    /// Decodes the GIL words from the bytes `start..end`. `locked` must be 0 or 1: anything else is a
    /// torn or wrong read.
    pub fn decode(&self, bytes: &[u8]) -> Result<GilWord, ReadError> {
        let field = |info: FieldInfo| -> Result<u64, ReadError> {
            let at = (info.offset - self.start) as usize;
            let raw = bytes
                .get(at..at + info.size as usize)
                .ok_or(ReadError::Fault)?;
            Ok(match raw.len() {
                4 => u32::from_ne_bytes(raw.try_into().unwrap()) as u64,
                8 => u64::from_ne_bytes(raw.try_into().unwrap()),
                _ => return Err(ReadError::Fault),
            })
        };
        let locked = match field(self.locked)? {
            0 => false,
            1 => true,
            _ => return Err(ReadError::Fault),
        };
        Ok(GilWord {
            locked,
            last_holder: RemoteAddr(field(self.last_holder)?),
            switch_number: field(self.switch_number)?,
            // Optional: a layout whose interval cannot be decoded still samples, without rule 6's bound.
            interval_us: self.interval.and_then(|info| field(info).ok()),
        })
    }
}

pub(super) fn read_field(
    mem: &dyn MemorySource,
    base: RemoteAddr,
    layout: &Layout,
    name: &str,
) -> Result<RemoteAddr, WalkError> {
    let field = layout.field(name).ok_or_else(|| {
        WalkError::Corrupt(format!("layout {} has no field {name}", layout.key()))
    })?;
    let addr = base
        .offset(field.offset)
        .ok_or_else(|| WalkError::Corrupt(format!("{name} overflows at {base}")))?;
    Ok(mem.read_addr(addr)?)
}

pub(super) fn check_pointer(addr: RemoteAddr, what: &str) -> Result<RemoteAddr, WalkError> {
    if addr.is_plausible_pointer(8) {
        Ok(addr)
    } else {
        Err(WalkError::Corrupt(format!(
            "{what} is not a valid pointer ({addr})"
        )))
    }
}

/// The interpreters, head first (the main interpreter is the last).
pub fn read_interpreters(
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
) -> Result<Vec<RemoteAddr>, WalkError> {
    let head = read_field(mem, runtime, layout, "runtime.interpreters.head")?;
    if head.is_null() {
        return Err(WalkError::NotInitialized);
    }
    let mut interps = Vec::new();
    let mut current = head;
    while !current.is_null() {
        check_pointer(current, "interpreter pointer")?;
        if interps.len() >= MAX_INTERPRETERS || interps.contains(&current) {
            return Err(WalkError::Corrupt(
                "the interpreter list loops or is implausibly long".into(),
            ));
        }
        interps.push(current);
        current = read_field(mem, current, layout, "interp.next")?;
    }
    Ok(interps)
}

/// The address of the GIL struct: embedded in `_PyRuntime` (3.7–3.11), or pointed to by the main
/// interpreter's `ceval.gil` (3.12+).
pub fn find_gil(
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
) -> Result<RemoteAddr, WalkError> {
    if let Some(gil) = layout.field("runtime.ceval.gil") {
        return runtime
            .offset(gil.offset)
            .ok_or_else(|| WalkError::Corrupt("GIL address overflows".into()));
    }
    let main = match layout.field("runtime.interpreters.main") {
        Some(f) => mem.read_addr(runtime.offset(f.offset).ok_or(ReadError::Fault)?)?,
        None => *read_interpreters(mem, layout, runtime)?
            .last()
            .ok_or(WalkError::NotInitialized)?,
    };
    if main.is_null() {
        return Err(WalkError::NotInitialized);
    }
    check_pointer(main, "main interpreter")?;
    let gil = read_field(mem, main, layout, "interp.ceval.gil")?;
    if gil.is_null() {
        return Err(WalkError::NotInitialized);
    }
    check_pointer(gil, "interp->ceval.gil")
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
mod tests {
    use super::*;
    use crate::process::memory::SnapshotMemory;
    use crate::python::layout::{Flavour, find_shipped};
    use crate::python::thread_list::ThreadWalker;

    /// A 3.9 runtime with one interpreter and the given thread states (tstate address, pthread_t).
    fn runtime_39(
        threads: &[(u64, u64)],
        pthread_tids: &[(u64, u32)],
    ) -> (SnapshotMemory, Layout, RemoteAddr) {
        let layout = find_shipped("3.9", Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let runtime = RemoteAddr(0x10_0000);
        let interp = RemoteAddr(0x20_0000);
        let mut mem = SnapshotMemory::new();
        mem.insert(runtime, vec![0; 0x1000]);
        mem.insert(interp, vec![0; 0x1000]);
        mem.put_u64(
            RemoteAddr(runtime.0 + layout.required("runtime.interpreters.head").offset),
            interp.0,
        );
        mem.put_u64(
            RemoteAddr(interp.0 + layout.required("interp.threads.head").offset),
            threads[0].0,
        );
        for (i, &(tstate, pthread)) in threads.iter().enumerate() {
            mem.insert(RemoteAddr(tstate), vec![0; 0x200]);
            let next = threads.get(i + 1).map(|t| t.0).unwrap_or(0);
            mem.put_u64(
                RemoteAddr(tstate + layout.required("tstate.next").offset),
                next,
            );
            mem.put_u64(
                RemoteAddr(tstate + layout.required("tstate.thread_id").offset),
                pthread,
            );
        }
        for &(pthread, tid) in pthread_tids {
            let mut block = vec![0u8; 0x800];
            block[720..724].copy_from_slice(&tid.to_ne_bytes());
            mem.insert(RemoteAddr(pthread), block);
        }
        (mem, layout, runtime)
    }

    #[test]
    fn finds_glibcs_tid_offset_and_walks_to_tids() {
        let (mem, layout, runtime) = runtime_39(
            &[(0x30_0000, 0x40_0000), (0x31_0000, 0x41_0000)],
            &[(0x40_0000, 77), (0x41_0000, 78)],
        );
        let tids = HashSet::from([77, 78]);
        let source = find_tid_source(&mem, &layout, runtime, &tids).unwrap();
        assert_eq!(source, TidSource::PthreadTid { offset: 720 });
        let mut out = Vec::new();
        ThreadWalker::default()
            .walk(&mem, &layout, runtime, source, &mut out)
            .unwrap();
        assert_eq!(out.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![77, 78]);
    }

    #[test]
    fn a_thread_state_still_carrying_its_creators_pthread_is_tolerated() {
        // Before 3.11 a new thread's state holds its creator's pthread_t until the thread starts.
        let (mem, layout, runtime) = runtime_39(
            &[(0x30_0000, 0x40_0000), (0x31_0000, 0x40_0000)],
            &[(0x40_0000, 77)],
        );
        let source = find_tid_source(&mem, &layout, runtime, &HashSet::from([77])).unwrap();
        assert_eq!(source, TidSource::PthreadTid { offset: 720 });
    }

    #[test]
    fn a_looping_thread_list_is_an_error_not_a_hang() {
        let (mut mem, layout, runtime) = runtime_39(
            &[(0x30_0000, 0x40_0000), (0x31_0000, 0x40_0000)],
            &[(0x40_0000, 77)],
        );
        mem.put_u64(
            RemoteAddr(0x31_0000 + layout.required("tstate.next").offset),
            0x30_0000,
        );
        let mut out = Vec::new();
        let walked = ThreadWalker::default().walk(
            &mem,
            &layout,
            runtime,
            TidSource::PthreadTid { offset: 720 },
            &mut out,
        );
        assert!(matches!(walked, Err(WalkError::Corrupt(why)) if why.contains("loops")));
    }

    #[test]
    fn a_pointer_into_nowhere_is_a_fault() {
        let (mut mem, layout, runtime) = runtime_39(&[(0x30_0000, 0x40_0000)], &[(0x40_0000, 77)]);
        mem.put_u64(
            RemoteAddr(0x30_0000 + layout.required("tstate.next").offset),
            0x7777_0000,
        );
        let mut out = Vec::new();
        let walked = ThreadWalker::default().walk(
            &mem,
            &layout,
            runtime,
            TidSource::PthreadTid { offset: 720 },
            &mut out,
        );
        assert_eq!(walked, Err(WalkError::Read(ReadError::Fault)));
    }

    #[test]
    fn gil_words_include_the_switch_interval() {
        let layout = find_shipped("3.12", Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let fields = GilWordFields::new(&layout);
        let mut bytes = vec![0u8; (fields.end - fields.start) as usize];
        let mut put = |name: &str, value: u64| {
            let info = layout.required(name);
            let at = (info.offset - fields.start) as usize;
            bytes[at..at + info.size as usize]
                .copy_from_slice(&value.to_ne_bytes()[..info.size as usize]);
        };
        put("gil.interval", 5000);
        put("gil.locked", 1);
        put("gil.last_holder", 0x7000);
        put("gil.switch_number", 42);
        let word = fields.decode(&bytes).unwrap();
        assert_eq!(word.interval_us, Some(5000));
        assert!(word.locked);
        assert_eq!(word.last_holder, RemoteAddr(0x7000));
        assert_eq!(word.switch_number, 42);
    }
}
