use super::*;
use crate::report::analyze::Durations;
use crate::report::load::CallSite;

fn held_in(function: &str, s: f64, native: bool) -> HeldIn {
    HeldIn {
        function: function.into(),
        s,
        native_call: native,
        longest_ms: if native { 216.0 } else { 5.2 },
        p99_ms: if native { 180.0 } else { 5.1 },
        call_site: native.then(|| {
            Some(CallSite {
                file: Some("/srv/torch_train.py".into()),
                line: Some(22),
                source: Some("batch = torch.tensor(rows)".into()),
            })
        }),
        callee: native.then_some(None),
    }
}

/// A main thread that waited 60% of a 10 s recording, for holders with these shares of it, each
/// holding the GIL in `code`.
fn waiting_for(shares: &[f64], code: &[HeldIn]) -> ProcessAnswer {
    let waited = 6.0;
    let holders = shares
        .iter()
        .enumerate()
        .map(|(i, share)| Holder {
            tid: 10 + i as u32,
            name: format!("loader-{i}"),
            s: share * waited,
            functions: code
                .iter()
                .map(|f| HeldIn {
                    s: f.s * share * waited,
                    ..f.clone()
                })
                .collect(),
        })
        .collect();
    ProcessAnswer {
        facts: Default::default(),
        pid: 1,
        file: "t.json".into(),
        window_s: 10.0,
        stopped_s: 0.0,
        unseen_s: 0.0,
        switch_interval_ms: 5.0,
        gil_busy_share: 1.0,
        importing_share: None,
        mean_waiters: 0.8,
        waiting_with_gil_free_share: None,
        threads: vec![ThreadAnswer {
            tid: 1,
            name: "MainThread".into(),
            hold_s: 1.0,
            wait_s: waited,
            drop_s: 0.0,
            released_s: 3.0,
            waits: Durations::default(),
            holds: Durations::default(),
            waited_for: holders,
            hold_functions: Vec::new(),
            held_while_blocked: Vec::new(),
        }],
    }
}

#[test]
fn one_native_call_is_said_with_how_long_it_keeps_the_gil_and_what_helps() {
    let code = [held_in("loader (torch_train.py:22)", 1.0, true)];
    let said = hint(&waiting_for(&[0.9], &code)).unwrap();
    assert!(
        said.starts_with(
            "MainThread spends 60% of the recording waiting, mostly for loader-0 (90% of its \
             waiting), one native call in loader (torch_train.py:22): native code that keeps \
             the GIL for up to 216 ms at a time (p99 180 ms) against the 5.0 ms switch interval"
        ),
        "{said}"
    );
    for help in [
        "release the GIL inside it",
        "call it on smaller pieces",
        "a library or an option that releases the GIL",
        "another process",
    ] {
        assert!(said.contains(help), "{help}: {said}");
    }
    assert!(!said.contains("Python code"), "{said}");
    assert!(!said.contains("standard library"), "{said}");
}

#[test]
fn without_stacks_no_kind_of_code_is_blamed() {
    for code in [vec![], vec![held_in(NO_STACK, 1.0, false)]] {
        let said = hint(&waiting_for(&[0.9], &code)).unwrap();
        assert!(
            said.starts_with("MainThread spends 60% of the recording waiting, mostly for loader-0"),
            "{said}"
        );
        assert!(
            said.contains("The trace has no Python stack for those holds"),
            "{said}"
        );
        assert!(!said.contains("Python code there"), "{said}");
    }
}

