//! The target's glibc, as far as the GIL's condition variables and mutex need it.
//!
//! CPython's GIL waits on a `pthread_cond_t` (`gil->cond` in `take_gil`, `gil->switch_cond` in
//! `drop_gil`'s forced switch). glibc keeps, in the condition variable's `__wrefs` word, how many
//! threads are inside `pthread_cond_wait` on it, eight per waiter. A waiter leaves that count only
//! when it runs again after its wake-up, so the count includes threads that were woken and still wait
//! for a CPU, which the kernel reports as running like any thread running native code. That word's
//! place depends on the glibc release: 2.25 introduced it (at byte 36), 2.41 dropped `__g_refs` before
//! it (byte 28). The GIL's mutex records which thread holds it; `take_gil` and `drop_gil` hold it for
//! microseconds unless a wake-up they cause preempts them there. Other C libraries (musl) keep no
//! such count, and gilsample reads neither there.

use std::path::Path;

use memmap2::Mmap;

use crate::process::maps::{Mapping, open_mapped_file, read_file_mappings};

/// glibc's condition variable as gilsample reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CondvarLayout {
    /// The glibc release, from its banner.
    pub release: (u32, u32),
    /// Where `__wrefs` lies in `pthread_cond_t`.
    pub wrefs_offset: u64,
}

/// The size of glibc's `pthread_cond_t` on every 64-bit architecture.
pub const PTHREAD_COND_SIZE: u64 = 48;

/// The size of glibc's `pthread_mutex_t` on an architecture, as layouts name it: 40 bytes on x86_64,
/// 48 on aarch64 (whose generic ABI pads the same fields to 48), `None` for one gilsample does not
/// know. `__lock` and `__owner` lie at the same places on both.
pub fn pthread_mutex_size(arch: &str) -> Option<u64> {
    match arch {
        "x86_64" => Some(40),
        "aarch64" => Some(48),
        _ => None,
    }
}

/// Where `pthread_mutex_t` keeps `__lock` (0 free, 1 locked, 2 locked with sleepers) and `__owner`, the
/// id of the thread that holds it: glibc records the owner for every mutex type, the default one
/// included, after it takes the lock and clears it before it lets the lock go.
pub const MUTEX_LOCK_OFFSET: u64 = 0;
/// Offset of `__owner` in `pthread_mutex_t`: the holder's tid in the target's PID namespace.
pub const MUTEX_OWNER_OFFSET: u64 = 8;

/// The thread holding a mutex, from its `__lock` and `__owner` words read at once: `Some(0)` when it is
/// free (or between taking the lock and recording the owner), `None` when the two words contradict
/// each other (an owner on a free lock, a lock value glibc never stores), as a torn or a wrong read would.
pub fn mutex_owner(lock: u32, owner: u32) -> Option<u32> {
    match (lock, owner) {
        (0, 0) => Some(0),
        (1 | 2, owner) if owner <= i32::MAX as u32 => Some(owner),
        _ => None,
    }
}

/// Whether a mutex's `__lock` word says threads may be asleep waiting for it: glibc stores 2 before
/// a locker sleeps on the word, and only a holder that saw 2 wakes one when it lets go.
pub fn mutex_contended(lock: u32) -> bool {
    lock == 2
}

/// `__wrefs` counts waiters in its upper bits; the low three are flags (shared, clock, destroy).
pub fn waiters_in(wrefs: u32) -> u32 {
    wrefs >> 3
}

/// Where `__wrefs` is for a glibc release; `None` before 2.25, whose condition variables differ, and
/// for a major release gilsample does not know.
pub fn wrefs_offset(release: (u32, u32)) -> Option<u64> {
    match release {
        (2, minor) if minor >= 41 => Some(28),
        (2, minor) if minor >= 25 => Some(36),
        _ => None,
    }
}

