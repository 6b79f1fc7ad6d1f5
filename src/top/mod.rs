//! `gilsample top`: the GIL live, like `top`. It is a recording (record/, the same sampler, engine
//! and trace writer) whose writers also hand each slice to a tap (trace/tap.rs), and whose
//! samplers say every few tens of milliseconds what is still open; `live` keeps that per process
//! and answers for a window with `report`'s own analysis. The answers are drawn full-screen
//! (`screen`, `view`, `terminal`) or printed as plain tables (`table`).
//!
//! The recording runs on the calling thread, as `record` does (a launched command is tied to the
//! thread that spawned it); the view runs on a thread of its own and stops the recording when it
//! is quit. The stop flag (Ctrl+C, SIGTERM, SIGHUP) ends the view as well.

mod keys;
pub mod live;
mod screen;
pub mod table;
mod terminal;
pub use terminal::say;
mod view;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::top::TopArgs;
use crate::error::{Error, Result};
use crate::infer::thread::MAX_STRETCH_NS;
use crate::record::{RecordOptions, RecordReport, Update, Watch, record, waiting};
use crate::report::analyze::ProcessAnswer;
use keys::{Input, KeyReader};
use live::{Described, Live, Span};
use screen::{Picture, ProcessLine};
use table::SortBy;
use terminal::Screen;
use view::{Action, Shown, View};

/// How the answers are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Full screen, refreshed every interval, driven by keys.
    Screen,
    /// A plain table per interval on the output (`--lines`: at most that many threads each), or
    /// just one (`--once`).
    Plain {
        /// One table only (`--once`).
        once: bool,
        /// At most this many threads per process in each table (`--lines`).
        lines: Option<usize>,
    },
}

/// How often the samplers say what is still open, at most: a tenth of the interval, so that a
/// refresh sees the recording at most that far behind.
const LIVE_EVERY_MAX: Duration = Duration::from_millis(100);
/// The full-screen view's first table is over at least this much (or the interval, if shorter):
/// over the first milliseconds the figures would mean nothing.
const FIRST_SPAN: Duration = Duration::from_millis(250);
/// The view's loop looks at keys and the stop flag this often.
const POLL: Duration = Duration::from_millis(50);

/// What `top` settles before it records: how it shows, and where the trace goes.
pub struct Plan {
    /// Full screen or plain tables.
    pub mode: Mode,
    /// How long each table's window is (`--interval`).
    pub interval: Duration,
    /// The trace's directory when `-o` was not given, removed at the end.
    temporary: Option<PathBuf>,
}

impl Plan {
    /// Refuses a full-screen view where there is no terminal to draw it on, and options that mean
    /// nothing here; a trace not asked for (`-o`) is written to a temporary directory.
    pub fn new(args: &mut TopArgs) -> Result<Plan> {
        let mode = if args.once || args.lines.is_some() {
            Mode::Plain {
                once: args.once,
                lines: args.lines.map(|n| n as usize),
            }
        } else {
            Mode::Screen
        };
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        if mode == Mode::Screen && (!std::io::stdout().is_terminal() || dumb) {
            return Err(Error::Usage(
                "gilsample top draws a full-screen table, and its output is not a terminal that \
                 can show one: add --once for one plain table, or --lines N for a plain table \
                 every interval (or use gilsample record)"
                    .into(),
            ));
        }
        if args.record.control_fd.is_some() {
            return Err(Error::Usage(
                "--control-fd drives `gilsample record`; top is driven by its keys".into(),
            ));
        }
        if args.record.merge && args.record.output.is_none() {
            return Err(Error::Usage(
                "--merge writes GIL_merged.json beside the saved traces: give -o a directory"
                    .into(),
            ));
        }
        let mut plan = Plan {
            mode,
            interval: args.interval,
            temporary: None,
        };
        if args.record.output.is_none() {
            let dir = temporary_dir()?;
            args.record.output = Some(dir.clone());
            plan.temporary = Some(dir);
        }
        Ok(plan)
    }

