//! Test support: a fake target heap, built object by object with a shipped layout, for the object,
//! name and stack readers' tests.

use crate::addr::RemoteAddr;
use crate::process::memory::SnapshotMemory;
use crate::python::layout::{Flavour, Layout, find_shipped};
use crate::python::objects::{ObjectReader, TypeObjects};
use crate::python::stacks::StackReader;
use crate::python::version::PyVersion;

pub const CODE_TYPE: u64 = 0x50_4000;
pub const BYTES_TYPE: u64 = 0x50_5000;

pub const DICT_TYPE: u64 = 0x50_0000;
pub const STR_TYPE: u64 = 0x50_1000;
pub const INT_TYPE: u64 = 0x50_2000;
pub const MODULE_TYPE: u64 = 0x50_3000;

/// A 3.9 heap built object by object, laid out with the shipped 3.9 layout.
pub struct Heap {
    pub layout: Layout,
    pub bytes: Vec<u8>,
}

pub const BASE: u64 = 0x10_0000;

impl Heap {
    /// An empty heap laid out as the shipped x86_64 layout of `version` ("3.9") lays it out.
    pub fn shipped(version: &str) -> Heap {
        let layout = find_shipped(version, Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        Heap {
            layout,
            bytes: Vec::new(),
        }
    }

    pub fn field(&self, name: &str) -> u64 {
        self.layout.field(name).unwrap().offset
    }

    pub fn alloc(&mut self, size: u64) -> u64 {
        let at = BASE + self.bytes.len() as u64;
        self.bytes
            .resize(self.bytes.len() + size.next_multiple_of(16) as usize, 0);
        at
    }

    pub fn put(&mut self, addr: u64, value: u64, size: usize) {
        let at = (addr - BASE) as usize;
        self.bytes[at..at + size].copy_from_slice(&value.to_le_bytes()[..size]);
    }

    pub fn object(&mut self, ty: u64, size: u64) -> u64 {
        let obj = self.alloc(size);
        let ob_type = self.field("object.ob_type");
        self.put(obj + ob_type, ty, 8);
        obj
    }

    /// A compact ASCII str (the `ascii` flag as given, to make torn ones).
    pub fn str(&mut self, text: &str, ascii: bool) -> u64 {
        let header = self.layout.field("str").unwrap().size;
        let obj = self.object(STR_TYPE, header + text.len() as u64 + 1);
        self.put(obj + self.field("str.length"), text.len() as u64, 8);
        let bit = |h: &Heap, name: &str| h.layout.field(name).unwrap().bits.unwrap().shift;
        let state = (1u64 << bit(self, "str.state.kind"))
            | (1 << bit(self, "str.state.compact"))
            | (u64::from(ascii) << bit(self, "str.state.ascii"));
        self.put(obj + self.field("str.state"), state, 4);
        let at = (obj + header - BASE) as usize;
        self.bytes[at..at + text.len()].copy_from_slice(text.as_bytes());
        obj
    }

    pub fn int(&mut self, value: u64) -> u64 {
        let digits_at = self.field("long.ob_digit");
        let obj = self.object(INT_TYPE, digits_at + 12);
        self.put(obj + self.field("varobject.ob_size"), 3, 8);
        for i in 0..3 {
            self.put(
                obj + digits_at + 4 * i,
                (value >> (30 * i)) & ((1 << 30) - 1),
                4,
            );
        }
        obj
    }

    /// A dict of eight slots with general (hashed) entries, as before 3.11.
    pub fn dict(&mut self, items: &[(u64, u64)]) -> u64 {
        let indices = self.field("dictkeys.dk_indices");
        let entry = self.layout.field("dict_entry").unwrap().size;
        let keys = self.alloc(indices + 8 + 8 * entry);
        self.put(keys + self.field("dictkeys.dk_size"), 8, 8);
        self.put(
            keys + self.field("dictkeys.dk_nentries"),
            items.len() as u64,
            8,
        );
        for (i, &(key, value)) in items.iter().enumerate() {
            let at = keys + indices + 8 + i as u64 * entry;
            self.put(at + self.field("dict_entry.me_key"), key, 8);
            self.put(at + self.field("dict_entry.me_value"), value, 8);
        }
        let dict = self.object(DICT_TYPE, 64);
        self.put(dict + self.field("dict.ma_keys"), keys, 8);
        dict
    }
}

/// A 3.9 thread state whose one frame runs a code object named `name`; returns the heap, the
/// thread state and the code object's address.
pub fn one_frame(name: &str) -> (Heap, u64, u64) {
    let mut heap = Heap::shipped("3.9");
    let (frame, code) = heap.frame_running(name);
    let tstate = heap.alloc(512);
    heap.put(tstate + heap.field("tstate.frame"), frame, 8);
    (heap, tstate, code)
}

impl Heap {
    /// A 3.9 frame at its fourth instruction (line 11) of a new code object named `name`, in
    /// a.py from line 10; returns the frame's and the code object's addresses.
    pub fn frame_running(&mut self, name: &str) -> (u64, u64) {
        let function = self.str(name, true);
        let file = self.str("a.py", true);
        let sval = self.field("bytes.ob_sval");
        // co_lnotab: bytes 0-3 on the first line, then one line on.
        let table = self.object(BYTES_TYPE, sval + 8);
        self.put(table + self.field("varobject.ob_size"), 2, 8);
        self.put(
            table + sval,
            u64::from_le_bytes([4, 1, 0, 0, 0, 0, 0, 0]),
            8,
        );
        let code = self.object(CODE_TYPE, 256);
        self.put(code + self.field("code.co_name"), function, 8);
        self.put(code + self.field("code.co_filename"), file, 8);
        self.put(code + self.field("code.co_firstlineno"), 10, 4);
        self.put(code + self.field("code.co_linetable"), table, 8);
        let frame = self.alloc(512);
        self.put(frame + self.field("frame.f_code"), code, 8);
        self.put(frame + self.field("frame.f_lasti"), 6, 4);
        (frame, code)
    }
}

/// A reader of the test heap's objects for `version`.
pub fn reader_of(layout: &Layout, version: PyVersion) -> StackReader {
    let types = TypeObjects {
        str: Some(RemoteAddr(STR_TYPE)),
        code: Some(RemoteAddr(CODE_TYPE)),
        bytes: Some(RemoteAddr(BYTES_TYPE)),
        ..TypeObjects::default()
    };
    let objects = ObjectReader::new(layout, version, types).unwrap();
    StackReader::new(layout, version, objects).unwrap()
}

/// The heap as a target's memory.
pub fn memory(heap: &Heap) -> SnapshotMemory {
    let mut mem = SnapshotMemory::new();
    mem.insert(RemoteAddr(BASE), heap.bytes.clone());
    mem
}
