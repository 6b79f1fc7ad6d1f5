//! CPython 3.15's own per-thread GIL flags, `PyThreadState.holds_gil` and `gil_requested` (both in
//! `_Py_DebugOffsets.thread_state` and in the DWARF): a thread that has asked for the GIL and does
//! not hold it is inside `take_gil`, with no inference.
//!
//! They are read only where the rules would infer from a thread's GIL past (a running thread that
//! memory does not name as the holder, the kernel does not show asleep on the GIL, and that was in a
//! GIL state before): there they decide `take_gil`, and the recording counts how often that changed
//! what the rules said. Where the rules have direct evidence
//! the flags are not read (one read per thread per sample would be the sampler's largest cost);
//! `GILSAMPLE_CHECK_GIL_FLAGS=1` reads them there too and counts how often they agree, to check
//! the flags' meaning on a build. 3.14 has `holds_gil` only, which says no more than the GIL's
//! `last_holder`, so it is not read.

use crate::addr::RemoteAddr;
use crate::infer::intervals::GilState;
use crate::process::memory::MemorySource;
use crate::python::layout::Layout;
use crate::sample::classify::Basis;
use crate::symbols::dwarf::FieldInfo;

/// What the flags decided over a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlagStats {
    /// Inferred samples at which the flags were read.
    pub read: u64,
    /// Of those, the ones the flags placed in `take_gil`.
    pub decided_take: u64,
    /// Of those, the ones the rules had placed elsewhere (or left undecided for later).
    pub changed: u64,
    /// With `GILSAMPLE_CHECK_GIL_FLAGS`: direct samples where the flags agreed / disagreed.
    pub agreed_with_direct: u64,
    pub disagreed_with_direct: u64,
}

pub struct GilFlags {
    holds: FieldInfo,
    requested: FieldInfo,
    start: u64,
    len: usize,
    check_direct: bool,
    pub stats: FlagStats,
}

impl GilFlags {
    /// The flags' reader, where the layout has both.
    pub fn new(layout: &Layout) -> Option<GilFlags> {
        let holds = layout.field("tstate.holds_gil")?;
        let requested = layout.field("tstate.gil_requested")?;
        let start = holds.offset.min(requested.offset);
        let end = (holds.offset + holds.size).max(requested.offset + requested.size);
        (end - start <= 16).then(|| GilFlags {
            holds,
            requested,
            start,
            len: (end - start) as usize,
            check_direct: std::env::var_os("GILSAMPLE_CHECK_GIL_FLAGS").is_some(),
            stats: FlagStats::default(),
        })
    }

    /// (holds, requested), or `None` when the read fails or a flag is neither 0 nor 1 (torn).
    fn read(&self, mem: &dyn MemorySource, tstate: RemoteAddr) -> Option<(bool, bool)> {
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
        Some((flag(self.holds)?, flag(self.requested)?))
    }

    /// The rules' answer for one thread at one sample, decided by the flags where they infer.
    /// `gil_free_or_ours`: the GIL's own words say it is free or held by this thread (then the
    /// flags add nothing a user would call a wait).
    pub fn decide(
        &mut self,
        mem: &dyn MemorySource,
        tstate: RemoteAddr,
        rules: (GilState, Basis),
        gil_free_or_ours: bool,
    ) -> (GilState, Basis) {
        let (state, basis) = rules;
        if basis == Basis::Direct {
            if self.check_direct
                && let Some((holds, requested)) = self.read(mem, tstate)
            {
                let agrees = match state {
                    GilState::Hold => holds && !requested,
                    GilState::Take => waiting(holds, requested),
                    _ => !waiting(holds, requested),
                };
                if agrees {
                    self.stats.agreed_with_direct += 1;
                } else {
                    self.stats.disagreed_with_direct += 1;
                }
            }
            return rules;
        }
        // Rule 10's running threads that were in no GIL state before are most of a GIL-free
        // workload's samples (measured: 3.15 `dispatch`, three in four of the inferred ones), and
        // the flags almost never place them in take_gil: not read there, to keep the cost down.
        if gil_free_or_ours || basis == Basis::RunningReleased {
            return rules;
        }
        let Some((holds, requested)) = self.read(mem, tstate) else {
            return rules;
        };
        self.stats.read += 1;
        if !waiting(holds, requested) {
            return rules;
        }
        self.stats.decided_take += 1;
        if state != GilState::Take || matches!(basis, Basis::Ambiguous { .. }) {
            self.stats.changed += 1;
        }
        // "Running, and proven still inside take_gil": what the interpreter's flag says.
        (GilState::Take, Basis::RunningStillWaiting)
    }
}

/// What the flags call waiting in `take_gil`: asked for the GIL, not holding it.
fn waiting(holds: bool, requested: bool) -> bool {
    requested && !holds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::memory::SnapshotMemory;
    use crate::python::layout::{Flavour, find_shipped};

    /// A 3.15 thread state with the given flag words.
    fn tstate(holds: u32, requested: u32) -> (GilFlags, SnapshotMemory, RemoteAddr) {
        let layout = find_shipped("3.15", Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let flags = GilFlags::new(&layout).expect("3.15 has both flags");
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
    fn a_thread_that_asked_and_does_not_hold_is_in_take_gil() {
        let (mut flags, mem, at) = tstate(0, 1);
        let rules = (GilState::Released, Basis::GilMutex);
        assert_eq!(
            flags.decide(&mem, at, rules, false),
            (GilState::Take, Basis::RunningStillWaiting)
        );
        assert_eq!((flags.stats.decided_take, flags.stats.changed), (1, 1));
        // The rules already said so: decided by the flags, not changed.
        let rules = (GilState::Take, Basis::Counted);
        flags.decide(&mem, at, rules, false);
        assert_eq!((flags.stats.decided_take, flags.stats.changed), (2, 1));
    }

    #[test]
    fn direct_evidence_torn_flags_and_the_holder_are_left_to_the_rules() {
        let (mut flags, mem, at) = tstate(0, 1);
        let direct = (GilState::Released, Basis::Direct);
        assert_eq!(flags.decide(&mem, at, direct, false), direct);
        let inferred = (GilState::Released, Basis::GilMutex);
        assert_eq!(flags.decide(&mem, at, inferred, true), inferred);
        let never_in_a_gil_state = (GilState::Released, Basis::RunningReleased);
        assert_eq!(
            flags.decide(&mem, at, never_in_a_gil_state, false),
            never_in_a_gil_state
        );
        assert_eq!(flags.stats.read, 0);
        let (mut torn, mem, at) = tstate(0, 7);
        assert_eq!(torn.decide(&mem, at, inferred, false), inferred);
        assert_eq!(torn.stats.read, 0);
        let (mut released, mem, at) = tstate(0, 0);
        assert_eq!(released.decide(&mem, at, inferred, false), inferred);
        assert_eq!(
            released.stats,
            FlagStats {
                read: 1,
                ..FlagStats::default()
            }
        );
    }

    #[test]
    fn only_a_layout_with_both_flags_reads_them() {
        for (version, has) in [("3.13", false), ("3.14", false), ("3.15", true)] {
            let layout = find_shipped(version, Flavour::Default, "x86_64")
                .unwrap()
                .unwrap();
            assert_eq!(GilFlags::new(&layout).is_some(), has, "{version}");
        }
    }
}
