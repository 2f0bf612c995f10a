//! The lookup from an arbitrary word to the live block containing it, for the conservative
//! pointer scan.
//!
//! The lookup is constant time: per 2 MiB chunk of address space that holds block starts, a
//! bitmap with one bit per granule (16 bytes for glibc's blocks) marks the granules where a
//! block starts, and beside each 64-bit word of it the number of blocks that start before the
//! word (its rank). The block holding `v` is then the one numbered `rank + popcount(bits up to
//! v) - 1`, if `v` lies below its end: one chunk entry (skipped while pointers stay in one
//! chunk), one 32-byte word and one end read. The end is read only when `v`'s granule is not
//! wholly inside a block (a second bit per granule in the same word says so): a pointer to a
//! block's start or into its body is answered by the word alone, and the end read, a cache
//! miss at millions of blocks, was two thirds of the lookup's time. A chunk that only the middle of a large block
//! covers names that block. (The page index it replaced searched up to 258 starts per lookup;
//! the lookup was two thirds of a capture's time on a pointer-dense heap.)
//!
//! The chunk entries of the densest run of chunks (the brk heap, where most blocks are) are
//! a table indexed by chunk number, the others (mmapped blocks, far away) a hash map: a
//! pointer leaving the last chunk found then costs one array read, not a hash probe.
//!
//! The index is built in one pass over the sorted blocks: each block's start bit, the ranks
//! and the `inside` bits of the blocks whose whole granules end in the chunk they start in
//! (all but a few large ones, marked after). Two passes and a granule check of two more took
//! 189 instructions a block at 4.6M blocks; the one pass takes 139. The pass can also run in
//! two halves on two threads (`BlockIndex::of_sorted_in_halves`, the scanning child's), the
//! maps split where a chunk begins: the longest thread then does 61 a block.
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
/// A dense table entry of a chunk that holds no block.
const NO_CHUNK: u32 = u32::MAX;
/// Most empty entries the dense table spends per chunk it holds (a run of chunks with gaps
/// wider than this is split).
const MAX_GAP: u64 = 64;

/// One 64-granule word of a chunk's start bitmap, the blocks that start before it, and which
/// of its granules lie wholly inside a block (`inside`: a word found in one, the common case,
/// needs no read of that block's end, a cache miss of its own in a heap of millions).
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct Word {
    starts: u64,
    inside: u64,
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
    /// Chunk number → index into `maps`, or `COVERED | block`, for chunks outside `dense`.
    chunks: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
    /// The same for the chunks `dense_first..dense_first + dense.len()`, [`NO_CHUNK`] for none.
    dense: Vec<u32>,
    dense_first: u64,
    /// `words_per_chunk` words per chunk holding starts, chunks in ascending address order.
    maps: Vec<Word>,
    words_per_chunk: usize,
}

impl BlockIndex {
    /// Builds the index over blocks given as `(addr, size)`, which must be sorted by address
    /// and disjoint (heap blocks are). A zero-size block still owns its first byte.
    ///
    /// # Panics
    /// When the blocks are not sorted by address (see [`BlockIndex::of_sorted`]).
    pub fn new(blocks: impl ExactSizeIterator<Item = (u64, u64)>) -> BlockIndex {
        BlockIndex::of_sorted(blocks).expect("blocks sorted by address")
    }

    /// Builds the index as [`BlockIndex::new`] does, or returns `None` when a block starts
    /// below the one before it (the blocks were not sorted by address): the check is one
    /// compare per block in the pass that copies them, so a caller whose blocks come sorted
    /// by construction need not read them all once more to make sure of it.
    pub fn of_sorted(blocks: impl ExactSizeIterator<Item = (u64, u64)>) -> Option<BlockIndex> {
        let n = blocks.len();
        let mut starts = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        let mut facts = Starts::NONE;
        for (addr, size) in blocks {
            let end = addr.saturating_add(size.max(1));
            starts.push(addr);
            ends.push(end);
            facts.add(addr, end);
        }
        if facts.unsorted {
            return None;
        }
        let granule = facts.granule();
        let maps = Maps::build(&starts, &ends, 0, granule);
        Some(BlockIndex::assemble(starts, ends, &facts, granule, maps))
    }

