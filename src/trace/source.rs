//! A call site's source line, read from the target's own view of its files: `/proc/PID/root` for an
//! absolute path and `/proc/PID/cwd` for a relative one, so a target in a container or chroot is read
//! as it sees itself. Bounded: a file is read once, up to `MAX_FILE_BYTES`, only if it is a regular
//! file (a FIFO named `x.py` must not block the writer), and at most `MAX_FILES` are kept. A file
//! that is missing, unreadable or too short gives no line, never an error.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

/// Bytes read of one source file at most; a line past them is not shown.
const MAX_FILE_BYTES: u64 = 4 << 20;
/// Source files kept; more are not read.
const MAX_FILES: usize = 256;
/// Characters of a line shown at most.
const MAX_LINE_CHARS: usize = 200;

/// The source lines of one target's files, read on first use.
pub struct SourceLines {
    pid: u32,
    files: HashMap<String, Option<Arc<Vec<String>>>>,
}

impl SourceLines {
    /// Source lines of process `pid`'s files, read through its `/proc/PID/root` on first use.
    pub fn of(pid: u32) -> SourceLines {
        SourceLines {
            pid,
            files: HashMap::new(),
        }
    }

    /// Line `line` (from 1) of `file` as the interpreter names it (`co_filename`), trimmed.
    pub fn line(&mut self, file: &str, line: u32) -> Option<String> {
        if !self.files.contains_key(file) {
            if self.files.len() >= MAX_FILES {
                return None;
            }
            let lines = self.read(file).map(Arc::new);
            self.files.insert(file.to_string(), lines);
        }
        let lines = self.files.get(file)?.as_ref()?;
        let text = lines
            .get(usize::try_from(line).ok()?.checked_sub(1)?)?
            .trim();
        Some(shortened(text))
    }

    fn read(&self, file: &str) -> Option<Vec<String>> {
        // `<string>`, `<frozen ...>`, `<stdin>`: not files.
        if file.is_empty() || file.starts_with('<') {
            return None;
        }
        let path = match file.strip_prefix('/') {
            Some(inside) => format!("/proc/{}/root/{inside}", self.pid),
            None => format!("/proc/{}/cwd/{file}", self.pid),
        };
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .ok()?;
        if !opened.metadata().ok()?.is_file() {
            return None;
        }
        let mut bytes = Vec::new();
        opened.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
        Some(
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::to_string)
                .collect(),
        )
    }
}

fn shortened(text: &str) -> String {
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_through_the_targets_own_root_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("job.py");
        let long = "x".repeat(300);
        std::fs::write(
            &file,
            format!("import torch\n    t = torch.tensor(rows)  \n{long}\n"),
        )
        .unwrap();
        // This process is the target: its root is the file system the path is in.
        let mut sources = SourceLines::of(std::process::id());
        let path = file.display().to_string();
        assert_eq!(
            sources.line(&path, 2).as_deref(),
            Some("t = torch.tensor(rows)")
        );
        let cut = sources.line(&path, 3).unwrap();
        assert_eq!(cut.chars().count(), MAX_LINE_CHARS + 1);
        assert!(cut.ends_with('…'));
        for (line, why) in [(0, "no line 0"), (4, "past the end")] {
            assert_eq!(sources.line(&path, line), None, "{why}");
        }
        assert_eq!(sources.line("/no/such/file.py", 1), None);
        assert_eq!(sources.line("<frozen importlib._bootstrap>", 1), None);
        assert_eq!(
            sources.line(&dir.path().display().to_string(), 1),
            None,
            "a directory"
        );
    }

    #[test]
    fn a_fifo_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.py");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut sources = SourceLines::of(std::process::id());
        assert_eq!(sources.line(&fifo.display().to_string(), 1), None);
    }
}
