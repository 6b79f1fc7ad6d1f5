//! `gilsample report`: the answer for traces already recorded — per process who waited for the GIL,
//! for whom, in what code — and across processes, ranks and hosts, which waited most. Inputs are
//! trace files or directories searched for `GIL_*.json`; files are read in parallel, each in one
//! pass. The end-of-recording summary is the same analysis of the file just written.

pub mod analyze;
pub mod gaps;
pub mod hint;
pub mod hold_code;
pub mod load;
pub mod other_data;
pub mod phrases;
pub mod slice_index;
pub mod stopped;
pub mod text;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::json;

use crate::error::{Error, Result};
pub use crate::trace::output::is_partial;
use analyze::{ProcessAnswer, analyze};

/// What `report` found: the answers, sorted by total wait (largest first), the inputs it passed
/// over, with why, and the interrupted recordings (`.partial` files) it read, with how.
pub struct Report {
    /// One answer per process, largest total wait first.
    pub processes: Vec<ProcessAnswer>,
    /// Inputs passed over, with why.
    pub skipped: Vec<Skipped>,
    /// Interrupted recordings (`.partial` files) read, with how.
    pub interrupted: Vec<Skipped>,
    /// Other `.json` files in the directories searched, not read (`FoundTraces::not_read`).
    pub not_read: Vec<PathBuf>,
}

/// What `find_traces` found.
pub struct FoundTraces {
    /// The trace files, sorted, without duplicates.
    pub files: Vec<PathBuf>,
    /// Inputs passed over, with why (a file given twice).
    pub skipped: Vec<Skipped>,
    /// `.json` files in the directories searched that are not named as traces: a recording with
    /// `-o NAME.json`, a profiler's trace. Not read (a directory also holds other tools' JSON), but
    /// said, so that a trace among them is given by name.
    pub not_read: Vec<PathBuf>,
}

/// An input passed over, with why.
pub type Skipped = (PathBuf, String);

/// Depth to which directories are searched: deep enough for `job/host/rank/` trees, bounded so a
/// symlink loop or a huge tree cannot run away.
const MAX_DEPTH: usize = 16;

/// The trace files named by `inputs`: files as given, directories searched for `GIL_*.json`
/// (not `GIL_merged.json`, which repeats the per-process files) and for interrupted recordings'
/// `.partial` files, sorted, without duplicates.
pub fn find_traces(inputs: &[PathBuf]) -> Result<FoundTraces> {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let mut not_read = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(|e| Error::Input {
            path: input.clone(),
            why: e.to_string(),
        })?;
        if meta.is_dir() {
            walk(input, 0, &mut found, &mut not_read);
        } else {
            found.push(input.clone());
        }
    }
    let mut seen = HashSet::new();
    let mut unique = Vec::new();
    for path in found {
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.insert(key) {
            unique.push(path);
        } else {
            skipped.push((path, "given twice".into()));
        }
    }
    unique.sort();
    not_read.sort();
    Ok(FoundTraces {
        files: unique,
        skipped,
        not_read,
    })
}

fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>, not_read: &mut Vec<PathBuf>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&path, depth + 1, found, not_read);
        } else if kind.is_file()
            && let Some(name) = path.file_name().and_then(|n| n.to_str())
        {
            let json = name.ends_with(".json");
            let merged = name == crate::trace::output::MERGED_FILE_NAME;
            if (json && name.starts_with("GIL_") && !merged) || is_partial(&path) {
                found.push(path);
            } else if json && !merged {
                not_read.push(path);
            }
        }
    }
}

/// Why a file was passed over, without its name in front when the error starts with it (the
/// warning names the file already).
fn reason(path: &Path, e: &Error) -> String {
    match e {
        Error::Input { path: named, why } if named == path => why.clone(),
        other => other.to_string(),
    }
}

/// Reads one trace: a `.partial` file up to where it was cut off, saying how it was read.
fn read_trace(path: &Path) -> Result<(Vec<ProcessAnswer>, Option<String>)> {
    let (processes, cut) = load::load_trace(path)?;
    let how = is_partial(path).then(|| match cut {
        None => "an interrupted recording's temporary file, complete: read whole".to_string(),
        // Names are written as threads are named: a file cut before that, or written by an
        // older gilsample (names only at the end), has none.
        Some(cut) => format!(
            "an interrupted recording's temporary file, cut off ({cut}): read up to its last \
             complete event{}",
            if processes.iter().all(|p| !p.names.is_empty()) {
                ""
            } else {
                ", without thread names"
            }
        ),
    });
    Ok((processes.iter().map(analyze).collect(), how))
}

