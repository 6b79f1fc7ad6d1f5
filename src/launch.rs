//! Launch mode's command: started with the default signal mask, tied to gilsample's life, waited for
//! until its interpreter runs, and, when the recording fails after it started, stopped with the
//! processes it started (SIGTERM, then SIGKILL after a grace period) so that nothing is left running
//! on its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::discover::descendants;
use crate::error::{Error, Result};
use crate::python::attach::{LayoutChoice, Located, locate};
use crate::python::target::Target;
use crate::sampler::clock::monotonic_ns;

/// How long launch mode waits for the interpreter to start before giving up.
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// The command is looked at every `FAST_POLL` while it may be Python (not looked at yet, or a Python
/// that is not ready), and for `FAST_FOR` after each exec: a command that is Python from its start,
/// or execs it (as `env` and `chroot` do), is read from its first moments.
const FAST_POLL: Duration = Duration::from_micros(500);
const FAST_FOR: Duration = Duration::from_millis(200);
/// While it runs a program found not to be Python, the polls slow down, doubling every `FAST_FOR`,
/// to this: a command that runs something else for long (a shell script that starts Python later)
/// costs a fraction of a percent of a CPU, not the quarter of one that 0.5 ms polls cost; its exec
/// into Python is seen at the next poll, and polls are fast again from there.
const SLOW_POLL: Duration = Duration::from_millis(5);
/// A program found not to be Python is looked at in full again only this often (for a libpython an
/// embedding program loads later): in between, a poll only checks whether it exec'd.
const RELOOK_NOT_PYTHON: Duration = Duration::from_millis(100);
/// After this long without an interpreter gilsample can read, the wait is said (once).
const SAY_WAITING_AFTER: Duration = Duration::from_millis(500);
/// Connect attempts on one located interpreter before it is located again (about 10 ms of polls).
const RELOCATE_AFTER_FAILURES: u32 = 20;
/// How long a stopped command has, after SIGTERM, to exit on its own (Python runs its exit handlers
/// and flushes its files) before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// How a command was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It had already exited.
    AlreadyExited,
    /// It exited after SIGTERM.
    Terminated,
    /// It was still running after the grace period and was killed.
    Killed,
}

impl Stopped {
    /// How the command was stopped, in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Stopped::AlreadyExited => "it had already exited",
            Stopped::Terminated => "it exited on SIGTERM",
            Stopped::Killed => "it did not exit on SIGTERM and was killed (SIGKILL)",
        }
    }
}

/// The launched command.
pub struct Launched {
    child: Child,
    status: Option<i32>,
    /// How `stop` ended it, where it was still running then.
    stopped: Option<Stopped>,
}