    /// As [`BlockIndex::of_sorted`] over `items` (each block given by `block`), in two
    /// halves: `both` runs its two closures, on two threads if it can (the scanning child's
    /// `alongside`), one after the other if not. The blocks' copy is split at the middle,
    /// their maps at the first chunk boundary past it, so each half makes maps of chunks of
    /// its own; the second half's are then appended after the first's (a few MiB). The index
    /// is the one [`BlockIndex::of_sorted`] makes of the same blocks.
    pub fn of_sorted_in_halves<T: Sync>(
        items: &[T],
        block: impl Fn(&T) -> (u64, u64) + Sync,
        mut both: impl FnMut(&mut (dyn FnMut() + Send), &mut (dyn FnMut() + Send)),
    ) -> Option<BlockIndex> {
        let n = items.len();
        let mid = n / 2;
        // Zeroed, so written in place by the two halves without `unsafe`: a large
        // allocation's fresh pages are zero already, and each half faults in its own.
        let mut starts = vec![0u64; n];
        let mut ends = vec![0u64; n];
        let (mut low, mut high) = (Starts::NONE, Starts::NONE);
        {
            let (s0, s1) = starts.split_at_mut(mid);
            let (e0, e1) = ends.split_at_mut(mid);
            let copy = |items: &[T], starts: &mut [u64], ends: &mut [u64], facts: &mut Starts| {
                for ((t, s), e) in items.iter().zip(starts).zip(ends) {
                    let (addr, size) = block(t);
                    let end = addr.saturating_add(size.max(1));
                    *s = addr;
                    *e = end;
                    facts.add(addr, end);
                }
            };
            let (first, second) = items.split_at(mid);
            both(&mut || copy(first, s0, e0, &mut low), &mut || {
                copy(second, s1, e1, &mut high)
            });
        }
        let facts = low.then(&high);
        if facts.unsorted {
            return None;
        }
        let granule = facts.granule();
        // The maps split where a chunk begins, at or after the middle.
        let split = match mid.checked_sub(1) {
            Some(before) => {
                let chunk = starts[before] >> CHUNK_SHIFT;
                mid + starts[mid..].partition_point(|&s| s >> CHUNK_SHIFT == chunk)
            }
            None => n,
        };
        let maps = if split == n {
            Maps::build(&starts, &ends, 0, granule)
        } else {
            let (mut first, mut second) = (None, None);
            let (s, e) = (&starts, &ends);
            both(
                &mut || first = Some(Maps::build(&s[..split], &e[..split], 0, granule)),
                &mut || second = Some(Maps::build(&s[split..], &e[split..], split, granule)),
            );
            let (Some(first), Some(second)) = (first, second) else {
                unreachable!("both halves run")
            };
            first.then(second, words_per_chunk(granule))
        };
        Some(BlockIndex::assemble(starts, ends, &facts, granule, maps))
    }

    fn assemble(
        starts: Vec<u64>,
        ends: Vec<u64>,
        facts: &Starts,
        granule: u32,
        maps: Maps,
    ) -> BlockIndex {
        let mut index = BlockIndex {
            min: starts.first().copied().unwrap_or(u64::MAX),
            max: facts.max,
            starts,
            ends,
            granule,
            chunks: maps.chunks,
            dense: Vec::new(),
            dense_first: 0,
            maps: maps.maps,
            words_per_chunk: words_per_chunk(granule),
        };
        index.build_dense();
        index.mark_insides(maps.straddling);
        index
    }

