//! Blocks in address order, the order the block index needs: a sort, and a listing that comes
//! out sorted.
//!
//! Both put items into buckets by 2 MiB chunk of address space first (writing to as many
//! places at once as the heap has chunks: a few hundred for millions of blocks), then sort
//! each bucket by the 21 low bits of the address with two counting passes of 11 and 10 bits
//! over a bucket that fits in the cache. The LSD radix sort this replaced made three passes of
//! 16 bits over all items, each clearing a scratch buffer and scattering to 65,536 places at
//! once (a cache and TLB miss per item): a third of the scanning child's index phase at 4.6M
//! blocks.
//!
//! [`list_by_address`] lists a table that can be walked twice (the agent's frozen block
//! table) straight into its buckets: one walk counts the items of each chunk, the second
//! writes each item where its chunk's bucket is, and each bucket is then sorted in place. It
//! writes the listing once, where listing then sorting wrote it three times (the list, a
//! scratch copy of it as large, the sorted list), and the scratch was 146 MB of fresh pages
//! at 4.6M blocks, each page a fault, a zeroing and a cgroup charge in the child. In the
//! scanning child the walks and the bucket sorts run on two threads
//! (`capture::alongside`), each over its own half of the table and its own buckets' parts.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Range;

use heaptui_capture::blocks::FxHasher;

/// log2 of the chunk a bucket holds.
const CHUNK_SHIFT: u32 = 21;
/// log2 of the region whose chunks' counters [`Chunks`] keeps together: items listed in
/// table order mostly come from one region after another (the agent's table shards by 64
/// MiB region), so looking up the region once per run of items costs one compare per item.
const REGION_SHIFT: u32 = 26;
const CHUNKS_PER_REGION: usize = 1 << (REGION_SHIFT - CHUNK_SHIFT);
/// The digits of the sort inside a bucket: the chunk's 21 low bits.
const LOW_BITS: u32 = 11;
const HIGH_BITS: u32 = CHUNK_SHIFT - LOW_BITS;
/// Fewest items worth the bucket sort (below it, a comparison sort).
const RADIX_MIN: usize = 4096;
/// Fewest items of a bucket worth the counting passes (below it, a comparison sort).
const BUCKET_RADIX_MIN: usize = 64;

/// Sorts `items` by `addr`: into buckets by chunk in `scratch`, then each bucket back into
/// `items`. An already sorted `items` (what [`list_by_address`] gives) costs one read of the
/// addresses. `scratch` must have at least `items.len()` capacity (its contents are
/// overwritten).
pub fn sort_by_address<T: Copy>(items: &mut [T], scratch: &mut Vec<T>, addr: impl Fn(&T) -> u64) {
    if items.is_sorted_by_key(&addr) {
        return;
    }
    let n = items.len();
    if n < RADIX_MIN {
        items.sort_unstable_by_key(|t| addr(t));
        return;
    }
    let mut chunks = [Chunks::default()];
    for t in items.iter() {
        chunks[0].count(addr(t));
    }
    let buckets = plan(&mut chunks, 0);
    scratch.clear();
    scratch.reserve(n);
    let spare = &mut scratch.spare_capacity_mut()[..n];
    for t in items.iter() {
        let at = chunks[0].place(addr(t)).expect("an item counted");
        spare[at].write(*t);
    }
    assert!(chunks[0].filled(), "every item placed");
    // SAFETY: the buckets partition 0..n and each position was written exactly once above.
    unsafe { scratch.set_len(n) };
    let mut sorter = BucketSorter::for_buckets(&buckets);
    for b in buckets {
        sorter.sort(&mut items[b.clone()], Some(&scratch[b]), &addr);
    }
}

