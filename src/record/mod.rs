//! One recording session: attach to the targets (given, launched, or discovered while it runs),
//! sample them on sampler threads with a writer thread per target, stop on duration, signal or
//! target exit, and finish each trace file (and the merged one, when asked).
//!
//! The targets attached at the start share sampler threads (`targets_per_thread` a thread:
//! sampler/shared_thread.rs); a target found later gets one of its own (`target`). The session's own
//! thread discovers new targets every `ROUND`, reports progress, and reaps a launched
//! command.

mod checks;
mod discovery;
mod first_targets;
mod metadata;
mod named_thread;
mod outcome;
pub mod recorded_process;
mod save;
pub mod target;
pub mod waiting;
pub mod watch;

use checks::check_outputs;
pub use outcome::{Progress, RecordReport, TargetReport, Update};
pub use recorded_process::host_name;
use target::{Member, Shared, record_members};
pub use watch::Watch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use crate::discover::{DeviceKind, descendants};
use crate::error::{Error, Result};
use crate::launch::{Launched, Stopped};
use crate::merge::{MergeOptions, merge};
use crate::process::tasks::read_rank;
use crate::python::attach::LayoutChoice;
use crate::python::target::Target;
use crate::sampler::affinity::pin_own_threads;
use crate::sampler::clock::{monotonic_ns, monotonic_to_wall_offset_ns};
use crate::sampler::config::{LiveCounters, SamplerConfig, SessionWake};
use crate::sampler::priority::Priority;
use crate::sampler::shared_thread::targets_per_thread;
use crate::trace::chrome::{ChromeWriter, TraceClock};
use crate::trace::output::OutputSpec;

/// What to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    /// These processes (pids in gilsample's PID namespace).
    Pids(Vec<u32>),
    /// Launch this command and record it from its start to its exit.
    Launch(Vec<String>),
    /// Every Python process with an accelerator of this kind open, also ones that start later.
    Devices(DeviceKind),
}

/// Everything `gilsample record` was asked to do: the targets, the rate, the outputs and how to
/// sample.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Which processes to record.
    pub targets: Targets,
    /// Also record every Python descendant of the given or launched processes, as they appear.
    pub subprocesses: bool,
    /// Also write one trace with every target as its own process track.
    pub merge: bool,
    /// Samples per second asked for (`--rate`).
    pub rate_hz: f64,
    /// How long to record (`--duration`); `None`: until stopped or every target has exited.
    pub duration: Option<Duration>,
    /// Where the traces go (one per target, and the merged one).
    pub output: OutputSpec,
    /// Overwrite output files that exist already (`--force`).
    pub force: bool,
    /// Where each target's struct layout comes from (`--layout-source`).
    pub layout: LayoutChoice,
    /// The clock the trace's timestamps are on (wall or monotonic).
    pub clock: TraceClock,
    /// The sampler threads' scheduling (`--priority`).
    pub priority: Priority,
    /// CPUs the sampler threads may run on (`--cpus`); `None`: wherever the kernel puts them.
    pub cpus: Option<Vec<usize>>,
    /// Read idle threads' kernel state less often (off only to measure what it saves).
    pub idle_backoff: bool,
    /// Tick less often while the target is quiet (infer/quiet.rs; off with `--fixed-rate`).
    pub adaptive_rate: bool,
    /// Read glibc's GIL waiter counts where the target has them (off only to measure them).
    pub waiter_counts: bool,
    /// Draw each hand-off of the GIL as an arrow between the two threads' tracks.
    pub handoff_arrows: bool,
    /// Read the Python stacks of waiters and holders (sampler/stack_watch.rs).
    pub stacks: bool,
    /// Move a real-time sampler off the GIL holder's CPU (sampler/dodge.rs; off only to measure it).
    pub cpu_dodge: bool,
    /// Also save every sample, for `gilsample replay` (stream/).
    pub save_samples: Option<PathBuf>,
    /// A live view of the recording (`gilsample top`): watch.rs. `None`: none.
    pub watch: Option<Watch>,
    /// When the stop flag ends the recording, also stop the launched command (SIGTERM, then
    /// SIGKILL), instead of waiting for it to exit: quitting `gilsample top` ends what it launched.
    pub stop_command_when_stopped: bool,
}

/// How often the session looks for new targets (new processes are picked up within this), and the
/// longest it waits between looks at its samplers, which wake it sooner when they have news.
const ROUND: Duration = Duration::from_millis(50);
/// How many discovery rounds a process may stay "Python, but not started yet" before it is given up.
const MAX_NOT_READY_ROUNDS: u32 = 200;

