//! Finding targets while a session runs: candidates attached or judged (not ready yet, not Python,
//! gone), processes judged not Python looked at again when they exec another program, and the
//! accelerator users of `--all-npu` / `--all-gpu`.

use std::path::{Path, PathBuf};

use super::{MAX_NOT_READY_ROUNDS, Session, Update};
use crate::discover::{DeviceKind, device_users};
use crate::error::{Error, Result};
use crate::launch::exe_of;
use crate::python::attach::locate;

impl Session<'_> {
    /// A root that is not Python: not a failure when its descendants are followed. `program` is
    /// what it ran when it was looked at, read before looking.
    pub(super) fn launcher(
        &mut self,
        pid: u32,
        program: Option<PathBuf>,
        progress: &mut dyn FnMut(Update<'_>),
    ) {
        let name = program
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "a program that is not Python".into());
        if !self.launcher_report.iter().any(|(p, _)| *p == pid) {
            progress(Update::Launcher {
                pid,
                program: &name,
            });
            self.launcher_report.push((pid, name));
        }
        self.not_python.insert(pid, program);
    }

    /// Lets discovery look at a root judged a launcher again, with the grace rounds every new
    /// process gets: a program just exec'd is briefly only the exec loader, and a Python caught
    /// then (libpython not mapped yet) looks like a launcher that never changes program.
    pub(super) fn look_again(&mut self, pid: u32) {
        self.known.remove(&pid);
    }

    /// Those of `pids` (roots and followed descendants) that run another program than when they
    /// were judged not Python: they are candidates again. A shell or a version manager's shim that
    /// execs Python after a while (pyenv's `python3` is a bash script) is caught so, whenever the
    /// exec comes. Of `pids`, those gone are forgotten: a root is passed at every round, gone or
    /// not; a descendant only while it lives, so a gone one's entry stays until its pid is reused,
    /// and the new process is then a candidate if it runs another program.
    pub(super) fn changed_program(&mut self, pids: &[u32]) -> Vec<u32> {
        let mut changed = Vec::new();
        for &pid in pids {
            let Some(program) = self.not_python.get(&pid) else {
                continue;
            };
            let now = exe_of(pid);
            let same = now.is_some() && now.as_ref() == program.as_ref();
            // A program that cannot be read now of a process that is still there: nothing to go by.
            let unreadable = now.is_none() && Path::new(&format!("/proc/{pid}")).exists();
            if same || unreadable {
                continue;
            }
            self.not_python.remove(&pid);
            self.known.remove(&pid);
            self.not_ready.remove(&pid);
            if now.is_some() {
                changed.push(pid);
            }
        }
        changed
    }

    /// Attaches to candidates not seen before: Python ones are recorded, others are skipped with a
    /// reason; one whose interpreter has not started yet is retried on later rounds. Descendants
    /// that are not Python (`descendants`: shells, `srun`, `sleep`) are passed over, said only with
    /// `--verbose`: they are the job's plumbing, not something the user asked to record. Each
    /// process judged not Python is kept with the program it ran, read before it was looked at, so
    /// that an exec after that look makes it a candidate again (`changed_program`).
    pub(super) fn try_attach(
        &mut self,
        candidates: Vec<u32>,
        descendants: bool,
        progress: &mut dyn FnMut(Update<'_>),
    ) -> Result<()> {
        for pid in candidates {
            if self.known.contains(&pid) {
                continue;
            }
            let was_launcher = self.launcher_report.iter().any(|(p, _)| *p == pid);
            let program = exe_of(pid);
            match locate(pid, self.opts.layout).and_then(|located| located.connect()) {
                Ok(target) => {
                    self.known.insert(pid);
                    // No longer a process whose change of program makes it a candidate again.
                    self.not_python.remove(&pid);
                    self.not_ready.remove(&pid);
                    if self.config.end_at_ns.is_none() && self.opts.duration.is_some() {
                        self.attached.push(target);
                    } else {
                        self.start(vec![target])?;
                    }
                }
                Err(Error::NotReady { .. })
                    if self.not_ready.get(&pid).copied().unwrap_or(0) < MAX_NOT_READY_ROUNDS =>
                {
                    *self.not_ready.entry(pid).or_default() += 1;
                }
                // A fresh child is briefly a copy of its parent or the exec loader; give it a few rounds.
                Err(Error::NotPython { .. })
                    if self.not_ready.get(&pid).copied().unwrap_or(0) < 3 =>
                {
                    *self.not_ready.entry(pid).or_default() += 1;
                }
                Err(Error::ProcessGone { .. }) => {
                    self.known.insert(pid);
                }
                Err(Error::NotPython { .. }) if was_launcher => {
                    self.known.insert(pid);
                    self.launcher(pid, program, progress);
                }
                Err(Error::NotPython { .. }) if descendants => {
                    self.known.insert(pid);
                    progress(Update::PassedOver {
                        pid,
                        program: program.as_deref(),
                    });
                    self.not_python.insert(pid, program);
                }
                Err(e) => {
                    self.known.insert(pid);
                    let why = e.to_string();
                    progress(Update::Skipped {
                        pid,
                        why: &why,
                        given: false,
                    });
                    self.skipped.push((pid, why));
                }
            }
        }
        Ok(())
    }

    pub(super) fn discover_devices(
        &mut self,
        kind: DeviceKind,
        progress: &mut dyn FnMut(Update<'_>),
    ) -> Result<()> {
        let users: Vec<u32> = device_users(kind).into_iter().map(|(pid, _)| pid).collect();
        self.try_attach(users, false, progress)
    }
}
