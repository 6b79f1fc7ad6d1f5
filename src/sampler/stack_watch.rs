//! When the sampler reads Python stacks, and what it reports of them.
//!
//! - A thread that starts waiting for the GIL (`take_gil` after anything else): its stack, once.
//!   A thread blocked in `take_gil` runs no Python code, so that one read is the wait's stack.
//! - A thread that starts holding it: its stack; then every `CHECK_EVERY` samples of the hold its
//!   innermost frame, and the whole stack again only when that frame is another
//!   (another frame, or another code object in it). Each stack is reported with the number of
//!   samples it stood for, so a hold that moved between functions says where its time went.
//!
//! Each of these reads the innermost frame first, together with the places the thread was last
//! found at: one system call where it is at one of them (python/stacks/innermost.rs).
//!
//! Stacks go downstream as `Finding::Stack`; trace/stacks.rs puts them into the slices' args.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::addr::RemoteAddr;
use crate::infer::engine::Decided;
use crate::infer::findings::{Finding, Frames, StackReading};
use crate::infer::intervals::GilState;
use crate::infer::sample::ThreadSample;
use crate::python::objects::ObjectResult;
use crate::python::stacks::{RecentTops, StackReader, StackStats, WatchedFrame};
use crate::python::target::Target;
use crate::sampler::hold_stillness::{Holder, Stillness};
use crate::sampler::recent_stacks::{Kept, RecentStacks, STACK_KEPT_FOR_NS};

/// Samples of a hold between checks of the holder's innermost frame: at 10 kHz a check per
/// millisecond, a tenth of a read per sample (scripts/bench_sampler.py; docs/cost.md, "Names and stacks").
pub const CHECK_EVERY: u32 = 10;

/// What the recording's metadata says about stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StackReport {
    /// Why stacks could not be read in this target, when they could not.
    pub unavailable: Option<String>,
    /// How the stack reads went: stacks read, frames, failures.
    pub read: StackStats,
    /// Reads of a holder's innermost frame alone, to see whether a long hold is still in the same
    /// frame.
    pub innermost_checks: u64,
    /// Stack reads answered from the thread's last one (same innermost frame and instruction).
    pub reused: u64,
    /// Stack reads answered from a kept one of the same innermost frame and code object at another
    /// instruction, its innermost line moved to this one.
    pub reused_other_line: u64,
}

/// A hold being watched: the innermost frame and stack last read, and the samples since reported.
struct Hold {
    /// Its innermost frame when the hold (or its part in this frame) began.
    in_frame: Option<FrameInCode>,
    frames: Frames,
    last_ns: u64,
    unreported: u64,
    until_check: u32,
    /// What the reads of the innermost frame found, for the hold's kind (infer/native_call.rs).
    still: Stillness,
}

/// Which frame, running which code: a hold stays in one frame (its part in one frame, for the
/// watch) while this does, whatever instruction it moves to.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FrameInCode {
    frame: u64,
    code: u64,
}

impl FrameInCode {
    fn of(watched: Option<WatchedFrame>) -> Option<FrameInCode> {
        watched.map(|w| FrameInCode {
            frame: w.id.frame,
            code: w.id.code,
        })
    }
}

/// Reads Python stacks of waiting and holding threads for the engine's findings, and watches each
/// holder's innermost frame over its hold (module docs).
pub struct StackWatch {
    reader: StackReader,
    /// The holds being watched, by tid: one or two at a time (the holder, and one whose end the
    /// engine has not settled yet), so a list, searched at every thread's every sample.
    holds: Vec<(u32, Hold)>,
    /// What spares each thread's stack reads, by tid.
    threads: BTreeMap<u32, ThreadPlaces>,
    innermost_checks: u64,
    /// Stack reads answered from the thread's last one: same frame, same instruction.
    stacks_reused: u64,
    /// Stack reads answered from a kept one of the same frame and code at another instruction.
    stacks_reused_other_line: u64,
    /// When every thread's expired stacks were last forgotten.
    swept_ns: u64,
}

impl StackWatch {
    /// A watch over `target`'s stacks, or why its stacks cannot be read.
    pub fn new(target: &Target) -> Result<StackWatch, String> {
        let objects = target.object_reader()?;
        let reader = StackReader::new(&target.layout, target.version, objects)?;
        Ok(StackWatch::with_reader(reader))
    }

