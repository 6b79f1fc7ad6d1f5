//! Attaching to a target: find the ELF that defines `_PyRuntime` among its mappings, learn the version,
//! pick a layout, and check that layout against the live process before any sampling starts.
//!
//! Nothing is written to the target and it is never stopped; "attach" only means reading.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::addr::RemoteAddr;
use crate::error::{Error, Result};
use crate::process::maps::{Mapping, OpenedFile, open_mapped_file, proc_error, read_file_mappings};
use crate::process::memory::{MemorySource, ProcessMemory, ReadError};
use crate::process::tasks::TidMap;
use crate::python::debug_offsets;
use crate::python::layout::{Flavour, Layout, find_shipped, shipped_keys};
use crate::python::objects::{ObjectReader, TypeObjects};
use crate::python::runtime::{
    GilWord, GilWordFields, ThreadRef, ThreadWalker, TidSource, WalkError, find_gil,
    find_tid_source,
};
use crate::python::version::{OLDEST_SUPPORTED, PyVersion};
use crate::symbols::elf::{self, ElfImage};

/// Where a layout may come from, in the order `Auto` tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutChoice {
    /// The first that works: debug-offsets (3.13+), a shipped file from the same build, DWARF, the
    /// shipped file for the version.
    Auto,
    /// Only the target's own `_Py_DebugOffsets` (3.13+).
    DebugOffsets,
    /// Only DWARF.
    Dwarf,
    /// Only the file compiled in from python-layouts/.
    File,
}

/// The layout source actually used; recorded in the trace metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutSource {
    /// The target's `_Py_DebugOffsets`, located with the named descriptor.
    DebugOffsets(String),
    Dwarf(PathBuf),
    File(String),
}

impl fmt::Display for LayoutSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutSource::DebugOffsets(by) => write!(f, "debug-offsets (table described by {by})"),
            LayoutSource::Dwarf(path) => write!(f, "dwarf:{}", path.display()),
            LayoutSource::File(key) => write!(f, "file:python-layouts/{key}.json"),
        }
    }
}

/// The interpreter binary found in the target.
#[derive(Clone, Debug)]
pub struct Binary {
    /// The path as the target's maps name it.
    pub mapped_path: PathBuf,
    /// The path gilsample opened it through (differs for containers).
    pub opened_as: PathBuf,
    pub shared_library: bool,
    pub build_id: Option<String>,
    pub arch: &'static str,
    pub runtime_symbol: RemoteAddr,
    pub load_bias: u64,
    /// The mapping that holds `_PyRuntime`, to notice when the target execs something else.
    pub mapping: Mapping,
    /// The interpreter's type objects (`PyDict_Type`, …), to check objects read from memory.
    pub types: TypeObjects,
}

/// A target ready to be sampled: everything the sampler needs, checked against the live process.
pub struct Target {
    pub pid: u32,
    pub binary: Binary,
    pub version: PyVersion,
    pub flavour: Flavour,
    pub layout: Layout,
    pub layout_source: LayoutSource,
    pub runtime: RemoteAddr,
    pub gil: RemoteAddr,
    pub gil_word: GilWordFields,
    pub tids: TidSource,
    pub memory: ProcessMemory,
    /// Where the GIL's condition variables count their waiters, or why they cannot be read.
    pub waiter_counts: std::result::Result<WaiterCounts, String>,
}

impl Target {
    /// Reads the GIL words in one read.
    pub fn read_gil_word(&self) -> std::result::Result<GilWord, ReadError> {
        self.read_gil(None).map(|reading| reading.word)
    }

    /// Reads the GIL words and, where `counts` is given, the waiter counts and the mutex's owner at the
    /// same moment, in one read of the GIL structure that holds them all: a read costs the same for
    /// 24 bytes as for 200 (a syscall each), and the sampler does this on every tick.
    pub fn read_gil(
        &self,
        counts: Option<&WaiterCounts>,
    ) -> std::result::Result<GilReading, ReadError> {
        let (word_start, word_end) = (
            self.gil.0 + self.gil_word.start,
            self.gil.0 + self.gil_word.end,
        );
        let (start, end) = match counts {
            Some(at) => (word_start.min(at.take_wrefs.0), word_end.max(at.span_end())),
            None => (word_start, word_end),
        };
        let mut buf = [0u8; GIL_SPAN_MAX];
        let span = self.read_span(start, end, &mut buf)?;
        let word_bytes = &span[(word_start - start) as usize..(word_end - start) as usize];
        let word = self.gil_word.decode(word_bytes)?;
        let counted = counts.map(|at| &span[(at.take_wrefs.0 - start) as usize..]);
        Ok(GilReading {
            word,
            waiters: counts
                .zip(counted)
                .and_then(|(at, bytes)| at.decode(bytes).ok()),
            mutex_owner: counts
                .zip(counted)
                .and_then(|(at, bytes)| at.decode_mutex_owner(bytes)),
        })
    }

