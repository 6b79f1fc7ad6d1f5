//! Attaching to a target: find the ELF that defines `_PyRuntime` among its mappings, learn the version,
//! pick a layout, and check that layout against the live process before any sampling starts.
//!
//! Nothing is written to the target and it is never stopped; "attach" only means reading.
//!
//! This module is the sequence, ending with a `Target` (python/target.rs, which holds every read of
//! it); each step has its own module: `find_binary` (which mapped file is the interpreter),
//! `layout_choice` (where its layout comes from), `validate` (whether the live process agrees with
//! that layout) and `gil_span` (where the GIL's words and waiter counts lie).

use std::cell::OnceCell;

use crate::error::{Error, Result};
use crate::process::maps::read_file_mappings;
use crate::process::memory::{MemorySource, ProcessMemory};
use crate::process::tasks::TidMap;
use crate::python::find_binary::find_interpreter;
use crate::python::gil_span::{GIL_SPAN_MAX, WaiterCountAddrs};
use crate::python::layout::{Flavour, Layout};
use crate::python::layout_choice::{LayoutRequest, choose_layout, flavour_of};
use crate::python::runtime::{GilWordFields, find_gil};
use crate::python::target::Target;
use crate::python::thread_list::find_tid_source;
use crate::python::validate::{
    check_gil_enabled, check_is_user_process, check_kernel_state_readable, read_error, validate,
    walk_error,
};
use crate::python::version::PyVersion;

pub use crate::python::find_binary::Binary;
pub use crate::python::layout_choice::{LayoutChoice, LayoutSource, detect_flavour};

/// A Python binary found in a target, with its layout: everything about the target that does not
/// depend on the interpreter having started.
pub struct Located {
    /// The target's pid in gilsample's PID namespace.
    pub pid: u32,
    /// The ELF that defines `_PyRuntime` and where it is mapped.
    pub binary: Binary,
    /// The interpreter's version.
    pub version: PyVersion,
    /// Its build flavour (default, debug or free-threaded).
    pub flavour: Flavour,
    /// The offsets of the fields gilsample reads.
    pub layout: Layout,
    /// Where `layout` came from.
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
    // Kernel threads and zombies were refused above, so a process without a mapped file is between
    // the two halves of exec: /proc/PID/exe already names the new program, whose segments are not
    // mapped yet. Taken for "not Python" then, a Python just exec'd by `env` was a launcher for good.
    if mappings.is_empty() {
        return Err(Error::NotReady {
            pid,
            why: "it is in the middle of exec (no file is mapped yet)".into(),
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
                in_target: &binary.in_target,
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
        check_kernel_state_readable(pid)?;
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

/// Locates the waiter counts of the target's GIL and reads them once to check them.
pub(crate) fn find_waiter_counts(target: &Target) -> std::result::Result<WaiterCountAddrs, String> {
    let condvar = crate::process::glibc::detect(target.pid)?;
    let counts = WaiterCountAddrs::locate(&target.layout, target.binary.arch, target.gil, condvar)?;
    let first = (target.gil.0 + target.gil_word.start).min(counts.cond.0);
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
                crate::stderr_line!(
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
