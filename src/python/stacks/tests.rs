//! The stack reader over recorded memory: names, lines, replaced code objects, loops, reads per
//! stack.
use super::*;
use crate::process::memory::{ReadError, SnapshotMemory};
use crate::python::test_heap::{
    BASE, BYTES_TYPE, CODE_TYPE, Heap, STR_TYPE, memory, one_frame, reader_of,
};
use innermost::CSTACK_SPAN;

fn reader(layout: &Layout) -> StackReader {
    reader_of(layout, PyVersion::from_hex(0x0309_00f0))
}

#[test]
fn reads_function_file_and_line() {
    let (heap, tstate, _) = one_frame("prefetch");
    let mut reader = reader(&heap.layout);
    let stack = reader
        .read_stack(&memory(&heap), RemoteAddr(tstate))
        .unwrap();
    assert_eq!(stack, ["prefetch (a.py:11)"]);
}

#[test]
fn a_code_object_replaced_at_the_same_address_is_read_afresh() {
    let (mut heap, tstate, code) = one_frame("before");
    let mut reader = reader(&heap.layout);
    let tstate = RemoteAddr(tstate);
    assert_eq!(
        reader.read_stack(&memory(&heap), tstate).unwrap(),
        ["before (a.py:11)"]
    );
    // The code object is freed and another allocated at its address, named otherwise.
    let other = heap.str("after", true);
    let name = heap.field("code.co_name");
    heap.put(code + name, other, 8);
    assert_eq!(
        reader.read_stack(&memory(&heap), tstate).unwrap(),
        ["after (a.py:11)"]
    );
    assert_eq!(reader.stats.code_objects_replaced, 1);
    assert_eq!(reader.stats.code_objects_read, 2);
    // Unchanged: served from the cache.
    reader.read_stack(&memory(&heap), tstate).unwrap();
    assert_eq!(reader.stats.code_objects_read, 2);
}

#[test]
fn a_frame_list_that_loops_ends() {
    let (mut heap, tstate, _) = one_frame("spin");
    let at = (tstate + heap.field("tstate.frame") - BASE) as usize;
    let frame = u64::from_le_bytes(heap.bytes[at..at + 8].try_into().unwrap());
    let back = heap.field("frame.f_back");
    heap.put(frame + back, frame, 8);
    let mut reader = reader(&heap.layout);
    let stack = reader
        .read_stack(&memory(&heap), RemoteAddr(tstate))
        .unwrap();
    assert_eq!(stack, ["spin (a.py:11)"]);
}

/// Counts the system calls a reader would make.
struct Counting {
    inner: SnapshotMemory,
    calls: std::cell::Cell<usize>,
}

impl MemorySource for Counting {
    fn read_into(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError> {
        self.calls.set(self.calls.get() + 1);
        self.inner.read_into(addr, buf)
    }

    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        self.calls.set(self.calls.get() + 1);
        self.inner.read_each(reads)
    }
}

/// A 3.12 thread state whose data stack holds three frames, `outer` calling `middle` calling
/// `inner`, one after another (callers below callees); returns the heap, the thread state, the
/// C frame that points to the innermost, and the frames' addresses, outermost first.
fn data_stack_312() -> (Heap, u64, u64, [u64; 3]) {
    let mut heap = Heap::shipped("3.12");
    let file = heap.str("a.py", true);
    let table = heap.object(BYTES_TYPE, heap.field("bytes.ob_sval") + 8);
    let codes: Vec<u64> = ["outer", "middle", "inner"]
        .iter()
        .map(|name| {
            let function = heap.str(name, true);
            let code = heap.object(CODE_TYPE, 512);
            heap.put(code + heap.field("code.co_qualname"), function, 8);
            heap.put(code + heap.field("code.co_filename"), file, 8);
            heap.put(code + heap.field("code.co_firstlineno"), 1, 4);
            heap.put(code + heap.field("code.co_linetable"), table, 8);
            code
        })
        .collect();
    let size = heap
        .layout
        .field("iframe")
        .unwrap()
        .size
        .next_multiple_of(16);
    let stack = heap.alloc(3 * size);
    let frames = [stack, stack + size, stack + 2 * size];
    for (i, &code) in codes.iter().enumerate() {
        heap.put(frames[i] + heap.field("iframe.executable"), code, 8);
        if i > 0 {
            heap.put(frames[i] + heap.field("iframe.previous"), frames[i - 1], 8);
        }
    }
    let cframe = heap.alloc(64);
    heap.put(cframe + heap.field("cframe.current_frame"), frames[2], 8);
    let tstate = heap.alloc(512);
    heap.put(tstate + heap.field("tstate.cframe"), cframe, 8);
    (heap, tstate, cframe, frames)
}

