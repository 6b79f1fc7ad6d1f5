//! `gilsample report`: the traces it reads (the paths given, or where record writes by default),
//! what it passed over, and the answer on standard output. A module of `main.rs`.

use gilsample::cli::ReportArgs;
use gilsample::error::{Error, Result};
use gilsample::trace::output::OutputSpec;

use crate::output_lines::default_output_dir;
use crate::stdout_text::print_text;

pub(crate) fn run_report(args: &ReportArgs) -> Result<()> {
    // Without a path: where record writes without -o.
    let inputs = if args.inputs.is_empty() {
        let OutputSpec::Directory(dir) = OutputSpec::resolve(None, default_output_dir()) else {
            unreachable!("without -o the output is a directory");
        };
        if !dir.exists() {
            return Err(Error::Input {
                path: dir,
                why: "no such directory: record writes its traces there without -o; give \
                      `gilsample report` the trace files or directories to read"
                    .into(),
            });
        }
        vec![dir]
    } else {
        args.inputs.clone()
    };
    let report = gilsample::report::report(&inputs)?;
    for (path, why) in &report.skipped {
        gilsample::stderr_line!("gilsample: warning: {}: skipped: {why}", path.display());
    }
    for (path, how) in &report.interrupted {
        gilsample::stderr_line!("gilsample: note: {}: {how}", path.display());
    }
    let not_read = gilsample::report::not_read_in_words(&report.not_read);
    if let Some(words) = not_read.strip_prefix("; ") {
        gilsample::stderr_line!("gilsample: note: {words}");
    }
    if args.json {
        let json =
            serde_json::to_string_pretty(&report.to_json()).expect("a JSON value serializes");
        print_text(&(json + "\n"))
    } else {
        print_text(&report.to_text())
    }
}
