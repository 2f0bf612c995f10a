//! The lookup from an arbitrary word to the live block containing it, for the conservative
//! pointer scan.
//!
//! The lookup is constant time: per 2 MiB chunk of address space that holds block starts, a
//! bitmap with one bit per granule (16 bytes for glibc's blocks) marks the granules where a
//! block starts, and beside each 64-bit word of it the number of blocks that start before the
//! word (its rank). The block holding `v` is then the one numbered `rank + popcount(bits up to
//! v) - 1`, if `v` lies below its end: one hash probe (skipped while pointers stay in one
//! chunk), one 16-byte word and one end read. A chunk that only the middle of a large block
//! covers names that block. (The page index it replaced searched up to 258 starts per lookup;
//! the lookup was two thirds of a capture's time on a pointer-dense heap.)
//!
//! Owns the index and its lookups; it reads no memory (the caller scans, inside the target or
//! over a copy of it) and never changes once built.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

use heaptui_analysis::ObjectIndex;

const CHUNK_SHIFT: u32 = 21;
const CHUNK_MASK: u64 = (1 << CHUNK_SHIFT) - 1;
/// A chunk entry with this bit names the one block covering the whole chunk, not a map.
const COVERED: u32 = 1 << 31;

/// One 64-granule word of a chunk's start bitmap and the blocks that start before it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Word {
    starts: u64,
    rank: u32,
}

/// Live blocks sorted by address, with a start bitmap for interior pointers.
pub struct BlockIndex {
    starts: Vec<u64>,
    ends: Vec<u64>,
    min: u64,
    max: u64,
    /// log2 of the granule: 4 when no two blocks start in one 16-byte granule (always so for
    /// malloc's blocks), else 3, else 0.
    granule: u32,
    /// Chunk number → index into `maps`, or `COVERED | block`.
    chunks: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
    /// `words_per_chunk` words per chunk holding starts, chunks in ascending address order.
    maps: Vec<Word>,
    words_per_chunk: usize,
}

impl BlockIndex {
    /// Builds the index over blocks given as `(addr, size)`, which must be sorted by address
    /// and disjoint (heap blocks are). A zero-size block still owns its first byte.
    pub fn new(blocks: impl ExactSizeIterator<Item = (u64, u64)>) -> BlockIndex {
        let n = blocks.len();
        let mut starts = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        for (addr, size) in blocks {
            starts.push(addr);
            ends.push(addr.saturating_add(size.max(1)));
        }
        // The coarsest granule in which no two blocks start together.
        let granule = [4u32, 3]
            .into_iter()
            .find(|&g| starts.windows(2).all(|w| w[0] >> g != w[1] >> g))
            .unwrap_or(0);
        let words_per_chunk = 1usize << (CHUNK_SHIFT - granule - 6);
        let mut index = BlockIndex {
            min: starts.first().copied().unwrap_or(u64::MAX),
            max: ends.iter().copied().max().unwrap_or(0),
            starts,
            ends,
            granule,
            chunks: HashMap::default(),
            maps: Vec::new(),
            words_per_chunk,
        };
        index.build_maps();
        index
    }

