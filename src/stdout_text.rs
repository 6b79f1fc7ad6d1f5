//! Text for standard output (`report`, `info`, `layout`). A reader that stops reading early
//! (`gilsample report dir/ | head`) ends the output quietly, as `cat` does; `print!` would panic
//! there. Any other failure to write is an error that says so.

use std::io::{ErrorKind, Write};

use gilsample::error::{Error, Result};

pub(crate) fn print_text(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => {
            Err(Error::io("cannot write to standard output", e))
        }
        _ => Ok(()),
    }
}