    /// A reader of the target's Python objects (thread names), or why its layout cannot give one.
    pub fn object_reader(&self) -> std::result::Result<ObjectReader, String> {
        ObjectReader::new(&self.layout, self.version, self.binary.types)
    }

    /// The target's thread states, walked with `walker` (which keeps what it needs between walks).
    pub fn walk_threads(
        &self,
        walker: &mut ThreadWalker,
        out: &mut Vec<ThreadRef>,
    ) -> std::result::Result<(), WalkError> {
        walker.walk(&self.memory, &self.layout, self.runtime, self.tids, out)
    }

    /// The byte ranges of the GIL's condition variables and mutexes: a thread sleeping in futex on an
    /// address inside one of these is waiting for (`take`) or handing off (`drop`) the GIL.
    pub fn gil_wait_ranges(&self) -> GilWaitRanges {
        let range = |name: &str| {
            self.layout
                .field(name)
                .map(|f| (self.gil.0 + f.offset, self.gil.0 + f.offset + f.size))
        };
        GilWaitRanges {
            take: [range("gil.cond"), range("gil.mutex")],
            drop: [range("gil.switch_cond"), range("gil.switch_mutex")],
            // glibc's `__g_signals[2]` follows `__wrefs` in every layout that has it.
            cond_waiter_words: self
                .waiter_counts
                .as_ref()
                .ok()
                .map(|c| (c.take_wrefs.0 + 4, c.take_wrefs.0 + 12)),
        }
    }
}

impl Target {
    /// Whether the target still maps the same interpreter file where it did at attach time; false
    /// after an exec. Reads /proc/PID/maps, so it is for the rare check after persistent faults.
    pub fn still_mapped(&self) -> Result<bool> {
        let runtime = self.binary.runtime_symbol.0;
        // The mapping that holds `_PyRuntime` is the file's writable data; the same file mapped anywhere
        // in the same place means the same interpreter (an exec of the same non-PIE binary re-creates
        // it there, and reading on is then right).
        let base = self
            .binary
            .mapping
            .start
            .wrapping_sub(self.binary.mapping.offset);
        Ok(read_file_mappings(self.pid)?.iter().any(|m| {
            m.same_file(&self.binary.mapping)
                && m.start.wrapping_sub(m.offset) == base
                && runtime >= base
        }))
    }
}

/// Where glibc counts the threads waiting on the GIL's two condition variables (process/glibc.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaiterCounts {
    pub glibc: (u32, u32),
    /// `gil.cond`'s `__wrefs`: threads in `take_gil`'s wait.
    pub take_wrefs: RemoteAddr,
    /// `gil.switch_cond`'s `__wrefs`: threads in `drop_gil`'s forced-switch wait; after `take_wrefs`,
    /// so that one read covers both.
    drop_wrefs: Option<RemoteAddr>,
    /// `gil.mutex`'s `__lock`, followed by its `__owner`; after `take_wrefs` too (the mutex follows
    /// the condition variable in every CPython layout).
    mutex_lock: Option<RemoteAddr>,
}

/// The GIL as one read sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GilReading {
    pub word: GilWord,
    /// `None` where glibc's counts are not known or read as something no live GIL holds.
    pub waiters: Option<Waiters>,
    /// The target's id (in its own PID namespace) of the thread holding the GIL's mutex, `Some(0)` for
    /// nobody; `None` where not known or the mutex reads inconsistent.
    pub mutex_owner: Option<u32>,
}

/// How many threads are inside each GIL wait, including those woken and not yet run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waiters {
    pub take: u32,
    pub drop: u32,
}

/// Bounds one read of the GIL structure (about 200 bytes in every CPython layout): a layout whose
/// fields lie further apart reads as a fault rather than as a larger read.
const GIL_SPAN_MAX: usize = 512;

