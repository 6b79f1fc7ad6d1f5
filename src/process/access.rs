//! Why the kernel refused gilsample a read of a process, as this machine has it: the checks of its
//! ptrace "attach" access mode, each looked up where the kernel shows it, so that a refusal names the
//! check that failed and a fix that applies here, not a list of every fix there is.
//!
//! The kernel lets a process read another's memory and per-thread /proc files when (in order):
//! both have the same user and group ids, or the reader has CAP_SYS_PTRACE in the target's user
//! namespace; the target is dumpable, or the reader has the capability; the target's permitted
//! capabilities are among the reader's, or the reader has it; then Yama, where it is built in
//! (`kernel.yama.ptrace_scope`); then a security module (AppArmor, SELinux). A seccomp filter on the
//! reader can refuse the system call itself. Each of those is read from /proc and /sys below.

use std::fmt::Write;
use std::path::Path;

use crate::error::Error;

/// CAP_SYS_PTRACE's bit in the capability masks of /proc/PID/status.
const CAP_SYS_PTRACE: u32 = 19;
/// CAP_DAC_OVERRIDE's and CAP_DAC_READ_SEARCH's bits: either lets a process read another user's
/// files, such as the owner-only /proc/PID/task/TID/syscall.
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
/// CAP_SYS_NICE's bit in the same masks (real-time scheduling).
const CAP_SYS_NICE: u32 = 23;
const YAMA_SCOPE: &str = "/proc/sys/kernel/yama/ptrace_scope";
/// The longest parent chain followed when looking for gilsample among a target's ancestors.
const MAX_ANCESTORS: usize = 4096;

/// The identity and confinement of a process, from its /proc/PID/status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Real, effective, saved and file-system user ids.
    pub uids: [u32; 4],
    /// Real, effective, saved and file-system group ids.
    pub gids: [u32; 4],
    /// `CapPrm:`, the permitted capability set, a bit per capability.
    pub permitted: u64,
    /// `CapEff:`, the effective capability set.
    pub effective: u64,
    /// `CapBnd:`, the bounding set: what the process (and what it runs, setcap or not) may ever
    /// have. A container's default set leaves CAP_SYS_PTRACE out.
    pub bounding: u64,
    /// `Seccomp:` 0 none, 1 strict, 2 filter.
    pub seccomp: u32,
    /// `PPid:`, the parent's pid.
    pub parent: u32,
}

impl Credentials {
    /// The credentials a `/proc/PID/status` text states; absent lines read as 0.
    pub fn parse(status: &str) -> Credentials {
        let mut c = Credentials::default();
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let ids = || -> [u32; 4] {
                let mut out = [0; 4];
                for (slot, v) in out.iter_mut().zip(value.split_whitespace()) {
                    *slot = v.parse().unwrap_or(0);
                }
                out
            };
            let mask = || u64::from_str_radix(value.trim(), 16).unwrap_or(0);
            match key {
                "Uid" => c.uids = ids(),
                "Gid" => c.gids = ids(),
                "CapPrm" => c.permitted = mask(),
                "CapEff" => c.effective = mask(),
                "CapBnd" => c.bounding = mask(),
                "Seccomp" => c.seccomp = value.trim().parse().unwrap_or(0),
                "PPid" => c.parent = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        c
    }

    fn read(pid: &str) -> Option<Credentials> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .map(|s| Credentials::parse(&s))
    }

    /// gilsample's own, where its status reads.
    pub fn of_this_process() -> Option<Credentials> {
        Credentials::read("self")
    }

    fn has_ptrace_capability(&self) -> bool {
        self.effective & (1 << CAP_SYS_PTRACE) != 0
    }

    /// Whether it may read files it does not own (CAP_DAC_READ_SEARCH or CAP_DAC_OVERRIDE).
    fn reads_others_files(&self) -> bool {
        self.effective & (1 << CAP_DAC_READ_SEARCH | 1 << CAP_DAC_OVERRIDE) != 0
    }

    /// Whether CAP_SYS_PTRACE is in the bounding set: running as root or a setcap binary gives it.
    fn may_gain_ptrace(&self) -> bool {
        self.bounding & (1 << CAP_SYS_PTRACE) != 0
    }

    fn is_root(&self) -> bool {
        self.uids[0] == 0
    }

    /// Whether CAP_SYS_NICE is effective (root has it): real-time scheduling is not a question of
    /// permission then.
    pub fn has_nice_capability(&self) -> bool {
        self.effective & (1 << CAP_SYS_NICE) != 0
    }
}

