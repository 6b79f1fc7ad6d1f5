//! Finding targets while a session runs: candidates attached or judged (not ready yet, not Python,
//! gone), roots that are launchers and looked at again, and the accelerator users of `--all-npu` /
//! `--all-gpu`.

use std::path::PathBuf;

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
        self.launchers.insert(pid, program);
    }

    /// Lets discovery look at a root judged a launcher again, with the grace rounds every new
    /// process gets: a program just exec'd is briefly only the exec loader, and a Python caught
    /// then (libpython not mapped yet) looks like a launcher that never changes program.
    pub(super) fn look_again(&mut self, pid: u32) {
        self.known.remove(&pid);
    }

    /// Launcher roots that run another program than when they were judged not Python: they are
    /// candidates again.
    pub(super) fn roots_that_changed_program(&mut self, roots: &[u32]) -> Vec<u32> {
        let mut changed = Vec::new();
        for &pid in roots {
            if let Some(program) = self.launchers.get(&pid)
                && exe_of(pid).is_some_and(|now| Some(&now) != program.as_ref())
            {
                self.launchers.remove(&pid);
                self.known.remove(&pid);
                self.not_ready.remove(&pid);
                changed.push(pid);
            }
        }
        changed
    }

    /// Attaches to candidates not seen before: Python ones are recorded, others are skipped with a
    /// reason; one whose interpreter has not started yet is retried on later rounds. Descendants
    /// that are not Python (`descendants`: shells, `srun`, `sleep`) are passed over silently: they
    /// are the job's plumbing, not something the user asked to record.
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
            let program = if was_launcher { exe_of(pid) } else { None };
            match locate(pid, self.opts.layout).and_then(|located| located.connect()) {
                Ok(target) => {
                    self.known.insert(pid);
                    // No longer a launcher whose change of program makes it a candidate again.
                    self.launchers.remove(&pid);
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
                }
                Err(e) => {
                    self.known.insert(pid);
                    let why = e.to_string();
                    progress(Update::Skipped { pid, why: &why });
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