impl WaiterCounts {
    /// Where glibc (`condvar`) counts the waiters of a GIL at `gil`, laid out as `layout` on `arch`
    /// (the target binary's ELF machine, which sets the size of glibc's mutex).
    pub fn locate(
        layout: &Layout,
        arch: &str,
        gil: RemoteAddr,
        condvar: crate::process::glibc::CondvarLayout,
    ) -> std::result::Result<WaiterCounts, String> {
        use crate::process::glibc::{PTHREAD_COND_SIZE, pthread_mutex_size};
        let wrefs = |name: &str| -> std::result::Result<Option<RemoteAddr>, String> {
            let Some(field) = layout.field(name) else {
                return Ok(None);
            };
            if field.size != PTHREAD_COND_SIZE {
                return Err(format!(
                    "{name} is {} bytes, not a glibc pthread_cond_t",
                    field.size
                ));
            }
            Ok(Some(RemoteAddr(
                gil.0 + field.offset + condvar.wrefs_offset,
            )))
        };
        let take_wrefs = wrefs("gil.cond")?.ok_or("the layout has no gil.cond")?;
        let drop_wrefs = wrefs("gil.switch_cond")?
            .filter(|d| d.0 > take_wrefs.0 && d.0 + 4 - take_wrefs.0 <= GIL_SPAN_MAX as u64);
        let mutex_lock = layout
            .field("gil.mutex")
            .filter(|f| Some(f.size) == pthread_mutex_size(arch))
            .map(|f| RemoteAddr(gil.0 + f.offset))
            .filter(|m| m.0 > take_wrefs.0 && m.0 + 12 - take_wrefs.0 <= GIL_SPAN_MAX as u64);
        Ok(WaiterCounts {
            glibc: condvar.release,
            take_wrefs,
            drop_wrefs,
            mutex_lock,
        })
    }

    /// The end of the bytes that hold both counts and the mutex's owner, which start at `take_wrefs`.
    fn span_end(&self) -> u64 {
        let counts_end = self.drop_wrefs.map_or(self.take_wrefs.0, |d| d.0) + 4;
        let owner_end = self
            .mutex_lock
            .map_or(0, |m| m.0 + crate::process::glibc::MUTEX_OWNER_OFFSET + 4);
        counts_end.max(owner_end)
    }

    /// Where the GIL's mutex is, when located as glibc's (reads then report its owner).
    pub fn mutex(&self) -> Option<RemoteAddr> {
        self.mutex_lock
    }

    /// Decodes the mutex's owner from bytes that start at `take_wrefs`.
    pub fn decode_mutex_owner(&self, span: &[u8]) -> Option<u32> {
        use crate::process::glibc::{MUTEX_LOCK_OFFSET, MUTEX_OWNER_OFFSET, mutex_owner};
        let at = self.mutex_lock?.0 - self.take_wrefs.0;
        mutex_owner(
            u32_at(span, at + MUTEX_LOCK_OFFSET)?,
            u32_at(span, at + MUTEX_OWNER_OFFSET)?,
        )
    }

    /// Decodes both counts from bytes that start at `take_wrefs`.
    pub fn decode(&self, span: &[u8]) -> std::result::Result<Waiters, ReadError> {
        let word = |offset: u64| -> std::result::Result<u32, ReadError> {
            let wrefs = u32_at(span, offset).ok_or(ReadError::Fault)?;
            // Bits 0 (process-shared) and 2 (being destroyed) are never set on a live GIL.
            if wrefs & 0b101 == 0 {
                Ok(crate::process::glibc::waiters_in(wrefs))
            } else {
                Err(ReadError::Fault)
            }
        };
        Ok(Waiters {
            take: word(0)?,
            drop: match self.drop_wrefs {
                Some(d) => word(d.0 - self.take_wrefs.0)?,
                None => 0,
            },
        })
    }
}

impl Target {
    /// Reads both waiter counts in one read.
    pub fn read_waiters(&self, at: &WaiterCounts) -> std::result::Result<Waiters, ReadError> {
        let mut buf = [0u8; GIL_SPAN_MAX];
        at.decode(self.read_span(at.take_wrefs.0, at.span_end(), &mut buf)?)
    }

    /// Target bytes `start..end`, one read into `buf`; a span longer than the buffer is refused as
    /// a fault (its length comes from the layout's and the C library's offsets, not the target).
    fn read_span<'b>(
        &self,
        start: u64,
        end: u64,
        buf: &'b mut [u8; GIL_SPAN_MAX],
    ) -> std::result::Result<&'b [u8], ReadError> {
        let span = buf
            .get_mut(..end.saturating_sub(start) as usize)
            .ok_or(ReadError::Fault)?;
        self.memory.read_into(RemoteAddr(start), span)?;
        Ok(span)
    }
}

/// The native-endian 32-bit word at byte `offset` of `span`, if the span holds all of it.
fn u32_at(span: &[u8], offset: u64) -> Option<u32> {
    let start = usize::try_from(offset).ok()?;
    let raw = span.get(start..start.checked_add(4)?)?;
    Some(u32::from_ne_bytes(raw.try_into().ok()?))
}

/// Locates the waiter counts of the target's GIL and reads them once to check them.
fn find_waiter_counts(target: &Target) -> std::result::Result<WaiterCounts, String> {
    let condvar = crate::process::glibc::detect(target.pid)?;
    let counts = WaiterCounts::locate(&target.layout, target.binary.arch, target.gil, condvar)?;
    let first = (target.gil.0 + target.gil_word.start).min(counts.take_wrefs.0);
    let last = (target.gil.0 + target.gil_word.end).max(counts.span_end());
    if last - first > GIL_SPAN_MAX as u64 {
        return Err(format!(
            "the GIL's words and its waiter counts lie {} bytes apart, more than one read of {GIL_SPAN_MAX}",
            last - first
        ));
    }
    target.read_waiters(&counts).map_err(|e| {
        format!(
            "glibc {}.{}'s waiter count in the GIL reads as invalid ({e:?})",
            condvar.release.0, condvar.release.1
        )
    })?;
    Ok(counts)
}

