//! From one process's slices to the answer: per thread its time in each state, its waits'
//! durations, and whom it waited for — every moment of a wait is blamed on the thread holding the
//! GIL at that moment (where the trace shows a holder), and on the holder's code where the trace
//! has it. Also the stretches a holder kept the GIL while asleep in a syscall, with the time others
//! waited meanwhile. Pure: no I/O.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::report::gaps;
use crate::report::hold_code::{HeldIn, HoldKey, HoldTime, hold_key, places};
use crate::report::load::{ProcessTrace, Slice, SliceKind};
use crate::report::other_data::RecordingFacts;
use crate::report::slice_index::SliceIndex;

/// The answer for one process; the shape of `gilsample report --json` (docs/report-json.md).
#[derive(Clone, Debug, Serialize)]
pub struct ProcessAnswer {
    /// The process's pid as its trace names it.
    pub pid: u32,
    /// What its trace says of the recording: rank and host (in the JSON), and what decides how
    /// the answer is counted and said (which recording, the rate asked, a stopped process).
    #[serde(flatten)]
    pub facts: RecordingFacts,
    /// The trace file the answer is of.
    pub file: String,
    /// Seconds the answer covers: the recording's window, else from the first slice to the last;
    /// the time the process was stopped left out (`stopped_s`).
    pub window_s: f64,
    /// Seconds of the window during which the process was found stopped (SIGSTOP, Ctrl+Z, a
    /// debugger): its waits then were the stop's, and are left out of every figure
    /// (report/stopped.rs).
    pub stopped_s: f64,
    /// Seconds of the window the sampler saw nothing of, the process not stopped then: it fell
    /// behind by more than the timeline bridges (report/gaps.rs), so no thread's state is known
    /// there. Left out of every figure, as `stopped_s` is.
    pub unseen_s: f64,
    /// The switch interval the holds were judged against: the trace's, else CPython's default.
    pub switch_interval_ms: f64,
    /// Share of the window during which some thread held the GIL.
    pub gil_busy_share: f64,
    /// Share of the window during which the GIL was held by code importing a module (a stack through
    /// `importlib._bootstrap`): the program starting, not yet at its work. `None` where no hold has
    /// a stack (the trace cannot say).
    pub importing_share: Option<f64>,
    /// Threads waiting for the GIL, on average over the window.
    pub mean_waiters: f64,
    /// Of the threads the samples found waiting, the share found while the GIL was free: woken to
    /// take it, with no CPU yet. `None` where the trace does not say (not gilsample's, or no waits).
    pub waiting_with_gil_free_share: Option<f64>,
    /// Sorted by `wait_s`, largest first.
    pub threads: Vec<ThreadAnswer>,
}

/// From this share of the recording unseen (the sampler fell behind), the answer's headline says
/// how much was left out; under it the figures move by less than they round to.
const UNSEEN_SAID_SHARE: f64 = 0.01;

impl ProcessAnswer {
    /// The whole time the answer is of, seconds: the window with the time left out of it (the
    /// process stopped, the sampler seeing nothing) put back.
    pub fn length_s(&self) -> f64 {
        self.window_s + self.stopped_s + self.unseen_s
    }

    /// The share of `length_s` the sampler saw nothing of, where it is worth a word beside the
    /// figures (`UNSEEN_SAID_SHARE`).
    pub fn unseen_share_worth_saying(&self) -> Option<f64> {
        let share = self.unseen_s / self.length_s();
        (self.unseen_s > 0.0 && share >= UNSEEN_SAID_SHARE).then_some(share)
    }
}

