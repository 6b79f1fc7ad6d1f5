//! Writing what was recorded: Chrome Trace JSON, streamed to a temporary file and renamed into place
//! when complete, and the output naming rules users know from the reference tool.

pub mod chrome;
pub mod micros;
pub mod native_call;
pub mod output;
pub mod pending;
pub mod source;
pub mod stacks;
pub mod tap;
