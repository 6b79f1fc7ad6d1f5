//! What `replay` will be given that is not a whole sample stream: every case is refused with a
//! `StreamError` naming the file and the byte where it went wrong (exit 7 once it is an `Error`),
//! never a panic or an endless read. Library level: the stream reader on files written here.

use std::path::{Path, PathBuf};

use serde_json::json;

use gilsample::addr::RemoteAddr;
use gilsample::error::{Error, exit};
use gilsample::infer::findings::StackReading;
use gilsample::infer::intervals::GilState;
use gilsample::infer::sample::{Sample, SampleContext, ThreadSample};
use gilsample::observed::GilWaitRanges;
use gilsample::observed::KernelState;
use gilsample::stream::{
    FORMAT_VERSION, Item, MAGIC, MAX_RECORD_BYTES, StreamError, StreamHeader, StreamReader,
    StreamWriter,
};

/// Counts this thread's allocations, to hold the writer to allocating nothing per sample. Per
/// thread, so tests running alongside do not count.
struct Counting;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|n| n.get())
}

fn header() -> StreamHeader {
    StreamHeader::new(
        77,
        "3.13.1",
        "3.13-x86_64",
        10_000.0,
        SampleContext {
            period_ns: 100_000,
            ranges: GilWaitRanges::default(),
            waiter_counts: false,
            gil_flags: false,
            check_gil_flags: false,
        },
    )
}

fn items() -> Vec<Item> {
    let t = |tid, kernel| ThreadSample {
        tid,
        their_tid: tid,
        tstate: RemoteAddr(0x5555_0000 + u64::from(tid)),
        kernel: Some(kernel),
        ..ThreadSample::default()
    };
    let s = |i: u64| Sample {
        read_ns: 1_000_000 + i * 100_000,
        t_ns: 1_003_000 + i * 100_000,
        threads: vec![
            t(10, KernelState::Running),
            t(11, KernelState::Blocked),
            t(
                12 + i as u32 % 2,
                KernelState::InSyscall {
                    nr: 202,
                    arg0: 0x7f00_1234,
                    arg1: 0x189,
                },
            ),
        ],
        ..Sample::default()
    };
    vec![
        Item::Sample(s(0)),
        Item::Sample(s(1)),
        Item::Stack(StackReading {
            tid: 10,
            t_ns: 1_100_000,
            state: GilState::Hold,
            frames: std::sync::Arc::new(vec!["run (w.py:1)".into()]),
            samples: 2,
            begins_slice: true,
        }),
        Item::HoldFrames {
            tid: 10,
            t_ns: 1_150_000,
            watch: gilsample::infer::native_call::FrameWatch {
                reads: 5,
                still_reads: 3,
                idle_reads: 1,
                span_ns: 4_000_000,
                innermost: Some("run (w.py:1)".into()),
                callee: None,
            },
        },
        Item::Sample(s(2)),
        Item::End(json!({"samples": 3})),
    ]
}

