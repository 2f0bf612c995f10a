//! Integer columns stored in as few bytes as their values need, read back in constant time.
//!
//! A kept snapshot (`kept`) holds a few integers per heap block — address, size, sequence
//! number, site, slot, dominator, references — for millions of blocks, in the memory of the
//! very process it describes. A [`Packed`] column stores each value as an offset from a base
//! in a fixed number of bytes (0 to 8), chosen per column from the values themselves:
//! - one base for the whole column (its minimum), when the offsets fit few bytes; the rare
//!   values that do not (a 16 MiB block among small ones) are kept aside as exceptions;
//! - or runs of indices, each with its own base, when the values are sorted but spread wide
//!   (block addresses: a program's brk heap and its mmapped regions are terabytes apart).
//!
//! So a column of thread ids in a one-thread program takes no byte per value, a column of
//! slot numbers below 16M takes three. Reading value `i` is one unaligned 8-byte load and a
//! mask (the byte string carries 8 bytes of padding), plus a binary search among the runs or
//! the exceptions only when there are several runs or the value is marked as an exception.
//!
//! This module owns the layout and its invariants; it knows nothing of what the values mean.

use std::collections::TryReserveError;

/// Bytes of padding after the last value, so that every read is one 8-byte load.
pub(crate) const PAD: usize = 8;

/// A column of `u64` values, packed (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packed {
    pub(crate) len: usize,
    pub(crate) width: usize,
    /// `(1 << 8 * width) - 1`; a stored value equal to it marks an exception.
    mask: u64,
    /// `(first index, base)` of each run, ascending by index; the first run starts at 0.
    pub(crate) runs: Vec<(u32, u64)>,
    /// `(index, value)` of the values kept aside, ascending by index (single-run columns only).
    pub(crate) exceptions: Vec<(u32, u64)>,
    /// `len * width` bytes, then [`PAD`] zero bytes.
    pub(crate) bytes: Vec<u8>,
}

/// Bytes needed to store `v` below the exception marker of that width (0 for 0: a column
/// of one value stores nothing).
fn width_of(v: u64) -> usize {
    match v {
        0 => 0,
        u64::MAX => 8,
        // The fewest bytes holding v + 1, so that v stays below that width's all-ones marker.
        _ => (71 - (v + 1).leading_zeros() as usize) / 8,
    }
}

fn mask_of(width: usize) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    }
}

impl Packed {
    /// Packs `len` values given by `value(i)` (called a few times per index, in order).
    pub fn new(len: usize, value: impl Fn(usize) -> u64) -> Packed {
        Self::try_new(len, value).unwrap_or_else(|e| panic!("packing {len} values: {e}"))
    }

    /// [`Packed::new`], failing instead of aborting when the memory cannot be had.
    pub fn try_new(len: usize, value: impl Fn(usize) -> u64) -> Result<Packed, TryReserveError> {
        assert!(
            len < u32::MAX as usize,
            "a packed column holds fewer than 2^32 values"
        );
        let (mut min, mut max) = (u64::MAX, 0u64);
        for i in 0..len {
            let v = value(i);
            min = min.min(v);
            max = max.max(v);
        }
        if len == 0 {
            min = 0;
        }
        let span_width = width_of(max - min);
        // One base: the narrowest width whose values plus exceptions cost least.
        let (mut width, mut exceptions) = (span_width, 0usize);
        if span_width > 1 {
            let mut needs = [0usize; 9];
            for i in 0..len {
                needs[width_of(value(i) - min)] += 1;
            }
            let mut best = len * span_width;
            let mut above = 0usize;
            for w in (1..span_width).rev() {
                above += needs[w + 1];
                let cost = len * w + above * 12;
                if cost < best {
                    (best, width, exceptions) = (cost, w, above);
                }
            }
        }
        // Runs of width 4 for sorted, widely spread values (addresses).
        let mut runs = vec![(0u32, min)];
        if width > 4 {
            let mut candidate = Vec::new();
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            let mut sorted = true;
            for i in 0..len {
                let v = value(i);
                if i > 0 && v < value(i - 1) {
                    sorted = false;
                    break;
                }
                if i == 0 || v.max(hi) - v.min(lo) >= mask_of(4) {
                    candidate.push((i as u32, v));
                    (lo, hi) = (v, v);
                } else {
                    (lo, hi) = (lo.min(v), hi.max(v));
                }
            }
            if sorted && candidate.len() * 12 + len * 4 < len * width + exceptions * 12 {
                (width, exceptions, runs) = (4, 0, candidate);
            }
        }
        let mask = mask_of(width);
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(len * width + PAD)?;
        bytes.resize(len * width + PAD, 0);
        let mut kept_aside = Vec::new();
        kept_aside.try_reserve_exact(exceptions)?;
        // Width 0 stores nothing and has no marker (chosen only when all values are equal).
        if width > 0 {
            let mut run = 0;
            for i in 0..len {
                while run + 1 < runs.len() && runs[run + 1].0 as usize <= i {
                    run += 1;
                }
                let v = value(i);
                let mut offset = v - runs[run].1;
                if width < 8 && offset >= mask {
                    kept_aside.push((i as u32, v));
                    offset = mask;
                }
                // All 8 bytes: those past the width are zero (the offset fits it), and the
                // next value or the padding overwrites them.
                let at = i * width;
                bytes[at..at + 8].copy_from_slice(&offset.to_le_bytes());
            }
        }
        Ok(Packed {
            len,
            width,
            mask,
            runs,
            exceptions: kept_aside,
            bytes,
        })
    }

