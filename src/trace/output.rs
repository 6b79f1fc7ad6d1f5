//! Where traces go: `GIL_<pid>_rank_<rank>.json` in a directory (or one named file), created without
//! following symlinks, never overwriting unless asked.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The default output directory, under the working directory, when neither `-o` nor `GILSAMPLE_DIR`
/// says otherwise.
pub const DEFAULT_DIR: &str = "gil_traces";
pub const DIR_ENV: &str = "GILSAMPLE_DIR";
pub const MERGED_FILE_NAME: &str = "GIL_merged.json";

/// The reference tool's file name.
pub fn trace_file_name(pid: u32, rank: u32) -> String {
    format!("GIL_{pid}_rank_{rank}.json")
}

/// What `-o` (or its defaults) asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputSpec {
    Directory(PathBuf),
    File(PathBuf),
}

impl OutputSpec {
    /// `-o` given: a path ending in `.json` is a file (refused later if it is a directory); anything
    /// else, or anything ending in `/`, is a directory, created if needed. Without `-o`:
    /// `GILSAMPLE_DIR`, else `gil_traces/`.
    pub fn resolve(output: Option<&Path>, env_dir: Option<PathBuf>) -> OutputSpec {
        let Some(path) = output else {
            return OutputSpec::Directory(env_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DIR)));
        };
        let trailing_slash = path.as_os_str().to_string_lossy().ends_with('/');
        let json_name = path.extension().is_some_and(|e| e == "json");
        if json_name && !trailing_slash {
            OutputSpec::File(path.to_path_buf())
        } else {
            OutputSpec::Directory(path.to_path_buf())
        }
    }

    /// The final path for one target.
    pub fn path_for(&self, pid: u32, rank: u32) -> PathBuf {
        match self {
            OutputSpec::Directory(dir) => dir.join(trace_file_name(pid, rank)),
            OutputSpec::File(file) => file.clone(),
        }
    }

    /// Where `--merge` puts the combined trace: `GIL_merged.json` in the output directory (beside the
    /// file, for a file output).
    pub fn merged_path(&self) -> PathBuf {
        match self {
            OutputSpec::Directory(dir) => dir.join(MERGED_FILE_NAME),
            OutputSpec::File(file) => file.with_file_name(MERGED_FILE_NAME),
        }
    }

    /// Creates the directory (or the file's parent) and checks it is one.
    pub fn prepare(&self) -> Result<()> {
        let dir = match self {
            OutputSpec::Directory(dir) => dir.clone(),
            OutputSpec::File(file) => match file.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            },
        };
        if dir.exists() && !dir.is_dir() {
            return Err(Error::Output {
                path: dir,
                why: "it is a file, but a directory is needed".into(),
            });
        }
        fs::create_dir_all(&dir).map_err(|e| Error::Output {
            path: dir.clone(),
            why: e.to_string(),
        })?;
        if let OutputSpec::File(file) = self
            && file.is_dir()
        {
            return Err(Error::Output {
                path: file.clone(),
                why: "it is a directory, but a file name ending in .json was given".into(),
            });
        }
        Ok(())
    }
}

/// Refuses an existing output unless `force`.
/// Ends a streamed trace file: closes its event array, appends `otherData`, and makes the file durable
/// before the caller renames it into place.
pub fn end_trace(out: &mut BufWriter<File>, other: &serde_json::Value) -> std::io::Result<()> {
    write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{other}}}\n"
    )?;
    out.flush()?;
    out.get_ref().sync_all()
}

pub fn check_not_exists(path: &Path, force: bool) -> Result<()> {
    if !force && fs::symlink_metadata(path).is_ok() {
        return Err(Error::Output {
            path: path.to_path_buf(),
            why: "it already exists (use --force to overwrite)".into(),
        });
    }
    Ok(())
}

/// Creates the temporary file beside `final_path`: exclusive, no symlink followed, mode 0644.
pub fn create_partial(final_path: &Path) -> Result<(File, PathBuf)> {
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.json".into());
    let partial = final_path.with_file_name(format!(".{name}.{}.partial", std::process::id()));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&partial)
        .map_err(|e| Error::Output {
            path: partial.clone(),
            why: e.to_string(),
        })?;
    Ok((file, partial))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_files_like_the_reference() {
        assert_eq!(trace_file_name(12345, 0), "GIL_12345_rank_0.json");
    }

    #[test]
    fn resolves_directories_and_files() {
        let dir = OutputSpec::resolve(Some(Path::new("traces/")), None);
        assert_eq!(
            dir.path_for(7, 2),
            PathBuf::from("traces/GIL_7_rank_2.json")
        );
        let file = OutputSpec::resolve(Some(Path::new("out/run.json")), None);
        assert_eq!(file.path_for(7, 2), PathBuf::from("out/run.json"));
        assert_eq!(
            OutputSpec::resolve(None, Some("/data".into())),
            OutputSpec::Directory("/data".into())
        );
        assert_eq!(
            OutputSpec::resolve(None, None),
            OutputSpec::Directory(DEFAULT_DIR.into())
        );
    }
}
