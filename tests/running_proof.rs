//! Running threads left unread while their schedstat reads as it did just before the reading that
//! found them running (`ThreadFiles::read_state_since`, process/kernel.rs): the kernel adds to a
//! thread's CPU time whenever it leaves a CPU and counts each arrival on one, so neither having
//! moved, the thread has not fallen asleep. Judged live: the rule is the kernel's, not the
//! interpreter's, so three interpreters (the oldest, the one the cost zoo runs, the newest) stand
//! for the rest; what differs between versions is which threads the engine asks schedstat of.
//!
//! Recorded with `GILSAMPLE_CHECK_RUNNING_PROOF`, the sampler reads the syscall file of every thread
//! the rule left unread anyway, then its schedstat again; where that still proves the thread
//! running, it brackets the reading, which must say running. The `queue` workload hands the GIL
//! over thousands of times a second between a producer and workers that hash outside it, so the
//! holder and the threads running without the GIL give the rule thousands of readings.
//!
//! One kernel race lets a thread fall asleep with neither number moving (`running_key`): a wake-up
//! that marks it for preemption and it blocking before it is preempted, with the sampler's two reads
//! in that window. Every refutation seen was such a thread, asleep in `take_gil`'s timed wait. How
//! often depends on the machine, not on this code: none in most one-second recordings on a two-core
//! machine, 16 of 4,881 (0.33%) in the worst of 76, once in 7,322 on CI. So the test grants one in a
//! hundred. A rule that is wrong shows at every sleep the workload makes: compared on the arrivals
//! alone (CPU time left out), 8–10% of the readings judged refuted it.

#[macro_use]
mod common;

use common::{assert_rule_held, record_checked};
use gilsample::sampler::thread_reads::CHECK_RUNNING_PROOF;

fn running_threads_left_unread_are_still_running(label: &str) {
    let scenario = ["queue", "--threads", "3"];
    let trace = record_checked(label, &scenario, "1", CHECK_RUNNING_PROOF);
    let judged = assert_rule_held(
        label,
        &trace,
        ("kernel_reads_proven_running", "running_proof_check"),
        |judged| judged / 100,
    );
    let refuted = &trace.other("running_proof_check")["refuted"];
    gilsample::stderr_line!("{label}: {judged} readings judged, {refuted} of them asleep");
}

macro_rules! running_proof_tests {
    ($($module:ident => $label:expr),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn running_threads_left_unread_are_still_running() {
                    super::running_threads_left_unread_are_still_running($label)
                }
            }
        )*
    };
}

running_proof_tests! {
    py37 => "3.7",
    py311 => "3.11",
    sid315 => "sid-3.15",
}