    /// Sets the `inside` bit of every granule of a chunk with a map that lies wholly inside
    /// one of blocks `which` (those whose whole granules reach past the chunk they start in:
    /// `Maps::build` marked the others').
    fn mark_insides(&mut self, which: Vec<u32>) {
        let granule = 1u64 << self.granule;
        for i in which {
            let (start, end) = (self.starts[i as usize], self.ends[i as usize]);
            // Granules from the first whole one to the last whole one, as addresses.
            let (first, last) = (start.next_multiple_of(granule), end & !(granule - 1));
            let mut at = first;
            while at < last {
                let chunk = at >> CHUNK_SHIFT;
                let chunk_end = ((chunk + 1) << CHUNK_SHIFT).min(last);
                if let Some(m) = self.chunk_entry(chunk).filter(|m| m & COVERED == 0) {
                    let words =
                        &mut self.maps[m as usize * self.words_per_chunk..][..self.words_per_chunk];
                    let g0 = ((at & CHUNK_MASK) >> self.granule) as usize;
                    let g1 = g0 + ((chunk_end - at) >> self.granule) as usize;
                    set_bits(words, g0, g1);
                }
                at = chunk_end;
            }
        }
    }

    /// Moves the entries of the run of chunks holding the most entries, with no gap wider
    /// than [`MAX_GAP`] chunks, from the hash map to the dense table.
    fn build_dense(&mut self) {
        let mut numbers: Vec<u64> = self.chunks.keys().copied().collect();
        numbers.sort_unstable();
        let (mut best, mut run_start) = ((0usize, 0usize), 0usize);
        for i in 1..=numbers.len() {
            if i == numbers.len() || numbers[i] - numbers[i - 1] > MAX_GAP {
                if i - run_start > best.1 - best.0 {
                    best = (run_start, i);
                }
                run_start = i;
            }
        }
        let run = &numbers[best.0..best.1];
        let (Some(&first), Some(&last)) = (run.first(), run.last()) else {
            return;
        };
        self.dense = vec![NO_CHUNK; (last - first + 1) as usize];
        self.dense_first = first;
        for c in run {
            let entry = self.chunks.remove(c).expect("a chunk just listed");
            self.dense[(c - first) as usize] = entry;
        }
        self.chunks.shrink_to_fit();
    }

