//! When a thread asleep outside the GIL starts to count as idle (`read_tracked`).

use super::*;
use std::sync::mpsc;

use unread_idle::IDLE_READS_PER_REFUTED_TICK;

/// A thread of this process asleep in a channel's wait until `wake` is dropped, with its tid.
fn asleep_thread() -> (u32, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (wake, asleep) = mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
        let _ = asleep.recv();
    });
    let tid = tid_rx.recv().unwrap();
    // Readiness is the kernel's word: the thread is inside its wait once its syscall file says so.
    let files = ThreadFiles::open(std::process::id(), tid).unwrap();
    let in_wait = (0..1_000_000).any(|_| {
        std::thread::yield_now();
        matches!(files.read_state(), Ok(KernelState::InSyscall { .. }))
    });
    assert!(in_wait, "thread {tid} never went to sleep");
    (tid, wake, handle)
}

fn thread_ref(tid: u32) -> ThreadRef {
    ThreadRef {
        tstate: RemoteAddr(0x1000 + u64::from(tid)),
        tid,
        their_tid: tid,
    }
}

/// Reads thread `index` of `table` at `now` as a tick would, and returns its `idle_since`.
fn read_at(table: &mut ThreadTable, index: usize, now: u64) -> Option<u64> {
    let (mut report, ranges) = (SamplerReport::default(), GilWaitRanges::default());
    let (tracked, look) = (&mut table.threads[index], &mut table.looks[index]);
    read_tracked(
        tracked,
        &mut look.idle_since,
        (now, None),
        (&ranges, Asked::default()),
        &mut report,
    );
    look.idle_since
}

#[test]
fn a_thread_met_asleep_at_attach_is_idle_from_its_first_reading() {
    let pid = std::process::id();
    let open = |r: &ThreadRef| ThreadFiles::open(pid, r.tid).ok();
    let (first, wake_first, first_handle) = asleep_thread();
    let mut table = ThreadTable::default();
    table.follow(&[thread_ref(first)], open);

    // Found by the walk at attach: idle at once, and its wait's start kept at the next reading.
    let now = 5 * IDLE_AFTER_NS;
    assert_eq!(read_at(&mut table, 0, now), Some(now - IDLE_AFTER_NS));
    assert_eq!(read_at(&mut table, 0, now + 1), Some(now - IDLE_AFTER_NS));

    // Found by a later walk (a tick has been read): idle only once asleep `IDLE_AFTER_NS` in the
    // same wait, counted from its first reading.
    table.ticks = 1;
    let (later, wake_later, later_handle) = asleep_thread();
    table.follow(&[thread_ref(first), thread_ref(later)], open);
    let index = table.index_of(later).unwrap();
    assert_eq!(read_at(&mut table, index, now + 2), Some(now + 2));
    assert_eq!(read_at(&mut table, index, now + 3), Some(now + 2));

    drop((wake_first, wake_later));
    first_handle.join().unwrap();
    later_handle.join().unwrap();
}

#[test]
fn a_thread_met_running_at_attach_is_not_taken_as_idle() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (tid_tx, tid_rx) = mpsc::channel();
    let spin = std::sync::Arc::clone(&stop);
    let spinner = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
        while !spin.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    let tid = tid_rx.recv().unwrap();
    let pid = std::process::id();
    let mut table = ThreadTable::default();
    table.follow(&[thread_ref(tid)], |r| ThreadFiles::open(pid, r.tid).ok());
    // Running (on a CPU or waiting for one): not idle, and the attach walk's credit is spent.
    assert_eq!(read_at(&mut table, 0, IDLE_AFTER_NS), None);
    assert!(!table.threads[0].unread_since_attach);
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
}