/// A valid stream of `items()`, and where each record starts.
fn valid() -> (Vec<u8>, Vec<usize>) {
    let mut writer = StreamWriter::new(header());
    let mut out = Vec::new();
    writer.start(&mut out);
    let mut starts = Vec::new();
    for item in items() {
        starts.push(out.len());
        writer.push(&item, &mut out);
    }
    (out, starts)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

/// The preamble and header, then `rest`.
fn after_header(rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    StreamWriter::new(header()).start(&mut out);
    out.extend_from_slice(rest);
    out
}

struct Written {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn write(bytes: &[u8]) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gss");
    std::fs::write(&path, bytes).unwrap();
    Written { _dir: dir, path }
}

fn read_all(path: &Path) -> Result<(Vec<Item>, bool), StreamError> {
    let mut reader = StreamReader::open(path)?;
    let mut items = Vec::new();
    // Bounded: a reader that loops would fail here instead of hanging the test.
    for _ in 0..1_000_000 {
        match reader.next()? {
            Some(item) => items.push(item),
            None => return Ok((items, reader.ended_cleanly())),
        }
    }
    panic!("{}: more than a million items", path.display());
}

/// `bytes` refused at `offset`, with a message containing `why`, the path and the offset; as an
/// `Error`, exit 7 and the same.
fn refused(bytes: &[u8], offset: u64, why: &str) {
    let file = write(bytes);
    let e = read_all(&file.path).expect_err("read a bad stream");
    let text = e.to_string();
    let prefix = format!("{}: byte {offset}: ", file.path.display());
    assert!(
        text.starts_with(&prefix) && text.contains(why),
        "expected {prefix}...{why}..., got {text}"
    );
    let e = Error::from(e);
    assert_eq!(e.exit_code(), exit::INPUT);
    assert_eq!(e.to_string(), text);
}

#[test]
fn a_valid_stream_reads_back_whole() {
    let (bytes, _) = valid();
    let file = write(&bytes);
    let reader = StreamReader::open(&file.path).unwrap();
    assert_eq!(reader.header(), &header());
    assert_eq!(read_all(&file.path).unwrap(), (items(), true));
}

#[test]
fn an_empty_file_is_refused() {
    refused(b"", 0, "empty file, not a gilsample sample stream");
}

#[test]
fn a_file_of_something_else_is_refused() {
    refused(b"{\"traceEvents\": []}", 0, "not a gilsample sample stream");
    refused(b"GILSMPLX\x01\x00", 0, "not a gilsample sample stream");
}

#[test]
fn a_cut_preamble_is_refused() {
    refused(b"GILS", 4, "truncated in the middle of the preamble");
    refused(&MAGIC, 8, "truncated in the middle of the preamble");
}

#[test]
fn a_newer_format_is_refused_with_upgrade() {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    bytes.extend_from_slice(&valid().0[10..]);
    refused(
        &bytes,
        8,
        &format!(
            "written by a newer gilsample (format {}); this one reads format {FORMAT_VERSION}: upgrade",
            FORMAT_VERSION + 1
        ),
    );
}

#[test]
fn a_stream_without_header_is_refused() {
    let preamble = &valid().0[..10];
    refused(preamble, 10, "the stream ends before its header");
    let mut bytes = preamble.to_vec();
    bytes.extend(record(2, &[0, 0, 0, 0]));
    refused(&bytes, 10, "a sample record before the header");
    let mut bytes = preamble.to_vec();
    bytes.extend(record(1, b"{\"producer\": 3}"));
    refused(&bytes, 10, "the header is not a stream header");
}

/// Cut anywhere: at a record boundary every record before the cut is read and the stream did not
/// end cleanly; inside a record, refused at that record's start.
#[test]
fn a_stream_cut_anywhere_is_read_to_the_cut_or_refused_there() {
    let (bytes, mut starts) = valid();
    // The header record starts after the 10-byte preamble.
    starts.insert(0, 10);
    let kinds = [
        "header",
        "sample",
        "sample",
        "stack (begins a slice)",
        "hold-frames",
        "sample",
        "end",
    ];
    for cut in 10..bytes.len() {
        match starts.iter().position(|&s| s == cut) {
            Some(0) => refused(&bytes[..cut], 10, "the stream ends before its header"),
            Some(next) => {
                let file = write(&bytes[..cut]);
                let (got, ended) = read_all(&file.path).unwrap();
                assert_eq!(got, items()[..next - 1], "cut at {cut}");
                assert!(!ended);
            }
            None => {
                let record = starts.iter().rposition(|&s| s < cut).unwrap();
                refused(
                    &bytes[..cut],
                    starts[record] as u64,
                    &format!(
                        "truncated in the middle of a {} record (the recording was cut off?)",
                        kinds[record]
                    ),
                );
            }
        }
    }
}

#[test]
fn a_huge_length_is_refused_before_it_is_read() {
    let mut rest = vec![2];
    varint(1 << 40, &mut rest);
    let at = after_header(&[]).len() as u64;
    refused(
        &after_header(&rest),
        at,
        &format!("a sample record of 1099511627776 bytes, over the {MAX_RECORD_BYTES}"),
    );
    // A length varint that never ends.
    let mut rest = vec![2];
    rest.extend([0xff; 11]);
    refused(
        &after_header(&rest),
        at + 10,
        "a record length over 64 bits",
    );
}

/// Offsets inside a payload: the preamble and header, the record's kind and length byte, then the
/// payload's own bytes.
fn in_payload(payload: &[u8], at: usize, why: &str) {
    let base = after_header(&[]).len() + 2;
    refused(&after_header(&record(2, payload)), (base + at) as u64, why);
}

#[test]
fn garbage_inside_a_sample_is_refused_where_it_lies() {
    // Each payload begins with three times (read, sample, tick start) and the GIL flags byte.
    // A varint of 11 bytes as the first time.
    let mut long = vec![0x80; 10];
    long.push(0);
    in_payload(&long, 0, "a number over 64 bits");
    // 65537 threads.
    let mut many = vec![0, 0, 0, 0];
    varint(65537, &mut many);
    in_payload(
        &many,
        4,
        "65537 threads (more than the 65536 a stream may hold)",
    );
    // A new thread (mask NEW|KERNEL) with kernel state 9.
    in_payload(&[0, 0, 0, 0, 1, 0b101, 7, 9], 7, "invalid kernel state 9");
    // A run of unchanged threads in the first sample (there are none before it).
    in_payload(&[0, 0, 0, 0, 1, 0x80], 5, "a run of 1 unchanged threads");
    // The GIL's holder is thread 5 of a sample of none.
    in_payload(
        &[0, 0, 0, 0b100, 0, 5],
        5,
        "the GIL's holder is thread 5 of a sample of 0",
    );
    // A thread id over 32 bits.
    in_payload(
        &[0, 0, 0, 0, 1, 0b1, 0xff, 0xff, 0xff, 0xff, 0x7f],
        6,
        "a thread id 34359738367 does not fit in 32 bits",
    );
    // The record says more than its fields hold, and less.
    in_payload(
        &[0, 0, 0, 0, 2, 0b1, 7],
        7,
        "the record ends in the middle of a field",
    );
    in_payload(
        &[0, 0, 0, 0, 0, 0xaa],
        5,
        "bytes left over after the record's content",
    );
}

#[test]
fn garbage_inside_a_stack_is_refused() {
    let base = after_header(&[]).len() + 2;
    // tid 1, t 2, state 7.
    refused(
        &after_header(&record(3, &[1, 2, 7, 0, 0])),
        base as u64 + 2,
        "invalid GIL state 7",
    );
    // One new frame name (0) of 2 bytes that are not UTF-8.
    refused(
        &after_header(&record(3, &[1, 2, 0, 1, 1, 0, 2, 0xc3, 0x28])),
        base as u64 + 7,
        "a frame that is not valid UTF-8",
    );
    // A frame naming name 4 (5) before any was defined.
    refused(
        &after_header(&record(3, &[1, 2, 0, 1, 1, 5])),
        base as u64 + 5,
        "frame name 4 of the 0 defined so far",
    );
    // 2^20 frames in 3 bytes.
    refused(
        &after_header(&record(3, &[1, 2, 0, 1, 0x80, 0x80, 0x40])),
        base as u64 + 4,
        "1048576 frames (more than the 65536",
    );
}

#[test]
fn garbage_inside_a_hold_frames_record_is_refused() {
    let base = after_header(&[]).len() as u64 + 2;
    // tid 1, t 2, reads 3, still 2, idle 0, span 9, then an innermost-frame tag of 2.
    refused(
        &after_header(&record(6, &[1, 2, 3, 2, 0, 9, 2])),
        base + 6,
        "invalid frame tag 2",
    );
    // A frame of 2 bytes that are not UTF-8.
    refused(
        &after_header(&record(6, &[1, 2, 3, 2, 0, 9, 1, 2, 0xc3, 0x28])),
        base + 8,
        "a frame that is not valid UTF-8",
    );
    // Cut inside the callee's option.
    refused(
        &after_header(&record(6, &[1, 2, 3, 2, 0, 9, 0])),
        base + 7,
        "the record ends in the middle of a field",
    );
}

#[test]
fn records_out_of_place_are_refused() {
    let at = after_header(&[]).len() as u64;
    refused(&after_header(&[9, 0]), at, "unknown record kind 9");
    refused(&after_header(&[0]), at, "unknown record kind 0");
    let mut again = Vec::new();
    StreamWriter::new(header()).push(&Item::Header(header()), &mut again);
    let second = &again[after_header(&[]).len()..];
    refused(&after_header(second), at, "a second header record");
    let end = record(4, b"{}");
    let mut bytes = after_header(&end);
    bytes.extend(record(2, &[0, 0, 0, 0]));
    refused(
        &bytes,
        at + end.len() as u64,
        "a record after the end record",
    );
    refused(
        &after_header(&record(4, b"{not json")),
        at,
        "the end record is not JSON",
    );
}

/// An error is returned again on the next call, not read past.
#[test]
fn after_an_error_the_reader_stays_refused() {
    let file = write(&after_header(&[9]));
    let mut reader = StreamReader::open(&file.path).unwrap();
    let first = reader.next().unwrap_err();
    assert_eq!(reader.next().unwrap_err(), first);
}

#[test]
fn a_missing_file_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing.gss");
    let Err(e) = StreamReader::open(&path) else {
        panic!("opened a missing file");
    };
    assert!(e.to_string().contains("nothing.gss"), "{e}");
    assert_eq!(Error::from(e).exit_code(), exit::INPUT);
}