    /// The entry of chunk `chunk`, if it has one.
    #[inline]
    fn chunk_entry(&self, chunk: u64) -> Option<u32> {
        match self
            .dense
            .get(chunk.wrapping_sub(self.dense_first) as usize)
        {
            Some(&NO_CHUNK) => None,
            Some(&c) => Some(c),
            None => self.chunks.get(&chunk).copied(),
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
        self.lookup_at(v, cache).map(|(i, _)| i)
    }

    /// Where the bitmap word a lookup of `v` reads lies, when it reads one: for a scan to
    /// ask the cache for it ahead (`_mm_prefetch`, unsafe, is the caller's). The word is a
    /// cache miss at millions of blocks (the bitmaps are about 3 bytes per block, spread over
    /// the heap's chunks); a scan that knows its next words hints them first, and their
    /// misses overlap the lookups of the words before them.
    #[inline]
    pub fn bitmap_word_of(&self, v: u64) -> Option<*const u8> {
        if v < self.min || v >= self.max {
            return None;
        }
        let chunk = v >> CHUNK_SHIFT;
        let &c = self
            .dense
            .get(chunk.wrapping_sub(self.dense_first) as usize)?;
        if c & COVERED != 0 {
            return None;
        }
        let g = ((v & CHUNK_MASK) >> self.granule) as usize;
        let word = self.maps.get(c as usize * self.words_per_chunk + g / 64)?;
        Some((word as *const Word).cast())
    }

    /// As [`BlockIndex::lookup_cached`], with whether `v` is the block's first byte (the
    /// kind of the reference), known from the bitmap word alone (every block starts on a
    /// granule): no read of the block's start, another cache miss.
    #[inline]
    pub fn lookup_at(&self, v: u64, cache: &mut (u64, u32)) -> Option<(ObjectIndex, bool)> {
        if v < self.min || v >= self.max {
            return None;
        }
        let chunk = v >> CHUNK_SHIFT;
        let c = if cache.0 == chunk {
            cache.1
        } else {
            let c = self.chunk_entry(chunk)?;
            *cache = (chunk, c);
            c
        };
        let (i, at_start) = if c & COVERED != 0 {
            let i = c & !COVERED;
            (i, v == self.starts[i as usize])
        } else {
            let g = ((v & CHUNK_MASK) >> self.granule) as usize;
            let word = self.maps[c as usize * self.words_per_chunk + g / 64];
            let below = word.starts & (u64::MAX >> (63 - g % 64));
            let i = (word.rank + below.count_ones()).checked_sub(1)?;
            // Every block starts on a granule: `v` is block i's start when a block starts in
            // its granule and `v` is the granule's first byte.
            let at_start = word.starts >> (g % 64) & 1 == 1 && v & ((1 << self.granule) - 1) == 0;
            if word.inside >> (g % 64) & 1 == 1 {
                // The granule lies inside a block, which starts at or below it: block i.
                return Some((i, at_start));
            }
            (i, at_start)
        };
        (v < self.ends[i as usize]).then_some((i, at_start))
    }
}

/// Words of a chunk's map at granule `granule`.
fn words_per_chunk(granule: u32) -> usize {
    1usize << (CHUNK_SHIFT - granule - 6)
}

/// What a copy of a run of blocks found about their starts: the granule's facts, the highest
/// end, whether they came in address order.
#[derive(Clone, Copy)]
struct Starts {
    first: Option<u64>,
    last: Option<u64>,
    max: u64,
    /// The bits any start has below 16.
    low_bits: u64,
    /// Whether two consecutive starts share a 16-byte, an 8-byte granule.
    share_16: bool,
    share_8: bool,
    /// Whether a start lies below the one before it.
    unsorted: bool,
}

impl Starts {
    const NONE: Starts = Starts {
        first: None,
        last: None,
        max: 0,
        low_bits: 0,
        share_16: false,
        share_8: false,
        unsorted: false,
    };

    #[inline]
    fn add(&mut self, addr: u64, end: u64) {
        self.max = self.max.max(end);
        self.low_bits |= addr & 15;
        match self.last {
            Some(last) => {
                self.share_16 |= addr >> 4 == last >> 4;
                self.share_8 |= addr >> 3 == last >> 3;
                self.unsorted |= addr < last;
            }
            None => self.first = Some(addr),
        }
        self.last = Some(addr);
    }

    /// The facts of this run followed by `next`.
    fn then(&self, next: &Starts) -> Starts {
        let (Some(last), Some(first)) = (self.last, next.first) else {
            return if self.last.is_some() { *self } else { *next };
        };
        Starts {
            first: self.first,
            last: next.last,
            max: self.max.max(next.max),
            low_bits: self.low_bits | next.low_bits,
            share_16: self.share_16 || next.share_16 || first >> 4 == last >> 4,
            share_8: self.share_8 || next.share_8 || first >> 3 == last >> 3,
            unsorted: self.unsorted || next.unsorted || first < last,
        }
    }

