//! Every shipped layout file must match what gilsample's DWARF reader says about the build it came
//! from; a missing build fails the suite (pyenv builds, scripts/make-sid-root.sh,
//! scripts/fetch-arm64-builds.sh).

mod common;

use std::path::Path;

use common::gilsample;

#[test]
fn shipped_layouts_match_their_builds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("python-layouts");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let shipped: serde_json::Value = serde_json::from_str(&text).unwrap();
        let from = shipped["generated_from"].as_str().unwrap();
        assert!(
            Path::new(from).exists(),
            "{}: the build it came from, {from}, is missing",
            entry.path().display()
        );
        let version = shipped["generated_from_version"].as_str().unwrap();
        let mut cmd = gilsample();
        cmd.args(["layout", "--from", from, "--python-version", version]);
        if let Some(binary) = shipped["binary"].as_str() {
            cmd.args(["--binary", binary]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let fresh: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            fresh,
            shipped,
            "{} disagrees with {from}; rerun scripts/generate-layouts.sh",
            entry.path().display()
        );
        checked += 1;
    }
    assert!(
        checked >= 20,
        "only {checked} layout files were checked against their builds"
    );
}
