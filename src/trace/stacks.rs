//! Python stacks in slice `args`: the sampler reports each stack it reads with the thread, the
//! sample's time and the state it was read in; the writer keeps them until the thread's slice that
//! covers that time is written, and puts them in its `args`.
//!
//! A `take_gil` slice carries the stack where the thread asked for the GIL (`stack`, innermost
//! first). A `hold_gil` slice carries the stack seen when the hold began; when the holder's innermost
//! frame changed during the hold, `stack_changed` is true and `stacks` lists each stack seen with the
//! number of samples it was seen at (most first).

use serde::Serialize;

use crate::infer::intervals::{GilState, Interval};
use crate::trace::pending::PerThread;

pub use crate::infer::findings::{Frames, StackReading};

/// A slice's stacks as its `args` show them (`stack`, and for a hold whose innermost frame changed,
/// `stack_changed` and `stacks`): written straight into the trace, without building a JSON value
/// first (that was half of the writer's time on a busy queue).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackArgs {
    /// The stack read first in the slice, innermost frame first.
    #[serde(serialize_with = "frames_list")]
    pub stack: Frames,
    /// Whether a hold's innermost frame changed during it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stack_changed: bool,
    /// Each stack seen, with the samples it was seen at, most first (when `stack_changed`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<StackCount>,
}

/// One of the stacks a hold was seen in, and how many samples saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackCount {
    /// The samples it was seen at.
    pub samples: u64,
    /// The stack, innermost frame first.
    #[serde(serialize_with = "frames_list")]
    pub stack: Frames,
}

fn frames_list<S: serde::Serializer>(frames: &Frames, to: S) -> Result<S::Ok, S::Error> {
    frames.as_slice().serialize(to)
}

impl StackArgs {
    /// A slice seen in one stack.
    pub fn one(stack: Frames) -> StackArgs {
        StackArgs {
            stack,
            stack_changed: false,
            stacks: Vec::new(),
        }
    }
}

/// One stack reading: in a state, seen over `samples` samples.
#[derive(Clone, Debug)]
struct Seen {
    state: GilState,
    frames: Frames,
    samples: u64,
    /// Whether it began a slice: later readings are not summed into readings before it.
    begins_slice: bool,
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
    /// A stack the sampler read.
    pub fn note(&mut self, reading: StackReading) {
        // Seen again in the slice it was first seen in: counted there. Which slice a reading
        // belongs to is settled only later, so the sampler marks where slices begin; where a
        // reading went into one of an earlier slice, that slice took its samples and the later
        // slice was left with no stack (a worker's holds in the same code, a few samples apart).
        if !reading.begins_slice
            && let Some(kept) = self.seen.of_mut(reading.tid)
            && let Some(same) =
                same_slice(kept, reading.state).find(|(_, s)| s.frames == reading.frames)
        {
            same.1.samples += reading.samples;
            return;
        }
        let seen = Seen {
            state: reading.state,
            frames: reading.frames,
            samples: reading.samples,
            begins_slice: reading.begins_slice,
        };
        self.seen.push(reading.tid, reading.t_ns, seen);
    }

    /// The `args` for `interval`, from the stacks read inside it; drops those it has passed.
    pub fn args_for(&mut self, interval: &Interval) -> Option<StackArgs> {
        let inside = self.seen.take_inside(interval).into_iter().map(|(_, s)| s);
        args_of(
            interval.state,
            inside.filter(|s| s.state == interval.state).collect(),
        )
    }

    /// The `args` `interval` would get now, leaving the stacks in place: for a slice still open
    /// (trace/tap.rs), which gets its own later.
    pub fn peek_args_for(&self, interval: &Interval) -> Option<StackArgs> {
        let inside = self.seen.peek_inside(interval).map(|(_, s)| s);
        let inside = inside.filter(|s| s.state == interval.state).cloned();
        args_of(interval.state, inside.collect())
    }
}

/// The readings kept that may belong to the slice a reading in `state` goes on, latest first: those
/// back to the latest that began a slice, while they are in `state`. Streams older than format 5
/// mark no beginnings: there, back to the last reading in another state, as the trace did then.
fn same_slice(kept: &mut [(u64, Seen)], state: GilState) -> impl Iterator<Item = &mut (u64, Seen)> {
    let in_state = kept
        .iter()
        .rposition(|(_, s)| s.state != state)
        .map_or(0, |at| at + 1);
    let kept = &mut kept[in_state..];
    let from = kept.iter().rposition(|(_, s)| s.begins_slice).unwrap_or(0);
    kept[from..].iter_mut().rev()
}

