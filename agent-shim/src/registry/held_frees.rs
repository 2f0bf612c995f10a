//! Frees held back and applied in batches: the block table's share of a `free` is one
//! random cache line (the address's slot), and on a big heap that line is rarely cached, so
//! each free used to wait for one memory access of its own. A thread instead holds up to
//! [`BATCH`] freed blocks in a slot of its own; when the slot is full, their table slots
//! are prefetched together with the libc chunk headers that `free` reads (the misses
//! overlap), the entries removed and only then the blocks handed to libc. On the stress
//! benchmark this took the stacks-off agent from 1.84× to 1.25× the bare run's CPU time
//! (BENCHMARKS.md "Hook overhead").
//!
//! What holding back changes, and why it is safe:
//! - A held block is still allocated in libc, so its address cannot be handed out again
//!   until its entry has left the table (removal before `__libc_free`, as before).
//! - The program no longer holds it: a capture leaves held blocks out ([`HeldSet`], used by
//!   `blocks::Frozen`), and the counters count them as freed ([`account`]).
//! - Memory goes back to libc up to `BATCH − 1` frees late (frees of blocks still waiting in
//!   the thread's slot of new blocks are not held, `blocks::cancel_new`, but count: `Slot::
//!   unheld`). A request of
//!   [`FLUSH_BEFORE`] bytes or more first applies the thread's batch ([`flush_current`]),
//!   so a program that frees a big buffer to make room for another gets it back first.
//!   (Deciding by the freed block's own size would cost what the batch saves: its size is
//!   in the table slot or the chunk header, both a cache miss away.)
//! - A thread's slot is flushed and given up when the thread ends (the thread-exit
//!   destructor of `hooks::pthread`), by the exit summary for the main thread, and by a fork
//!   child for the threads it did not inherit. A thread that ends without the destructor (a
//!   raw `clone`, a thread that existed before the agent) keeps its slot: up to `BATCH − 1`
//!   blocks stay allocated and out of every capture, like freed memory.
//! - The agent's own threads free directly (their share of the counters stays exact).
//! - `HEAPTUI_HOLD_FREES=0` turns holding off ([`turn_off`]): every free reaches libc at once.
//! - A double free is found by libc when the batch is applied, not at the second call.
//!
//! A slot is written by its owner thread only (and read by captures and counters), with
//! atomics: a reader sees every held block, or misses the one being added at that moment
//! (the program is inside `free` then, so the block counts as live, as it always did).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::blocks;
use super::counters::{Counters, Op, Rare, count_call, count_rare};
use crate::sync::prefetch;
use crate::sys::{self, ThreadState};

/// Frees held per thread before they are applied together.
pub const BATCH: usize = 16;
/// Threads that can hold frees (and new blocks, `new_blocks`) at once; later ones free and
/// insert directly.
pub const SLOTS: usize = 1024;
/// Requests at least this big apply the thread's held frees first.
pub const FLUSH_BEFORE: usize = 64 << 10;
/// `ThreadState::held`: no slot yet / never hold.
const NO_SLOT: u32 = 0;
const NEVER: u32 = u32::MAX;

unsafe extern "C" {
    fn __libc_free(p: *mut c_void);
}

#[repr(align(64))]
struct Slot {
    /// Tid of the owner; 0 = free.
    owner: AtomicU32,
    len: AtomicU32,
    /// Frees of the owner that went to libc without being held (`blocks::cancel_new`) since
    /// the first block now held: the slot is applied once `len + unheld` reaches [`BATCH`],
    /// so a held block still goes back to libc within `BATCH − 1` of its thread's frees.
    unheld: AtomicU32,
    blocks: [AtomicU64; BATCH],
}

static SLOT: [Slot; SLOTS] = [const {
    Slot {
        owner: AtomicU32::new(0),
        len: AtomicU32::new(0),
        unheld: AtomicU32::new(0),
        blocks: [const { AtomicU64::new(0) }; BATCH],
    }
}; SLOTS];

/// False once `HEAPTUI_HOLD_FREES=0` turned holding off (read when a thread first frees).
static HOLDING: AtomicBool = AtomicBool::new(true);

/// Where a slot search starts (slots are taken in order and given back at thread exit).
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);
/// One more than the highest slot ever claimed: readers of every slot look at `[0, USED)`.
static USED: AtomicU32 = AtomicU32::new(0);

/// How many slots readers must look at (every slot ever claimed lies below).
#[inline]
pub fn used_slots() -> usize {
    (USED.load(Ordering::Acquire) as usize).min(SLOTS)
}

