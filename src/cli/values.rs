//! The values the command line takes, parsed and checked: pid lists, sampling rates, durations with
//! units, CPU lists. Each refusal says what is wrong and which forms are accepted.

use std::time::Duration;

/// Highest sampling rate accepted. Above this, each tick's reads take longer than the period on
/// ordinary machines and the sampler would only measure itself.
pub const MAX_RATE_HZ: f64 = 100_000.0;
/// Lowest sampling rate accepted.
pub const MIN_RATE_HZ: f64 = 1.0;

/// The CPUs `--cpus` names: where the sampler threads may run.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuList(pub Vec<usize>);

/// Parses `--cpus`: CPU numbers and ranges, comma-separated (`0,2-3`).
pub fn parse_cpus(text: &str) -> Result<CpuList, String> {
    crate::sampler::affinity::parse_cpu_list(text).map(CpuList)
}

/// The process ids `--pid` names, without repeats, in the order given.
#[derive(Clone, Debug, PartialEq)]
pub struct PidList(pub Vec<u32>);

/// A sampling rate `--rate` names, in Hz.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

/// `None` inside means "until stopped" (-1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DurationArg(pub Option<Duration>);

/// The longest duration accepted: a year. Longer is a typo (or would overflow the deadline).
const MAX_DURATION: Duration = Duration::from_secs(365 * 86400);

/// Parses `--pid`: comma-separated process ids, none of them 0.
pub fn parse_pids(text: &str) -> Result<PidList, String> {
    // `-pid 123` is `-p` given `id`, and `-pid=123` is `-p` given `id=123`.
    if text == "id" || text.starts_with("id=") {
        return Err("-pid is read as -p id: write --pid PID or -p PID".into());
    }
    let mut pids = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let pid: u32 = part.parse().map_err(|_| not_a_pid(part))?;
        if pid == 0 {
            return Err("0 is not a process id".into());
        }
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    if pids.is_empty() {
        return Err("give at least one process id".into());
    }
    Ok(PidList(pids))
}

/// Parses `info`'s `--pid`: one process id, said as `record`'s `--pid` says it.
pub fn parse_one_pid(text: &str) -> Result<u32, String> {
    match parse_pids(text)?.0.as_slice() {
        [pid] => Ok(*pid),
        _ => Err("info describes one process: give one id (run it once for each)".into()),
    }
}

/// What `--pid` says of a part that is not a number: a program's name is the usual slip, so it says
/// how to find that program's process ids.
fn not_a_pid(part: &str) -> String {
    let looks_like_a_name = part.starts_with(|c: char| c.is_ascii_alphabetic())
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    if looks_like_a_name {
        format!(
            "'{part}' is not a process id; `pgrep -af {part}` lists the processes of that name \
             with their ids"
        )
    } else {
        format!("'{part}' is not a process id")
    }
}

