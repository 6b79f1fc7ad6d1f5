//! The targets' recordings: a sampler thread for one or several targets (sampler/shared_thread.rs),
//! a writer thread per target joined to it by a channel (file I/O never delays a sample), and each
//! finished trace with its metadata.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::infer::findings::Finding;
use crate::infer::stats::Totals;
use crate::python::target::Target;
use crate::record::metadata::trace_metadata;
use crate::record::named_thread::spawn_named;
use crate::record::recorded_process::RecordedProcess;
use crate::record::save::{Saving, samples_path, save_samples_to};
use crate::record::{RecordOptions, TargetReport};
use crate::report::analyze::{ProcessAnswer, analyze};
use crate::report::stopped;
use crate::sampler::config::{LiveCounters, SampleLog, SamplerConfig};
use crate::sampler::report::SamplerReport;
use crate::sampler::shared_thread::{Lane, LaneOutput, drive};
use crate::trace::chrome::ChromeWriter;

/// The largest trace whose answer is computed when its recording ends (1 GiB: about 512 MiB of
/// memory for that moment).
const MAX_TRACE_ANALYSED_AT_END: u64 = 1 << 30;

/// A target as the session hands it to a sampler thread: attached, its trace created, and where the
/// outcome of its recording is to be sent.
pub(super) struct Member {
    pub(super) target: Target,
    pub(super) rank: Option<u32>,
    pub(super) writer: ChromeWriter,
    pub(super) live: Arc<LiveCounters>,
    pub(super) outcome: mpsc::Sender<Result<TargetReport>>,
}

/// What the session's sampler threads share.
pub(super) struct Shared<'a> {
    pub(super) config: &'a SamplerConfig,
    pub(super) stop: &'a AtomicBool,
    pub(super) opts: &'a RecordOptions,
    pub(super) offset_ns: i64,
    /// The session records several targets (or may): each saved stream gets its pid in its name.
    pub(super) several: bool,
}

/// Records `members` on this thread (and on the threads it hands some to when it cannot keep their
/// rate: sampler/shared_thread.rs); each member's outcome goes to its sender as its trace is
/// finished.
pub(super) fn record_members(members: Vec<Member>, shared: &Shared<'_>) {
    let mut targets = Vec::with_capacity(members.len());
    let mut outputs = Vec::with_capacity(members.len());
    for member in members {
        let Member {
            target,
            rank,
            writer,
            live,
            outcome,
        } = member;
        match TraceOutput::start(&target, rank, writer, shared, outcome) {
            Some(output) => {
                targets.push((target, live));
                outputs.push(output);
            }
            None => live.set_done(),
        }
    }
    let lanes = targets
        .iter()
        .zip(outputs)
        .map(|((target, live), output)| Lane {
            target,
            live,
            output: Box::new(output),
        })
        .collect();
    thread::scope(|scope| drive(scope, shared.config, shared.stop, lanes));
}

/// One target's trace and saved stream while it is sampled (`LaneOutput`).
struct TraceOutput {
    process: RecordedProcess,
    force: bool,
    /// The findings' way to the writer thread; dropped (and so flushed) when sampling ends.
    push: Option<Box<dyn FnMut(Finding) + Send>>,
    writer_failed: Arc<AtomicBool>,
    writing: TraceWriting,
    saver: Option<Saving>,
    outcome: mpsc::Sender<Result<TargetReport>>,
}

