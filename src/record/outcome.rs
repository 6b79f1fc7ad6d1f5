//! What a recording tells its caller: progress while it runs, and each target's outcome at the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::discover::DeviceKind;
use crate::error::Error;
use crate::infer::stats::Totals;
use crate::launch::{Launched, Stopped};
use crate::report::analyze::ProcessAnswer;
use crate::sampler::report::SamplerReport;

/// One finished target.
pub struct TargetReport {
    /// The target's pid in gilsample's PID namespace.
    pub pid: u32,
    /// Its rank in a distributed job (from `RANK` and the like in its environment), where it has
    /// one.
    pub rank: Option<u32>,
    /// Its trace file (the partial one where writing failed).
    pub path: PathBuf,
    /// The interpreter's version, `3.12.3`.
    pub python: String,
    /// Where its struct layout came from.
    pub layout_source: String,
    /// What its sampler did and counted.
    pub sampler: SamplerReport,
    /// Per-thread time in each GIL state.
    pub totals: Totals,
    /// What `gilsample report` says of the trace (also in its `otherData.statistics`); `None` when
    /// the finished file could not be read back. For a trace whose writing failed, the answer for
    /// the events written before it failed.
    pub answer: Option<ProcessAnswer>,
    /// Writing the trace failed (a full disk, an I/O error): `path` is then the partial file that
    /// holds what was written, and the error says so.
    pub write_error: Option<Error>,
    /// Saving its samples (`--save-samples`) failed: the trace is whole, the saved stream ends
    /// where writing it failed (a replay reads it to there), and the error says so.
    pub save_error: Option<Error>,
}

impl TargetReport {
    /// The report of a trace that was written whole, or the error that stopped it.
    pub fn complete(self) -> crate::error::Result<TargetReport> {
        match self.write_error {
            Some(error) => Err(error),
            None => Ok(self),
        }
    }
}

/// The outcome of a whole `record` run: each target's report, what failed and what was left alone.
pub struct RecordReport {
    /// The targets that were recorded.
    pub targets: Vec<TargetReport>,
    /// Targets that could not be recorded, with why.
    pub failures: Vec<(u32, Error)>,
    /// Processes looked at and left alone (not Python), with why.
    pub skipped: Vec<(u32, String)>,
    /// Given or launched processes that are not Python, whose Python descendants were looked for
    /// (`--subprocesses`), with the program they run.
    pub launchers: Vec<(u32, String)>,
    /// The merged trace, when asked for.
    pub merged: Option<PathBuf>,
    /// The launched command (launch mode), handed over when the recording is finished: it may
    /// still be running (the recording ended by `--duration` or a signal), and is waited for after
    /// the answer is printed.
    pub command: Option<Launched>,
    /// gilsample's threads were kept on the CPUs `--cpus` gave.
    pub samplers_pinned: bool,
}

impl RecordReport {
    /// The errors of targets that failed, and of those whose trace or saved samples could not be
    /// written whole.
    pub fn errors(&self) -> impl Iterator<Item = (u32, &Error)> {
        let unwritten = self.targets.iter().flat_map(|t| {
            let errors = t.write_error.iter().chain(&t.save_error);
            errors.map(|e| (t.pid, e))
        });
        self.failures
            .iter()
            .map(|(pid, e)| (*pid, e))
            .chain(unwritten)
    }

    /// Whether no target's trace was written whole.
    pub fn nothing_complete(&self) -> bool {
        self.targets.iter().all(|t| t.write_error.is_some())
    }
}

/// What `record` tells its caller while it runs.
pub enum Update<'a> {
    /// Sampling of a target has begun and its trace will be written to `path`.
    Started {
        /// The target's pid in gilsample's PID namespace.
        pid: u32,
        /// Its trace file.
        path: &'a Path,
        /// Its interpreter's version, `3.12.3`.
        python: String,
        /// Where its layout came from.
        layout: String,
        /// Samples per second it is sampled at.
        rate_hz: f64,
    },
    /// A candidate process was not recorded.
    Skipped {
        /// The candidate's pid.
        pid: u32,
        /// Why it was left alone.
        why: &'a str,
        /// Given by the user (`--pid`), not found: its refusal is an error, said even with `-q`.
        given: bool,
    },
    /// A target was found stopped (SIGSTOP, Ctrl+Z, a debugger): its waits until it runs again are
    /// the stop's, left out of the answer.
    TargetStopped {
        /// The target's pid.
        pid: u32,
        /// Stopped by a debugger (state `t`), not by a signal (`T`).
        by_debugger: bool,
    },
    /// A target found stopped runs again.
    TargetContinued {
        /// The target's pid.
        pid: u32,
    },
    /// Every target found at the start has taken its first sample (or failed): a caller that starts
    /// a profiler now covers the same window.
    Ready,
    /// A given process id is a thread of another process, which is recorded instead.
    ThreadOfProcess {
        /// The id given, a thread's.
        tid: u32,
        /// The process it is a thread of.
        pid: u32,
    },
    /// A given or launched process is not Python; its Python descendants are recorded.
    Launcher {
        /// The launcher's pid.
        pid: u32,
        /// The program it runs.
        program: &'a str,
    },
    /// A followed descendant is not Python (a shell, `srun`, a shim that has not exec'd yet): passed
    /// over, and looked at again if it execs another program.
    PassedOver {
        /// The descendant's pid.
        pid: u32,
        /// The program it runs, where it could be read.
        program: Option<&'a Path>,
    },
    /// The recording failed after the command was launched, and the command was stopped.
    CommandStopped {
        /// The command's pid.
        pid: u32,
        /// How it was stopped.
        how: Stopped,
    },
    /// The launched command has run for a while without an interpreter gilsample can read; the
    /// wait goes on. `program`: what it runs, when that is not Python; `why`: else the last reason.
    WaitingForPython {
        /// The command's pid.
        pid: u32,
        /// What it runs, when that is not Python.
        program: Option<&'a Path>,
        /// Else the last reason it is not readable yet.
        why: &'a str,
    },
    /// `--all-npu`/`--all-gpu` with `--duration` found no Python process using the device at the
    /// start: it keeps looking until the duration ends.
    WaitingForDevices {
        /// Which devices.
        kind: DeviceKind,
        /// How long it keeps looking.
        duration: Duration,
        /// Whether this machine's `/dev` has any such device node.
        nodes_here: bool,
    },
    /// Writing a target's trace failed: its recording stopped, and so does the session's.
    WriteFailed {
        /// The target's pid.
        pid: u32,
        /// What failed.
        error: &'a Error,
    },
    /// A periodic snapshot for the progress display.
    Progress(&'a Progress),
}

/// A snapshot for the progress display.
pub struct Progress {
    /// Time since recording began.
    pub elapsed: Duration,
    /// Samples taken so far, all targets together.
    pub samples: u64,
    /// Periods skipped while targets were quiet (infer/quiet.rs): kept, not missed.
    pub skipped_periods: u64,
    /// Ticks that started more than one period after their deadline, all targets together.
    pub late: u64,
    /// Python threads being sampled now, all targets together.
    pub threads: u64,
    /// Targets being recorded now.
    pub targets: usize,
}
