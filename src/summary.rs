//! The end-of-recording summary as text. First the answer, as `gilsample report` gives it for the
//! file just written: who waited for the GIL, for whom, in what code. With `--verbose`, then the
//! sampler's own account: achieved rate, late samples, hand-offs seen versus counted by the
//! interpreter, how running threads were classified, per thread the share of time in each state.
//! A rate well under the one asked for is said as a warning, with what it costs.

use crate::infer::rules::Decision;
use std::fmt::Write;

use crate::infer::intervals::GilState;
use crate::record::{RecordReport, TargetReport};
use crate::report::analyze::ProcessAnswer;
use crate::report::text;
use crate::sampler::report::EndReason;

/// The answer for each recorded target, as its trace's analysis gave it when the file was finished.
pub fn answers(report: &RecordReport) -> Vec<Option<ProcessAnswer>> {
    let mut answers: Vec<Option<ProcessAnswer>> =
        report.targets.iter().map(|t| t.answer.clone()).collect();
    crate::report::analyze::note_children(answers.iter_mut().flatten());
    answers
}

fn end_in_words(end: &EndReason) -> String {
    match end {
        EndReason::Duration => "the duration elapsed".into(),
        EndReason::Stopped => {
            "stopped when asked (Ctrl+C, a signal, the Python API, or top's q or --once)".into()
        }
        EndReason::TargetExited => "the process exited".into(),
        EndReason::TargetExec => "the process replaced its program (exec)".into(),
        EndReason::Failed(why) => format!("reading the process failed: {why}"),
    }
}

/// Below this share of the asked rate, the summary warns that the trace is coarser than asked.
pub const LOW_RATE_SHARE: f64 = 0.9;

/// `requested_hz`: the rate asked for (`--rate`).
pub fn format_summary(
    report: &RecordReport,
    answers: &[Option<ProcessAnswer>],
    verbose: bool,
    requested_hz: f64,
) -> String {
    let mut out = String::new();
    for (target, answer) in report.targets.iter().zip(answers) {
        match answer {
            Some(answer) => text::format_process(&mut out, answer),
            None => {
                let _ = writeln!(out, "process {}", target.pid);
            }
        }
        if let Some(error) = &target.write_error {
            let _ = writeln!(
                out,
                "  trace: not written whole: {error}; {}",
                if answer.is_some() {
                    "the answer above is for the events written before"
                } else {
                    "nothing of it could be read back"
                }
            );
            continue;
        }
        let _ = writeln!(
            out,
            "  trace: {} (recording ended: {})",
            target.path.display(),
            end_in_words(&target.sampler.end)
        );
        let seconds = target
            .sampler
            .end_ns
            .saturating_sub(target.sampler.start_ns) as f64
            / 1e9;
        if let Some(warning) =
            low_rate_warning(target.sampler.achieved_rate_hz(), requested_hz, seconds)
        {
            let _ = writeln!(out, "  {warning}");
        } else {
            for note in [
                gaps_warning(&target.sampler, requested_hz),
                between_samples_note(&target.sampler, requested_hz),
            ]
            .into_iter()
            .flatten()
            {
                let _ = writeln!(out, "  {note}");
            }
        }
        if let Some(error) = &target.save_error {
            let _ = writeln!(
                out,
                "  samples: not saved whole: {error}; the trace above is whole, and a replay of \
                 the samples reads them to where writing failed"
            );
        }
        if verbose {
            format_target(&mut out, target);
        }
    }
    if let Some(hint) = samplers_on_one_core_hint(report) {
        let _ = writeln!(out, "{hint}");
    }
    if report.targets.len() > 1 {
        let known: Vec<ProcessAnswer> = answers.iter().flatten().cloned().collect();
        text::format_ranking(&mut out, &known, false);
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
            "merged trace of {} process{}: {}",
            report.targets.len(),
            if report.targets.len() == 1 { "" } else { "es" },
            merged.display()
        );
    }
    out
}

