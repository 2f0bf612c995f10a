//! The agent's own memory: an mmap-backed global allocator that never calls libc malloc.
//!
//! Small requests are served from size classes (free lists refilled by carving 64 KiB
//! mappings), everything above the largest class or aligned beyond a page goes straight to
//! mmap. Each class has its own futex lock; the fork handlers hold them all across fork()
//! so the child never inherits a half-updated free list. Freed small blocks go back to their
//! class's list (memory is not returned to the kernel), large ones are unmapped.
//!
//! This allocator must never be used by a hook (hooks do not allocate at all), and it never
//! touches thread-local storage.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sync::SpinLock;
use crate::sys;

const PAGE: usize = 4096;
/// Size of the mappings carved into small blocks.
const CHUNK: usize = 64 * 1024;
/// Block sizes of the size classes: multiples of 16, so every block is 16-aligned; a block of
/// class `c` sits at a multiple of `c` inside a page-aligned chunk, so it is aligned to any
/// power of two dividing `c`.
const CLASSES: [usize; 24] = [
    16, 32, 48, 64, 80, 96, 112, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
    8192, 12288, 16384, 24576, 32768,
];

struct FreeList {
    head: *mut FreeBlock,
}

struct FreeBlock {
    next: *mut FreeBlock,
}

// SAFETY: the raw pointers are only followed under the class lock.
unsafe impl Send for FreeList {}

/// The agent's global allocator (see the module docs).
pub struct AgentAlloc {
    lists: [SpinLock<FreeList>; CLASSES.len()],
    /// Bytes currently mapped by this allocator (chunks and large blocks), for the figures.
    mapped: AtomicUsize,
    /// Whether freed large mappings are kept for reuse (see [`AgentAlloc::reuse_large`]).
    reuse: AtomicBool,
    /// The freed large mappings kept while `reuse` is on.
    spare: SpinLock<Spare>,
}

/// Most freed large mappings kept for reuse; one freed when there is no room is unmapped.
const SPARE_SLOTS: usize = 64;

/// Freed large mappings, `(start, len)`, page-aligned and disjoint; `len == 0` is a free slot.
struct Spare {
    slots: [(usize, usize); SPARE_SLOTS],
}

impl Spare {
    /// Takes `len` bytes from the smallest kept mapping that has them; the rest stays kept.
    fn take(&mut self, len: usize) -> Option<*mut u8> {
        let (i, &(start, have)) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1 >= len)
            .min_by_key(|(_, s)| s.1)?;
        self.slots[i] = if have > len {
            (start + len, have - len)
        } else {
            (0, 0)
        };
        Some(start as *mut u8)
    }

    /// Keeps a freed mapping; false when there is no slot for it.
    fn keep(&mut self, start: usize, len: usize) -> bool {
        match self.slots.iter_mut().find(|s| s.1 == 0) {
            Some(slot) => {
                *slot = (start, len);
                true
            }
            None => false,
        }
    }
}

impl AgentAlloc {
    pub const fn new() -> Self {
        Self {
            lists: [const { SpinLock::new(FreeList { head: null_mut() }) }; CLASSES.len()],
            mapped: AtomicUsize::new(0),
            reuse: AtomicBool::new(false),
            spare: SpinLock::new(Spare {
                slots: [(0, 0); SPARE_SLOTS],
            }),
        }
    }

    /// From now on, freed large mappings are kept (up to [`SPARE_SLOTS`]) and handed out
    /// again, whole or in part, instead of being unmapped. For the capture's scanning child
    /// only: it frees the scan's buffers (hundreds of megabytes for millions of blocks) just
    /// before the analysis allocates as much, and every fresh page costs a fault, zeroing
    /// and a cgroup charge (a third of the child's CPU time); reused pages cost nothing. The
    /// child exits right after, so nothing kept is ever given back. Never in the program's
    /// own process, whose freed memory must go back to the kernel.
    pub fn reuse_large(&self) {
        self.reuse.store(true, Ordering::Relaxed);
    }

    /// A kept mapping of at least `len` bytes, when reusing.
    fn reused(&self, len: usize) -> Option<*mut u8> {
        if !self.reuse.load(Ordering::Relaxed) {
            return None;
        }
        self.spare.lock().take(len)
    }

    /// Bytes of memory this allocator holds from the kernel.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }

