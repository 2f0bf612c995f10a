//! The unwind-rule cache of the hooks: a fixed-size, direct-mapped, lock-free table from a
//! return address to its compact [`Rule`], in one anonymous mapping reserved at init.
//!
//! Each slot is two relaxed atomic words, `key = pc ^ rule` and `rule`, written without a
//! lock; a reader accepts the pair only when `key ^ rule == pc`. A reader that races a
//! writer sees a torn pair, whose check fails (a miss, recomputed) unless the torn rule is
//! the one it wanted anyway — the lock-free hash table of Hyatt and Mann (ICGA Journal
//! 25(1), 2002: "A lock-less transposition table implementation for parallel search chess
//! engines"). A false hit needs two racing writers whose words xor to exactly the queried
//! address; its worst effect is one wrong frame, because the walk bounds every read to the
//! thread's stack.
//!
//! Never allocates, locks or prints: it is read and written inside the malloc hooks.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::Rule;
use crate::sys;

const SLOT_BITS: u32 = 14;
const SLOTS: usize = 1 << SLOT_BITS;

#[repr(C)]
struct Slot {
    key: AtomicU64,
    rule: AtomicU64,
}

/// The slots (null until [`init`]).
static SLOTS_PTR: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

/// Reserves the cache; false when the kernel refuses the mapping (the walk then computes
/// every rule, which is slower but correct).
pub fn init() -> bool {
    if !SLOTS_PTR.load(Ordering::Acquire).is_null() {
        return true;
    }
    let Some(p) = sys::map_anon(SLOTS * std::mem::size_of::<Slot>(), true) else {
        return false;
    };
    SLOTS_PTR.store(p.cast(), Ordering::Release);
    true
}

#[inline]
fn slot(pc: u64) -> Option<&'static Slot> {
    let base = SLOTS_PTR.load(Ordering::Relaxed);
    if base.is_null() {
        return None;
    }
    let i = (pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOT_BITS)) as usize;
    // SAFETY: i < SLOTS, the mapping's length in slots; the mapping is never unmapped, and
    // zeroed memory is a valid pair of atomics.
    Some(unsafe { &*base.add(i) })
}

/// The cached rule of return address `pc`, if any.
#[inline]
pub fn get(pc: u64) -> Option<Rule> {
    let s = slot(pc)?;
    let rule = s.rule.load(Ordering::Relaxed);
    let key = s.key.load(Ordering::Relaxed);
    if rule == 0 || key ^ rule != pc {
        return None;
    }
    Rule::decode(rule)
}

/// Remembers the rule of `pc` (replacing whatever shared its slot).
#[inline]
pub fn put(pc: u64, rule: Rule) {
    if let Some(s) = slot(pc) {
        let r = rule.encode();
        s.rule.store(r, Ordering::Relaxed);
        s.key.store(pc ^ r, Ordering::Relaxed);
    }
}

/// Forgets every rule (after a dlclose: another module may later load at the same address).
pub fn clear() {
    let base = SLOTS_PTR.load(Ordering::Acquire);
    if base.is_null() {
        return;
    }
    for i in 0..SLOTS {
        // SAFETY: i < SLOTS, as in `slot`.
        let s = unsafe { &*base.add(i) };
        s.rule.store(0, Ordering::Relaxed);
        s.key.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_round_trip_and_collisions_replace() {
        assert!(init());
        let rule = Rule::Cfa {
            from_rbp: false,
            offset: 24,
            rbp_slot: 0,
        };
        put(0x1234_5678, rule);
        assert_eq!(get(0x1234_5678), Some(rule));
        assert_eq!(get(0x1234_5679), None);
        // Find another address in the same slot: it replaces the first.
        let first = slot(0x1234_5678).unwrap() as *const Slot;
        let other = (0x1234_5679u64..)
            .find(|&pc| std::ptr::eq(slot(pc).unwrap(), first))
            .unwrap();
        put(other, Rule::FramePointer);
        assert_eq!(get(other), Some(Rule::FramePointer));
        assert_eq!(get(0x1234_5678), None);
    }
}
