//! The line of a loop's back-edge where the line table gives it none.
//!
//! CPython 3.11 and 3.12 compile the jump that closes a loop body reached from a branch (`for …:
//! if c: …`) without a location, and the interpreter lets the GIL go at that jump (its eval-breaker
//! check). A thread that waits there, or is read there while it holds, would show its function
//! without a line (every wait of a 3.11 spinner, measured). The jump goes to the loop's head, so
//! gilsample shows the head's line: where the thread goes on, and the line `sys.settrace` reports
//! next. Which opcodes those jumps are comes from the builds themselves
//! (python-layouts/opcodes/back-jumps.json, scripts/generate-opcodes.py).

use std::collections::HashMap;

use crate::addr::RemoteAddr;
use crate::process::memory::MemorySource;

/// The opcode numbers per version, generated from real builds.
const SHIPPED: &str = include_str!("../../python-layouts/opcodes/back-jumps.json");

/// Bytecode read to find a code object's unlined jumps, at most: a jump past it keeps no line.
const MAX_BYTECODE: u64 = 64 * 1024;

#[derive(serde::Deserialize)]
struct Shipped {
    back_jumps: Vec<u8>,
    extended_args: Vec<u8>,
}

/// The opcodes of one version that jump back to a loop's head, and the prefix that widens their
/// argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackJumps {
    back: Vec<u8>,
    extended: Vec<u8>,
}

impl BackJumps {
    /// Those of CPython `major.minor`, where its compiler leaves such jumps without a line.
    pub fn of(major: u32, minor: u32) -> Option<BackJumps> {
        let all: HashMap<String, Shipped> =
            serde_json::from_str(SHIPPED).expect("python-layouts/opcodes/back-jumps.json parses");
        let found = all.get(&format!("{major}.{minor}"))?;
        Some(BackJumps {
            back: found.back_jumps.clone(),
            extended: found.extended_args.clone(),
        })
    }

    /// The unlined back-edge jumps of a code object whose bytecode starts at `bytecode`: each
    /// jump's byte offset and the line of the unit it jumps to (`line_of`, by unit). `runs` are
    /// the line table's unlined entries (start unit, units), each one instruction with its
    /// widening prefixes. Empty where the bytecode does not read.
    pub fn lines(
        &self,
        mem: &dyn MemorySource,
        bytecode: RemoteAddr,
        runs: &[(u64, u64)],
        line_of: impl Fn(u64) -> Option<i32>,
    ) -> Vec<(u64, i32)> {
        let Some(end) = runs.iter().map(|&(start, units)| start + units).max() else {
            return Vec::new();
        };
        let mut code = vec![0u8; (end * 2).min(MAX_BYTECODE) as usize];
        if mem.read_into(bytecode, &mut code).is_err() {
            return Vec::new();
        }
        runs.iter()
            .filter_map(|&(start, units)| {
                let (unit, target) = self.jump_in(&code, start, units)?;
                Some((unit * 2, line_of(target)?))
            })
            .collect()
    }

    /// The jump that `units` code units from `start` hold, and the unit it goes to: prefixes, then
    /// a back jump; `None` where they hold anything else.
    fn jump_in(&self, code: &[u8], start: u64, units: u64) -> Option<(u64, u64)> {
        let mut wide = 0u64;
        for unit in start..start + units {
            let at = usize::try_from(unit).ok()?.checked_mul(2)?;
            let (&op, &arg) = (code.get(at)?, code.get(at + 1)?);
            let arg = wide << 8 | u64::from(arg);
            if self.extended.contains(&op) {
                wide = arg;
                continue;
            }
            // The interpreter has moved past the jump when it jumps: back from the next unit.
            return self
                .back
                .contains(&op)
                .then(|| Some((unit, (unit + 1).checked_sub(arg)?)))
                .flatten();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::memory::SnapshotMemory;

    const JUMP_BACKWARD: u8 = 140;
    const EXTENDED_ARG: u8 = 144;

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
        assert_eq!(BackJumps::of(3, 13), None, "3.13 gives its jumps a line");
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