    /// Whether no class lock is held at this instant. The capture checks it with the world
    /// stopped: a stopped thread holding a class lock would deadlock the capture's own
    /// allocations, so the capture then resumes and tries again.
    pub fn idle(&self) -> bool {
        self.lists.iter().all(|l| {
            let free = l.raw().try_lock();
            if free {
                l.raw().unlock();
            }
            free
        })
    }

    /// Takes every class lock (fork prepare).
    pub fn lock_all(&self) {
        for l in &self.lists {
            l.raw().lock();
        }
    }

    /// Releases every class lock (fork parent and child).
    pub fn unlock_all(&self) {
        for l in self.lists.iter().rev() {
            l.raw().unlock();
        }
    }

    fn class_of(layout: Layout) -> Option<usize> {
        if layout.align() > PAGE {
            return None;
        }
        let size = layout.size().max(1);
        CLASSES
            .iter()
            .position(|&c| c >= size && c % layout.align() == 0)
    }

    fn alloc_small(&self, class: usize) -> *mut u8 {
        let mut list = self.lists[class].lock();
        if list.head.is_null() {
            let size = CLASSES[class];
            let chunk = CHUNK.max(size * 8);
            let Some(base) = sys::map_anon(chunk, false) else {
                return null_mut();
            };
            self.mapped.fetch_add(chunk, Ordering::Relaxed);
            // Thread the chunk's blocks into the list, lowest address first.
            let count = chunk / size;
            for i in (0..count).rev() {
                // SAFETY: block i lies inside the fresh chunk and is aligned for FreeBlock.
                unsafe {
                    let b = base.add(i * size).cast::<FreeBlock>();
                    (*b).next = list.head;
                    list.head = b;
                }
            }
        }
        let b = list.head;
        // SAFETY: b is a free block owned by this list (non-null after the refill).
        list.head = unsafe { (*b).next };
        b.cast()
    }

    fn large_len(layout: Layout) -> usize {
        layout.size().max(1).div_ceil(PAGE) * PAGE
    }

    fn alloc_large(&self, layout: Layout) -> *mut u8 {
        let len = Self::large_len(layout);
        if layout.align() <= PAGE {
            if let Some(p) = self.reused(len) {
                return p;
            }
            let Some(p) = sys::map_anon(len, false) else {
                return null_mut();
            };
            self.mapped.fetch_add(len, Ordering::Relaxed);
            return p;
        }
        // Over-map by the alignment and trim both ends.
        let Some(total) = len.checked_add(layout.align()) else {
            return null_mut();
        };
        let Some(p) = sys::map_anon(total, false) else {
            return null_mut();
        };
        let start = (p as usize).next_multiple_of(layout.align());
        let head = start - p as usize;
        let tail = total - head - len;
        // SAFETY: both trimmed pieces are parts of the fresh mapping that we never hand out.
        unsafe {
            if head > 0 {
                sys::unmap(p, head);
            }
            if tail > 0 {
                sys::unmap((start + len) as *mut u8, tail);
            }
        }
        self.mapped.fetch_add(len, Ordering::Relaxed);
        start as *mut u8
    }
}

