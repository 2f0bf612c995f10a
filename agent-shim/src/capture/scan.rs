//! The conservative pointer scan.
//!
//! Owns: the scan of ranges and blocks into deduplicated references, with the block index of
//! `heaptui_capture::blocks` (the lookup from an arbitrary word to the live block containing
//! it).
//!
//! Runs while the world is stopped: no libc allocation (only the agent's own allocator),
//! and every range it reads has been clamped to readable mappings beforehand, or is a live
//! block that no thread can free while the block table is frozen.
//!
//! In the scanning child the block scan runs on two threads: it is most of the capture's
//! time (at 4.6M blocks, about 0.7 s of the 1.2 s from the stop to the names), the time the
//! program waits for its report is wall time, and the child is the only place a second
//! thread costs the program nothing. The child is a raw `clone` of one thread of the program
//! (`build::fork_child`), so glibc's thread machinery is in whatever state the program's
//! stopped threads left it (its stack-cache lock maybe held): the second thread is a raw
//! `clone` too (`capture::alongside`), sharing the first's thread pointer, and runs only code
//! that touches no thread-local storage but `errno` (the agent's allocator, the block index,
//! a [`Collector`] and an [`Edges`] of its own).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use heaptui_analysis::{Edges, ObjectIndex};
pub use heaptui_capture::BlockIndex;

pub use super::by_address::sort_by_address;
use super::mapped::mapping_of;
use super::modules::{Mapping, clamp_to};

/// Collects deduplicated references for one holder at a time, each with its kind: a start
/// reference when some word of the holder points at the block's first byte, else interior.
pub struct Collector {
    /// `mark[o] >> 1` is the id of the last holder that referred to `o`; bit 0 is set when
    /// one of that holder's words pointed at `o`'s first byte.
    mark: Vec<u32>,
    /// Below 2^31, so that it fits `mark` beside the start bit.
    holder: u32,
    cache: (u64, u32),
    pub refs: Vec<ObjectIndex>,
}

impl Collector {
    pub fn new(objects: usize) -> Collector {
        Collector {
            mark: vec![0; objects],
            holder: 0,
            cache: (u64::MAX, 0),
            refs: Vec::with_capacity(1024),
        }
    }

