//! `gilsample top`'s command line: `record`'s options (what to record, where a trace is saved,
//! sampling) and the view's own (how often, plain tables), parsed and checked.

use std::time::Duration;

use clap::Args;

use crate::cli::record::RecordArgs;
use crate::cli::values::{DurationArg, parse_duration};

/// What `gilsample top --help` ends with: its keys and examples.
pub const TOP_EXAMPLES: &str = "Keys: q or Ctrl+C quits; s sorts by wait or by hold; t shows the last interval or \
everything since the start; p pauses; left and right arrows go from process to process; up and down \
scroll the threads.

Examples:
  gilsample top --pid 12345                     watch a running process until q
  gilsample top -- python3 train.py             launch a command and watch it (q stops it)
  gilsample top --pid 12345 -o run.json         also save the trace, as `record -o` does
  gilsample top --pid 12345 --once              one plain table after one interval, for scripts
  gilsample top --pid 12345 --lines 5 --interval 10s   a plain table every 10 s, 5 threads each

Without -o nothing is written but a temporary trace, removed at the end.";

const HELP_VIEW: &str = "The view";

#[derive(Args, Debug)]
#[command(mut_arg("output", |arg| arg
    .help("Also save the trace: a directory (GIL_<pid>_rank_<rank>.json per process) or one .json file")
    .long_help("Also save the trace: a directory, with one GIL_<pid>_rank_<rank>.json per process, or \
a file ending in .json for a single target, as `record -o` writes them.\n\nWithout it top keeps the trace \
in a temporary directory and removes it at the end.")))]
/// `gilsample top`'s options.
pub struct TopArgs {
    /// How often the table is refreshed: 1s, 500ms, 2s (from 100ms to 1h).
    ///
    /// Each refresh shows the interval just past; t switches to everything since the start.
    #[arg(long, default_value = "1s", value_parser = parse_interval, help_heading = HELP_VIEW)]
    pub interval: Duration,

    /// Print one plain table after one interval and exit, instead of the full-screen view.
    ///
    /// For scripts and for output that is not a terminal.
    #[arg(long, help_heading = HELP_VIEW)]
    pub once: bool,

    /// Print a plain table every interval, each with at most N threads per process (those that
    /// waited or held most), until stopped, instead of the full-screen view.
    ///
    /// For logs, pipes and terminals that cannot show the full-screen view. With --once, the one
    /// table shows at most N threads per process.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = HELP_VIEW)]
    pub lines: Option<u32>,

    /// What to record and how, as for `record`.
    #[command(flatten)]
    pub record: RecordArgs,
}

/// Shortest and longest refresh interval: shorter, the figures are mostly noise and the analysis runs
/// all the time; longer is a typo.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

fn parse_interval(text: &str) -> Result<Duration, String> {
    let refuse = || {
        format!(
            "'{text}' is not a refresh interval: give one from 100ms to 1h, e.g. 1s, 500ms or 5s"
        )
    };
    match parse_duration(text) {
        Ok(DurationArg(Some(d))) if (MIN_INTERVAL..=MAX_INTERVAL).contains(&d) => Ok(d),
        _ => Err(refuse()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::Parser;

    use crate::cli::{Cli, Command, PidList};

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("gilsample").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn top_takes_records_options_and_its_own() {
        let top = |args: &[&str]| match parse(args).command {
            Some(Command::Top(top)) => top,
            other => panic!("{args:?}: not top: {other:?}"),
        };
        let args = top(&["top", "--pid", "12", "--interval", "500ms", "--lines", "3"]);
        assert_eq!(args.interval, Duration::from_millis(500));
        assert_eq!((args.once, args.lines), (false, Some(3)));
        assert_eq!(args.record.pid, Some(PidList(vec![12])));
        assert_eq!(args.record.output, None);
        let launched = top(&["top", "--once", "-o", "t.json", "--", "python3", "x.py"]);
        assert_eq!(launched.interval, Duration::from_secs(1));
        assert_eq!(launched.record.command, ["python3", "x.py"]);
        assert_eq!(launched.record.output, Some(PathBuf::from("t.json")));
        for bad in [
            &["top", "--interval", "0"][..],
            &["top", "--interval", "10ms"],
            &["top", "--interval", "-1"],
            &["top", "--interval", "2h"],
            &["top", "--lines", "0"],
        ] {
            let mut with = vec!["gilsample"];
            with.extend_from_slice(bad);
            assert!(Cli::try_parse_from(with).is_err(), "{bad:?} accepted");
        }
    }
}
