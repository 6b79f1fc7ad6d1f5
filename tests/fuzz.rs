//! Property-based fuzzing of everything that reads untrusted bytes from files: ELF and DWARF readers
//! on corrupted files, `_Py_DebugOffsets` decoding, the /proc parsers, layout files, `convert`'s and
//! `merge`'s inputs, `report`'s trace reader and the sample stream reader (what reads the target's
//! memory: tests/fuzz_memory.rs). Each must return an error, never panic, and never loop.
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs these longer); failures found are persisted in
//! fixtures/fuzz-corpus/ so they are replayed on every run.

mod common;

use std::path::Path;

use common::fuzz::fuzz_config as config;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};

use gilsample::addr::RemoteAddr;
use gilsample::process::kernel::parse_syscall;
use gilsample::python::debug_offsets;
use gilsample::python::layout::{FIELD_QUERIES, Flavour, Layout, find_shipped};
use gilsample::python::version::PyVersion;
use gilsample::report::analyze::analyze;
use gilsample::report::load::load;
use gilsample::symbols::dwarf::{FieldQuery, find_fields};
use gilsample::symbols::elf::{self, ElfImage};

fn seed_elf() -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-python/fake-libpython.so"),
    )
    .unwrap()
}

/// Everything gilsample asks of an ELF file, on `bytes`.
fn read_elf(bytes: Vec<u8>) {
    let image = ElfImage::from_vec(bytes, Path::new("fuzzed.so"));
    if let Ok(parsed) = image.parse() {
        let _ = elf::find_symbol(&parsed, "_PyRuntime");
        if let Some(sym) = elf::find_symbol(&parsed, "Py_Version") {
            let _ = elf::read_vaddr(&parsed, image.bytes(), sym.vaddr, 8);
        }
        let _ = elf::build_id(&parsed, image.bytes());
        let _ = elf::debuglink(&parsed, image.bytes());
        let _ = elf::has_debug_info(&parsed);
    }
    let queries: Vec<FieldQuery<'_>> = FIELD_QUERIES
        .iter()
        .flat_map(|spec| {
            spec.paths.iter().map(move |path| FieldQuery {
                root: spec.root,
                path,
            })
        })
        .collect();
    let _ = find_fields(&image, &queries);
    let _ = Layout::from_dwarf(&image, "3.12", "3.12.1", Flavour::Default, "x86_64");
}

#[test]
fn the_seed_elf_is_read_correctly() {
    // The fuzzers mutate this file; check first that it is understood when intact.
    let image = ElfImage::from_vec(seed_elf(), Path::new("fake-libpython.so"));
    let layout = Layout::from_dwarf(&image, "3.12", "3.12.1", Flavour::Default, "x86_64").unwrap();
    assert_eq!(layout.required("gil.locked").offset, 16);
    assert_eq!(layout.required("gil.mutex").size, 40);
    assert_eq!(layout.required("interp.threads.head").offset, 24);
    assert_eq!(layout.required("tstate.native_thread_id").offset, 48);
    assert!(elf::find_symbol(&image.parse().unwrap(), "_PyRuntime").is_some());
}

proptest! {
    #![proptest_config(config("elf"))]
    #[test]
    fn corrupted_elf_files_never_panic(
        mutations in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..64),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = seed_elf();
        for (at, value) in mutations {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        read_elf(bytes);
    }
}

proptest! {
    #![proptest_config(config("elf-random"))]
    #[test]
    fn random_bytes_as_elf_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        read_elf(bytes);
    }
}

fn descriptor() -> Layout {
    find_shipped("3.14", Flavour::Default, "x86_64")
        .unwrap()
        .unwrap()
}

proptest! {
    #![proptest_config(config("debug-offsets"))]
    #[test]
    fn debug_offsets_tables_of_any_content_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..1024),
        with_cookie in any::<bool>(),
    ) {
        let mut bytes = body;
        if with_cookie && bytes.len() >= 8 {
            bytes[..8].copy_from_slice(debug_offsets::COOKIE);
        }
        let _ = debug_offsets::decode(&bytes, &descriptor(), PyVersion::from_hex(0x030e0af0));
    }
}

proptest! {
    #![proptest_config(config("proc-parsers"))]
    #[test]
    fn proc_parsers_accept_anything(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_syscall(&bytes);
        let _ = gilsample::process::kernel::parse_schedstat(&bytes);
    }

    #[test]
    fn layout_files_of_any_content_are_rejected_not_panicked_on(text in ".{0,512}") {
        if let Ok(layout) = serde_json::from_str::<Layout>(&text) {
            let _ = layout.check();
        }
    }
}

proptest! {
    #![proptest_config(Config { cases: Config::default().cases.min(64), ..config("convert") })]
    #[test]
    fn convert_inputs_of_any_content_never_panic(
        text in prop_oneof![
            ".{0,256}",
            r#"\[\{"name": "(take|drop)_gil", "ts": [-0-9."]{0,24}, "dur": [-0-9."]{0,12}, "pid": [0-9]{0,12}, "tid": [0-9a-z]{0,6}\}\]"#,
        ]
    ) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("raw.json");
        std::fs::write(&input, &text).unwrap();
        let _ = gilsample::convert::convert(&input, &dir.path().join("out.json"), true, &mut |_| ());
    }
}

