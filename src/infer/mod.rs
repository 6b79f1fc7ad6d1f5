//! From per-sample thread states to intervals and statistics. Pure code: no I/O, no clocks, so every
//! rule is unit-tested on hand-made sample sequences.

pub mod classify;
pub mod counted_out;
pub mod engine;
pub mod findings;
pub mod gil_flag_rule;
pub mod handoff_age;
pub mod held_blocked;
pub mod intervals;
pub mod native_call;
pub mod parked;
pub mod quiet;
pub mod rules;
pub mod sample;
pub mod stats;
pub mod thread;
pub mod thread_step;
