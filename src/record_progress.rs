//! What `record` says while it runs: a progress bar on a terminal, and a line for each update
//! worth saying, above the bar or plain on stderr without one.

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use gilsample::record::{Progress, Update, waiting};

pub(crate) struct ProgressDisplay {
    bar: Option<ProgressBar>,
    quiet: bool,
    verbose: bool,
    /// Without a bar or a duration, how the recording ends is said once, after the first start:
    /// the bar says it on a terminal; piped, nothing else would until the end.
    how_it_ends: Cell<Option<String>>,
    /// A warning about how the sampler will run (real-time scheduling refused), said before the
    /// first start line: a run refused before any target starts (no access to it) says only why.
    warning_at_start: Cell<Option<String>>,
}

impl ProgressDisplay {
    /// A bar only when not quiet and stderr is a terminal; with `verbose`, also the processes
    /// passed over; `warning_at_start` goes before the first target's start line; `launched`: a
    /// command is recorded (its exit ends the recording).
    pub(crate) fn new(
        quiet: bool,
        verbose: bool,
        duration: Option<Duration>,
        warning_at_start: Option<String>,
        launched: bool,
    ) -> Self {
        let show_progress = !quiet && std::io::stderr().is_terminal();
        let bar = show_progress.then(|| new_progress_bar(duration));
        Self {
            how_it_ends: Cell::new(
                (bar.is_none() && !quiet).then(|| how_it_ends(duration, launched)),
            ),
            bar,
            quiet,
            verbose,
            warning_at_start: Cell::new(warning_at_start.filter(|_| !quiet)),
        }
    }

    pub(crate) fn show(&self, update: Update<'_>) {
        match update {
            Update::Progress(p) => self.show_progress(p),
            update => {
                let started = matches!(update, Update::Started { .. });
                if started && let Some(warning) = self.warning_at_start.take() {
                    self.say(warning);
                }
                if let Some(line) = line_for(update, self.quiet, self.verbose) {
                    self.say(line);
                }
                if started && let Some(line) = self.how_it_ends.take() {
                    self.say(line);
                }
            }
        }
    }

    /// The bar goes before the summary is printed.
    pub(crate) fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }

    // A line above the progress bar, or plain on stderr without one.
    fn say(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => gilsample::stderr_line!("{line}"),
        }
    }

    fn show_progress(&self, p: &Progress) {
        if let Some(bar) = &self.bar {
            let secs = p.elapsed.as_secs_f64();
            // Periods skipped while quiet count as kept, as in the summary.
            let rate = if secs > 0.0 {
                (p.samples + p.skipped_periods) as f64 / secs / p.targets.max(1) as f64
            } else {
                0.0
            };
            bar.set_position(p.elapsed.as_millis() as u64);
            bar.set_message(format!(
                "{} samples, {:.0} Hz, {} late, {} threads",
                p.samples, rate, p.late, p.threads
            ));
        }
    }
}

/// The line an update says, if any: with `quiet`, only errors (a given process refused, a stopped
/// command, a failed write); the descendants passed over only with `verbose`.
fn line_for(update: Update<'_>, quiet: bool, verbose: bool) -> Option<String> {
    match update {
        Update::Started {
            pid,
            path,
            python,
            layout,
            rate_hz,
        } if !quiet => Some(format!(
            "gilsample: recording process {pid} (Python {python}, layout {layout}) at {rate_hz} Hz -> {}",
            path.display()
        )),
        Update::Started { .. } => None,
        Update::Skipped { pid, why, given } if given || !quiet => {
            Some(format!("gilsample: skipping process {pid}: {why}"))
        }
        Update::Skipped { .. } | Update::Ready => None,
        Update::TargetStopped { pid, by_debugger } if !quiet => Some(format!(
            "gilsample: {}",
            waiting::stopped(pid, by_debugger, true)
        )),
        Update::TargetContinued { pid } if !quiet => {
            Some(format!("gilsample: {}", waiting::continued(pid)))
        }
        Update::TargetStopped { .. } | Update::TargetContinued { .. } => None,
        Update::ThreadOfProcess { tid, pid } if !quiet => Some(format!(
            "gilsample: {tid} is a thread of process {pid}; recording process {pid}"
        )),
        Update::Launcher { pid, program } if !quiet => Some(format!(
            "gilsample: process {pid} runs {program}, not Python: recording the Python processes it starts"
        )),
        Update::ThreadOfProcess { .. } | Update::Launcher { .. } => None,
        Update::PassedOver { pid, program } if verbose && !quiet => Some(format!(
            "gilsample: process {pid} runs {}, not Python: passed over, and looked at again if it \
             starts another program",
            program.map_or("a program gilsample cannot name".into(), |p| p
                .display()
                .to_string())
        )),
        Update::PassedOver { .. } => None,
        // Said even when quiet: the user's command did not run to its end.
        Update::CommandStopped { pid, how } => Some(format!(
            "gilsample: the recording failed (the error follows), so the launched command (pid {pid}) was stopped: {}",
            how.describe()
        )),
        Update::WaitingForPython { pid, program, why } if !quiet => Some(format!(
            "gilsample: {}",
            waiting::for_python(pid, program, why)
        )),
        Update::WaitingForPython { .. } => None,
        Update::WaitingForDevices {
            kind,
            duration,
            nodes_here,
        } if !quiet => Some(format!(
            "gilsample: {}",
            waiting::for_devices(kind, duration, nodes_here)
        )),
        Update::WaitingForDevices { .. } => None,
        // Said even when quiet: an error, said when it happens.
        Update::WriteFailed { pid, error } => Some(format!(
            "gilsample: error: process {pid}: {error}; the recording stops, and the answer for what \
             was written follows"
        )),
        // The bar shows these; never a line.
        Update::Progress(_) => None,
    }
}

fn new_progress_bar(duration: Option<Duration>) -> ProgressBar {
    match duration {
        Some(d) => {
            let bar = ProgressBar::new(d.as_millis() as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {percent}% {msg}",
                )
                .expect("the template is valid"),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] recording (Ctrl+C to stop) {msg}",
                )
                .expect("the template is valid"),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        }
    }
}

/// Said once, as the first target starts (without a progress bar to show it): how the recording
/// will end. A duration is said in words: `-d 500` is 500 seconds, and a user who meant
/// milliseconds reads "8.3 min" at once, not when the recording has not ended.
fn how_it_ends(duration: Option<Duration>, launched: bool) -> String {
    let until = if launched {
        "the command exits, or Ctrl+C (SIGINT, SIGTERM or SIGHUP)"
    } else {
        "Ctrl+C (SIGINT, SIGTERM or SIGHUP) or the processes exit"
    };
    match duration {
        Some(length) => format!(
            "gilsample: recording for {} (--duration), or until {until}",
            waiting::humantime_short(length)
        ),
        None => format!("gilsample: recording until {until}; --duration sets a length"),
    }
}
