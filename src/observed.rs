//! What one read of a target found, as plain data: the GIL's words, its waiter counts and the
//! address ranges that name a futex wait as a GIL wait, and what the kernel said of a thread. No I/O
//! here: the readers (`process/`, `python/`) fill these in, and inference (`infer/`), the saved
//! stream (`stream/`) and replay take them, so inference depends on this module and not on the
//! readers.

use crate::addr::RemoteAddr;

/// The `futex` syscall number of the architecture gilsample is built for (202 on x86_64, 98 on
/// aarch64), from libc's per-architecture table rather than a hard-coded x86_64 constant.
pub const SYS_FUTEX: i64 = libc::SYS_futex;

/// One reading of a thread's syscall file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelState {
    /// On a CPU or runnable (waiting for one): the kernel does not distinguish the two here.
    Running,
    /// Blocked inside syscall `nr`; `arg0` and `arg1` are its first two arguments (for futex: the
    /// address and the operation).
    InSyscall {
        /// The syscall's number, in the machine's own numbering.
        nr: i64,
        /// Its first argument (for futex: the address waited on).
        arg0: u64,
        /// Its second argument (for futex: the operation).
        arg1: u64,
    },
    /// Stopped or blocked outside a syscall (e.g. SIGSTOP, a page fault).
    Blocked,
}

impl KernelState {
    /// The futex address this thread sleeps on, if it sleeps in futex.
    pub fn futex_addr(&self) -> Option<u64> {
        match *self {
            KernelState::InSyscall { nr, arg0, .. } if nr == SYS_FUTEX => Some(arg0),
            _ => None,
        }
    }
}

/// What `schedstat` says: nanoseconds on a CPU, nanoseconds waiting on a run queue, and how many times
/// the thread got a CPU. The kernel adds to the first when the thread leaves a CPU and at scheduler
/// ticks, and to the other two when a waiting thread gets a CPU, so after a thread has run again all
/// are exact for the time before. All three read 0 where the kernel keeps no such statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStat {
    /// Nanoseconds spent on a CPU.
    pub cpu_ns: u64,
    /// Nanoseconds spent waiting on a run queue.
    pub run_queue_ns: u64,
    /// How many times the thread got a CPU.
    pub timeslices: u64,
}

/// The GIL as one sample sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GilWord {
    /// `gil.locked`: some thread holds the GIL.
    pub locked: bool,
    /// `last_holder`: the thread state that took the GIL last; the holder only while `locked`.
    pub last_holder: RemoteAddr,
    /// Counts hand-offs since start; its change between two samples is how many the sampler missed.
    pub switch_number: u64,
    /// The switch interval (`sys.setswitchinterval`) in µs, where the layout has it.
    pub interval_us: Option<u64>,
}

/// How many threads are inside each GIL wait, including those woken and not yet run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waiters {
    /// Threads inside `take_gil`'s wait on `gil.cond`.
    pub take: u32,
    /// Threads inside `drop_gil`'s wait on `gil.switch_cond`.
    pub drop: u32,
}

/// Address ranges `[start, end)` inside the GIL struct.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "SavedGilWaitRanges", into = "SavedGilWaitRanges")]
pub struct GilWaitRanges {
    /// `gil.cond`: where a thread waiting in `take_gil` sleeps. Target addresses, end excluded.
    pub cond: Option<(u64, u64)>,
    /// `gil.mutex`: where a thread entering or leaving a GIL wait sleeps for the lock around it.
    pub mutex: Option<(u64, u64)>,
    /// `gil.switch_cond`: where a thread in `drop_gil` sleeps until the waiter it woke has the GIL.
    pub switch_cond: Option<(u64, u64)>,
    /// `gil.switch_mutex`: the lock around `switch_cond`.
    pub switch_mutex: Option<(u64, u64)>,
    /// The words of `gil.cond` its waiters sleep on (glibc's `__g_signals`), where the C library is
    /// known: a thread asleep on another word of it is signalling it.
    pub cond_waiter_words: Option<(u64, u64)>,
}

/// Whether `addr` lies in `range` (`[start, end)`), when the range is known.
pub fn in_range(addr: u64, range: Option<(u64, u64)>) -> bool {
    range.is_some_and(|(start, end)| addr >= start && addr < end)
}

impl GilWaitRanges {
    /// Whether `addr` is in `gil.cond`.
    pub fn on_cond(&self, addr: u64) -> bool {
        in_range(addr, self.cond)
    }

