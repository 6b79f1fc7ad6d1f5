//! When a tick may leave idle threads unread: the GIL's own waiter counts show that none of them is
//! inside a GIL wait (docs/classification.md, "Threads counted out").
//!
//! A thread found asleep in the same non-GIL wait for a while (a queue, `Event.wait`, a socket) is
//! released. It can change that only by getting a CPU and then entering the GIL: taking it (it is then
//! the holder, which every tick reads), or waiting for it. Waiting means sleeping on `gil.cond` (in
//! `take_gil`) or `gil.switch_cond` (in `drop_gil`), and glibc counts every thread registered on a
//! condition variable in its `__wrefs`, read with the GIL's words in the tick's first system call. So
//! when the counts, read before and after the other threads' kernel readings and equal, are no more
//! than the threads that those readings found asleep on each condition variable, every registered
//! waiter is among the threads read, and none of the unread ones waits. The GIL's mutex counts no
//! sleepers, but its lock word says whether there may be any (glibc stores 2 before a locker sleeps
//! on it): the mutex must not be contended, and its owner, where the layout records it, must be a
//! thread that was read.
//!
//! What this does not see, at that tick only: a thread that has woken and runs inside `take_gil` on
//! its way to the wait (it is counted once it sleeps there, or is the holder once it takes the GIL),
//! and a read thread that entered and left a wait between the two count reads while an unread one
//! stayed in it. Each is seen at a later tick at which it is still waiting (tests/counted_out.rs
//! checks on real streams that no thread is left unread at two ticks in a row inside the GIL).

use crate::infer::sample::ThreadSample;
use crate::observed::{GilWaitRanges, Waiters};

/// The threads among `threads` that the kernel shows asleep in each GIL wait: on `gil.cond`
/// (`take_gil`) and on `gil.switch_cond` (`drop_gil`), the two condition variables glibc counts.
pub fn asleep_in_waits<'a>(
    threads: impl Iterator<Item = &'a ThreadSample>,
    ranges: &GilWaitRanges,
) -> Waiters {
    let mut asleep = Waiters::default();
    for addr in threads.filter_map(|t| t.kernel.and_then(|k| k.futex_addr())) {
        if ranges.on_cond(addr) {
            asleep.take += 1;
        } else if ranges.on_switch_cond(addr) {
            asleep.drop += 1;
        }
    }
    asleep
}

/// The evidence of one tick about the threads it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadThreads {
    /// The read threads the kernel showed asleep in each GIL wait (`asleep_in_waits`).
    pub asleep: Waiters,
    /// The GIL mutex's owner (the target's tid, 0 for nobody) is unknown, nobody, or a read thread.
    pub mutex_owner_read: bool,
}

/// Whether the waiter counts, read first (`counted`) and again after the kernel readings (`again`),
/// prove that no thread outside `read` is inside a GIL wait (module docs). `mutex_contended`: the
/// GIL mutex's lock word said threads may sleep on it (`None`: not known, as where the layout does
/// not place the mutex, and then the counts alone decide).
pub fn unread_are_outside_the_gil(
    counted: Waiters,
    again: Waiters,
    read: ReadThreads,
    mutex_contended: Option<bool>,
) -> bool {
    counted == again
        && counted.take <= read.asleep.take
        && counted.drop <= read.asleep.drop
        && read.mutex_owner_read
        && mutex_contended != Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::RemoteAddr;
    use crate::observed::KernelState;

    const COND: u64 = 0x1000;
    const SWITCH: u64 = 0x2000;

    fn ranges() -> GilWaitRanges {
        GilWaitRanges {
            cond: Some((COND, COND + 48)),
            mutex: Some((COND + 48, COND + 88)),
            switch_cond: Some((SWITCH, SWITCH + 48)),
            switch_mutex: Some((SWITCH + 48, SWITCH + 88)),
            cond_waiter_words: None,
        }
    }

    fn asleep_on(addr: u64) -> ThreadSample {
        ThreadSample {
            tid: 1,
            tstate: RemoteAddr(8),
            kernel: Some(KernelState::InSyscall {
                nr: 202,
                arg0: addr,
                arg1: 128,
            }),
            ..ThreadSample::default()
        }
    }

    fn waiters(take: u32, drop: u32) -> Waiters {
        Waiters { take, drop }
    }

    #[test]
    fn threads_asleep_on_each_condition_variable_are_counted_apart_from_the_mutexes_and_other_waits()
     {
        let threads = [
            asleep_on(COND + 8),
            asleep_on(COND + 8),
            asleep_on(SWITCH + 4),
            asleep_on(COND + 48), // the GIL's mutex: glibc's condition counts do not include it
            asleep_on(0x9000),    // a queue's lock
            ThreadSample {
                kernel: Some(KernelState::Running),
                ..ThreadSample::default()
            },
        ];
        assert_eq!(asleep_in_waits(threads.iter(), &ranges()), waiters(2, 1));
    }

    #[test]
    fn counts_the_read_threads_explain_leave_the_unread_outside() {
        let read = ReadThreads {
            asleep: waiters(1, 0),
            mutex_owner_read: true,
        };
        assert!(unread_are_outside_the_gil(
            waiters(1, 0),
            waiters(1, 0),
            read,
            Some(false)
        ));
        assert!(unread_are_outside_the_gil(
            waiters(0, 0),
            waiters(0, 0),
            read,
            Some(false)
        ));
    }

    #[test]
    fn a_waiter_the_read_threads_do_not_explain_may_be_an_unread_one() {
        let read = ReadThreads {
            asleep: waiters(1, 0),
            mutex_owner_read: true,
        };
        assert!(!unread_are_outside_the_gil(
            waiters(2, 0),
            waiters(2, 0),
            read,
            Some(false)
        ));
        assert!(!unread_are_outside_the_gil(
            waiters(1, 1),
            waiters(1, 1),
            read,
            Some(false)
        ));
    }

    #[test]
    fn counts_that_moved_between_the_reads_prove_nothing() {
        let read = ReadThreads {
            asleep: waiters(2, 0),
            mutex_owner_read: true,
        };
        assert!(!unread_are_outside_the_gil(
            waiters(1, 0),
            waiters(2, 0),
            read,
            Some(false)
        ));
    }

    #[test]
    fn a_contended_gil_mutex_may_have_an_unread_thread_asleep_on_it() {
        let read = ReadThreads {
            asleep: waiters(1, 0),
            mutex_owner_read: true,
        };
        assert!(!unread_are_outside_the_gil(
            waiters(1, 0),
            waiters(1, 0),
            read,
            Some(true)
        ));
        assert!(unread_are_outside_the_gil(
            waiters(1, 0),
            waiters(1, 0),
            read,
            None
        ));
    }

    #[test]
    fn a_mutex_owner_that_was_not_read_may_be_an_unread_thread_in_take_gil() {
        let read = ReadThreads {
            asleep: waiters(0, 0),
            mutex_owner_read: false,
        };
        assert!(!unread_are_outside_the_gil(
            waiters(0, 0),
            waiters(0, 0),
            read,
            Some(false)
        ));
    }
}
