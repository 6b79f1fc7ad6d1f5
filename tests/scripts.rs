//! What the repository's scripts promise, checked where it can be without their side effects:
//! scripts/test-aarch64.sh installs each tool it needs that is missing, the cross C compiler among
//! them, as it does qemu (apt-get is a stub here that only records what it was asked).

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;

/// An executable `name` in `dir` that runs `script`.
fn stub(dir: &Path, name: &str, script: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs `scripts/test-aarch64.sh --tools-only` with a PATH that has only `tools` (stubs: the script
/// only looks for them) besides what it runs itself, and an `apt-get` that records its arguments;
/// what it was asked.
fn tools_installed_with(tools: &[&str]) -> String {
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("apt-get.log");
    for tool in ["dirname", "date"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
        symlink(path, bin.path().join(tool)).unwrap();
    }
    for tool in tools {
        stub(bin.path(), tool, "exit 0");
    }
    stub(
        bin.path(),
        "apt-get",
        &format!("echo \"$*\" >> {}", log.display()),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test-aarch64.sh");
    let out = Command::new("/bin/bash")
        .arg(&script)
        .arg("--tools-only")
        .env("PATH", bin.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&log).unwrap_or_default()
}

#[test]
fn test_aarch64_installs_the_cross_compiler_when_it_is_missing() {
    let asked = tools_installed_with(&["qemu-system-aarch64", "cpio"]);
    assert!(asked.lines().any(|l| l == "update"), "{asked}");
    let install = asked
        .lines()
        .find(|l| l.starts_with("install"))
        .unwrap_or_else(|| panic!("nothing installed: {asked}"));
    assert!(
        install.contains("gcc-aarch64-linux-gnu") && install.contains("libc6-dev-arm64-cross"),
        "{install}"
    );
    assert!(
        !install.contains("qemu-system-arm"),
        "qemu is there: {install}"
    );
}

#[test]
fn test_aarch64_installs_nothing_when_every_tool_is_there() {
    let asked = tools_installed_with(&["qemu-system-aarch64", "cpio", "aarch64-linux-gnu-gcc"]);
    assert_eq!(asked, "");
}

/// `python3 -c CODE` in scripts/ (where the benchmarks import each other from); its stdout.
fn python_in_scripts(args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_benchmark_says_what_it_measures_and_how_to_run_it() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut seen = 0;
    for entry in std::fs::read_dir(&scripts).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !(name.starts_with("bench_") && name.ends_with(".py")) {
            continue;
        }
        seen += 1;
        let help = python_in_scripts(&[&name, "--help"]);
        assert!(help.starts_with("usage: "), "{name} --help:\n{help}");
        assert!(
            help.contains("\nUsage: scripts/"),
            "{name} shows no usage line:\n{help}"
        );
    }
    assert!(
        seen >= 6,
        "only {seen} benchmarks found in {}",
        scripts.display()
    );
}

#[test]
fn the_zoo_pairs_its_differences_within_each_round() {
    // Two rounds where --no-stacks kept 2 and 6 points more, the floor 10 and 0: medians of the
    // differences, not differences of medians; a gap whose observer was not run is left out.
    let out = python_in_scripts(&[
        "-c",
        "import bench_overhead as b; b.print_gaps({'queue': {\
         'gilsample': {'work_kept_per_round': [0.70, 0.80]},\
         'gilsample --no-stacks': {'work_kept_per_round': [0.72, 0.86]},\
         'wake only, no reads': {'work_kept_per_round': [0.80, 0.80]}}})",
    ]);
    assert!(
        out.contains("| queue | +4.0 (+2.0 to +6.0) | +5.0 (+0.0 to +10.0) |\n"),
        "{out}"
    );
    assert!(!out.contains("py-spy"), "{out}");
}