fn format_target(out: &mut String, t: &TargetReport) {
    let s = &t.sampler;
    let secs = s.end_ns.saturating_sub(s.start_ns) as f64 / 1e9;
    let late_pct = 100.0 * s.late_share();
    let missed = s
        .inference
        .handoffs_counted
        .saturating_sub(s.inference.handoffs_seen);
    let _ = writeln!(
        out,
        "  shares above: \"waited N%\" is of the recording, \"for HOLDER N%\" of that thread's \
         waiting, \"in CODE N%\" of the waiting for that holder"
    );
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
        "  {:.2} s, {} samples, {:.0} Hz achieved, {} late ({:.2}% of the ticks{}), {} \
         torn/skipped; ended: {:?}",
        secs,
        s.samples,
        s.achieved_rate_hz(),
        s.late_samples,
        late_pct,
        match s.late_samples_while_quiet {
            0 => String::new(),
            quiet => format!("; {quiet} at the quiet rate, which leave no hole"),
        },
        s.faulted_samples,
        s.end
    );
    if s.skipped_periods > 0 {
        let _ = writeln!(
            out,
            "  {} samples at the quiet rate: {:.0}% of the ticks skipped while nothing GIL-related \
             changed (--fixed-rate keeps every one)",
            s.quiet_samples,
            100.0 * s.skipped_share()
        );
    }
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
        s.inference.handoffs_seen, s.inference.handoffs_counted, missed
    );
    if s.inference.thread_samples > 0 {
        let d = &s.inference.decisions;
        let _ = writeln!(
            out,
            "  running-but-not-holding thread samples: {} proven still in take/drop, {} decided by who \
             owns the GIL's mutex, {} decided by the GIL's waiter counts, {} released (of {}); stretches \
             after a GIL state: {} waited for a CPU inside the call, {} ran without the GIL ({} decided \
             by the hand-off count, {} found in take_gil by two wake-ups since holding)",
            d.get(Decision::RunningStillWaiting),
            d.get(Decision::RunningByGilMutex),
            d.get(Decision::RunningCounted),
            d.get(Decision::RunningReleased),
            s.inference.thread_samples,
            d.get(Decision::StretchInGilCall),
            d.get(Decision::StretchReleased),
            d.get(Decision::StretchByHandoffs),
            d.get(Decision::StretchWokenTwice)
        );
    }
    // The answer's "waited N%" is of the recording; this table's shares are of each thread's own
    // lifetime, so a thread that lived half the recording shows twice its share of it.
    let _ = writeln!(
        out,
        "  per thread, the share of its own lifetime (its first sample to its last) in each state, \
         and the times it took the GIL:"
    );
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

/// Recordings shorter than this get one line about a low rate, not the paragraph: over a fraction
/// of a second the rate mostly measures the start (a launched interpreter importing, and so changing
/// its memory map, which holds up reads of it), not what a longer recording would reach.
pub const SHORT_RECORDING_S: f64 = 1.0;

/// The warning for a recording of `seconds` that reached less than `LOW_RATE_SHARE` of the asked
/// rate, with what that costs. The figures are the 1-20 kHz accuracy matrix of docs/accuracy.md
/// (agreement with eBPF ground truth, CPython 3.9-3.13): the `fastswitch` workload (hand-offs every few
/// hundred µs) and the workloads whose threads hold the GIL for milliseconds (`contention`, `mixed`,
/// `many`).
pub fn low_rate_warning(achieved_hz: f64, requested_hz: f64, seconds: f64) -> Option<String> {
    if requested_hz.is_nan() || requested_hz <= 0.0 || achieved_hz >= LOW_RATE_SHARE * requested_hz
    {
        return None;
    }
    if seconds < SHORT_RECORDING_S {
        return Some(format!(
            "note: the sampler reached {achieved_hz:.0} Hz of the {requested_hz:.0} Hz asked ({:.0}%) in \
             this {seconds:.1} s recording, too short for the rate to say much (its start weighs most: \
             the first walk of the threads, and in a program just started its changing memory map, \
             hold up the first reads); --verbose counts the late ticks and stalled reads",
            100.0 * achieved_hz / requested_hz
        ));
    }
    Some(format!(
        "warning: the sampler reached {achieved_hz:.0} Hz of the {requested_hz:.0} Hz asked ({:.0}%): GIL \
         hand-offs shorter than its period are placed less exactly or missed. Measured against eBPF \
         ground truth (docs/accuracy.md), threads that hand the GIL over every few hundred µs were \
         98% right at 10 kHz, 96% at 5 kHz and 82% at 1 kHz; threads that hold it for milliseconds \
         99-99.7% at 10 and 5 kHz and 96.6-98.5% at 1 kHz. Usual causes: the sampler waited for a CPU (real-time priority \
         refused, or every core busy: try --cpus), or too many threads to read in one period (try a \
         lower --rate).",
        100.0 * achieved_hz / requested_hz
    ))
}

/// Late ticks over this share of all, or a read that stalled this many periods, are warned about
/// even when the rate as a whole was kept: they are holes in the timeline, where hand-offs are missed.
pub const LATE_SHARE_WARNED: f64 = 0.01;
/// A GIL read that stalled longer than this many periods is warned about (with
/// `LATE_SHARE_WARNED`).
pub const STALL_PERIODS_WARNED: f64 = 10.0;

