//! What a stray word on the command line most likely meant, for clap's "unexpected argument" error:
//! a unit written apart from its number (`--rate 10 kHz`, `-d 2 m`), a process id without its
//! `--pid` (`gilsample 12345`), the command to launch without its `--` (`gilsample record python3
//! x.py`), or an option with two letters swapped (`--pdi`), which clap's own similarity measure
//! misses.

use clap::CommandFactory;

use crate::cli::Cli;
use crate::cli::values::{parse_duration, parse_rate};

/// The tip for `stray`, the word clap did not expect in `args` (the whole command line): the unit
/// case first, since a unit is never a command worth launching, and a number is a process id.
pub fn suggestion_for_stray(args: &[String], stray: &str) -> Option<String> {
    unit_suggestion(args, stray)
        .or_else(|| pid_suggestion(args, stray))
        .or_else(|| subcommand_suggestion(args, stray))
        .or_else(|| misplaced_subcommand_suggestion(args, stray))
        .or_else(|| launch_suggestion(args, stray))
}

/// `gilsample top -o out/ --pid 1` for `gilsample -o out/ top --pid 1`: one of gilsample's commands
/// after options, which clap reads as the start of a program to launch. The options go after the
/// command.
fn misplaced_subcommand_suggestion(args: &[String], stray: &str) -> Option<String> {
    let at = position_before_dashes(args, stray)?;
    let cli = Cli::command();
    let named = cli
        .get_subcommands()
        .any(|c| !c.is_hide_set() && c.get_name() == stray);
    if at == 1 || !named || subcommand(args, at).is_some() {
        return None;
    }
    let mut words = vec![stray.to_string()];
    words.extend(args[1..at].iter().cloned());
    words.extend(args[at + 1..].iter().cloned());
    let mut launch = args[1..at].to_vec();
    launch.push("--".into());
    launch.extend(args[at..].iter().cloned());
    Some(format!(
        "{stray} is a gilsample command, and its options go after it: {} (to launch a program \
         of that name instead, put it after --: {})",
        command_line(&words),
        command_line(&launch)
    ))
}

/// `gilsample record --pid 1` for `gilsample recrod --pid 1`: the first word, a typing slip or two
/// from one of gilsample's commands, is that command misspelt, not a program to launch.
fn subcommand_suggestion(args: &[String], stray: &str) -> Option<String> {
    // A program that exists (`tox`, one slip from `top`) is one to launch.
    if args.get(1).map(String::as_str) != Some(stray) || is_a_program(stray) {
        return None;
    }
    let cli = Cli::command();
    let (distance, name) = cli
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| (typing_slips(stray, c.get_name()), c.get_name().to_string()))
        .min_by_key(|(distance, _)| *distance)?;
    let allowed = if name.len() >= 6 { 2 } else { 1 };
    if distance == 0 || distance > allowed {
        return None;
    }
    let mut words = args[1..].to_vec();
    words[0] = name.clone();
    Some(format!(
        "a command of a similar name exists, {name}: {}",
        command_line(&words)
    ))
}

/// The tip for `stray`, an option clap did not expect in `args`, where clap found no similar one
/// (`clap_has_one`): a similar option of the same command, or else, where a command can be
/// launched, where that command's own options go.
pub fn option_suggestion(args: &[String], stray: &str, clap_has_one: bool) -> Option<String> {
    if clap_has_one {
        return None;
    }
    if let Some(similar) = similar_option(args, stray) {
        return Some(similar);
    }
    // `--pid -5`, `--interval -2s`: clap takes a negative number for an option (those that take
    // one, --duration -1 and --offset, never get here).
    if stray
        .strip_prefix('-')
        .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
    {
        let option = option_position(args, stray)
            .and_then(|at| args.get(at - 1))
            .filter(|before| before.starts_with('-'));
        return Some(match option {
            Some(option) => {
                format!("{stray} is a negative number, and {option} takes a positive one")
            }
            None => format!("{stray} is a negative number, not an option"),
        });
    }
    let at = option_position(args, stray)?;
    let command = subcommand(args, at);
    if command.is_some_and(|c| c == "info" || NO_TARGET_COMMANDS.contains(&c)) {
        return None;
    }
    let command = command.map(|c| format!(" {c}")).unwrap_or_default();
    Some(format!(
        "options of a command to launch go after it: gilsample{command} [OPTIONS] -- COMMAND {stray}"
    ))
}