/// A table that can be walked more than once with the same items each time, in parts that
/// can be walked at once on two threads: what [`list_by_address`] lists.
pub trait Listing: Sync {
    type Item: Copy + Send;
    /// One part of the table, and what its walk keeps (each walk starts it afresh).
    type Part: Send;
    /// Calls `f` with every item of `part`; should give the same ones at every call (a
    /// listing whose walks disagree is listed once more, plainly, and sorted: right, only
    /// slower).
    fn each(&self, part: &mut Self::Part, f: impl FnMut(Self::Item));
    /// The address an item is sorted by.
    fn addr(item: &Self::Item) -> u64;
}

/// Appends the items of every part of `listing` to `out`, sorted by address (see the module
/// docs). On two threads when `two` (only in the scanning child: `capture::alongside`) and
/// there are two parts; each part is walked twice, the second walk last.
pub fn list_by_address<L: Listing>(
    listing: &L,
    parts: &mut [L::Part],
    out: &mut Vec<L::Item>,
    two: bool,
) {
    let offset = out.len();
    let two = two && parts.len() == 2;
    // First walk: the items of each chunk, per part.
    let mut chunks: Vec<Chunks> = parts.iter().map(|_| Chunks::default()).collect();
    let count = |part: &mut L::Part, chunks: &mut Chunks| {
        listing.each(part, |t| chunks.count(L::addr(&t)));
    };
    if two {
        let ([p0, p1], [c0, c1]) = (&mut *parts, &mut chunks[..]) else {
            unreachable!("two parts")
        };
        // SAFETY: only in the scanning child (`two`); the second closure touches no
        // thread-local storage (the listing reads the frozen table; `Chunks` allocates from
        // the agent's allocator and hashes without random keys) and does not panic.
        unsafe { super::alongside::alongside(|| count(p0, c0), || count(p1, c1)) };
    } else {
        for (p, c) in parts.iter_mut().zip(&mut chunks) {
            count(p, c);
        }
    }
    let buckets = plan(&mut chunks, offset);
    let n = buckets.last().map_or(offset, |b| b.end) - offset;
    out.reserve(n);
    // Second walk: each item into its chunk's bucket, each part into its own places there.
    let into = SharedOut(out.as_mut_ptr());
    let place = |part: &mut L::Part, chunks: &mut Chunks| {
        listing.each(part, |t| {
            if let Some(at) = chunks.place(L::addr(&t)) {
                // SAFETY: `at` lies in this part's places of one bucket (`Chunks::place`),
                // which no other part writes, and below `offset + n`, within the capacity
                // reserved above.
                unsafe { into.0.add(at).write(t) };
            }
        });
    };
    if two {
        let ([p0, p1], [c0, c1]) = (&mut *parts, &mut chunks[..]) else {
            unreachable!("two parts")
        };
        // SAFETY: as for the first walk; the two write disjoint places.
        unsafe { super::alongside::alongside(|| place(p0, c0), || place(p1, c1)) };
    } else {
        for (p, c) in parts.iter_mut().zip(&mut chunks) {
            place(p, c);
        }
    }
    if !chunks.iter().all(Chunks::filled) {
        // The walks disagreed (a table that changed between them): list again, plainly.
        for p in parts.iter_mut() {
            listing.each(p, |t| out.push(t));
        }
        out[offset..].sort_unstable_by_key(L::addr);
        return;
    }
    // SAFETY: every place of every bucket, `offset..offset + n`, was written once above.
    unsafe { out.set_len(offset + n) };
    // Each bucket sorted in place; on two threads, each takes the buckets of about half the
    // items.
    let items = &mut out[offset..];
    if !two {
        let mut sorter = BucketSorter::for_buckets(&buckets);
        for b in &buckets {
            sorter.sort(&mut items[b.start - offset..b.end - offset], None, &L::addr);
        }
        return;
    }
    let half = buckets.partition_point(|b| b.end - offset <= n / 2);
    let (low, high) = buckets.split_at(half);
    let split = low.last().map_or(0, |b| b.end - offset);
    let (first, second) = items.split_at_mut(split);
    let sort = |items: &mut [L::Item], buckets: &[Range<usize>], base: usize| {
        let mut sorter = BucketSorter::for_buckets(buckets);
        for b in buckets {
            sorter.sort(&mut items[b.start - base..b.end - base], None, &L::addr);
        }
    };
    // SAFETY: as for the first walk; the two sort disjoint buckets.
    unsafe {
        super::alongside::alongside(
            || sort(first, low, offset),
            || sort(second, high, offset + split),
        )
    };
}

