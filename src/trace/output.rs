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
/// The environment variable that overrides `DEFAULT_DIR`.
pub const DIR_ENV: &str = "GILSAMPLE_DIR";
/// The merged trace's file name in the output directory.
pub const MERGED_FILE_NAME: &str = "GIL_merged.json";
/// Why an output path that is a file cannot take the traces (`prepare`, and record's write check).
pub const NOT_A_DIRECTORY: &str = "it is a file, but a directory is needed (for one process's \
     trace in one file, give -o a name ending in .json)";

/// The reference tool's file name.
pub fn trace_file_name(pid: u32, rank: u32) -> String {
    format!("GIL_{pid}_rank_{rank}.json")
}

/// What `-o` (or its defaults) asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputSpec {
    /// One trace per target, `GIL_<pid>_rank_<rank>.json`, in this directory (created if needed).
    Directory(PathBuf),
    /// This one file, for a single target (a `-o` path ending in `.json`).
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
        // `run.JSON` is a file name as much as `run.json`.
        let json_name = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
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

    /// The directory the traces go in: the directory given, or the file's (`.` for a bare name).
    pub fn dir(&self) -> PathBuf {
        match self {
            OutputSpec::Directory(dir) => dir.clone(),
            OutputSpec::File(file) => match file.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            },
        }
    }

    /// Creates the directory (or the file's parent) and checks it is one.
    pub fn prepare(&self) -> Result<()> {
        let dir = self.dir();
        if dir.exists() && !dir.is_dir() {
            return Err(Error::Output {
                path: dir,
                why: NOT_A_DIRECTORY.into(),
            });
        }
        fs::create_dir_all(&dir).map_err(|e| Error::Output {
            path: dir.clone(),
            why: e.to_string(),
        })?;
        if let OutputSpec::File(file) = self {
            refuse_a_directory_named_as_a_file(file)?;
        }
        Ok(())
    }
}

/// `-o run.json` where `run.json` is a directory: a name ending in `.json` names one file, and a
/// trailing `/` says the directory is meant.
pub fn refuse_a_directory_named_as_a_file(file: &Path) -> Result<()> {
    if !file.is_dir() {
        return Ok(());
    }
    Err(Error::Output {
        path: file.to_path_buf(),
        why: format!(
            "it is a directory, but its name ends in .json, which names one file; to put the \
             traces in that directory, end it with a slash: -o {}/",
            file.display()
        ),
    })
}

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

const ALREADY_EXISTS: &str = "it already exists (use --force to overwrite)";

/// Refuses an existing output unless `force`.
pub fn check_not_exists(path: &Path, force: bool) -> Result<()> {
    if !force && fs::symlink_metadata(path).is_ok() {
        return Err(Error::Output {
            path: path.to_path_buf(),
            why: ALREADY_EXISTS.into(),
        });
    }
    Ok(())
}

/// Refuses, for an output that is one file (`merge`, `convert`, `replay`, `--save-samples`), a
/// directory (an existing one, or a path ending in `/`), saying which name would do (`example`
/// inside it); then an existing file unless `force`. A directory that does not exist yet above the
/// file is made when the file is (`create_partial`).
pub fn check_file_output(path: &Path, force: bool, example: &str) -> Result<()> {
    if path.is_dir() || ends_in_slash(path) {
        let what = if path.is_dir() {
            "it is a directory"
        } else {
            "it ends in /, so it names a directory"
        };
        return Err(Error::Output {
            path: path.to_path_buf(),
            why: format!(
                "{what}, and this writes one file: give the file's name, e.g. {}",
                path.join(example).display()
            ),
        });
    }
    check_not_exists(path, force)
}

/// Whether `path` is a recording's temporary file (`.<final name>.<gilsample's pid>.partial`,
/// `create_partial`, for a final name ending in `.json`: `GIL_<pid>_rank_<rank>.json` in a directory,
/// or the one file `-o` named): one left by an interrupted recording (a second Ctrl+C, a full disk),
/// or one still being written.
pub fn is_partial(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(".partial"))
        .and_then(|n| n.rsplit_once('.'))
        .is_some_and(|(final_name, pid)| {
            // `-o run.JSON` names a file as `-o run.json` does (`OutputSpec::resolve`).
            final_name.len() > ".json".len()
                && final_name.as_bytes()[final_name.len() - ".json".len()..]
                    .eq_ignore_ascii_case(b".json")
                // A merge being written, or cut off: it repeats the recordings' own files.
                && final_name != MERGED_FILE_NAME
                && !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
        })
}

/// Whether `path` is written with a trailing `/`: it names a directory, there or not.
pub fn ends_in_slash(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().ends_with(b"/")
}

/// Makes the directories above `file` that do not exist yet, as `-o` does for a recording's
/// directory; the error names the directory.
pub fn make_parent_dirs(file: &Path) -> Result<()> {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => fs::create_dir_all(dir)
            .map_err(|e| Error::Output {
                path: dir.to_path_buf(),
                why: format!("cannot make the directory for {}: {e}", file.display()),
            }),
        _ => Ok(()),
    }
}

