//! What the kernel says a thread is doing: `/proc/PID/task/TID/syscall` (running, or the syscall it is
//! blocked in and its arguments) and `/proc/PID/task/TID/schedstat` (CPU time used so far).
//!
//! Both files are opened once per thread and re-read with `pread` at offset 0 on every sample, into a
//! fixed buffer: no allocation on the sampling path. Reading them needs ptrace-read access to the
//! target, the same permission as reading its memory; BPF is never involved.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::observed::{KernelState, SchedStat};
use crate::process::memory::ReadError;
use crate::process::syscalls::{Syscall, count};

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

/// Parses `/proc/PID/task/TID/schedstat` (CPU ns, run-queue ns, timeslices); `None` where it is not
/// that.
pub fn parse_schedstat(text: &[u8]) -> Option<SchedStat> {
    let mut fields = std::str::from_utf8(text).ok()?.split_whitespace();
    let cpu_ns = fields.next()?.parse().ok()?;
    let run_queue_ns = fields.next()?.parse().ok()?;
    let timeslices = fields.next()?.parse().ok()?;
    Some(SchedStat {
        cpu_ns,
        run_queue_ns,
        timeslices,
    })
}

/// A thread's kernel state at one sample, and whether its syscall file had to be read for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelReading {
    /// The syscall file was read; `None` where the read failed.
    Read(Option<KernelState>),
    /// schedstat proved the thread still in the same sleep, or still running, so the last state
    /// stands without a read.
    Unchanged(Option<KernelState>),
}

/// What `ThreadFiles::read_state_since` keeps between samples for one thread: what proves its last
/// reading still current, asleep or running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateProof {
    /// schedstat's timeslices, read just before the last syscall-file reading that said asleep.
    timeslices: Option<u64>,
    /// Syscall-file readings in a row that found the same wait.
    same: u8,
    /// The last sample was proven unchanged asleep.
    held: bool,
    /// schedstat's CPU time and timeslices, read just before the last syscall-file reading that
    /// said running.
    running: Option<(u64, u64)>,
    /// Samples proven running since that reading.
    proven_running: u8,
}

impl StateProof {
    /// Identical readings of a sleeping thread in a row before its sleep is proven by schedstat
    /// instead.
    pub const SAME_BEFORE_PROVING: u8 = 8;

    /// schedstat's count of CPU arrivals during the sleep the last reading found, once the proof
    /// covers that sleep (`None` before, or when the thread is not asleep).
    pub fn timeslices_asleep(&self) -> Option<u64> {
        self.timeslices
    }

    /// Samples in a row a running thread is proven still running before its syscall file is read
    /// anyway: 1 ms at 10 kHz. The proof can be wrong in one kernel race (`running_key`), and a
    /// sleeper's schedstat then never moves: this bounds that error to these samples. A thread that
    /// really runs on loses its proof at its next scheduler tick (every 1–4 ms) anyway.
    pub const RUNNING_PROOFS_IN_A_ROW: u8 = 10;

    /// Whether `now`, a schedstat read at this sample, proves a thread whose `last` reading said
    /// running still running (`running_key`).
    fn proves_running(&self, last: Option<KernelState>, now: SchedStat) -> bool {
        last == Some(KernelState::Running)
            && self.proven_running < StateProof::RUNNING_PROOFS_IN_A_ROW
            && self.running.is_some()
            && self.running == running_key(now)
    }
}

/// What proves a running thread still running: its CPU time and its count of CPU arrivals. The
/// kernel adds to the CPU time whenever the thread leaves a CPU (and at its ticks while it runs),
/// and counts an arrival whenever it gets one; a thread that runs cannot fall asleep without leaving
/// its CPU, nor a runnable one without getting a CPU first. So where both read the same as just
/// before a syscall-file reading that said running, the thread has neither left nor got a CPU
/// since, and is running still. 0 arrivals: the kernel keeps no count, and nothing is proven.
///
/// The exception: a wake-up that marks the thread for preemption also tells the scheduler to skip
/// its next clock update, having just brought the thread's CPU time up to that clock. Should the
/// thread then block before it is preempted (a write that wakes a reader, then waits for room),
/// its CPU time grows by nothing as it leaves, and no arrival is counted: it reads as running
/// while asleep. The sampler's two reads must fall in that window, and the error is bounded
/// by `StateProof::RUNNING_PROOFS_IN_A_ROW`.
fn running_key(stat: SchedStat) -> Option<(u64, u64)> {
    (stat.timeslices > 0).then_some((stat.cpu_ns, stat.timeslices))
}

/// The open /proc files of one thread.
pub struct ThreadFiles {
    syscall: File,
    /// Absent without CONFIG_SCHED_INFO; ambiguous stretches are then taken as released.
    schedstat: Option<File>,
}