#[test]
fn a_native_call_in_the_standard_library_is_not_told_to_release_the_gil_inside() {
    let stdlib = |file: &str| {
        let mut f = held_in("JSONEncoder.iterencode (encoder.py:258)", 1.0, true);
        f.call_site = Some(Some(CallSite {
            file: Some(file.into()),
            line: Some(258),
            source: Some("return _iterencode(o, 0)".into()),
        }));
        hint(&waiting_for(&[0.9], &[f])).unwrap()
    };
    for file in [
        "/usr/lib/python3.11/json/encoder.py",
        "/root/.pyenv/versions/3.11.7/lib/python3.11/json/encoder.py",
    ] {
        let said = stdlib(file);
        assert!(
            said.contains("called from Python's standard library"),
            "{said}"
        );
        assert!(!said.contains("release the GIL inside it"), "{said}");
        assert!(said.contains("call it on smaller pieces"), "{said}");
    }
    let said = stdlib("/usr/lib64/python3.9/zlib_user.py");
    assert!(
        said.contains("called from Python's standard library"),
        "{said}"
    );
    // Installed packages, the user's code, and the modules that call the user's callables
    // (a C extension as a thread's target) are not the standard library's C code.
    for file in [
        "/usr/lib/python3/dist-packages/simplejson/encoder.py",
        "/venv/lib/python3.11/site-packages/torch/functional.py",
        "/usr/lib/python3.11/threading.py",
        "/usr/lib/python3.11/concurrent/futures/thread.py",
        "/srv/lib/python3_utils/encode.py",
        "/srv/train.py",
    ] {
        let said = stdlib(file);
        assert!(said.contains("release the GIL inside it"), "{file}: {said}");
    }
}

#[test]
fn samples_further_apart_than_the_switch_interval_say_so_instead_of_a_kind() {
    let code = [held_in("spin (w.py:65)", 1.0, true)];
    let mut slow = waiting_for(&[0.9], &code);
    slow.facts.rate_requested_hz = Some(10.0);
    let said = hint(&slow).unwrap();
    assert!(
        said.starts_with(
            "sampled every 100 ms (10 Hz), longer than the 5.0 ms switch interval at which \
             threads hand the GIL over"
        ) && said.contains("record at --rate 1khz or more"),
        "{said}"
    );
    assert!(!said.contains("release the GIL inside it"), "{said}");
    // One sample per interval or more: the kind is said.
    slow.facts.rate_requested_hz = Some(200.0);
    assert!(hint(&slow).unwrap().contains("one native call in spin"));
    // A short switch interval asks for a rate that has five samples in it.
    slow.switch_interval_ms = 0.5;
    slow.facts.rate_requested_hz = Some(1000.0);
    assert!(
        hint(&slow)
            .unwrap()
            .contains("record at --rate 10khz or more")
    );
    slow.switch_interval_ms = 0.005;
    slow.facts.rate_requested_hz = Some(10_000.0);
    assert!(
        hint(&slow)
            .unwrap()
            .contains("No rate gilsample takes is that fast")
    );
}

#[test]
fn a_stopped_process_is_said_instead_of_the_code_that_held() {
    let code = [held_in("spin (w.py:65)", 1.0, true)];
    let mut stopped = waiting_for(&[0.9], &code);
    stopped.facts.stopped = Some("at the start and at the end".into());
    let said = hint(&stopped).unwrap();
    assert!(
        said.starts_with("the process was stopped at the start and at the end of the recording")
            && said.contains("kill -CONT 1,"),
        "{said}"
    );
    assert!(!said.contains("native call"), "{said}");
    // Its own pid and host in a merged trace, which renumbered it.
    stopped.facts.recording = Some(crate::report::other_data::RecordingId {
        pid: 7,
        host: Some("node1".into()),
        start_monotonic_ns: 0,
    });
    assert!(hint(&stopped).unwrap().contains("kill -CONT 7 on node1,"));
    // Stopped only when it began: said first, then what the GIL shows.
    stopped.facts.stopped = Some("at the start".into());
    let said = hint(&stopped).unwrap();
    assert!(
        said.starts_with("the process was stopped when the recording began")
            && said.contains(" Then: MainThread spends 60% of the recording waiting"),
        "{said}"
    );
    assert!(!said.contains("kill -CONT"), "{said}");
    // Its span left out of the figures (a trace that has the spans): only what the GIL shows.
    stopped.facts.window_ns = Some((0, 10_000_000_000));
    stopped.facts.stops_ns = vec![(0, 1)];
    assert!(hint(&stopped).unwrap().starts_with("MainThread spends 60%"));
    // A span of a later stop is not the one at the start, whose waits are still counted.
    stopped.facts.stops_ns = vec![(5_000_000_000, 6_000_000_000)];
    assert!(
        hint(&stopped)
            .unwrap()
            .starts_with("the process was stopped when the recording began")
    );
}

