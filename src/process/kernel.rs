//! What the kernel says a thread is doing: `/proc/PID/task/TID/syscall` (running, or the syscall it is
//! blocked in and its arguments) and `/proc/PID/task/TID/schedstat` (CPU time used so far).
//!
//! Both files are opened once per thread and re-read with `pread` at offset 0 on every sample, into a
//! fixed buffer: no allocation on the sampling path. Reading them needs ptrace-read access to the
//! target, the same permission as reading its memory; BPF is never involved.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::process::memory::ReadError;

/// The `futex` syscall number of the architecture gilsample is built for (202 on x86_64, 98 on
/// aarch64), from libc's per-architecture table rather than a hard-coded x86_64 constant.
pub const SYS_FUTEX: i64 = libc::SYS_futex;

/// One reading of a thread's syscall file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelState {
    /// On a CPU or runnable (waiting for one): the kernel does not distinguish the two here.
    Running,
    /// Blocked inside syscall `nr`; `arg0` and `arg1` are its first two arguments (for futex: the
    /// address and the operation).
    InSyscall { nr: i64, arg0: u64, arg1: u64 },
    /// Stopped or blocked outside a syscall (e.g. SIGSTOP, a page fault).
    Blocked,
}

impl KernelState {
    /// The futex address this thread sleeps on, if it sleeps in futex.
    pub fn futex_addr(&self) -> Option<u64> {
        match *self {
            KernelState::InSyscall { nr, arg0, .. } if nr == SYS_FUTEX => Some(arg0),
            _ => None,
        }
    }
}

/// Parses the text of `/proc/PID/task/TID/syscall`: `running`, `-1 SP PC`, or `NR A0 A1 A2 A3 A4 A5 SP PC`.
pub fn parse_syscall(text: &[u8]) -> Option<KernelState> {
    let text = std::str::from_utf8(text).ok()?.trim_end();
    if text == "running" {
        return Some(KernelState::Running);
    }
    let mut fields = text.split(' ');
    let nr: i64 = fields.next()?.parse().ok()?;
    if nr < 0 {
        return Some(KernelState::Blocked);
    }
    let arg0 = parse_hex(fields.next()?)?;
    let arg1 = parse_hex(fields.next()?)?;
    Some(KernelState::InSyscall { nr, arg0, arg1 })
}

fn parse_hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.strip_prefix("0x")?, 16).ok()
}

/// What `schedstat` says: nanoseconds on a CPU and nanoseconds waiting on a run queue. The kernel adds
/// to the first when the thread leaves a CPU and at scheduler ticks, and to the second when a waiting
/// thread gets a CPU, so after a thread has run again both are exact for the time before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStat {
    pub cpu_ns: u64,
    pub run_queue_ns: u64,
}

pub fn parse_schedstat(text: &[u8]) -> Option<SchedStat> {
    let mut fields = std::str::from_utf8(text).ok()?.split_whitespace();
    let cpu_ns = fields.next()?.parse().ok()?;
    let run_queue_ns = fields.next()?.parse().ok()?;
    Some(SchedStat {
        cpu_ns,
        run_queue_ns,
    })
}

/// The open /proc files of one thread.
pub struct ThreadFiles {
    syscall: File,
    /// Absent without CONFIG_SCHED_INFO; ambiguous stretches are then taken as released.
    schedstat: Option<File>,
}

impl ThreadFiles {
    pub fn open(pid: u32, tid: u32) -> Result<ThreadFiles, ReadError> {
        let base = format!("/proc/{pid}/task/{tid}");
        let syscall = File::open(format!("{base}/syscall")).map_err(io_to_read_error)?;
        let schedstat = File::open(format!("{base}/schedstat")).ok();
        Ok(ThreadFiles { syscall, schedstat })
    }

    pub fn read_state(&self) -> Result<KernelState, ReadError> {
        let mut buf = [0u8; 256];
        let n = self
            .syscall
            .read_at(&mut buf, 0)
            .map_err(io_to_read_error)?;
        // An empty read means the thread has exited and its task is being torn down.
        if n == 0 {
            return Err(ReadError::Gone);
        }
        parse_syscall(&buf[..n]).ok_or(ReadError::Fault)
    }

    /// The thread's scheduler statistics, when the kernel exposes them.
    pub fn read_schedstat(&self) -> Option<SchedStat> {
        let mut buf = [0u8; 96];
        let n = self.schedstat.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_schedstat(&buf[..n])
    }
}

fn io_to_read_error(e: std::io::Error) -> ReadError {
    match e.raw_os_error() {
        Some(libc::ESRCH) | Some(libc::ENOENT) => ReadError::Gone,
        Some(libc::EPERM) | Some(libc::EACCES) => ReadError::Permission,
        Some(errno) => ReadError::Other(errno),
        None => ReadError::Fault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_running() {
        assert_eq!(parse_syscall(b"running\n"), Some(KernelState::Running));
    }

    #[test]
    fn parses_blocked_futex() {
        let line = format!("{SYS_FUTEX} 0x7f00aa10 0x189 0x0 0x0 0x0 0xffffffff 0x7ffd 0x7f01\n");
        let state = parse_syscall(line.as_bytes()).unwrap();
        assert_eq!(
            state,
            KernelState::InSyscall {
                nr: SYS_FUTEX,
                arg0: 0x7f00aa10,
                arg1: 0x189
            }
        );
        assert_eq!(state.futex_addr(), Some(0x7f00aa10));
    }

    #[test]
    fn parses_outside_syscall_and_rejects_garbage() {
        assert_eq!(
            parse_syscall(b"-1 0x7ffd 0x7f01\n"),
            Some(KernelState::Blocked)
        );
        assert_eq!(parse_syscall(b"7 zz"), None);
        assert_eq!(parse_syscall(b""), None);
    }

    #[test]
    fn reads_own_threads_state() {
        let files =
            ThreadFiles::open(std::process::id(), nix::unistd::gettid().as_raw() as u32).unwrap();
        // A thread reading its own file sees itself inside that very pread.
        match files.read_state() {
            Ok(KernelState::InSyscall { nr, .. }) => assert_eq!(nr, libc::SYS_pread64),
            other => panic!("unexpected state {other:?}"),
        }
        assert_eq!(
            parse_schedstat(b"692248 17 2\n"),
            Some(SchedStat {
                cpu_ns: 692248,
                run_queue_ns: 17
            })
        );
        assert!(files.read_schedstat().is_some());
    }

    #[test]
    fn sees_another_thread_blocked_in_read() {
        let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let blocked = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            let mut byte = [0u8; 1];
            std::io::Read::read(&mut &reader, &mut byte).unwrap();
        });
        let files = ThreadFiles::open(std::process::id(), tid_rx.recv().unwrap()).unwrap();
        // The thread reaches its read a moment after sending its tid; poll, bounded.
        let seen = (0..100_000).find_map(|_| match files.read_state() {
            Ok(KernelState::InSyscall { nr, .. })
                if nr == libc::SYS_read || nr == libc::SYS_recvfrom =>
            {
                Some(nr)
            }
            _ => {
                std::thread::yield_now();
                None
            }
        });
        std::io::Write::write_all(&mut &writer, b"x").unwrap();
        blocked.join().unwrap();
        assert!(seen.is_some(), "never saw the thread blocked in read");
    }
}
