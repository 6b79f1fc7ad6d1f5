//! Reading the target's memory.
//!
//! `MemorySource` is the seam between decoding and a live process: the runtime walk runs the same on a
//! live process (`ProcessMemory`) and on recorded bytes (`SnapshotMemory`, used by tests and fuzzing).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::IoSliceMut;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::uio::{RemoteIoVec, process_vm_readv};

use crate::process::syscalls::{Syscall, count};
use nix::unistd::Pid;

use crate::addr::RemoteAddr;

/// Why a read failed, in the terms the sampler acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The process is gone: stop and write what we have.
    Gone,
    /// Not allowed: tell the user how to grant access.
    Permission,
    /// Unmapped or torn memory (a freed thread state, a stale pointer): skip this sample and count it.
    Fault,
    /// Anything else, with its errno.
    Other(i32),
}

impl ReadError {
    fn from_errno(errno: Errno) -> ReadError {
        match errno {
            Errno::ESRCH => ReadError::Gone,
            Errno::EPERM | Errno::EACCES => ReadError::Permission,
            Errno::EFAULT | Errno::EIO | Errno::EINVAL => ReadError::Fault,
            other => ReadError::Other(other as i32),
        }
    }
}

/// Something that can copy bytes out of a target address space.
pub trait MemorySource {
    /// Fills `buf` from `addr`; a short read is a `Fault`.
    fn read_into(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError>;

    /// Fills each buffer from its address, in order, up to the first that cannot be read whole;
    /// returns how many were filled. A live process does it in one system call.
    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        one_by_one(reads, |addr, buf| self.read_into(addr, buf).is_ok())
    }

    /// The native-endian 8 bytes at `addr`.
    fn read_u64(&self, addr: RemoteAddr) -> Result<u64, ReadError> {
        let mut buf = [0u8; 8];
        self.read_into(addr, &mut buf)?;
        Ok(u64::from_ne_bytes(buf))
    }

    /// The pointer stored at `addr` (8 bytes, native-endian).
    fn read_addr(&self, addr: RemoteAddr) -> Result<RemoteAddr, ReadError> {
        self.read_u64(addr).map(RemoteAddr)
    }
}

/// `read_each` as a read per buffer: how many leading ones `read` filled.
fn one_by_one(
    reads: &mut [(RemoteAddr, &mut [u8])],
    mut read: impl FnMut(RemoteAddr, &mut [u8]) -> bool,
) -> usize {
    let mut filled = 0;
    for (addr, buf) in reads.iter_mut() {
        if !read(*addr, buf) {
            break;
        }
        filled += 1;
    }
    filled
}

/// A live process, read with `process_vm_readv`, falling back to `/proc/PID/mem` on kernels without
/// cross-memory attach (ENOSYS).
pub struct ProcessMemory {
    pid: i32,
    /// Opened on the first ENOSYS from `process_vm_readv`; from then on every read goes through it.
    mem_file: OnceLock<Option<File>>,
}

impl ProcessMemory {
    /// Reads the memory of process `pid` (our PID namespace), by `process_vm_readv` or
    /// `/proc/PID/mem`.
    pub fn new(pid: u32) -> ProcessMemory {
        ProcessMemory {
            pid: pid as i32,
            mem_file: OnceLock::new(),
        }
    }

    fn read_via_mem_file(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError> {
        let opened = self
            .mem_file
            .get_or_init(|| File::open(format!("/proc/{}/mem", self.pid)).ok());
        let Some(file) = opened else {
            return Err(ReadError::Other(libc::ENOSYS));
        };
        match file.read_at(buf, addr.0) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(_) => Err(ReadError::Fault),
            Err(e) => Err(ReadError::from_errno(Errno::from_raw(
                e.raw_os_error().unwrap_or(libc::EIO),
            ))),
        }
    }
}

impl MemorySource for ProcessMemory {
    fn read_into(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        count(Syscall::MemoryRead);
        if self.mem_file.get().is_some() {
            return self.read_via_mem_file(addr, buf);
        }
        let len = buf.len();
        let remote = [RemoteIoVec {
            base: addr.0 as usize,
            len,
        }];
        let mut local = [IoSliceMut::new(buf)];
        match process_vm_readv(Pid::from_raw(self.pid), &mut local, &remote) {
            Ok(n) if n == len => Ok(()),
            Ok(_) => Err(ReadError::Fault),
            Err(Errno::ENOSYS) => self.read_via_mem_file(addr, buf),
            Err(errno) => Err(ReadError::from_errno(errno)),
        }
    }

    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        if self.mem_file.get().is_some() {
            return one_by_one(reads, |addr, buf| self.read_into(addr, buf).is_ok());
        }
        // Batches of up to 16 ranges live on the stack: the sampler's per-tick read (the GIL span
        // and the thread list's head) allocates nothing.
        const BATCH: usize = 16;
        let mut filled = 0;
        for batch in reads.chunks_mut(BATCH) {
            let mut lens = [0usize; BATCH];
            let mut remote = [RemoteIoVec { base: 0, len: 0 }; BATCH];
            for (i, (addr, buf)) in batch.iter().enumerate() {
                lens[i] = buf.len();
                remote[i] = RemoteIoVec {
                    base: addr.0 as usize,
                    len: buf.len(),
                };
            }
            let n = batch.len();
            let mut slots: [&mut [u8]; BATCH] = Default::default();
            for (slot, (_, buf)) in slots.iter_mut().zip(batch.iter_mut()) {
                *slot = buf;
            }
            let mut local = slots.map(IoSliceMut::new);
            count(Syscall::MemoryRead);
            // The kernel copies the ranges in order and stops at the first it cannot read; the
            // bytes it copied say how many buffers are whole.
            let copied = process_vm_readv(Pid::from_raw(self.pid), &mut local[..n], &remote[..n])
                .unwrap_or(0);
            let mut left = copied;
            let whole = lens[..n]
                .iter()
                .take_while(|&&len| {
                    let fits = len <= left;
                    left = left.saturating_sub(len);
                    fits
                })
                .count();
            filled += whole;
            if whole < n {
                break;
            }
        }
        filled
    }
}

