//! The live malloc blocks of a stopped glibc process, from a copy of its memory.
//!
//! Owns the walk of glibc's heap, chunk by chunk, as `malloc/malloc.c` lays it out:
//! - the arenas: `main_arena` in libc's data, the others through the ring of `next` pointers;
//! - the chunks of each arena: the main arena's from `mp_.sbrk_base` up to its top chunk; a
//!   non-main arena's heap by heap (each heap is aligned to the largest heap size and starts
//!   with a `heap_info`; the newest holds `top`, the older ones are reached through `prev` and
//!   end with fenceposts);
//! - in use or free: a chunk is free when the next chunk's `PREV_INUSE` bit is clear, and also
//!   when it sits in a fastbin or a thread's tcache (those keep the bit set): both lists are
//!   followed, with glibc's pointer mangling ("safe-linking": a stored pointer is XORed with its
//!   own address shifted right by 12); each thread's tcache structure is glibc's own block;
//! - mmapped chunks: anonymous mappings whose first chunk header has `IS_MMAPPED`; the count
//!   and bytes are checked against `mp_.n_mmaps` and `mp_.mmapped_mem`.
//!
//! A block's size is its usable size (what `malloc_usable_size` returns): the size the program
//! asked for is known only to hooks.
//!
//! Reads only the [`Image`]; anything inconsistent (a chunk size running past its heap, a list
//! that loops) ends that part of the walk and is reported in [`Heap::warnings`], never guessed.

use std::collections::HashSet;
use std::ops::Range;

use super::glibc::Glibc;
use super::maps::Maps;
use super::memory::Image;

const SIZE_SZ: u64 = 8;
const CHUNK_HDR: u64 = 16;
const MIN_CHUNK: u64 = 32;
const ALIGN: u64 = 16;
const PREV_INUSE: u64 = 1;
const IS_MMAPPED: u64 = 2;
const FLAGS: u64 = 7;
/// `NONCONTIGUOUS_BIT` of `malloc_state.flags`: the main arena gave up on `sbrk`.
const NONCONTIGUOUS: u32 = 2;
const PAGE: u64 = 4096;
/// More arenas than this means the ring is broken (glibc allows 8 per core).
const MAX_ARENAS: usize = 4096;

/// One live block: the address the program got, and its usable size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
}

/// What the walk found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    /// Live blocks, sorted by address.
    pub blocks: Vec<Block>,
    /// The memory that holds chunks (arena heaps, mmapped chunks): never a root itself.
    pub regions: Vec<Range<u64>>,
    /// How many arenas there are.
    pub arenas: usize,
    /// Whether some arena's lock was held by a stopped thread (a malloc or free was under way:
    /// that arena may be caught mid-update).
    pub busy: bool,
    /// What looked inconsistent, one line each.
    pub warnings: Vec<String>,
}

/// Why the heap cannot be walked at all.
#[derive(Debug, PartialEq, Eq)]
pub enum WalkError {
    /// A structure that must be there was not copied or does not make sense.
    Layout(String),
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::Layout(what) => write!(
                f,
                "glibc's malloc state does not read as heaptui expects ({what}); start the \
                 program with LD_PRELOAD=$(heaptui agent-path)"
            ),
        }
    }
}

impl std::error::Error for WalkError {}

/// Reads memory of the image, naming what was read in the error.
struct Reader<'a> {
    image: &'a Image,
}

impl Reader<'_> {
    fn word(&self, addr: u64, what: &str) -> Result<u64, WalkError> {
        self.image
            .word(addr)
            .ok_or_else(|| WalkError::Layout(format!("{what} at {addr:#x} was not copied")))
    }
}

fn chunk_size(header: u64) -> u64 {
    header & !FLAGS
}

/// The arenas of the ring that starts at `main_arena`, main first.
pub fn arenas(image: &Image, g: &Glibc) -> Result<Vec<u64>, WalkError> {
    let r = Reader { image };
    let mut ring = vec![g.main_arena];
    let mut a = r.word(g.main_arena + g.layout.arena_next, "main_arena.next")?;
    while a != g.main_arena {
        if ring.len() == MAX_ARENAS || a == 0 || ring.contains(&a) {
            return Err(WalkError::Layout(format!(
                "the ring of arenas does not close (at {a:#x})"
            )));
        }
        ring.push(a);
        a = r.word(a + g.layout.arena_next, "an arena's next")?;
    }
    Ok(ring)
}

