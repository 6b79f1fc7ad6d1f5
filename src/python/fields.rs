//! Which CPython fields gilsample reads, and where each is found in a build's DWARF: the struct (or
//! typedef) that roots it and the member paths that name it across versions (first match wins).
//! `Layout::from_dwarf` answers these for one build; the answers are the layout files.

/// One field gilsample reads: its name in layout files, the struct tag it lives in, the member paths
/// that name it across versions (first match wins), and whether every version has it.
pub struct FieldSpec {
    /// Its name in layout files, `gil.locked`.
    pub name: &'static str,
    /// The struct tag or typedef that roots the member paths in DWARF.
    pub root: &'static str,
    /// Member paths from `root` that name it, tried in order across versions.
    pub paths: &'static [&'static str],
    /// Every supported version has it: a layout without it is refused.
    pub required: bool,
}

const RUNTIME: &str = "pyruntimestate";
const INTERP: &str = "_is";
const TSTATE: &str = "_ts";
const GIL: &str = "_gil_runtime_state";
const DEBUG_OFFSETS: &str = "_Py_DebugOffsets";
const OBJECT: &str = "_object";
const VAR_OBJECT: &str = "typedef PyVarObject";
const TYPE: &str = "_typeobject";
const HEAP_TYPE: &str = "_heaptypeobject";
const GC_HEAD: &str = "typedef PyGC_Head";
const DICT: &str = "typedef PyDictObject";
const DICT_KEYS: &str = "_dictkeysobject";
const DICT_ENTRY: &str = "typedef PyDictKeyEntry";
const DICT_UNICODE_ENTRY: &str = "typedef PyDictUnicodeEntry";
const DICT_VALUES: &str = "_dictvalues";
const MODULE: &str = "typedef PyModuleObject";
const ASCII_STR: &str = "typedef PyASCIIObject";
const COMPACT_STR: &str = "typedef PyCompactUnicodeObject";
const LONG: &str = "_longobject";
const CFRAME: &str = "_PyCFrame";
const FRAME: &str = "_frame";
const IFRAME: &str = "_PyInterpreterFrame";
const CODE: &str = "typedef PyCodeObject";
const BYTES: &str = "typedef PyBytesObject";

/// One row of `FIELD_QUERIES`.
const fn field(
    name: &'static str,
    root: &'static str,
    paths: &'static [&'static str],
    required: bool,
) -> FieldSpec {
    FieldSpec {
        name,
        root,
        paths,
        required,
    }
}

