//! The table `gilsample top` shows, from `report`'s answer for a window: per process its headline,
//! per thread one row. Both the full-screen view and the plain tables are made of these cells, so
//! they say the same. Pure: no terminal, no I/O.

use std::fmt::Write;

use crate::report::analyze::{NO_HOLDER_SEEN, ProcessAnswer, ThreadAnswer};
use crate::report::hint::BUSY_CORES_SHARE;

/// How threads are ordered: by their share of the window spent waiting for the GIL, or holding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// By share of the window spent waiting for the GIL.
    Wait,
    /// By share of the window spent holding it.
    Hold,
}

impl SortBy {
    /// The other order: what the `s` key switches to.
    pub fn other(self) -> SortBy {
        match self {
            SortBy::Wait => SortBy::Hold,
            SortBy::Hold => SortBy::Wait,
        }
    }

    /// The order's word in the header, `wait` or `hold`.
    pub fn word(self) -> &'static str {
        match self {
            SortBy::Wait => "wait",
            SortBy::Hold => "hold",
        }
    }
}

/// The columns' titles, in order; `ThreadRow::cells` gives their contents.
pub const COLUMNS: [&str; 8] = [
    "THREAD",
    "WAIT%",
    "HOLD%",
    "WAITS/S",
    "P99 MS",
    "WAITED FOR",
    "IN CODE",
    "HOLDING",
];

/// The columns of figures, right-aligned.
pub const FIGURES: std::ops::Range<usize> = 1..5;

/// One thread over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRow {
    /// The thread's id in gilsample's PID namespace.
    pub tid: u32,
    /// Its Python name (or the kernel's, where Python has none).
    pub name: String,
    /// Percentage of the window it spent waiting for the GIL.
    pub wait_pct: f64,
    /// Percentage of the window it held the GIL.
    pub hold_pct: f64,
    /// GIL waits per second of the window.
    pub waits_per_s: f64,
    /// `None` when it did not wait.
    pub p99_ms: Option<f64>,
    /// The holder it waited for most, with that holder's share of its waiting (shown share first,
    /// so that a narrow column cuts the name, not the figure).
    pub most_for: Option<(String, f64)>,
    /// That holder's code while it waited (its innermost function), where the trace has stacks.
    pub in_code: Option<String>,
    /// How it held the GIL, where that is known.
    pub holding: Option<String>,
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// A holder kept the GIL asleep in a syscall at least this share of its holding to be called
/// "blocked in" it.
const BLOCKED_HOLDING_SHARE: f64 = 0.5;

/// How a thread held the GIL over the window: "blocked in SYSCALL" when it kept the GIL asleep in a
/// syscall for most of its holding (its `held_while_blocked` stretches); else "native call" or
/// "Python code" for the kind of most of its holding (`hold_functions`, report/hold_code.rs);
/// `None` where the answer does not say.
fn holding(thread: &ThreadAnswer) -> Option<String> {
    if thread.hold_s <= 0.0 {
        return None;
    }
    if let Some(blocked) = thread.held_while_blocked.first()
        && blocked.s >= BLOCKED_HOLDING_SHARE * thread.hold_s
    {
        return Some(format!("blocked in {}", blocked.syscall));
    }
    let native: f64 = thread
        .hold_functions
        .iter()
        .filter(|f| f.native_call)
        .map(|f| f.s)
        .sum();
    let python: f64 = thread
        .hold_functions
        .iter()
        .filter(|f| !f.native_call)
        .map(|f| f.s)
        .sum();
    match (native, python) {
        (n, p) if n + p <= 0.0 => None,
        (n, p) if n >= p => Some("native call".into()),
        _ => Some("Python code".into()),
    }
}

impl ThreadRow {
    /// The row of `thread` over a window of `window_s` seconds.
    pub fn of(thread: &ThreadAnswer, window_s: f64) -> ThreadRow {
        let most = thread.waited_for.first().filter(|h| h.s > 0.0);
        ThreadRow {
            tid: thread.tid,
            name: thread.name.clone(),
            wait_pct: share(thread.wait_s, window_s),
            hold_pct: share(thread.hold_s, window_s),
            waits_per_s: if window_s > 0.0 {
                thread.waits.count as f64 / window_s
            } else {
                0.0
            },
            p99_ms: (thread.waits.count > 0).then_some(thread.waits.p99_ms),
            most_for: most.map(|h| {
                let who = if h.tid == NO_HOLDER_SEEN {
                    "nobody seen".to_string()
                } else {
                    h.name.clone()
                };
                (who, share(h.s, thread.wait_s))
            }),
            in_code: most
                .and_then(|h| h.functions.first())
                .map(|f| f.function.clone()),
            // Beside a HOLD% that reads 0.0, how it held would describe nothing visible.
            holding: (share(thread.hold_s, window_s) >= 0.05)
                .then(|| holding(thread))
                .flatten(),
        }
    }