    fn with_reader(reader: StackReader) -> StackWatch {
        StackWatch {
            reader,
            holds: Vec::new(),
            threads: BTreeMap::new(),
            innermost_checks: 0,
            stacks_reused: 0,
            stacks_reused_other_line: 0,
            swept_ns: 0,
        }
    }

    /// The stack of `tstate` at `t`, reused from one of the thread's recent reads whose innermost
    /// frame is the same frame at the same instruction; `None` where it does not decode, twice.
    /// With it, the innermost frame as a hold's watch compares it (`WatchedFrame`). `innermost`:
    /// that frame where this sample has read it already (a hold's check that found it moved).
    fn stack_of(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        (tid, tstate): (u32, RemoteAddr),
        t: u64,
        innermost: Option<Option<WatchedFrame>>,
    ) -> Option<(Option<WatchedFrame>, Frames)> {
        if t.saturating_sub(self.swept_ns) >= STACK_KEPT_FOR_NS {
            // Once per period a kept stack lasts: what a thread that stopped moving keeps.
            for places in self.threads.values_mut() {
                places.stacks.forget_expired(t);
            }
            self.swept_ns = t;
        }
        // A read that does not decode is a frame that changed under it (the thread ran on, or
        // returned): read once more, so that the slice gets the stack it is in now.
        let first = match innermost {
            Some(watched) => self.stack_at(mem, tid, watched, t),
            None => self.read_stack_of(mem, tid, tstate, t),
        };
        first.or_else(|| self.read_stack_of(mem, tid, tstate, t))
    }

    /// `stack_of`, its innermost frame read now.
    fn read_stack_of(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        tid: u32,
        tstate: RemoteAddr,
        t: u64,
    ) -> Option<(Option<WatchedFrame>, Frames)> {
        let places = self.threads.entry(tid).or_default();
        let Ok(watched) = self
            .reader
            .innermost_watched_near(mem, tstate, &mut places.tops)
        else {
            // The trace counts it where it counts stacks that do not decode.
            self.reader.stats.torn += 1;
            return None;
        };
        self.stack_at(mem, tid, watched, t)
    }

    /// The stack whose innermost frame `watched` this sample read: a kept one where that frame is
    /// at the same instruction (or, with the callers kept, at another), else walked.
    fn stack_at(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        tid: u32,
        watched: Option<WatchedFrame>,
        t: u64,
    ) -> Option<(Option<WatchedFrame>, Frames)> {
        let places = self.threads.entry(tid).or_default();
        let innermost = watched.map(|w| w.id);
        if let Some(now) = innermost {
            match places.stacks.find(now, t) {
                Kept::Same(frames) => {
                    self.stacks_reused += 1;
                    return Some((watched, frames));
                }
                // A loop that lets the GIL go at several of its instructions: the callers as
                // kept, the innermost line where the thread is now; kept with its walk's time, so
                // the callers are walked again as often as any kept stack's.
                Kept::OtherLine(then, kept, walked) => {
                    if let Some(moved) = self.reader.moved_to(&kept, then, now) {
                        let frames = Arc::new(moved);
                        places.stacks.keep(now, frames.clone(), walked);
                        self.stacks_reused_other_line += 1;
                        return Some((watched, frames));
                    }
                }
                Kept::Nothing => {}
            }
        }
        let top = Ok(innermost.map_or(0, |id| id.frame));
        let frames = Arc::new(self.reader.read_stack_from(mem, top).ok()?);
        if let Some(id) = innermost {
            places.stacks.keep(id, frames.clone(), t);
        }
        Some((watched, frames))
    }

