//! A live recording's trace as it is written, for a watcher in the same process (`gilsample top`):
//! the trace writer hands it each slice it writes, with the times and `args` the file gets, so the
//! watcher reads the recording as `report` reads the finished file; and, when the sampler sends
//! one (`SamplerConfig::live_every_ns`), what the recording knows beyond the slices written: each
//! thread's interval still open, up to the last sample, and the threads' names. A writer without a
//! tap does none of this.

use serde_json::Value;

/// One slice, as a reader of the file gets it: its event name (`take_gil`, `hold_gil`, `drop_gil`,
/// `held_while_blocked`), thread, start and end on the trace clock in nanoseconds (the file's whole
/// microseconds times 1000), and its `args`.
#[derive(Clone, Copy, Debug)]
pub struct TappedSlice<'a> {
    pub name: &'static str,
    pub tid: u32,
    pub start_ns: i128,
    pub end_ns: i128,
    pub args: Option<&'a Value>,
}

/// What the recording knew at one sample beyond the slices written so far.
#[derive(Clone, Copy, Debug)]
pub struct TappedProgress<'a> {
    /// The first sample of the recording and this one, on the trace clock.
    pub started_ns: i128,
    pub now_ns: i128,
    /// Each thread's interval (and held-while-blocked stretch) still open, from its start to `now_ns`:
    /// not written yet, and written later as a slice with the same start.
    pub open: &'a [TappedSlice<'a>],
    /// Every thread's name so far (Python name, else the kernel's), by tid.
    pub names: &'a [(u32, String)],
}

/// The watcher of one target's trace. It runs on the writer thread: it must not block.
pub trait TraceTap: Send {
    fn slice(&mut self, slice: &TappedSlice<'_>);
    fn progress(&mut self, progress: &TappedProgress<'_>);
}