/// Where [`list_by_address`]'s second walk writes: the vector's buffer, shared by the two
/// threads, each writing its own places.
struct SharedOut<T>(*mut T);
// SAFETY: the two threads write disjoint places of the buffer (see `list_by_address`).
unsafe impl<T: Send> Sync for SharedOut<T> {}

/// The items of one part of a listing in each chunk (a first walk), then the places left for
/// them in the chunks' buckets (a second walk).
#[derive(Default)]
struct Chunks {
    /// Region (address >> [`REGION_SHIFT`]) → index of its first chunk in `at` and `end`.
    regions: HashMap<u64, usize, BuildHasherDefault<FxHasher>>,
    /// Per chunk: the items counted; after [`plan`], the next place to write.
    at: Vec<usize>,
    /// Per chunk, after [`plan`]: the end of this part's places in its bucket.
    end: Vec<usize>,
    /// The last region looked up, and its first chunk.
    last: (u64, usize),
    /// Whether the second walk found an item with no place left for it.
    lost: bool,
}

impl Chunks {
    /// The index of the chunk of `addr` in `at`, its region's counters made when `new`.
    #[inline]
    fn chunk(&mut self, addr: u64, new: bool) -> Option<usize> {
        let region = addr >> REGION_SHIFT;
        if region != self.last.0 || self.at.is_empty() {
            let first = match self.regions.get(&region) {
                Some(&first) => first,
                None if new => {
                    let first = self.at.len();
                    self.at.resize(first + CHUNKS_PER_REGION, 0);
                    self.regions.insert(region, first);
                    first
                }
                None => return None,
            };
            self.last = (region, first);
        }
        Some(self.last.1 + (addr >> CHUNK_SHIFT) as usize % CHUNKS_PER_REGION)
    }

    /// Counts an item at `addr` (first walk).
    #[inline]
    fn count(&mut self, addr: u64) {
        if let Some(k) = self.chunk(addr, true) {
            self.at[k] += 1;
        }
    }

    /// The place for an item at `addr` (second walk), none when its chunk's places are all
    /// taken (more items than counted).
    #[inline]
    fn place(&mut self, addr: u64) -> Option<usize> {
        let at = self
            .chunk(addr, false)
            .filter(|&k| self.at[k] < self.end[k])
            .map(|k| {
                self.at[k] += 1;
                self.at[k] - 1
            });
        self.lost |= at.is_none();
        at
    }

    /// Whether the second walk placed every item it found and filled every place (found
    /// the items the first counted).
    fn filled(&self) -> bool {
        !self.lost && self.at == self.end
    }
}

/// Lays the buckets out from `offset`, chunk by chunk in address order, each part's places
/// one after the other within a bucket: turns each part's counts into the first place it
/// writes and the end of its places. Returns the non-empty buckets in address order.
fn plan(parts: &mut [Chunks], offset: usize) -> Vec<Range<usize>> {
    let mut regions: Vec<u64> = parts
        .iter()
        .flat_map(|p| p.regions.keys().copied())
        .collect();
    regions.sort_unstable();
    regions.dedup();
    for p in parts.iter_mut() {
        p.end = vec![0; p.at.len()];
    }
    let mut buckets = Vec::new();
    let mut sum = offset;
    for region in regions {
        let firsts: Vec<Option<usize>> = parts
            .iter()
            .map(|p| p.regions.get(&region).copied())
            .collect();
        for c in 0..CHUNKS_PER_REGION {
            let start = sum;
            for (p, first) in parts.iter_mut().zip(&firsts) {
                if let Some(first) = first {
                    let k = first + c;
                    let count = p.at[k];
                    p.at[k] = sum;
                    sum += count;
                    p.end[k] = sum;
                }
            }
            if sum > start {
                buckets.push(start..sum);
            }
        }
    }
    buckets
}

