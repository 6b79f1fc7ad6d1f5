//! One target's recording: its sampler thread and its writer thread joined by a channel (file I/O
//! never delays a sample), and the finished trace with its metadata.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::infer::stats::Totals;
use crate::process::tasks::{read_cmdline, read_namespace_pid};
use crate::python::attach::Target;
use crate::record::{RecordOptions, TargetReport};
use crate::report::analyze::analyze;
use crate::sample::clock::monotonic_to_wall_offset_ns;
use crate::sample::sampler::{LiveCounters, Record, SamplerConfig, SamplerReport, run_sampler};
use crate::trace::chrome::{ChromeWriter, TraceClock};

/// The name of the machine gilsample runs on (its UTS namespace's: a pod's or container's own name
/// where it has one), which tells the nodes of a multi-node job apart.
pub fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The largest trace whose answer is computed when its recording ends (1 GiB: about 512 MiB of
/// memory for that moment).
const MAX_TRACE_ANALYSED_AT_END: u64 = 1 << 30;

#[allow(clippy::too_many_arguments)]
pub(super) fn record_one(
    target: &Target,
    rank: u32,
    mut writer: ChromeWriter,
    config: &SamplerConfig,
    stop: &AtomicBool,
    live: &LiveCounters,
    opts: &RecordOptions,
    offset_ns: i64,
) -> Result<TargetReport> {
    // Read before sampling: a target that exits first (a launched command) has none at the end.
    let cmdline = read_cmdline(target.pid).unwrap_or_default();
    let handoff_arrows = opts.handoff_arrows;
    let (tx, rx) = mpsc::channel::<Vec<Record>>();
    let writing = thread::scope(|scope| {
        let writer_thread = scope.spawn(move || -> Result<(ChromeWriter, Totals)> {
            let mut totals = Totals::default();
            for record in rx.into_iter().flatten() {
                match record {
                    Record::Interval(interval) => {
                        totals.add(&interval);
                        writer.write_interval(&interval)?;
                    }
                    Record::Waiters { t_ns, count } => writer.write_waiters(t_ns, count)?,
                    Record::HeldWhileBlocked(stretch) => {
                        writer.write_held_while_blocked(&stretch)?
                    }
                    Record::Handoff(handoff) if handoff_arrows => writer.write_handoff(&handoff)?,
                    Record::Handoff(_) => {}
                    Record::Stack {
                        tid,
                        t_ns,
                        state,
                        frames,
                        samples,
                    } => writer.note_stack(tid, t_ns, state, frames, samples),
                }
            }
            Ok((writer, totals))
        });
        // A writer that failed (disk full, directory gone) drops its end of the channel; sampling then
        // stops within a batch and the error, which says where the partial data is, surfaces below.
        let writer_failed = AtomicBool::new(false);
        let should_stop = || stop.load(Ordering::Relaxed) || writer_failed.load(Ordering::Relaxed);
        let mut batch = Batch::new(tx, &writer_failed);
        let report = run_sampler(target, config, &should_stop, live, &mut |record| {
            batch.push(record)
        });
        batch.flush();
        drop(batch);
        (
            report,
            writer_thread.join().expect("the trace writer panicked"),
        )
    });
    let (report, written) = writing;
    let (writer, totals) = written?;
    let mut threads: Vec<(u32, String)> = report
        .thread_names
        .iter()
        .map(|(tid, name)| (*tid, name.clone()))
        .collect();
    threads.sort_by_key(|(tid, _)| (*tid != target.pid, *tid));
    let host = host_name();
    let process_name = format!(
        "Python {} pid {} rank {rank}{}{}",
        target.version,
        target.pid,
        host.as_ref()
            .map(|h| format!(" host {h}"))
            .unwrap_or_default(),
        if cmdline.is_empty() {
            String::new()
        } else {
            format!(": {cmdline}")
        }
    );
    let mut other = metadata(target, rank, &report, opts, offset_ns, &cmdline);
    other.insert("host".into(), json!(host));
    // The answer, from the complete file as `report` reads it, goes into the file's own metadata.
    let mut answer = None;
    let path = writer.finish(&process_name, &threads, other, opts.force, &mut |partial| {
        // Reading the trace back holds its slices in memory (about half the file's size): a
        // trace too large for that is left for `gilsample report` to answer, and says so.
        let size = std::fs::metadata(partial).map(|m| m.len()).unwrap_or(0);
        if size > MAX_TRACE_ANALYSED_AT_END {
            return Some((
                "statistics".to_string(),
                json!(format!(
                    "not computed: the trace has {size} bytes, over {MAX_TRACE_ANALYSED_AT_END}; \
                     run gilsample report on it"
                )),
            ));
        }
        let processes = crate::report::load::load(partial).ok()?;
        let found = processes
            .iter()
            .find(|p| p.pid == target.pid)
            .map(analyze)?;
        let value = serde_json::to_value(&found).ok()?;
        answer = Some(found);
        Some(("statistics".to_string(), value))
    })?;
    if let Some(answer) = answer.as_mut() {
        answer.file = path.display().to_string();
    }
    Ok(TargetReport {
        pid: target.pid,
        rank,
        path,
        python: target.version.to_string(),
        layout_source: target.layout_source.to_string(),
        sampler: report,
        totals,
        answer,
    })
}

/// The sampler's records on their way to the writer thread, sent in batches: one send per record woke
/// the writer on nearly every tick, and those wake-ups were a tenth of the sampler's CPU at ~45k GIL
/// releases/s (scripts/bench_overhead.py; README "Tuning the sampler's own cost").
struct Batch<'a> {
    tx: mpsc::Sender<Vec<Record>>,
    records: Vec<Record>,
    first_ns: u64,
    writer_failed: &'a AtomicBool,
}