/// Address ranges `[start, end)` inside the GIL struct.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GilWaitRanges {
    pub take: [Option<(u64, u64)>; 2],
    pub drop: [Option<(u64, u64)>; 2],
    /// The words of `gil.cond` its waiters sleep on (glibc's `__g_signals`), where the C library is
    /// known: a thread asleep on another word of it is signalling it.
    pub cond_waiter_words: Option<(u64, u64)>,
}

impl GilWaitRanges {
    /// Whether a futex address belongs to any of the GIL's condition variables or mutexes.
    pub fn contains(&self, addr: u64) -> bool {
        self.take
            .iter()
            .chain(&self.drop)
            .flatten()
            .any(|&(start, end)| addr >= start && addr < end)
    }
}

/// A Python binary found in a target, with its layout: everything about the target that does not
/// depend on the interpreter having started.
pub struct Located {
    pub pid: u32,
    pub binary: Binary,
    pub version: PyVersion,
    pub flavour: Flavour,
    pub layout: Layout,
    pub layout_source: LayoutSource,
}

/// Attaches to `pid`: `locate` then `connect`. `NotReady` means the process is Python but its
/// interpreter is not running yet (launch mode retries `connect` on it).
pub fn attach(pid: u32, choice: LayoutChoice) -> Result<Target> {
    locate(pid, choice)?.connect()
}

/// Finds the interpreter binary in `pid`'s mappings, its version, flavour and layout.
pub fn locate(pid: u32, choice: LayoutChoice) -> Result<Located> {
    check_is_user_process(pid)?;
    let mappings = read_file_mappings(pid)?;
    if mappings.is_empty() {
        return Err(Error::NotPython {
            pid,
            why: "it has no file mappings (a kernel thread or a zombie)".into(),
        });
    }
    let (binary, image, version) = find_interpreter(pid, &mappings)?;
    let flavour = detect_flavour(&image)?;
    let memory = ProcessMemory::new(pid);
    let (layout, layout_source) = choose_layout(
        &LayoutRequest {
            pid,
            image: &image,
            version,
            flavour,
            arch: binary.arch,
            memory: &memory,
            runtime: binary.runtime_symbol,
        },
        choice,
    )?;
    Ok(Located {
        pid,
        binary,
        version,
        flavour,
        layout,
        layout_source,
    })
}

impl Located {
    /// Finds the GIL and the thread list in the live process and validates the layout against them.
    pub fn connect(&self) -> Result<Target> {
        let pid = self.pid;
        let memory = ProcessMemory::new(pid);
        let runtime = self.binary.runtime_symbol;
        let mut probe = [0u8; 8];
        memory
            .read_into(runtime, &mut probe)
            .map_err(|e| read_error(pid, e, "memory"))?;
        let gil = find_gil(&memory, &self.layout, runtime).map_err(|e| walk_error(pid, e))?;
        // Thread ids in the target's own PID namespace: what its thread states hold.
        let mut tid_map = TidMap::new(pid)?;
        let process_tids = tid_map.their_tids()?;
        let tids = find_tid_source(&memory, &self.layout, runtime, &process_tids)
            .map_err(|e| walk_error(pid, e))?;
        let target = Target {
            pid,
            binary: self.binary.clone(),
            version: self.version,
            flavour: self.flavour,
            layout: self.layout.clone(),
            layout_source: self.layout_source.clone(),
            runtime,
            gil,
            gil_word: GilWordFields::new(&self.layout),
            tids,
            memory,
            waiter_counts: Err(String::new()),
        };
        check_gil_enabled(&target)?;
        validate(&target, &mut tid_map)?;
        let waiter_counts = find_waiter_counts(&target);
        Ok(Target {
            waiter_counts,
            ..target
        })
    }
}

