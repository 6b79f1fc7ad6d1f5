//! What a session settles before it starts anything: outputs and CPUs that would fail later, and
//! the processes that the ids given with `--pid` stand for.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::process::tasks::thread_group_of;
use crate::record::{RecordOptions, Update};
use crate::sampler::affinity::check_usable;
use crate::trace::output::{
    NOT_A_DIRECTORY, OutputSpec, check_file_output, check_not_exists,
    refuse_a_directory_named_as_a_file,
};

/// Refuses, before anything starts, what would fail later: an existing file named by `-o` or the
/// merged trace (without `--force`), a directory that cannot be written, `--cpus` none of which
/// can be used. Nothing is created: a run refused later (no such process, not Python) leaves no
/// empty output directory behind; the directory is made when the first target starts.
pub(super) fn check_outputs(opts: &RecordOptions) -> Result<()> {
    if let Some(cpus) = &opts.cpus {
        check_usable(cpus)?;
    }
    if let OutputSpec::File(path) = &opts.output {
        refuse_a_directory_named_as_a_file(path)?;
        check_not_exists(path, opts.force)?;
    }
    if opts.merge {
        check_not_exists(&opts.output.merged_path(), opts.force)?;
    }
    // One target's stream is the path itself (several targets' get their pids, checked as each
    // starts: record/save.rs).
    if let Some(path) = &opts.save_samples {
        check_file_output(path, opts.force, "run.gilsamples")?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            check_can_create_in(dir)?;
        }
    }
    check_can_create_in(&opts.output.dir())
}

/// Whether files can be made in `dir`, or, while it does not exist, whether it could be made: the
/// nearest directory above it that exists must be a directory that can be written. Tried with a
/// file created and removed at once, which answers for read-only mounts, permissions and ACLs alike.
fn check_can_create_in(dir: &Path) -> Result<()> {
    let mut existing = dir.to_path_buf();
    // Bounded by the path's components: each step removes one.
    while std::fs::symlink_metadata(&existing).is_err() {
        match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => existing = parent.to_path_buf(),
            _ => {
                existing = PathBuf::from(".");
                break;
            }
        }
    }
    if !existing.is_dir() {
        return Err(Error::Output {
            path: existing,
            why: NOT_A_DIRECTORY.into(),
        });
    }
    let probe = existing.join(format!(".gilsample-write-check-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if existing == dir => Err(Error::Output {
            path: existing,
            why: format!("cannot create files there: {e}"),
        }),
        Err(e) => Err(Error::Output {
            path: dir.to_path_buf(),
            why: format!("cannot create it in {}: {e}", existing.display()),
        }),
    }
}

/// The processes of the given ids: a thread id stands for its process (said, and recorded once).
pub(super) fn processes_of(given: &[u32], progress: &mut dyn FnMut(Update<'_>)) -> Vec<u32> {
    let mut pids = Vec::new();
    for &id in given {
        let pid = match thread_group_of(id) {
            Some(process) if process != id => {
                progress(Update::ThreadOfProcess {
                    tid: id,
                    pid: process,
                });
                process
            }
            _ => id,
        };
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids
}
