//! What waking at the sampling rate costs a target, before any reading: a benchmark instrument for
//! `scripts/bench_overhead.py --floor`, not part of the product.
//!
//! It runs gilsample's sampler schedule — absolute CLOCK_MONOTONIC deadlines, the same scheduling
//! (`--priority`), no reads of the target — until the target exits. The slowdown it causes is the part
//! of gilsample's that no cheaper tick could remove; the rest is what the reads add (README "What it
//! costs").
//!
//! Several pids (`--pid 1,2,3`) get one thread waking once a period for all of them, as gilsample's
//! shared sampler threads do (up to 4 targets a thread at 10 kHz); it runs until all have exited.
//!
//! Usage: `wake_floor --pid PID[,PID...] [--rate 10khz] [--priority realtime|high|normal]`

use std::path::Path;

use clap::ValueEnum;
use gilsample::cli::parse_rate;
use gilsample::sampler::clock::{monotonic_ns, sleep_until, thread_cpu_ns};
use gilsample::sampler::priority::{Priority, apply_to_current_thread};

/// Whether the target still runs is looked at this often, in wake-ups.
const LOOK_EVERY: u64 = 1000;

fn main() {
    let (pids, rate_hz, priority) = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(why) => {
            gilsample::stderr_line!(
                "wake_floor: {why}\nusage: wake_floor --pid PID[,PID...] [--rate 10khz] [--priority realtime|high|normal]"
            );
            std::process::exit(2);
        }
    };
    let proc_dirs: Vec<String> = pids.iter().map(|pid| format!("/proc/{pid}")).collect();
    if let Some(missing) = proc_dirs.iter().find(|dir| !Path::new(dir).exists()) {
        gilsample::stderr_line!("wake_floor: no process {}", &missing["/proc/".len()..]);
        std::process::exit(1);
    }
    let scheduling = apply_to_current_thread(priority);
    let period = (1e9 / rate_hz) as u64;
    let listed: Vec<String> = pids.iter().map(u32::to_string).collect();
    gilsample::stderr_line!(
        "wake_floor: waking for process {} at {rate_hz} Hz, {scheduling}",
        listed.join(",")
    );
    let start = monotonic_ns();
    let mut deadline = start;
    let mut wakes = 0u64;
    let mut late = 0u64;
    loop {
        sleep_until(deadline);
        let now = monotonic_ns();
        wakes += 1;
        if now > deadline + period {
            late += 1;
            deadline += (now - deadline) / period * period;
        }
        deadline += period;
        if wakes.is_multiple_of(LOOK_EVERY) && !proc_dirs.iter().any(|dir| Path::new(dir).exists())
        {
            break;
        }
    }
    let secs = (monotonic_ns() - start) as f64 / 1e9;
    gilsample::stderr_line!(
        "wake_floor: {wakes} wake-ups in {secs:.2} s ({:.0} Hz), {late} late, {:.3} CPU s",
        wakes as f64 / secs,
        thread_cpu_ns() as f64 / 1e9
    );
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(Vec<u32>, f64, Priority), String> {
    let mut pids = Vec::new();
    let mut rate_hz = 10_000.0;
    let mut priority = Priority::Realtime;
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--pid" => {
                for pid in value.split(',') {
                    pids.push(pid.parse().map_err(|_| format!("bad pid {pid}"))?);
                }
            }
            "--rate" => rate_hz = parse_rate(&value)?.0,
            "--priority" => priority = Priority::from_str(&value, true)?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if pids.is_empty() {
        return Err("--pid is required".into());
    }
    Ok((pids, rate_hz, priority))
}