    /// The row's cells, in `COLUMNS`' order.
    pub fn cells(&self) -> [String; 8] {
        let dash = || "-".to_string();
        [
            self.name.clone(),
            format!("{:.1}", self.wait_pct),
            format!("{:.1}", self.hold_pct),
            format!("{:.1}", self.waits_per_s),
            self.p99_ms.map_or_else(dash, |ms| format!("{ms:.1}")),
            self.most_for
                .as_ref()
                .map_or_else(dash, |(who, pct)| format!("{pct:.0}% {who}")),
            self.in_code.clone().unwrap_or_else(dash),
            self.holding.clone().unwrap_or_else(dash),
        ]
    }
}

/// The threads of `answer` as rows, sorted by `sort`, largest first (then by the other figure and
/// by tid, so that equal rows keep their places from one refresh to the next).
pub fn rows(answer: &ProcessAnswer, sort: SortBy) -> Vec<ThreadRow> {
    let mut rows: Vec<ThreadRow> = answer
        .threads
        .iter()
        .map(|t| ThreadRow::of(t, answer.window_s))
        .collect();
    let key = |r: &ThreadRow| match sort {
        SortBy::Wait => (r.wait_pct, r.hold_pct),
        SortBy::Hold => (r.hold_pct, r.wait_pct),
    };
    rows.sort_by(|a, b| {
        let (a1, a2) = key(a);
        let (b1, b2) = key(b);
        b1.total_cmp(&a1)
            .then(b2.total_cmp(&a2))
            .then(a.tid.cmp(&b.tid))
    });
    rows
}

/// A process's headline over the window: how busy the GIL was and how many threads queued for it,
/// and, as the summary says it, where much of the waiting found the GIL free: busy cores.
pub fn headline(answer: &ProcessAnswer) -> String {
    // The figures are of the time seen: a sampler that fell behind (no real-time priority on busy
    // cores) says how much it missed.
    let unseen = answer
        .unseen_share_worth_saying()
        .map(|share| format!(" ({:.0}% unseen: the sampler fell behind)", 100.0 * share))
        .unwrap_or_default();
    let mut line = format!(
        "GIL busy {:.0}%{unseen}, {:.1} waiting on average",
        100.0 * answer.gil_busy_share,
        answer.mean_waiters
    );
    if let Some(share) = waiting_with_the_gil_free(answer).filter(|&s| s >= BUSY_CORES_SHARE) {
        let _ = write!(
            line,
            "; {:.0}% of the waiting with the GIL free: busy cores",
            100.0 * share
        );
    }
    line
}

/// The share of the waiting during which the GIL was free: the sampler's count where the answer has
/// it (a finished recording's), else the waiting no hold covered, which the table calls "nobody
/// seen" (the live view's answers are built from slices alone). A waiter woken to take a free GIL
/// that has no CPU yet waits there: the summary's "busy cores" (docs/accuracy.md).
fn waiting_with_the_gil_free(answer: &ProcessAnswer) -> Option<f64> {
    if answer.waiting_with_gil_free_share.is_some() {
        return answer.waiting_with_gil_free_share;
    }
    let waited: f64 = answer.threads.iter().map(|t| t.wait_s).sum();
    let unheld: f64 = answer
        .threads
        .iter()
        .flat_map(|t| &t.waited_for)
        .filter(|h| h.tid == NO_HOLDER_SEEN)
        .map(|h| h.s)
        .sum();
    (waited > 0.0).then(|| (unheld / waited).min(1.0))
}

/// Shortens `text` to `width` characters, marking the cut with `~`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('~');
    cut
}

/// Shortens a cell of the plain table to `width` characters by cutting its middle (`~` marks the
/// cut): a thread's name ends in what tells it from its siblings (`QueueFeederThread [13665]`,
/// `worker-3`), and a place in code in its file and line.
pub fn fit_middle(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width || width < 3 {
        return fit(text, width);
    }
    let tail = (width - 1) / 2;
    let head = width - 1 - tail;
    let mut cut: String = chars[..head].iter().collect();
    cut.push('~');
    cut.extend(&chars[chars.len() - tail..]);
    cut
}

/// Widths of the plain table's name, holder and code columns: wide enough for what they hold, up to
/// a limit, so a table stays a table in a log.
const PLAIN_WIDTHS: [usize; 3] = [24, 24, 40];