impl Slot {
    /// The held blocks, taken out of the slot (it is empty afterwards).
    fn take(&self, out: &mut [u64; BATCH]) -> usize {
        let n = (self.len.load(Ordering::Acquire) as usize).min(BATCH);
        for (o, b) in out.iter_mut().zip(&self.blocks[..n]) {
            *o = b.load(Ordering::Relaxed);
        }
        // Emptied before the blocks leave the table: a capture in between sees them as live
        // (as a capture inside `free` always did), never as held after libc reused them.
        self.len.store(0, Ordering::Release);
        self.unheld.store(0, Ordering::Relaxed);
        n
    }

    /// Applies the held blocks: out of the table, then back to libc.
    fn flush(&self) {
        let mut held = [0u64; BATCH];
        let n = self.take(&mut held);
        // Never a null block (only non-null frees are held), unless the slot was broken.
        let n = compact_nonzero(&mut held[..n]);
        let held = &held[..n];
        // Only where the table is too big to stay in the cache (`blocks::prefetch`): the
        // heap of a small one is in the cache too.
        let mut big = false;
        for &b in held {
            if blocks::prefetch(b) {
                big = true;
                // libc's free starts with the chunk header, just below the block.
                prefetch(b.wrapping_sub(16));
            }
        }
        for _ in 0..blocks::remove_freed(held) {
            count_call(Op::Free);
            count_rare(Rare::UnknownFree);
        }
        for &b in held.iter().filter(|_| big) {
            // And then the header of the chunk after it, which libc's free checks next (the
            // size word, in the cache by now, says where it is).
            // SAFETY: the word below a block the program frees is its chunk's size word,
            // which libc's free reads first thing.
            let size = unsafe { *(b as *const u64).sub(1) } & !7;
            prefetch(b.wrapping_sub(16).wrapping_add(size));
        }
        for &b in held {
            // SAFETY: the program freed b (once); it left the table above and goes to libc
            // now, exactly as the free hook would have passed it.
            unsafe { __libc_free(b as *mut c_void) };
        }
    }
}

/// Moves the non-zero values of `v` to its front; returns how many there are.
fn compact_nonzero(v: &mut [u64]) -> usize {
    let mut kept = 0;
    for i in 0..v.len() {
        if v[i] != 0 {
            v.swap(kept, i);
            kept += 1;
        }
    }
    kept
}

/// The slot a thread's `ThreadState::held` names, if it has one.
#[inline]
fn claimed(held: u32) -> Option<&'static Slot> {
    claimed_index(held).map(|k| &SLOT[k])
}

/// The slot number of the calling thread, claiming one on first use; None when it has none
/// (it is ending, or every slot is taken).
pub fn own_index(st: &ThreadState, tid: u32) -> Option<usize> {
    match st.held() {
        NEVER => return None,
        NO_SLOT => {}
        n => return Some(n as usize - 1).filter(|&k| k < SLOTS),
    }
    let start = NEXT_SLOT.load(Ordering::Relaxed) as usize;
    for k in (0..SLOTS).map(|i| (start + i) % SLOTS) {
        if SLOT[k]
            .owner
            .compare_exchange(0, tid.max(1), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            NEXT_SLOT.store((k + 1) as u32, Ordering::Relaxed);
            if let Some(new) = super::new_blocks::NEW.get(k) {
                new.new_owner();
            }
            USED.fetch_max(k as u32 + 1, Ordering::AcqRel);
            st.set_held(k as u32 + 1);
            return Some(k);
        }
    }
    st.set_held(NEVER);
    None
}

/// The slot of the calling thread, claiming one on first use; None when it must not hold.
fn own_slot(st: &ThreadState, tid: u32) -> Option<&'static Slot> {
    if !HOLDING.load(Ordering::Relaxed) {
        return None;
    }
    own_index(st, tid).map(|k| &SLOT[k])
}

/// Holds back the program's free of `p` (non-null), applying the thread's batch when it is
/// full. False when the block must be freed now (the caller removes and frees it). The
/// caller is inside a hook (its re-entrancy guard held) on a program thread.
pub fn hold(p: u64, st: &ThreadState, tid: u32) -> bool {
    let Some(slot) = own_slot(st, tid) else {
        return false;
    };
    let n = slot.len.load(Ordering::Relaxed) as usize;
    let Some(cell) = slot.blocks.get(n) else {
        // Its owner flushes a slot when it fills: a fuller one is a broken invariant.
        // Holding stops (this free and every later one go to libc at once), the program
        // runs on.
        HOLDING.store(false, Ordering::Relaxed);
        slot.flush();
        // The thread's new blocks too: it will not look at its slot again.
        if let Some(k) = st.held().checked_sub(1) {
            blocks::apply_new(k as usize);
        }
        st.set_held(NEVER);
        return false;
    };
    cell.store(p, Ordering::Relaxed);
    slot.len.store(n as u32 + 1, Ordering::Release);
    if n + 1 + slot.unheld.load(Ordering::Relaxed) as usize >= BATCH {
        slot.flush();
    }
    true
}