proptest! {
    #![proptest_config(Config { cases: Config::default().cases.min(64), ..config("merge") })]
    #[test]
    fn merge_inputs_of_any_content_never_panic(
        text in prop_oneof![
            ".{0,256}",
            r#"\{"baseTimeNanoseconds": [-0-9e.]{0,22}, "traceEvents": \[\{"ph": "[XMsf]", "ts": [-0-9."e]{0,24}, "dur": [-0-9."]{0,12}, "pid": [-0-9"a-z]{0,12}, "id": [0-9]{0,20}\}\]\}"#,
            r#"\[\{"ph": "[XM]", "name": "process_name", "ts": "[-0-9.]{0,24}", "pid": [0-9]{0,12}, "args": \{"name": "[A-Za-z ]{0,16}"\}\}\]"#,
        ]
    ) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("profiler.json");
        std::fs::write(&input, &text).unwrap();
        let torch = dir.path().join("torch.json");
        std::fs::write(&torch, torch_trace_head()).unwrap();
        let opts = gilsample::merge::MergeOptions { force: true, offsets: Vec::new() };
        match gilsample::merge::merge(&[torch, input], &dir.path().join("out.json"), &opts) {
            Ok(_) => {
                let merged = std::fs::read_to_string(dir.path().join("out.json")).unwrap();
                prop_assert!(serde_json::from_str::<serde_json::Value>(&merged).is_ok(), "{}", merged);
            }
            Err(e) => prop_assert!(matches!(e, gilsample::error::Error::Input { .. }), "{e}"),
        }
    }
}

/// The fixtures' real PyTorch trace, its header whole and its events cut to the first 60 (process
/// and thread names, operators): merged against every fuzzed input, the whole file (661 events) was
/// almost all of each case's time.
fn torch_trace_head() -> &'static str {
    static HEAD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HEAD.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/torch-profiler/torch_cpu.pt.trace.json");
        let mut trace: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let events = trace["traceEvents"].as_array_mut().unwrap();
        assert!(events.len() > 60);
        events.truncate(60);
        trace.to_string()
    })
}

// `gilsample report`'s reader and analysis: any bytes are read or refused; on any well-formed trace
// every moment of a wait is blamed once (on a holder, or on "no holder seen", tid 0: the shares add up to
// the wait) and shares stay within [0, 1].

fn load_bytes(bytes: &[u8]) -> Option<Vec<gilsample::report::load::ProcessTrace>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("GIL_1_rank_0.json");
    std::fs::write(&path, bytes).unwrap();
    load(&path).ok()
}

fn event() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        Just("take_gil"),
        Just("hold_gil"),
        Just("drop_gil"),
        Just("held_while_blocked"),
        Just("thread_name"),
        Just("other"),
    ];
    let ts = prop_oneof![
        (0u64..1_000_000).prop_map(|v| json!(v)),
        (0u64..1_000_000).prop_map(|v| json!(format!("{v}.5"))),
        Just(json!(-5)),
        Just(json!("1e400")),
        Just(json!(null)),
    ];
    let dur = prop_oneof![(0u64..10_000).prop_map(|v| json!(v)), Just(json!(-1))];
    let ph = prop_oneof![Just("X"), Just("M"), Just("C")];
    (name, ts, dur, 0u64..3, 0u64..5, ph).prop_map(|(name, ts, dur, pid, tid, ph)| {
        json!({"name": name, "ph": ph, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
               "args": {"name": "t", "syscall": "read", "stack": [{"function": "f"}]}})
    })
}

proptest! {
    #![proptest_config(config("report_bytes"))]
    #[test]
    fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Some(processes) = load_bytes(&bytes) {
            for p in &processes {
                let _ = analyze(p);
            }
        }
    }
}

proptest! {
    #![proptest_config(config("report_events"))]
    #[test]
    fn every_wait_is_blamed_once(events in proptest::collection::vec(event(), 0..200)) {
        let text = serde_json::to_vec(&json!({"traceEvents": events})).unwrap();
        if let Some(processes) = load_bytes(&text) {
            for p in &processes {
                let answer = analyze(p);
                prop_assert!((0.0..=1.0).contains(&answer.gil_busy_share));
                prop_assert!(answer.mean_waiters >= 0.0);
                for t in &answer.threads {
                    let blamed: f64 = t.waited_for.iter().map(|h| h.s).sum();
                    prop_assert!((blamed - t.wait_s).abs() < 1e-6, "{} != {}", blamed, t.wait_s);
                    prop_assert!(t.waits.p50_ms <= t.waits.p99_ms && t.waits.p99_ms <= t.waits.max_ms);
                }
            }
        }
    }
}

// The sample stream reader (`replay`'s input): random bytes after a valid preamble and header, and
// mutations of a valid stream, are read or refused, and reading ends: every item consumes a byte.

