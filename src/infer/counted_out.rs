//! When a tick may leave idle threads unread: the GIL's own waiter counts show that none of them is
//! inside a GIL wait (docs/classification.md, "Threads counted out").
//!
//! A thread found asleep in the same non-GIL wait for a while (a queue, `Event.wait`, a socket) is
//! released. It can change that only by getting a CPU and then entering the GIL: taking it (it is then
//! the holder, which every tick reads), or waiting for it. Waiting means sleeping on `gil.cond` (in
//! `take_gil`), and glibc counts every thread registered on a condition variable in its `__wrefs`,
//! read with the GIL's words in the tick's first system call. So when the count, read before and
//! after the other threads' kernel readings and equal, is no more than the threads that those
//! readings found asleep on `gil.cond`, every registered waiter is among the threads read, and none
//! of the unread ones waits. The GIL's mutex counts no sleepers, but its lock word says whether there
//! may be any (glibc stores 2 before a locker sleeps on it): the mutex must not be contended, and its
//! owner, where the layout records it, must be a thread that was read.
//!
//! `gil.switch_cond`'s count (`drop_gil`'s forced-switch wait) need not be explained. A thread waits
//! there only after checking, under `switch_mutex`, that it is still `last_holder`, and the thread that
//! takes the GIL next sets `last_holder` and signals under the same mutex. So a registered thread is
//! either still `last_holder`, which every tick reads, or signalled and on its way out of `drop_gil`,
//! still counted until it gets a CPU (on a busy machine, milliseconds: the count that refuted most
//! ticks before). An idle thread cannot be that one: to be in `drop_gil` it held the GIL, and a hold a
//! tick saw makes it a thread that runs, read at every tick for the next 20 ms; a hold between two
//! ticks and the tail of its hand-off are shorter than a period, unseen at any rate the sampler
//! keeps. What it does after the wait (`take_gil`'s wait, counted on `gil.cond`, or a sleep
//! elsewhere) is judged at the tick that finds it there.
//!
//! A read thread that slept on `gil.cond` at its last reading and is runnable now may still be
//! counted there: woken by a signal or by its wait's timeout, it leaves the count only once it gets a
//! CPU, which on a busy machine (or on the CPU the sampler itself is using) takes a while. It is taken
//! as one of the count's threads at that one tick: at the next, its last reading is runnable, so it
//! no longer stands for anyone unless it is found asleep there again.
//!
//! What this does not see, at that tick only: a thread that has woken and runs inside `take_gil` on
//! its way to the wait (it is counted once it sleeps there, or is the holder once it takes the GIL),
//! a read thread that entered and left a wait between the two count reads while an unread one
//! stayed in it, and an unread thread that began to wait while a read one, woken from the wait,
//! stood for it (the next tick counts the read one out of the wait). Each is seen at a later tick at which it is still waiting (tests/counted_out.rs
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
    for thread in threads {
        count_if_asleep_in_wait(&mut asleep, thread, ranges);
    }
    asleep
}

/// Adds `thread` to `asleep` where the kernel shows it asleep in one of the GIL's counted waits.
pub fn count_if_asleep_in_wait(
    asleep: &mut Waiters,
    thread: &ThreadSample,
    ranges: &GilWaitRanges,
) {
    let Some(addr) = thread.kernel.and_then(|k| k.futex_addr()) else {
        return;
    };
    if ranges.on_cond(addr) {
        asleep.take += 1;
    } else if ranges.on_switch_cond(addr) {
        asleep.drop += 1;
    }
}

/// The evidence of one tick about the threads it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadThreads {
    /// The read threads the kernel showed asleep in each GIL wait (`asleep_in_waits`).
    pub asleep: Waiters,
    /// The read threads, other than the holder, runnable now and asleep on `gil.cond` at their last
    /// reading before this tick: woken and perhaps still counted there (module docs).
    pub woken_from_cond: u32,
    /// The GIL mutex's owner (the target's tid, 0 for nobody) is unknown, nobody, or a read thread.
    pub mutex_owner_read: bool,
}

/// Whether the waiter counts, read first (`counted`) and again after the kernel readings (`again`),
/// prove that no thread outside `read` is inside a GIL wait (module docs: `take_gil`'s count decides,
/// `drop_gil`'s does not need to). `mutex_contended`: the
/// GIL mutex's lock word said threads may sleep on it (`None`: not known, as where the layout does
/// not place the mutex, and then the counts alone decide).
pub fn unread_are_outside_the_gil(
    counted: Waiters,
    again: Waiters,
    read: ReadThreads,
    mutex_contended: Option<bool>,
) -> bool {
    counted.take == again.take
        && counted.take <= read.asleep.take + read.woken_from_cond
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

    /// Whether counts that read `take`/`drop` both times, the mutex free, leave the unread outside.
    fn steady_counts_prove(read: ReadThreads, take: u32, drop: u32) -> bool {
        let counts = waiters(take, drop);
        unread_are_outside_the_gil(counts, counts, read, Some(false))
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
            woken_from_cond: 0,
            asleep: waiters(1, 0),
            mutex_owner_read: true,
        };
        assert!(steady_counts_prove(read, 1, 0));
        assert!(steady_counts_prove(read, 0, 0));
    }

    #[test]
    fn a_waiter_the_read_threads_do_not_explain_may_be_an_unread_one() {
        let read = ReadThreads {
            woken_from_cond: 0,
            asleep: waiters(1, 0),
            mutex_owner_read: true,
        };
        assert!(!steady_counts_prove(read, 2, 0));
    }

    #[test]
    fn a_read_thread_woken_from_take_gils_wait_may_stand_for_one_count() {
        let read = ReadThreads {
            woken_from_cond: 1,
            asleep: waiters(0, 0),
            mutex_owner_read: true,
        };
        assert!(steady_counts_prove(read, 1, 0));
        // Not for two.
        assert!(!steady_counts_prove(read, 2, 0));
    }

    #[test]
    fn drop_gils_waiter_needs_no_read_thread_to_explain_it() {
        // Two spinners on a busy machine: the holder runs, the thread it took over from was signalled
        // in drop_gil's switch wait but has not had a CPU since, so it still counts there; the
        // kernel shows it runnable, not asleep. It is the last holder or on its way out (module
        // docs), never an idle thread.
        let read = ReadThreads {
            woken_from_cond: 0,
            asleep: waiters(0, 0),
            mutex_owner_read: true,
        };
        for (counted, again) in [((0, 1), (0, 1)), ((0, 1), (0, 0)), ((0, 2), (0, 1))] {
            assert!(unread_are_outside_the_gil(
                waiters(counted.0, counted.1),
                waiters(again.0, again.1),
                read,
                Some(false)
            ));
        }
        // take_gil's count still decides.
        assert!(!steady_counts_prove(read, 1, 1));
    }

    #[test]
    fn counts_that_moved_between_the_reads_prove_nothing() {
        let read = ReadThreads {
            woken_from_cond: 0,
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
            woken_from_cond: 0,
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
            woken_from_cond: 0,
            asleep: waiters(0, 0),
            mutex_owner_read: false,
        };
        assert!(!steady_counts_prove(read, 0, 0));
    }
}