/// The free hook's fast path: holds `p` (non-null) in slot `k`, the calling thread's, when
/// that is all this free needs — a program thread (never an agent thread: those have no slot)
/// not inside a hook (the caller marked it busy before calling, so a signal handler that frees
/// meanwhile takes the general path and finds the thread inside a hook), whose slot is not
/// filled by this block. False, with nothing done, otherwise: the hook's general path
/// ([`hold`]) takes the free.
///
/// Unlike the general path it does not ask `blocks::usable_by`: holding touches no table, so
/// the thread that holds every shard lock (a free in a fork's atfork prepare handler) may hold
/// the block like any other; its slot is flushed once the locks are let go (or, in the fork
/// child, before anything else). Only a free that fills the slot goes the general way, which
/// then hands the block to libc and records the missed free.
#[inline]
pub fn hold_unless_full(p: u64, k: usize) -> bool {
    if !HOLDING.load(Ordering::Relaxed) {
        return false;
    }
    let Some(slot) = SLOT.get(k) else {
        return false;
    };
    let n = slot.len.load(Ordering::Relaxed) as usize;
    match slot.blocks.get(n) {
        Some(cell) if n + 1 + (slot.unheld.load(Ordering::Relaxed) as usize) < BATCH => {
            cell.store(p, Ordering::Relaxed);
            slot.len.store(n as u32 + 1, Ordering::Release);
            true
        }
        _ => false,
    }
}

/// Counts a free of the calling thread that went to libc without being held (its block still
/// waited in the thread's slot of new blocks: `blocks::cancel_new`); true when that makes
/// [`BATCH`] frees since the first held one (see `Slot::unheld`), and the caller is to apply
/// the held frees with [`apply_after_unheld`]. Split so that the free hook's common path calls
/// nothing (and saves no registers for a call). The caller is inside a hook (marked busy) on a
/// program thread whose slot is `k`.
#[inline]
pub fn count_unheld_free(k: usize) -> bool {
    let Some(slot) = SLOT.get(k) else {
        return false;
    };
    let held = slot.len.load(Ordering::Relaxed);
    if held == 0 {
        return false;
    }
    let unheld = slot.unheld.load(Ordering::Relaxed) + 1;
    slot.unheld.store(unheld, Ordering::Relaxed);
    (held + unheld) as usize >= BATCH
}

/// Applies the frees slot `k` holds, once [`count_unheld_free`] said so; same caller.
pub fn apply_after_unheld(k: usize) {
    // The thread holding every shard lock (a fork's prepare handler) leaves it to its next
    // held free, which goes the general way.
    if let Some(slot) = SLOT.get(k)
        && blocks::usable_by(sys::current_tid())
    {
        slot.flush();
    }
}

/// The slot number of a thread whose `ThreadState::held` is `held`, if it claimed one.
#[inline]
pub fn claimed_index(held: u32) -> Option<usize> {
    match held {
        NO_SLOT | NEVER => None,
        n => Some(n as usize - 1).filter(|&k| k < SLOTS),
    }
}

/// Stops holding frees (`HEAPTUI_HOLD_FREES=0`, read by the agent's constructor): threads
/// free directly from their next first free on, and the calling thread (the only one when
/// the constructor runs) applies what it held before the configuration was read.
pub fn turn_off() {
    HOLDING.store(false, Ordering::Relaxed);
    if let Some(slot) = claimed(sys::thread_state().held()) {
        let _ = as_hook(|| slot.flush());
    }
}

/// Applies the calling thread's held frees now (before a big request). The caller is inside
/// a hook (its re-entrancy guard held).
pub fn flush_current(st: &ThreadState) {
    if let Some(slot) = claimed(st.held()) {
        slot.flush();
    }
}

/// Runs `f` as the hooks run: marked busy, so a signal handler that frees meanwhile is
/// passed straight to libc instead of taking a shard lock this thread may hold. False (and
/// `f` not run) when the thread is inside a hook already.
fn as_hook(f: impl FnOnce()) -> bool {
    let st = sys::thread_state();
    if st.busy() {
        return false;
    }
    st.set_busy(true);
    f();
    st.set_busy(false);
    true
}

