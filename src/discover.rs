//! Finding targets: processes that use an accelerator (an open Ascend NPU `/dev/davinciN` or NVIDIA GPU
//! `/dev/nvidiaN` device node, seen in `/proc/PID/fd`), and the descendants of a process. Whether a
//! candidate is Python is decided by its mapped interpreter (attach), never by its name.

use std::collections::{HashMap, HashSet};
use std::fs;

/// Which accelerator's users to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// Ascend NPUs: `/dev/davinci0`, `/dev/davinci1`, ... (not `davinci_manager`).
    Npu,
    /// NVIDIA GPUs: `/dev/nvidia0`, ... (not `nvidiactl` or `nvidia-uvm`).
    Gpu,
}

impl DeviceKind {
    fn prefix(self) -> &'static str {
        match self {
            DeviceKind::Npu => "davinci",
            DeviceKind::Gpu => "nvidia",
        }
    }

    /// Whether an fd target names one of this kind's numbered device nodes. Only the file name is
    /// compared: inside a container, or a private mount namespace, the node may sit elsewhere.
    pub fn matches(self, fd_target: &str) -> bool {
        let name = fd_target.rsplit('/').next().unwrap_or("");
        name.strip_prefix(self.prefix())
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    }

    /// The kind in words, with its device nodes, for messages: `an NVIDIA GPU (/dev/nvidiaN)`.
    pub fn describe(self) -> &'static str {
        match self {
            DeviceKind::Npu => "an Ascend NPU (/dev/davinciN)",
            DeviceKind::Gpu => "an NVIDIA GPU (/dev/nvidiaN)",
        }
    }

    /// The option that looks for this kind.
    pub fn option(self) -> &'static str {
        match self {
            DeviceKind::Npu => "--all-npu",
            DeviceKind::Gpu => "--all-gpu",
        }
    }

    /// The option that looks for the other kind, for messages that found none of this one.
    pub fn other_option(self) -> &'static str {
        match self {
            DeviceKind::Npu => "--all-gpu for NVIDIA GPUs",
            DeviceKind::Gpu => "--all-npu for Ascend NPUs",
        }
    }
}

/// Whether this machine's `/dev` has one of `kind`'s numbered device nodes. Inside a container the
/// nodes the job uses may be elsewhere, so this only informs a message.
pub fn device_nodes_here(kind: DeviceKind) -> bool {
    fs::read_dir("/dev").is_ok_and(|dir| {
        dir.flatten()
            .any(|e| kind.matches(&e.file_name().to_string_lossy()))
    })
}

/// Every process id in /proc.
pub fn list_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `; N processes were closed to this search ...`, where some processes' open files could not be
/// looked at (another user's, without CAP_SYS_PTRACE): a search that found none says it may have
/// missed those. Empty where every process could be looked at.
pub fn closed_processes_note() -> String {
    let own = std::process::id();
    let closed = list_pids()
        .into_iter()
        .filter(|&pid| pid != own)
        .filter(|pid| {
            fs::read_dir(format!("/proc/{pid}/fd"))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        })
        .count();
    match closed {
        0 => String::new(),
        n => format!(
            "; {n} {} of other users could not be looked into (which files a process has open \
             is shown only to its user or to a reader with CAP_SYS_PTRACE): run gilsample as root \
             or with that capability",
            if n == 1 { "process" } else { "processes" }
        ),
    }
}

/// Processes with a device of `kind` open, with the device they hold (first found). Processes whose
/// fds cannot be read (other users, without privilege) are not listed.
pub fn device_users(kind: DeviceKind) -> Vec<(u32, String)> {
    let own = std::process::id();
    let mut users = Vec::new();
    for pid in list_pids().into_iter().filter(|&p| p != own) {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            if kind.matches(&target) {
                users.push((pid, target.into_owned()));
                break;
            }
        }
    }
    users
}

/// The parent of `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()?;
    u32::try_from(stat.ppid).ok()
}

/// Every live descendant of `roots` (children, grandchildren, ...), not the roots themselves, nor
/// gilsample and what it started: the Python API runs gilsample as a child of the program it
/// records with `--subprocesses`.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let own = std::process::id();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in list_pids().into_iter().filter(|&p| p != own) {
        if let Some(parent) = parent_of(pid) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut seen: HashSet<u32> = roots.iter().copied().collect();
    let mut queue: Vec<u32> = roots.to_vec();
    let mut found = Vec::new();
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(child) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numbered_device_nodes_only() {
        assert!(DeviceKind::Npu.matches("/dev/davinci0"));
        assert!(DeviceKind::Npu.matches("/dev/davinci15"));
        assert!(DeviceKind::Npu.matches("/davinci3"));
        assert!(!DeviceKind::Npu.matches("/dev/davinci_manager"));
        assert!(!DeviceKind::Npu.matches("/dev/davinci"));
        assert!(DeviceKind::Gpu.matches("/dev/nvidia1"));
        assert!(!DeviceKind::Gpu.matches("/dev/nvidiactl"));
        assert!(!DeviceKind::Gpu.matches("/dev/nvidia-uvm"));
        assert!(!DeviceKind::Gpu.matches("socket:[1234]"));
    }

    #[test]
    fn finds_own_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let found = descendants(&[std::process::id()]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&child.id()));
    }

    #[test]
    fn never_finds_itself_below_a_root() {
        let own = std::process::id();
        let parent = parent_of(own).expect("a parent");
        assert!(!descendants(&[parent]).contains(&own));
    }
}
