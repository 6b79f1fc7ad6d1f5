//! A thread's Python stack, innermost frame first: function, file and line of each frame, read from
//! the target's memory.
//!
//! The innermost frame is `tstate->frame` (3.7–3.10, a `PyFrameObject` list through `f_back`),
//! `tstate->cframe->current_frame` (3.11, 3.12) or `tstate->current_frame` (3.13+), each a
//! `_PyInterpreterFrame` list through `previous`. A frame's code is `f_code` (≤3.12) or
//! `f_executable` (3.13+; from 3.14 a `_PyStackRef` whose low bits are tags). Frames whose
//! executable is not a code object (the C-stack shims of 3.12+) are skipped. The instruction offset
//! is `f_lasti` (bytes before 3.10, code units in 3.10) or the instruction pointer minus the start of
//! `co_code_adaptive` (3.11+); the line comes from the line table (linetable.rs).
//!
//! Code objects are cached by address. Each use re-reads the code object's header and checks its
//! type, name, file, first line and line table pointers against the cached ones, so a code object
//! freed and another allocated at its address is read afresh, never shown under the old name. The
//! walk is bounded (`MAX_FRAMES`), stops at a frame seen before, and counts what does not decode.

use std::collections::HashMap;
use std::sync::Arc;

use code_objects::{CodeFields, CodeInfo};

use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::python::back_jumps::BackJumps;
use crate::python::layout::Layout;
use crate::python::linetable::LineTableFormat;
use crate::python::objects::{ObjectError, ObjectReader, ObjectResult};
use crate::python::version::PyVersion;
use crate::symbols::dwarf::FieldInfo;

pub use innermost::RecentTops;

/// Frames walked at most; a deeper stack is cut (its outermost frames are not read).
pub const MAX_FRAMES: usize = 256;
/// Frames kept per stack, innermost first; the rest are counted in a last entry.
pub const SHOWN_FRAMES: usize = 16;
/// Names, paths and line tables longer than these are taken for torn reads.
const MAX_TEXT: u64 = 4096;
const MAX_LINE_TABLE: u64 = 1 << 20;
/// Code objects kept; the cache is emptied when it grows past this (a program that keeps creating
/// code, e.g. with `exec`, must not grow gilsample's memory).
const MAX_CACHED_CODE: usize = 8192;

/// How reading stacks went over a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StackStats {
    /// Stacks read whole.
    pub stacks: u64,
    /// Frames decoded, over all stacks.
    pub frames: u64,
    /// Reads of a stack that did not decode (a frame or code object changing under the read), and
    /// of an innermost frame that did not (counted by sampler/stack_watch.rs, which reads such a
    /// stack once more; where that fails too, the slice goes without one).
    pub torn: u64,
    /// Code objects read (the rest came from the cache).
    pub code_objects_read: u64,
    /// Cached code objects found replaced by another object at the same address.
    pub code_objects_replaced: u64,
}

#[derive(Clone, Copy, Debug)]
enum Top {
    Frame(u64),
    ViaCFrame { cframe: u64, current: u64 },
}

#[derive(Clone, Copy, Debug)]
enum Frames {
    /// Before 3.11: `PyFrameObject`s. `lasti_scale` turns `f_lasti` into a byte offset.
    Objects {
        back: u64,
        code: u64,
        lasti: FieldInfo,
        lasti_scale: u64,
    },
    /// 3.11+: `_PyInterpreterFrame`s; `tag_bits` are cleared from the executable reference.
    Interpreter {
        previous: u64,
        executable: u64,
        instr: u64,
        tag_bits: u64,
        bytecode: u64,
        /// 3.12: frames owned by the C stack (`FRAME_OWNED_BY_CSTACK`) are the interpreter's
        /// trampolines, not Python code: the owner byte's offset and that value.
        shim: Option<(u64, u64)>,
    },
}

/// Reads stacks of one target.
pub struct StackReader {
    objects: ObjectReader,
    top: Top,
    frames: Frames,
    frame_header: u64,
    /// Where a frame's locals and value stack begin (`localsplus`), where the layout says.
    slots: Option<u64>,
    code: CodeFields,
    format: LineTableFormat,
    /// Where the version leaves loop jumps without a line (3.10, 3.11, 3.12).
    back_jumps: Option<BackJumps>,
    cache: HashMap<u64, Arc<CodeInfo>>,
    /// How the reads went so far.
    pub stats: StackStats,
}

/// One frame: where it is, what code it runs, and at which instruction (for telling frames apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameId {
    /// The frame's address in the target (`_PyInterpreterFrame` or `PyFrameObject`).
    pub frame: u64,
    /// The address of its code object.
    pub code: u64,
    /// Its instruction pointer (or last instruction index), as the frame holds it.
    pub instr: u64,
}

