//! ELF facts gilsample needs: where `_PyRuntime` is, the `Py_Version` constant, the build-id and
//! debuglink that lead to separate debug files, and the load bias of a mapped file.

use std::fs::File;
use std::path::{Path, PathBuf};

use goblin::elf::{Elf, program_header::PT_LOAD, section_header::SHN_UNDEF, sym::Sym};
use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::process::maps::Mapping;

/// An ELF file: memory-mapped, or bytes already in memory (tests, fuzzing).
pub struct ElfImage {
    /// The file's path, as named in messages.
    pub path: PathBuf,
    data: ElfBytes,
}

enum ElfBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

/// A defined symbol: its link-time address and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// The symbol's link-time virtual address (add the load bias for the target's).
    pub vaddr: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl ElfImage {
    /// Maps the ELF file at `path`.
    pub fn open(path: &Path) -> Result<ElfImage> {
        let file =
            File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        ElfImage::from_file(file, path)
    }

    /// Maps the open ELF `file`, named `path` in messages.
    pub fn from_file(file: File, path: &Path) -> Result<ElfImage> {
        // SAFETY: the mapping is private and read-only; a file truncated under us can only fault this
        // process, which is the same risk every ELF reader mapping a file takes.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        Ok(ElfImage {
            path: path.to_path_buf(),
            data: ElfBytes::Mapped(map),
        })
    }

    /// An image of bytes already in memory, named `path` in messages.
    pub fn from_vec(bytes: Vec<u8>, path: &Path) -> ElfImage {
        ElfImage {
            path: path.to_path_buf(),
            data: ElfBytes::Owned(bytes),
        }
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            ElfBytes::Mapped(map) => map,
            ElfBytes::Owned(bytes) => bytes,
        }
    }

    /// Parses the image's ELF headers, sections and symbol tables.
    pub fn parse(&self) -> Result<Elf<'_>> {
        #[cfg(test)]
        parse_log::record(&self.path);
        Elf::parse(self.bytes()).map_err(|e| Error::Binary {
            path: self.path.clone(),
            why: format!("not a valid ELF file: {e}"),
        })
    }
}

/// Looks `name` up among the *defined* symbols, `.dynsym` first. Extension modules list `_PyRuntime`
/// as an undefined import; taking that entry would pick the wrong file.
pub fn find_symbol(elf: &Elf<'_>, name: &str) -> Option<Symbol> {
    let defined = |sym: &Sym| sym.st_shndx != SHN_UNDEF as usize && sym.st_value != 0;
    let dynamic = elf
        .dynsyms
        .iter()
        .find(|s| defined(s) && elf.dynstrtab.get_at(s.st_name) == Some(name));
    let stat = || {
        elf.syms
            .iter()
            .find(|s| defined(s) && elf.strtab.get_at(s.st_name) == Some(name))
    };
    dynamic.or_else(stat).map(|s| Symbol {
        vaddr: s.st_value,
        size: s.st_size,
    })
}

/// The file bytes behind `len` bytes at link-time address `vaddr`, when they are file-backed.
pub fn read_vaddr<'a>(elf: &Elf<'_>, bytes: &'a [u8], vaddr: u64, len: u64) -> Option<&'a [u8]> {
    let ph = elf.program_headers.iter().find(|ph| {
        ph.p_type == PT_LOAD
            && vaddr >= ph.p_vaddr
            && vaddr
                .checked_add(len)
                .is_some_and(|end| end <= ph.p_vaddr + ph.p_filesz)
    })?;
    let start = ph.p_offset.checked_add(vaddr - ph.p_vaddr)? as usize;
    bytes.get(start..start.checked_add(len as usize)?)
}

/// The GNU build-id as lowercase hex.
pub fn build_id(elf: &Elf<'_>, bytes: &[u8]) -> Option<String> {
    let notes = elf
        .iter_note_sections(bytes, Some(".note.gnu.build-id"))
        .or_else(|| elf.iter_note_headers(bytes))?;
    for note in notes.flatten() {
        if note.n_type == goblin::elf::note::NT_GNU_BUILD_ID && note.name == "GNU" {
            return Some(note.desc.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    None
}

/// Whether the file carries DWARF type information of its own.
pub fn has_debug_info(elf: &Elf<'_>) -> bool {
    elf.section_headers.iter().any(|sh| {
        matches!(
            elf.shdr_strtab.get_at(sh.sh_name),
            Some(".debug_info") | Some(".zdebug_info")
        ) && sh.sh_size > 0
    })
}

/// The bytes of the section called `name` in the file, when it has one.
pub fn section_bytes<'a>(elf: &Elf<'_>, bytes: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let sh = elf
        .section_headers
        .iter()
        .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name))?;
    let start = usize::try_from(sh.sh_offset).ok()?;
    bytes.get(start..start.checked_add(usize::try_from(sh.sh_size).ok()?)?)
}

/// The file name in `.gnu_debuglink`, the other way to a separate debug file.
pub fn debuglink(elf: &Elf<'_>, bytes: &[u8]) -> Option<String> {
    let sh = elf
        .section_headers
        .iter()
        .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(".gnu_debuglink"))?;
    let data = bytes.get(sh.sh_offset as usize..(sh.sh_offset + sh.sh_size) as usize)?;
    let end = data.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&data[..end]).ok().map(str::to_string)
}

/// The difference between where the target mapped this file and the addresses in its ELF headers
/// (0 for a non-PIE executable). Taken from a mapping whose file offset lies in a `PT_LOAD` segment.
pub fn find_load_bias(elf: &Elf<'_>, mappings: &[&Mapping]) -> Option<u64> {
    const PAGE: u64 = 4096;
    for mapping in mappings {
        for ph in elf.program_headers.iter().filter(|ph| ph.p_type == PT_LOAD) {
            let seg_start = ph.p_offset & !(PAGE - 1);
            if mapping.offset >= seg_start && mapping.offset < ph.p_offset + ph.p_filesz.max(1) {
                let vaddr_of_offset = ph
                    .p_vaddr
                    .checked_sub(ph.p_offset)?
                    .checked_add(mapping.offset)?;
                return mapping.start.checked_sub(vaddr_of_offset);
            }
        }
    }
    None
}

/// The ELF machine as the architecture names gilsample uses in layouts.
pub fn arch_name(elf: &Elf<'_>) -> &'static str {
    match elf.header.e_machine {
        goblin::elf::header::EM_X86_64 => "x86_64",
        goblin::elf::header::EM_AARCH64 => "aarch64",
        goblin::elf::header::EM_386 => "i386",
        goblin::elf::header::EM_ARM => "arm",
        _ => "unknown",
    }
}

/// Which files this thread has parsed, for tests that count parses (attach parses the interpreter's
/// file once).
#[cfg(test)]
pub(crate) mod parse_log {
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};

    thread_local! {
        static PARSED: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn record(path: &Path) {
        PARSED.with(|p| p.borrow_mut().push(path.to_path_buf()));
    }

    /// The paths parsed on this thread since the last call, one entry per parse.
    pub(crate) fn take() -> Vec<PathBuf> {
        PARSED.with(|p| std::mem::take(&mut *p.borrow_mut()))
    }
}
