//! Round trips of the stream format, its size per sample, and the saver.

use std::io::Cursor;

use serde_json::json;

use super::*;
use crate::addr::RemoteAddr;
use crate::infer::sample::{GilFlagsReading, ThreadSample};
use crate::observed::GilWord;
use crate::observed::{GilWaitRanges, Waiters};
use crate::observed::{KernelState, SchedStat};

const FUTEX: i64 = 202;

pub(crate) fn header() -> StreamHeader {
    StreamHeader::new(
        4242,
        "3.12.3",
        "3.12-x86_64",
        10_000.0,
        crate::infer::sample::SampleContext {
            period_ns: 100_000,
            ranges: GilWaitRanges {
                cond: Some((0x1000, 0x1030)),
                mutex: None,
                switch_cond: None,
                switch_mutex: Some((0x2000, 0x2008)),
                cond_waiter_words: Some((0x1008, 0x1010)),
            },
            waiter_counts: true,
            gil_flags: false,
            check_gil_flags: false,
        },
    )
}

fn encode(items: &[Item]) -> Vec<u8> {
    let mut writer = StreamWriter::new(header());
    let mut out = Vec::new();
    writer.start(&mut out);
    for item in items {
        writer.push(item, &mut out);
    }
    out
}

/// Reads every item back, and whether the stream ended with its End record.
fn decode(bytes: &[u8]) -> Result<(Vec<Item>, bool), StreamError> {
    let mut reader = StreamReader::new(Cursor::new(bytes), "test.gss")?;
    assert_eq!(reader.header(), &header());
    let mut items = Vec::new();
    while let Some(item) = reader.next()? {
        items.push(item);
    }
    Ok((items, reader.ended_cleanly()))
}

fn roundtrip(items: &[Item]) {
    let bytes = encode(items);
    let (back, ended) = decode(&bytes).unwrap();
    assert_eq!(back, items);
    assert_eq!(ended, matches!(items.last(), Some(Item::End(_))));
}

fn thread(tid: u32, kernel: Option<KernelState>) -> ThreadSample {
    ThreadSample {
        tid,
        their_tid: tid - 1000,
        tstate: RemoteAddr(0x7f00_0000_0000 + u64::from(tid) * 0x1000),
        kernel,
        ..ThreadSample::default()
    }
}

fn futex(addr: u64) -> Option<KernelState> {
    Some(KernelState::InSyscall {
        nr: FUTEX,
        arg0: addr,
        arg1: 0x189,
    })
}

