//! Checks on the live process before a layout is trusted: that it is a user process (not gilsample
//! itself, a kernel thread or a zombie), that a free-threaded build runs with its GIL enabled, and
//! that the thread list read with the chosen layout walks to real threads of the process and to the
//! GIL's holder.
//!
//! Kept apart because these checks are what turns "a layout that parses" into "a layout that
//! matches this process": a wrong one must be refused here, not show up as a wrong trace.

use crate::error::{Error, Result};
use crate::process::kernel::ThreadFiles;
use crate::process::maps::proc_error;
use crate::process::memory::{MemorySource, ReadError};
use crate::process::tasks::TidMap;
use crate::python::layout::Flavour;
use crate::python::runtime::{ThreadRef, WalkError};
use crate::python::target::Target;
use crate::python::thread_list::ThreadWalker;

/// A free-threaded build may run with the GIL disabled; then there is nothing to record, and saying so
/// beats writing an empty trace.
pub(crate) fn check_gil_enabled(target: &Target) -> Result<()> {
    if target.flavour != Flavour::FreeThreaded && target.layout.flavour != Flavour::FreeThreaded {
        return Ok(());
    }
    let pid = target.pid;
    let Some(enabled) = target.layout.field("interp.gil_enabled") else {
        return Err(Error::Unsupported {
            pid,
            why: "a free-threaded build, and gilsample cannot tell whether its GIL is enabled"
                .into(),
        });
    };
    let main =
        crate::python::runtime::read_interpreters(&target.memory, &target.layout, target.runtime)
            .map_err(|e| walk_error(pid, e))?
            .last()
            .copied()
            .ok_or(Error::NotReady {
                pid,
                why: "no interpreter yet".into(),
            })?;
    let mut flag = [0u8; 4];
    target
        .memory
        .read_into(
            main.offset(enabled.offset).ok_or(Error::LayoutInvalid {
                pid,
                why: "GIL flag address overflows".into(),
            })?,
            &mut flag,
        )
        .map_err(|e| read_error(pid, e, "the GIL's enabled flag"))?;
    if u32::from_ne_bytes(flag) == 0 {
        return Err(Error::Unsupported {
            pid,
            why: format!(
                "Python {} is a free-threaded build running with the GIL disabled: there are no GIL waits or holds to record \
                 (start it with PYTHON_GIL=1 or -X gil=1 to record its GIL)",
                target.version
            ),
        });
    }
    Ok(())
}

/// Each thread's kernel state comes from `/proc/PID/task/TID/syscall`, which its owner alone may
/// read (mode 0400): a reader with CAP_SYS_PTRACE but another user's uid reads the memory and is
/// refused these files. Checked on the main thread at attach: without it such a recording had no
/// thread (each one's files refused) and answered "held 0%". Opened as the sampler opens them.
pub(crate) fn check_kernel_state_readable(pid: u32) -> Result<()> {
    match ThreadFiles::open(pid, pid) {
        Ok(_) => Ok(()),
        Err(e) => Err(read_error(
            pid,
            e,
            &format!("/proc/{pid}/task/{pid}/syscall"),
        )),
    }
}

pub(crate) fn check_is_user_process(pid: u32) -> Result<()> {
    if pid == std::process::id() {
        return Err(Error::Usage(format!(
            "process {pid} is gilsample itself; give the pid of a Python process"
        )));
    }
    let stat = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .map_err(|e| proc_error(pid, e, &format!("/proc/{pid}/stat")))?;
    const PF_KTHREAD: u32 = 0x0020_0000;
    if stat.flags & PF_KTHREAD != 0 {
        return Err(Error::NotPython {
            pid,
            why: "it is a kernel thread".into(),
        });
    }
    if stat.state == 'Z' {
        return Err(Error::NotPython {
            pid,
            why: "it is a zombie: it has exited and waits for its parent to reap it".into(),
        });
    }
    Ok(())
}

