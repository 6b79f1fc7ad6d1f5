//! The terminal of the full-screen view: raw mode and the alternate screen while it is up, and the
//! terminal as it was afterwards however the view ends: quitting, a signal (the stop flag ends the
//! view's loop), a panic (the panic hook), or `process::exit` (a second Ctrl+C or SIGTERM: an
//! `atexit` handler, which writes and resets the terminal with plain system calls, since another
//! thread may hold stdout's lock at that moment). A line said on stderr while the view is up (a
//! signal's, `say`) would go with the alternate screen: it is kept and said once the view is left.

use std::io::{self, Stdout, Write, stdout};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::Terminal;
use ratatui::backend::{Backend, ClearType, CrosstermBackend};
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

pub type Tui = Terminal<CrosstermBackend<Stdout>>;

/// The view is up: the terminal is raw and on the alternate screen.
static UP: AtomicBool = AtomicBool::new(false);
static HOOKS: Once = Once::new();
/// The terminal's settings before raw mode, for the `atexit` path.
static SAVED: std::sync::Mutex<Option<libc::termios>> = std::sync::Mutex::new(None);

/// Lines said while the view was up, to say once it is left. Its lock also keeps `say` and
/// `restore` apart, so that no line goes to the alternate screen as it is being left.
static HELD_LINES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Leaves the alternate screen and shows the cursor (what `LeaveAlternateScreen` and `Show` write).
const LEAVE: &[u8] = b"\x1b[?1049l\x1b[?25h";

/// The full-screen view's terminal; restored when dropped.
pub struct Screen {
    pub terminal: Tui,
}

impl Screen {
    pub fn enter() -> io::Result<Screen> {
        HOOKS.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore_after_panic();
                previous(info)
            }));
            // SAFETY: registers a function with no arguments that only makes system calls.
            unsafe { libc::atexit(restore_at_exit) };
        });
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: stdout is a terminal (top checked); `saved` is a valid termios to fill.
        if unsafe { libc::tcgetattr(libc::STDOUT_FILENO, &mut saved) } == 0 {
            *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
        }
        enable_raw_mode()?;
        UP.store(true, Ordering::SeqCst);
        let entered = execute!(stdout(), EnterAlternateScreen, Hide)
            .and_then(|()| Terminal::new(CrosstermBackend::new(stdout())));
        match entered {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Clears the terminal and has the next draw paint every cell. Not ratatui's
    /// `Terminal::clear`: that asks the terminal where its cursor is and reads the answer, which
    /// competes with the key reader for the terminal's bytes, and which spun for good on a
    /// terminal that had hung up (tests/top.rs, the terminal that goes away).
    pub fn paint_all_at_next_draw(&mut self) -> io::Result<()> {
        self.terminal.backend_mut().clear_region(ClearType::All)?;
        // The buffer the next draw is compared with, emptied as the screen now is: every cell
        // the next frame holds is written.
        self.terminal.swap_buffers();
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Says `line` on stderr: at once, or, while the full-screen view is up, once the view is left
/// (the alternate screen would take it away with it).
pub fn say(line: &str) {
    let mut held = HELD_LINES.lock().unwrap_or_else(|e| e.into_inner());
    if UP.load(Ordering::SeqCst) {
        held.push(line.to_string());
    } else {
        // Not eprintln: a panic here, with the lock held, would wait for it in the panic hook.
        let _ = writeln!(io::stderr(), "{line}");
    }
}

/// Puts the terminal back as it was, once, then says the lines held meanwhile; errors (a terminal
/// that hung up) are ignored: there is nothing left to show them on.
pub fn restore() {
    leave_and_say(Some(HELD_LINES.lock().unwrap_or_else(|e| e.into_inner())));
}

/// `restore` from the panic hook: another thread may hold the held lines' lock while it waits for
/// stdout, which the panicking thread may hold, so the lines are said only if the lock is free.
fn restore_after_panic() {
    leave_and_say(HELD_LINES.try_lock().ok());
}

fn leave_and_say(held: Option<std::sync::MutexGuard<'_, Vec<String>>>) {
    if UP.swap(false, Ordering::SeqCst) {
        let _ = execute!(stdout(), LeaveAlternateScreen, Show);
        let _ = disable_raw_mode();
    }
    for line in held
        .into_iter()
        .flat_map(|mut held| std::mem::take(&mut *held))
    {
        let _ = writeln!(io::stderr(), "{line}");
    }
}

extern "C" fn restore_at_exit() {
    if UP.swap(false, Ordering::SeqCst) {
        // SAFETY: writes a constant buffer to fd 1, and resets fd 1's terminal to settings read
        // from it before.
        unsafe {
            libc::write(libc::STDOUT_FILENO, LEAVE.as_ptr().cast(), LEAVE.len());
            if let Ok(saved) = SAVED.try_lock()
                && let Some(saved) = saved.as_ref()
            {
                libc::tcsetattr(libc::STDOUT_FILENO, libc::TCSANOW, saved);
            }
            // The exit's own line (`aborted`) among them, said once; skipped if a `say` or a
            // `restore` is under way. `\r\n`: the terminal may still be raw.
            if let Ok(mut held) = HELD_LINES.try_lock() {
                for line in held.drain(..) {
                    libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len());
                    libc::write(libc::STDERR_FILENO, b"\r\n".as_ptr().cast(), 2);
                }
            }
        }
    }
}
