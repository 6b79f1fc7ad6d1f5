//! The stack watch's holds across held-back stretches and sampler gaps.

use super::*;
use crate::python::test_heap::{memory, one_frame, reader_of};
use crate::python::version::PyVersion;

const TID: u32 = 7;

fn hold(previous: Option<GilState>) -> Decided {
    Decided {
        index: 0,
        tid: TID,
        previous,
        state: GilState::Hold,
        after_gap: false,
        after_stretch: false,
    }
}

fn seen(tstate: u64) -> ThreadSample {
    ThreadSample {
        tid: TID,
        their_tid: TID,
        tstate: RemoteAddr(tstate),
        kernel: None,
        slices_before_sleep: None,
        schedstat: None,
        gil_flags: None,
    }
}

/// How many reads the watch of each hold (or its part) sent had.
fn watched_reads(found: &[Finding]) -> Vec<u32> {
    found
        .iter()
        .filter_map(|f| match f {
            Finding::HoldFrames { watch, .. } => Some(watch.reads),
            _ => None,
        })
        .collect()
}

/// The innermost function of each stack reading `found` has, and whether it begins a slice.
fn readings(found: &[Finding]) -> Vec<(String, bool)> {
    let innermost = |r: &StackReading| r.frames.first().cloned().unwrap_or_default();
    found
        .iter()
        .filter_map(|f| match f {
            Finding::Stack(r) => Some((innermost(r), r.begins_slice)),
            _ => None,
        })
        .collect()
}

/// What the watch sends for a hold in one function, then a sample `cut` off it (after a
/// held-back stretch, or a sampler gap) at which the thread holds the GIL in another one, and
/// the recording's end.
fn held_across(cut: Decided) -> Vec<Finding> {
    let (mut heap, tstate, _) = one_frame("before");
    let (elsewhere, _) = heap.frame_running("after");
    let mut watch =
        StackWatch::with_reader(reader_of(&heap.layout, PyVersion::from_hex(0x0309_00f0)));
    let mut found = Vec::new();
    let mut sink = |f| found.push(f);
    watch.observe(&memory(&heap), &seen(tstate), &hold(None), 0, &mut sink);
    heap.put(tstate + heap.field("tstate.frame"), elsewhere, 8);
    watch.observe(&memory(&heap), &seen(tstate), &cut, 900_000, &mut sink);
    watch.finish(&mut sink);
    found
}

#[test]
fn a_hold_after_a_held_back_stretch_has_the_stack_it_is_in_now() {
    // A stretch held back, settled at the next sample; the thread ran on to another function
    // in between and holds the GIL again there.
    let found = held_across(Decided {
        after_stretch: true,
        ..hold(Some(GilState::Hold))
    });
    let now = [("before (a.py:11)", true), ("after (a.py:11)", true)];
    assert_eq!(readings(&found), now.map(|(f, b)| (f.to_string(), b)));
}

#[test]
fn a_hold_across_a_sampler_gap_shows_where_the_thread_is_after_it() {
    // The sampler stalled; the thread held the GIL on both sides of the gap and ran on to
    // another function meanwhile.
    let found = held_across(Decided {
        after_gap: true,
        ..hold(Some(GilState::Hold))
    });
    let now = [("before (a.py:11)", true), ("after (a.py:11)", true)];
    assert_eq!(readings(&found), now.map(|(f, b)| (f.to_string(), b)));
    // Two holds of one read each: no watch of either says anything.
    assert_eq!(watched_reads(&found), Vec::<u32>::new());
}

#[test]
fn a_hold_still_in_its_frame_after_a_sampler_gap_goes_on_as_one_watch() {
    let (heap, tstate, _) = one_frame("native_call");
    let mut watch =
        StackWatch::with_reader(reader_of(&heap.layout, PyVersion::from_hex(0x0309_00f0)));
    let mut found = Vec::new();
    let mut sink = |f| found.push(f);
    watch.observe(&memory(&heap), &seen(tstate), &hold(None), 0, &mut sink);
    let after = Decided {
        after_gap: true,
        ..hold(Some(GilState::Hold))
    };
    watch.observe(&memory(&heap), &seen(tstate), &after, 900_000, &mut sink);
    let later = hold(Some(GilState::Hold));
    watch.observe(&memory(&heap), &seen(tstate), &later, 1_000_000, &mut sink);
    watch.finish(&mut sink);
    // The slice after the gap begins with the same stack, and the hold's watch goes on
    // across the gap: its end reports both reads.
    let first = ("native_call (a.py:11)".to_string(), true);
    let later_samples = ("native_call (a.py:11)".to_string(), false);
    assert_eq!(readings(&found), [first.clone(), first, later_samples]);
    assert_eq!(watched_reads(&found), [2]);
}
