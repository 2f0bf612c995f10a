//! The lookup from an arbitrary word to the live block containing it, for the conservative
//! pointer scan: a page index over the blocks sorted by address (one hash probe per 2 MiB
//! chunk, then a short search among the few blocks of one 4 KiB page).
//!
//! Owns the index and its lookups; it reads no memory (the caller scans, inside the target or
//! over a copy of it) and never changes once built.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

use heaptui_analysis::ObjectIndex;

const PAGE_SHIFT: u32 = 12;
const CHUNK_SHIFT: u32 = 21;
const PAGES_PER_CHUNK: usize = 1 << (CHUNK_SHIFT - PAGE_SHIFT);
const NONE: u32 = u32::MAX;
/// At most this many blocks can start in one page (16-byte minimum granularity), plus the
/// one that reaches into it from below.
const WINDOW: usize = (1 << PAGE_SHIFT) / 16 + 2;

/// Live blocks sorted by address, with a page index for interior pointers.
pub struct BlockIndex {
    starts: Vec<u64>,
    ends: Vec<u64>,
    min: u64,
    max: u64,
    chunks: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
    /// Per page of each chunk: the first block (by address) overlapping that page.
    pages: Vec<[u32; PAGES_PER_CHUNK]>,
}

impl BlockIndex {
    /// Builds the index over blocks given as `(addr, size)`, which must be sorted by address
    /// and disjoint (heap blocks are). A zero-size block still owns its first byte.
    pub fn new(blocks: impl ExactSizeIterator<Item = (u64, u64)>) -> BlockIndex {
        let n = blocks.len();
        let mut index = BlockIndex {
            starts: Vec::with_capacity(n),
            ends: Vec::with_capacity(n),
            min: u64::MAX,
            max: 0,
            chunks: HashMap::default(),
            pages: Vec::new(),
        };
        // Blocks come in address order, so consecutive pages mostly fall in the same chunk:
        // remember the last one instead of hashing every page.
        let mut last: Option<(u64, usize)> = None;
        for (i, (addr, size)) in blocks.enumerate() {
            let end = addr.saturating_add(size.max(1));
            index.starts.push(addr);
            index.ends.push(end);
            index.min = index.min.min(addr);
            index.max = index.max.max(end);
            let first_page = addr >> PAGE_SHIFT;
            let last_page = (end - 1) >> PAGE_SHIFT;
            for page in first_page..=last_page {
                let chunk = page >> (CHUNK_SHIFT - PAGE_SHIFT);
                let c = match last {
                    Some((k, c)) if k == chunk => c,
                    _ => {
                        let pages = &mut index.pages;
                        let c = *index.chunks.entry(chunk).or_insert_with(|| {
                            pages.push([NONE; PAGES_PER_CHUNK]);
                            (pages.len() - 1) as u32
                        }) as usize;
                        last = Some((chunk, c));
                        c
                    }
                };
                let entry = &mut index.pages[c][(page as usize) & (PAGES_PER_CHUNK - 1)];
                if *entry == NONE {
                    *entry = i as u32;
                }
            }
        }
        index
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
        let page = v >> PAGE_SHIFT;
        let chunk = page >> (CHUNK_SHIFT - PAGE_SHIFT);
        let c = if cache.0 == chunk {
            cache.1
        } else {
            let &c = self.chunks.get(&chunk)?;
            *cache = (chunk, c);
            c
        };
        let first = self.pages[c as usize][(page as usize) & (PAGES_PER_CHUNK - 1)];
        if first == NONE {
            return None;
        }
        let lo = first as usize;
        let hi = (lo + WINDOW).min(self.starts.len());
        let k = lo + self.starts[lo..hi].partition_point(|&s| s <= v);
        let j = k.checked_sub(1)?;
        (j >= lo && v < self.ends[j]).then_some(j as ObjectIndex)
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
}
