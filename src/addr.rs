//! Addresses in the target's address space.
//!
//! A `RemoteAddr` is a number, never a Rust pointer: nothing here may dereference it, and every value read
//! out of the target is untrusted until a check says otherwise.

use std::fmt;

/// A virtual address inside the target process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteAddr(pub u64);

impl RemoteAddr {
    /// Address 0: a null pointer in the target.
    pub const NULL: RemoteAddr = RemoteAddr(0);

    /// Whether this is the target's null pointer.
    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    /// Adds a field offset; `None` on overflow, which only a corrupt pointer can cause.
    pub fn offset(self, by: u64) -> Option<RemoteAddr> {
        self.0.checked_add(by).map(RemoteAddr)
    }

    /// A pointer that user space on a 64-bit Linux target could hold: non-null, below the canonical
    /// user-space limit (47 bits on x86_64, 48 on aarch64 with 4-level tables), and aligned to `align`.
    pub fn is_plausible_pointer(self, align: u64) -> bool {
        self.0 >= 0x1000 && self.0 < (1 << 48) && self.0.is_multiple_of(align)
    }
}

impl fmt::Display for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
