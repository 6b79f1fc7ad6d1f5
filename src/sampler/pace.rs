//! The tick loop's own state from one tick to the next: when the next tick is due, when the thread
//! list was walked and when it is walked again, and how long reads have been failing.

/// The loop's own state from one tick to the next.
pub(super) struct Pace {
    /// When the next tick is due (CLOCK_MONOTONIC): deadlines stay on one grid of periods.
    pub(super) deadline: u64,
    /// The next tick starts no sooner than this, a quarter period after the last one ended, so a
    /// real-time sampler never monopolises a CPU. A tick that overran into the next period delays
    /// only the next tick, not the grid: the one after is on time again.
    pub(super) rest_until: u64,
    /// When the thread list was last walked, and when the target's thread count was last looked at
    /// for the refresh (`refresh_check`).
    pub(super) last_walk: u64,
    pub(super) last_refresh_check: u64,
    /// Since when every read has faulted, while they do.
    pub(super) faulting_since: Option<u64>,
    /// Periods skipped before the coming tick (infer/quiet.rs).
    pub(super) skipping: u32,
    /// The thread list's head at the last tick, and whether it moved since the last walk.
    pub(super) thread_list_head: Option<u64>,
    pub(super) walk_now: bool,
    pub(super) unbound: UnboundWalks,
    /// When the next live snapshot is due (`SamplerConfig::live_every_ns`).
    pub(super) next_live_ns: u64,
}

/// What the refresh asks of a tick with no other reason to walk the thread list (`Pace::refresh_check`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refresh {
    /// Not yet: the last walk or look was under `refresh_ns` ago.
    NotDue,
    /// Looked: the thread count has not moved since the last walk.
    Spared,
    /// Walk: the count moved (or cannot be read), or the last walk is `WALK_AT_LEAST_EVERY`
    /// refreshes old.
    Walk,
}

/// The refresh walks every this many `refresh_ns` however still the thread count. A thread state
/// deleted while its thread lives on, and not the list's head, moves neither the head nor the count:
/// a native thread's `PyGILState_Release` when a later state was made after its own. Until this walk
/// the table keeps that thread, read as any idle one. With 400 threads a walk cost two to ten
/// periods on busy cores (docs/cost.md), once a second here instead of ten times.
const WALK_AT_LEAST_EVERY: u64 = 10;

impl Pace {
    /// The first deadline is the first multiple of `period_ns` from `start_ns` on: every sampler of
    /// a session ticks on one grid of CLOCK_MONOTONIC, whenever its target was attached. Sampler
    /// threads that share a CPU (`--cpus`) then wake together and run one after another, so the
    /// job's thread on that CPU is preempted once a period instead of once per target; four
    /// processes on two busy cores, all samplers on one CPU: 0.89 CPU-s/s instead of 1.03 and
    /// 8,456 Hz instead of 8,154 (docs/cost.md, "Several processes").
    pub(super) fn new(start_ns: u64, period_ns: u64) -> Pace {
        Pace {
            deadline: start_ns
                .checked_next_multiple_of(period_ns.max(1))
                .unwrap_or(start_ns),
            rest_until: 0,
            last_walk: 0,
            last_refresh_check: 0,
            faulting_since: None,
            skipping: 0,
            thread_list_head: None,
            walk_now: false,
            unbound: UnboundWalks::default(),
            next_live_ns: 0,
        }
    }

    /// At a tick that has no other reason to walk the thread list: every `refresh_ns`, whether the
    /// refresh must walk it for threads that exited elsewhere than at its head, which the head does
    /// not show. `count_moved` says whether the target's thread count moved since the last walk
    /// (`ThreadCountWatch`); a thread that exits leaves it lower, so the walk is spared while it
    /// has not moved.
    pub(super) fn refresh_check(
        &mut self,
        t0: u64,
        refresh_ns: u64,
        count_moved: impl FnOnce() -> bool,
    ) -> Refresh {
        if t0.saturating_sub(self.last_walk.max(self.last_refresh_check)) < refresh_ns {
            return Refresh::NotDue;
        }
        self.last_refresh_check = t0;
        let overdue = t0.saturating_sub(self.last_walk) >= refresh_ns * WALK_AT_LEAST_EVERY;
        if overdue || count_moved() {
            Refresh::Walk
        } else {
            Refresh::Spared
        }
    }
}

