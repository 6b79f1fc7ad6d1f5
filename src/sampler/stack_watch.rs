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
use crate::infer::native_call::FrameWatch;
use crate::infer::sample::ThreadSample;
use crate::observed::KernelState;
use crate::python::objects::ObjectResult;
use crate::python::stacks::{FrameId, RecentTops, StackReader, StackStats, WatchedFrame};
use crate::python::target::Target;
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

/// The innermost frame's reads over one hold (while it stays in one frame), in runs of reads at one
/// instruction. A pair of reads at one instruction counts as standing still only where the holder
/// ran in between (its schedstat CPU time grew) or slept in a syscall: a holder waiting for a CPU
/// stands still at whatever it was running. The kernel adds a running thread's CPU time at its
/// ticks and when it leaves the CPU, so a Python holder preempted right after a read shows growth
/// in the first pair of its run without running then: the first pair of a run counts for neither.
/// The sampler reads the holder's schedstat at every sample anyway.
struct Stillness {
    last: Option<WatchedFrame>,
    last_cpu_ns: Option<u64>,
    reads: u32,
    /// Pairs of reads at one instruction while the holder ran or slept, and while it did neither.
    still_reads: u32,
    idle_reads: u32,
    /// The pairs so far of the run of reads at `last`, and of those the ones that stood still.
    run: (u32, u32),
    /// The run with the most pairs that stood still, and where.
    longest: (u32, Option<WatchedFrame>),
    first_ns: u64,
    last_ns: u64,
}

/// What one read of the holder found besides its frame: its CPU time so far, and whether it slept
/// in a syscall (not running: a native call that blocks, held while blocked).
#[derive(Clone, Copy)]
struct Holder {
    cpu_ns: Option<u64>,
    asleep: bool,
}

impl Holder {
    fn of(seen: &ThreadSample) -> Holder {
        Holder {
            cpu_ns: seen.schedstat.map(|s| s.cpu_ns),
            asleep: matches!(seen.kernel, Some(KernelState::InSyscall { .. })),
        }
    }
}

impl Stillness {
    fn new(first: Option<WatchedFrame>, t_ns: u64, holder: Holder) -> Stillness {
        Stillness {
            last: first,
            last_cpu_ns: holder.cpu_ns,
            reads: 1,
            still_reads: 0,
            idle_reads: 0,
            run: (0, 0),
            longest: (0, None),
            first_ns: t_ns,
            last_ns: t_ns,
        }
    }

    fn read(&mut self, now: Option<WatchedFrame>, t_ns: u64, holder: Holder) {
        self.reads += 1;
        self.last_ns = t_ns;
        let ran = match (self.last_cpu_ns, holder.cpu_ns) {
            (Some(before), Some(after)) => after > before,
            // No schedstat: nothing says it did not run.
            _ => true,
        };
        self.last_cpu_ns = holder.cpu_ns;
        if now.is_none() || now != self.last {
            self.last = now;
            self.run = (0, 0);
            return;
        }
        self.run.0 += 1;
        if holder.asleep || (ran && self.run.0 > 1) {
            self.still_reads += 1;
            self.run.1 += 1;
            if self.run.1 > self.longest.0 {
                self.longest = (self.run.1, now);
            }
        } else {
            self.idle_reads += 1;
        }
    }