/// Checks the layout against the live process: the thread list walks to real tids of the process, and
/// a locked GIL's holder is one of those threads. A few attempts, spread over about a sixth of a
/// second, absorb a thread starting or exiting in the middle of the check.
pub(crate) fn validate(target: &Target, tid_map: &mut TidMap) -> Result<()> {
    let pid = target.pid;
    let mut walker = ThreadWalker::default();
    let mut threads: Vec<ThreadRef> = Vec::new();
    let mut last_problem = String::new();
    // Threads start and exit while we look (some programs churn hundreds a second), so each attempt
    // brackets the walk with two reads of the GIL words, and a tid counts as real when the process has
    // it now or had it a moment ago; the holder is checked only when no hand-off happened during the
    // walk. A wrong layout fails every attempt: its "tids" are garbage.
    let mut before = tid_map.their_tids()?;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(pause_before(attempt));
        }
        let word_before = target
            .read_gil_word()
            .map_err(|e| read_error(pid, e, "the GIL"))?;
        // A walk can step onto a thread state freed under it (its `next` is then garbage): that is
        // one failed attempt, like an unknown tid. A wrong layout fails all of them.
        match target.walk_threads(&mut walker, &mut threads) {
            Ok(()) => {}
            Err(WalkError::Corrupt(why)) => {
                last_problem = why;
                before = tid_map.their_tids()?;
                continue;
            }
            Err(WalkError::Read(ReadError::Fault)) => {
                last_problem = "a pointer in the thread list leads to unmapped memory".into();
                before = tid_map.their_tids()?;
                continue;
            }
            Err(e) => return Err(walk_error(pid, e)),
        }
        let word_after = target
            .read_gil_word()
            .map_err(|e| read_error(pid, e, "the GIL"))?;
        let after = tid_map.their_tids()?;
        if threads.is_empty() {
            return Err(Error::NotReady {
                pid,
                why: "no Python thread yet".into(),
            });
        }
        let unknown: Vec<u32> = threads
            .iter()
            .map(|t| t.tid)
            .filter(|t| !before.contains(t) && !after.contains(t))
            .collect();
        let steady = word_before == word_after;
        let holder_known = !steady
            || !word_after.locked
            || threads.iter().any(|t| t.tstate == word_after.last_holder);
        if unknown.is_empty() && holder_known {
            return Ok(());
        }
        last_problem = if !unknown.is_empty() {
            format!(
                "thread ids {unknown:?} read from the thread states are not threads of the process"
            )
        } else {
            format!(
                "the GIL holder {} is not in the thread list",
                word_after.last_holder
            )
        };
        before = after;
    }
    Err(Error::LayoutInvalid {
        pid,
        why: last_problem,
    })
}

const ATTEMPTS: u32 = 10;

/// An exiting thread leaves the list before it drops the GIL; preempted between the two (a loaded
/// machine, a target that churns threads), it keeps the GIL word steady with a holder the walk cannot
/// find for as long as it waits for a core. Back-to-back attempts all land in that window, so later
/// ones wait longer: 1, 2, 4 … 32 ms, 0.16 s in all, paid only when an attempt fails.
fn pause_before(attempt: u32) -> std::time::Duration {
    std::time::Duration::from_millis(1 << (attempt - 1).min(5))
}

pub(crate) fn read_error(pid: u32, e: ReadError, what: &str) -> Error {
    match e {
        ReadError::Permission => crate::process::access::permission_error(pid, what),
        ReadError::Gone => Error::ProcessGone { pid },
        ReadError::Fault => Error::LayoutInvalid {
            pid,
            why: format!("{what}: unreadable address"),
        },
        ReadError::Other(errno) => crate::process::access::target_errno_error(pid, errno, what),
    }
}

pub(crate) fn walk_error(pid: u32, e: WalkError) -> Error {
    match e {
        WalkError::Read(ReadError::Fault) => Error::LayoutInvalid {
            pid,
            why: "a pointer in the runtime leads to unmapped memory".into(),
        },
        WalkError::Read(e) => read_error(pid, e, "the memory (process_vm_readv)"),
        WalkError::NotInitialized => Error::NotReady {
            pid,
            why: "_PyRuntime has no interpreter or thread yet".into(),
        },
        WalkError::Corrupt(why) => Error::LayoutInvalid { pid, why },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_attempts_wait_longer_each_time_and_a_sixth_of_a_second_in_all() {
        let pauses: Vec<u128> = (1..ATTEMPTS).map(|a| pause_before(a).as_millis()).collect();
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]), "{pauses:?}");
        assert_eq!(pauses.iter().sum::<u128>(), 159, "{pauses:?}");
    }
}
