//! Classifying one thread at one sample from what memory and the kernel say, and settling the
//! stretches a single sample cannot decide.
//!
//! The rules, numbered 1–10, and the evidence for each are described once, in
//! docs/classification.md; this module and the sampler cite them by number. In short: memory says
//! who holds the GIL, the kernel says who sleeps where (rules 1–5, `classify`); a running thread that
//! does not hold the GIL is decided by who owns the GIL's mutex (6), the hand-off count (7) or glibc's
//! waiter counts (8), else, when it was last seen in a GIL state, it is held back as a stretch (9:
//! `settle_in_hindsight`, `woke_twice_since_holding`, `back_in_take_after_a_switch_request`,
//! `settle_stretch`) or released (10).

use crate::infer::intervals::GilState;
use crate::infer::rules::Decision;
use crate::observed::{GilWaitRanges, Waiters, in_range};
use crate::observed::{KernelState, SchedStat};

/// What the sampler knows about one thread at one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadEvidence {
    /// `gil.locked` and `last_holder` is this thread.
    pub holds: bool,
    /// `last_holder` is this thread but the GIL is unlocked: it held the GIL last and let it go.
    pub released_last: bool,
    /// The thread's `/proc/PID/task/TID/syscall` state at this sample; `None` where it could not be
    /// read.
    pub kernel: Option<KernelState>,
    /// The thread's last definite state.
    pub previous: Option<GilState>,
    /// How far `switch_number` advanced since that definite sample (`None`: no such sample).
    pub handoffs_since_previous: Option<u64>,
    /// What the waiter counts say about the threads running without the GIL at this sample.
    pub census: Census,
    /// Whether glibc records this thread as the owner of the GIL's mutex (`None`: not known).
    pub owns_gil_mutex: Option<bool>,
    /// It was the owner at its previous sample and is not now.
    pub left_gil_mutex: bool,
    /// The last hand-off is younger than the switch interval: no thread can have asked the holder
    /// to switch since, so `drop_gil` has no forced-switch wait to be in.
    pub no_switch_request: bool,
    /// For a thread last seen asleep in `take_gil`'s wait long enough for schedstat to prove it
    /// (`SleepProof`): how many times it has got a CPU since (`None`: not known).
    pub arrivals_since_take_sleep: Option<u64>,
}

/// A thread last seen asleep in `take_gil` that has got a CPU this many times since, and that the
/// waiter counts no longer place in the wait, has taken the GIL and let it go again, and is taken
/// to have lost its CPU inside that `drop_gil` (rule 8).
pub const ARRIVALS_THROUGH_A_HOLD: u64 = 3;

/// What the GIL's waiter counts say about the threads that run, or wait for a CPU, without holding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Census {
    /// No counts, or they cannot tell who is where.
    Unknown,
    /// None of them is inside a GIL wait.
    NoneWaiting,
    /// All of them are inside `take_gil`'s wait.
    AllTaking,
    /// All of them are inside `drop_gil`'s forced-switch wait.
    AllDropping,
}

/// Compares the waiter counts (`waiters`, read before and after the kernel readings and equal) with the
/// threads the kernel shows asleep in each wait (`asleep`). The rest of the waiters are among the
/// `running` threads that do not hold the GIL. `all_read`: every thread's kernel state was read at
/// this sample (one read earlier might have woken into a wait since).
pub fn census(waiters: Waiters, asleep: Waiters, running: usize, all_read: bool) -> Census {
    if asleep.take > waiters.take || asleep.drop > waiters.drop {
        // A thread began waiting between the reads: the counts are from another moment.
        return Census::Unknown;
    }
    let taking = (waiters.take - asleep.take) as usize;
    let dropping = (waiters.drop - asleep.drop) as usize;
    match (taking, dropping) {
        (0, 0) => Census::NoneWaiting,
        _ if !all_read || running == 0 => Census::Unknown,
        (n, 0) if n == running => Census::AllTaking,
        (0, n) if n == running => Census::AllDropping,
        _ => Census::Unknown,
    }
}

