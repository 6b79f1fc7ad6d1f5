//! The sampling loop: clock and deadlines, per-sample classification of each thread, and the loop
//! that ties the target's memory and the kernel's thread states together.

pub mod affinity;
pub mod classify;
pub mod clock;
pub mod dodge;
pub mod gil_flags;
pub mod handoff_age;
pub mod priority;
pub mod sampler;
pub mod stack_watch;