/// A thread's innermost frame as the stack watch compares its reads over a hold
/// (sampler/stack_watch.rs): the frame, and a digest of its first locals and value-stack slots,
/// which Python code changes as it runs and a native call does not (`None` where they do not read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchedFrame {
    /// Where the frame is, its code and instruction.
    pub id: FrameId,
    /// The digest of its first slots.
    pub slots_digest: Option<u64>,
}

/// A layout's fields that stacks need: a missing one is an error naming it.
#[derive(Clone, Copy)]
struct Needed<'a>(&'a Layout);

impl Needed<'_> {
    fn get(self, name: &str) -> Result<FieldInfo, String> {
        self.0
            .field(name)
            .ok_or_else(|| format!("layout {} lacks {name}", self.0.key()))
    }
}

/// Where the first byte after every one of `fields` lies.
fn end_of(fields: &[FieldInfo]) -> u64 {
    fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0)
}

/// 3.11+: `_PyInterpreterFrame`s, found through the thread state (3.13+) or its C frame (3.11,
/// 3.12); with the length of a frame's header (the fields read of every frame).
fn interpreter_frames(
    fields: Needed<'_>,
    version: PyVersion,
) -> Result<(Top, Frames, u64), String> {
    let layout = fields.0;
    let top = match layout.field("tstate.current_frame") {
        Some(f) => Top::Frame(f.offset),
        None => Top::ViaCFrame {
            cframe: fields.get("tstate.cframe")?.offset,
            current: fields.get("cframe.current_frame")?.offset,
        },
    };
    let previous = fields.get("iframe.previous")?;
    let executable = fields.get("iframe.executable")?;
    let instr = fields.get("iframe.instr_ptr")?;
    let frames = Frames::Interpreter {
        previous: previous.offset,
        executable: executable.offset,
        instr: instr.offset,
        // 3.14+: `_PyStackRef` tags live in the two low bits (Include/internal/
        // pycore_stackref.h); objects are at least 8-aligned, so clearing them is exact.
        tag_bits: if (version.major, version.minor) >= (3, 14) {
            3
        } else {
            0
        },
        bytecode: fields.get("code.co_code_adaptive")?.offset,
        // Include/internal/pycore_frame.h of 3.12: `FRAME_OWNED_BY_CSTACK = 3`. 3.13+
        // shims have no code object as their executable and are skipped as such.
        shim: match (version.minor, layout.field("iframe.owner")) {
            (12, Some(owner)) => Some((owner.offset, 3)),
            _ => None,
        },
    };
    let owner = layout.field("iframe.owner").unwrap_or(previous);
    Ok((top, frames, end_of(&[previous, executable, instr, owner])))
}

/// Before 3.11: `PyFrameObject`s from the thread state's `frame`; with the length of a frame's
/// header (the fields read of every frame).
fn frame_objects(fields: Needed<'_>, version: PyVersion) -> Result<(Top, Frames, u64), String> {
    let back = fields.get("frame.f_back")?;
    let code = fields.get("frame.f_code")?;
    let lasti = fields.get("frame.f_lasti")?;
    let frames = Frames::Objects {
        back: back.offset,
        code: code.offset,
        lasti,
        // 3.10 counts f_lasti in code units (`f_lasti * sizeof(_Py_CODEUNIT)`).
        lasti_scale: if version.minor == 10 { 2 } else { 1 },
    };
    let top = Top::Frame(fields.get("tstate.frame")?.offset);
    Ok((top, frames, end_of(&[back, code, lasti])))
}

impl StackReader {
    /// A reader for stacks of a `version` interpreter laid out as `layout`, reading objects through
    /// `objects`; errs where the layout lacks frame fields.
    pub fn new(
        layout: &Layout,
        version: PyVersion,
        objects: ObjectReader,
    ) -> Result<StackReader, String> {
        let fields = Needed(layout);
        let (top, frames, frame_header) = if layout.field("iframe.previous").is_some() {
            interpreter_frames(fields, version)?
        } else {
            frame_objects(fields, version)?
        };
        let slots = layout
            .field("iframe.localsplus")
            .or_else(|| layout.field("frame.f_localsplus"))
            .map(|f| f.offset)
            .filter(|&at| at >= frame_header && at < 4096);
        let code = CodeFields::of(fields)?;
        fields.get("bytes.ob_sval")?;
        Ok(StackReader {
            objects,
            top,
            frames,
            frame_header,
            slots,
            code,
            format: LineTableFormat::for_version(version.major, version.minor),
            back_jumps: BackJumps::of(version.major, version.minor),
            cache: HashMap::new(),
            stats: StackStats::default(),
        })
    }

