//! What `gilsample convert` says on stderr: on a terminal, how far each pass over the file has gone
//! (a file of millions of events takes seconds a pass); then what was converted, and where to.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use gilsample::cli::ConvertArgs;
use gilsample::convert::{ConvertProgress, convert};
use gilsample::error::Result;

pub(crate) fn run_convert(args: &ConvertArgs) -> Result<()> {
    let bar = std::io::stderr().is_terminal().then(progress_bar);
    let mut show = |progress| {
        if let Some(bar) = &bar {
            show_progress(bar, progress);
        }
    };
    let converted = convert(&args.input, &args.output, args.force, &mut show);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let (path, report) = converted?;
    if report.sorted_threads > 0 {
        gilsample::stderr_line!(
            "gilsample: {} threads' events were not in time order in the file; sorted by ts \
             before pairing, as the reference tool does",
            report.sorted_threads
        );
    }
    gilsample::stderr_line!(
        "gilsample: {} events, {} hold_gil inserted, {} take{} without a drop -> {}",
        report.events,
        report.holds,
        report.unpaired_takes,
        if report.unpaired_takes == 1 { "" } else { "s" },
        path.display()
    );
    Ok(())
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .expect("the template is valid"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn show_progress(bar: &ProgressBar, progress: ConvertProgress) {
    match progress {
        ConvertProgress::Checking { events } => {
            bar.set_message(format!(
                "{events} events read, looking for threads out of time order (pass 1 of 2)"
            ));
        }
        ConvertProgress::Writing { events, of } => {
            if bar.length() != Some(of) {
                bar.set_length(of);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} events written \
                         (pass 2 of 2)",
                    )
                    .expect("the template is valid"),
                );
            }
            bar.set_position(events);
        }
    }
}
