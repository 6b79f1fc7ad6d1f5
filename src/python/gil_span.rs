//! Where the GIL's words lie besides those CPython names: where glibc counts the threads waiting on
//! its condition variables and keeps its mutex's owner, and how one read of the GIL structure
//! (`Target::read_gil`, python/target.rs) decodes into a `GilReading`.
//!
//! Kept apart because the decode is the hot path's: each tick's read is one bounded read and a decode,
//! with no allocation. Where the counts lie is worked out once, at attach (`find_waiter_counts` in
//! python/attach.rs, which also refuses counts that do not fit in that one read).

use crate::addr::RemoteAddr;
use crate::observed::{GilWord, Waiters};
use crate::process::memory::ReadError;
use crate::python::layout::Layout;

/// Where glibc counts the threads waiting on the GIL's two condition variables (process/glibc.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaiterCountAddrs {
    /// The target's glibc release (major, minor), which decides where `__wrefs` lies.
    pub glibc: (u32, u32),
    /// The start of `gil.cond`, whose every byte a tick's read brings (`CondStamp`).
    pub cond: RemoteAddr,
    /// `gil.cond`'s `__wrefs`: threads in `take_gil`'s wait.
    pub take_wrefs: RemoteAddr,
    /// `gil.switch_cond`'s `__wrefs`: threads in `drop_gil`'s forced-switch wait; after `take_wrefs`,
    /// so that one read covers both.
    drop_wrefs: Option<RemoteAddr>,
    /// `gil.mutex`'s `__lock`, followed by its `__owner`; after `take_wrefs` too (the mutex follows
    /// the condition variable in every CPython layout).
    mutex_lock: Option<RemoteAddr>,
}

/// The GIL as one read sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GilReading {
    /// The GIL's locked, last-holder, switch-number and interval words.
    pub word: GilWord,
    /// `None` where glibc's counts are not known or read as something no live GIL holds.
    pub waiters: Option<Waiters>,
    /// The target's id (in its own PID namespace) of the thread holding the GIL's mutex, `Some(0)` for
    /// nobody; `None` where not known or the mutex reads inconsistent.
    pub mutex_owner: Option<u32>,
    /// Threads may be asleep waiting for the GIL's mutex (its lock word is 2); `None` where the
    /// mutex is not located. Only the sampler uses it (infer/counted_out.rs); samples do not keep it.
    pub mutex_contended: Option<bool>,
    /// `gil.cond` and the hand-off count as this read saw them, where glibc's counts are read.
    /// Only the sampler uses it; samples do not keep it.
    pub cond_stamp: Option<CondStamp>,
}

/// The waiter counts and the GIL mutex's words, read again on their own (`Target::read_waiter_words`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaiterWords {
    /// Threads registered on `gil.cond` and `gil.switch_cond`.
    pub waiters: Waiters,
    /// As `GilReading::mutex_owner`.
    pub mutex_owner: Option<u32>,
    /// As `GilReading::mutex_contended`.
    pub mutex_contended: Option<bool>,
}

/// Every byte of `gil.cond` and the GIL's hand-off count, as one read saw them. glibc adds to the
/// condition variable's `__wseq` whenever a thread begins to wait on it, a count that only grows,
/// and takes a thread out of `__wrefs` whenever it leaves the wait, woken or timed out; only a new
/// waiter puts one back. So two reads that find the same stamp saw no thread begin or end
/// `take_gil`'s wait between them, and none take the GIL (`switch_number`): a thread found asleep
/// there after the first is still inside the wait at the second (sampler/thread_reads.rs;
/// docs/classification.md, "Waiters proven still waiting").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CondStamp {
    switch_number: u64,
    cond: [u64; 6],
}

impl CondStamp {
    /// The stamp from `bytes`, the condition variable's 48, and the hand-off count read with them.
    pub fn new(switch_number: u64, bytes: &[u8]) -> Option<CondStamp> {
        let mut cond = [0u64; 6];
        if bytes.len() != cond.len() * 8 {
            return None;
        }
        for (word, raw) in cond.iter_mut().zip(bytes.chunks_exact(8)) {
            *word = u64::from_ne_bytes(raw.try_into().ok()?);
        }
        Some(CondStamp {
            switch_number,
            cond,
        })
    }
}

