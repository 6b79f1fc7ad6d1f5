//! Threads asleep in `take_gil`'s wait left unread while `gil.cond` reads the same as before their
//! last reading (`CondStamp`, python/gil_span.rs; sampler/thread_reads.rs, `still_waiting`), judged
//! live on every interpreter of the suite and the C library it runs on (the pyenv builds on this
//! machine's glibc, sid's on a later one).
//!
//! Recorded with `GILSAMPLE_CHECK_PROVEN_WAITING`, the sampler reads every thread the rule left
//! unread anyway, and the GIL again after the tick's readings; where that second read finds the
//! same stamp, it brackets the reading, which must find the thread inside the wait: asleep on
//! `gil.cond`, or running inside glibc's wait (woken by its timeout and not yet out), and not the
//! holder. Three threads spinning in Python take turns at the GIL, so two of them at a time sleep in
//! that wait for most of each switch interval: the rule has thousands of readings to be judged on.

#[macro_use]
mod common;

use common::{assert_rule_held, record_checked};
use gilsample::sampler::thread_reads::CHECK_PROVEN_WAITING;

fn waiters_left_unread_are_still_waiting(label: &str) {
    let scenario = ["bench", "--threads", "3"];
    let trace = record_checked(label, &scenario, "1", CHECK_PROVEN_WAITING);
    // The stamp moves at every signal of the condition variable: nothing slips past it.
    let judged = assert_rule_held(
        label,
        &trace,
        ("kernel_reads_proven_waiting", "proven_waiting_check"),
        |_| 0,
    );
    gilsample::stderr_line!("{label}: {judged} readings judged, none out of the wait");
}

macro_rules! proven_waiting_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn waiters_left_unread_are_still_waiting() {
                    super::waiters_left_unread_are_still_waiting($label)
                }
            }
        )*
    };
}

every_expected_interpreter!(proven_waiting_tests);