    /// A column from its parts, as the kept codec reads them (which checks them first:
    /// `width <= 8`, runs ascending from index 0, `bytes` holding `len * width + PAD`).
    pub(crate) fn from_parts(
        len: usize,
        width: usize,
        runs: Vec<(u32, u64)>,
        exceptions: Vec<(u32, u64)>,
        bytes: Vec<u8>,
    ) -> Packed {
        debug_assert!(width <= 8 && bytes.len() == len * width + PAD);
        Packed {
            len,
            width,
            mask: mask_of(width),
            runs,
            exceptions,
            bytes,
        }
    }

    /// Packs a slice of values.
    pub fn from_slice<T: Copy + Into<u64>>(values: &[T]) -> Packed {
        Packed::new(values.len(), |i| values[i].into())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Value `i`. Panics when `i` is out of range.
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        assert!(i < self.len, "index {i} of a packed column of {}", self.len);
        let at = i * self.width;
        let word = u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"));
        let offset = word & self.mask;
        if offset == self.mask
            && !self.exceptions.is_empty()
            && let Ok(k) = self.exceptions.binary_search_by_key(&(i as u32), |e| e.0)
        {
            return self.exceptions[k].1;
        }
        let base = if self.runs.len() == 1 {
            self.runs[0].1
        } else {
            self.runs[self.runs.partition_point(|r| r.0 as usize <= i) - 1].1
        };
        base.wrapping_add(offset)
    }

    /// The first index whose value is `bound` or more, as [`Packed::get`] reads the values.
    /// For a column of one run (every column but addresses) one pass over the stored bytes,
    /// specialised to the width, comparing each stored offset with the bound's a block at a
    /// time (no per-value decoding, checks or searches: what a decoder checking millions of
    /// indices against their bound spends its time on); the values kept aside are looked at
    /// on their own.
    pub fn first_at_least(&self, bound: u64) -> Option<usize> {
        let &(_, base) = self.runs.first().filter(|_| self.len > 0)?;
        // Values that may wrap past `u64::MAX` (never in a column `new` makes) are read
        // one at a time.
        if self.runs.len() != 1 || base.checked_add(self.mask).is_none() {
            return (0..self.len).find(|&i| self.get(i) >= bound);
        }
        if self.width == 0 {
            return (base >= bound).then_some(0);
        }
        // Value i is `base + offset`, unless kept aside: at least the bound when its offset
        // is at least `needle`.
        let needle = bound.saturating_sub(base);
        let is_kept_aside = |i: usize, offset: u64| {
            offset == self.mask
                && self
                    .exceptions
                    .binary_search_by_key(&(i as u32), |e| e.0)
                    .is_ok()
        };
        // The first value kept aside that is at least the bound (an exception counts only
        // where its marker is stored, as in `get`).
        let aside = self
            .exceptions
            .iter()
            .find(|&&(i, v)| v >= bound && is_kept_aside(i as usize, self.stored(i as usize)))
            .map(|&(i, _)| i as usize);
        let end = aside.unwrap_or(self.len);
        // The first value at least the bound that is not a kept-aside value's marker.
        let mut plain = |i: usize, offset: u64| !is_kept_aside(i, offset);
        let found = match self.width {
            1 => first_at_least_in::<1>(&self.bytes, end, needle, &mut plain),
            2 => first_at_least_in::<2>(&self.bytes, end, needle, &mut plain),
            3 => first_at_least_in::<3>(&self.bytes, end, needle, &mut plain),
            4 => first_at_least_in::<4>(&self.bytes, end, needle, &mut plain),
            5 => first_at_least_in::<5>(&self.bytes, end, needle, &mut plain),
            6 => first_at_least_in::<6>(&self.bytes, end, needle, &mut plain),
            7 => first_at_least_in::<7>(&self.bytes, end, needle, &mut plain),
            _ => first_at_least_in::<8>(&self.bytes, end, needle, &mut plain),
        };
        found.or(aside)
    }