    /// Forgets threads that are gone (called with the live tids after a thread-list walk).
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.threads.retain(|tid, _| live(*tid));
        self.holds.retain(|(tid, _)| live(*tid));
    }

    /// One thread at one sample (`seen`: what the sample read of it), as the engine `decided` it.
    pub fn observe(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        seen: &ThreadSample,
        decided: &Decided,
        t: u64,
        sink: &mut dyn FnMut(Finding),
    ) {
        let (tid, tstate) = (seen.tid, seen.tstate);
        let (previous, state) = (decided.previous, decided.state);
        if state != GilState::Hold
            && let Some(hold) = self.take_hold(tid)
        {
            self.close_hold(tid, hold, sink);
        }
        match state {
            // A wait's stack, read once as each of its slices begins: a wait is one slice unless a
            // gap or a held-back stretch cut it (a thread in `take_gil` runs no Python, so the
            // stack read then stands for the slice).
            GilState::Take
                if previous != Some(GilState::Take)
                    || decided.after_gap
                    || decided.after_stretch =>
            {
                if let Some((_, frames)) = self.stack_of(mem, (tid, tstate), t, None) {
                    sink(stack(tid, t, GilState::Take, frames, 1, true));
                }
            }
            GilState::Hold => {
                let watched = self.holds.iter().position(|(t, _)| *t == tid);
                // After a held-back stretch a hold on both sides is two holds, and the thread may
                // have run elsewhere in between (on the queue workload 22–42% of them had): the
                // new one's stack is read, as any hold's.
                let begins =
                    previous != Some(GilState::Hold) || watched.is_none() || decided.after_stretch;
                if begins {
                    // A hold whose end this watch did not see, or the one before the stretch.
                    if let Some(hold) = self.take_hold(tid) {
                        self.close_hold(tid, hold, sink);
                    }
                    let begins = Begins::Slice;
                    self.begin_hold(mem, seen, t, begins, None, sink);
                    return;
                }
                let Some(hold) = watched.map(|at| &mut self.holds[at].1) else {
                    return;
                };
                // After a gap the trace's slice of this hold ends there, and is judged with what
                // the watch saw up to it; the innermost frame is checked at once. Where the thread
                // is still in the frame it was in, the hold goes on: the slice after gets the
                // whole watch at its end (a native call that holds the GIL across a sampler stall
                // stays one standing-still hold). Its samples so far go to the slice before; this
                // one begins the next, which keeps its own stack (trace/stacks.rs sums no reading
                // back past it). A thread that ran on to another frame meanwhile begins a new hold
                // there, as after a stretch: the slice after the gap shows where it is, not where
                // it was. Without a gap the frame is checked every `CHECK_EVERY` samples.
                let after_gap = decided.after_gap;
                if !after_gap {
                    hold.unreported += 1;
                    hold.last_ns = t;
                    hold.until_check = hold.until_check.saturating_sub(1);
                    if hold.until_check > 0 {
                        return;
                    }
                }
                hold.until_check = CHECK_EVERY;
                self.innermost_checks += 1;
                let now = innermost_near(&self.reader, &mut self.threads, mem, tid, tstate).ok();
                if now.map(FrameInCode::of) == Some(hold.in_frame) {
                    if after_gap {
                        hold.report_samples(tid, sink);
                        send_watch(&mut self.reader, tid, hold, sink);
                        hold.still.read(now.flatten(), t, Holder::of(seen));
                        hold.last_ns = t;
                        send_first_sample(tid, t, &hold.frames, true, sink);
                    } else {
                        // Same frame: report the samples so far, so they count even if the hold's
                        // end is settled before this watch sees it.
                        hold.still.read(now.flatten(), t, Holder::of(seen));
                        hold.report_samples(tid, sink);
                    }
                    return;
                }
                let hold = self.take_hold(tid).expect("looked up above");
                self.close_hold(tid, hold, sink);
                let begins = if after_gap {
                    Begins::Slice
                } else {
                    Begins::FrameInHold
                };
                // The check's read stands for the new hold's first: no second read of the frame.
                self.begin_hold(mem, seen, t, begins, now, sink);
            }
            _ => {}
        }
    }

    fn begin_hold(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        seen: &ThreadSample,
        t: u64,
        begins: Begins,
        innermost: Option<Option<WatchedFrame>>,
        sink: &mut dyn FnMut(Finding),
    ) {
        let (tid, tstate) = (seen.tid, seen.tstate);
        // A stack that does not decode is watched as empty (and not shown), so that a holder whose
        // memory keeps changing under the reads is not read again at every sample.
        let (first, in_frame, frames) = match self.stack_of(mem, (tid, tstate), t, innermost) {
            Some((watched, frames)) => (watched, FrameInCode::of(watched), frames),
            None => (None, None, Arc::new(Vec::new())),
        };
        send_first_sample(tid, t, &frames, begins == Begins::Slice, sink);
        self.holds.push((
            tid,
            Hold {
                in_frame,
                frames,
                last_ns: t,
                unreported: 0,
                until_check: CHECK_EVERY,
                still: Stillness::new(first, t, Holder::of(seen)),
            },
        ));
    }

    /// Stops watching `tid`'s hold, returning it.
    fn take_hold(&mut self, tid: u32) -> Option<Hold> {
        let at = self.holds.iter().position(|(t, _)| *t == tid)?;
        Some(self.holds.swap_remove(at).1)
    }

    /// The end of a hold, or of its part in one frame: the samples seen in it since the last
    /// report, then what its frame's reads found, with the frame's text at the instruction that
    /// stood still longest (its line from the code object read for the stack: no read of the
    /// target).
    fn close_hold(&mut self, tid: u32, mut hold: Hold, sink: &mut dyn FnMut(Finding)) {
        hold.report_samples(tid, sink);
        send_watch(&mut self.reader, tid, &hold, sink);
    }

    /// The recording ends: the holds still watched end with it, so the last slice of each is
    /// judged with what its watch saw.
    pub fn finish(&mut self, sink: &mut dyn FnMut(Finding)) {
        for (tid, hold) in std::mem::take(&mut self.holds) {
            self.close_hold(tid, hold, sink);
        }
    }

    /// Copies what the stack reads counted into `report`.
    pub fn report_into(&self, report: &mut StackReport) {
        report.read = self.reader.stats;
        report.innermost_checks = self.innermost_checks;
        report.reused = self.stacks_reused;
        report.reused_other_line = self.stacks_reused_other_line;
    }
}

