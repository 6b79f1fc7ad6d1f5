//! Access to a live target: its memory, its mappings, and what the kernel says about each thread.
//! Everything here only reads; nothing stops or writes to the target.

pub mod access;
pub mod glibc;
pub mod kernel;
pub mod maps;
pub mod memory;
pub mod proc_view;
pub mod syscalls;
pub mod tasks;