/// The answer for one thread (docs/report-json.md).
#[derive(Clone, Debug, Serialize)]
pub struct ThreadAnswer {
    /// The thread's id as the trace names it.
    pub tid: u32,
    /// Its name in the trace (`thread <tid>` without one; the tid added where two share a name).
    pub name: String,
    /// Seconds holding the GIL (`hold_gil`).
    pub hold_s: f64,
    /// Seconds waiting for it (`take_gil`).
    pub wait_s: f64,
    /// Seconds handing it off (`drop_gil`).
    pub drop_s: f64,
    /// Seconds between its first slice and its last spent in none of those, the time the
    /// process was stopped or the sampler saw nothing of left out.
    pub released_s: f64,
    /// Its waits' count and lengths.
    pub waits: Durations,
    /// Its holds' count and lengths.
    pub holds: Durations,
    /// Sorted by seconds, largest first. A holder of `tid` 0 stands for time no holder was seen.
    pub waited_for: Vec<Holder>,
    /// Where its holds were: Python code by function, native calls by call site; largest first.
    pub hold_functions: Vec<HeldIn>,
    /// Where it held the GIL while asleep in a syscall, by syscall, largest first.
    pub held_while_blocked: Vec<Blocked>,
}

/// How many slices of a kind, and their lengths' median, 99th percentile and maximum, ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Durations {
    /// How many slices.
    pub count: u64,
    /// Median length, ms.
    pub p50_ms: f64,
    /// 99th-percentile length, ms.
    pub p99_ms: f64,
    /// Longest, ms.
    pub max_ms: f64,
}

/// A thread that held the GIL while another waited, and for how long of those waits.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    /// The holder's id as the trace names it; `NO_HOLDER_SEEN` for time no holder was seen.
    pub tid: u32,
    /// The holder's name (`no holder seen` for `NO_HOLDER_SEEN`).
    pub name: String,
    /// Seconds of the waiter's waits it held the GIL for.
    pub s: f64,
    /// The holder's code during those waits (innermost function, or native call), where the trace
    /// has stacks.
    pub functions: Vec<HeldIn>,
}

/// Holding the GIL while asleep in one syscall, summed over a thread's stretches.
#[derive(Clone, Debug, Serialize)]
pub struct Blocked {
    /// The syscall's name.
    pub syscall: String,
    /// Seconds held in it.
    pub s: f64,
    /// Seconds other threads spent waiting for the GIL meanwhile (summed over them).
    pub others_waited_s: f64,
}

/// The tid under which wait time with no holder in sight is filed.
pub const NO_HOLDER_SEEN: u32 = 0;

fn seconds(ns: i128) -> f64 {
    ns as f64 / 1e9
}

