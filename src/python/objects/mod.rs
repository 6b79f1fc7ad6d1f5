//! Reading Python objects out of the target: `str`, `int`, `dict`, a module's namespace and an
//! instance's attributes, as thread names (and stacks) need them.
//!
//! Every address comes from the target and may be stale, freed or torn by a concurrent change: each
//! object's type is checked against the interpreter's own type object where the binary exports it
//! (`PyDict_Type`, `PyUnicode_Type`, …), every size and count is bounded before anything is read with
//! it, and what does not decode is an error, never a guess. Offsets come from the layout (DWARF or
//! `_Py_DebugOffsets`); what is not a struct field — where the managed-dict word sits before an
//! object, the tag bits of an int — is CPython's own constant, named and cited where it is used.

use crate::addr::RemoteAddr;
use crate::process::memory::{MemorySource, ReadError};
use crate::python::layout::Layout;
use crate::python::version::PyVersion;
use crate::symbols::dwarf::FieldInfo;

mod dict;

/// Why an object could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectError {
    /// The memory could not be read (the target exited, or the address is unmapped).
    Read(ReadError),
    /// The bytes do not form the object expected: a stale pointer, a freed object, a torn read.
    Torn(&'static str),
    /// A well-formed object that is not what was asked for (another type, no such key).
    Absent,
}

impl From<ReadError> for ObjectError {
    fn from(e: ReadError) -> ObjectError {
        ObjectError::Read(e)
    }
}

/// The result of reading a Python object from the target.
pub type ObjectResult<T> = Result<T, ObjectError>;

/// The interpreter's own type objects, from the binary's symbols (absent ones skip the check).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeObjects {
    /// `PyDict_Type`'s address in the target.
    pub dict: Option<RemoteAddr>,
    /// `PyUnicode_Type`'s address.
    pub str: Option<RemoteAddr>,
    /// `PyLong_Type`'s address.
    pub int: Option<RemoteAddr>,
    /// `PyModule_Type`'s address.
    pub module: Option<RemoteAddr>,
    /// `PyCode_Type`'s address.
    pub code: Option<RemoteAddr>,
    /// `PyBytes_Type`'s address.
    pub bytes: Option<RemoteAddr>,
}

impl TypeObjects {
    /// The exported symbols that name them.
    pub const SYMBOLS: [&'static str; 6] = [
        "PyDict_Type",
        "PyUnicode_Type",
        "PyLong_Type",
        "PyModule_Type",
        "PyCode_Type",
        "PyBytes_Type",
    ];
}

/// No dict gilsample reads has more entries: `sys.modules` of a large program has a few thousand.
pub const MAX_DICT_ENTRIES: u64 = 1 << 16;
/// The largest dict table (slots) accepted: `MAX_DICT_ENTRIES` fit in it.
const MAX_LOG2_DICT_SIZE: u64 = 18;

/// `Py_TPFLAGS_MANAGED_DICT` (Include/object.h, 3.11+) and `Py_TPFLAGS_INLINE_VALUES` (3.13+).
const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;

/// Where an instance keeps its attributes, by version (Include/internal/pycore_object.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InstanceDict {
    /// Before 3.11: a dict pointer at the type's `tp_dictoffset`.
    DictOffset,
    /// 3.11: `_PyObject_ManagedDictPointer` (the word before the GC header) holds a dict, or NULL
    /// and `_PyObject_ValuesPointer` (the word before that) the values of the type's cached keys.
    DictOrValuesPointer,
    /// 3.12: one tagged word there: a dict, or (low bit set) the values pointer minus one.
    TaggedDictOrValues,
    /// 3.13+: a dict there, or NULL and the values inline at `tp_basicsize` (`valid` says current).
    InlineValues,
}