/// Parses `--rate`: a number of Hz, with an optional `hz`, `khz` (or `k`) or `mhz` unit, between
/// `MIN_RATE_HZ` and `MAX_RATE_HZ`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let lower = text.trim().to_ascii_lowercase();
    // `1mhz` is a rate, out of range: said so, not "not a rate"; `10k` is 10khz.
    let (number, scale) = if let Some(n) = lower.strip_suffix("mhz") {
        (n, 1e6)
    } else if let Some(n) = lower
        .strip_suffix("khz")
        .or_else(|| lower.strip_suffix('k'))
    {
        (n, 1000.0)
    } else if let Some(n) = lower.strip_suffix("hz") {
        (n, 1.0)
    } else {
        (lower.as_str(), 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a rate; write e.g. 10khz, 500hz or 2000"))?;
    let hz = value * scale;
    if !hz.is_finite() || !(MIN_RATE_HZ..=MAX_RATE_HZ).contains(&hz) {
        return Err(format!(
            "{text} is out of range: the rate must be between {MIN_RATE_HZ} Hz and {} kHz",
            MAX_RATE_HZ / 1000.0
        ));
    }
    Ok(Rate(hz))
}

/// A duration as py-spy takes it: `10` (seconds), `10s`, `500ms`, `2m`, `1h`, decimals allowed
/// (`0.5s`), and parts added up as people write them (`1m30s`, `1h 15m`); `-1` means until stopped.
pub fn parse_duration(text: &str) -> Result<DurationArg, String> {
    let trimmed = text.trim();
    let refuse = |why: &str| {
        format!(
            "'{text}' is not a duration: {why}; write e.g. 10, 10s, 500ms, 2m, 1m30s or 1h, or -1 to \
             record until stopped"
        )
    };
    if trimmed.parse::<f64>() == Ok(-1.0) {
        return Ok(DurationArg(None));
    }
    let mut seconds = 0.0;
    let mut rest = trimmed;
    // Seconds in the unit of the part before, for a last part written without one.
    let mut unit_before: Option<f64> = None;
    while !rest.is_empty() {
        let (value, unit, after) = duration_part(rest).map_err(|why| refuse(&why))?;
        if value < 0.0 {
            return Err(refuse(match unit_before {
                Some(_) => "its parts are added up, and none can be negative",
                None => "it must be more than 0",
            }));
        }
        // Only the last part may leave its unit out. Alone it is seconds; after another part it
        // is the unit below that one's, as people write them: 2m30 is 2m30s, 1h30 is 1h30m.
        if unit.is_empty() && !after.is_empty() {
            return Err(refuse("a number without a unit before another part"));
        }
        let per_unit = match (unit, unit_before) {
            ("", Some(before)) => unit_below(before)
                .ok_or_else(|| refuse("a number without a unit after milliseconds"))?,
            _ => seconds_per_unit(unit).ok_or_else(|| refuse(&format!("unknown unit '{unit}'")))?,
        };
        seconds += value * per_unit;
        unit_before = Some(per_unit);
        rest = after;
    }
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(refuse("it must be more than 0"));
    }
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| *d <= MAX_DURATION)
        .map(|d| DurationArg(Some(d)))
        .ok_or_else(|| refuse("it must be at most a year"))
}

/// The first `NUMBER UNIT` of `text` (the unit may be empty), and what follows it, spaces trimmed.
fn duration_part(text: &str) -> Result<(f64, &str, &str), String> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(text.len());
    let (number, after_number) = text.split_at(number_end);
    let value: f64 = number.parse().map_err(|_| "no number".to_string())?;
    let after_number = after_number.trim_start();
    let unit_end = after_number
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(after_number.len());
    let (unit, after) = after_number.split_at(unit_end);
    Ok((value, unit, after.trim_start()))
}

/// The unit below one of `seconds` seconds (hours: minutes, minutes: seconds, seconds:
/// milliseconds), in seconds; none below milliseconds.
fn unit_below(seconds: f64) -> Option<f64> {
    [3600.0, 60.0, 1.0, 1e-3]
        .windows(2)
        .find(|pair| pair[0] == seconds)
        .map(|pair| pair[1])
}