    fn build_maps(&mut self) {
        // Blocks come in address order, so the chunks of their starts do too: a new map is
        // always the last one.
        let mut first_block: Vec<u32> = Vec::new();
        let mut last_chunk = u64::MAX;
        for i in 0..self.starts.len() {
            let (start, end) = (self.starts[i], self.ends[i]);
            let chunk = start >> CHUNK_SHIFT;
            if chunk != last_chunk {
                last_chunk = chunk;
                // A chunk only covered so far (by an earlier block's tail) gets its map now.
                let m = (self.maps.len() / self.words_per_chunk) as u32;
                self.chunks.insert(chunk, m);
                self.maps
                    .resize(self.maps.len() + self.words_per_chunk, Word::default());
                first_block.push(i as u32);
            }
            let m = (self.maps.len() / self.words_per_chunk) - 1;
            let g = ((start & CHUNK_MASK) >> self.granule) as usize;
            self.maps[m * self.words_per_chunk + g / 64].starts |= 1 << (g % 64);
            // Chunks the block covers past its first are named after it, unless a later
            // block starts there (then it gets a map, whose ranks find this block too).
            for covered in chunk + 1..=(end - 1) >> CHUNK_SHIFT {
                self.chunks.entry(covered).or_insert(COVERED | i as u32);
            }
        }
        for (m, &first) in first_block.iter().enumerate() {
            let mut rank = first;
            for w in &mut self.maps[m * self.words_per_chunk..(m + 1) * self.words_per_chunk] {
                w.rank = rank;
                rank += w.starts.count_ones();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Start and end (exclusive) of block `i`.
    pub fn range(&self, i: ObjectIndex) -> Range<u64> {
        self.starts[i as usize]..self.ends[i as usize]
    }

    /// The block containing `v` (at its start or inside), if any.
    #[inline]
    pub fn lookup(&self, v: u64) -> Option<ObjectIndex> {
        self.lookup_cached(v, &mut (u64::MAX, 0))
    }

    /// As [`BlockIndex::lookup`], remembering the last chunk found in `cache` (pointers
    /// found near each other mostly fall in the same 2 MiB chunk).
    #[inline]
    pub fn lookup_cached(&self, v: u64, cache: &mut (u64, u32)) -> Option<ObjectIndex> {
        if v < self.min || v >= self.max {
            return None;
        }
        let chunk = v >> CHUNK_SHIFT;
        let c = if cache.0 == chunk {
            cache.1
        } else {
            let &c = self.chunks.get(&chunk)?;
            *cache = (chunk, c);
            c
        };
        let i = if c & COVERED != 0 {
            c & !COVERED
        } else {
            let g = ((v & CHUNK_MASK) >> self.granule) as usize;
            let word = self.maps[c as usize * self.words_per_chunk + g / 64];
            let below = word.starts & (u64::MAX >> (63 - g % 64));
            (word.rank + below.count_ones()).checked_sub(1)?
        };
        (v < self.ends[i as usize]).then_some(i)
    }
}

/// A fast hasher for integer keys (addresses, chunk numbers): one multiply per word. Not
/// resistant to chosen keys, which a heap capture does not need.
#[derive(Default)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_and_start_pointers_resolve_and_gaps_do_not() {
        let blocks = [
            (0x1000u64, 16u64),
            (0x1010, 32),
            (0x1040, 0),
            (0x2ff0, 0x3000), // straddles pages 2..5
            (0x40_0000, 8),   // another 2 MiB chunk
        ];
        let index = BlockIndex::new(blocks.iter().copied());
        assert_eq!(index.lookup(0x1000), Some(0));
        assert_eq!(index.lookup(0x100f), Some(0));
        assert_eq!(index.lookup(0x1010), Some(1));
        assert_eq!(index.lookup(0x102f), Some(1));
        assert_eq!(index.lookup(0x1030), None);
        assert_eq!(index.lookup(0x1040), Some(2));
        assert_eq!(index.lookup(0x1041), None);
        assert_eq!(index.lookup(0x2fef), None);
        assert_eq!(index.lookup(0x2ff0), Some(3));
        assert_eq!(index.lookup(0x4800), Some(3));
        assert_eq!(index.lookup(0x5fef), Some(3));
        assert_eq!(index.lookup(0x5ff0), None);
        assert_eq!(index.lookup(0x40_0007), Some(4));
        assert_eq!(index.lookup(0x40_0008), None);
        assert_eq!(index.lookup(0), None);
        assert_eq!(index.lookup(u64::MAX), None);
    }

    #[test]
    fn lookup_agrees_with_a_linear_search_on_dense_small_blocks() {
        // 16-byte blocks every 32 bytes over several pages: the densest heap shape.
        let blocks: Vec<(u64, u64)> = (0..2000u64).map(|i| (0x10_0000 + 32 * i, 16)).collect();
        let index = BlockIndex::new(blocks.iter().copied());
        for v in (0x10_0000 - 64..0x10_0000 + 32 * 2000 + 64).step_by(8) {
            let expect = blocks
                .iter()
                .position(|&(a, s)| a <= v && v < a + s)
                .map(|p| p as u32);
            assert_eq!(index.lookup(v), expect, "{v:#x}");
        }
    }

    #[test]
    fn lookup_agrees_with_a_linear_search_on_random_layouts() {
        // Random disjoint blocks: odd alignments (down to 8 bytes apart, which makes the index
        // fall back to finer granules), zero sizes, blocks straddling chunks and blocks
        // covering several whole chunks; every probe is checked against a linear search.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for align in [16u64, 8, 1] {
            let mut blocks: Vec<(u64, u64)> = Vec::new();
            let mut at = 0x7f00_0000_0000u64 + next(1 << 20) * align;
            for _ in 0..1000 {
                let size = match next(100) {
                    0 => 5 << 20,
                    1..=3 => next(1 << 22),
                    4..=9 => 0,
                    _ => next(256),
                };
                blocks.push((at, size));
                at += size.max(1).next_multiple_of(align) + next(4) * align;
                if next(50) == 0 {
                    at += next(1 << 30) / align * align;
                }
            }
            let index = BlockIndex::new(blocks.iter().copied());
            let linear = |v: u64| {
                blocks
                    .iter()
                    .position(|&(a, s)| a <= v && v < a + s.max(1))
                    .map(|p| p as u32)
            };
            for &(a, s) in &blocks {
                for v in [
                    a.wrapping_sub(1),
                    a,
                    a + s / 2,
                    a + s.max(1) - 1,
                    a + s.max(1),
                ] {
                    assert_eq!(index.lookup(v), linear(v), "align {align}: {v:#x}");
                }
            }
            for _ in 0..5000 {
                let v = blocks[0].0 + next(at - blocks[0].0 + 64);
                assert_eq!(index.lookup(v), linear(v), "align {align}: {v:#x}");
            }
        }
    }
}
