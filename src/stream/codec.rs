//! The payloads of sample and stack records, and the varints everything is written in.
//!
//! A sample is written as its difference from the previous sample of the stream (both sides keep
//! that one): at 10 kHz a tick mostly repeats the last, and what changes (times, a hand-off, one
//! thread waking) is small. Times are zigzag deltas, so any pair of values round-trips (a clock that
//! went back costs bytes, never correctness). The GIL words travel only when changed (one flags
//! byte). Threads travel as operations against the previous sample's threads, walked with a cursor:
//!
//! - `1nnnnnnn`: the next n+1 previous threads again, unchanged (a run: one byte for up to 128);
//! - `01nnnnnn`: the next n+1 previous threads are gone;
//! - `00mmmmmm`: one thread, the next previous one with the fields in mask `m` rewritten, or (bit
//!   `NEW`) a thread not there before, built from its tid and the fields in `m`.
//!
//! A thread whose tid moved elsewhere in the order is simply written as new: order is the sample's.
//! A syscall equal to one a thread of the previous sample was in is written as that thread's index.

use crate::addr::RemoteAddr;
use crate::infer::findings::StackReading;
use crate::infer::intervals::GilState;
use crate::infer::sample::{GilFlagsReading, Sample, ThreadSample};
use crate::observed::Waiters;
use crate::observed::{KernelState, SchedStat};

use super::wire::{Bad, Input, put_delta, put_varint, unzigzag, zigzag};
use super::{MAX_FRAMES, MAX_THREADS};

// The sample's flags byte.
const LOCKED: u8 = 1;
const ALL_KERNEL_READ: u8 = 1 << 1;
const HOLDER: u8 = 1 << 2;
const SWITCH: u8 = 1 << 3;
const INTERVAL: u8 = 1 << 4;
const WAITERS: u8 = 1 << 5;
const WAITERS_AGAIN: u8 = 1 << 6;
const MUTEX_OWNER: u8 = 1 << 7;

// A thread operation's mask (`00mmmmmm`).
const T_NEW: u8 = 1;
const T_IDS: u8 = 1 << 1;
const T_KERNEL: u8 = 1 << 2;
const T_SLICES: u8 = 1 << 3;
const T_SCHEDSTAT: u8 = 1 << 4;
const T_FLAGS: u8 = 1 << 5;
const RUN: u8 = 0x80;
/// How far the encoder searches the previous sample's threads (for a tid, for a syscall): past it
/// a thread costs more bytes, never a wrong decode, and the encoder's time stays linear.
const LOOK_AHEAD: usize = 256;
const GONE: u8 = 0x40;

/// Writes `cur` as its difference from `prev` (an empty `Sample::default()` before the first).
/// `period_ns` is the header's: a tick's time is written as its difference from the last tick's time
/// plus the period, which the sampler's jitter keeps under 2 bytes.
pub fn encode_sample(prev: &Sample, cur: &Sample, period_ns: u64, out: &mut Vec<u8>) {
    // t_ns lies a few µs after read_ns, so it is written from read_ns.
    put_delta(out, prev.read_ns.wrapping_add(period_ns), cur.read_ns);
    put_delta(out, cur.read_ns, cur.t_ns);
    // When the tick began: a few µs before the read returned (more when the read stalled).
    put_delta(out, cur.read_ns, cur.woke_ns);
    let (p, c) = (&prev.word, &cur.word);
    let mut flags = 0;
    for (set, bit) in [
        (c.locked, LOCKED),
        (cur.all_kernel_read, ALL_KERNEL_READ),
        (c.last_holder != p.last_holder, HOLDER),
        (c.switch_number != p.switch_number, SWITCH),
        (c.interval_us != p.interval_us, INTERVAL),
        (cur.waiters != prev.waiters, WAITERS),
        (cur.waiters_again != prev.waiters_again, WAITERS_AGAIN),
        (cur.mutex_owner != prev.mutex_owner, MUTEX_OWNER),
    ] {
        if set {
            flags |= bit;
        }
    }
    out.push(flags);
    if flags & SWITCH != 0 {
        put_delta(out, p.switch_number, c.switch_number);
    }
    if flags & INTERVAL != 0 {
        put_option(out, c.interval_us, put_varint);
    }
    if flags & WAITERS != 0 {
        put_option(out, cur.waiters, put_waiters);
    }
    if flags & WAITERS_AGAIN != 0 {
        put_option(out, cur.waiters_again, put_waiters);
    }
    if flags & MUTEX_OWNER != 0 {
        put_option(out, cur.mutex_owner, |out, v| put_varint(out, v.into()));
    }
    encode_threads(&prev.threads, &cur.threads, out);
    // After the threads, so a holder that is one of them (the usual case) is its index, one byte.
    if flags & HOLDER != 0 {
        match cur.threads.iter().position(|t| t.tstate == c.last_holder) {
            Some(i) => put_varint(out, i as u64 + 1),
            None => {
                out.push(0);
                put_varint(out, c.last_holder.0);
            }
        }
    }
}

