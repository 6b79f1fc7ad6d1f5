use super::*;
use crate::addr::RemoteAddr;
use crate::infer::sample::{SampleContext, ThreadSample};
use crate::observed::{GilWaitRanges, GilWord, KernelState};

const HOLDER: RemoteAddr = RemoteAddr(0x7000_0100);
const CLOCK_NANOSLEEP: i64 = libc::SYS_clock_nanosleep;

/// An engine at 10 Hz: a period far longer than a `time.sleep(0.001)`.
fn engine() -> Engine {
    Engine::new(SampleContext {
        period_ns: 100_000_000,
        ranges: GilWaitRanges::default(),
        waiter_counts: false,
        gil_flags: false,
        check_gil_flags: false,
    })
}

/// The one thread, holding the GIL by its words at switch `switch`, in `kernel`, at `t_ns`.
fn held(t_ns: u64, switch: u64, kernel: KernelState) -> Sample {
    let word = GilWord {
        locked: true,
        last_holder: HOLDER,
        switch_number: switch,
        interval_us: Some(5000),
    };
    Sample {
        read_ns: t_ns,
        woke_ns: t_ns,
        t_ns,
        word,
        all_kernel_read: true,
        threads: vec![ThreadSample {
            tid: 11,
            their_tid: 11,
            tstate: HOLDER,
            kernel: Some(kernel),
            ..ThreadSample::default()
        }],
        ..Sample::default()
    }
}

/// Held-while-blocked stretches found over the samples, with the engine finished.
fn stretches(samples: &[Sample]) -> Vec<crate::infer::held_blocked::BlockedStretch> {
    let mut engine = engine();
    let mut found = Vec::new();
    let mut sink = |f: Finding| {
        if let Finding::HeldWhileBlocked(s) = f {
            found.push(s);
        }
    };
    for sample in samples {
        engine.step(sample, &mut sink);
    }
    engine.finish(&mut sink);
    found
}

fn asleep() -> KernelState {
    KernelState::InSyscall {
        nr: CLOCK_NANOSLEEP,
        arg0: 0,
        arg1: 0,
    }
}

/// A holder that let the GIL go between the sample's reads and then slept (`time.sleep`), seen
/// at one sample of a slow rate: by the next it runs again, so only the second read of the GIL
/// tells it from a holder asleep with the GIL.
fn slept_after_letting_go(word_again: Option<GilWord>) -> Vec<Sample> {
    let mut between = held(100_000_000, 1, asleep());
    between.word_again = word_again;
    vec![
        held(0, 1, KernelState::Running),
        between,
        held(200_000_000, 9, KernelState::Running),
    ]
}

#[test]
fn a_holder_that_let_go_between_the_reads_is_not_asleep_with_the_gil() {
    let samples = slept_after_letting_go(None);
    assert!(engine().wants_word_again(&samples[1]));
    assert!(!engine().wants_word_again(&samples[0]));
    // Read once, it looks asleep with the GIL for a period.
    let once = stretches(&samples);
    assert_eq!(once.len(), 1, "{once:?}");
    assert_eq!(once[0].nr, CLOCK_NANOSLEEP);
    // Read again, the GIL was let go: no stretch.
    let let_go = GilWord {
        locked: false,
        ..samples[1].word
    };
    assert_eq!(stretches(&slept_after_letting_go(Some(let_go))), vec![]);
    // Taken by another thread between the reads: none either.
    let handed_off = GilWord {
        last_holder: RemoteAddr(0x7000_0200),
        switch_number: 2,
        ..samples[1].word
    };
    assert_eq!(stretches(&slept_after_letting_go(Some(handed_off))), vec![]);
}

#[test]
fn a_holder_asleep_with_the_gil_at_both_reads_is_a_stretch() {
    // A second read that only saw the switch interval change: the holder kept the GIL.
    let same = GilWord {
        interval_us: Some(1000),
        ..held(0, 1, asleep()).word
    };
    let found = stretches(&slept_after_letting_go(Some(same)));
    assert_eq!(found.len(), 1, "{found:?}");
}

/// From when to when, nanoseconds.
type Spans = Vec<(u64, u64)>;

/// The gaps and hold intervals found over the samples, with the engine finished.
fn gaps_and_holds(samples: &[Sample]) -> (Spans, Spans) {
    let (mut gaps, mut holds) = (Vec::new(), Vec::new());
    let mut engine = engine();
    let mut sink = |f: Finding| match f {
        Finding::Gap { from_ns, to_ns } => gaps.push((from_ns, to_ns)),
        Finding::Interval(iv) if iv.state == GilState::Hold => holds.push((iv.start_ns, iv.end_ns)),
        _ => {}
    };
    for sample in samples {
        engine.step(sample, &mut sink);
    }
    engine.finish(&mut sink);
    (gaps, holds)
}

#[test]
fn a_gap_in_the_samples_is_told_as_the_time_no_interval_covers() {
    const MS: u64 = 1_000_000;
    // 10 Hz: the timeline bridges up to 4 periods (400 ms); the sampler then fell 500 ms behind.
    let running = KernelState::Running;
    let samples = [0, 100, 600, 700].map(|ms| held(ms * MS, 1, running));
    let (gaps, holds) = gaps_and_holds(&samples);
    assert_eq!(gaps, vec![(150 * MS, 550 * MS)]);
    // The holds end and begin where the gap does: nothing covers it twice, nothing is lost.
    assert_eq!(holds, vec![(0, 150 * MS), (550 * MS, 750 * MS)]);
    // Bridged: 400 ms apart is no gap.
    let bridged = [0, 100, 500].map(|ms| held(ms * MS, 1, running));
    assert_eq!(gaps_and_holds(&bridged).0, vec![]);
    // Nor is a tick at the quiet rate that was asked to skip the periods between.
    let mut quiet = [0, 100, 600].map(|ms| held(ms * MS, 1, running));
    quiet[2].skipped_periods = 4;
    assert_eq!(gaps_and_holds(&quiet).0, vec![]);
}

#[test]
fn a_thread_gone_at_the_sample_after_a_gap_ends_where_the_gap_begins() {
    const MS: u64 = 1_000_000;
    let running = KernelState::Running;
    let mut after = held(550 * MS, 2, running);
    // Another thread by then; the walk that found the first gone read 70 ms before the sample:
    // within the 400 ms the timeline bridges of its last sample, though the sample is not.
    after.threads[0].tid = 12;
    after.read_ns = 480 * MS;
    let samples = [held(0, 1, running), held(100 * MS, 1, running), after];
    let (gaps, holds) = gaps_and_holds(&samples);
    assert_eq!(gaps, vec![(150 * MS, 500 * MS)]);
    assert_eq!(holds[0], (0, 150 * MS), "{holds:?}");
}
