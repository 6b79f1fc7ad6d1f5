//! Noticing that the target was stopped during the recording (SIGSTOP, Ctrl+Z, a debugger, a job
//! scheduler's suspend): none of its threads run then, the one holding the GIL keeps it, and every
//! other thread "waits" for it until the process is continued. Without this, a stop of 1.5 s was
//! blamed on the code the holder happened to run (report/stopped.rs leaves those spans out).
//!
//! The main thread's state is read from /proc every `CHECK_EVERY_NS`, not at every tick: about
//! 5 µs a read here (a schedstat read is 2 µs, a syscall-file read 3.4), so 0.5 ms a second, a
//! thousandth of what the ticks cost (0.2-0.6 CPU-s/s, docs/cost.md); a stop is told to within
//! that, not to a period.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::process::syscalls::{Syscall, count};

/// How often the target's state is read (at the first tick after): a stop is placed to within
/// this or a sampling period, whichever is longer.
pub const CHECK_EVERY_NS: u64 = 10_000_000;

/// Spans kept, at most: a recording with more is a debugger's stepping session, and report reads
/// no more (report/stopped.rs).
pub const MAX_SPANS: usize = 100_000;

/// A debugger's stop (`t`) must be seen at this many reads in a row to count: a process under
/// strace passes through `t` at every syscall it makes, for microseconds each. A stop by a signal
/// (`T`) counts at once.
const TRACE_STOP_READS: u32 = 2;

/// The spans during which the target was found stopped, from its main thread's state.
#[derive(Debug)]
pub struct StopWatch {
    /// `/proc/PID/task/PID/stat`: the main thread's state, without the sums over every thread
    /// that `/proc/PID/stat` makes. `None` where it could not be opened: nothing is told then.
    stat: Option<File>,
    /// When the watch began: a stop its first read finds began before it, so its span starts
    /// here, not at that read (which can come after the recording's first samples).
    start_ns: u64,
    checked: bool,
    next_check_ns: u64,
    /// The first read that found it stopped, how many reads in a row have, and the last state
    /// letter read (`T` or `t`).
    stopped_since: Option<(u64, u32, u8)>,
    spans: Vec<(u64, u64)>,
}

impl StopWatch {
    /// Watches `pid` from `start_ns` (monotonic), its first read then.
    pub fn new(pid: u32, start_ns: u64) -> StopWatch {
        StopWatch {
            stat: File::open(format!("/proc/{pid}/task/{pid}/stat")).ok(),
            start_ns,
            checked: false,
            next_check_ns: start_ns,
            stopped_since: None,
            spans: Vec::new(),
        }
    }

    /// At a tick at `now_ns`: reads the state where a check is due. Returns how it is stopped now
    /// (`stopped_now`).
    pub fn tick(&mut self, now_ns: u64) -> u8 {
        if now_ns >= self.next_check_ns {
            self.next_check_ns = now_ns + CHECK_EVERY_NS;
            if let Some(state) = self.read_state() {
                self.saw(state, now_ns);
            }
        }
        self.stopped_now()
    }

    /// One read's `state` (the letter /proc gives) at `now_ns`.
    fn saw(&mut self, state: u8, now_ns: u64) {
        let first = !std::mem::replace(&mut self.checked, true);
        if !matches!(state, b'T' | b't') {
            self.close(now_ns);
            return;
        }
        let began = if first { self.start_ns } else { now_ns };
        let (since, reads, _) = self.stopped_since.unwrap_or((began, 0, state));
        // A signal's stop counts from its first read; a debugger's once it has lasted.
        let reads = if state == b'T' {
            reads.max(TRACE_STOP_READS)
        } else {
            reads.saturating_add(1)
        };
        self.stopped_since = Some((since, reads, state));
    }

    /// The stop seen since `stopped_since` is over at `end_ns`: kept where it lasted.
    fn close(&mut self, end_ns: u64) {
        if let Some((since, reads, _)) = self.stopped_since.take()
            && reads >= TRACE_STOP_READS
            && end_ns > since
            && self.spans.len() < MAX_SPANS
        {
            self.spans.push((since, end_ns));
        }
    }

