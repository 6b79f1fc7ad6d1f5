//! What a stray word on the command line most likely meant, for clap's "unexpected argument" error:
//! a unit written apart from its number (`--rate 10 kHz`, `-d 2 m`), or the command to launch
//! without its `--` (`gilsample record python3 x.py`).

use crate::cli::values::{parse_duration, parse_rate};

/// The tip for `stray`, the word clap did not expect in `args` (the whole command line): the unit
/// case first, since a unit is never a command worth launching.
pub fn suggestion_for_stray(args: &[String], stray: &str) -> Option<String> {
    unit_suggestion(args, stray).or_else(|| launch_suggestion(args, stray))
}

/// `--rate 10khz` for `--rate 10 kHz`: `stray` follows the value of `--rate` or `--duration`, and
/// the two written together are a value that option takes.
fn unit_suggestion(args: &[String], stray: &str) -> Option<String> {
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
