//! What a real arm64 kernel and glibc showed gilsample, decoded on any host: the captures of
//! scripts/test-aarch64.sh (fixtures/aarch64/, see its README), taken in the emulated arm64 guest from
//! Debian bookworm's Python 3.11 (glibc 2.36; also as a PIE embedding the shared libpython, its GIL
//! at a randomised address) and sid's 3.13 (glibc 2.43). Each holds one moment of a
//! workload: the GIL's bytes read through /proc/PID/mem, every thread's /proc syscall line, and what
//! `gilsample info` said then.

use std::collections::BTreeMap;
use std::path::Path;

use gilsample::addr::RemoteAddr;
use gilsample::observed::KernelState;
use gilsample::observed::Waiters;
use gilsample::process::glibc::{CondvarLayout, pthread_mutex_size, wrefs_offset};
use gilsample::process::kernel::parse_syscall;
use gilsample::python::gil_span::WaiterCountAddrs;
use gilsample::python::layout::{Flavour, Layout, SHIPPED, find_shipped};

/// aarch64's `futex` syscall number (x86_64's is 202): what an arm64 /proc syscall line carries.
const AARCH64_SYS_FUTEX: i64 = 98;

struct Capture {
    label: String,
    gil: u64,
    bytes: Vec<u8>,
    threads: BTreeMap<String, u32>,
    syscall: BTreeMap<u32, String>,
    info: Vec<String>,
}

impl Capture {
    fn load(label: &str, scenario: &str) -> Capture {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/aarch64")
            .join(label)
            .join(format!("{scenario}.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let bytes = v["gil_bytes"].as_str().unwrap();
        Capture {
            label: label.to_string(),
            gil: hex(v["gil_address"].as_str().unwrap()),
            bytes: (0..bytes.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&bytes[i..i + 2], 16).unwrap())
                .collect(),
            threads: serde_json::from_value(v["threads"].clone()).unwrap(),
            syscall: v["syscall"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(tid, line)| (tid.parse().unwrap(), line.as_str().unwrap().to_string()))
                .collect(),
            info: serde_json::from_value(v["info"].clone()).unwrap(),
        }
    }

    fn info_line(&self, prefix: &str) -> &str {
        self.info
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("{}: info has no {prefix:?} line", self.label))
            .trim()
    }

    /// The shipped aarch64 layout of the captured interpreter (`python: 3.11.2 (default, aarch64)`).
    fn layout(&self) -> Layout {
        let python = self.info_line("python:");
        assert!(python.ends_with("(default, aarch64)"), "{python}");
        let version: Vec<&str> = python.split('.').take(2).collect();
        find_shipped(&version.join("."), Flavour::Default, "aarch64")
            .unwrap()
            .unwrap_or_else(|| panic!("no shipped aarch64 layout for {python}"))
    }

    /// Where the counts and the mutex are, for the glibc release `info` named.
    fn waiter_counts(&self) -> WaiterCountAddrs {
        let waiters = self.info_line("GIL waiters:");
        let release = waiters
            .strip_prefix("counted by glibc ")
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("{waiters}"));
        let (major, minor) = release.split_once('.').unwrap();
        let release = (major.parse().unwrap(), minor.parse().unwrap());
        let condvar = CondvarLayout {
            release,
            wrefs_offset: wrefs_offset(release).unwrap(),
        };
        WaiterCountAddrs::locate(&self.layout(), "aarch64", RemoteAddr(self.gil), condvar).unwrap()
    }

    /// The captured bytes from `take_wrefs` on, which is what the decoders read.
    fn counted_span(&self, counts: &WaiterCountAddrs) -> &[u8] {
        &self.bytes[(counts.take_wrefs.0 - self.gil) as usize..]
    }

    fn state(&self, tid: u32) -> KernelState {
        let line = &self.syscall[&tid];
        parse_syscall(line.as_bytes()).unwrap_or_else(|| panic!("unparsed: {line:?}"))
    }
}

const LABELS: [&str; 3] = ["bookworm-3.11", "bookworm-pie-3.11", "sid-3.13"];

/// glibc's pthread_mutex_t is 48 bytes on aarch64: a size check made for x86_64's 40 left the GIL's
/// mutex unread there (info said "not a glibc pthread_mutex_t" in the first emulated run).
#[test]
fn every_shipped_layout_has_its_architectures_mutex() {
    for (name, text) in SHIPPED {
        let layout: Layout = serde_json::from_str(text).unwrap();
        let mutex = layout.required("gil.mutex").size;
        assert_eq!(
            pthread_mutex_size(&layout.arch),
            Some(mutex),
            "{name}: gil.mutex is {mutex} bytes"
        );
    }
}

/// Three threads behind a main thread that keeps the GIL in one C call: glibc 2.36's and 2.43's
/// counts say three in take_gil's wait, none in drop_gil's, the mutex free.
#[test]
fn arm64_waiter_counts_and_mutex_decode() {
    for label in LABELS {
        let hog = Capture::load(label, "hog");
        let counts = hog.waiter_counts();
        assert!(
            counts.mutex().is_some(),
            "{label}: the mutex was not located"
        );
        let span = hog.counted_span(&counts);
        assert_eq!(
            counts.decode(span),
            Ok(Waiters { take: 3, drop: 0 }),
            "{label}"
        );
        assert_eq!(counts.decode_mutex_owner(span), Some(0), "{label}");
    }
}

/// A thread that locked the GIL's mutex for good is its owner in the captured bytes, by its tid.
#[test]
fn arm64_mutex_owner_is_the_squatter() {
    for label in LABELS {
        let squatter = Capture::load(label, "squatter");
        let counts = squatter.waiter_counts();
        let owner = counts.decode_mutex_owner(squatter.counted_span(&counts));
        assert_eq!(owner, Some(squatter.threads["squatter"]), "{label}");
    }
}

/// arm64's /proc syscall lines: the waiters sleep in futex (98) on a word of the GIL's `cond`, the hog
/// runs.
#[test]
fn arm64_syscall_lines_show_the_waiters_in_take_gils_futex() {
    for label in LABELS {
        let hog = Capture::load(label, "hog");
        let cond = hog.layout().required("gil.cond");
        let cond = hog.gil + cond.offset..hog.gil + cond.offset + cond.size;
        assert_eq!(hog.state(hog.threads["MainThread"]), KernelState::Running);
        for i in 0..3 {
            let tid = hog.threads[&format!("waiter-{i}")];
            match hog.state(tid) {
                KernelState::InSyscall { nr, arg0, .. } => {
                    assert_eq!(nr, AARCH64_SYS_FUTEX, "{label}: waiter-{i}");
                    assert!(cond.contains(&arg0), "{label}: waiter-{i} on {arg0:#x}");
                }
                other => panic!("{label}: waiter-{i} is {other:?}"),
            }
        }
    }
}