/// Renames a finished trace from `partial` into place. Without `force` an existing file is never
/// replaced, also one that appeared while the trace was being written (another recording, another
/// convert): the rename itself refuses (`RENAME_NOREPLACE`; where the file system lacks it, a check
/// just before), and the error names `partial`, which then holds the complete trace.
pub fn publish(partial: &Path, final_path: &Path, force: bool) -> Result<()> {
    let kept = |why: String| Error::Output {
        path: final_path.to_path_buf(),
        // The temporary file may be gone with its directory (removed while the trace was written).
        why: if partial.exists() {
            format!(
                "{why}; the complete trace was left in {}",
                partial.display()
            )
        } else {
            format!(
                "{why}; its temporary file {} is gone too (its directory removed or moved while \
                 the trace was written): the trace is lost",
                partial.display()
            )
        },
    };
    if !force {
        use nix::errno::Errno;
        match rename_noreplace(partial, final_path) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST) => return Err(kept(ALREADY_EXISTS.into())),
            // A file system without RENAME_NOREPLACE: check just before the plain rename.
            Err(Errno::EINVAL | Errno::ENOSYS) => {
                if fs::symlink_metadata(final_path).is_ok() {
                    return Err(kept(ALREADY_EXISTS.into()));
                }
            }
            Err(e) => return Err(kept(e.desc().into())),
        }
    }
    fs::rename(partial, final_path).map_err(|e| kept(e.to_string()))
}

/// `renameat2(RENAME_NOREPLACE)` as a raw system call: glibc's wrapper appeared in 2.28, and the
/// shipped binary links against glibc 2.17 (manylinux2014) so that it runs on older distributions.
fn rename_noreplace(from: &Path, to: &Path) -> std::result::Result<(), nix::errno::Errno> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c_path =
        |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| nix::errno::Errno::EINVAL);
    let (from, to) = (c_path(from)?, c_path(to)?);
    // SAFETY: both paths are NUL-terminated and outlive the call; no other memory is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    nix::errno::Errno::result(rc).map(drop)
}

/// Creates the temporary file beside `final_path` (and the directories above it that do not exist
/// yet): exclusive, no symlink followed, mode 0644.
pub fn create_partial(final_path: &Path) -> Result<(File, PathBuf)> {
    make_parent_dirs(final_path)?;
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
            // The name the user gave: the temporary one beside it is gilsample's own.
            path: final_path.to_path_buf(),
            why: format!(
                "cannot create the file it is written into first, {}: {e}",
                partial.display()
            ),
        })?;
    Ok((file, partial))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_never_replaces_a_file_that_appeared_meanwhile_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let final_path = dir.path().join("GIL_1_rank_0.json");
        let (_, partial) = create_partial(&final_path).unwrap();
        fs::write(&partial, "new").unwrap();
        // Another writer got there after our check at start.
        fs::write(&final_path, "theirs").unwrap();
        let err = publish(&partial, &final_path, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("already exists"), "{err}");
        assert!(err.contains(&partial.display().to_string()), "{err}");
        assert_eq!(fs::read_to_string(&final_path).unwrap(), "theirs");
        assert_eq!(fs::read_to_string(&partial).unwrap(), "new");
        publish(&partial, &final_path, true).unwrap();
        assert_eq!(fs::read_to_string(&final_path).unwrap(), "new");
        assert!(!partial.exists());
    }

    #[test]
    fn publish_moves_a_trace_into_a_free_name() {
        let dir = tempfile::tempdir().unwrap();
        let final_path = dir.path().join("out.json");
        let (_, partial) = create_partial(&final_path).unwrap();
        publish(&partial, &final_path, false).unwrap();
        assert!(final_path.exists() && !partial.exists());
    }

    #[test]
    fn a_trace_whose_directory_was_removed_is_said_lost_not_left_somewhere() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("gone");
        let final_path = out.join("out.json");
        fs::create_dir(&out).unwrap();
        let (_, partial) = create_partial(&final_path).unwrap();
        fs::remove_dir_all(&out).unwrap();
        for force in [false, true] {
            let said = publish(&partial, &final_path, force)
                .unwrap_err()
                .to_string();
            assert!(
                said.contains("is gone too") && said.ends_with("the trace is lost"),
                "{said}"
            );
            assert!(!said.contains("was left in"), "{said}");
        }
    }

    #[test]
    fn a_temporary_file_that_cannot_be_made_is_said_of_the_name_given() {
        // /proc takes no new files, even from root.
        let final_path = Path::new("/proc/gilsample-test.json");
        let Err(Error::Output { path, why }) = create_partial(final_path) else {
            panic!("made a file in /proc");
        };
        assert_eq!(path, final_path);
        assert!(
            why.starts_with(
                "cannot create the file it is written into first, /proc/.gilsample-test.json."
            ),
            "{why}"
        );
    }

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
        let upper = OutputSpec::resolve(Some(Path::new("out/run.JSON")), None);
        assert_eq!(upper, OutputSpec::File("out/run.JSON".into()));
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