/// How a dict's keys table is laid out.
#[derive(Clone, Copy, Debug)]
enum KeysTable {
    /// Before 3.11: `dk_size` slots, index width from the size (Objects/dict-common.h).
    Sized { size: FieldInfo },
    /// 3.11+: `dk_log2_size`, `dk_log2_index_bytes` and `dk_kind` (general or string-keyed entries).
    Log2 {
        log2_size: FieldInfo,
        log2_index_bytes: FieldInfo,
        kind: FieldInfo,
        unicode_entry: Entry,
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    key: u64,
    value: u64,
}

/// The offsets that object reading needs, checked complete once.
#[derive(Clone, Debug)]
pub struct ObjectReader {
    ob_type: u64,
    ob_size: u64,
    tp_basicsize: u64,
    tp_dictoffset: u64,
    tp_flags: u64,
    type_bytes: u64,
    ht_cached_keys: u64,
    /// Where the managed-dict word sits relative to the object: `MANAGED_DICT_OFFSET`, -3 words,
    /// which is the word before the `PyGC_Head` that precedes every GC object.
    managed_dict_at: i64,
    instance_dict: InstanceDict,
    ma_keys: u64,
    ma_values: u64,
    dk_nentries: FieldInfo,
    dk_indices: u64,
    table: KeysTable,
    entry: Entry,
    values_at: u64,
    values_valid: Option<u64>,
    md_dict: u64,
    str_header: u64,
    compact_str_header: u64,
    str_length: u64,
    str_kind: FieldInfo,
    str_compact: FieldInfo,
    str_ascii: FieldInfo,
    digits_at: u64,
    digit_bytes: u64,
    lv_tag: Option<u64>,
    bytes_data: Option<u64>,
    /// The type objects reads are checked against.
    pub types: TypeObjects,
}

impl ObjectReader {
    /// The reader for `layout`, or which field it lacks.
    pub fn new(
        layout: &Layout,
        version: PyVersion,
        types: TypeObjects,
    ) -> Result<ObjectReader, String> {
        let get = |name: &str| {
            layout
                .field(name)
                .ok_or_else(|| format!("layout {} lacks {name}", layout.key()))
        };
        let entry = |prefix: &str| -> Result<Entry, String> {
            Ok(Entry {
                size: get(prefix)?.size,
                key: get(&format!("{prefix}.me_key"))?.offset,
                value: get(&format!("{prefix}.me_value"))?.offset,
            })
        };
        let minor = (version.major, version.minor);
        let instance_dict = match minor {
            m if m < (3, 11) => InstanceDict::DictOffset,
            (3, 11) => InstanceDict::DictOrValuesPointer,
            (3, 12) => InstanceDict::TaggedDictOrValues,
            _ => InstanceDict::InlineValues,
        };
        let table = match layout.field("dictkeys.dk_size") {
            Some(size) => KeysTable::Sized { size },
            None => KeysTable::Log2 {
                log2_size: get("dictkeys.dk_log2_size")?,
                log2_index_bytes: get("dictkeys.dk_log2_index_bytes")?,
                kind: get("dictkeys.dk_kind")?,
                unicode_entry: entry("dict_unicode_entry")?,
            },
        };
        let type_fields = [
            get("type.tp_basicsize")?,
            get("type.tp_dictoffset")?,
            get("type.tp_flags")?,
            get("heaptype.ht_cached_keys")?,
        ];
        let ptr = 8i64;
        let managed_dict_at = match instance_dict {
            InstanceDict::DictOffset => 0,
            _ => -(get("gc_head")?.size as i64) - ptr,
        };
        let lv_tag = layout.field("long.lv_tag").map(|f| f.offset);
        let digit_bytes = get("long.ob_digit")?.size;
        if digit_bytes != 2 && digit_bytes != 4 {
            return Err(format!("an int digit of {digit_bytes} bytes"));
        }
        let values = layout.field("dictvalues.values");
        Ok(ObjectReader {
            ob_type: get("object.ob_type")?.offset,
            ob_size: get("varobject.ob_size")?.offset,
            tp_basicsize: type_fields[0].offset,
            tp_dictoffset: type_fields[1].offset,
            tp_flags: type_fields[2].offset,
            ht_cached_keys: type_fields[3].offset,
            type_bytes: type_fields
                .iter()
                .map(|f| f.offset + f.size)
                .max()
                .unwrap_or(0),
            managed_dict_at,
            instance_dict,
            ma_keys: get("dict.ma_keys")?.offset,
            ma_values: get("dict.ma_values")?.offset,
            dk_nentries: get("dictkeys.dk_nentries")?,
            dk_indices: get("dictkeys.dk_indices")?.offset,
            table,
            entry: entry("dict_entry")?,
            // Before 3.11 `ma_values` is the `PyObject **` array itself.
            values_at: values.map(|f| f.offset).unwrap_or(0),
            values_valid: layout.field("dictvalues.valid").map(|f| f.offset),
            md_dict: get("module.md_dict")?.offset,
            str_header: get("str")?.size,
            compact_str_header: get("compact_str")?.size,
            str_length: get("str.length")?.offset,
            str_kind: get("str.state.kind")?,
            str_compact: get("str.state.compact")?,
            str_ascii: get("str.state.ascii")?,
            digits_at: get("long.ob_digit")?.offset,
            digit_bytes,
            lv_tag,
            bytes_data: layout.field("bytes.ob_sval").map(|f| f.offset),
            types,
        })
    }

