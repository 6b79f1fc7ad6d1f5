//! One recording: attach to every target (or launch one), run a sampler thread and a writer thread per
//! target, stop on duration, signal or target exit, and finish each trace file.
//!
//! Sampling and writing are separate threads joined by a channel so that file I/O never delays a
//! sample; the sampler's only output is `Record` values.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::infer::stats::Totals;
use crate::process::tasks::{read_cmdline, read_namespace_pid, read_rank};
use crate::python::attach::{LayoutChoice, Located, Target, locate};
use crate::sample::clock::{monotonic_ns, monotonic_to_wall_offset_ns};
use crate::sample::priority::Priority;
use crate::sample::sampler::{LiveCounters, Record, SamplerConfig, SamplerReport, run_sampler};
use crate::trace::chrome::{ChromeWriter, TraceClock};
use crate::trace::output::OutputSpec;

/// What to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    Pids(Vec<u32>),
    /// Launch this command and record it from its start to its exit.
    Launch(Vec<String>),
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub targets: Targets,
    pub rate_hz: f64,
    pub duration: Option<Duration>,
    pub output: OutputSpec,
    pub force: bool,
    pub layout: LayoutChoice,
    pub clock: TraceClock,
    pub priority: Priority,
}

/// One finished target.
pub struct TargetReport {
    pub pid: u32,
    pub rank: u32,
    pub path: PathBuf,
    pub python: String,
    pub layout_source: String,
    pub sampler: SamplerReport,
    pub totals: Totals,
}

pub struct RecordReport {
    pub targets: Vec<TargetReport>,
    /// Targets that could not be recorded, with why.
    pub failures: Vec<(u32, Error)>,
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
    Progress(&'a Progress),
}

/// A snapshot for the progress display.
pub struct Progress {
    pub elapsed: Duration,
    pub samples: u64,
    pub late: u64,
    pub threads: u64,
    pub targets: usize,
}

/// How long launch mode waits for the interpreter to start before giving up.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
const LAUNCH_POLL: Duration = Duration::from_micros(500);

pub fn record(
    opts: &RecordOptions,
    stop: Arc<AtomicBool>,
    progress: &mut dyn FnMut(Update<'_>),
) -> Result<RecordReport> {
    opts.output.prepare()?;
    let period_ns = (1e9 / opts.rate_hz).round() as u64;
    let mut failures = Vec::new();
    let mut child: Option<Child> = None;
    let mut targets: Vec<Target> = Vec::new();
    match &opts.targets {
        Targets::Pids(pids) => {
            for &pid in pids {
                match locate(pid, opts.layout).and_then(|located| located.connect()) {
                    Ok(target) => targets.push(target),
                    Err(e) if pids.len() == 1 => return Err(e),
                    Err(e) => failures.push((pid, e)),
                }
            }
            if targets.is_empty() {
                let (_, first) = failures.remove(0);
                return Err(first);
            }
        }
        Targets::Launch(command) => {
            let mut spawned = spawn_command(command)?;
            match wait_for_interpreter(&mut spawned, opts.layout, &stop) {
                Ok(target) => targets.push(target),
                Err(e) => {
                    let _ = spawned.wait();
                    return Err(e);
                }
            }
            child = Some(spawned);
        }
    }

    let offset_ns = match opts.clock {
        TraceClock::Wall => monotonic_to_wall_offset_ns(),
        TraceClock::Monotonic => 0,
    };
    let config = SamplerConfig {
        period_ns,
        duration_ns: opts.duration.map(|d| d.as_nanos() as u64),
        refresh_ns: SamplerConfig::DEFAULT_REFRESH_NS,
        priority: opts.priority,
    };
    let mut writers = Vec::new();
    let mut announcements = Vec::new();
    for target in &targets {
        let rank = read_rank(target.pid);
        let path = opts.output.path_for(target.pid, rank);
        writers.push((
            rank,
            ChromeWriter::create(&path, opts.force, target.pid, offset_ns)?,
        ));
        announcements.push(Announcement {
            pid: target.pid,
            path,
            python: target.version.to_string(),
            layout: target.layout_source.to_string(),
        });
    }

    let started = monotonic_ns();
    let lives: Vec<Arc<LiveCounters>> = targets
        .iter()
        .map(|_| Arc::new(LiveCounters::default()))
        .collect();
    let reports = thread::scope(|scope| {
        let mut handles = Vec::new();
        for ((target, (rank, writer)), live) in targets.iter().zip(writers).zip(&lives) {
            let stop = &stop;
            let handle = scope.spawn(move || {
                record_one(target, rank, writer, &config, stop, live, opts, offset_ns)
            });
            handles.push(handle);
        }
        let reaped = watch(
            child.as_mut(),
            &lives,
            &announcements,
            opts.rate_hz,
            started,
            progress,
        );
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a recording thread panicked"))
            .collect();
        (results, reaped)
    });
    let (results, reaped) = reports;
    let child_status = match (child.as_mut(), reaped) {
        (_, Some(status)) => Some(status),
        (Some(child), None) => {
            let status = child
                .wait()
                .map_err(|e| Error::io("waiting for the launched command", e))?;
            Some(exit_code(&status))
        }
        (None, None) => None,
    };
    let mut done = Vec::new();
    for (target, result) in targets.iter().zip(results) {
        match result {
            Ok(report) => done.push(report),
            Err(e) => failures.push((target.pid, e)),
        }
    }
    Ok(RecordReport {
        targets: done,
        failures,
        child_status,
    })
}

fn spawn_command(command: &[String]) -> Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Error::Usage("no command to launch after --".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    // gilsample blocks SIGINT/SIGTERM/SIGHUP in all its threads to handle them in one place; the child
    // must get the default mask back.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let empty = nix::sys::signal::SigSet::empty();
            nix::sys::signal::pthread_sigmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&empty),
                None,
            )
            .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
        .map_err(|e| Error::Usage(format!("cannot launch {program}: {e}")))
}