/// `--pid` for `--pdi`: the long option of the command in `args` one typing slip from `stray` (a
/// letter swapped with the next, left out, added or mistyped; two in names of 6 letters or more),
/// with the command line corrected. For where clap suggests nothing: its measure (Jaro) scores a
/// swap in a short name under its threshold.
fn similar_option(args: &[String], stray: &str) -> Option<String> {
    let name = stray.strip_prefix("--")?.split('=').next()?;
    let at = option_position(args, stray)?;
    let root = Cli::command();
    let command = match subcommand(args, at) {
        Some(sub) => root.find_subcommand(sub)?.clone(),
        None => root,
    };
    let (distance, option) = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .map(|long| (typing_slips(name, long), long))
        .min_by_key(|(distance, _)| *distance)?;
    let allowed = if option.len() >= 6 { 2 } else { 1 };
    if distance == 0 || distance > allowed {
        return None;
    }
    let mut words: Vec<String> = args.to_vec();
    words[at] = words[at].replacen(&format!("--{name}"), &format!("--{option}"), 1);
    Some(format!(
        "a similar option exists, --{option}: {}",
        command_line(&words[1..])
    ))
}

/// How many typing slips turn `a` into `b`: a character left out, added, mistyped, or swapped with
/// the next (the optimal string alignment distance).
fn typing_slips(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // rows[i][j]: slips between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let mistyped = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + mistyped);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// `words` as one command line to copy, after `gilsample`: words a shell would split or expand
/// single-quoted.
fn command_line(words: &[String]) -> String {
    let quoted = |a: &String| {
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            format!("'{}'", a.replace('\'', "'\\''"))
        } else {
            a.clone()
        }
    };
    std::iter::once("gilsample".to_string())
        .chain(words.iter().map(quoted))
        .collect::<Vec<_>>()
        .join(" ")
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

/// Whether `word` names a program: a path to a file, or an executable file in a `PATH` directory.
fn is_a_program(word: &str) -> bool {
    is_a_program_in(word, std::env::var_os("PATH").as_deref())
}

/// `is_a_program` with `path` for `PATH`.
fn is_a_program_in(word: &str, path: Option<&std::ffi::OsStr>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &std::path::Path| {
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if word.contains('/') {
        return executable(std::path::Path::new(word));
    }
    path.is_some_and(|path| std::env::split_paths(path).any(|dir| executable(&dir.join(word))))
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
    // `--pid 12 34`: a second process for the list given before (--pid is taken once).
    let mut words = args[1..at].to_vec();
    if let Some(list) = pid_list_before(&words) {
        if subcommand(args, at) == Some("info") {
            let given = words[list].rsplit(['=', ',', 'p']).next().unwrap_or("PID");
            return Some(format!(
                "info describes one process at a time: gilsample info --pid {given}, then \
                 gilsample info --pid {stray}"
            ));
        }
        let word = &mut words[list];
        let joiner = if word.ends_with([',', '=']) { "" } else { "," };
        *word = format!("{word}{joiner}{stray}");
        // `-p $(pgrep -f train.py)` with three or more: every bare number that follows joins too.
        let mut rest = args[at + 1..].iter().peekable();
        while let Some(next) =
            rest.next_if(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()))
        {
            *word = format!("{word},{next}");
        }
        words.extend(rest.cloned());
        return Some(format!(
            "give several processes as one list, separated by commas: {}",
            command_line(&words)
        ));
    }
    words.extend(["--pid".to_string(), stray.to_string()]);
    words.extend(args[at + 1..].iter().cloned());
    Some(format!(
        "give a process by its id with --pid: {}",
        command_line(&words)
    ))
}

/// Where in `words` (the command line before a stray number, `--` not among them) the last pid list
/// was given: the word after `--pid`/`-p`, or the word `--pid=12`, `-p=12`, `-p12` itself.
fn pid_list_before(words: &[String]) -> Option<usize> {
    let is_list = |text: &str| {
        !text.is_empty()
            && text
                .trim_end_matches(',')
                .split(',')
                .all(|p| p.parse::<u32>().is_ok())
    };
    (0..words.len()).rev().find_map(|i| {
        let word = words[i].as_str();
        if word == "--pid" || word == "-p" {
            return words.get(i + 1).filter(|w| is_list(w)).map(|_| i + 1);
        }
        let attached = word
            .strip_prefix("--pid=")
            .or_else(|| word.strip_prefix("-p="))
            .or_else(|| word.strip_prefix("-p"));
        attached.filter(|list| is_list(list)).map(|_| i)
    })
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
    let mut words = args[1..at].to_vec();
    words.push("--".into());
    words.extend(args[at..].iter().cloned());
    Some(format!(
        "to launch a command and record it, put it after --: {}",
        command_line(&words)
    ))
}

/// Where `stray` is in `args` (after the program's name), where no `--` comes before it.
fn position_before_dashes(args: &[String], stray: &str) -> Option<usize> {
    first_before_dashes(args, |a| a == stray)
}

/// Where the word holding the option `stray` is in `args`, where no `--` comes before it: the
/// option itself, written with its value (`--bogus=1`), or in a cluster of short ones (`-xp`).
fn option_position(args: &[String], stray: &str) -> Option<usize> {
    first_before_dashes(args, |a| {
        a == stray
            || a.strip_prefix(stray).is_some_and(|v| v.starts_with('='))
            || (!stray.starts_with("--") && a.starts_with(stray) && !a.starts_with("--"))
    })
}

/// The first word of `args` after the program's name that `holds`, where no `--` comes before it.
fn first_before_dashes(args: &[String], holds: impl Fn(&String) -> bool) -> Option<usize> {
    let at = args.iter().skip(1).position(holds)? + 1;
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
    fn a_negative_number_is_said_to_be_one() {
        for (line, stray, want) in [
            (
                "gilsample --pid -5",
                "-5",
                "-5 is a negative number, and --pid takes a positive one",
            ),
            // clap splits `-2s` into short options and calls `-2` unexpected.
            (
                "gilsample top --pid 7 --interval -2s",
                "-2",
                "-2 is a negative number, and --interval takes a positive one",
            ),
            (
                "gilsample top --lines -3 --pid 7",
                "-3",
                "-3 is a negative number, and --lines takes a positive one",
            ),
        ] {
            let args: Vec<String> = line.split(' ').map(String::from).collect();
            let got = option_suggestion(&args, stray, false);
            assert_eq!(got.as_deref(), Some(want), "{line}");
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
            // After a list, the number joins it: --pid is taken once.
            ("gilsample --pid 12 6419", "commas: gilsample --pid 12,6419"),
            (
                "gilsample record -p 12,13 6419",
                "commas: gilsample record -p 12,13,6419",
            ),
            (
                "gilsample info -p 12 6419",
                "--pid 12, then gilsample info --pid 6419",
            ),
            // The list given further back, or written attached, or ending in a comma.
            (
                "gilsample --pid 12 -d 5 6419",
                "commas: gilsample --pid 12,6419 -d 5",
            ),
            ("gilsample -p12 6419", "commas: gilsample -p12,6419"),
            (
                "gilsample --pid 12, 6419",
                "commas: gilsample --pid 12,6419",
            ),
            (
                "gilsample top --pid=12 6419 -d 5",
                "commas: gilsample top --pid=12,6419 -d 5",
            ),
            // `-p $(pgrep -f train.py)` that found four: every number joins.
            (
                "gilsample -p 11 6419 33 44 -d 1",
                "commas: gilsample -p 11,6419,33,44 -d 1",
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
    fn a_command_after_options_is_told_to_come_first() {
        let got = tip("gilsample -o out/ top --pid 22021 --once", "top").unwrap();
        assert!(
            got.starts_with(
                "top is a gilsample command, and its options go after it: gilsample top -o out/ \
                 --pid 22021 --once"
            ),
            "{got}"
        );
        assert!(got.contains("gilsample -o out/ -- top --pid"), "{got}");
        // The command first, a program of that name after options: launched, as before.
        let got = tip("gilsample record -d 1 top", "top").unwrap();
        assert!(got.starts_with("to launch a command"), "{got}");
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

    #[test]
    fn an_option_one_slip_away_is_suggested_with_the_line_corrected() {
        let similar = |line: &str, stray: &str| {
            let args: Vec<String> = line.split(' ').map(String::from).collect();
            similar_option(&args, stray)
        };
        for (line, stray, want) in [
            ("gilsample --pdi 12", "--pdi", "--pid: gilsample --pid 12"),
            (
                "gilsample top --pdi=12",
                "--pdi",
                "--pid: gilsample top --pid=12",
            ),
            (
                "gilsample --pid 1 --druation 5s",
                "--druation",
                "--duration: gilsample --pid 1 --duration 5s",
            ),
            (
                "gilsample info --pdi 3",
                "--pdi",
                "--pid: gilsample info --pid 3",
            ),
            (
                "gilsample --pid 1 --no-stack",
                "--no-stack",
                "--no-stacks: gilsample --pid 1 --no-stacks",
            ),
        ] {
            let got = similar(line, stray);
            assert!(
                got.as_deref().is_some_and(|t| t.ends_with(want)),
                "{line}: {got:?}"
            );
        }
        // Nothing near, or after `--` (the launched command's own options).
        assert_eq!(similar("gilsample --banana 1", "--banana"), None);
        assert_eq!(similar("gilsample --pid 1 -- python3 --pdi", "--pdi"), None);
        // Another command's option is not this one's.
        assert_eq!(similar("gilsample convert --pdi x", "--pdi"), None);
    }

    #[test]
    fn a_misspelt_command_is_suggested_before_launching_it() {
        let said = tip("gilsample recrod --pid 22005", "recrod").unwrap();
        assert!(
            said.contains("exists, record: gilsample record --pid 22005"),
            "{said}"
        );
        let said = tip("gilsample reprot run.json", "reprot").unwrap();
        assert!(said.contains("gilsample report run.json"), "{said}");
        // A real program stays a command to launch.
        let said = tip("gilsample python3 train.py", "python3").unwrap();
        assert!(said.contains("gilsample -- python3 train.py"), "{said}");
        // A program one slip from a command's name (`tox`, `top`) is launched, as written.
        let bin = tempfile::tempdir().unwrap();
        let tox = bin.path().join("tox");
        std::fs::write(&tox, "#!/bin/sh\n").unwrap();
        let path = Some(bin.path().as_os_str());
        assert!(!is_a_program_in("tox", path));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tox, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(is_a_program_in("tox", path));
        assert!(!is_a_program_in("tox", None));
        assert!(is_a_program_in(tox.to_str().unwrap(), None));
        let said = tip("gilsample sh -c true", "sh").unwrap();
        assert!(said.contains("gilsample -- sh -c true"), "{said}");
        // Only the first word can be a command.
        let said = tip("gilsample --rate 1khz record", "record");
        assert!(!said.is_some_and(|s| s.contains("similar name")));
    }

    #[test]
    fn typing_slips_count_a_swap_as_one() {
        assert_eq!(typing_slips("pdi", "pid"), 1);
        assert_eq!(typing_slips("pid", "pid"), 0);
        assert_eq!(typing_slips("rat", "rate"), 1);
        assert_eq!(typing_slips("druation", "duration"), 1);
        assert_eq!(typing_slips("outptu", "output"), 1);
        assert_eq!(typing_slips("abc", "xyz"), 3);
        assert_eq!(typing_slips("", "pid"), 3);
    }

    #[test]
    fn a_tip_quotes_what_a_shell_would_split() {
        let args: Vec<String> = ["gilsample", "6419", "-o", "my dir"]
            .map(String::from)
            .to_vec();
        let got = suggestion_for_stray(&args, "6419");
        assert!(
            got.as_deref()
                .is_some_and(|t| t.ends_with("--pid 6419 -o 'my dir'")),
            "{got:?}"
        );
    }
}
