//! Which of a target's mapped files is the interpreter: the ELF that defines `_PyRuntime` (an
//! executable, or `libpython` for a shared build), with its version, build-id, architecture, load
//! bias and the addresses of the type objects that object reads check against.
//!
//! Kept apart from choosing a layout because it is about files and symbols only, never the live
//! process's memory: a wrong answer here is "not Python", not "a wrong layout".

use std::path::PathBuf;

use goblin::elf::Elf;

use crate::addr::RemoteAddr;
use crate::error::{Error, Result};
use crate::process::maps::{Mapping, OpenedFile, open_mapped_file, path_in_target};
use crate::python::layout::shipped_keys;
use crate::python::objects::TypeObjects;
use crate::python::version::{OLDEST_SUPPORTED, PyVersion};
use crate::symbols::elf::{self, ElfImage};

/// The interpreter binary found in the target.
#[derive(Clone, Debug)]
pub struct Binary {
    /// The path as the target's maps name it.
    pub mapped_path: PathBuf,
    /// The path as the target itself names it (`process::maps::path_in_target`: a chroot's host
    /// prefix taken off), read once at attach, while the target is there.
    pub in_target: PathBuf,
    /// The path gilsample opened it through (differs for containers).
    pub opened_as: PathBuf,
    /// It is a `libpython` shared library rather than the executable itself.
    pub shared_library: bool,
    /// The GNU build-id, hex, where the ELF has one.
    pub build_id: Option<String>,
    /// The ELF's machine as layouts name it: `x86_64`, `aarch64`, ...
    pub arch: &'static str,
    /// The address of `_PyRuntime` in the target (load bias applied).
    pub runtime_symbol: RemoteAddr,
    /// What was added to the ELF's virtual addresses where the target mapped it.
    pub load_bias: u64,
    /// The mapping that holds `_PyRuntime`, to notice when the target execs something else.
    pub mapping: Mapping,
    /// The interpreter's type objects (`PyDict_Type`, …), to check objects read from memory.
    pub types: TypeObjects,
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
    let is_python = |m: &&Mapping| looks_like_python(&m.path);
    let mut ordered: Vec<&Mapping> = seen.iter().copied().filter(is_python).collect();
    if let Some(first) = seen.first().filter(|m| !is_python(m)) {
        ordered.push(first);
    }
    ordered
}

/// The interpreter's ELF file, parsed once: `find_interpreter` parses each candidate to look for
/// `_PyRuntime`, and the parse of the one that defines it is what every later step of attach reads
/// (version, type objects, flavour, build-id, debug files, DWARF). The parse borrows the image, so
/// it lives only as long as the call `find_interpreter` hands it to.
pub struct InterpreterElf<'a> {
    /// The file's bytes.
    pub image: &'a ElfImage,
    /// Its parse, borrowing `image`.
    pub elf: Elf<'a>,
}

/// Finds the mapped file that defines `_PyRuntime`, learns its version, and hands the binary and its
/// one parse to `then` (whose answer is returned).
pub(crate) fn find_interpreter<T>(
    pid: u32,
    mappings: &[Mapping],
    then: impl FnOnce(Binary, PyVersion, &InterpreterElf<'_>) -> Result<T>,
) -> Result<T> {
    let mut python_like: Option<PyVersion> = None;
    let mut problems = Vec::new();
    // A libpython the program needs (DT_NEEDED) that is not mapped yet: the program was exec'd a
    // moment ago and the dynamic loader is still at work, so it is Python that is not ready, not a
    // program that is not Python.
    let mut loading: Option<String> = None;
    // Files this user may not open: said as one permission error, the interpreter's first.
    let mut refused: Vec<std::path::PathBuf> = Vec::new();
    for candidate in candidate_files(mappings) {
        if let Some(v) = PyVersion::from_file_name(&candidate.path) {
            python_like.get_or_insert(v);
        }
        let Some(OpenedFile { file, opened_as }) =
            open_candidate(pid, candidate, &mut refused, &mut problems)
        else {
            continue;
        };
        let image = ElfImage::from_file(file, &opened_as)?;
        let Ok(parsed) = image.parse() else { continue };
        let Some(symbol) = elf::find_symbol(&parsed, "_PyRuntime") else {
            loading = loading.or_else(|| unmapped_libpython(&parsed, mappings));
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
            None => PyVersion::from_file_name(&candidate.path)
                .ok_or_else(|| Error::Unsupported {
                    pid,
                    why: format!("{} defines _PyRuntime but its version is unknown (no Py_Version, unversioned name)", candidate.path.display()),
                })?
                .with_micro_from(elf::section_bytes(&parsed, image.bytes(), ".rodata").unwrap_or(&[])),
        };
        let binary = Binary {
            mapped_path: candidate.path.clone(),
            in_target: path_in_target(pid, &candidate.path),
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
        check_version_supported(pid, version)?;
        return then(
            binary,
            version,
            &InterpreterElf {
                image: &image,
                elf: parsed,
            },
        );
    }
    match python_like {
        Some(v) if (v.major, v.minor) < OLDEST_SUPPORTED => Err(Error::Unsupported {
            pid,
            why: format!(
                "Python {v} is not supported: gilsample reads _PyRuntime, which exists from {}.{} on",
                OLDEST_SUPPORTED.0, OLDEST_SUPPORTED.1
            ),
        }),
        _ if !refused.is_empty() => Err(Error::FilesUnreadable {
            pid,
            files: refused,
        }),
        _ if loading.is_some() => Err(Error::NotReady {
            pid,
            why: format!(
                "it needs {} and the dynamic loader has not mapped it yet (just started)",
                loading.unwrap_or_default()
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

/// `candidate` opened; else why not, in `refused` (a would-be interpreter this user may not open:
/// said as one permission error) or in `problems` (a program that is not Python may keep its own
/// files closed; a file gone or replaced).
fn open_candidate(
    pid: u32,
    candidate: &Mapping,
    refused: &mut Vec<std::path::PathBuf>,
    problems: &mut Vec<String>,
) -> Option<OpenedFile> {
    match open_mapped_file(pid, candidate) {
        Ok(opened) => Some(opened),
        Err(Error::FilesUnreadable { files, .. }) if looks_like_python(&candidate.path) => {
            refused.extend(files);
            None
        }
        Err(Error::FilesUnreadable { .. }) => {
            problems.push(format!(
                "{}: this user may not open it",
                candidate.path.display()
            ));
            None
        }
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    }
}

/// Whether `path` is named as a Python interpreter or its library is (python3.11,
/// libpython3.12.so.1.0): the files `candidate_files` tries first.
fn looks_like_python(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| name.contains("python"))
}

/// The `libpython` in `elf`'s needed libraries when no mapping is of a file by that name.
fn unmapped_libpython(elf: &Elf<'_>, mappings: &[Mapping]) -> Option<String> {
    let needed = elf.libraries.iter().find(|l| l.starts_with("libpython"))?;
    let mapped = mappings
        .iter()
        .any(|m| m.path.file_name().and_then(|n| n.to_str()) == Some(needed));
    (!mapped).then(|| needed.to_string())
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
