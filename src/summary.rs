//! The end-of-recording summary as text. First the answer, as `gilsample report` gives it for the
//! file just written: who waited for the GIL, for whom, in what code. With `--verbose`, then the
//! sampler's own account: achieved rate, late samples, hand-offs seen versus counted by the
//! interpreter, how running threads were classified, per thread the share of time in each state.

use std::fmt::Write;

use crate::infer::intervals::GilState;
use crate::record::{RecordReport, TargetReport};
use crate::report::analyze::ProcessAnswer;
use crate::report::text;
use crate::sample::sampler::EndReason;

/// The answer for each recorded target, as its trace's analysis gave it when the file was finished.
pub fn answers(report: &RecordReport) -> Vec<Option<ProcessAnswer>> {
    report.targets.iter().map(|t| t.answer.clone()).collect()
}

fn end_in_words(end: &EndReason) -> String {
    match end {
        EndReason::Duration => "the duration elapsed".into(),
        EndReason::Stopped => "stopped (Ctrl+C, a signal or the Python API)".into(),
        EndReason::TargetExited => "the process exited".into(),
        EndReason::TargetExec => "the process replaced its program (exec)".into(),
        EndReason::Failed(why) => format!("reading the process failed: {why}"),
    }
}

pub fn format_summary(
    report: &RecordReport,
    answers: &[Option<ProcessAnswer>],
    verbose: bool,
) -> String {
    let mut out = String::new();
    for (target, answer) in report.targets.iter().zip(answers) {
        match answer {
            Some(answer) => text::format_process(&mut out, answer),
            None => {
                let _ = writeln!(out, "process {}", target.pid);
            }
        }
        let _ = writeln!(
            out,
            "  trace: {} (recording ended: {})",
            target.path.display(),
            end_in_words(&target.sampler.end)
        );
        if verbose {
            format_target(&mut out, target);
        }
    }
    if report.targets.len() > 1 {
        let known: Vec<ProcessAnswer> = answers.iter().flatten().cloned().collect();
        text::format_ranking(&mut out, &known);
    }
    for (pid, error) in &report.failures {
        let _ = writeln!(out, "process {pid}: not recorded: {error}");
    }
    for (pid, why) in &report.skipped {
        let _ = writeln!(out, "process {pid}: skipped: {why}");
    }
    if let Some(merged) = &report.merged {
        let _ = writeln!(
            out,
            "merged trace of {} processes: {}",
            report.targets.len(),
            merged.display()
        );
    }
    out
}

fn format_target(out: &mut String, t: &TargetReport) {
    let s = &t.sampler;
    let secs = s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9;
    let late_pct = if s.samples > 0 {
        100.0 * s.late_samples as f64 / (s.samples + s.late_samples) as f64
    } else {
        0.0
    };
    let missed = s.handoffs_counted.saturating_sub(s.handoffs_seen);
    let _ = writeln!(
        out,
        "  sampler's account: Python {}, layout {}",
        t.python, t.layout_source
    );
    let _ = writeln!(
        out,
        "  sampler: {:.3} CPU s ({:.1}% of one CPU), {}",
        s.cpu_ns as f64 / 1e9,
        if secs > 0.0 {
            100.0 * s.cpu_ns as f64 / 1e9 / secs
        } else {
            0.0
        },
        s.scheduling
    );
    let _ = writeln!(
        out,
        "  {:.2} s, {} samples, {:.0} Hz achieved, {} late ({:.2}%), {} torn/skipped; ended: {:?}",
        secs,
        s.samples,
        s.achieved_rate_hz(),
        s.late_samples,
        late_pct,
        s.faulted_samples,
        s.end
    );
    if s.stalled_reads > 0 {
        let _ = writeln!(
            out,
            "  {} of the GIL took longer than a period (longest {:.1} ms; usually the target's \
             memory-map lock, held by a thread in mmap/munmap that lost its CPU): no samples meanwhile",
            if s.stalled_reads == 1 {
                "1 read".to_string()
            } else {
                format!("{} reads", s.stalled_reads)
            },
            s.longest_stall_ns as f64 / 1e6
        );
    }
    let _ = writeln!(
        out,
        "  GIL hand-offs: {} seen, {} counted by the interpreter ({} happened between samples)",
        s.handoffs_seen, s.handoffs_counted, missed
    );
    if s.thread_samples > 0 {
        let _ = writeln!(
            out,
            "  running-but-not-holding thread samples: {} proven still in take/drop, {} decided by who \
             owns the GIL's mutex, {} decided by the GIL's waiter counts, {} released (of {}); stretches \
             after a GIL state: {} waited for a CPU inside the call, {} ran without the GIL ({} decided \
             by the hand-off count, {} found in take_gil by two wake-ups since holding)",
            s.running_still_waiting,
            s.running_by_gil_mutex,
            s.running_counted,
            s.running_released,
            s.thread_samples,
            s.stretches_in_gil_call,
            s.stretches_released,
            s.stretches_by_handoffs,
            s.stretches_woken_twice
        );
    }
    let _ = writeln!(
        out,
        "  {:>8}  {:>7} {:>7} {:>7} {:>9} {:>8} {:>6}  name",
        "tid", "hold%", "take%", "drop%", "released%", "unknown%", "acq"
    );
    for (tid, stats) in &t.totals.threads {
        let pct = |state| 100.0 * stats.fraction(state);
        let name = s.thread_names.get(tid).map(String::as_str).unwrap_or("");
        let _ = writeln!(
            out,
            "  {:>8}  {:>7.2} {:>7.2} {:>7.2} {:>9.2} {:>8.2} {:>6}  {}",
            tid,
            pct(GilState::Hold),
            pct(GilState::Take),
            pct(GilState::Drop),
            pct(GilState::Released),
            pct(GilState::Unknown),
            stats.acquisitions,
            name
        );
    }
}
