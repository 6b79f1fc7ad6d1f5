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
    let mut pids = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let pid: u32 = part
            .parse()
            .map_err(|_| format!("'{part}' is not a process id"))?;
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

/// Parses `--rate`: a number of Hz, with an optional `hz` or `khz` unit, between `MIN_RATE_HZ` and
/// `MAX_RATE_HZ`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = if let Some(n) = lower.strip_suffix("khz") {
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
/// (`0.5s`); `-1` means until stopped.
pub fn parse_duration(text: &str) -> Result<DurationArg, String> {
    let trimmed = text.trim();
    let refuse = |why: &str| {
        format!(
            "'{text}' is not a duration: {why}; write e.g. 10, 10s, 500ms, 2m or 1h, or -1 to record until stopped"
        )
    };
    let number_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(number_end);
    let value: f64 = number.parse().map_err(|_| refuse("no number"))?;
    let seconds_per_unit = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" | "mins" => 60.0,
        "h" => 3600.0,
        _ => return Err(refuse(&format!("unknown unit '{}'", unit.trim()))),
    };
    if value == -1.0 && unit.trim().is_empty() {
        return Ok(DurationArg(None));
    }
    let seconds = value * seconds_per_unit;
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(refuse("it must be more than 0"));
    }
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| *d <= MAX_DURATION)
        .map(|d| DurationArg(Some(d)))
        .ok_or_else(|| refuse("it must be at most a year"))
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
    fn durations_that_mean_nothing_are_refused_with_the_accepted_forms() {
        for bad in [
            "0", "0s", "-2", "-1s", "ten", "nan", "inf", "10x", "s", "", "1e3", "366d", "9000h",
            "1.2.3",
        ] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains("10s, 500ms, 2m"), "{bad}: {error}");
        }
    }

    #[test]
    fn pid_lists() {
        assert_eq!(parse_pids("123,456, 123"), Ok(PidList(vec![123, 456])));
        assert!(parse_pids("12a").is_err());
        assert!(parse_pids(",").is_err());
        assert!(parse_pids("0").is_err());
    }
}
