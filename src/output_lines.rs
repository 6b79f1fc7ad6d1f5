//! Where a recording's traces go, as the command says it: the default directory (`$GILSAMPLE_DIR`,
//! else `./gil_traces/`, which `report` also reads without a path) and a `-o` that will be a
//! directory though named like a file. A module of `main.rs`.

use std::path::PathBuf;

use gilsample::trace::output::{DIR_ENV, OutputSpec};

/// `-o trace.txt` is a directory to be made (only a name ending in `.json` is one file): said, so
/// that a user who meant a file is not surprised by a directory of that name.
pub(crate) fn output_taken_as_a_directory(output: &OutputSpec) -> Option<String> {
    let OutputSpec::Directory(dir) = output else {
        return None;
    };
    let suffix = dir.extension()?.to_str()?;
    let file_like = !dir.as_os_str().to_string_lossy().ends_with('/')
        && suffix.chars().all(|c| c.is_ascii_alphanumeric())
        && suffix.chars().any(|c| c.is_ascii_alphabetic());
    (file_like && !dir.exists()).then(|| {
        format!(
            "gilsample: note: -o {} will be a directory, its traces GIL_<pid>_rank_<rank>.json in \
             it (one trace in one file: a name ending in .json)",
            dir.display()
        )
    })
}

/// `$GILSAMPLE_DIR`, where record writes without `-o` (set but empty is unset, as the Python API
/// takes it).
pub(crate) fn default_output_dir() -> Option<PathBuf> {
    std::env::var_os(DIR_ENV)
        .filter(|dir| !dir.is_empty())
        .map(Into::into)
}
