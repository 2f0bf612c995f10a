//! Allocation stacks: interning into a table of unique stacks, each named by a `u32` id
//! (0 = no stack). The hooks capture them with [`crate::hooks::unwind`].
//!
//! The table lives in three anonymous mappings reserved once at init with MAP_NORESERVE
//! (pages cost memory only when touched) and never moved, so [`frames`] can hand out
//! `&'static` slices: an open-addressing index of ids, the records (hash, offset, length),
//! and an append-only arena of return addresses. Lookups are lock-free (an id is published
//! with a release store after its record and frames are written); only inserting a new stack
//! takes the table's futex lock. When the table is full, stacks get id 0 (counted).
//!
//! Nothing here allocates from the heap, prints, or uses Rust thread-locals.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use super::counters::{self, Rare};
use crate::config::MAX_STACK_DEPTH;
use crate::sync::{CacheLine, RawLock};
use crate::sys;

const INDEX_BITS: u32 = 22;
const INDEX_SLOTS: usize = 1 << INDEX_BITS;
/// At most 3/4 of the index is used, so probes stay short.
const MAX_STACKS: usize = INDEX_SLOTS / 4 * 3;
const ARENA_WORDS: usize = 1 << 26;

/// Frames captured per allocation; 0 = off. Set from the configuration at init (stays 0
/// until the table exists).
static DEPTH: CacheLine<AtomicUsize> = CacheLine(AtomicUsize::new(0));

#[derive(Clone, Copy)]
#[repr(C)]
struct Record {
    hash: u64,
    offset: u32,
    len: u32,
}

struct Table {
    index: AtomicPtr<AtomicU32>,
    records: AtomicPtr<Record>,
    arena: AtomicPtr<u64>,
    /// Stacks interned so far; ids are 1..=count.
    count: AtomicU32,
    lock: RawLock,
    /// Words of the arena in use; written under `lock`.
    arena_used: UnsafeCell<usize>,
}

// SAFETY: arena_used is only accessed under `lock`; the rest are atomics or point to memory
// whose published parts are immutable.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    index: AtomicPtr::new(std::ptr::null_mut()),
    records: AtomicPtr::new(std::ptr::null_mut()),
    arena: AtomicPtr::new(std::ptr::null_mut()),
    count: AtomicU32::new(0),
    lock: RawLock::new(),
    arena_used: UnsafeCell::new(0),
};

/// Reserves the table, sets the hooks' unwinder up and turns capture on with `depth` frames
/// (0 keeps it off). Returns false if the memory could not be reserved (capture stays off).
pub fn init(depth: usize) -> bool {
    let depth = depth.min(MAX_STACK_DEPTH);
    if depth == 0 {
        return true;
    }
    if !crate::hooks::unwind::init() {
        crate::agent_log!(
            "no _dl_find_object (glibc < 2.35) or no rule cache: allocation stacks follow \
             frame pointers only"
        );
    }
    if TABLE.index.load(Ordering::Acquire).is_null() {
        let index = sys::map_anon(INDEX_SLOTS * 4, true);
        let records = sys::map_anon((MAX_STACKS + 1) * std::mem::size_of::<Record>(), true);
        let arena = sys::map_anon(ARENA_WORDS * 8, true);
        let (Some(index), Some(records), Some(arena)) = (index, records, arena) else {
            return false;
        };
        TABLE.records.store(records.cast(), Ordering::Relaxed);
        TABLE.arena.store(arena.cast(), Ordering::Relaxed);
        TABLE.index.store(index.cast(), Ordering::Release);
    }
    DEPTH.store(depth, Ordering::Release);
    true
}

/// Frames to capture per allocation now (0 = off).
#[inline]
pub fn depth() -> usize {
    DEPTH.load(Ordering::Relaxed)
}

