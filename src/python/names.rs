//! Python thread names: the `name` of each `threading.Thread`, read from the target's memory.
//!
//! `threading._active` maps each running Thread's ident (`threading.get_ident()`, which is
//! `PyThreadState.thread_id`) to the Thread; the Thread keeps its name in the instance attribute
//! `_name` (Lib/threading.py, 3.7–3.15). The path is `interp->modules` (3.12+:
//! `interp->imports.modules`, i.e. `sys.modules`) → `"threading"` → its namespace → `"_active"`. That
//! dict's address is found once and kept (threading never rebinds it), checked to still be a dict on
//! each use, so a later read costs a few reads per thread. The kernel's 15-byte `comm` is no
//! substitute: 3.14+ copies a cut name there, older versions nothing.
//!
//! Threads that are not `threading.Thread`s (started from C, or with `_thread.start_new_thread`)
//! have no entry and keep the kernel's name; a name that does not decode is counted, never shown.

use std::collections::BTreeMap;

use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::python::layout::Layout;
use crate::python::objects::{ObjectError, ObjectReader};
use crate::python::runtime::{MAX_THREADS, ThreadRef, read_interpreters};

/// A longer "name" is taken for a torn read (the thread keeps its kernel name): names are labels.
pub const MAX_NAME_CHARS: u64 = 256;

/// How the reads of thread names went over a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct NameStats {
    /// Times the names were read (one pass over `threading._active`).
    pub reads: u64,
    /// Names read and shown.
    pub names: u64,
    /// Entries or passes whose memory did not decode (a thread starting or exiting under the read,
    /// a stale pointer): skipped, the thread keeps its previous or kernel name.
    pub torn: u64,
}

/// A new thread's tstate can be listed before `threading` has put it into `_active`: a thread not
/// found is looked for again at this many later thread-list walks, then left with the kernel's name.
const ATTEMPTS_PER_THREAD: u8 = 20;

/// Reads thread names; keeps where `threading._active` is between reads.
pub struct ThreadNamer {
    objects: Result<ObjectReader, String>,
    active: Option<RemoteAddr>,
    /// Per tid: attempts made to name it, or `u8::MAX` once named.
    attempts: BTreeMap<u32, u8>,
    pending: Vec<ThreadRef>,
    /// How naming threads went so far.
    pub stats: NameStats,
}

impl ThreadNamer {
    /// A namer reading thread names through `objects`, or one that names none, for why it cannot.
    pub fn new(objects: Result<ObjectReader, String>) -> ThreadNamer {
        ThreadNamer {
            objects,
            active: None,
            attempts: BTreeMap::new(),
            pending: Vec::new(),
            stats: NameStats::default(),
        }
    }

    /// Names the threads of `threads` not named yet (and not given up on): what the sampler calls
    /// after each walk of the thread list. Reads nothing when there are none. Returns the tids it
    /// named.
    pub fn name_new_threads(
        &mut self,
        mem: &dyn MemorySource,
        layout: &Layout,
        runtime: RemoteAddr,
        threads: &[ThreadRef],
        names: &mut BTreeMap<u32, String>,
    ) -> Vec<u32> {
        if self.objects.is_err() {
            return Vec::new();
        }
        let mut named = Vec::new();
        let mut pending = std::mem::take(&mut self.pending);
        pending.clear();
        pending.extend(threads.iter().filter(|t| {
            self.attempts
                .get(&t.tid)
                .is_none_or(|&n| n < ATTEMPTS_PER_THREAD)
        }));
        if !pending.is_empty() {
            let mut found = BTreeMap::new();
            self.name_threads(mem, layout, runtime, &pending, &mut found);
            for t in &pending {
                let attempts = self.attempts.entry(t.tid).or_insert(0);
                *attempts = if found.contains_key(&t.tid) {
                    u8::MAX
                } else {
                    attempts.saturating_add(1)
                };
            }
            named.extend(found.keys());
            names.extend(found);
        }
        self.pending = pending;
        named
    }