impl TraceOutput {
    /// Starts the trace's writer thread and the saved stream; `None` when the stream cannot be
    /// created (the error went to `outcome`).
    fn start(
        target: &Target,
        rank: Option<u32>,
        writer: ChromeWriter,
        shared: &Shared<'_>,
        outcome: mpsc::Sender<Result<TargetReport>>,
    ) -> Option<TraceOutput> {
        let opts = shared.opts;
        let process = RecordedProcess::of(target, rank, opts, shared.offset_ns);
        let saver = match &opts.save_samples {
            Some(path) => {
                let path = samples_path(path, target.pid, shared.several);
                match save_samples_to(&path, opts.force, &process, target, shared.config) {
                    Ok(saver) => Some(saver),
                    Err(e) => {
                        let _ = outcome.send(Err(e));
                        return None;
                    }
                }
            }
            None => None,
        };
        let (writing, mut batch) = TraceWriting::start(&process, writer, Pace::Live);
        Some(TraceOutput {
            writer_failed: batch.writer_failed.clone(),
            push: Some(Box::new(move |record| batch.push(record))),
            process,
            force: opts.force,
            writing,
            saver,
            outcome,
        })
    }
}

impl LaneOutput for TraceOutput {
    fn parts(&mut self) -> (&mut dyn FnMut(Finding), Option<&mut dyn SampleLog>) {
        let push = self.push.as_mut().expect("taken only at the end");
        let log = self.saver.as_mut().map(|s| s as &mut dyn SampleLog);
        (push, log)
    }

    /// The trace could not be written: sampling on would fill memory for nothing. Saved samples
    /// that could not be written are not a reason to stop: the trace goes on whole, and its
    /// report says the stream is cut short (`TargetReport::save_error`).
    fn failed(&self) -> bool {
        self.writer_failed.load(Ordering::Relaxed)
    }

    /// The saved stream is finished first (the trace's metadata gives its size), then the trace,
    /// on a thread of its own: reading a large trace back for its answer takes seconds, which the
    /// other targets of this sampler thread must not wait for.
    fn finish(mut self: Box<Self>, mut report: SamplerReport) {
        let save_failed = match self.saver.take().map(|saver| saver.finish(&report)) {
            Some(Ok(bytes)) => {
                report.saved_bytes = bytes;
                None
            }
            Some(Err(e)) => Some(e),
            None => None,
        };
        // The last batch goes to the writer, whose thread then ends.
        self.push = None;
        let TraceOutput {
            process,
            force,
            writing,
            outcome,
            ..
        } = *self;
        let finishing = thread::Builder::new().name(format!("finish-{}", process.pid));
        let spawned = finishing.spawn(move || {
            let finished = writing.finish(&process, force, report);
            let _ = outcome.send(finished.map(|report| TargetReport {
                save_error: save_failed,
                ..report
            }));
        });
        spawned.expect("failed to spawn a thread to finish a trace");
    }
}

/// Who sets the pace of the findings: a live sampler, or a replay that goes as fast as the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// A live sampler: findings come as the target runs.
    Live,
    /// A replay: findings come as fast as the writer takes them.
    AsFastAsTheWriter,
}

/// Batches a replay may have ahead of its writer: a few MB of findings.
const BATCHES_IN_FLIGHT: usize = 8;

enum Sender {
    Unbounded(mpsc::Sender<Vec<Finding>>),
    Bounded(mpsc::SyncSender<Vec<Finding>>),
}

/// Writes one process's trace from what `produce` sends to its sink (a replay of saved samples) and
/// returns what it measured. `produce` gets a flag that is set when the writer failed, so that it
/// stops.
pub fn write_trace(
    process: &RecordedProcess,
    writer: ChromeWriter,
    (force, pace): (bool, Pace),
    produce: impl FnOnce(&mut dyn FnMut(Finding), &AtomicBool) -> SamplerReport,
) -> Result<TargetReport> {
    let (writing, mut batch) = TraceWriting::start(process, writer, pace);
    let writer_failed = batch.writer_failed.clone();
    let report = produce(&mut |record| batch.push(record), &writer_failed);
    drop(batch);
    writing.finish(process, force, report)
}

/// A trace being written: its writer thread, fed by a `Batch`, until `finish`.
pub struct TraceWriting {
    writer_thread: thread::JoinHandle<(Result<ChromeWriter>, Totals)>,
    partial: PathBuf,
    final_path: PathBuf,
}