#[test]
fn hand_made_sequences_round_trip() {
    let a = thread(2001, Some(KernelState::Running));
    let b = thread(2002, futex(0x1008));
    let c = thread(2003, Some(KernelState::Blocked));
    let s0 = Sample {
        read_ns: 1_000_000_000,
        woke_ns: 999_997_000,
        t_ns: 1_000_003_000,
        word: GilWord {
            locked: true,
            last_holder: a.tstate,
            switch_number: u64::MAX - 1,
            interval_us: Some(5000),
        },
        waiters: Some(Waiters { take: 1, drop: 0 }),
        waiters_again: None,
        word_again: None,
        mutex_owner: Some(1001),
        all_kernel_read: true,
        skipped_periods: 0,
        threads: vec![a, b, c],
        // Not kept in a stream: a replay looks at every entry.
        unchanged_outside: Vec::new(),
    };
    // The same again (everything a run), at the quiet rate: a pace record before it.
    let mut s1 = s0.clone();
    s1.skipped_periods = 4;
    s1.read_ns += 100_000;
    s1.t_ns += 100_000;
    // A hand-off across switch_number's wrap, b runs, a waits, a new thread appears, c goes.
    let mut s2 = s1.clone();
    s2.skipped_periods = 0;
    s2.read_ns += 100_123;
    s2.t_ns = s2.read_ns; // t_ns equal to read_ns
    s2.word.switch_number = 1; // wrapped
    s2.word.last_holder = b.tstate;
    // b let the GIL go between the reads: a word-again record before it, none before s3.
    s2.word_again = Some(GilWord {
        locked: false,
        ..s2.word
    });
    s2.threads = vec![
        ThreadSample {
            kernel: futex(0x1008),
            schedstat: Some(SchedStat {
                cpu_ns: 123_456_789,
                run_queue_ns: 42,
                timeslices: 7,
            }),
            ..a
        },
        ThreadSample {
            kernel: Some(KernelState::Running),
            slices_before_sleep: Some(6),
            gil_flags: Some(GilFlagsReading {
                holds: true,
                requested: false,
            }),
            ..b
        },
        thread(2004, None),
    ];
    // Huge and odd values: a negative syscall number, all-ones args, a holder that is no thread,
    // a clock that goes back, options back to None, a thread reordered.
    let mut s3 = s2.clone();
    s3.read_ns = 5;
    s3.t_ns = u64::MAX;
    s3.word = GilWord {
        locked: false,
        last_holder: RemoteAddr(u64::MAX),
        switch_number: u64::MAX,
        interval_us: None,
    };
    s3.waiters = None;
    s3.word_again = None;
    s3.waiters_again = Some(Waiters {
        take: u32::MAX,
        drop: u32::MAX,
    });
    s3.mutex_owner = None;
    s3.all_kernel_read = false;
    s3.skipped_periods = crate::stream::MAX_SKIPPED_PERIODS;
    s3.threads = vec![
        s2.threads[2],
        ThreadSample {
            tid: u32::MAX,
            their_tid: u32::MAX,
            tstate: RemoteAddr(u64::MAX),
            kernel: Some(KernelState::InSyscall {
                nr: i64::MIN,
                arg0: u64::MAX,
                arg1: u64::MAX,
            }),
            slices_before_sleep: Some(u64::MAX),
            schedstat: Some(SchedStat {
                cpu_ns: u64::MAX,
                run_queue_ns: 0,
                timeslices: u64::MAX,
            }),
            gil_flags: Some(GilFlagsReading {
                holds: true,
                requested: true,
            }),
        },
        ThreadSample {
            schedstat: Some(SchedStat {
                cpu_ns: 1,
                run_queue_ns: 1,
                timeslices: 1,
            }),
            ..s2.threads[0]
        },
    ];
    // Every thread gone.
    let mut s4 = s3.clone();
    s4.threads.clear();
    let items = vec![
        Item::Sample(s0),
        Item::Sample(s1),
        Item::Stack(StackReading {
            tid: 2002,
            t_ns: 1_000_100_000,
            state: crate::infer::intervals::GilState::Take,
            frames: std::sync::Arc::new(vec![
                "main (app.py:3)".into(),
                "wörk (ünïcode.py:9)".into(),
                "".into(),
            ]),
            samples: 12,
            begins_slice: true,
        }),
        // The same names again (by number now), in a reading that goes on a slice.
        Item::Stack(StackReading {
            tid: 2002,
            t_ns: 1_000_200_000,
            state: crate::infer::intervals::GilState::Hold,
            frames: std::sync::Arc::new(vec!["main (app.py:3)".into()]),
            samples: 3,
            begins_slice: false,
        }),
        Item::HoldFrames {
            tid: 2002,
            t_ns: 1_000_200_000,
            watch: crate::infer::native_call::FrameWatch {
                reads: 40,
                still_reads: 30,
                idle_reads: 9,
                span_ns: 39_000_000,
                innermost: Some("iterencode (/usr/lib/python3.12/json/encoder.py:258)".into()),
                callee: None,
            },
        },
        Item::Sample(s2),
        Item::Sample(s3.clone()),
        Item::Sample(s4),
        Item::Sample(s3),
        Item::End(json!({"samples": 6, "rate": 9999.5})),
    ];
    roundtrip(&items);
    // Cut before the End: every item read, but not ended cleanly.
    roundtrip(&items[..items.len() - 1]);
}

/// A thread leaving from the middle and many threads gone at once (over one `GONE` byte's 64)
/// keep the later threads matched to themselves.
#[test]
fn long_runs_and_many_departures_round_trip() {
    let many: Vec<ThreadSample> = (0..300).map(|i| thread(3000 + i, futex(0x1008))).collect();
    let s0 = Sample {
        threads: many.clone(),
        ..Sample::default()
    };
    let mut s1 = s0.clone();
    s1.threads = many[..10].iter().chain(&many[200..]).copied().collect();
    s1.threads[50].kernel = Some(KernelState::Running);
    let mut s2 = s1.clone();
    s2.threads.remove(5);
    let items: Vec<Item> = [s0, s1, s2].into_iter().map(Item::Sample).collect();
    roundtrip(&items);
    // 300 unchanged threads are three run bytes, not 300.
    let again = Sample {
        read_ns: 100_000,
        woke_ns: 100_000,
        t_ns: 100_000,
        threads: many,
        ..Sample::default()
    };
    let bytes = encode(&[items[0].clone(), Item::Sample(again)]);
    let first = encode(&items[..1]).len();
    assert!(bytes.len() - first < 12, "{} bytes", bytes.len() - first);
}