    /// The innermost frame's address (0 when the thread runs no Python code).
    fn top_frame(&self, mem: &dyn MemorySource, tstate: RemoteAddr) -> ObjectResult<u64> {
        let at = |base: u64, offset: u64| -> ObjectResult<u64> {
            Ok(mem.read_u64(RemoteAddr(base.wrapping_add(offset)))?)
        };
        let frame = match self.top {
            Top::Frame(offset) => at(tstate.0, offset)?,
            Top::ViaCFrame { cframe, current } => {
                let cframe = at(tstate.0, cframe)?;
                if cframe == 0 {
                    return Ok(0);
                }
                check_pointer(cframe)?;
                at(cframe, current)?
            }
        };
        if frame != 0 {
            check_pointer(frame)?;
        }
        Ok(frame)
    }

    /// One frame: its code object, its instruction (an address from 3.11, a byte offset before),
    /// and the next frame out.
    fn read_frame(&self, mem: &dyn MemorySource, frame: u64) -> ObjectResult<(u64, u64, u64)> {
        let mut header = vec![0u8; self.frame_header as usize];
        mem.read_into(RemoteAddr(frame), &mut header)?;
        self.decode_frame(&header)
    }

    /// The same, from a window of memory read earlier where it holds the frame, else from a new
    /// window: from 3.11 the frames of Python calls lie one after another on the thread's data
    /// stack, callers below callees, so one read from the start of a frame's page mostly holds its
    /// callers too (one read per stack instead of one per frame). A page is mapped whole or not at
    /// all, so the window is as readable as the frame; where it is not (a snapshot in tests), the
    /// frame alone is read.
    fn read_frame_via(
        &self,
        mem: &dyn MemorySource,
        frame: u64,
        window: &mut Window,
    ) -> ObjectResult<(u64, u64, u64)> {
        let len = self.frame_header;
        if let Some(header) = window.get(frame, len) {
            return self.decode_frame(header);
        }
        if matches!(self.frames, Frames::Objects { .. }) {
            // Before 3.11 frames are heap objects, rarely beside their callers.
            return self.read_frame(mem, frame);
        }
        let start = frame & !(PAGE - 1);
        window.bytes.resize((frame + len - start) as usize, 0);
        if mem.read_into(RemoteAddr(start), &mut window.bytes).is_err() {
            window.bytes.clear();
            return self.read_frame(mem, frame);
        }
        window.start = start;
        self.decode_frame(window.get(frame, len).expect("the window holds the frame"))
    }

    fn decode_frame(&self, header: &[u8]) -> ObjectResult<(u64, u64, u64)> {
        let word = |offset: u64| read_le(header, offset, 8);
        Ok(match self.frames {
            Frames::Objects {
                back,
                code,
                lasti,
                lasti_scale,
            } => {
                let lasti = read_le(header, lasti.offset, lasti.size)? as i32;
                // -1: the frame has not started; its line is the first one.
                let offset = u64::try_from(lasti).unwrap_or(0) * lasti_scale;
                (word(code)?, offset, word(back)?)
            }
            Frames::Interpreter {
                previous,
                executable,
                instr,
                tag_bits,
                shim,
                ..
            } => {
                let is_shim = match shim {
                    Some((owner, value)) => read_le(header, owner, 1)? == value,
                    None => false,
                };
                // A shim's "code" is reported as none, so the walk skips it.
                let code = if is_shim {
                    0
                } else {
                    word(executable)? & !tag_bits
                };
                (code, word(instr)?, word(previous)?)
            }
        })
    }

    /// The stack of `tstate`, innermost first, as `function (file:line)` lines; at most
    /// `SHOWN_FRAMES`, then a line counting the rest.
    pub fn read_stack(
        &mut self,
        mem: &dyn MemorySource,
        tstate: RemoteAddr,
    ) -> ObjectResult<Vec<String>> {
        let top = self.top_frame(mem, tstate);
        self.read_stack_from(mem, top)
    }

    /// The same, from an innermost frame already read (`innermost`'s `FrameId::frame`, 0 for none):
    /// the thread state's pointers to it need not be read again.
    pub fn read_stack_from(
        &mut self,
        mem: &dyn MemorySource,
        top: ObjectResult<u64>,
    ) -> ObjectResult<Vec<String>> {
        let result = top.and_then(|top| self.walk(mem, top));
        match &result {
            Ok(frames) => {
                self.stats.stacks += 1;
                self.stats.frames += frames.len() as u64;
            }
            Err(_) => self.stats.torn += 1,
        }
        result
    }

