//! The `debug-offsets` layout source (CPython 3.13+): `_PyRuntime` begins with `_Py_DebugOffsets`, a
//! table in which the running interpreter reports the offsets of its own structs. gilsample reads it
//! from the target's memory, so a build whose structs differ from every shipped layout (a distro patch,
//! other build options) is still read with the right offsets.
//!
//! The table's own shape differs between versions; where each entry sits inside it comes from the
//! version's layout (`debug_offsets.*` fields, generated from DWARF like every other field). The table
//! names only `locked` and `last_holder` of the GIL struct; its other fields (switch count, condition
//! variables, mutexes) come from the version's layout, which is accepted only when its `locked` and
//! `last_holder` agree with what the target reports. Checks follow pystack's: cookie, version,
//! free-threading flag, and every offset inside its struct.

use std::collections::BTreeMap;

use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;
use crate::python::layout::{Flavour, Layout};
use crate::python::version::PyVersion;
use crate::symbols::dwarf::FieldInfo;

/// The magic bytes `_Py_DebugOffsets` begins with (3.13+), which tell the table from anything else.
pub const COOKIE: &[u8; 8] = b"xdebugpy";
/// The table is a few hundred bytes; a descriptor claiming more is corrupt.
const MAX_TABLE_BYTES: u64 = 16 * 1024;

/// What the table says, beyond the offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reported {
    /// The interpreter's version as the table states it.
    pub version: PyVersion,
    /// The build is free-threaded (`Py_GIL_DISABLED`).
    pub free_threaded: bool,
}

/// Reads the target's `_Py_DebugOffsets` (at `runtime`) with `descriptor` telling where its entries
/// are, and returns a layout built from what the target reports, plus the flags it carries.
pub fn read_layout(
    mem: &dyn MemorySource,
    runtime: RemoteAddr,
    descriptor: &Layout,
    expected: PyVersion,
) -> Result<(Layout, Reported), String> {
    let table = descriptor.field("debug_offsets").ok_or_else(|| {
        format!(
            "layout {} does not describe _Py_DebugOffsets",
            descriptor.key()
        )
    })?;
    if table.size == 0 || table.size > MAX_TABLE_BYTES {
        return Err(format!("implausible _Py_DebugOffsets size {}", table.size));
    }
    let mut bytes = vec![0u8; table.size as usize];
    mem.read_into(runtime, &mut bytes)
        .map_err(|e| format!("cannot read _Py_DebugOffsets: {e:?}"))?;
    decode(&bytes, descriptor, expected)
}

/// The decoding half of `read_layout`, separate so it can be tested (and fuzzed) on plain bytes.
pub fn decode(
    bytes: &[u8],
    descriptor: &Layout,
    expected: PyVersion,
) -> Result<(Layout, Reported), String> {
    let entry = |name: &str| -> Result<u64, String> {
        let info = descriptor
            .field(&format!("debug_offsets.{name}"))
            .ok_or_else(|| format!("layout {} lacks debug_offsets.{name}", descriptor.key()))?;
        let at = info.offset as usize;
        let raw = bytes
            .get(at..at.saturating_add(8))
            .filter(|_| info.size == 8)
            .ok_or_else(|| format!("debug_offsets.{name} lies outside the table"))?;
        Ok(u64::from_le_bytes(raw.try_into().expect("8 bytes")))
    };
    if bytes.get(..8) != Some(&COOKIE[..]) {
        return Err("_PyRuntime does not start with the \"xdebugpy\" cookie".into());
    }
    let version = PyVersion::from_hex(entry("version")?);
    if (version.major, version.minor) != (expected.major, expected.minor) {
        return Err(format!(
            "_Py_DebugOffsets reports Python {version}, the binary says {expected}"
        ));
    }
    let free_threaded =
        descriptor.field("debug_offsets.free_threaded").is_some() && entry("free_threaded")? != 0;

    let runtime_size = entry("runtime_state.size")?;
    let interp_size = entry("interpreter_state.size")?;
    let tstate_size = entry("thread_state.size")?;
    let mut fields: BTreeMap<String, FieldInfo> = BTreeMap::new();
    put_walk_fields(
        &mut fields,
        &entry,
        StructSizes {
            runtime: runtime_size,
            interp: interp_size,
            tstate: tstate_size,
        },
    )?;
    put_gil_fields(&mut fields, descriptor, &entry)?;
    put_object_fields(&mut fields, descriptor, &entry)?;
    if free_threaded {
        // Free-threaded builds may run without the GIL; `enabled` (relative to the interpreter) says.
        let enabled = entry("interpreter_state.gil_runtime_state_enabled")?;
        if enabled == 0 || enabled >= interp_size {
            return Err(
                "free-threaded build without a usable gil_runtime_state_enabled offset".into(),
            );
        }
        fields.insert("interp.gil_enabled".into(), FieldInfo::at(enabled, 4));
    }
    let layout = Layout {
        version: descriptor.version.clone(),
        flavour: if free_threaded {
            Flavour::FreeThreaded
        } else {
            descriptor.flavour
        },
        arch: descriptor.arch.clone(),
        generated_from_version: version.to_string(),
        generated_from: "_Py_DebugOffsets of the target".into(),
        build_id: None,
        binary: None,
        fields,
    };
    layout.check()?;
    Ok((
        layout,
        Reported {
            version,
            free_threaded,
        },
    ))
}

