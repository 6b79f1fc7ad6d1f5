//! What the session says and does at each signal (signals.rs decides what a signal means): the
//! lines on stderr (after `top`'s full-screen view, where it is up: top/terminal.rs), and the exits
//! that leave unfinished traces at their temporary names, never half-written at the final name.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;

use gilsample::error::exit;
use gilsample::signals::{SessionState, SignalStep, watch_signals};
use gilsample::top::say;
use gilsample::trace::output::OutputSpec;

/// Takes SIGINT, SIGTERM and SIGHUP (signals.rs) and says what each did; the ones that end the wait
/// exit at once (files stay at their temporary names, never half-written at the final name).
/// `keeps_trace`: the session writes trace files (not `top` without `-o`), which a first signal
/// finishes and a second leaves as `.partial` files. `quiet` (`-q`): only the lines of steps that
/// exit are said, as they are what a script must know (the files left, the command's SIGTERM).
pub(crate) fn install_signal_thread(
    state: SessionState,
    output: &OutputSpec,
    keeps_trace: bool,
    quiet: bool,
) {
    let partial_dir = output.dir();
    let searching = state.searching.clone();
    // On a terminal the line starts below the `^C` it echoed (or the progress bar); in a log it
    // needs no blank line before it.
    let below = if std::io::stderr().is_terminal() {
        "\n"
    } else {
        ""
    };
    watch_signals(state, move |step| match step {
        SignalStep::Stopping(_)
        | SignalStep::PassedOn { .. }
        | SignalStep::ReachedTheCommand { .. }
        | SignalStep::Repeated { .. }
            if quiet => {}
        SignalStep::Stopping(signal) if !keeps_trace => say(&format!(
            "{below}gilsample: {signal:?} received, stopping (again to abort)"
        )),
        SignalStep::Stopping(signal) if searching.load(Ordering::SeqCst) => say(&format!(
            "{below}gilsample: {signal:?} received, stopping the search: no process found to record yet"
        )),
        SignalStep::Stopping(signal) => say(&format!(
            "{below}gilsample: {signal:?} received, finishing the trace (again to abort)"
        )),
        // top's own temporary directory: exiting skips the drop that removes it.
        SignalStep::Abort if !keeps_trace => {
            let _ = std::fs::remove_dir_all(&partial_dir);
            say("gilsample: aborted");
            std::process::exit(exit::INTERRUPTED);
        }
        SignalStep::Abort => {
            let dir = partial_dir.display();
            say(&format!(
                "gilsample: aborted; what was recorded so far is in hidden .*.partial files in \
                 {dir} (`ls -a {dir}`): `gilsample report {dir}` reads them"
            ));
            std::process::exit(exit::INTERRUPTED);
        }
        SignalStep::PassedOn { signal, command } => say(&format!(
            "gilsample: {signal:?} passed on to the command (pid {command}); waiting for it to exit \
             (again to stop waiting: it then gets SIGTERM)"
        )),
        SignalStep::ReachedTheCommand { signal, command } => say(&format!(
            "gilsample: waiting for the command (pid {command}), which got the {signal:?} too, to \
             exit (again to stop waiting: it then gets SIGTERM)"
        )),
        SignalStep::Repeated { signal, sender } => say(&format!(
            "gilsample: {signal:?} again from process {sender} at once (as `timeout` sends it): \
             taken as the same request (another must come a second later, or from Ctrl+C)"
        )),
        SignalStep::StopWaiting { command } => {
            if !keeps_trace {
                let _ = std::fs::remove_dir_all(&partial_dir);
            }
            say(&format!(
                "gilsample: not waiting for the command (pid {command}) any longer; it gets SIGTERM"
            ));
            std::process::exit(exit::INTERRUPTED);
        }
    });
}