/// Durations' count and percentiles (nearest rank).
fn durations(mut ns: Vec<i128>) -> Durations {
    if ns.is_empty() {
        return Durations::default();
    }
    ns.sort_unstable();
    let rank = |p: f64| {
        let i = ((p * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1;
        ns[i] as f64 / 1e6
    };
    Durations {
        count: ns.len() as u64,
        p50_ms: rank(0.50),
        p99_ms: rank(0.99),
        max_ms: *ns.last().unwrap() as f64 / 1e6,
    }
}

/// Total length of the union of the slices of `kind`.
fn union_ns<'a>(slices: impl Iterator<Item = &'a Slice>) -> i128 {
    let mut spans: Vec<(i128, i128)> = slices.map(|s| (s.start_ns, s.end_ns)).collect();
    spans.sort_unstable();
    let mut total = 0;
    let mut current: Option<(i128, i128)> = None;
    for (s, e) in spans {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + current.map_or(0, |(s, e)| e - s)
}

fn sorted_by_seconds<K: Ord + Clone>(map: &BTreeMap<K, i128>) -> Vec<(K, f64)> {
    let mut v: Vec<(K, f64)> = map
        .iter()
        .map(|(k, &ns)| (k.clone(), seconds(ns)))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

#[derive(Default)]
struct ThreadAcc {
    /// Time in `take_gil` (waiting), holding, and in `drop_gil` (handing off), in ns.
    wait_ns: i128,
    hold_ns: i128,
    drop_ns: i128,
    first: Option<i128>,
    last: Option<i128>,
    waits: Vec<i128>,
    holds: Vec<i128>,
    /// holder tid -> (ns, where the holder held it -> time)
    waited_for: BTreeMap<u32, (i128, BTreeMap<HoldKey, HoldTime>)>,
    hold_functions: BTreeMap<HoldKey, HoldTime>,
    blocked: BTreeMap<String, (i128, i128)>,
}

/// Each thread's slices summed, every moment of a wait blamed on the holder of that moment.
struct Accumulator<'a> {
    process: &'a ProcessTrace,
    holds: SliceIndex<'a>,
    takes: SliceIndex<'a>,
    threads: HashMap<u32, ThreadAcc>,
}

impl<'a> Accumulator<'a> {
    fn new(process: &'a ProcessTrace) -> Self {
        Accumulator {
            process,
            holds: SliceIndex::new(&process.slices, SliceKind::Hold),
            takes: SliceIndex::new(&process.slices, SliceKind::Take),
            threads: HashMap::new(),
        }
    }

    /// Where a hold's time goes: only holds whose code is known, or that were one native call.
    fn place(&self, h: &Slice) -> Option<HoldKey> {
        let key = hold_key(self.process, &self.takes, h);
        (key.label.is_some() || key.native.is_some()).then_some(key)
    }

    fn add(&mut self, slice: &Slice) {
        let acc = self.threads.entry(slice.tid).or_default();
        let len = slice.end_ns - slice.start_ns;
        acc.first = Some(acc.first.map_or(slice.start_ns, |f| f.min(slice.start_ns)));
        acc.last = Some(acc.last.map_or(slice.end_ns, |l| l.max(slice.end_ns)));
        match slice.kind {
            SliceKind::Take => {
                acc.wait_ns += len;
                acc.waits.push(len);
                self.add_wait_blame(slice, len);
            }
            SliceKind::Hold => {
                acc.hold_ns += len;
                acc.holds.push(len);
                if let Some(key) = self.place(slice) {
                    let acc = self.threads.entry(slice.tid).or_default();
                    acc.hold_functions.entry(key).or_default().add(len, len);
                }
            }
            SliceKind::Drop => acc.drop_ns += len,
            SliceKind::HeldWhileBlocked => self.add_held_while_blocked(slice, len),
        }
    }

    /// Each moment of a wait of `len` ns, blamed on the thread that held the GIL then.
    fn add_wait_blame(&mut self, slice: &Slice, len: i128) {
        let mut blamed = 0;
        let mut blame: Vec<(u32, Option<HoldKey>, i128, i128)> = Vec::new();
        self.holds
            .overlapping(slice.start_ns, slice.end_ns, |h, overlap| {
                if h.tid != slice.tid {
                    blamed += overlap;
                    blame.push((h.tid, self.place(h), overlap, h.end_ns - h.start_ns));
                }
            });
        // Holds that overlap each other (possible in inferred reference holds, never in
        // gilsample's, which see one holder per sample) share the moment they overlap.
        if blamed > len {
            for entry in &mut blame {
                // In floating point: the product of two spans of crafted input can
                // overflow even an i128.
                entry.2 = (entry.2 as f64 * len as f64 / blamed as f64) as i128;
            }
            blamed = blame.iter().map(|b| b.2).sum();
        }
        let acc = self.threads.entry(slice.tid).or_default();
        for (holder, key, ns, hold_ns) in blame {
            let entry = acc.waited_for.entry(holder).or_default();
            entry.0 += ns;
            if let Some(key) = key {
                entry.1.entry(key).or_default().add(ns, hold_ns);
            }
        }
        if len > blamed {
            acc.waited_for.entry(NO_HOLDER_SEEN).or_default().0 += len - blamed;
        }
    }

    /// A stretch held while asleep in a syscall, with the time other threads waited meanwhile.
    fn add_held_while_blocked(&mut self, slice: &Slice, len: i128) {
        let mut others = 0;
        self.takes
            .overlapping(slice.start_ns, slice.end_ns, |t, overlap| {
                if t.tid != slice.tid {
                    others += overlap;
                }
            });
        let syscall = slice
            .label
            .map(|i| self.process.labels[i as usize].clone())
            .unwrap_or_else(|| "a syscall".into());
        let acc = self.threads.entry(slice.tid).or_default();
        let entry = acc.blocked.entry(syscall).or_default();
        entry.0 += len;
        entry.1 += others;
    }
}

/// One thread's answer; `left_out`: the spans no figure counts (stops and gaps, joined).
fn thread_answer(
    process: &ProcessTrace,
    tid: u32,
    acc: ThreadAcc,
    left_out: &[(i128, i128)],
) -> ThreadAnswer {
    let (first, last) = (acc.first.unwrap_or(0), acc.last.unwrap_or(0));
    let span = last - first - gaps::covered(left_out, (first, last));
    let in_gil: i128 = acc.wait_ns + acc.hold_ns + acc.drop_ns;
    let waited_for = {
        let totals: BTreeMap<u32, i128> = acc.waited_for.iter().map(|(k, v)| (*k, v.0)).collect();
        sorted_by_seconds(&totals)
            .into_iter()
            .map(|(holder, s)| Holder {
                tid: holder,
                name: if holder == NO_HOLDER_SEEN {
                    "no holder seen".into()
                } else {
                    process.thread_name(holder)
                },
                s,
                functions: places(process, &acc.waited_for[&holder].1),
            })
            .collect()
    };
    ThreadAnswer {
        tid,
        name: process.thread_name(tid),
        hold_s: seconds(acc.hold_ns),
        wait_s: seconds(acc.wait_ns),
        drop_s: seconds(acc.drop_ns),
        released_s: seconds((span - in_gil).max(0)),
        waits: durations(acc.waits),
        holds: durations(acc.holds),
        waited_for,
        hold_functions: places(process, &acc.hold_functions),
        held_while_blocked: {
            let mut v: Vec<Blocked> = acc
                .blocked
                .iter()
                .map(|(syscall, &(ns, others))| Blocked {
                    syscall: syscall.clone(),
                    s: seconds(ns),
                    others_waited_s: seconds(others),
                })
                .collect();
            v.sort_by(|a, b| b.s.total_cmp(&a.s));
            v
        },
    }
}

/// Marks each answer whose parent process is another of `answers` on the same host
/// (`RecordingFacts::parent_among_answers`): the worker processes of a job that was recorded whole.
pub fn note_children<'a>(answers: impl IntoIterator<Item = &'a mut ProcessAnswer>) {
    let mut answers: Vec<&mut ProcessAnswer> = answers.into_iter().collect();
    let here: std::collections::HashSet<(Option<String>, u32)> = answers
        .iter()
        .map(|a| (a.facts.host.clone(), a.pid))
        .collect();
    for answer in &mut answers {
        answer.facts.parent_among_answers = answer
            .facts
            .parent_pid
            .is_some_and(|parent| here.contains(&(answer.facts.host.clone(), parent)));
    }
}

/// The answer for one process of a trace: per thread its waits and holds, whom it waited for and
/// where the GIL was held.
pub fn analyze(process: &ProcessTrace) -> ProcessAnswer {
    let slices = &process.slices;
    let (window_start, window_end) = process.facts.window_ns.unwrap_or_else(|| {
        let start = slices.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let end = slices.iter().map(|s| s.end_ns).max().unwrap_or(0);
        (start, end)
    });
    let whole = (window_start, window_end);
    let stopped = gaps::covered(&process.facts.stops_ns, whole);
    // What no figure counts: the stops, and the gaps outside them.
    let left_out = gaps::union(&process.facts.stops_ns, &process.gaps_ns);
    let not_running_or_unseen = gaps::covered(&left_out, whole);
    let window = (window_end - window_start - not_running_or_unseen).max(0);
    let mut accumulator = Accumulator::new(process);
    for slice in slices {
        accumulator.add(slice);
    }
    let mut answers: Vec<ThreadAnswer> = accumulator
        .threads
        .into_iter()
        .map(|(tid, acc)| thread_answer(process, tid, acc, &left_out))
        .collect();
    answers.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s).then(a.tid.cmp(&b.tid)));
    let total_wait: i128 = slices
        .iter()
        .filter(|s| s.kind == SliceKind::Take)
        .map(|s| s.end_ns - s.start_ns)
        .sum();
    let holds = || slices.iter().filter(|s| s.kind == SliceKind::Hold);
    let ratio = |ns: i128| {
        if window > 0 {
            ns as f64 / window as f64
        } else {
            0.0
        }
    };
    ProcessAnswer {
        facts: process.facts.clone(),
        pid: process.pid,
        file: process.file.display().to_string(),
        window_s: seconds(window),
        stopped_s: seconds(stopped),
        unseen_s: seconds((not_running_or_unseen - stopped).max(0)),
        switch_interval_ms: process
            .facts
            .switch_interval_us
            .unwrap_or(crate::infer::native_call::DEFAULT_SWITCH_INTERVAL_US)
            as f64
            / 1000.0,
        gil_busy_share: ratio(union_ns(holds())).min(1.0),
        importing_share: holds()
            .any(|s| s.label.is_some())
            .then(|| ratio(union_ns(holds().filter(|s| s.importing))).min(1.0)),
        mean_waiters: ratio(total_wait),
        waiting_with_gil_free_share: process
            .facts
            .waiting_samples
            .filter(|&(all, _)| all > 0)
            .map(|(all, free)| free as f64 / all as f64),
        threads: answers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(kind: SliceKind, tid: u32, start_ms: i128, end_ms: i128) -> Slice {
        Slice {
            kind,
            tid,
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
            label: None,
            held: Default::default(),
            importing: false,
        }
    }

    #[test]
    fn every_moment_of_a_wait_is_blamed_on_the_holder_of_that_moment() {
        let mut process = ProcessTrace::default();
        process.pid = 1;
        process.facts.window_ns = Some((0, 100_000_000));
        process.names.insert(2, "prefetch-0".into());
        process.names.insert(3, "prefetch-1".into());
        process.labels.push("parse (p.py:4)".into());
        let mut hold = slice(SliceKind::Hold, 2, 0, 30);
        hold.label = Some(0);
        process.slices = vec![
            slice(SliceKind::Take, 1, 10, 60),
            hold,
            slice(SliceKind::Hold, 3, 30, 50),
            // 50..60: nobody seen holding
            slice(SliceKind::Hold, 1, 60, 100),
        ];
        let answer = analyze(&process);
        let main = answer.threads.iter().find(|t| t.tid == 1).unwrap();
        assert_eq!(main.wait_s, 0.05);
        assert_eq!(main.waits.count, 1);
        let blamed: Vec<(u32, f64)> = main.waited_for.iter().map(|h| (h.tid, h.s)).collect();
        assert_eq!(blamed, vec![(2, 0.02), (3, 0.02), (NO_HOLDER_SEEN, 0.01)]);
        assert_eq!(main.waited_for[0].name, "prefetch-0");
        assert_eq!(main.waited_for[0].functions[0].function, "parse (p.py:4)");
        assert_eq!(
            answer.waiting_with_gil_free_share, None,
            "the trace does not say"
        );
        process.facts.waiting_samples = Some((0, 0));
        assert_eq!(
            analyze(&process).waiting_with_gil_free_share,
            None,
            "no wait seen"
        );
        process.facts.waiting_samples = Some((8, 2));
        assert_eq!(analyze(&process).waiting_with_gil_free_share, Some(0.25));
        assert_eq!(
            answer.threads[0].tid, 1,
            "the thread that waited most comes first"
        );
        assert!(
            (answer.gil_busy_share - 0.9).abs() < 1e-9,
            "held 0-50 and 60-100 of 100 ms"
        );
        assert!((answer.mean_waiters - 0.5).abs() < 1e-9);
        assert_eq!(
            answer.importing_share,
            Some(0.0),
            "a hold with a stack, none importing"
        );
    }

    #[test]
    fn the_share_of_the_window_held_by_imports() {
        let mut process = ProcessTrace::default();
        process.pid = 1;
        process.facts.window_ns = Some((0, 100_000_000));
        process.labels.push("<module> (torch/__init__.py:3)".into());
        let mut importing = slice(SliceKind::Hold, 1, 0, 60);
        (importing.label, importing.importing) = (Some(0), true);
        // Two threads importing at once count once.
        let mut beside = slice(SliceKind::Hold, 2, 20, 70);
        beside.importing = true;
        process.slices = vec![importing, beside, slice(SliceKind::Hold, 1, 80, 100)];
        let share = analyze(&process).importing_share.unwrap();
        assert!((share - 0.7).abs() < 1e-9, "{share}");
        for slice in &mut process.slices {
            slice.label = None;
        }
        assert_eq!(
            analyze(&process).importing_share,
            None,
            "no stack: cannot say"
        );
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let d = durations((1..=100).map(|ms| ms * 1_000_000).collect());
        assert_eq!(
            (d.count, d.p50_ms, d.p99_ms, d.max_ms),
            (100, 50.0, 99.0, 100.0)
        );
        assert_eq!(durations(Vec::new()).count, 0);
    }

    #[test]
    fn time_others_waited_while_a_holder_was_blocked() {
        let mut process = ProcessTrace::default();
        process.pid = 1;
        process.labels.push("read".into());
        let mut blocked = slice(SliceKind::HeldWhileBlocked, 2, 10, 40);
        blocked.label = Some(0);
        process.slices = vec![
            slice(SliceKind::Hold, 2, 0, 50),
            blocked,
            slice(SliceKind::Take, 1, 0, 50),
            slice(SliceKind::Take, 3, 20, 50),
        ];
        let answer = analyze(&process);
        let holder = answer.threads.iter().find(|t| t.tid == 2).unwrap();
        assert_eq!(holder.held_while_blocked[0].syscall, "read");
        assert!((holder.held_while_blocked[0].s - 0.03).abs() < 1e-9);
        assert!((holder.held_while_blocked[0].others_waited_s - 0.05).abs() < 1e-9);
    }
    #[test]
    fn what_the_sampler_saw_nothing_of_is_left_out_of_every_figure() {
        // 100 ms recorded; the sampler saw nothing from 30 to 80 ms (a gap: no slice there).
        let mut process = ProcessTrace::default();
        process.pid = 1;
        process.facts.window_ns = Some((0, 100_000_000));
        process.slices = vec![
            slice(SliceKind::Hold, 1, 0, 30),
            slice(SliceKind::Take, 2, 0, 30),
            slice(SliceKind::Hold, 1, 80, 100),
            slice(SliceKind::Take, 2, 80, 100),
        ];
        let unseen = analyze(&process);
        // Without the gap, its 50 ms read as the GIL free and the waiter released.
        assert!((unseen.gil_busy_share - 0.5).abs() < 1e-9);
        process.gaps_ns = vec![(30_000_000, 80_000_000)];
        let answer = analyze(&process);
        assert!((answer.window_s - 0.05).abs() < 1e-9, "{}", answer.window_s);
        assert!((answer.unseen_s - 0.05).abs() < 1e-9);
        assert_eq!(answer.stopped_s, 0.0);
        assert!((answer.gil_busy_share - 1.0).abs() < 1e-9);
        assert!((answer.mean_waiters - 1.0).abs() < 1e-9);
        let waiter = answer.threads.iter().find(|t| t.tid == 2).unwrap();
        assert_eq!(waiter.released_s, 0.0);
        // A stop over part of the gap is the stop's, not counted twice.
        process.facts.stops_ns = vec![(20_000_000, 40_000_000)];
        let answer = analyze(&process);
        assert!((answer.stopped_s - 0.02).abs() < 1e-9);
        assert!((answer.unseen_s - 0.04).abs() < 1e-9);
        assert!((answer.window_s - 0.04).abs() < 1e-9);
    }
}