/// How a thread's state at one sample was found: read directly, placed by one of the inferring
/// rules (each a `Decision`, counted in the trace's metadata under its row of `rules::DECISIONS`), or
/// held back for rule 9 to settle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Memory or the kernel said so directly (rules 1–5).
    Direct,
    /// A running thread that rule 6, 7, 8 or 10 placed.
    Rule(Decision),
    /// Running after a GIL state: decided later by `settle_stretch` (rule 9). `after` is the state
    /// the stretch follows: the thread's last definite state, or `Drop` for one that has taken the
    /// GIL and let it go since (rule 8).
    Ambiguous {
        /// The state the stretch follows.
        after: GilState,
    },
}

impl Basis {
    /// Its name where it is written out (`replay --explain`): `Direct`, the decision's name, or
    /// `Ambiguous`.
    pub fn name(&self) -> &'static str {
        match self {
            Basis::Direct => "Direct",
            Basis::Rule(decision) => decision.name(),
            Basis::Ambiguous { .. } => "Ambiguous",
        }
    }

    /// The number of the rule in docs/classification.md that decided, where one rule did.
    pub fn rule(&self) -> Option<u8> {
        match self {
            Basis::Direct => None,
            Basis::Rule(decision) => Some(decision.info().rule),
            Basis::Ambiguous { .. } => Some(9),
        }
    }
}

/// Asleep on `gil.cond` but not where its waiters sleep: inside `pthread_cond_signal`.
fn signalling(addr: u64, gil: &GilWaitRanges) -> bool {
    gil.cond_waiter_words
        .is_some_and(|words| gil.on_cond(addr) && !in_range(addr, Some(words)))
}

/// Decides one thread's GIL state at one sample from its evidence and where the GIL's waits lie
/// (rules 1–10, docs/classification.md), and says on what basis: read directly or by which rule.
pub fn classify(evidence: &ThreadEvidence, gil: &GilWaitRanges) -> (GilState, Basis) {
    let Some(kernel) = evidence.kernel else {
        return (GilState::Unknown, Basis::Direct);
    };
    let futex = kernel.futex_addr();
    if evidence.holds {
        let on_mutex = futex.is_some_and(|a| gil.on_mutex(a) || signalling(a, gil));
        let state = if on_mutex {
            GilState::Drop
        } else {
            GilState::Hold
        };
        return (state, Basis::Direct);
    }
    if let Some(addr) = futex {
        if signalling(addr, gil) {
            return (GilState::Drop, Basis::Direct);
        }
        if gil.in_take_gil(addr) {
            return (GilState::Take, Basis::Direct);
        }
        if gil.in_drop_gil(addr) {
            return (GilState::Drop, Basis::Direct);
        }
    }
    if kernel != KernelState::Running {
        return (GilState::Released, Basis::Direct);
    }
    match (evidence.owns_gil_mutex, evidence.released_last) {
        (Some(true), true) => return (GilState::Drop, Basis::Rule(Decision::RunningByGilMutex)),
        (Some(true), false) => return (GilState::Take, Basis::Rule(Decision::RunningByGilMutex)),
        (Some(false), true) if evidence.no_switch_request => {
            return (GilState::Released, Basis::Rule(Decision::RunningByGilMutex));
        }
        (Some(false) | None, _) => {}
    }
    let handoffs = evidence.handoffs_since_previous;
    let one_elsewhere = handoffs == Some(1) && !evidence.released_last;
    match evidence.previous {
        Some(GilState::Take) if handoffs == Some(0) || one_elsewhere => {
            (GilState::Take, Basis::Rule(Decision::RunningStillWaiting))
        }
        Some(GilState::Drop) if handoffs == Some(0) && !evidence.left_gil_mutex => {
            (GilState::Drop, Basis::Rule(Decision::RunningStillWaiting))
        }
        _ if evidence.census == Census::AllTaking => {
            (GilState::Take, Basis::Rule(Decision::RunningCounted))
        }
        _ if evidence.census == Census::AllDropping => {
            (GilState::Drop, Basis::Rule(Decision::RunningCounted))
        }
        // A former holder may still be inside `drop_gil` outside its wait, preempted by the thread
        // its hand-off woke: the counts cannot tell, the stretch rule can.
        Some(GilState::Take) if evidence.census == Census::NoneWaiting => {
            if evidence
                .arrivals_since_take_sleep
                .is_some_and(|n| n >= ARRIVALS_THROUGH_A_HOLD)
            {
                (
                    GilState::Released,
                    Basis::Ambiguous {
                        after: GilState::Drop,
                    },
                )
            } else {
                (GilState::Released, Basis::Rule(Decision::RunningCounted))
            }
        }
        Some(after @ (GilState::Take | GilState::Hold | GilState::Drop)) => {
            (GilState::Released, Basis::Ambiguous { after })
        }
        _ => (GilState::Released, Basis::Rule(Decision::RunningReleased)),
    }
}