/// A steady sampling of `n` threads at 10 kHz: two threads trade the GIL every 5 ms (the default
/// switch interval), the others sleep in the GIL's wait or elsewhere, unchanged; idle threads'
/// kernel states are read only every fourth tick, and schedstat is asked for one thread now and then.
fn typical(n: u32, ticks: usize) -> Vec<Item> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut threads: Vec<ThreadSample> = (0..n)
        .map(|i| thread(5000 + i, futex(0x7f12_3456_1008)))
        .collect();
    threads[0].kernel = Some(KernelState::Running);
    let mut s = Sample {
        read_ns: 123_456_789_000_000,
        word: GilWord {
            locked: true,
            last_holder: threads[0].tstate,
            switch_number: 1000,
            interval_us: Some(5000),
        },
        waiters: Some(Waiters { take: 1, drop: 0 }),
        mutex_owner: None,
        threads,
        ..Sample::default()
    };
    let mut cpu = 0u64;
    let mut out = Vec::new();
    for tick in 0..ticks {
        s.read_ns += 100_000 + next() % 4000 - 2000;
        s.t_ns = s.read_ns + 3000 + next() % 2000;
        s.all_kernel_read = tick % 4 == 0;
        if tick % 50 == 49 {
            let (from, to) = if s.word.last_holder == s.threads[0].tstate {
                (0, 1)
            } else {
                (1, 0)
            };
            s.threads[from].kernel = futex(0x7f12_3456_1008);
            s.threads[to].kernel = Some(KernelState::Running);
            s.word.last_holder = s.threads[to].tstate;
            s.word.switch_number += 1;
        }
        for t in &mut s.threads {
            t.schedstat = None;
        }
        if tick % 10 == 0 {
            cpu += 1_000_000 + next() % 1000;
            s.threads[0].schedstat = Some(SchedStat {
                cpu_ns: cpu,
                run_queue_ns: cpu / 10,
                timeslices: cpu / 1_000_000,
            });
        }
        out.push(Item::Sample(s.clone()));
    }
    out
}

fn bytes_per_sample(n: u32) -> f64 {
    let ticks = 10_000;
    let items = typical(n, ticks);
    let bytes = encode(&items);
    let (back, _) = decode(&bytes).unwrap();
    assert_eq!(back, items);
    let per = (bytes.len() - encode(&[]).len()) as f64 / ticks as f64;
    crate::stderr_line!(
        "{n} threads: {per:.2} bytes/sample, {:.0} KB/s at 10 kHz",
        per * 10.0
    );
    per
}

#[test]
fn four_mostly_unchanged_threads_take_under_20_bytes_a_sample() {
    let per = bytes_per_sample(4);
    assert!(per < 20.0, "{per} bytes/sample");
}

#[test]
fn thirty_two_mostly_idle_threads_take_under_50_bytes_a_sample() {
    let per = bytes_per_sample(32);
    assert!(per < 50.0, "{per} bytes/sample");
}

// That the writer allocates nothing per sample is tested with a counting allocator in
// tests/sample_stream.rs (a global allocator is per test binary).

#[test]
fn the_saver_writes_a_stream_the_reader_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.gss");
    let mut saver = SampleSaver::create(&path, header()).unwrap();
    // Enough samples for several chunks to pass through the writer thread.
    let mut items = typical(32, 100_000);
    items.push(Item::End(json!({"ok": true})));
    for item in &items {
        saver.push(item);
    }
    assert!(!saver.failed());
    let stats = saver.finish().unwrap();
    assert_eq!(stats.items, items.len() as u64);
    assert_eq!(stats.bytes, std::fs::metadata(&path).unwrap().len());
    assert!(stats.bytes > 2 * saver::CHUNK_BYTES as u64);
    let mut reader = StreamReader::open(&path).unwrap();
    let mut n = 0;
    while let Some(item) = reader.next().unwrap() {
        assert_eq!(item, items[n]);
        n += 1;
    }
    assert_eq!(n, items.len());
    assert!(reader.ended_cleanly());
}

