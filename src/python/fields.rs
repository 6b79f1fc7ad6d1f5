//! Which CPython fields gilsample reads, and where each is found in a build's DWARF: the struct (or
//! typedef) that roots it and the member paths that name it across versions (first match wins).
//! `Layout::from_dwarf` answers these for one build; the answers are the layout files.

/// One field gilsample reads: its name in layout files, the struct tag it lives in, the member paths
/// that name it across versions (first match wins), and whether every version has it.
pub struct FieldSpec {
    pub name: &'static str,
    pub root: &'static str,
    pub paths: &'static [&'static str],
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

/// Every field, with the CPython member paths that hold it (see Include/internal/pycore_runtime.h,
/// pycore_interp.h, pycore_gil.h and Include/cpython/pystate.h of each version).
pub const FIELD_QUERIES: &[FieldSpec] = &[
    FieldSpec {
        name: "runtime.interpreters.head",
        root: RUNTIME,
        paths: &["interpreters.head"],
        required: true,
    },
    FieldSpec {
        name: "runtime.interpreters.main",
        root: RUNTIME,
        paths: &["interpreters.main"],
        required: false,
    },
    // 3.7–3.11: one GIL embedded in the runtime.
    FieldSpec {
        name: "runtime.ceval.gil",
        root: RUNTIME,
        paths: &["ceval.gil"],
        required: false,
    },
    FieldSpec {
        name: "interp.next",
        root: INTERP,
        paths: &["next"],
        required: true,
    },
    FieldSpec {
        name: "interp.threads.head",
        root: INTERP,
        paths: &["threads.head", "tstate_head"],
        required: true,
    },
    // 3.12+: each interpreter points to its GIL (the main one to its own `_gil`).
    FieldSpec {
        name: "interp.ceval.gil",
        root: INTERP,
        paths: &["ceval.gil"],
        required: false,
    },
    FieldSpec {
        name: "tstate.next",
        root: TSTATE,
        paths: &["next"],
        required: true,
    },
    FieldSpec {
        name: "tstate.interp",
        root: TSTATE,
        paths: &["interp"],
        required: true,
    },
    FieldSpec {
        name: "tstate.thread_id",
        root: TSTATE,
        paths: &["thread_id"],
        required: true,
    },
    // 3.11+: the OS thread id; older versions map `thread_id` (a pthread_t) through glibc.
    FieldSpec {
        name: "tstate.native_thread_id",
        root: TSTATE,
        paths: &["native_thread_id"],
        required: false,
    },
    FieldSpec {
        name: "gil",
        root: GIL,
        paths: &[""],
        required: true,
    },
    // The switch interval in µs: a holder is asked to let go only after a waiter waited this long.
    FieldSpec {
        name: "gil.interval",
        root: GIL,
        paths: &["interval"],
        required: false,
    },
    FieldSpec {
        name: "gil.last_holder",
        root: GIL,
        paths: &["last_holder"],
        required: true,
    },
    FieldSpec {
        name: "gil.locked",
        root: GIL,
        paths: &["locked"],
        required: true,
    },
    FieldSpec {
        name: "gil.switch_number",
        root: GIL,
        paths: &["switch_number"],
        required: true,
    },
    FieldSpec {
        name: "gil.cond",
        root: GIL,
        paths: &["cond"],
        required: true,
    },
    FieldSpec {
        name: "gil.mutex",
        root: GIL,
        paths: &["mutex"],
        required: true,
    },
    FieldSpec {
        name: "gil.switch_cond",
        root: GIL,
        paths: &["switch_cond"],
        required: false,
    },
    FieldSpec {
        name: "gil.switch_mutex",
        root: GIL,
        paths: &["switch_mutex"],
        required: false,
    },
    // Python objects, for thread names and stacks (Include/object.h, cpython/dictobject.h,
    // internal/pycore_dict.h or Objects/dict-common.h before 3.11, cpython/unicodeobject.h,
    // cpython/longintrepr.h, moduleobject.c or internal/pycore_moduleobject.h).
    FieldSpec {
        name: "interp.modules",
        root: INTERP,
        paths: &["imports.modules", "modules"],
        required: false,
    },
    FieldSpec {
        name: "object.ob_type",
        root: OBJECT,
        paths: &["ob_type"],
        required: false,
    },
    FieldSpec {
        name: "varobject.ob_size",
        root: VAR_OBJECT,
        paths: &["ob_size"],
        required: false,
    },
    FieldSpec {
        name: "type.tp_basicsize",
        root: TYPE,
        paths: &["tp_basicsize"],
        required: false,
    },
    FieldSpec {
        name: "type.tp_dictoffset",
        root: TYPE,
        paths: &["tp_dictoffset"],
        required: false,
    },
    FieldSpec {
        name: "type.tp_flags",
        root: TYPE,
        paths: &["tp_flags"],
        required: false,
    },
    FieldSpec {
        name: "heaptype.ht_cached_keys",
        root: HEAP_TYPE,
        paths: &["ht_cached_keys"],
        required: false,
    },
    FieldSpec {
        name: "gc_head",
        root: GC_HEAD,
        paths: &[""],
        required: false,
    },
    FieldSpec {
        name: "dict.ma_keys",
        root: DICT,
        paths: &["ma_keys"],
        required: false,
    },
    FieldSpec {
        name: "dict.ma_values",
        root: DICT,
        paths: &["ma_values"],
        required: false,
    },
    // Before 3.11 a table of 2^n slots (`dk_size`); from 3.11 `dk_log2_size` and friends.
    FieldSpec {
        name: "dictkeys.dk_size",
        root: DICT_KEYS,
        paths: &["dk_size"],
        required: false,
    },
    FieldSpec {
        name: "dictkeys.dk_log2_size",
        root: DICT_KEYS,
        paths: &["dk_log2_size"],
        required: false,
    },
    FieldSpec {
        name: "dictkeys.dk_log2_index_bytes",
        root: DICT_KEYS,
        paths: &["dk_log2_index_bytes"],
        required: false,
    },
    FieldSpec {
        name: "dictkeys.dk_kind",
        root: DICT_KEYS,
        paths: &["dk_kind"],
        required: false,
    },
    FieldSpec {
        name: "dictkeys.dk_nentries",
        root: DICT_KEYS,
        paths: &["dk_nentries"],
        required: false,
    },
    FieldSpec {
        name: "dictkeys.dk_indices",
        root: DICT_KEYS,
        paths: &["dk_indices"],
        required: false,
    },
    FieldSpec {
        name: "dict_entry",
        root: DICT_ENTRY,
        paths: &[""],
        required: false,
    },
    FieldSpec {
        name: "dict_entry.me_key",
        root: DICT_ENTRY,
        paths: &["me_key"],
        required: false,
    },
    FieldSpec {
        name: "dict_entry.me_value",
        root: DICT_ENTRY,
        paths: &["me_value"],
        required: false,
    },
    // 3.11+: the entries of dicts whose keys are all strings (no stored hash).
    FieldSpec {
        name: "dict_unicode_entry",
        root: DICT_UNICODE_ENTRY,
        paths: &[""],
        required: false,
    },
    FieldSpec {
        name: "dict_unicode_entry.me_key",
        root: DICT_UNICODE_ENTRY,
        paths: &["me_key"],
        required: false,
    },
    FieldSpec {
        name: "dict_unicode_entry.me_value",
        root: DICT_UNICODE_ENTRY,
        paths: &["me_value"],
        required: false,
    },
    // 3.11+: `ma_values` points to a `PyDictValues`; 3.13+ says whether its values are current.
    FieldSpec {
        name: "dictvalues.values",
        root: DICT_VALUES,
        paths: &["values"],
        required: false,
    },
    FieldSpec {
        name: "dictvalues.valid",
        root: DICT_VALUES,
        paths: &["valid"],
        required: false,
    },
    FieldSpec {
        name: "module.md_dict",
        root: MODULE,
        paths: &["md_dict"],
        required: false,
    },
    FieldSpec {
        name: "str",
        root: ASCII_STR,
        paths: &[""],
        required: false,
    },
    FieldSpec {
        name: "str.state",
        root: ASCII_STR,
        paths: &["state"],
        required: false,
    },
    FieldSpec {
        name: "str.length",
        root: ASCII_STR,
        paths: &["length"],
        required: false,
    },
    FieldSpec {
        name: "str.state.kind",
        root: ASCII_STR,
        paths: &["state.kind"],
        required: false,
    },
    FieldSpec {
        name: "str.state.compact",
        root: ASCII_STR,
        paths: &["state.compact"],
        required: false,
    },
    FieldSpec {
        name: "str.state.ascii",
        root: ASCII_STR,
        paths: &["state.ascii"],
        required: false,
    },
    FieldSpec {
        name: "compact_str",
        root: COMPACT_STR,
        paths: &[""],
        required: false,
    },
    // Before 3.12 the digit count is `ob_size`; from 3.12 `long_value.lv_tag`.
    FieldSpec {
        name: "long.ob_digit",
        root: LONG,
        paths: &["long_value.ob_digit", "ob_digit"],
        required: false,
    },
    FieldSpec {
        name: "long.lv_tag",
        root: LONG,
        paths: &["long_value.lv_tag"],
        required: false,
    },
    // 3.14+: the interpreter's own per-thread GIL flags (3.14 `holds_gil`; 3.15 also `gil_requested`).
    FieldSpec {
        name: "tstate.holds_gil",
        root: TSTATE,
        paths: &["holds_gil"],
        required: false,
    },
    FieldSpec {
        name: "tstate.gil_requested",
        root: TSTATE,
        paths: &["gil_requested"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.holds_gil",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.holds_gil"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.gil_requested",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.gil_requested"],
        required: false,
    },
    // Stacks: the innermost frame of a thread (3.7-3.10 `frame`, 3.11/3.12 `cframe->current_frame`,
    // 3.13+ `current_frame`), frames (`struct _frame`, 3.11+ `_PyInterpreterFrame`) and code objects.
    FieldSpec {
        name: "tstate.frame",
        root: TSTATE,
        paths: &["frame"],
        required: false,
    },
    FieldSpec {
        name: "tstate.cframe",
        root: TSTATE,
        paths: &["cframe"],
        required: false,
    },
    FieldSpec {
        name: "tstate.current_frame",
        root: TSTATE,
        paths: &["current_frame"],
        required: false,
    },
    FieldSpec {
        name: "cframe.current_frame",
        root: CFRAME,
        paths: &["current_frame"],
        required: false,
    },
    FieldSpec {
        name: "frame.f_back",
        root: FRAME,
        paths: &["f_back"],
        required: false,
    },
    FieldSpec {
        name: "frame.f_code",
        root: FRAME,
        paths: &["f_code"],
        required: false,
    },
    FieldSpec {
        name: "frame.f_lasti",
        root: FRAME,
        paths: &["f_lasti"],
        required: false,
    },
    FieldSpec {
        name: "iframe",
        root: IFRAME,
        paths: &[""],
        required: false,
    },
    FieldSpec {
        name: "iframe.previous",
        root: IFRAME,
        paths: &["previous"],
        required: false,
    },
    FieldSpec {
        name: "iframe.executable",
        root: IFRAME,
        paths: &["f_executable", "f_code"],
        required: false,
    },
    FieldSpec {
        name: "iframe.instr_ptr",
        root: IFRAME,
        paths: &["instr_ptr", "prev_instr"],
        required: false,
    },
    FieldSpec {
        name: "iframe.owner",
        root: IFRAME,
        paths: &["owner"],
        required: false,
    },
    FieldSpec {
        name: "code.co_name",
        root: CODE,
        paths: &["co_name"],
        required: false,
    },
    FieldSpec {
        name: "code.co_qualname",
        root: CODE,
        paths: &["co_qualname"],
        required: false,
    },
    FieldSpec {
        name: "code.co_filename",
        root: CODE,
        paths: &["co_filename"],
        required: false,
    },
    FieldSpec {
        name: "code.co_firstlineno",
        root: CODE,
        paths: &["co_firstlineno"],
        required: false,
    },
    // Before 3.10 `co_lnotab`; 3.10 a table of (bytes, line) pairs; 3.11+ the location table.
    FieldSpec {
        name: "code.co_linetable",
        root: CODE,
        paths: &["co_linetable", "co_lnotab"],
        required: false,
    },
    FieldSpec {
        name: "code.co_code_adaptive",
        root: CODE,
        paths: &["co_code_adaptive"],
        required: false,
    },
    FieldSpec {
        name: "bytes.ob_sval",
        root: BYTES,
        paths: &["ob_sval"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.current_frame",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.current_frame"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_frame.previous",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_frame.previous"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_frame.executable",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_frame.executable"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_frame.instr_ptr",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_frame.instr_ptr"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_frame.owner",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_frame.owner"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.code_object.filename",
        root: DEBUG_OFFSETS,
        paths: &["code_object.filename"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.code_object.name",
        root: DEBUG_OFFSETS,
        paths: &["code_object.name"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.code_object.qualname",
        root: DEBUG_OFFSETS,
        paths: &["code_object.qualname"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.code_object.linetable",
        root: DEBUG_OFFSETS,
        paths: &["code_object.linetable"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.code_object.firstlineno",
        root: DEBUG_OFFSETS,
        paths: &["code_object.firstlineno"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.code_object.co_code_adaptive",
        root: DEBUG_OFFSETS,
        paths: &["code_object.co_code_adaptive"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.bytes_object.ob_sval",
        root: DEBUG_OFFSETS,
        paths: &["bytes_object.ob_sval"],
        required: false,
    },
    // 3.13+: where `_Py_DebugOffsets` reports the object fields it has.
    FieldSpec {
        name: "debug_offsets.interpreter_state.imports_modules",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.imports_modules"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.pyobject.ob_type",
        root: DEBUG_OFFSETS,
        paths: &["pyobject.ob_type"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.type_object.tp_flags",
        root: DEBUG_OFFSETS,
        paths: &["type_object.tp_flags"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.dict_object.ma_keys",
        root: DEBUG_OFFSETS,
        paths: &["dict_object.ma_keys"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.dict_object.ma_values",
        root: DEBUG_OFFSETS,
        paths: &["dict_object.ma_values"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.long_object.lv_tag",
        root: DEBUG_OFFSETS,
        paths: &["long_object.lv_tag"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.long_object.ob_digit",
        root: DEBUG_OFFSETS,
        paths: &["long_object.ob_digit"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.unicode_object.state",
        root: DEBUG_OFFSETS,
        paths: &["unicode_object.state"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.unicode_object.length",
        root: DEBUG_OFFSETS,
        paths: &["unicode_object.length"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.unicode_object.asciiobject_size",
        root: DEBUG_OFFSETS,
        paths: &["unicode_object.asciiobject_size"],
        required: false,
    },
    // 3.13+: where each entry sits inside `_Py_DebugOffsets` (Include/internal/pycore_debug_offsets.h),
    // the table at the start of `_PyRuntime` through which the target reports its own offsets.
    FieldSpec {
        name: "debug_offsets",
        root: DEBUG_OFFSETS,
        paths: &[""],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.cookie",
        root: DEBUG_OFFSETS,
        paths: &["cookie"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.version",
        root: DEBUG_OFFSETS,
        paths: &["version"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.free_threaded",
        root: DEBUG_OFFSETS,
        paths: &["free_threaded"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.runtime_state.size",
        root: DEBUG_OFFSETS,
        paths: &["runtime_state.size"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.runtime_state.interpreters_head",
        root: DEBUG_OFFSETS,
        paths: &["runtime_state.interpreters_head"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.size",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.size"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.next",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.next"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.threads_head",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.threads_head"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.ceval_gil",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.ceval_gil"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.gil_runtime_state",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.gil_runtime_state"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.gil_runtime_state_enabled",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.gil_runtime_state_enabled"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.gil_runtime_state_locked",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.gil_runtime_state_locked"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.interpreter_state.gil_runtime_state_holder",
        root: DEBUG_OFFSETS,
        paths: &["interpreter_state.gil_runtime_state_holder"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.size",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.size"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.next",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.next"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.interp",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.interp"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.thread_id",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.thread_id"],
        required: false,
    },
    FieldSpec {
        name: "debug_offsets.thread_state.native_thread_id",
        root: DEBUG_OFFSETS,
        paths: &["thread_state.native_thread_id"],
        required: false,
    },
];