fn put_option<T>(out: &mut Vec<u8>, v: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put(out, v);
        }
    }
}

fn put_waiters(out: &mut Vec<u8>, w: Waiters) {
    put_varint(out, w.take.into());
    put_varint(out, w.drop.into());
}

fn encode_threads(prev: &[ThreadSample], cur: &[ThreadSample], out: &mut Vec<u8>) {
    put_varint(out, cur.len() as u64);
    let mut cursor = 0;
    let mut run = 0usize;
    for t in cur {
        // The same tid further on in the previous order: the threads before it are gone. Usually it
        // is the very next one, so this search is one comparison; bounded, so a sample of thousands
        // of reordered threads costs the encoder O(n), not O(n²) (they are then written as new).
        let found = prev[cursor..]
            .iter()
            .take(LOOK_AHEAD)
            .position(|p| p.tid == t.tid);
        let Some(ahead) = found else {
            flush_run(out, &mut run);
            put_thread(out, prev, &ThreadSample::default(), t, T_NEW);
            continue;
        };
        let base = &prev[cursor + ahead];
        if ahead > 0 {
            flush_run(out, &mut run);
            let mut gone = ahead;
            while gone > 0 {
                let n = gone.min(64);
                out.push(GONE | (n - 1) as u8);
                gone -= n;
            }
        }
        cursor += ahead + 1;
        if base == t {
            run += 1;
        } else {
            flush_run(out, &mut run);
            put_thread(out, prev, base, t, 0);
        }
    }
    flush_run(out, &mut run);
}

fn flush_run(out: &mut Vec<u8>, run: &mut usize) {
    while *run > 0 {
        let n = (*run).min(128);
        out.push(RUN | (n - 1) as u8);
        *run -= n;
    }
}

