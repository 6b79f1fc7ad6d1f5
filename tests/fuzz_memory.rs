//! Property-based fuzzing of what reads the target's memory, which may hold anything: the runtime
//! walk, the thread list's walk (reading ahead along the last one), thread names through the object
//! reader, stacks and line tables. Each must end within its bounds with an answer or an error, never
//! a panic or an endless loop (the file readers: tests/fuzz.rs).
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs these longer); failures found are persisted in
//! fixtures/fuzz-corpus/ so they are replayed on every run.

mod common;

use std::collections::BTreeMap;

use common::fuzz::{fuzz_config as config, persisted_memories};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng};

use gilsample::addr::RemoteAddr;
use gilsample::process::memory::{MemorySource, SnapshotMemory};
use gilsample::python::layout::{Flavour, Layout, find_shipped};
use gilsample::python::linetable::LineTableFormat;
use gilsample::python::names::{MAX_NAME_CHARS, ThreadNamer};
use gilsample::python::objects::{MAX_DICT_ENTRIES, ObjectReader, TypeObjects};
use gilsample::python::runtime::{ThreadRef, TidSource, find_gil, read_interpreters};
use gilsample::python::stacks::{RecentTops, SHOWN_FRAMES, StackReader};
use gilsample::python::thread_list::{ThreadWalker, find_tid_source};
use gilsample::python::version::PyVersion;

/// Memory where the runtime, a few interpreters and thread states could be, filled by the fuzzer:
/// 4 regions of 2,048 words. Pointer-sized values are drawn mostly from addresses inside those
/// regions, so walks go somewhere: 3 in 5 such an address, 1 in 5 any value, 1 in 5 zero.
///
/// The words come from a seed proptest draws, not from a strategy each: 8,192 value trees a case
/// spent almost all of the fuzzer's time in proptest's own code (5 ms a case; CI runs 10,000). A
/// failure is shrunk as far as its seed goes, and the memory is printed with it.
fn memory_strategy() -> impl Strategy<Value = SnapshotMemory> {
    any::<[u8; 32]>().prop_map(memory_from_seed)
}

fn memory_from_seed(seed: [u8; 32]) -> SnapshotMemory {
    const BASE: u64 = 0x10_0000;
    const REGION: u64 = 0x4000;
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
    let mut mem = SnapshotMemory::new();
    for r in 0..4 {
        let mut bytes = Vec::with_capacity(REGION as usize);
        for _ in 0..REGION / 8 {
            let word = match rng.next_u64() % 5 {
                0..=2 => {
                    BASE + (rng.next_u64() % 4) * 0x10_0000 + (rng.next_u64() % (REGION / 8)) * 8
                }
                3 => rng.next_u64(),
                _ => 0,
            };
            bytes.extend_from_slice(&word.to_ne_bytes());
        }
        mem.insert(RemoteAddr(BASE + r * 0x10_0000), bytes);
    }
    mem
}

proptest! {
    #![proptest_config(config("runtime-walk"))]
    #[test]
    fn runtime_walk_over_arbitrary_memory_terminates_without_panic(mem in memory_strategy()) {
        runtime_walk_ends(&mem)?;
    }
}

