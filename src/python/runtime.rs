//! Walking the interpreter's state in target memory: `_PyRuntime` → interpreters → thread states, the
//! GIL's address, and the GIL's three words (holder, locked, switch count).
//!
//! Every pointer comes from the target and is untrusted: each is checked for plausibility before use,
//! every list walk is bounded and detects cycles, and a read that fails is reported, never unwrapped.
use crate::addr::RemoteAddr;
use crate::observed::GilWord;
use crate::process::memory::{MemorySource, ReadError};
use crate::python::layout::Layout;
use crate::symbols::dwarf::FieldInfo;

/// More threads than any real program has; a longer list means the walk is reading garbage.
pub const MAX_THREADS: usize = 10_000;
/// Subinterpreters are few; more means garbage.
pub const MAX_INTERPRETERS: usize = 256;

/// Why a walk of the thread list failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalkError {
    /// Reading the target's memory failed.
    Read(ReadError),
    /// `_PyRuntime` is still zeroed: the interpreter has not started (or has finalized).
    NotInitialized,
    /// The memory does not form the structure the layout describes.
    Corrupt(String),
}

impl From<ReadError> for WalkError {
    fn from(e: ReadError) -> WalkError {
        WalkError::Read(e)
    }
}

/// How a thread state leads to an OS thread id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TidSource {
    /// 3.11+: `PyThreadState.native_thread_id`.
    NativeThreadId,
    /// Before 3.11: `PyThreadState.thread_id` is a `pthread_t`, the address of glibc's `struct pthread`,
    /// whose `tid` field sits at this offset (found on the live process, not assumed).
    PthreadTid {
        /// Byte offset of `tid` inside glibc's `struct pthread`.
        offset: u64,
    },
}

/// One Python thread: its `PyThreadState` and its OS thread id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadRef {
    /// The address of the thread's `PyThreadState` in the target.
    pub tstate: RemoteAddr,
    /// The id as this process sees it (/proc, the trace); the walk reads the target's own.
    pub tid: u32,
    /// The id as the target's PID namespace numbers it, which is what its C library records (a
    /// mutex's owner).
    pub their_tid: u32,
}

/// Where `last_holder`, `locked`, `switch_number` and `interval` lie in the GIL struct, looked up in
/// the layout once: the sampler decodes them on every tick, and looking them up by name there was a
/// tenth of its CPU (perf, 10 kHz).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GilWordFields {
    locked: FieldInfo,
    last_holder: FieldInfo,
    switch_number: FieldInfo,
    interval: Option<FieldInfo>,
    /// The byte range `[start, end)` of the GIL struct that holds them, so one read fetches all.
    pub start: u64,
    /// End of that byte range (exclusive), offset in the GIL struct.
    pub end: u64,
}

impl GilWordFields {
    /// Looks the GIL's word fields up in `layout` (they are required).
    pub fn new(layout: &Layout) -> GilWordFields {
        let [locked, last_holder, switch_number] =
            ["gil.locked", "gil.last_holder", "gil.switch_number"].map(|n| layout.required(n));
        let interval = layout.field("gil.interval");
        let fields = [
            Some(locked),
            Some(last_holder),
            Some(switch_number),
            interval,
        ];
        let fields = fields.iter().flatten();
        GilWordFields {
            locked,
            last_holder,
            switch_number,
            interval,
            start: fields.clone().map(|f| f.offset).min().unwrap_or(0),
            end: fields.map(|f| f.offset + f.size).max().unwrap_or(0),
        }
    }

    /// Decodes the GIL words from the bytes `start..end`. `locked` must be 0 or 1: anything else is a
    /// torn or wrong read.
    pub fn decode(&self, bytes: &[u8]) -> Result<GilWord, ReadError> {
        let field = |info: FieldInfo| -> Result<u64, ReadError> {
            let at = (info.offset - self.start) as usize;
            let raw = bytes
                .get(at..at + info.size as usize)
                .ok_or(ReadError::Fault)?;
            Ok(match raw.len() {
                4 => u32::from_ne_bytes(raw.try_into().unwrap()) as u64,
                8 => u64::from_ne_bytes(raw.try_into().unwrap()),
                _ => return Err(ReadError::Fault),
            })
        };
        let locked = match field(self.locked)? {
            0 => false,
            1 => true,
            _ => return Err(ReadError::Fault),
        };
        Ok(GilWord {
            locked,
            last_holder: RemoteAddr(field(self.last_holder)?),
            switch_number: field(self.switch_number)?,
            // Optional: a layout whose interval cannot be decoded still samples, without rule 6's bound.
            interval_us: self.interval.and_then(|info| field(info).ok()),
        })
    }
}

