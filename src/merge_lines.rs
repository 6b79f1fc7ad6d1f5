//! What `gilsample merge` says on stderr: each input and how it was placed on the merged clock, the
//! inputs left out, and a profiler trace that shares no time with the GIL traces, with the
//! `--offset` that would bring it into their time.

use gilsample::cli::MergeArgs;
use gilsample::error::Result;
use gilsample::merge::{InputReport, MergeOptions, merge};
use gilsample::trace::chrome::micros;

pub(crate) fn run_merge(args: &MergeArgs) -> Result<()> {
    let opts = MergeOptions {
        force: args.force,
        offsets: args.offset.clone(),
    };
    let report = merge(&args.inputs, &args.output, &opts)?;
    for (path, why) in &report.left_out {
        gilsample::stderr_line!("gilsample: {}: left out: {why}", path.display());
    }
    for input in &report.inputs {
        let mut line = format!(
            "gilsample: {}: {}, {} event{}, {}",
            input.path.display(),
            input.kind.describe(),
            input.events,
            if input.events == 1 { "" } else { "s" },
            input.alignment
        );
        if input.manual_offset_ns != 0 {
            line += &format!(", --offset {} µs", micros(input.manual_offset_ns));
        }
        for (from, to) in &input.renumbered {
            line += &format!(", pid {from} renumbered {to}");
        }
        gilsample::stderr_line!("{line}");
        match &input.partial {
            Some(Some(cut)) => gilsample::stderr_line!(
                "gilsample: note: {}: an interrupted recording's temporary file, cut off ({cut}): \
                 merged up to its last complete event; without the metadata written at its end, \
                 its clock is taken as written (wall-clock µs, the default; not --clock monotonic)",
                input.path.display()
            ),
            Some(None) => gilsample::stderr_line!(
                "gilsample: note: {}: an interrupted recording's temporary file, complete: merged \
                 whole",
                input.path.display()
            ),
            None => {}
        }
        if input.overlaps_gil == Some(false) {
            gilsample::stderr_line!("gilsample: warning: {}", no_overlap_in_words(input));
        }
    }
    gilsample::stderr_line!("gilsample: merged -> {}", report.output.display());
    Ok(())
}

/// What merge says of a profiler trace that shares no time with the GIL traces: how far off it
/// is, and which `--offset` brings it into their time, so the user knows what to try.
fn no_overlap_in_words(input: &InputReport) -> String {
    let path = input.path.display();
    let mut words = format!(
        "{path} does not overlap the GIL traces in time; if both covered the same run, the \
         clocks differ: correct with --offset {path}=MICROS"
    );
    if let Some(gap) = input.gil_gap_ns {
        let seconds = gap.unsigned_abs() as f64 / 1e9;
        let (place, shift, bound) = if gap > 0 {
            ("starts", "after the GIL traces end", "at most")
        } else {
            ("ends", "before the GIL traces start", "at least")
        };
        // The smallest shift that makes the two meet; the true one is at least that far (and,
        // past their length, overshoots them).
        let meeting_us = -gap.signum() * gap.unsigned_abs().div_ceil(1000) as i128;
        words += &format!(
            " (it {place} {seconds:.3} s {shift}: an --offset of {bound} {meeting_us}, added to any \
             given already, makes them meet)"
        );
    }
    words
}