/// The release in glibc's banner ("GNU C Library (…) stable release version 2.36."), which every
/// `libc.so.6` carries because it is also an executable that prints it.
pub fn parse_release_banner(bytes: &[u8]) -> Option<(u32, u32)> {
    const MARK: &[u8] = b"release version ";
    let banner = memchr::memmem::find(bytes, b"GNU C Library")?;
    let rest = &bytes[banner..bytes.len().min(banner + 512)];
    let at = memchr::memmem::find(rest, MARK)? + MARK.len();
    let text: Vec<u8> = rest[at..]
        .iter()
        .copied()
        .take_while(|c| c.is_ascii_digit() || *c == b'.')
        .collect();
    let text = std::str::from_utf8(&text).ok()?;
    let mut parts = text.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn is_glibc(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "libc.so.6" || (name.starts_with("libc-2.") && name.ends_with(".so"))
}

/// Finds the glibc the target runs on and where its condition variables count waiters. `Err` says why
/// not (another C library, an old glibc, an unreadable file): the sampler then does without the count.
pub fn detect(pid: u32) -> Result<CondvarLayout, String> {
    let mappings = read_file_mappings(pid).map_err(|e| e.to_string())?;
    let libc: &Mapping = mappings
        .iter()
        .find(|m| is_glibc(&m.path))
        .ok_or("no glibc mapped (another C library, or linked statically)")?;
    let opened = open_mapped_file(pid, libc).map_err(|e| e.to_string())?;
    // SAFETY: a read-only private mapping of a file; its bytes are only searched, never trusted.
    let map = unsafe { Mmap::map(&opened.file) }
        .map_err(|e| format!("cannot map {}: {e}", libc.path.display()))?;
    let release = parse_release_banner(&map)
        .ok_or_else(|| format!("{} has no glibc release banner", libc.path.display()))?;
    let wrefs_offset = wrefs_offset(release).ok_or_else(|| {
        format!(
            "glibc {}.{} predates the condition variables whose waiters can be counted (2.25)",
            release.0, release.1
        )
    })?;
    Ok(CondvarLayout {
        release,
        wrefs_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_release_is_parsed() {
        let bytes = b"\0\0GNU C Library (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36.\nCopyright";
        assert_eq!(parse_release_banner(bytes), Some((2, 36)));
        let dev = b"GNU C Library (GNU libc) development release version 2.43.9000.\n";
        assert_eq!(parse_release_banner(dev), Some((2, 43)));
    }

    #[test]
    fn no_banner_no_release() {
        assert_eq!(parse_release_banner(b"musl libc (x86_64)"), None);
        assert_eq!(
            parse_release_banner(b"GNU C Library release version x"),
            None
        );
    }

    #[test]
    fn wrefs_moved_in_2_41() {
        assert_eq!(wrefs_offset((2, 24)), None);
        assert_eq!(wrefs_offset((2, 25)), Some(36));
        assert_eq!(wrefs_offset((2, 40)), Some(36));
        assert_eq!(wrefs_offset((2, 41)), Some(28));
        assert_eq!(wrefs_offset((2, 43)), Some(28));
    }

    #[test]
    fn waiters_are_the_upper_bits() {
        // CPython's condition variables use CLOCK_MONOTONIC: flag bit 1.
        assert_eq!(waiters_in(2), 0);
        assert_eq!(waiters_in(18), 2);
    }

    #[test]
    fn mutex_owner_needs_a_lock_that_agrees() {
        assert_eq!(mutex_owner(0, 0), Some(0));
        assert_eq!(mutex_owner(1, 0), Some(0));
        assert_eq!(mutex_owner(1, 4242), Some(4242));
        assert_eq!(mutex_owner(2, 4242), Some(4242));
        assert_eq!(mutex_owner(0, 4242), None);
        assert_eq!(mutex_owner(3, 4242), None);
        assert_eq!(mutex_owner(1, u32::MAX), None);
    }

    #[test]
    fn aarch64_mutexes_are_larger() {
        assert_eq!(pthread_mutex_size("x86_64"), Some(40));
        assert_eq!(pthread_mutex_size("aarch64"), Some(48));
        assert_eq!(pthread_mutex_size("riscv64"), None);
    }

    #[test]
    fn glibc_file_names() {
        assert!(is_glibc(Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6")));
        assert!(is_glibc(Path::new("/usr/lib64/libc-2.17.so")));
        assert!(!is_glibc(Path::new("/lib/ld-musl-x86_64.so.1")));
        assert!(!is_glibc(Path::new("/usr/lib/libcrypto.so.3")));
    }
}
