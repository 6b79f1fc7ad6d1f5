//! The metadata every trace carries (`otherData`): who recorded what, on which clocks, and what the
//! sampler measured about itself and decided, each key described in docs/ARCHITECTURE.md's table
//! (tests/live_record.rs checks that every key is there).

use serde_json::{Map, Value, json};

use crate::infer::quiet;
use crate::record::recorded_process::RecordedProcess;
use crate::sampler::config::SamplerConfig;
use crate::sampler::report::SamplerReport;

/// The trace's metadata for `process`, from the sampler's `report` of it.
pub(crate) fn trace_metadata(
    process: &RecordedProcess,
    report: &SamplerReport,
) -> Map<String, Value> {
    let counts = &report.inference;
    let value = json!({
        "producer": format!("gilsample {}", env!("CARGO_PKG_VERSION")),
        "clock": process.clock,
        "ts_unit": "us",
        "sampled_on": "CLOCK_MONOTONIC",
        "monotonic_to_trace_offset_ns": process.monotonic_to_trace_offset_ns,
        "monotonic_to_wall_offset_ns": process.monotonic_to_wall_offset_ns,
        "trace_to_monotonic_offset_ns": -process.monotonic_to_trace_offset_ns,
        "pid": process.pid,
        "namespace_pid": process.namespace_pid,
        "rank": process.rank,
        "parent_pid": process.parent_pid,
        "host": process.host,
        "command_line": process.command_line,
        "python_version": process.python_version,
        "python_flavour": process.python_flavour,
        "python_binary": process.python_binary,
        "arch": process.arch,
        "layout_source": process.layout_source,
        "rate_requested_hz": process.rate_requested_hz,
        "rate_achieved_hz": (report.achieved_rate_hz() * 10.0).round() / 10.0,
        "samples": report.samples,
        "samples_at_quiet_rate": report.quiet_samples,
        "periods_skipped_while_quiet": report.skipped_periods,
        "rate_while_quiet_hz": (report.quiet_samples > 0).then(|| {
            let period_ns = SamplerConfig::period_ns_at(process.rate_requested_hz);
            quiet::rate_hz(period_ns, quiet::skip_for(period_ns))
        }),
        "late_samples": report.late_samples,
        "late_samples_while_quiet": report.late_samples_while_quiet,
        "process_stopped": match (report.stopped_at_start, report.stopped_at_end) {
            (true, true) => Some("at the start and at the end"),
            (true, false) => Some("at the start"),
            (false, true) => Some("at the end"),
            (false, false) => None,
        },
        "process_stopped_monotonic_ns": report.stopped_spans,
        "stalled_reads": report.stalled_reads,
        "longest_stall_us": report.longest_stall_ns / 1000,
        "faulted_samples": report.faulted_samples,
        "thread_samples": counts.thread_samples,
        "gil_waiter_counts": process.gil_waiter_counts,
        "handoffs_seen": counts.handoffs_seen,
        "handoffs_counted": counts.handoffs_counted,
        "waiting_samples": counts.waiting_samples,
        "waiting_samples_gil_free": counts.waiting_samples_gil_free,
        "thread_list_walks": report.thread_walks,
        "thread_list_walks_spared": report.thread_walks_spared,
        "kernel_reads_skipped_idle": report.kernel_reads_skipped,
        "kernel_reads_proven_unchanged": report.kernel_reads_unchanged,
        "kernel_reads_proven_running": report.kernel_reads_proven_running,
        "running_proof_check": (report.running_proof_checked > 0).then(|| json!({
            "judged": report.running_proof_checked,
            "refuted": report.running_proof_refuted,
        })),
        "kernel_reads_counted_out": report.kernel_reads_counted_out,
        "counted_out_refuted": report.counted_out_refuted,
        "counted_out_put_off": report.counted_out_put_off,
        "counted_out_read_instead": report.counted_out_read_instead,
        "counted_out_on_retry": report.counted_out_on_retry,
        "gil_read_again": report.gil_read_again,
        "gil_let_go_between_reads": report.gil_let_go_between_reads,
        "kernel_reads_proven_waiting": report.kernel_reads_proven_waiting,
        "proven_waiting_check": (report.proven_waiting_checked > 0).then(|| json!({
            "judged": report.proven_waiting_checked,
            "refuted": report.proven_waiting_refuted,
        })),
        "thread_name_reads": report.name_reads.reads,
        "thread_names_read": report.name_reads.names,
        "thread_name_reads_torn": report.name_reads.torn,
        "stacks": if process.stacks { report.stacks.unavailable.clone().unwrap_or_else(|| "read".into()) } else { "not read: --no-stacks".into() },
        "stacks_read": report.stacks.read.stacks,
        "stack_frames_read": report.stacks.read.frames,
        "stack_reads_torn": report.stacks.read.torn,
        "stack_innermost_checks": report.stacks.innermost_checks,
        "stacks_reused_same_innermost_frame": report.stacks.reused,
        "stacks_reused_same_frame_other_line": report.stacks.reused_other_line,
        "code_objects_read": report.stacks.read.code_objects_read,
        "code_objects_replaced_at_a_cached_address": report.stacks.read.code_objects_replaced,
        "interpreter_gil_flags": match counts.gil_flags {
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
        "sampler_cpus": process.cpus,
        "sampler_cpu_seconds": report.cpu_ns as f64 / 1e9,
        "sampler_moved_off_holder_cpu": report.cpu_moves,
        "sampler_thread": report.sampler_thread,
        "sampler_thread_targets": report.targets_on_thread,
        "saved_sample_bytes": report.saved_bytes,
        "sampler_syscalls_per_sample": report.syscalls_per_sample(),
    });
    let Value::Object(mut map) = value else {
        unreachable!("json! of an object literal is an object")
    };
    // Each rule's count under its own key (infer/rules.rs).
    for (info, count) in counts.decisions.iter() {
        map.insert(info.metadata_key.into(), json!(count));
    }
    map
}
