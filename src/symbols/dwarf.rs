//! Struct layouts from DWARF: the offset and size of a member path such as `pyruntimestate` →
//! `ceval.gil.locked`, read with gimli from an interpreter build (or its separate debug file).
//!
//! Only complete definitions count (a `DW_AT_declaration` is skipped), anonymous struct and union
//! members are searched through, and typedef/const/volatile/_Atomic wrappers are looked through. A root
//! written `typedef NAME` names a typedef of an anonymous struct (`PyDictObject`, `PyASCIIObject`), as
//! most of CPython's object structs are. A bit-field member answers with its storage bytes and the
//! bits it takes in them (`FieldInfo::bits`).
//! Compressed debug sections (`SHF_COMPRESSED`, zlib), as Debian's `-dbg` packages ship them, are
//! inflated first.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use gimli::{
    AttributeValue, DebugInfoOffset, EndianSlice, RunTimeEndian, SectionId, Unit, UnitOffset,
};
use goblin::elf::{Elf, section_header::SHF_COMPRESSED};

use crate::error::{Error, Result};
use crate::symbols::elf::ElfImage;

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// Where a member sits inside its root struct, and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldInfo {
    /// Byte offset of the member from the start of its root struct.
    pub offset: u64,
    /// The member's size in bytes.
    pub size: u64,
    /// For a bit-field: which bits of the little-endian value in `offset..offset + size` hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<BitRange>,
}

/// The bits of a bit-field inside the bytes its `FieldInfo` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BitRange {
    /// The lowest bit of the field.
    pub shift: u32,
    /// How many bits it has.
    pub width: u32,
}

impl FieldInfo {
    /// A plain (not bit-field) member.
    pub const fn at(offset: u64, size: u64) -> FieldInfo {
        FieldInfo {
            offset,
            size,
            bits: None,
        }
    }
}

/// A request: the struct tag that is the root, and a dotted member path (empty: the struct itself).
#[derive(Clone, Copy, Debug)]
pub struct FieldQuery<'q> {
    /// The struct tag (or typedef) the path starts from.
    pub root: &'q str,
    /// The dotted member path from it, `ceval.gil`.
    pub path: &'q str,
}

/// Answers each query against the DWARF in `image`; `None` where the build has no such member.
pub fn find_fields(image: &ElfImage, queries: &[FieldQuery<'_>]) -> Result<Vec<Option<FieldInfo>>> {
    find_fields_parsed(image, &image.parse()?, queries)
}

/// `find_fields` for an image already parsed as `elf`.
pub fn find_fields_parsed(
    image: &ElfImage,
    elf: &Elf<'_>,
    queries: &[FieldQuery<'_>],
) -> Result<Vec<Option<FieldInfo>>> {
    let sections = load_sections(elf, image)?;
    let endian = if elf.little_endian {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(
        |id: SectionId| -> std::result::Result<Reader<'_>, gimli::Error> {
            let data = sections.get(id.name()).map(|c| c.as_ref()).unwrap_or(&[]);
            Ok(EndianSlice::new(data, endian))
        },
    )
    .map_err(|e| dwarf_error(image, e))?;

    let mut roots: Vec<&str> = queries.iter().map(|q| q.root).collect();
    roots.sort_unstable();
    roots.dedup();
    let mut found: HashMap<&str, (DebugInfoOffset, UnitOffset)> = HashMap::new();
    let mut headers = dwarf.units();
    while found.len() < roots.len() {
        let Some(header) = headers.next().map_err(|e| dwarf_error(image, e))? else {
            break;
        };
        let unit_offset = DebugInfoOffset(header.offset().0);
        let unit = dwarf.unit(header).map_err(|e| dwarf_error(image, e))?;
        for (name, offset) in find_struct_definitions(&dwarf, &unit, &roots, &found)
            .map_err(|e| dwarf_error(image, e))?
        {
            found.insert(name, (unit_offset, offset));
        }
    }

    let mut units: HashMap<DebugInfoOffset, Unit<Reader<'_>>> = HashMap::new();
    let mut answers = Vec::with_capacity(queries.len());
    for query in queries {
        let Some(&(unit_offset, die)) = found.get(query.root) else {
            answers.push(None);
            continue;
        };
        let unit = match units.entry(unit_offset) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let header = dwarf
                    .unit_header(unit_offset)
                    .map_err(|e| dwarf_error(image, e))?;
                entry.insert(dwarf.unit(header).map_err(|e| dwarf_error(image, e))?)
            }
        };
        let path: Vec<&str> = if query.path.is_empty() {
            Vec::new()
        } else {
            query.path.split('.').collect()
        };
        answers.push(resolve_path(&dwarf, unit, die, &path).ok().flatten());
    }
    Ok(answers)
}

