//! The hint a person can act on, from what one process shows: a process found stopped (SIGSTOP, a
//! debugger), or samples too far apart to tell hand-offs, said instead of a diagnosis; a holder that
//! keeps the GIL while blocked in a syscall; waiting that is partly for a CPU (busy cores); otherwise the code the
//! thread that waited most waited for, and what helps for that kind of code — one native call that
//! keeps the GIL (docs/classification.md), or Python code.

use crate::report::analyze::{Holder, NO_HOLDER_SEEN, ProcessAnswer, ThreadAnswer};
use crate::report::hold_code::{HeldIn, NO_STACK};
use crate::report::phrases::{ms, pct, place};

/// A holder blocked in a syscall is the hint only when others waited for it at least this share of
/// the recording: a few milliseconds of it at start-up or exit must not hide threads that waited
/// most of the time for each other.
const BLOCKED_HINT_SHARE: f64 = 0.01;

/// From this share of the recording held by imports, the recording is said to show the program's
/// start rather than its work, and the hint says how to record the work instead.
pub const IMPORTING_HINT_SHARE: f64 = 0.5;

/// A thread that waited under this share of the recording gets no hint.
const HINTED_WAIT_SHARE: f64 = 0.1;

/// A holder "clearly leads" when its share of the waiting is at least this many times the next
/// one's; holders within it of the leader are said together, as a tie.
const LEAD_RATIO: f64 = 1.5;

/// The hint for process `p`; `None` when nothing stands out. A process found stopped at the
/// recording's end is said to be stopped instead; one stopped only at its start, before the rest,
/// unless the stop's span was left out of the figures (the headline says so then).
pub fn hint(p: &ProcessAnswer) -> Option<String> {
    match p.facts.stopped.as_deref() {
        None => gil_hint(p),
        Some("at the start") if stop_at_the_start_left_out(p) => gil_hint(p),
        Some("at the start") => Some(match gil_hint(p) {
            Some(rest) => format!("{} Then: {rest}", stopped_at_the_start()),
            None => stopped_at_the_start(),
        }),
        Some(when) => Some(stopped(when, p)),
    }
}

/// Whether the stop found when the recording began is one of the spans the figures leave out.
fn stop_at_the_start_left_out(p: &ProcessAnswer) -> bool {
    p.facts.window_ns.is_some_and(|(start, _)| {
        let rate = p.facts.rate_requested_hz.unwrap_or(0.0);
        crate::report::stopped::began_with_the_recording(&p.facts.stops_ns, start, rate)
    })
}

/// A recording held mostly by imports shows the program starting: what it holds or waits for
/// there (a library loading) says nothing of its work, so the hint says how to record the work.
fn importing_hint(p: &ProcessAnswer) -> Option<String> {
    let share = p.importing_share.filter(|&s| s >= IMPORTING_HINT_SHARE)?;
    Some(format!(
        "imports held the GIL {:.0}% of the recording: the program was still starting, and this \
         shows its start, not its work. Record once it runs: attach later (gilsample --pid {}), \
         or launch it with a --duration that reaches past its start into its work (a program \
         that ends after its imports has no other work to show).",
        100.0 * share,
        p.pid
    ))
}

/// What the GIL's waits and holds say (`hint`, the process not stopped at the end).
fn gil_hint(p: &ProcessAnswer) -> Option<String> {
    if let Some(hint) = importing_hint(p) {
        return Some(hint);
    }
    if let Some((t, b)) = p
        .threads
        .iter()
        .flat_map(|t| t.held_while_blocked.iter().map(move |b| (t, b)))
        .max_by(|a, b| a.1.others_waited_s.total_cmp(&b.1.others_waited_s))
        .filter(|(_, b)| {
            b.others_waited_s > 0.0 && b.others_waited_s >= BLOCKED_HINT_SHARE * p.window_s
        })
    {
        return Some(format!(
            "{} keeps the GIL while it sleeps in {}: native code (a C extension, a ctypes.PyDLL or \
             pybind11 call) that does not release the GIL around a blocking call. Release it there \
             (Py_BEGIN_ALLOW_THREADS, py::gil_scoped_release, ctypes.CDLL instead of PyDLL).",
            t.name, b.syscall
        ));
    }
    let top = p.threads.first()?;
    if top.wait_s < HINTED_WAIT_SHARE * p.window_s {
        return None;
    }
    if let Some(hz) = p
        .facts
        .rate_requested_hz
        .filter(|hz| 1000.0 / hz > p.switch_interval_ms)
    {
        return Some(too_slow_to_tell(p, hz));
    }
    let waited = format!(
        "{} spends {:.0}% of the recording waiting",
        top.name,
        pct(top.wait_s, p.window_s)
    );
    let leaders = leaders(top);
    let code = leading_code(&leaders);
    if let Some(share) = busy_cores(p) {
        return Some(format!(
            "{waited}, much of it with the GIL free ({:.0}% of the waiting seen): the cores are the \
             queue as much as the GIL. Give the job more cores, or fewer busy threads or processes \
             per core (fewer loader workers, a smaller torch.set_num_threads){}.",
            100.0 * share,
            match leaders.first() {
                Some(h) if leaders.len() == 1 => format!(
                    "; the holder it waited for most was {} ({:.0}% of its waiting){}",
                    h.name,
                    pct(h.s, top.wait_s),
                    code.as_ref()
                        .map(|f| format!(" {}", place(f)))
                        .unwrap_or_default()
                ),
                Some(_) => format!("; its waiting was {}", whom(top, &leaders)),
                None => String::new(),
            }
        ));
    }
    if leaders.is_empty() {
        return None;
    }
    let whom = whom(top, &leaders);
    match code {
        Some(f) if f.native_call => Some(native_call_hint(p, &waited, &whom, &f)),
        // Without the holder's Python stack, a hold judged from the waits alone (a short native
        // call and Python code look alike there) says nothing of its code: no advice for the
        // wrong one.
        code if code.as_ref().is_none_or(|f| f.function == NO_STACK) => {
            Some(format!("{waited}, {whom}. {NO_STACKS}"))
        }
        code => Some(format!(
            "{waited}, {whom}{}. Python code there keeps the GIL: make it cheaper, {}or into \
             native code that releases the GIL{}.",
            code.map(|f| format!(", {}", place(&f))).unwrap_or_default(),
            // A worker process already is that other process.
            if p.facts.parent_among_answers {
                ""
            } else {
                "move it to another process (multiprocessing, DataLoader workers), "
            },
            if p.mean_waiters > 1.0 {
                format!(
                    "; with {:.1} threads queueing on average, more threads will not help",
                    p.mean_waiters
                )
            } else {
                String::new()
            }
        )),
    }
}

