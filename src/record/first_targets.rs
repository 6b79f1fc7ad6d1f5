//! The targets a session starts with: the given processes, the launched command's interpreter, or
//! the accelerator users found now; and the check that there is something to record.

use std::path::Path;

use super::checks::processes_of;
use super::{Session, Targets, Update};
use crate::discover::device_nodes_here;
use crate::error::{Error, Result};
use crate::launch::{Launch, Launched, exe_of, given_pid_not_python, wait_for_interpreter};
use crate::python::attach::locate;

impl Session<'_> {
    /// Attaches to the targets there are now and returns the roots whose descendants are followed.
    pub(super) fn find_first_targets(
        &mut self,
        launched: &mut Option<Launched>,
        progress: &mut dyn FnMut(Update<'_>),
    ) -> Result<Vec<u32>> {
        let opts = self.opts;
        let stop = self.stop.clone();
        let mut roots: Vec<u32> = Vec::new();
        match &opts.targets {
            Targets::Pids(given) => {
                let pids = processes_of(given, progress);
                for &pid in &pids {
                    roots.push(pid);
                    self.known.insert(pid);
                    let program = exe_of(pid);
                    match locate(pid, opts.layout).and_then(|located| located.connect()) {
                        Ok(target) => self.attached.push(target),
                        Err(Error::NotPython { .. }) if opts.subprocesses => {
                            self.launcher(pid, program, progress);
                            self.look_again(pid);
                        }
                        Err(Error::NotPython { pid, why }) => {
                            let why = given_pid_not_python(&why, program.as_deref(), true);
                            let e = Error::NotPython { pid, why };
                            if pids.len() == 1 {
                                return Err(e);
                            }
                            self.fail_given(pid, e, progress);
                        }
                        Err(e) if pids.len() == 1 && !opts.subprocesses => return Err(e),
                        Err(e) => self.fail_given(pid, e, progress),
                    }
                }
            }
            Targets::Launch(command) => {
                let command = launched.insert(Launched::spawn(command)?);
                let pid = command.pid();
                roots.push(pid);
                self.known.insert(pid);
                let mut say_waiting = |program: Option<&Path>, why: &str| {
                    progress(Update::WaitingForPython { pid, program, why })
                };
                let found = wait_for_interpreter(
                    command,
                    opts.layout,
                    &stop,
                    opts.subprocesses,
                    &mut say_waiting,
                )?;
                match found {
                    Launch::Python(target) => self.attached.push(*target),
                    // A launcher that is not Python itself (a shell, `env`, mpirun) is fine when its
                    // Python descendants are what is recorded.
                    Launch::Launcher(program) => {
                        self.launcher(pid, program, progress);
                        self.look_again(pid);
                    }
                }
            }
            Targets::Devices(kind) => {
                self.discover_devices(*kind, progress)?;
                // Said at once: nothing else would be until the duration ends.
                if let Some(duration) = opts.duration
                    && self.attached.is_empty()
                {
                    let nodes_here = device_nodes_here(*kind);
                    progress(Update::WaitingForDevices {
                        kind: *kind,
                        duration,
                        nodes_here,
                    });
                }
            }
        }
        Ok(roots)
    }

    /// A process given among others that cannot be recorded: said now, as the others are recorded
    /// (a typo in a list of pids should not wait for the end of the recording to be seen), and
    /// again in the summary.
    fn fail_given(&mut self, pid: u32, e: Error, progress: &mut dyn FnMut(Update<'_>)) {
        progress(Update::Skipped {
            pid,
            why: &e.to_string(),
            given: true,
        });
        self.failures.push((pid, e));
    }

    /// An error where nothing was attached and nothing will be looked for later.
    pub(super) fn check_something_to_record(&mut self, following: bool) -> Result<()> {
        let opts = self.opts;
        // Watching for accelerator users that start later needs an end: without --duration, none
        // found now is an answer, not a reason to wait forever.
        if let Targets::Devices(kind) = opts.targets
            && self.attached.is_empty()
            && self.running.is_empty()
            && opts.duration.is_none()
        {
            // Waiting is no answer where there is no such device to open.
            let other = kind.other_option();
            let what_to_give = if device_nodes_here(kind) {
                format!(
                    "; give --pid PID[,PID...], {other}, a command after --, or --duration to \
                     wait for one"
                )
            } else {
                format!(
                    ", and this machine's /dev has no such device: give --pid PID[,PID...], \
                     {other}, or a command after --"
                )
            };
            return Err(Error::NothingFound(format!(
                "no Python process with {} open was found{}{what_to_give}",
                kind.describe(),
                crate::discover::closed_processes_note(),
            )));
        }
        if self.attached.is_empty() && !following {
            // The first failure's status, as where every target fails later (README, "Exit
            // status"); each failure was said as it happened (`fail_given`), not said again here.
            let mut failures = std::mem::take(&mut self.failures).into_iter();
            let given = failures.len();
            return Err(match failures.next() {
                Some((_, first)) if given > 1 => Error::NoneRecordable {
                    given,
                    first: Box::new(first),
                },
                Some((_, only)) => only,
                None => Error::Usage("nothing to record".into()),
            });
        }
        Ok(())
    }
}
