//! The classification rules on hand-made evidence: each rule, its boundaries, and the states it
//! must not give.
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