/// `rows` as a plain-text table (no escape codes), at most `max_rows` of them; a last line counts the
/// rest.
pub fn plain_table(out: &mut String, rows: &[ThreadRow], max_rows: Option<usize>) {
    let shown = &rows[..max_rows.unwrap_or(rows.len()).min(rows.len())];
    let cells: Vec<[String; 8]> = shown.iter().map(ThreadRow::cells).collect();
    let mut widths: Vec<usize> = COLUMNS.iter().map(|c| c.len()).collect();
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    for (column, limit) in [0, 5, 6].into_iter().zip(PLAIN_WIDTHS) {
        widths[column] = widths[column].min(limit);
    }
    let line = |out: &mut String, row: &[String]| {
        let mut text = String::new();
        for (i, cell) in row.iter().enumerate() {
            let cell = fit_middle(cell, widths[i]);
            if i > 0 {
                text.push_str("  ");
            }
            if FIGURES.contains(&i) {
                let _ = write!(text, "{cell:>width$}", width = widths[i]);
            } else {
                let _ = write!(text, "{cell:<width$}", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(out, &COLUMNS.map(String::from));
    for row in &cells {
        line(out, row);
    }
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "(no thread held or waited for the GIL in this window: they slept or ran without it)"
        );
    }
    if shown.len() < rows.len() {
        let more = rows.len() - shown.len();
        let threads = if more == 1 { "thread" } else { "threads" };
        let _ = writeln!(out, "(and {more} more {threads})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::analyze::{Blocked, Durations, Holder};
    use crate::report::hold_code::HeldIn;

    fn thread(tid: u32, name: &str, wait_s: f64, hold_s: f64) -> ThreadAnswer {
        ThreadAnswer {
            tid,
            name: name.into(),
            hold_s,
            wait_s,
            drop_s: 0.0,
            released_s: 0.0,
            waits: Durations {
                count: if wait_s > 0.0 { 40 } else { 0 },
                p50_ms: 5.0,
                p99_ms: 12.25,
                max_ms: 13.0,
            },
            holds: Durations::default(),
            waited_for: Vec::new(),
            hold_functions: Vec::new(),
            held_while_blocked: Vec::new(),
        }
    }

    fn answer(threads: Vec<ThreadAnswer>) -> ProcessAnswer {
        ProcessAnswer {
            facts: crate::report::other_data::RecordingFacts {
                rank: Some(0),
                ..Default::default()
            },
            pid: 1,
            file: String::new(),
            window_s: 2.0,
            stopped_s: 0.0,
            unseen_s: 0.0,
            switch_interval_ms: 5.0,
            gil_busy_share: 0.987,
            importing_share: None,
            mean_waiters: 2.04,
            waiting_with_gil_free_share: None,
            threads,
        }
    }

    #[test]
    fn a_row_says_whom_a_thread_waited_for_most_and_in_what_code() {
        let mut waiter = thread(2, "loader", 1.5, 0.5);
        waiter.waited_for = vec![
            Holder {
                tid: 3,
                name: "logger".into(),
                s: 1.2,
                functions: vec![HeldIn {
                    function: "emit (log.py:9)".into(),
                    s: 1.0,
                    native_call: false,
                    longest_ms: 5.0,
                    p99_ms: 5.0,
                    call_site: None,
                    callee: None,
                }],
            },
            Holder {
                tid: NO_HOLDER_SEEN,
                name: "no holder seen".into(),
                s: 0.3,
                functions: Vec::new(),
            },
        ];
        let row = ThreadRow::of(&waiter, 2.0);
        assert_eq!(
            row.cells(),
            [
                "loader",
                "75.0",
                "25.0",
                "20.0",
                "12.2",
                "80% logger",
                "emit (log.py:9)",
                "-"
            ]
            .map(String::from)
        );
        let idle = ThreadRow::of(&thread(4, "idle", 0.0, 0.0), 2.0);
        assert_eq!(idle.cells()[4..6], ["-".to_string(), "-".to_string()]);
    }

    #[test]
    fn a_holder_asleep_in_a_syscall_for_most_of_its_holding_is_blocked_in_it() {
        let mut holder = thread(3, "ctypes", 0.0, 1.0);
        holder.held_while_blocked = vec![Blocked {
            syscall: "clock_nanosleep".into(),
            s: 0.6,
            others_waited_s: 1.1,
        }];
        let row = ThreadRow::of(&holder, 2.0);
        assert_eq!(row.holding.as_deref(), Some("blocked in clock_nanosleep"));
        holder.held_while_blocked[0].s = 0.4;
        assert_eq!(ThreadRow::of(&holder, 2.0).holding, None);
    }

    #[test]
    fn holding_says_native_call_or_python_code_for_most_of_the_holding() {
        let held = |native_call, s| HeldIn {
            function: "f (a.py:1)".into(),
            s,
            native_call,
            longest_ms: 100.0,
            p99_ms: 90.0,
            call_site: None,
            callee: None,
        };
        let mut holder = thread(3, "encoder", 0.0, 1.0);
        holder.hold_functions = vec![held(true, 0.7), held(false, 0.3)];
        assert_eq!(
            ThreadRow::of(&holder, 2.0).holding.as_deref(),
            Some("native call")
        );
        holder.hold_functions = vec![held(true, 0.2), held(false, 0.8)];
        assert_eq!(
            ThreadRow::of(&holder, 2.0).holding.as_deref(),
            Some("Python code")
        );
        // A hold that reads 0.0% (0.5 ms of 2 s) says nothing of how.
        holder.hold_s = 0.0005;
        let row = ThreadRow::of(&holder, 2.0);
        assert_eq!(format!("{:.1}", row.hold_pct), "0.0");
        assert_eq!(row.holding, None);
    }

    #[test]
    fn rows_sort_by_wait_or_by_hold_and_keep_ties_in_tid_order() {
        let a = answer(vec![
            thread(5, "a", 1.0, 0.2),
            thread(3, "b", 0.2, 1.6),
            thread(4, "c", 0.2, 1.6),
        ]);
        let names = |sort| -> Vec<String> { rows(&a, sort).into_iter().map(|r| r.name).collect() };
        assert_eq!(names(SortBy::Wait), ["a", "b", "c"]);
        assert_eq!(names(SortBy::Hold), ["b", "c", "a"]);
        assert_eq!(headline(&a), "GIL busy 99%, 2.0 waiting on average");
    }

    #[test]
    fn the_headline_says_how_much_the_sampler_saw_nothing_of() {
        let mut a = answer(vec![thread(2, "a", 1.0, 0.2)]);
        a.unseen_s = 0.5;
        assert_eq!(
            headline(&a),
            "GIL busy 99% (20% unseen: the sampler fell behind), 2.0 waiting on average"
        );
        a.unseen_s = 0.01;
        assert_eq!(headline(&a), "GIL busy 99%, 2.0 waiting on average");
    }

    #[test]
    fn the_headline_says_busy_cores_where_much_of_the_waiting_found_the_gil_free() {
        let no_holder = |s| Holder {
            tid: NO_HOLDER_SEEN,
            name: "no holder seen".into(),
            s,
            functions: Vec::new(),
        };
        // Live: the waiting no hold covered, over all the waiting (0.3 + 0.2 of 1.0 + 1.5 s).
        let mut a = answer(vec![thread(2, "a", 1.0, 0.2), thread(3, "b", 1.5, 0.2)]);
        a.threads[0].waited_for = vec![no_holder(0.3)];
        a.threads[1].waited_for = vec![no_holder(0.2)];
        assert_eq!(
            headline(&a),
            "GIL busy 99%, 2.0 waiting on average; 20% of the waiting with the GIL free: busy cores"
        );
        a.threads[1].waited_for = vec![no_holder(0.19)];
        assert_eq!(headline(&a), "GIL busy 99%, 2.0 waiting on average");
        // A finished recording's own count rules where there is one.
        a.waiting_with_gil_free_share = Some(0.46);
        assert!(headline(&a).ends_with("; 46% of the waiting with the GIL free: busy cores"));
        a.threads[1].waited_for = vec![no_holder(1.5)];
        a.waiting_with_gil_free_share = Some(0.1);
        assert_eq!(headline(&a), "GIL busy 99%, 2.0 waiting on average");
    }

    #[test]
    fn a_plain_table_without_rows_says_why() {
        let mut out = String::new();
        plain_table(&mut out, &rows(&answer(Vec::new()), SortBy::Wait), None);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("THREAD "), "{out}");
        assert!(lines[1].starts_with("(no thread held or waited"), "{out}");
    }

    #[test]
    fn a_plain_table_is_aligned_text_with_a_count_of_the_rows_left_out() {
        let a = answer(vec![
            thread(5, "a-thread-with-a-name-longer-than-the-column", 1.0, 0.2),
            thread(3, "b", 0.5, 1.0),
            thread(4, "c", 0.0, 0.0),
        ]);
        let mut out = String::new();
        plain_table(&mut out, &rows(&a, SortBy::Wait), Some(2));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[0].starts_with("THREAD "), "{out}");
        // Cut in the middle: the end of a name tells threads apart.
        assert!(lines[1].starts_with("a-thread-wit~-the-column  "), "{out}");
        assert_eq!(
            fit_middle("QueueFeederThread [13665]", 20),
            "QueueFeede~d [13665]"
        );
        assert_eq!(lines[3], "(and 1 more thread)");
        // The figures line up under their titles' right edges.
        let edge = lines[0].find("WAIT%").unwrap() + "WAIT%".len();
        assert_eq!(&lines[1][edge - 4..edge], "50.0", "{out}");
        assert_eq!(&lines[2][edge - 4..edge], "25.0", "{out}");
        assert!(!out.contains('\x1b'));
    }
}