impl Launched {
    /// Starts `command` (program and arguments) with the default signal mask, to receive SIGTERM if
    /// gilsample dies.
    pub fn spawn(command: &[String]) -> Result<Launched> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Error::Usage("no command to launch after --".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        let parent = std::process::id();
        // gilsample blocks SIGINT/SIGTERM/SIGHUP in all its threads to handle them in one place; the
        // child must get the default mask back. And it must not outlive gilsample killed in a way
        // that runs no cleanup (SIGKILL, a second Ctrl+C): the kernel sends it SIGTERM then. The
        // spawning thread is the main thread, which lives as long as gilsample does.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                let empty = nix::sys::signal::SigSet::empty();
                nix::sys::signal::pthread_sigmask(
                    nix::sys::signal::SigmaskHow::SIG_SETMASK,
                    Some(&empty),
                    None,
                )
                .map_err(std::io::Error::from)?;
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // gilsample may have died between fork and prctl: then nobody would send it.
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::other("gilsample exited while launching"));
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| Error::Usage(cannot_launch(program, &e)))?;
        Ok(Launched {
            child,
            status: None,
            stopped: None,
        })
    }

    /// The command's pid in gilsample's PID namespace.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status once it has exited (a signal `s` counts as `128 + s`, as shells report it).
    pub fn try_status(&mut self) -> Option<i32> {
        if self.status.is_none()
            && let Ok(Some(exit)) = self.child.try_wait()
        {
            self.status = Some(exit_code(&exit));
        }
        self.status
    }

    /// Waits for the command to exit and returns its exit status (a signal `s` as `128 + s`).
    pub fn wait(&mut self) -> Result<i32> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let exit = self
            .child
            .wait()
            .map_err(|e| Error::io("waiting for the launched command", e))?;
        let status = exit_code(&exit);
        self.status = Some(status);
        Ok(status)
    }

    /// Stops the command and every process it started: SIGTERM to all, SIGKILL to those still
    /// there after `STOP_GRACE`.
    pub fn stop(&mut self) -> Stopped {
        if self.try_status().is_some() {
            return Stopped::AlreadyExited;
        }
        let how = self.stop_running();
        self.stopped = Some(how);
        how
    }

    /// How `stop` ended it, where it was still running when stopped: `None` where it was not
    /// stopped, or had exited first.
    pub fn stopped(&self) -> Option<Stopped> {
        self.stopped
    }

    /// `stop` of a command still running.
    fn stop_running(&mut self) -> Stopped {
        // Collected first: once the command is gone its children are reparented and untraceable.
        let mut started = descendants(&[self.pid()]);
        let signal_all = |signal: Signal, pids: &[u32]| {
            for &pid in pids {
                let _ = kill(Pid::from_raw(pid as i32), signal);
            }
        };
        signal_all(Signal::SIGTERM, &[self.pid()]);
        signal_all(Signal::SIGTERM, &started);
        let begin = monotonic_ns();
        while Duration::from_nanos(monotonic_ns() - begin) < STOP_GRACE {
            if self.try_status().is_some() && !started.iter().any(|&p| alive(p)) {
                return Stopped::Terminated;
            }
            // What they start while shutting down (a trap handler, a cleanup script) is stopped too.
            let roots: Vec<u32> = std::iter::once(self.pid())
                .chain(started.iter().copied())
                .collect();
            let new: Vec<u32> = descendants(&roots)
                .into_iter()
                .filter(|p| !roots.contains(p))
                .collect();
            signal_all(Signal::SIGTERM, &new);
            started.extend(new);
            thread::sleep(Duration::from_millis(10));
        }
        let left: Vec<u32> = started.into_iter().filter(|&p| alive(p)).collect();
        signal_all(Signal::SIGKILL, &left);
        if self.try_status().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.wait();
        // SIGKILL takes effect when each process next runs: return once they are gone, so that a
        // caller who looks finds nothing left (bounded, as the grace was).
        let begin = monotonic_ns();
        while left.iter().any(|&p| alive(p))
            && Duration::from_nanos(monotonic_ns() - begin) < STOP_GRACE
        {
            thread::sleep(Duration::from_millis(5));
        }
        Stopped::Killed
    }
}

impl Drop for Launched {
    /// A backstop for paths that did not stop it explicitly (a panic): never leave it orphaned.
    fn drop(&mut self) {
        if self.try_status().is_none() {
            self.stop();
        }
    }
}

/// Why the command after `--` did not start, and what to give instead.
fn cannot_launch(program: &str, e: &std::io::Error) -> String {
    let searched = !program.contains('/');
    let why = match e.kind() {
        std::io::ErrorKind::NotFound if searched => format!(
            "no command {program} on PATH: check its spelling, or give its path \
             (gilsample -- ./{program})"
        ),
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => format!(
            "not an executable file: a Python script is launched through its interpreter \
             (gilsample -- python3 {program}), or made executable (chmod +x)"
        ),
        _ => e.to_string(),
    };
    format!("cannot launch {program}: {why}")
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(status).unwrap_or(0))
}

/// The program a process runs now (`/proc/PID/exe`).
pub fn exe_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Why a pid given by the user is not a Python process gilsample can read, with what it runs and
/// where the Python processes are; `subprocesses`: the command takes --subprocesses.
pub fn given_pid_not_python(why: &str, program: Option<&Path>, subprocesses: bool) -> String {
    let runs = program.map_or(String::new(), |p| format!("it runs {}, and ", p.display()));
    let or_below = if subprocesses {
        ", or add --subprocesses to record the Python processes this one starts"
    } else {
        ""
    };
    format!(
        "{runs}{why}. Give the pid of the Python process itself (`pgrep -af python` lists \
         them){or_below}"
    )
}

/// Whether `pid`, a child of gilsample, has run `exec` (until then it is a copy of gilsample).
fn has_exec(pid: u32) -> bool {
    match (exe_of(pid), exe_of(std::process::id())) {
        (Some(theirs), Some(ours)) => theirs != ours,
        _ => false,
    }
}

/// What the launched command turned out to be.
pub enum Launch {
    /// A Python process, attached and ready to be sampled.
    Python(Box<Target>),
    /// Not Python (`--subprocesses` only): a launcher running this program when it was looked at.
    Launcher(Option<PathBuf>),
}