/// What the hint says where the holds it is about have no Python stack.
const NO_STACKS: &str = "The trace has no Python stack for those holds (another tool's trace, \
     one recorded with --no-stacks, or a holder with no Python frame), so what held the GIL, Python \
     code or one native call, and where, is not told.";

/// The process was stopped when the recording began and ran again before it ended.
fn stopped_at_the_start() -> String {
    "the process was stopped when the recording began (SIGSTOP, Ctrl+Z, or a debugger) and ran \
     again before it ended: the waits while it was stopped are the stop's, not the GIL's."
        .to_string()
}

/// The process was stopped: its waits are the stop's, not the GIL's. The pid and host are the
/// recording's own (a merged trace renumbers pids that collide).
fn stopped(when: &str, p: &ProcessAnswer) -> String {
    let (pid, host) = match &p.facts.recording {
        Some(r) => (r.pid, r.host.as_deref()),
        None => (p.pid, p.facts.host.as_deref()),
    };
    let on_host = host.map(|h| format!(" on {h}")).unwrap_or_default();
    format!(
        "the process was stopped {when} of the recording (SIGSTOP, Ctrl+Z, or a debugger: state \
         T): none of its threads ran, and the one holding the GIL kept it through the stop, so \
         the waits then are the stop's, not the GIL's. Let it run (kill -CONT {pid}{on_host}, or \
         continue it in the debugger) and record again."
    )
}

/// Samples further apart than the switch interval: the hand-offs fall between them, so the code
/// that kept the GIL is not told (infer/native_call.rs).
fn too_slow_to_tell(p: &ProcessAnswer, hz: f64) -> String {
    // Five samples an interval, and not under 1 kHz; gilsample samples at 100 kHz at most.
    let wanted_hz = (5000.0 / p.switch_interval_ms).max(1000.0);
    let way_on = if wanted_hz <= 100_000.0 {
        format!(
            "To see who made whom wait and why, record at --rate {}khz or more (the default is \
             10khz).",
            (wanted_hz / 1000.0).ceil()
        )
    } else {
        "No rate gilsample takes is that fast: a longer switch interval \
         (sys.setswitchinterval) would let it tell."
            .to_string()
    };
    format!(
        "sampled every {} ({hz} Hz), longer than the {} switch interval at which threads hand the \
         GIL over: hand-offs between two samples are not seen, holds look longer than they were, \
         and whether Python code or one native call kept the GIL is not told. {way_on}",
        ms(1000.0 / hz),
        ms(p.switch_interval_ms),
    )
}

/// One native call that keeps the GIL: how long at a time against the switch interval, and what helps.
fn native_call_hint(p: &ProcessAnswer, waited: &str, whom: &str, f: &HeldIn) -> String {
    // Code the user cannot change is not told to release the GIL inside.
    let helps = if called_from_the_standard_library(f) {
        "It is called from Python's standard library, whose C code does not let the GIL go \
         there. What helps: call it on smaller pieces, use a library or an option that releases \
         the GIL, or run it in another process (a process pool)."
    } else {
        "What helps: release the GIL inside it (Py_BEGIN_ALLOW_THREADS, py::gil_scoped_release, \
         Cython's `with nogil`), call it on smaller pieces, use a library or an option that \
         releases the GIL, or run it in another process."
    };
    format!(
        "{waited}, {whom}, {}: native code that keeps the GIL for up to {} at a time (p99 {}) against \
         the {} switch interval, because it never reaches the point where the interpreter lets \
         go. {helps}",
        place(f),
        ms(f.longest_ms),
        ms(f.p99_ms),
        ms(p.switch_interval_ms),
    )
}