#[test]
fn refuted_ticks_read_the_idle_threads_newest_sleepers_first_and_leave_the_rest_as_last_read() {
    // Threads 0–2 run; 3–102 are idle, thread i asleep since 1,000 × i but 50, the newest sleeper.
    let since = |index: usize| {
        if index == 50 {
            1_000_000
        } else {
            1_000 * index as u64
        }
    };
    let looks = (0..103u32).map(|index| FirstLook {
        thread: thread_ref(index + 10),
        idle_since: (index >= 3).then(|| since(index as usize)),
    });
    let idle: Vec<usize> = (3..103).collect();
    let mut table = ThreadTable {
        looks: looks.collect(),
        unread_entries_kept: true,
        ..ThreadTable::default()
    };
    // A tick's sample before its idle threads are settled: all read so far, none marked.
    let fresh_sample = || Sample {
        all_kernel_read: true,
        unchanged_outside: vec![false; 103],
        ..Sample::default()
    };
    let mut report = SamplerReport::default();
    let mut read_by_some_tick = [false; 103];
    let mut reads = Vec::new();
    // 100 idle threads, 32 a tick: a round reads every one in 4 refuted ticks; a fifth begins the
    // next round.
    for tick in 0..5 {
        let mut sample = fresh_sample();
        table.unread.clone_from(&idle);
        table.put_off_beyond(IDLE_READS_PER_REFUTED_TICK, &mut sample, &mut report);
        assert!(
            !sample.all_kernel_read,
            "tick {tick} read only some idle threads"
        );
        for &index in &idle {
            let read = table.unread.contains(&index);
            // Put off: its entry is the last tick's, marked so for the engine.
            assert_eq!(
                sample.unchanged_outside[index], !read,
                "tick {tick}, thread {index}"
            );
            read_by_some_tick[index] |= read;
        }
        if tick == 3 {
            assert!(
                idle.iter().all(|&i| read_by_some_tick[i]),
                "4 ticks read them all"
            );
            assert!(table.round.is_empty(), "the round is read");
        }
        reads.push(table.unread.clone());
    }
    // Newest sleepers first: 50, then 102 down to 72 (31 more), and so on.
    let first: Vec<usize> = [50].into_iter().chain(72..103).collect();
    assert_eq!(reads[0], first);
    assert_eq!(
        reads[3].len(),
        100 - 3 * 32,
        "the round's last tick reads what is left"
    );
    assert_eq!(
        reads[4], reads[0],
        "a new round starts from the newest again"
    );
    assert_eq!(report.counted_out_put_off, 4 * (100 - 32) + 96);

    // A thread read since the round began (no longer unread) is left out of the round's reads.
    table.round.clear();
    let mut sample = fresh_sample();
    table.unread.clone_from(&idle);
    table.put_off_beyond(IDLE_READS_PER_REFUTED_TICK, &mut sample, &mut report);
    table.unread = idle.iter().copied().filter(|&i| i != 71).collect();
    table.put_off_beyond(IDLE_READS_PER_REFUTED_TICK, &mut sample, &mut report);
    assert!(!table.unread.contains(&71) && table.unread.len() == 32);

    // A tick that left nothing unread ends the round under way: the next refuted tick starts a
    // new one from the newest sleepers, where the old round would have gone on from thread 71.
    table.round.clear();
    let mut sample = fresh_sample();
    table.unread.clone_from(&idle);
    table.put_off_beyond(IDLE_READS_PER_REFUTED_TICK, &mut sample, &mut report);
    assert!(!table.round.is_empty(), "a round under way");
    table.unread.clear();
    assert!(table.nothing_left_unread());
    assert!(
        table.round.is_empty(),
        "a tick with nothing unread ends the round"
    );
    let mut sample = fresh_sample();
    table.unread.clone_from(&idle);
    assert!(!table.nothing_left_unread());
    table.put_off_beyond(IDLE_READS_PER_REFUTED_TICK, &mut sample, &mut report);
    assert_eq!(table.unread, first, "the newest sleepers first again");

    // A budget of them all: every one is read, none marked, and no round is under way.
    let mut sample = fresh_sample();
    table.unread.clone_from(&idle);
    table.put_off_beyond(idle.len(), &mut sample, &mut report);
    assert_eq!(table.unread, idle);
    assert!(sample.all_kernel_read && !sample.unchanged_outside.contains(&true));
    assert!(table.round.is_empty(), "every idle thread read: no round");
}