fn dwarf_error(image: &ElfImage, e: gimli::Error) -> Error {
    Error::Binary {
        path: image.path.clone(),
        why: format!("unreadable DWARF: {e}"),
    }
}

/// The `.debug_*` sections, inflated where compressed.
fn load_sections<'a>(
    elf: &Elf<'_>,
    image: &'a ElfImage,
) -> Result<HashMap<&'static str, Cow<'a, [u8]>>> {
    let bytes = image.bytes();
    let mut out = HashMap::new();
    for id in [
        SectionId::DebugAbbrev,
        SectionId::DebugInfo,
        SectionId::DebugStr,
        SectionId::DebugLineStr,
        SectionId::DebugStrOffsets,
        SectionId::DebugAddr,
        SectionId::DebugRngLists,
        SectionId::DebugRanges,
        SectionId::DebugLine,
        SectionId::DebugLoc,
        SectionId::DebugLocLists,
    ] {
        let Some(sh) = elf
            .section_headers
            .iter()
            .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(id.name()))
        else {
            continue;
        };
        let range = sh.sh_offset as usize..(sh.sh_offset.saturating_add(sh.sh_size)) as usize;
        let raw = bytes.get(range).ok_or_else(|| Error::Binary {
            path: image.path.clone(),
            why: format!("section {} lies outside the file", id.name()),
        })?;
        let data = if sh.sh_flags & u64::from(SHF_COMPRESSED) != 0 {
            Cow::Owned(inflate_section(raw).ok_or_else(|| Error::Binary {
                path: image.path.clone(),
                why: format!(
                    "section {} is compressed in a way gilsample cannot read",
                    id.name()
                ),
            })?)
        } else {
            Cow::Borrowed(raw)
        };
        out.insert(id.name(), data);
    }
    if !out.contains_key(".debug_info") {
        return Err(Error::Binary {
            path: image.path.clone(),
            why: "has no DWARF (.debug_info)".into(),
        });
    }
    Ok(out)
}

/// Inflates an `Elf64_Chdr`-prefixed zlib section (ch_type 1 = ELFCOMPRESS_ZLIB).
fn inflate_section(raw: &[u8]) -> Option<Vec<u8>> {
    let ch_type = u32::from_le_bytes(raw.get(0..4)?.try_into().ok()?);
    let ch_size = u64::from_le_bytes(raw.get(8..16)?.try_into().ok()?);
    if ch_type != 1 || ch_size > 1 << 32 {
        return None;
    }
    let data =
        miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(raw.get(24..)?, ch_size as usize)
            .ok()?;
    (data.len() as u64 == ch_size).then_some(data)
}

/// Complete struct definitions in `unit` whose tag name is one of `roots` and not yet found.
fn find_struct_definitions<'q>(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    roots: &[&'q str],
    found: &HashMap<&'q str, (DebugInfoOffset, UnitOffset)>,
) -> gimli::Result<Vec<(&'q str, UnitOffset)>> {
    let mut hits: Vec<(&'q str, UnitOffset)> = Vec::new();
    let mut entries = unit.entries();
    while let Some(entry) = entries.next_dfs()? {
        let typedef = match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => false,
            gimli::DW_TAG_typedef => true,
            _ => continue,
        };
        if entry.attr(gimli::DW_AT_declaration).is_some() {
            continue;
        }
        let Some(name) = entry.attr_value(gimli::DW_AT_name) else {
            continue;
        };
        let name = dwarf.attr_string(unit, name)?;
        let Some(root) = roots.iter().find(|r| {
            let wanted = match r.strip_prefix(TYPEDEF_PREFIX) {
                Some(typedef_name) if typedef => typedef_name,
                None if !typedef => r,
                _ => return false,
            };
            wanted.as_bytes() == name.slice()
        }) else {
            continue;
        };
        // A typedef counts only where it names a complete definition in this unit.
        if typedef && !names_a_definition(unit, entry.offset())? {
            continue;
        }
        if !found.contains_key(root) && !hits.iter().any(|(n, _)| n == root) {
            hits.push((root, entry.offset()));
        }
    }
    Ok(hits)
}