/// Bounds one read of the GIL structure (about 200 bytes in every CPython layout): a layout whose
/// fields lie further apart reads as a fault rather than as a larger read.
pub(crate) const GIL_SPAN_MAX: usize = 512;

impl WaiterCountAddrs {
    /// Where glibc (`condvar`) counts the waiters of a GIL at `gil`, laid out as `layout` on `arch`
    /// (the target binary's ELF machine, which sets the size of glibc's mutex).
    pub fn locate(
        layout: &Layout,
        arch: &str,
        gil: RemoteAddr,
        condvar: crate::process::glibc::CondvarLayout,
    ) -> std::result::Result<WaiterCountAddrs, String> {
        use crate::process::glibc::{PTHREAD_COND_SIZE, pthread_mutex_size};
        let wrefs = |name: &str| -> std::result::Result<Option<RemoteAddr>, String> {
            let Some(field) = layout.field(name) else {
                return Ok(None);
            };
            if field.size != PTHREAD_COND_SIZE {
                return Err(format!(
                    "{name} is {} bytes, not a glibc pthread_cond_t",
                    field.size
                ));
            }
            Ok(Some(RemoteAddr(
                gil.0 + field.offset + condvar.wrefs_offset,
            )))
        };
        let take_wrefs = wrefs("gil.cond")?.ok_or("the layout has no gil.cond")?;
        let drop_wrefs = wrefs("gil.switch_cond")?
            .filter(|d| d.0 > take_wrefs.0 && d.0 + 4 - take_wrefs.0 <= GIL_SPAN_MAX as u64);
        let mutex_lock = layout
            .field("gil.mutex")
            .filter(|f| Some(f.size) == pthread_mutex_size(arch))
            .map(|f| RemoteAddr(gil.0 + f.offset))
            .filter(|m| m.0 > take_wrefs.0 && m.0 + 12 - take_wrefs.0 <= GIL_SPAN_MAX as u64);
        Ok(WaiterCountAddrs {
            glibc: condvar.release,
            cond: RemoteAddr(take_wrefs.0 - condvar.wrefs_offset),
            take_wrefs,
            drop_wrefs,
            mutex_lock,
        })
    }

    /// The end of the bytes that hold `gil.cond`, both counts and the mutex's owner.
    pub(crate) fn span_end(&self) -> u64 {
        let cond_end = self.cond.0 + crate::process::glibc::PTHREAD_COND_SIZE;
        let counts_end = (self.drop_wrefs.map_or(self.take_wrefs.0, |d| d.0) + 4).max(cond_end);
        let owner_end = self
            .mutex_lock
            .map_or(0, |m| m.0 + crate::process::glibc::MUTEX_OWNER_OFFSET + 4);
        counts_end.max(owner_end)
    }

    /// Where the GIL's mutex is, when located as glibc's (reads then report its owner).
    pub fn mutex(&self) -> Option<RemoteAddr> {
        self.mutex_lock
    }

    /// Decodes the mutex's owner from bytes that start at `take_wrefs`.
    pub fn decode_mutex_owner(&self, span: &[u8]) -> Option<u32> {
        use crate::process::glibc::{MUTEX_LOCK_OFFSET, MUTEX_OWNER_OFFSET, mutex_owner};
        let at = self.mutex_lock?.0 - self.take_wrefs.0;
        mutex_owner(
            u32_at(span, at + MUTEX_LOCK_OFFSET)?,
            u32_at(span, at + MUTEX_OWNER_OFFSET)?,
        )
    }

