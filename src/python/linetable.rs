//! Line numbers from a code object's line table, in each version's format (Objects/lnotab_notes.txt
//! of each version, and `PyCode_Addr2Line` in Objects/codeobject.c):
//! - before 3.10, `co_lnotab`: (byte offset increment, signed line increment) pairs;
//! - 3.10, `co_linetable`: (bytes covered, signed line delta or -128 for "no line") pairs;
//! - 3.11+, the location table: entries of a header byte (bit 7 set, a 4-bit code, the number of code
//!   units covered minus one) followed by varints; codes 13 and 14 carry a signed line delta, 10–12
//!   mean a delta of 0–2, 15 means no location, and 0–9 (short forms) keep the line.
//!
//! The tables come from the target: a decoder stops at the table's end and never indexes past it.

/// Which format a version's `co_linetable` (or `co_lnotab`) is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTableFormat {
    /// `co_lnotab` byte pairs (before 3.10).
    Lnotab,
    /// 3.10's `co_linetable` of (bytecode, line) delta pairs.
    Pairs,
    /// 3.11+'s `co_linetable` location entries.
    Locations,
}

impl LineTableFormat {
    /// The format CPython `major.minor` stores line numbers in.
    pub fn for_version(major: u32, minor: u32) -> LineTableFormat {
        match (major, minor) {
            (3, m) if m < 10 => LineTableFormat::Lnotab,
            (3, 10) => LineTableFormat::Pairs,
            _ => LineTableFormat::Locations,
        }
    }

    /// The source line of the instruction at byte offset `offset` of the bytecode, or `None` where
    /// the table says it has none (or ends first).
    pub fn line(self, table: &[u8], first_line: i32, offset: u64) -> Option<i32> {
        match self {
            LineTableFormat::Lnotab => Some(lnotab_line(table, first_line, offset)),
            LineTableFormat::Pairs => pairs_line(table, first_line, offset),
            LineTableFormat::Locations => locations_line(table, first_line, offset / 2),
        }
    }
}

fn lnotab_line(table: &[u8], first_line: i32, offset: u64) -> i32 {
    let mut line = first_line;
    let mut addr = 0u64;
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > offset {
            break;
        }
        line = line.wrapping_add(i32::from(pair[1] as i8));
    }
    line
}

fn pairs_line(table: &[u8], first_line: i32, offset: u64) -> Option<i32> {
    let pair = PairEntries::of(table, first_line).find(|p| offset < p.start + p.bytes)?;
    pair.line
}

/// One pair of 3.10's table: the bytes of bytecode it covers and their line (`None`: no line).
struct PairEntry {
    start: u64,
    bytes: u64,
    line: Option<i32>,
}

/// The pairs of a 3.10 table in order, each with the line it leaves.
struct PairEntries<'a> {
    pairs: std::slice::ChunksExact<'a, u8>,
    line: i32,
    end: u64,
}

impl<'a> PairEntries<'a> {
    fn of(table: &'a [u8], first_line: i32) -> PairEntries<'a> {
        PairEntries {
            pairs: table.chunks_exact(2),
            line: first_line,
            end: 0,
        }
    }
}

impl Iterator for PairEntries<'_> {
    type Item = PairEntry;

    fn next(&mut self) -> Option<PairEntry> {
        let pair = self.pairs.next()?;
        let (start, bytes) = (self.end, u64::from(pair[0]));
        self.end += bytes;
        let delta = pair[1] as i8;
        let line = (delta != -128).then(|| {
            self.line = self.line.wrapping_add(i32::from(delta));
            self.line
        });
        Some(PairEntry { start, bytes, line })
    }
}

/// `unit` is the offset in code units (two bytes each).
fn locations_line(table: &[u8], first_line: i32, unit: u64) -> Option<i32> {
    let entry = LocationEntries::of(table, first_line).find(|e| unit < e.start + e.units)?;
    entry.line
}

impl LineTableFormat {
    /// The runs of code units the table gives no line (start, length in units): in the 3.11+
    /// location table each the whole of one instruction's entry, in 3.10's pairs each range of
    /// bytes marked "no line" (one or more instructions); none before 3.10, whose tables line
    /// every instruction.
    pub fn unlined_runs(self, table: &[u8]) -> Vec<(u64, u64)> {
        match self {
            LineTableFormat::Lnotab => Vec::new(),
            LineTableFormat::Pairs => pairs_unlined_runs(table),
            LineTableFormat::Locations => LocationEntries::of(table, 0)
                .filter(|e| e.line.is_none())
                .map(|e| (e.start, e.units))
                .collect(),
        }
    }
}

/// 3.10's ranges marked "no line" (-128), in code units; neighbouring ones joined (the compiler
/// splits a range of over 254 bytes into several pairs).
fn pairs_unlined_runs(table: &[u8]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for pair in PairEntries::of(table, 0).filter(|p| p.line.is_none() && p.bytes >= 2) {
        let (start, units) = (pair.start / 2, pair.bytes / 2);
        match runs.last_mut() {
            Some((at, len)) if *at + *len == start => *len += units,
            _ => runs.push((start, units)),
        }
    }
    runs
}