/// Roots of this form name a typedef rather than a struct tag.
pub const TYPEDEF_PREFIX: &str = "typedef ";

/// Whether the typedef at `offset` leads to a struct or union with members (not a declaration).
fn names_a_definition(unit: &Unit<Reader<'_>>, offset: UnitOffset) -> gimli::Result<bool> {
    let Some(target) = strip_wrappers(unit, offset)? else {
        return Ok(false);
    };
    let entry = unit.entry(target)?;
    Ok(matches!(
        entry.tag(),
        gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type
    ) && entry.attr(gimli::DW_AT_declaration).is_none())
}

/// Follows typedef, const, volatile and _Atomic to the underlying type.
fn strip_wrappers(
    unit: &Unit<Reader<'_>>,
    mut offset: UnitOffset,
) -> gimli::Result<Option<UnitOffset>> {
    for _ in 0..16 {
        let entry = unit.entry(offset)?;
        match entry.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type => match entry.attr_value(gimli::DW_AT_type) {
                Some(AttributeValue::UnitRef(next)) => offset = next,
                _ => return Ok(None),
            },
            _ => return Ok(Some(offset)),
        }
    }
    Ok(None)
}

fn type_size(unit: &Unit<Reader<'_>>, offset: UnitOffset) -> gimli::Result<Option<u64>> {
    let Some(offset) = strip_wrappers(unit, offset)? else {
        return Ok(None);
    };
    let entry = unit.entry(offset)?;
    if let Some(size) = entry
        .attr_value(gimli::DW_AT_byte_size)
        .and_then(|v| v.udata_value())
    {
        return Ok(Some(size));
    }
    match entry.tag() {
        gimli::DW_TAG_pointer_type => Ok(Some(u64::from(unit.header.address_size()))),
        gimli::DW_TAG_array_type => array_size(unit, offset),
        _ => Ok(None),
    }
}

/// An array's size: element size times count, 0 for a flexible array member (`dk_indices[]`).
fn array_size(unit: &Unit<Reader<'_>>, offset: UnitOffset) -> gimli::Result<Option<u64>> {
    let entry = unit.entry(offset)?;
    let Some(AttributeValue::UnitRef(element)) = entry.attr_value(gimli::DW_AT_type) else {
        return Ok(None);
    };
    let Some(element_size) = type_size(unit, element)? else {
        return Ok(None);
    };
    let mut entries = unit.entries_at_offset(offset)?;
    let _ = entries.next_dfs()?;
    let mut count = 1u64;
    let mut dimensions = 0;
    while let Some(child) = entries.next_dfs()? {
        if child.depth() <= 0 {
            break;
        }
        if child.depth() != 1 || child.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        dimensions += 1;
        let n = if let Some(n) = child
            .attr_value(gimli::DW_AT_count)
            .and_then(|v| v.udata_value())
        {
            n
        } else if let Some(upper) = child
            .attr_value(gimli::DW_AT_upper_bound)
            .and_then(|v| v.udata_value())
        {
            upper.saturating_add(1)
        } else {
            0
        };
        count = count.saturating_mul(n);
    }
    Ok((dimensions > 0).then(|| element_size.saturating_mul(count)))
}

fn resolve_path(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    root: UnitOffset,
    path: &[&str],
) -> gimli::Result<Option<FieldInfo>> {
    let mut offset = 0u64;
    let mut current = root;
    let mut bits = None;
    for name in path {
        if bits.is_some() {
            return Ok(None); // a bit-field has no members
        }
        let Some(container) = strip_wrappers(unit, current)? else {
            return Ok(None);
        };
        let Some(member) = find_member(dwarf, unit, container, name, 0)? else {
            return Ok(None);
        };
        offset += member.offset;
        current = member.ty;
        bits = member.bits;
    }
    let Some(size) = type_size(unit, current)? else {
        return Ok(None);
    };
    Ok(Some(match bits {
        None => FieldInfo::at(offset, size),
        Some(bits) => bit_field(offset, size, bits),
    }))
}