    /// Why names cannot be read in this target at all, if they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.objects.as_ref().err().map(String::as_str)
    }

    /// Puts the Python name of each of `threads` that is a `threading.Thread` into `names` (keyed by
    /// `ThreadRef::tid`), replacing what was there. Returns how many were named.
    pub fn name_threads(
        &mut self,
        mem: &dyn MemorySource,
        layout: &Layout,
        runtime: RemoteAddr,
        threads: &[ThreadRef],
        names: &mut BTreeMap<u32, String>,
    ) -> usize {
        let Ok(objects) = &self.objects else {
            return 0;
        };
        let Some(ident_field) = layout.field("tstate.thread_id") else {
            return 0;
        };
        self.stats.reads += 1;
        let by_ident = match read_active(objects, mem, layout, runtime, &mut self.active) {
            Ok(found) => found,
            Err(ObjectError::Absent) => return 0, // threading not imported (yet)
            Err(_) => {
                self.stats.torn += 1;
                return 0;
            }
        };
        let mut named = 0;
        for thread in threads {
            let Ok(ident) = mem.read_u64(RemoteAddr(thread.tstate.0 + ident_field.offset)) else {
                continue;
            };
            let Some(&(_, object)) = by_ident.iter().find(|(i, _)| *i == ident) else {
                continue;
            };
            match thread_name(objects, mem, object) {
                Ok(name) => {
                    names.insert(thread.tid, name);
                    named += 1;
                }
                Err(_) => self.stats.torn += 1,
            }
        }
        self.stats.names += named as u64;
        named
    }
}

/// `threading._active` as (ident, Thread) pairs, finding the dict first where it is not known.
fn read_active(
    objects: &ObjectReader,
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
    cached: &mut Option<RemoteAddr>,
) -> Result<Vec<(u64, RemoteAddr)>, ObjectError> {
    let items = match cached.map(|dict| objects.dict_items(mem, dict, MAX_THREADS as u64)) {
        Some(Ok(items)) => items,
        _ => {
            *cached = None;
            let dict = find_active(objects, mem, layout, runtime)?;
            let items = objects.dict_items(mem, dict, MAX_THREADS as u64)?;
            *cached = Some(dict);
            items
        }
    };
    let mut by_ident = Vec::with_capacity(items.len());
    for (key, thread) in items {
        // A key that is not an int is not threading's doing: skip it.
        if let Ok(ident) = objects.read_u64_int(mem, key) {
            by_ident.push((ident, thread));
        }
    }
    Ok(by_ident)
}

/// The main interpreter's `sys.modules["threading"]._active`.
fn find_active(
    objects: &ObjectReader,
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
) -> Result<RemoteAddr, ObjectError> {
    let modules_field = layout.field("interp.modules").ok_or(ObjectError::Absent)?;
    // The main interpreter is the last in the list (each new one is pushed at the head).
    let main = read_interpreters(mem, layout, runtime)
        .map_err(|_| ObjectError::Torn("the interpreter list"))?
        .last()
        .copied()
        .ok_or(ObjectError::Absent)?;
    let modules = mem.read_addr(RemoteAddr(main.0 + modules_field.offset))?;
    if modules.is_null() {
        return Err(ObjectError::Absent);
    }
    let threading = objects.dict_get(mem, modules, "threading")?;
    let namespace = objects.module_dict(mem, threading)?;
    objects.dict_get(mem, namespace, "_active")
}

