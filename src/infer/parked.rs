//! Threads asleep outside the GIL, left untouched from one sample to the next.
//!
//! Most threads of a large process sleep in a syscall other than a GIL wait (a queue's condition
//! variable, a socket, `sleep`). Such a thread, not the holder, is released whatever else a sample
//! says (rule 5), and once it has been placed so with nothing of it open but that released
//! interval, stepping it again changes three things only: how far its interval has been seen, the
//! last sample its held-while-blocked watch saw, and the switch number of its last definite
//! sample. The engine leaves those behind while the thread stays so ("parked") and brings them up
//! to the last sample (`catch_up`) the first time it must look at the thread again: when it wakes,
//! holds or owns the GIL's mutex, at a gap in the samples (which ends its interval), when the
//! threads change, at the end. A tick then costs nothing per parked thread but a look at its
//! reading, which is what keeps a process with hundreds of idle helper threads cheap to sample
//! (docs/cost.md).
//!
//! Nothing a parked thread would have settled is lost or moved: tests/replay.rs steps every golden
//! stream with and without parking and compares the records one by one.

use crate::infer::intervals::GilState;
use crate::infer::sample::{Sample, ThreadSample};
use crate::infer::thread::ThreadInference;

/// Which threads are parked, and the sample they are parked at.
#[derive(Debug)]
pub struct Parked {
    /// Threads may be parked (not while explaining, nor in the comparison tests).
    enabled: bool,
    /// Per thread, in the engine's order: left behind since it was last stepped.
    parked: Vec<bool>,
    /// The last sample stepped: its time and switch number, what a parked thread is caught up to.
    last: Option<(u64, u64)>,
    /// Thread-samples left unstepped so far.
    skipped: u64,
}

impl Default for Parked {
    fn default() -> Parked {
        Parked {
            enabled: true,
            parked: Vec::new(),
            last: None,
            skipped: 0,
        }
    }
}

/// Whether the sample places `seen` by rule 5 and leaves nothing of it to keep but its released
/// interval: asleep outside the GIL's waits (`asleep_outside_gil`, `classify::asleep_elsewhere`),
/// not the holder, not the mutex's owner, no 3.15 flags read (those count agreements).
pub fn placed_asleep_outside(
    asleep_outside_gil: bool,
    seen: &ThreadSample,
    sample: &Sample,
) -> bool {
    asleep_outside_gil
        && !sample.holds(seen)
        && sample.mutex_owner != Some(seen.their_tid)
        && seen.gil_flags.is_none()
}

impl Parked {
    /// Parking off from now on: every thread is stepped at every sample.
    pub fn disable(&mut self, threads: &mut [ThreadInference]) {
        self.catch_up_all(threads);
        self.enabled = false;
    }

    /// Thread-samples that parking left unstepped.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Whether thread `index`, parked, stays parked at a sample that places it as `placed_outside`
    /// says (`placed_asleep_outside`; `gap`: the sample comes after a gap, which ends every open
    /// interval). Counts it when it does.
    pub fn stays(&mut self, index: usize, placed_outside: bool, gap: bool) -> bool {
        let stays = self.parked.get(index) == Some(&true) && !gap && placed_outside;
        self.skipped += u64::from(stays);
        stays
    }

    /// The last sample's time, where it came before `t_ns` by more than `max_gap_ns`.
    pub fn gap_before(&self, t_ns: u64, max_gap_ns: u64) -> Option<u64> {
        self.last
            .map(|(last_ns, _)| last_ns)
            .filter(|&last_ns| t_ns.saturating_sub(last_ns) > max_gap_ns)
    }

    /// Brings thread `index`, if parked, up to the last sample, as if it had been stepped there,
    /// and unparks it.
    pub fn catch_up(&mut self, index: usize, thread: &mut ThreadInference) {
        let Some(slot) = self.parked.get_mut(index).filter(|p| **p) else {
            return;
        };
        *slot = false;
        let Some((last_ns, switch_number)) = self.last else {
            return;
        };
        debug_assert_eq!(thread.timeline.current(), Some(GilState::Released));
        thread.timeline.seen_until(last_ns);
        thread.blocked.seen_until(last_ns);
        thread.definite_switch = Some(switch_number);
    }

    /// Every parked thread caught up and unparked (the threads change, or the recording ends).
    pub fn catch_up_all(&mut self, threads: &mut [ThreadInference]) {
        for (index, thread) in threads.iter_mut().enumerate() {
            self.catch_up(index, thread);
        }
        self.parked.clear();
    }

    /// Thread `index` was just stepped; `placed_outside`: `placed_asleep_outside` held for it.
    pub fn stepped_thread(&mut self, index: usize, placed_outside: bool) {
        if self.parked.len() <= index {
            self.parked.resize(index + 1, false);
        }
        self.parked[index] = self.enabled && placed_outside;
    }

    /// A sample was stepped: parked threads are now left behind at it.
    pub fn stepped(&mut self, t_ns: u64, switch_number: u64) {
        self.last = Some((t_ns, switch_number));
    }

    /// Whether thread `index` is parked (left behind at the last sample).
    pub fn is_parked(&self, index: usize) -> bool {
        self.parked.get(index) == Some(&true)
    }

    /// The last sample's time, where one was stepped.
    pub fn last_ns(&self) -> Option<u64> {
        self.last.map(|(t, _)| t)
    }
}