    /// What the reads found; `innermost` gives the frame's text at an instruction. A part of one read,
    /// or without a Python frame, says nothing and is not passed on.
    fn watch(&self, innermost: impl FnOnce(FrameId) -> Option<String>) -> Option<FrameWatch> {
        if self.reads < 2 || self.last.is_none() && self.longest.1.is_none() {
            return None;
        }
        Some(FrameWatch {
            reads: self.reads,
            still_reads: self.still_reads,
            idle_reads: self.idle_reads,
            span_ns: self.last_ns.saturating_sub(self.first_ns),
            innermost: self.longest.1.and_then(|w| innermost(w.id)),
            callee: None,
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
        Ok(StackWatch {
            reader: StackReader::new(&target.layout, target.version, objects)?,
            holds: Vec::new(),
            threads: BTreeMap::new(),
            innermost_checks: 0,
            stacks_reused: 0,
            stacks_reused_other_line: 0,
            swept_ns: 0,
        })
    }

    /// The stack of `tstate` at `t`, reused from one of the thread's recent reads whose innermost
    /// frame is the same frame at the same instruction; `None` where it does not decode. With it,
    /// the innermost frame as a hold's watch compares it (`WatchedFrame`).
    fn stack_of(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        tid: u32,
        tstate: RemoteAddr,
        t: u64,
    ) -> Option<(Option<WatchedFrame>, Frames)> {
        if t.saturating_sub(self.swept_ns) >= STACK_KEPT_FOR_NS {
            // Once per period a kept stack lasts: what a thread that stopped moving keeps.
            for places in self.threads.values_mut() {
                places.stacks.forget_expired(t);
            }
            self.swept_ns = t;
        }
        let places = self.threads.entry(tid).or_default();
        let Ok(watched) = self
            .reader
            .innermost_watched_near(mem, tstate, &mut places.tops)
        else {
            // The frame changed under the read, as in a walk that does not decode: the slice goes
            // without a stack, and the trace counts it where it counts those.
            self.reader.stats.torn += 1;
            return None;
        };
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
            self.close_hold(tid, &hold, sink);
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
                if let Some((_, frames)) = self.stack_of(mem, tid, tstate, t) {
                    sink(stack(tid, t, GilState::Take, frames, 1, true));
                }
            }
            GilState::Hold => {
                let watched = self.holds.iter().position(|(t, _)| *t == tid);
                let begins = previous != Some(GilState::Hold) || watched.is_none();
                if begins {
                    // A hold whose end this watch did not see (a held-back stretch between).
                    if let Some(hold) = self.take_hold(tid) {
                        self.close_hold(tid, &hold, sink);
                    }
                    let begins = Begins::Slice;
                    self.begin_hold(mem, (tid, tstate), t, Holder::of(seen), begins, sink);
                    return;
                }
                let Some(hold) = watched.map(|at| &mut self.holds[at].1) else {
                    return;
                };
                if decided.after_gap || decided.after_stretch {
                    // The trace's slice of this hold ends there, and is judged with what the watch
                    // saw up to it. After a gap the hold goes on: the slice after gets the whole
                    // watch at its end. After a held-back stretch it is another hold: its watch
                    // starts over from the last read (no read now: the frame is checked as usual).
                    // Its samples so far go to the slice before; this one begins the next, which
                    // keeps its own stack (trace/stacks.rs sums no reading back past it).
                    flush(tid, hold, sink);
                    send_watch(&mut self.reader, tid, hold, sink);
                    if decided.after_stretch {
                        hold.still = Stillness::new(hold.still.last, t, Holder::of(seen));
                    }
                    hold.unreported = 0;
                    hold.last_ns = t;
                    if !hold.frames.is_empty() {
                        sink(stack(tid, t, GilState::Hold, hold.frames.clone(), 1, true));
                    }
                    return;
                }
                hold.unreported += 1;
                hold.last_ns = t;
                hold.until_check = hold.until_check.saturating_sub(1);
                if hold.until_check > 0 {
                    return;
                }
                hold.until_check = CHECK_EVERY;
                self.innermost_checks += 1;
                let now = innermost_near(&self.reader, &mut self.threads, mem, tid, tstate).ok();
                if now.map(FrameInCode::of) == Some(hold.in_frame) {
                    // Same frame: report the samples so far, so they count even if the hold's end
                    // is settled before this watch sees it.
                    hold.still.read(now.flatten(), t, Holder::of(seen));
                    flush(tid, hold, sink);
                    hold.unreported = 0;
                    return;
                }
                let hold = self.take_hold(tid).expect("looked up above");
                self.close_hold(tid, &hold, sink);
                let begins = Begins::FrameInHold;
                self.begin_hold(mem, (tid, tstate), t, Holder::of(seen), begins, sink);
            }
            _ => {}
        }
    }

