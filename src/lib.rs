//! gilsample: per-thread GIL wait/hold/release timelines of running CPython processes, sampled from
//! outside without BPF. docs/ARCHITECTURE.md describes the design (its modules, layers and
//! threads); each module's header says what it owns.

// The trace metadata is one `json!` literal with more keys than serde_json's macro expands by default.
#![recursion_limit = "256"]
// Every public item carries a doc comment; the build says which one lacks it.
#![warn(missing_docs)]

pub mod addr;
pub mod cli;
pub mod control;
pub mod convert;
pub mod decimal;
pub mod discover;
pub mod error;
pub mod infer;
pub mod info;
pub mod launch;
pub mod merge;
pub mod observed;
pub mod process;
pub mod python;
pub mod record;
pub mod replay;
pub mod report;
pub mod sampler;
pub mod signals;
pub mod stderr_text;
pub mod stream;
pub mod summary;
pub mod symbols;
pub mod top;
pub mod trace;