pub(super) fn read_field(
    mem: &dyn MemorySource,
    base: RemoteAddr,
    layout: &Layout,
    name: &str,
) -> Result<RemoteAddr, WalkError> {
    let field = layout.field(name).ok_or_else(|| {
        WalkError::Corrupt(format!("layout {} has no field {name}", layout.key()))
    })?;
    let addr = base
        .offset(field.offset)
        .ok_or_else(|| WalkError::Corrupt(format!("{name} overflows at {base}")))?;
    Ok(mem.read_addr(addr)?)
}

pub(super) fn check_pointer(addr: RemoteAddr, what: &str) -> Result<RemoteAddr, WalkError> {
    if addr.is_plausible_pointer(8) {
        Ok(addr)
    } else {
        Err(WalkError::Corrupt(format!(
            "{what} is not a valid pointer ({addr})"
        )))
    }
}

/// The interpreters, head first (the main interpreter is the last).
pub fn read_interpreters(
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
) -> Result<Vec<RemoteAddr>, WalkError> {
    let head = read_field(mem, runtime, layout, "runtime.interpreters.head")?;
    if head.is_null() {
        return Err(WalkError::NotInitialized);
    }
    let mut interps = Vec::new();
    let mut current = head;
    while !current.is_null() {
        check_pointer(current, "interpreter pointer")?;
        if interps.len() >= MAX_INTERPRETERS || interps.contains(&current) {
            return Err(WalkError::Corrupt(
                "the interpreter list loops or is implausibly long".into(),
            ));
        }
        interps.push(current);
        current = read_field(mem, current, layout, "interp.next")?;
    }
    Ok(interps)
}

/// The address of the GIL struct: embedded in `_PyRuntime` (3.7–3.11), or pointed to by the main
/// interpreter's `ceval.gil` (3.12+).
pub fn find_gil(
    mem: &dyn MemorySource,
    layout: &Layout,
    runtime: RemoteAddr,
) -> Result<RemoteAddr, WalkError> {
    if let Some(gil) = layout.field("runtime.ceval.gil") {
        return runtime
            .offset(gil.offset)
            .ok_or_else(|| WalkError::Corrupt("GIL address overflows".into()));
    }
    let main = match layout.field("runtime.interpreters.main") {
        Some(f) => mem.read_addr(runtime.offset(f.offset).ok_or(ReadError::Fault)?)?,
        None => *read_interpreters(mem, layout, runtime)?
            .last()
            .ok_or(WalkError::NotInitialized)?,
    };
    if main.is_null() {
        return Err(WalkError::NotInitialized);
    }
    check_pointer(main, "main interpreter")?;
    let gil = read_field(mem, main, layout, "interp.ceval.gil")?;
    if gil.is_null() {
        return Err(WalkError::NotInitialized);
    }
    check_pointer(gil, "interp->ceval.gil")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::layout::{Flavour, find_shipped};

    #[test]
    fn gil_words_include_the_switch_interval() {
        let layout = find_shipped("3.12", Flavour::Default, "x86_64")
            .unwrap()
            .unwrap();
        let fields = GilWordFields::new(&layout);
        let mut bytes = vec![0u8; (fields.end - fields.start) as usize];
        let mut put = |name: &str, value: u64| {
            let info = layout.required(name);
            let at = (info.offset - fields.start) as usize;
            bytes[at..at + info.size as usize]
                .copy_from_slice(&value.to_ne_bytes()[..info.size as usize]);
        };
        put("gil.interval", 5000);
        put("gil.locked", 1);
        put("gil.last_holder", 0x7000);
        put("gil.switch_number", 42);
        let word = fields.decode(&bytes).unwrap();
        assert_eq!(word.interval_us, Some(5000));
        assert!(word.locked);
        assert_eq!(word.last_holder, RemoteAddr(0x7000));
        assert_eq!(word.switch_number, 42);
    }
}
