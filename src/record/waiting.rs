//! What a session says while it waits for something to record, in one wording for `record`'s
//! stderr and `top`'s: a launched command that is not Python yet, `--all-npu`/`--all-gpu` that
//! found nobody at the start, or a target found stopped until it runs again. The caller adds its
//! own prefix.

use std::path::Path;
use std::time::Duration;

use crate::discover::DeviceKind;
use crate::launch::LAUNCH_TIMEOUT;

/// Process `pid` was found stopped (sampler/stop_watch.rs), by a debugger or by a signal;
/// `answered`: an answer at the end will leave the stop out (`record`, `top -o`; `top`'s live
/// tables count it).
pub fn stopped(pid: u32, by_debugger: bool, answered: bool) -> String {
    let (how, go_on) = if by_debugger {
        (
            "by a debugger or tracer",
            "continue it in the debugger".to_string(),
        )
    } else {
        ("SIGSTOP or Ctrl+Z", format!("kill -CONT {pid} lets it run"))
    };
    let left_out = if answered {
        ", left out of the answer"
    } else {
        ""
    };
    format!(
        "process {pid} is stopped ({how}): none of its threads runs, and the one holding the GIL \
         keeps it. Its waits until it runs again are the stop's{left_out} ({go_on})"
    )
}

/// Process `pid`, found stopped, runs again.
pub fn continued(pid: u32) -> String {
    format!("process {pid} runs again")
}

/// The launched command (`pid`) is not a Python gilsample can read yet: it runs `program`, which is
/// not Python, or else `why`.
pub fn for_python(pid: u32, program: Option<&Path>, why: &str) -> String {
    match program {
        Some(program) => format!(
            "the command (pid {pid}) runs {}, which is not Python; gilsample keeps waiting for it \
             to exec Python (as a script ending in `exec python` or pyenv's python3 shim does), for \
             up to {} s or until it exits. If it starts Python as child processes instead, add \
             --subprocesses to record them",
            program.display(),
            LAUNCH_TIMEOUT.as_secs()
        ),
        None => format!(
            "the command (pid {pid}) has no Python interpreter gilsample can read yet ({}); \
             gilsample keeps waiting, for up to {} s or until it exits",
            if why.is_empty() {
                "it has not started one"
            } else {
                why
            },
            LAUNCH_TIMEOUT.as_secs()
        ),
    }
}

/// `--all-npu`/`--all-gpu` found nobody at the start: what it waits for, and for how long.
/// `nodes_here`: this machine's /dev has a device of that kind.
pub fn for_devices(kind: DeviceKind, duration: Duration, nodes_here: bool) -> String {
    let mut line = format!(
        "no Python process has {} open yet; looking for one as they start, for the --duration ({})",
        kind.describe(),
        humantime_short(duration)
    );
    if !nodes_here {
        line += &format!(
            ". This machine's /dev has no such device: on a machine without one, give --pid, {}, \
             or a command after --",
            kind.other_option()
        );
    }
    line
}

/// `90 s`, `2 min`, `1.5 h`: a duration as the user gave it, near enough.
pub fn humantime_short(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs >= 3600.0 {
        format!("{} h", trim(secs / 3600.0))
    } else if secs >= 120.0 {
        format!("{} min", trim(secs / 60.0))
    } else {
        format!("{} s", trim(secs))
    }
}

fn trim(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").unwrap_or(&text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_said_as_given_near_enough() {
        assert_eq!(humantime_short(Duration::from_secs(90)), "90 s");
        assert_eq!(humantime_short(Duration::from_secs(120)), "2 min");
        assert_eq!(humantime_short(Duration::from_secs(5400)), "1.5 h");
        assert_eq!(humantime_short(Duration::from_millis(500)), "0.5 s");
    }

    #[test]
    fn a_command_that_is_not_python_gets_the_way_to_its_children() {
        let line = for_python(7, Some(Path::new("/usr/bin/dash")), "");
        assert!(line.contains("runs /usr/bin/dash"), "{line}");
        assert!(line.contains("add --subprocesses"), "{line}");
        let line = for_python(7, None, "");
        assert!(line.contains("it has not started one"), "{line}");
    }
}
