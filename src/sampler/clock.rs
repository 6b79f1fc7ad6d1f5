//! CLOCK_MONOTONIC time, absolute-deadline sleeps, and the monotonic → wall-clock offset the trace
//! metadata records.

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, ClockNanosleepFlags, clock_gettime, clock_nanosleep};

use crate::process::syscalls::{Syscall, count};

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    to_ns(clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available"))
}

/// CPU time the calling thread has used.
pub fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(to_ns)
        .unwrap_or(0)
}

fn realtime_ns() -> u64 {
    to_ns(clock_gettime(ClockId::CLOCK_REALTIME).expect("CLOCK_REALTIME is always available"))
}

fn to_ns(ts: TimeSpec) -> u64 {
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Sleeps until the absolute monotonic time `deadline_ns` (returns at once if it has passed). An
/// absolute deadline does not drift with the time each sample takes.
pub fn sleep_until(deadline_ns: u64) {
    let ts = TimeSpec::new(
        (deadline_ns / 1_000_000_000) as i64,
        (deadline_ns % 1_000_000_000) as i64,
    );
    count(Syscall::Sleep);
    // EINTR only shortens the sleep; the loop re-checks its stop flag and deadline anyway.
    let _ = clock_nanosleep(
        ClockId::CLOCK_MONOTONIC,
        ClockNanosleepFlags::TIMER_ABSTIME,
        &ts,
    );
}

/// `wall_ns - monotonic_ns`, measured as the tightest of a few bracketed reads.
pub fn monotonic_to_wall_offset_ns() -> i64 {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..8 {
        let before = monotonic_ns();
        let wall = realtime_ns();
        let after = monotonic_ns();
        let width = after - before;
        let offset = wall as i64 - (before + width / 2) as i64;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, offset));
        }
    }
    best.map(|(_, offset)| offset).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_until_a_past_deadline_returns_and_time_moves_forward() {
        let start = monotonic_ns();
        sleep_until(start.saturating_sub(1_000_000));
        assert!(monotonic_ns() >= start);
    }

    #[test]
    fn offset_maps_monotonic_to_wall_clock() {
        let offset = monotonic_to_wall_offset_ns();
        let wall = realtime_ns() as i64;
        let mapped = monotonic_ns() as i64 + offset;
        // Both are read within the same second; the offset is off by at most the reads in between.
        assert!(
            (wall - mapped).abs() < 1_000_000_000,
            "offset {offset} maps to {mapped}, wall is {wall}"
        );
    }
}