/// Where a bit-field's bits lie, as DWARF gives them: `DW_AT_data_bit_offset` (from the start of the
/// struct, DWARF 4+), or `DW_AT_bit_offset` counted from the most significant bit of a storage unit at
/// the member's location (DWARF 2/3; little-endian targets).
#[derive(Clone, Copy, Debug)]
enum MemberBits {
    FromStart { bit_offset: u64, width: u64 },
    FromStorageTop { bit_offset: u64, width: u64 },
}

/// The bytes to read for a bit-field and its bits in them. `offset` is the member's byte location
/// (0 for `FromStart`, which counts from the container) plus the containers' offsets.
fn bit_field(offset: u64, storage: u64, bits: MemberBits) -> FieldInfo {
    let (first_bit, width) = match bits {
        MemberBits::FromStart { bit_offset, width } => (offset * 8 + bit_offset, width),
        MemberBits::FromStorageTop { bit_offset, width } => (
            (offset * 8 + storage * 8).saturating_sub(bit_offset + width),
            width,
        ),
    };
    let byte = first_bit / 8;
    let shift = first_bit % 8;
    let needed = (shift + width).div_ceil(8);
    let size = [1, 2, 4, 8].into_iter().find(|&s| s >= needed).unwrap_or(8);
    FieldInfo {
        offset: byte,
        size,
        bits: Some(BitRange {
            shift: shift as u32,
            width: width as u32,
        }),
    }
}

/// A member found by name: its byte location, type, and bit-field position where it is one.
struct Member {
    offset: u64,
    ty: UnitOffset,
    bits: Option<MemberBits>,
}

/// Finds member `name` of the struct or union at `container`, descending into anonymous members.
fn find_member(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    container: UnitOffset,
    name: &str,
    nesting: u32,
) -> gimli::Result<Option<Member>> {
    if nesting > 8 {
        return Ok(None);
    }
    let mut anonymous = Vec::new();
    let mut entries = unit.entries_at_offset(container)?;
    let _ = entries.next_dfs()?;
    while let Some(entry) = entries.next_dfs()? {
        if entry.depth() <= 0 {
            break;
        }
        if entry.depth() != 1 || entry.tag() != gimli::DW_TAG_member {
            continue;
        }
        let location = entry
            .attr_value(gimli::DW_AT_data_member_location)
            .and_then(|v| v.udata_value())
            .unwrap_or(0);
        let Some(AttributeValue::UnitRef(member_type)) = entry.attr_value(gimli::DW_AT_type) else {
            continue;
        };
        match entry.attr_value(gimli::DW_AT_name) {
            Some(attr) => {
                if dwarf.attr_string(unit, attr)?.slice() == name.as_bytes() {
                    let udata = |at| entry.attr_value(at).and_then(|v| v.udata_value());
                    let bits = match (
                        udata(gimli::DW_AT_bit_size),
                        udata(gimli::DW_AT_data_bit_offset),
                        udata(gimli::DW_AT_bit_offset),
                    ) {
                        (Some(width), Some(bit_offset), _) => {
                            Some(MemberBits::FromStart { bit_offset, width })
                        }
                        (Some(width), None, Some(bit_offset)) => {
                            Some(MemberBits::FromStorageTop { bit_offset, width })
                        }
                        (Some(width), None, None) => Some(MemberBits::FromStart {
                            bit_offset: 0,
                            width,
                        }),
                        _ => None,
                    };
                    return Ok(Some(Member {
                        offset: location,
                        ty: member_type,
                        bits,
                    }));
                }
            }
            None => anonymous.push((location, member_type)),
        }
    }
    for (location, member_type) in anonymous {
        let Some(inner) = strip_wrappers(unit, member_type)? else {
            continue;
        };
        if let Some(mut member) = find_member(dwarf, unit, inner, name, nesting + 1)? {
            member.offset += location;
            return Ok(Some(member));
        }
    }
    Ok(None)
}