    /// Starts a new holder; `refs` is cleared.
    pub fn begin(&mut self) {
        self.holder += 1;
        if self.holder >= 1 << 31 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.holder = 1;
        }
        self.refs.clear();
    }

    /// Records that the current holder refers to `o`, at its first byte when `start`.
    #[inline]
    fn note(&mut self, o: ObjectIndex, start: bool) {
        let m = &mut self.mark[o as usize];
        if *m >> 1 != self.holder {
            *m = self.holder << 1 | start as u32;
            self.refs.push(o);
        } else if start {
            *m |= 1;
        }
    }

    #[inline]
    pub fn word(&mut self, index: &BlockIndex, v: u64) {
        if let Some((o, start)) = index.lookup_at(v, &mut self.cache) {
            self.note(o, start);
        }
    }

    /// Whether the current holder refers to `o` (one of `refs`) by interior words only.
    #[inline]
    pub fn is_interior(&self, o: ObjectIndex) -> bool {
        self.mark[o as usize] & 1 == 0
    }

    /// As [`Collector::word`], for a word of glibc's malloc state (libc's data): a pointer
    /// to the chunk header that follows block `o` is the allocator's (its `top` or a bin),
    /// not the program's, even though that header overlaps the last 8 bytes of `o`.
    ///
    /// # Safety
    /// Every block of `index` must be a live glibc heap block (its header word readable).
    pub unsafe fn allocator_word(&mut self, index: &BlockIndex, v: u64) {
        let Some(o) = index.lookup(v) else { return };
        let start = index.range(o).start;
        // SAFETY: a live glibc block has its chunk's size word right below it.
        let header = unsafe { std::ptr::read_volatile((start - 8) as *const u64) };
        const IS_MMAPPED: u64 = 2;
        if header & IS_MMAPPED == 0 && v == (start - 16).wrapping_add(header & !7) {
            return;
        }
        self.note(o, v == start);
    }

    /// Scans every aligned word of `range`, except the addresses in `skip` (sorted).
    ///
    /// # Safety
    /// Every 8-aligned word of `range` must be readable.
    pub unsafe fn range(&mut self, index: &BlockIndex, range: Range<u64>, skip: &[u64]) {
        let start = range.start.next_multiple_of(8);
        let end = range.end & !7;
        if start >= end {
            return;
        }
        let words = ((end - start) / 8) as usize;
        // SAFETY: readable per the contract, aligned, and nobody writes it while we read (the
        // world is stopped, or the memory is our own).
        let slice = unsafe { std::slice::from_raw_parts(start as *const u64, words) };
        let first_skip = skip.partition_point(|&a| a < start);
        let skip = &skip[first_skip..skip.partition_point(|&a| a < end)];
        if skip.is_empty() {
            // Past the first AHEAD words (which the scan of the blocks hints before it gets
            // here), each word's bitmap word is hinted AHEAD words before its lookup.
            for (k, &v) in slice.iter().enumerate() {
                if let Some(&later) = slice.get(k + AHEAD) {
                    prefetch_lookup(index, later);
                }
                self.word(index, v);
            }
        } else {
            for (k, &v) in slice.iter().enumerate() {
                let a = start + 8 * k as u64;
                if skip.binary_search(&a).is_err() {
                    self.word(index, v);
                }
            }
        }
    }

    /// The sorted references gathered since `begin`, and (sorted) those of them held by
    /// interior words only.
    pub fn take_sorted(&mut self) -> (Vec<ObjectIndex>, Vec<ObjectIndex>) {
        let mut out = self.refs.clone();
        out.sort_unstable();
        let interior = out
            .iter()
            .copied()
            .filter(|&o| self.is_interior(o))
            .collect();
        (out, interior)
    }

    /// Sorts the references gathered for block `o`, drops its references to itself and
    /// appends them with their kinds to `edges`.
    fn push_block(&mut self, o: ObjectIndex, edges: &mut Edges) {
        self.refs.retain(|&t| t != o);
        self.refs.sort_unstable();
        let mark = &self.mark;
        edges.push_with_kinds(self.refs.iter().map(|&t| (t, mark[t as usize] & 1 == 0)));
    }
}

/// Scans the words of `range` that the kernel can copy (a checked read: `process_vm_readv`
/// of this process, which fails with EFAULT instead of faulting on unmapped or inaccessible
/// pages), 4 KiB at a time; parts it cannot copy are skipped.
pub fn checked_range(index: &BlockIndex, range: Range<u64>, c: &mut Collector) {
    let mut buf = [0u64; 512];
    let mut at = range.start & !7;
    let end = range.end.next_multiple_of(8);
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    while at < end {
        let chunk = (end - at).min(4096 - (at & 4095));
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: chunk as usize,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: chunk as usize,
        };
        // SAFETY: `local` is our own buffer of at least `chunk` bytes (chunk ≤ 4096); the
        // kernel checks `remote` and reports an error rather than faulting.
        let got = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if got > 0 {
            for &v in &buf[..got as usize / 8] {
                c.word(index, v);
            }
        }
        at += chunk;
    }
}

/// Whether [`scan_blocks`] may scan on a second thread: set only in the scanning child (a
/// thread the agent made in the program's own process would be one the program does not
/// know, and the capture's stop would not find it either).
static SECOND_THREAD: AtomicBool = AtomicBool::new(false);

/// Lets the block scan use a second thread from now on; for the scanning child only.
pub fn allow_second_thread() {
    SECOND_THREAD.store(true, Ordering::Relaxed);
}

/// Whether the capture may use a second thread for a job of `items` items: only in the
/// scanning child ([`allow_second_thread`]), and only when the job is worth it.
pub fn second_thread(items: usize) -> bool {
    items >= SECOND_THREAD_MIN_BLOCKS && SECOND_THREAD.load(Ordering::Relaxed)
}

/// Fewest blocks worth a second thread (a stack, a clone, a collector's marks, the join:
/// tens of microseconds).
const SECOND_THREAD_MIN_BLOCKS: usize = 1 << 13;