fn hash(frames: &[u64]) -> u64 {
    let mut h = frames.len() as u64;
    for &f in frames {
        h = (h.rotate_left(5) ^ f).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^ (h >> 29)
}

/// The id of this stack, interning it if new; 0 if the table is full or absent.
pub fn intern(frames: &[u64]) -> u32 {
    let index = TABLE.index.load(Ordering::Acquire);
    if index.is_null() || frames.is_empty() {
        return 0;
    }
    let h = hash(frames);
    let mask = INDEX_SLOTS - 1;
    let mut i = (h >> (64 - INDEX_BITS)) as usize;
    let mut locked = false;
    loop {
        // SAFETY: i <= mask < INDEX_SLOTS, the index mapping's length in slots.
        let slot = unsafe { &*index.add(i) };
        let id = slot.load(Ordering::Acquire);
        if id == 0 {
            if !locked {
                // Re-probe from here under the lock: another thread may be inserting this stack.
                TABLE.lock.lock();
                locked = true;
                if slot.load(Ordering::Acquire) != 0 {
                    continue;
                }
            }
            let id = insert_locked(frames, h);
            if id != 0 {
                slot.store(id, Ordering::Release);
            }
            TABLE.lock.unlock();
            return id;
        }
        if same(id, h, frames) {
            if locked {
                TABLE.lock.unlock();
            }
            return id;
        }
        i = (i + 1) & mask;
    }
}

fn same(id: u32, h: u64, frames: &[u64]) -> bool {
    // SAFETY: a published id's record is initialised and never changes.
    let r = unsafe { *TABLE.records.load(Ordering::Relaxed).add(id as usize) };
    r.hash == h && r.len as usize == frames.len() && frames_of(r) == frames
}

fn frames_of(r: Record) -> &'static [u64] {
    // SAFETY: offset..offset+len was written before the record was published and the arena
    // is never unmapped or rewritten.
    unsafe {
        std::slice::from_raw_parts(
            TABLE.arena.load(Ordering::Relaxed).add(r.offset as usize),
            r.len as usize,
        )
    }
}

/// Appends a new stack; caller holds the lock.
fn insert_locked(frames: &[u64], h: u64) -> u32 {
    let count = TABLE.count.load(Ordering::Relaxed) as usize;
    // SAFETY: the lock is held.
    let used = unsafe { &mut *TABLE.arena_used.get() };
    if count >= MAX_STACKS || *used + frames.len() > ARENA_WORDS {
        counters::count_rare(Rare::StackDropped);
        return 0;
    }
    let id = count + 1;
    // SAFETY: the arena has room for frames at `used` (checked above) and the record slot
    // `id` <= MAX_STACKS exists; neither is visible to readers until the id is published.
    unsafe {
        let dst = TABLE.arena.load(Ordering::Relaxed).add(*used);
        std::ptr::copy_nonoverlapping(frames.as_ptr(), dst, frames.len());
        *TABLE.records.load(Ordering::Relaxed).add(id) = Record {
            hash: h,
            offset: *used as u32,
            len: frames.len() as u32,
        };
    }
    *used += frames.len();
    TABLE.count.store(id as u32, Ordering::Release);
    id as u32
}

/// Return addresses of an interned allocation stack, innermost first (empty for id 0).
pub fn frames(id: u32) -> &'static [u64] {
    if id == 0 || id > TABLE.count.load(Ordering::Acquire) {
        return &[];
    }
    // SAFETY: ids up to count are published; their records are immutable.
    frames_of(unsafe { *TABLE.records.load(Ordering::Relaxed).add(id as usize) })
}

/// How many distinct stacks are interned.
pub fn len() -> usize {
    TABLE.count.load(Ordering::Acquire) as usize
}

/// Takes the table lock for the fork handlers.
pub(crate) fn lock() {
    TABLE.lock.lock();
}

pub(crate) fn unlock() {
    TABLE.lock.unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_distinguishes_stacks() {
        assert!(init(16));
        let a = [0x401000u64, 0x402000, 0x403000];
        let b = [0x401000u64, 0x402000];
        let ia = intern(&a);
        let ib = intern(&b);
        assert!(ia != 0 && ib != 0 && ia != ib);
        assert_eq!(intern(&a), ia);
        assert_eq!(frames(ia), &a);
        assert_eq!(frames(ib), &b);
        assert_eq!(frames(0), &[] as &[u64]);
        assert_eq!(intern(&[]), 0);
    }

    #[test]
    fn concurrent_interning_gives_one_id_per_stack() {
        assert!(init(16));
        let ids: Vec<Vec<u32>> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..2000u64)
                        .map(|i| intern(&[0x7000_0000 + i, 0x500, i]))
                        .collect()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        for other in &ids[1..] {
            assert_eq!(other, &ids[0]);
        }
        for (i, &id) in ids[0].iter().enumerate() {
            assert_eq!(frames(id), &[0x7000_0000 + i as u64, 0x500, i as u64]);
        }
    }
}
