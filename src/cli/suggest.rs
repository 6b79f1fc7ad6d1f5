//! What a stray word on the command line most likely meant, for clap's "unexpected argument" error:
//! a unit written apart from its number (`--rate 10 kHz`, `-d 2 m`), a process id without its
//! `--pid` (`gilsample 12345`), or the command to launch without its `--` (`gilsample record
//! python3 x.py`).

use clap::CommandFactory;

use crate::cli::Cli;
use crate::cli::values::{parse_duration, parse_rate};

/// The tip for `stray`, the word clap did not expect in `args` (the whole command line): the unit
/// case first, since a unit is never a command worth launching, and a number is a process id.
pub fn suggestion_for_stray(args: &[String], stray: &str) -> Option<String> {
    unit_suggestion(args, stray)
        .or_else(|| pid_suggestion(args, stray))
        .or_else(|| launch_suggestion(args, stray))
}

/// The subcommands that take no process and launch no command: a stray word there is not one.
const NO_TARGET_COMMANDS: [&str; 5] = ["convert", "merge", "report", "replay", "layout"];

/// The subcommand named in `args` before `at`, if any (the default, `record`, is named by none).
/// The names are the command line's own (only asked for on a command line clap refused).
fn subcommand(args: &[String], at: usize) -> Option<&str> {
    let cli = Cli::command();
    let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
    args[1..at]
        .iter()
        .map(String::as_str)
        .find(|a| names.contains(a))
}

/// `gilsample top --pid 12345` for `gilsample top 12345`: a bare number where a process is asked
/// for (record, top, info) is a process id.
fn pid_suggestion(args: &[String], stray: &str) -> Option<String> {
    if stray.is_empty() || !stray.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let at = position_before_dashes(args, stray)?;
    if subcommand(args, at).is_some_and(|c| NO_TARGET_COMMANDS.contains(&c)) {
        return None;
    }
    let mut words = vec!["gilsample".to_string()];
    words.extend(args[1..at].iter().cloned());
    words.extend(["--pid".to_string(), stray.to_string()]);
    words.extend(args[at + 1..].iter().cloned());
    Some(format!(
        "give a process by its id with --pid: {}",
        words.join(" ")
    ))
}

/// `--rate 10khz` for `--rate 10 kHz`: `stray` follows the value of `--rate` or `--duration`, and
/// the two written together are a value that option takes.
fn unit_suggestion(args: &[String], stray: &str) -> Option<String> {
    // A unit starts with a letter; a number after a value is something else (a process id).
    if !stray.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let at = position_before_dashes(args, stray)?;
    let before = args.get(at.checked_sub(1)?)?;
    let (option, number) = match args.get(at.wrapping_sub(2)) {
        Some(option) if !before.starts_with('-') || before.parse::<f64>().is_ok() => {
            (option.as_str(), before.as_str())
        }
        _ => before.split_once('=')?,
    };
    let joined = format!("{number}{stray}");
    let parses = match option {
        "-r" | "--rate" => parse_rate(&joined).is_ok(),
        "-d" | "--duration" => parse_duration(&joined).is_ok(),
        _ => false,
    };
    parses.then(|| format!("write the number and its unit together: {option} {joined}"))
}

/// `gilsample record -- python3 x.py` for `gilsample record python3 x.py`: the words from the
/// stray one on are the command to launch.
fn launch_suggestion(args: &[String], stray: &str) -> Option<String> {
    if stray.starts_with('-') {
        return None;
    }
    let at = position_before_dashes(args, stray)?;
    // `info`, like the commands without a target, launches nothing.
    if subcommand(args, at).is_some_and(|c| c == "info" || NO_TARGET_COMMANDS.contains(&c)) {
        return None;
    }
    let quoted = |a: &String| {
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            format!("'{}'", a.replace('\'', "'\\''"))
        } else {
            a.clone()
        }
    };
    let mut words = vec!["gilsample".to_string()];
    words.extend(args[1..at].iter().map(quoted));
    words.push("--".into());
    words.extend(args[at..].iter().map(quoted));
    Some(format!(
        "to launch a command and record it, put it after --: {}",
        words.join(" ")
    ))
}

/// Where `stray` is in `args` (after the program's name), where no `--` comes before it.
fn position_before_dashes(args: &[String], stray: &str) -> Option<usize> {
    let at = args.iter().skip(1).position(|a| a == stray)? + 1;
    (!args[..at].iter().any(|a| a == "--")).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tip for `line` where clap found `stray` unexpected.
    fn tip(line: &str, stray: &str) -> Option<String> {
        let args: Vec<String> = line.split(' ').map(String::from).collect();
        suggestion_for_stray(&args, stray)
    }

    #[test]
    fn a_unit_apart_from_its_number_is_joined_to_it() {
        for (line, stray, want) in [
            (
                "gilsample --pid 1 --rate 10 kHz",
                "kHz",
                "together: --rate 10kHz",
            ),
            ("gilsample -p 1 -r 500 hz", "hz", "together: -r 500hz"),
            (
                "gilsample record -p 1 --rate=10 khz",
                "khz",
                "together: --rate 10khz",
            ),
            ("gilsample --pid 1 -d 2 m", "m", "together: -d 2m"),
            (
                "gilsample --pid 1 --duration 500 ms",
                "ms",
                "together: --duration 500ms",
            ),
        ] {
            let got = tip(line, stray);
            assert!(
                got.as_deref().is_some_and(|t| t.ends_with(want)),
                "{line}: {got:?}"
            );
        }
    }

    #[test]
    fn a_bare_number_is_a_process_id_where_one_is_asked_for() {
        for (line, want) in [
            ("gilsample 6419", "gilsample --pid 6419"),
            ("gilsample top 6419", "gilsample top --pid 6419"),
            ("gilsample info 6419", "gilsample info --pid 6419"),
            (
                "gilsample record 6419 -d 5",
                "gilsample record --pid 6419 -d 5",
            ),
        ] {
            let got = tip(line, "6419");
            assert!(
                got.as_deref().is_some_and(|t| t.ends_with(want)),
                "{line}: {got:?}"
            );
        }
    }

    #[test]
    fn commands_that_launch_nothing_get_no_launch_tip() {
        for (line, stray) in [
            ("gilsample info 12a", "12a"),
            ("gilsample convert a.json out", "a.json"),
            ("gilsample replay a b", "b"),
            ("gilsample report 6419", "6419"),
        ] {
            assert_eq!(tip(line, stray), None, "{line}");
        }
    }

    #[test]
    fn a_word_that_is_no_unit_of_the_option_before_it_is_a_command() {
        for (line, stray) in [
            ("gilsample --pid 1 --rate 10 python3 x.py", "python3"),
            ("gilsample --pid 10 ms", "ms"),
            ("gilsample record python3 x.py", "python3"),
        ] {
            let got = tip(line, stray);
            assert!(
                got.as_deref()
                    .is_some_and(|t| t.contains("put it after --")),
                "{line}: {got:?}"
            );
        }
    }
}
