//! Scheduling of the sampler thread.
//!
//! On a busy machine an ordinary sampler thread waits behind the very threads it observes, and every
//! wait longer than a few periods becomes a gap in the trace. Measured against exact eBPF ground truth
//! (scripts/bench_accuracy.py, CPython 3.12, 4 spinners on 2 cores, 10 kHz): timeline agreement was
//! 86–88% with SCHED_OTHER (nice 0 or −10) and 99.1% with SCHED_FIFO priority 1, late samples 230 vs 11.
//! The sampler sleeps between ticks and the loop always leaves part of each period idle, so a
//! real-time sampler cannot monopolise a CPU.

use std::fmt;

use crate::process::access::{Credentials, user_namespace_map};

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Priority {
    /// SCHED_FIFO priority 1 when allowed (root or CAP_SYS_NICE), else `high`, else `normal`.
    Realtime,
    /// nice −10 when allowed, else `normal`.
    High,
    /// Leave scheduling as inherited.
    Normal,
}

/// What the sampler thread actually runs with; recorded in the trace metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Scheduling {
    /// `SCHED_FIFO` priority 1.
    Fifo,
    /// `SCHED_OTHER` at nice −10.
    Nice,
    /// Left as inherited (`--priority normal`, or neither of the others was allowed).
    Inherited,
}

impl fmt::Display for Scheduling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheduling::Fifo => "SCHED_FIFO 1",
            Scheduling::Nice => "SCHED_OTHER nice -10",
            Scheduling::Inherited => "inherited",
        })
    }
}

/// Applies `priority` to the calling thread, falling back as far as permissions require.
pub fn apply_to_current_thread(priority: Priority) -> Scheduling {
    if priority == Priority::Realtime {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: plain syscall on the calling thread (pid 0) with a valid, initialised parameter.
        if unsafe {
            libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
        } == 0
        {
            return Scheduling::Fifo;
        }
    }
    if priority != Priority::Normal {
        let tid = nix::unistd::gettid().as_raw() as libc::id_t;
        // SAFETY: setpriority on our own thread id; no memory is passed.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, -10) } == 0 {
            return Scheduling::Nice;
        }
    }
    Scheduling::Inherited
}

/// Whether this process may run the sampler with SCHED_FIFO, found by trying it on a thread of its
/// own that then exits, so that no thread that goes on running is changed.
pub fn realtime_allowed() -> bool {
    std::thread::spawn(|| apply_to_current_thread(Priority::Realtime) == Scheduling::Fifo)
        .join()
        .unwrap_or(false)
}

/// Why SCHED_FIFO was refused, as far as this process can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RealtimeRefusal {
    /// gilsample lacks CAP_SYS_NICE (and is not root).
    NoCapability,
    /// It holds CAP_SYS_NICE only inside a user namespace (its uid_map): the kernel asks for the
    /// capability in the machine's first namespace, so a rootless container never gets SCHED_FIFO.
    UserNamespace(String),
    /// It holds CAP_SYS_NICE where it counts: its control group has no real-time runtime, or a
    /// sandbox forbids the call.
    NoRuntime,
}

/// Why this process's SCHED_FIFO request is refused (`realtime_allowed` said it is).
pub fn why_realtime_refused() -> RealtimeRefusal {
    let capable = Credentials::of_this_process().is_some_and(|me| me.has_nice_capability());
    match (capable, user_namespace_map()) {
        (false, _) => RealtimeRefusal::NoCapability,
        (true, Some(map)) => RealtimeRefusal::UserNamespace(map),
        (true, None) => RealtimeRefusal::NoRuntime,
    }
}

/// What to tell the user when real-time scheduling is refused (`why`); `cpus_given`: `--cpus` is in
/// use.
pub fn realtime_refused_warning(cpus_given: bool, why: &RealtimeRefusal) -> String {
    let remedy = if cpus_given {
        "; meanwhile --cpus keeps the sampler on CPUs of its own, which helps as long as the target \
         leaves them free"
    } else {
        ", or give the sampler a CPU the target leaves free with --cpus LIST"
    };
    let (why, fix) = match why {
        RealtimeRefusal::UserNamespace(map) => (
            format!(
                " although gilsample has CAP_SYS_NICE: it holds it only inside a user namespace \
                 (uid_map {map}: a rootless container, unshare --user), and the kernel grants \
                 real-time scheduling only to the capability in the machine's own namespace"
            ),
            "Run gilsample from the host, or in a container started by root (--cap-add \
             SYS_NICE)",
        ),
        // Root in a container or VM: a kernel that shares out real-time time by control group
        // (CONFIG_RT_GROUP_SCHED) refuses SCHED_FIFO to every task of a group given none, whatever
        // its capabilities (seen on a GPU VM: root, cgroup v2, sched_rt_runtime_us 950000).
        RealtimeRefusal::NoRuntime => (
            " although gilsample has CAP_SYS_NICE: its control group has no real-time runtime (a \
             kernel that shares real-time time out by group gives none to a group not given any, as \
             in many containers and virtual machines: cgroup v1's cpu.rt_runtime_us 0; cgroup v2 \
             has no setting for it), or a sandbox forbids the call"
                .to_string(),
            "Run it from the host's root control group, or give its group real-time runtime \
             (cgroup v1: cpu.rt_runtime_us; Docker: --cpu-rt-runtime on the daemon and the \
             container)",
        ),
        RealtimeRefusal::NoCapability => (
            ": it needs root or CAP_SYS_NICE".to_string(),
            "Grant the capability (sudo setcap cap_sys_ptrace,cap_dac_read_search,cap_sys_nice+ep \
             {exe}, which keeps the others gilsample needs; in a container --cap-add SYS_NICE)",
        ),
    };
    // The binary itself, as the permission errors name it: setcap on a link or a wrapper does
    // nothing.
    let fix = fix.replace("{exe}", &crate::error::own_binary());
    format!(
        "warning: real-time scheduling (SCHED_FIFO) was refused{why}. The sampler runs \
         without it, so while the target's threads keep every CPU busy it waits behind them and \
         each wait is a gap in the trace. {fix}{remedy}."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_what_is_missing() {
        let without = realtime_refused_warning(false, &RealtimeRefusal::NoCapability);
        assert!(
            without.contains("refused: it needs root or CAP_SYS_NICE"),
            "{without}"
        );
        assert!(without.contains("setcap"), "{without}");
        assert!(without.contains("--cpus LIST"), "{without}");
        // Root refused: the capability is there, the real-time runtime is not.
        let capable = realtime_refused_warning(false, &RealtimeRefusal::NoRuntime);
        assert!(!capable.contains("needs root"), "{capable}");
        assert!(
            capable.contains("refused although gilsample has CAP_SYS_NICE"),
            "{capable}"
        );
        assert!(capable.contains("cpu.rt_runtime_us"), "{capable}");
        assert!(capable.contains("root control group"), "{capable}");
        assert!(capable.contains("--cpus LIST"), "{capable}");
        let pinned = realtime_refused_warning(true, &RealtimeRefusal::NoRuntime);
        assert!(
            pinned.contains("meanwhile --cpus keeps the sampler"),
            "{pinned}"
        );
        // A rootless container: the capability counts only in its own namespace.
        let rootless =
            realtime_refused_warning(false, &RealtimeRefusal::UserNamespace("0 1000 1".into()));
        assert!(
            rootless.contains("only inside a user namespace (uid_map 0 1000 1")
                && rootless.contains("Run gilsample from the host"),
            "{rootless}"
        );
        assert!(!rootless.contains("control group"), "{rootless}");
    }
}
