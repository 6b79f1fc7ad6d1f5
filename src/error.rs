//! The one error type of gilsample. Its variants tell the caller what to do next (stop, retry, tell the
//! user how to fix permissions), and `exit_code` maps each to the documented exit status.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Exit statuses, documented in the README.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// A runtime failure not covered below (I/O, a corrupt target).
    pub const FAILURE: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// Not allowed to read the target.
    pub const PERMISSION: i32 = 3;
    /// The target is not a Python process we can read (not Python, unsupported version, GIL disabled).
    pub const UNSUPPORTED: i32 = 4;
    /// The target does not exist (or is gone before anything was recorded).
    pub const NO_SUCH_PROCESS: i32 = 5;
    /// The output could not be written; the message says where the partial data is.
    pub const OUTPUT: i32 = 6;
    /// An input file (`convert`) is missing, empty, not JSON, truncated or malformed.
    pub const INPUT: i32 = 7;
    /// Stopped by a second Ctrl+C: the trace was not finished (or, in launch mode after the
    /// recording, the wait for the command was given up).
    pub const INTERRUPTED: i32 = 130;
}

/// Every way gilsample fails; the variant decides the exit status (`exit_code`) and what the caller
/// does next.
#[derive(Debug)]
pub enum Error {
    /// Wrong command-line input; the message says which value and why.
    Usage(String),
    /// The kernel refused access to the target's memory or /proc files; `why` is what this machine
    /// says about it (process/access.rs), looked up when it happened.
    Permission {
        /// The target's pid (our PID namespace).
        pid: u32,
        /// What was being read (a /proc file, the target's memory).
        what: String,
        /// What this machine says about the refusal (ptrace scope, capabilities, user).
        why: String,
    },
    /// The target's interpreter files cannot be opened by this user (a directory on the way closed
    /// to it): its symbols are read from them. `files`: those refused, the interpreter's first.
    FilesUnreadable {
        /// The target's pid (our PID namespace).
        pid: u32,
        /// The mapped files that could not be opened.
        files: Vec<PathBuf>,
    },
    /// Discovery found nothing to record.
    NothingFound(String),
    /// The process does not exist or exited.
    ProcessGone {
        /// The pid that no longer names a process (our PID namespace).
        pid: u32,
    },
    /// The process runs no interpreter we can find (or is not a user process).
    NotPython {
        /// The target's pid (our PID namespace).
        pid: u32,
        /// Why it is not taken for Python (no `_PyRuntime`, not a user process).
        why: String,
    },
    /// A Python we recognise but cannot read.
    Unsupported {
        /// The target's pid (our PID namespace).
        pid: u32,
        /// What about this Python cannot be read (version, free-threaded with the GIL disabled).
        why: String,
    },
    /// The interpreter exists but has not finished starting (launch mode waits for this).
    NotReady {
        /// The target's pid (our PID namespace).
        pid: u32,
        /// What is not ready yet (the dynamic loader still running, the runtime not initialised).
        why: String,
    },
    /// The layout does not match what the live process holds.
    LayoutInvalid {
        /// The target's pid (our PID namespace).
        pid: u32,
        /// Which check on the live process failed.
        why: String,
    },
    /// An ELF or DWARF file we could not use.
    Binary {
        /// The file, as gilsample opened it.
        path: PathBuf,
        /// What about it could not be used.
        why: String,
    },
    /// An input file (`convert`) that is not what it should be; the message names event and field.
    Input {
        /// The input file.
        path: PathBuf,
        /// What is wrong, naming the event and field.
        why: String,
    },
    /// Writing the trace failed.
    Output {
        /// The file being written.
        path: PathBuf,
        /// What failed, and where the partial data is.
        why: String,
    },
    /// Every process of a `--pid` list was refused. Each refusal was said as it happened
    /// ("skipping process N: ..."), so this one only sums them up.
    NoneRecordable {
        /// How many processes were given.
        given: usize,
        /// The first refusal: its exit status is the session's (README, "Exit status").
        first: Box<Error>,
    },
    /// An I/O error of gilsample's own files or the system's.
    Io {
        /// What was being done, said before the OS's message.
        context: String,
        /// The OS's error.
        source: io::Error,
    },
}

/// gilsample's result type, with `Error`.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error, with what was being done (`context`) in front of the OS's message.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The exit status this error ends the process with (`exit`).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::Permission { .. } | Error::FilesUnreadable { .. } => exit::PERMISSION,
            Error::ProcessGone { .. } | Error::NothingFound(_) => exit::NO_SUCH_PROCESS,
            Error::NotPython { .. } | Error::Unsupported { .. } | Error::LayoutInvalid { .. } => {
                exit::UNSUPPORTED
            }
            Error::NotReady { .. } => exit::UNSUPPORTED,
            Error::Output { .. } => exit::OUTPUT,
            Error::Input { .. } => exit::INPUT,
            Error::Binary { .. } | Error::Io { .. } => exit::FAILURE,
            Error::NoneRecordable { first, .. } => first.exit_code(),
        }
    }
}

/// gilsample's own binary, as the fixes that name it for `setcap` write it: the file itself, since
/// setcap on a link or a wrapper does nothing.
pub fn own_binary() -> String {
    std::env::current_exe().map_or_else(
        |_| "\"$(command -v gilsample)\"".into(),
        |p| p.display().to_string(),
    )
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(msg) => write!(f, "{msg}"),
            Error::Permission { pid, what, why } => {
                write!(
                    f,
                    "permission denied: cannot read {what} of process {pid} (the kernel's checks \
                     of who may read another process, which a debugger meets too). {why}"
                )
            }
            Error::FilesUnreadable { pid, files } => {
                let first = files.first().map(|p| p.display().to_string());
                let more = match files.len() {
                    0 | 1 => String::new(),
                    n => format!(" and {} more of its files", n - 1),
                };
                write!(
                    f,
                    "permission denied: cannot open {}{more}, which process {pid} has mapped: \
                     gilsample reads the interpreter's symbols from the files themselves, as a \
                     debugger does. Why: this user may not open them (a directory on the way is \
                     closed to it, or the file is not readable). To fix: run gilsample as root or \
                     as the files' owner, give it CAP_DAC_READ_SEARCH as well (sudo setcap \
                     cap_sys_ptrace,cap_dac_read_search,cap_sys_nice+ep {}), or make the files \
                     readable",
                    first.as_deref().unwrap_or("its files"),
                    own_binary()
                )
            }
            Error::ProcessGone { pid } => write!(f, "process {pid} does not exist (or has exited)"),
            Error::NothingFound(what) => write!(f, "{what}"),
            Error::NotPython { pid, why } => write!(
                f,
                "process {pid} is not a Python process gilsample can read: {why}"
            ),
            Error::Unsupported { pid, why } => write!(f, "process {pid}: {why}"),
            Error::NotReady { pid, why } => write!(
                f,
                "process {pid}: the interpreter is not running yet: {why}"
            ),
            Error::LayoutInvalid { pid, why } => write!(
                f,
                "process {pid}: the interpreter's memory does not match the expected layout: {why}. \
                 Try another --layout-source, or regenerate python-layouts/ with scripts/generate-layouts.sh"
            ),
            Error::Binary { path, why } => write!(f, "{}: {why}", path.display()),
            Error::Output { path, why } => write!(f, "cannot write {}: {why}", path.display()),
            Error::Input { path, why } => write!(f, "{}: {why}", path.display()),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::NoneRecordable { given, .. } => write!(
                f,
                "none of the {given} processes given could be recorded (why each, above); the \
                 exit status is the first one's"
            ),
        }
    }
}

impl std::error::Error for Error {}