    fn word(&self, mem: &dyn MemorySource, addr: RemoteAddr, offset: i64) -> ObjectResult<u64> {
        let at = RemoteAddr(addr.0.wrapping_add_signed(offset));
        Ok(mem.read_u64(at)?)
    }

    fn pointer(
        &self,
        mem: &dyn MemorySource,
        addr: RemoteAddr,
        offset: u64,
    ) -> ObjectResult<RemoteAddr> {
        let value = RemoteAddr(self.word(mem, addr, offset as i64)?);
        if value.is_null() || value.is_plausible_pointer(8) {
            Ok(value)
        } else {
            Err(ObjectError::Torn("a pointer that cannot be one"))
        }
    }

    /// Checks that `addr` is an object of type `expected` (where that type is known), given its bytes.
    fn check_type(&self, header: &[u8], expected: Option<RemoteAddr>) -> ObjectResult<()> {
        let ob_type = field_value(header, FieldInfo::at(self.ob_type, 8))?;
        match expected {
            Some(t) if t.0 != ob_type => Err(ObjectError::Absent),
            _ if !RemoteAddr(ob_type).is_plausible_pointer(8) => {
                Err(ObjectError::Torn("an object without a type"))
            }
            _ => Ok(()),
        }
    }

    /// A `str` of at most `max_chars` characters.
    pub fn read_str(
        &self,
        mem: &dyn MemorySource,
        addr: RemoteAddr,
        max_chars: u64,
    ) -> ObjectResult<String> {
        check_object_pointer(addr)?;
        // Header and a short string's characters in one read; a string near the end of a mapping
        // faults that read, so then header and characters are read apart.
        // (An ASCII string's header is the shorter one; the fields read here are all in it.)
        let mut buf = vec![0u8; self.compact_str_header as usize + 64];
        let whole = mem.read_into(addr, &mut buf).is_ok();
        if !whole {
            buf.truncate(self.str_header as usize);
            mem.read_into(addr, &mut buf)?;
        }
        self.check_type(&buf, self.types.str)?;
        let length = field_value(&buf, FieldInfo::at(self.str_length, 8))? as i64;
        if length < 0 || length as u64 > max_chars {
            return Err(ObjectError::Torn("a string length out of bounds"));
        }
        let kind = field_value(&buf, self.str_kind)?;
        let compact = field_value(&buf, self.str_compact)?;
        let ascii = field_value(&buf, self.str_ascii)?;
        if compact != 1 || !matches!(kind, 1 | 2 | 4) || (ascii == 1 && kind != 1) {
            return Err(ObjectError::Torn("a string that is not a compact str"));
        }
        let data_at = if ascii == 1 {
            self.str_header
        } else {
            self.compact_str_header
        } as usize;
        let n = length as usize * kind as usize;
        let data: Vec<u8> = if whole && data_at + n <= buf.len() {
            buf[data_at..data_at + n].to_vec()
        } else {
            let mut data = vec![0u8; n];
            mem.read_into(RemoteAddr(addr.0 + data_at as u64), &mut data)?;
            data
        };
        decode_str(&data, kind, ascii == 1)
    }

    /// A `bytes` object's contents, at most `max` of them.
    pub fn read_bytes(
        &self,
        mem: &dyn MemorySource,
        addr: RemoteAddr,
        max: u64,
    ) -> ObjectResult<Vec<u8>> {
        check_object_pointer(addr)?;
        let data_at = self.bytes_data.ok_or(ObjectError::Absent)?;
        let mut header = vec![0u8; data_at as usize];
        mem.read_into(addr, &mut header)?;
        self.check_type(&header, self.types.bytes)?;
        let size = field_value(&header, FieldInfo::at(self.ob_size, 8))? as i64;
        if size < 0 || size as u64 > max {
            return Err(ObjectError::Torn("a bytes size out of bounds"));
        }
        let mut data = vec![0u8; size as usize];
        mem.read_into(RemoteAddr(addr.0 + data_at), &mut data)?;
        Ok(data)
    }

    /// Whether the object whose first bytes are `header` has type `expected` (unknown types pass
    /// when the type pointer is plausible).
    pub fn has_type(&self, header: &[u8], expected: Option<RemoteAddr>) -> bool {
        self.check_type(header, expected).is_ok()
    }

    /// Whether `addr` is a `str` equal to `wanted` (one read; anything else is `false`).
    pub fn str_equals(&self, mem: &dyn MemorySource, addr: RemoteAddr, wanted: &str) -> bool {
        self.read_str(mem, addr, wanted.chars().count() as u64)
            .is_ok_and(|s| s == wanted)
    }