impl TraceWriting {
    /// Starts the writer thread; findings pushed to the batch reach it.
    fn start(
        process: &RecordedProcess,
        mut writer: ChromeWriter,
        pace: Pace,
    ) -> (TraceWriting, Batch) {
        let handoff_arrows = process.handoff_arrows;
        let partial = writer.partial_path().to_path_buf();
        let final_path = writer.final_path().to_path_buf();
        if pace == Pace::Live {
            writer.read_sources_of_target();
        }
        writer.note_sampling_rate(process.rate_requested_hz);
        // A live sampler must never wait for the writer (its ticks would slip), and it cannot outrun
        // it for long (it produces at the sampling rate); a replay produces as fast as it reads, so
        // it waits for the writer instead of piling batches up in memory.
        let (tx, rx) = match pace {
            Pace::Live => {
                let (tx, rx) = mpsc::channel::<Vec<Finding>>();
                (Sender::Unbounded(tx), rx)
            }
            Pace::AsFastAsTheWriter => {
                let (tx, rx) = mpsc::sync_channel::<Vec<Finding>>(BATCHES_IN_FLIGHT);
                (Sender::Bounded(tx), rx)
            }
        };
        let process_name = process_name(process);
        // Named before it runs, so that `top -H` or a profile tells it from the sampler thread that
        // starts it (record/named_thread.rs).
        let writer_name = format!("write-{}", process.pid);
        let writer_thread = spawn_named(writer_name, move || -> (Result<ChromeWriter>, Totals) {
            let mut totals = Totals::default();
            // First, so that a file cut short still says whose it is.
            if let Err(error) = writer.write_process_name(&process_name) {
                return (Err(error), totals);
            }
            let mut write =
                |record| write_finding(&mut writer, &mut totals, record, handoff_arrows);
            // The first failure ends the thread, which drops the channel's end: the batch's next
            // send fails and sets the flag that stops the sampling; the error, which says where the
            // partial data is, surfaces in `finish`.
            let failed = rx.into_iter().flatten().find_map(|r| write(r).err());
            match failed {
                Some(error) => (Err(error), totals),
                None => (Ok(writer), totals),
            }
        });
        let writer_thread = writer_thread.expect("failed to spawn the trace writer thread");
        let writing = TraceWriting {
            writer_thread,
            partial,
            final_path,
        };
        (writing, Batch::new(tx))
    }

    /// Waits for the writer (its batch must be dropped first), then finishes the file: metadata,
    /// the answer, the final name.
    fn finish(
        self,
        process: &RecordedProcess,
        force: bool,
        report: SamplerReport,
    ) -> Result<TargetReport> {
        let TraceWriting {
            writer_thread,
            partial,
            final_path,
        } = self;
        let (written, totals) = writer_thread.join().expect("the trace writer panicked");
        let pid = process.pid;
        let mut writer = match written {
            Ok(writer) => writer,
            Err(error) => {
                return Ok(unfinished(process, report, totals, partial, None, error));
            }
        };
        if let Err(error) = report
            .stopped_spans
            .iter()
            .try_for_each(|&(from, to)| writer.write_stopped(from, to))
        {
            return Ok(unfinished(process, report, totals, partial, None, error));
        }
        let mut threads: Vec<(u32, String)> = report
            .thread_names
            .iter()
            .map(|(tid, name)| (*tid, name.clone()))
            .collect();
        threads.sort_by_key(|(tid, _)| (*tid != pid, *tid));
        let process_name = process_name(process);
        let other = trace_metadata(process, &report);
        // The answer, from the complete file as `report` reads it, goes into the file's own metadata.
        let mut answer = None;
        let finished = writer.finish(&process_name, &threads, other, force, &mut |partial| {
            let (value, found) = answer_at_end(partial, pid, &final_path)?;
            answer = found;
            Some(("statistics".to_string(), value))
        });
        let path = match finished {
            Ok(path) => path,
            // The end could not be written, or the final name was taken meanwhile: the partial file
            // holds the events (and, in the second case, the whole trace).
            Err(error) => {
                return Ok(unfinished(process, report, totals, partial, answer, error));
            }
        };
        Ok(TargetReport {
            pid,
            rank: process.rank,
            path,
            python: process.python_version.clone(),
            layout_source: process.layout_source.clone(),
            sampler: report,
            totals,
            answer,
            write_error: None,
            save_error: None,
        })
    }
}