/// Scans every live block for references to live blocks (self-references dropped), giving
/// the outgoing edges in block order. Blocks outside the readable mappings of `maps` are
/// skipped: `maps` must be the memory map read after the stop, since a heap grows while the
/// program runs (an arena's `mprotect`, `brk`), and a map read before the stop would leave
/// the newest blocks unread, cutting a list the program has just grown at its head. The
/// blocks of `checked` (sorted; blocks a realloc in progress may have just unmapped) are read
/// with a checked copy.
///
/// In the scanning child (see [`allow_second_thread`]) a second thread with a collector of
/// its own scans from the last block down while this one scans from the first up, each
/// claiming [`CLAIM`] blocks at a time, until they meet: however the work is spread over
/// the heap (a few large blocks full of pointers at its top, the second thread's fresh
/// marks), neither waits long for the other. The second thread's edges are appended after.
pub fn scan_blocks(
    index: &BlockIndex,
    maps: &[Mapping],
    c: &mut Collector,
    checked: &[ObjectIndex],
) -> Edges {
    scan_blocks_on(index, maps, c, checked, second_thread(index.len()))
}

/// [`scan_blocks`], on two threads when `two`.
fn scan_blocks_on(
    index: &BlockIndex,
    maps: &[Mapping],
    c: &mut Collector,
    checked: &[ObjectIndex],
    two: bool,
) -> Edges {
    let n = index.len();
    let mut edges = Edges::with_capacity(n, n * 2);
    if !two {
        scan_block_run(
            index,
            maps,
            c,
            checked,
            0..n as ObjectIndex,
            Order::Up,
            &mut edges,
        );
        return edges;
    }
    let unclaimed = Unclaimed::new(n as ObjectIndex);
    // SAFETY: `two` only in the scanning child ([`allow_second_thread`]) or a test; the
    // second closure touches no thread-local storage (the agent's allocator, the block index,
    // a collector and edges of its own) and does not panic.
    let ((), tail) = unsafe {
        super::alongside::alongside(
            || {
                while let Some(run) = unclaimed.claim_low() {
                    scan_block_run(index, maps, c, checked, run, Order::Up, &mut edges);
                }
            },
            || {
                let mut c = Collector::new(n);
                // The blocks it scans, last first.
                let mut tail = Edges::with_capacity(n / 2, n);
                while let Some(run) = unclaimed.claim_high() {
                    scan_block_run(index, maps, &mut c, checked, run, Order::Down, &mut tail);
                }
                tail
            },
        )
    };
    for k in (0..tail.sources() as ObjectIndex).rev() {
        edges.push_with_kinds(tail.of_with_kinds(k));
    }
    edges
}

/// Blocks the two threads of [`scan_blocks`] claim at a time.
const CLAIM: ObjectIndex = 1024;

/// The blocks neither thread of [`scan_blocks`] has claimed yet, `low..high`, packed as
/// `low << 32 | high`: the first thread claims from the bottom, the second from the top, so
/// each scans one contiguous run of blocks.
struct Unclaimed(AtomicU64);

impl Unclaimed {
    fn new(n: ObjectIndex) -> Unclaimed {
        Unclaimed(AtomicU64::new(u64::from(n)))
    }

    /// Claims up to [`CLAIM`] blocks at the bottom of what is left.
    fn claim_low(&self) -> Option<Range<ObjectIndex>> {
        self.claim(|low, high| (low, (low + CLAIM).min(high)))
    }

    /// Claims up to [`CLAIM`] blocks at the top of what is left.
    fn claim_high(&self) -> Option<Range<ObjectIndex>> {
        self.claim(|low, high| (high.saturating_sub(CLAIM).max(low), high))
    }

    fn claim(
        &self,
        take: impl Fn(ObjectIndex, ObjectIndex) -> (ObjectIndex, ObjectIndex),
    ) -> Option<Range<ObjectIndex>> {
        let mut now = self.0.load(Ordering::Relaxed);
        loop {
            let (low, high) = ((now >> 32) as ObjectIndex, now as ObjectIndex);
            if low >= high {
                return None;
            }
            let (from, to) = take(low, high);
            let left = if from == low {
                u64::from(to) << 32 | u64::from(high)
            } else {
                u64::from(low) << 32 | u64::from(from)
            };
            match self
                .0
                .compare_exchange_weak(now, left, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(from..to),
                Err(seen) => now = seen,
            }
        }
    }
}

/// The order in which [`scan_block_run`] scans its blocks (and appends their edges).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Up,
    Down,
}

