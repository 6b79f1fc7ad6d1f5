//! Reading `dict`s: their keys table (before 3.11 `dk_size` slots and hashed entries; from 3.11
//! `dk_log2_size`, `dk_log2_index_bytes` and `dk_kind`, string-keyed tables without hashes), split
//! tables whose values live apart (`ma_values`, or an instance's values), and lookups by string key.

use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::symbols::dwarf::FieldInfo;

use super::{
    KeysTable, MAX_DICT_ENTRIES, MAX_LOG2_DICT_SIZE, ObjectError, ObjectReader, ObjectResult,
    check_object_pointer, field_value,
};

impl ObjectReader {
    /// The (key, value) pairs of a `dict`, at most `max` of them.
    pub fn dict_items(
        &self,
        mem: &dyn MemorySource,
        dict: RemoteAddr,
        max: u64,
    ) -> ObjectResult<Vec<(RemoteAddr, RemoteAddr)>> {
        check_object_pointer(dict)?;
        let mut header = vec![0u8; (self.ma_keys.max(self.ma_values) + 8) as usize];
        mem.read_into(dict, &mut header)?;
        self.check_type(&header, self.types.dict)?;
        let keys = RemoteAddr(field_value(&header, FieldInfo::at(self.ma_keys, 8))?);
        let values = RemoteAddr(field_value(&header, FieldInfo::at(self.ma_values, 8))?);
        let values = (!values.is_null()).then(|| RemoteAddr(values.0 + self.values_at));
        self.keys_items(mem, keys, values, max)
    }

    /// The (key, value) pairs of a keys table, the values from `values` when the dict is split.
    pub(super) fn keys_items(
        &self,
        mem: &dyn MemorySource,
        keys: RemoteAddr,
        values: Option<RemoteAddr>,
        max: u64,
    ) -> ObjectResult<Vec<(RemoteAddr, RemoteAddr)>> {
        check_object_pointer(keys)?;
        let mut header = vec![0u8; self.dk_indices as usize];
        mem.read_into(keys, &mut header)?;
        let (slots, indices_bytes, entry) = match self.table {
            KeysTable::Sized { size } => {
                let slots = field_value(&header, size)?;
                if !slots.is_power_of_two() || slots > 1 << MAX_LOG2_DICT_SIZE {
                    return Err(ObjectError::Torn("a dict size that is not a power of two"));
                }
                // DK_IXSIZE: the narrowest index that holds every slot number.
                let width = match slots {
                    s if s <= 0xff => 1,
                    s if s <= 0xffff => 2,
                    s if s <= 0xffff_ffff => 4,
                    _ => 8,
                };
                (slots, slots * width, self.entry)
            }
            KeysTable::Log2 {
                log2_size,
                log2_index_bytes,
                kind,
                unicode_entry,
            } => {
                let log2 = field_value(&header, log2_size)?;
                let log2_index = field_value(&header, log2_index_bytes)?;
                // The index table is 1 << log2_index_bytes bytes: one to eight per slot.
                if log2 > MAX_LOG2_DICT_SIZE || log2_index < log2 || log2_index > log2 + 3 {
                    return Err(ObjectError::Torn("a dict size out of bounds"));
                }
                // DICT_KEYS_GENERAL = 0; UNICODE = 1 and SPLIT = 2 hold string keys without hashes.
                let entry = match field_value(&header, kind)? {
                    0 => self.entry,
                    1 | 2 => unicode_entry,
                    _ => return Err(ObjectError::Torn("a dict keys kind out of range")),
                };
                (1u64 << log2, 1u64 << log2_index, entry)
            }
        };
        let nentries = field_value(&header, self.dk_nentries)? as i64;
        if nentries < 0 || nentries as u64 > slots {
            return Err(ObjectError::Torn("more dict entries than slots"));
        }
        let n = (nentries as u64).min(max);
        let entries_at = keys.0 + self.dk_indices + indices_bytes;
        let mut entries = vec![0u8; (n * entry.size) as usize];
        mem.read_into(RemoteAddr(entries_at), &mut entries)?;
        let mut value_words = vec![0u8; if values.is_some() { n as usize * 8 } else { 0 }];
        if let Some(values) = values {
            check_object_pointer(values)?;
            mem.read_into(values, &mut value_words)?;
        }
        let mut items = Vec::with_capacity(n as usize);
        for i in 0..n {
            let at = i * entry.size;
            let key = field_value(&entries, FieldInfo::at(at + entry.key, 8))?;
            let value = match values {
                Some(_) => field_value(&value_words, FieldInfo::at(i * 8, 8))?,
                None => field_value(&entries, FieldInfo::at(at + entry.value, 8))?,
            };
            if key != 0 && value != 0 {
                items.push((RemoteAddr(key), RemoteAddr(value)));
            }
        }
        Ok(items)
    }

    /// The value under string key `name` in a dict's items.
    pub(super) fn find_str_key(
        &self,
        mem: &dyn MemorySource,
        items: &[(RemoteAddr, RemoteAddr)],
        name: &str,
    ) -> ObjectResult<RemoteAddr> {
        items
            .iter()
            .find(|(key, _)| self.str_equals(mem, *key, name))
            .map(|&(_, value)| value)
            .ok_or(ObjectError::Absent)
    }

    /// `dict[name]` for a string key.
    pub fn dict_get(
        &self,
        mem: &dyn MemorySource,
        dict: RemoteAddr,
        name: &str,
    ) -> ObjectResult<RemoteAddr> {
        let items = self.dict_items(mem, dict, MAX_DICT_ENTRIES)?;
        self.find_str_key(mem, &items, name)
    }
}