impl Default for AgentAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: blocks come from disjoint mappings or disjoint pieces of chunks, each handed out once
// until deallocated; every block satisfies its layout's size and alignment (see CLASSES and
// alloc_large); the free lists are only touched under their class lock.
unsafe impl GlobalAlloc for AgentAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::class_of(layout) {
            Some(c) => self.alloc_small(c),
            None => self.alloc_large(layout),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match Self::class_of(layout) {
            Some(c) => {
                let p = self.alloc_small(c);
                if !p.is_null() {
                    // SAFETY: p is a fresh block of at least layout.size() bytes.
                    unsafe { ptr::write_bytes(p, 0, layout.size()) };
                }
                p
            }
            // Fresh anonymous mappings are already zero; a reused one is not.
            None => {
                let len = Self::large_len(layout);
                if layout.align() <= PAGE
                    && let Some(p) = self.reused(len)
                {
                    // SAFETY: p is a kept mapping of at least len bytes, ours alone now.
                    unsafe { ptr::write_bytes(p, 0, layout.size()) };
                    return p;
                }
                self.alloc_large(layout)
            }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match Self::class_of(layout) {
            Some(c) => {
                let mut list = self.lists[c].lock();
                let b = p.cast::<FreeBlock>();
                // SAFETY: p is a block of class c that the caller gives back; it is 16-aligned
                // and at least 16 bytes, so it can hold the link.
                unsafe { (*b).next = list.head };
                list.head = b;
            }
            None => {
                let len = Self::large_len(layout);
                if self.reuse.load(Ordering::Relaxed) && self.spare.lock().keep(p as usize, len) {
                    return;
                }
                // SAFETY: p..p+len is exactly the mapping alloc_large made for this layout.
                unsafe { sys::unmap(p, len) };
                self.mapped.fetch_sub(len, Ordering::Relaxed);
            }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees new_size, rounded to the alignment, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old_class, new_class) = (Self::class_of(layout), Self::class_of(new_layout));
        if old_class.is_some() && old_class == new_class {
            return p;
        }
        if old_class.is_none() && new_class.is_none() && layout.align() <= PAGE {
            let (old_len, new_len) = (Self::large_len(layout), Self::large_len(new_layout));
            if old_len == new_len {
                return p;
            }
            // SAFETY: p..p+old_len is our mapping (alloc_large), page-aligned.
            let Some(q) = (unsafe { sys::remap(p, old_len, new_len) }) else {
                return null_mut();
            };
            if new_len > old_len {
                self.mapped.fetch_add(new_len - old_len, Ordering::Relaxed);
            } else {
                self.mapped.fetch_sub(old_len - new_len, Ordering::Relaxed);
            }
            return q;
        }
        // SAFETY: new_layout is valid (see above).
        let q = unsafe { self.alloc(new_layout) };
        if !q.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes and distinct.
            unsafe {
                ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                self.dealloc(p, layout);
            }
        }
        q
    }
}

