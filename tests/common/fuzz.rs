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