/// One entry of a location table: the code units it covers and their line (`None`: no location).
struct LocationEntry {
    start: u64,
    units: u64,
    line: Option<i32>,
}

/// The entries of a location table in order, ending at its end or at a byte that cannot begin one.
struct LocationEntries<'a> {
    table: &'a [u8],
    pos: usize,
    line: i32,
    end: u64,
}

impl<'a> LocationEntries<'a> {
    fn of(table: &'a [u8], first_line: i32) -> LocationEntries<'a> {
        LocationEntries {
            table,
            pos: 0,
            line: first_line,
            end: 0,
        }
    }
}

impl Iterator for LocationEntries<'_> {
    type Item = LocationEntry;

    fn next(&mut self) -> Option<LocationEntry> {
        let header = *self.table.get(self.pos)?;
        if header & 0x80 == 0 {
            return None; // not at an entry's start: a table that is not one
        }
        let code = (header >> 3) & 15;
        let delta = match code {
            13 | 14 => signed_varint(self.table, self.pos + 1)?,
            10..=12 => i32::from(code - 10),
            _ => 0,
        };
        self.line = self.line.wrapping_add(delta);
        let start = self.end;
        let units = u64::from(header & 7) + 1;
        self.end += units;
        self.pos += 1;
        while self.table.get(self.pos).is_some_and(|b| b & 0x80 == 0) {
            self.pos += 1;
        }
        Some(LocationEntry {
            start,
            units,
            line: (code != 15).then_some(self.line),
        })
    }
}

/// A varint of 6-bit chunks, bit 6 meaning "more follows"; the low bit of the value is its sign.
fn signed_varint(table: &[u8], mut pos: usize) -> Option<i32> {
    let mut byte = *table.get(pos)?;
    let mut value = u64::from(byte & 63);
    let mut shift = 0;
    while byte & 64 != 0 {
        pos += 1;
        shift += 6;
        if shift > 30 {
            return None;
        }
        byte = *table.get(pos)?;
        value |= u64::from(byte & 63) << shift;
    }
    let magnitude = (value >> 1) as i32;
    Some(if value & 1 == 1 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_adds_line_increments_up_to_the_offset() {
        // Lines 10 (bytes 0-5), 11 (6-9), 13 (10-).
        let table = [6, 1, 4, 2];
        assert_eq!(lnotab_line(&table, 10, 0), 10);
        assert_eq!(lnotab_line(&table, 10, 6), 11);
        assert_eq!(lnotab_line(&table, 10, 12), 13);
    }

    #[test]
    fn pairs_cover_ranges_and_mark_lines_missing() {
        // 4 bytes at line 10, 4 bytes with no line, 6 bytes at line 12.
        let table = [4, 0, 4, 0x80, 6, 2];
        assert_eq!(pairs_line(&table, 10, 2), Some(10));
        assert_eq!(pairs_line(&table, 10, 5), None);
        assert_eq!(pairs_line(&table, 10, 9), Some(12));
        assert_eq!(pairs_line(&table, 10, 40), None, "past the table");
    }

    #[test]
    fn locations_decode_short_one_line_and_long_forms() {
        // One unit on the first line (code 10: delta 0), two units one line on (code 11), then a
        // no-columns entry (code 13) with delta -1 (varint 3), then no location (code 15).
        let table = [
            0x80 | (10 << 3),
            0,
            0,
            0x80 | (11 << 3) | 1,
            0,
            0,
            0x80 | (13 << 3),
            3,
            0x80 | (15 << 3),
        ];
        assert_eq!(locations_line(&table, 5, 0), Some(5));
        assert_eq!(locations_line(&table, 5, 2), Some(6));
        assert_eq!(locations_line(&table, 5, 3), Some(5));
        assert_eq!(locations_line(&table, 5, 4), None);
        assert_eq!(locations_line(&table, 5, 9), None, "past the table");
        assert_eq!(locations_line(&[0x05], 5, 0), None, "not an entry");
        let runs = LineTableFormat::Locations.unlined_runs(&table);
        assert_eq!(
            runs,
            [(4, 1)],
            "the no-location entry, each unit before it lined"
        );
        assert_eq!(LineTableFormat::Lnotab.unlined_runs(&[4, 0x80]), []);
    }

    #[test]
    fn pairs_list_their_unlined_ranges_in_code_units() {
        // 4 bytes at line 10, 4 with no line, 6 at line 12, then 2 + 2 with no line (one range
        // the compiler wrote as two pairs) and a pair that only moves the line.
        let table = [4, 0, 4, 0x80, 6, 2, 2, 0x80, 2, 0x80, 0, 3];
        let runs = LineTableFormat::Pairs.unlined_runs(&table);
        assert_eq!(runs, [(2, 2), (7, 2)]);
        assert_eq!(
            pairs_line(&table, 10, 7 * 2),
            None,
            "the runs are the unlined bytes"
        );
    }
}