/// Reads and analyses every trace of `inputs`. Unreadable or non-GIL files are passed over with a
/// reason; when none is left the first reason is the error (exit 7).
pub fn report(inputs: &[PathBuf]) -> Result<Report> {
    let FoundTraces {
        files,
        mut skipped,
        not_read,
    } = find_traces(inputs)?;
    if files.is_empty() {
        return Err(Error::Input {
            path: inputs.first().cloned().unwrap_or_default(),
            why: format!(
                "no GIL trace found (files named GIL_*.json, interrupted recordings' \
                 .NAME.json.PID.partial, or files given by name){}",
                not_read_in_words(&not_read)
            ),
        });
    }
    type Read = Result<(Vec<ProcessAnswer>, Option<String>)>;
    let results: Vec<(PathBuf, Read)> = files
        .par_iter()
        .map(|path| (path.clone(), read_trace(path)))
        .collect();
    let mut read = Vec::new();
    let mut interrupted = Vec::new();
    let mut first_error = None;
    for (path, result) in results {
        match result {
            Ok((answers, how)) => {
                if let Some(how) = how {
                    interrupted.push((path.clone(), how));
                }
                read.extend(answers.into_iter().map(|answer| (path.clone(), answer)));
            }
            Err(e) => {
                skipped.push((path.clone(), reason(&path, &e)));
                first_error.get_or_insert(e);
            }
        }
    }
    let mut processes = count_once(read, &mut skipped);
    if processes.is_empty()
        && let Some(e) = first_error
    {
        return Err(e);
    }
    processes.sort_by(|a, b| text::total_wait_s(b).total_cmp(&text::total_wait_s(a)));
    analyze::note_children(&mut processes);
    Ok(Report {
        processes,
        skipped,
        interrupted,
        not_read,
    })
}

/// Other `.json` files shown at most, by name.
const NOT_READ_NAMED: usize = 3;

/// `; other .json files, not read (a trace among them is read when given by name): a.json, ...`,
/// or nothing where there are none.
pub fn not_read_in_words(not_read: &[PathBuf]) -> String {
    if not_read.is_empty() {
        return String::new();
    }
    let mut named: Vec<String> = not_read
        .iter()
        .take(NOT_READ_NAMED)
        .map(|p| p.display().to_string())
        .collect();
    if not_read.len() > NOT_READ_NAMED {
        named.push(format!("and {} more", not_read.len() - NOT_READ_NAMED));
    }
    format!(
        "; {} other .json {} in the directories searched, not read (a trace among them is read \
         when given by name): {}",
        not_read.len(),
        if not_read.len() == 1 { "file" } else { "files" },
        named.join(", ")
    )
}

/// The processes read, each recording once: a copied file, or a recording's own file beside a
/// merged one that holds it (`report sub/GIL_*.json` after `record --merge`), counts once. Its own
/// file is the one counted (its window is the recording's, not the merge's), else the file given
/// first; the others are listed in `skipped`.
fn count_once(
    mut read: Vec<(PathBuf, ProcessAnswer)>,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Vec<ProcessAnswer> {
    read.sort_by_key(|(_, answer)| answer.facts.from_merge);
    let mut seen: HashMap<SameProcess, PathBuf> = HashMap::new();
    let mut processes = Vec::new();
    for (path, answer) in read {
        match seen.entry(SameProcess::of(&answer)) {
            Entry::Vacant(first) => {
                first.insert(path);
                processes.push(answer);
            }
            Entry::Occupied(first) => {
                let why = format!(
                    "repeats process {} of {}",
                    answer.pid,
                    first.get().display()
                );
                skipped.push((path, why));
            }
        }
    }
    processes
}

/// What makes two processes read from the inputs the same recording.
#[derive(PartialEq, Eq, Hash)]
enum SameProcess {
    /// gilsample's traces name their recording (its pid, host and start), in a merged file too.
    Recording(other_data::RecordingId),
    /// Other traces: the same pid, rank and host over the same window (to the microsecond a
    /// trace's clock has) with as many threads.
    Shape(u32, Option<u32>, Option<String>, i64, usize),
}

impl SameProcess {
    fn of(answer: &ProcessAnswer) -> SameProcess {
        match &answer.facts.recording {
            Some(id) => SameProcess::Recording(id.clone()),
            None => SameProcess::Shape(
                answer.pid,
                answer.facts.rank,
                answer.facts.host.clone(),
                (answer.window_s * 1e6).round() as i64,
                answer.threads.len(),
            ),
        }
    }
}

impl Report {
    /// The answer in words: each process, then the ranking across them when there are several.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for p in &self.processes {
            text::format_process(&mut out, p);
            // The file it came from, as the summary at the end of a recording names it.
            let interrupted = self
                .interrupted
                .iter()
                .any(|(path, _)| path.display().to_string() == p.file);
            out.push_str(&format!(
                "  trace: {}{}\n\n",
                p.file,
                if interrupted {
                    " (an interrupted recording)"
                } else {
                    ""
                }
            ));
        }
        if self.processes.len() > 1 {
            text::format_ranking(&mut out, &self.processes, true);
        }
        out
    }

    /// The stable document of `--json` (docs/report-json.md).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "processes": self.processes,
            "skipped": self.skipped.iter().map(|(path, why)| json!({
                "file": path.display().to_string(), "why": why,
            })).collect::<Vec<_>>(),
            "interrupted": self.interrupted.iter().map(|(path, how)| json!({
                "file": path.display().to_string(), "how": how,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_files_of_every_json_output_are_partial_files() {
        for name in [
            ".GIL_7_rank_0.json.4242.partial",
            ".one.json.4242.partial",
            ".run 2.json.1.partial",
            ".run.JSON.4242.partial",
        ] {
            assert!(is_partial(Path::new(name)), "{name}");
        }
        for name in [
            "GIL_7_rank_0.json",
            ".json.4242.partial",
            ".one.json.partial",
            ".one.json.42x.partial",
            ".one.txt.4242.partial",
            ".GIL_merged.json.4242.partial",
            "one.json.4242.partial",
        ] {
            assert!(!is_partial(Path::new(name)), "{name}");
        }
    }
}
