//! The target's memory mappings, and opening the files behind them from the observer's side.
//!
//! A target in a container or chroot has maps paths relative to the reader's root (plain chroot: the
//! host path) or to its own root (after `pivot_root`: only reachable as `/proc/PID/root/<path>`). Both
//! are tried, and a file is accepted only when its device and inode match the maps line.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use procfs::ProcError;
use procfs::process::{MMapPath, Process};

use crate::error::{Error, Result};

/// One line of `/proc/PID/maps` that is backed by a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Start address of the mapping in the target.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Offset in the file the mapping begins at.
    pub offset: u64,
    /// Major number of the file's device.
    pub dev_major: u32,
    /// Minor number of the file's device.
    pub dev_minor: u32,
    /// The file's inode.
    pub inode: u64,
    /// The file's path as the target's mount namespace names it.
    pub path: PathBuf,
}

impl Mapping {
    /// Whether two mappings come from the same file.
    pub fn same_file(&self, other: &Mapping) -> bool {
        self.inode == other.inode
            && self.dev_major == other.dev_major
            && self.dev_minor == other.dev_minor
    }
}

/// The `Error` for a failed /proc read of `what` of `pid`: permission (with what the machine says),
/// gone, or I/O.
pub fn proc_error(pid: u32, err: ProcError, what: &str) -> Error {
    match err {
        ProcError::PermissionDenied(_) => crate::process::access::permission_error(pid, what),
        ProcError::NotFound(_) => Error::ProcessGone { pid },
        ProcError::Io(e, _) => crate::process::access::target_errno_error(
            pid,
            e.raw_os_error().unwrap_or(libc::EIO),
            what,
        ),
        other => Error::io(
            format!("{what} of process {pid}"),
            std::io::Error::other(other.to_string()),
        ),
    }
}

/// The file-backed mappings of `pid`, in address order.
pub fn read_file_mappings(pid: u32) -> Result<Vec<Mapping>> {
    let process =
        Process::new(pid as i32).map_err(|e| proc_error(pid, e, &format!("/proc/{pid}")))?;
    let maps = process
        .maps()
        .map_err(|e| proc_error(pid, e, &format!("/proc/{pid}/maps")))?;
    Ok(maps
        .into_iter()
        .filter_map(|m| match m.pathname {
            MMapPath::Path(path) if m.inode != 0 => Some(Mapping {
                start: m.address.0,
                end: m.address.1,
                offset: m.offset,
                dev_major: m.dev.0 as u32,
                dev_minor: m.dev.1 as u32,
                inode: m.inode,
                path,
            }),
            _ => None,
        })
        .collect())
}

/// `path`, as this process reads it in the target's maps, as the target itself names it. A target
/// in a plain chroot maps its files under its root, which the maps show from ours
/// (`/srv/sid/usr/bin/python3.15` for its `/usr/bin/python3.15`): its root, read through
/// `/proc/PID/root`, is taken off. Unchanged where that root is ours or unreadable (the target
/// gone), or the path is not under it (after `pivot_root` the maps already name the target's own
/// paths).
pub fn path_in_target(pid: u32, path: &Path) -> PathBuf {
    let Ok(root) = std::fs::read_link(format!("/proc/{pid}/root")) else {
        return path.to_path_buf();
    };
    match path.strip_prefix(&root) {
        Ok(inside) if root != Path::new("/") => Path::new("/").join(inside),
        _ => path.to_path_buf(),
    }
}

/// How a mapped file was reached from here; named in `gilsample info` and the trace metadata.
#[derive(Debug)]
pub struct OpenedFile {
    /// The open file.
    pub file: File,
    /// The path this process opened.
    pub opened_as: PathBuf,
}

/// Opens the file behind `mapping`, checking that it is the same file the target mapped.
pub fn open_mapped_file(pid: u32, mapping: &Mapping) -> Result<OpenedFile> {
    let relative = mapping.path.strip_prefix("/").unwrap_or(&mapping.path);
    let candidates = [
        PathBuf::from(format!("/proc/{pid}/root")).join(relative),
        mapping.path.clone(),
        PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start, mapping.end
        )),
    ];
    let mut tried = Vec::new();
    // The target's own view of the path (through /proc/PID/root, its mount namespace) refused for
    // permission: the file is there, and this user may not open it. Our own path may name another
    // file or none (a container's), and map_files needs CAP_SYS_ADMIN: neither says more.
    let mut own_view_refused = false;
    for (index, candidate) in candidates.into_iter().enumerate() {
        match open_if_same(&candidate, mapping) {
            Ok(Some(file)) => {
                return Ok(OpenedFile {
                    file,
                    opened_as: candidate,
                });
            }
            Ok(None) => tried.push(format!("{} (a different file)", candidate.display())),
            Err(e) => {
                own_view_refused |= index == 0 && e.kind() == std::io::ErrorKind::PermissionDenied;
                tried.push(format!("{} ({e})", candidate.display()))
            }
        }
    }
    if own_view_refused {
        return Err(Error::FilesUnreadable {
            pid,
            files: vec![mapping.path.clone()],
        });
    }
    Err(Error::Binary {
        path: mapping.path.clone(),
        why: format!(
            "cannot open the file process {pid} mapped; tried {}",
            tried.join(", ")
        ),
    })
}

fn open_if_same(path: &Path, mapping: &Mapping) -> std::io::Result<Option<File>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let dev = meta.dev();
    let same = meta.ino() == mapping.inode
        && libc::major(dev) == mapping.dev_major
        && libc::minor(dev) == mapping.dev_minor;
    Ok(same.then_some(file))
}