/// A target being recorded.
struct Running {
    pid: u32,
    path: PathBuf,
    python: String,
    layout: String,
    live: Arc<LiveCounters>,
    announced: bool,
    /// How it was last said to be stopped (`Update::TargetStopped`): `T`, `t`, or 0 running.
    said_stopped: u8,
    /// Where the outcome comes once the trace is finished, then the outcome.
    finished: mpsc::Receiver<Result<TargetReport>>,
    outcome: Option<Result<TargetReport>>,
}

impl Running {
    /// The outcome if the target's trace is finished (or, with `wait`, once it is).
    fn join(&mut self, wait: bool) -> Option<&Result<TargetReport>> {
        if self.outcome.is_none() {
            let received = if wait {
                self.finished.recv().map_err(|_| true)
            } else {
                self.finished
                    .try_recv()
                    .map_err(|e| e == mpsc::TryRecvError::Disconnected)
            };
            match received {
                Ok(outcome) => self.outcome = Some(outcome),
                Err(true) => panic!("a recording thread panicked"),
                Err(false) => {}
            }
        }
        self.outcome.as_ref()
    }
}

/// The state of one session.
struct Session<'a> {
    opts: &'a RecordOptions,
    stop: Arc<AtomicBool>,
    config: SamplerConfig,
    offset_ns: i64,
    running: Vec<Running>,
    /// Targets attached before the recording's clock starts, waiting to be started.
    attached: Vec<Target>,
    /// Pids that are recorded, were recorded, or were looked at and refused.
    known: HashSet<u32>,
    /// `Update::Ready` was sent.
    ready_sent: bool,
    not_ready: HashMap<u32, u32>,
    failures: Vec<(u32, Error)>,
    skipped: Vec<(u32, String)>,
    /// Roots and followed descendants judged not Python, with the program each ran when looked
    /// at: one that execs another program (`exec python3` at the end of a script, a shim) is looked
    /// at again.
    not_python: HashMap<u32, Option<PathBuf>>,
    launcher_report: Vec<(u32, String)>,
}

