//! Every shipped layout file must match what gilsample's DWARF reader says about the build it came
//! from; a missing build fails the suite (pyenv builds, scripts/make-sid-root.sh,
//! scripts/fetch-arm64-builds.sh).

mod common;

use std::path::Path;

use common::{gilsample, succeeded};

#[test]
fn shipped_layouts_match_their_builds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("python-layouts");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        // opcodes/: not layouts (`back_jumps_match_their_interpreters`).
        if !entry.path().is_file() {
            continue;
        }
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
        let out = succeeded(&mut cmd);
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

/// The loop-jump opcodes shipped for 3.10, 3.11 and 3.12 (python-layouts/opcodes/back-jumps.json)
/// are what each such interpreter of the suite says its opcodes are, pyenv's and Debian's.
#[test]
fn back_jumps_match_their_interpreters() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("python-layouts/opcodes/back-jumps.json");
    let shipped: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/generate-opcodes.py");
    let others = ["3.10", "3.12"].map(|label| common::interpreter(label).command);
    // Each version's jumps, and the key that must list some: 3.10 jumps to an instruction, 3.11
    // and 3.12 back by their argument.
    let jumps = [
        ("3.10", "absolute_jumps"),
        ("3.11", "back_jumps"),
        ("3.12", "back_jumps"),
    ];
    for label in ["3.11", "debian-3.11"] {
        let py311 = common::interpreter(label).command;
        let out = succeeded(
            std::process::Command::new("python3")
                .arg(&script)
                .arg("--print")
                .args(py311.iter().chain(others.iter().flatten())),
        );
        let fresh: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for (version, listed) in jumps {
            for key in ["back_jumps", "absolute_jumps", "extended_args"] {
                assert_eq!(
                    fresh[version][key],
                    shipped[version][key],
                    "{label}: {version}'s {key} disagree with {}; rerun scripts/generate-opcodes.py",
                    path.display()
                );
            }
            for key in [listed, "extended_args"] {
                assert!(
                    fresh[version][key]
                        .as_array()
                        .is_some_and(|a| !a.is_empty()),
                    "{version} lists no {key}"
                );
            }
        }
    }
}
