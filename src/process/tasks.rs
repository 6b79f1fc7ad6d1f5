//! Facts about a target process from /proc: its threads, its command line, its rank and namespace pid.

use std::collections::HashSet;
use std::fs;

use procfs::process::Process;

use crate::error::Result;
use crate::process::maps::proc_error;

/// The OS thread ids of `pid` right now.
pub fn read_tids(pid: u32, out: &mut HashSet<u32>) -> Result<()> {
    out.clear();
    let dir = fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| {
        crate::error::Error::from_target_errno(
            pid,
            e.raw_os_error().unwrap_or(libc::EIO),
            "thread list",
        )
    })?;
    for entry in dir.flatten() {
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.insert(tid);
        }
    }
    Ok(())
}

/// The environment variables that name a distributed rank, in the order they are consulted. Launchers
/// set several at once (torchrun sets RANK and LOCAL_RANK); the global rank wins.
pub const RANK_VARIABLES: &[&str] = &[
    "RANK",
    "RANK_ID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "LOCAL_RANK",
];

/// The target's rank from its environment at exec time; 0 when it has none.
pub fn read_rank(pid: u32) -> u32 {
    let Ok(process) = Process::new(pid as i32) else {
        return 0;
    };
    let Ok(env) = process.environ() else { return 0 };
    RANK_VARIABLES
        .iter()
        .find_map(|name| {
            env.get(std::ffi::OsStr::new(name))
                .and_then(|v| v.to_str()?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The target's command line, joined with spaces (empty for kernel threads and zombies).
pub fn read_cmdline(pid: u32) -> Result<String> {
    let process = Process::new(pid as i32).map_err(|e| proc_error(pid, e, "/proc entry"))?;
    Ok(process
        .cmdline()
        .map(|args| args.join(" "))
        .unwrap_or_default())
}

/// The pid the target sees for itself in its innermost PID namespace (the last `NSpid:` field).
pub fn read_namespace_pid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}
