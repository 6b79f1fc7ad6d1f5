//! `--save-samples`: the sample stream of a recording (stream/), for `gilsample replay`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::infer::findings::Finding;
use crate::infer::sample::Sample;
use crate::python::target::Target;
use crate::record::recorded_process::RecordedProcess;
use crate::sampler::config::{SampleLog, SamplerConfig};
use crate::sampler::report::SamplerReport;
use crate::sampler::tick_loop::sample_context;
use crate::stream::{Item, SampleSaver, StreamHeader};
use crate::trace::output::check_not_exists;

/// The saver as the sampler's log: samples and stacks go into the stream as they are read.
pub struct Saving {
    saver: SampleSaver,
    /// One sample item, refilled in place each tick (no allocation once the thread table is built).
    item: Item,
}

impl SampleLog for Saving {
    fn sample(&mut self, sample: &Sample) {
        if let Item::Sample(saved) = &mut self.item {
            saved.copy_readings_from(sample);
        }
        self.saver.push(&self.item);
    }

    fn stack(&mut self, stack: &Finding) {
        if let Some(item) = Item::from_stack(stack) {
            self.saver.push(&item);
        }
    }

    fn failed(&self) -> bool {
        self.saver.failed()
    }
}

impl Saving {
    /// Ends the stream with the sampler's report; the bytes written.
    pub fn finish(mut self, report: &SamplerReport) -> Result<u64> {
        let end = serde_json::to_value(report).map_err(|e| Error::Output {
            path: PathBuf::new(),
            why: format!("the sampler's report does not serialise: {e}"),
        })?;
        self.saver.push(&Item::End(end));
        Ok(self.saver.finish()?.bytes)
    }
}

/// Where one target's samples go: `path` itself, or with several targets `path` with `.PID` before
/// its suffix.
pub fn samples_path(path: &Path, pid: u32, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

/// Opens the sample stream of `target` at `path` (`--save-samples`; `force` overwrites) and writes
/// its header, with `process` for replay to describe it.
pub fn save_samples_to(
    path: &Path,
    force: bool,
    process: &RecordedProcess,
    target: &Target,
    config: &SamplerConfig,
) -> Result<Saving> {
    check_not_exists(path, force)?;
    let mut header = StreamHeader::new(
        target.pid,
        target.version.to_string(),
        target.layout.key(),
        process.rate_requested_hz,
        sample_context(target, config),
    );
    header.process = serde_json::to_value(process).map_err(|e| Error::Output {
        path: path.to_path_buf(),
        why: format!("the process description does not serialise: {e}"),
    })?;
    Ok(Saving {
        saver: SampleSaver::create(path, header)?,
        item: Item::Sample(Sample::default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_targets_get_their_pid_before_the_suffix() {
        let p = Path::new("/tmp/run.gilsamples");
        assert_eq!(samples_path(p, 7, false), p);
        assert_eq!(samples_path(p, 7, true), Path::new("/tmp/run.7.gilsamples"));
        assert_eq!(samples_path(Path::new("out"), 7, true), Path::new("out.7"));
    }
}