/// Asleep in a syscall other than a wait on the GIL (rule 5): such a thread cannot start waiting for
/// the GIL, or take it, without first waking up and running.
pub fn asleep_elsewhere(kernel: &KernelState, gil: &GilWaitRanges) -> bool {
    match kernel {
        KernelState::InSyscall { .. } => !kernel.futex_addr().is_some_and(|a| gil.contains(a)),
        _ => false,
    }
}

/// Decides an ambiguous stretch from the first definite sample after it, where the GIL's hand-off count
/// leaves one answer (rule 9, before the CPU arrival is consulted). `before` and `next` are the definite
/// states either side; `handoffs` is how far `switch_number` moved from the sample before the stretch
/// to the one after. `switch_number` moves only when a thread other than the last holder takes the GIL.
/// - `Hold` or `Drop`, then `Drop`, one hand-off: the hand-off was this thread's own (another took the
///   GIL it let go), and it cannot have entered another `drop_gil` without holding again, which takes a
///   second hand-off: it was inside the same `drop_gil` throughout.
/// - `Hold`, then `Hold`, no hand-off: nobody else took the GIL in between, so the thread never waited
///   in `take_gil` (the GIL was free whenever it asked) and its `drop_gil` had no hand-off to wait for:
///   released throughout, but for microseconds.
pub fn settle_in_hindsight(before: GilState, next: GilState, handoffs: u64) -> Option<GilState> {
    match (before, next, handoffs) {
        (GilState::Hold | GilState::Drop, GilState::Drop, 1) => Some(GilState::Drop),
        (GilState::Hold, GilState::Hold, 0) => Some(GilState::Released),
        _ => None,
    }
}

/// Whether a thread that held the GIL at the sample that read `at_hold`, and runs without it at the
/// sample that read `now`, has meanwhile gone to sleep twice and been woken straight onto a CPU each
/// time: schedstat counted two or more arrivals on a CPU and not a nanosecond of run-queue wait. A
/// thread preempted and resumed waits on the run queue for as long as its preemptor runs, and that
/// wait is added when it gets the CPU back; an arrival that adds nothing is a wake-up that took the CPU
/// at once (the scheduler skips its clock update then). So both departures were sleeps. After letting
/// the GIL go, the only sleep that ends `drop_gil` is its wait for the hand-off; a second sleep comes
/// after it, and a thread woken from that and waiting for a CPU again is in `take_gil`. Measured on
/// per-sample dumps against the truth (CPython 3.9–3.13; docs/accuracy.md, "What limits it"): of the samples
/// this decides, `fastswitch` 8,018 in `take_gil` and 1 not; `mixed` and `contention` 482 and 2.
pub fn woke_twice_since_holding(at_hold: SchedStat, now: SchedStat) -> bool {
    now.timeslices >= at_hold.timeslices.saturating_add(2)
        && now.run_queue_ns == at_hold.run_queue_ns
}