fn put_thread(
    out: &mut Vec<u8>,
    prev: &[ThreadSample],
    base: &ThreadSample,
    t: &ThreadSample,
    new: u8,
) {
    let mut mask = new;
    for (changed, bit) in [
        (
            t.their_tid != base.their_tid || t.tstate != base.tstate,
            T_IDS,
        ),
        (t.kernel != base.kernel, T_KERNEL),
        (t.slices_before_sleep != base.slices_before_sleep, T_SLICES),
        (t.schedstat != base.schedstat, T_SCHEDSTAT),
        (t.gil_flags != base.gil_flags, T_FLAGS),
    ] {
        if changed {
            mask |= bit;
        }
    }
    out.push(mask);
    if mask & T_NEW != 0 {
        put_varint(out, t.tid.into());
    }
    if mask & T_IDS != 0 {
        put_varint(out, t.their_tid.into());
        put_varint(out, t.tstate.0);
    }
    if mask & T_KERNEL != 0 {
        match t.kernel {
            None => out.push(0),
            Some(KernelState::Running) => out.push(1),
            Some(KernelState::Blocked) => out.push(2),
            Some(KernelState::InSyscall { nr, arg0, arg1 }) => {
                // A thread that starts to wait mostly waits where another waited a tick ago (the
                // GIL's condition variable): naming that thread is 2 bytes instead of about 12.
                match prev
                    .iter()
                    .take(LOOK_AHEAD)
                    .position(|p| p.kernel == t.kernel)
                {
                    Some(i) => {
                        out.push(4);
                        put_varint(out, i as u64);
                    }
                    None => {
                        out.push(3);
                        put_varint(out, zigzag(nr));
                        put_varint(out, arg0);
                        put_varint(out, arg1);
                    }
                }
            }
        }
    }
    if mask & T_SLICES != 0 {
        put_option(out, t.slices_before_sleep, put_varint);
    }
    if mask & T_SCHEDSTAT != 0 {
        // Counters that grow: their deltas from the last reading are small.
        let from = base.schedstat.unwrap_or(ZERO_SCHEDSTAT);
        put_option(out, t.schedstat, |out, s| {
            put_delta(out, from.cpu_ns, s.cpu_ns);
            put_delta(out, from.run_queue_ns, s.run_queue_ns);
            put_delta(out, from.timeslices, s.timeslices);
        });
    }
    if mask & T_FLAGS != 0 {
        out.push(match t.gil_flags {
            None => 0,
            Some(f) => 1 + u8::from(f.holds) + 2 * u8::from(f.requested),
        });
    }
}

const ZERO_SCHEDSTAT: SchedStat = SchedStat {
    cpu_ns: 0,
    run_queue_ns: 0,
    timeslices: 0,
};

/// Reads into `cur` the sample written as its difference from `prev`; `cur`'s thread vector is
/// reused. The whole payload must be the sample.
pub fn decode_sample(
    prev: &Sample,
    period_ns: u64,
    input: &mut Input<'_>,
    cur: &mut Sample,
) -> Result<(), Bad> {
    cur.read_ns = input.delta(prev.read_ns.wrapping_add(period_ns))?;
    cur.t_ns = input.delta(cur.read_ns)?;
    cur.woke_ns = input.delta(cur.read_ns)?;
    let flags = input.u8()?;
    let p = &prev.word;
    cur.word.locked = flags & LOCKED != 0;
    cur.all_kernel_read = flags & ALL_KERNEL_READ != 0;
    cur.word.switch_number = if flags & SWITCH != 0 {
        input.delta(p.switch_number)?
    } else {
        p.switch_number
    };
    cur.word.interval_us = if flags & INTERVAL != 0 {
        get_option(input, "interval", Input::varint)?
    } else {
        p.interval_us
    };
    cur.waiters = if flags & WAITERS != 0 {
        get_option(input, "waiters", get_waiters)?
    } else {
        prev.waiters
    };
    cur.waiters_again = if flags & WAITERS_AGAIN != 0 {
        get_option(input, "waiters", get_waiters)?
    } else {
        prev.waiters_again
    };
    cur.mutex_owner = if flags & MUTEX_OWNER != 0 {
        get_option(input, "mutex owner", |i| i.u32("a mutex owner"))?
    } else {
        prev.mutex_owner
    };
    decode_threads(&prev.threads, input, &mut cur.threads)?;
    cur.word.last_holder = if flags & HOLDER != 0 {
        let start = input.pos;
        match input.varint()? {
            0 => RemoteAddr(input.varint()?),
            i => match cur.threads.get((i - 1) as usize) {
                Some(t) => t.tstate,
                None => {
                    input.pos = start;
                    return input.bad(format!(
                        "the GIL's holder is thread {i} of a sample of {}",
                        cur.threads.len()
                    ));
                }
            },
        }
    } else {
        p.last_holder
    };
    Ok(())
}

fn get_option<'a, T>(
    input: &mut Input<'a>,
    what: &str,
    get: impl FnOnce(&mut Input<'a>) -> Result<T, Bad>,
) -> Result<Option<T>, Bad> {
    if input.tag(what)? {
        get(input).map(Some)
    } else {
        Ok(None)
    }
}