/// The allocator every Rust allocation of the agent goes through.
#[global_allocator]
pub static AGENT_ALLOC: AgentAlloc = AgentAlloc::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_mappings_are_taken_smallest_first_and_split() {
        let mut spare = Spare {
            slots: [(0, 0); SPARE_SLOTS],
        };
        assert_eq!(spare.take(PAGE), None);
        assert!(spare.keep(0x10_0000, 8 * PAGE));
        assert!(spare.keep(0x40_0000, 2 * PAGE));
        // The smallest that fits, whole.
        assert_eq!(spare.take(2 * PAGE), Some(0x40_0000 as *mut u8));
        // A part of a larger one; the rest stays kept.
        assert_eq!(spare.take(3 * PAGE), Some(0x10_0000 as *mut u8));
        assert_eq!(spare.take(6 * PAGE), None);
        assert_eq!(
            spare.take(5 * PAGE),
            Some((0x10_0000 + 3 * PAGE) as *mut u8)
        );
        assert_eq!(spare.take(PAGE), None);
        for k in 0..SPARE_SLOTS {
            assert!(spare.keep(k * PAGE, PAGE));
        }
        assert!(!spare.keep(0x80_0000, PAGE), "no room: unmapped instead");
    }

    #[test]
    fn a_reusing_allocator_hands_freed_large_blocks_out_again_zeroed_when_asked() {
        let a = AgentAlloc::new();
        a.reuse_large();
        let layout = Layout::from_size_align(1 << 20, 8).unwrap();
        // SAFETY: a valid non-zero layout; every block is freed with its own layout.
        unsafe {
            let p = a.alloc(layout);
            std::ptr::write_bytes(p, 0xab, layout.size());
            a.dealloc(p, layout);
            let small = Layout::from_size_align(256 << 10, 8).unwrap();
            let q = a.alloc_zeroed(small);
            assert_eq!(q, p, "the freed mapping is reused");
            assert!((0..small.size()).all(|i| *q.add(i) == 0));
            // The rest of the freed mapping is handed out next.
            let r = a.alloc(small);
            assert_eq!(r, p.add(small.size()));
            a.dealloc(q, small);
            a.dealloc(r, small);
        }
        assert_eq!(a.mapped_bytes(), 1 << 20, "kept, not unmapped");
    }

    fn fill_and_check(a: &AgentAlloc, layout: Layout, seed: u8) -> *mut u8 {
        // SAFETY: layout has a non-zero size.
        let p = unsafe { a.alloc(layout) };
        assert!(!p.is_null());
        assert_eq!(p as usize % layout.align(), 0, "{layout:?}");
        // SAFETY: p is valid for layout.size() bytes.
        unsafe { ptr::write_bytes(p, seed, layout.size()) };
        p
    }

    #[test]
    fn every_class_and_alignment_is_served_aligned_and_disjoint() {
        let a = AgentAlloc::new();
        let mut live = Vec::new();
        for (i, size) in [
            1usize, 15, 16, 17, 100, 1000, 4096, 5000, 32768, 32769, 200_000,
        ]
        .into_iter()
        .enumerate()
        {
            for align in [1usize, 8, 16, 64, 256, 4096, 16384] {
                let layout = Layout::from_size_align(size, align).unwrap();
                live.push((fill_and_check(&a, layout, i as u8), layout, i as u8));
            }
        }
        for &(p, layout, seed) in &live {
            // SAFETY: p is live with layout.size() initialised bytes.
            let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
            assert!(
                bytes.iter().all(|&b| b == seed),
                "block {layout:?} was overwritten"
            );
        }
        for (p, layout, _) in live {
            // SAFETY: p came from a.alloc(layout).
            unsafe { a.dealloc(p, layout) };
        }
    }

    #[test]
    fn freed_blocks_are_reused() {
        let a = AgentAlloc::new();
        let layout = Layout::from_size_align(40, 8).unwrap();
        let p = fill_and_check(&a, layout, 1);
        // SAFETY: p came from a.alloc(layout).
        unsafe { a.dealloc(p, layout) };
        let q = fill_and_check(&a, layout, 2);
        assert_eq!(p, q);
        let mapped = a.mapped_bytes();
        assert_eq!(mapped, CHUNK);
    }

    #[test]
    fn realloc_keeps_contents_across_classes_and_mappings() {
        let a = AgentAlloc::new();
        let mut layout = Layout::from_size_align(24, 8).unwrap();
        let mut p = fill_and_check(&a, layout, 7);
        for new_size in [40usize, 3000, 100_000, 1_000_000, 50_000, 10] {
            // SAFETY: p is live with `layout`.
            p = unsafe { a.realloc(p, layout, new_size) };
            assert!(!p.is_null());
            let kept = layout.size().min(new_size);
            // SAFETY: the first `kept` bytes are initialised (preserved by realloc).
            let bytes = unsafe { std::slice::from_raw_parts(p, kept) };
            assert!(
                bytes.iter().all(|&b| b == 7),
                "lost data growing to {new_size}"
            );
            layout = Layout::from_size_align(new_size, 8).unwrap();
            // SAFETY: p is valid for new_size bytes.
            unsafe { ptr::write_bytes(p, 7, new_size) };
        }
        // SAFETY: p is live with `layout`.
        unsafe { a.dealloc(p, layout) };
    }

    #[test]
    fn zeroed_memory_is_zero_after_reuse() {
        let a = AgentAlloc::new();
        let layout = Layout::from_size_align(64, 16).unwrap();
        let p = fill_and_check(&a, layout, 0xff);
        // SAFETY: p came from a.alloc(layout); the second block is read for its size.
        unsafe {
            a.dealloc(p, layout);
            let q = a.alloc_zeroed(layout);
            assert!(std::slice::from_raw_parts(q, 64).iter().all(|&b| b == 0));
            a.dealloc(q, layout);
        }
    }

    #[test]
    fn threads_allocate_concurrently_without_sharing_blocks() {
        static A: AgentAlloc = AgentAlloc::new();
        let workers: Vec<_> = (0..8u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..2000usize {
                        let layout = Layout::from_size_align(16 + (i * 37) % 5000, 16).unwrap();
                        mine.push((fill_and_check(&A, layout, t), layout));
                        if i % 3 == 0 {
                            let (p, l) = mine.swap_remove(i % mine.len());
                            // SAFETY: p came from A.alloc(l).
                            unsafe { A.dealloc(p, l) };
                        }
                    }
                    for &(p, l) in &mine {
                        // SAFETY: p is live with l.size() bytes written by this thread.
                        let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
                        assert!(bytes.iter().all(|&b| b == t));
                    }
                    for (p, l) in mine {
                        // SAFETY: p came from A.alloc(l).
                        unsafe { A.dealloc(p, l) };
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    }
}