/// Applies the calling thread's held frees and stops holding any (the thread ends). The
/// caller is not inside a hook and does not hold the block table.
pub fn release_current() {
    let st = sys::thread_state();
    let held = st.held();
    st.set_held(NEVER);
    if let Some(slot) = claimed(held) {
        // Inside a hook (cannot be, short of a signal handler ending the thread), the slot is
        // kept with its blocks rather than given up unapplied. New blocks first: then the
        // held frees find theirs in the table.
        if as_hook(|| {
            blocks::apply_new(held as usize - 1);
            slot.flush();
        }) {
            slot.owner.store(0, Ordering::Release);
        }
    }
}

/// In a fork child: applies the new blocks and the frees held by the parent's other threads
/// (they do not exist here) and frees their slots. The calling thread keeps its own.
pub fn adopt_in_child() {
    let own = sys::thread_state().held();
    let _ = as_hook(|| {
        for (k, slot) in SLOT.iter().enumerate() {
            if k as u32 + 1 != own && slot.owner.load(Ordering::Relaxed) != 0 {
                blocks::apply_new(k);
                slot.flush();
                slot.owner.store(0, Ordering::Release);
            }
        }
    });
}

/// Calls `f` with every block held back now.
fn for_each_held(mut f: impl FnMut(u64)) {
    for slot in &SLOT {
        if slot.owner.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let n = (slot.len.load(Ordering::Acquire) as usize).min(BATCH);
        for b in &slot.blocks[..n] {
            f(b.load(Ordering::Relaxed));
        }
    }
}

/// Counts the held frees as done: the counters then read as if each had been applied.
pub fn account(c: &mut Counters) {
    for_each_held(|b| {
        c.calls[Op::Free as usize] += 1;
        match blocks::peek_size(b) {
            Some(size) => {
                c.freed_bytes += size;
                c.live_blocks = c.live_blocks.saturating_sub(1);
            }
            None => c.unknown_frees += 1,
        }
    });
}

/// The blocks held at one moment, for a capture that asks of each of its (up to millions of)
/// blocks whether it is one of them: a 4096-bit filter answers most of them with one bit,
/// the sorted list the rest.
pub struct HeldSet {
    addrs: [u64; SLOTS * BATCH],
    len: usize,
    filter: [u64; FILTER_WORDS],
}

const FILTER_WORDS: usize = 64;

/// The filter bit of `addr` (its 16-byte granule, hashed).
fn filter_bit(addr: u64) -> usize {
    ((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 12)) as usize
}

impl Default for HeldSet {
    fn default() -> Self {
        Self::new()
    }
}

impl HeldSet {
    pub const fn new() -> Self {
        Self {
            addrs: [0; SLOTS * BATCH],
            len: 0,
            filter: [0; FILTER_WORDS],
        }
    }

    /// Fills the set with the blocks held now.
    pub fn refresh(&mut self) {
        let mut len = 0;
        self.filter = [0; FILTER_WORDS];
        for_each_held(|b| {
            if len < self.addrs.len() {
                self.addrs[len] = b;
                len += 1;
                let bit = filter_bit(b);
                self.filter[bit / 64] |= 1 << (bit % 64);
            }
        });
        self.len = len;
        self.addrs[..len].sort_unstable();
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The held blocks, sorted.
    pub fn as_slice(&self) -> &[u64] {
        &self.addrs[..self.len]
    }

    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        if self.len == 0 {
            return false;
        }
        let bit = filter_bit(addr);
        self.filter[bit / 64] & (1 << (bit % 64)) != 0
            && self.addrs[..self.len].binary_search(&addr).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overfull_slot_stops_holding_instead_of_panicking() {
        let st = sys::thread_state();
        let tid = sys::current_tid();
        // Real libc blocks (the unit tests run without the hooks), held by this thread.
        for _ in 0..3 {
            // SAFETY: a plain allocation, handed to `hold` as the free hook would.
            let p = unsafe { libc::malloc(32) } as u64;
            assert!(hold(p, st, tid));
        }
        let slot = claimed(st.held()).expect("this thread holds a slot");
        // A length past the slot's end: only memory corruption gets there.
        slot.len.store(BATCH as u32 + 4, Ordering::Relaxed);
        // SAFETY: as above.
        let p = unsafe { libc::malloc(32) };
        assert!(
            !hold(p as u64, st, tid),
            "this free must go to libc at once"
        );
        // SAFETY: the caller frees what `hold` refused, as the free hook does.
        unsafe { libc::free(p) };
        assert_eq!(
            slot.len.load(Ordering::Relaxed),
            0,
            "the held blocks were applied"
        );
        assert_eq!(st.held(), NEVER);
        assert!(!HOLDING.load(Ordering::Relaxed));
    }
}