    /// Whether every value kept aside has its marker stored where it belongs, as
    /// [`Packed::new`] makes them (a decoder checks it: then [`Packed::get`] and
    /// [`Packed::decode_range`] read the same values).
    pub(crate) fn exceptions_are_marked(&self) -> bool {
        self.exceptions.is_empty()
            || ((1..8).contains(&self.width)
                && self
                    .exceptions
                    .iter()
                    .all(|&(i, _)| (i as usize) < self.len && self.stored(i as usize) == self.mask))
    }

    /// The stored offset of value `i` (`i < len`, width above 0).
    fn stored(&self, i: usize) -> u64 {
        let at = i * self.width;
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes")) & self.mask
    }

    /// Value `i` as a `u32` (for columns of indices, which always fit).
    #[inline]
    pub fn get_u32(&self, i: usize) -> u32 {
        self.get(i) as u32
    }

    /// Calls `found(i)` for every index `i` whose value is `value`, ascending. One pass over
    /// the stored bytes comparing them with the value's stored offset (a loop per width),
    /// without decoding each value: the way to find a slot's members or a target's holders
    /// among millions of values.
    pub fn for_each_equal(&self, value: u64, mut found: impl FnMut(usize)) {
        for (r, &(first, base)) in self.runs.iter().enumerate() {
            let start = first as usize;
            let end = self
                .runs
                .get(r + 1)
                .map_or(self.len, |next| next.0 as usize);
            let Some(needle) = value.checked_sub(base) else {
                continue;
            };
            if self.width == 0 {
                if needle == 0 {
                    (start..end).for_each(&mut found);
                }
            } else if self.width < 8 && needle >= self.mask {
                // Only a value kept aside can be that far from the base.
                for &(i, v) in &self.exceptions {
                    if v == value && (start..end).contains(&(i as usize)) {
                        found(i as usize);
                    }
                }
            } else {
                // An exception's marker is the mask, which the needle is below.
                let bytes = &self.bytes;
                match self.width {
                    1 => scan_equal::<1>(bytes, start, end, needle, &mut found),
                    2 => scan_equal::<2>(bytes, start, end, needle, &mut found),
                    3 => scan_equal::<3>(bytes, start, end, needle, &mut found),
                    4 => scan_equal::<4>(bytes, start, end, needle, &mut found),
                    5 => scan_equal::<5>(bytes, start, end, needle, &mut found),
                    6 => scan_equal::<6>(bytes, start, end, needle, &mut found),
                    7 => scan_equal::<7>(bytes, start, end, needle, &mut found),
                    _ => scan_equal::<8>(bytes, start, end, needle, &mut found),
                }
            }
        }
    }

    /// Appends the values at `indices` to `out`, in the order given: what [`Packed::get`]
    /// returns for each, read by a loop specialised to the column's width (no per-value
    /// width multiply, run search or call). Panics when an index is out of range.
    pub fn gather(&self, indices: &[u32], out: &mut Vec<u64>) {
        out.reserve(indices.len());
        match self.width {
            0 => out.extend(indices.iter().map(|&i| self.get(i as usize))),
            1 => self.gather_width::<1>(indices, out),
            2 => self.gather_width::<2>(indices, out),
            3 => self.gather_width::<3>(indices, out),
            4 => self.gather_width::<4>(indices, out),
            5 => self.gather_width::<5>(indices, out),
            6 => self.gather_width::<6>(indices, out),
            7 => self.gather_width::<7>(indices, out),
            _ => self.gather_width::<8>(indices, out),
        }
    }