#[test]
fn a_data_stack_of_frames_is_read_in_one_window_and_their_code_in_one_batch() {
    let (heap, tstate, _, _) = data_stack_312();
    let mut reader = reader_of(&heap.layout, PyVersion::from_hex(0x030c_00f0));
    let mem = Counting {
        inner: memory(&heap),
        calls: Default::default(),
    };
    let tstate = RemoteAddr(tstate);
    let names: Vec<String> = reader
        .read_stack(&mem, tstate)
        .unwrap()
        .iter()
        .map(|line| line.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(names, ["inner", "middle", "outer"]);
    // Once the code objects are cached: the thread state's two pointers to the innermost
    // frame, one window for the three frames, one batch for their code objects' headers.
    mem.calls.set(0);
    reader.read_stack(&mem, tstate).unwrap();
    assert_eq!(mem.calls.get(), 4);
}

#[test]
fn what_is_not_a_code_object_is_not_shown() {
    let (mut heap, tstate, code) = one_frame("spin");
    let ob_type = heap.field("object.ob_type");
    heap.put(code + ob_type, STR_TYPE, 8);
    let mut reader = reader(&heap.layout);
    assert_eq!(
        reader
            .read_stack(&memory(&heap), RemoteAddr(tstate))
            .unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn a_frames_slots_are_digested_with_it_and_its_text_comes_from_the_cached_code() {
    let (mut heap, tstate, _) = one_frame("prefetch");
    let mut reader = reader(&heap.layout);
    let tstate = RemoteAddr(tstate);
    reader.read_stack(&memory(&heap), tstate).unwrap();
    let WatchedFrame {
        id,
        slots_digest: before,
    } = reader
        .innermost_watched(&memory(&heap), tstate)
        .unwrap()
        .unwrap();
    assert!(before.is_some(), "3.9's layout places f_localsplus");
    assert_eq!(reader.frame_text(id).as_deref(), Some("prefetch (a.py:11)"));
    let same = reader.innermost_watched(&memory(&heap), tstate).unwrap();
    let slots_digest = before;
    assert_eq!(same, Some(WatchedFrame { id, slots_digest }));
    // A local changes (a loop variable): the same frame and instruction, other slots.
    let slots = heap.field("frame.f_localsplus");
    heap.put(id.frame + slots + 8, 0x5555, 8);
    let WatchedFrame {
        id: again,
        slots_digest: after,
    } = reader
        .innermost_watched(&memory(&heap), tstate)
        .unwrap()
        .unwrap();
    assert_eq!(again, id);
    assert_ne!(after, before);
    // A frame whose code object is not cached has no text.
    let unknown = FrameId { code: 0x42, ..id };
    assert_eq!(reader.frame_text(unknown), None);
}

#[test]
fn a_stack_moved_to_another_instruction_of_its_innermost_frame_shows_that_line() {
    let (heap, tstate, _) = one_frame("prefetch");
    let mut reader = reader(&heap.layout);
    let tstate = RemoteAddr(tstate);
    let stack = reader.read_stack(&memory(&heap), tstate).unwrap();
    let WatchedFrame { id: then, .. } = reader
        .innermost_watched(&memory(&heap), tstate)
        .unwrap()
        .unwrap();
    let callers = [stack[0].clone(), "main (b.py:3)".to_string()];
    // Instruction 0 lies in the line table's first range: the code's first line.
    let now = FrameId { instr: 0, ..then };
    assert_eq!(
        reader.moved_to(&callers, then, now),
        Some(vec![
            "prefetch (a.py:10)".to_string(),
            "main (b.py:3)".to_string()
        ])
    );
    // A stack whose first line is not that frame's (its innermost frame was not shown), or a code
    // object not cached: nothing to move.
    let other = ["main (b.py:3)".to_string()];
    assert_eq!(reader.moved_to(&other, then, now), None);
    let unknown = FrameId { code: 0x42, ..now };
    assert_eq!(
        reader.moved_to(&callers, FrameId { code: 0x42, ..then }, unknown),
        None
    );
}

/// `tstate`'s innermost frame read near `recent`'s places, checked against the answer of its
/// pointers: the frame's address, and the system calls the read took.
fn read_near(
    reader: &StackReader,
    heap: &Heap,
    tstate: u64,
    recent: &mut RecentTops,
) -> (Option<u64>, usize) {
    let mem = Counting {
        inner: memory(heap),
        calls: Default::default(),
    };
    let near = reader
        .innermost_watched_near(&mem, RemoteAddr(tstate), recent)
        .unwrap();
    let plain = reader.innermost_watched(&memory(heap), RemoteAddr(tstate));
    assert_eq!(near, plain.unwrap());
    (near.map(|w| w.id.frame), mem.calls.get())
}

/// The innermost frame read near where the thread was found last: one system call while it is at
/// one of its last two frames, and always the answer its pointers give.
#[test]
fn the_innermost_frame_near_its_last_places_is_one_read_and_what_the_pointers_say() {
    let (mut heap, tstate, cframe, frames) = data_stack_312();
    let reader = reader_of(&heap.layout, PyVersion::from_hex(0x030c_00f0));
    let current = heap.field("cframe.current_frame");
    let read = |heap: &Heap, recent: &mut RecentTops| read_near(&reader, heap, tstate, recent);
    let mut recent = RecentTops::default();
    // Nothing to guess yet: the batch, then the C frame's pointer, then the frame.
    assert_eq!(read(&heap, &mut recent), (Some(frames[2]), 3));
    assert_eq!(read(&heap, &mut recent), (Some(frames[2]), 1));
    // Back in its caller: the C frame was guessed right, the frame is read after the batch.
    heap.put(cframe + current, frames[1], 8);
    assert_eq!(read(&heap, &mut recent), (Some(frames[1]), 2));
    // Both places are remembered: one read at either.
    heap.put(cframe + current, frames[2], 8);
    assert_eq!(read(&heap, &mut recent), (Some(frames[2]), 1));
    heap.put(cframe + current, frames[1], 8);
    assert_eq!(read(&heap, &mut recent), (Some(frames[1]), 1));
    // The same place at another instruction: the bytes of this read, not of an earlier one.
    heap.put(frames[1] + heap.field("iframe.instr_ptr"), 0x1234, 8);
    let WatchedFrame { id, .. } = reader
        .innermost_watched_near(&memory(&heap), RemoteAddr(tstate), &mut recent)
        .unwrap()
        .unwrap();
    assert_eq!(id.instr, 0x1234);
    // Another C frame (a nested run of the interpreter loop): its pointer and frame after the batch.
    let other = heap.alloc(64);
    heap.put(other + current, frames[0], 8);
    heap.put(tstate + heap.field("tstate.cframe"), other, 8);
    assert_eq!(read(&heap, &mut recent), (Some(frames[0]), 3));
    // No Python frame there any more.
    heap.put(other + current, 0, 8);
    assert_eq!(read(&heap, &mut recent), (None, 1));
}

/// A thread that runs Python called back from native code goes round several C frames (one per
/// nesting of the interpreter loop), near each other on its C stack: the first read brings its
/// last places' C frames' words as one range where they lie together, so back in one of them, or
/// in a C frame between them, its frame costs one more read at most, not the pointer chain's two.
/// Words far apart are a range each.
#[test]
fn a_thread_going_round_several_c_frames_finds_each_in_the_first_read() {
    let (mut heap, tstate, first, frames) = data_stack_312();
    let reader = reader_of(&heap.layout, PyVersion::from_hex(0x030c_00f0));
    let current = heap.field("cframe.current_frame");
    let calls = |heap: &Heap, recent: &mut RecentTops| read_near(&reader, heap, tstate, recent).1;
    let cframe_at = |heap: &mut Heap, frame: u64| {
        let cframe = heap.alloc(64);
        heap.put(cframe + current, frame, 8);
        cframe
    };
    // Two more C frames beside the first, one further away than a range.
    let near = [
        cframe_at(&mut heap, frames[0]),
        cframe_at(&mut heap, frames[1]),
    ];
    heap.alloc(2 * CSTACK_SPAN);
    let far = cframe_at(&mut heap, frames[1]);
    let enter =
        |heap: &mut Heap, cframe: u64| heap.put(tstate + heap.field("tstate.cframe"), cframe, 8);
    let mut recent = RecentTops::default();
    let mut expect = |cframe: u64, reads: usize| {
        enter(&mut heap, cframe);
        assert_eq!(calls(&heap, &mut recent), reads, "C frame {cframe:#x}");
    };
    // Not seen before: the batch, the C frame's pointer, the frame.
    expect(first, 3);
    expect(near[0], 3);
    // Both places, frames and all, in the first read.
    expect(first, 1);
    expect(near[1], 3);
    // Between the two places (first, near[1]): its pointer came with the first read, its frame
    // (not one of the last two) is read after.
    expect(near[0], 2);
    // Far from them: its own range, and the other place's still read.
    expect(far, 3);
    expect(near[0], 1);
}

/// Serves the first system call from one memory and every later one from another: a target that
/// moved on between the two.
struct Moving {
    before: SnapshotMemory,
    after: SnapshotMemory,
    calls: std::cell::Cell<usize>,
}

impl Moving {
    fn now(&self) -> &SnapshotMemory {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() == 1 {
            &self.before
        } else {
            &self.after
        }
    }
}

impl MemorySource for Moving {
    fn read_into(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), ReadError> {
        self.now().read_into(addr, buf)
    }

    fn read_each(&self, reads: &mut [(RemoteAddr, &mut [u8])]) -> usize {
        self.now().read_each(reads)
    }
}

/// A guessed frame's bytes stand only where the pointers of the same read lead to it: here the C
/// frame was not guessed, its pointer is read after the batch, and the guessed frame it leads to
/// had other bytes when the batch read them.
#[test]
fn a_guessed_frame_read_before_its_pointer_is_read_again() {
    let (mut heap, tstate, _, frames) = data_stack_312();
    let reader = reader_of(&heap.layout, PyVersion::from_hex(0x030c_00f0));
    let mut recent = RecentTops::default();
    reader
        .innermost_watched_near(&memory(&heap), RemoteAddr(tstate), &mut recent)
        .unwrap();
    // A nested run of the interpreter loop, whose C frame points at the same data-stack slot,
    // where the thread has meanwhile put another call (another instruction).
    let other = heap.alloc(64);
    heap.put(other + heap.field("cframe.current_frame"), frames[2], 8);
    heap.put(tstate + heap.field("tstate.cframe"), other, 8);
    let before = memory(&heap);
    heap.put(frames[2] + heap.field("iframe.instr_ptr"), 0x1234, 8);
    let mem = Moving {
        before,
        after: memory(&heap),
        calls: Default::default(),
    };
    let WatchedFrame { id, .. } = reader
        .innermost_watched_near(&mem, RemoteAddr(tstate), &mut recent)
        .unwrap()
        .unwrap();
    assert_eq!((id.frame, id.instr), (frames[2], 0x1234));
}
