//! The CPython side: which version a binary is, where its structs' fields are (layouts), how to walk
//! `_PyRuntime` → interpreters → thread states, and where the GIL is.

pub mod attach;
pub mod back_jumps;
pub mod debug_offsets;
pub mod fields;
pub mod find_binary;
pub mod gil_span;
pub mod layout;
pub mod layout_choice;
pub mod linetable;
pub mod names;
pub mod objects;
pub mod runtime;
pub mod stacks;
pub mod target;
#[cfg(test)]
pub(crate) mod test_heap;
pub mod thread_list;
pub mod validate;
pub mod version;