/// The sizes the table reports of the structs the walk reads, which bound the offsets in them.
struct StructSizes {
    runtime: u64,
    interp: u64,
    tstate: u64,
}

/// The pointers and ids the walk of interpreters and threads reads, each checked to lie inside
/// its struct.
fn put_walk_fields(
    fields: &mut BTreeMap<String, FieldInfo>,
    entry: &dyn Fn(&str) -> Result<u64, String>,
    sizes: StructSizes,
) -> Result<(), String> {
    let within = |name: &str, limit: u64, width: u64| -> Result<FieldInfo, String> {
        let offset = entry(name)?;
        if offset.checked_add(width).is_none_or(|end| end > limit) {
            return Err(format!(
                "{name} = {offset} lies outside its {limit}-byte struct"
            ));
        }
        Ok(FieldInfo::at(offset, width))
    };
    // The pointers and ids the walk reads: our field, the table's entry, the struct it lies in.
    let words = [
        (
            "runtime.interpreters.head",
            "runtime_state.interpreters_head",
            sizes.runtime,
        ),
        ("interp.next", "interpreter_state.next", sizes.interp),
        (
            "interp.threads.head",
            "interpreter_state.threads_head",
            sizes.interp,
        ),
        (
            "interp.ceval.gil",
            "interpreter_state.ceval_gil",
            sizes.interp,
        ),
        ("tstate.next", "thread_state.next", sizes.tstate),
        ("tstate.interp", "thread_state.interp", sizes.tstate),
        ("tstate.thread_id", "thread_state.thread_id", sizes.tstate),
        (
            "tstate.native_thread_id",
            "thread_state.native_thread_id",
            sizes.tstate,
        ),
    ];
    for (key, name, limit) in words {
        fields.insert(key.to_string(), within(name, limit, 8)?);
    }
    Ok(())
}

fn put_gil_fields(
    fields: &mut BTreeMap<String, FieldInfo>,
    descriptor: &Layout,
    entry: &dyn Fn(&str) -> Result<u64, String>,
) -> Result<(), String> {
    // The GIL struct: `locked` and `last_holder` as the target reports them (relative to the embedded
    // `_gil` of the interpreter), the rest from the version's layout once those two agree.
    let gil_base = entry("interpreter_state.gil_runtime_state")?;
    let locked = entry("interpreter_state.gil_runtime_state_locked")?
        .checked_sub(gil_base)
        .ok_or("gil_runtime_state_locked lies before the GIL struct")?;
    let holder = entry("interpreter_state.gil_runtime_state_holder")?
        .checked_sub(gil_base)
        .ok_or("gil_runtime_state_holder lies before the GIL struct")?;
    let known_locked = descriptor.required("gil.locked").offset;
    let known_holder = descriptor.required("gil.last_holder").offset;
    if (locked, holder) != (known_locked, known_holder) {
        return Err(format!(
            "the target's GIL struct differs from layout {} (locked at {locked}, holder at {holder}; \
             expected {known_locked} and {known_holder})",
            descriptor.key()
        ));
    }
    for (name, info) in descriptor
        .fields
        .iter()
        .filter(|(n, _)| *n == "gil" || n.starts_with("gil."))
    {
        fields.insert(name.clone(), *info);
    }
    Ok(())
}

/// Field-name prefixes of the object fields (thread names, stacks): the version's layout gives
/// them, and the target's table overrides those it reports.
const OBJECT_FIELDS: &[&str] = &[
    "interp.modules",
    "tstate.frame",
    "tstate.cframe",
    "tstate.current_frame",
    "tstate.holds_gil",
    "tstate.gil_requested",
    "cframe.",
    "frame.",
    "iframe",
    "code.",
    "bytes.",
    "object.",
    "varobject.",
    "type.",
    "heaptype.",
    "gc_head",
    "dict",
    "module.",
    "str",
    "compact_str",
    "long.",
];