/// Recorded memory: a set of byte ranges at fixed addresses. Reads outside them fault, as they would
/// in a real process.
#[derive(Default, Clone, Debug)]
pub struct SnapshotMemory {
    regions: BTreeMap<u64, Vec<u8>>,
}

impl SnapshotMemory {
    /// An empty snapshot: every read fails.
    pub fn new() -> SnapshotMemory {
        SnapshotMemory::default()
    }

    /// Adds bytes that read as living at `addr`.
    pub fn insert(&mut self, addr: RemoteAddr, bytes: Vec<u8>) {
        self.regions.insert(addr.0, bytes);
    }

    /// Writes `value` at `addr` inside an existing region (test set-up only).
    pub fn put_u64(&mut self, addr: RemoteAddr, value: u64) {
        let (start, bytes) = self
            .regions
            .range_mut(..=addr.0)
            .next_back()
            .expect("put_u64 outside every region");
        let at = (addr.0 - start) as usize;
        bytes[at..at + 8].copy_from_slice(&value.to_ne_bytes());
    }
}

impl MemorySource for SnapshotMemory {
    fn read_into(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError> {
        let (start, bytes) = self
            .regions
            .range(..=addr.0)
            .next_back()
            .ok_or(ReadError::Fault)?;
        let from = (addr.0 - start) as usize;
        let to = from.checked_add(buf.len()).ok_or(ReadError::Fault)?;
        let src = bytes.get(from..to).ok_or(ReadError::Fault)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_inside_and_faults_outside() {
        let mut mem = SnapshotMemory::new();
        mem.insert(RemoteAddr(0x1000), vec![0; 16]);
        mem.put_u64(RemoteAddr(0x1008), 42);
        assert_eq!(mem.read_u64(RemoteAddr(0x1008)), Ok(42));
        assert_eq!(mem.read_u64(RemoteAddr(0x100c)), Err(ReadError::Fault));
        assert_eq!(mem.read_u64(RemoteAddr(0x0ff8)), Err(ReadError::Fault));
    }

    #[test]
    fn read_each_fills_in_order_up_to_the_first_unreadable_range() {
        let values: [u64; 3] = [1, 2, 3];
        let at = |i: usize| RemoteAddr(&values[i] as *const u64 as u64);
        let mem = ProcessMemory::new(std::process::id());
        let (mut a, mut b, mut c, mut d) = ([0u8; 8], [0u8; 8], [0u8; 8], [0u8; 8]);
        let mut reads = [
            (at(0), &mut a[..]),
            (at(2), &mut b[..]),
            (RemoteAddr(8), &mut c[..]),
            (at(1), &mut d[..]),
        ];
        assert_eq!(mem.read_each(&mut reads), 2);
        assert_eq!((u64::from_ne_bytes(a), u64::from_ne_bytes(b)), (1, 3));
        // More ranges than one batch holds: the count goes on across batches.
        let many: Vec<u64> = (0..20).collect();
        let mut bufs = [[0u8; 8]; 20];
        let mut reads: Vec<(RemoteAddr, &mut [u8])> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                let addr = if i == 18 {
                    8
                } else {
                    &many[i] as *const u64 as u64
                };
                (RemoteAddr(addr), &mut b[..])
            })
            .collect();
        assert_eq!(mem.read_each(&mut reads), 18);
        assert_eq!(u64::from_ne_bytes(bufs[17]), 17);
        let mut snapshot = SnapshotMemory::new();
        snapshot.insert(RemoteAddr(0x1000), 7u64.to_ne_bytes().to_vec());
        let (mut e, mut f) = ([0u8; 8], [0u8; 8]);
        let mut reads = [
            (RemoteAddr(0x1000), &mut e[..]),
            (RemoteAddr(0x2000), &mut f[..]),
        ];
        assert_eq!(snapshot.read_each(&mut reads), 1);
        assert_eq!(u64::from_ne_bytes(e), 7);
    }

    #[test]
    fn reads_own_memory_through_process_vm_readv() {
        let value: u64 = 0x1122_3344_5566_7788;
        let mem = ProcessMemory::new(std::process::id());
        let addr = RemoteAddr(&value as *const u64 as u64);
        assert_eq!(mem.read_u64(addr), Ok(value));
        assert_eq!(mem.read_u64(RemoteAddr(8)), Err(ReadError::Fault));
    }
}
