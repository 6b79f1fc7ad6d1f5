//! The keys pressed in the full-screen view, read from the terminal here rather than through
//! crossterm's event reader: once the terminal hangs up (an ssh connection dropped, the terminal
//! window closed, tmux killed), that reader's loop reads end-of-file forever at full CPU and never
//! returns (crossterm 0.29, `UnixInternalEventSource::try_read`), so the view never saw the stop and
//! gilsample never exited. Here a hang-up is an answer: the view ends as if quit.
//!
//! Only what the view's keys need is decoded: printable characters, Tab, Ctrl+C (a byte in raw
//! mode), Esc, and the arrows, Home, Page Up/Down and Shift+Tab as terminals send them (`ESC [ x`,
//! `ESC O x`, `ESC [ n ~`). A window's new size is taken at the next redraw.

use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What one wait on the terminal brought.
#[derive(Debug, PartialEq)]
pub enum Input {
    /// Keys pressed (possibly none: bytes that were no key the view knows).
    Keys(Vec<KeyEvent>),
    /// Nothing within the wait.
    Nothing,
    /// The terminal is gone.
    HungUp,
}

/// The terminal the keys come from: stdin where it is one, else /dev/tty (as crossterm's raw mode
/// chooses).
pub struct KeyReader {
    tty: Option<File>,
}

impl KeyReader {
    pub fn open() -> io::Result<KeyReader> {
        let tty = match io::stdin().is_terminal() {
            true => None,
            false => Some(File::open("/dev/tty")?),
        };
        Ok(KeyReader { tty })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match &self.tty {
            Some(file) => file.as_fd(),
            None => io::stdin().as_fd_static(),
        }
    }

    /// Waits up to `timeout` for keys.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Input> {
        let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(millis)) {
            Ok(0) | Err(Errno::EINTR) => return Ok(Input::Nothing),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if revents.intersects(PollFlags::POLLNVAL) {
            return Ok(Input::HungUp);
        }
        // Readable, or hung up (a read then says so: 0 bytes or EIO).
        let mut bytes = [0u8; 64];
        let read = match &mut self.tty {
            Some(file) => file.read(&mut bytes),
            None => io::stdin().lock().read(&mut bytes),
        };
        match read {
            Ok(0) => Ok(Input::HungUp),
            Ok(n) => Ok(Input::Keys(decode(&bytes[..n]))),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Input::Nothing),
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(Input::HungUp),
            Err(e) => Err(e),
        }
    }
}

/// stdin's fd, borrowed for as long as the program runs (fd 0 stays open).
trait StaticFd {
    fn as_fd_static(&self) -> BorrowedFd<'static>;
}

impl StaticFd for io::Stdin {
    fn as_fd_static(&self) -> BorrowedFd<'static> {
        // SAFETY: fd 0 is open for the life of the process; nothing here closes it.
        unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) }
    }
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// The keys in `bytes`, one read's worth. A lone ESC at the end is the Esc key; an escape sequence
/// the view has no use for is skipped whole.
pub fn decode(bytes: &[u8]) -> Vec<KeyEvent> {
    let mut keys = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        at += 1;
        match byte {
            0x03 => keys.push(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            b'\t' => keys.push(key(KeyCode::Tab)),
            0x1b if at == bytes.len() => keys.push(key(KeyCode::Esc)),
            0x1b => {
                let (code, used) = escape_sequence(&bytes[at..]);
                keys.extend(code.map(key));
                at += used;
            }
            0x20..=0x7e => keys.push(key(KeyCode::Char(char::from(byte)))),
            _ => {}
        }
    }
    keys
}