/// The trace's answer for its metadata's `statistics`, read back from the complete file at
/// `partial` (named by `final_path`, where it is about to be), and the answer itself for the
/// summary. Reading it back holds its slices in memory (about half the file's size): a trace too
/// large for that is left for `gilsample report` to answer, and says so. `None` when it cannot be
/// read back.
fn answer_at_end(
    partial: &Path,
    pid: u32,
    final_path: &Path,
) -> Option<(Value, Option<ProcessAnswer>)> {
    let size = std::fs::metadata(partial).map(|m| m.len()).unwrap_or(0);
    if size > MAX_TRACE_ANALYSED_AT_END {
        let why = format!(
            "not computed: the trace has {size} bytes, over {MAX_TRACE_ANALYSED_AT_END}; run \
             gilsample report on it"
        );
        return Some((json!(why), None));
    }
    let processes = crate::report::load::load_own_trace(partial).ok()?;
    let mut found = processes.iter().find(|p| p.pid == pid).map(analyze)?;
    // The file's name once it is in place, not the temporary one it is read from.
    found.file = final_path.display().to_string();
    let value = serde_json::to_value(&found).ok()?;
    Some((value, Some(found)))
}

/// One finding into the trace; intervals also into the per-thread totals.
fn write_finding(
    writer: &mut ChromeWriter,
    totals: &mut Totals,
    record: Finding,
    handoff_arrows: bool,
) -> Result<()> {
    match record {
        Finding::Interval(interval) => {
            totals.add(&interval);
            writer.write_interval(&interval)
        }
        Finding::WaitingThreads { t_ns, count } => writer.write_waiters(t_ns, count),
        Finding::Rate { t_ns, hz } => writer.write_rate(t_ns, hz),
        Finding::Gap { from_ns, to_ns } => writer.write_gap(from_ns, to_ns),
        Finding::HeldWhileBlocked(stretch) => writer.write_held_while_blocked(&stretch),
        Finding::Handoff(handoff) if handoff_arrows => writer.write_handoff(&handoff),
        Finding::Handoff(_) => Ok(()),
        Finding::Stack(reading) => {
            writer.note_stack(reading);
            Ok(())
        }
        Finding::Live(snapshot) => {
            writer.tap_live(&snapshot);
            Ok(())
        }
        Finding::HoldFrames { tid, t_ns, watch } => {
            writer.note_hold_frames(tid, t_ns, *watch);
            Ok(())
        }
        Finding::SwitchInterval { us, .. } => {
            writer.note_switch_interval(us);
            Ok(())
        }
        Finding::ThreadNames { names, .. } => writer.write_thread_names(&names),
    }
}

/// The trace's name for the process: its Python, pid, rank, host and command line.
fn process_name(process: &RecordedProcess) -> String {
    let cmdline = &process.command_line;
    format!(
        "Python {} pid {}{}{}{}",
        process.python_version,
        process.pid,
        process
            .rank
            .map(|r| format!(" rank {r}"))
            .unwrap_or_default(),
        process
            .host
            .as_ref()
            .map(|h| format!(" host {h}"))
            .unwrap_or_default(),
        if cmdline.is_empty() {
            String::new()
        } else {
            format!(": {cmdline}")
        }
    )
}