/// What was found about the reader (gilsample), the target and the machine.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// gilsample's own credentials.
    pub reader: Credentials,
    /// The target's, where its status could be read.
    pub target: Option<Credentials>,
    /// The target's pid in gilsample's PID namespace.
    pub target_pid: u32,
    /// The owner of /proc/PID: root for a process that is not dumpable.
    pub target_proc_owner: Option<u32>,
    /// `kernel.yama.ptrace_scope`; `None` where the kernel has no Yama.
    pub yama_scope: Option<u32>,
    /// gilsample is among the target's ancestors (Yama scope 1 allows those).
    pub reader_is_ancestor: bool,
    /// gilsample's user namespace is not the machine's first one (`/proc/self/uid_map`).
    pub reader_in_user_namespace: Option<String>,
    /// The security modules the kernel runs (`/sys/kernel/security/lsm`), when readable.
    pub security_modules: Option<String>,
    /// gilsample's own security label (AppArmor profile, SELinux context), when confined.
    pub reader_label: Option<String>,
    /// The path of gilsample's own binary, for the `setcap` fix.
    pub binary: String,
}

/// gilsample's `/proc/self/uid_map` on one line, where it runs in a user namespace other than the
/// machine's first (a rootless container, `unshare --user`): its capabilities count only there.
pub fn user_namespace_map() -> Option<String> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let fields: Vec<&str> = map.split_whitespace().collect();
    (fields != ["0", "0", "4294967295"]).then(|| fields.join(" "))
}

impl Facts {
    /// Looks everything up for a refused read of `pid`.
    pub fn gather(pid: u32) -> Facts {
        let reader = Credentials::of_this_process().unwrap_or_default();
        let target = Credentials::read(&pid.to_string());
        Facts {
            target_proc_owner: std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| std::os::unix::fs::MetadataExt::uid(&m)),
            yama_scope: std::fs::read_to_string(YAMA_SCOPE)
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            reader_is_ancestor: is_ancestor(std::process::id(), pid),
            reader_in_user_namespace: user_namespace_map(),
            security_modules: std::fs::read_to_string("/sys/kernel/security/lsm")
                .ok()
                .map(|s| s.trim().to_string()),
            reader_label: own_label(),
            binary: crate::error::own_binary(),
            reader,
            target,
            target_pid: pid,
        }
    }
}

/// Whether `ancestor` is `pid`'s parent, grandparent, ...
fn is_ancestor(ancestor: u32, pid: u32) -> bool {
    let mut current = pid;
    for _ in 0..MAX_ANCESTORS {
        let Some(parent) = Credentials::read(&current.to_string()).map(|c| c.parent) else {
            return false;
        };
        if parent == ancestor {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        current = parent;
    }
    false
}

/// gilsample's AppArmor profile or SELinux context, when it is confined by one.
fn own_label() -> Option<String> {
    [
        "/proc/self/attr/apparmor/current",
        "/proc/self/attr/current",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(Path::new(path)).ok())
    .map(|s| s.trim_end_matches(['\0', '\n']).trim().to_string())
    .filter(|label| !label.is_empty() && label != "unconfined" && !label.contains("unconfined_t"))
}

fn user(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| {
            passwd.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                (fields.nth(1)? == uid.to_string()).then(|| name.to_string())
            })
        });
    match name {
        Some(name) => format!("user {uid} ({name})"),
        None => format!("user {uid}"),
    }
}

/// The fix where the bounding set lacks CAP_SYS_PTRACE: neither root nor setcap can give it then.
const CONTAINER_FIX: &str = "run gilsample where CAP_SYS_PTRACE may be had: its bounding set \
     lacks it, so neither root nor setcap can give it (a container: --cap-add SYS_PTRACE for \
     Docker, securityContext.capabilities.add: [\"SYS_PTRACE\"] for Kubernetes)";

/// Why the read was refused and what to do, in sentences: the checks that fail on this machine,
/// first the ones the kernel makes first.
pub fn explain(facts: &Facts) -> String {
    let setcap = if facts.reader.may_gain_ptrace() {
        format!(
            "give gilsample the capabilities (sudo setcap \
             cap_sys_ptrace,cap_dac_read_search,cap_sys_nice+ep {})",
            facts.binary
        )
    } else {
        CONTAINER_FIX.to_string()
    };
    let mut reasons = Reasons::default();
    if let Some(target) = &facts.target {
        explain_ids_and_capabilities(facts, target, &setcap, &mut reasons);
    }
    explain_yama(facts, &setcap, &mut reasons);
    explain_user_namespace(facts, &mut reasons);
    if reasons.why.is_empty() {
        explain_what_no_check_sees(facts, &mut reasons);
    }
    let Reasons { why, mut fixes } = reasons;
    let mut out = String::new();
    let _ = write!(out, "Why: {}.", why.join("; and "));
    fixes.dedup();
    let _ = write!(out, " To fix: {}.", fixes.join("; or "));
    out.push_str(" gilsample never stops the target, and needs no BPF privileges.");
    out
}

