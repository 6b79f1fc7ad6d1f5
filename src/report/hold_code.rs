//! What code held the GIL: the holds of a thread (or the part of them another thread waited through)
//! summed by function for Python code, and by call site for one native call, each with how long its
//! holds were. A hold's kind is the one its trace wrote (trace/native_call.rs); a trace that does not
//! say (another tool's, an older gilsample's) is judged here from its waits alone
//! (infer/native_call.rs, without the holder's frame).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::infer::native_call::{DEFAULT_SWITCH_INTERVAL_US, HoldEvidence, is_native_call};
use crate::report::load::{CallSite, Held, ProcessTrace, Slice};
use crate::report::slice_index::SliceIndex;

/// Where a hold's time goes: its innermost function (the label; `None` without a stack) and, for
/// one native call, which (an index into `ProcessTrace::calls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HoldKey {
    /// Index into `ProcessTrace::labels` of the hold's innermost function; `None` without a stack.
    pub label: Option<u32>,
    /// For one native call, its index into `ProcessTrace::calls`; `None` for Python code.
    pub native: Option<u32>,
}

/// Time in one place, and the lengths of the holds it came from.
#[derive(Default)]
pub struct HoldTime {
    /// Nanoseconds of hold time spent here.
    pub ns: i128,
    /// The whole length, nanoseconds, of each hold that time came from.
    pub holds: Vec<i128>,
}

impl HoldTime {
    /// Adds `ns` nanoseconds from a hold `hold_ns` long.
    pub fn add(&mut self, ns: i128, hold_ns: i128) {
        self.ns += ns;
        self.holds.push(hold_ns);
    }
}

/// One place the GIL was held in (`hold_functions[]`, `waited_for[].functions[]` of
/// docs/report-json.md).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeldIn {
    /// `function (file:line)`: for Python code at the line it spent the most at, for a native call
    /// the call's line.
    pub function: String,
    /// Seconds of hold time spent here.
    pub s: f64,
    /// One native call (`true`) or Python code.
    pub native_call: bool,
    /// The longest of the holds the time came from, and their 99th percentile.
    pub longest_ms: f64,
    /// The 99th percentile of those holds' lengths, ms.
    pub p99_ms: f64,
    /// For a native call: where it is called (null without a stack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_site: Option<Option<CallSite>>,
    /// For a native call: the called function's name where it was read, else null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callee: Option<Option<String>>,
}

/// What a hold without a stack is shown as.
pub const NO_STACK: &str = "(no stack)";

/// The kind of `hold` as the trace says it, or judged from the waits of other threads when it does
/// not: how long before its end someone had been waiting, against the switch interval.
pub fn hold_key(process: &ProcessTrace, takes: &SliceIndex<'_>, hold: &Slice) -> HoldKey {
    let native = match hold.held {
        Held::NativeCall(call) => Some(call),
        Held::PythonCode => None,
        Held::Unsaid if process.facts.holds_judged => None,
        Held::Unsaid => judged_from_waits(process, takes, hold).then_some(u32::MAX),
    };
    HoldKey {
        label: hold.label,
        native,
    }
}

/// A waiter's `take_gil` ends when it gets the GIL, a sample or so after the hold's end.
const WAIT_END_SLACK_NS: i128 = 1_000_000;

fn judged_from_waits(process: &ProcessTrace, takes: &SliceIndex<'_>, hold: &Slice) -> bool {
    let mut since = None::<i128>;
    takes.overlapping(hold.end_ns - WAIT_END_SLACK_NS, hold.end_ns, |take, _| {
        if take.tid != hold.tid {
            since = Some(since.map_or(take.start_ns, |s| s.min(take.start_ns)));
        }
    });
    let Some(since) = since else {
        return false;
    };
    let interval_us = process
        .facts
        .switch_interval_us
        .unwrap_or(DEFAULT_SWITCH_INTERVAL_US);
    is_native_call(&HoldEvidence {
        waited_ns: u64::try_from(hold.end_ns - since.max(hold.start_ns)).unwrap_or(0),
        interval_ns: interval_us * 1000,
        frames: None,
        period_ns: process
            .facts
            .rate_requested_hz
            .map_or(0, |hz| (1e9 / hz) as u64),
    })
}

