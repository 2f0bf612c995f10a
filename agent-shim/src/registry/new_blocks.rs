//! New blocks held per thread and applied to the block table in batches (buffered inserts).
//!
//! Why: recording a block in the table cost each allocation four atomic read-modify-writes
//! (the sequence number, the shard lock, the published live bytes, the unlock) and, on a big
//! heap, one cache and TLB miss on the new entry's slot (BENCHMARKS.md "Real programs"). A
//! program thread instead writes its new block into a slot of its own (the same slot number
//! as its held frees, `held_frees`) and returns; when [`BATCH`] blocks are there, its thread
//! prefetches their table slots together, takes each shard lock once for all of that
//! shard's blocks (glibc gives a thread's blocks one arena, so mostly one shard), publishes
//! its live bytes once, and only then clears the slot (`blocks::apply_new`). Only the
//! sequence number is still taken per block, so it stays the allocation order across
//! threads.
//!
//! The one rule that makes it correct: **an entry leaves a slot only with its block's shard
//! lock held, and goes straight into that shard's table (or is accounted as freed there)
//! under the same lock.** So whoever holds a shard's lock sees each of that shard's blocks
//! either in the table or in some thread's slot, never in neither, and an entry it sees in a
//! slot cannot change under it: its owner rewrites a slot entry only after it was taken, and
//! clears `len` only after its whole batch was applied. Every reader of the table uses it:
//! - A free, realloc, lookup or size query that does not find its address in the table (or
//!   finds there only another thread's realloc in progress, which a new block at the same
//!   address supersedes) looks through the slots (the calling thread's first) and takes the
//!   entry (`blocks::live_at`, `blocks::mark`): a block freed by another thread before its allocating
//!   thread applied its batch is neither reported unknown nor left behind in the table.
//! - A capture holds every shard lock (`blocks::Frozen`): after the world is stopped, its
//!   `for_each` first moves every slot's blocks into the table. A block being written into a
//!   slot at that moment is not yet returned by malloc (its thread is stopped inside the
//!   hook), so leaving it out is right; the owner's later batch finds the entries taken.
//!   (In the scan child this happens to the child's copy only.)
//! - The live counters count the blocks in slots as allocated ([`account`]): exact whenever
//!   no hook runs, like held frees; a reading taken while a batch is applied can count a
//!   block twice or not at all for that moment. The peak is published by the shards, so it
//!   can miss what waits in slots: blocks of [`DIRECT_FROM`] bytes or more never wait, and
//!   the thread's waiting blocks are applied before such a block goes in, so that is less
//!   than `BATCH` × 4 KiB per thread and none of the allocating thread's own at a big block;
//!   every reading of the counters also raises the peak by the bytes it found waiting
//!   (`counters` module docs).
//! - A fork child applies the slots of the parent's other threads (`held_frees::
//!   adopt_in_child`); a thread's batch is applied when it ends (thread-exit destructor) and
//!   for the main thread by the exit summary. A thread that ends without the destructor
//!   keeps its blocks in its slot: still seen by every reader above.
//! - An address can be in a slot and in the table (or in two slots) only when the agent did
//!   not see a free of it (a free inside a signal handler's re-entrant call, or on the thread
//!   holding the whole table): the entry with the higher sequence number is the live one, for
//!   a batch being applied as for a free, realloc or lookup, and the others are dropped as
//!   stale. The hooks record such a free in the freed address's shard, in one of 64 buckets
//!   by address (`blocks::missed_free`): a free, realloc or lookup that finds its address in
//!   the table looks in no slot unless a free at an address of the same shard and bucket was
//!   missed, so one missed free slows only those, not every free of the process (why the
//!   record is always seen in time: `blocks::duplicates_possible`).
//! - The agent's own threads insert directly (their share of the counters stays exact), and
//!   so do reallocs (their swap of old and new entries is one step under both shard locks).
//!
//! Written by its owner thread inside a hook (and by lock holders taking entries), read by
//! lock holders and the counters; never allocates, locks or prints.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::counters::{Counters, Op};
use super::held_frees::{SLOTS, used_slots};
use crate::sync::CacheLine;

/// New blocks a thread holds before they are applied together.
pub const BATCH: usize = 16;
/// Blocks of this many bytes or more are inserted directly: what waits in a slot stays
/// below `BATCH` × 4 KiB per thread, which bounds what the published live bytes (and so
/// the peak) can miss, and a big block's insert is small beside what its program does with it.
pub const DIRECT_FROM: u64 = 4096;

/// One thread's new blocks (indexed like its `held_frees` slot).
#[repr(align(64))]
pub(super) struct NewSlot {
    /// Entries `[0, len)` were written; each is the block's address until it was taken.
    pub(super) len: AtomicU32,
    /// Address of entry i, 0 once taken.
    pub(super) addrs: [AtomicU64; BATCH],
    /// The rest of entry i: the block table's packed words (`blocks::Entry`).
    pub(super) words: [[AtomicU64; 3]; BATCH],
    /// The hooked call (`Op`) of entry i.
    pub(super) ops: [AtomicU8; BATCH],
}

pub(super) static NEW: [NewSlot; SLOTS] = [const {
    NewSlot {
        len: AtomicU32::new(0),
        addrs: [const { AtomicU64::new(0) }; BATCH],
        words: [const { [const { AtomicU64::new(0) }; 3] }; BATCH],
        ops: [const { AtomicU8::new(0) }; BATCH],
    }
}; SLOTS];

