//! Idle threads left unread while the GIL's waiter counts rule them out (infer/counted_out.rs),
//! judged on real streams of every interpreter of the suite. The streams are recorded with
//! `--no-idle-backoff` (every thread read at every tick) and `GILSAMPLE_CHECK_COUNTED_OUT` (both
//! waiter counts saved at every tick), so each tick holds what the rule saw and every thread's real
//! state. A replay of the sampler's view decides at each tick which idle threads the rule leaves
//! unread, keeping their last reading as the sampler does; the engine, stepped on the real readings,
//! says what state each of them was really in.
//!
//! What must hold: no thread is left unread at two ticks in a row while it is really inside the GIL
//! (waiting for it, holding it or handing it off). The rule's own blind spot (module docs there) is a
//! wait that begins and ends within one tick's reads; a wait that lasts is seen at the next tick.
//! The streams hold two count reads a tick, so the replay judges each tick's first try only; the
//! sampler's retries (sampler/thread_reads.rs, `count_out`) apply the same rule to later readings.

#[macro_use]
mod common;

use std::collections::BTreeMap;

use common::{record_checked_into, saved_samples};
use gilsample::infer::classify::asleep_elsewhere;
use gilsample::infer::counted_out::{ReadThreads, asleep_in_waits, unread_are_outside_the_gil};
use gilsample::infer::engine::Engine;
use gilsample::infer::intervals::GilState;
use gilsample::infer::sample::{Sample, SampleContext};
use gilsample::observed::KernelState;
use gilsample::sampler::thread_reads::{CHECK_COUNTED_OUT, IDLE_AFTER_NS};

/// A 1 s recording of a sleeper that naps 50 ms and then has to wait for two spinners' GIL, a
/// hasher, and four threads idle throughout.
fn record(label: &str) -> (SampleContext, Vec<Sample>) {
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("run.gilsamples");
    let scenario = ["released", "--threads", "2", "--idle", "4"];
    let args = ["--duration", "1", "--no-idle-backoff", "--save-samples"];
    let args = [&args[..], &[stream.to_str().unwrap()]].concat();
    record_checked_into(label, &scenario, &args, CHECK_COUNTED_OUT, dir.path());
    saved_samples(&stream)
}

/// What the sampler knows of one thread: its last reading and since when it has slept in that
/// same non-GIL wait (sampler/tick_loop.rs, `read_tracked`).
#[derive(Clone, Copy)]
struct View {
    kernel: Option<KernelState>,
    idle_since: Option<u64>,
}

fn no_thread_stays_unread_in_the_gil(label: &str) {
    let (context, samples) = record(label);
    let ranges = context.ranges;
    let mut engine = Engine::new(context.clone());
    // Every thread's state at every sample, parked or not, is what the rule is judged against.
    engine.without_parking();
    let mut views: BTreeMap<u32, View> = BTreeMap::new();
    // Threads left unread at the last tick while really in the GIL.
    let mut missed_last: Vec<u32> = Vec::new();
    let (mut judged, mut left_unread, mut missed_once) = (0, 0, 0);
    for sample in &samples {
        let (Some(counted), Some(again)) = (sample.waiters, sample.waiters_again) else {
            continue;
        };
        judged += 1;
        let in_gil = |i: usize| {
            let t = &sample.threads[i];
            sample.word.last_holder == t.tstate || sample.mutex_owner == Some(t.their_tid)
        };
        let idle = |i: usize| {
            let t = &sample.threads[i];
            let since = views.get(&t.tid).and_then(|v| v.idle_since);
            !in_gil(i) && since.is_some_and(|s| sample.read_ns.saturating_sub(s) >= IDLE_AFTER_NS)
        };
        let unread: Vec<usize> = (0..sample.threads.len()).filter(|&i| idle(i)).collect();
        let read_threads = || {
            sample
                .threads
                .iter()
                .enumerate()
                .filter(|(i, _)| !unread.contains(i))
                .map(|(_, t)| t)
        };
        // Read threads other than the holder that slept on gil.cond at their last reading and are
        // runnable now (sampler/thread_reads.rs keeps the same list).
        let woken_from_cond = (0..sample.threads.len())
            .filter(|i| !unread.contains(i))
            .filter(|&i| {
                let t = &sample.threads[i];
                let was_on_cond = views
                    .get(&t.tid)
                    .and_then(|v| v.kernel)
                    .and_then(|k| k.futex_addr())
                    .is_some_and(|a| ranges.on_cond(a));
                !in_gil(i) && was_on_cond && t.kernel == Some(KernelState::Running)
            })
            .count() as u32;
        let read = ReadThreads {
            woken_from_cond,
            asleep: asleep_in_waits(read_threads(), &ranges),
            mutex_owner_read: match sample.mutex_owner {
                None | Some(0) => true,
                Some(owner) => read_threads().any(|t| t.their_tid == owner),
            },
        };
        // Samples do not keep the GIL mutex's lock word, which the sampler reads with the counts: a
        // thread really asleep on the mutex stands for it (the word is 2 then, so the sampler reads
        // the idle threads at least at those ticks: this replay leaves out no fewer than it).
        let on_mutex = |t: &&gilsample::infer::sample::ThreadSample| {
            t.kernel
                .and_then(|k| k.futex_addr())
                .is_some_and(|a| ranges.on_mutex(a))
        };
        let contended = Some(sample.threads.iter().any(|t| on_mutex(&t)));
        let proven =
            !unread.is_empty() && unread_are_outside_the_gil(counted, again, read, contended);
        engine.step(sample, &mut |_| {});
        let really: BTreeMap<usize, GilState> = engine
            .decided()
            .iter()
            .map(|d| (d.index, d.state))
            .collect();
        let mut missed_now = Vec::new();
        for (i, seen) in sample.threads.iter().enumerate() {
            let left = proven && unread.contains(&i);
            if left {
                left_unread += 1;
                let state = really.get(&i).copied();
                if matches!(
                    state,
                    Some(GilState::Take | GilState::Hold | GilState::Drop)
                ) {
                    assert!(
                        !missed_last.contains(&seen.tid),
                        "{label}: thread {} left unread at two ticks in a row while in {state:?} \
                         (counts {counted:?}/{again:?}, read {read:?}, at {} ns)",
                        seen.tid,
                        sample.read_ns
                    );
                    missed_once += 1;
                    missed_now.push(seen.tid);
                }
                // Unread: the sampler keeps what it knew.
                continue;
            }
            let view = views.entry(seen.tid).or_insert(View {
                kernel: None,
                idle_since: None,
            });
            let same_wait = seen.kernel.is_some() && seen.kernel == view.kernel;
            view.idle_since = match seen.kernel {
                Some(k) if asleep_elsewhere(&k, &ranges) => {
                    if same_wait {
                        view.idle_since.or(Some(sample.read_ns))
                    } else {
                        Some(sample.read_ns)
                    }
                }
                _ => None,
            };
            view.kernel = seen.kernel;
        }
        missed_last = missed_now;
    }
    // The rule had something to decide: idle threads, ticks at which it left them unread.
    assert!(judged > 100, "{label}: {judged} ticks with both counts");
    assert!(
        left_unread > 0,
        "{label}: no idle thread was ever left unread in {judged} ticks"
    );
    gilsample::stderr_line!(
        "{label}: {judged} ticks, {left_unread} readings left out, {missed_once} of them one tick \
         of a wait that began and ended between two ticks"
    );
}

macro_rules! counted_out_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn no_thread_stays_unread_in_the_gil() {
                    super::no_thread_stays_unread_in_the_gil($label)
                }
            }
        )*
    };
}

every_expected_interpreter!(counted_out_tests);