    /// Appends the values at indices `range` to `out`, in order: one loop per run over the
    /// stored bytes, specialised to the column's width, then the values kept aside put back.
    pub fn decode_range(&self, range: std::ops::Range<usize>, out: &mut Vec<u64>) {
        let (start, end) = (range.start, range.end);
        assert!(
            start <= end && end <= self.len,
            "range {start}..{end} of a packed column of {}",
            self.len
        );
        let from = out.len();
        out.reserve(end - start);
        for (r, &(first, base)) in self.runs.iter().enumerate() {
            let s = (first as usize).max(start);
            let e = self
                .runs
                .get(r + 1)
                .map_or(self.len, |next| next.0 as usize)
                .min(end);
            if s >= e {
                continue;
            }
            let bytes = &self.bytes;
            match self.width {
                0 => out.extend(std::iter::repeat_n(base, e - s)),
                1 => decode_width::<1>(&bytes[s..e], base, out),
                2 => decode_width::<2>(&bytes[s * 2..e * 2], base, out),
                3 => decode_width::<3>(&bytes[s * 3..e * 3], base, out),
                4 => decode_width::<4>(&bytes[s * 4..e * 4], base, out),
                5 => decode_width::<5>(&bytes[s * 5..e * 5], base, out),
                6 => decode_width::<6>(&bytes[s * 6..e * 6], base, out),
                7 => decode_width::<7>(&bytes[s * 7..e * 7], base, out),
                _ => decode_width::<8>(&bytes[s * 8..e * 8], base, out),
            }
        }
        let first = self.exceptions.partition_point(|x| (x.0 as usize) < start);
        for &(i, v) in &self.exceptions[first..] {
            if i as usize >= end {
                break;
            }
            out[from + i as usize - start] = v;
        }
    }

    fn gather_width<const W: usize>(&self, indices: &[u32], out: &mut Vec<u64>) {
        let base = self.runs[0].1;
        let single = self.runs.len() == 1;
        let marked = !self.exceptions.is_empty();
        out.extend(indices.iter().map(|&i| {
            let i = i as usize;
            assert!(i < self.len, "index {i} of a packed column of {}", self.len);
            let offset = read::<W>(&self.bytes[i * W..i * W + W]);
            if single && !(marked && offset == self.mask) {
                base.wrapping_add(offset)
            } else {
                self.get(i)
            }
        }));
    }

    /// Every value, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len).map(|i| self.get(i))
    }

    /// Bytes per value (the stored width, not counting runs and exceptions).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Heap memory the column holds.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + (self.runs.capacity() + self.exceptions.capacity()) * size_of::<(u32, u64)>()
    }
}

/// The stored offset in `chunk`, `W` little-endian bytes.
#[inline(always)]
fn read<const W: usize>(chunk: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..W].copy_from_slice(chunk);
    u64::from_le_bytes(word)
}

/// Appends `base` plus each `W`-byte offset of `bytes` to `out`.
fn decode_width<const W: usize>(bytes: &[u8], base: u64, out: &mut Vec<u64>) {
    out.extend(
        bytes
            .chunks_exact(W)
            .map(|chunk| base.wrapping_add(read::<W>(chunk))),
    );
}