    fn walk(&mut self, mem: &dyn MemorySource, top: u64) -> ObjectResult<Vec<String>> {
        let frames = self.frame_chain(mem, top)?;
        let headers = self.code_headers(mem, &frames);
        let mut lines = Vec::new();
        let mut hidden = 0usize;
        for (&(code, instr), header) in frames.iter().zip(&headers) {
            let info = match self.code_info(mem, code, header.as_deref()) {
                Ok(info) => info,
                // Not a code object: a shim frame of the C stack, or a frame being set up.
                Err(ObjectError::Absent) => continue,
                Err(e) => return Err(e),
            };
            if lines.len() >= SHOWN_FRAMES {
                hidden += 1;
                continue;
            }
            lines.push(self.text_at(&info, code, instr));
        }
        if hidden > 0 {
            lines.push(format!("… {hidden} outer frames"));
        }
        Ok(lines)
    }

    /// `function (file:line)` of a frame running `code` at `instr`.
    fn text_at(&self, info: &CodeInfo, code: u64, instr: u64) -> String {
        let offset = match self.frames {
            Frames::Interpreter { bytecode, .. } => instr.saturating_sub(code + bytecode),
            Frames::Objects { .. } => instr,
        };
        let line = self.format.line(&info.table, info.first_line, offset);
        match line.or_else(|| info.loop_line(offset)) {
            Some(line) => format!("{} ({}:{line})", info.function, info.file),
            None => format!("{} ({})", info.function, info.file),
        }
    }

    /// The text a stack shows for frame `at`, from its code object as last read (no read of the
    /// target); `None` where that code object is not cached.
    pub fn frame_text(&self, at: FrameId) -> Option<String> {
        let info = self.cache.get(&at.code)?;
        Some(self.text_at(info, at.code, at.instr))
    }

    /// `frames`, a stack read with its innermost frame at `then`, with that frame's line at `now`
    /// instead (the same frame and code object, another instruction), from the cached code object;
    /// `None` where it is not cached or the stack's first line is not `then`'s frame.
    pub fn moved_to(&self, frames: &[String], then: FrameId, now: FrameId) -> Option<Vec<String>> {
        if frames.first()? != &self.frame_text(then)? {
            return None;
        }
        let mut moved = frames.to_vec();
        moved[0] = self.frame_text(now)?;
        Some(moved)
    }

    /// Each frame's code object and instruction, innermost first: bounded, and ended at a frame
    /// seen before (a loop), showing what was read.
    fn frame_chain(&self, mem: &dyn MemorySource, top: u64) -> ObjectResult<Vec<(u64, u64)>> {
        let mut frame = top;
        let mut seen: Vec<u64> = Vec::new();
        let mut frames = Vec::new();
        let mut window = Window::default();
        while frame != 0 {
            check_pointer(frame)?;
            if seen.len() >= MAX_FRAMES || seen.contains(&frame) {
                break;
            }
            seen.push(frame);
            let (code, instr, next) = self.read_frame_via(mem, frame, &mut window)?;
            frames.push((code, instr));
            frame = next;
        }
        Ok(frames)
    }
}

/// Target memory is mapped in pages of at least this size.
const PAGE: u64 = 4096;

/// Bytes of target memory read at `start`, reused for the frames they hold.
#[derive(Default)]
struct Window {
    start: u64,
    bytes: Vec<u8>,
}

impl Window {
    fn get(&self, at: u64, len: u64) -> Option<&[u8]> {
        let from = usize::try_from(at.checked_sub(self.start)?).ok()?;
        self.bytes.get(from..from.checked_add(len as usize)?)
    }
}

fn check_pointer(addr: u64) -> ObjectResult<()> {
    if RemoteAddr(addr).is_plausible_pointer(8) {
        Ok(())
    } else {
        Err(ObjectError::Torn(
            "a frame or code pointer that cannot be one",
        ))
    }
}

fn read_le(bytes: &[u8], offset: u64, size: u64) -> ObjectResult<u64> {
    let at = offset as usize;
    let raw = bytes
        .get(at..at.saturating_add(size as usize))
        .filter(|r| r.len() <= 8)
        .ok_or(ObjectError::Torn("a field outside what was read"))?;
    let mut word = [0u8; 8];
    word[..raw.len()].copy_from_slice(raw);
    Ok(u64::from_le_bytes(word))
}

mod code_objects;
mod innermost;
#[cfg(test)]
mod tests;
