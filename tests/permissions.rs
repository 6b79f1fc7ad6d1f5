//! Refusals for lack of access say which of the kernel's checks failed on this machine, with the
//! path that was refused and a fix that applies: another unprivileged user, root with
//! CAP_SYS_PTRACE dropped, and a capable root under a seccomp filter that refuses the memory read.
//! Yama is named only where the kernel has it.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use common::{Workload, interpreter};
use gilsample::error::exit::PERMISSION;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What every refusal says: the real path or what was read, never a placeholder, and Yama only
/// where this kernel has it and its scope is the reason.
fn assert_truthful(message: &str) {
    assert!(
        !message.contains("/proc/PID") && !message.contains("$(command -v"),
        "a placeholder path: {message}"
    );
    let yama_refuses = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .is_some_and(|scope| scope.trim() != "0");
    if !Path::new("/proc/sys/kernel/yama").exists() || !yama_refuses {
        assert!(!message.contains("ptrace_scope"), "{message}");
    }
    assert!(
        message.contains("Why: ") && message.contains("To fix: "),
        "{message}"
    );
}

fn gilsample_for(pid: u32) -> Vec<String> {
    [
        env!("CARGO_BIN_EXE_gilsample"),
        "--pid",
        &pid.to_string(),
        "--quiet",
        "-o",
        "/tmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// An unprivileged user of this machine's, made when missing (the tests run as root).
fn unprivileged_user() -> &'static str {
    let user = "gilsample-test";
    let exists = Command::new("id")
        .arg(user)
        .output()
        .unwrap()
        .status
        .success();
    if !exists {
        let made = Command::new("useradd")
            .args(["--system", "--no-create-home", user])
            .status()
            .unwrap();
        // Another test may have made it meanwhile.
        let there = Command::new("id")
            .arg(user)
            .output()
            .unwrap()
            .status
            .success();
        assert!(made.success() || there, "useradd needs root");
    }
    user
}

#[test]
fn another_unprivileged_user_is_told_whose_process_it_is() {
    let user = unprivileged_user();
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let out = Command::new("runuser")
        .args(["-u", user, "--"])
        .args(gilsample_for(workload.pid))
        .output()
        .unwrap();
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(PERMISSION), "{message}");
    assert!(
        message.contains(&format!("/proc/{}/maps", workload.pid)),
        "{message}"
    );
    assert!(message.contains("runs as user 0 (root)"), "{message}");
    let uid = Command::new("id")
        .args(["-u", user])
        .output()
        .unwrap()
        .stdout;
    let uid = String::from_utf8_lossy(&uid).trim().to_string();
    assert!(
        message.contains(&format!("gilsample as user {uid} ({user})")),
        "{message}"
    );
    assert!(message.contains("without CAP_SYS_PTRACE"), "{message}");
    assert!(message.contains("setcap cap_sys_ptrace"), "{message}");
    assert_truthful(&message);
    // Without --quiet, the refusal is all it says: no warning about how a sampler that never
    // started would have been scheduled (that user has no CAP_SYS_NICE for SCHED_FIFO either).
    let mut loud = gilsample_for(workload.pid);
    loud.retain(|a| a != "--quiet");
    let out = Command::new("runuser")
        .args(["-u", user, "--"])
        .args(loud)
        .output()
        .unwrap();
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(PERMISSION), "{message}");
    assert!(!message.contains("SCHED_FIFO"), "{message}");
    assert!(message.contains("Why: "), "{message}");
}

/// gilsample's refusal of `pid`, run as root with CAP_SYS_PTRACE dropped from its bounding set
/// (capsh --drop), as a container's default set leaves it out.
fn refused_without_cap_sys_ptrace(pid: u32) -> String {
    let out = Command::new("capsh")
        .args(["--drop=cap_sys_ptrace", "--", "-c"])
        .arg(format!("exec {}", gilsample_for(pid).join(" ")))
        .output()
        .unwrap();
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(PERMISSION), "{message}");
    message
}

