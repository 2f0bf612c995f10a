//! The conservative pointer scan.
//!
//! Owns: the scan of ranges and blocks into deduplicated references, with the block index of
//! `heaptui_capture::blocks` (the lookup from an arbitrary word to the live block containing
//! it).
//!
//! Runs while the world is stopped: no libc allocation (only the agent's own allocator),
//! and every range it reads has been clamped to readable mappings beforehand, or is a live
//! block that no thread can free while the block table is frozen.

use std::ops::Range;

use heaptui_analysis::{Edges, ObjectIndex};
pub use heaptui_capture::BlockIndex;

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
            for &v in slice {
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

/// Scans every live block for references to live blocks (self-references dropped), giving
/// the outgoing edges in block order. Blocks outside the readable mappings of `maps` are
/// skipped: `maps` must be the memory map read after the stop, since a heap grows while the
/// program runs (an arena's `mprotect`, `brk`), and a map read before the stop would leave
/// the newest blocks unread, cutting a list the program has just grown at its head. The
/// blocks of `checked` (sorted; blocks a realloc in progress may have just unmapped) are read
/// with a checked copy.
pub fn scan_blocks(
    index: &BlockIndex,
    maps: &[Mapping],
    c: &mut Collector,
    checked: &[ObjectIndex],
) -> Edges {
    let n = index.len();
    let mut edges = Edges::with_capacity(n, n * 2);
    let mut mapping: Range<u64> = 0..0;
    for o in 0..n as ObjectIndex {
        c.begin();
        let r = index.range(o);
        if checked.binary_search(&o).is_ok() {
            checked_range(
                index,
                r.start..r.start + (r.end - r.start).next_multiple_of(8),
                c,
            );
            c.push_block(o, &mut edges);
            continue;
        }
        // A block's words up to its size rounded up to 8: malloc's usable size always covers it.
        let r = r.start..r.start + (r.end - r.start).next_multiple_of(8);
        if !(mapping.start <= r.start && r.end <= mapping.end) {
            mapping = match mapping_of(maps, r.start) {
                Some(m) if m.readable && r.end <= m.end => m.start..m.end,
                _ => {
                    // Straddles mappings or unmapped: scan the readable parts only.
                    for part in clamp_to(maps, r.clone()) {
                        // SAFETY: clamped to readable mappings.
                        unsafe { c.range(index, part, &[]) };
                    }
                    c.push_block(o, &mut edges);
                    continue;
                }
            };
        }
        // SAFETY: the whole block lies in one readable mapping.
        unsafe { c.range(index, r, &[]) };
        c.push_block(o, &mut edges);
    }
    edges
}

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
}