/// A free-threaded build may run with the GIL disabled; then there is nothing to record, and saying so
/// beats writing an empty trace.
fn check_gil_enabled(target: &Target) -> Result<()> {
    if target.flavour != Flavour::FreeThreaded && target.layout.flavour != Flavour::FreeThreaded {
        return Ok(());
    }
    let pid = target.pid;
    let Some(enabled) = target.layout.field("interp.gil_enabled") else {
        return Err(Error::Unsupported {
            pid,
            why: "a free-threaded build, and gilsample cannot tell whether its GIL is enabled"
                .into(),
        });
    };
    let main =
        crate::python::runtime::read_interpreters(&target.memory, &target.layout, target.runtime)
            .map_err(|e| walk_error(pid, e))?
            .last()
            .copied()
            .ok_or(Error::NotReady {
                pid,
                why: "no interpreter yet".into(),
            })?;
    let mut flag = [0u8; 4];
    target
        .memory
        .read_into(
            main.offset(enabled.offset).ok_or(Error::LayoutInvalid {
                pid,
                why: "GIL flag address overflows".into(),
            })?,
            &mut flag,
        )
        .map_err(|e| read_error(pid, e, "the GIL's enabled flag"))?;
    if u32::from_ne_bytes(flag) == 0 {
        return Err(Error::Unsupported {
            pid,
            why: format!(
                "Python {} is a free-threaded build running with the GIL disabled: there are no GIL waits or holds to record \
                 (start it with PYTHON_GIL=1 or -X gil=1 to record its GIL)",
                target.version
            ),
        });
    }
    Ok(())
}

fn check_is_user_process(pid: u32) -> Result<()> {
    if pid == std::process::id() {
        return Err(Error::Usage(format!(
            "process {pid} is gilsample itself; give the pid of a Python process"
        )));
    }
    let stat = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .map_err(|e| proc_error(pid, e, "/proc entry"))?;
    const PF_KTHREAD: u32 = 0x0020_0000;
    if stat.flags & PF_KTHREAD != 0 {
        return Err(Error::NotPython {
            pid,
            why: "it is a kernel thread".into(),
        });
    }
    if stat.state == 'Z' {
        return Err(Error::NotPython {
            pid,
            why: "it is a zombie: it has exited and waits for its parent to reap it".into(),
        });
    }
    Ok(())
}

fn read_error(pid: u32, e: ReadError, what: &str) -> Error {
    match e {
        ReadError::Permission => Error::Permission {
            pid,
            what: what.into(),
        },
        ReadError::Gone => Error::ProcessGone { pid },
        ReadError::Fault => Error::LayoutInvalid {
            pid,
            why: format!("{what}: unreadable address"),
        },
        ReadError::Other(errno) => Error::from_target_errno(pid, errno, what),
    }
}

fn walk_error(pid: u32, e: WalkError) -> Error {
    match e {
        WalkError::Read(ReadError::Fault) => Error::LayoutInvalid {
            pid,
            why: "a pointer in the runtime leads to unmapped memory".into(),
        },
        WalkError::Read(e) => read_error(pid, e, "memory"),
        WalkError::NotInitialized => Error::NotReady {
            pid,
            why: "_PyRuntime has no interpreter or thread yet".into(),
        },
        WalkError::Corrupt(why) => Error::LayoutInvalid { pid, why },
    }
}

/// Files worth opening: the ones whose name says Python first, then the main executable (an embedded
/// or renamed interpreter). Parsing every shared object of a large framework would be slow.
fn candidate_files(mappings: &[Mapping]) -> Vec<&Mapping> {
    let mut seen: Vec<&Mapping> = Vec::new();
    for m in mappings {
        if !seen.iter().any(|s| s.same_file(m)) {
            seen.push(m);
        }
    }
    let is_python = |m: &&Mapping| {
        m.path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains("python"))
    };
    let mut ordered: Vec<&Mapping> = seen.iter().copied().filter(is_python).collect();
    if let Some(first) = seen.first().filter(|m| !is_python(m)) {
        ordered.push(first);
    }
    ordered
}

