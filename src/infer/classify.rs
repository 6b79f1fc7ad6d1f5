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
    /// (`StateProof`): how many times it has got a CPU since (`None`: not known).
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
mod tests;
