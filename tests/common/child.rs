//! The child processes a test owns: each is killed and reaped when dropped, so a test that fails
//! half-way leaves nothing running, and none is left a zombie.

use std::io::{BufRead, BufReader};
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Stdio};

/// A child process killed and reaped when dropped. It derefs to its `Child`: its pipes, its id and
/// an explicit `wait` (after which dropping it signals nothing: the `Child` knows it was reaped).
pub struct KilledOnDrop(pub Child);

impl KilledOnDrop {
    /// Spawns `cmd` as configured.
    pub fn spawn(cmd: &mut Command) -> KilledOnDrop {
        KilledOnDrop(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
        )
    }

    /// Spawns `cmd` with stdout piped and returns once it printed its first line (how the workloads
    /// and the shells of the tests say they are up), with that line. The rest of its stdout is
    /// dropped: a child that needs to go on printing is spawned with `spawn` and read by its test.
    pub fn spawn_until_first_line(cmd: &mut Command) -> (KilledOnDrop, String) {
        let mut child = KilledOnDrop::spawn(cmd.stdout(Stdio::piped()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (child, line)
    }
}

impl Deref for KilledOnDrop {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A standard output whose reader is already gone (`| head` that has stopped reading): the first
/// write to it fails with EPIPE.
pub fn stdout_nobody_reads() -> std::process::Stdio {
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    std::process::Stdio::from(write_end)
}

/// Whether `pid` runs: it exists and is not a zombie (an orphan waits for init to reap it).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}