/// Our object field, and the table's entry that reports its offset.
const REPORTED_OBJECT_FIELDS: &[(&str, &str)] = &[
    ("interp.modules", "interpreter_state.imports_modules"),
    ("object.ob_type", "pyobject.ob_type"),
    ("type.tp_flags", "type_object.tp_flags"),
    ("dict.ma_keys", "dict_object.ma_keys"),
    ("dict.ma_values", "dict_object.ma_values"),
    ("long.lv_tag", "long_object.lv_tag"),
    ("long.ob_digit", "long_object.ob_digit"),
    ("str.length", "unicode_object.length"),
    ("tstate.current_frame", "thread_state.current_frame"),
    ("iframe.previous", "interpreter_frame.previous"),
    ("iframe.executable", "interpreter_frame.executable"),
    ("iframe.instr_ptr", "interpreter_frame.instr_ptr"),
    ("iframe.owner", "interpreter_frame.owner"),
    ("code.co_filename", "code_object.filename"),
    ("code.co_name", "code_object.name"),
    ("code.co_qualname", "code_object.qualname"),
    ("code.co_linetable", "code_object.linetable"),
    ("code.co_firstlineno", "code_object.firstlineno"),
    ("code.co_code_adaptive", "code_object.co_code_adaptive"),
    ("bytes.ob_sval", "bytes_object.ob_sval"),
    ("tstate.holds_gil", "thread_state.holds_gil"),
    ("tstate.gil_requested", "thread_state.gil_requested"),
];

/// Struct offsets beyond this are not what any CPython object has.
const MAX_OBJECT_OFFSET: u64 = 1 << 16;

