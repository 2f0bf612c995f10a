//! The agent's own mappings, so that a capture never takes them for the program's mapped
//! memory (docs/reference.md §3: the agent's own memory is never a root).
//!
//! Owns: a fixed table of address ranges, one per live mapping the agent made with
//! `sys::map_anon` (its allocator's chunks and large blocks, the block table, the stack
//! table, the recording ring, the blocking-call table), kept up to date by `sys::map_anon`,
//! `sys::unmap` and `sys::remap`. Lock-free and allocation-free: it is updated from inside
//! the agent's allocator and read by a capture while the world is stopped or in its
//! copy-on-write child.
//!
//! Order of updates, so a reader at any instant (a capture, a fork) never takes agent data
//! for the program's: a range is added after its mapping exists (a fresh mapping is zero:
//! scanning it finds nothing) and removed after it is unmapped.
//!
//! Must never: lock, allocate, or hold a range the agent no longer maps for longer than the
//! `munmap` that ends it.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// More live agent mappings than this are not recorded (counted in [`overflowed`]): a capture
/// would then scan them as program memory, which can only make blocks look reachable.
const CAPACITY: usize = 16 * 1024;

/// `start` of a free slot.
const FREE: u64 = 0;
/// `start` of a slot being filled in.
const CLAIMED: u64 = 1;

struct Slot {
    start: AtomicU64,
    end: AtomicU64,
}

static SLOTS: [Slot; CAPACITY] = [const {
    Slot {
        start: AtomicU64::new(FREE),
        end: AtomicU64::new(0),
    }
}; CAPACITY];
/// One past the highest slot ever used.
static HIGH: AtomicUsize = AtomicUsize::new(0);
static OVERFLOWED: AtomicU64 = AtomicU64::new(0);

/// Records `range` as the agent's (call once the mapping exists).
pub fn add(range: Range<u64>) {
    if range.start >= range.end {
        return;
    }
    for (i, slot) in SLOTS.iter().enumerate() {
        if slot.start.load(Ordering::Relaxed) == FREE
            && slot
                .start
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            slot.end.store(range.end, Ordering::Release);
            slot.start.store(range.start, Ordering::Release);
            HIGH.fetch_max(i + 1, Ordering::AcqRel);
            return;
        }
    }
    // No log here: this runs inside the agent's allocator, which a log line would re-enter.
    OVERFLOWED.fetch_add(1, Ordering::Relaxed);
}

/// How many mappings could not be recorded (the table was full).
pub fn overflowed() -> u64 {
    OVERFLOWED.load(Ordering::Relaxed)
}

/// Forgets `range` (call once it is unmapped): the part of a recorded range it covers.
pub fn remove(range: Range<u64>) {
    if range.start >= range.end {
        return;
    }
    let high = HIGH.load(Ordering::Acquire);
    for slot in &SLOTS[..high] {
        let start = slot.start.load(Ordering::Acquire);
        if start <= CLAIMED {
            continue;
        }
        let end = slot.end.load(Ordering::Acquire);
        if range.end <= start || range.start >= end {
            continue;
        }
        // What stays recorded is added first, so no reader ever misses it.
        if range.end < end && range.start > start {
            add(range.end..end);
            slot.end.store(range.start, Ordering::Release);
        } else if range.start > start {
            slot.end.store(range.start, Ordering::Release);
        } else if range.end < end {
            slot.start.store(range.end, Ordering::Release);
        } else {
            slot.start.store(CLAIMED, Ordering::Release);
            slot.end.store(0, Ordering::Release);
            slot.start.store(FREE, Ordering::Release);
        }
    }
}

/// Grows the recorded range that ends at `old_end` to `new_end` (a mapping grown in place).
pub fn extend(start: u64, old_end: u64, new_end: u64) {
    let high = HIGH.load(Ordering::Acquire);
    for slot in &SLOTS[..high] {
        let s = slot.start.load(Ordering::Acquire);
        if s > CLAIMED && s <= start && slot.end.load(Ordering::Acquire) == old_end {
            slot.end.store(new_end, Ordering::Release);
            return;
        }
    }
    add(start..new_end);
}

/// Appends every recorded range to `out` (unsorted). Allocation-free when `out` has room.
pub fn ranges(out: &mut Vec<Range<u64>>) {
    let high = HIGH.load(Ordering::Acquire);
    for slot in &SLOTS[..high] {
        let start = slot.start.load(Ordering::Acquire);
        if start <= CLAIMED {
            continue;
        }
        let end = slot.end.load(Ordering::Acquire);
        if slot.start.load(Ordering::Acquire) == start && end > start {
            out.push(start..end);
        }
    }
}

/// How many ranges are recorded at most (to reserve room before a stop).
pub fn len_hint() -> usize {
    HIGH.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded_within(span: Range<u64>) -> Vec<Range<u64>> {
        let mut all = Vec::new();
        ranges(&mut all);
        let mut mine: Vec<Range<u64>> = all
            .into_iter()
            .filter(|r| r.start >= span.start && r.end <= span.end)
            .collect();
        mine.sort_by_key(|r| r.start);
        mine
    }

    #[test]
    fn ranges_are_added_trimmed_split_extended_and_removed() {
        // Addresses no real mapping of the test process uses (above 2^47).
        let base = 0x9000_0000_0000u64;
        let span = base..base + 0x10_0000;
        add(base..base + 0x4000);
        assert_eq!(recorded_within(span.clone()), vec![base..base + 0x4000]);
        remove(base..base + 0x1000); // head
        remove(base + 0x3000..base + 0x4000); // tail
        assert_eq!(
            recorded_within(span.clone()),
            vec![base + 0x1000..base + 0x3000]
        );
        remove(base + 0x1800..base + 0x2000); // middle: split
        assert_eq!(
            recorded_within(span.clone()),
            vec![base + 0x1000..base + 0x1800, base + 0x2000..base + 0x3000]
        );
        extend(base + 0x2000, base + 0x3000, base + 0x5000);
        assert_eq!(
            recorded_within(span.clone()),
            vec![base + 0x1000..base + 0x1800, base + 0x2000..base + 0x5000]
        );
        remove(base..base + 0x10_0000);
        assert_eq!(recorded_within(span), vec![]);
    }
}