    /// Whether the trace is kept (`-o`).
    pub fn saves(&self) -> bool {
        self.temporary.is_none()
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        if let Some(dir) = &self.temporary {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A new directory only this user can read, for a trace nobody asked to keep.
fn temporary_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    let mut last = None;
    for attempt in 0..100u32 {
        let dir = base.join(format!(
            "gilsample-top-{}-{}-{attempt}",
            std::process::id(),
            crate::sampler::clock::monotonic_ns()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::Output {
        path: base,
        why: format!(
            "cannot make a temporary directory for the trace ({}); give -o",
            last.map_or_else(String::new, |e| e.to_string())
        ),
    })
}

/// How a `top` session ended.
pub struct Outcome {
    /// What the recording under the view came to.
    pub report: Result<RecordReport>,
    /// The user quit it (a key, or the stop flag), rather than every process ending.
    pub quit: bool,
    /// The plain table's reader closed its end (`| head`), which ended the view and the recording.
    pub reader_left: bool,
}

/// Where messages go: stderr until the full-screen view is up, then its notice line.
#[derive(Default)]
struct Console {
    screen_up: Mutex<bool>,
    notice: Mutex<Option<String>>,
}

impl Console {
    fn say(&self, text: String) {
        let up = self.screen_up.lock().unwrap_or_else(|e| e.into_inner());
        if *up {
            *self.notice.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
        } else {
            crate::stderr_line!("gilsample: {text}");
        }
    }

    fn notice(&self) -> Option<String> {
        self.notice
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Records with `opts` and shows it as `plan` says until quit, stopped, or every process ended.
/// `out` gets the plain tables.
pub fn run(
    plan: &Plan,
    mut opts: RecordOptions,
    stop: Arc<AtomicBool>,
    out: Box<dyn Write + Send>,
) -> Result<Outcome> {
    let live = Arc::new(Live::default());
    let tap_live = live.clone();
    opts.watch = Some(Watch {
        every: (plan.interval / 10).min(LIVE_EVERY_MAX),
        tap_for: Arc::new(move |pid, rank| tap_live.tap(pid, rank)),
    });
    // Quitting top ends what it launched, as py-spy's top does.
    opts.stop_command_when_stopped = true;
    let launched = matches!(opts.targets, crate::record::Targets::Launch(_));
    let console = Arc::new(Console::default());
    let done = Arc::new(AtomicBool::new(false));
    let reader_left = Arc::new(AtomicBool::new(false));
    let shown = {
        let (live, stop, done, console, reader_left) = (
            live.clone(),
            stop.clone(),
            done.clone(),
            console.clone(),
            reader_left.clone(),
        );
        let (mode, interval) = (plan.mode, plan.interval);
        thread::Builder::new()
            .name("gilsample-top".into())
            .spawn(move || {
                // However the view ends (an error, a panic), the recording stops with it.
                let _stop = StopOnDrop(&stop);
                let shown = match mode {
                    Mode::Screen => show_screen(&live, &stop, &done, &console, interval, launched),
                    Mode::Plain { once, lines } => {
                        show_plain(&live, &stop, &done, (interval, once, lines), out)
                    }
                };
                // A terminal that hung up (SIGHUP) fails the view's last reads and writes: it was
                // asked to end, and did.
                match shown {
                    Err(_) if stop.load(Ordering::SeqCst) => Ok(()),
                    // The plain table's reader left (`top --lines 1s | head`): the view ends
                    // there, quietly, as a reader that stops asks.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        reader_left.store(true, Ordering::SeqCst);
                        Ok(())
                    }
                    shown => shown,
                }
            })
            .map_err(|e| Error::io("starting the view's thread", e))?
    };
    let mut on_update = |update: Update<'_>| {
        match update {
        Update::Started { pid, python, .. } => {
            live.note_python(pid, &python);
            console.say(format!("watching process {pid} (Python {python})"));
        }
        Update::Skipped { pid, why, .. } => console.say(format!("skipping process {pid}: {why}")),
        Update::TargetStopped { pid, by_debugger } => {
            // Its live tables count the stop; the summary of `top -o` leaves it out.
            console.say(waiting::stopped(pid, by_debugger, plan.saves()))
        }
        Update::TargetContinued { pid } => console.say(waiting::continued(pid)),
        Update::ThreadOfProcess { tid, pid } => console.say(format!(
            "{tid} is a thread of process {pid}; watching process {pid}"
        )),
        Update::Launcher { pid, program } => console.say(format!(
            "process {pid} runs {program}, not Python: watching the Python processes it starts"
        )),
        Update::CommandStopped { pid, how } => console.say(format!(
            "the recording failed (the error follows), so the launched command (pid {pid}) was stopped: {}",
            how.describe()
        )),
        Update::WaitingForPython { pid, program, why } => {
            console.say(waiting::for_python(pid, program, why))
        }
        Update::WriteFailed { pid, error } => {
            console.say(format!("process {pid}: {error}; the recording stops"))
        }
        Update::WaitingForDevices {
            kind,
            duration,
            nodes_here,
        } => console.say(waiting::for_devices(kind, duration, nodes_here)),
        Update::Ready | Update::PassedOver { .. } | Update::Progress(_) => {}
    }
    };
    let report = record(&opts, stop.clone(), &mut on_update);
    let quit = stop.load(Ordering::SeqCst);
    done.store(true, Ordering::SeqCst);
    match shown.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Error::io("showing the table", e)),
        Err(_) => {
            return Err(Error::io(
                "showing the table",
                std::io::Error::other("the view failed (a bug in gilsample; the panic is above)"),
            ));
        }
    }
    Ok(Outcome {
        report,
        quit,
        reader_left: reader_left.load(Ordering::SeqCst),
    })
}

/// Sets the stop flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Every process with its answer over `view`'s span (`None` before its first samples).
fn answers(
    live: &Live,
    view: &View,
    interval: Duration,
) -> Vec<(Described, Option<ProcessAnswer>)> {
    let span = match view.shown {
        Shown::LastInterval => Span::Last(interval.as_nanos() as i128),
        Shown::SinceStart => Span::SinceStart,
    };
    live.processes()
        .into_iter()
        .map(|described| {
            let answer = live.answer(described.pid, span, view.paused_at);
            (described, answer)
        })
        .collect()
}

/// What the full-screen view shows: every process's line, the selected one's threads.
struct Tables {
    processes: Vec<ProcessLine>,
    rows: Vec<table::ThreadRow>,
    span_s: Option<f64>,
}

impl Tables {
    /// Before the first table: nothing to show yet.
    fn empty() -> Tables {
        Tables {
            processes: Vec::new(),
            rows: Vec::new(),
            span_s: None,
        }
    }
}

fn tables(live: &Live, view: &View, interval: Duration) -> Tables {
    let answers = answers(live, view, interval);
    let selected = view.selected.min(answers.len().saturating_sub(1));
    let mut out = Tables {
        processes: Vec::with_capacity(answers.len()),
        rows: Vec::new(),
        span_s: None,
    };
    for (i, (described, answer)) in answers.into_iter().enumerate() {
        if i == selected
            && let Some(answer) = &answer
        {
            out.rows = table::rows(answer, view.sort);
            out.span_s = Some(answer.length_s());
        }
        out.processes.push(ProcessLine {
            described,
            headline: answer.as_ref().map(table::headline),
        });
    }
    out
}

fn show_screen(
    live: &Live,
    stop: &AtomicBool,
    done: &AtomicBool,
    console: &Console,
    interval: Duration,
    launched: bool,
) -> std::io::Result<()> {
    // The screen comes up with the first samples: what attaching says, and its errors, stay on
    // the terminal as `record` prints them.
    while live.now_ns().is_none() {
        if stop.load(Ordering::SeqCst) || done.load(Ordering::SeqCst) {
            return Ok(());
        }
        thread::sleep(POLL / 2);
    }
    let mut screen = {
        let mut up = console.screen_up.lock().unwrap_or_else(|e| e.into_inner());
        *up = true;
        Screen::enter()?
    };
    if std::env::var_os("GILSAMPLE_TEST_PANIC_IN_TOP").is_some() {
        panic!("GILSAMPLE_TEST_PANIC_IN_TOP is set: a panic to test that the terminal is restored");
    }
    let mut keys = KeyReader::open()?;
    let mut drawn_size = screen.terminal.size()?;
    let mut view = View::default();
    let mut shown = Tables::empty();
    // The first table once the recording covers a first span worth reading.
    let first_span = interval.min(FIRST_SPAN).as_nanos() as i128;
    let mut next_refresh = Instant::now();
    let (mut redraw, mut showing) = (true, false);
    while !stop.load(Ordering::SeqCst) && !done.load(Ordering::SeqCst) {
        let covered = live
            .started_ns()
            .zip(live.now_ns())
            .is_some_and(|(start, now)| now - start >= first_span);
        showing |= covered;
        if showing && Instant::now() >= next_refresh {
            next_refresh = (next_refresh + interval).max(Instant::now());
            if view.paused_at.is_none() {
                shown = tables(live, &view, interval);
            }
            // A launched command writes to this terminal too: paint everything again.
            if launched {
                screen.paint_all_at_next_draw()?;
            }
            redraw = true;
        }
        if redraw {
            let height = screen.terminal.size()?.height;
            view.clamp(
                shown.processes.len(),
                shown.rows.len(),
                screen::visible_rows(height, shown.processes.len()),
            );
            let notice = console.notice();
            let picture = Picture {
                view: &view,
                span_s: shown.span_s,
                processes: &shown.processes,
                rows: &shown.rows,
                notice: notice.as_deref(),
            };
            screen
                .terminal
                .draw(|frame| screen::draw(frame, &picture))?;
            redraw = false;
        }
        let wait = next_refresh
            .saturating_duration_since(Instant::now())
            .min(POLL);
        let pressed = match keys.wait(wait)? {
            Input::Keys(pressed) => pressed,
            Input::Nothing => Vec::new(),
            // Nothing left to show on (its SIGHUP stops the recording too): as if quit.
            Input::HungUp => {
                stop.store(true, Ordering::SeqCst);
                break;
            }
        };
        for key in pressed {
            match view.on_key(key, shown.processes.len()) {
                Action::Quit => {
                    stop.store(true, Ordering::SeqCst);
                    return Ok(());
                }
                Action::Pause => {
                    view.paused_at = live.now_ns();
                    redraw = true;
                }
                Action::Recompute if showing => {
                    shown = tables(live, &view, interval);
                    redraw = true;
                }
                Action::Redraw | Action::Recompute => redraw = true,
                Action::Nothing => {}
            }
        }
        // A resized window is drawn again at its new size.
        let size = screen.terminal.size()?;
        redraw |= size != drawn_size;
        drawn_size = size;
    }
    Ok(())
}

/// A plain table is printed once the recording knows this much past its interval: the samples a
/// thread's held-back stretch holds are decided by then (infer/thread.rs), so the table is whole.
const SETTLED_NS: i128 = MAX_STRETCH_NS as i128;

/// Plain tables: each over one interval of the recording, counted from its first sample, so that
/// consecutive tables cover consecutive intervals, none left out: once the recording has ended
/// (`done`: its every sample is in), what is left is printed too, the last part of an interval
/// included.
fn show_plain(
    live: &Live,
    stop: &AtomicBool,
    done: &AtomicBool,
    (interval, once, lines): (Duration, bool, Option<usize>),
    mut out: Box<dyn Write + Send>,
) -> std::io::Result<()> {
    let step = interval.as_nanos() as i128;
    // Where the next table starts: the recording's first sample, then the last table's end.
    let mut printed_to: Option<i128> = None;
    loop {
        let finished = done.load(Ordering::SeqCst);
        printed_to = printed_to.or_else(|| live.started_ns());
        let next = match (live.now_ns(), printed_to) {
            (Some(now), Some(from)) => next_table_end(from, step, now, finished, once),
            _ => None,
        };
        if let (Some(to), Some(from)) = (next, printed_to) {
            let view = View {
                paused_at: Some(to),
                sort: SortBy::Wait,
                ..View::default()
            };
            let span = Duration::from_nanos((to - from).max(0) as u64);
            out.write_all(plain_tables(live, &view, span, lines).as_bytes())?;
            out.flush()?;
            if once {
                stop.store(true, Ordering::SeqCst);
                return Ok(());
            }
            printed_to = Some(to);
            continue;
        }
        if finished {
            return Ok(());
        }
        thread::sleep(POLL / 2);
    }
}

/// Where the next plain table ends, if it is due: one interval (`step`) after `from` once the
/// recording knows `SETTLED_NS` past it (`now`: its latest sample), so that the table is whole,
/// and a tenth of an interval past it, so that a recording that ends that soon after gets no
/// table of its own for the rest. Once the recording has ended every sample is in, and the rest is
/// due: whole intervals, then the last part, a rest shorter than a tenth of an interval going into
/// the table before it; with `once`, the one table, however short.
fn next_table_end(from: i128, step: i128, now: i128, finished: bool, once: bool) -> Option<i128> {
    let whole = from + step;
    if !finished {
        return (now >= whole + SETTLED_NS.max(step / 10)).then_some(whole);
    }
    if once {
        return Some(now.clamp(from, whole));
    }
    if now <= from {
        return None;
    }
    Some(if now - whole < step / 10 { now } else { whole })
}

/// Every process's headline and table over the interval that ends at `view.paused_at`.
fn plain_tables(live: &Live, view: &View, interval: Duration, lines: Option<usize>) -> String {
    let mut text = String::new();
    for (p, answer) in answers(live, view, interval) {
        text += &format!("process {}", p.pid);
        if let Some(rank) = p.rank {
            text += &format!(" (rank {rank})");
        }
        if let Some(python) = &p.python {
            text += &format!(" Python {python}");
        }
        match (&answer, p.started_ns, view.paused_at) {
            (Some(answer), Some(start), Some(at)) => {
                let to = (at - start) as f64 / 1e9;
                let from = (to - answer.length_s()).max(0.0);
                text += &format!(", {from:.1}-{to:.1} s: {}", table::headline(answer));
            }
            _ => text += ": no samples yet",
        }
        if !p.command_line.is_empty() {
            text += &format!("  {}", p.command_line);
        }
        text.push('\n');
        if let Some(answer) = &answer {
            table::plain_table(&mut text, &table::rows(answer, view.sort), lines);
        }
        text.push('\n');
    }
    text
}