    /// The main thread's state letter, or `None` where it cannot be read (the process gone).
    fn read_state(&self) -> Option<u8> {
        let file = self.stat.as_ref()?;
        // `pid (comm) S ...`: comm is at most 16 bytes and may hold spaces and parentheses, so the
        // state follows the last `)`. 128 bytes reach it.
        let mut buf = [0u8; 128];
        count(Syscall::SchedstatRead);
        let n = file.read_at(&mut buf, 0).ok()?;
        state_letter(&buf[..n])
    }

    /// How the last read found it stopped, for long enough to count: `T` (a signal) or `t` (a
    /// debugger); 0 when it runs.
    pub fn stopped_now(&self) -> u8 {
        match self.stopped_since {
            Some((_, reads, letter)) if reads >= TRACE_STOP_READS => letter,
            _ => 0,
        }
    }

    /// The spans found, the one still open ending at `end_ns` (the recording's end).
    pub fn finish(mut self, end_ns: u64) -> Vec<(u64, u64)> {
        self.close(end_ns);
        self.spans
    }
}

/// The state letter of a /proc stat line: the first byte after `) ` following the last `)`.
fn state_letter(line: &[u8]) -> Option<u8> {
    let close = line.iter().rposition(|&b| b == b')')?;
    match line.get(close + 1..close + 3)? {
        [b' ', letter] if letter.is_ascii_alphabetic() => Some(*letter),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn watched(states: &[(u64, u8)], end_ns: u64) -> Vec<(u64, u64)> {
        watched_from(0, states, end_ns)
    }

    fn watched_from(start_ns: u64, states: &[(u64, u8)], end_ns: u64) -> Vec<(u64, u64)> {
        let mut watch = StopWatch {
            stat: None,
            start_ns,
            checked: false,
            next_check_ns: start_ns,
            stopped_since: None,
            spans: Vec::new(),
        };
        for &(t, state) in states {
            watch.saw(state, t);
        }
        watch.finish(end_ns)
    }

    #[test]
    fn a_signal_stop_is_a_span_from_its_first_read_to_the_first_read_that_runs() {
        let states = [(0, b'R'), (10 * MS, b'T'), (20 * MS, b'T'), (30 * MS, b'S')];
        assert_eq!(watched(&states, 40 * MS), vec![(10 * MS, 30 * MS)]);
        // One read is enough for SIGSTOP; one still open at the end ends with the recording.
        assert_eq!(
            watched(&[(0, b'S'), (10 * MS, b'T'), (20 * MS, b'R')], 40 * MS),
            vec![(10 * MS, 20 * MS)]
        );
        assert_eq!(
            watched(&[(0, b'T'), (10 * MS, b'T')], 40 * MS),
            vec![(0, 40 * MS)]
        );
    }

    #[test]
    fn a_stop_the_first_read_finds_began_before_the_watch() {
        // The recording began at 2 ms; its first read came at 5 ms, after its first samples, and
        // found the process stopped: it was stopped all along, not from 5 ms.
        let stopped = [(5 * MS, b'T'), (15 * MS, b'T')];
        assert_eq!(
            watched_from(2 * MS, &stopped, 40 * MS),
            vec![(2 * MS, 40 * MS)]
        );
        // A stop a later read finds began at that read, as far as the reads tell.
        let later = [(5 * MS, b'R'), (15 * MS, b'T')];
        assert_eq!(
            watched_from(2 * MS, &later, 40 * MS),
            vec![(15 * MS, 40 * MS)]
        );
    }

    #[test]
    fn a_debugger_stop_counts_once_seen_twice_in_a_row() {
        // strace: a `t` now and then between running reads is not a stop.
        let strace = [(0, b't'), (10 * MS, b'R'), (20 * MS, b't'), (30 * MS, b'S')];
        assert_eq!(watched(&strace, 40 * MS), Vec::new());
        let gdb = [(0, b'R'), (10 * MS, b't'), (20 * MS, b't'), (30 * MS, b'R')];
        assert_eq!(watched(&gdb, 40 * MS), vec![(10 * MS, 30 * MS)]);
    }

    #[test]
    fn the_state_follows_the_last_parenthesis_of_the_command_name() {
        assert_eq!(state_letter(b"42 (python3) S 1 42 42 0"), Some(b'S'));
        assert_eq!(state_letter(b"42 (a) b) T 1 42"), Some(b'T'));
        assert_eq!(state_letter(b"42 (python3"), None);
        assert_eq!(state_letter(b"42 (python3)"), None);
        assert_eq!(state_letter(b""), None);
    }
}
