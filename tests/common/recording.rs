//! gilsample recording while a test acts on it. The tests drive it over `--control-fd`, as the Python
//! API does: the JSON lines it reports there (`started` once a target's first sample is taken,
//! `ready` once every target given is sampled; src/control.rs) are what a test waits for before it
//! acts, never the wording of stderr, which is itself under test and may gain lines before them.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::Value;

use super::{KilledOnDrop, gilsample, interpreter, ready_pid};

/// A socket pair for `--control-fd`, before gilsample is started with its other end.
pub struct ControlSocket {
    ours: UnixStream,
    theirs: UnixStream,
}

impl ControlSocket {
    pub fn pair() -> ControlSocket {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ControlSocket { ours, theirs }
    }

    /// The arguments that give gilsample its end; they must come before a launched command's `--`.
    pub fn args(&self) -> [String; 2] {
        ["--control-fd".into(), self.theirs.as_raw_fd().to_string()]
    }

    /// Spawns `cmd`, which has `args()`, and says go. Only that child inherits gilsample's end (it is
    /// close-on-exec everywhere else), and this process closes its copy, so the channel ends when
    /// gilsample does.
    pub fn spawn(self, cmd: &mut Command) -> (KilledOnDrop, Control) {
        let fd = self.theirs.as_raw_fd();
        // SAFETY: fcntl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = KilledOnDrop::spawn(cmd);
        drop(self.theirs);
        let mut ours = self.ours;
        // A gilsample that already failed reads nothing: its end of the channel says why.
        let _ = ours.write_all(b"g");
        let events = BufReader::new(ours.try_clone().unwrap());
        (
            child,
            Control {
                _ours: ours,
                events,
                seen: Vec::new(),
            },
        )
    }
}

/// The test's end of a running gilsample's control channel. Closing it stops the recording, so it
/// lives as long as the recording it watches.
pub struct Control {
    _ours: UnixStream,
    events: BufReader<UnixStream>,
    /// The lines read so far, for the message of a failure.
    seen: Vec<String>,
}

impl Control {
    /// The next event; None once gilsample has closed the channel (it exited).
    pub fn next_event(&mut self) -> Option<Value> {
        let mut line = String::new();
        if self.events.read_line(&mut line).unwrap() == 0 {
            return None;
        }
        let event = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON event: {line:?}: {e}"));
        self.seen.push(line);
        Some(event)
    }

    /// Reads events until one is `kind` (and for `pid`, when given); returns it. Panics with the
    /// events seen (an `error` event among them says why) when gilsample ends first.
    pub fn wait_for(&mut self, kind: &str, pid: Option<u32>) -> Value {
        self.next_matching(kind, pid).unwrap_or_else(|| {
            panic!(
                "gilsample ended before {kind:?}{}; its events: {}",
                pid.map(|p| format!(" for {p}")).unwrap_or_default(),
                self.seen.concat()
            )
        })
    }

    fn next_matching(&mut self, kind: &str, pid: Option<u32>) -> Option<Value> {
        while let Some(event) = self.next_event() {
            if event["event"] == kind && pid.is_none_or(|p| event["pid"] == p) {
                return Some(event);
            }
        }
        None
    }
}

/// gilsample recording processes that are already running (no launched command), its stderr
/// collected as it comes so it never blocks on a full pipe.
pub struct Recording {
    pub child: KilledOnDrop,
    pub control: Control,
    stderr: Option<JoinHandle<String>>,
}

impl Recording {
    /// Starts `cmd` (gilsample with its arguments, and no `--`) with a control channel.
    pub fn spawn(cmd: &mut Command) -> Recording {
        let socket = ControlSocket::pair();
        cmd.args(socket.args()).stderr(Stdio::piped());
        let (mut child, control) = socket.spawn(cmd);
        let mut stderr = child.stderr.take().unwrap();
        let collector = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Recording {
            child,
            control,
            stderr: Some(collector),
        }
    }

    /// Waits until process `pid` is being sampled (its first sample was taken).
    pub fn wait_until_started(&mut self, pid: u32) {
        self.wait_until("started", Some(pid));
    }

    /// Waits for the event `kind` (for `pid`, when given); fails with gilsample's status, stderr and
    /// events when it ends first.
    pub fn wait_until(&mut self, kind: &str, pid: Option<u32>) -> Value {
        if let Some(event) = self.control.next_matching(kind, pid) {
            return event;
        }
        let status = self.child.wait().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        panic!(
            "gilsample ended ({status}) before {kind:?} for {pid:?}: {stderr}\nits events: {}",
            self.control.seen.concat()
        );
    }

    pub fn signal(&self, signal: Signal) {
        nix::sys::signal::kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Waits for gilsample to exit; its status and all it printed on stderr.
    pub fn finish(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().unwrap();
        (status, self.stderr.take().unwrap().join().unwrap())
    }
}

/// Starts gilsample on `pid` with `args` and returns once its first sample is taken.
pub fn start_recording(pid: u32, out: &Path, args: &[&str]) -> Recording {
    let mut recording = Recording::spawn(
        gilsample()
            .args(["--pid", &pid.to_string(), "-o"])
            .arg(out)
            .args(args),
    );
    recording.wait_until_started(pid);
    recording
}

/// Runs `cmd` (gilsample with its arguments, and no `--`) until it samples process `pid`, then asks
/// it to finish (SIGINT); returns its status and all it printed. Readiness, not a duration.
pub fn stop_once_recording(cmd: &mut Command, pid: u32) -> (ExitStatus, String) {
    let mut recording = Recording::spawn(cmd);
    recording.wait_until_started(pid);
    recording.signal(Signal::SIGINT);
    recording.finish()
}

/// gilsample launching a workload scenario that ends on a line on its stdin (`--exit-on-stdin`): the
/// recording, its control channel, the workload's stdin and pid, and gilsample's stderr, once the
/// workload is READY.
pub struct LaunchedRecording {
    pub recording: KilledOnDrop,
    pub control: Control,
    pub stdin: ChildStdin,
    pub stderr: BufReader<ChildStderr>,
    pub pid: u32,
}

impl LaunchedRecording {
    /// `gilsample ARGS -o OUT -- python workload SCENARIO... --exit-on-stdin`. The workload also ends
    /// after 600 s: only a failing test waits that long, instead of for ever.
    pub fn start(args: &[&str], out: &Path, scenario: &[&str]) -> LaunchedRecording {
        let python = interpreter("3.12");
        let socket = ControlSocket::pair();
        let mut cmd = gilsample();
        cmd.args(args)
            .arg("-o")
            .arg(out)
            .args(socket.args())
            .arg("--")
            .args(&python.command)
            .arg(&python.workload)
            .args(scenario)
            .args(["--exit-on-stdin", "--seconds", "600"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let (mut recording, control) = socket.spawn(&mut cmd);
        let mut line = String::new();
        BufReader::new(recording.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        LaunchedRecording {
            pid: ready_pid(&line),
            stdin: recording.stdin.take().unwrap(),
            stderr: BufReader::new(recording.stderr.take().unwrap()),
            control,
            recording,
        }
    }

    /// gilsample's stderr up to and with the first line that contains `wanted`.
    pub fn read_until(&mut self, wanted: &str) -> String {
        read_until(&mut self.stderr, wanted)
    }
}

/// Reads `stderr` line by line until one contains `wanted`; everything read, that line included.
/// For what is itself under test: what gilsample says, and that it says it while something runs.
pub fn read_until(stderr: &mut impl BufRead, wanted: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("the output ended before {wanted:?}: {seen}");
        }
        seen += &line;
        if line.contains(wanted) {
            return seen;
        }
    }
}