    /// The coarsest granule on which every block starts and in which no two blocks start
    /// together. (Starts off the granule would make a word in the granule below a start
    /// resolve to that block: a pointer into the gap before a block 8 bytes past a 16-byte
    /// boundary was taken for a reference to it.)
    fn granule(&self) -> u32 {
        if self.low_bits == 0 && !self.share_16 {
            4
        } else if self.low_bits & 7 == 0 && !self.share_8 {
            3
        } else {
            0
        }
    }
}

/// The chunk maps of a run of sorted blocks, before the dense table is made.
struct Maps {
    /// [`words_per_chunk`] words per chunk holding starts, chunks in ascending address order.
    maps: Vec<Word>,
    /// Chunk number → index of its map in `maps`, or `COVERED | block`.
    chunks: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
    /// The blocks whose whole granules reach past the chunk they start in.
    straddling: Vec<u32>,
}

impl Maps {
    /// Makes the map of every chunk in which one of the blocks `starts`/`ends` starts, with
    /// its start bits, its ranks and the `inside` bits of the blocks whose whole granules end
    /// in the chunk they start in (nearly all); keeps the others, for
    /// [`BlockIndex::mark_insides`]. Names the chunks only covered by a block after it. The
    /// blocks are numbered from `first` (as many blocks come before them).
    fn build(starts: &[u64], ends: &[u64], first: usize, granule: u32) -> Maps {
        // Blocks come in address order, so the chunks of their starts do too: a new map is
        // always the last one.
        let wpc = words_per_chunk(granule);
        let mut out = Maps {
            maps: Vec::new(),
            chunks: HashMap::default(),
            straddling: Vec::new(),
        };
        let mut last_chunk = u64::MAX;
        let mut map = 0..0;
        // The blocks starting before word `word_at` of the maps, the first word whose rank is
        // not yet set.
        let (mut rank, mut word_at) = (first as u32, 0usize);
        for (k, (&start, &end)) in starts.iter().zip(ends).enumerate() {
            let i = first + k;
            let chunk = start >> CHUNK_SHIFT;
            if chunk != last_chunk {
                for w in &mut out.maps[word_at..map.end] {
                    w.rank = rank;
                }
                last_chunk = chunk;
                // A chunk only covered so far (by an earlier block's tail) gets its map now.
                let m = out.maps.len();
                out.chunks.insert(chunk, (m / wpc) as u32);
                out.maps.resize(m + wpc, Word::default());
                map = m..m + wpc;
                word_at = m;
            }
            let words = &mut out.maps[map.clone()];
            let g = ((start & CHUNK_MASK) >> granule) as usize;
            for w in &mut words[word_at - map.start..=g / 64] {
                w.rank = rank;
            }
            word_at = map.start + g / 64 + 1;
            words[g / 64].starts |= 1 << (g % 64);
            rank += 1;
            // Its whole granules (from its start, on a granule), when they end in this chunk.
            let (from, to) = (start, end & !((1 << granule) - 1));
            if from < to {
                if (to - 1) >> CHUNK_SHIFT == chunk {
                    let g0 = ((from & CHUNK_MASK) >> granule) as usize;
                    let count = ((to - from) >> granule) as usize;
                    if count <= 64 - g0 % 64 {
                        // Within one word: most blocks.
                        words[g0 / 64].inside |= u64::MAX >> (64 - count) << (g0 % 64);
                    } else {
                        set_bits(words, g0, g0 + count);
                    }
                } else {
                    out.straddling.push(i as u32);
                }
            }
            // Chunks the block covers past its first are named after it, unless a later
            // block starts there (then it gets a map, whose ranks find this block too).
            let last_covered = (end - 1) >> CHUNK_SHIFT;
            if last_covered > chunk {
                for covered in chunk + 1..=last_covered {
                    out.chunks.entry(covered).or_insert(COVERED | i as u32);
                }
            }
        }
        for w in &mut out.maps[word_at..map.end] {
            w.rank = rank;
        }
        out
    }

