//! What the writer keeps per thread until the slice that covers it is written: each thing noted at
//! a sample's time, oldest first, handed to the thread's slice whose span holds that time. The
//! stacks of `take_gil` and `hold_gil` slices (stacks.rs) and the frame watches that decide a hold's
//! kind (native_call.rs) are kept this way.

use std::collections::BTreeMap;

use crate::infer::intervals::Interval;

/// Things of type `T` noted per thread at a time, at most `cap` a thread (the oldest go first:
/// a slice that stays open long keeps its latest).
pub struct PerThread<T> {
    by_tid: BTreeMap<u32, Vec<(u64, T)>>,
    cap: usize,
}

impl<T> PerThread<T> {
    /// Nothing kept yet; at most `cap` things a thread.
    pub fn with_cap(cap: usize) -> Self {
        PerThread {
            by_tid: BTreeMap::new(),
            cap,
        }
    }

    /// Thread `tid`'s things not yet taken, oldest first: for a caller that folds a new one into
    /// one already there.
    pub fn of_mut(&mut self, tid: u32) -> Option<&mut Vec<(u64, T)>> {
        self.by_tid.get_mut(&tid)
    }

    /// `item`, noted for thread `tid` at `t_ns` (not before the last one noted for it).
    pub fn push(&mut self, tid: u32, t_ns: u64, item: T) {
        let kept = self.by_tid.entry(tid).or_default();
        if kept.len() >= self.cap {
            kept.remove(0);
        }
        kept.push((t_ns, item));
    }

    /// The things of `interval`'s thread noted inside it, with their times; drops every one noted
    /// up to its end (those before its start belonged to a slice already written).
    pub fn take_inside(&mut self, interval: &Interval) -> Vec<(u64, T)> {
        let Some(kept) = self.by_tid.get_mut(&interval.tid) else {
            return Vec::new();
        };
        let upto = kept.partition_point(|(t, _)| *t <= interval.end_ns);
        let inside = kept
            .drain(..upto)
            .filter(|(t, _)| *t >= interval.start_ns)
            .collect();
        if kept.is_empty() {
            self.by_tid.remove(&interval.tid);
        }
        inside
    }

    /// What `take_inside` would give now, left in place: for a slice still open, which takes its
    /// own when it closes.
    pub fn peek_inside<'a>(&'a self, interval: &Interval) -> impl Iterator<Item = &'a (u64, T)> {
        let (start, end) = (interval.start_ns, interval.end_ns);
        self.by_tid
            .get(&interval.tid)
            .into_iter()
            .flatten()
            .take_while(move |(t, _)| *t <= end)
            .filter(move |(t, _)| *t >= start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::intervals::GilState;

    fn interval(tid: u32, start_ns: u64, end_ns: u64) -> Interval {
        Interval {
            tid,
            state: GilState::Hold,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn a_slice_takes_what_was_noted_inside_it_and_drops_what_it_passed() {
        let mut kept = PerThread::with_cap(8);
        kept.push(7, 50, "before");
        kept.push(7, 100, "a");
        kept.push(7, 200, "b");
        kept.push(7, 300, "after");
        kept.push(8, 150, "other thread");
        let slice = interval(7, 100, 200);
        let peeked: Vec<_> = kept.peek_inside(&slice).map(|(_, s)| *s).collect();
        assert_eq!(peeked, ["a", "b"]);
        assert_eq!(kept.take_inside(&slice), [(100, "a"), (200, "b")]);
        // "before" was dropped with them; "after" waits for its own slice.
        assert_eq!(kept.take_inside(&interval(7, 0, 250)), []);
        assert_eq!(kept.take_inside(&interval(7, 250, 400)), [(300, "after")]);
        assert!(
            kept.of_mut(7).is_none(),
            "a thread with nothing left is forgotten"
        );
        assert_eq!(
            kept.take_inside(&interval(8, 100, 200)),
            [(150, "other thread")]
        );
    }

    #[test]
    fn the_oldest_go_first_beyond_the_cap() {
        let mut kept = PerThread::with_cap(2);
        for t in 1..=3 {
            kept.push(7, t, t);
        }
        assert_eq!(kept.take_inside(&interval(7, 0, 10)), [(2, 2), (3, 3)]);
    }
}