fn find_interpreter(pid: u32, mappings: &[Mapping]) -> Result<(Binary, ElfImage, PyVersion)> {
    let mut python_like: Option<PyVersion> = None;
    let mut problems = Vec::new();
    for candidate in candidate_files(mappings) {
        if let Some(v) = PyVersion::from_file_name(&candidate.path) {
            python_like.get_or_insert(v);
        }
        let OpenedFile { file, opened_as } = match open_mapped_file(pid, candidate) {
            Ok(opened) => opened,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let image = ElfImage::from_file(file, &opened_as)?;
        let Ok(parsed) = image.parse() else { continue };
        let Some(symbol) = elf::find_symbol(&parsed, "_PyRuntime") else {
            continue;
        };
        let same_file: Vec<&Mapping> = mappings.iter().filter(|m| m.same_file(candidate)).collect();
        let Some(bias) = elf::find_load_bias(&parsed, &same_file) else {
            problems.push(format!(
                "{}: no mapping matches its load segments",
                candidate.path.display()
            ));
            continue;
        };
        let version = match elf::find_symbol(&parsed, "Py_Version")
            .and_then(|s| elf::read_vaddr(&parsed, image.bytes(), s.vaddr, 8))
            .map(|b| PyVersion::from_hex(u64::from_le_bytes(b.try_into().unwrap())))
        {
            Some(v) => v,
            None => PyVersion::from_file_name(&candidate.path).ok_or_else(|| Error::Unsupported {
                pid,
                why: format!("{} defines _PyRuntime but its version is unknown (no Py_Version, unversioned name)", candidate.path.display()),
            })?,
        };
        let binary = Binary {
            mapped_path: candidate.path.clone(),
            opened_as: opened_as.clone(),
            shared_library: parsed.header.e_type == goblin::elf::header::ET_DYN
                && parsed.interpreter.is_none(),
            build_id: elf::build_id(&parsed, image.bytes()),
            arch: elf::arch_name(&parsed),
            runtime_symbol: RemoteAddr(symbol.vaddr.wrapping_add(bias)),
            load_bias: bias,
            mapping: candidate.clone(),
            types: {
                let [dict, str, int, module, code, bytes] = TypeObjects::SYMBOLS.map(|name| {
                    elf::find_symbol(&parsed, name).map(|s| RemoteAddr(s.vaddr.wrapping_add(bias)))
                });
                TypeObjects {
                    dict,
                    str,
                    int,
                    module,
                    code,
                    bytes,
                }
            },
        };
        drop(parsed);
        check_version_supported(pid, version)?;
        return Ok((binary, image, version));
    }
    match python_like {
        Some(v) if (v.major, v.minor) < OLDEST_SUPPORTED => Err(Error::Unsupported {
            pid,
            why: format!(
                "Python {v} is not supported: gilsample reads _PyRuntime, which exists from {}.{} on",
                OLDEST_SUPPORTED.0, OLDEST_SUPPORTED.1
            ),
        }),
        _ if !problems.is_empty() => Err(Error::NotPython {
            pid,
            why: problems.join("; "),
        }),
        _ => Err(Error::NotPython {
            pid,
            why: "no mapped file defines _PyRuntime".into(),
        }),
    }
}

fn check_version_supported(pid: u32, version: PyVersion) -> Result<()> {
    if version.major != 3 || (version.major, version.minor) < OLDEST_SUPPORTED {
        return Err(Error::Unsupported {
            pid,
            why: format!(
                "Python {version} is not supported; 3.7 and newer are (shipped layouts: {})",
                shipped_keys().join(", ")
            ),
        });
    }
    Ok(())
}

pub fn detect_flavour(image: &ElfImage) -> Result<Flavour> {
    let elf = image.parse()?;
    // Py_REF_DEBUG (implied by Py_DEBUG) exports these; release builds never do.
    let debug = ["_Py_RefTotal", "_Py_GetGlobalRefTotal"]
        .iter()
        .any(|s| elf::find_symbol(&elf, s).is_some());
    Ok(if debug {
        Flavour::Debug
    } else {
        Flavour::Default
    })
}

/// Separate debug files for a binary: by build-id, then by debuglink, inside the target's root first.
fn separate_debug_files(pid: u32, image: &ElfImage, mapped_path: &Path) -> Vec<PathBuf> {
    let Ok(elf) = image.parse() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let roots = [
        PathBuf::from(format!("/proc/{pid}/root")),
        PathBuf::from("/"),
    ];
    if let Some(id) = elf::build_id(&elf, image.bytes()).filter(|id| id.len() > 2) {
        for root in &roots {
            found.push(root.join(format!(
                "usr/lib/debug/.build-id/{}/{}.debug",
                &id[..2],
                &id[2..]
            )));
        }
    }
    if let (Some(link), Some(dir)) = (elf::debuglink(&elf, image.bytes()), mapped_path.parent()) {
        let dir = dir.strip_prefix("/").unwrap_or(dir);
        for root in &roots {
            found.push(root.join("usr/lib/debug").join(dir).join(&link));
            found.push(root.join(dir).join(".debug").join(&link));
        }
    }
    found.into_iter().filter(|p| p.is_file()).collect()
}

/// What `choose_layout` needs to know about the target.
struct LayoutRequest<'a> {
    pid: u32,
    image: &'a ElfImage,
    version: PyVersion,
    flavour: Flavour,
    arch: &'a str,
    memory: &'a ProcessMemory,
    runtime: RemoteAddr,
}