    /// Whether `addr` is in `gil.mutex`.
    pub fn on_mutex(&self, addr: u64) -> bool {
        in_range(addr, self.mutex)
    }

    /// Whether `addr` is in `gil.switch_cond`.
    pub fn on_switch_cond(&self, addr: u64) -> bool {
        in_range(addr, self.switch_cond)
    }

    /// Whether `addr` is where `take_gil` sleeps: `gil.cond` or `gil.mutex`.
    pub fn in_take_gil(&self, addr: u64) -> bool {
        self.on_cond(addr) || self.on_mutex(addr)
    }

    /// Whether `addr` is where `drop_gil` sleeps: `gil.switch_cond` or `gil.switch_mutex`.
    pub fn in_drop_gil(&self, addr: u64) -> bool {
        self.on_switch_cond(addr) || in_range(addr, self.switch_mutex)
    }

    /// Whether a futex address belongs to any of the GIL's condition variables or mutexes.
    pub fn contains(&self, addr: u64) -> bool {
        self.in_take_gil(addr) || self.in_drop_gil(addr)
    }

    /// Each range with the field's name in the interpreter (`cond`, `switch_mutex`), in memory order.
    pub fn named(&self) -> [(&'static str, Option<(u64, u64)>); 4] {
        [
            ("cond", self.cond),
            ("mutex", self.mutex),
            ("switch_cond", self.switch_cond),
            ("switch_mutex", self.switch_mutex),
        ]
    }
}

/// How saved streams hold the ranges: `take` is [cond, mutex], `drop` is [switch_cond,
/// switch_mutex]. Kept so streams written before the fields had names still read.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedGilWaitRanges {
    take: [Option<(u64, u64)>; 2],
    drop: [Option<(u64, u64)>; 2],
    cond_waiter_words: Option<(u64, u64)>,
}

impl From<SavedGilWaitRanges> for GilWaitRanges {
    fn from(saved: SavedGilWaitRanges) -> GilWaitRanges {
        let ([cond, mutex], [switch_cond, switch_mutex]) = (saved.take, saved.drop);
        GilWaitRanges {
            cond,
            mutex,
            switch_cond,
            switch_mutex,
            cond_waiter_words: saved.cond_waiter_words,
        }
    }
}

impl From<GilWaitRanges> for SavedGilWaitRanges {
    fn from(ranges: GilWaitRanges) -> SavedGilWaitRanges {
        SavedGilWaitRanges {
            take: [ranges.cond, ranges.mutex],
            drop: [ranges.switch_cond, ranges.switch_mutex],
            cond_waiter_words: ranges.cond_waiter_words,
        }
    }
}

/// A syscall's name on the architecture gilsample runs on (`read`, `ioctl`, `clock_nanosleep`), or
/// `syscall N` for a number the table does not know.
pub fn syscall_name(nr: i64) -> String {
    usize::try_from(nr)
        .ok()
        .and_then(syscalls::Sysno::new)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall {nr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gil_wait_ranges_are_saved_as_take_and_drop_pairs_as_streams_always_had_them() {
        let ranges = GilWaitRanges {
            cond: Some((0x1000, 0x1030)),
            mutex: Some((0x1030, 0x1058)),
            switch_cond: None,
            switch_mutex: Some((0x2000, 0x2008)),
            cond_waiter_words: Some((0x1028, 0x1030)),
        };
        let saved = serde_json::to_value(ranges).unwrap();
        assert_eq!(
            saved,
            serde_json::json!({
                "take": [[0x1000, 0x1030], [0x1030, 0x1058]],
                "drop": [null, [0x2000, 0x2008]],
                "cond_waiter_words": [0x1028, 0x1030],
            })
        );
        assert_eq!(
            serde_json::from_value::<GilWaitRanges>(saved).unwrap(),
            ranges
        );
    }

    #[test]
    fn each_wait_is_told_apart_by_its_field() {
        let ranges = GilWaitRanges {
            cond: Some((10, 20)),
            mutex: Some((20, 30)),
            switch_cond: Some((30, 40)),
            switch_mutex: Some((40, 50)),
            cond_waiter_words: None,
        };
        assert!(ranges.on_cond(10) && !ranges.on_cond(20));
        assert!(ranges.on_mutex(29) && ranges.in_take_gil(29) && !ranges.in_drop_gil(29));
        assert!(ranges.on_switch_cond(30) && ranges.in_drop_gil(49));
        assert!(!ranges.contains(50) && !ranges.contains(9));
        assert_eq!(ranges.named()[3], ("switch_mutex", Some((40, 50))));
    }
}