/// The report of a trace that could not be finished: what was written stays in `partial`, and the
/// answer is for those events (read up to where the file was cut off), with the thread names the
/// sampler knew, unless it was already computed from the complete file.
fn unfinished(
    process: &RecordedProcess,
    sampler: SamplerReport,
    totals: Totals,
    partial: PathBuf,
    answer: Option<ProcessAnswer>,
    error: Error,
) -> TargetReport {
    let answer = answer.or_else(|| {
        let (processes, _cut) = crate::report::load::load_to_cut(&partial).ok()?;
        let mut trace = processes.into_iter().find(|p| p.pid == process.pid)?;
        for (tid, name) in &sampler.thread_names {
            trace.names.entry(*tid).or_insert_with(|| name.clone());
        }
        trace.facts.rank = process.rank;
        trace.facts.host = process.host.clone();
        // Its stops, as the finished file's otherData would have given them.
        let to_trace = i128::from(process.monotonic_to_trace_offset_ns);
        let spans = sampler.stopped_spans.iter();
        let monotonic = spans.map(|&(from, to)| (i128::from(from), i128::from(to)));
        trace.facts.stops_ns = stopped::on_trace_clock(monotonic, to_trace);
        let (stops, window) = (&trace.facts.stops_ns, trace.facts.window_ns);
        stopped::keep_time_it_ran(&mut trace.slices, stops, window);
        trace.slices.sort_by_key(|s| (s.start_ns, s.tid, s.kind));
        let mut answer = analyze(&trace);
        answer.file = partial.display().to_string();
        Some(answer)
    });
    TargetReport {
        pid: process.pid,
        rank: process.rank,
        path: partial,
        python: process.python_version.clone(),
        layout_source: process.layout_source.clone(),
        sampler,
        totals,
        answer,
        write_error: Some(error),
        save_error: None,
    }
}

/// The sampler's findings on their way to the writer thread, sent in batches: one send per finding woke
/// the writer on nearly every tick, and those wake-ups were a tenth of the sampler's CPU at ~45k GIL
/// releases/s (scripts/bench_overhead.py; docs/cost.md, "What keeps the sampler cheap").
struct Batch {
    tx: Sender,
    findings: Vec<Finding>,
    first_ns: u64,
    /// Set when a send finds the writer gone (it failed): sampling stops.
    writer_failed: Arc<AtomicBool>,
}

impl Batch {
    /// At most this many findings, and this old, wait for the writer; the age bounds how far the file
    /// lags behind the recording.
    const MAX_FINDINGS: usize = 4096;
    const MAX_AGE_NS: u64 = 20_000_000;

    fn new(tx: Sender) -> Batch {
        Batch {
            tx,
            findings: Vec::with_capacity(Self::MAX_FINDINGS),
            first_ns: 0,
            writer_failed: Arc::new(AtomicBool::new(false)),
        }
    }

    fn push(&mut self, finding: Finding) {
        // The findings' own sample times, not a clock read per finding (those of different threads
        // come slightly out of order; the age only needs to be roughly right).
        let at = finding.time_ns();
        if self.findings.is_empty() {
            self.first_ns = at;
        }
        // A live view's snapshot is sent at once: it is what that view is waiting for. So are new
        // threads' names, which the writer puts on the file at once.
        let at_once = matches!(finding, Finding::Live(_) | Finding::ThreadNames { .. });
        self.findings.push(finding);
        if at_once
            || self.findings.len() >= Self::MAX_FINDINGS
            || at.saturating_sub(self.first_ns) >= Self::MAX_AGE_NS
        {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.findings.is_empty() {
            return;
        }
        let full = std::mem::replace(&mut self.findings, Vec::with_capacity(Self::MAX_FINDINGS));
        let sent = match &self.tx {
            Sender::Unbounded(tx) => tx.send(full).is_ok(),
            Sender::Bounded(tx) => tx.send(full).is_ok(),
        };
        if !sent {
            self.writer_failed.store(true, Ordering::Relaxed);
        }
    }
}

/// The last findings go to the writer when sampling ends; dropping the sender then ends its thread.
impl Drop for Batch {
    fn drop(&mut self) {
        self.flush();
    }
}