impl LayoutRequest<'_> {
    fn key(&self) -> String {
        self.version.minor_key()
    }

    /// The shipped layout generated from this very build (same build-id): what its DWARF would say,
    /// without a DWARF parse (which matters in launch mode, where the script is already running).
    fn same_build_file(&self) -> Result<Option<Layout>> {
        let build_id = self
            .image
            .parse()
            .ok()
            .and_then(|e| elf::build_id(&e, self.image.bytes()));
        Ok(find_shipped(&self.key(), self.flavour, self.arch)?
            .filter(|l| l.build_id.is_some() && l.build_id == build_id))
    }

    fn shipped_file(&self) -> Result<Option<Layout>> {
        find_shipped(&self.key(), self.flavour, self.arch)
    }

    /// DWARF of the binary itself, or of its separate debug file.
    fn dwarf(&self, tried: &mut Vec<String>) -> Option<(Layout, PathBuf)> {
        let image = self.image;
        let mut files = Vec::new();
        if image
            .parse()
            .map(|e| elf::has_debug_info(&e))
            .unwrap_or(false)
        {
            files.push(image.path.clone());
        }
        files.extend(separate_debug_files(self.pid, image, &image.path));
        if files.is_empty() {
            tried.push("no DWARF in the binary and no separate debug file".into());
        }
        for path in files {
            let opened = if path == image.path {
                None
            } else {
                Some(ElfImage::open(&path))
            };
            let source = match &opened {
                Some(Ok(img)) => img,
                Some(Err(e)) => {
                    tried.push(e.to_string());
                    continue;
                }
                None => image,
            };
            match Layout::from_dwarf(
                source,
                &self.key(),
                &self.version.to_string(),
                self.flavour,
                self.arch,
            ) {
                Ok(layout) => return Some((layout, path)),
                Err(e) => tried.push(e.to_string()),
            }
        }
        None
    }

    /// The target's own `_Py_DebugOffsets`, located with the best descriptor of the version at hand.
    fn debug_offsets(&self, tried: &mut Vec<String>) -> Result<Option<(Layout, LayoutSource)>> {
        if (self.version.major, self.version.minor) < (3, 13) {
            tried.push(format!(
                "Python {} has no _Py_DebugOffsets (3.13+)",
                self.version
            ));
            return Ok(None);
        }
        // Where the entries sit inside the table is fixed per minor version, and reading the table is
        // validated entry by entry, so the shipped descriptor is tried before a (slow) DWARF parse.
        let shipped = match self.same_build_file()? {
            Some(layout) => Some(layout),
            None => self.shipped_file()?,
        };
        let descriptor = match shipped.filter(|l| l.field("debug_offsets").is_some()) {
            Some(layout) => Some((layout.key(), layout)),
            None => self
                .dwarf(tried)
                .map(|(layout, path)| (format!("dwarf:{}", path.display()), layout)),
        };
        let Some((described_by, descriptor)) = descriptor else {
            tried.push("no layout describes this version's _Py_DebugOffsets".into());
            return Ok(None);
        };
        match debug_offsets::read_layout(self.memory, self.runtime, &descriptor, self.version) {
            Ok((layout, _)) => Ok(Some((layout, LayoutSource::DebugOffsets(described_by)))),
            Err(why) => {
                tried.push(format!("_Py_DebugOffsets: {why}"));
                Ok(None)
            }
        }
    }
}

fn choose_layout(
    request: &LayoutRequest<'_>,
    choice: LayoutChoice,
) -> Result<(Layout, LayoutSource)> {
    let mut tried = Vec::new();
    if matches!(choice, LayoutChoice::Auto | LayoutChoice::DebugOffsets)
        && let Some(found) = request.debug_offsets(&mut tried)?
    {
        return Ok(found);
    }
    if matches!(choice, LayoutChoice::Auto | LayoutChoice::File)
        && let Some(layout) = request.same_build_file()?
    {
        let source = LayoutSource::File(layout.key());
        return Ok((layout, source));
    }
    if matches!(choice, LayoutChoice::Auto | LayoutChoice::Dwarf)
        && let Some((layout, path)) = request.dwarf(&mut tried)
    {
        return Ok((layout, LayoutSource::Dwarf(path)));
    }
    if matches!(choice, LayoutChoice::Auto | LayoutChoice::File) {
        if let Some(layout) = request.shipped_file()? {
            let source = LayoutSource::File(layout.key());
            return Ok((layout, source));
        }
        tried.push(format!(
            "no shipped layout {}-{}-{}",
            request.key(),
            request.flavour,
            request.arch
        ));
    }
    let version = request.version;
    Err(Error::Unsupported {
        pid: request.pid,
        why: format!(
            "no usable layout for Python {version} ({}, {}) from source {choice:?}: {}. Shipped layouts: {}. \
             To add one, run scripts/generate-layouts.sh on a build of this version that has DWARF, or \
             install its debug symbols (e.g. the python3.X-dbg package) so gilsample can read them.",
            request.flavour,
            request.arch,
            tried.join("; "),
            shipped_keys().join(", ")
        ),
    })
}

