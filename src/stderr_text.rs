//! Lines for standard error that do not panic where it is gone. A user who pipes gilsample's
//! messages into a reader that stops early (`gilsample ... 2>&1 | head -1`) closes the pipe;
//! `eprintln!` would then panic, ending a recording before its files are finished and replacing a
//! launched command's exit status with 101. The trace is what a recording is for: a message that
//! cannot be written is dropped, as `top`'s terminal lines are. `clippy.toml` refuses `eprintln!`
//! and `eprint!`, so that new messages come through here.

/// `eprintln!` that drops the line where standard error cannot be written (module docs).
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `eprint!` that drops the text where standard error cannot be written (module docs).
#[macro_export]
macro_rules! stderr_text {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr().lock(), $($arg)*);
    }};
}