fn put_object_fields(
    fields: &mut BTreeMap<String, FieldInfo>,
    descriptor: &Layout,
    entry: &dyn Fn(&str) -> Result<u64, String>,
) -> Result<(), String> {
    for (name, info) in descriptor
        .fields
        .iter()
        .filter(|(n, _)| OBJECT_FIELDS.iter().any(|p| n.starts_with(p)))
        .filter(|(n, _)| !n.starts_with("debug_offsets"))
    {
        fields.insert(name.clone(), *info);
    }
    let has = |name: &str| descriptor.field(&format!("debug_offsets.{name}")).is_some();
    for &(ours, theirs) in REPORTED_OBJECT_FIELDS {
        let Some(known) = descriptor.field(ours) else {
            continue;
        };
        if !has(theirs) {
            continue;
        }
        let offset = entry(theirs)?;
        if offset > MAX_OBJECT_OFFSET {
            return Err(format!("{theirs} = {offset} is implausible"));
        }
        fields.insert(ours.to_string(), FieldInfo { offset, ..known });
    }
    // The string's header size and its `state` bit-fields, moved to where the target says `state` is.
    if has("unicode_object.asciiobject_size")
        && let Some(known) = descriptor.field("str")
    {
        let size = entry("unicode_object.asciiobject_size")?;
        if size > MAX_OBJECT_OFFSET {
            return Err(format!("asciiobject_size = {size} is implausible"));
        }
        fields.insert("str".into(), FieldInfo { size, ..known });
    }
    if has("unicode_object.state")
        && let Some(state) = descriptor.field("str.state")
    {
        let reported = entry("unicode_object.state")?;
        if reported > MAX_OBJECT_OFFSET {
            return Err(format!("unicode_object.state = {reported} is implausible"));
        }
        for bit in [
            "str.state",
            "str.state.kind",
            "str.state.compact",
            "str.state.ascii",
        ] {
            if let Some(info) = descriptor.field(bit) {
                let within = info.offset.saturating_sub(state.offset);
                fields.insert(
                    bit.into(),
                    FieldInfo {
                        offset: reported + within,
                        ..info
                    },
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::layout::{SHIPPED, find_shipped};

    /// A table as a 3.14 target would hold it, built from the shipped layout's own numbers.
    fn table_for(descriptor: &Layout, set: &[(&str, u64)]) -> Vec<u8> {
        let mut bytes = vec![0u8; descriptor.required("debug_offsets").size as usize];
        bytes[..8].copy_from_slice(COOKIE);
        for (name, value) in set {
            let at = descriptor
                .field(&format!("debug_offsets.{name}"))
                .unwrap()
                .offset as usize;
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    fn descriptor() -> Layout {
        assert!(
            SHIPPED
                .iter()
                .any(|(n, _)| n.starts_with("3.14-default-x86_64"))
        );
        find_shipped("3.14", Flavour::Default, "x86_64")
            .unwrap()
            .unwrap()
    }

    fn good_values(d: &Layout) -> Vec<(&'static str, u64)> {
        let gil = 4096;
        vec![
            ("version", 0x030e0af0),
            ("runtime_state.size", 100_000),
            (
                "runtime_state.interpreters_head",
                d.required("runtime.interpreters.head").offset,
            ),
            ("interpreter_state.size", 100_000),
            ("interpreter_state.next", d.required("interp.next").offset),
            (
                "interpreter_state.threads_head",
                d.required("interp.threads.head").offset,
            ),
            (
                "interpreter_state.ceval_gil",
                d.required("interp.ceval.gil").offset,
            ),
            ("interpreter_state.gil_runtime_state", gil),
            (
                "interpreter_state.gil_runtime_state_locked",
                gil + d.required("gil.locked").offset,
            ),
            (
                "interpreter_state.gil_runtime_state_holder",
                gil + d.required("gil.last_holder").offset,
            ),
            ("thread_state.size", 1000),
            ("thread_state.next", d.required("tstate.next").offset),
            ("thread_state.interp", d.required("tstate.interp").offset),
            (
                "thread_state.thread_id",
                d.required("tstate.thread_id").offset,
            ),
            (
                "thread_state.native_thread_id",
                d.required("tstate.native_thread_id").offset,
            ),
        ]
    }

    #[test]
    fn decodes_what_the_target_reports() {
        let d = descriptor();
        let (layout, reported) = decode(
            &table_for(&d, &good_values(&d)),
            &d,
            PyVersion::from_hex(0x030e0af0),
        )
        .unwrap();
        assert_eq!(reported.version.to_string(), "3.14.10");
        assert!(!reported.free_threaded);
        for name in [
            "runtime.interpreters.head",
            "interp.threads.head",
            "tstate.native_thread_id",
            "gil.cond",
        ] {
            assert_eq!(layout.field(name), d.field(name), "{name}");
        }
    }

    #[test]
    fn rejects_a_wrong_cookie_version_or_offset() {
        let d = descriptor();
        let v = PyVersion::from_hex(0x030e0af0);
        let mut bytes = table_for(&d, &good_values(&d));
        bytes[0] = b'X';
        assert!(decode(&bytes, &d, v).unwrap_err().contains("cookie"));

        let wrong_version = table_for(
            &d,
            &[good_values(&d), vec![("version", 0x030d0000)]].concat(),
        );
        assert!(
            decode(&wrong_version, &d, v)
                .unwrap_err()
                .contains("reports Python 3.13")
        );

        let outside = table_for(
            &d,
            &[good_values(&d), vec![("thread_state.next", 5000)]].concat(),
        );
        assert!(decode(&outside, &d, v).unwrap_err().contains("outside"));

        let moved_gil = table_for(
            &d,
            &[
                good_values(&d),
                vec![("interpreter_state.gil_runtime_state_locked", 4096 + 40)],
            ]
            .concat(),
        );
        assert!(
            decode(&moved_gil, &d, v)
                .unwrap_err()
                .contains("GIL struct differs")
        );
    }

    #[test]
    fn a_free_threaded_build_reports_where_its_gil_switch_is() {
        let d = descriptor();
        let v = PyVersion::from_hex(0x030e0af0);
        let values = [
            good_values(&d),
            vec![
                ("free_threaded", 1),
                ("interpreter_state.gil_runtime_state_enabled", 4096 + 232),
            ],
        ]
        .concat();
        let (layout, reported) = decode(&table_for(&d, &values), &d, v).unwrap();
        assert!(reported.free_threaded);
        assert_eq!(layout.flavour, Flavour::FreeThreaded);
        assert_eq!(
            layout.field("interp.gil_enabled").map(|f| f.offset),
            Some(4096 + 232)
        );
        let no_switch = [good_values(&d), vec![("free_threaded", 1)]].concat();
        assert!(decode(&table_for(&d, &no_switch), &d, v).is_err());
    }

    #[test]
    fn never_panics_on_short_or_garbage_tables() {
        let d = descriptor();
        let v = PyVersion::from_hex(0x030e0af0);
        for len in [0, 7, 8, 16, 100] {
            let mut bytes = vec![0xffu8; len];
            if len >= 8 {
                bytes[..8].copy_from_slice(COOKIE);
            }
            assert!(decode(&bytes, &d, v).is_err());
        }
    }
}