/// What a hold's watch begins with: a slice of the trace (the hold itself, or its part after a gap or
/// a held-back stretch), or only a new innermost frame inside the same slice.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Begins {
    Slice,
    FrameInHold,
}

/// What spares a thread's stack reads.
#[derive(Default)]
struct ThreadPlaces {
    /// Where its innermost frame was found at its last reads, read with the pointer to it (one
    /// system call instead of two or three where it is still there: python/stacks/innermost.rs).
    tops: RecentTops,
    /// Its last few stacks, each with the innermost frame (frame, code, instruction) it was read
    /// at. A thread back at the very same instruction of the very same frame has the same stack (a
    /// worker loop that lets the GIL go around each call): one read instead of a walk where the
    /// frame is one of `tops`.
    stacks: RecentStacks,
}

/// `tid`'s innermost frame, read near where it was found last (its `ThreadPlaces::tops`). A
/// function of the watch's fields rather than a method, so that it can be called while a hold is
/// borrowed.
fn innermost_near(
    reader: &StackReader,
    threads: &mut BTreeMap<u32, ThreadPlaces>,
    mem: &dyn crate::process::memory::MemorySource,
    tid: u32,
    tstate: RemoteAddr,
) -> ObjectResult<Option<WatchedFrame>> {
    let places = threads.entry(tid).or_default();
    reader.innermost_watched_near(mem, tstate, &mut places.tops)
}

/// What `hold`'s frame reads found so far, with the frame's text at the instruction that stood
/// still longest. Sent at the hold's last sample, not its last read: the trace's last slice of the
/// hold may have had no read of its own (after a gap).
fn send_watch(reader: &mut StackReader, tid: u32, hold: &Hold, sink: &mut dyn FnMut(Finding)) {
    let shown = hold.frames.first().cloned();
    if let Some(watch) = hold.still.watch(|at| reader.frame_text(at).or(shown)) {
        sink(Finding::HoldFrames {
            tid,
            t_ns: hold.last_ns,
            watch: Box::new(watch),
        });
    }
}

impl Hold {
    /// Sends the samples not reported yet, as one stack finding at the last of them, and starts
    /// counting again.
    fn report_samples(&mut self, tid: u32, sink: &mut dyn FnMut(Finding)) {
        if self.unreported > 0 && !self.frames.is_empty() {
            let samples = self.unreported;
            sink(stack(
                tid,
                self.last_ns,
                GilState::Hold,
                self.frames.clone(),
                samples,
                false,
            ));
        }
        self.unreported = 0;
    }
}

/// The reading of a hold's (or its part's) first sample, where its stack decoded.
fn send_first_sample(
    tid: u32,
    t_ns: u64,
    frames: &Frames,
    begins_slice: bool,
    sink: &mut dyn FnMut(Finding),
) {
    if !frames.is_empty() {
        sink(stack(
            tid,
            t_ns,
            GilState::Hold,
            frames.clone(),
            1,
            begins_slice,
        ));
    }
}

fn stack(
    tid: u32,
    t_ns: u64,
    state: GilState,
    frames: Frames,
    samples: u64,
    begins_slice: bool,
) -> Finding {
    Finding::Stack(StackReading {
        tid,
        t_ns,
        state,
        frames,
        samples,
        begins_slice,
    })
}

#[cfg(test)]
mod tests;