fn get_waiters(input: &mut Input<'_>) -> Result<Waiters, Bad> {
    Ok(Waiters {
        take: input.u32("a waiter count")?,
        drop: input.u32("a waiter count")?,
    })
}

fn decode_threads(
    prev: &[ThreadSample],
    input: &mut Input<'_>,
    threads: &mut Vec<ThreadSample>,
) -> Result<(), Bad> {
    let n = input.count("threads", MAX_THREADS)?;
    threads.clear();
    let mut cursor = 0;
    // Every operation consumes a byte, so a payload of garbage ends this loop at its end.
    while threads.len() < n {
        let start = input.pos;
        let op = input.u8()?;
        if op & RUN != 0 {
            let k = usize::from(op & 0x7f) + 1;
            if cursor + k > prev.len() || threads.len() + k > n {
                input.pos = start;
                return input.bad(format!(
                    "a run of {k} unchanged threads beyond the previous sample's {} or this one's {n}",
                    prev.len()
                ));
            }
            threads.extend_from_slice(&prev[cursor..cursor + k]);
            cursor += k;
        } else if op & GONE != 0 {
            let k = usize::from(op & 0x3f) + 1;
            if cursor + k > prev.len() {
                input.pos = start;
                return input.bad(format!(
                    "{k} threads gone beyond the previous sample's {}",
                    prev.len()
                ));
            }
            cursor += k;
        } else {
            let base = if op & T_NEW != 0 {
                ThreadSample {
                    tid: input.u32("a thread id")?,
                    ..ThreadSample::default()
                }
            } else {
                let Some(&base) = prev.get(cursor) else {
                    input.pos = start;
                    return input.bad(format!(
                        "a changed thread beyond the previous sample's {}",
                        prev.len()
                    ));
                };
                cursor += 1;
                base
            };
            threads.push(get_thread(input, prev, base, op)?);
        }
    }
    Ok(())
}

fn get_thread(
    input: &mut Input<'_>,
    prev: &[ThreadSample],
    mut t: ThreadSample,
    mask: u8,
) -> Result<ThreadSample, Bad> {
    if mask & T_IDS != 0 {
        t.their_tid = input.u32("a thread id")?;
        t.tstate = RemoteAddr(input.varint()?);
    }
    if mask & T_KERNEL != 0 {
        t.kernel = match input.u8()? {
            0 => None,
            1 => Some(KernelState::Running),
            2 => Some(KernelState::Blocked),
            3 => Some(KernelState::InSyscall {
                nr: unzigzag(input.varint()?),
                arg0: input.varint()?,
                arg1: input.varint()?,
            }),
            4 => {
                let start = input.pos;
                let i = input.varint()?;
                match prev.get(i as usize).map(|p| p.kernel) {
                    Some(k @ Some(KernelState::InSyscall { .. })) => k,
                    _ => {
                        input.pos = start;
                        return input.bad(format!(
                            "the syscall of thread {i} of the previous sample, which has none"
                        ));
                    }
                }
            }
            k => {
                input.pos -= 1;
                return input.bad(format!("invalid kernel state {k}"));
            }
        };
    }
    if mask & T_SLICES != 0 {
        t.slices_before_sleep = get_option(input, "timeslices", Input::varint)?;
    }
    if mask & T_SCHEDSTAT != 0 {
        let from = t.schedstat.unwrap_or(ZERO_SCHEDSTAT);
        t.schedstat = get_option(input, "schedstat", |i| {
            Ok(SchedStat {
                cpu_ns: i.delta(from.cpu_ns)?,
                run_queue_ns: i.delta(from.run_queue_ns)?,
                timeslices: i.delta(from.timeslices)?,
            })
        })?;
    }
    if mask & T_FLAGS != 0 {
        t.gil_flags = match input.u8()? {
            0 => None,
            f @ 1..=4 => Some(GilFlagsReading {
                holds: (f - 1) & 1 != 0,
                requested: (f - 1) & 2 != 0,
            }),
            f => {
                input.pos -= 1;
                return input.bad(format!("invalid GIL flags {f}"));
            }
        };
    }
    Ok(t)
}

