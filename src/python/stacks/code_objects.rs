//! Code objects as the stack reader reads them: the fields a frame's text needs, read for a whole
//! stack in one system call, cached by address and checked against the header at each use
//! (stacks.rs, module docs), with the lines of the loop jumps their line table leaves unlined
//! (python/back_jumps.rs).

use std::sync::Arc;

use super::{
    Frames, MAX_CACHED_CODE, MAX_LINE_TABLE, MAX_TEXT, Needed, StackReader, check_pointer, end_of,
    read_le,
};
use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::python::back_jumps::MAX_BYTECODE;
use crate::python::objects::{ObjectError, ObjectResult};
use crate::symbols::dwarf::FieldInfo;

/// What a code object says about itself, and the header words that identify it.
#[derive(Debug)]
pub(super) struct CodeInfo {
    pub(super) function: String,
    pub(super) file: String,
    pub(super) first_line: i32,
    pub(super) table: Vec<u8>,
    pub(super) identity: [u64; 4],
    /// Byte offsets of the loop jumps the table leaves unlined, with their loop head's line
    /// (python/back_jumps.rs).
    pub(super) loop_lines: Vec<(u64, i32)>,
}

impl CodeInfo {
    /// The line of the unlined loop jump at byte offset `offset`, where there is one.
    pub(super) fn loop_line(&self, offset: u64) -> Option<i32> {
        let jump = self.loop_lines.iter().find(|&&(at, _)| at == offset)?;
        Some(jump.1)
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct CodeFields {
    pub(super) name: u64,
    pub(super) filename: u64,
    pub(super) first_line: FieldInfo,
    pub(super) table: u64,
    /// Where the pointer to the bytecode's bytes object is (before 3.11), where the layout has it.
    pub(super) bytecode_object: Option<u64>,
    pub(super) header: u64,
}

impl CodeFields {
    /// The code object's fields a frame's text needs: its qualified name where the version has
    /// one, else its name.
    pub(super) fn of(fields: Needed<'_>) -> Result<CodeFields, String> {
        let name = match fields.0.field("code.co_qualname") {
            Some(f) => f,
            None => fields.get("code.co_name")?,
        };
        let filename = fields.get("code.co_filename")?;
        let first_line = fields.get("code.co_firstlineno")?;
        let table = fields.get("code.co_linetable")?;
        let ob_type = fields.get("object.ob_type")?;
        let bytecode_object = fields.0.field("code.co_code");
        let mut header = vec![name, filename, first_line, table, ob_type];
        header.extend(bytecode_object);
        Ok(CodeFields {
            name: name.offset,
            filename: filename.offset,
            first_line,
            table: table.offset,
            bytecode_object: bytecode_object.map(|f| f.offset),
            header: end_of(&header),
        })
    }
}

impl StackReader {
    /// The header of every frame's code object, read together (one system call for the stack);
    /// `None` where the batch stopped short, for `code_info` to read alone and report.
    pub(super) fn code_headers(
        &self,
        mem: &dyn MemorySource,
        frames: &[(u64, u64)],
    ) -> Vec<Option<Vec<u8>>> {
        let len = self.code.header as usize;
        // Only what may be a code object is read; `code_info` says why the others are not.
        let mut headers: Vec<Option<Vec<u8>>> = frames
            .iter()
            .map(|&(code, _)| (code != 0 && check_pointer(code).is_ok()).then(|| vec![0u8; len]))
            .collect();
        let mut reads: Vec<(RemoteAddr, &mut [u8])> = frames
            .iter()
            .zip(headers.iter_mut())
            .filter_map(|(&(code, _), h)| Some((RemoteAddr(code), h.as_deref_mut()?)))
            .collect();
        let filled = mem.read_each(&mut reads);
        // The reads are the headers that are `Some`, in order: those past `filled` were not read.
        headers
            .iter_mut()
            .filter(|h| h.is_some())
            .skip(filled)
            .for_each(|h| *h = None);
        headers
    }

    /// The cached code object at `code` if its header (`read`, or read here) still matches, else
    /// read afresh.
    pub(super) fn code_info(
        &mut self,
        mem: &dyn MemorySource,
        code: u64,
        read: Option<&[u8]>,
    ) -> ObjectResult<Arc<CodeInfo>> {
        if code == 0 {
            return Err(ObjectError::Absent);
        }
        check_pointer(code)?;
        let read_here;
        let header: &[u8] = match read {
            Some(header) => header,
            None => {
                let mut header = vec![0u8; self.code.header as usize];
                mem.read_into(RemoteAddr(code), &mut header)?;
                read_here = header;
                &read_here
            }
        };
        if !self.objects.has_type(header, self.objects.types.code) {
            return Err(ObjectError::Absent);
        }
        let f = self.code;
        let identity = [
            read_le(header, f.name, 8)?,
            read_le(header, f.filename, 8)?,
            read_le(header, f.table, 8)?,
            read_le(header, f.first_line.offset, f.first_line.size)?,
        ];
        if let Some(info) = self.cache.get(&code) {
            if info.identity == identity {
                return Ok(info.clone());
            }
            self.stats.code_objects_replaced += 1;
        }
        let text = |addr: u64| self.objects.read_str(mem, RemoteAddr(addr), MAX_TEXT);
        let table = self
            .objects
            .read_bytes(mem, RemoteAddr(identity[2]), MAX_LINE_TABLE)?;
        let first_line = identity[3] as i32;
        let info = Arc::new(CodeInfo {
            function: text(identity[0])?,
            file: text(identity[1])?,
            loop_lines: self.loop_lines(mem, (code, header), &table, first_line),
            table,
            first_line,
            identity,
        });
        self.stats.code_objects_read += 1;
        if self.cache.len() >= MAX_CACHED_CODE {
            self.cache.clear();
        }
        self.cache.insert(code, info.clone());
        Ok(info)
    }

    /// The unlined loop jumps of the code object at `code` (its `header` as read) and their
    /// lines, where the version leaves some and its table has unlined entries: one read of its
    /// bytecode (3.11+, inside the code object), or two (3.10, a bytes object of its own, read
    /// whole: one over `MAX_BYTECODE` keeps its jumps unlined), once per code object read.
    fn loop_lines(
        &self,
        mem: &dyn MemorySource,
        (code, header): (u64, &[u8]),
        table: &[u8],
        first_line: i32,
    ) -> Vec<(u64, i32)> {
        let Some(jumps) = &self.back_jumps else {
            return Vec::new();
        };
        let runs = self.format.unlined_runs(table);
        if runs.is_empty() {
            return Vec::new();
        }
        let line_of = |unit: u64| self.format.line(table, first_line, unit * 2);
        match (self.frames, self.code.bytecode_object) {
            (Frames::Interpreter { bytecode, .. }, _) => {
                jumps.lines(mem, RemoteAddr(code + bytecode), &runs, line_of)
            }
            (Frames::Objects { .. }, Some(at)) => {
                let bytecode = read_le(header, at, 8).and_then(|object| {
                    let object = RemoteAddr(object);
                    self.objects.read_bytes(mem, object, MAX_BYTECODE)
                });
                bytecode.map_or_else(|_| Vec::new(), |b| jumps.lines_in(&b, &runs, line_of))
            }
            (Frames::Objects { .. }, None) => Vec::new(),
        }
    }
}