/// What refuses the read, and what would let it through.
#[derive(Default)]
struct Reasons {
    why: Vec<String>,
    fixes: Vec<String>,
}

/// Another user's process, a process that is not dumpable, or one with capabilities the reader lacks.
fn explain_ids_and_capabilities(
    facts: &Facts,
    target: &Credentials,
    setcap: &str,
    reasons: &mut Reasons,
) {
    let pid = facts.target_pid;
    let me = &facts.reader;
    let capable = me.has_ptrace_capability();
    let same_ids = target.uids[..3].iter().all(|&u| u == me.uids[0])
        && target.gids[..3].iter().all(|&g| g == me.gids[0]);
    // Root without the capability had it taken away: running as root again gives nothing back.
    let as_root =
        (!me.is_root() && me.may_gain_ptrace()).then(|| "run gilsample as root (sudo)".to_string());
    if !same_ids && !capable {
        reasons.why.push(format!(
            "process {pid} runs as {}, gilsample as {} without CAP_SYS_PTRACE{}: another user's \
             (or group's) process needs that capability",
            user(target.uids[1]),
            user(me.uids[0]),
            if me.is_root() {
                " (root's capabilities were limited: a container's default set, capsh --drop, \
                 setpriv)"
            } else {
                ""
            }
        ));
        reasons.fixes.extend(as_root.clone());
        if target.uids[1] != 0 {
            reasons
                .fixes
                .push(format!("run it as {}", user(target.uids[1])));
        }
        reasons.fixes.push(setcap.to_string());
    } else if capable && target.uids[1] != me.uids[3] && !me.reads_others_files() {
        // The ptrace check passes; the file's own mode does not.
        reasons.why.push(format!(
            "process {pid} runs as {}, gilsample as {} with CAP_SYS_PTRACE but without \
             CAP_DAC_READ_SEARCH: each thread's kernel state (/proc/{pid}/task/TID/syscall) may \
             be read by its owner alone, so another user's threads need that capability as well \
             (their memory needs only CAP_SYS_PTRACE)",
            user(target.uids[1]),
            user(me.uids[0]),
        ));
        reasons.fixes.extend(as_root.clone());
        if target.uids[1] != 0 {
            reasons
                .fixes
                .push(format!("run it as {}", user(target.uids[1])));
        }
        // setcap gives what the bounding set allows: in a container without it, the container's.
        reasons
            .fixes
            .push(if me.bounding & (1 << CAP_DAC_READ_SEARCH) != 0 {
                setcap.to_string()
            } else {
                "in a container, add the capability as well (--cap-add DAC_READ_SEARCH for Docker, \
             \"DAC_READ_SEARCH\" beside \"SYS_PTRACE\" for Kubernetes)"
                    .to_string()
            });
    } else if !capable {
        if facts.target_proc_owner == Some(0) && target.uids[1] != 0 {
            reasons.why.push(format!(
                "process {pid} is not dumpable (a setuid or setgid program, or one that called \
                 prctl(PR_SET_DUMPABLE, 0)): only a reader with CAP_SYS_PTRACE may read it"
            ));
            reasons.fixes.extend(as_root.clone());
            reasons.fixes.push(setcap.to_string());
        }
        let lacking = target.permitted & !me.permitted;
        if lacking != 0 {
            reasons.why.push(format!(
                "process {pid} has capabilities that gilsample lacks (its CapPrm {:016x}, \
                 gilsample's {:016x}, CAP_SYS_PTRACE not among them): reading it needs \
                 CAP_SYS_PTRACE, which gilsample's capabilities were limited to exclude \
                 (capsh --drop, setpriv, a container's --cap-drop)",
                target.permitted, me.permitted
            ));
            reasons.fixes.push(
                "run gilsample with CAP_SYS_PTRACE kept (in a container: --cap-add SYS_PTRACE \
                 for Docker, securityContext.capabilities.add: [\"SYS_PTRACE\"] for Kubernetes)"
                    .into(),
            );
        }
    }
}