pub fn state_byte(state: GilState) -> u8 {
    match state {
        GilState::Hold => 0,
        GilState::Take => 1,
        GilState::Drop => 2,
        GilState::Released => 3,
        GilState::Unknown => 4,
    }
}

/// The frame names a stream has defined, so each is written once: a recording reads the same few
/// stacks thousands of times, and their text was four fifths of a stream (dispatch, 10 kHz). Writer
/// and reader remember a name by the same rule (while under `MAX_FRAME_NAMES` names and
/// `MAX_FRAME_NAME_BYTES` bytes), so they agree on every number without a word about it.
pub const MAX_FRAME_NAMES: usize = 1 << 20;
pub const MAX_FRAME_NAME_BYTES: usize = 64 << 20;

#[derive(Default)]
pub struct FrameNamesWritten {
    ids: std::collections::HashMap<String, u64>,
    bytes: usize,
}

#[derive(Default)]
pub struct FrameNamesRead {
    names: Vec<String>,
    bytes: usize,
}

fn room_for(count: usize, bytes: usize, len: usize) -> bool {
    count < MAX_FRAME_NAMES && bytes + len <= MAX_FRAME_NAME_BYTES
}

/// Each frame: 0 then its length and text the first time (remembered as the next number), or its
/// number + 1 after.
/// `begins_slice` is not in the payload: it is the record's kind.
pub fn encode_stack(reading: &StackReading, names: &mut FrameNamesWritten, out: &mut Vec<u8>) {
    put_varint(out, reading.tid.into());
    put_varint(out, reading.t_ns);
    out.push(state_byte(reading.state));
    put_varint(out, reading.samples);
    put_varint(out, reading.frames.len() as u64);
    for f in reading.frames.iter() {
        if let Some(&id) = names.ids.get(f) {
            put_varint(out, id + 1);
            continue;
        }
        out.push(0);
        put_varint(out, f.len() as u64);
        out.extend_from_slice(f.as_bytes());
        if room_for(names.ids.len(), names.bytes, f.len()) {
            names.bytes += f.len();
            let id = names.ids.len() as u64;
            names.ids.insert(f.clone(), id);
        }
    }
}

/// A stack record's payload; `begins_slice` is its kind's.
pub fn decode_stack(
    input: &mut Input<'_>,
    names: &mut FrameNamesRead,
    begins_slice: bool,
) -> Result<StackReading, Bad> {
    let tid = input.u32("a thread id")?;
    let t_ns = input.varint()?;
    let state = match input.u8()? {
        0 => GilState::Hold,
        1 => GilState::Take,
        2 => GilState::Drop,
        3 => GilState::Released,
        4 => GilState::Unknown,
        s => {
            input.pos -= 1;
            return input.bad(format!("invalid GIL state {s}"));
        }
    };
    let samples = input.varint()?;
    let n = input.count("frames", MAX_FRAMES)?;
    let mut frames = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let at = input.pos;
        let id = input.varint()?;
        if id > 0 {
            match names.names.get((id - 1) as usize) {
                Some(name) => frames.push(name.clone()),
                None => {
                    input.pos = at;
                    return input.bad(format!(
                        "frame name {} of the {} defined so far",
                        id - 1,
                        names.names.len()
                    ));
                }
            }
            continue;
        }
        let len = input.count("bytes in a frame", super::MAX_RECORD_BYTES as usize)?;
        let start = input.pos;
        let bytes = input.bytes(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                if room_for(names.names.len(), names.bytes, s.len()) {
                    names.bytes += s.len();
                    names.names.push(s.to_string());
                }
                frames.push(s.to_string())
            }
            Err(e) => {
                input.pos = start + e.valid_up_to();
                return input.bad("a frame that is not valid UTF-8");
            }
        }
    }
    Ok(StackReading {
        tid,
        t_ns,
        state,
        frames: frames.into(),
        samples,
        begins_slice,
    })
}