/// A Thread's `_name`.
fn thread_name(
    objects: &ObjectReader,
    mem: &dyn MemorySource,
    thread: RemoteAddr,
) -> Result<String, ObjectError> {
    let name = objects.attribute(mem, thread, "_name")?;
    objects.read_str(mem, name, MAX_NAME_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::memory::SnapshotMemory;
    use crate::python::objects::TypeObjects;
    use crate::python::test_heap::{BASE, DICT_TYPE, Heap, INT_TYPE, MODULE_TYPE, STR_TYPE};
    use crate::python::version::PyVersion;

    /// A runtime whose one thread (ident 0x7f00_1234_5000) is a Thread named `name`; returns the
    /// memory, layout, runtime address and the thread.
    fn target_with_thread(
        name: &str,
        ascii: bool,
    ) -> (SnapshotMemory, Layout, RemoteAddr, ThreadRef) {
        let mut heap = Heap::shipped("3.9");
        let layout = heap.layout.clone();
        let ident = 0x7f00_1234_5000u64;
        let thread_type = heap.object(0, 512);
        let dictoffset = heap.field("type.tp_dictoffset");
        heap.put(thread_type + dictoffset, 16, 8);
        let name_key = heap.str("_name", true);
        let name_value = heap.str(name, ascii);
        let attributes = heap.dict(&[(name_key, name_value)]);
        let thread = heap.object(thread_type, 32);
        heap.put(thread + 16, attributes, 8);
        let ident_key = heap.int(ident);
        let active = heap.dict(&[(ident_key, thread)]);
        let active_key = heap.str("_active", true);
        let namespace = heap.dict(&[(active_key, active)]);
        let module = heap.object(MODULE_TYPE, 64);
        heap.put(module + heap.field("module.md_dict"), namespace, 8);
        let other = heap.str("sys", true);
        let threading = heap.str("threading", true);
        let modules = heap.dict(&[(other, namespace), (threading, module)]);
        let interp = heap.alloc(heap.field("interp.modules") + 8);
        heap.put(interp + heap.field("interp.modules"), modules, 8);
        let runtime = heap.alloc(4096);
        heap.put(runtime + heap.field("runtime.interpreters.head"), interp, 8);
        let tstate = heap.alloc(512);
        heap.put(tstate + heap.field("tstate.thread_id"), ident, 8);
        let mut mem = SnapshotMemory::new();
        mem.insert(RemoteAddr(BASE), heap.bytes);
        let thread = ThreadRef {
            tstate: RemoteAddr(tstate),
            tid: 42,
            their_tid: 42,
        };
        (mem, layout, RemoteAddr(runtime), thread)
    }

    fn namer(layout: &Layout) -> ThreadNamer {
        let types = TypeObjects {
            dict: Some(RemoteAddr(DICT_TYPE)),
            str: Some(RemoteAddr(STR_TYPE)),
            int: Some(RemoteAddr(INT_TYPE)),
            module: Some(RemoteAddr(MODULE_TYPE)),
            ..TypeObjects::default()
        };
        ThreadNamer::new(ObjectReader::new(
            layout,
            PyVersion::from_hex(0x0309_00f0),
            types,
        ))
    }

    #[test]
    fn follows_sys_modules_to_the_threads_name() {
        let (mem, layout, runtime, thread) = target_with_thread("prefetch-1", true);
        let mut namer = namer(&layout);
        let mut names = BTreeMap::new();
        namer.name_new_threads(&mem, &layout, runtime, &[thread], &mut names);
        assert_eq!(names.get(&42).map(String::as_str), Some("prefetch-1"));
        // Named once: later walks read nothing more for it.
        namer.name_new_threads(&mem, &layout, runtime, &[thread], &mut names);
        assert_eq!(
            namer.stats,
            NameStats {
                reads: 1,
                names: 1,
                torn: 0
            }
        );
    }

    #[test]
    fn a_torn_name_is_counted_and_never_shown() {
        // Flagged ASCII but holding a byte above 0x7f: what a string half rewritten looks like.
        let (mem, layout, runtime, thread) = target_with_thread("pr\u{e9}fetch", true);
        let mut namer = namer(&layout);
        let mut names = BTreeMap::from([(42, "python3.9".to_string())]);
        namer.name_threads(&mem, &layout, runtime, &[thread], &mut names);
        assert_eq!(names.get(&42).map(String::as_str), Some("python3.9"));
        assert_eq!(namer.stats.torn, 1);
    }

    #[test]
    fn a_thread_not_in_active_is_retried_then_left_alone() {
        let (mem, layout, runtime, mut thread) = target_with_thread("x", true);
        thread.tstate = RemoteAddr(thread.tstate.0 + 8); // its ident reads as another thread's
        let mut namer = namer(&layout);
        let mut names = BTreeMap::new();
        for _ in 0..ATTEMPTS_PER_THREAD + 5 {
            namer.name_new_threads(&mem, &layout, runtime, &[thread], &mut names);
        }
        assert!(names.is_empty());
        assert_eq!(namer.stats.reads, u64::from(ATTEMPTS_PER_THREAD));
    }
}