/// Standard-library modules that call the user's callables (a thread's target, an executor's work
/// item, an event loop's callback): a native call made there is the user's own code.
const CALLS_USER_CODE: [&str; 6] = [
    "threading.py",
    "concurrent/",
    "asyncio/",
    "multiprocessing/",
    "sched.py",
    "socketserver.py",
];

/// Whether the call site is in the interpreter's own library (`.../lib/python3.X/json/encoder.py`,
/// `/usr/lib64/python3.X/...`), not in an installed package (`site-packages`, `dist-packages`), the
/// user's code, or a module that calls the user's callables (`CALLS_USER_CODE`).
fn called_from_the_standard_library(f: &HeldIn) -> bool {
    let Some(Some(site)) = &f.call_site else {
        return false;
    };
    let Some(file) = site.file.as_deref() else {
        return false;
    };
    let is_version_dir = |dir: &str| {
        dir.strip_prefix("python3.")
            .is_some_and(|minor| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
    };
    let parts: Vec<&str> = file.split('/').collect();
    let Some(at) = parts
        .windows(2)
        .position(|w| (w[0] == "lib" || w[0] == "lib64") && is_version_dir(w[1]))
    else {
        return false;
    };
    let inside = parts[at + 2..].join("/");
    !inside.is_empty()
        && !inside.starts_with("site-packages/")
        && !inside.starts_with("dist-packages/")
        && !CALLS_USER_CODE.iter().any(|m| inside.starts_with(m))
}

/// The holders a thread waited for that lead: the first, and any within `LEAD_RATIO` of it.
fn leaders(t: &ThreadAnswer) -> Vec<&Holder> {
    let holders: Vec<&Holder> = t
        .waited_for
        .iter()
        .filter(|h| h.tid != NO_HOLDER_SEEN && h.s > 0.0)
        .collect();
    let Some(first) = holders.first() else {
        return Vec::new();
    };
    let lead = first.s;
    holders
        .into_iter()
        .filter(|h| h.s * LEAD_RATIO >= lead)
        .collect()
}

/// "mostly for X (N% of its waiting)" when X clearly leads; else "spread over N holders, A–B% each"
/// ("N of its M holders" where others, further behind, were waited for too).
fn whom(t: &ThreadAnswer, leaders: &[&Holder]) -> String {
    let shares: Vec<f64> = leaders.iter().map(|h| pct(h.s, t.wait_s)).collect();
    match leaders {
        [one] => format!("mostly for {} ({:.0}% of its waiting)", one.name, shares[0]),
        _ => {
            let (lo, hi) = shares
                .iter()
                .fold((f64::MAX, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
            let (lo, hi) = (lo.round(), hi.round());
            let holders = t
                .waited_for
                .iter()
                // Those the summary's lines show (not at "0%").
                .filter(|h| h.tid != NO_HOLDER_SEEN && pct(h.s, t.wait_s) >= 1.0)
                .count();
            let count = if holders > leaders.len() {
                format!("{} of its {holders}", leaders.len())
            } else {
                leaders.len().to_string()
            };
            if lo == hi {
                format!("spread over {count} holders, {lo:.0}% each")
            } else {
                format!("spread over {count} holders, {lo:.0}–{hi:.0}% each")
            }
        }
    }
}

/// The code that kept the leading holders: their places summed, the largest.
fn leading_code(leaders: &[&Holder]) -> Option<HeldIn> {
    let mut summed: Vec<HeldIn> = Vec::new();
    for f in leaders.iter().flat_map(|h| &h.functions) {
        match summed
            .iter_mut()
            .find(|s| s.function == f.function && s.native_call == f.native_call)
        {
            Some(s) => {
                s.s += f.s;
                s.longest_ms = s.longest_ms.max(f.longest_ms);
                s.p99_ms = s.p99_ms.max(f.p99_ms);
            }
            None => summed.push(f.clone()),
        }
    }
    summed.into_iter().max_by(|a, b| a.s.total_cmp(&b.s))
}

/// From this share of the waiting found with the GIL free, the cores are called busy. Measured
/// (docs/accuracy.md, "Busy cores"): 46-58% on `dispatch` with every core busy, at most 4.5% on the
/// other benchmark workloads, whose GIL is rarely free while a thread waits.
pub(crate) const BUSY_CORES_SHARE: f64 = 0.2;

/// The share of the waiting found with the GIL free, where it says the cores were busy.
pub(crate) fn busy_cores(p: &ProcessAnswer) -> Option<f64> {
    p.waiting_with_gil_free_share
        .filter(|&share| share >= BUSY_CORES_SHARE)
}

#[cfg(test)]
#[path = "hint_tests.rs"]
mod tests;
