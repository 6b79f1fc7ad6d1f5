//! What a recording tells its caller: progress while it runs, and each target's outcome at the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::Error;
use crate::infer::stats::Totals;
use crate::launch::Stopped;
use crate::report::analyze::ProcessAnswer;
use crate::sample::sampler::SamplerReport;

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
    /// the finished file could not be read back.
    pub answer: Option<ProcessAnswer>,
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
    /// The launched command's exit status (launch mode).
    pub child_status: Option<i32>,
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