/// [`Packed::first_at_least`] over indices `0..end` of a column of width `W` whose values
/// `base + offset` do not wrap: the first index whose stored offset is `needle` or more and
/// that `accept`s it. Each block of values is tested first by its largest offset, without a
/// branch per value.
fn first_at_least_in<const W: usize>(
    bytes: &[u8],
    end: usize,
    needle: u64,
    accept: &mut impl FnMut(usize, u64) -> bool,
) -> Option<usize> {
    const BLOCK: usize = 64;
    for (b, block) in bytes[..end * W].chunks(BLOCK * W).enumerate() {
        // Four values a step, two maxima apart: fewer loop steps and a shorter chain of
        // dependent compares than one value a step.
        let mut quads = block.chunks_exact(4 * W);
        let mut largest = (&mut quads).fold(0, |largest: u64, q| {
            let a = read::<W>(&q[..W]).max(read::<W>(&q[W..2 * W]));
            let b = read::<W>(&q[2 * W..3 * W]).max(read::<W>(&q[3 * W..]));
            largest.max(a.max(b))
        });
        for chunk in quads.remainder().chunks_exact(W) {
            largest = largest.max(read::<W>(chunk));
        }
        if largest < needle {
            continue;
        }
        for (k, chunk) in block.chunks_exact(W).enumerate() {
            let offset = read::<W>(chunk);
            let i = b * BLOCK + k;
            if offset >= needle && accept(i, offset) {
                return Some(i);
            }
        }
    }
    None
}

/// [`Packed::for_each_equal`] over indices `start..end` of a column of width `W`.
fn scan_equal<const W: usize>(
    bytes: &[u8],
    start: usize,
    end: usize,
    needle: u64,
    found: &mut impl FnMut(usize),
) {
    for (k, chunk) in bytes[start * W..end * W].chunks_exact(W).enumerate() {
        if read::<W>(chunk) == needle {
            found(start + k);
        }
    }
}

/// A compressed adjacency list of packed columns: the targets of source `i` are
/// `targets[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedCsr {
    pub(crate) offsets: Packed,
    pub(crate) targets: Packed,
}

impl PackedCsr {
    /// Packs `sources` lists whose lengths and items `list(i)` gives (called twice per source).
    pub fn new<I: IntoIterator<Item = u64>>(sources: usize, list: impl Fn(usize) -> I) -> Self {
        let mut offsets = Vec::with_capacity(sources + 1);
        let mut targets = Vec::new();
        offsets.push(0u64);
        for i in 0..sources {
            targets.extend(list(i));
            offsets.push(targets.len() as u64);
        }
        PackedCsr {
            offsets: Packed::from_slice(&offsets),
            targets: Packed::from_slice(&targets),
        }
    }

    /// A list from its packed offsets (one per source, then the end) and targets.
    pub(crate) fn from_columns(offsets: Packed, targets: Packed) -> Self {
        debug_assert!(
            !offsets.is_empty() && offsets.get(offsets.len() - 1) as usize == targets.len()
        );
        PackedCsr { offsets, targets }
    }

    /// Number of sources.
    pub fn sources(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Total number of targets.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The range of `targets` that source `i` owns.
    #[inline]
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets.get(i) as usize..self.offsets.get(i + 1) as usize
    }