/// Seconds in one `unit` (empty: seconds), if it is one.
fn seconds_per_unit(unit: &str) -> Option<f64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" | "mins" => 60.0,
        "h" => 3600.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_every_spelling() {
        assert_eq!(parse_rate("10khz"), Ok(Rate(10_000.0)));
        assert_eq!(parse_rate("10kHz"), Ok(Rate(10_000.0)));
        assert_eq!(parse_rate("500hz"), Ok(Rate(500.0)));
        assert_eq!(parse_rate("2000"), Ok(Rate(2000.0)));
        assert_eq!(parse_rate("2.5kHz"), Ok(Rate(2500.0)));
        assert_eq!(parse_rate("10k"), Ok(Rate(10_000.0)));
    }

    #[test]
    fn a_rate_in_megahertz_is_said_out_of_range() {
        let said = parse_rate("1mhz").unwrap_err();
        assert!(said.starts_with("1mhz is out of range"), "{said}");
    }

    #[test]
    fn absurd_rates_are_refused() {
        for bad in ["0", "-5", "fast", "1mhz", "200khz", "nan", "inf", ""] {
            assert!(parse_rate(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn durations_take_units() {
        let secs = |s: f64| Ok(DurationArg(Some(Duration::from_secs_f64(s))));
        assert_eq!(parse_duration("10"), secs(10.0));
        assert_eq!(parse_duration("10s"), secs(10.0));
        assert_eq!(parse_duration("0.5"), secs(0.5));
        assert_eq!(parse_duration("500ms"), secs(0.5));
        assert_eq!(parse_duration("2m"), secs(120.0));
        assert_eq!(parse_duration("1.5min"), secs(90.0));
        assert_eq!(parse_duration("1h"), secs(3600.0));
        assert_eq!(parse_duration(" 30S "), secs(30.0));
        assert_eq!(parse_duration("-1"), Ok(DurationArg(None)));
        assert_eq!(parse_duration("-1.0"), Ok(DurationArg(None)));
    }

    #[test]
    fn durations_in_parts_add_up() {
        let secs = |s: f64| Ok(DurationArg(Some(Duration::from_secs_f64(s))));
        assert_eq!(parse_duration("1m30s"), secs(90.0));
        assert_eq!(parse_duration("1h 15m"), secs(4500.0));
        assert_eq!(parse_duration("2m30"), secs(150.0));
        assert_eq!(parse_duration("1h30"), secs(5400.0));
        assert_eq!(parse_duration("1s500"), secs(1.5));
        assert_eq!(parse_duration("1s500ms"), secs(1.5));
        assert_eq!(parse_duration("10 s"), secs(10.0));
    }

    #[test]
    fn durations_that_mean_nothing_are_refused_with_the_accepted_forms() {
        for bad in [
            "0", "0s", "-2", "-1s", "ten", "nan", "inf", "10x", "s", "", "1e3", "366d", "9000h",
            "1.2.3", "30 1m", "1m-1m", "2m -1m", "1m x", "1s500ms5",
        ] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains("10s, 500ms, 2m"), "{bad}: {error}");
        }
        // A negative part is not a duration of 0 or less.
        let error = parse_duration("1m-3s").unwrap_err();
        assert!(error.contains("none can be negative"), "{error}");
        assert!(!error.contains("more than 0"), "{error}");
    }

    #[test]
    fn info_takes_one_pid_and_says_why_not_as_record_does() {
        assert_eq!(parse_one_pid("42"), Ok(42));
        assert_eq!(parse_one_pid("42,42"), Ok(42));
        let error = parse_one_pid("1,2").unwrap_err();
        assert!(error.contains("give one id"), "{error}");
        let error = parse_one_pid("python3").unwrap_err();
        assert!(error.contains("`pgrep -af python3`"), "{error}");
    }

    #[test]
    fn pid_lists() {
        assert_eq!(parse_pids("123,456, 123"), Ok(PidList(vec![123, 456])));
        assert!(parse_pids("12a").is_err());
        assert!(parse_pids(",").is_err());
        assert!(parse_pids("0").is_err());
    }

    #[test]
    fn a_program_name_given_as_pid_is_told_how_to_find_its_ids() {
        let error = parse_pids("id").unwrap_err();
        assert!(error.contains("write --pid PID or -p PID"), "{error}");
        let error = parse_pids("python3").unwrap_err();
        assert!(error.contains("`pgrep -af python3`"), "{error}");
        // What cannot be a program's name gets no such advice.
        for bad in ["12a", "-5", "$(x)"] {
            let error = parse_pids(bad).unwrap_err();
            assert!(!error.contains("pgrep"), "{bad}: {error}");
        }
    }
}