impl ThreadFiles {
    /// Opens the syscall and schedstat files of thread `tid` of `pid` (our PID namespace), kept
    /// open for the recording.
    pub fn open(pid: u32, tid: u32) -> Result<ThreadFiles, ReadError> {
        let base = format!("/proc/{pid}/task/{tid}");
        count(Syscall::Open);
        count(Syscall::Open);
        let syscall = File::open(format!("{base}/syscall")).map_err(io_to_read_error)?;
        let schedstat = File::open(format!("{base}/schedstat")).ok();
        Ok(ThreadFiles { syscall, schedstat })
    }

    /// Reads the syscall file: what the thread is doing in the kernel now.
    pub fn read_state(&self) -> Result<KernelState, ReadError> {
        let mut buf = [0u8; 256];
        count(Syscall::SyscallFileRead);
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

    /// The thread's kernel state: read from its syscall file, or proven unchanged since `last`; with
    /// the schedstat reading taken before it, where one was.
    ///
    /// Asleep: a thread asleep in a syscall cannot leave it without getting a CPU, and every time a
    /// thread gets a CPU the kernel counts a timeslice in schedstat. So when that count, read just
    /// before the syscall file said "asleep", has not moved, the thread is still inside the same
    /// call (woken perhaps, not yet run) and `last` stands. A schedstat read is cheaper than a
    /// syscall-file read, which takes the runqueue lock of the thread's CPU; but a thread that runs
    /// between most samples would pay for both, so the proof is tried only for a thread found in the
    /// same wait `SAME_BEFORE_PROVING` times in a row, and for as long as it keeps holding (docs/cost.md,
    /// "What keeps the sampler cheap").
    ///
    /// Running: where the caller wants the thread's schedstat at this sample anyway
    /// (`schedstat_wanted`: the GIL's holder, a thread the engine asked about), it is read first, and
    /// a running thread whose CPU time and timeslices read as they did before the reading that found
    /// it running is running still (`running_key`): the syscall file, with its ptrace check at every
    /// read, is left unread.
    pub fn read_state_since(
        &self,
        last: Option<KernelState>,
        proof: &mut StateProof,
        schedstat_wanted: bool,
    ) -> (KernelReading, Option<SchedStat>) {
        let asleep = |k: &Option<KernelState>| {
            matches!(
                k,
                Some(KernelState::InSyscall { .. } | KernelState::Blocked)
            )
        };
        let try_sleep =
            asleep(&last) && (proof.held || proof.same >= StateProof::SAME_BEFORE_PROVING);
        let before = if try_sleep || schedstat_wanted {
            self.read_schedstat()
        } else {
            None
        };
        if let Some(now) = before {
            let slept_through = try_sleep && proof.timeslices == Some(now.timeslices);
            let ran_through = proof.proves_running(last, now);
            if slept_through || ran_through {
                proof.held = slept_through;
                proof.proven_running += u8::from(ran_through);
                return (KernelReading::Unchanged(last), before);
            }
        }
        let failed = try_sleep && before.is_some() && proof.timeslices.is_some();
        let state = self.read_state().ok();
        proof.held = false;
        proof.same = if !failed && asleep(&state) && state == last {
            proof.same.saturating_add(1)
        } else {
            0
        };
        // A count of 0 means the kernel keeps none, and proves nothing. Kept only where the sleep
        // proof was tried: the engine reads it (`ThreadSample::slices_before_sleep`).
        proof.timeslices = before
            .filter(|_| try_sleep)
            .map(|s| s.timeslices)
            .filter(|&n| n > 0 && asleep(&state));
        proof.running = before
            .filter(|_| state == Some(KernelState::Running))
            .and_then(running_key);
        proof.proven_running = 0;
        (KernelReading::Read(state), before)
    }

    /// For `CHECK_RUNNING_PROOF`: the syscall file read, then schedstat again. Where that proves the
    /// thread running by the same key as `proof` (the schedstat that proved it), the reading lies
    /// between two proofs: whether it said running. `None` where the second proof fails.
    pub fn still_running_between(&self, proof: SchedStat) -> Option<bool> {
        let reading = self.read_state();
        let after = self.read_schedstat()?;
        let key = running_key(after);
        (key.is_some() && key == running_key(proof))
            .then(|| reading.ok() == Some(KernelState::Running))
    }

    /// The thread's scheduler statistics, when the kernel exposes them.
    pub fn read_schedstat(&self) -> Option<SchedStat> {
        let mut buf = [0u8; 96];
        let file = self.schedstat.as_ref()?;
        count(Syscall::SchedstatRead);
        let n = file.read_at(&mut buf, 0).ok()?;
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
    use crate::observed::SYS_FUTEX;

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
                run_queue_ns: 17,
                timeslices: 2
            })
        );
        assert_eq!(parse_schedstat(b"692248 17\n"), None);
        assert!(files.read_schedstat().is_some());
    }

    #[test]
    fn a_sleeper_that_has_not_run_is_proven_unchanged_and_reread_once_it_has() {
        let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            let mut byte = [0u8; 1];
            // Two reads: woken by the first byte, it runs and blocks again.
            for _ in 0..2 {
                std::io::Read::read(&mut &reader, &mut byte).unwrap();
                done_tx.send(()).unwrap();
            }
        });
        let files = ThreadFiles::open(std::process::id(), tid_rx.recv().unwrap()).unwrap();
        let blocked = |files: &ThreadFiles| {
            (0..100_000).any(|_| {
                let in_read = matches!(files.read_state(),
                    Ok(KernelState::InSyscall { nr, .. }) if nr == libc::SYS_read || nr == libc::SYS_recvfrom);
                if !in_read {
                    std::thread::yield_now();
                }
                in_read
            })
        };
        assert!(blocked(&files), "never saw the thread blocked in read");
        let mut last = None;
        let mut proof = StateProof::default();
        let next = |last: &mut Option<KernelState>, proof: &mut StateProof| {
            let (reading, _) = files.read_state_since(*last, proof, false);
            let (KernelReading::Read(state) | KernelReading::Unchanged(state)) = reading;
            *last = state;
            reading
        };
        // Read until found in the same wait often enough to be worth proving, and once more to learn
        // the count from before a reading; from then on it is proven.
        let reads = (0..20)
            .take_while(|_| matches!(next(&mut last, &mut proof), KernelReading::Read(Some(_))))
            .count();
        assert_eq!(reads, usize::from(StateProof::SAME_BEFORE_PROVING) + 2);
        assert!(matches!(last, Some(KernelState::InSyscall { .. })));
        assert_eq!(
            next(&mut last, &mut proof),
            KernelReading::Unchanged(last),
            "asleep and not run since: no syscall-file read needed"
        );
        std::io::Write::write_all(&mut &writer, b"x").unwrap();
        done_rx.recv().unwrap();
        assert!(
            blocked(&files),
            "never saw the thread blocked in read again"
        );
        assert!(
            matches!(next(&mut last, &mut proof), KernelReading::Read(_)),
            "it ran: read again"
        );
        std::io::Write::write_all(&mut &writer, b"x").unwrap();
        sleeper.join().unwrap();
    }

    #[test]
    fn running_is_proven_by_the_same_cpu_time_and_arrivals_for_a_bounded_run_of_samples() {
        let stat = |cpu_ns, timeslices| SchedStat {
            cpu_ns,
            run_queue_ns: 0,
            timeslices,
        };
        let read_at = |s: SchedStat| StateProof {
            running: running_key(s),
            ..StateProof::default()
        };
        let running = Some(KernelState::Running);
        let proof = read_at(stat(500, 7));
        assert!(proof.proves_running(running, stat(500, 7)));
        // Left a CPU (its time moved), or got one (an arrival): read again.
        assert!(!proof.proves_running(running, stat(501, 7)));
        assert!(!proof.proves_running(running, stat(500, 8)));
        // A last reading that was not running: nothing to prove.
        let asleep = Some(KernelState::Blocked);
        assert!(!proof.proves_running(asleep, stat(500, 7)));
        // A kernel that counts no arrivals proves nothing.
        assert!(!read_at(stat(500, 0)).proves_running(running, stat(500, 0)));
        // At most `RUNNING_PROOFS_IN_A_ROW` samples, then the file is read anyway.
        let worn = StateProof {
            proven_running: StateProof::RUNNING_PROOFS_IN_A_ROW,
            ..proof
        };
        assert!(!worn.proves_running(running, stat(500, 7)));
    }

    #[test]
    fn a_running_thread_that_fell_asleep_is_not_proven_running() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let spinning = stop.clone();
        let spinner = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            while !spinning.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            std::io::Read::read(&mut &reader, &mut [0u8; 1]).unwrap();
        });
        let files = ThreadFiles::open(std::process::id(), tid_rx.recv().unwrap()).unwrap();
        let mut proof = StateProof::default();
        // Spinning, it reads as running (on a CPU or waiting for one), with schedstat read first.
        let (first, before) = files.read_state_since(None, &mut proof, true);
        // Stopped before any assertion, so that a failing one leaves no thread spinning.
        stop.store(true, Ordering::Relaxed);
        assert_eq!(first, KernelReading::Read(Some(KernelState::Running)));
        assert!(
            before.is_some(),
            "schedstat wanted: read before the syscall file"
        );
        let asleep = (0..100_000).any(|_| {
            let state = files.read_state();
            let in_read = matches!(state,
                Ok(KernelState::InSyscall { nr, .. }) if nr == libc::SYS_read || nr == libc::SYS_recvfrom);
            if !in_read {
                std::thread::yield_now();
            }
            in_read
        });
        assert!(asleep, "never saw the thread blocked in read");
        // It left its CPU to fall asleep: its CPU time moved, and the proof does not hold.
        let (then, _) = files.read_state_since(Some(KernelState::Running), &mut proof, true);
        assert!(
            matches!(
                then,
                KernelReading::Read(Some(KernelState::InSyscall { .. }))
            ),
            "{then:?}"
        );
        // Without schedstat wanted it is not read: the syscall file is.
        let (plain, none) = files.read_state_since(Some(KernelState::Running), &mut proof, false);
        assert!(matches!(plain, KernelReading::Read(_)) && none.is_none());
        std::io::Write::write_all(&mut &writer, b"x").unwrap();
        spinner.join().unwrap();
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
