//! The system calls a sampler thread makes, counted where they are made: what a tick costs is mostly
//! its syscalls (docs/cost.md), so the trace reports them per sample and the benchmarks print them.
//! Thread-local: a sampler thread charges each of its targets with the calls made in its ticks
//! (sampler/shared_thread.rs).

use std::cell::Cell;

use serde::{Deserialize, Serialize};

/// The system calls a sampler thread made over a recording, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyscallCounts {
    /// `process_vm_readv` (or `pread` of /proc/PID/mem): reads of target memory.
    pub memory_reads: u64,
    /// `pread` of a thread's /proc syscall file.
    pub syscall_file_reads: u64,
    /// `pread` of a thread's /proc schedstat or stat file.
    pub schedstat_reads: u64,
    /// `openat` of /proc files while sampling.
    pub opens: u64,
    /// `sched_setaffinity`: the sampler moving off the GIL holder's CPU.
    pub affinity_changes: u64,
    /// `clock_nanosleep`: one per tick.
    pub sleeps: u64,
}

/// A kind of system call the sampler counts.
#[derive(Clone, Copy, Debug)]
pub enum Syscall {
    /// A read of the target's memory.
    MemoryRead,
    /// A `pread` of a thread's /proc syscall file.
    SyscallFileRead,
    /// A `pread` of a thread's /proc schedstat or stat file.
    SchedstatRead,
    /// An `openat` of a /proc file.
    Open,
    /// A `sched_setaffinity` of the sampler thread.
    AffinityChange,
    /// A `clock_nanosleep` to the next tick.
    Sleep,
}

thread_local! {
    static COUNTS: Cell<SyscallCounts> = const { Cell::new(SyscallCounts {
        memory_reads: 0,
        syscall_file_reads: 0,
        schedstat_reads: 0,
        opens: 0,
        affinity_changes: 0,
        sleeps: 0,
    }) };
}

/// One call made by this thread.
pub fn count(call: Syscall) {
    COUNTS.with(|counts| {
        let mut c = counts.get();
        match call {
            Syscall::MemoryRead => c.memory_reads += 1,
            Syscall::SyscallFileRead => c.syscall_file_reads += 1,
            Syscall::SchedstatRead => c.schedstat_reads += 1,
            Syscall::Open => c.opens += 1,
            Syscall::AffinityChange => c.affinity_changes += 1,
            Syscall::Sleep => c.sleeps += 1,
        }
        counts.set(c);
    });
}

/// What this thread has made so far.
pub fn counted() -> SyscallCounts {
    COUNTS.with(Cell::get)
}

impl SyscallCounts {
    /// The calls made since `before` (an earlier `counted()` of the same thread).
    pub fn since(&self, before: &SyscallCounts) -> SyscallCounts {
        SyscallCounts {
            memory_reads: self.memory_reads - before.memory_reads,
            syscall_file_reads: self.syscall_file_reads - before.syscall_file_reads,
            schedstat_reads: self.schedstat_reads - before.schedstat_reads,
            opens: self.opens - before.opens,
            affinity_changes: self.affinity_changes - before.affinity_changes,
            sleeps: self.sleeps - before.sleeps,
        }
    }

    /// Every counted system call.
    pub fn total(&self) -> u64 {
        self.memory_reads
            + self.syscall_file_reads
            + self.schedstat_reads
            + self.opens
            + self.affinity_changes
            + self.sleeps
    }
}

/// Calls added up: a sampler thread charges each of its targets with the calls of its ticks.
impl std::ops::AddAssign for SyscallCounts {
    fn add_assign(&mut self, more: SyscallCounts) {
        self.memory_reads += more.memory_reads;
        self.syscall_file_reads += more.syscall_file_reads;
        self.schedstat_reads += more.schedstat_reads;
        self.opens += more.opens;
        self.affinity_changes += more.affinity_changes;
        self.sleeps += more.sleeps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_thread_and_per_kind() {
        let before = counted();
        count(Syscall::MemoryRead);
        count(Syscall::MemoryRead);
        count(Syscall::Sleep);
        std::thread::spawn(|| count(Syscall::Open)).join().unwrap();
        let made = counted().since(&before);
        assert_eq!(made.memory_reads, 2);
        assert_eq!(made.sleeps, 1);
        assert_eq!(made.opens, 0);
        assert_eq!(made.total(), 3);
    }
}