/// The words of a block: those wholly inside the size it was asked for, as memcheck's
/// (docs/reference.md §3): the bytes past it are malloc's slack, which holds whatever the
/// chunk held before, and a word half over them is half a stale pointer. The scan and its
/// look-ahead prefetch both read exactly these.
fn asked_words(r: Range<u64>) -> Range<u64> {
    r.start..r.start + ((r.end - r.start) & !7)
}

/// Scans blocks `run` as [`scan_blocks`] does, in `order`, appending their edges to `edges`.
fn scan_block_run(
    index: &BlockIndex,
    maps: &[Mapping],
    c: &mut Collector,
    checked: &[ObjectIndex],
    run: Range<ObjectIndex>,
    order: Order,
    edges: &mut Edges,
) {
    let mut mapping: Range<u64> = 0..0;
    let blocks: Box<dyn Iterator<Item = ObjectIndex>> = match order {
        Order::Up => Box::new(run.clone()),
        Order::Down => Box::new(run.clone().rev()),
    };
    for o in blocks {
        // The first words of a block a few blocks ahead, when it is known readable: their
        // bitmap words come into the cache while the blocks before them are scanned.
        let ahead = match order {
            Order::Up => o + AHEAD_BLOCKS,
            Order::Down => o.wrapping_sub(AHEAD_BLOCKS),
        };
        if run.contains(&ahead) && (checked.is_empty() || checked.binary_search(&ahead).is_err()) {
            let r = asked_words(index.range(ahead));
            let end = r.end.min(r.start + 8 * AHEAD as u64);
            if mapping.start <= r.start && end <= mapping.end {
                // SAFETY: within the readable mapping the blocks before it were found in.
                let words = unsafe {
                    std::slice::from_raw_parts(
                        r.start as *const u64,
                        ((end - r.start) / 8) as usize,
                    )
                };
                words.iter().for_each(|&v| prefetch_lookup(index, v));
            }
        }
        c.begin();
        let r = asked_words(index.range(o));
        if checked.binary_search(&o).is_ok() {
            checked_range(index, r, c);
            c.push_block(o, edges);
            continue;
        }
        if !(mapping.start <= r.start && r.end <= mapping.end) {
            mapping = match mapping_of(maps, r.start) {
                Some(m) if m.readable && r.end <= m.end => m.start..m.end,
                _ => {
                    // Straddles mappings or unmapped: scan the readable parts only.
                    for part in clamp_to(maps, r.clone()) {
                        // SAFETY: clamped to readable mappings.
                        unsafe { c.range(index, part, &[]) };
                    }
                    c.push_block(o, edges);
                    continue;
                }
            };
        }
        // SAFETY: the whole block lies in one readable mapping.
        unsafe { c.range(index, r, &[]) };
        c.push_block(o, edges);
    }
}

/// Asks the cache for the bitmap word a lookup of `v` will read
/// ([`BlockIndex::bitmap_word_of`]).
#[inline]
fn prefetch_lookup(index: &BlockIndex, v: u64) {
    if let Some(at) = index.bitmap_word_of(v) {
        crate::sync::prefetch(at as u64);
    }
}

/// How many words ahead of its lookup a word's bitmap word is hinted to the cache
/// ([`prefetch_lookup`]): enough lookups to hide a miss behind.
const AHEAD: usize = 16;

