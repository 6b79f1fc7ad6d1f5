//! What the property tests (tests/fuzz*.rs) share.

use proptest::test_runner::{Config, FileFailurePersistence};

/// proptest's configuration for the test `name`: failures it finds are kept in
/// fixtures/fuzz-corpus/`name`.txt and replayed first on every run.
pub fn fuzz_config(name: &str) -> Config {
    Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            format!(
                "{}/fixtures/fuzz-corpus/{name}.txt",
                env!("CARGO_MANIFEST_DIR")
            )
            .into_boxed_str(),
        )))),
        ..Config::default()
    }
}

/// The memories of the failures kept in fixtures/fuzz-corpus/`name`.txt, as proptest printed them
/// shrunk ("shrinks to mem = SnapshotMemory { regions: {ADDR: [BYTES], ...} }"). A kept seed only
/// replays the case while the strategy that drew it is unchanged; the shrunk memory replays it
/// whatever the strategy became.
pub fn persisted_memories(name: &str) -> Vec<gilsample::process::memory::SnapshotMemory> {
    let path = format!(
        "{}/fixtures/fuzz-corpus/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut memories = Vec::new();
    for line in text.lines() {
        let Some((_, regions)) = line.split_once("mem = SnapshotMemory { regions: {") else {
            continue;
        };
        let mut mem = gilsample::process::memory::SnapshotMemory::new();
        let mut rest = regions;
        while let Some((addr, after)) = rest.split_once(": [") {
            let addr = addr.trim_start_matches([',', ' ']);
            let (bytes, after) = after
                .split_once(']')
                .unwrap_or_else(|| panic!("{path}: a region without its closing bracket"));
            let bytes: Vec<u8> = bytes
                .split(", ")
                .filter(|b| !b.is_empty())
                .map(|b| {
                    b.parse()
                        .unwrap_or_else(|e| panic!("{path}: byte {b:?}: {e}"))
                })
                .collect();
            let addr: u64 = addr
                .parse()
                .unwrap_or_else(|e| panic!("{path}: address {addr:?}: {e}"));
            mem.insert(gilsample::addr::RemoteAddr(addr), bytes);
            rest = after;
        }
        memories.push(mem);
    }
    memories
}
