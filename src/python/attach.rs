//! Attaching to a target: find the ELF that defines `_PyRuntime` among its mappings, learn the version,
//! pick a layout, and check that layout against the live process before any sampling starts.
//!
//! Nothing is written to the target and it is never stopped; "attach" only means reading.
//!
//! This module is the sequence and the `Target` it ends with; each step has its own module:
//! `find_binary` (which mapped file is the interpreter), `layout_choice` (where its layout comes
//! from), `validate` (whether the live process agrees with that layout) and `gil_span` (reading the
//! GIL's words and waiter counts, which the sampler does on every tick). The names other modules use
//! are re-exported here, so `crate::python::attach::{Target, GilReading, ...}` stays the one path.

use std::cell::OnceCell;

use crate::addr::RemoteAddr;
use crate::error::{Error, Result};
use crate::process::maps::read_file_mappings;
use crate::process::memory::{MemorySource, ProcessMemory, ReadError};
use crate::process::tasks::TidMap;
use crate::python::find_binary::find_interpreter;
use crate::python::gil_span::find_waiter_counts;
use crate::python::layout::{Flavour, Layout};
use crate::python::layout_choice::{LayoutRequest, choose_layout, flavour_of};
use crate::python::objects::ObjectReader;
use crate::python::runtime::{
    GilWordFields, ThreadRef, ThreadWalker, TidSource, WalkError, find_gil, find_tid_source,
};
use crate::python::validate::{check_gil_enabled, check_is_user_process, validate};
use crate::python::version::PyVersion;

pub use crate::python::find_binary::Binary;
pub use crate::python::gil_span::{GilReading, GilWaitRanges, WaiterCounts, Waiters};
pub use crate::python::layout_choice::{LayoutChoice, LayoutSource, detect_flavour};

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
    // The interpreter's ELF is parsed once, in `find_interpreter`; everything below reads that parse.
    find_interpreter(pid, &mappings, |binary, version, elf| {
        let flavour = flavour_of(&elf.elf);
        let memory = ProcessMemory::new(pid);
        let (layout, layout_source) = choose_layout(
            &LayoutRequest {
                pid,
                binary: elf,
                version,
                flavour,
                arch: binary.arch,
                memory: &memory,
                runtime: binary.runtime_symbol,
                dwarf_read: OnceCell::new(),
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
            .map_err(|e| read_error(pid, e, "the memory (process_vm_readv)"))?;
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

pub(crate) fn read_error(pid: u32, e: ReadError, what: &str) -> Error {
    match e {
        ReadError::Permission => Error::permission(pid, what),
        ReadError::Gone => Error::ProcessGone { pid },
        ReadError::Fault => Error::LayoutInvalid {
            pid,
            why: format!("{what}: unreadable address"),
        },
        ReadError::Other(errno) => Error::from_target_errno(pid, errno, what),
    }
}

pub(crate) fn walk_error(pid: u32, e: WalkError) -> Error {
    match e {
        WalkError::Read(ReadError::Fault) => Error::LayoutInvalid {
            pid,
            why: "a pointer in the runtime leads to unmapped memory".into(),
        },
        WalkError::Read(e) => read_error(pid, e, "the memory (process_vm_readv)"),
        WalkError::NotInitialized => Error::NotReady {
            pid,
            why: "_PyRuntime has no interpreter or thread yet".into(),
        },
        WalkError::Corrupt(why) => Error::LayoutInvalid { pid, why },
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    use super::*;
    use crate::symbols::elf::parse_log;

    /// A pyenv build of `minor` (e.g. "3.12"), if one is installed.
    fn pyenv_python(minor: &str) -> Option<PathBuf> {
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
        std::fs::read_dir(root.join("versions"))
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{minor}.")))
            })
            .map(|p| p.join("bin").join(format!("python{minor}")))
            .find(|p| p.exists())
    }

    /// A Python that has started its interpreter and sleeps; killed on drop.
    struct Sleeper(Child);

    impl Sleeper {
        fn start(python: &PathBuf) -> Sleeper {
            let mut child = Command::new(python)
                .args([
                    "-c",
                    "import time; print('ready', flush=True); time.sleep(120)",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line.trim(), "ready");
            Sleeper(child)
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Attach reads the interpreter's ELF from one parse, whichever source the layout comes from.
    #[test]
    fn attach_parses_the_interpreter_once() {
        let mut tried = 0;
        for minor in ["3.12", "3.13"] {
            // The suite's interpreters are expected (tests/common, EXPECTED): a missing one fails.
            let python = pyenv_python(minor)
                .unwrap_or_else(|| panic!("no pyenv Python {minor}: scripts/test.sh installs it"));
            let sleeper = Sleeper::start(&python);
            let pid = sleeper.0.id();
            for choice in [
                LayoutChoice::Auto,
                LayoutChoice::DebugOffsets,
                LayoutChoice::File,
                LayoutChoice::Dwarf,
            ] {
                parse_log::take();
                let target = match attach(pid, choice) {
                    Ok(target) => target,
                    // Not every build offers every source (3.12 has no _Py_DebugOffsets).
                    Err(Error::Unsupported { .. }) => continue,
                    Err(e) => panic!("attach to Python {minor} with {choice:?}: {e}"),
                };
                let parsed = parse_log::take();
                let interpreter = parsed
                    .iter()
                    .filter(|p| **p == target.binary.opened_as)
                    .count();
                eprintln!(
                    "Python {minor} {choice:?} ({}): the interpreter parsed {interpreter} times; all parses: {parsed:?}",
                    target.layout_source
                );
                assert_eq!(interpreter, 1, "Python {minor} {choice:?}: {parsed:?}");
                tried += 1;
            }
        }
        assert!(tried >= 5, "only {tried} attaches counted");
    }
}