    /// These maps followed by `next`'s, of the blocks after these, whose chunks all lie above
    /// the last of these blocks' starts: `next`'s maps are appended, their entries renumbered,
    /// and a chunk these name as covered by a block that `next` has a map for takes the map
    /// (as when one pass makes both).
    fn then(mut self, next: Maps, wpc: usize) -> Maps {
        let offset = (self.maps.len() / wpc) as u32;
        self.maps.extend_from_slice(&next.maps);
        self.chunks.reserve(next.chunks.len());
        for (chunk, entry) in next.chunks {
            let entry = if entry & COVERED != 0 {
                entry
            } else {
                entry + offset
            };
            self.chunks.insert(chunk, entry);
        }
        self.straddling.extend(next.straddling);
        self
    }
}

/// Sets bits `from..to` of a bitmap laid over the `inside` fields of `words`.
fn set_bits(words: &mut [Word], from: usize, to: usize) {
    let mut g = from;
    while g < to {
        let bit = g % 64;
        let n = (to - g).min(64 - bit);
        let mask = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << bit
        };
        words[g / 64].inside |= mask;
        g += n;
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

    /// The index of `blocks` made in halves, on two threads when `threads`.
    fn in_halves(blocks: &[(u64, u64)], threads: bool) -> BlockIndex {
        BlockIndex::of_sorted_in_halves(
            blocks,
            |&b| b,
            |first, second| {
                if threads {
                    std::thread::scope(|s| {
                        s.spawn(second);
                        first();
                    });
                } else {
                    first();
                    second();
                }
            },
        )
        .expect("sorted blocks")
    }

    #[test]
    fn blocks_out_of_address_order_make_no_index() {
        let sorted = [(0x1000u64, 16u64), (0x1010, 16), (0x40_0000, 8)];
        assert!(BlockIndex::of_sorted(sorted.iter().copied()).is_some());
        // Out of order anywhere, first or last included.
        for (i, j) in [(0, 1), (1, 2), (0, 2)] {
            let mut blocks = sorted;
            blocks.swap(i, j);
            assert!(
                BlockIndex::of_sorted(blocks.iter().copied()).is_none(),
                "{blocks:x?}"
            );
        }
        assert!(BlockIndex::of_sorted(std::iter::empty()).is_some());
        // In halves too, out of order across the two.
        let halves = |blocks: &[(u64, u64)]| {
            BlockIndex::of_sorted_in_halves(
                blocks,
                |&b| b,
                |first, second| {
                    first();
                    second();
                },
            )
        };
        assert!(halves(&sorted).is_some());
        assert!(halves(&[sorted[1], sorted[0]]).is_none());
        assert!(halves(&[sorted[0], sorted[2], sorted[1]]).is_none());
        assert!(halves(&[]).is_some());
    }

    #[test]
    fn a_word_in_the_gap_before_a_block_off_the_granule_is_no_reference() {
        // 16 bytes, then a block 8 bytes past the next 16-byte boundary.
        let index = BlockIndex::new([(0x1000u64, 16u64), (0x1018, 8)].into_iter());
        assert_eq!(index.lookup(0x1010), None);
        assert_eq!(index.lookup(0x1017), None);
        assert_eq!(index.lookup_at(0x1018, &mut (u64::MAX, 0)), Some((1, true)));
        assert_eq!(
            index.lookup_at(0x101f, &mut (u64::MAX, 0)),
            Some((1, false))
        );
        assert_eq!(index.lookup(0x1020), None);
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
            let halves = [
                in_halves(&blocks, false),
                in_halves(&blocks, true),
                // Split past the middle of a 5 MiB block's chunks, and into its own.
                in_halves(
                    &blocks[..blocks.iter().position(|b| b.1 == 5 << 20).unwrap() * 2],
                    true,
                ),
            ];
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
                    let at = index.lookup_at(v, &mut (u64::MAX, 0));
                    let expect = linear(v).map(|i| (i, blocks[i as usize].0 == v));
                    assert_eq!(at, expect, "align {align}: {v:#x}");
                    assert_eq!(halves[0].lookup_at(v, &mut (u64::MAX, 0)), at);
                    assert_eq!(halves[1].lookup_at(v, &mut (u64::MAX, 0)), at);
                }
            }
            for _ in 0..5000 {
                let v = blocks[0].0 + next(at - blocks[0].0 + 64);
                assert_eq!(index.lookup(v), linear(v), "align {align}: {v:#x}");
                assert_eq!(halves[0].lookup(v), linear(v), "align {align}: {v:#x}");
                assert_eq!(halves[1].lookup(v), linear(v), "align {align}: {v:#x}");
                let some = halves[2].len();
                let expect = linear(v).filter(|&i| (i as usize) < some);
                assert_eq!(halves[2].lookup(v), expect, "align {align}: {v:#x}");
            }
        }
    }
}
