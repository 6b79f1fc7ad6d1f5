//! What a recording tells its caller: progress while it runs, and each target's outcome at the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::Error;
use crate::infer::stats::Totals;
use crate::launch::{Launched, Stopped};
use crate::report::analyze::ProcessAnswer;
use crate::sampler::report::SamplerReport;

/// One finished target.
pub struct TargetReport {
    pub pid: u32,
    pub rank: u32,
    pub path: PathBuf,
    pub python: String,
    pub layout_source: String,
    pub sampler: SamplerReport,
    pub totals: Totals,
    /// What `gilsample report` says of the trace (also in its `otherData.statistics`); `None` when
    /// the finished file could not be read back. For a trace whose writing failed, the answer for
    /// the events written before it failed.
    pub answer: Option<ProcessAnswer>,
    /// Writing the trace failed (a full disk, an I/O error): `path` is then the partial file that
    /// holds what was written, and the error says so.
    pub write_error: Option<Error>,
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

pub struct RecordReport {
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
}

impl RecordReport {
    /// The errors of targets that failed, and of those whose trace could not be written whole.
    pub fn errors(&self) -> impl Iterator<Item = (u32, &Error)> {
        let unwritten = self
            .targets
            .iter()
            .filter_map(|t| t.write_error.as_ref().map(|e| (t.pid, e)));
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
        pid: u32,
        path: &'a Path,
        python: String,
        layout: String,
        rate_hz: f64,
    },
    /// A candidate process was not recorded.
    Skipped {
        pid: u32,
        why: &'a str,
    },
    /// Every target found at the start has taken its first sample (or failed): a caller that starts
    /// a profiler now covers the same window.
    Ready,
    /// A given process id is a thread of another process, which is recorded instead.
    ThreadOfProcess {
        tid: u32,
        pid: u32,
    },
    /// A given or launched process is not Python; its Python descendants are recorded.
    Launcher {
        pid: u32,
        program: &'a str,
    },
    /// The recording failed after the command was launched, and the command was stopped.
    CommandStopped {
        pid: u32,
        how: Stopped,
    },
    /// The launched command has run for a while without an interpreter gilsample can read; the
    /// wait goes on. `program`: what it runs, when that is not Python; `why`: else the last reason.
    WaitingForPython {
        pid: u32,
        program: Option<&'a Path>,
        why: &'a str,
    },
    /// Writing a target's trace failed: its recording stopped, and so does the session's.
    WriteFailed {
        pid: u32,
        error: &'a Error,
    },
    Progress(&'a Progress),
}

/// A snapshot for the progress display.
pub struct Progress {
    pub elapsed: Duration,
    pub samples: u64,
    /// Periods skipped while targets were quiet (infer/quiet.rs): kept, not missed.
    pub skipped_periods: u64,
    pub late: u64,
    pub threads: u64,
    pub targets: usize,
}