/// A function's identity in a frame's text `function (file:line)`: the text without the line, so
/// that time in one function adds up whatever line it was at.
fn function_key(frame: &str) -> &str {
    match frame.rfind(':') {
        Some(colon)
            if frame.ends_with(')')
                && frame[colon + 1..frame.len() - 1]
                    .bytes()
                    .all(|b| b.is_ascii_digit()) =>
        {
            &frame[..colon]
        }
        _ => frame,
    }
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// Places, largest first: Python code by function (shown at the line it spent the most at), each
/// native call by its call site.
pub fn places(process: &ProcessTrace, map: &BTreeMap<HoldKey, HoldTime>) -> Vec<HeldIn> {
    struct Place<'a> {
        frame: &'a str,
        most_ns: i128,
        ns: i128,
        holds: Vec<i128>,
        native: Option<u32>,
    }
    let mut grouped: BTreeMap<(&str, Option<u32>), Place> = BTreeMap::new();
    for (key, time) in map {
        let frame = key
            .label
            .map_or(NO_STACK, |l| process.labels[l as usize].as_str());
        let group = match key.native {
            Some(_) => frame,
            None => function_key(frame),
        };
        let place = grouped.entry((group, key.native)).or_insert(Place {
            frame,
            most_ns: 0,
            ns: 0,
            holds: Vec::new(),
            native: key.native,
        });
        place.ns += time.ns;
        place.holds.extend_from_slice(&time.holds);
        if time.ns > place.most_ns {
            place.frame = frame;
            place.most_ns = time.ns;
        }
    }
    let mut out: Vec<HeldIn> = grouped
        .into_values()
        .map(|mut place| {
            place.holds.sort_unstable();
            let rank = |p: f64| {
                let n = place.holds.len();
                let i = ((p * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
                place.holds.get(i).copied().map_or(0.0, ms)
            };
            // `u32::MAX`: judged native here, with nothing known of the call.
            let call = place
                .native
                .map(|i| process.calls.get(i as usize).cloned().unwrap_or_default());
            HeldIn {
                function: place.frame.to_string(),
                s: place.ns as f64 / 1e9,
                native_call: call.is_some(),
                longest_ms: place.holds.last().copied().map_or(0.0, ms),
                p99_ms: rank(0.99),
                call_site: call.as_ref().map(|c| c.call_site.clone()),
                callee: call.map(|c| c.callee),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.s.total_cmp(&a.s)
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.native_call.cmp(&b.native_call))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::load::{NativeCall, SliceKind};

    fn key(process: &mut ProcessTrace, label: &str, native: Option<u32>) -> HoldKey {
        process.labels.push(label.into());
        HoldKey {
            label: Some(process.labels.len() as u32 - 1),
            native,
        }
    }

    fn time(ns: i128, holds: &[i128]) -> HoldTime {
        HoldTime {
            ns,
            holds: holds.to_vec(),
        }
    }

    #[test]
    fn python_code_adds_up_by_function_and_a_native_call_by_its_call_site() {
        let mut process = ProcessTrace::default();
        process.calls.push(NativeCall {
            call_site: Some(CallSite {
                file: Some("/srv/loader.py".into()),
                line: Some(22),
                source: Some("t = torch.tensor(rows)".into()),
            }),
            callee: Some("tensor".into()),
        });
        let map: BTreeMap<HoldKey, HoldTime> = [
            (key(&mut process, "spin (w.py:49)", None), time(40, &[40])),
            (
                key(&mut process, "spin (w.py:50)", None),
                time(60, &[30, 30]),
            ),
            (key(&mut process, "main (w.py:9)", None), time(70, &[70])),
            (
                key(&mut process, "loader (l.py:22)", Some(0)),
                time(90, &[20, 70]),
            ),
            (key(&mut process, "loader (l.py:21)", None), time(5, &[5])),
        ]
        .into_iter()
        .collect();
        let found = places(&process, &map);
        let summed: Vec<(&str, i128, bool)> = found
            .iter()
            .map(|p| {
                (
                    p.function.as_str(),
                    (p.s * 1e9).round() as i128,
                    p.native_call,
                )
            })
            .collect();
        assert_eq!(
            summed,
            vec![
                ("spin (w.py:50)", 100, false),
                ("loader (l.py:22)", 90, true),
                ("main (w.py:9)", 70, false),
                ("loader (l.py:21)", 5, false),
            ]
        );
        let call = &found[1];
        assert_eq!(call.longest_ms, 70e-6);
        assert_eq!(call.callee, Some(Some("tensor".into())));
        assert_eq!(call.call_site.clone().flatten().unwrap().line, Some(22));
        let json = serde_json::to_value(&found[0]).unwrap();
        assert!(
            json.get("call_site").is_none() && json.get("callee").is_none(),
            "{json}"
        );
        assert_eq!(found[0].longest_ms, 40e-6);
    }

    #[test]
    fn a_trace_that_does_not_say_is_judged_from_how_long_others_waited() {
        let slice = |kind, tid, start_ms: i128, end_ms: i128| Slice {
            kind,
            tid,
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
            label: None,
            held: Held::Unsaid,
            importing: false,
        };
        let mut process = ProcessTrace::default();
        process.slices = vec![
            slice(SliceKind::Hold, 1, 0, 100),
            slice(SliceKind::Take, 2, 30, 100),
            slice(SliceKind::Hold, 1, 200, 240),
            slice(SliceKind::Take, 2, 200, 240),
        ];
        let takes = SliceIndex::new(&process.slices, SliceKind::Take);
        let long = hold_key(&process, &takes, &process.slices[0]);
        assert_eq!(
            long.native,
            Some(u32::MAX),
            "70 ms of waiting: 14 intervals"
        );
        let short = hold_key(&process, &takes, &process.slices[2]);
        assert_eq!(short.native, None, "40 ms: 8 intervals");
        // The same trace with an 8 ms interval: 70 ms is under ten of them.
        process.facts.switch_interval_us = Some(8000);
        assert_eq!(hold_key(&process, &takes, &process.slices[0]).native, None);
        process.facts.switch_interval_us = None;
        process.facts.holds_judged = true;
        assert_eq!(hold_key(&process, &takes, &process.slices[0]).native, None);
        let mut said = process.slices[0];
        said.held = Held::NativeCall(0);
        assert_eq!(hold_key(&process, &takes, &said).native, Some(0));
    }
}