#[test]
fn the_saver_refuses_an_unwritable_path_before_sampling() {
    let dir = tempfile::tempdir().unwrap();
    // Under a regular file: no directory can be made there.
    std::fs::write(dir.path().join("a-file"), b"").unwrap();
    let path = dir.path().join("a-file/s.gss");
    let Err(e) = SampleSaver::create(&path, header()) else {
        panic!("created {}", path.display());
    };
    assert_eq!(e.exit_code(), crate::error::exit::OUTPUT);
    assert!(e.to_string().contains("a-file/s.gss"), "{e}");
}

#[test]
fn the_saver_makes_the_directories_above_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("streams/today/s.gss");
    let saver = SampleSaver::create(&path, header()).unwrap();
    drop(saver);
    assert!(path.is_file());
}

/// A full disk: the failure is kept, `failed` says so, and `finish` names the file.
#[test]
fn the_saver_reports_a_full_disk() {
    let path = std::path::Path::new("/dev/full");
    assert!(
        path.exists(),
        "/dev/full is missing: this test needs the kernel's always-full device"
    );
    let mut saver = SampleSaver::create(path, header()).unwrap();
    for item in typical(4, 100_000) {
        saver.push(&item);
        if saver.failed() {
            break;
        }
    }
    let e = saver.finish().unwrap_err();
    assert_eq!(e.exit_code(), crate::error::exit::OUTPUT);
    let text = e.to_string();
    assert!(
        text.contains("/dev/full") && text.contains("incomplete"),
        "{text}"
    );
}

/// Fast switching: the GIL changes hands at every tick among 4 threads, the worst steady case.
#[test]
fn a_hand_off_every_tick_stays_under_40_bytes_a_sample() {
    let mut items = typical(4, 10_000);
    for (tick, item) in items.iter_mut().enumerate() {
        let Item::Sample(s) = item else {
            unreachable!()
        };
        let holder = tick % 4;
        for (i, t) in s.threads.iter_mut().enumerate() {
            t.kernel = if i == holder {
                Some(KernelState::Running)
            } else {
                futex(0x7f12_3456_1008)
            };
        }
        s.word.last_holder = s.threads[holder].tstate;
        s.word.switch_number = tick as u64;
    }
    let bytes = encode(&items);
    assert_eq!(decode(&bytes).unwrap().0, items);
    let per = (bytes.len() - encode(&[]).len()) as f64 / items.len() as f64;
    crate::stderr_line!("4 threads, a hand-off every tick: {per:.2} bytes/sample");
    assert!(per < 40.0, "{per} bytes/sample");
}

/// Thousands of threads reversed, or departed in a block longer than the encoder looks ahead, are
/// written as new threads: more bytes, the same samples.
#[test]
fn threads_beyond_the_look_ahead_round_trip() {
    let many: Vec<ThreadSample> = (0..2000)
        .map(|i| thread(10_000 + i, futex(0x1008 + u64::from(i))))
        .collect();
    let s0 = Sample {
        threads: many.clone(),
        ..Sample::default()
    };
    let mut s1 = s0.clone();
    s1.threads.reverse();
    let mut s2 = s0.clone();
    s2.threads.drain(..1000);
    for t in &mut s2.threads[500..] {
        t.kernel = futex(0x1008);
    }
    let items: Vec<Item> = [s0, s1, s2.clone(), s2]
        .into_iter()
        .map(Item::Sample)
        .collect();
    roundtrip(&items);
}

mod arbitrary;

#[test]
fn a_missing_stream_beside_per_process_ones_names_them() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "run.41.gilsamples",
        "run.7.gilsamples",
        "run.x.gilsamples",
        "other.gilsamples",
    ] {
        std::fs::write(dir.path().join(name), b"").unwrap();
    }
    let Err(e) = StreamReader::open(&dir.path().join("run.gilsamples")) else {
        panic!("opened a file that is not there");
    };
    let said = e.to_string();
    assert!(
        said.contains("one stream each, with the pid before the suffix")
            && said.contains("run.41.gilsamples")
            && said.contains("run.7.gilsamples")
            && !said.contains("run.x.")
            && !said.contains("other."),
        "{said}"
    );
    let Err(alone) = StreamReader::open(&dir.path().join("none.gilsamples")) else {
        panic!("opened a file that is not there");
    };
    assert!(!alone.to_string().contains("one stream each"), "{alone}");
}