/// Slots whose `len` is not 0, so that a free, lookup or mark of an address the table does
/// not hold (a block allocated before the constructor, or not tracked once the table is
/// full) skips reading every thread's slot when no new block waits anywhere
/// ([`any_waiting`]).
///
/// Only a slot's owner changes it: +1 in [`NewSlot::push`] when `len` leaves 0, before the
/// entry is written, and −1 in [`NewSlot::clear`] after `len` is back at 0. So at every
/// moment it is at least the number of non-empty slots (a fork child may inherit it higher,
/// from a thread stopped between the two steps: then it only searches for nothing).
///
/// Why a reader that reads 0 misses no entry it must see: the reader names the block's
/// address, so its call happens after the `malloc` that returned it, and so after the +1
/// that preceded the entry (the same happens-before edge by which it sees `len` with
/// Acquire); by coherence it reads that +1 or a later value. A later value can be 0 only
/// after this slot's −1, which follows its entries being taken, each under its shard's
/// lock: the reader holds the lock of the block's shard, so either the entry was taken
/// before (into the table the reader looked in, or as freed) or it cannot be taken before the
/// reader unlocks, and then the −1 comes after the read (read-write coherence).
static FILLED: CacheLine<AtomicU32> = CacheLine(AtomicU32::new(0));

/// Whether any slot may hold new blocks (see [`FILLED`]). The caller holds the lock of the
/// shard of the block it looks for; the Acquire keeps its reads of the slots after this.
#[inline]
pub(super) fn any_waiting() -> bool {
    FILLED.load(Ordering::Acquire) != 0
}

impl NewSlot {
    /// Adds an entry (its owner, inside a hook): whether the slot is full now and must be
    /// applied; None (nothing added) when it was full already.
    #[inline]
    pub(super) fn push(&self, addr: u64, words: [u64; 3], op: Op) -> Option<bool> {
        let n = self.len.load(Ordering::Relaxed) as usize;
        let at = self.addrs.get(n)?;
        if n == 0 {
            // Counted before the entry is written: the Release stores below publish it too.
            FILLED.fetch_add(1, Ordering::Relaxed);
        }
        for (w, v) in self.words[n].iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        self.ops[n].store(op as u8, Ordering::Relaxed);
        // The words are written before the address that makes them an entry, and the entry
        // before the length that makes readers look at it.
        at.store(addr, Ordering::Release);
        self.len.store(n as u32 + 1, Ordering::Release);
        Some(n + 1 >= BATCH)
    }

    /// Empties the slot (its owner, once every entry was taken; or a fork child for a
    /// thread it did not inherit) and uncounts it in [`FILLED`].
    pub(super) fn clear(&self) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.len.store(0, Ordering::Release);
        FILLED.fetch_sub(1, Ordering::Release);
    }

    /// Whether one more entry leaves the slot short of full, so that adding it applies
    /// nothing (read by the owner).
    #[inline]
    pub(super) fn room_for_one_more(&self) -> bool {
        (self.len.load(Ordering::Relaxed) as usize) + 1 < BATCH
    }

    /// The entries written so far.
    #[inline]
    pub(super) fn written(&self) -> usize {
        (self.len.load(Ordering::Acquire) as usize).min(BATCH)
    }

    /// Entry i's packed words and call.
    #[inline]
    pub(super) fn entry(&self, i: usize) -> ([u64; 3], Op) {
        let w = &self.words[i];
        (
            [
                w[0].load(Ordering::Relaxed),
                w[1].load(Ordering::Relaxed),
                w[2].load(Ordering::Relaxed),
            ],
            op_of(self.ops[i].load(Ordering::Relaxed)),
        )
    }
}

fn op_of(code: u8) -> Op {
    const ALL: [Op; super::counters::OPS] = [
        Op::Malloc,
        Op::Calloc,
        Op::Realloc,
        Op::Reallocarray,
        Op::Free,
        Op::PosixMemalign,
        Op::AlignedAlloc,
        Op::Memalign,
        Op::Valloc,
        Op::Pvalloc,
    ];
    ALL.get(code as usize).copied().unwrap_or(Op::Malloc)
}

/// Counts the blocks waiting in slots as allocated and live (see the module docs); returns
/// their bytes.
pub fn account(c: &mut Counters) -> u64 {
    let mut bytes = 0;
    for slot in &NEW[..used_slots()] {
        for i in 0..slot.written() {
            let addr = slot.addrs[i].load(Ordering::Acquire);
            if addr == 0 {
                continue;
            }
            let (words, op) = slot.entry(i);
            // Taken (and possibly rewritten) meanwhile: counted by its shard instead.
            if slot.addrs[i].load(Ordering::Acquire) != addr {
                continue;
            }
            c.calls[op as usize] += 1;
            bytes += words[1] & ((1 << 48) - 1);
            c.live_blocks = c.live_blocks.wrapping_add(1);
        }
    }
    c.allocated_bytes += bytes;
    bytes
}

/// Blocks waiting in slots now (a capture's size hint).
pub fn waiting() -> usize {
    NEW[..used_slots()]
        .iter()
        .map(|s| {
            (0..s.written())
                .filter(|&i| s.addrs[i].load(Ordering::Relaxed) != 0)
                .count()
        })
        .sum()
}
