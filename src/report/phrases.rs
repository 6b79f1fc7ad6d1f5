//! How the summary and its hints say numbers and places: a share as a percentage, milliseconds at
//! a precision that fits them, and where a hold was.

use crate::report::hold_code::{HeldIn, NO_STACK};

/// `part` as a percentage of `whole`; 0 for an empty whole.
pub(crate) fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// Milliseconds with as many decimals as their size needs (`208 ms`, `5.1 ms`, `0.42 ms`).
pub(crate) fn ms(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0} ms")
    } else if v >= 1.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// Where a hold was, in words: `in FUNCTION (FILE:LINE)` for Python code, `one native call to
/// CALLEE in FUNCTION (FILE:LINE)` for a native call.
pub(crate) fn place(f: &HeldIn) -> String {
    if !f.native_call {
        return format!("in {}", f.function);
    }
    let callee = f
        .callee
        .clone()
        .flatten()
        .map(|c| format!(" to {c}"))
        .unwrap_or_default();
    if f.function == NO_STACK {
        format!("one native call{callee} (no stack in the trace)")
    } else {
        format!("one native call{callee} in {}", f.function)
    }
}
