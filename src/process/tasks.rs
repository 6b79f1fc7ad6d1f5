//! Facts about a target process from /proc: its threads, its command line, its rank and namespace pid.

use std::collections::{HashMap, HashSet};
use std::fs;

use procfs::process::Process;

use crate::error::Result;
use crate::process::maps::proc_error;

/// Whether `pid` is stopped now: by a signal (SIGSTOP, Ctrl+Z: state `T`) or at a debugger's stop
/// (`t`, read twice 2 ms apart: a process under strace passes through `t` at every syscall). Its
/// threads do not run, and the one holding the GIL keeps it. False where it cannot be read.
pub fn is_stopped(pid: u32) -> bool {
    let state = || {
        Process::new(pid as i32)
            .and_then(|p| p.stat())
            .map(|s| s.state)
    };
    match state() {
        Ok('T') => true,
        Ok('t') => {
            std::thread::sleep(std::time::Duration::from_millis(2));
            matches!(state(), Ok('t'))
        }
        _ => false,
    }
}

/// The OS thread ids of `pid` right now.
pub fn read_tids(pid: u32, out: &mut HashSet<u32>) -> Result<()> {
    out.clear();
    let dir = fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| {
        crate::process::access::target_errno_error(
            pid,
            e.raw_os_error().unwrap_or(libc::EIO),
            &format!("/proc/{pid}/task"),
        )
    })?;
    for entry in dir.flatten() {
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.insert(tid);
        }
    }
    Ok(())
}

/// Whether a process's thread count moved since the moment `note` was called: one `fstat` of its
/// /proc/PID/task directory, kept open. The kernel gives that directory 2 + the thread count as its
/// link count (`proc_task_getattr`, since Linux 2.6), where listing it would read every entry. The
/// sampler looks at it every refresh interval instead of walking a few hundred thread states to
/// find threads that exited (sampler/pace.rs).
pub struct ThreadCountWatch {
    /// `None` where it could not be opened: every look then says it moved.
    dir: Option<fs::File>,
    noted: Option<u64>,
}

impl ThreadCountWatch {
    /// Opens `pid`'s task directory; nothing noted yet.
    pub fn open(pid: u32) -> ThreadCountWatch {
        ThreadCountWatch {
            dir: fs::File::open(format!("/proc/{pid}/task")).ok(),
            noted: None,
        }
    }

    /// Keeps the thread count of now for `moved` to compare with.
    pub fn note(&mut self) {
        self.noted = self.count();
    }

    /// Whether the count differs from the one noted, or cannot be read (or was not).
    pub fn moved(&self) -> bool {
        let now = self.count();
        now.is_none() || now != self.noted
    }

    /// The process's thread count now; 0 once it has exited and been reaped.
    pub fn count(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let links = self.dir.as_ref()?.metadata().ok()?.nlink();
        Some(links.saturating_sub(2))
    }
}

/// The environment variables that name a distributed rank, in the order they are consulted. Launchers
/// set several at once (torchrun sets RANK and LOCAL_RANK); the global rank wins.
pub const RANK_VARIABLES: &[&str] = &[
    "RANK",
    "RANK_ID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "LOCAL_RANK",
];

/// The target's rank from its environment at exec time; `None` when it has none (a launcher, a
/// job that is not distributed, or one that sets `RANK` after it started: /proc shows only the
/// environment a process was started with). Its files then say rank 0, as the reference tool's do.
pub fn read_rank(pid: u32) -> Option<u32> {
    let env = Process::new(pid as i32).ok()?.environ().ok()?;
    RANK_VARIABLES.iter().find_map(|name| {
        env.get(std::ffi::OsStr::new(name))
            .and_then(|v| v.to_str()?.trim().parse().ok())
    })
}

/// The process that started `pid` (its parent now: a process whose parent exits is given to init
/// or a subreaper); `None` where it cannot be read.
pub fn read_parent_pid(pid: u32) -> Option<u32> {
    let ppid = Process::new(pid as i32).ok()?.stat().ok()?.ppid;
    u32::try_from(ppid).ok().filter(|&p| p > 0)
}

/// The target's command line, joined with spaces (empty for kernel threads and zombies).
pub fn read_cmdline(pid: u32) -> Result<String> {
    let process = Process::new(pid as i32)
        .map_err(|e| proc_error(pid, e, &format!("/proc/{pid}/cmdline")))?;
    Ok(process
        .cmdline()
        .map(|args| args.join(" "))
        .unwrap_or_default())
}

