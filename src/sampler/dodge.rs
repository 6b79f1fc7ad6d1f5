//! Keeping a real-time sampler off the CPU the GIL holder runs on.
//!
//! The kernel wakes a real-time thread on the CPU it last ran on whenever that CPU runs only ordinary
//! threads, even with another CPU idle. A sampler that once landed beside the GIL holder therefore
//! preempts it on every tick, and every thread waiting for the GIL waits that much longer. Every few
//! milliseconds the sampler looks up the holder's CPU (`/proc/PID/task/TID/stat`, field 39) and, when
//! it is its own, excludes that CPU from its own affinity. Only without `--cpus` (which fixes the
//! choice) and only for a `SCHED_FIFO` sampler (the kernel balances an ordinary one itself).

use std::fs::File;
use std::os::unix::fs::FileExt;

use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
use nix::unistd::Pid;

use crate::process::syscalls::{Syscall, count};

/// How often the holder's CPU is looked up: a stat read costs a few µs.
const CHECK_EVERY_NS: u64 = 2_000_000;

/// Moves a real-time sampler off the GIL holder's CPU, looked up every few milliseconds (module
/// docs).
pub struct CpuDodge {
    pid: u32,
    /// The CPUs the sampler may use at all (its affinity when sampling began).
    allowed: Vec<usize>,
    next_check_ns: u64,
    /// The stat files of the threads that held the GIL, opened once each: the GIL moves between
    /// the same few threads, and an open per hand-off was 100 `openat` a second (dispatch, 10 kHz).
    stat_files: Vec<(u32, File)>,
    /// The CPU currently left out of the sampler's affinity.
    avoiding: Option<usize>,
}

impl CpuDodge {
    /// `None` where there is nowhere to move to (fewer than two allowed CPUs).
    pub fn new(pid: u32) -> Option<CpuDodge> {
        let set = sched_getaffinity(Pid::from_raw(0)).ok()?;
        let allowed: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect();
        (allowed.len() >= 2).then_some(CpuDodge {
            pid,
            allowed,
            next_check_ns: 0,
            stat_files: Vec::new(),
            avoiding: None,
        })
    }

    /// Called once per sample with the holder's tid (ours, not the target namespace's); true when the
    /// sampler moved off the holder's CPU.
    pub fn check(&mut self, now_ns: u64, holder_tid: Option<u32>) -> bool {
        if now_ns < self.next_check_ns {
            return false;
        }
        self.next_check_ns = now_ns + CHECK_EVERY_NS;
        let Some(tid) = holder_tid else {
            return false;
        };
        let Some(holder_cpu) = self.stat_file(tid).and_then(read_cpu) else {
            // Gone, or the file is of an exited thread whose tid a new one took: opened afresh.
            self.stat_files.retain(|(t, _)| *t != tid);
            return false;
        };
        if self.avoiding == Some(holder_cpu) || sched_getcpu().ok() != Some(holder_cpu) {
            return false;
        }
        let mut set = CpuSet::new();
        for &cpu in self.allowed.iter().filter(|&&c| c != holder_cpu) {
            let _ = set.set(cpu);
        }
        count(Syscall::AffinityChange);
        let moved = sched_setaffinity(Pid::from_raw(0), &set).is_ok();
        if moved {
            self.avoiding = Some(holder_cpu);
        }
        moved
    }
}

impl CpuDodge {
    /// Threads whose stat files stay open; past it the oldest is closed (a pool of short-lived
    /// threads would otherwise keep files of exited threads open).
    const STAT_FILES_KEPT: usize = 64;

    /// `tid`'s stat file, opened the first time it is needed.
    fn stat_file(&mut self, tid: u32) -> Option<&File> {
        if let Some(at) = self.stat_files.iter().position(|(t, _)| *t == tid) {
            return Some(&self.stat_files[at].1);
        }
        count(Syscall::Open);
        let file = File::open(format!("/proc/{}/task/{tid}/stat", self.pid)).ok()?;
        if self.stat_files.len() >= Self::STAT_FILES_KEPT {
            self.stat_files.remove(0);
        }
        self.stat_files.push((tid, file));
        self.stat_files.last().map(|(_, f)| f)
    }
}

/// The CPU a thread last ran on, from the text of its stat file.
fn read_cpu(file: &File) -> Option<usize> {
    let mut buf = [0u8; 1024];
    count(Syscall::SchedstatRead);
    let n = file.read_at(&mut buf, 0).ok()?;
    parse_cpu(&buf[..n])
}

/// Field 39 of `/proc/PID/task/TID/stat`; the command name (field 2) may hold spaces and parentheses,
/// so fields are counted from the last `)`.
fn parse_cpu(text: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(text).ok()?;
    let after_name = &text[text.rfind(')')? + 1..];
    after_name.split_whitespace().nth(36)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cpu_after_a_name_with_spaces_and_parentheses() {
        let fields_3_to_38: Vec<String> = (3..=38).map(|f| f.to_string()).collect();
        let line = format!("4242 (a) b (c) {} 7 0 0\n", fields_3_to_38.join(" "));
        assert_eq!(parse_cpu(line.as_bytes()), Some(7));
        assert_eq!(parse_cpu(b"4242 (short) S 1 2"), None);
        assert_eq!(parse_cpu(b"no name"), None);
    }

    #[test]
    fn moves_off_the_holders_cpu() {
        if std::thread::available_parallelism().unwrap().get() < 2 {
            assert!(CpuDodge::new(std::process::id()).is_none());
            return;
        }
        let mut dodge = CpuDodge::new(std::process::id()).unwrap();
        let cpu = dodge.allowed[0];
        let pin = |cpu: usize| {
            let mut set = CpuSet::new();
            set.set(cpu).unwrap();
            sched_setaffinity(Pid::from_raw(0), &set).unwrap();
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let holder = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin(cpu);
                tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let holder_tid = tid_rx.recv().unwrap();
        let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
        pin(cpu);
        let moved = dodge.check(1, Some(holder_tid));
        let now = sched_getcpu().unwrap();
        let still_allowed = sched_getaffinity(Pid::from_raw(0))
            .unwrap()
            .is_set(cpu)
            .unwrap();
        // Looked at again within CHECK_EVERY_NS: nothing happens.
        let moved_again = dodge.check(2, Some(holder_tid));
        sched_setaffinity(Pid::from_raw(0), &before).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        holder.join().unwrap();
        assert!(moved, "did not move off the holder's CPU");
        assert!(!moved_again, "moved again within CHECK_EVERY_NS");
        assert_ne!(now, cpu, "still on the holder's CPU");
        assert!(!still_allowed, "the holder's CPU is still in the affinity");
    }

    #[test]
    fn reads_the_cpu_this_thread_runs_on() {
        let tid = nix::unistd::gettid().as_raw();
        let file = File::open(format!("/proc/self/task/{tid}/stat")).unwrap();
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert!(read_cpu(&file).is_some_and(|cpu| cpu < CpuSet::count()));
        // One CPU allowed: nowhere to move to.
        let mut one = CpuSet::new();
        one.set(0).unwrap();
        let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
        sched_setaffinity(Pid::from_raw(0), &one).unwrap();
        assert!(CpuDodge::new(std::process::id()).is_none());
        assert_eq!(read_cpu(&file), Some(0));
        sched_setaffinity(Pid::from_raw(0), &before).unwrap();
        assert_eq!(CpuDodge::new(std::process::id()).is_some(), cpus >= 2);
    }
}
