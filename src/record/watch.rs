//! A live view of a recording (`gilsample top`): for each target, a tap its trace writer feeds with
//! every slice it writes (trace/tap.rs), and how often its sampler sends what is still open and the
//! threads' names. Without one, a recording does none of it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::trace::tap::TraceTap;

/// Makes the tap of a target, given its pid and rank (where it has one), when its recording starts.
pub type TapFor = dyn Fn(u32, Option<u32>) -> Box<dyn TraceTap> + Send + Sync;

/// A live view's hold on a recording (`gilsample top`): how often it wants a snapshot and how each
/// target's tap is made.
#[derive(Clone)]
pub struct Watch {
    /// How often each sampler sends a `Finding::Live` (SamplerConfig::live_every_ns).
    pub every: Duration,
    /// Makes each target's tap when its recording starts.
    pub tap_for: Arc<TapFor>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}