/// Several processes on more than one sampler thread (more than a thread takes, targets that came
/// later, or a thread that could not keep its targets' rate), whose ticks waited for a CPU: the
/// job's cores are busy, and every sampler thread's wake preempts the job. On one CPU together
/// (`--cpus`), and on one grid of deadlines (sampler/pace.rs), they preempt it once a period.
fn samplers_on_one_core_hint(report: &RecordReport) -> Option<String> {
    let n = report.targets.len();
    let threads: std::collections::BTreeSet<u64> = report
        .targets
        .iter()
        .map(|t| t.sampler.sampler_thread)
        .collect();
    let late = report
        .targets
        .iter()
        .any(|t| t.sampler.holes_share() >= LATE_SHARE_WARNED);
    (threads.len() > 1 && late && !report.samplers_pinned).then(|| {
        format!(
            "hint: {n} processes on {} sampler threads, whose ticks waited for CPUs: the cores are \
             busy, and each sampler thread's wake-up preempts the job. --cpus N keeps every \
             sampler on core N, so the job is preempted there once a tick instead of once per \
             thread (docs/cost.md, \"Several processes\")",
            threads.len()
        )
    })
}

/// Hand-offs the interpreter counted, of which over half fell between samples, before the
/// summary says so: below, too few to be more than a moment's burst.
const BETWEEN_SAMPLES_NOTED_FROM: u64 = 1000;

/// The note for a recording at the asked rate whose target hands the GIL over faster than it
/// samples: most hand-offs fall between two samples, and the timeline is coarser than the rate
/// suggests. What that costs is measured in docs/accuracy.md on workloads of that shape.
pub fn between_samples_note(
    s: &crate::sampler::report::SamplerReport,
    requested_hz: f64,
) -> Option<String> {
    let (seen, counted) = (s.inference.handoffs_seen, s.inference.handoffs_counted);
    if counted < BETWEEN_SAMPLES_NOTED_FROM || seen.saturating_mul(2) >= counted {
        return None;
    }
    let between = counted.saturating_sub(seen);
    Some(format!(
        "note: {:.0}% of the {counted} GIL hand-offs the interpreter counted fell between two \
         samples (faster than one per {} period): a slice there can span several hand-offs and \
         the shortest waits are not seen; how close the shares of time stay on such workloads is \
         in docs/accuracy.md. For a short recording, a higher --rate sees more.",
        100.0 * between as f64 / counted as f64,
        crate::report::phrases::ms(1000.0 / requested_hz)
    ))
}