/// The runtime's and the thread list's walks over `mem` end, within their bounds.
fn runtime_walk_ends(mem: &SnapshotMemory) -> Result<(), TestCaseError> {
    let runtime = RemoteAddr(0x10_0000);
    for key in ["3.9", "3.12", "3.14"] {
        let layout = find_shipped(key, Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let _ = read_interpreters(mem, &layout, runtime);
        let _ = find_gil(mem, &layout, runtime);
        let tids = std::collections::HashSet::from([1u32, 2, 3]);
        let _ = find_tid_source(mem, &layout, runtime, &tids);
        let mut out = Vec::new();
        for source in [
            TidSource::NativeThreadId,
            TidSource::PthreadTid { offset: 720 },
        ] {
            let _ = ThreadWalker::default().walk(mem, &layout, runtime, source, &mut out);
            prop_assert!(out.len() <= gilsample::python::runtime::MAX_THREADS);
        }
    }
    Ok(())
}

#[test]
fn the_memories_of_failures_found_before_still_pass() {
    // Their kept seeds were drawn by an earlier memory strategy: the shrunk memories proptest
    // printed beside them are what replays those cases now.
    let walks = persisted_memories("runtime-walk");
    let names = persisted_memories("thread-names");
    assert!(
        !walks.is_empty() && !names.is_empty(),
        "fixtures/fuzz-corpus/ lost its memories"
    );
    // Each as the strategy of the time drew it: 4 regions of 16 KiB, 1 MiB apart.
    for mem in walks.iter().chain(&names) {
        for r in 0..4u64 {
            let mut last = [0u8; 8];
            let end = 0x10_0000 * (r + 1) + 0x4000 - 8;
            assert!(mem.read_into(RemoteAddr(end), &mut last).is_ok());
            assert!(mem.read_into(RemoteAddr(end + 8), &mut last).is_err());
        }
    }
    for mem in &walks {
        runtime_walk_ends(mem).unwrap();
    }
    for mem in &names {
        thread_names_end(mem).unwrap();
    }
}

const LIST_RUNTIME: u64 = 0x10_0000;
const LIST_INTERP: u64 = 0x20_0000;

/// The address of thread state `i` in `listed_memory`.
fn state_at(i: u64) -> u64 {
    0x30_0000 + 0x1000 * i
}

/// One interpreter whose thread list links `states` thread states in `order` (the rest are mapped
/// but unlinked), state i with native id `ids[i]`; then `changes` (state, word, value) written over
/// the states, values mostly other states' addresses: lists that are cut, joined, looped, or lead
/// outside every mapping.
fn listed_memory(
    layout: &Layout,
    states: u64,
    order: &[u64],
    ids: &[u64],
    changes: &[(u64, u64, u64)],
) -> SnapshotMemory {
    let field = |name: &str| layout.required(name).offset;
    let mut mem = SnapshotMemory::new();
    mem.insert(RemoteAddr(LIST_RUNTIME), vec![0; 0x10000]);
    mem.insert(RemoteAddr(LIST_INTERP), vec![0; 0x10000]);
    mem.put_u64(
        RemoteAddr(LIST_RUNTIME + field("runtime.interpreters.head")),
        LIST_INTERP,
    );
    for i in 0..states {
        mem.insert(RemoteAddr(state_at(i)), vec![0; 0x400]);
        mem.put_u64(
            RemoteAddr(state_at(i) + field("tstate.native_thread_id")),
            ids[i as usize],
        );
    }
    let head = order.first().map(|&i| state_at(i)).unwrap_or(0);
    mem.put_u64(RemoteAddr(LIST_INTERP + field("interp.threads.head")), head);
    for (k, &i) in order.iter().enumerate() {
        let next = order.get(k + 1).map(|&j| state_at(j)).unwrap_or(0);
        mem.put_u64(RemoteAddr(state_at(i) + field("tstate.next")), next);
    }
    for &(i, word, value) in changes {
        mem.put_u64(RemoteAddr(state_at(i % states) + (word % 0x80) * 8), value);
    }
    mem
}

/// A list of up to 80 states, two orders of them (a walk's, then the next walk's), ids, and changes.
#[allow(clippy::type_complexity)]
fn two_lists_strategy()
-> impl Strategy<Value = (u64, Vec<u64>, Vec<u64>, Vec<u64>, Vec<(u64, u64, u64)>)> {
    (1u64..80).prop_flat_map(|n| {
        let order = Just((0..n).collect::<Vec<u64>>()).prop_shuffle();
        let sub = (order.clone(), 0..=n as usize).prop_map(|(o, k)| o[..k].to_vec());
        let value = prop_oneof![
            4 => (0..n).prop_map(state_at),
            1 => Just(0u64),
            1 => any::<u64>(),
        ];
        let tweaks = prop::collection::vec((0..n, 0u64..0x80, value), 0..4);
        (
            Just(n),
            sub.clone(),
            sub,
            prop::collection::vec(1u64..1 << 32, n as usize),
            tweaks,
        )
    })
}

proptest! {
    #![proptest_config(config("walk-read-ahead"))]
    #[test]
    fn a_walk_reading_ahead_along_the_last_finds_what_a_fresh_walk_finds(
        (n, before, after, ids, changes) in two_lists_strategy(),
    ) {
        // The last walk's list only says where to read ahead: after the list changed (threads
        // started and exited, in any order, links cut or looped), the walk that reads ahead along
        // it gives what a walk with nothing to go on gives, errors included.
        let runtime = RemoteAddr(LIST_RUNTIME);
        for key in ["3.11", "3.12", "3.14"] {
            let layout = find_shipped(key, Flavour::Default, "x86_64").unwrap().unwrap();
            let source = TidSource::NativeThreadId;
            let mut walker = ThreadWalker::default();
            let first = listed_memory(&layout, n, &before, &ids, &[]);
            let mut out = Vec::new();
            prop_assert!(walker.walk(&first, &layout, runtime, source, &mut out).is_ok());
            prop_assert_eq!(out.len(), before.len());
            let changed = listed_memory(&layout, n, &after, &ids, &changes);
            let (mut ahead, mut fresh) = (Vec::new(), Vec::new());
            let read_ahead = walker.walk(&changed, &layout, runtime, source, &mut ahead);
            let walked = ThreadWalker::default().walk(&changed, &layout, runtime, source, &mut fresh);
            prop_assert_eq!(read_ahead, walked);
            prop_assert_eq!(ahead, fresh);
        }
    }
}

proptest! {
    #![proptest_config(config("thread-names"))]
    #[test]
    fn thread_names_over_arbitrary_memory_terminate_without_panic(mem in memory_strategy()) {
        thread_names_end(&mem)?;
    }
}

/// Thread names and every object reader entry point over `mem` end, within their bounds.
fn thread_names_end(mem: &SnapshotMemory) -> Result<(), TestCaseError> {
    // The same memory, read as `sys.modules` → threading → `_active` → each Thread's `_name`,
    // with every dict layout (sized tables, log2 tables, managed dicts, inline values).
    let runtime = RemoteAddr(0x10_0000);
    let threads: Vec<ThreadRef> = (0..4)
        .map(|i| ThreadRef {
            tstate: RemoteAddr(0x20_0000 + i * 0x100),
            tid: i as u32 + 1,
            their_tid: i as u32 + 1,
        })
        .collect();
    for (key, hex) in [
        ("3.9", 0x0309_00f0),
        ("3.11", 0x030b_00f0),
        ("3.12", 0x030c_00f0),
        ("3.14", 0x030e_00f0),
    ] {
        let layout = find_shipped(key, Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let version = PyVersion::from_hex(hex);
        let types = TypeObjects::default();
        let reader = ObjectReader::new(&layout, version, types).unwrap();
        let mut names = BTreeMap::new();
        let mut namer = ThreadNamer::new(Ok(reader.clone()));
        namer.name_new_threads(mem, &layout, runtime, &threads, &mut names);
        namer.name_threads(mem, &layout, runtime, &threads, &mut names);
        for name in names.values() {
            prop_assert!(name.chars().count() as u64 <= MAX_NAME_CHARS);
        }
        // Every object reader entry point, at addresses inside the fuzzed regions.
        for at in [0x10_0000u64, 0x20_0000, 0x30_0008, 0x40_0010] {
            let at = RemoteAddr(at);
            if let Ok(items) = reader.dict_items(mem, at, MAX_DICT_ENTRIES) {
                prop_assert!(items.len() as u64 <= MAX_DICT_ENTRIES);
            }
            let _ = reader.read_str(mem, at, MAX_NAME_CHARS);
            let _ = reader.read_u64_int(mem, at);
            let _ = reader.attribute(mem, at, "_name");
            let _ = reader.module_dict(mem, at);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config("stacks"))]
    #[test]
    fn stacks_over_arbitrary_memory_terminate_without_panic(mem in memory_strategy()) {
        // Frame lists that loop, code objects of any content, line tables of any bytes: each
        // version's walk ends, within its bounds.
        for (key, hex) in [("3.9", 0x0309_00f0), ("3.10", 0x030a_00f0), ("3.11", 0x030b_00f0), ("3.12", 0x030c_00f0), ("3.14", 0x030e_00f0)] {
            let layout = find_shipped(key, Flavour::Default, "x86_64").unwrap().unwrap();
            let version = PyVersion::from_hex(hex);
            let objects = ObjectReader::new(&layout, version, TypeObjects::default()).unwrap();
            let mut reader = StackReader::new(&layout, version, objects).unwrap();
            // Guesses carried from one thread state to the next: whatever they hold, the read
            // near them answers as the pointers do.
            let mut recent = RecentTops::default();
            for tstate in [0x10_0000u64, 0x20_0000, 0x30_0100, 0x40_0200] {
                let _ = reader.innermost(&mem, RemoteAddr(tstate));
                let plain = reader.innermost_watched(&mem, RemoteAddr(tstate)).ok();
                // Twice: the second read guesses where the first found the frame.
                for _ in 0..2 {
                    let near = reader.innermost_watched_near(&mem, RemoteAddr(tstate), &mut recent);
                    prop_assert_eq!(near.ok(), plain);
                }
                if let Ok(stack) = reader.read_stack(&mem, RemoteAddr(tstate)) {
                    prop_assert!(stack.len() <= SHOWN_FRAMES + 1);
                }
            }
        }
    }

    #[test]
    fn line_tables_of_any_bytes_decode_without_panic(
        table in prop::collection::vec(any::<u8>(), 0..512),
        first in any::<i32>(),
        offset in any::<u64>(),
    ) {
        for format in [LineTableFormat::Lnotab, LineTableFormat::Pairs, LineTableFormat::Locations] {
            let _ = format.line(&table, first, offset);
        }
    }
}