    /// A non-negative `int` that fits in 64 bits (a thread ident).
    pub fn read_u64_int(&self, mem: &dyn MemorySource, addr: RemoteAddr) -> ObjectResult<u64> {
        check_object_pointer(addr)?;
        let mut buf = vec![0u8; self.digits_at as usize + 4 * self.digit_bytes as usize];
        mem.read_into(addr, &mut buf)?;
        self.check_type(&buf, self.types.int)?;
        let digits = match self.lv_tag {
            // 3.12+: `lv_tag` = digit count << 3 | sign (0 positive, 1 zero, 2 negative);
            // Include/cpython/longintrepr.h, `_PyLong_NON_SIZE_BITS`.
            Some(at) => {
                let tag = field_value(&buf, FieldInfo::at(at, 8))?;
                match tag & 3 {
                    0 | 1 => tag >> 3,
                    _ => return Err(ObjectError::Absent),
                }
            }
            None => {
                let size = field_value(&buf, FieldInfo::at(self.ob_size, 8))? as i64;
                if size < 0 {
                    return Err(ObjectError::Absent);
                }
                size as u64
            }
        };
        let shift = if self.digit_bytes == 4 { 30 } else { 15 };
        // A u64 needs at most three 30-bit (five 15-bit) digits; the buffer holds four.
        if digits > 64u64.div_ceil(shift).min(4) {
            return Err(ObjectError::Absent);
        }
        let mut value: u128 = 0;
        for i in 0..digits {
            let at = self.digits_at + i * self.digit_bytes;
            let digit = field_value(&buf, FieldInfo::at(at, self.digit_bytes))?;
            if digit >> shift != 0 {
                return Err(ObjectError::Torn("an int digit out of range"));
            }
            value |= u128::from(digit) << (i * shift);
        }
        u64::try_from(value).map_err(|_| ObjectError::Absent)
    }

    /// A module's namespace dict.
    pub fn module_dict(
        &self,
        mem: &dyn MemorySource,
        module: RemoteAddr,
    ) -> ObjectResult<RemoteAddr> {
        check_object_pointer(module)?;
        let mut header = vec![0u8; (self.ob_type.max(self.md_dict) + 8) as usize];
        mem.read_into(module, &mut header)?;
        self.check_type(&header, self.types.module)?;
        let dict = RemoteAddr(field_value(&header, FieldInfo::at(self.md_dict, 8))?);
        check_object_pointer(dict)?;
        Ok(dict)
    }

