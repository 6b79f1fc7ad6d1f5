//! The keys pressed in the full-screen view, read from the terminal here rather than through
//! crossterm's event reader: once the terminal hangs up (an ssh connection dropped, the terminal
//! window closed, tmux killed), that reader's loop reads end-of-file forever at full CPU and never
//! returns (crossterm 0.29, `UnixInternalEventSource::try_read`), so the view never saw the stop and
//! gilsample never exited. Here a hang-up is an answer: the view ends as if quit.
//!
//! Only what the view's keys need is decoded: printable characters, Tab, Ctrl+C (a byte in raw
//! mode), Esc, and the arrows, Home, Page Up/Down and Shift+Tab as terminals send them (`ESC [ x`,
//! `ESC O x`, `ESC [ n ~`), a sequence cut between two reads joined up. A resized window is
//! noticed by the view's loop (top/mod.rs), which asks the terminal its size.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// After a read that ends inside an escape sequence (or on a lone ESC), how long the rest may take
/// to arrive before what came is taken as it is (a lone ESC: the Esc key).
const SEQUENCE_REST_WAIT: Duration = Duration::from_millis(25);

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

/// The terminal the keys come from, read unbuffered: /dev/tty opened anew and non-blocking (its own
/// open file, so the flag is not shared with the launched command's stdin), else stdin where it is
/// the terminal.
pub struct KeyReader {
    tty: Option<File>,
    /// The start of an escape sequence whose rest has not been read yet.
    pending: Vec<u8>,
}

