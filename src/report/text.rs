//! The answer in words, most important first: per process a headline, the threads that waited most
//! with whom they waited for and in what code, the holders that kept the GIL while blocked, and a
//! hint of what that usually means; across processes, which waited most.

use std::fmt::Write;

use crate::report::analyze::{Holder, NO_HOLDER_SEEN, ProcessAnswer, ThreadAnswer};
use crate::report::hold_code::HeldIn;
use crate::report::phrases::{ms, pct, place};

/// At most this many threads per process are listed; the rest are counted.
pub const MAX_THREADS_SHOWN: usize = 10;
/// At most this many holders per waiter, and functions per holder.
const MAX_HOLDERS_SHOWN: usize = 3;
const MAX_FUNCTIONS_SHOWN: usize = 2;
/// A thread whose waits are under this share of the window is not worth a line.
const NOTABLE_WAIT_SHARE: f64 = 0.01;

/// From this share of the recording held by imports the headline says it: a tenth of a recording
/// spent starting changes what its figures mean.
const IMPORTING_SAID_SHARE: f64 = 0.1;

/// `1,267`
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The headline of one process.
pub fn headline(p: &ProcessAnswer) -> String {
    let whose = whose(p);
    if nothing_seen_running(p) {
        return if p.stopped_s > 0.0 {
            format!(
                "{whose} — {:.1} s, stopped for all of it (SIGSTOP, Ctrl+Z or a debugger): none of \
                 its threads ran, so nothing is told of its GIL",
                p.length_s()
            )
        } else {
            format!(
                "{whose} — {:.1} s, none of it seen: the sampler fell behind the whole time, so \
                 nothing is told of its GIL (give it a CPU: --cpus, or real-time priority)",
                p.length_s()
            )
        };
    }
    // Its waits while stopped were the stop's, and the time the sampler saw nothing of has no
    // slices: both are left out of every figure (report/stopped.rs, report/gaps.rs).
    let whole_s = p.length_s();
    let unseen_said = p.unseen_share_worth_saying().is_some();
    let length = match (p.stopped_s > 0.0, unseen_said) {
        (false, false) => format!("{whole_s:.1} s"),
        (true, false) => format!(
            "{whole_s:.1} s, stopped for {} of it (SIGSTOP, Ctrl+Z or a debugger: left out below)",
            seconds_or_ms(p.stopped_s)
        ),
        (false, true) => format!(
            "{whole_s:.1} s, {} of it unseen (the sampler fell behind: left out below)",
            seconds_or_ms(p.unseen_s)
        ),
        (true, true) => format!(
            "{whole_s:.1} s, stopped for {} of it (SIGSTOP, Ctrl+Z or a debugger) and {} unseen \
             (the sampler fell behind): both left out below",
            seconds_or_ms(p.stopped_s),
            seconds_or_ms(p.unseen_s)
        ),
    };
    // Imports are the program starting: said beside the share they make up (the hint says more).
    let importing = match p.importing_share {
        Some(share) if share >= IMPORTING_SAID_SHARE => {
            format!(" ({:.0}% importing modules)", 100.0 * share)
        }
        _ => String::new(),
    };
    format!(
        "{whose} — {length}; the GIL was held {:.0}% of the time{importing}, {:.1} threads waiting \
         on average",
        100.0 * p.gil_busy_share,
        p.mean_waiters
    )
}

/// `1.2 s`, or `340 ms` under a second.
fn seconds_or_ms(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.1} s")
    } else {
        ms(1000.0 * s)
    }
}

/// Whether no time is left to tell of: the process was stopped, or the sampler saw nothing, for
/// the whole recording, so every figure would be a share of nothing.
fn nothing_seen_running(p: &ProcessAnswer) -> bool {
    p.window_s <= 0.0 && (p.stopped_s > 0.0 || p.unseen_s > 0.0)
}

/// Which process: its pid, with its rank, host and parent where known.
fn whose(p: &ProcessAnswer) -> String {
    let mut whose = format!("process {}", p.pid);
    let mut facts = Vec::new();
    if let Some(rank) = p.facts.rank {
        facts.push(format!("rank {rank}"));
    }
    if let Some(host) = &p.facts.host {
        facts.push(format!("host {host}"));
    }
    if let Some(parent) = p.facts.parent_pid.filter(|_| p.facts.parent_among_answers) {
        facts.push(format!("child of {parent}"));
    }
    if !facts.is_empty() {
        whose += &format!(" ({})", facts.join(", "));
    }
    whose
}

