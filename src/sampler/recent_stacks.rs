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
pub(super) const STACK_KEPT_FOR_NS: u64 = 1_000_000_000;

/// Whether a stack walked at `walked` is still used at `t`.
fn fresh(walked: u64, t: u64) -> bool {
    t.saturating_sub(walked) < STACK_KEPT_FOR_NS
}

/// A thread's last `STACKS_KEPT` stacks, each with the innermost frame it was read at and when, the
/// most recently used first.
#[derive(Default)]
pub(super) struct RecentStacks {
    kept: Vec<(FrameId, Frames, u64)>,
}

/// What a thread's kept stacks hold for the innermost frame it is at now.
#[derive(Debug, PartialEq)]
pub(super) enum Kept {
    /// The stack read at this very frame and instruction.
    Same(Frames),
    /// A stack read in this frame and code object at another instruction: the innermost frame it
    /// was read at, its frames and when it was walked. Its callers are this place's as much as the
    /// same instruction's would be (a frame and its code stand for the callers, the instruction
    /// does not).
    OtherLine(FrameId, Frames, u64),
    Nothing,
}

impl RecentStacks {
    /// The kept stack for `innermost` at `t`, in one pass over the kept ones that also forgets
    /// those read `STACK_KEPT_FOR_NS` or more before `t`. One at the same instruction becomes the
    /// most recently used.
    pub(super) fn find(&mut self, innermost: FrameId, t: u64) -> Kept {
        let (mut same, mut other_line, mut at) = (None, None, 0);
        self.kept.retain(|(id, _, walked)| {
            if !fresh(*walked, t) {
                return false;
            }
            if *id == innermost {
                same = Some(at);
            } else if other_line.is_none()
                && id.frame == innermost.frame
                && id.code == innermost.code
            {
                other_line = Some(at);
            }
            at += 1;
            true
        });
        if let Some(at) = same {
            self.kept[..=at].rotate_right(1);
            return Kept::Same(self.kept[0].1.clone());
        }
        match other_line.map(|at| &self.kept[at]) {
            Some((id, frames, walked)) => Kept::OtherLine(*id, frames.clone(), *walked),
            None => Kept::Nothing,
        }
    }

    /// Keeps `frames`, read at `innermost` at `t`, in place of the least recently used.
    pub(super) fn keep(&mut self, innermost: FrameId, frames: Frames, t: u64) {
        if self.kept.len() == STACKS_KEPT {
            self.kept.pop();
        }
        self.kept.insert(0, (innermost, frames, t));
    }

    /// Forgets the stacks read `STACK_KEPT_FOR_NS` or more before `t`: they are walked again
    /// before use anyway, and a thread that stopped moving would otherwise hold its stacks (up to
    /// `STACKS_KEPT`) for as long as it lives.
    pub(super) fn forget_expired(&mut self, t: u64) {
        self.kept.retain(|(_, _, walked)| fresh(*walked, t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MS: u64 = 1_000_000;

    fn frame(at: u64) -> FrameId {
        at_instr(at, 7)
    }

    /// The frame at `at` (one code object) at instruction `instr`.
    fn at_instr(at: u64, instr: u64) -> FrameId {
        FrameId {
            frame: at,
            code: 0x2000,
            instr,
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
        assert_eq!(kept.find(frame(0), MS), Kept::Same(frames("f0")));
        kept.keep(frame(99), frames("new"), MS);
        assert_eq!(kept.find(frame(1), MS), Kept::Nothing);
        assert!(matches!(kept.find(frame(0), MS), Kept::Same(_)));
        assert!(matches!(kept.find(frame(99), MS), Kept::Same(_)));
        // Another instruction in the same frame is another place.
        let elsewhere = at_instr(0, 8);
        assert_eq!(
            kept.find(elsewhere, MS),
            Kept::OtherLine(frame(0), frames("f0"), 0)
        );
    }

    #[test]
    fn a_stack_kept_at_another_instruction_of_the_frame_is_found_until_it_expires() {
        let mut kept = RecentStacks::default();
        kept.keep(frame(1), frames("f"), MS);
        let later_line = at_instr(1, 9);
        assert_eq!(
            kept.find(later_line, 2 * MS),
            Kept::OtherLine(frame(1), frames("f"), MS)
        );
        // Another frame, or another code object at that frame's address, is another place.
        assert_eq!(kept.find(frame(2), 2 * MS), Kept::Nothing);
        let other_code = FrameId {
            code: 0x3000,
            ..frame(1)
        };
        assert_eq!(kept.find(other_code, 2 * MS), Kept::Nothing);
        assert_eq!(kept.find(later_line, MS + STACK_KEPT_FOR_NS), Kept::Nothing);
    }

    #[test]
    fn the_same_instruction_comes_before_another_line_of_the_frame() {
        let mut kept = RecentStacks::default();
        kept.keep(frame(1), frames("at 7"), MS);
        let later_line = at_instr(1, 9);
        kept.keep(later_line, frames("at 9"), MS);
        assert_eq!(kept.find(frame(1), 2 * MS), Kept::Same(frames("at 7")));
    }

    #[test]
    fn a_kept_stack_is_walked_again_after_a_while_and_forgotten() {
        let mut kept = RecentStacks::default();
        kept.keep(frame(1), frames("f"), MS);
        kept.keep(frame(2), frames("g"), 2 * MS);
        assert!(matches!(
            kept.find(frame(1), MS + STACK_KEPT_FOR_NS - 1),
            Kept::Same(_)
        ));
        assert_eq!(kept.find(frame(1), MS + STACK_KEPT_FOR_NS), Kept::Nothing);
        // And forgotten: the walk that follows keeps its own.
        assert_eq!(kept.kept.len(), 1);
        // A thread that no longer reads stacks has its kept ones forgotten by the sweep.
        kept.forget_expired(2 * MS + STACK_KEPT_FOR_NS - 1);
        assert_eq!(kept.kept.len(), 1);
        kept.forget_expired(2 * MS + STACK_KEPT_FOR_NS);
        assert!(kept.kept.is_empty());
    }
}