/// Whether a thread that held the GIL at the sample that read `at_hold`, long enough that a waiter
/// may have asked it to switch, has got a CPU three times or more by the sample that read `now`. A
/// holder asked to switch lets the GIL go in the interpreter loop and waits in `drop_gil` until
/// another thread takes it (a sleep), and that loop asks for the GIL again at once: in `take_gil`
/// it sleeps until the GIL comes back. Both wake-ups, and a preemption between them, are arrivals;
/// a thread preempted and resumed inside `drop_gil` gets that many only by losing its CPU over and
/// over. Measured on per-sample dumps against the truth (CPython 3.12; docs/classification.md, rule 9):
/// `contention` 520 samples in `take_gil` and 12 not, `fastswitch` 82 and 12, `mixed` 85 and 0;
/// on `dispatch`, whose holds are too short to be asked, 3,094 such samples were released, which
/// the hold's length keeps out.
pub fn back_in_take_after_a_switch_request(at_hold: SchedStat, now: SchedStat) -> bool {
    now.timeslices >= at_hold.timeslices.saturating_add(3)
}

/// When a thread in an ambiguous stretch got a CPU: schedstat's run-queue time had grown at the sample
/// `seen_ns` (not yet at `before_ns`, the sample before), by `queued_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Monotonic nanoseconds of the sample before `seen_ns`, at which the run-queue time had not
    /// yet grown.
    pub before_ns: u64,
    /// Monotonic nanoseconds of the first sample at which the run-queue time had grown.
    pub seen_ns: u64,
    /// Nanoseconds the run-queue time grew by: how long the thread waited for a CPU.
    pub queued_ns: u64,
}