/// Samples with changing threads (one appears, one goes, states change) at steady state.
fn churning(n: usize) -> Vec<Item> {
    (0..n as u64)
        .map(|i| {
            let threads = (0..8 + (i % 3) as u32)
                .map(|t| ThreadSample {
                    tid: 100 + t + (i / 1000) as u32,
                    their_tid: t,
                    tstate: RemoteAddr(0x7f00_0000 + u64::from(t) * 64),
                    kernel: Some(if (i + u64::from(t)) % 7 == 0 {
                        KernelState::Running
                    } else {
                        KernelState::InSyscall {
                            nr: 202,
                            arg0: 0x7f00_1008,
                            arg1: 0x189,
                        }
                    }),
                    ..ThreadSample::default()
                })
                .collect();
            let mut s = Sample {
                read_ns: i * 100_000,
                t_ns: i * 100_000 + 2500,
                threads,
                ..Sample::default()
            };
            s.word.switch_number = i / 7;
            s.word.last_holder = s.threads[(i % 7) as usize].tstate;
            Item::Sample(s)
        })
        .collect()
}

#[test]
fn the_writer_allocates_nothing_per_sample() {
    let items = churning(3000);
    let mut writer = StreamWriter::new(header());
    let mut out = Vec::with_capacity(1 << 20);
    for item in &items[..100] {
        writer.push(item, &mut out);
    }
    let before = allocations();
    let started = std::time::Instant::now();
    for item in &items[100..] {
        writer.push(item, &mut out);
    }
    let elapsed = started.elapsed();
    assert_eq!(allocations() - before, 0);
    gilsample::stderr_line!(
        "encoding: {:.0} ns/sample of 8-10 threads",
        elapsed.as_nanos() as f64 / (items.len() - 100) as f64
    );
}

/// The saver allocates per chunk handed over (until chunks come back to be reused), not per sample.
#[test]
fn the_saver_allocates_per_chunk_not_per_sample() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.gss");
    let items = churning(200_000);
    let mut saver = gilsample::stream::SampleSaver::create(&path, header()).unwrap();
    let before = allocations();
    for item in &items {
        saver.push(item);
    }
    let during = allocations() - before;
    let stats = saver.finish().unwrap();
    let chunks = stats.bytes / (256 << 10);
    assert!(chunks >= 4, "{} bytes", stats.bytes);
    assert!(
        during <= 4 * chunks,
        "{during} allocations for {chunks} chunks"
    );
    let (back, ended) = read_all(&path).unwrap();
    assert_eq!(back, items);
    assert!(!ended);
}
