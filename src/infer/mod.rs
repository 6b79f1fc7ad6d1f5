//! From per-sample thread states to intervals and statistics. Pure code: no I/O, no clocks, so every
//! rule is unit-tested on hand-made sample sequences.

pub mod held_blocked;
pub mod intervals;
pub mod sample;
pub mod stats;
