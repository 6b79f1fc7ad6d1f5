//! The stacks a thread was last read with, each by the innermost frame it was read at: where the
//! thread is back at one of those frames, the stack watch uses the kept stack instead of walking it
//! again, as kept at the same instruction, or with the innermost line moved to the instruction it
//! is at now (sampler/stack_watch.rs).

use crate::infer::findings::Frames;
use crate::python::stacks::FrameId;

/// Stacks kept per thread. A worker goes round a few places (after its native call, in
/// `queue.get`, in a lock's `__enter__`, at the instructions where it took the GIL back): on the
/// queue workload, with its last stack alone the watch walked the stack at 55% of its stack reads,
/// with its last 4 at 29%, 8: 21%, 16: 10%. A training step goes round dozens (the modules' calls,
/// the optimiser, autograd's hooks): the loader workload's trainer walked 1,130–1,515 stacks in
/// 3 s with 16 kept, 766 with 32, 366–400 with 64 (docs/cost.md, "Names and stacks"). The lookups
/// are a scan of up to this many entries per stack read, a few hundred nanoseconds.
const STACKS_KEPT: usize = 64;

/// A kept stack is used for this long after its walk, then walked again: a frame's address, code
/// and instruction identify its stack only while the code object at that address is the same one
/// and its callers are; a place the thread keeps coming back to is walked once a second at most.
const STACK_KEPT_FOR_NS: u64 = 1_000_000_000;

/// A thread's last `STACKS_KEPT` stacks, each with the innermost frame it was read at and when, the
/// most recently used first.
#[derive(Default)]
pub(super) struct RecentStacks {
    kept: Vec<(FrameId, Frames, u64)>,
}

impl RecentStacks {
    /// The stack read at `innermost` less than `STACK_KEPT_FOR_NS` before `t`, if kept; it becomes
    /// the most recently used.
    pub(super) fn find(&mut self, innermost: FrameId, t: u64) -> Option<Frames> {
        let at = self.kept.iter().position(|(id, _, _)| *id == innermost)?;
        if t.saturating_sub(self.kept[at].2) >= STACK_KEPT_FOR_NS {
            self.kept.remove(at);
            return None;
        }
        self.kept[..=at].rotate_right(1);
        Some(self.kept[0].1.clone())
    }

    /// A stack read less than `STACK_KEPT_FOR_NS` before `t` in `innermost`'s frame and code object
    /// at another instruction, if kept: the innermost frame it was read at, its frames and when it
    /// was walked. Its callers are `innermost`'s as much as the same instruction's would be (the
    /// key stands for the callers by the frame and its code, not by the instruction).
    pub(super) fn find_in_frame(
        &self,
        innermost: FrameId,
        t: u64,
    ) -> Option<(FrameId, Frames, u64)> {
        self.kept.iter().find_map(|(id, frames, walked)| {
            let same = id.frame == innermost.frame && id.code == innermost.code;
            (same && t.saturating_sub(*walked) < STACK_KEPT_FOR_NS)
                .then(|| (*id, frames.clone(), *walked))
        })
    }

    /// Keeps `frames`, read at `innermost` at `t`, in place of the least recently used.
    pub(super) fn keep(&mut self, innermost: FrameId, frames: Frames, t: u64) {
        if self.kept.len() == STACKS_KEPT {
            self.kept.pop();
        }
        self.kept.insert(0, (innermost, frames, t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MS: u64 = 1_000_000;

    fn frame(at: u64) -> FrameId {
        FrameId {
            frame: at,
            code: 0x2000,
            instr: 7,
        }
    }

    fn frames(name: &str) -> Frames {
        Arc::new(vec![name.to_string()])
    }

    #[test]
    fn a_thread_back_at_a_kept_place_gets_that_stack_and_the_least_used_goes_first() {
        let mut kept = RecentStacks::default();
        for place in 0..STACKS_KEPT as u64 {
            kept.keep(frame(place), frames(&format!("f{place}")), 0);
        }
        // Place 0 is the oldest; using it makes place 1 the least recently used.
        assert_eq!(
            kept.find(frame(0), MS).as_deref(),
            Some(&vec!["f0".to_string()])
        );
        kept.keep(frame(99), frames("new"), MS);
        assert_eq!(kept.find(frame(1), MS), None);
        assert!(kept.find(frame(0), MS).is_some());
        assert!(kept.find(frame(99), MS).is_some());
        // Another instruction in the same frame is another place.
        let elsewhere = FrameId {
            instr: 8,
            ..frame(0)
        };
        assert_eq!(kept.find(elsewhere, MS), None);
    }

    #[test]
    fn a_stack_kept_at_another_instruction_of_the_frame_is_found_until_it_expires() {
        let mut kept = RecentStacks::default();
        kept.keep(frame(1), frames("f"), MS);
        let later_line = FrameId {
            instr: 9,
            ..frame(1)
        };
        let (at, found, walked) = kept.find_in_frame(later_line, 2 * MS).unwrap();
        assert_eq!((at, walked), (frame(1), MS));
        assert_eq!(*found, vec!["f".to_string()]);
        // Another frame, or another code object at that frame's address, is another place.
        assert!(kept.find_in_frame(frame(2), 2 * MS).is_none());
        let other_code = FrameId {
            code: 0x3000,
            ..frame(1)
        };
        assert!(kept.find_in_frame(other_code, 2 * MS).is_none());
        assert!(
            kept.find_in_frame(later_line, MS + STACK_KEPT_FOR_NS)
                .is_none()
        );
    }

    #[test]
    fn a_kept_stack_is_walked_again_after_a_while() {
        let mut kept = RecentStacks::default();
        kept.keep(frame(1), frames("f"), MS);
        assert!(kept.find(frame(1), MS + STACK_KEPT_FOR_NS - 1).is_some());
        assert_eq!(kept.find(frame(1), MS + STACK_KEPT_FOR_NS), None);
        // And forgotten: the walk that follows keeps its own.
        assert!(kept.kept.is_empty());
    }
}
