//! The sampler threads. Each drives the `Sampler`s of one or more targets: it sleeps until the
//! earliest of their next ticks and runs every tick that is due, one after another. Every sampler of
//! a session ticks on one grid of periods (`Pace::new`), so targets that share a thread share its
//! wake-ups: with four processes on two busy cores a wake-up cost the job about as much as the reads
//! of a tick (docs/cost.md, "Several processes"), and one thread for all four wakes once a period
//! instead of four times.
//!
//! A thread whose ticks take most of its periods cannot keep its targets' rate: every
//! `OVERLOAD_WINDOW_NS` it looks at how busy it was, and above `OVERLOAD_SHARE` it hands half of its
//! targets to a new thread, down to one target a thread (what every target had before threads were
//! shared).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::Scope;

use crate::infer::findings::Finding;
use crate::process::syscalls::{SyscallCounts, counted};
use crate::python::target::Target;
use crate::sampler::clock::{monotonic_ns, sleep_until, thread_cpu_ns};
use crate::sampler::config::{LiveCounters, SampleLog, SamplerConfig};
use crate::sampler::priority::{Scheduling, apply_to_current_thread};
use crate::sampler::report::{EndReason, SamplerReport};
use crate::sampler::tick_loop::Sampler;

/// Sampler threads are numbered in the order they start (a target's report names its thread).
static THREADS_STARTED: AtomicU64 = AtomicU64::new(0);

/// How often a thread with several targets checks whether its ticks still fit its periods.
const OVERLOAD_WINDOW_NS: u64 = 100_000_000;

/// The share of a window a thread may spend in its targets' ticks before it hands half of them to a
/// new thread: what is left is for the job's threads on that CPU and for ticks that run long.
const OVERLOAD_SHARE: f64 = 0.7;

/// How much of one tick's time a thread's targets are expected to take: the cost zoo's ticks took
/// 10–45 µs each on a 2-core VM at 10 kHz, wake-up included (docs/cost.md). A session starts
/// `targets_per_thread` targets on a thread; an overloaded thread splits later.
const TICK_ESTIMATE_NS: u64 = 15_000;

/// How many of the targets attached at a session's start one sampler thread takes: as many ticks
/// of `TICK_ESTIMATE_NS` as fit in `OVERLOAD_SHARE` of a period (4 at 10 kHz, 44 at 1 kHz), at least
/// one.
pub fn targets_per_thread(period_ns: u64) -> usize {
    let budget = period_ns as f64 * OVERLOAD_SHARE;
    ((budget / TICK_ESTIMATE_NS as f64) as usize).max(1)
}

/// What a target's samples, findings and end go to.
pub trait LaneOutput: Send {
    /// Where the target's findings go, and its saved stream where there is one: borrowed together
    /// for one tick.
    fn parts(&mut self) -> (&mut dyn FnMut(Finding), Option<&mut dyn SampleLog>);
    /// This target's recording must stop: its trace writer or its saved stream failed.
    fn failed(&self) -> bool;
    /// Sampling ended with this report: the trace is finished.
    fn finish(self: Box<Self>, report: SamplerReport);
}

/// One target as a sampler thread is given it.
pub struct Lane<'a> {
    /// The target sampled.
    pub target: &'a Target,
    /// Its counters for the session's progress.
    pub live: &'a LiveCounters,
    /// Where what is read of it goes.
    pub output: Box<dyn LaneOutput + 'a>,
}

/// A lane being sampled, with what its ticks cost.
struct Active<'a> {
    sampler: Sampler<'a>,
    lane: Lane<'a>,
    /// Wall time spent in this lane's ticks on this thread: its share of the thread's CPU time.
    busy_ns: u64,
    /// CPU time charged to it on threads it was handed over from.
    cpu_elsewhere_ns: u64,
    syscalls: SyscallCounts,
}

/// Samples `lanes` on this thread until each ends (`stop`, the duration, its target's exit, its
/// output's failure), then on new threads of `scope` where this one is overloaded.
pub fn drive<'scope, 'env: 'scope>(
    scope: &'scope Scope<'scope, 'env>,
    config: &'env SamplerConfig,
    stop: &'env AtomicBool,
    lanes: Vec<Lane<'env>>,
) {
    let scheduling = apply_to_current_thread(config.priority);
    let alone = lanes.len() == 1;
    let active = lanes
        .into_iter()
        .map(|lane| start(lane, config, scheduling, alone))
        .collect();
    run(scope, config, stop, active);
}

