//! `--control-fd`: the channel between gilsample and a program that drives it (the Python API).
//!
//! The caller keeps the other end of a socket pair. gilsample waits for one byte on it before it
//! attaches (so the caller can first allow it to read its memory, `prctl(PR_SET_PTRACER)` where Yama
//! is on), then writes one JSON object per line as things happen: `started` (a target's first sample
//! was taken), `skipped`, `ready` (every target found at the start is being sampled), `failed`,
//! `finished` (files complete, with their paths) or `error`; also `thread_of_process`, `launcher`,
//! `command_stopped`, `waiting`, and `stopped`/`continued` (a target found stopped, running again)
//! (`event_for`). Any later byte from the caller, or the
//! caller's end closing (the caller exited), stops the recording as Ctrl+C does.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{BorrowedFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::record::Update;

/// The writing half; events are lines, sent whole.
pub struct Control {
    writer: Mutex<File>,
}

impl Control {
    /// Takes over `fd` (inherited from the caller): it must be open; it is closed on exec so launched
    /// commands do not inherit it. Returns the channel and the reading half.
    pub fn open(fd: i32) -> Result<(Control, File)> {
        let not_open = || Error::Usage(format!("--control-fd {fd}: not an open file descriptor"));
        if fd < 0 {
            return Err(not_open());
        }
        // SAFETY: the descriptor is checked before it is owned; BorrowedFd is only used for fcntl.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        fcntl(borrowed, FcntlArg::F_GETFD).map_err(|_| not_open())?;
        fcntl(borrowed, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(|_| not_open())?;
        // SAFETY: fd is open and nothing else in this process owns it.
        let writer = unsafe { File::from_raw_fd(fd) };
        let reader = writer
            .try_clone()
            .map_err(|e| Error::io("duplicating --control-fd", e))?;
        Ok((
            Control {
                writer: Mutex::new(writer),
            },
            reader,
        ))
    }

    /// Blocks until the caller says go. False when the caller closed its end instead.
    pub fn wait_for_go(reader: &mut File) -> bool {
        let mut byte = [0u8; 1];
        matches!(reader.read(&mut byte), Ok(1))
    }

    /// Sets `stop` when the caller sends anything more or goes away.
    pub fn watch_for_stop(mut reader: File, stop: Arc<AtomicBool>) -> JoinHandle<()> {
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            loop {
                match reader.read(&mut byte) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    _ => break,
                }
            }
            stop.store(true, Ordering::SeqCst);
        })
    }

    /// Sends one event. A caller that stopped listening does not stop the recording.
    pub fn send(&self, event: &Value) {
        let mut line = event.to_string();
        line.push('\n');
        if let Ok(mut writer) = self.writer.lock() {
            let _ = writer.write_all(line.as_bytes());
        }
    }
}

/// The line a driving program gets when the session fails: the message and exit status, and for
/// every process of a list refused (`Error::NoneRecordable`) how many were given, so that the
/// program words the refusals it got as `skipped` events itself instead of finding them in the
/// message ("why each, above" points at lines it never saw).
pub fn error_event(error: &Error) -> Value {
    let mut event = json!({
        "event": "error", "message": error.to_string(), "exit_code": error.exit_code(),
    });
    if let Error::NoneRecordable { given, .. } = error {
        event["none_recordable"] = json!({ "given": given });
    }
    event
}

/// The line a driving program gets for an update (progress ticks are not sent).
pub fn event_for(update: &Update<'_>) -> Option<Value> {
    Some(match update {
        Update::Started {
            pid,
            path,
            python,
            layout,
            rate_hz,
        } => json!({
            "event": "started", "pid": pid, "path": path.display().to_string(),
            "python": python, "layout": layout, "rate_hz": rate_hz,
        }),
        Update::Skipped { pid, why, .. } => json!({"event": "skipped", "pid": pid, "why": why}),
        Update::Ready => json!({"event": "ready"}),
        Update::TargetStopped { pid, by_debugger } => {
            json!({"event": "stopped", "pid": pid, "by_debugger": by_debugger})
        }
        Update::TargetContinued { pid } => json!({"event": "continued", "pid": pid}),
        Update::ThreadOfProcess { tid, pid } => {
            json!({"event": "thread_of_process", "tid": tid, "pid": pid})
        }
        Update::Launcher { pid, program } => {
            json!({"event": "launcher", "pid": pid, "program": program})
        }
        Update::CommandStopped { pid, how } => {
            json!({"event": "command_stopped", "pid": pid, "how": how.describe()})
        }
        Update::WaitingForPython { pid, .. } => json!({"event": "waiting", "pid": pid}),
        // Sent with the other failures at the end.
        Update::WriteFailed { .. } | Update::WaitingForDevices { .. } => return None,
        Update::PassedOver { .. } | Update::Progress(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::BufRead;
    use std::os::fd::IntoRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn waits_for_go_then_reports_lines_and_stops_when_the_caller_leaves() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (control, mut reader) = Control::open(ours.into_raw_fd()).unwrap();
        let mut caller = theirs.try_clone().unwrap();
        caller.write_all(b"g").unwrap();
        assert!(Control::wait_for_go(&mut reader));
        control.send(&json!({"event": "ready"}));
        let mut line = String::new();
        std::io::BufReader::new(theirs.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "{\"event\":\"ready\"}\n");
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = Control::watch_for_stop(reader, stop.clone());
        drop(caller);
        drop(theirs);
        watcher.join().unwrap();
        assert!(stop.load(Ordering::SeqCst));
    }

    #[test]
    fn an_error_says_its_status_and_whether_every_process_was_refused() {
        let usage = error_event(&Error::Usage("bad".into()));
        assert_eq!(usage["exit_code"], 2);
        assert!(usage.get("none_recordable").is_none());
        let none = error_event(&Error::NoneRecordable {
            given: 3,
            first: Box::new(Error::Usage("bad".into())),
        });
        assert_eq!(none["exit_code"], 2, "the first refusal's");
        assert_eq!(none["none_recordable"], json!({"given": 3}));
    }

    #[test]
    fn refuses_a_descriptor_that_is_not_open() {
        let err = Control::open(987_654).err().expect("fd 987654 is not open");
        assert!(err.to_string().contains("not an open file descriptor"));
    }
}