/// Records the targets `opts` names until the duration is up, `stop` is set or every target has
/// exited; `progress` hears of each target's start, end and failure and gets periodic snapshots.
/// Each target's trace is finished before this returns.
pub fn record(
    opts: &RecordOptions,
    stop: Arc<AtomicBool>,
    progress: &mut dyn FnMut(Update<'_>),
) -> Result<RecordReport> {
    // Every output is checked before anything is launched or attached: a command must not run for
    // nothing, nor a recording be lost at its end.
    check_outputs(opts)?;
    let mut session = Session {
        opts,
        stop: stop.clone(),
        config: SamplerConfig {
            period_ns: SamplerConfig::period_ns_at(opts.rate_hz),
            // Set once the first targets are attached: attaching (a DWARF parse) must not eat into
            // the recording.
            end_at_ns: None,
            refresh_ns: SamplerConfig::DEFAULT_REFRESH_NS,
            priority: opts.priority,
            idle_backoff: opts.idle_backoff,
            adaptive_rate: opts.adaptive_rate,
            waiter_counts: opts.waiter_counts,
            stacks: opts.stacks,
            dodge_holder: opts.cpus.is_none() && opts.cpu_dodge,
            live_every_ns: opts.watch.as_ref().map(|w| w.every.as_nanos() as u64),
        },
        offset_ns: match opts.clock {
            TraceClock::Wall => monotonic_to_wall_offset_ns(),
            TraceClock::Monotonic => 0,
        },
        running: Vec::new(),
        attached: Vec::new(),
        known: HashSet::new(),
        ready_sent: false,
        not_ready: HashMap::new(),
        failures: Vec::new(),
        skipped: Vec::new(),
        not_python: HashMap::new(),
        launcher_report: Vec::new(),
    };
    let mut launched: Option<Launched> = None;
    let result = session.run(&mut launched, progress);
    // A failure after some targets started: they stop and finish their traces, never left
    // sampling on their own or as .partial files.
    if result.is_err() {
        stop.store(true, Ordering::SeqCst);
        for mut running in std::mem::take(&mut session.running) {
            running.join(true);
        }
    }
    if result.is_err()
        && let Some(command) = launched.as_mut()
    {
        let how = command.stop();
        if how != Stopped::AlreadyExited {
            progress(Update::CommandStopped {
                pid: command.pid(),
                how,
            });
        }
    }
    // Quitting `gilsample top` (the stop flag) ends what it launched.
    if opts.stop_command_when_stopped
        && stop.load(Ordering::Relaxed)
        && let Some(command) = launched.as_mut()
    {
        command.stop();
    }
    // The command outlives the recording when a --duration or a signal ended it first: the caller
    // gives the answer first, then waits for it.
    result.map(|report| RecordReport {
        command: launched.take(),
        ..report
    })
}

impl Session<'_> {
    /// The whole recording, from finding the targets to joining their threads.
    fn run(
        &mut self,
        launched: &mut Option<Launched>,
        progress: &mut dyn FnMut(Update<'_>),
    ) -> Result<RecordReport> {
        let roots = self.find_first_targets(launched, progress)?;
        let following = self.opts.subprocesses || matches!(self.opts.targets, Targets::Devices(_));
        self.check_something_to_record(following)?;
        self.record_until_done(&roots, following, launched, progress)?;
        self.join_and_merge()
    }

    /// Starts the samplers, then follows new targets and reports progress until the session ends.
    fn record_until_done(
        &mut self,
        roots: &[u32],
        following: bool,
        launched: &mut Option<Launched>,
        progress: &mut dyn FnMut(Update<'_>),
    ) -> Result<()> {
        let opts = self.opts;
        let stop = self.stop.clone();
        // After a launched command is spawned (it keeps the CPUs it was given), before any sampler.
        if let Some(cpus) = &opts.cpus {
            pin_own_threads(cpus)?;
        }
        // The recording's clock starts once the first targets are attached (attaching may parse
        // DWARF).
        let started = monotonic_ns();
        self.config.end_at_ns = opts.duration.map(|d| started + d.as_nanos() as u64);
        // The targets attached by now share sampler threads (sampler/shared_thread.rs).
        let mut attached = std::mem::take(&mut self.attached);
        let per_thread = targets_per_thread(self.config.period_ns);
        while !attached.is_empty() {
            let rest = attached.split_off(attached.len().min(per_thread));
            self.start(std::mem::replace(&mut attached, rest))?;
        }
        loop {
            let command_done = launched.as_mut().map(|c| c.try_status().is_some());
            let ending = stop.load(Ordering::Relaxed)
                || self
                    .config
                    .end_at_ns
                    .is_some_and(|end| monotonic_ns() >= end);
            let roots_gone = match &opts.targets {
                Targets::Launch(_) => command_done == Some(true),
                Targets::Pids(_) => roots
                    .iter()
                    .all(|&pid| !Path::new(&format!("/proc/{pid}")).exists()),
                Targets::Devices(_) => false,
            };
            if following && !ending {
                match &opts.targets {
                    Targets::Devices(kind) => self.discover_devices(*kind, progress)?,
                    _ => {
                        let below = descendants(roots);
                        let mut found = self.changed_program(roots);
                        found.extend(self.changed_program(&below));
                        // A root judged a launcher is looked at again for a few rounds
                        // (`look_again`): it may have been caught in the middle of exec.
                        let unjudged: Vec<u32> = roots
                            .iter()
                            .chain(&below)
                            .copied()
                            .filter(|pid| !self.known.contains(pid) && !found.contains(pid))
                            .collect();
                        found.extend(unjudged);
                        self.try_attach(found, true, progress)?;
                    }
                }
            }
            self.report_progress(started, progress);
            self.collect_finished(progress);
            let all_done = self
                .running
                .iter()
                .all(|r| r.live.done.load(Ordering::Acquire));
            // Without following, the session ends with its targets; when following, with the
            // duration or a signal, or once the launched command (or every given root) is gone and
            // nothing is running.
            if all_done && (!following || ending || roots_gone) {
                break;
            }
            // Woken early by a sampler's first sample, its target stopping or continuing, or its
            // end (`LiveCounters::wake_session`); the rest (new targets, a launched command's
            // exit, the progress shown) can wait a round.
            thread::park_timeout(ROUND);
        }
        Ok(())
    }

    /// Joins every target's threads, then writes the merged trace when asked.
    fn join_and_merge(&mut self) -> Result<RecordReport> {
        let opts = self.opts;
        let mut done = Vec::new();
        let mut failures = std::mem::take(&mut self.failures);
        for mut running in std::mem::take(&mut self.running) {
            running.join(true);
            match running.outcome.take().expect("joined above") {
                Ok(report) => done.push(report),
                Err(e) => failures.push((running.pid, e)),
            }
        }
        let merged = if opts.merge && !done.is_empty() {
            let paths: Vec<PathBuf> = done.iter().map(|t| t.path.clone()).collect();
            let merge_opts = MergeOptions {
                force: opts.force,
                offsets: Vec::new(),
            };
            Some(merge(&paths, &opts.output.merged_path(), &merge_opts)?.output)
        } else {
            None
        };
        Ok(RecordReport {
            targets: done,
            failures,
            skipped: std::mem::take(&mut self.skipped),
            launchers: std::mem::take(&mut self.launcher_report),
            merged,
            // Handed over by `record`, which owns it.
            command: None,
            samplers_pinned: opts.cpus.is_some(),
        })
    }

    /// Joins the target threads that have ended. A trace that could not be written (a full disk)
    /// is said at once and stops the session: the others write to the same place, and the answer
    /// for what was written is due now, not when the target or the command exits.
    fn collect_finished(&mut self, progress: &mut dyn FnMut(Update<'_>)) {
        for running in &mut self.running {
            if running.outcome.is_some() || !running.live.done.load(Ordering::Acquire) {
                continue;
            }
            let pid = running.pid;
            let error = match running.join(false) {
                Some(Ok(report)) => report.write_error.as_ref(),
                Some(Err(e @ Error::Output { .. })) => Some(e),
                _ => None,
            };
            if let Some(error) = error {
                progress(Update::WriteFailed { pid, error });
                self.stop.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Starts recording attached targets on a sampler thread of their own (which hands some to
    /// another where it cannot keep their rate), with a writer thread each.
    fn start(&mut self, targets: Vec<Target>) -> Result<()> {
        // One target's samples go to the path given; several targets' each to its own.
        let several = self.opts.subprocesses
            || match &self.opts.targets {
                Targets::Pids(pids) => pids.len() > 1,
                Targets::Launch(_) => false,
                Targets::Devices(_) => true,
            };
        let mut members = Vec::with_capacity(targets.len());
        for target in targets {
            let rank = read_rank(target.pid);
            // The reference tool's names: rank 0 for a process without one.
            let path = self.opts.output.path_for(target.pid, rank.unwrap_or(0));
            // Made only now, for the first target: a run refused before it leaves nothing behind.
            self.opts.output.prepare()?;
            let mut writer =
                ChromeWriter::create(&path, self.opts.force, target.pid, self.offset_ns)?;
            if let Some(watch) = &self.opts.watch {
                writer.set_tap((watch.tap_for)(target.pid, rank));
            }
            // `start` runs on the session's thread, which `follow` parks between its rounds.
            let live = Arc::new(LiveCounters {
                session: Some(SessionWake::unpark(thread::current())),
                ..LiveCounters::default()
            });
            let (outcome, finished) = mpsc::channel();
            self.running.push(Running {
                pid: target.pid,
                path,
                python: target.version.to_string(),
                layout: target.layout_source.to_string(),
                live: live.clone(),
                announced: false,
                said_stopped: 0,
                finished,
                outcome: None,
            });
            members.push(Member {
                target,
                rank,
                writer,
                live,
                outcome,
            });
        }
        let name = match members.as_slice() {
            [one] => format!("sample-{}", one.target.pid),
            [first, ..] => format!("sample-{}+{}", first.target.pid, members.len() - 1),
            [] => return Ok(()),
        };
        let (config, stop, opts, offset_ns) = (
            self.config,
            self.stop.clone(),
            self.opts.clone(),
            self.offset_ns,
        );
        thread::Builder::new()
            .name(name)
            .spawn(move || {
                let shared = Shared {
                    config: &config,
                    stop: &stop,
                    opts: &opts,
                    offset_ns,
                    several,
                };
                record_members(members, &shared);
            })
            .map_err(|e| Error::io("starting a sampler thread", e))?;
        Ok(())
    }

    fn report_progress(&mut self, started: u64, progress: &mut dyn FnMut(Update<'_>)) {
        for r in &mut self.running {
            if r.announced {
                continue;
            }
            if r.live.samples.load(Ordering::Relaxed) > 0 {
                r.announced = true;
                progress(Update::Started {
                    pid: r.pid,
                    path: &r.path,
                    python: r.python.clone(),
                    layout: r.layout.clone(),
                    rate_hz: self.opts.rate_hz,
                });
            } else if r.live.done.load(Ordering::Acquire) {
                // Ended before its first sample: nothing to wait for.
                r.announced = true;
            }
        }
        for r in self.running.iter_mut().filter(|r| r.announced) {
            let stopped = r.live.stopped.load(Ordering::Relaxed);
            if stopped != r.said_stopped {
                r.said_stopped = stopped;
                progress(match stopped {
                    0 => Update::TargetContinued { pid: r.pid },
                    letter => Update::TargetStopped {
                        pid: r.pid,
                        by_debugger: letter == b't',
                    },
                });
            }
        }
        if !self.ready_sent && self.running.iter().all(|r| r.announced) {
            self.ready_sent = true;
            progress(Update::Ready);
        }
        let lives = self.running.iter().map(|r| &r.live);
        progress(Update::Progress(&Progress {
            elapsed: Duration::from_nanos(monotonic_ns() - started),
            samples: lives
                .clone()
                .map(|l| l.samples.load(Ordering::Relaxed))
                .sum(),
            skipped_periods: lives
                .clone()
                .map(|l| l.skipped_periods.load(Ordering::Relaxed))
                .sum(),
            late: lives.clone().map(|l| l.late.load(Ordering::Relaxed)).sum(),
            threads: lives.map(|l| l.threads.load(Ordering::Relaxed)).sum(),
            targets: self.running.len(),
        }));
    }
}