/// `text` on one line: a `python -c` script's newlines (or any control character) as spaces, for
/// a command line shown inside a line of text.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The process a thread id belongs to (`Tgid:` of `/proc/ID/status`, which exists for threads too
/// though `/proc` does not list them); `None` when there is no such thread.
pub fn thread_group_of(id: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{id}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Tgid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The pid the target sees for itself in its innermost PID namespace (the last `NSpid:` field).
pub fn read_namespace_pid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// Thread ids as the target's own PID namespace numbers them (which is what CPython stores in its
/// thread states) mapped to the ids this process sees. A target in a container's PID namespace has
/// different ids on each side; `/proc/PID/task/TID/status` lists both (`NSpid:`).
pub struct TidMap {
    pid: u32,
    /// `None`: the target is in our PID namespace and ids are the same.
    map: Option<HashMap<u32, u32>>,
}

impl TidMap {
    /// The map of `pid`'s threads, from its `/proc/PID/status` (`NSpid:`).
    pub fn new(pid: u32) -> Result<TidMap> {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| {
            crate::process::access::target_errno_error(
                pid,
                e.raw_os_error().unwrap_or(libc::EIO),
                &format!("/proc/{pid}/status"),
            )
        })?;
        let levels = status
            .lines()
            .find(|l| l.starts_with("NSpid:"))
            .map(|l| l.split_whitespace().count() - 1)
            .unwrap_or(1);
        let mut tids = TidMap { pid, map: None };
        if levels > 1 {
            tids.map = Some(HashMap::new());
            tids.rebuild();
        }
        Ok(tids)
    }

    /// Whether the target lives in another PID namespace.
    pub fn translates(&self) -> bool {
        self.map.is_some()
    }

    fn rebuild(&mut self) {
        let Some(map) = self.map.as_mut() else { return };
        map.clear();
        let Ok(dir) = fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return;
        };
        for entry in dir.flatten() {
            let Some(ours) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(status) = fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            if let Some(theirs) = status
                .lines()
                .find(|l| l.starts_with("NSpid:"))
                .and_then(|l| l.split_whitespace().last()?.parse().ok())
            {
                map.insert(theirs, ours);
            }
        }
    }

    /// Our id for the target's thread `tid`, re-reading the table once when it is not known yet.
    pub fn to_ours(&mut self, tid: u32) -> Option<u32> {
        let Some(map) = self.map.as_ref() else {
            return Some(tid);
        };
        if let Some(&ours) = map.get(&tid) {
            return Some(ours);
        }
        self.rebuild();
        self.map.as_ref()?.get(&tid).copied()
    }

    /// The target's thread ids in its own namespace, read now.
    pub fn their_tids(&mut self) -> Result<HashSet<u32>> {
        if self.map.is_none() {
            let mut tids = HashSet::new();
            read_tids(self.pid, &mut tids)?;
            return Ok(tids);
        }
        self.rebuild();
        Ok(self
            .map
            .as_ref()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_is_read_whole_and_shown_on_one_line() {
        use std::io::BufRead;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo ready\nread line", "with\ttab"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read once it runs the script: its command line is then the one it keeps.
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let line = read_cmdline(child.id()).unwrap();
        drop(child.stdin.take());
        child.wait().unwrap();
        // Kept whole (the trace's otherData has it as it was); shown on one line.
        assert_eq!(line, "sh -c echo ready\nread line with\ttab");
        assert_eq!(one_line(&line), "sh -c echo ready read line with tab");
    }

    #[test]
    fn a_thread_id_names_its_process() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let own = std::process::id();
        assert_ne!(tid, own);
        assert_eq!(thread_group_of(tid), Some(own));
        assert_eq!(thread_group_of(own), Some(own));
        drop(done_tx);
        worker.join().unwrap();
        assert_eq!(thread_group_of(u32::MAX), None);
    }

    #[test]
    fn own_threads_map_to_themselves() {
        let mut tids = TidMap::new(std::process::id()).unwrap();
        let me = nix::unistd::gettid().as_raw() as u32;
        assert!(!tids.translates());
        assert_eq!(tids.to_ours(me), Some(me));
        assert!(tids.their_tids().unwrap().contains(&me));
    }

    #[test]
    fn the_thread_count_watch_sees_threads_start_and_exit() {
        use std::io::{BufRead, Write};
        // A Python child that starts and ends 3 threads when told, and says when it has: after the
        // joins, once the kernel lists its one thread (a joined thread's OS thread ends just after).
        let script = "import os, sys, threading\n\
            stop = threading.Event()\n\
            ts = [threading.Thread(target=stop.wait) for _ in range(3)]\n\
            print('ready', flush=True); sys.stdin.readline()\n\
            [t.start() for t in ts]; print('started', flush=True); sys.stdin.readline()\n\
            stop.set(); [t.join() for t in ts]\n\
            while len(os.listdir('/proc/self/task')) > 1: pass\n\
            print('joined', flush=True); sys.stdin.readline()\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 on PATH");
        let mut said = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut told = child.stdin.take().unwrap();
        let mut step = |line: &str| {
            let mut got = String::new();
            said.read_line(&mut got).unwrap();
            assert_eq!(got.trim(), line);
        };
        let mut watch = ThreadCountWatch::open(child.id());
        assert!(watch.moved(), "nothing noted yet");
        step("ready");
        watch.note();
        let alone = watch.count().unwrap();
        assert_eq!(alone, 1);
        assert!(!watch.moved());
        writeln!(told).unwrap();
        step("started");
        assert_eq!(watch.count(), Some(alone + 3));
        assert!(watch.moved());
        watch.note();
        assert!(!watch.moved());
        writeln!(told).unwrap();
        step("joined");
        assert_eq!(watch.count(), Some(alone));
        assert!(watch.moved());
        drop(told);
        child.wait().unwrap();
        assert!(watch.moved(), "a reaped process reads as moved");
        assert!(ThreadCountWatch::open(u32::MAX).moved());
    }
}
