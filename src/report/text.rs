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
    let mut whose = format!("process {}", p.pid);
    let mut facts = Vec::new();
    if let Some(rank) = p.facts.rank {
        facts.push(format!("rank {rank}"));
    }
    if let Some(host) = &p.facts.host {
        facts.push(format!("host {host}"));
    }
    if !facts.is_empty() {
        whose += &format!(" ({})", facts.join(", "));
    }
    // Its waits while stopped were the stop's: left out of every figure (report/stopped.rs).
    let length = if p.stopped_s > 0.0 {
        format!(
            "{:.1} s, stopped for {} of it (SIGSTOP, Ctrl+Z or a debugger: left out below)",
            p.window_s + p.stopped_s,
            if p.stopped_s >= 1.0 {
                format!("{:.1} s", p.stopped_s)
            } else {
                ms(1000.0 * p.stopped_s)
            }
        )
    } else {
        format!("{:.1} s", p.window_s)
    };
    format!(
        "{whose} — {length}; the GIL was held {:.0}% of the time, {:.1} threads waiting on average",
        100.0 * p.gil_busy_share,
        p.mean_waiters
    )
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

/// One process's answer, most important first.
pub fn format_process(out: &mut String, p: &ProcessAnswer) {
    let _ = writeln!(out, "{}", headline(p));
    let notable: Vec<&ThreadAnswer> = p
        .threads
        .iter()
        .filter(|t| t.wait_s > 0.0 && pct(t.wait_s, p.window_s) >= 100.0 * NOTABLE_WAIT_SHARE)
        .collect();
    if notable.is_empty() {
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
    p.threads.iter().map(|t| t.wait_s).sum()
}

/// Into how many spans of time that do not overlap the recordings' windows fall (1 where not every
/// process has a window: another tool's traces).
fn separate_spans(processes: &[&ProcessAnswer]) -> usize {
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

/// Across processes: which waited most, sorted.
pub fn format_ranking(out: &mut String, processes: &[ProcessAnswer]) {
    let mut ranked: Vec<&ProcessAnswer> = processes.iter().collect();
    ranked.sort_by(|a, b| total_wait_s(b).total_cmp(&total_wait_s(a)));
    let _ = writeln!(
        out,
        "across {} processes, most waiting first:",
        ranked.len()
    );
    let runs = separate_spans(&ranked);
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
    for p in ranked.iter().take(MAX_THREADS_SHOWN * 2) {
        let top = p.threads.first();
        let _ = writeln!(
            out,
            "  {:>8.2} thread-s waiting  process {}{}{}{}",
            total_wait_s(p),
            p.pid,
            p.facts
                .rank
                .map(|r| format!(" rank {r}"))
                .unwrap_or_default(),
            p.facts
                .host
                .as_ref()
                .map(|h| format!(" host {h}"))
                .unwrap_or_default(),
            top.filter(|t| t.wait_s > 0.0)
                .map(|t| format!(
                    " (most: {} waited {:.0}% of the recording)",
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
mod tests {
    use super::*;

    use crate::report::analyze::{Blocked, Durations};
    use crate::report::hint::{BUSY_CORES_SHARE, hint};
    use crate::report::hold_code::HeldIn;

    fn thread(tid: u32, name: &str, wait_s: f64, blocked: Option<f64>) -> ThreadAnswer {
        ThreadAnswer {
            tid,
            name: name.into(),
            hold_s: 0.5,
            wait_s,
            drop_s: 0.0,
            released_s: 0.0,
            waits: Durations::default(),
            holds: Durations::default(),
            waited_for: vec![Holder {
                tid: 9,
                name: "spinner-1".into(),
                s: wait_s,
                functions: Vec::new(),
            }],
            hold_functions: Vec::new(),
            held_while_blocked: blocked
                .map(|others_waited_s| Blocked {
                    syscall: "futex".into(),
                    s: 0.001,
                    others_waited_s,
                })
                .into_iter()
                .collect(),
        }
    }

    fn process(blocked_others_waited_s: f64) -> ProcessAnswer {
        ProcessAnswer {
            facts: Default::default(),
            pid: 1,
            file: "t.json".into(),
            window_s: 3.0,
            stopped_s: 0.0,
            switch_interval_ms: 5.0,
            gil_busy_share: 1.0,
            mean_waiters: 2.0,
            waiting_with_gil_free_share: None,
            threads: vec![
                thread(8, "spinner-0", 2.1, None),
                thread(1, "MainThread", 0.1, Some(blocked_others_waited_s)),
            ],
        }
    }

    #[test]
    fn a_holder_blocked_for_a_moment_is_not_the_hint_over_threads_that_wait_most_of_the_time() {
        let quick = hint(&process(0.002)).unwrap();
        assert!(quick.starts_with("spinner-0 spends 70%"), "{quick}");
        let mut out = String::new();
        format_process(&mut out, &process(0.002));
        assert!(!out.contains("held the GIL while blocked"), "{out}");
        // Others waited 10% of the recording for it: that is the answer.
        let long = hint(&process(0.3)).unwrap();
        assert!(
            long.starts_with("MainThread keeps the GIL while it sleeps in futex"),
            "{long}"
        );
    }

    #[test]
    fn a_process_that_hardly_touches_the_gil_says_what_its_threads_did() {
        let mut p = process(0.0);
        for t in &mut p.threads {
            t.wait_s = 0.0;
        }
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(
            out.contains("no thread waited noticeably for the GIL\n"),
            "held all the time: {out}"
        );
        p.gil_busy_share = 0.001;
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(
            out.contains("nor held it much (under 1% of the time): its 2 threads mostly slept"),
            "{out}"
        );
    }

    #[test]
    fn one_place_held_as_a_native_call_and_as_python_code_says_which_is_which() {
        let held = |s: f64, native_call: bool| HeldIn {
            function: "JSONEncoder.iterencode (encoder.py:258)".into(),
            s,
            native_call,
            longest_ms: 300.0,
            p99_ms: 300.0,
            call_site: None,
            callee: None,
        };
        let mut p = process(0.0);
        p.threads[0].waited_for[0].functions = vec![held(1.9, true), held(0.2, false)];
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(
            out.contains(
                "one native call in JSONEncoder.iterencode (encoder.py:258) 90%, Python code in \
                 JSONEncoder.iterencode (encoder.py:258) 10%"
            ),
            "{out}"
        );
    }

    #[test]
    fn holding_through_a_syscall_while_no_one_waits_is_not_said() {
        let mut p = process(0.0);
        p.threads[1].held_while_blocked[0].s = 0.5;
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(!out.contains("held the GIL while blocked"), "{out}");
        p.threads[1].held_while_blocked[0].others_waited_s = 0.01;
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(
            out.contains(
                "MainThread held the GIL while blocked in futex: 0.50 s, while others waited 0.01 s"
            ),
            "{out}"
        );
    }

    #[test]
    fn waits_found_with_the_gil_free_say_the_cores_are_busy_and_what_to_do() {
        let plain = process(0.0);
        for share in [None, Some(0.0), Some(0.19)] {
            let p = ProcessAnswer {
                waiting_with_gil_free_share: share,
                ..plain.clone()
            };
            let mut out = String::new();
            format_process(&mut out, &p);
            assert!(!out.contains("busy cores"), "{share:?}: {out}");
            assert!(
                hint(&p)
                    .unwrap()
                    .starts_with("spinner-0 spends 70% of the recording waiting, mostly")
            );
        }
        let busy = ProcessAnswer {
            waiting_with_gil_free_share: Some(0.46),
            ..plain
        };
        let mut out = String::new();
        format_process(&mut out, &busy);
        assert!(out.contains("busy cores: at 46% of the waiting"), "{out}");
        let said = hint(&busy).unwrap();
        assert!(
            said.contains("much of it with the GIL free (46% of the waiting seen)"),
            "{said}"
        );
        assert!(
            said.contains("fewer busy threads or processes per core"),
            "{said}"
        );
        // The threshold itself is busy.
        let at = ProcessAnswer {
            waiting_with_gil_free_share: Some(BUSY_CORES_SHARE),
            ..busy
        };
        assert!(hint(&at).unwrap().contains("with the GIL free"));
    }

    #[test]
    fn a_cut_holder_list_says_how_many_it_left_out_and_their_share() {
        let mut p = process(0.0);
        let holder = |tid, share: f64| Holder {
            tid,
            name: format!("worker-{tid}"),
            s: 2.1 * share,
            functions: Vec::new(),
        };
        p.threads[0].waited_for = vec![
            holder(1, 0.26),
            holder(2, 0.26),
            holder(3, 0.25),
            holder(4, 0.13),
            holder(5, 0.10),
        ];
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(
            out.contains("      for worker-3 25%\n      and 2 more (23%)\n"),
            "{out}"
        );
        // One more would be a line of its own as long as "and 1 more": it is shown instead.
        let mut four = p.clone();
        four.threads[0].waited_for.truncate(4);
        four.threads[0].waited_for[3].s = 2.1 * 0.23;
        let mut out = String::new();
        format_process(&mut out, &four);
        assert!(
            out.contains("      for worker-3 25%\n      for worker-4 23%\n"),
            "{out}"
        );
        assert!(!out.contains("more ("), "{out}");
        assert!(
            out.contains("spinner-0 waited 70% of the recording (2.10 s"),
            "{out}"
        );
        // Under a percent but not under half of one: still its own line, never "and 1 more".
        four.threads[0].waited_for[3].s = 2.1 * 0.007;
        let mut out = String::new();
        format_process(&mut out, &four);
        assert!(out.contains("      for worker-4 1%\n"), "{out}");
        assert!(!out.contains("more ("), "{out}");
        // Left out below half a percent: not worth a line.
        four.threads[0].waited_for[3].s = 0.005;
        let mut out = String::new();
        format_process(&mut out, &four);
        assert!(
            !out.contains("more (") && !out.contains("worker-4"),
            "{out}"
        );
    }

    #[test]
    fn a_holder_s_code_that_would_read_0_percent_is_left_to_the_dots() {
        let mut p = process(0.0);
        let place = |function: &str, s: f64| HeldIn {
            function: function.into(),
            s,
            native_call: false,
            longest_ms: 1.0,
            p99_ms: 1.0,
            call_site: None,
            callee: None,
        };
        p.threads[0].waited_for[0].functions = vec![
            place("spin (w.py:65)", 2.09),
            place("Event.is_set (threading.py:577)", 0.01),
        ];
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(out.contains("— in spin (w.py:65) 100%, ...\n"), "{out}");
        assert!(!out.contains("is_set"), "{out}");
        // From half a percent on, it is shown.
        p.threads[0].waited_for[0].functions[1].s = 0.1;
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(
            out.contains("Event.is_set (threading.py:577) 5%\n"),
            "{out}"
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(1267), "1,267");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }

    #[test]
    fn one_wait_is_a_wait() {
        let mut p = process(0.0);
        p.threads[0].waits.count = 1;
        p.threads[1].waits.count = 2;
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(out.contains("(2.10 s, 1 wait, p50"), "{out}");
        assert!(!out.contains("1 waits"), "{out}");
    }

    #[test]
    fn recordings_that_do_not_overlap_in_time_are_said_to_be_different_runs() {
        let at = |from: i128, to: i128| {
            let mut p = process(0.0);
            p.facts.window_ns = Some((from, to));
            p
        };
        let ranked = |processes: &[ProcessAnswer]| {
            let mut out = String::new();
            format_ranking(&mut out, processes);
            out
        };
        // One job's ranks, side by side (started a little apart): no word.
        let job = [at(0, 10), at(2, 12), at(11, 20)];
        assert!(!ranked(&job).contains("spans of time"), "{}", ranked(&job));
        // Two runs recorded into one directory minutes apart.
        let out = ranked(&[at(0, 10), at(2, 12), at(800, 810)]);
        assert!(
            out.contains("these recordings fall in 2 spans of time that do not overlap"),
            "{out}"
        );
        // Another tool's traces have no window: nothing to compare.
        let mut other = at(800, 810);
        other.facts.window_ns = None;
        assert!(!ranked(&[at(0, 10), other]).contains("spans of time"));
    }
}
