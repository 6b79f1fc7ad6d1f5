//! `--save-samples`: the sample stream of a recording, for `gilsample replay`.

use std::path::Path;

use crate::error::{Error, Result};
use crate::infer::sample::Sample;
use crate::python::attach::Target;
use crate::record::target::RecordedProcess;
use crate::sample::sampler::{Record, SampleLog, SamplerConfig, SamplerReport};

pub struct Saving;

impl SampleLog for Saving {
    fn sample(&mut self, _sample: &Sample) {}
    fn stack(&mut self, _stack: &Record) {}
    fn failed(&self) -> bool {
        false
    }
}

impl Saving {
    pub fn finish(self, _report: &SamplerReport) -> Result<u64> {
        Ok(0)
    }
}

pub fn save_samples_to(
    _path: &Path,
    _process: &RecordedProcess,
    _target: &Target,
    _config: &SamplerConfig,
) -> Result<Saving> {
    Err(Error::Usage("--save-samples: not yet".into()))
}
