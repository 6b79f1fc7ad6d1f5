//! Every shipped layout file must match what gilsample's DWARF reader says about the build it came
//! from, wherever that build is present.

mod common;

use std::path::Path;

use common::gilsample;

#[test]
fn shipped_layouts_match_their_builds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("python-layouts");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let shipped: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
        let from = shipped["generated_from"].as_str().unwrap();
        if !Path::new(from).exists() {
            eprintln!("{}: build {from} not present here", entry.path().display());
            continue;
        }
        let out = gilsample()
            .args([
                "layout",
                "--from",
                from,
                "--python-version",
                shipped["generated_from_version"].as_str().unwrap(),
            ])
            .output()
            .unwrap();
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
    // The pyenv builds the files come from are part of the expected test environment.
    assert!(
        checked >= 7,
        "only {checked} layout files could be checked against their builds"
    );
}
