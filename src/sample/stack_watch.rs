//! When the sampler reads Python stacks, and what it reports of them.
//!
//! - A thread that starts waiting for the GIL (`take_gil` after anything else): its stack, once.
//!   A thread blocked in `take_gil` runs no Python code, so that one read is the wait's stack.
//! - A thread that starts holding it: its stack; then every `CHECK_EVERY` samples of the hold its
//!   innermost frame (one or two reads), and the whole stack again only when that frame is another
//!   (another frame, or another code object in it). Each stack is reported with the number of
//!   samples it stood for, so a hold that moved between functions says where its time went.
//!
//! Stacks go downstream as `Record::Stack`; trace/stacks.rs puts them into the slices' args.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::addr::RemoteAddr;
use crate::infer::intervals::GilState;
use crate::python::attach::Target;
use crate::python::stacks::{FrameId, StackReader, StackStats};
use crate::sample::sampler::Record;
use crate::trace::stacks::Frames;

/// Samples of a hold between checks of the holder's innermost frame: at 10 kHz a check per
/// millisecond, a tenth of a read per sample (scripts/bench_sampler.py, README).
pub const CHECK_EVERY: u32 = 10;

/// What the recording's metadata says about stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StackReport {
    /// Why stacks could not be read in this target, when they could not.
    pub unavailable: Option<String>,
    pub read: StackStats,
    pub innermost_checks: u64,
    /// Stack reads answered from the thread's last one (same innermost frame and instruction).
    pub reused: u64,
}

/// A hold being watched: the innermost frame and stack last read, and the samples since reported.
struct Hold {
    innermost: Option<(u64, u64)>,
    frames: Frames,
    last_ns: u64,
    unreported: u64,
    until_check: u32,
}

pub struct StackWatch {
    reader: StackReader,
    /// The holds being watched, by tid: one or two at a time (the holder, and one whose end the
    /// engine has not settled yet), so a list, searched at every thread's every sample.
    holds: Vec<(u32, Hold)>,
    /// Per thread: the innermost frame (frame, code, instruction) at its last stack read and that
    /// stack. A thread back at the very same instruction of the very same frame has the same stack
    /// (a worker loop that lets the GIL go around each call): one or two reads instead of a walk.
    last: BTreeMap<u32, (FrameId, Frames)>,
    innermost_checks: u64,
    pub stacks_reused: u64,
}

impl StackWatch {
    pub fn new(target: &Target) -> Result<StackWatch, String> {
        let objects = target.object_reader()?;
        Ok(StackWatch {
            reader: StackReader::new(&target.layout, target.version, objects)?,
            holds: Vec::new(),
            last: BTreeMap::new(),
            innermost_checks: 0,
            stacks_reused: 0,
        })
    }

    /// The stack of `tstate`, reused from the thread's last read when its innermost frame is the
    /// same frame at the same instruction; `None` where it does not decode.
    fn stack_of(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        tid: u32,
        tstate: RemoteAddr,
    ) -> Option<(Option<FrameId>, Frames)> {
        let innermost = self.reader.innermost(mem, tstate).ok()?;
        if let (Some(now), Some((then, frames))) = (innermost, self.last.get(&tid))
            && now == *then
        {
            self.stacks_reused += 1;
            return Some((innermost, frames.clone()));
        }
        let top = Ok(innermost.map_or(0, |id| id.frame));
        let frames = Arc::new(self.reader.read_stack_from(mem, top).ok()?);
        match innermost {
            Some(id) => {
                self.last.insert(tid, (id, frames.clone()));
            }
            None => {
                self.last.remove(&tid);
            }
        }
        Some((innermost, frames))
    }

    /// Forgets threads that are gone (called with the live tids after a thread-list walk).
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.last.retain(|tid, _| live(*tid));
        self.holds.retain(|(tid, _)| live(*tid));
    }

    /// One thread at one sample: `previous` is its state before, `state` the one it is in now.
    pub fn observe(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        (tid, tstate): (u32, RemoteAddr),
        previous: Option<GilState>,
        state: GilState,
        t: u64,
        sink: &mut dyn FnMut(Record),
    ) {
        if state != GilState::Hold
            && let Some(hold) = self.take_hold(tid)
        {
            flush(tid, &hold, sink);
        }
        match state {
            GilState::Take if previous != Some(GilState::Take) => {
                if let Some((_, frames)) = self.stack_of(mem, tid, tstate) {
                    sink(stack(tid, t, GilState::Take, frames, 1));
                }
            }
            GilState::Hold => {
                let watched = self.holds.iter().position(|(t, _)| *t == tid);
                let begins = previous != Some(GilState::Hold) || watched.is_none();
                if begins {
                    self.take_hold(tid);
                    self.begin_hold(mem, tid, tstate, t, sink);
                    return;
                }
                let Some(hold) = watched.map(|at| &mut self.holds[at].1) else {
                    return;
                };
                hold.unreported += 1;
                hold.last_ns = t;
                hold.until_check = hold.until_check.saturating_sub(1);
                if hold.until_check > 0 {
                    return;
                }
                hold.until_check = CHECK_EVERY;
                self.innermost_checks += 1;
                let now = self.reader.innermost(mem, tstate).ok().map(key);
                if now == Some(hold.innermost) {
                    // Same frame: report the samples so far, so they count even if the hold's end
                    // is settled before this watch sees it.
                    flush(tid, hold, sink);
                    hold.unreported = 0;
                    return;
                }
                let hold = self.take_hold(tid).expect("looked up above");
                flush(tid, &hold, sink);
                self.begin_hold(mem, tid, tstate, t, sink);
            }
            _ => {}
        }
    }

    fn begin_hold(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        tid: u32,
        tstate: RemoteAddr,
        t: u64,
        sink: &mut dyn FnMut(Record),
    ) {
        // A stack that does not decode is watched as empty (and not shown), so that a holder whose
        // memory keeps changing under the reads is not read again at every sample.
        let (innermost, frames) = match self.stack_of(mem, tid, tstate) {
            Some((innermost, frames)) => (Some(key(innermost)), frames),
            None => (None, Arc::new(Vec::new())),
        };
        if !frames.is_empty() {
            sink(stack(tid, t, GilState::Hold, frames.clone(), 1));
        }
        self.holds.push((
            tid,
            Hold {
                innermost: innermost.flatten(),
                frames,
                last_ns: t,
                unreported: 0,
                until_check: CHECK_EVERY,
            },
        ));
    }

    /// Stops watching `tid`'s hold, returning it.
    fn take_hold(&mut self, tid: u32) -> Option<Hold> {
        let at = self.holds.iter().position(|(t, _)| *t == tid)?;
        Some(self.holds.swap_remove(at).1)
    }

    pub fn report_into(&self, report: &mut StackReport) {
        report.read = self.reader.stats;
        report.innermost_checks = self.innermost_checks;
        report.reused = self.stacks_reused;
    }
}

/// A frame's identity for "has the holder moved on": the frame and its code, not the instruction.
fn key(frame: Option<FrameId>) -> Option<(u64, u64)> {
    frame.map(|f| (f.frame, f.code))
}

fn flush(tid: u32, hold: &Hold, sink: &mut dyn FnMut(Record)) {
    if hold.unreported > 0 && !hold.frames.is_empty() {
        sink(stack(
            tid,
            hold.last_ns,
            GilState::Hold,
            hold.frames.clone(),
            hold.unreported,
        ));
    }
}

fn stack(tid: u32, t_ns: u64, state: GilState, frames: Frames, samples: u64) -> Record {
    Record::Stack {
        tid,
        t_ns,
        state,
        frames,
        samples,
    }
}
