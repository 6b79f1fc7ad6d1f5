//! SIGINT, SIGTERM and SIGHUP, blocked in every thread and taken by one: what each one means
//! depends on where the session is. While recording, the first asks the recording to stop and finish
//! its files, a second one aborts. Once the traces are finished and only a launched command is
//! waited for, the first is passed on to the command when a process sent it to gilsample alone (a
//! terminal's Ctrl+C goes to the command too), and a second one stops the wait: the command gets
//! SIGTERM. The caller is told each step and does the printing and exiting (main.rs).
//!
//! The same signal sent again by the same process within `REPEAT_WITHIN` is the same request, not a
//! second one: GNU `timeout` (and anything that signals a process and then its process group) sends
//! it twice, microseconds apart, and took recordings it meant to stop cleanly to an abort. A
//! terminal's Ctrl+C (sent by the kernel), another signal, another sender, or the same one later
//! counts as a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, pthread_sigmask};
use nix::unistd::Pid;

/// What a signal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalStep {
    /// The first while recording: the stop flag is set.
    Stopping(Signal),
    /// The second while recording: the caller exits at once.
    Abort,
    /// Passed on to the command being waited for, which a process sent to gilsample alone.
    PassedOn {
        /// The signal received and passed on.
        signal: Signal,
        /// The command's pid.
        command: u32,
    },
    /// Not passed on: a terminal's signal, which reached the command as well.
    ReachedTheCommand {
        /// The signal received.
        signal: Signal,
        /// The command's pid.
        command: u32,
    },
    /// The second while waiting for the command: it was sent SIGTERM; the caller exits at once.
    StopWaiting {
        /// The command's pid.
        command: u32,
    },
    /// The last signal again, from the same process at once (`REPEAT_WITHIN`): taken as the same
    /// request, nothing done.
    Repeated {
        /// The signal received.
        signal: Signal,
        /// The process that sent it.
        sender: i32,
    },
}

/// How soon the same signal from the same process counts as the same request (module docs). A
/// person who sends it again by hand, to abort, takes longer; Ctrl+C is never taken as a repeat.
pub const REPEAT_WITHIN: Duration = Duration::from_secs(1);

/// A signal as `wait_for_signal` took it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Received {
    signal: Signal,
    /// The process that sent it (`kill`); `None` where the kernel did (a terminal's Ctrl+C).
    sender: Option<i32>,
}

/// Where the session is, shared with the signal thread.
#[derive(Clone, Default)]
pub struct SessionState {
    /// Set by the first signal while recording; read by the recording.
    pub stop: Arc<AtomicBool>,
    /// The pid of the launched command once the traces are finished and only it is waited for.
    pub waiting_for_command: Arc<AtomicU32>,
    /// Set while a recording has no target yet and looks for one (`--all-npu --duration`): a
    /// first signal then has no trace to finish.
    pub searching: Arc<AtomicBool>,
}

/// Blocks the three signals in this thread (call it before starting any other) and takes them in a
/// thread of their own, telling `on_step` what each did.
pub fn watch_signals(state: SessionState, on_step: impl Fn(SignalStep) + Send + 'static) {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(signal);
    }
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).expect("blocking signals cannot fail");
    std::thread::spawn(move || {
        let mut while_recording = 0;
        let mut while_waiting = 0;
        let mut last: Option<(Received, Instant)> = None;
        while let Some(received) = wait_for_signal(&set) {
            let now = Instant::now();
            let Received { signal, sender } = received;
            if let Some(sender) = sender.filter(|_| repeats(last, received, now)) {
                // Not a new `last`: a request repeated every so often still gets its second.
                on_step(SignalStep::Repeated { signal, sender });
                continue;
            }
            last = Some((received, now));
            let command = state.waiting_for_command.load(Ordering::SeqCst);
            let step = if command != 0 {
                while_waiting += 1;
                if while_waiting > 1 {
                    let _ = kill(Pid::from_raw(command as i32), Signal::SIGTERM);
                    SignalStep::StopWaiting { command }
                } else if sender.is_some() {
                    // Said before it is done: the command may die of it, and the session exit
                    // with its status, before this thread would print the line.
                    on_step(SignalStep::PassedOn { signal, command });
                    let _ = kill(Pid::from_raw(command as i32), signal);
                    continue;
                } else {
                    SignalStep::ReachedTheCommand { signal, command }
                }
            } else {
                while_recording += 1;
                if while_recording == 1 {
                    state.stop.store(true, Ordering::SeqCst);
                    SignalStep::Stopping(signal)
                } else {
                    SignalStep::Abort
                }
            };
            on_step(step);
        }
    });
}

/// Whether `received`, at `now`, is the request `last` made again (module docs): the same signal
/// from the same process, sooner than `REPEAT_WITHIN`. The kernel's (Ctrl+C) never is.
fn repeats(last: Option<(Received, Instant)>, received: Received, now: Instant) -> bool {
    last.is_some_and(|(before, at)| {
        before == received
            && received.sender.is_some()
            && now.saturating_duration_since(at) < REPEAT_WITHIN
    })
}

/// The next of `set`'s signals, and the process that sent it (`kill`) where the kernel did not (a
/// terminal's Ctrl+C, which goes to the whole foreground process group).
fn wait_for_signal(set: &SigSet) -> Option<Received> {
    // SAFETY: a zeroed siginfo_t is valid for the kernel to fill; `set` outlives the call.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        let number = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if number > 0 {
            // SI_USER, SI_QUEUE, SI_TKILL are 0 or below; the kernel's own (SI_KERNEL) above.
            // SAFETY: reading the field is sound for any siginfo_t; for kill, sigqueue and tkill
            // it is the sender's pid (for the timer and async codes, also at or below 0, it is
            // some other value, which can only make two signals look alike or apart).
            let sender = (info.si_code <= 0).then(|| unsafe { info.si_pid() });
            return Signal::try_from(number)
                .ok()
                .map(|signal| Received { signal, sender });
        }
        if nix::errno::Errno::last() != nix::errno::Errno::EINTR {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(sender: Option<i32>, signal: Signal) -> Received {
        Received { signal, sender }
    }

    #[test]
    fn the_same_signal_from_the_same_process_at_once_is_a_repeat() {
        let at = Instant::now();
        let term = from(Some(42), Signal::SIGTERM);
        let last = Some((term, at));
        assert!(repeats(last, term, at + Duration::from_micros(5)));
        assert!(repeats(
            last,
            term,
            at + REPEAT_WITHIN - Duration::from_millis(1)
        ));
        // Later, from another process, another signal, or from the kernel: a second request.
        assert!(!repeats(last, term, at + REPEAT_WITHIN));
        assert!(!repeats(last, from(Some(43), Signal::SIGTERM), at));
        assert!(!repeats(last, from(Some(42), Signal::SIGINT), at));
        let ctrl_c = from(None, Signal::SIGINT);
        assert!(!repeats(Some((ctrl_c, at)), ctrl_c, at));
        assert!(!repeats(None, term, at));
    }
}
