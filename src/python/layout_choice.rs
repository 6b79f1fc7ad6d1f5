//! Where the target's struct layout comes from: its own `_Py_DebugOffsets` (3.13+), a layout file
//! shipped for the same build, DWARF in the binary or a separate debug file, or the shipped file for
//! the version, in the order `LayoutChoice::Auto` tries them. Also the build's flavour (debug or
//! default), which picks among shipped files.
//!
//! Kept apart because it is the one place that weighs sources against each other; the reasons each
//! source was passed over are collected into the error that names what to install or generate.

use std::cell::OnceCell;
use std::fmt;
use std::path::{Path, PathBuf};

use goblin::elf::Elf;

use crate::addr::RemoteAddr;
use crate::error::{Error, Result};
use crate::process::memory::ProcessMemory;
use crate::python::debug_offsets;
use crate::python::find_binary::InterpreterElf;
use crate::python::layout::{Flavour, Layout, find_shipped, shipped_keys};
use crate::python::version::PyVersion;
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
    /// Generated from the DWARF of this file (the interpreter or its debug file).
    Dwarf(PathBuf),
    /// A layout shipped in `python-layouts/`, by its key (`3.11-default-x86_64`).
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

/// The build's flavour, from a parse of its ELF (`generate-layout` and tools that have only the file).
pub fn detect_flavour(image: &ElfImage) -> Result<Flavour> {
    Ok(flavour_of(&image.parse()?))
}

/// The build's flavour, from symbols only a debug build exports.
pub(crate) fn flavour_of(elf: &Elf<'_>) -> Flavour {
    // Py_REF_DEBUG (implied by Py_DEBUG) exports these; release builds never do.
    let debug = ["_Py_RefTotal", "_Py_GetGlobalRefTotal"]
        .iter()
        .any(|s| elf::find_symbol(elf, s).is_some());
    if debug {
        Flavour::Debug
    } else {
        Flavour::Default
    }
}

/// Separate debug files for a binary: by build-id, then by debuglink, inside the target's root first.
/// `in_target`: the binary's path as the target names it, whose directory the debuglink rules
/// (`/usr/lib/debug/DIR/LINK`, `DIR/.debug/LINK`) start from, under either root.
fn separate_debug_files(pid: u32, binary: &InterpreterElf<'_>, in_target: &Path) -> Vec<PathBuf> {
    let (elf, image) = (&binary.elf, binary.image);
    let mut found = Vec::new();
    let roots = [
        PathBuf::from(format!("/proc/{pid}/root")),
        PathBuf::from("/"),
    ];
    if let Some(id) = elf::build_id(elf, image.bytes()).filter(|id| id.len() > 2) {
        for root in &roots {
            found.push(root.join(format!(
                "usr/lib/debug/.build-id/{}/{}.debug",
                &id[..2],
                &id[2..]
            )));
        }
    }
    if let (Some(link), Some(dir)) = (elf::debuglink(elf, image.bytes()), in_target.parent()) {
        let dir = dir.strip_prefix("/").unwrap_or(dir);
        for root in &roots {
            found.push(root.join("usr/lib/debug").join(dir).join(&link));
            found.push(root.join(dir).join(".debug").join(&link));
        }
    }
    found.into_iter().filter(|p| p.is_file()).collect()
}

/// A layout read from DWARF and the file it came from, or none; and why each file tried failed.
type DwarfRead = (Option<(Layout, PathBuf)>, Vec<String>);

/// What `choose_layout` needs to know about the target.
pub(crate) struct LayoutRequest<'a> {
    pub(crate) pid: u32,
    /// The interpreter's one parse.
    pub(crate) binary: &'a InterpreterElf<'a>,
    /// Its path as the target names it (`Binary::in_target`; the parse's own path is the one
    /// opened, often through `/proc/PID/root`).
    pub(crate) in_target: &'a Path,
    pub(crate) version: PyVersion,
    pub(crate) flavour: Flavour,
    pub(crate) arch: &'a str,
    pub(crate) memory: &'a ProcessMemory,
    pub(crate) runtime: RemoteAddr,
    /// What `dwarf` found, once it has looked (start with `OnceCell::new()`).
    pub(crate) dwarf_read: OnceCell<DwarfRead>,
}

impl LayoutRequest<'_> {
    fn key(&self) -> String {
        self.version.minor_key()
    }

    /// The shipped layout generated from this very build (same build-id): what its DWARF would say,
    /// without a DWARF parse (which matters in launch mode, where the script is already running).
    fn same_build_file(&self) -> Result<Option<Layout>> {
        let build_id = elf::build_id(&self.binary.elf, self.binary.image.bytes());
        Ok(find_shipped(&self.key(), self.flavour, self.arch)?
            .filter(|l| l.build_id.is_some() && l.build_id == build_id))
    }

    fn shipped_file(&self) -> Result<Option<Layout>> {
        find_shipped(&self.key(), self.flavour, self.arch)
    }

    /// DWARF of the binary itself, or of its separate debug file. Read once: `Auto` may ask twice
    /// (for the debug-offsets descriptor, then for the layout itself), and the second asks only for
    /// the first's answer.
    fn dwarf(&self, tried: &mut Vec<String>) -> Option<(Layout, PathBuf)> {
        let (found, why_not) = self.dwarf_read.get_or_init(|| self.read_dwarf());
        tried.extend(why_not.iter().cloned());
        found.clone()
    }

    /// What `dwarf` answers, and why each file it tried failed.
    fn read_dwarf(&self) -> DwarfRead {
        let image = self.binary.image;
        let mut tried = Vec::new();
        let mut files = Vec::new();
        if elf::has_debug_info(&self.binary.elf) {
            files.push(image.path.clone());
        }
        files.extend(separate_debug_files(self.pid, self.binary, self.in_target));
        if files.is_empty() {
            tried.push("no DWARF in the binary and no separate debug file".into());
        }
        let (key, version) = (self.key(), self.version.to_string());
        for path in files {
            let read = if path == image.path {
                // The binary's own DWARF, read through the parse attach already has.
                Layout::from_dwarf_parsed(
                    image,
                    &self.binary.elf,
                    &key,
                    &version,
                    self.flavour,
                    self.arch,
                )
            } else {
                ElfImage::open(&path).and_then(|debug_file| {
                    Layout::from_dwarf(&debug_file, &key, &version, self.flavour, self.arch)
                })
            };
            match read {
                Ok(layout) => return (Some((layout, path)), tried),
                Err(e) => tried.push(e.to_string()),
            }
        }
        (None, tried)
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

pub(crate) fn choose_layout(
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
    // A source asked for by name that this build lacks, where a shipped file fits: that is the fix.
    let shipped = match choice {
        LayoutChoice::DebugOffsets | LayoutChoice::Dwarf => request
            .same_build_file()?
            .or(request.shipped_file()?)
            .map(|layout| layout.key()),
        LayoutChoice::Auto | LayoutChoice::File => None,
    };
    if let Some(key) = shipped {
        let named = clap::ValueEnum::to_possible_value(&choice)
            .map_or_else(|| format!("{choice:?}"), |v| v.get_name().to_string());
        return Err(Error::Unsupported {
            pid: request.pid,
            why: format!(
                "no layout from --layout-source {named} for Python {} ({}): {}. The shipped layout {key} \
                 fits it: leave --layout-source out (auto), or give --layout-source file.",
                request.version,
                request.arch,
                tried.join("; "),
            ),
        });
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