/// The loop of `drive`, for lanes started here or handed over from an overloaded thread.
fn run<'scope, 'env: 'scope>(
    scope: &'scope Scope<'scope, 'env>,
    config: &'env SamplerConfig,
    stop: &'env AtomicBool,
    mut active: Vec<Active<'env>>,
) {
    let mut thread = ThreadCost {
        number: THREADS_STARTED.fetch_add(1, Ordering::Relaxed) + 1,
        targets: active.len(),
        ..ThreadCost::default()
    };
    let mut window = Window::new(monotonic_ns());
    let mut stopping = false;
    while !active.is_empty() {
        let mut index = 0;
        while index < active.len() {
            let failed = stopping || active[index].lane.output.failed();
            match active[index].sampler.ended(failed) {
                Some(end) => thread.finish(active.swap_remove(index), end),
                None => index += 1,
            }
        }
        let Some(first) = (0..active.len()).min_by_key(|&i| active[i].sampler.wake_at()) else {
            break;
        };
        let before = counted();
        sleep_until(active[first].sampler.wake_at());
        let slept = counted().since(&before);
        active[first].syscalls += slept;
        // Read after the sleep, before the ticks: a stop asked by now ends each lane after one more
        // tick, taken whether due or not, so that every recording's last sample comes after its
        // stop was asked and covers the moment the user stopped it. Read before the sleep instead,
        // a stop that came during a tick left that tick, begun before the stop, the last.
        stopping = stop.load(Ordering::Relaxed);
        let now = monotonic_ns();
        let mut index = 0;
        while index < active.len() {
            if !stopping && active[index].sampler.wake_at() > now {
                index += 1;
                continue;
            }
            match thread.tick(&mut active[index], &mut window) {
                Some(end) => thread.finish(active.swap_remove(index), end),
                None => index += 1,
            }
        }
        if active.len() > 1 && window.overloaded(monotonic_ns()) {
            let handed: Vec<Active<'env>> = active
                .split_off(active.len() / 2)
                .into_iter()
                .map(|a| thread.hand_over(a))
                .collect();
            scope.spawn(move || {
                apply_to_current_thread(config.priority);
                run(scope, config, stop, handed)
            });
        }
    }
}

fn start<'a>(
    lane: Lane<'a>,
    config: &'a SamplerConfig,
    scheduling: Scheduling,
    alone: bool,
) -> Active<'a> {
    let (before, began) = (counted(), monotonic_ns());
    let sampler = Sampler::start(lane.target, config, lane.live, scheduling, alone);
    Active {
        sampler,
        lane,
        busy_ns: monotonic_ns() - began,
        cpu_elsewhere_ns: 0,
        syscalls: counted().since(&before),
    }
}

/// How busy a thread was since the window began.
struct Window {
    began_ns: u64,
    busy_ns: u64,
}

impl Window {
    fn new(now: u64) -> Window {
        Window {
            began_ns: now,
            busy_ns: 0,
        }
    }

    /// At the end of a window: whether its ticks took over `OVERLOAD_SHARE` of it. Starts the next.
    fn overloaded(&mut self, now: u64) -> bool {
        let length = now - self.began_ns;
        if length < OVERLOAD_WINDOW_NS {
            return false;
        }
        let share = self.busy_ns as f64 / length as f64;
        *self = Window::new(now);
        share > OVERLOAD_SHARE
    }
}

/// The thread's time in ticks, over every lane it has had: each lane's CPU time is the thread's in
/// proportion to its ticks' wall time.
#[derive(Default)]
struct ThreadCost {
    /// The thread's number, and how many targets it was given.
    number: u64,
    targets: usize,
    busy_ns: u64,
    /// CPU time of lanes handed to other threads, which this thread's clock counts but no lane here
    /// is charged with.
    handed_cpu_ns: u64,
    handed_busy_ns: u64,
}