    /// The targets of source `i`, in order.
    pub fn of(&self, i: usize) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.range(i).map(|k| self.targets.get(k))
    }

    /// The source that owns target number `k` (`k < len()`): a binary search of the offsets.
    pub fn source_of(&self, k: usize) -> usize {
        assert!(k < self.len(), "target {k} of {}", self.len());
        // The first offset past `k` ends the owner's range.
        let (mut lo, mut hi) = (0, self.offsets.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.offsets.get(mid) as usize <= k {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - 1
    }

    /// Calls `found(source, k)` for every target number `k` equal to `target`, ascending.
    pub fn for_each_reference_to(&self, target: u64, mut found: impl FnMut(usize, usize)) {
        self.targets
            .for_each_equal(target, |k| found(self.source_of(k), k));
    }

    /// Target number `k` of the whole list.
    #[inline]
    pub fn target(&self, k: usize) -> u64 {
        self.targets.get(k)
    }

    pub fn heap_bytes(&self) -> usize {
        self.offsets.heap_bytes() + self.targets.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(values: &[u64]) -> Packed {
        let p = Packed::from_slice(values);
        assert_eq!(p.len(), values.len());
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(p.get(i), v, "value {i} of {values:?}");
        }
        bulk_reads_agree_with_get(&p, values);
        p
    }

    /// [`Packed::gather`] and [`Packed::for_each_equal`] read what [`Packed::get`] reads.
    fn bulk_reads_agree_with_get(p: &Packed, values: &[u64]) {
        let all: Vec<u32> = (0..values.len() as u32).collect();
        let mut got = Vec::new();
        p.gather(&all, &mut got);
        assert_eq!(got, values);
        let backwards: Vec<u32> = all.iter().rev().step_by(3).copied().collect();
        got.clear();
        p.gather(&backwards, &mut got);
        let expected: Vec<u64> = backwards.iter().map(|&i| values[i as usize]).collect();
        assert_eq!(got, expected);
        for (start, end) in [(0, values.len()), (values.len() / 3, values.len() / 2 + 1)] {
            let end = end.min(values.len());
            let start = start.min(end);
            got.clear();
            got.push(7);
            p.decode_range(start..end, &mut got);
            assert_eq!(got[0], 7);
            assert_eq!(got[1..], values[start..end], "values {start}..{end}");
        }
        // A few values present (spread over the column) and a few absent ones.
        let step = (values.len() / 40).max(1);
        let mut probes: Vec<u64> = values.iter().step_by(step).copied().collect();
        probes.extend([0, 1, u64::MAX, u64::MAX - 1]);
        probes.extend(values.iter().take(3).map(|v| v.wrapping_add(1)));
        for probe in probes {
            let mut found = Vec::new();
            p.for_each_equal(probe, |i| found.push(i));
            let expected: Vec<usize> = (0..values.len()).filter(|&i| values[i] == probe).collect();
            assert_eq!(found, expected, "positions of {probe}");
        }
    }

    proptest::proptest! {
        /// Columns of every shape: one width, exceptions (a few huge values among small ones),
        /// sorted spread values (runs).
        #[test]
        fn bulk_reads_agree_with_get_for_any_column(
            small in proptest::collection::vec(0u64..600, 0..300),
            huge in proptest::collection::vec((0usize..300, 1u64 << 40..1u64 << 41), 0..4),
            spread in proptest::bool::ANY,
        ) {
            let mut values = small;
            for (at, v) in huge {
                if at < values.len() {
                    values[at] = v;
                }
            }
            if spread {
                values.sort_unstable();
                for (i, v) in values.iter_mut().enumerate() {
                    *v += (i as u64 / 50) << 36;
                }
            }
            round_trip(&values);
        }
    }

    #[test]
    fn a_width_is_the_fewest_bytes_keeping_a_value_below_their_marker() {
        let by_definition = |v: u64| match v {
            0 => 0,
            _ => (1..8).find(|&w| v < mask_of(w)).unwrap_or(8),
        };
        for w in 1..=8 {
            let m = mask_of(w);
            for v in [m - 1, m, m.saturating_add(1), m / 2, m.saturating_sub(2)] {
                assert_eq!(width_of(v), by_definition(v), "{v:#x}");
            }
        }
        assert_eq!((width_of(0), width_of(1), width_of(u64::MAX)), (0, 1, 8));
    }

    #[test]
    fn constant_columns_take_no_byte_per_value() {
        let p = round_trip(&[7; 1000]);
        assert_eq!(p.width(), 0);
        assert!(p.heap_bytes() < 64, "{}", p.heap_bytes());
        assert_eq!(round_trip(&[]).len(), 0);
    }

    #[test]
    fn widths_follow_the_span_not_the_magnitude() {
        let base = 0x7f00_0000_0000u64;
        assert_eq!(round_trip(&[base, base + 200, base + 17]).width(), 1);
        assert_eq!(round_trip(&[5, 70_000, 1_000_000]).width(), 3);
        let wide: Vec<u64> = (0..100).map(|i| u64::MAX / 100 * i).collect();
        assert_eq!(round_trip(&wide).width(), 8);
        assert_eq!(round_trip(&[u64::MAX, u64::MAX - 1]).width(), 1);
    }

    #[test]
    fn rare_large_values_are_exceptions() {
        let mut values: Vec<u64> = (0..10_000).map(|i| 16 + i % 200).collect();
        values[17] = 16 << 20;
        values[9000] = u64::MAX;
        values[9001] = 255 + 16;
        let p = round_trip(&values);
        assert_eq!(p.width(), 1);
    }

    #[test]
    fn sorted_spread_values_use_runs() {
        let mut values: Vec<u64> = (0..5000).map(|i| 0x5555_0000_0000 + 48 * i).collect();
        values.extend((0..5000).map(|i| 0x7f12_0000_0000 + 4096 * i));
        let p = round_trip(&values);
        assert_eq!(p.width(), 4);
        assert!(p.heap_bytes() < values.len() * 4 + 256);
    }

    #[test]
    fn unsorted_spread_values_stay_exact() {
        let mut x = 1u64;
        let values: Vec<u64> = (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x >> (x % 64)
            })
            .collect();
        round_trip(&values);
    }

    #[test]
    fn the_first_value_at_least_a_bound_is_found_in_every_layout() {
        let mut spread: Vec<u64> = (0..5000).map(|i| 0x5555_0000_0000 + 48 * i).collect();
        spread.extend((0..5000).map(|i| 0x7f12_0000_0000 + 4096 * i));
        let mut aside: Vec<u64> = (0..10_000).map(|i| 16 + i % 200).collect();
        aside[17] = 16 << 20;
        aside[9000] = u64::MAX;
        for values in [vec![], vec![7; 100], (0..1000).collect(), spread, aside] {
            let p = Packed::from_slice(&values);
            let mut bounds: Vec<u64> = values
                .iter()
                .step_by(97)
                .flat_map(|&v| [v, v.saturating_add(1)])
                .collect();
            bounds.extend([0, 1, 16 << 20, u64::MAX]);
            for bound in bounds {
                let expected = values.iter().position(|&v| v >= bound);
                assert_eq!(p.first_at_least(bound), expected, "bound {bound}");
            }
        }
    }

    /// On layouts a decoder may be handed (values that wrap past `u64::MAX`, an exception
    /// whose marker is not stored, a stored marker without its exception), the search finds
    /// what reading every value with [`Packed::get`] finds, in every width.
    #[test]
    fn the_first_value_at_least_a_bound_is_what_get_reads_in_odd_layouts() {
        let mut x = 7u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for width in 1..=8usize {
            let mask = mask_of(width);
            for base in [0, 1000, u64::MAX - 300, u64::MAX] {
                let len = 300;
                let mut bytes = vec![0u8; len * width + PAD];
                for i in 0..len {
                    let offset = match next() % 8 {
                        0 => mask,
                        1 => next() % 500,
                        _ => next() % 200,
                    } & mask;
                    bytes[i * width..i * width + 8].copy_from_slice(&offset.to_le_bytes());
                }
                // Exceptions at some marked indices and at some unmarked ones.
                let mut exceptions = Vec::new();
                for i in 0..len as u32 {
                    if next() % 5 == 0 {
                        let shift = next() % 64;
                        exceptions.push((i, next() >> shift));
                    }
                }
                let p = Packed::from_parts(len, width, vec![(0, base)], exceptions, bytes);
                let values: Vec<u64> = p.iter().collect();
                let mut bounds: Vec<u64> = values.iter().step_by(7).copied().collect();
                bounds.extend(values.iter().step_by(11).map(|v| v.wrapping_add(1)));
                bounds.extend([0, 1, 150, 199, 200, 250, mask, base, u64::MAX]);
                for bound in bounds {
                    let expected = values.iter().position(|&v| v >= bound);
                    assert_eq!(
                        p.first_at_least(bound),
                        expected,
                        "width {width} base {base} bound {bound}"
                    );
                }
            }
        }
    }

    #[test]
    fn csr_lists_come_back_in_order() {
        let lists: Vec<Vec<u64>> = vec![vec![3, 1], vec![], vec![9, 9, 2_000_000], vec![]];
        let csr = PackedCsr::new(lists.len(), |i| lists[i].clone());
        assert_eq!(csr.sources(), 4);
        assert_eq!(csr.len(), 5);
        for (i, l) in lists.iter().enumerate() {
            assert_eq!(csr.of(i).collect::<Vec<_>>(), *l);
        }
        for k in 0..csr.len() {
            let owner = (0..csr.sources()).find(|&i| csr.range(i).contains(&k));
            assert_eq!(Some(csr.source_of(k)), owner, "target {k}");
        }
        let mut nines = Vec::new();
        csr.for_each_reference_to(9, |source, k| nines.push((source, k)));
        assert_eq!(nines, [(2, 2), (2, 3)]);
    }
}
