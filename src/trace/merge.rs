//! `--merge`: one Chrome trace holding every target of a session, each as its own process track
//! (process names already carry pid, rank and command line). Written like every trace: to a temporary
//! file, renamed into place when complete.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::trace::output::{check_not_exists, create_partial};

/// Combines the finished traces at `inputs` into `output`.
pub fn write_merged(inputs: &[PathBuf], output: &Path, force: bool) -> Result<PathBuf> {
    check_not_exists(output, force)?;
    let (file, partial) = create_partial(output)?;
    let fail = |e: std::io::Error| Error::Output {
        path: output.to_path_buf(),
        why: format!("{e} (partial data is in {})", partial.display()),
    };
    let mut out = std::io::BufWriter::new(file);
    out.write_all(b"{\"traceEvents\":[\n").map_err(fail)?;
    let mut first = true;
    let mut sources = Vec::new();
    for input in inputs {
        let text = std::fs::read_to_string(input)
            .map_err(|e| Error::io(format!("reading {}", input.display()), e))?;
        let trace: Value = serde_json::from_str(&text).map_err(|e| Error::Output {
            path: input.clone(),
            why: format!("not a complete trace: {e}"),
        })?;
        for event in trace["traceEvents"].as_array().into_iter().flatten() {
            if !first {
                out.write_all(b",\n").map_err(fail)?;
            }
            first = false;
            serde_json::to_writer(&mut out, event).map_err(|e| fail(e.into()))?;
        }
        sources.push(json!({"file": input.display().to_string(), "otherData": trace["otherData"]}));
    }
    let tail = json!({"merged_from": sources});
    write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{tail}}}\n"
    )
    .map_err(fail)?;
    out.flush().map_err(fail)?;
    out.get_ref().sync_all().map_err(fail)?;
    check_not_exists(output, force)?;
    std::fs::rename(&partial, output).map_err(fail)?;
    Ok(output.to_path_buf())
}
