//! Address ranges: merging them, and cutting one to the readable mappings of a memory map.
//! Shared by the agent's capture and the capture from outside, whose maps differ in type.

use std::ops::Range;

/// Sorts and merges overlapping ranges.
pub fn merge(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// The parts of `range` that lie in readable mappings of `maps` (sorted by address, each
/// seen through `span`: its range and whether it is readable), as 8-aligned ranges, adjacent
/// parts joined.
pub fn readable_parts<M>(
    maps: &[M],
    span: impl Fn(&M) -> (Range<u64>, bool),
    range: Range<u64>,
) -> Vec<Range<u64>> {
    let start = range.start.next_multiple_of(8);
    let end = range.end & !7;
    let mut out: Vec<Range<u64>> = Vec::new();
    if start >= end {
        return out;
    }
    let mut i = maps.partition_point(|m| span(m).0.end <= start);
    while let Some(m) = maps.get(i) {
        let (m, readable) = span(m);
        if m.start >= end {
            break;
        }
        if readable {
            let s = m.start.max(start);
            let e = m.end.min(end);
            match out.last_mut() {
                Some(last) if last.end == s => last.end = e,
                _ => out.push(s..e),
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_ranges_merge_and_a_range_is_cut_to_readable_mappings() {
        assert_eq!(merge(vec![10..20, 0..5, 15..30, 5..6]), vec![0..6, 10..30]);
        assert_eq!(merge(vec![0..1, 2..3]), vec![0..1, 2..3]);
        // (start, end, readable)
        let maps = [
            (0x1000, 0x2000, true),
            (0x2000, 0x3000, true),
            (0x3000, 0x4000, false),
            (0x5000, 0x6000, true),
        ];
        let span = |m: &(u64, u64, bool)| (m.0..m.1, m.2);
        assert_eq!(
            readable_parts(&maps, span, 0x1803..0x5800),
            vec![0x1808..0x3000, 0x5000..0x5800]
        );
        assert!(readable_parts(&maps, span, 0x3000..0x4000).is_empty());
        assert!(readable_parts(&maps, span, 0x1001..0x1007).is_empty());
    }
}
