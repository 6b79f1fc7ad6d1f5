//! Reading CPython 3.15's own per-thread GIL flags, `PyThreadState.holds_gil` and `gil_requested`
//! (both in `_Py_DebugOffsets.thread_state` and in the DWARF); what they decide is inference's
//! (infer/gil_flag_rule.rs).
//!
//! They are read only for a running thread while another holds the GIL: the only threads the rules
//! infer for rather than read. One read per thread per sample everywhere would be the sampler's
//! largest cost. `GILSAMPLE_CHECK_GIL_FLAGS=1` reads them for every thread and counts how often they
//! agree with direct evidence, to check the flags' meaning on a build. 3.14 has `holds_gil` only,
//! which says no more than the GIL's `last_holder`, so it is not read.

use crate::addr::RemoteAddr;
use crate::infer::sample::GilFlagsReading;
use crate::process::memory::MemorySource;
use crate::python::layout::Layout;
use crate::symbols::dwarf::FieldInfo;

/// Where the two flags lie in a thread state, so that one read fetches both.
pub struct GilFlagReader {
    holds: FieldInfo,
    requested: FieldInfo,
    start: u64,
    len: usize,
}

impl GilFlagReader {
    /// `None` where the layout lacks either flag or they lie too far apart for one small read.
    pub fn new(layout: &Layout) -> Option<GilFlagReader> {
        let holds = layout.field("tstate.holds_gil")?;
        let requested = layout.field("tstate.gil_requested")?;
        let start = holds.offset.min(requested.offset);
        let end = (holds.offset + holds.size).max(requested.offset + requested.size);
        (end - start <= 16).then_some(GilFlagReader {
            holds,
            requested,
            start,
            len: (end - start) as usize,
        })
    }

    /// Whether inference can use the flags of a thread: always when checking direct decisions;
    /// otherwise only for a running thread while another thread holds the GIL, the only place the
    /// rules infer (infer/gil_flag_rule.rs).
    pub fn wanted(check_direct: bool, runs: bool, locked: bool, holds: bool) -> bool {
        check_direct || (runs && locked && !holds)
    }

    /// Both flags of `tstate`; `None` where the read fails or a flag is neither 0 nor 1 (torn, or
    /// not a thread state any more).
    pub fn read(&self, mem: &dyn MemorySource, tstate: RemoteAddr) -> Option<GilFlagsReading> {
        let mut buf = [0u8; 16];
        let buf = &mut buf[..self.len];
        mem.read_into(RemoteAddr(tstate.0.checked_add(self.start)?), buf)
            .ok()?;
        let flag = |f: FieldInfo| -> Option<bool> {
            let at = (f.offset - self.start) as usize;
            let mut word = [0u8; 8];
            word[..f.size as usize].copy_from_slice(buf.get(at..at + f.size as usize)?);
            match u64::from_le_bytes(word) {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            }
        };
        Some(GilFlagsReading {
            holds: flag(self.holds)?,
            requested: flag(self.requested)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::memory::SnapshotMemory;
    use crate::python::layout::{Flavour, find_shipped};

    /// A 3.15 thread state with the given flag words.
    fn tstate(holds: u32, requested: u32) -> (GilFlagReader, SnapshotMemory, RemoteAddr) {
        let layout = find_shipped("3.15", Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let flags = GilFlagReader::new(&layout).expect("3.15 has both flags");
        let addr = RemoteAddr(0x10_0000);
        let mut bytes = vec![0u8; 512];
        for (field, value) in [
            ("tstate.holds_gil", holds),
            ("tstate.gil_requested", requested),
        ] {
            let at = layout.field(field).unwrap().offset as usize;
            bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        let mut mem = SnapshotMemory::new();
        mem.insert(addr, bytes);
        (flags, mem, addr)
    }

    #[test]
    fn both_flags_are_read_and_torn_words_are_refused() {
        let (flags, mem, at) = tstate(0, 1);
        assert_eq!(
            flags.read(&mem, at),
            Some(GilFlagsReading {
                holds: false,
                requested: true
            })
        );
        let (flags, mem, at) = tstate(0, 7);
        assert_eq!(flags.read(&mem, at), None);
        assert_eq!(flags.read(&mem, RemoteAddr(0x20_0000)), None);
    }

    #[test]
    fn flags_are_wanted_only_where_the_rules_infer() {
        assert!(GilFlagReader::wanted(false, true, true, false));
        assert!(!GilFlagReader::wanted(false, true, true, true));
        assert!(!GilFlagReader::wanted(false, true, false, false));
        assert!(!GilFlagReader::wanted(false, false, true, false));
        assert!(GilFlagReader::wanted(true, false, false, true));
    }

    #[test]
    fn only_a_layout_with_both_flags_reads_them() {
        for (version, has) in [("3.13", false), ("3.14", false), ("3.15", true)] {
            let layout = find_shipped(version, Flavour::Default, "x86_64")
                .unwrap()
                .unwrap();
            assert_eq!(GilFlagReader::new(&layout).is_some(), has, "{version}");
        }
    }
}