impl KeyReader {
    pub fn open() -> io::Result<KeyReader> {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open("/dev/tty");
        let tty = match opened {
            Ok(file) => Some(file),
            Err(_) if io::stdin().is_terminal() => None,
            Err(e) => return Err(e),
        };
        Ok(KeyReader {
            tty,
            pending: Vec::new(),
        })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match &self.tty {
            Some(file) => file.as_fd(),
            // SAFETY: fd 0 is open for the life of the process; nothing here closes it.
            None => unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) },
        }
    }

    /// Whether the terminal has bytes within `timeout` (or hung up: the read then says so).
    fn ready(&self, timeout: Duration) -> io::Result<bool> {
        let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(millis)) {
            Ok(0) | Err(Errno::EINTR) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Appends what the terminal has to `pending`; false when it hung up (end of file, EIO, or a
    /// descriptor no longer valid).
    fn read_available(&mut self) -> io::Result<bool> {
        let mut bytes = [0u8; 1024];
        loop {
            match nix::unistd::read(self.fd(), &mut bytes) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.pending.extend_from_slice(&bytes[..n]);
                    // A blocking stdin is read once: another read could wait for the next key.
                    if n < bytes.len() || self.tty.is_none() {
                        return Ok(true);
                    }
                }
                Err(Errno::EAGAIN) => return Ok(true),
                Err(Errno::EINTR) => continue,
                Err(Errno::EIO | Errno::EBADF | Errno::ENXIO) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits up to `timeout` for keys.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Input> {
        if !self.ready(timeout)? {
            return Ok(Input::Nothing);
        }
        if !self.read_available()? {
            return Ok(Input::HungUp);
        }
        let (mut keys, used) = decode(&self.pending, false);
        self.pending.drain(..used);
        if !self.pending.is_empty() {
            // An escape sequence cut between reads: its rest, or what came is all there is.
            if self.ready(SEQUENCE_REST_WAIT)? && !self.read_available()? {
                return Ok(Input::HungUp);
            }
            keys.extend(decode(&self.pending, true).0);
            self.pending.clear();
        }
        Ok(Input::Keys(keys))
    }
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// The keys in `bytes`, and how many bytes they took. An escape sequence cut short at the end is
/// left for the next read unless `at_end` (then a lone ESC is the Esc key, and a cut sequence is
/// dropped); a sequence the view has no use for is skipped whole.
pub fn decode(bytes: &[u8], at_end: bool) -> (Vec<KeyEvent>, usize) {
    let mut keys = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        at += 1;
        match byte {
            0x03 => keys.push(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            b'\t' => keys.push(key(KeyCode::Tab)),
            0x1b => match escape_sequence(&bytes[at..]) {
                Some((code, used)) => {
                    keys.extend(code.map(key));
                    at += used;
                }
                None if at_end => {
                    if at == bytes.len() {
                        keys.push(key(KeyCode::Esc));
                    }
                    at = bytes.len();
                }
                None => return (keys, at - 1),
            },
            0x20..=0x7e => keys.push(key(KeyCode::Char(char::from(byte)))),
            _ => {}
        }
    }
    (keys, at)
}

/// The key of the escape sequence that `rest` (the bytes after ESC) starts with, and how many of
/// its bytes it took; None where `rest` ends before the sequence does.
fn escape_sequence(rest: &[u8]) -> Option<(Option<KeyCode>, usize)> {
    match rest.first()? {
        // ESC ESC: the first one was the key.
        0x1b => Some((Some(KeyCode::Esc), 0)),
        b'[' => {
            // CSI: parameters (digits, ';'), then one final byte from '@' to '~'.
            let body = &rest[1..];
            let end = body.iter().position(|b| (0x40..=0x7e).contains(b))?;
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
            Some((code, 1 + end + 1))
        }
        // SS3: the arrows and Home in a terminal's application cursor mode.
        b'O' => {
            let code = match rest.get(1)? {
                b'A' => Some(KeyCode::Up),
                b'B' => Some(KeyCode::Down),
                b'C' => Some(KeyCode::Right),
                b'D' => Some(KeyCode::Left),
                b'H' => Some(KeyCode::Home),
                _ => None,
            };
            Some((code, 2))
        }
        // Alt+key: the key alone.
        _ => Some((None, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(bytes: &[u8]) -> Vec<KeyCode> {
        decode(bytes, true).0.into_iter().map(|k| k.code).collect()
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
        let ctrl_c = decode(b"\x03", true).0;
        assert_eq!(ctrl_c[0].code, KeyCode::Char('c'));
        assert_eq!(ctrl_c[0].modifiers, KeyModifiers::CONTROL);
    }

    #[test]
    fn sequences_the_view_has_no_use_for_are_skipped_whole() {
        // F5, a modified arrow: none is taken for the letters inside it.
        assert_eq!(codes(b"\x1b[15~q"), [KeyCode::Char('q')]);
        assert_eq!(codes(b"\x1b[1;5A"), []);
        // Two Esc presses in one read, and Alt+q as q.
        assert_eq!(codes(b"\x1b\x1b"), [KeyCode::Esc, KeyCode::Esc]);
        assert_eq!(codes(b"\x1bq"), [KeyCode::Char('q')]);
        // Bytes that are no key.
        assert_eq!(codes(b"\x00\x7f\xc3\xa9"), []);
    }

    #[test]
    fn a_sequence_cut_between_reads_waits_for_its_rest_and_is_never_esc() {
        // 22 arrows in a 64-byte read: the last one cut after its ESC.
        let arrows = b"\x1b[A".repeat(22);
        let (keys, used) = decode(&arrows[..64], false);
        assert_eq!(keys.len(), 21);
        assert!(keys.iter().all(|k| k.code == KeyCode::Up));
        assert_eq!(used, 63, "the ESC is kept for the next read");
        assert_eq!(codes(&arrows[used..]), [KeyCode::Up]);
        assert_eq!(
            decode(b"q\x1b[1", false),
            (vec![key(KeyCode::Char('q'))], 1)
        );
        // With nothing more to come, a cut sequence is dropped, not taken as Esc (which quits).
        assert_eq!(codes(b"\x1b[1"), []);
        assert_eq!(codes(b"\x1bO"), []);
    }

    /// A terminal of the test's own: a pty, its slave read as the view reads the terminal.
    fn pty_reader() -> (File, KeyReader) {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = File::from(pty.slave);
        // Raw, as the view makes its terminal: bytes as they are typed, no lines.
        let mut raw = tcgetattr(&slave).unwrap();
        cfmakeraw(&mut raw);
        tcsetattr(&slave, SetArg::TCSANOW, &raw).unwrap();
        nix::fcntl::fcntl(
            &slave,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .unwrap();
        let reader = KeyReader {
            tty: Some(slave),
            pending: Vec::new(),
        };
        (File::from(pty.master), reader)
    }

    #[test]
    fn keys_typed_on_a_terminal_are_read_and_a_hang_up_is_said() {
        use std::io::Write;
        let (mut master, mut reader) = pty_reader();
        master.write_all(b"s\x1b[B").unwrap();
        let input = reader.wait(Duration::from_secs(60)).unwrap();
        assert_eq!(
            input,
            Input::Keys(vec![key(KeyCode::Char('s')), key(KeyCode::Down)])
        );
        // The other side closed: what an ssh connection that dropped leaves.
        drop(master);
        assert_eq!(reader.wait(Duration::from_secs(60)).unwrap(), Input::HungUp);
    }
}
