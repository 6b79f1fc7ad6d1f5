//! Reading the targets: clock and deadlines, the sampling loop that reads the GIL, the kernel's thread
//! states and Python stacks into one `Sample` per tick, and what it measures about itself.

pub mod affinity;
pub mod clock;
pub mod config;
pub mod dodge;
pub mod gil_flag_reader;
mod hold_stillness;
mod pace;
pub mod priority;
mod recent_stacks;
pub mod report;
pub mod shared_thread;
pub mod stack_watch;
pub mod stop_watch;
mod thread_naming;
pub mod thread_reads;
pub mod tick_loop;
