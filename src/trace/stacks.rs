//! Python stacks in slice `args`: the sampler reports each stack it reads with the thread, the
//! sample's time and the state it was read in; the writer keeps them until the thread's slice that
//! covers that time is written, and puts them in its `args`.
//!
//! A `take_gil` slice carries the stack where the thread asked for the GIL (`stack`, innermost
//! first). A `hold_gil` slice carries the stack seen when the hold began; when the holder's innermost
//! frame changed during the hold, `stack_changed` is true and `stacks` lists each stack seen with the
//! number of samples it was seen at (most first).

use serde_json::{Value, json};

use crate::infer::intervals::{GilState, Interval};
use crate::trace::pending::PerThread;

pub use crate::infer::findings::Frames;

/// One stack reading: in a state, seen over `samples` samples.
#[derive(Clone, Debug)]
struct Seen {
    state: GilState,
    frames: Frames,
    samples: u64,
}

/// Stacks not yet placed in a slice, per thread, oldest first.
pub struct PendingStacks {
    seen: PerThread<Seen>,
}

/// Stacks kept per thread while its slice is open: a hold that keeps changing stacks is summed,
/// not stored sample by sample.
const MAX_PENDING_PER_THREAD: usize = 64;

impl Default for PendingStacks {
    fn default() -> Self {
        PendingStacks {
            seen: PerThread::with_cap(MAX_PENDING_PER_THREAD),
        }
    }
}

impl PendingStacks {
    /// A stack read at `t_ns` in `state`, standing for `samples` samples.
    pub fn note(&mut self, tid: u32, t_ns: u64, state: GilState, frames: Frames, samples: u64) {
        // Seen again since the thread entered `state`: counted where it was first seen.
        let same = self.seen.of_mut(tid).and_then(|kept| {
            kept.iter_mut()
                .rev()
                .take_while(|(_, s)| s.state == state)
                .find(|(_, s)| s.frames == frames)
        });
        if let Some((_, same)) = same {
            same.samples += samples;
            return;
        }
        let seen = Seen {
            state,
            frames,
            samples,
        };
        self.seen.push(tid, t_ns, seen);
    }

    /// The `args` for `interval`, from the stacks read inside it; drops those it has passed.
    pub fn args_for(&mut self, interval: &Interval) -> Option<Value> {
        let inside = self.seen.take_inside(interval).into_iter().map(|(_, s)| s);
        args_of(
            interval.state,
            inside.filter(|s| s.state == interval.state).collect(),
        )
    }

    /// The `args` `interval` would get now, leaving the stacks in place: for a slice still open
    /// (trace/tap.rs), which gets its own later.
    pub fn peek_args_for(&self, interval: &Interval) -> Option<Value> {
        let inside = self.seen.peek_inside(interval).map(|(_, s)| s);
        let inside = inside.filter(|s| s.state == interval.state).cloned();
        args_of(interval.state, inside.collect())
    }
}

/// The `args` of a slice in `state` from the stacks read inside it, oldest first.
fn args_of(state: GilState, mut inside: Vec<Seen>) -> Option<Value> {
    let first = inside.first()?.frames.clone();
    if inside.len() == 1 || state != GilState::Hold {
        return Some(json!({ "stack": *first }));
    }
    // The same stack may have been seen apart (A, B, A): sum by stack.
    let mut merged: Vec<Seen> = Vec::new();
    for seen in inside.drain(..) {
        match merged.iter_mut().find(|m| m.frames == seen.frames) {
            Some(m) => m.samples += seen.samples,
            None => merged.push(seen),
        }
    }
    if merged.len() == 1 {
        return Some(json!({ "stack": *first }));
    }
    merged.sort_by_key(|s| std::cmp::Reverse(s.samples));
    let stacks: Vec<Value> = merged
        .iter()
        .map(|s| json!({ "samples": s.samples, "stack": *s.frames }))
        .collect();
    Some(json!({ "stack": *first, "stack_changed": true, "stacks": stacks }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn frames(lines: &[&str]) -> Frames {
        Arc::new(lines.iter().map(|s| s.to_string()).collect())
    }

    fn interval(state: GilState, start_ns: u64, end_ns: u64) -> Interval {
        Interval {
            tid: 7,
            state,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn a_wait_carries_the_stack_read_inside_it() {
        let mut pending = PendingStacks::default();
        pending.note(7, 150, GilState::Take, frames(&["wait (a.py:3)"]), 1);
        pending.note(7, 450, GilState::Take, frames(&["later (a.py:9)"]), 1);
        let args = pending
            .args_for(&interval(GilState::Take, 100, 200))
            .unwrap();
        assert_eq!(args, json!({"stack": ["wait (a.py:3)"]}));
        // The later one stays for its own slice; a slice with none inside gets no args.
        assert!(
            pending
                .args_for(&interval(GilState::Take, 300, 400))
                .is_none()
        );
        assert!(
            pending
                .args_for(&interval(GilState::Take, 400, 500))
                .is_some()
        );
    }

    #[test]
    fn peeking_at_an_open_slice_leaves_its_stacks_for_the_slice_it_becomes() {
        let mut pending = PendingStacks::default();
        pending.note(7, 100, GilState::Hold, frames(&["f (a.py:1)"]), 1);
        let so_far = interval(GilState::Hold, 50, 150);
        let peeked = pending.peek_args_for(&so_far);
        assert_eq!(peeked, Some(json!({"stack": ["f (a.py:1)"]})));
        assert_eq!(pending.peek_args_for(&so_far), peeked, "nothing taken");
        let closed = interval(GilState::Hold, 50, 400);
        assert_eq!(pending.args_for(&closed), peeked);
        assert_eq!(pending.peek_args_for(&so_far), None, "taken by the slice");
    }

    #[test]
    fn a_hold_whose_stack_changed_lists_each_with_its_samples() {
        let mut pending = PendingStacks::default();
        let (a, b) = (frames(&["f (a.py:1)"]), frames(&["g (a.py:2)"]));
        pending.note(7, 100, GilState::Hold, a.clone(), 1);
        pending.note(7, 110, GilState::Hold, a.clone(), 3);
        pending.note(7, 150, GilState::Hold, b.clone(), 5);
        pending.note(7, 190, GilState::Hold, a.clone(), 1);
        let args = pending
            .args_for(&interval(GilState::Hold, 100, 200))
            .unwrap();
        assert_eq!(
            args,
            json!({
                "stack": ["f (a.py:1)"],
                "stack_changed": true,
                "stacks": [
                    {"samples": 5, "stack": ["f (a.py:1)"]},
                    {"samples": 5, "stack": ["g (a.py:2)"]},
                ],
            })
        );
    }
}