#[test]
fn root_with_cap_sys_ptrace_dropped_is_not_told_to_run_as_root() {
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let message = refused_without_cap_sys_ptrace(workload.pid);
    assert!(
        message.contains("capabilities that gilsample lacks"),
        "{message}"
    );
    assert!(message.contains("CAP_SYS_PTRACE kept"), "{message}");
    assert!(!message.to_lowercase().contains("as root"), "{message}");
    assert_truthful(&message);
}

/// Root whose bounding set lacks CAP_SYS_PTRACE (a container's default), reading another user's
/// process: neither root again nor setcap can give the capability, so the fix is the container's.
#[test]
fn root_without_cap_sys_ptrace_in_its_bounding_set_is_given_the_containers_fix() {
    let user = unprivileged_user();
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, user]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // setpriv execs the Python itself (runuser would stay its parent), and Debian's Python is
    // where any user may run it.
    let mut python = Command::new("setpriv");
    python
        .arg(format!("--reuid={}", id("-u")))
        .arg(format!("--regid={}", id("-g")))
        .args(["--clear-groups", "--", "/usr/bin/python3.11"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/gil_workload.py"))
        .arg("sleeper");
    let workload = Workload::from_command(python);
    let message = refused_without_cap_sys_ptrace(workload.pid);
    assert!(
        message.contains("root's capabilities were limited"),
        "{message}"
    );
    assert!(message.contains("--cap-add SYS_PTRACE"), "{message}");
    assert!(!message.contains("sudo setcap"), "{message}");
    assert!(!message.contains("as root (sudo)"), "{message}");
    assert!(message.contains("run it as user "), "{message}");
    assert_truthful(&message);
}

/// A seccomp filter that makes process_vm_readv fail with EPERM, as a container runtime's default
/// filter does, installed in the child before it runs gilsample.
fn refuse_process_vm_readv(command: &mut Command) {
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xc000_00b7;
    const LOAD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let program = [
        op(LOAD_WORD, 0, 0, 4), // seccomp_data.arch
        op(JUMP_IF_EQUAL, 0, 3, AUDIT_ARCH),
        op(LOAD_WORD, 0, 0, 0), // seccomp_data.nr
        op(JUMP_IF_EQUAL, 0, 1, libc::SYS_process_vm_readv as u32),
        op(RETURN, 0, 0, ERRNO | libc::EPERM as u32),
        op(RETURN, 0, 0, ALLOW),
    ];
    // SAFETY: prctl with a filter that lives until exec copies it into the kernel; no allocation.
    unsafe {
        command.pre_exec(move || {
            let filter = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &filter as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn a_capable_root_under_a_seccomp_filter_is_told_of_the_filter() {
    let workload = Workload::start(&interpreter("3.12"), &["sleeper"]);
    let args = gilsample_for(workload.pid);
    let mut command = Command::new(&args[0]);
    command.args(&args[1..]);
    refuse_process_vm_readv(&mut command);
    let out = command.output().unwrap();
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(PERMISSION), "{message}");
    assert!(message.contains("process_vm_readv"), "{message}");
    assert!(message.contains("seccomp filter (Seccomp: 2"), "{message}");
    assert!(
        !message.to_lowercase().contains("as root (sudo)"),
        "{message}"
    );
    assert_truthful(&message);
}

/// The README's setcap recipe, against a Python whose files sit under a directory closed to the
/// user (a pyenv or conda in another user's home): a permission error naming the file and the
/// capability that opens it, and with that capability the process is read.
#[test]
fn a_python_in_a_closed_directory_is_a_permission_error_with_the_capability_that_opens_it() {
    use std::os::unix::fs::PermissionsExt;
    let user = unprivileged_user();
    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let python = closed.path().join("python3.11");
    std::fs::copy("/usr/bin/python3.11", &python).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/gil_workload.py");
    let mut command = Command::new(&python);
    command.arg(&script).arg("sleeper");
    let workload = Workload::from_command(command);
    let run_with = |caps: &str| {
        let (_dir, binary) = with_capabilities(caps);
        Command::new("runuser")
            .args(["-u", user, "--"])
            .arg(&binary)
            .args(["info", "--pid", &workload.pid.to_string()])
            .output()
            .unwrap()
    };
    let out = run_with("cap_sys_ptrace+ep");
    let message = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(PERMISSION),
        "{message}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(message.contains(&python.display().to_string()), "{message}");
    assert!(message.contains("cap_dac_read_search"), "{message}");
    assert!(
        message.len() < 1500,
        "one refusal, not one per file: {message}"
    );
    assert_truthful(&message);
    let out = run_with("cap_sys_ptrace,cap_dac_read_search+ep");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("3.11"));
}

/// A copy of gilsample with file capabilities `caps`, where an unprivileged user can run it, in a
/// directory removed when the first value is dropped.
fn with_capabilities(caps: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path();
    std::fs::set_permissions(open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mounted = nix::sys::statvfs::statvfs(open).unwrap();
    assert!(
        !mounted
            .flags()
            .contains(nix::sys::statvfs::FsFlags::ST_NOSUID),
        "{} is mounted nosuid: file capabilities are not honoured there (TMPDIR elsewhere)",
        open.display()
    );
    let binary = open.join(caps.replace([',', '+'], "-"));
    std::fs::copy(env!("CARGO_BIN_EXE_gilsample"), &binary).unwrap();
    let set = Command::new("setcap")
        .arg(caps)
        .arg(&binary)
        .status()
        .unwrap();
    assert!(set.success(), "setcap {caps}");
    (dir, binary)
}

/// Another user's process, read with CAP_SYS_PTRACE alone (the README's recipe before, root's
/// capabilities dropped to that one): its memory reads, each thread's owner-only syscall file does
/// not. Refused at attach with the file and the capability, not recorded as "held 0%"; with
/// CAP_DAC_READ_SEARCH as well it records.
#[test]
fn another_users_process_with_cap_sys_ptrace_alone_is_refused_naming_cap_dac_read_search() {
    let user = unprivileged_user();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/gil_workload.py");
    let mut command = Command::new("/usr/bin/python3.11");
    command.arg(&script).args(["contention", "--threads", "2"]);
    let workload = Workload::from_command(command);
    let out_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        out_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let record_with = |caps: &str| {
        let (_dir, binary) = with_capabilities(caps);
        Command::new("runuser")
            .args(["-u", user, "--"])
            .arg(&binary)
            .args([
                "--pid",
                &workload.pid.to_string(),
                "--duration",
                "0.3",
                "--force",
                "-o",
            ])
            .arg(out_dir.path())
            .output()
            .unwrap()
    };
    let out = record_with("cap_sys_ptrace+ep");
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(PERMISSION), "{message}");
    let file = format!("/proc/{0}/task/{0}/syscall", workload.pid);
    assert!(
        message.contains(&format!("cannot read {file}")),
        "{message}"
    );
    assert!(message.contains("without CAP_DAC_READ_SEARCH"), "{message}");
    assert!(message.contains("cap_dac_read_search"), "{message}");
    assert_truthful(&message);
    let out = record_with("cap_sys_ptrace,cap_dac_read_search+ep");
    assert!(out.status.success(), "{}", stderr(&out));
    let trace = common::Trace::load_single(out_dir.path());
    let holds = trace
        .events()
        .into_iter()
        .filter(|e| e.name == "hold_gil")
        .count();
    assert!(holds > 0, "{}", stderr(&out));
}

/// A device search by a user who cannot see other users' open files found none of theirs: it says
/// it may have missed them, and how to look (the README's setcap binary run by a user misses a
/// job run by root).
#[test]
fn a_device_search_that_could_not_look_into_other_users_processes_says_so() {
    let user = unprivileged_user();
    let (_dir, binary) = with_capabilities("cap_sys_nice+ep");
    let out = Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(&binary)
        .args(["--all-gpu", "-o", "/tmp"])
        .output()
        .unwrap();
    let message = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(gilsample::error::exit::NO_SUCH_PROCESS),
        "{message}"
    );
    assert!(
        message.contains("of other users could not be looked into")
            && message.contains("CAP_SYS_PTRACE"),
        "{message}"
    );
}