/// The walks again while two thread states name one thread (`Sampler::refresh`): after one period,
/// then two, four… up to `refresh_ns`. A thread that starts is seen at the next tick or soon after
/// (later only if it waits for a CPU that long), and a state that never names its own thread (one a
/// C extension made and left) costs a few walks per `refresh_ns`, not one per tick.
#[derive(Default)]
pub(super) struct UnboundWalks {
    /// The wait before the next walk, and when it is due; none while every state names its own.
    wait_ns: u64,
    due_ns: Option<u64>,
}

impl UnboundWalks {
    pub(super) fn after_walk(&mut self, t0: u64, unbound: bool, period: u64, refresh_ns: u64) {
        if !unbound {
            *self = UnboundWalks::default();
            return;
        }
        self.wait_ns = if self.wait_ns == 0 {
            period
        } else {
            (self.wait_ns * 2).min(refresh_ns)
        };
        self.due_ns = Some(t0 + self.wait_ns);
    }

    pub(super) fn due(&self, t0: u64) -> bool {
        self.due_ns.is_some_and(|at| t0 >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: u64 = 100_000;
    const REFRESH: u64 = 100_000_000;

    #[test]
    fn samplers_started_apart_tick_on_one_grid() {
        let first = Pace::new(5 * PERIOD + 1, PERIOD);
        let later = Pace::new(9 * PERIOD + 40_000, PERIOD);
        assert_eq!(first.deadline, 6 * PERIOD);
        assert_eq!(later.deadline, 10 * PERIOD);
        // A start on the grid is its own first deadline.
        assert_eq!(Pace::new(7 * PERIOD, PERIOD).deadline, 7 * PERIOD);
    }

    #[test]
    fn the_refresh_looks_every_interval_and_walks_when_the_count_moved_or_at_the_latest() {
        let mut pace = Pace::new(0, PERIOD);
        pace.last_walk = 5 * PERIOD;
        let still = || false;
        assert_eq!(
            pace.refresh_check(5 * PERIOD + REFRESH - 1, REFRESH, still),
            Refresh::NotDue
        );
        let mut t = 5 * PERIOD;
        for _ in 1..WALK_AT_LEAST_EVERY {
            t += REFRESH;
            assert_eq!(pace.refresh_check(t, REFRESH, still), Refresh::Spared);
            // The next look is a whole interval after this one.
            assert_eq!(
                pace.refresh_check(t + REFRESH - 1, REFRESH, still),
                Refresh::NotDue
            );
        }
        t += REFRESH;
        assert_eq!(pace.refresh_check(t, REFRESH, still), Refresh::Walk);
        pace.last_walk = t;
        t += REFRESH;
        assert_eq!(pace.refresh_check(t, REFRESH, || true), Refresh::Walk);
    }

    #[test]
    fn walks_while_unbound_come_at_one_two_four_periods_up_to_the_refresh() {
        let mut walks = UnboundWalks::default();
        let mut t = 0;
        let mut waits = Vec::new();
        for _ in 0..14 {
            walks.after_walk(t, true, PERIOD, REFRESH);
            let due = walks.due_ns.unwrap();
            assert!(!walks.due(due - 1) && walks.due(due));
            waits.push((due - t) / PERIOD);
            t = due;
        }
        assert_eq!(waits[..5], [1, 2, 4, 8, 16]);
        assert_eq!(*waits.last().unwrap(), REFRESH / PERIOD);
        // Bound again: no walk is due before the regular refresh, and the next unbound walk is
        // a period away again.
        walks.after_walk(t, false, PERIOD, REFRESH);
        assert!(!walks.due(t + REFRESH));
        walks.after_walk(t, true, PERIOD, REFRESH);
        assert_eq!(walks.due_ns, Some(t + PERIOD));
    }
}
