//! `--cpus`: keeping gilsample's threads on chosen CPUs.
//!
//! On a machine with cores to spare, the sampler costs the target little; sharing the target's cores,
//! it competes with them. Measured (scripts/bench_overhead.py, CPython 3.12, 4 spinners, 10 kHz,
//! 2 cores): target slowdown 1.44× with sampler and target on the same core, 1.03× with the sampler
//! on the other one. Pinning to a housekeeping core makes that choice explicit.

use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// CPUs from a list such as `3` or `0,2-3`.
pub fn parse_cpu_list(text: &str) -> std::result::Result<Vec<usize>, String> {
    let bad = || format!("{text:?}: give CPU numbers like 3 or 0,2-3");
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let first: usize = first.trim().parse().map_err(|_| bad())?;
        let last: usize = last.trim().parse().map_err(|_| bad())?;
        if first > last || last >= CpuSet::count() {
            return Err(bad());
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Refuses, before anything is launched, a list none of whose CPUs this process may run on
/// (`pin_own_threads` would fail after the launch).
pub fn check_usable(cpus: &[usize]) -> Result<()> {
    let allowed = nix::sched::sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| Error::io("reading gilsample's own CPU affinity", e.into()))?;
    if cpus.iter().any(|&cpu| allowed.is_set(cpu).unwrap_or(false)) {
        return Ok(());
    }
    Err(usable_error(
        cpus,
        "none of them is among the CPUs gilsample may use",
    ))
}

fn usable_error(cpus: &[usize], why: impl std::fmt::Display) -> Error {
    Error::Usage(format!(
        "--cpus {}: none of these CPUs can be used here ({why}); this machine has {} CPUs",
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ))
}

/// Restricts every thread of gilsample, and every thread started from now on, to `cpus`.
pub fn pin_own_threads(cpus: &[usize]) -> Result<()> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .map_err(|_| Error::Usage(format!("--cpus: CPU {cpu} does not exist")))?;
    }
    // The calling thread first: its failure is the one to report; new threads inherit its mask.
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| usable_error(cpus, e))?;
    let mut tids = std::collections::HashSet::new();
    if crate::process::tasks::read_tids(std::process::id(), &mut tids).is_ok() {
        for tid in tids {
            let _ = sched_setaffinity(Pid::from_raw(tid as i32), &set);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(parse_cpu_list("3"), Ok(vec![3]));
        assert_eq!(parse_cpu_list("0,2-3,2"), Ok(vec![0, 2, 3]));
        for bad in ["", "a", "3-1", "1-", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpus_outside_the_allowed_set_are_refused_up_front() {
        let allowed = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap();
        let usable: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap())
            .collect();
        assert!(check_usable(&usable[..1]).is_ok());
        let unusable: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| !allowed.is_set(c).unwrap())
            .take(1)
            .collect();
        let err = check_usable(&unusable).unwrap_err().to_string();
        assert!(err.contains("--cpus"), "{err}");
    }
}