fn waiter_lines(out: &mut String, p: &ProcessAnswer, t: &ThreadAnswer) {
    let _ = writeln!(
        out,
        "  {} waited {:.0}% of the recording ({:.2} s, {} {}, p50 {}, p99 {}, longest {})",
        t.name,
        pct(t.wait_s, p.window_s),
        t.wait_s,
        thousands(t.waits.count),
        if t.waits.count == 1 { "wait" } else { "waits" },
        ms(t.waits.p50_ms),
        ms(t.waits.p99_ms),
        ms(t.waits.max_ms)
    );
    let shown: Vec<&Holder> = t
        .waited_for
        .iter()
        .filter(|h| pct(h.s, t.wait_s) >= 1.0)
        .take(MAX_HOLDERS_SHOWN)
        .collect();
    for holder in &shown {
        holder_line(out, t, holder);
    }
    // A cut list says what it left out, where that is a percent or more; a single one left is
    // shown instead, its own line no longer than "and 1 more" would be.
    let left: Vec<&Holder> = t.waited_for.iter().skip(shown.len()).collect();
    let left_share = pct(left.iter().map(|h| h.s).sum(), t.wait_s);
    match left.as_slice() {
        [one] if left_share >= 0.5 => holder_line(out, t, one),
        _ if left_share >= 0.5 => {
            let _ = writeln!(out, "      and {} more ({left_share:.0}%)", left.len());
        }
        _ => {}
    }
}

/// The line of one holder `t` waited for: its share of the waiting, and the code it held in.
fn holder_line(out: &mut String, t: &ThreadAnswer, holder: &Holder) {
    let mut line = format!(
        "      for {} {:.0}%",
        if holder.tid == NO_HOLDER_SEEN {
            "(nobody holding it in the trace: the GIL free, or held too briefly to be seen)"
                .to_string()
        } else {
            holder.name.clone()
        },
        pct(holder.s, t.wait_s)
    );
    // The first always, the others where they would not read "0%".
    let shown: Vec<&HeldIn> = holder
        .functions
        .iter()
        .take(MAX_FUNCTIONS_SHOWN)
        .enumerate()
        .take_while(|(i, f)| *i == 0 || pct(f.s, holder.s) >= 0.5)
        .map(|(_, f)| f)
        .collect();
    // A line that has one place as a native call and as Python code says which is which.
    let also_native = |f: &HeldIn| {
        !f.native_call
            && shown
                .iter()
                .any(|other| other.native_call && other.function == f.function)
    };
    let code: Vec<String> = shown
        .iter()
        .map(|f| {
            let place = if also_native(f) {
                format!("Python code {}", place(f))
            } else {
                place(f)
            };
            format!("{place} {:.0}%", pct(f.s, holder.s))
        })
        .collect();
    if !code.is_empty() {
        line += &format!(" — {}", code.join(", "));
        if holder.functions.len() > code.len() {
            line += ", ...";
        }
    }
    let _ = writeln!(out, "{line}");
}

/// Held-while-blocked lines are printed where others waited this many seconds through the stretches
/// on: below it reads "0.00 s", and a thread that keeps the GIL through a syscall while no one
/// waits for it costs no one anything.
const BLOCKED_SHOWN_S: f64 = 0.005;

/// Where the cores were busy, the sampler's own CPU is said from this share of one CPU: what it
/// takes at 1 kHz and more (docs/cost.md).
const SAMPLER_SHARE_SAID: f64 = 0.05;

/// Fewer samples than this and the recording cannot show a wait or a hold (each is seen between
/// two samples): the answer says so instead of "held 0%, no thread waited".
pub const SAMPLES_TO_TELL: u64 = 2;

/// One process's answer, most important first.
pub fn format_process(out: &mut String, p: &ProcessAnswer) {
    if let Some(taken) = p.facts.samples.filter(|&n| n < SAMPLES_TO_TELL) {
        let _ = writeln!(
            out,
            "{}: too few samples to tell how its GIL was used ({taken} taken; a wait or a hold is \
             seen between two). Record longer (--duration) or at a higher --rate.",
            whose(p)
        );
        return;
    }
    let _ = writeln!(out, "{}", headline(p));
    let notable: Vec<&ThreadAnswer> = p
        .threads
        .iter()
        .filter(|t| t.wait_s > 0.0 && pct(t.wait_s, p.window_s) >= 100.0 * NOTABLE_WAIT_SHARE)
        .collect();
    if notable.is_empty() && !nothing_seen_running(p) {
        let _ = writeln!(
            out,
            "  no thread waited noticeably for the GIL{}",
            quiet_why(p)
        );
    }
    for t in notable.iter().take(MAX_THREADS_SHOWN) {
        waiter_lines(out, p, t);
    }
    if notable.len() > MAX_THREADS_SHOWN {
        let _ = writeln!(
            out,
            "  and {} more threads that waited",
            notable.len() - MAX_THREADS_SHOWN
        );
    }
    let mut blocked: Vec<(&ThreadAnswer, &crate::report::analyze::Blocked)> = p
        .threads
        .iter()
        .flat_map(|t| t.held_while_blocked.iter().map(move |b| (t, b)))
        .filter(|(_, b)| b.others_waited_s >= BLOCKED_SHOWN_S)
        .collect();
    blocked.sort_by(|a, b| b.1.s.total_cmp(&a.1.s));
    for (t, b) in blocked.iter().take(MAX_THREADS_SHOWN) {
        let _ = writeln!(
            out,
            "  {} held the GIL while blocked in {}: {:.2} s, while others waited {:.2} s",
            t.name, b.syscall, b.s, b.others_waited_s
        );
    }
    if let Some(share) = crate::report::hint::busy_cores(p) {
        let _ = writeln!(
            out,
            "  busy cores: at {:.0}% of the waiting seen, the GIL was free: the waiter, woken to take \
             it, most likely had no CPU yet (the job's threads, other work on its cores or a CPU \
             quota outnumber the cores it gets). Part of such waits is waiting for a CPU, and the \
             timeline is least exact there (docs/accuracy.md, \"Busy cores\")",
            100.0 * share
        );
        let sampler = p.facts.sampler_cpu_share;
        if let Some(sampler) = sampler.filter(|&s| s >= SAMPLER_SHARE_SAID) {
            let _ = writeln!(
                out,
                "  gilsample's own cost: its sampler took {:.0}% of one CPU and was not given \
                 cores of its own (no --cpus); on cores this busy, that time was most likely the \
                 job's. Give it a core of its own (--cpus), or sample less often (at 2 kHz \
                 gilsample took a quarter to two fifths of its CPU at 10 kHz, docs/cost.md)",
                100.0 * sampler
            );
        }
    }
    if let Some(hint) = crate::report::hint::hint(p) {
        let _ = writeln!(out, "  hint: {hint}");
    }
}

