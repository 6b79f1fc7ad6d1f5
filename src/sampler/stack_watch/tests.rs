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

/// Counts the system calls a real source would make: one per `read_into`, one per `read_each`.
struct CountedReads<'a> {
    inner: &'a dyn crate::process::memory::MemorySource,
    calls: std::cell::Cell<u32>,
}

impl crate::process::memory::MemorySource for CountedReads<'_> {
    fn read_into(
        &self,
        addr: RemoteAddr,
        buf: &mut [u8],
    ) -> Result<(), crate::process::memory::ReadError> {
        self.calls.set(self.calls.get() + 1);
        self.inner.read_into(addr, buf)
    }

    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        self.calls.set(self.calls.get() + 1);
        self.inner.read_each(reads)
    }
}

#[test]
fn a_check_that_finds_the_hold_moved_reads_its_frame_once() {
    // A hold checked after `CHECK_EVERY` samples is in another function by then: the check's read
    // of the innermost frame is the new part's first, so that sample costs what reading the stack
    // afresh costs, not one read more.
    let (mut heap, tstate, _) = one_frame("before");
    let (elsewhere, _) = heap.frame_running("after");
    let mut watch =
        StackWatch::with_reader(reader_of(&heap.layout, PyVersion::from_hex(0x0309_00f0)));
    let mut sink = |_| {};
    let mut t = 0;
    watch.observe(&memory(&heap), &seen(tstate), &hold(None), t, &mut sink);
    heap.put(tstate + heap.field("tstate.frame"), elsewhere, 8);
    let moved = memory(&heap);
    for _ in 1..CHECK_EVERY {
        t += 100_000;
        let still = hold(Some(GilState::Hold));
        watch.observe(&moved, &seen(tstate), &still, t, &mut sink);
    }
    let counted = CountedReads {
        inner: &moved,
        calls: std::cell::Cell::new(0),
    };
    let checked = hold(Some(GilState::Hold));
    watch.observe(&counted, &seen(tstate), &checked, t + 100_000, &mut sink);

    let mut fresh =
        StackWatch::with_reader(reader_of(&heap.layout, PyVersion::from_hex(0x0309_00f0)));
    let afresh = CountedReads {
        inner: &moved,
        calls: std::cell::Cell::new(0),
    };
    fresh.observe(&afresh, &seen(tstate), &hold(None), 0, &mut sink);
    assert_eq!(watch.innermost_checks, 1);
    assert!(afresh.calls.get() > 0);
    assert_eq!(counted.calls.get(), afresh.calls.get());
}

/// Fails its first `failing` calls, as memory changing under the reads does.
struct TornFirst<'a> {
    inner: &'a dyn crate::process::memory::MemorySource,
    failing: std::cell::Cell<u32>,
}

impl TornFirst<'_> {
    fn fails(&self) -> bool {
        let left = self.failing.get();
        self.failing.set(left.saturating_sub(1));
        left > 0
    }
}

impl crate::process::memory::MemorySource for TornFirst<'_> {
    fn read_into(
        &self,
        addr: RemoteAddr,
        buf: &mut [u8],
    ) -> Result<(), crate::process::memory::ReadError> {
        if self.fails() {
            return Err(crate::process::memory::ReadError::Fault);
        }
        self.inner.read_into(addr, buf)
    }

    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        if self.fails() {
            return 0;
        }
        self.inner.read_each(reads)
    }
}

#[test]
fn a_stack_whose_read_tore_is_read_once_more() {
    let (heap, tstate, _) = one_frame("waiting");
    let mut watch =
        StackWatch::with_reader(reader_of(&heap.layout, PyVersion::from_hex(0x0309_00f0)));
    let snapshot = memory(&heap);
    let torn = TornFirst {
        inner: &snapshot,
        failing: std::cell::Cell::new(2),
    };
    let mut found = Vec::new();
    let waits = Decided {
        state: GilState::Take,
        ..hold(None)
    };
    watch.observe(&torn, &seen(tstate), &waits, 0, &mut |f| found.push(f));
    assert_eq!(torn.failing.get(), 0, "the first read failed whole");
    assert_eq!(readings(&found), [("waiting (a.py:11)".to_string(), true)]);
    let mut report = StackReport::default();
    watch.report_into(&mut report);
    assert_eq!(report.read.torn, 1);
}
