use super::*;

fn slice(name: &'static str, tid: u32, start_ms: i128, end_ms: i128) -> TappedSlice<'static> {
    TappedSlice {
        name,
        tid,
        start_ns: start_ms * 1_000_000,
        end_ns: end_ms * 1_000_000,
        args: None,
    }
}

fn progress(process: &mut LiveProcess, now_ms: i128, open: &[TappedSlice<'_>]) {
    let names = [
        (1, "MainThread (python3)".to_string()),
        (2, "worker".to_string()),
    ];
    process.progress(&TappedProgress {
        started_ns: 0,
        now_ns: now_ms * 1_000_000,
        open,
        names: &names,
    });
}

fn spans(trace: &ProcessTrace) -> Vec<(SliceKind, u32, i128, i128)> {
    trace
        .slices
        .iter()
        .map(|s| (s.kind, s.tid, s.start_ns / 1_000_000, s.end_ns / 1_000_000))
        .collect()
}

#[test]
fn a_window_is_its_slices_cut_at_its_edges_with_the_open_ones_so_far() {
    let mut process = LiveProcess::default();
    process.add(&slice("hold_gil", 1, 0, 600));
    process.add(&slice("take_gil", 2, 100, 600));
    process.add(&slice("hold_gil", 2, 600, 900));
    // Main waits from 600 on, still at 1000; the released part of a thread is never a slice.
    progress(&mut process, 1000, &[slice("take_gil", 1, 600, 1000)]);
    let last = process.window(Span::Last(500_000_000), None).unwrap();
    assert_eq!(last.facts.window_ns, Some((500_000_000, 1_000_000_000)));
    use SliceKind::*;
    assert_eq!(
        spans(&last),
        vec![
            (Hold, 1, 500, 600),
            (Take, 2, 500, 600),
            (Take, 1, 600, 1000),
            (Hold, 2, 600, 900)
        ]
    );
    assert_eq!(last.names[&2], "worker");
    let since = process.window(Span::SinceStart, None).unwrap();
    assert_eq!(since.facts.window_ns, Some((0, 1_000_000_000)));
    assert_eq!(since.slices.len(), 4);
    // Paused at 700: the same slices, as of then.
    let paused = process
        .window(Span::Last(500_000_000), Some(700_000_000))
        .unwrap();
    assert_eq!(
        spans(&paused),
        vec![
            (Hold, 1, 200, 600),
            (Take, 2, 200, 600),
            (Take, 1, 600, 700),
            (Hold, 2, 600, 700)
        ]
    );
    // The answer is report's: main waited 400 of the last 500 ms, all of it for the worker.
    let answer = analyze(&last);
    let main = answer.threads.iter().find(|t| t.tid == 1).unwrap();
    assert!((main.wait_s - 0.4).abs() < 1e-9, "{}", main.wait_s);
    assert_eq!(main.waited_for[0].name, "worker");
}

#[test]
fn an_open_slice_gives_way_to_the_slice_it_became() {
    let mut process = LiveProcess::default();
    progress(
        &mut process,
        300,
        &[slice("hold_gil", 1, 0, 300), slice("take_gil", 2, 100, 300)],
    );
    assert_eq!(process.open.len(), 2);
    // The hold closed at 400; the wait goes on.
    process.add(&slice("hold_gil", 1, 0, 400));
    assert_eq!(process.open.len(), 1);
    assert_eq!(process.open[0].tid, 2);
    // A held-while-blocked stretch replaces only an open stretch.
    progress(
        &mut process,
        500,
        &[
            slice("take_gil", 2, 100, 500),
            slice("held_while_blocked", 2, 200, 500),
        ],
    );
    process.add(&slice("held_while_blocked", 2, 200, 450));
    assert_eq!(process.open.len(), 1);
    assert_eq!(process.open[0].kind, SliceKind::Take);
    let window = process.window(Span::SinceStart, None).unwrap();
    let holds: Vec<i128> = window
        .slices
        .iter()
        .filter(|s| s.kind == SliceKind::Hold)
        .map(|s| s.end_ns / 1_000_000)
        .collect();
    assert_eq!(holds, [400], "counted once");
}

#[test]
fn past_the_slices_kept_the_oldest_go_and_since_the_start_says_from_when() {
    let mut process = LiveProcess {
        max_slices: 8,
        ..LiveProcess::default()
    };
    for i in 0..9 {
        process.add(&slice("hold_gil", 1, i * 10, i * 10 + 10));
    }
    assert_eq!(process.trace.slices.len(), 7, "a quarter (2) let go");
    progress(&mut process, 100, &[]);
    let since = process.window(Span::SinceStart, None).unwrap();
    assert_eq!(since.facts.window_ns, Some((20_000_000, 100_000_000)));
}

#[test]
fn the_tap_gets_the_slices_report_reads_from_the_finished_file() {
    use crate::infer::findings::{LiveSnapshot, StackReading};
    use crate::infer::held_blocked::BlockedStretch;
    use crate::infer::intervals::{GilState, Interval};
    use crate::trace::chrome::ChromeWriter;
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("GIL_9_rank_0.json");
    let live = Arc::new(Live::default());
    let mut writer = ChromeWriter::create(&path, false, 9, 1_500_000_000_000).unwrap();
    writer.set_tap(live.tap(9, Some(0)));
    let interval = |tid, state, start_ns, end_ns| Interval {
        tid,
        state,
        start_ns,
        end_ns,
    };
    let reading = |t_ns, frames: &[&str], samples, begins_slice| StackReading {
        tid: 1,
        t_ns,
        state: GilState::Hold,
        frames: Arc::new(frames.iter().map(|f| f.to_string()).collect()),
        samples,
        begins_slice,
    };
    writer.note_stack(reading(
        1_200_000,
        &["spin (w.py:5)", "run (w.py:9)"],
        1,
        true,
    ));
    writer.note_stack(reading(3_000_000, &["spin (w.py:6)"], 4, false));
    writer
        .write_interval(&interval(1, GilState::Hold, 1_000_123, 4_000_456))
        .unwrap();
    writer
        .write_interval(&interval(2, GilState::Take, 1_500_000, 4_000_456))
        .unwrap();
    writer
        .write_interval(&interval(2, GilState::Released, 4_000_456, 5_000_000))
        .unwrap();
    let snapshot = LiveSnapshot {
        t_ns: 6_000_000,
        started_ns: 900_000,
        open: vec![interval(1, GilState::Hold, 4_000_456, 6_000_000)],
        open_blocked: Vec::new(),
        names: vec![(1, "MainThread (python3)".into())],
    };
    writer.tap_live(&snapshot);
    writer
        .write_held_while_blocked(&BlockedStretch {
            tid: 1,
            start_ns: 4_100_000,
            end_ns: 4_900_000,
            nr: libc::SYS_read,
        })
        .unwrap();
    writer
        .write_interval(&interval(1, GilState::Hold, 4_000_456, 6_100_000))
        .unwrap();
    let names = [(1, "MainThread (python3)".to_string())];
    let done = writer
        .finish("python", &names, serde_json::Map::new(), false, &mut |_| {
            None
        })
        .unwrap();

    let mut from_file = crate::report::load::load(&done).unwrap().remove(0);
    let processes = live.lock();
    let tapped = &processes[&9];
    let label = |trace: &ProcessTrace, s: &Slice| s.label.map(|l| trace.labels[l as usize].clone());
    let seen = |trace: &ProcessTrace, slices: &mut Vec<Slice>| {
        slices.sort_by_key(|s| (s.start_ns, s.tid, s.kind));
        slices
            .iter()
            .map(|s| (s.kind, s.tid, s.start_ns, s.end_ns, label(trace, s)))
            .collect::<Vec<_>>()
    };
    let mut ours = tapped.trace.slices.clone();
    let file_slices = std::mem::take(&mut from_file.slices);
    let mut theirs = file_slices;
    assert_eq!(
        seen(&tapped.trace, &mut ours),
        seen(&from_file, &mut theirs)
    );
    assert_eq!(ours.len(), 4, "released is not a slice");
    assert_eq!(
        label(&tapped.trace, &ours[0]).as_deref(),
        Some("spin (w.py:6)"),
        "the stack seen most"
    );
    assert!(tapped.open.is_empty(), "the open hold became the last one");
    assert_eq!(tapped.started_ns, Some(1_500_000_900_000));
    assert_eq!(tapped.trace.names[&1], from_file.names[&1]);
}

#[test]
fn a_gap_is_left_out_of_the_windows_it_reaches_into() {
    let mut process = LiveProcess::default();
    process.add(&slice("hold_gil", 1, 0, 300));
    process.gap(300_000_000, 700_000_000);
    process.add(&slice("hold_gil", 1, 700, 1000));
    progress(&mut process, 1000, &[]);
    // The last 500 ms hold 200 ms of the gap: 300 ms seen, all of it held.
    let answer = analyze(&process.window(Span::Last(500_000_000), None).unwrap());
    assert!((answer.unseen_s - 0.2).abs() < 1e-9, "{}", answer.unseen_s);
    assert!((answer.window_s - 0.3).abs() < 1e-9, "{}", answer.window_s);
    assert!((answer.gil_busy_share - 1.0).abs() < 1e-9);
    // A window after it has none of it.
    let after = process.window(Span::Last(200_000_000), None).unwrap();
    assert!(after.gaps_ns.is_empty(), "{:?}", after.gaps_ns);
}