/// The warning for a recording that kept its rate overall but has holes: ticks that started late
/// (the sampler waited for a CPU) or reads that stalled (the target was changing its memory map).
pub fn gaps_warning(
    s: &crate::sampler::report::SamplerReport,
    requested_hz: f64,
) -> Option<String> {
    if requested_hz.is_nan() || requested_hz <= 0.0 || s.samples == 0 {
        return None;
    }
    let late_share = s.holes_share();
    let stall_periods = s.longest_stall_ns as f64 * requested_hz / 1e9;
    let mut holes = Vec::new();
    if late_share >= LATE_SHARE_WARNED {
        holes.push(format!(
            "{:.1}% of its ticks started late (it waited for a CPU: every core busy, or real-time \
             priority refused; --cpus gives it one)",
            100.0 * late_share
        ));
    }
    if stall_periods >= STALL_PERIODS_WARNED {
        holes.push(format!(
            "a read of the process waited {:.1} ms (it was changing its memory map, e.g. allocating)",
            s.longest_stall_ns as f64 / 1e6
        ));
    }
    (!holes.is_empty()).then(|| {
        format!(
            "warning: the timeline has holes where the sampler saw nothing: {}. Hand-offs inside them \
             are missed; those over {} periods are left out of the figures above and shown on the \
             trace's \"{}\" track; --verbose counts them.",
            holes.join("; "),
            crate::infer::intervals::TimelineParams::GAP_PERIODS,
            crate::trace::chrome::GAP_TRACK
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::stats::Totals;
    use crate::record::TargetReport;
    use crate::sampler::priority::Scheduling;
    use crate::sampler::report::SamplerReport;

    fn report_at(samples: u64) -> RecordReport {
        let mut sampler = SamplerReport::new(1_000_000_000, Scheduling::Fifo);
        sampler.end_ns = 2_000_000_000;
        sampler.samples = samples;
        RecordReport {
            targets: vec![TargetReport {
                pid: 4242,
                rank: Some(0),
                path: "GIL_4242_rank_0.json".into(),
                python: "3.12.1".into(),
                layout_source: "file".into(),
                sampler,
                totals: Totals::default(),
                answer: None,
                write_error: None,
                save_error: None,
            }],
            failures: Vec::new(),
            skipped: Vec::new(),
            launchers: Vec::new(),
            merged: None,
            command: None,
            samplers_pinned: false,
        }
    }

    #[test]
    fn a_rate_under_nine_tenths_of_the_asked_one_is_warned_about_with_its_cost() {
        let summary = format_summary(&report_at(4_800), &[None], false, 10_000.0);
        assert!(
            summary.contains("reached 4800 Hz of the 10000 Hz asked (48%)"),
            "{summary}"
        );
        assert!(summary.contains("96% at 5 kHz"), "{summary}");
        assert!(summary.contains("--cpus"), "{summary}");
    }

    #[test]
    fn a_rate_at_nine_tenths_or_more_is_not_warned_about() {
        for samples in [9_000, 9_990] {
            let summary = format_summary(&report_at(samples), &[None], false, 10_000.0);
            assert!(!summary.contains("warning"), "{samples}: {summary}");
        }
        assert_eq!(low_rate_warning(0.0, 0.0, 10.0), None);
        assert!(low_rate_warning(899.0, 1_000.0, 10.0).is_some());
    }

    #[test]
    fn a_low_rate_in_a_short_recording_is_one_line() {
        let mut report = report_at(1_680);
        report.targets[0].sampler.end_ns = 1_300_000_000;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(
            summary.contains("reached 5600 Hz of the 10000 Hz asked (56%) in this 0.3 s recording"),
            "{summary}"
        );
        assert!(!summary.contains("eBPF"), "{summary}");
        assert_eq!(summary.lines().count(), 3, "{summary}");
    }

    #[test]
    fn hand_offs_mostly_between_samples_are_noted() {
        let mut report = report_at(9_900);
        report.targets[0].sampler.inference.handoffs_counted = 16_900;
        report.targets[0].sampler.inference.handoffs_seen = 2_957;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(
            summary.contains(
                "note: 83% of the 16900 GIL hand-offs the interpreter counted fell between two \
                 samples (faster than one per 0.10 ms period)"
            ),
            "{summary}"
        );
        // Half seen, or too few to say: nothing.
        report.targets[0].sampler.inference.handoffs_seen = 8_450;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(!summary.contains("between two samples"), "{summary}");
        report.targets[0].sampler.inference.handoffs_counted = 900;
        report.targets[0].sampler.inference.handoffs_seen = 10;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(!summary.contains("between two samples"), "{summary}");
    }

    #[test]
    fn late_ticks_and_stalled_reads_are_warned_about_when_the_rate_was_kept() {
        let mut report = report_at(9_900);
        report.targets[0].sampler.late_samples = 150;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(
            summary.contains("1.5% of its ticks started late"),
            "{summary}"
        );
        assert!(!summary.contains("memory map"), "{summary}");
        report.targets[0].sampler.late_samples = 10;
        report.targets[0].sampler.longest_stall_ns = 2_500_000;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(summary.contains("waited 2.5 ms"), "{summary}");
        assert!(!summary.contains("started late"), "{summary}");
        report.targets[0].sampler.longest_stall_ns = 500_000;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(!summary.contains("warning"), "{summary}");
        // Late at the quiet rate: the hand-off count covers what they let pass, no hole.
        report.targets[0].sampler.late_samples = 150;
        report.targets[0].sampler.late_samples_while_quiet = 140;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(!summary.contains("warning"), "{summary}");
        let verbose = format_summary(&report, &[None], true, 10_000.0);
        assert!(
            verbose.contains("150 late (1.49% of the ticks; 140 at the quiet rate"),
            "{verbose}"
        );
        report.targets[0].sampler.late_samples_while_quiet = 40;
        let summary = format_summary(&report, &[None], false, 10_000.0);
        assert!(
            summary.contains("1.1% of its ticks started late"),
            "{summary}"
        );
    }

    #[test]
    fn several_processes_whose_sampler_threads_waited_for_cpus_are_told_of_cpus() {
        let mut report = report_at(9_900);
        report.targets[0].sampler.late_samples = 150;
        report.targets[0].sampler.sampler_thread = 1;
        let one = format_summary(&report, &[None], false, 10_000.0);
        assert!(!one.contains("hint: "), "{one}");
        let mut other = report_at(9_900);
        other.targets[0].pid = 4343;
        other.targets[0].sampler.sampler_thread = 1;
        report.targets.extend(other.targets);
        // One thread for both: --cpus would change nothing.
        let shared = format_summary(&report, &[None, None], false, 10_000.0);
        assert!(!shared.contains("hint: "), "{shared}");
        report.targets[1].sampler.sampler_thread = 2;
        let two = format_summary(&report, &[None, None], false, 10_000.0);
        assert!(
            two.contains("hint: 2 processes on 2 sampler threads") && two.contains("--cpus N"),
            "{two}"
        );
        report.samplers_pinned = true;
        let pinned = format_summary(&report, &[None, None], false, 10_000.0);
        assert!(!pinned.contains("hint: "), "{pinned}");
        report.samplers_pinned = false;
        report.targets[0].sampler.late_samples = 0;
        let on_time = format_summary(&report, &[None, None], false, 10_000.0);
        assert!(!on_time.contains("hint: "), "{on_time}");
    }
}
