//! Reading the interpreter's binaries: ELF symbols and load addresses (goblin), and struct layouts from
//! DWARF (gimli). Files are memory-mapped (memmap2) and never trusted: a corrupt file is an error, not
//! a panic.

pub mod dwarf;
pub mod elf;
