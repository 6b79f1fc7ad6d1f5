//! The thread-list walk over recorded memory: tid sources, read-ahead, broken lists.

use std::cell::Cell;

use super::*;
use crate::process::memory::SnapshotMemory;
use crate::python::layout::{Flavour, find_shipped};

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

/// Walks `mem` with a fresh walker, tids from glibc's `struct pthread` at the offset `runtime_39`
/// puts them.
fn walk_39(mem: &SnapshotMemory, layout: &Layout, runtime: RemoteAddr) -> Result<(), WalkError> {
    let mut out = Vec::new();
    ThreadWalker::default().walk(
        mem,
        layout,
        runtime,
        TidSource::PthreadTid { offset: 720 },
        &mut out,
    )
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
    let walked = walk_39(&mem, &layout, runtime);
    assert!(matches!(walked, Err(WalkError::Corrupt(why)) if why.contains("loops")));
}

#[test]
fn a_pointer_into_nowhere_is_a_fault() {
    let (mut mem, layout, runtime) = runtime_39(&[(0x30_0000, 0x40_0000)], &[(0x40_0000, 77)]);
    mem.put_u64(
        RemoteAddr(0x30_0000 + layout.required("tstate.next").offset),
        0x7777_0000,
    );
    let walked = walk_39(&mem, &layout, runtime);
    assert_eq!(walked, Err(WalkError::Read(ReadError::Fault)));
}

/// A snapshot that counts its reads: one per `read_into`, one per `read_each` (a system call
/// each in a live process).
struct Counted {
    mem: SnapshotMemory,
    reads: Cell<usize>,
}

impl MemorySource for Counted {
    fn read_into(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError> {
        self.reads.set(self.reads.get() + 1);
        self.mem.read_into(addr, buf)
    }

    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        self.reads.set(self.reads.get() + 1);
        self.mem.read_each(reads)
    }
}

const RUNTIME: u64 = 0x10_0000;
const INTERP: u64 = 0x20_0000;

/// A 3.11 runtime with one interpreter and thread states at 0x30_0000 + 0x1000 * i, listed in
/// `order` (indices), each with native id 100 + i.
fn runtime_311(mem: &mut SnapshotMemory, layout: &Layout, count: u64, order: &[u64]) {
    let field = |name: &str| layout.required(name).offset;
    mem.insert(RemoteAddr(RUNTIME), vec![0; 0x1000]);
    mem.insert(RemoteAddr(INTERP), vec![0; 0x1000]);
    mem.put_u64(
        RemoteAddr(RUNTIME + field("runtime.interpreters.head")),
        INTERP,
    );
    let state = |i: u64| 0x30_0000 + 0x1000 * i;
    for i in 0..count {
        mem.insert(RemoteAddr(state(i)), vec![0; 0x400]);
        mem.put_u64(
            RemoteAddr(state(i) + field("tstate.native_thread_id")),
            100 + i,
        );
    }
    let head = order.first().map(|&i| state(i)).unwrap_or(0);
    mem.put_u64(RemoteAddr(INTERP + field("interp.threads.head")), head);
    for (k, &i) in order.iter().enumerate() {
        let next = order.get(k + 1).map(|&j| state(j)).unwrap_or(0);
        mem.put_u64(RemoteAddr(state(i) + field("tstate.next")), next);
    }
}

fn walk(walker: &mut ThreadWalker, mem: &Counted, layout: &Layout) -> Vec<u32> {
    let mut out = Vec::new();
    walker
        .walk(
            mem,
            layout,
            RemoteAddr(RUNTIME),
            TidSource::NativeThreadId,
            &mut out,
        )
        .unwrap();
    out.iter().map(|t| t.tid).collect()
}

#[test]
fn a_walk_reads_ahead_along_the_last_and_still_follows_the_list_as_it_is() {
    let layout = find_shipped("3.11", Flavour::Default, "x86_64")
        .unwrap()
        .unwrap();
    let all: Vec<u64> = (0..200).collect();
    let mut counted = Counted {
        mem: SnapshotMemory::new(),
        reads: Cell::new(0),
    };
    runtime_311(&mut counted.mem, &layout, 201, &all);
    let mut walker = ThreadWalker::default();
    let expected: Vec<u32> = (100..300).collect();
    assert_eq!(walk(&mut walker, &counted, &layout), expected);
    let first = counted.reads.replace(0);
    assert_eq!(walk(&mut walker, &counted, &layout), expected);
    let again = counted.reads.replace(0);
    // The interpreter list and heads (3 reads), then 200 states 64 to a read-ahead.
    assert!(
        first > 200,
        "the first walk read one state at a time: {first}"
    );
    assert!(again <= 3 + 4, "the second read ahead: {again} reads");

    // A thread starts (its state goes to the head) and one in the middle exits: the walk finds
    // the list as it is now, not as it was.
    let mut order = vec![200];
    order.extend((0..200).filter(|&i| i != 77));
    runtime_311(&mut counted.mem, &layout, 201, &order);
    let now: Vec<u32> = order.iter().map(|&i| 100 + i as u32).collect();
    assert_eq!(walk(&mut walker, &counted, &layout), now);
    assert_eq!(walk(&mut walker, &counted, &layout), now);
}

#[test]
fn a_state_freed_since_the_last_walk_is_read_past_or_reported() {
    let layout = find_shipped("3.11", Flavour::Default, "x86_64")
        .unwrap()
        .unwrap();
    let mut counted = Counted {
        mem: SnapshotMemory::new(),
        reads: Cell::new(0),
    };
    runtime_311(&mut counted.mem, &layout, 3, &[0, 1, 2]);
    let mut walker = ThreadWalker::default();
    assert_eq!(walk(&mut walker, &counted, &layout), vec![100, 101, 102]);
    // State 1 is unmapped and unlinked: the read-ahead stops there, the list goes on without it.
    let mut mem = SnapshotMemory::new();
    runtime_311(&mut mem, &layout, 3, &[0, 2]);
    let mut without = SnapshotMemory::new();
    for i in [0u64, 2] {
        let at = RemoteAddr(0x30_0000 + 0x1000 * i);
        let mut bytes = vec![0u8; 0x400];
        mem.read_into(at, &mut bytes).unwrap();
        without.insert(at, bytes);
    }
    for at in [RUNTIME, INTERP] {
        let mut bytes = vec![0u8; 0x1000];
        mem.read_into(RemoteAddr(at), &mut bytes).unwrap();
        without.insert(RemoteAddr(at), bytes);
    }
    counted.mem = without;
    assert_eq!(walk(&mut walker, &counted, &layout), vec![100, 102]);
    // The list still links to the freed state: that is the error a walk reports.
    let field = layout.required("tstate.next").offset;
    counted
        .mem
        .put_u64(RemoteAddr(0x30_0000 + field), 0x30_1000);
    let mut out = Vec::new();
    let walked = walker.walk(
        &counted,
        &layout,
        RemoteAddr(RUNTIME),
        TidSource::NativeThreadId,
        &mut out,
    );
    assert_eq!(walked, Err(WalkError::Read(ReadError::Fault)));
}
