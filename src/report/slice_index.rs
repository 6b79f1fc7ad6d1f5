//! Finding the slices of one kind (holds, takes) that overlap a span, for blaming each moment of a
//! wait on whoever held the GIL then. The slices are sorted by start and arranged as an implicit
//! balanced tree (each range's middle is its root) that keeps each subtree's latest end, so a
//! query visits O(log n) subtrees plus the slices it reports, however the slices overlap: a trace
//! with one hold spanning all the others (a crafted or a reference-format file) stays fast.

use crate::report::load::{Slice, SliceKind};

/// The slices of one kind, arranged for finding those that overlap a span (module docs).
pub struct SliceIndex<'a> {
    slices: Vec<&'a Slice>,
    /// At the index of each subtree's root: the latest end in that subtree.
    max_end: Vec<i128>,
}

impl<'a> SliceIndex<'a> {
    /// An index of the slices of `kind` among `slices`.
    pub fn new(slices: &'a [Slice], kind: SliceKind) -> SliceIndex<'a> {
        let mut sorted: Vec<&Slice> = slices.iter().filter(|s| s.kind == kind).collect();
        sorted.sort_by_key(|s| s.start_ns);
        let mut max_end = vec![i128::MIN; sorted.len()];
        fill_max_end(&sorted, &mut max_end, 0, sorted.len());
        SliceIndex {
            slices: sorted,
            max_end,
        }
    }

    /// Calls `f(slice, overlap_ns)` for every slice overlapping `[start, end)`.
    pub fn overlapping(&self, start: i128, end: i128, mut f: impl FnMut(&Slice, i128)) {
        self.visit(0, self.slices.len(), (start, end), &mut f);
    }

    fn visit(
        &self,
        lo: usize,
        hi: usize,
        (start, end): (i128, i128),
        f: &mut impl FnMut(&Slice, i128),
    ) {
        if lo >= hi {
            return;
        }
        let mid = lo + (hi - lo) / 2;
        if self.max_end[mid] <= start {
            return;
        }
        self.visit(lo, mid, (start, end), f);
        let s = self.slices[mid];
        if s.start_ns >= end {
            // Every slice right of it starts later still.
            return;
        }
        let overlap = s.end_ns.min(end) - s.start_ns.max(start);
        if overlap > 0 {
            f(s, overlap);
        }
        self.visit(mid + 1, hi, (start, end), f);
    }
}

/// The latest end in `sorted[lo..hi)`, stored at that range's middle; returns it.
fn fill_max_end(sorted: &[&Slice], max_end: &mut [i128], lo: usize, hi: usize) -> i128 {
    if lo >= hi {
        return i128::MIN;
    }
    let mid = lo + (hi - lo) / 2;
    let left = fill_max_end(sorted, max_end, lo, mid);
    let right = fill_max_end(sorted, max_end, mid + 1, hi);
    max_end[mid] = sorted[mid].end_ns.max(left).max(right);
    max_end[mid]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(tid: u32, start_ns: i128, end_ns: i128) -> Slice {
        Slice {
            kind: SliceKind::Hold,
            tid,
            start_ns,
            end_ns,
            label: None,
            held: Default::default(),
            importing: false,
        }
    }

    /// (tid, overlap) pairs, sorted.
    type Found = Vec<(u32, i128)>;

    /// What the index reports against a scan of every slice.
    fn both(slices: &[Slice], start: i128, end: i128) -> (Found, Found) {
        let index = SliceIndex::new(slices, SliceKind::Hold);
        let mut found = Vec::new();
        index.overlapping(start, end, |s, o| found.push((s.tid, o)));
        found.sort();
        let mut scanned: Vec<(u32, i128)> = slices
            .iter()
            .filter(|s| s.kind == SliceKind::Hold)
            .map(|s| (s.tid, s.end_ns.min(end) - s.start_ns.max(start)))
            .filter(|(_, o)| *o > 0)
            .collect();
        scanned.sort();
        (found, scanned)
    }

    #[test]
    fn finds_what_a_scan_finds_for_disjoint_nested_and_spanning_slices() {
        // Disjoint holds, one spanning them all, nested ones, and one of another kind.
        let mut slices: Vec<Slice> = (0..50)
            .map(|i| hold(i, i as i128 * 10, i as i128 * 10 + 7))
            .collect();
        slices.push(hold(100, -5, 1_000));
        slices.push(hold(101, 200, 260));
        slices.push(hold(102, 210, 220));
        slices.push(Slice {
            kind: SliceKind::Take,
            ..hold(103, 0, 1_000)
        });
        for (start, end) in [
            (0, 5),
            (3, 13),
            (205, 215),
            (-100, -6),
            (495, 2_000),
            (7, 10),
            (0, 0),
        ] {
            let (found, scanned) = both(&slices, start, end);
            assert_eq!(found, scanned, "[{start}, {end})");
        }
        assert!(both(&slices, 205, 215).0.contains(&(102, 5)));
        assert!(!both(&slices, 205, 215).0.iter().any(|(t, _)| *t == 103));
    }

    #[test]
    fn a_slice_spanning_all_others_does_not_make_queries_walk_them_all() {
        // One hold over 100,000 short ones, and a query inside each short one: each reports two
        // slices. A walk back over the earlier slices (what this index replaced) takes 5·10⁹ steps
        // here; the tree a few million.
        let mut slices: Vec<Slice> = (0..100_000)
            .map(|i| hold(1, i as i128 * 10, i as i128 * 10 + 5))
            .collect();
        slices.push(hold(2, 0, 1_000_000));
        let index = SliceIndex::new(&slices, SliceKind::Hold);
        let mut reported = 0u64;
        for i in 0..100_000i128 {
            index.overlapping(i * 10 + 1, i * 10 + 2, |_, _| reported += 1);
        }
        assert_eq!(reported, 200_000);
    }
}
