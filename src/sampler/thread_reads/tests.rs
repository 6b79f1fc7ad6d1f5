//! When a thread asleep outside the GIL starts to count as idle (`read_tracked`).

use super::*;
use std::sync::mpsc;

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