#[test]
fn python_code_keeps_its_advice() {
    let code = [held_in("parse (p.py:4)", 1.0, false)];
    let said = hint(&waiting_for(&[0.9], &code)).unwrap();
    assert!(
        said.contains(", in parse (p.py:4). Python code there keeps the GIL: make it cheaper"),
        "{said}"
    );
    assert!(!said.contains("native call"), "{said}");
    assert!(said.contains("move it to another process"), "{said}");
    // A worker process (its parent recorded beside it) is not told to become one.
    let mut worker = waiting_for(&[0.9], &code);
    worker.facts.parent_among_answers = true;
    let said = hint(&worker).unwrap();
    assert!(
        said.contains("make it cheaper, or into native code that releases the GIL"),
        "{said}"
    );
    assert!(!said.contains("DataLoader"), "{said}");
    // The code that held it most names the kind: mostly Python with a short native call.
    let mixed = [
        held_in("parse (p.py:4)", 0.7, false),
        held_in("loader (torch_train.py:22)", 0.3, true),
    ];
    assert!(
        hint(&waiting_for(&[0.9], &mixed))
            .unwrap()
            .contains("Python code there")
    );
}

#[test]
fn holders_that_share_the_waiting_are_said_as_a_tie() {
    let code = [held_in("spin (w.py:50)", 1.0, false)];
    let tie = hint(&waiting_for(&[0.26, 0.24, 0.23, 0.20], &code)).unwrap();
    assert!(
        tie.contains("spread over 4 holders, 20–26% each, in spin (w.py:50)"),
        "{tie}"
    );
    assert!(!tie.contains("mostly"), "{tie}");
    let even = hint(&waiting_for(&[0.5, 0.5], &code)).unwrap();
    assert!(even.contains("spread over 2 holders, 50% each"), "{even}");
    // Half as much again as the next is a clear lead.
    let lead = hint(&waiting_for(&[0.45, 0.3], &code)).unwrap();
    assert!(
        lead.contains("mostly for loader-0 (45% of its waiting)"),
        "{lead}"
    );
    let close = hint(&waiting_for(&[0.44, 0.3], &code)).unwrap();
    assert!(
        close.contains("spread over 2 holders, 30–44% each"),
        "{close}"
    );
    // A third holder too far behind to share the lead is still counted, unless it is hardly
    // one.
    let behind = hint(&waiting_for(&[0.45, 0.35, 0.2], &code)).unwrap();
    assert!(
        behind.contains("spread over 2 of its 3 holders, 35–45% each"),
        "{behind}"
    );
    let hardly = hint(&waiting_for(&[0.45, 0.35, 0.005], &code)).unwrap();
    assert!(hardly.contains("spread over 2 holders"), "{hardly}");
}

#[test]
fn a_thread_that_waited_little_gets_no_hint() {
    let mut p = waiting_for(&[0.9], &[held_in("f (a.py:1)", 1.0, false)]);
    p.threads[0].wait_s = 0.9;
    assert_eq!(hint(&p), None);
}

#[test]
fn a_recording_held_mostly_by_imports_says_how_to_record_the_work_instead() {
    let code = [held_in("loader (torch_train.py:22)", 1.0, true)];
    let mut p = waiting_for(&[0.9], &code);
    p.importing_share = Some(0.8);
    let said = hint(&p).unwrap();
    assert!(
        said.starts_with(
            "imports held the GIL 80% of the recording: the program was still starting"
        ) && said.contains("gilsample --pid 1")
            && said.contains("a --duration that reaches past its start into its work"),
        "{said}"
    );
    assert!(
        !said.contains("native code"),
        "its start's holds are not the advice: {said}"
    );
    // Under half: the waiting is the hint, as without imports; and with no waiting either.
    p.importing_share = Some(0.4);
    assert!(hint(&p).unwrap().starts_with("MainThread spends 60%"));
    p.importing_share = Some(0.9);
    p.threads[0].wait_s = 0.0;
    assert!(hint(&p).unwrap().starts_with("imports held the GIL 90%"));
}
