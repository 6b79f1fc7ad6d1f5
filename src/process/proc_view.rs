//! Whether this /proc shows gilsample's own PID namespace. A shell entered into a container's PID
//! namespace without its mount namespace (`nsenter -t PID -p` without `-m`) keeps the host's /proc:
//! there every pid names another process than the one the kernel's calls (`process_vm_readv`)
//! take, and a live process reads as gone. Checked before attaching, so the user is told that, not
//! "does not exist".

use crate::error::{Error, Result};

/// `Ok` where `/proc/self` names this process; otherwise what is wrong and what to do.
pub fn check() -> Result<()> {
    let ours = std::process::id();
    let seen = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_str()?.parse::<u32>().ok());
    match seen {
        Some(pid) if pid == ours => Ok(()),
        seen => Err(Error::io(
            "/proc shows another PID namespace than gilsample's",
            std::io::Error::other(format!(
                "there gilsample is {}, not its own pid {ours}, so the pids it reads name other \
                 processes. Enter the mount namespace as well as the PID namespace (nsenter -m \
                 -p, or nsenter --all), or mount a /proc of this PID namespace (unshare \
                 --mount-proc)",
                seen.map_or_else(|| "not found".to_string(), |pid| format!("pid {pid}"))
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tests_own_proc_is_its_own() {
        assert!(super::check().is_ok());
    }
}
