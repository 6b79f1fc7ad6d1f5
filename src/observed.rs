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
pub struct GilWaitRanges {
    /// Where a thread waiting in `take_gil` sleeps: `gil.cond` and `gil.mutex`, target addresses.
    pub take: [Option<(u64, u64)>; 2],
    /// Where a thread waiting in `drop_gil` sleeps: `gil.switch_cond` and `gil.switch_mutex`,
    /// target addresses.
    pub drop: [Option<(u64, u64)>; 2],
    /// The words of `gil.cond` its waiters sleep on (glibc's `__g_signals`), where the C library is
    /// known: a thread asleep on another word of it is signalling it.
    pub cond_waiter_words: Option<(u64, u64)>,
}

impl GilWaitRanges {
    /// Whether a futex address belongs to any of the GIL's condition variables or mutexes.
    pub fn contains(&self, addr: u64) -> bool {
        self.take
            .iter()
            .chain(&self.drop)
            .flatten()
            .any(|&(start, end)| addr >= start && addr < end)
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