impl<'a> Batch<'a> {
    /// At most this many records, and this old, wait for the writer; the age bounds how far the file
    /// lags behind the recording.
    const MAX_RECORDS: usize = 4096;
    const MAX_AGE_NS: u64 = 20_000_000;

    fn new(tx: mpsc::Sender<Vec<Record>>, writer_failed: &'a AtomicBool) -> Batch<'a> {
        Batch {
            tx,
            records: Vec::with_capacity(Self::MAX_RECORDS),
            first_ns: 0,
            writer_failed,
        }
    }

    fn push(&mut self, record: Record) {
        // The records' own sample times, not a clock read per record (records of different threads
        // come slightly out of order; the age only needs to be roughly right).
        let at = record.time_ns();
        if self.records.is_empty() {
            self.first_ns = at;
        }
        self.records.push(record);
        if self.records.len() >= Self::MAX_RECORDS
            || at.saturating_sub(self.first_ns) >= Self::MAX_AGE_NS
        {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.records.is_empty() {
            return;
        }
        let full = std::mem::replace(&mut self.records, Vec::with_capacity(Self::MAX_RECORDS));
        if self.tx.send(full).is_err() {
            self.writer_failed.store(true, Ordering::Relaxed);
        }
    }
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
        "monotonic_to_wall_offset_ns": monotonic_to_wall_offset_ns(),
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
        "stalled_reads": report.stalled_reads,
        "longest_stall_us": report.longest_stall_ns / 1000,
        "faulted_samples": report.faulted_samples,
        "thread_samples": report.thread_samples,
        "running_classified_take": report.running_still_waiting,
        "running_classified_released": report.running_released,
        "running_classified_by_waiter_counts": report.running_counted,
        "running_classified_by_gil_mutex_owner": report.running_by_gil_mutex,
        "gil_waiter_counts": if opts.waiter_counts {
            crate::info::describe_waiter_counts(target)
        } else {
            "not counted: --no-waiter-counts".to_string()
        },
        "ambiguous_stretches_in_gil_call": report.stretches_in_gil_call,
        "ambiguous_stretches_released": report.stretches_released,
        "ambiguous_stretches_decided_by_handoffs": report.stretches_by_handoffs,
        "ambiguous_stretches_in_take_after_two_wakeups": report.stretches_woken_twice,
        "ambiguous_stretches_in_take_after_a_switch_request": report.stretches_back_after_switch_request,
        "ambiguous_stretches_after_a_hold_between_samples": report.stretches_after_unseen_hold,
        "handoffs_seen": report.handoffs_seen,
        "handoffs_counted": report.handoffs_counted,
        "kernel_reads_skipped_idle": report.kernel_reads_skipped,
        "kernel_reads_proven_unchanged": report.kernel_reads_unchanged,
        "thread_name_reads": report.name_reads.reads,
        "thread_names_read": report.name_reads.names,
        "thread_name_reads_torn": report.name_reads.torn,
        "stacks": if opts.stacks { report.stacks.unavailable.clone().unwrap_or_else(|| "read".into()) } else { "not read: --no-stacks".into() },
        "stacks_read": report.stacks.read.stacks,
        "stack_frames_read": report.stacks.read.frames,
        "stack_reads_torn": report.stacks.read.torn,
        "stack_innermost_checks": report.stacks.innermost_checks,
        "stacks_reused_same_innermost_frame": report.stacks.reused,
        "code_objects_read": report.stacks.read.code_objects_read,
        "code_objects_replaced_at_a_cached_address": report.stacks.read.code_objects_replaced,
        "interpreter_gil_flags": match report.gil_flags {
            Some(f) => json!({
                "read_where_rules_infer": f.read,
                "decided_take_gil": f.decided_take,
                "changed_the_rules_answer": f.changed,
                "agreed_with_direct_evidence": f.agreed_with_direct,
                "disagreed_with_direct_evidence": f.disagreed_with_direct,
            }),
            None => Value::Null,
        },
        "recording_start_monotonic_ns": report.start_ns,
        "recording_end_monotonic_ns": report.end_ns,
        "end_reason": format!("{:?}", report.end),
        "sampler_scheduling": report.scheduling.to_string(),
        "sampler_cpus": opts.cpus,
        "sampler_cpu_seconds": report.cpu_ns as f64 / 1e9,
        "sampler_moved_off_holder_cpu": report.cpu_moves,
    });
    let Value::Object(map) = value else {
        unreachable!("json! of an object literal is an object")
    };
    map
}