/// Where hardly anyone held the GIL either, what the threads did instead: a recording of a process
/// that only sleeps is an answer, and says so.
fn quiet_why(p: &ProcessAnswer) -> String {
    // A stopped process's quiet is the stop's: its hint says so.
    if p.gil_busy_share >= NOTABLE_WAIT_SHARE || p.threads.is_empty() || p.facts.stopped.is_some() {
        return String::new();
    }
    let threads = match p.threads.len() {
        1 => "its one thread".to_string(),
        n => format!("its {n} threads"),
    };
    format!(
        ", nor held it much (under {:.0}% of the time): {threads} mostly slept or ran without it \
         (I/O, waits, native code that lets it go)",
        100.0 * NOTABLE_WAIT_SHARE
    )
}

/// Total wait of a process: what ranks processes against each other.
pub fn total_wait_s(p: &ProcessAnswer) -> f64 {
    // Folded from +0.0: an empty float sum is -0.0, printed "-0.00".
    p.threads.iter().fold(0.0, |sum, t| sum + t.wait_s)
}

/// Into how many spans of time that do not overlap the recordings' windows fall (1 where not every
/// process has a window, another tool's traces, or where monotonic clocks of several hosts do not
/// compare).
fn separate_spans(processes: &[&ProcessAnswer]) -> usize {
    let hosts: std::collections::HashSet<&Option<String>> =
        processes.iter().map(|p| &p.facts.host).collect();
    if hosts.len() > 1 && processes.iter().any(|p| p.facts.monotonic_clock) {
        return 1;
    }
    let Some(mut windows) = processes
        .iter()
        .map(|p| p.facts.window_ns)
        .collect::<Option<Vec<(i128, i128)>>>()
    else {
        return 1;
    };
    windows.sort_unstable();
    let mut spans = 0;
    let mut end = None;
    for (start, stop) in windows {
        match end {
            Some(e) if start <= e => end = Some(stop.max(e)),
            _ => {
                spans += 1;
                end = Some(stop);
            }
        }
    }
    spans.max(1)
}

/// Across processes: which waited most, sorted; `files`: they were read from files, which may be
/// of several runs (`report`), not recorded together (a session's summary).
pub fn format_ranking(out: &mut String, processes: &[ProcessAnswer], files: bool) {
    let mut ranked: Vec<&ProcessAnswer> = processes.iter().collect();
    ranked.sort_by(|a, b| total_wait_s(b).total_cmp(&total_wait_s(a)));
    let _ = writeln!(
        out,
        "across {} processes, most waiting first (thread-s: seconds of waiting, summed over its \
         threads):",
        ranked.len()
    );
    let runs = if files { separate_spans(&ranked) } else { 1 };
    if runs > 1 {
        // `gil_traces/` collects every run recorded from one directory: files never replace.
        let _ = writeln!(
            out,
            "  (these recordings fall in {runs} spans of time that do not overlap: the ranking \
             compares different stretches of time, perhaps different runs, not one moment of one \
             job. To compare one run's processes, report that run's files; -o DIR per run keeps \
             them apart)"
        );
    }
    let labels: Vec<String> = ranked.iter().map(|p| whose(p)).collect();
    for (p, label) in ranked.iter().zip(&labels).take(MAX_THREADS_SHOWN * 2) {
        let top = p.threads.first();
        // Two windows of one process (epoch1/ and epoch5/) read the same but for their files.
        let file = if labels.iter().filter(|l| *l == label).count() > 1 {
            format!(" in {}", p.file)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:>8.2} thread-s waiting  {label}{file}{}",
            total_wait_s(p),
            top.filter(|t| t.wait_s > 0.0)
                .map(|t| format!(
                    "; most: {} waited {:.0}% of the recording",
                    t.name,
                    pct(t.wait_s, p.window_s)
                ))
                .unwrap_or_default()
        );
    }
    if ranked.len() > MAX_THREADS_SHOWN * 2 {
        let _ = writeln!(
            out,
            "  and {} more processes",
            ranked.len() - MAX_THREADS_SHOWN * 2
        );
    }
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