/// The key of the escape sequence that `rest` (the bytes after ESC) starts with, and how many of
/// its bytes it took.
fn escape_sequence(rest: &[u8]) -> (Option<KeyCode>, usize) {
    match rest.first() {
        // ESC ESC: the first one was the key.
        Some(0x1b) | None => (Some(KeyCode::Esc), 0),
        Some(b'[') => {
            // CSI: parameters (digits, ';'), then one final byte from '@' to '~'.
            let body = &rest[1..];
            let Some(end) = body.iter().position(|b| (0x40..=0x7e).contains(b)) else {
                return (None, rest.len());
            };
            let code = match (&body[..end], body[end]) {
                (b"", b'A') => Some(KeyCode::Up),
                (b"", b'B') => Some(KeyCode::Down),
                (b"", b'C') => Some(KeyCode::Right),
                (b"", b'D') => Some(KeyCode::Left),
                (b"", b'H') | (b"1" | b"7", b'~') => Some(KeyCode::Home),
                (b"", b'Z') => Some(KeyCode::BackTab),
                (b"5", b'~') => Some(KeyCode::PageUp),
                (b"6", b'~') => Some(KeyCode::PageDown),
                _ => None,
            };
            (code, 1 + end + 1)
        }
        // SS3: the arrows and Home in a terminal's application cursor mode.
        Some(b'O') => {
            let code = match rest.get(1) {
                Some(b'A') => Some(KeyCode::Up),
                Some(b'B') => Some(KeyCode::Down),
                Some(b'C') => Some(KeyCode::Right),
                Some(b'D') => Some(KeyCode::Left),
                Some(b'H') => Some(KeyCode::Home),
                _ => None,
            };
            (code, rest.len().min(2))
        }
        // Alt+key: the key alone.
        Some(_) => (None, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(bytes: &[u8]) -> Vec<KeyCode> {
        decode(bytes).into_iter().map(|k| k.code).collect()
    }

    #[test]
    fn keys_as_terminals_send_them() {
        assert_eq!(
            codes(b"qst p"),
            [
                KeyCode::Char('q'),
                KeyCode::Char('s'),
                KeyCode::Char('t'),
                KeyCode::Char(' '),
                KeyCode::Char('p')
            ]
        );
        assert_eq!(codes(b"\x1b"), [KeyCode::Esc]);
        assert_eq!(
            codes(b"\x1b[A\x1b[B\x1b[C\x1b[D"),
            [KeyCode::Up, KeyCode::Down, KeyCode::Right, KeyCode::Left]
        );
        assert_eq!(codes(b"\x1bOA\x1bOD"), [KeyCode::Up, KeyCode::Left]);
        assert_eq!(
            codes(b"\x1b[5~\x1b[6~\x1b[H\x1b[1~\x1b[Z\t"),
            [
                KeyCode::PageUp,
                KeyCode::PageDown,
                KeyCode::Home,
                KeyCode::Home,
                KeyCode::BackTab,
                KeyCode::Tab
            ]
        );
        let ctrl_c = decode(b"\x03");
        assert_eq!(ctrl_c[0].code, KeyCode::Char('c'));
        assert_eq!(ctrl_c[0].modifiers, KeyModifiers::CONTROL);
    }

    #[test]
    fn sequences_the_view_has_no_use_for_are_skipped_whole() {
        // F5, a mouse report's start, a cut-off CSI: none is taken for the letters inside it.
        assert_eq!(codes(b"\x1b[15~q"), [KeyCode::Char('q')]);
        assert_eq!(codes(b"\x1b[1;5A"), []);
        assert_eq!(codes(b"\x1b[12"), []);
        // Two Esc presses in one read, and Alt+q as q.
        assert_eq!(codes(b"\x1b\x1b"), [KeyCode::Esc, KeyCode::Esc]);
        assert_eq!(codes(b"\x1bq"), [KeyCode::Char('q')]);
        // Bytes that are no key.
        assert_eq!(codes(b"\x00\x7f\xc3\xa9"), []);
    }

    #[test]
    fn a_terminal_that_hung_up_is_said_not_waited_on() {
        // A pty whose other side is closed: what an ssh connection that dropped leaves.
        let pty = nix::pty::openpty(None, None).unwrap();
        drop(pty.master);
        let mut reader = KeyReader {
            tty: Some(File::from(pty.slave)),
        };
        assert_eq!(reader.wait(Duration::from_secs(60)).unwrap(), Input::HungUp);
    }
}