/// Polls the launched process until its interpreter is running and readable.
fn wait_for_interpreter(
    child: &mut Child,
    choice: LayoutChoice,
    stop: &AtomicBool,
) -> Result<Target> {
    let pid = child.id();
    let begin = monotonic_ns();
    let mut located: Option<Located> = None;
    let mut last_error = None;
    while Duration::from_nanos(monotonic_ns() - begin) < LAUNCH_TIMEOUT
        && !stop.load(Ordering::Relaxed)
    {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::NotPython {
                pid,
                why: format!("the command exited ({status}) before its interpreter started"),
            });
        }
        if located.is_none() {
            match locate(pid, choice) {
                Ok(found) => located = Some(found),
                Err(e @ (Error::Unsupported { .. } | Error::Permission { .. })) => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        if let Some(found) = &located {
            match found.connect() {
                Ok(target) => return Ok(target),
                Err(e @ Error::Permission { .. }) => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        thread::sleep(LAUNCH_POLL);
    }
    Err(last_error.unwrap_or(Error::NotPython {
        pid,
        why: "its interpreter did not start".into(),
    }))
}

/// What to say about a target once its first sample is taken.
struct Announcement {
    pid: u32,
    path: PathBuf,
    python: String,
    layout: String,
}

/// Reports progress until every sampler is done: each target is announced once its first sample has
/// been taken (so "recording" means sampling has begun); in launch mode also reaps the child when it
/// exits and returns its status.
fn watch(
    mut child: Option<&mut Child>,
    lives: &[Arc<LiveCounters>],
    announcements: &[Announcement],
    rate_hz: f64,
    started: u64,
    progress: &mut dyn FnMut(Update<'_>),
) -> Option<i32> {
    let mut status = None;
    let mut announced = vec![false; lives.len()];
    loop {
        if let Some(c) = child.as_deref_mut()
            && status.is_none()
            && let Ok(Some(exit)) = c.try_wait()
        {
            status = Some(exit_code(&exit));
        }
        for ((live, a), done) in lives.iter().zip(announcements).zip(announced.iter_mut()) {
            if !*done && live.samples.load(Ordering::Relaxed) > 0 {
                *done = true;
                progress(Update::Started {
                    pid: a.pid,
                    path: &a.path,
                    python: a.python.clone(),
                    layout: a.layout.clone(),
                    rate_hz,
                });
            }
        }
        let all_done = lives.iter().all(|l| l.done.load(Ordering::Acquire));
        progress(Update::Progress(&Progress {
            elapsed: Duration::from_nanos(monotonic_ns() - started),
            samples: lives
                .iter()
                .map(|l| l.samples.load(Ordering::Relaxed))
                .sum(),
            late: lives.iter().map(|l| l.late.load(Ordering::Relaxed)).sum(),
            threads: lives
                .iter()
                .map(|l| l.threads.load(Ordering::Relaxed))
                .sum(),
            targets: lives.len(),
        }));
        if all_done {
            return status;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(status).unwrap_or(0))
}

#[allow(clippy::too_many_arguments)]
fn record_one(
    target: &Target,
    rank: u32,
    mut writer: ChromeWriter,
    config: &SamplerConfig,
    stop: &AtomicBool,
    live: &LiveCounters,
    opts: &RecordOptions,
    offset_ns: i64,
) -> Result<TargetReport> {
    let (tx, rx) = mpsc::channel::<Record>();
    let writing = thread::scope(|scope| {
        let writer_thread = scope.spawn(move || -> Result<(ChromeWriter, Totals)> {
            let mut totals = Totals::default();
            for record in rx {
                match record {
                    Record::Interval(interval) => {
                        totals.add(&interval);
                        writer.write_interval(&interval)?;
                    }
                    Record::Waiters { t_ns, count } => writer.write_waiters(t_ns, count)?,
                }
            }
            Ok((writer, totals))
        });
        // A writer that failed (disk full, directory gone) drops its end of the channel; sampling then
        // stops at the next tick and the error, which says where the partial data is, surfaces below.
        let writer_failed = AtomicBool::new(false);
        let should_stop = || stop.load(Ordering::Relaxed) || writer_failed.load(Ordering::Relaxed);
        let report = run_sampler(target, config, &should_stop, live, &mut |record| {
            if tx.send(record).is_err() {
                writer_failed.store(true, Ordering::Relaxed);
            }
        });
        drop(tx);
        (
            report,
            writer_thread.join().expect("the trace writer panicked"),
        )
    });
    let (report, written) = writing;
    let (writer, totals) = written?;
    let cmdline = read_cmdline(target.pid).unwrap_or_default();
    let mut threads: Vec<(u32, String)> = report
        .thread_names
        .iter()
        .map(|(tid, name)| (*tid, name.clone()))
        .collect();
    threads.sort_by_key(|(tid, _)| (*tid != target.pid, *tid));
    let process_name = format!(
        "Python {} pid {} rank {rank}{}",
        target.version,
        target.pid,
        if cmdline.is_empty() {
            String::new()
        } else {
            format!(": {cmdline}")
        }
    );
    let other = metadata(target, rank, &report, opts, offset_ns, &cmdline);
    let path = writer.finish(&process_name, &threads, other, opts.force)?;
    Ok(TargetReport {
        pid: target.pid,
        rank,
        path,
        python: target.version.to_string(),
        layout_source: target.layout_source.to_string(),
        sampler: report,
        totals,
    })
}

fn metadata(
    target: &Target,
    rank: u32,
    report: &SamplerReport,
    opts: &RecordOptions,
    offset_ns: i64,
    cmdline: &str,
) -> Map<String, Value> {
    let clock = match opts.clock {
        TraceClock::Wall => "CLOCK_REALTIME",
        TraceClock::Monotonic => "CLOCK_MONOTONIC",
    };
    let value = json!({
        "producer": format!("gilsample {}", env!("CARGO_PKG_VERSION")),
        "clock": clock,
        "ts_unit": "us",
        "sampled_on": "CLOCK_MONOTONIC",
        "monotonic_to_trace_offset_ns": offset_ns,
        "trace_to_monotonic_offset_ns": -offset_ns,
        "pid": target.pid,
        "namespace_pid": read_namespace_pid(target.pid),
        "rank": rank,
        "command_line": cmdline,
        "python_version": target.version.to_string(),
        "python_flavour": target.flavour.to_string(),
        "python_binary": target.binary.mapped_path.display().to_string(),
        "arch": target.binary.arch,
        "layout_source": target.layout_source.to_string(),
        "rate_requested_hz": opts.rate_hz,
        "rate_achieved_hz": (report.achieved_rate_hz() * 10.0).round() / 10.0,
        "samples": report.samples,
        "late_samples": report.late_samples,
        "faulted_samples": report.faulted_samples,
        "thread_samples": report.thread_samples,
        "running_classified_take": report.running_still_waiting,
        "running_classified_released": report.running_released,
        "ambiguous_stretches_in_gil_call": report.stretches_in_gil_call,
        "ambiguous_stretches_released": report.stretches_released,
        "handoffs_seen": report.handoffs_seen,
        "handoffs_counted": report.handoffs_counted,
        "recording_start_monotonic_ns": report.start_ns,
        "recording_end_monotonic_ns": report.end_ns,
        "end_reason": format!("{:?}", report.end),
        "sampler_scheduling": report.scheduling.to_string(),
    });
    match value {
        Value::Object(map) => map,
        _ => unreachable!("json! of an object literal is an object"),
    }
}