/// The pause before the next look at a launched command that has run a program found not to be
/// Python for `elapsed` since it exec'd it.
pub fn poll_interval(elapsed: Duration) -> Duration {
    if elapsed < FAST_FOR {
        return FAST_POLL;
    }
    let doublings = (elapsed.as_nanos() / FAST_FOR.as_nanos()).min(8) as u32;
    (FAST_POLL * 2u32.pow(doublings)).min(SLOW_POLL)
}

/// Polls the launched process until its interpreter is running and readable. With `launcher_ok`
/// (`--subprocesses`), a command that has exec'd a program that is not Python is a launcher (a
/// shell, `env`, `mpirun`) at once: its Python descendants, or the Python it execs later, are found
/// by the session's discovery, which needs the wait to end. After `SAY_WAITING_AFTER` without an
/// interpreter, `waiting` is told once: the program it runs when that is not Python, else why not.
pub fn wait_for_interpreter(
    launched: &mut Launched,
    choice: LayoutChoice,
    stop: &AtomicBool,
    launcher_ok: bool,
    waiting: &mut dyn FnMut(Option<&std::path::Path>, &str),
) -> Result<Launch> {
    let pid = launched.pid();
    let begin = monotonic_ns();
    let mut located: Option<Located> = None;
    let mut connect_failures = 0u32;
    let mut last_error = None;
    let mut ran_instead: Option<PathBuf> = None;
    // The program last found not to be Python, and when.
    let mut not_python: Option<(Option<PathBuf>, u64)> = None;
    // The program it ran at the last look, and since when.
    let mut running: (Option<PathBuf>, u64) = (None, begin);
    let mut said = false;
    while Duration::from_nanos(monotonic_ns() - begin) < LAUNCH_TIMEOUT
        && !stop.load(Ordering::Relaxed)
    {
        let now = monotonic_ns();
        let elapsed = Duration::from_nanos(now - begin);
        if let Some(status) = launched.try_status() {
            let mut why = format!(
                "the command exited (status {status}) before a Python interpreter was found in it"
            );
            if let Some(program) = &ran_instead {
                why += &format!(
                    "; it ran {}, which is not Python: to record the Python programs it starts, add \
                     --subprocesses",
                    program.display()
                );
            }
            return Err(Error::NotPython { pid, why });
        }
        // Read before looking: if it execs meanwhile, discovery sees the program change.
        let program = if located.is_none() { exe_of(pid) } else { None };
        if program.is_some() && program != running.0 {
            running = (program.clone(), now);
        }
        let judged_lately = not_python.as_ref().is_some_and(|(judged, at)| {
            *judged == program && Duration::from_nanos(now - at) < RELOOK_NOT_PYTHON
        });
        if located.is_none() && !judged_lately {
            match locate(pid, choice) {
                Ok(found) => located = Some(found),
                Err(
                    e @ (Error::Unsupported { .. }
                    | Error::Permission { .. }
                    | Error::FilesUnreadable { .. }),
                ) => return Err(e),
                Err(e @ Error::NotPython { .. }) if has_exec(pid) => {
                    if launcher_ok {
                        return Ok(Launch::Launcher(program));
                    }
                    // It may still exec Python (`env`, a script ending in `exec python3`).
                    ran_instead = program.clone();
                    not_python = Some((program.clone(), now));
                    last_error = Some(e);
                }
                Err(e) => last_error = Some(e),
            }
        }
        if let Some(found) = &located {
            match found.connect() {
                Ok(target) => return Ok(Launch::Python(Box::new(target))),
                Err(e @ Error::Permission { .. }) => return Err(e),
                Err(e) => {
                    last_error = Some(e);
                    connect_failures += 1;
                }
            }
            // What was located may be gone: a Python that exec'd (another Python, or itself
            // again at another address) after it was found. Found again now and then.
            if connect_failures.is_multiple_of(RELOCATE_AFTER_FAILURES) {
                located = None;
            }
        }
        if !said && elapsed >= SAY_WAITING_AFTER {
            said = true;
            let runs = not_python
                .as_ref()
                .and_then(|(program, _)| program.as_deref());
            let why = last_error
                .as_ref()
                .map(Error::to_string)
                .unwrap_or_default();
            waiting(runs, &why);
        }
        let runs_not_python = located.is_none()
            && program.is_some()
            && not_python
                .as_ref()
                .is_some_and(|(judged, _)| *judged == program);
        thread::sleep(if runs_not_python {
            poll_interval(Duration::from_nanos(now - running.1))
        } else {
            FAST_POLL
        });
    }
    Err(last_error.unwrap_or(Error::NotPython {
        pid,
        why: "its interpreter did not start".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_cannot_start_is_said_with_what_to_give_instead() {
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let said = cannot_launch("trian.py", &not_found);
        assert!(said.contains("no command trian.py on PATH"), "{said}");
        assert!(said.contains("gilsample -- ./trian.py"), "{said}");
        let said = cannot_launch("./gone.py", &not_found);
        assert_eq!(said, "cannot launch ./gone.py: no such file");
        let said = cannot_launch("./train.py", &denied);
        assert!(said.contains("gilsample -- python3 ./train.py"), "{said}");
    }

    fn gone(pid: u32) -> bool {
        !alive(pid)
    }

    /// The command's own children, once the shell has started them (its stdout says so).
    fn spawn_tree(script: &str) -> (Launched, Vec<u32>) {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let command = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!(
                "{script} & echo $! > {}.tmp; mv {0}.tmp {0}; wait",
                ready.display()
            ),
        ];
        let launched = Launched::spawn(&command).unwrap();
        // The shell writes its child's pid, then renames the file into place: readiness, no sleep
        // being long enough.
        let child: u32 = loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                break text.trim().parse().unwrap();
            }
            thread::sleep(Duration::from_millis(5));
        };
        (launched, vec![child])
    }

    #[test]
    fn what_the_command_starts_while_stopping_is_stopped_too() {
        let dir = tempfile::tempdir().unwrap();
        let late = dir.path().join("late");
        let armed = dir.path().join("armed");
        // A child of the command that, on SIGTERM, starts another (and says which), then keeps
        // running until it is killed. It says when its trap is set: the pid spawn_tree waits for
        // is written as the child is forked, and a SIGTERM before the trap ends it unhandled.
        let script = format!(
            "(trap 'sleep 600 & echo $! > {0}.tmp; mv {0}.tmp {0}' TERM; : > {1}; while :; do sleep 0.01; done)",
            late.display(),
            armed.display()
        );
        let (mut launched, children) = spawn_tree(&script);
        while !armed.exists() {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(launched.stop(), Stopped::Killed);
        assert!(children.iter().all(|&c| gone(c)));
        let late: u32 = std::fs::read_to_string(&late)
            .expect("the trap ran")
            .trim()
            .parse()
            .unwrap();
        let escaped = !gone(late);
        // Never left behind, even when the test fails: it would hold the test run's pipes open.
        let _ = kill(Pid::from_raw(late as i32), Signal::SIGKILL);
        assert!(
            !escaped,
            "the child started on SIGTERM ({late}) was still running"
        );
    }

    #[test]
    fn polls_are_fast_at_first_then_slow_down() {
        assert_eq!(poll_interval(Duration::ZERO), FAST_POLL);
        assert_eq!(poll_interval(Duration::from_millis(199)), FAST_POLL);
        assert!(poll_interval(Duration::from_millis(300)) > FAST_POLL);
        assert_eq!(poll_interval(Duration::from_secs(1)), SLOW_POLL);
        assert_eq!(poll_interval(Duration::from_secs(3600)), SLOW_POLL);
        // `gilsample -- sleep 8` looked 16,000 times at 0.5 ms each, now about 2,200 times.
        let (mut at, mut polls) = (Duration::ZERO, 0);
        while at < Duration::from_secs(8) {
            at += poll_interval(at);
            polls += 1;
        }
        assert!((1_000..2_500).contains(&polls), "{polls} polls");
    }

    #[test]
    fn stop_ends_the_command_and_what_it_started() {
        let (mut launched, children) = spawn_tree("sleep 600");
        assert_eq!(launched.stop(), Stopped::Terminated);
        assert!(children.iter().all(|&c| gone(c)));
        assert_eq!(launched.try_status(), Some(128 + libc::SIGTERM));
        assert_eq!(launched.stop(), Stopped::AlreadyExited);
    }

    #[test]
    fn stop_kills_what_ignores_sigterm() {
        let (mut launched, children) = spawn_tree("trap '' TERM; sleep 600");
        assert_eq!(launched.stop(), Stopped::Killed);
        assert!(children.iter().all(|&c| gone(c)));
        assert!(launched.try_status().is_some());
    }
}
