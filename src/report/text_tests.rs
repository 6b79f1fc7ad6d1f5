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
        unseen_s: 0.0,
        switch_interval_ms: 5.0,
        gil_busy_share: 1.0,
        importing_share: None,
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
fn a_recording_with_fewer_than_two_samples_says_it_cannot_tell() {
    let mut p = process(0.0);
    for t in &mut p.threads {
        t.wait_s = 0.0;
    }
    p.gil_busy_share = 0.0;
    for taken in [0, 1] {
        p.facts.samples = Some(taken);
        let mut out = String::new();
        format_process(&mut out, &p);
        assert_eq!(
            out,
            format!(
                "process 1: too few samples to tell how its GIL was used ({taken} taken; a wait or \
                 a hold is seen between two). Record longer (--duration) or at a higher --rate.\n"
            )
        );
    }
    // Two samples show what happened between them: the usual answer.
    p.facts.samples = Some(2);
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(out.contains("no thread waited noticeably"), "{out}");
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
    // No sampler figure in the trace (or one given its own cores): nothing said of its cost.
    assert!(!out.contains("gilsample's own cost"), "{out}");
    let mut sampled = busy.clone();
    sampled.facts.sampler_cpu_share = Some(0.42);
    let mut out = String::new();
    format_process(&mut out, &sampled);
    assert!(
        out.contains("its sampler took 42% of one CPU and was not given cores of its own"),
        "{out}"
    );
    // Where the cores were not busy, the job had time to spare for it.
    let mut idle_cores = sampled.clone();
    idle_cores.waiting_with_gil_free_share = Some(0.19);
    let mut out = String::new();
    format_process(&mut out, &idle_cores);
    assert!(!out.contains("gilsample's own cost"), "{out}");
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
        format_ranking(&mut out, processes, true);
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
    // Two hosts' monotonic clocks do not compare.
    let (mut a, mut b) = (at(0, 10), at(800, 810));
    a.facts.host = Some("node-a".into());
    b.facts.host = Some("node-b".into());
    b.facts.monotonic_clock = true;
    assert!(!ranked(&[a.clone(), b]).contains("spans of time"));
    // A session's own summary: its targets were recorded together, one after another or not.
    let mut out = String::new();
    format_ranking(&mut out, &[at(0, 10), at(800, 810)], false);
    assert!(!out.contains("spans of time"), "{out}");
}

#[test]
fn the_headline_says_how_much_of_the_recording_imports_held() {
    let mut p = process(0.0);
    p.importing_share = Some(0.62);
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(
        out.contains("the GIL was held 100% of the time (62% importing modules), 2.0 threads"),
        "{out}"
    );
    // A little at the start is not worth the words; a trace without stacks cannot say.
    for share in [Some(0.05), None] {
        p.importing_share = share;
        let mut out = String::new();
        format_process(&mut out, &p);
        assert!(!out.contains("importing"), "{out}");
    }
}

#[test]
fn two_windows_of_one_process_are_told_apart_by_their_files_in_the_ranking() {
    let mut first = process(0.0);
    first.file = "epoch1/GIL_1_rank_0.json".into();
    let mut second = process(0.0);
    second.file = "epoch5/GIL_1_rank_0.json".into();
    second.threads[0].wait_s = 1.0;
    let mut other = process(0.0);
    other.pid = 2;
    let mut out = String::new();
    format_ranking(&mut out, &[first, second, other], true);
    assert!(
        out.contains("  process 1 in epoch1/GIL_1_rank_0.json; most:"),
        "{out}"
    );
    assert!(
        out.contains("  process 1 in epoch5/GIL_1_rank_0.json; most:"),
        "{out}"
    );
    // A process given once keeps its short label.
    assert!(out.contains("waiting  process 2; most:"), "{out}");
}

#[test]
fn a_process_stopped_for_the_whole_recording_says_so_and_no_figures() {
    let mut p = process(0.0);
    for t in &mut p.threads {
        t.wait_s = 0.0;
    }
    (p.window_s, p.stopped_s, p.gil_busy_share, p.mean_waiters) = (0.0, 2.0, 0.0, 0.0);
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(
        out.starts_with("process 1 — 2.0 s, stopped for all of it"),
        "{out}"
    );
    assert!(!out.contains("held 0%"), "{out}");
    assert!(!out.contains("no thread waited"), "{out}");
    // Stopped for part of it: the figures are of the time it ran.
    p.window_s = 1.0;
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(out.contains("stopped for 2.0 s of it"), "{out}");
    assert!(out.contains("no thread waited noticeably"), "{out}");
}

#[test]
fn time_the_sampler_saw_nothing_of_is_said_beside_the_length_once_it_moves_the_figures() {
    let mut p = process(0.0);
    (p.window_s, p.unseen_s) = (3.0, 1.0);
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(
        out.starts_with(
            "process 1 — 4.0 s, 1.0 s of it unseen (the sampler fell behind: left out below);"
        ),
        "{out}"
    );
    // With a stop as well, both are said.
    p.stopped_s = 0.5;
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(
        out.contains(
            "4.5 s, stopped for 500 ms of it (SIGSTOP, Ctrl+Z or a debugger) and 1.0 s unseen"
        ),
        "{out}"
    );
    // None of it seen: no figures.
    (p.window_s, p.stopped_s, p.unseen_s, p.gil_busy_share) = (0.0, 0.0, 2.0, 0.0);
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(
        out.starts_with("process 1 — 2.0 s, none of it seen"),
        "{out}"
    );
    assert!(
        !out.contains("held 0%") && !out.contains("no thread waited"),
        "{out}"
    );
    // Under 1% of it: not worth a word, though still left out.
    (p.window_s, p.stopped_s, p.unseen_s) = (10.0, 0.0, 0.05);
    let mut out = String::new();
    format_process(&mut out, &p);
    assert!(out.starts_with("process 1 — 10.1 s;"), "{out}");
}