/// The `args` of a slice in `state` from the stacks read inside it, oldest first.
fn args_of(state: GilState, mut inside: Vec<Seen>) -> Option<StackArgs> {
    let first = inside.first()?.frames.clone();
    if inside.len() == 1 || state != GilState::Hold {
        return Some(StackArgs::one(first));
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
        return Some(StackArgs::one(first));
    }
    merged.sort_by_key(|s| std::cmp::Reverse(s.samples));
    let stacks = merged
        .into_iter()
        .map(|s| StackCount {
            samples: s.samples,
            stack: s.frames,
        })
        .collect();
    Some(StackArgs {
        stack: first,
        stack_changed: true,
        stacks,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;

    /// The args as the trace writes them.
    trait WrittenArgs {
        fn args_json(&mut self, interval: &Interval) -> Option<Value>;
        fn peek_json(&self, interval: &Interval) -> Option<Value>;
    }

    impl WrittenArgs for PendingStacks {
        fn args_json(&mut self, interval: &Interval) -> Option<Value> {
            let args = self.args_for(interval)?;
            Some(serde_json::to_value(args).unwrap())
        }

        fn peek_json(&self, interval: &Interval) -> Option<Value> {
            let args = self.peek_args_for(interval)?;
            Some(serde_json::to_value(args).unwrap())
        }
    }

    fn frames(lines: &[&str]) -> Frames {
        Arc::new(lines.iter().map(|s| s.to_string()).collect())
    }

    /// A reading of thread 7's stack.
    fn note(
        pending: &mut PendingStacks,
        t_ns: u64,
        state: GilState,
        frames: Frames,
        samples: u64,
        begins_slice: bool,
    ) {
        pending.note(StackReading {
            tid: 7,
            t_ns,
            state,
            frames,
            samples,
            begins_slice,
        });
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
        note(
            &mut pending,
            150,
            GilState::Take,
            frames(&["wait (a.py:3)"]),
            1,
            true,
        );
        note(
            &mut pending,
            450,
            GilState::Take,
            frames(&["later (a.py:9)"]),
            1,
            true,
        );
        let args = pending
            .args_json(&interval(GilState::Take, 100, 200))
            .unwrap();
        assert_eq!(args, json!({"stack": ["wait (a.py:3)"]}));
        // The later one stays for its own slice; a slice with none inside gets no args.
        assert!(
            pending
                .args_json(&interval(GilState::Take, 300, 400))
                .is_none()
        );
        assert!(
            pending
                .args_json(&interval(GilState::Take, 400, 500))
                .is_some()
        );
    }

    #[test]
    fn peeking_at_an_open_slice_leaves_its_stacks_for_the_slice_it_becomes() {
        let mut pending = PendingStacks::default();
        note(
            &mut pending,
            100,
            GilState::Hold,
            frames(&["f (a.py:1)"]),
            1,
            true,
        );
        let so_far = interval(GilState::Hold, 50, 150);
        let peeked = pending.peek_json(&so_far);
        assert_eq!(peeked, Some(json!({"stack": ["f (a.py:1)"]})));
        assert_eq!(pending.peek_json(&so_far), peeked, "nothing taken");
        let closed = interval(GilState::Hold, 50, 400);
        assert_eq!(pending.args_json(&closed), peeked);
        assert_eq!(pending.peek_json(&so_far), None, "taken by the slice");
    }

    #[test]
    fn a_hold_whose_stack_changed_lists_each_with_its_samples() {
        let mut pending = PendingStacks::default();
        let (a, b) = (frames(&["f (a.py:1)"]), frames(&["g (a.py:2)"]));
        note(&mut pending, 100, GilState::Hold, a.clone(), 1, true);
        note(&mut pending, 110, GilState::Hold, a.clone(), 3, false);
        note(&mut pending, 150, GilState::Hold, b.clone(), 5, false);
        note(&mut pending, 190, GilState::Hold, a.clone(), 1, false);
        let args = pending
            .args_json(&interval(GilState::Hold, 100, 200))
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

    #[test]
    fn a_slice_that_begins_before_the_last_is_written_keeps_its_own_stack() {
        // A worker's holds, back to back in the same code: the second began (and went on) before
        // the first was written.
        let mut pending = PendingStacks::default();
        let work = frames(&["work (w.py:4)"]);
        note(&mut pending, 100, GilState::Hold, work.clone(), 1, true);
        note(&mut pending, 150, GilState::Hold, work.clone(), 4, false);
        note(&mut pending, 300, GilState::Hold, work.clone(), 1, true);
        note(&mut pending, 340, GilState::Hold, work.clone(), 2, false);
        let first = pending.args_json(&interval(GilState::Hold, 50, 200));
        let second = pending.args_json(&interval(GilState::Hold, 200, 350));
        assert_eq!(first, Some(json!({"stack": ["work (w.py:4)"]})));
        assert_eq!(second, first, "the second hold has its stack too");
    }

    #[test]
    fn a_reading_that_goes_on_a_slice_is_summed_back_to_where_the_slice_began() {
        // A, B, A within one hold are summed by stack; nothing goes back past the slice's start.
        let mut pending = PendingStacks::default();
        let (a, b) = (frames(&["f (a.py:1)"]), frames(&["g (a.py:2)"]));
        note(&mut pending, 10, GilState::Hold, b.clone(), 9, true);
        note(&mut pending, 100, GilState::Hold, a.clone(), 1, true);
        note(&mut pending, 150, GilState::Hold, b.clone(), 2, false);
        note(&mut pending, 190, GilState::Hold, a.clone(), 3, false);
        let earlier = pending.args_json(&interval(GilState::Hold, 0, 50)).unwrap();
        assert_eq!(earlier, json!({"stack": ["g (a.py:2)"]}));
        let args = pending
            .args_json(&interval(GilState::Hold, 100, 200))
            .unwrap();
        let stacks = json!([
            {"samples": 4, "stack": ["f (a.py:1)"]},
            {"samples": 2, "stack": ["g (a.py:2)"]},
        ]);
        assert_eq!(args["stacks"], stacks);
    }

    #[test]
    fn streams_that_mark_no_beginnings_sum_as_before() {
        // Format 4 and older: every reading is summed into the thread's last run in its state.
        let mut pending = PendingStacks::default();
        let work = frames(&["work (w.py:4)"]);
        note(&mut pending, 100, GilState::Hold, work.clone(), 1, false);
        note(&mut pending, 300, GilState::Hold, work.clone(), 1, false);
        let first = pending
            .args_json(&interval(GilState::Hold, 50, 200))
            .unwrap();
        assert_eq!(first, json!({"stack": ["work (w.py:4)"]}));
        assert_eq!(pending.args_json(&interval(GilState::Hold, 200, 350)), None);
    }
}