    /// The instance attribute `name` of `obj`, from its `__dict__` or its values.
    pub fn attribute(
        &self,
        mem: &dyn MemorySource,
        obj: RemoteAddr,
        name: &str,
    ) -> ObjectResult<RemoteAddr> {
        check_object_pointer(obj)?;
        let ob_type = self.pointer(mem, obj, self.ob_type)?;
        check_object_pointer(ob_type)?;
        let mut ty = vec![0u8; self.type_bytes as usize];
        mem.read_into(ob_type, &mut ty)?;
        let flags = field_value(&ty, FieldInfo::at(self.tp_flags, 8))?;
        let cached_keys = || -> ObjectResult<RemoteAddr> {
            let keys = RemoteAddr(field_value(&ty, FieldInfo::at(self.ht_cached_keys, 8))?);
            check_object_pointer(keys)?;
            Ok(keys)
        };
        let from_values = |values: RemoteAddr| -> ObjectResult<RemoteAddr> {
            let items = self.keys_items(mem, cached_keys()?, Some(values), MAX_DICT_ENTRIES)?;
            self.find_str_key(mem, &items, name)
        };
        let managed = flags & TPFLAGS_MANAGED_DICT != 0;
        let dict = match self.instance_dict {
            InstanceDict::DictOffset => {
                let offset = field_value(&ty, FieldInfo::at(self.tp_dictoffset, 8))? as i64;
                if offset <= 0 {
                    return Err(ObjectError::Absent);
                }
                self.pointer(mem, obj, offset as u64)?
            }
            _ if !managed => return Err(ObjectError::Absent),
            InstanceDict::DictOrValuesPointer => {
                let dict = RemoteAddr(self.word(mem, obj, self.managed_dict_at)?);
                if dict.is_null() {
                    // `_PyObject_ValuesPointer`: the word before the managed dict.
                    let values = RemoteAddr(self.word(mem, obj, self.managed_dict_at - 8)?);
                    check_object_pointer(values)?;
                    return from_values(RemoteAddr(values.0 + self.values_at));
                }
                dict
            }
            InstanceDict::TaggedDictOrValues => {
                let word = self.word(mem, obj, self.managed_dict_at)?;
                if word & 1 == 1 {
                    // `_PyDictOrValues_GetValues`: the tagged word plus one.
                    return from_values(RemoteAddr(word.wrapping_add(1) + self.values_at));
                }
                RemoteAddr(word)
            }
            InstanceDict::InlineValues => {
                let dict = RemoteAddr(self.word(mem, obj, self.managed_dict_at)?);
                if dict.is_null() {
                    if flags & TPFLAGS_INLINE_VALUES == 0 {
                        return Err(ObjectError::Absent);
                    }
                    let basicsize = field_value(&ty, FieldInfo::at(self.tp_basicsize, 8))?;
                    if basicsize == 0 || basicsize > 1 << 16 {
                        return Err(ObjectError::Torn("a type size out of bounds"));
                    }
                    let values = RemoteAddr(obj.0 + basicsize);
                    if let Some(valid) = self.values_valid {
                        let mut byte = [0u8; 1];
                        mem.read_into(RemoteAddr(values.0 + valid), &mut byte)?;
                        if byte[0] != 1 {
                            return Err(ObjectError::Torn("inline values that are not current"));
                        }
                    }
                    return from_values(RemoteAddr(values.0 + self.values_at));
                }
                dict
            }
        };
        check_object_pointer(dict)?;
        self.dict_get(mem, dict, name)
    }
}

fn check_object_pointer(addr: RemoteAddr) -> ObjectResult<()> {
    if addr.is_plausible_pointer(8) {
        Ok(())
    } else {
        Err(ObjectError::Torn("an object pointer that cannot be one"))
    }
}

/// The little-endian value of `info` (a plain or bit-field member) inside `bytes`.
fn field_value(bytes: &[u8], info: FieldInfo) -> ObjectResult<u64> {
    let at = info.offset as usize;
    let raw = bytes
        .get(at..at.saturating_add(info.size as usize))
        .filter(|r| r.len() <= 8)
        .ok_or(ObjectError::Torn("a field outside what was read"))?;
    let mut word = [0u8; 8];
    word[..raw.len()].copy_from_slice(raw);
    let value = u64::from_le_bytes(word);
    Ok(match info.bits {
        None => value,
        Some(bits) if bits.width >= 64 => value >> bits.shift,
        Some(bits) => (value >> bits.shift) & ((1u64 << bits.width) - 1),
    })
}

/// A compact string's characters: `kind` bytes each; an ASCII string's must all be below 0x80.
fn decode_str(data: &[u8], kind: u64, ascii: bool) -> ObjectResult<String> {
    let units: Vec<u32> = match kind {
        1 => data.iter().map(|&b| u32::from(b)).collect(),
        2 => data
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        _ => data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    if ascii && units.iter().any(|&u| u >= 0x80) {
        return Err(ObjectError::Torn("an ASCII string with a non-ASCII byte"));
    }
    // A lone surrogate is a valid Python str but not Unicode text: shown as U+FFFD.
    Ok(units
        .into_iter()
        .map(|u| char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::dwarf::BitRange;

    #[test]
    fn bit_fields_decode_from_their_storage() {
        // PyASCIIObject.state: interned:2, kind:3, compact:1, ascii:1 — kind 1, compact, ascii.
        let state: u32 = (1 << 2) | (1 << 5) | (1 << 6);
        let bytes = state.to_le_bytes();
        let kind = FieldInfo {
            offset: 0,
            size: 1,
            bits: Some(BitRange { shift: 2, width: 3 }),
        };
        assert_eq!(field_value(&bytes, kind), Ok(1));
        let ascii = FieldInfo {
            offset: 0,
            size: 1,
            bits: Some(BitRange { shift: 6, width: 1 }),
        };
        assert_eq!(field_value(&bytes, ascii), Ok(1));
    }

    #[test]
    fn strings_decode_per_kind_and_ascii_is_checked() {
        assert_eq!(decode_str(b"prefetch-1", 1, true).unwrap(), "prefetch-1");
        let wide: Vec<u8> = "日志线程"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect();
        assert_eq!(decode_str(&wide, 2, false).unwrap(), "日志线程");
        assert!(decode_str(&[b'a', 0xe9], 1, true).is_err());
        assert_eq!(decode_str(&[b'a', 0xe9], 1, false).unwrap(), "aé");
    }
}