/// How many blocks ahead of its scan a block's first [`AHEAD`] words are hinted.
const AHEAD_BLOCKS: ObjectIndex = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanning_memory_dedups_skips_and_drops_self_references() {
        // Real memory: three "blocks" inside one buffer we own.
        let mut buf = vec![0u64; 12];
        let base = buf.as_ptr() as u64;
        let blocks = [(base, 32u64), (base + 32, 32), (base + 64, 32)];
        buf[0] = base + 40; // block 0 -> block 1 (interior)
        buf[1] = base + 32; // block 0 -> block 1 again, at its start (dedup: a start edge)
        buf[2] = base + 8; // block 0 -> itself (dropped)
        buf[4] = base + 72; // block 1 -> block 2 (interior only)
        buf[5] = 12345;
        let index = BlockIndex::new(blocks.iter().copied());
        let maps = super::super::mapped::current_maps();
        let mut c = Collector::new(3);
        let edges = scan_blocks(&index, &maps, &mut c, &[]);
        assert_eq!(edges.of(0), &[1]);
        assert_eq!(edges.of(1), &[2]);
        assert_eq!(edges.of(2), &[] as &[u32]);
        assert!(edges.of_with_kinds(0).eq([(1, false)]));
        assert!(edges.of_with_kinds(1).eq([(2, true)]));
        // A checked read finds the same.
        let edges = scan_blocks(&index, &maps, &mut c, &[0, 1, 2]);
        assert_eq!(edges.of(0), &[1]);
        assert_eq!(edges.of(1), &[2]);
        assert_eq!(edges.of(2), &[] as &[u32]);
        assert!(edges.of_with_kinds(1).eq([(2, true)]));
        // Range scans: a start word and an interior word to block 1 make a start reference.
        c.begin();
        // SAFETY: `buf` is our own readable memory.
        unsafe { c.range(&index, base..base + 40, &[]) };
        assert_eq!(c.take_sorted(), (vec![0, 1, 2], vec![0, 2]));
        // Without the start word (skipped), block 1 is held by its interior word only.
        c.begin();
        // SAFETY: as above.
        unsafe { c.range(&index, base..base + 40, &[base + 8]) };
        assert_eq!(c.take_sorted(), (vec![0, 1, 2], vec![0, 1, 2]));
        c.begin();
        // SAFETY: as above.
        unsafe { c.range(&index, base..base + 40, &[base, base + 8, base + 16]) };
        assert_eq!(c.take_sorted(), (vec![2], vec![2]));
        std::hint::black_box(&mut buf);
    }

    /// A heap of `n` 32-byte blocks in one buffer (block i at 48·i, 16 bytes apart), each
    /// holding a few words: pointers to other blocks (at their start or inside), to itself,
    /// and numbers.
    fn random_heap(n: usize) -> (Vec<u64>, Vec<(u64, u64)>) {
        let mut buf = vec![0u64; 6 * n];
        let base = buf.as_ptr() as u64;
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..n {
            for k in 0..4 {
                let r = next();
                buf[6 * i + k] = match r % 5 {
                    0 => base + 48 * ((r >> 8) % n as u64),
                    1 => base + 48 * ((r >> 8) % n as u64) + 8,
                    2 => base + 48 * i as u64,
                    3 => base + 48 * ((r >> 8) % n as u64) + 32,
                    _ => r >> 20,
                };
            }
        }
        let blocks = (0..n as u64).map(|i| (base + 48 * i, 32)).collect();
        (buf, blocks)
    }

    #[test]
    fn two_threads_find_the_edges_one_finds() {
        for n in [1, 5000, 20_000] {
            let (buf, blocks) = random_heap(n);
            let index = BlockIndex::new(blocks.iter().copied());
            let maps = super::super::mapped::current_maps();
            let one = scan_blocks_on(&index, &maps, &mut Collector::new(n), &[], false);
            let checked = [0, n as u32 / 2, n as u32 - 1];
            for checked in [&[][..], &checked[..]] {
                let two = scan_blocks_on(&index, &maps, &mut Collector::new(n), checked, true);
                assert_eq!(two.sources(), n);
                for o in 0..n as ObjectIndex {
                    assert!(
                        one.of_with_kinds(o).eq(two.of_with_kinds(o)),
                        "n {n}, block {o}"
                    );
                }
            }
            assert!(n < 2 || one.len() > n, "the heap holds references");
            std::hint::black_box(&buf);
        }
    }

    #[test]
    fn the_two_ends_claim_every_block_once_each_in_one_run() {
        for n in [0, 1, CLAIM - 1, CLAIM, 10 * CLAIM + 7] {
            let unclaimed = Unclaimed::new(n);
            let (mut low, mut high) = (0, n);
            let mut turn = 0;
            loop {
                turn += 1;
                let claim = if turn % 3 == 0 {
                    unclaimed.claim_high()
                } else {
                    unclaimed.claim_low()
                };
                let Some(run) = claim else { break };
                assert!(!run.is_empty());
                if run.start == low {
                    low = run.end;
                } else {
                    assert_eq!(run.end, high, "a high claim ends where the last began");
                    high = run.start;
                }
            }
            assert_eq!(low, high, "n {n}");
            assert!(unclaimed.claim_low().is_none() && unclaimed.claim_high().is_none());
        }
    }
}