/// Checks the layout against the live process: the thread list walks to real tids of the process, and
/// a locked GIL's holder is one of those threads. A few attempts absorb a thread starting or exiting
/// in the middle of the check.
fn validate(target: &Target, tid_map: &mut TidMap) -> Result<()> {
    let pid = target.pid;
    let mut walker = ThreadWalker::default();
    let mut threads: Vec<ThreadRef> = Vec::new();
    let mut last_problem = String::new();
    // Threads start and exit while we look (some programs churn hundreds a second), so each attempt
    // brackets the walk with two reads of the GIL words, and a tid counts as real when the process has
    // it now or had it a moment ago; the holder is checked only when no hand-off happened during the
    // walk. A wrong layout fails every attempt: its "tids" are garbage.
    let mut before = tid_map.their_tids()?;
    for _ in 0..10 {
        let word_before = target
            .read_gil_word()
            .map_err(|e| read_error(pid, e, "the GIL"))?;
        // A walk can step onto a thread state freed under it (its `next` is then garbage): that is
        // one failed attempt, like an unknown tid. A wrong layout fails all of them.
        match target.walk_threads(&mut walker, &mut threads) {
            Ok(()) => {}
            Err(WalkError::Corrupt(why)) => {
                last_problem = why;
                before = tid_map.their_tids()?;
                continue;
            }
            Err(WalkError::Read(ReadError::Fault)) => {
                last_problem = "a pointer in the thread list leads to unmapped memory".into();
                before = tid_map.their_tids()?;
                continue;
            }
            Err(e) => return Err(walk_error(pid, e)),
        }
        let word_after = target
            .read_gil_word()
            .map_err(|e| read_error(pid, e, "the GIL"))?;
        let after = tid_map.their_tids()?;
        if threads.is_empty() {
            return Err(Error::NotReady {
                pid,
                why: "no Python thread yet".into(),
            });
        }
        let unknown: Vec<u32> = threads
            .iter()
            .map(|t| t.tid)
            .filter(|t| !before.contains(t) && !after.contains(t))
            .collect();
        let steady = word_before == word_after;
        let holder_known = !steady
            || !word_after.locked
            || threads.iter().any(|t| t.tstate == word_after.last_holder);
        if unknown.is_empty() && holder_known {
            return Ok(());
        }
        last_problem = if !unknown.is_empty() {
            format!(
                "thread ids {unknown:?} read from the thread states are not threads of the process"
            )
        } else {
            format!(
                "the GIL holder {} is not in the thread list",
                word_after.last_holder
            )
        };
        before = after;
    }
    Err(Error::LayoutInvalid {
        pid,
        why: last_problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36's words in a GIL laid out as on x86_64: `cond` at 0x1000 (`__wrefs` at +36), `mutex`
    /// after it at +48 (`__owner` at +8), `switch_cond` at +88.
    const COND: u64 = 0x1000;
    const MUTEX: u64 = COND + 48;

    fn counts() -> WaiterCounts {
        WaiterCounts {
            glibc: (2, 36),
            take_wrefs: RemoteAddr(COND + 36),
            drop_wrefs: Some(RemoteAddr(COND + 88 + 36)),
            mutex_lock: Some(RemoteAddr(MUTEX)),
        }
    }

    fn put(span: &mut [u8], counts: &WaiterCounts, addr: u64, value: u32) {
        let at = (addr - counts.take_wrefs.0) as usize;
        span[at..at + 4].copy_from_slice(&value.to_ne_bytes());
    }

    #[test]
    fn one_span_holds_the_counts_and_the_mutex_owner() {
        let counts = counts();
        let mut span = vec![0u8; (counts.span_end() - counts.take_wrefs.0) as usize];
        // Three waiters on a CLOCK_MONOTONIC condition variable; the mutex locked by thread 4242.
        put(&mut span, &counts, COND + 36, (3 << 3) | 2);
        put(&mut span, &counts, MUTEX, 1);
        put(&mut span, &counts, MUTEX + 8, 4242);
        assert_eq!(counts.decode(&span), Ok(Waiters { take: 3, drop: 0 }));
        assert_eq!(counts.decode_mutex_owner(&span), Some(4242));
        // An owner on a free lock is a torn read, not an owner.
        put(&mut span, &counts, MUTEX, 0);
        assert_eq!(counts.decode_mutex_owner(&span), None);
        put(&mut span, &counts, MUTEX + 8, 0);
        assert_eq!(counts.decode_mutex_owner(&span), Some(0));
    }

    #[test]
    fn the_span_reaches_the_owner_without_a_switch_cond() {
        let counts = WaiterCounts {
            drop_wrefs: None,
            ..counts()
        };
        assert_eq!(counts.span_end(), MUTEX + 12);
        let unlocated = WaiterCounts {
            mutex_lock: None,
            ..counts
        };
        assert_eq!(unlocated.mutex(), None);
        assert_eq!(unlocated.span_end(), COND + 40);
        assert_eq!(unlocated.decode_mutex_owner(&[0u8; 64]), None);
    }
}