/// Decides an ambiguous stretch (rule 9) that began at sample `first_ns` after definite state `before`.
/// A thread preempted inside `take_gil`/`drop_gil` waits on a run queue from then on, and the kernel
/// adds that wait to schedstat when the thread gets a CPU (`arrival`). If the wait began when the
/// stretch did, the thread stayed in the GIL call until it got the CPU: `Take` after `Take`, and
/// after `Hold` or `Drop` the `drop_gil` it was letting the GIL go in. Returns that state and the last
/// sample in it; the rest of the stretch, and a stretch whose thread ran first, is released (native
/// code without the GIL).
pub fn settle_stretch(
    before: GilState,
    first_ns: u64,
    arrival: Option<Arrival>,
    period_ns: u64,
) -> Option<(GilState, u64)> {
    let state = match before {
        GilState::Take => GilState::Take,
        GilState::Hold | GilState::Drop => GilState::Drop,
        GilState::Released | GilState::Unknown => return None,
    };
    let arrival = arrival?;
    let got_cpu = arrival.before_ns + arrival.seen_ns.saturating_sub(arrival.before_ns) / 2;
    let began_waiting = got_cpu.saturating_sub(arrival.queued_ns);
    (began_waiting <= first_ns + period_ns / 2).then_some((state, arrival.before_ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::SYS_FUTEX;

    const GIL: GilWaitRanges = GilWaitRanges {
        cond: Some((1032, 1080)),
        mutex: Some((1080, 1120)),
        switch_cond: Some((1120, 1168)),
        switch_mutex: Some((1168, 1208)),
        cond_waiter_words: None,
    };

    /// The same GIL with glibc 2.25–2.40's condition variable: waiters on bytes 40–47 of `cond`.
    const GLIBC_GIL: GilWaitRanges = GilWaitRanges {
        cond_waiter_words: Some((1072, 1080)),
        ..GIL
    };

    #[test]
    fn asleep_on_the_cond_outside_its_waiter_words_is_signalling_it() {
        // __g_refs (byte 16): a signaller waiting for woken waiters to leave the old group.
        assert_eq!(
            classify(&evidence(futex(1032 + 16)), &GLIBC_GIL).0,
            GilState::Drop
        );
        let holder = ThreadEvidence {
            holds: true,
            ..evidence(futex(1032 + 16))
        };
        assert_eq!(classify(&holder, &GLIBC_GIL).0, GilState::Drop);
        // Its waiters' words and the mutex stay take_gil.
        assert_eq!(
            classify(&evidence(futex(1032 + 40)), &GLIBC_GIL).0,
            GilState::Take
        );
        assert_eq!(
            classify(&evidence(futex(1080)), &GLIBC_GIL).0,
            GilState::Take
        );
        // Without knowing the C library, all of the cond is take_gil.
        assert_eq!(
            classify(&evidence(futex(1032 + 16)), &GIL).0,
            GilState::Take
        );
    }

    fn futex(addr: u64) -> Option<KernelState> {
        Some(KernelState::InSyscall {
            nr: SYS_FUTEX,
            arg0: addr,
            arg1: 0x189,
        })
    }

    fn evidence(kernel: Option<KernelState>) -> ThreadEvidence {
        ThreadEvidence {
            holds: false,
            released_last: false,
            kernel,
            previous: None,
            handoffs_since_previous: None,
            census: Census::Unknown,
            owns_gil_mutex: None,
            left_gil_mutex: false,
            no_switch_request: false,
            arrivals_since_take_sleep: None,
        }
    }

    fn running(previous: GilState, handoffs: u64, released_last: bool) -> ThreadEvidence {
        ThreadEvidence {
            previous: Some(previous),
            handoffs_since_previous: Some(handoffs),
            released_last,
            ..evidence(Some(KernelState::Running))
        }
    }

    #[test]
    fn holder_holds_even_when_blocked_elsewhere() {
        let e = ThreadEvidence {
            holds: true,
            ..evidence(Some(KernelState::InSyscall {
                nr: 0,
                arg0: 3,
                arg1: 0,
            }))
        };
        assert_eq!(classify(&e, &GIL).0, GilState::Hold);
    }

    #[test]
    fn holder_on_the_gil_mutex_is_dropping() {
        let e = ThreadEvidence {
            holds: true,
            ..evidence(futex(1080))
        };
        assert_eq!(classify(&e, &GIL).0, GilState::Drop);
    }

    #[test]
    fn sleeper_on_cond_or_mutex_is_taking() {
        assert_eq!(
            classify(&evidence(futex(1032 + 40)), &GIL).0,
            GilState::Take
        );
        assert_eq!(classify(&evidence(futex(1080)), &GIL).0, GilState::Take);
    }

    #[test]
    fn sleeper_on_switch_cond_is_dropping() {
        assert_eq!(
            classify(&evidence(futex(1120 + 40)), &GIL).0,
            GilState::Drop
        );
    }

    #[test]
    fn sleeper_on_another_futex_or_syscall_is_released() {
        assert_eq!(classify(&evidence(futex(5000)), &GIL).0, GilState::Released);
        let read = Some(KernelState::InSyscall {
            nr: 0,
            arg0: 0,
            arg1: 0,
        });
        assert_eq!(classify(&evidence(read), &GIL).0, GilState::Released);
        assert_eq!(
            classify(&evidence(Some(KernelState::Blocked)), &GIL).0,
            GilState::Released
        );
    }

    #[test]
    fn no_kernel_reading_is_unknown() {
        assert_eq!(classify(&evidence(None), &GIL).0, GilState::Unknown);
    }

    #[test]
    fn woken_waiter_with_no_handoff_since_is_still_taking() {
        assert_eq!(
            classify(&running(GilState::Take, 0, false), &GIL),
            (GilState::Take, Basis::Rule(Decision::RunningStillWaiting))
        );
    }

    #[test]
    fn woken_waiter_is_still_taking_when_the_one_handoff_went_elsewhere() {
        assert_eq!(
            classify(&running(GilState::Take, 1, false), &GIL).0,
            GilState::Take
        );
    }

    #[test]
    fn waiter_that_may_have_taken_and_dropped_is_ambiguous() {
        assert_eq!(
            classify(&running(GilState::Take, 1, true), &GIL).1,
            Basis::Ambiguous {
                after: GilState::Take
            }
        );
        assert_eq!(
            classify(&running(GilState::Take, 2, false), &GIL).1,
            Basis::Ambiguous {
                after: GilState::Take
            }
        );
    }

    #[test]
    fn woken_dropper_stays_dropping_until_a_handoff() {
        assert_eq!(
            classify(&running(GilState::Drop, 0, true), &GIL).0,
            GilState::Drop
        );
        assert_eq!(
            classify(&running(GilState::Drop, 1, true), &GIL).1,
            Basis::Ambiguous {
                after: GilState::Drop
            }
        );
    }

    #[test]
    fn former_holder_running_without_the_gil_is_ambiguous() {
        assert_eq!(
            classify(&running(GilState::Hold, 1, false), &GIL).1,
            Basis::Ambiguous {
                after: GilState::Hold
            }
        );
    }

    #[test]
    fn running_thread_not_in_a_gil_state_before_is_released() {
        assert_eq!(
            classify(&running(GilState::Released, 0, false), &GIL),
            (GilState::Released, Basis::Rule(Decision::RunningReleased))
        );
        assert_eq!(
            classify(&evidence(Some(KernelState::Running)), &GIL).1,
            Basis::Rule(Decision::RunningReleased)
        );
    }

    const P: u64 = 100_000;

    fn arrival(before_ns: u64, seen_ns: u64, queued_ns: u64) -> Option<Arrival> {
        Some(Arrival {
            before_ns,
            seen_ns,
            queued_ns,
        })
    }

    #[test]
    fn a_thread_queued_from_the_stretch_start_stays_in_the_gil_call_until_it_runs() {
        // Stretch from 1.0 ms; the thread got a CPU between 2.0 and 2.1 ms after 1.1 ms queued.
        let got = arrival(2_000_000, 2_100_000, 1_100_000);
        assert_eq!(
            settle_stretch(GilState::Hold, 1_000_000, got, P),
            Some((GilState::Drop, 2_000_000))
        );
        assert_eq!(
            settle_stretch(GilState::Take, 1_000_000, got, P),
            Some((GilState::Take, 2_000_000))
        );
        assert_eq!(
            settle_stretch(GilState::Drop, 1_000_000, got, P),
            Some((GilState::Drop, 2_000_000))
        );
    }

    #[test]
    fn a_thread_that_ran_before_it_was_queued_is_released() {
        // Queued for only the last 0.3 ms of a stretch that began at 1.0 ms: it ran first.
        let got = arrival(2_000_000, 2_100_000, 300_000);
        assert_eq!(settle_stretch(GilState::Hold, 1_000_000, got, P), None);
    }

    #[test]
    fn a_thread_never_queued_is_released() {
        assert_eq!(settle_stretch(GilState::Hold, 1_000_000, None, P), None);
        assert_eq!(settle_stretch(GilState::Take, 1_000_000, None, P), None);
    }

    fn counts(take: u32, drop: u32) -> Waiters {
        Waiters { take, drop }
    }

    #[test]
    fn no_waiter_beyond_the_sleepers_means_no_running_thread_waits() {
        assert_eq!(
            census(counts(2, 0), counts(2, 0), 3, true),
            Census::NoneWaiting
        );
        // Holds even when some thread was not read: it could only add a waiter.
        assert_eq!(
            census(counts(1, 0), counts(1, 0), 3, false),
            Census::NoneWaiting
        );
    }

    #[test]
    fn as_many_waiters_as_running_threads_means_all_wait() {
        assert_eq!(
            census(counts(3, 0), counts(1, 0), 2, true),
            Census::AllTaking
        );
        assert_eq!(
            census(counts(0, 1), counts(0, 0), 1, true),
            Census::AllDropping
        );
    }

    #[test]
    fn counts_that_cannot_say_who_are_unknown() {
        // One waiter among two running threads.
        assert_eq!(census(counts(1, 0), counts(0, 0), 2, true), Census::Unknown);
        // An unread thread may be the waiter.
        assert_eq!(
            census(counts(1, 0), counts(0, 0), 1, false),
            Census::Unknown
        );
        // More asleep than counted: the reads are from different moments.
        assert_eq!(census(counts(1, 0), counts(2, 0), 1, true), Census::Unknown);
        // Waiters in both waits.
        assert_eq!(census(counts(1, 1), counts(0, 0), 2, true), Census::Unknown);
    }

    fn counted(previous: GilState, census: Census) -> (GilState, Basis) {
        classify(
            &ThreadEvidence {
                census,
                ..running(previous, 2, false)
            },
            &GIL,
        )
    }

    #[test]
    fn census_decides_running_threads() {
        assert_eq!(
            counted(GilState::Take, Census::NoneWaiting),
            (GilState::Released, Basis::Rule(Decision::RunningCounted))
        );
        assert_eq!(
            counted(GilState::Released, Census::AllTaking),
            (GilState::Take, Basis::Rule(Decision::RunningCounted))
        );
        assert_eq!(
            counted(GilState::Hold, Census::AllDropping),
            (GilState::Drop, Basis::Rule(Decision::RunningCounted))
        );
        // A former holder may be preempted inside drop_gil outside its wait.
        assert_eq!(
            counted(GilState::Hold, Census::NoneWaiting).1,
            Basis::Ambiguous {
                after: GilState::Hold
            }
        );
    }

    #[test]
    fn a_waiter_that_got_a_cpu_three_times_since_its_sleep_left_through_drop_gil() {
        let after_sleep = |arrivals| ThreadEvidence {
            census: Census::NoneWaiting,
            arrivals_since_take_sleep: arrivals,
            ..running(GilState::Take, 2, false)
        };
        // Woken once and still running: it took the GIL and runs on without it.
        assert_eq!(
            classify(&after_sleep(Some(1)), &GIL),
            (GilState::Released, Basis::Rule(Decision::RunningCounted))
        );
        assert_eq!(
            classify(&after_sleep(Some(2)), &GIL),
            (GilState::Released, Basis::Rule(Decision::RunningCounted))
        );
        // Three arrivals or more: a stretch that starts in the drop_gil of the hold in between.
        for arrivals in [3, 7] {
            assert_eq!(
                classify(&after_sleep(Some(arrivals)), &GIL),
                (
                    GilState::Released,
                    Basis::Ambiguous {
                        after: GilState::Drop
                    }
                )
            );
        }
        // Without a proven sleep to count from, the counts decide as before.
        assert_eq!(
            classify(&after_sleep(None), &GIL),
            (GilState::Released, Basis::Rule(Decision::RunningCounted))
        );
    }

    #[test]
    fn three_arrivals_since_a_hold_are_back_in_take_gil() {
        let at = |timeslices, run_queue_ns| SchedStat {
            cpu_ns: 0,
            run_queue_ns,
            timeslices,
        };
        assert!(back_in_take_after_a_switch_request(at(5, 100), at(8, 900)));
        assert!(back_in_take_after_a_switch_request(at(5, 100), at(9, 100)));
        assert!(!back_in_take_after_a_switch_request(at(5, 100), at(7, 900)));
        // A count that went backwards (another thread reusing the tid) is not three arrivals.
        assert!(!back_in_take_after_a_switch_request(at(9, 100), at(2, 100)));
    }

    #[test]
    fn owning_the_gil_mutex_is_inside_the_call() {
        let owner = |previous, released_last| ThreadEvidence {
            owns_gil_mutex: Some(true),
            ..running(previous, 0, released_last)
        };
        // Preempted in drop_gil between letting the GIL go and unlocking its mutex.
        assert_eq!(
            classify(&owner(GilState::Hold, true), &GIL),
            (GilState::Drop, Basis::Rule(Decision::RunningByGilMutex))
        );
        // Any other owner is inside take_gil.
        assert_eq!(
            classify(&owner(GilState::Released, false), &GIL),
            (GilState::Take, Basis::Rule(Decision::RunningByGilMutex))
        );
        // Asleep elsewhere, the owner word is not believed.
        let asleep = ThreadEvidence {
            kernel: Some(KernelState::Blocked),
            ..owner(GilState::Hold, true)
        };
        assert_eq!(classify(&asleep, &GIL), (GilState::Released, Basis::Direct));
    }

    #[test]
    fn letting_the_gil_go_and_its_mutex_is_past_drop_gil() {
        let past = |previous| ThreadEvidence {
            owns_gil_mutex: Some(false),
            no_switch_request: true,
            ..running(previous, 0, true)
        };
        for previous in [GilState::Hold, GilState::Drop] {
            assert_eq!(
                classify(&past(previous), &GIL),
                (GilState::Released, Basis::Rule(Decision::RunningByGilMutex))
            );
        }
        // Without the owner, the same thread is ambiguous.
        let unknown = ThreadEvidence {
            owns_gil_mutex: None,
            ..past(GilState::Hold)
        };
        assert_eq!(
            classify(&unknown, &GIL).1,
            Basis::Ambiguous {
                after: GilState::Hold
            }
        );
        // A hold older than the switch interval may have been asked to switch: it may be on its
        // way into drop_gil's forced-switch wait.
        let old_hold = ThreadEvidence {
            no_switch_request: false,
            ..past(GilState::Hold)
        };
        assert_eq!(
            classify(&old_hold, &GIL).1,
            Basis::Ambiguous {
                after: GilState::Hold
            }
        );
        // Someone took the GIL since: the forced-switch wait may have ended, it stays ambiguous.
        let handed_off = ThreadEvidence {
            owns_gil_mutex: Some(false),
            no_switch_request: true,
            ..running(GilState::Hold, 1, false)
        };
        assert_eq!(
            classify(&handed_off, &GIL).1,
            Basis::Ambiguous {
                after: GilState::Hold
            }
        );
    }

    #[test]
    fn a_drop_that_left_the_gil_mutex_is_no_longer_proven() {
        let still = running(GilState::Drop, 0, false);
        assert_eq!(
            classify(&still, &GIL),
            (GilState::Drop, Basis::Rule(Decision::RunningStillWaiting))
        );
        let left = ThreadEvidence {
            left_gil_mutex: true,
            ..still
        };
        assert_eq!(
            classify(&left, &GIL).1,
            Basis::Ambiguous {
                after: GilState::Drop
            }
        );
    }

    #[test]
    fn proof_from_the_switch_number_comes_before_the_census() {
        let e = ThreadEvidence {
            census: Census::NoneWaiting,
            ..running(GilState::Take, 0, false)
        };
        assert_eq!(
            classify(&e, &GIL),
            (GilState::Take, Basis::Rule(Decision::RunningStillWaiting))
        );
    }

    #[test]
    fn two_wakeups_straight_onto_a_cpu_since_holding_mean_take_gil() {
        let at_hold = SchedStat {
            cpu_ns: 1_000,
            run_queue_ns: 500,
            timeslices: 10,
        };
        let after = |timeslices, run_queue_ns| SchedStat {
            cpu_ns: 2_000,
            run_queue_ns,
            timeslices,
        };
        assert!(woke_twice_since_holding(at_hold, after(12, 500)));
        assert!(woke_twice_since_holding(at_hold, after(15, 500)));
        // One arrival: the sleep may still be drop_gil's own wait.
        assert!(!woke_twice_since_holding(at_hold, after(11, 500)));
        // Waited on a run queue: one departure may have been a preemption inside drop_gil.
        assert!(!woke_twice_since_holding(at_hold, after(12, 501)));
        // Where the kernel keeps no statistics everything reads 0.
        let none = SchedStat {
            cpu_ns: 0,
            run_queue_ns: 0,
            timeslices: 0,
        };
        assert!(!woke_twice_since_holding(none, none));
    }

    #[test]
    fn the_handoff_count_settles_a_stretch_where_it_leaves_one_answer() {
        use GilState::*;
        // Let go, another took it, still in drop_gil: the same drop_gil throughout.
        assert_eq!(settle_in_hindsight(Hold, Drop, 1), Some(Drop));
        assert_eq!(settle_in_hindsight(Drop, Drop, 1), Some(Drop));
        // Let go and took back with nobody in between: never waited.
        assert_eq!(settle_in_hindsight(Hold, Hold, 0), Some(Released));
        // Two hand-offs: it may have held again in between.
        assert_eq!(settle_in_hindsight(Hold, Drop, 2), None);
        // No hand-off yet still dropping: it may have taken the GIL back and be in a second drop_gil.
        assert_eq!(settle_in_hindsight(Hold, Drop, 0), None);
        // drop_gil then take_gil, with native work or not in between: the count cannot split it.
        assert_eq!(settle_in_hindsight(Hold, Take, 1), None);
        assert_eq!(settle_in_hindsight(Take, Take, 1), None);
        assert_eq!(settle_in_hindsight(Take, Hold, 1), None);
    }
}
