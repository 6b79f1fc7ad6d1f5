//! The line of a loop's back-edge where the line table gives it none.
//!
//! CPython 3.10, 3.11 and 3.12 compile the jump that closes a loop body reached from a branch
//! (`for …: if c: …`) without a line, and the interpreter lets the GIL go at that jump (its
//! eval-breaker check). A thread that waits there, or is read there while it holds, would show its
//! function without a line (every wait of a 3.11 spinner, measured). The jump goes to the loop's
//! head, so gilsample shows the head's line: where the thread goes on, and the line
//! `sys.settrace` reports next. Which opcodes those jumps are comes from the builds themselves
//! (python-layouts/opcodes/back-jumps.json, scripts/generate-opcodes.py): 3.11 and 3.12 jump back
//! by their argument from the next instruction, 3.10's `JUMP_ABSOLUTE` to the instruction its
//! argument numbers.

use std::collections::HashMap;

use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;

/// The opcode numbers per version, generated from real builds.
const SHIPPED: &str = include_str!("../../python-layouts/opcodes/back-jumps.json");

/// Bytecode read to find a code object's unlined jumps, at most: a jump past it keeps no line.
pub const MAX_BYTECODE: u64 = 64 * 1024;

#[derive(serde::Deserialize)]
struct Shipped {
    back_jumps: Vec<u8>,
    absolute_jumps: Vec<u8>,
    extended_args: Vec<u8>,
}

/// The opcodes of one version that jump back to a loop's head, and the prefix that widens their
/// argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackJumps {
    /// Jumps back by their argument, counted from the next code unit (3.11+).
    back: Vec<u8>,
    /// Jumps to the code unit their argument numbers (3.10); a loop's back-edge where that is at
    /// or before the jump.
    absolute: Vec<u8>,
    extended: Vec<u8>,
    /// Each unlined run is one instruction with its prefixes and inline caches (3.11+'s location
    /// entries): the units after the first instruction are caches, whose bytes must not be read
    /// as opcodes. 3.10 has no caches, and one unlined range may hold several instructions.
    one_instruction_per_run: bool,
}

impl BackJumps {
    /// Those of CPython `major.minor`, where its compiler leaves such jumps without a line.
    pub fn of(major: u32, minor: u32) -> Option<BackJumps> {
        let all: HashMap<String, Shipped> =
            serde_json::from_str(SHIPPED).expect("python-layouts/opcodes/back-jumps.json parses");
        let found = all.get(&format!("{major}.{minor}"))?;
        Some(BackJumps {
            back: found.back_jumps.clone(),
            absolute: found.absolute_jumps.clone(),
            extended: found.extended_args.clone(),
            one_instruction_per_run: (major, minor) >= (3, 11),
        })
    }

    /// The bytes of bytecode `runs` reach into (`lines_in` looks no further), at most
    /// `MAX_BYTECODE`; `None` where there are no runs.
    fn bytes_needed(runs: &[(u64, u64)]) -> Option<usize> {
        let end = runs.iter().map(|&(start, units)| start + units).max()?;
        Some((end * 2).min(MAX_BYTECODE) as usize)
    }

    /// `lines_in` the bytecode read at `bytecode` (3.11+: inside the code object), as far as the
    /// runs reach. Empty where it does not read.
    pub fn lines(
        &self,
        mem: &dyn MemorySource,
        bytecode: RemoteAddr,
        runs: &[(u64, u64)],
        line_of: impl Fn(u64) -> Option<i32>,
    ) -> Vec<(u64, i32)> {
        let Some(len) = BackJumps::bytes_needed(runs) else {
            return Vec::new();
        };
        let mut code = vec![0u8; len];
        if mem.read_into(bytecode, &mut code).is_err() {
            return Vec::new();
        }
        self.lines_in(&code, runs, line_of)
    }

    /// The unlined back-edge jumps in `code` (a code object's bytecode): each jump's byte offset
    /// and the line of the unit it jumps to (`line_of`, by unit). `runs` are the line table's
    /// unlined entries (start unit, units).
    pub fn lines_in(
        &self,
        code: &[u8],
        runs: &[(u64, u64)],
        line_of: impl Fn(u64) -> Option<i32>,
    ) -> Vec<(u64, i32)> {
        runs.iter()
            .flat_map(|&(start, units)| self.jumps_in(code, start, units))
            .filter_map(|(unit, target)| Some((unit * 2, line_of(target)?)))
            .collect()
    }