    fn begin_hold(
        &mut self,
        mem: &dyn crate::process::memory::MemorySource,
        (tid, tstate): (u32, RemoteAddr),
        t: u64,
        holder: Holder,
        begins: Begins,
        sink: &mut dyn FnMut(Finding),
    ) {
        // A stack that does not decode is watched as empty (and not shown), so that a holder whose
        // memory keeps changing under the reads is not read again at every sample.
        let (first, in_frame, frames) = match self.stack_of(mem, tid, tstate, t) {
            Some((watched, frames)) => (watched, FrameInCode::of(watched), frames),
            None => (None, None, Arc::new(Vec::new())),
        };
        if !frames.is_empty() {
            let begins_slice = begins == Begins::Slice;
            sink(stack(
                tid,
                t,
                GilState::Hold,
                frames.clone(),
                1,
                begins_slice,
            ));
        }
        self.holds.push((
            tid,
            Hold {
                in_frame,
                frames,
                last_ns: t,
                unreported: 0,
                until_check: CHECK_EVERY,
                still: Stillness::new(first, t, holder),
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
    fn close_hold(&mut self, tid: u32, hold: &Hold, sink: &mut dyn FnMut(Finding)) {
        flush(tid, hold, sink);
        send_watch(&mut self.reader, tid, hold, sink);
    }

    /// The recording ends: the holds still watched end with it, so the last slice of each is
    /// judged with what its watch saw.
    pub fn finish(&mut self, sink: &mut dyn FnMut(Finding)) {
        for (tid, hold) in std::mem::take(&mut self.holds) {
            self.close_hold(tid, &hold, sink);
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

/// The samples of `hold` not reported yet, as one stack finding at its last sample.
fn flush(tid: u32, hold: &Hold, sink: &mut dyn FnMut(Finding)) {
    if hold.unreported > 0 && !hold.frames.is_empty() {
        sink(stack(
            tid,
            hold.last_ns,
            GilState::Hold,
            hold.frames.clone(),
            hold.unreported,
            false,
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
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at(instr: u64, slots: u64) -> Option<WatchedFrame> {
        let id = FrameId {
            frame: 0x1000,
            code: 0x2000,
            instr,
        };
        Some(WatchedFrame {
            id,
            slots_digest: Some(slots),
        })
    }

    fn holder(cpu_ms: u64, asleep: bool) -> Holder {
        Holder {
            cpu_ns: Some(cpu_ms * MS),
            asleep,
        }
    }

    /// Reads one per millisecond at `instrs`, with the holder's CPU time `cpu` (ms) at each.
    fn watched(reads: &[(Option<WatchedFrame>, Holder)]) -> FrameWatch {
        let mut still = Stillness::new(reads[0].0, 0, reads[0].1);
        for (i, &(now, h)) in reads.iter().enumerate().skip(1) {
            still.read(now, i as u64 * MS, h);
        }
        still
            .watch(|id| Some(format!("f (a.py:{})", id.instr)))
            .unwrap()
    }

    #[test]
    fn a_native_call_that_runs_stands_still_where_the_kernel_counted_its_cpu() {
        // CPU time counted at ticks: every fourth read sees it grow.
        let reads: Vec<_> = (0..20)
            .map(|i| (at(7, 1), holder(i / 4 * 4, false)))
            .collect();
        let w = watched(&reads);
        assert_eq!((w.reads, w.still_reads, w.idle_reads), (20, 4, 15));
        assert!(w.stood_still());
        assert_eq!(w.innermost.as_deref(), Some("f (a.py:7)"));
    }

    #[test]
    fn a_holder_preempted_after_a_read_does_not_stand_still() {
        // It ran up to the first read; the kernel counted that when it left the CPU, in the first
        // pair of the run; then nothing.
        let mut reads = vec![(at(7, 1), holder(0, false))];
        reads.extend((1..20).map(|_| (at(7, 1), holder(3, false))));
        let w = watched(&reads);
        assert_eq!((w.still_reads, w.idle_reads), (0, 19));
        assert!(!w.stood_still());
    }

    #[test]
    fn python_code_moves_its_instruction_or_its_locals() {
        let reads: Vec<_> = (0..20)
            .map(|i| (at(7 + i % 2, 1), holder(i, false)))
            .collect();
        assert_eq!(watched(&reads).moved_reads(), 19);
        // The same instruction (the last call stored it), other locals.
        let reads: Vec<_> = (0..20).map(|i| (at(7, i), holder(i, false))).collect();
        let w = watched(&reads);
        assert_eq!((w.still_reads, w.moved_reads()), (0, 19));
    }

    #[test]
    fn a_holder_asleep_in_a_syscall_stands_still() {
        let reads: Vec<_> = (0..10).map(|_| (at(7, 1), holder(0, true))).collect();
        let w = watched(&reads);
        assert_eq!(w.still_reads, 9);
    }

    #[test]
    fn one_read_or_no_python_frame_says_nothing() {
        let one = Stillness::new(at(7, 1), 0, holder(0, false));
        assert_eq!(one.watch(|_| None), None);
        let mut none = Stillness::new(None, 0, holder(0, false));
        none.read(None, MS, holder(1, false));
        assert_eq!(none.watch(|_| None), None);
    }
}