fn sample_stream_header() -> gilsample::stream::StreamHeader {
    gilsample::stream::StreamHeader::new(
        1,
        "3.12.3",
        "3.12-x86_64",
        10_000.0,
        gilsample::infer::sample::SampleContext {
            period_ns: 100_000,
            ranges: Default::default(),
            waiter_counts: true,
            gil_flags: true,
            check_gil_flags: false,
        },
    )
}

fn valid_sample_stream() -> Vec<u8> {
    use gilsample::infer::findings::StackReading;
    use gilsample::infer::sample::{GilFlagsReading, Sample, ThreadSample};
    use gilsample::observed::{KernelState, SchedStat};
    use gilsample::stream::{Item, StreamWriter};
    let mut writer = StreamWriter::new(sample_stream_header());
    let mut out = Vec::new();
    for i in 0..12u64 {
        let threads = (0..(3 + i % 4) as u32)
            .map(|t| ThreadSample {
                tid: 100 + t,
                their_tid: t,
                tstate: RemoteAddr(0x7f00_0000 + u64::from(t) * 64),
                kernel: match (i + u64::from(t)) % 4 {
                    0 => Some(KernelState::Running),
                    1 => Some(KernelState::Blocked),
                    2 => None,
                    _ => Some(KernelState::InSyscall {
                        nr: 202,
                        arg0: 0x7f00_1008,
                        arg1: 0x189,
                    }),
                },
                slices_before_sleep: (t == 1).then_some(i),
                schedstat: (t == 0).then_some(SchedStat {
                    cpu_ns: i * 1000,
                    run_queue_ns: i,
                    timeslices: i,
                }),
                gil_flags: (t == 2).then_some(GilFlagsReading {
                    holds: i % 2 == 0,
                    requested: true,
                }),
            })
            .collect::<Vec<_>>();
        let mut s = Sample {
            read_ns: i * 100_000,
            t_ns: i * 100_000 + 3000,
            threads,
            ..Sample::default()
        };
        s.word.locked = i % 3 != 0;
        s.word.last_holder = s.threads[(i % 3) as usize].tstate;
        s.word.switch_number = i / 2;
        // Runs at the quiet rate, so the stream has pace records to damage too.
        s.skipped_periods = if i % 11 < 5 { 4 } else { 0 };
        writer.push(&Item::Sample(s), &mut out);
        if i % 5 == 0 {
            let frames = vec!["f (a.py:1)".to_string(); 2];
            let state = gilsample::infer::intervals::GilState::Take;
            writer.push(
                &Item::Stack(StackReading {
                    tid: 100,
                    t_ns: i,
                    state,
                    frames: frames.into(),
                    samples: i,
                    begins_slice: i % 10 == 0,
                }),
                &mut out,
            );
        }
        if i % 7 == 0 {
            let watch = gilsample::infer::native_call::FrameWatch {
                reads: 9,
                still_reads: 5,
                idle_reads: 2,
                span_ns: i,
                innermost: Some("f (a.py:1)".into()),
                callee: (i % 2 == 0).then(|| "dumps".to_string()),
            };
            writer.push(
                &Item::HoldFrames {
                    tid: 100,
                    t_ns: i,
                    watch,
                },
                &mut out,
            );
        }
    }
    writer.push(&Item::End(json!({"ok": true})), &mut out);
    out
}

/// Reads `bytes` to the end or the first refusal; more items than bytes would mean a loop.
fn read_sample_stream(bytes: &[u8]) -> Result<usize, gilsample::stream::StreamError> {
    let mut reader =
        gilsample::stream::StreamReader::new(std::io::Cursor::new(bytes), "fuzzed.gss")?;
    let mut n = 0;
    while reader.next()?.is_some() {
        n += 1;
        assert!(n <= bytes.len(), "more items than bytes");
    }
    Ok(n)
}

#[test]
fn the_seed_sample_stream_reads_whole() {
    assert_eq!(
        read_sample_stream(&valid_sample_stream()).unwrap(),
        12 + 3 + 2 + 1
    );
}

proptest! {
    #![proptest_config(config("sample-streams"))]
    #[test]
    fn sample_streams_of_any_bytes_are_read_or_refused(
        tail in prop::collection::vec(any::<u8>(), 0..1024),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        // Random records after a valid header.
        let mut bytes = Vec::new();
        gilsample::stream::StreamWriter::new(sample_stream_header()).start(&mut bytes);
        bytes.extend_from_slice(&tail);
        if let Err(e) = read_sample_stream(&bytes) {
            prop_assert!(e.to_string().starts_with("fuzzed.gss: byte "), "{}", e);
        }
        // A valid stream with bytes overwritten, inserted or removed, then maybe cut.
        let mut bytes = valid_sample_stream();
        for (at, byte, op) in edits {
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => { bytes.remove(i); }
            }
        }
        let keep = cut.index(bytes.len() * 2);
        bytes.truncate(keep.max(1));
        if let Err(e) = read_sample_stream(&bytes) {
            prop_assert!(e.to_string().starts_with("fuzzed.gss: byte "), "{}", e);
        }
    }
}