    /// The back jumps that `units` code units from `start` hold, each with the unit it goes to:
    /// prefixes, then an instruction, for each instruction of the run (or only its first, where
    /// a run is one instruction: `one_instruction_per_run`).
    fn jumps_in(&self, code: &[u8], start: u64, units: u64) -> Vec<(u64, u64)> {
        let mut found = Vec::new();
        let mut wide = 0u64;
        for unit in start..start.saturating_add(units) {
            let Some(at) = usize::try_from(unit).ok().and_then(|u| u.checked_mul(2)) else {
                break;
            };
            let (Some(&op), Some(&arg)) = (code.get(at), code.get(at + 1)) else {
                break;
            };
            let arg = wide << 8 | u64::from(arg);
            if self.extended.contains(&op) {
                wide = arg;
                continue;
            }
            wide = 0;
            // The interpreter has moved past a relative jump when it jumps: back from the next
            // unit. An absolute one names its target; forward, it closes no loop.
            let target = if self.back.contains(&op) {
                (unit + 1).checked_sub(arg)
            } else if self.absolute.contains(&op) {
                (arg <= unit).then_some(arg)
            } else {
                None
            };
            found.extend(target.map(|target| (unit, target)));
            if self.one_instruction_per_run {
                break;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::memory::SnapshotMemory;

    const JUMP_BACKWARD: u8 = 140;
    const EXTENDED_ARG: u8 = 144;
    const JUMP_ABSOLUTE_3_10: u8 = 113;

    fn memory(code: &[u8]) -> SnapshotMemory {
        let mut mem = SnapshotMemory::new();
        mem.insert(RemoteAddr(0x1000), code.to_vec());
        mem
    }

    #[test]
    fn each_version_that_needs_them_has_them() {
        for minor in [11, 12] {
            let jumps = BackJumps::of(3, minor).unwrap();
            assert!(jumps.back.contains(&JUMP_BACKWARD), "3.{minor}");
            assert!(jumps.extended.contains(&EXTENDED_ARG), "3.{minor}");
        }
        let jumps = BackJumps::of(3, 10).unwrap();
        assert!(jumps.absolute.contains(&JUMP_ABSOLUTE_3_10));
        assert!(jumps.extended.contains(&EXTENDED_ARG));
        assert_eq!(BackJumps::of(3, 13), None, "3.13 gives its jumps a line");
        assert_eq!(
            BackJumps::of(3, 9),
            None,
            "3.9's table lines every instruction"
        );
    }

    #[test]
    fn a_3_10_jump_back_to_a_loops_head_takes_the_heads_line() {
        let jumps = BackJumps::of(3, 10).unwrap();
        // A loop's head at unit 2 (line 4); one unlined range of units 4-6: a POP_TOP, a jump
        // back to unit 2, and a jump forward to unit 9 (which closes no loop).
        let code = [
            9,
            0,
            9,
            0,
            9,
            0,
            9,
            0,
            1,
            0,
            JUMP_ABSOLUTE_3_10,
            2,
            JUMP_ABSOLUTE_3_10,
            9,
        ];
        let line_of = |unit: u64| Some(if unit < 2 { 3 } else { 4 });
        assert_eq!(jumps.lines_in(&code, &[(4, 3)], line_of), [(10, 4)]);
        // Widened: EXTENDED_ARG 1 makes the argument 0x102, past the jump: forward, no line.
        let widened = [9, 0, EXTENDED_ARG, 1, JUMP_ABSOLUTE_3_10, 2];
        assert_eq!(jumps.lines_in(&widened, &[(1, 2)], line_of), []);
    }

    #[test]
    fn an_unlined_jump_takes_its_targets_line() {
        let jumps = BackJumps::of(3, 11).unwrap();
        // Unit 0-1 on line 3, a loop's head at unit 2 (line 4), then an unlined jump at unit 5
        // back to unit 2 (5 + 1 - 4), and one widened to 0x104 at units 6-7: back past the start.
        let code = [
            9,
            0,
            9,
            0,
            9,
            0,
            9,
            0,
            9,
            0,
            JUMP_BACKWARD,
            4,
            EXTENDED_ARG,
            1,
            JUMP_BACKWARD,
            4,
        ];
        let line_of = |unit: u64| Some(if unit < 2 { 3 } else { 4 });
        let runs = [(5, 1), (6, 2)];
        let lines = jumps.lines(&memory(&code), RemoteAddr(0x1000), &runs, line_of);
        assert_eq!(lines, [(10, 4)]);
    }

    #[test]
    fn anything_else_unlined_keeps_no_line() {
        let jumps = BackJumps::of(3, 11).unwrap();
        // An unlined instruction that is not a jump (a cleanup's RERAISE, say).
        let code = [9, 0, 119, 1, JUMP_BACKWARD, 1];
        let mem = memory(&code);
        let lines = jumps.lines(&mem, RemoteAddr(0x1000), &[(1, 1)], |_| Some(1));
        assert_eq!(lines, []);
        // Bytecode that does not read as far as the runs go: nothing, not a guess.
        let lines = jumps.lines(&mem, RemoteAddr(0x1000), &[(2, 1), (40, 1)], |_| Some(1));
        assert_eq!(lines, []);
        assert_eq!(
            jumps.lines(&mem, RemoteAddr(0x1000), &[(2, 1)], |_| Some(1)),
            [(4, 1)]
        );
    }
}