/// Every field, with the CPython member paths that hold it (see Include/internal/pycore_runtime.h,
/// pycore_interp.h, pycore_gil.h and Include/cpython/pystate.h of each version).
pub const FIELD_QUERIES: &[FieldSpec] = &[
    field(
        "runtime.interpreters.head",
        RUNTIME,
        &["interpreters.head"],
        true,
    ),
    field(
        "runtime.interpreters.main",
        RUNTIME,
        &["interpreters.main"],
        false,
    ),
    // 3.7–3.11: one GIL embedded in the runtime.
    field("runtime.ceval.gil", RUNTIME, &["ceval.gil"], false),
    field("interp.next", INTERP, &["next"], true),
    field(
        "interp.threads.head",
        INTERP,
        &["threads.head", "tstate_head"],
        true,
    ),
    // 3.12+: each interpreter points to its GIL (the main one to its own `_gil`).
    field("interp.ceval.gil", INTERP, &["ceval.gil"], false),
    field("tstate.next", TSTATE, &["next"], true),
    field("tstate.interp", TSTATE, &["interp"], true),
    field("tstate.thread_id", TSTATE, &["thread_id"], true),
    // 3.11+: the OS thread id; older versions map `thread_id` (a pthread_t) through glibc.
    field(
        "tstate.native_thread_id",
        TSTATE,
        &["native_thread_id"],
        false,
    ),
    field("gil", GIL, &[""], true),
    // The switch interval in µs: a holder is asked to let go only after a waiter waited this long.
    field("gil.interval", GIL, &["interval"], false),
    field("gil.last_holder", GIL, &["last_holder"], true),
    field("gil.locked", GIL, &["locked"], true),
    field("gil.switch_number", GIL, &["switch_number"], true),
    field("gil.cond", GIL, &["cond"], true),
    field("gil.mutex", GIL, &["mutex"], true),
    field("gil.switch_cond", GIL, &["switch_cond"], false),
    field("gil.switch_mutex", GIL, &["switch_mutex"], false),
    // Python objects, for thread names and stacks (Include/object.h, cpython/dictobject.h,
    // internal/pycore_dict.h or Objects/dict-common.h before 3.11, cpython/unicodeobject.h,
    // cpython/longintrepr.h, moduleobject.c or internal/pycore_moduleobject.h).
    field(
        "interp.modules",
        INTERP,
        &["imports.modules", "modules"],
        false,
    ),
    field("object.ob_type", OBJECT, &["ob_type"], false),
    field("varobject.ob_size", VAR_OBJECT, &["ob_size"], false),
    field("type.tp_basicsize", TYPE, &["tp_basicsize"], false),
    field("type.tp_dictoffset", TYPE, &["tp_dictoffset"], false),
    field("type.tp_flags", TYPE, &["tp_flags"], false),
    field(
        "heaptype.ht_cached_keys",
        HEAP_TYPE,
        &["ht_cached_keys"],
        false,
    ),
    field("gc_head", GC_HEAD, &[""], false),
    field("dict.ma_keys", DICT, &["ma_keys"], false),
    field("dict.ma_values", DICT, &["ma_values"], false),
    // Before 3.11 a table of 2^n slots (`dk_size`); from 3.11 `dk_log2_size` and friends.
    field("dictkeys.dk_size", DICT_KEYS, &["dk_size"], false),
    field("dictkeys.dk_log2_size", DICT_KEYS, &["dk_log2_size"], false),
    field(
        "dictkeys.dk_log2_index_bytes",
        DICT_KEYS,
        &["dk_log2_index_bytes"],
        false,
    ),
    field("dictkeys.dk_kind", DICT_KEYS, &["dk_kind"], false),
    field("dictkeys.dk_nentries", DICT_KEYS, &["dk_nentries"], false),
    field("dictkeys.dk_indices", DICT_KEYS, &["dk_indices"], false),
    field("dict_entry", DICT_ENTRY, &[""], false),
    field("dict_entry.me_key", DICT_ENTRY, &["me_key"], false),
    field("dict_entry.me_value", DICT_ENTRY, &["me_value"], false),
    // 3.11+: the entries of dicts whose keys are all strings (no stored hash).
    field("dict_unicode_entry", DICT_UNICODE_ENTRY, &[""], false),
    field(
        "dict_unicode_entry.me_key",
        DICT_UNICODE_ENTRY,
        &["me_key"],
        false,
    ),
    field(
        "dict_unicode_entry.me_value",
        DICT_UNICODE_ENTRY,
        &["me_value"],
        false,
    ),
    // 3.11+: `ma_values` points to a `PyDictValues`; 3.13+ says whether its values are current.
    field("dictvalues.values", DICT_VALUES, &["values"], false),
    field("dictvalues.valid", DICT_VALUES, &["valid"], false),
    field("module.md_dict", MODULE, &["md_dict"], false),
    field("str", ASCII_STR, &[""], false),
    field("str.state", ASCII_STR, &["state"], false),
    field("str.length", ASCII_STR, &["length"], false),
    field("str.state.kind", ASCII_STR, &["state.kind"], false),
    field("str.state.compact", ASCII_STR, &["state.compact"], false),
    field("str.state.ascii", ASCII_STR, &["state.ascii"], false),
    field("compact_str", COMPACT_STR, &[""], false),
    // Before 3.12 the digit count is `ob_size`; from 3.12 `long_value.lv_tag`.
    field(
        "long.ob_digit",
        LONG,
        &["long_value.ob_digit", "ob_digit"],
        false,
    ),
    field("long.lv_tag", LONG, &["long_value.lv_tag"], false),
    // 3.14+: the interpreter's own per-thread GIL flags (3.14 `holds_gil`; 3.15 also `gil_requested`).
    field("tstate.holds_gil", TSTATE, &["holds_gil"], false),
    field("tstate.gil_requested", TSTATE, &["gil_requested"], false),
    field(
        "debug_offsets.thread_state.holds_gil",
        DEBUG_OFFSETS,
        &["thread_state.holds_gil"],
        false,
    ),
    field(
        "debug_offsets.thread_state.gil_requested",
        DEBUG_OFFSETS,
        &["thread_state.gil_requested"],
        false,
    ),
    // Stacks: the innermost frame of a thread (3.7-3.10 `frame`, 3.11/3.12 `cframe->current_frame`,
    // 3.13+ `current_frame`), frames (`struct _frame`, 3.11+ `_PyInterpreterFrame`) and code objects.
    field("tstate.frame", TSTATE, &["frame"], false),
    field("tstate.cframe", TSTATE, &["cframe"], false),
    field("tstate.current_frame", TSTATE, &["current_frame"], false),
    field("cframe.current_frame", CFRAME, &["current_frame"], false),
    field("frame.f_back", FRAME, &["f_back"], false),
    field("frame.f_code", FRAME, &["f_code"], false),
    field("frame.f_lasti", FRAME, &["f_lasti"], false),
    // A frame's locals and value stack: a hold whose innermost frame keeps them and its instruction
    // is in one native call (infer/native_call.rs).
    field("frame.f_localsplus", FRAME, &["f_localsplus"], false),
    field("iframe", IFRAME, &[""], false),
    field("iframe.localsplus", IFRAME, &["localsplus"], false),
    field("iframe.previous", IFRAME, &["previous"], false),
    field(
        "iframe.executable",
        IFRAME,
        &["f_executable", "f_code"],
        false,
    ),
    field(
        "iframe.instr_ptr",
        IFRAME,
        &["instr_ptr", "prev_instr"],
        false,
    ),
    field("iframe.owner", IFRAME, &["owner"], false),
    field("code.co_name", CODE, &["co_name"], false),
    field("code.co_qualname", CODE, &["co_qualname"], false),
    field("code.co_filename", CODE, &["co_filename"], false),
    field("code.co_firstlineno", CODE, &["co_firstlineno"], false),
    // Before 3.10 `co_lnotab`; 3.10 a table of (bytes, line) pairs; 3.11+ the location table.
    field(
        "code.co_linetable",
        CODE,
        &["co_linetable", "co_lnotab"],
        false,
    ),
    field("code.co_code_adaptive", CODE, &["co_code_adaptive"], false),
    // Before 3.11 the bytecode is a bytes object of its own; read for 3.10's unlined loop jumps
    // (python/back_jumps.rs).
    field("code.co_code", CODE, &["co_code"], false),
    field("bytes.ob_sval", BYTES, &["ob_sval"], false),
    field(
        "debug_offsets.thread_state.current_frame",
        DEBUG_OFFSETS,
        &["thread_state.current_frame"],
        false,
    ),
    field(
        "debug_offsets.interpreter_frame.previous",
        DEBUG_OFFSETS,
        &["interpreter_frame.previous"],
        false,
    ),
    field(
        "debug_offsets.interpreter_frame.executable",
        DEBUG_OFFSETS,
        &["interpreter_frame.executable"],
        false,
    ),
    field(
        "debug_offsets.interpreter_frame.instr_ptr",
        DEBUG_OFFSETS,
        &["interpreter_frame.instr_ptr"],
        false,
    ),
    field(
        "debug_offsets.interpreter_frame.owner",
        DEBUG_OFFSETS,
        &["interpreter_frame.owner"],
        false,
    ),
    field(
        "debug_offsets.code_object.filename",
        DEBUG_OFFSETS,
        &["code_object.filename"],
        false,
    ),
    field(
        "debug_offsets.code_object.name",
        DEBUG_OFFSETS,
        &["code_object.name"],
        false,
    ),
    field(
        "debug_offsets.code_object.qualname",
        DEBUG_OFFSETS,
        &["code_object.qualname"],
        false,
    ),
    field(
        "debug_offsets.code_object.linetable",
        DEBUG_OFFSETS,
        &["code_object.linetable"],
        false,
    ),
    field(
        "debug_offsets.code_object.firstlineno",
        DEBUG_OFFSETS,
        &["code_object.firstlineno"],
        false,
    ),
    field(
        "debug_offsets.code_object.co_code_adaptive",
        DEBUG_OFFSETS,
        &["code_object.co_code_adaptive"],
        false,
    ),
    field(
        "debug_offsets.bytes_object.ob_sval",
        DEBUG_OFFSETS,
        &["bytes_object.ob_sval"],
        false,
    ),
    // 3.13+: where `_Py_DebugOffsets` reports the object fields it has.
    field(
        "debug_offsets.interpreter_state.imports_modules",
        DEBUG_OFFSETS,
        &["interpreter_state.imports_modules"],
        false,
    ),
    field(
        "debug_offsets.pyobject.ob_type",
        DEBUG_OFFSETS,
        &["pyobject.ob_type"],
        false,
    ),
    field(
        "debug_offsets.type_object.tp_flags",
        DEBUG_OFFSETS,
        &["type_object.tp_flags"],
        false,
    ),
    field(
        "debug_offsets.dict_object.ma_keys",
        DEBUG_OFFSETS,
        &["dict_object.ma_keys"],
        false,
    ),
    field(
        "debug_offsets.dict_object.ma_values",
        DEBUG_OFFSETS,
        &["dict_object.ma_values"],
        false,
    ),
    field(
        "debug_offsets.long_object.lv_tag",
        DEBUG_OFFSETS,
        &["long_object.lv_tag"],
        false,
    ),
    field(
        "debug_offsets.long_object.ob_digit",
        DEBUG_OFFSETS,
        &["long_object.ob_digit"],
        false,
    ),
    field(
        "debug_offsets.unicode_object.state",
        DEBUG_OFFSETS,
        &["unicode_object.state"],
        false,
    ),
    field(
        "debug_offsets.unicode_object.length",
        DEBUG_OFFSETS,
        &["unicode_object.length"],
        false,
    ),
    field(
        "debug_offsets.unicode_object.asciiobject_size",
        DEBUG_OFFSETS,
        &["unicode_object.asciiobject_size"],
        false,
    ),
    // 3.13+: where each entry sits inside `_Py_DebugOffsets` (Include/internal/pycore_debug_offsets.h),
    // the table at the start of `_PyRuntime` through which the target reports its own offsets.
    field("debug_offsets", DEBUG_OFFSETS, &[""], false),
    field("debug_offsets.cookie", DEBUG_OFFSETS, &["cookie"], false),
    field("debug_offsets.version", DEBUG_OFFSETS, &["version"], false),
    field(
        "debug_offsets.free_threaded",
        DEBUG_OFFSETS,
        &["free_threaded"],
        false,
    ),
    field(
        "debug_offsets.runtime_state.size",
        DEBUG_OFFSETS,
        &["runtime_state.size"],
        false,
    ),
    field(
        "debug_offsets.runtime_state.interpreters_head",
        DEBUG_OFFSETS,
        &["runtime_state.interpreters_head"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.size",
        DEBUG_OFFSETS,
        &["interpreter_state.size"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.next",
        DEBUG_OFFSETS,
        &["interpreter_state.next"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.threads_head",
        DEBUG_OFFSETS,
        &["interpreter_state.threads_head"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.ceval_gil",
        DEBUG_OFFSETS,
        &["interpreter_state.ceval_gil"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.gil_runtime_state",
        DEBUG_OFFSETS,
        &["interpreter_state.gil_runtime_state"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.gil_runtime_state_enabled",
        DEBUG_OFFSETS,
        &["interpreter_state.gil_runtime_state_enabled"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.gil_runtime_state_locked",
        DEBUG_OFFSETS,
        &["interpreter_state.gil_runtime_state_locked"],
        false,
    ),
    field(
        "debug_offsets.interpreter_state.gil_runtime_state_holder",
        DEBUG_OFFSETS,
        &["interpreter_state.gil_runtime_state_holder"],
        false,
    ),
    field(
        "debug_offsets.thread_state.size",
        DEBUG_OFFSETS,
        &["thread_state.size"],
        false,
    ),
    field(
        "debug_offsets.thread_state.next",
        DEBUG_OFFSETS,
        &["thread_state.next"],
        false,
    ),
    field(
        "debug_offsets.thread_state.interp",
        DEBUG_OFFSETS,
        &["thread_state.interp"],
        false,
    ),
    field(
        "debug_offsets.thread_state.thread_id",
        DEBUG_OFFSETS,
        &["thread_state.thread_id"],
        false,
    ),
    field(
        "debug_offsets.thread_state.native_thread_id",
        DEBUG_OFFSETS,
        &["thread_state.native_thread_id"],
        false,
    ),
];