fn explain_yama(facts: &Facts, setcap: &str, reasons: &mut Reasons) {
    let pid = facts.target_pid;
    let me = &facts.reader;
    let capable = me.has_ptrace_capability();
    match facts.yama_scope {
        Some(3) => {
            reasons.why.push(format!(
                "kernel.yama.ptrace_scope is 3 ({YAMA_SCOPE}): no process may read another's \
                 memory, not even root, until the machine is rebooted"
            ));
            reasons
                .fixes
                .push("reboot, and do not set ptrace_scope to 3".into());
        }
        Some(2) if !capable => {
            reasons.why.push(format!(
                "kernel.yama.ptrace_scope is 2 ({YAMA_SCOPE}): only a reader with CAP_SYS_PTRACE \
                 may read another process"
            ));
            reasons.fixes.push(setcap.to_string());
        }
        Some(1) if !capable && !facts.reader_is_ancestor => {
            reasons.why.push(format!(
                "kernel.yama.ptrace_scope is 1 ({YAMA_SCOPE}): without CAP_SYS_PTRACE only a \
                 process's ancestors, and the reader it names with prctl(PR_SET_PTRACER), may read \
                 it, and gilsample did not start process {pid}"
            ));
            reasons.fixes.push(
                "launch the program with gilsample (gilsample -- python3 ...) or record from \
                 inside it with the Python API (import gilsample)"
                    .into(),
            );
            reasons
                .fixes
                .push(format!("allow it: echo 0 | sudo tee {YAMA_SCOPE}"));
            reasons.fixes.push(setcap.to_string());
        }
        _ => {}
    }
}

fn explain_user_namespace(facts: &Facts, reasons: &mut Reasons) {
    let pid = facts.target_pid;
    let capable = facts.reader.has_ptrace_capability();
    if let Some(map) = &facts.reader_in_user_namespace
        && capable
    {
        reasons.why.push(format!(
            "gilsample runs in a user namespace (uid_map {map}): its CAP_SYS_PTRACE applies only \
             to processes of that namespace, and process {pid} is likely outside it (a host \
             process seen from a container)"
        ));
        reasons.fixes.push(format!(
            "run gilsample in process {pid}'s namespace: on the host, or in its container \
             (docker exec, kubectl debug --target)"
        ));
    }
}

/// gilsample passed every check it can see: what is left refuses the system call itself, or a
/// security module decided.
fn explain_what_no_check_sees(facts: &Facts, reasons: &mut Reasons) {
    let me = &facts.reader;
    if me.seccomp == 2 {
        reasons.why.push(
            "gilsample runs under a seccomp filter (Seccomp: 2 in /proc/self/status); \
             container runtimes' default filters refuse process_vm_readv and ptrace to \
             containers without CAP_SYS_PTRACE"
                .into(),
        );
        reasons.fixes.push(
            "Docker: --cap-add SYS_PTRACE (its default filter then allows the calls), or \
             --security-opt seccomp=<a profile that allows process_vm_readv>; Kubernetes: \
             securityContext.capabilities.add: [\"SYS_PTRACE\"], or seccompProfile: \
             {type: Unconfined}"
                .into(),
        );
    }
    if let Some(label) = &facts.reader_label {
        reasons.why.push(format!(
            "gilsample is confined by a security module as {label:?}{}, which may refuse ptrace \
             reads",
            facts
                .security_modules
                .as_ref()
                .map(|m| format!(" (modules: {m})"))
                .unwrap_or_default()
        ));
        reasons.fixes.push(
            "allow ptrace read/trace of the target in gilsample's profile, or run it unconfined \
             (Docker: --security-opt apparmor=unconfined)"
                .into(),
        );
    }
    if reasons.why.is_empty() {
        reasons.why.push(format!(
            "gilsample has CAP_SYS_PTRACE{}, and no seccomp filter or security label it can see \
             explains it: the refusal comes from a sandbox or security module not visible from \
             inside{}",
            if me.uids[0] == 0 {
                " and runs as root"
            } else {
                ""
            },
            facts
                .security_modules
                .as_ref()
                .map(|m| format!(" (the kernel runs: {m})"))
                .unwrap_or_default()
        ));
        reasons.fixes.push(
            "check the audit log (journalctl -k, /var/log/audit/audit.log) for the denial".into(),
        );
    }
}

/// A refused read of `what` (a path, or the memory of) process `pid`, with why on this machine.
pub fn permission_error(pid: u32, what: impl Into<String>) -> Error {
    Error::Permission {
        pid,
        what: what.into(),
        why: explain(&Facts::gather(pid)),
    }
}

/// Maps an errno from reading a target's memory or /proc entries to the error that says what it
/// means (refused: with why, from the checks above; gone; or plain I/O).
pub fn target_errno_error(pid: u32, errno: i32, what: &str) -> Error {
    match errno {
        libc::EPERM | libc::EACCES => permission_error(pid, what),
        libc::ESRCH | libc::ENOENT => Error::ProcessGone { pid },
        _ => Error::io(
            format!("{what} of process {pid}"),
            std::io::Error::from_raw_os_error(errno),
        ),
    }
}

#[cfg(test)]
mod tests;