/// Sorts buckets by the 21 low bits of the address: two counting passes, through a buffer
/// as large as the largest bucket.
struct BucketSorter<T> {
    buffer: Vec<T>,
    low: Vec<usize>,
    high: Vec<usize>,
}

impl<T: Copy> BucketSorter<T> {
    fn for_buckets(buckets: &[Range<usize>]) -> BucketSorter<T> {
        let largest = buckets.iter().map(|b| b.len()).max().unwrap_or(0);
        BucketSorter {
            buffer: Vec::with_capacity(largest),
            low: vec![0; 1 << LOW_BITS],
            high: vec![0; 1 << HIGH_BITS],
        }
    }

    /// Sorts the items of one bucket into `to`, from `from` when given, else in place.
    fn sort(&mut self, to: &mut [T], from: Option<&[T]>, addr: &impl Fn(&T) -> u64) {
        if to.len() < BUCKET_RADIX_MIN {
            if let Some(from) = from {
                to.copy_from_slice(from);
            }
            to.sort_unstable_by_key(addr);
            return;
        }
        let low_digit = |t: &T| (addr(t) & ((1 << LOW_BITS) - 1)) as usize;
        let high_digit = |t: &T| ((addr(t) >> LOW_BITS) & ((1 << HIGH_BITS) - 1)) as usize;
        let (low, high) = (&mut self.low, &mut self.high);
        low.iter_mut().for_each(|c| *c = 0);
        high.iter_mut().for_each(|c| *c = 0);
        let from = from.unwrap_or(to);
        for t in from {
            low[low_digit(t)] += 1;
            high[high_digit(t)] += 1;
        }
        let starts = |counts: &mut [usize]| {
            let mut sum = 0;
            for c in counts.iter_mut() {
                (*c, sum) = (sum, sum + *c);
            }
        };
        starts(low);
        starts(high);
        self.buffer.clear();
        self.buffer.reserve(from.len());
        let into = &mut self.buffer.spare_capacity_mut()[..from.len()];
        for t in from {
            let d = low_digit(t);
            into[low[d]].write(*t);
            low[d] += 1;
        }
        // SAFETY: the low digits' counts partition the buffer; each position written once.
        unsafe { self.buffer.set_len(from.len()) };
        for t in &self.buffer {
            let d = high_digit(t);
            to[high[d]] = *t;
            high[d] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// `n` items `(address, i)` in hash-table order: a brk heap of small blocks over a few
    /// dozen chunks and mmapped blocks far above it.
    fn heap_items(n: usize, seed: u64) -> Vec<(u64, usize)> {
        let mut next = xorshift(seed);
        let mut items: Vec<(u64, usize)> = Vec::with_capacity(n);
        let mut seen = std::collections::HashSet::new();
        while items.len() < n {
            let r = next();
            let addr = if r.is_multiple_of(100) {
                0x7f00_0000_0000 + (r >> 8) % (1 << 36) / 4096 * 4096
            } else {
                0x5555_0000_0000 + (r >> 8) % (64 << 20) / 16 * 16
            };
            if seen.insert(addr) {
                items.push((addr, items.len()));
            }
        }
        items
    }

    fn addrs(v: &[(u64, usize)]) -> Vec<u64> {
        v.iter().map(|t| t.0).collect()
    }

    #[test]
    fn sorting_by_address_agrees_with_a_comparison_sort() {
        // Then fewer items than the buckets are worth, then sorted already.
        for n in [100_000usize, 3000] {
            let mut items = heap_items(n, 0x9e37_79b9_7f4a_7c15);
            let mut expect = items.clone();
            expect.sort_by_key(|t| t.0);
            let mut scratch = Vec::with_capacity(n);
            sort_by_address(&mut items, &mut scratch, |t| t.0);
            assert_eq!(addrs(&items), addrs(&expect));
            let mut seen: Vec<usize> = items.iter().map(|t| t.1).collect();
            seen.sort_unstable();
            assert!(seen.iter().copied().eq(0..n), "every item once");
            sort_by_address(&mut items, &mut Vec::new(), |t| t.0);
            assert_eq!(items, expect);
        }
    }

    /// A table of items in parts; from its second walk on, the first part lists one item
    /// more or one fewer than at the first when `changes` says so (a table that did not hold
    /// still).
    struct Table {
        items: Vec<(u64, usize)>,
        changes: Change,
    }

    #[derive(Clone, Copy, Debug)]
    enum Change {
        None,
        /// An item at the bottom of the heap appears.
        OneMore,
        /// The part's last item is gone.
        OneFewer,
    }

    struct Part {
        range: Range<usize>,
        walks: usize,
    }

    impl Listing for Table {
        type Item = (u64, usize);
        type Part = Part;
        fn each(&self, part: &mut Part, mut f: impl FnMut((u64, usize))) {
            part.walks += 1;
            let changed = part.walks >= 2 && part.range.start == 0;
            let mut range = part.range.clone();
            if changed && matches!(self.changes, Change::OneFewer) {
                range.end -= 1;
            }
            self.items[range].iter().for_each(|&t| f(t));
            if changed && matches!(self.changes, Change::OneMore) {
                f((0x5555_0000_0008, usize::MAX));
            }
        }
        fn addr(item: &(u64, usize)) -> u64 {
            item.0
        }
    }

    #[test]
    fn a_listing_comes_out_sorted_on_one_thread_or_two() {
        for (n, two) in [(200_000, false), (200_000, true), (100, true), (0, true)] {
            let table = Table {
                items: heap_items(n, 0x2545_f491_4f6c_dd1d),
                changes: Change::None,
            };
            let mut expect = table.items.clone();
            expect.sort_by_key(|t| t.0);
            let mut parts = [
                Part {
                    range: 0..n / 3,
                    walks: 0,
                },
                Part {
                    range: n / 3..n,
                    walks: 0,
                },
            ];
            // Appended after what `out` holds.
            let mut out = vec![(1, 1)];
            list_by_address(&table, &mut parts, &mut out, two);
            assert_eq!(out[0], (1, 1));
            assert_eq!(out[1..], expect[..], "n {n}, two {two}");
            assert!(parts.iter().all(|p| p.walks == 2));
        }
    }

    #[test]
    fn a_listing_that_changes_between_walks_is_listed_again() {
        let n = 10_000;
        for (changes, two) in [
            (Change::OneMore, false),
            (Change::OneFewer, false),
            (Change::OneMore, true),
            (Change::OneFewer, true),
        ] {
            let table = Table {
                items: heap_items(n, 7),
                changes,
            };
            // What the third walk, the plain one, lists, sorted, after what `out` held.
            let mut expect = table.items.clone();
            match changes {
                Change::OneFewer => {
                    expect.remove(n / 2 - 1);
                }
                Change::OneMore => expect.push((0x5555_0000_0008, usize::MAX)),
                Change::None => {}
            }
            expect.sort_by_key(|t| t.0);
            expect.insert(0, (1, 1));
            let mut parts = [
                Part {
                    range: 0..n / 2,
                    walks: 0,
                },
                Part {
                    range: n / 2..n,
                    walks: 0,
                },
            ];
            let mut out = vec![(1, 1)];
            list_by_address(&table, &mut parts, &mut out, two);
            assert!(
                parts.iter().all(|p| p.walks == 3),
                "{changes:?}, two {two}: every part listed a third time"
            );
            assert_eq!(out, expect, "{changes:?}, two {two}");
        }
    }
}