    /// Decodes from bytes that start at `take_wrefs` whether threads may sleep on the mutex;
    /// `None` where the mutex is not located.
    pub fn decode_mutex_contended(&self, span: &[u8]) -> Option<bool> {
        use crate::process::glibc::{MUTEX_LOCK_OFFSET, mutex_contended};
        let at = self.mutex_lock?.0 - self.take_wrefs.0;
        u32_at(span, at + MUTEX_LOCK_OFFSET).map(mutex_contended)
    }

    /// Decodes both counts from bytes that start at `take_wrefs`.
    pub fn decode(&self, span: &[u8]) -> std::result::Result<Waiters, ReadError> {
        let word = |offset: u64| -> std::result::Result<u32, ReadError> {
            let wrefs = u32_at(span, offset).ok_or(ReadError::Fault)?;
            // Bits 0 (process-shared) and 2 (being destroyed) are never set on a live GIL.
            if wrefs & 0b101 == 0 {
                Ok(crate::process::glibc::waiters_in(wrefs))
            } else {
                Err(ReadError::Fault)
            }
        };
        Ok(Waiters {
            take: word(0)?,
            drop: match self.drop_wrefs {
                Some(d) => word(d.0 - self.take_wrefs.0)?,
                None => 0,
            },
        })
    }
}

/// The native-endian 32-bit word at byte `offset` of `span`, if the span holds all of it.
fn u32_at(span: &[u8], offset: u64) -> Option<u32> {
    let start = usize::try_from(offset).ok()?;
    let raw = span.get(start..start.checked_add(4)?)?;
    Some(u32::from_ne_bytes(raw.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36's words in a GIL laid out as on x86_64: `cond` at 0x1000 (`__wrefs` at +36), `mutex`
    /// after it at +48 (`__owner` at +8), `switch_cond` at +88.
    const COND: u64 = 0x1000;
    const MUTEX: u64 = COND + 48;

    fn counts() -> WaiterCountAddrs {
        WaiterCountAddrs {
            glibc: (2, 36),
            cond: RemoteAddr(COND),
            take_wrefs: RemoteAddr(COND + 36),
            drop_wrefs: Some(RemoteAddr(COND + 88 + 36)),
            mutex_lock: Some(RemoteAddr(MUTEX)),
        }
    }

    fn put(span: &mut [u8], counts: &WaiterCountAddrs, addr: u64, value: u32) {
        let at = (addr - counts.take_wrefs.0) as usize;
        span[at..at + 4].copy_from_slice(&value.to_ne_bytes());
    }

    #[test]
    fn one_span_holds_the_counts_and_the_mutex_owner() {
        let counts = counts();
        let mut span = vec![0u8; (counts.span_end() - counts.take_wrefs.0) as usize];
        // Three waiters on a CLOCK_MONOTONIC condition variable; the mutex locked by thread 4242.
        put(&mut span, &counts, COND + 36, (3 << 3) | 2);
        put(&mut span, &counts, MUTEX, 1);
        put(&mut span, &counts, MUTEX + 8, 4242);
        assert_eq!(counts.decode(&span), Ok(Waiters { take: 3, drop: 0 }));
        assert_eq!(counts.decode_mutex_owner(&span), Some(4242));
        // An owner on a free lock is a torn read, not an owner.
        put(&mut span, &counts, MUTEX, 0);
        assert_eq!(counts.decode_mutex_owner(&span), None);
        put(&mut span, &counts, MUTEX + 8, 0);
        assert_eq!(counts.decode_mutex_owner(&span), Some(0));
    }

    #[test]
    fn the_span_reaches_the_owner_without_a_switch_cond() {
        let counts = WaiterCountAddrs {
            drop_wrefs: None,
            ..counts()
        };
        assert_eq!(counts.span_end(), MUTEX + 12);
        let unlocated = WaiterCountAddrs {
            mutex_lock: None,
            ..counts
        };
        assert_eq!(unlocated.mutex(), None);
        // The whole condition variable, for the tick's `CondStamp`.
        assert_eq!(unlocated.span_end(), COND + 48);
        assert_eq!(unlocated.decode_mutex_owner(&[0u8; 64]), None);
    }
}