impl ThreadCost {
    fn tick(&mut self, active: &mut Active<'_>, window: &mut Window) -> Option<EndReason> {
        let (before, began) = (counted(), monotonic_ns());
        let (sink, mut log) = active.lane.output.parts();
        let end = active.sampler.tick(active.lane.live, sink, &mut log);
        let took = monotonic_ns() - began;
        active.busy_ns += took;
        active.syscalls += counted().since(&before);
        self.busy_ns += took;
        window.busy_ns += took;
        end
    }

    /// The CPU time charged to a lane that took `busy_ns` of the thread's ticks, of the thread's
    /// `thread_cpu` so far.
    fn cpu_of(&self, busy_ns: u64, thread_cpu: u64) -> u64 {
        let cpu = thread_cpu.saturating_sub(self.handed_cpu_ns);
        let busy = self.busy_ns.saturating_sub(self.handed_busy_ns).max(1);
        (u128::from(cpu) * u128::from(busy_ns) / u128::from(busy)) as u64
    }

    fn finish(&mut self, active: Active<'_>, end: EndReason) {
        let cpu = active.cpu_elsewhere_ns + self.cpu_of(active.busy_ns, thread_cpu_ns());
        let Active {
            sampler,
            mut lane,
            syscalls,
            ..
        } = active;
        let mut report = {
            let (sink, mut log) = lane.output.parts();
            sampler.finish(end, (cpu, syscalls), lane.live, sink, &mut log)
        };
        report.sampler_thread = self.number;
        report.targets_on_thread = self.targets;
        lane.output.finish(report);
    }

    /// A lane given to another thread: what this thread spent on it goes with it, and stays out of
    /// the shares of the lanes it keeps.
    fn hand_over<'a>(&mut self, mut active: Active<'a>) -> Active<'a> {
        let cpu = self.cpu_of(active.busy_ns, thread_cpu_ns());
        self.handed_cpu_ns += cpu;
        self.handed_busy_ns += active.busy_ns;
        active.cpu_elsewhere_ns += cpu;
        active.busy_ns = 0;
        active
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_takes_as_many_targets_as_estimated_ticks_fit_in_most_of_a_period() {
        assert_eq!(targets_per_thread(100_000), 4); // 10 kHz
        assert_eq!(targets_per_thread(1_000_000), 46); // 1 kHz
        assert_eq!(targets_per_thread(20_000), 1); // 50 kHz: one each, as before threads were shared
        assert_eq!(targets_per_thread(1), 1);
    }

    #[test]
    fn a_thread_is_overloaded_only_at_a_windows_end_and_past_the_share() {
        let mut window = Window::new(0);
        window.busy_ns = OVERLOAD_WINDOW_NS; // busy all along, but the window is not over
        assert!(!window.overloaded(OVERLOAD_WINDOW_NS - 1));
        assert!(window.overloaded(OVERLOAD_WINDOW_NS));
        // The next window starts empty.
        assert_eq!((window.began_ns, window.busy_ns), (OVERLOAD_WINDOW_NS, 0));
        let start = window.began_ns;
        window.busy_ns = (OVERLOAD_WINDOW_NS as f64 * OVERLOAD_SHARE) as u64 - 1;
        assert!(!window.overloaded(start + OVERLOAD_WINDOW_NS));
        window.busy_ns = (OVERLOAD_WINDOW_NS as f64 * OVERLOAD_SHARE) as u64 + 1_000;
        assert!(window.overloaded(start + 2 * OVERLOAD_WINDOW_NS));
    }

    #[test]
    fn each_target_is_charged_the_threads_cpu_in_proportion_to_its_ticks() {
        let cost = ThreadCost {
            busy_ns: 4_000,
            handed_busy_ns: 1_000,
            handed_cpu_ns: 600,
            ..ThreadCost::default()
        };
        // 3,000 of CPU left to the lanes kept, whose ticks took 3,000 ns: split 1 : 2.
        assert_eq!(cost.cpu_of(1_000, 3_600), 1_000);
        assert_eq!(cost.cpu_of(2_000, 3_600), 2_000);
        // A thread whose ticks took no time yet charges nothing, and never divides by zero.
        assert_eq!(ThreadCost::default().cpu_of(0, 5_000), 0);
    }
}