/// Whether any arena's mutex is held (read from the live process while stopped, through an
/// image of the arenas' first words).
pub fn any_arena_locked(image: &Image, g: &Glibc, ring: &[u64]) -> bool {
    ring.iter()
        .any(|&a| image.u32(a + g.layout.arena_mutex).is_some_and(|m| m != 0))
}

/// Walks the whole heap. `thread_pointers` are the stopped threads' `fs_base` values (for
/// their tcaches).
pub fn walk(
    image: &Image,
    maps: &Maps,
    g: &Glibc,
    thread_pointers: &[u64],
) -> Result<Heap, WalkError> {
    let r = Reader { image };
    let l = &g.layout;
    let ring = arenas(image, g)?;
    let mut heap = Heap {
        arenas: ring.len(),
        busy: any_arena_locked(image, g, &ring),
        ..Heap::default()
    };
    // Chunks that look in use but are free: fastbin and tcache entries, tcache structures.
    let mut free: HashSet<u64> = HashSet::new();
    for &a in &ring {
        for i in 0..l.fastbins {
            let head = r.word(a + l.arena_fastbins + 8 * i, "a fastbin")?;
            follow_list(
                image,
                head,
                16,
                usize::MAX,
                &mut free,
                &mut heap.warnings,
                |p| p,
            );
        }
    }
    for &tp in thread_pointers {
        let Some(tcache) = image.word(tp.wrapping_add(g.tcache_tpoff as u64)) else {
            continue;
        };
        if tcache == 0 {
            continue;
        }
        free.insert(tcache - CHUNK_HDR);
        for bin in 0..l.tcache_bins {
            let Some(count) = image
                .bytes(tcache + 2 * bin..tcache + 2 * bin + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            else {
                continue;
            };
            let Some(head) = image.word(tcache + l.tcache_entries + 8 * bin) else {
                continue;
            };
            // Entries point at the user memory of their chunk, their next pointer first.
            follow_list(
                image,
                head,
                0,
                count + 1,
                &mut free,
                &mut heap.warnings,
                |e| e - CHUNK_HDR,
            );
        }
    }
    let mp_word = |off: u64, what: &str| r.word(g.mp + off, what);
    let sbrk_base = mp_word(l.par_sbrk_base, "mp_.sbrk_base")?;
    if l.heap_max != 0 && mp_word(l.par_hp_pagesize, "mp_.hp_pagesize")? != 0 {
        return Err(WalkError::Layout(
            "huge-page heaps (glibc.malloc.hugetlb=2) are laid out differently".into(),
        ));
    }
    for (i, &a) in ring.iter().enumerate() {
        let top = r.word(a + l.arena_top, "an arena's top")?;
        if i == 0 {
            if sbrk_base == 0 {
                continue; // the main arena never grew: no chunks
            }
            let flags = image.u32(a + l.arena_flags).unwrap_or(0);
            if flags & NONCONTIGUOUS != 0 {
                return Err(WalkError::Layout(
                    "the main arena is not contiguous (sbrk failed and it moved to mmap)".into(),
                ));
            }
            let first = sbrk_base.next_multiple_of(ALIGN);
            let top_end = top + chunk_size(r.word(top + SIZE_SZ, "the main top chunk")?);
            heap.regions.push(first..top_end);
            walk_chunks(image, first, top, Some(top), &free, &mut heap);
        } else {
            walk_arena(image, g, a, top, &free, &mut heap)?;
        }
    }
    mmapped_chunks(image, maps, g, &mut heap)?;
    heap.blocks.sort_unstable();
    heap.regions.sort_by_key(|r| r.start);
    Ok(heap)
}

/// The heaps of non-main arena `a`, newest (holding `top`) first.
fn walk_arena(
    image: &Image,
    g: &Glibc,
    a: u64,
    top: u64,
    free: &HashSet<u64>,
    heap: &mut Heap,
) -> Result<(), WalkError> {
    let r = Reader { image };
    let l = &g.layout;
    let mut h = top & !(l.heap_max - 1);
    let mut newest = true;
    let mut seen = 0;
    while h != 0 {
        seen += 1;
        let ar_ptr = r.word(h + l.heap_ar_ptr, "heap_info.ar_ptr")?;
        if ar_ptr != a || seen > 1 << 16 {
            return Err(WalkError::Layout(format!(
                "the heap at {h:#x} does not belong to its arena {a:#x}"
            )));
        }
        let size = r.word(h + l.heap_size, "heap_info.size")?;
        // The first heap of an arena holds the arena itself; chunks follow it, aligned so that
        // the user memory of a chunk is 16-byte aligned (arena.c `_int_new_arena`).
        let after = if (h..h + size).contains(&a) {
            a + l.arena_size
        } else {
            h + l.heap_info_size
        };
        let first = (after + CHUNK_HDR).next_multiple_of(ALIGN) - CHUNK_HDR;
        let end = if newest {
            top + chunk_size(r.word(top + SIZE_SZ, "an arena's top chunk")?)
        } else {
            h + size
        };
        heap.regions.push(h..end.max(h + size));
        walk_chunks(image, first, end, newest.then_some(top), free, heap);
        newest = false;
        h = r.word(h + l.heap_prev, "heap_info.prev")?;
    }
    Ok(())
}

/// Walks the chunks from `first` up to `end` (the top chunk, or the end of an older heap,
/// which glibc closes with fenceposts smaller than the smallest chunk).
fn walk_chunks(
    image: &Image,
    first: u64,
    end: u64,
    top: Option<u64>,
    free: &HashSet<u64>,
    heap: &mut Heap,
) {
    let mut p = first;
    let Some(mut header) = image.word(p + SIZE_SZ) else {
        heap.warnings
            .push(format!("the heap at {first:#x} was not copied"));
        return;
    };
    while p < end && Some(p) != top {
        let size = chunk_size(header);
        if size < MIN_CHUNK {
            break; // a fencepost: the end of an older heap
        }
        let next = p + size;
        let Some(next_header) = image.word(next + SIZE_SZ).filter(|_| next <= end) else {
            heap.warnings.push(format!(
                "the chunk at {p:#x} runs past its heap (size {size:#x}): the rest of that heap \
                 is not walked"
            ));
            return;
        };
        // The chunk before the last fencepost of an older heap is glibc's, not a block.
        let fence = top.is_none() && chunk_size(next_header) == 0;
        if next_header & PREV_INUSE != 0 && header & IS_MMAPPED == 0 && !fence && !free.contains(&p)
        {
            heap.blocks.push(Block {
                addr: p + CHUNK_HDR,
                size: size - SIZE_SZ,
            });
        }
        p = next;
        header = next_header;
    }
}

/// Follows a singly linked free list from `head` (a mangled pointer for every link after the
/// head), inserting each chunk (`chunk_of(entry)`) into `out`. The link of entry `e` is at
/// `e + link`. Stops after `limit` entries, at a loop, or at memory that was not copied.
fn follow_list(
    image: &Image,
    head: u64,
    link: u64,
    limit: usize,
    out: &mut HashSet<u64>,
    warnings: &mut Vec<String>,
    chunk_of: impl Fn(u64) -> u64,
) {
    let mut e = head;
    let mut n = 0usize;
    while e != 0 {
        if n == limit || !e.is_multiple_of(ALIGN) || !out.insert(chunk_of(e)) {
            warnings.push(format!("a free list is inconsistent at {e:#x}"));
            return;
        }
        n += 1;
        let at = e + link;
        let Some(stored) = image.word(at) else {
            warnings.push(format!("a free list leads out of the heap at {e:#x}"));
            return;
        };
        // Safe-linking (glibc 2.32+): PROTECT_PTR(pos, ptr) = (pos >> 12) ^ ptr.
        e = (at >> 12) ^ stored;
    }
}

/// Finds the mmapped chunks: each sits at the start of an anonymous mapping (mappings next to
/// each other may have been merged by the kernel, so the walk goes on after each chunk).
fn mmapped_chunks(image: &Image, maps: &Maps, g: &Glibc, heap: &mut Heap) -> Result<(), WalkError> {
    let r = Reader { image };
    let expected_n = image
        .u32(g.mp + g.layout.par_n_mmaps)
        .ok_or_else(|| WalkError::Layout("mp_.n_mmaps was not copied".into()))?;
    let expected_bytes = r.word(g.mp + g.layout.par_mmapped_mem, "mp_.mmapped_mem")?;
    let (mut n, mut bytes) = (0u32, 0u64);
    let mut heaps = heap.regions.clone();
    heaps.sort_by_key(|h| h.start);
    for m in maps
        .maps
        .iter()
        .filter(|m| m.readable && m.writable && m.is_anonymous())
    {
        let mut q = m.start;
        while q + PAGE <= m.end {
            // Arena heaps are chunks already walked: jump over them.
            let i = heaps.partition_point(|h| h.end <= q);
            if let Some(h) = heaps.get(i).filter(|h| h.start <= q) {
                q = h.end.next_multiple_of(PAGE);
                continue;
            }
            let (Some(prev), Some(header)) = (image.word(q), image.word(q + SIZE_SZ)) else {
                q += PAGE;
                continue;
            };
            let size = chunk_size(header);
            let is_chunk = header & FLAGS == IS_MMAPPED
                && prev == 0
                && size >= PAGE
                && size.is_multiple_of(PAGE)
                && q + size <= m.end;
            if !is_chunk {
                q += PAGE;
                continue;
            }
            heap.blocks.push(Block {
                addr: q + CHUNK_HDR,
                size: size - CHUNK_HDR,
            });
            heap.regions.push(q..q + size);
            n += 1;
            bytes += size;
            q += size;
        }
    }
    if (n, bytes) != (expected_n, expected_bytes) {
        heap.warnings.push(format!(
            "found {n} mmapped chunks of {bytes} bytes, glibc counts {expected_n} of \
             {expected_bytes} (an aligned allocation above the mmap threshold, or one under way)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mangled_free_list_is_followed_and_a_loop_is_reported() {
        // Three entries at 0x10000, 0x10020, 0x10040, linked through their first word.
        let base = 0x10000u64;
        let mut bytes = vec![0u8; 0x60];
        let mut link = |from: u64, to: u64| {
            let at = from;
            let stored = (at >> 12) ^ to;
            let off = (from - base) as usize;
            bytes[off..off + 8].copy_from_slice(&stored.to_le_bytes());
        };
        link(0x10000, 0x10020);
        link(0x10020, 0x10040);
        link(0x10040, 0);
        let image = Image::from_parts(vec![(base, bytes.clone())]);
        let mut out = HashSet::new();
        let mut warnings = Vec::new();
        follow_list(&image, base, 0, usize::MAX, &mut out, &mut warnings, |e| e);
        assert_eq!(out.len(), 3);
        assert!(warnings.is_empty());
        // Make the last one point back at the first: a loop.
        let stored = (0x10040u64 >> 12) ^ base;
        let mut looped = bytes;
        looped[0x40..0x48].copy_from_slice(&stored.to_le_bytes());
        let image = Image::from_parts(vec![(base, looped)]);
        let mut out = HashSet::new();
        follow_list(&image, base, 0, usize::MAX, &mut out, &mut warnings, |e| e);
        assert_eq!(out.len(), 3);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn chunks_in_use_are_those_whose_next_chunk_says_so() {
        // [A 0x30 in use][B 0x20 free][C 0x40 in use (in a fastbin)][top]
        let base = 0x20000u64;
        let mut mem = vec![0u8; 0x100];
        let mut head = |at: u64, v: u64| {
            let off = (at - base + 8) as usize;
            mem[off..off + 8].copy_from_slice(&v.to_le_bytes());
        };
        head(base, 0x30 | PREV_INUSE);
        head(base + 0x30, 0x20 | PREV_INUSE);
        head(base + 0x50, 0x40); // B is free: PREV_INUSE clear
        head(base + 0x90, 0x70 | PREV_INUSE); // top
        let image = Image::from_parts(vec![(base, mem)]);
        let mut heap = Heap::default();
        let mut free = HashSet::new();
        walk_chunks(
            &image,
            base,
            base + 0x100,
            Some(base + 0x90),
            &free,
            &mut heap,
        );
        assert_eq!(
            heap.blocks,
            vec![
                Block {
                    addr: base + 0x10,
                    size: 0x28
                },
                Block {
                    addr: base + 0x60,
                    size: 0x38
                },
            ]
        );
        free.insert(base + 0x50);
        let mut heap = Heap::default();
        walk_chunks(
            &image,
            base,
            base + 0x100,
            Some(base + 0x90),
            &free,
            &mut heap,
        );
        assert_eq!(
            heap.blocks,
            vec![Block {
                addr: base + 0x10,
                size: 0x28
            }]
        );
        assert!(heap.warnings.is_empty());
    }
}
