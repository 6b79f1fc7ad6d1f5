//! What a sampler run is given and shares while it runs: its configuration, the counters other
//! threads read, and where samples go besides inference. Plain data, so that the session, the saver
//! and replay need not import the loop.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::Thread;

use crate::infer::findings::Finding;
use crate::infer::sample::Sample;
use crate::sampler::priority::Priority;

/// How one sampler thread samples its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Nanoseconds between ticks at the full rate.
    pub period_ns: u64,
    /// Stop at this CLOCK_MONOTONIC time (a session-wide deadline, so targets that join late end
    /// with the others); `None`: until stopped or the target exits.
    pub end_at_ns: Option<u64>,
    /// How often the thread list is re-walked.
    pub refresh_ns: u64,
    /// The scheduling the sampler thread asks for.
    pub priority: Priority,
    /// Spare the reads that cannot change what a sample decides (sampler/thread_reads.rs): threads
    /// idle in a non-GIL wait read only every few samples (`IDLE_READ_EVERY`) or counted out by the
    /// waiter counts, and waiters proven still waiting left unread. Off: every thread read at every
    /// tick (`--no-idle-backoff`).
    pub idle_backoff: bool,
    /// Skip periods while the target is quiet, as inference suggests (infer/quiet.rs).
    pub adaptive_rate: bool,
    /// Use the GIL's waiter counts where the target has them (classify.rs, rule 8).
    pub waiter_counts: bool,
    /// Keep a real-time sampler off the GIL holder's CPU (dodge.rs); off when `--cpus` chose.
    pub dodge_holder: bool,
    /// Read the Python stacks of waiters and holders (stack_watch.rs).
    pub stacks: bool,
    /// For a live view (`gilsample top`): send a `Finding::Live` this often, what is still open and
    /// the threads' names. `None` (recording alone): never.
    pub live_every_ns: Option<u64>,
}

impl SamplerConfig {
    /// The period of a rate: what `--rate` means to the loop, and what a trace's requested rate is
    /// turned back into.
    pub fn period_ns_at(rate_hz: f64) -> u64 {
        (1e9 / rate_hz).round() as u64
    }

    /// The walk for threads that exited: new ones are found at once by the head (module docs).
    pub const DEFAULT_REFRESH_NS: u64 = 100_000_000;
}

/// Counters other threads (the progress bar) read while sampling runs.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Samples taken.
    pub samples: AtomicU64,
    /// Ticks that started more than one period after their deadline.
    pub late: AtomicU64,
    /// Periods let pass while the target was quiet (infer/quiet.rs).
    pub skipped_periods: AtomicU64,
    /// Python threads in the last sample.
    pub threads: AtomicU64,
    /// The sampler has finished.
    pub done: AtomicBool,
    /// How the target is stopped now: `T` (SIGSTOP, Ctrl+Z) or `t` (a debugger), 0 when it runs
    /// (sampler/stop_watch.rs).
    pub stopped: AtomicU8,
    /// The thread that follows the session (record/mod.rs), if it asked to be woken: at the first
    /// sample, when the target stops or continues, and when sampling ends. It waits for these
    /// instead of looking every few milliseconds, a wake-up that would preempt the job's threads
    /// on busy cores. Given when the counters are made, before any other thread sees them.
    pub session: Option<SessionWake>,
}

/// How a sampler wakes the session's thread (`LiveCounters::session`).
pub struct SessionWake(Box<dyn Fn() + Send + Sync>);

impl SessionWake {
    /// Unparks `thread`, which waits with `thread::park_timeout`.
    pub fn unpark(thread: Thread) -> SessionWake {
        SessionWake(Box::new(move || thread.unpark()))
    }
}

impl std::fmt::Debug for SessionWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionWake")
    }
}

impl LiveCounters {
    /// Wakes the session's thread, where one asked to be woken (`session`).
    pub fn wake_session(&self) {
        if let Some(wake) = &self.session {
            (wake.0)();
        }
    }

    /// Counts the samples taken so far; the first wakes the session (it says the recording has
    /// begun).
    pub fn set_samples(&self, samples: u64) {
        if self.samples.swap(samples, Ordering::Relaxed) == 0 && samples > 0 {
            self.wake_session();
        }
    }

    /// Says how the target is stopped now (`stopped`), waking the session when that changed.
    pub fn set_stopped(&self, letter: u8) {
        if self.stopped.swap(letter, Ordering::Relaxed) != letter {
            self.wake_session();
        }
    }

    /// Says the sampler has finished, and wakes the session.
    pub fn set_done(&self) {
        self.done.store(true, Ordering::Release);
        self.wake_session();
    }
}

/// Where the samples and the stacks read go besides inference (`--save-samples`, stream/).
pub trait SampleLog {
    /// One tick's sample, as inference got it.
    fn sample(&mut self, sample: &Sample);
    /// A stack read for that sample (`Finding::Stack` or `Finding::HoldFrames`).
    fn stack(&mut self, stack: &Finding);
    /// Saving failed (the disk is full): the recording stops.
    fn failed(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use super::*;

    fn counted() -> (LiveCounters, Arc<AtomicU32>) {
        let wakes = Arc::new(AtomicU32::new(0));
        let count = wakes.clone();
        let wake = SessionWake(Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        let live = LiveCounters {
            session: Some(wake),
            ..LiveCounters::default()
        };
        (live, wakes)
    }

    #[test]
    fn the_session_is_woken_by_news_only() {
        let (live, wakes) = counted();
        let woken = || wakes.load(Ordering::SeqCst);
        live.set_samples(0);
        assert_eq!(woken(), 0, "no sample yet");
        live.set_samples(1);
        assert_eq!(woken(), 1, "the first sample: the recording has begun");
        live.set_samples(2);
        live.set_samples(3000);
        assert_eq!(woken(), 1, "later samples are no news");
        assert_eq!(live.samples.load(Ordering::Relaxed), 3000);
        live.set_stopped(0);
        assert_eq!(woken(), 1, "still running");
        live.set_stopped(b'T');
        live.set_stopped(b'T');
        assert_eq!(woken(), 2, "stopped, once");
        live.set_stopped(0);
        assert_eq!(woken(), 3, "running again");
        assert!(!live.done.load(Ordering::Acquire));
        live.set_done();
        assert_eq!(woken(), 4);
        assert!(live.done.load(Ordering::Acquire));
    }

    #[test]
    fn without_a_session_to_wake_the_counters_still_count() {
        let live = LiveCounters::default();
        live.set_samples(5);
        live.set_stopped(b't');
        live.set_done();
        assert_eq!(live.samples.load(Ordering::Relaxed), 5);
        assert_eq!(live.stopped.load(Ordering::Relaxed), b't');
        assert!(live.done.load(Ordering::Acquire));
    }
}
