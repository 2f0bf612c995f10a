//! New blocks held per thread and applied to the block table in batches (buffered inserts),
//! and most of them never reaching it (the nursery).
//!
//! Why: recording a block in the table cost each allocation four atomic read-modify-writes
//! (the sequence number, the shard lock, the published live bytes, the unlock) and, on a big
//! heap, one cache and TLB miss on the new entry's slot (BENCHMARKS.md "Real programs"). A
//! program thread instead writes its new block into a slot of its own (the same slot number
//! as its held frees, `held_frees`) and returns. The slot is a ring of [`NURSERY`] entries:
//! when it is full, its thread applies the oldest [`BATCH`] together: it prefetches their
//! table slots, takes each shard lock once for all of that shard's blocks (glibc gives a
//! thread's blocks one arena, so mostly one shard), publishes its live bytes once, and empties
//! those entries (`blocks::apply_oldest`). Only the sequence number is still taken per block,
//! so it stays the allocation order across threads.
//!
//! Most blocks die young: sqlite3 frees 99.9% of its blocks within 32 allocations of its
//! thread, and reallocates its blocks right after allocating them (BENCHMARKS.md "Real
//! programs"). So a block waits for at least `NURSERY − BATCH` (48) later allocations of its
//! thread — unless its thread's blocks keep outliving that: a thread whose batches, when
//! applied, still hold most of their blocks (perl's, which frees 99% of its blocks more than
//! 2,048 allocations later) keeps only `BATCH` waiting, applies them all together and
//! starts again at index 0, so that its slot is a few cache lines instead of 37
//! ([`NewSlot::limit`]). When that thread frees or reallocates a waiting block, it is done
//! in the slot:
//! - A free of a block waiting in the freeing thread's own slot ([`NewSlot::cancel`], found
//!   through the slot's owner-private index, two hints a bucket checked against the entry)
//!   empties the entry with a plain store (no locked instruction), counts the block as
//!   allocated and freed in the slot's own counters, and hands it to libc at once: no table,
//!   no lock, no held free.
//! - A realloc of such a block marks its entry moving in place, and the new block (under
//!   [`DIRECT_FROM`] bytes) takes the same entry when libc returns (`blocks::
//!   begin_move_waiting`, `blocks::finish_move_waiting`), without a lock. The old entry is
//!   copied aside first and the entry named as being rewritten, then emptied while its words
//!   change ([`NewSlot::rewrite`]): a capture stopping the owner halfway takes the old block,
//!   moving, from the copy, so it sees the old block moving or the new one, as it does in
//!   the table; another thread looking for the old address (libc may have handed it out
//!   again) never finds the new words under it; readers leave a moving entry to its owner.
//!
//! The one rule that makes it correct: **an entry leaves a slot only with its block's shard
//! lock held, and goes straight into that shard's table (or is accounted as freed there)
//! under the same lock** — or it leaves it by its owner's store when the program frees it
//! (a cancel). A taker marks the entry [`TAKEN`] before emptying it, and the owner reads the
//! mark after its store: a capture that takes entries while the owner is stopped between its
//! look and its store is noticed, and the free goes the usual way (`NewSlot::cancel`); only
//! the program's own race (another thread freeing or looking up the same block at the same
//! moment) can make both count it. So whoever holds a shard's lock sees each
//! of that shard's blocks either in the table or in some thread's slot, never in neither, and
//! an entry it sees in a slot cannot change under it: its owner rewrites a slot entry only
//! after it was emptied, or (a realloc) emptied while its words change, a capture taking
//! the copy set aside meanwhile ([`NewSlot::rewrite`]); a fork child or a thread's exit puts
//! back a rewrite its owner never finished (`NewSlot::undo_rewrite`). Every reader of the table uses it:
//! - A free, realloc, lookup or size query that does not find its address in the table (or
//!   finds there only another thread's realloc in progress, which a new block at the same
//!   address supersedes) looks through the slots (the calling thread's first) and takes the
//!   entry (`blocks::live_at`, `blocks::mark`): a block freed by another thread before its
//!   allocating thread applied it is neither reported unknown nor left behind in the table. A
//!   realloc in progress in a slot is left to its owner (a new block there supersedes it).
//! - A capture holds every shard lock (`blocks::Frozen`): after the world is stopped, its
//!   `listed` first moves every slot's blocks into the table (a realloc's moving entry as
//!   moving; its owner then finishes it in the table). A block being written into a slot at
//!   that moment is not yet returned by malloc (its thread is stopped inside the hook), so
//!   leaving it out is right; a block being cancelled is inside its free. The owner's later
//!   batch finds the entries taken. (In the scan child this happens to the child's copy only.)
//! - The live counters count the blocks in slots as allocated ([`account`]), and the
//!   cancelled ones as allocated and freed: exact whenever no hook runs, like held frees; a
//!   reading taken while a batch is applied can count a block twice or not at all for that
//!   moment. The peak is published by the shards, so it can miss what waits in slots: blocks
//!   of [`DIRECT_FROM`] bytes or more never wait, so that is less than `NURSERY` × 4 KiB per
//!   thread; when such a block goes in, the peak is raised by the bytes its thread has
//!   waiting (`counters::raise_peak_above_published`), and every reading of the counters also
//!   raises it by the bytes it found waiting (`counters` module docs). A block allocated and
//!   freed while it waited reaches no shard: the peak misses it unless a reading or a big
//!   block came in between.
//! - A fork child applies the slots of the parent's other threads (`held_frees::
//!   adopt_in_child`); a thread's slot is applied when it ends (thread-exit destructor) and
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
//!   record is always seen in time: `blocks::duplicates_possible`); and from the first missed
//!   free on, a cancel or an in-slot realloc happens only at addresses of other buckets.
//! - The agent's own threads insert directly (their share of the counters stays exact), and
//!   so do reallocs of blocks not waiting in the thread's slot (their swap of old and new
//!   entries is one step under both shard locks).
//!
//! Written by its owner thread inside a hook (and by lock holders taking entries), read by
//! lock holders and the counters; never allocates, locks or prints.

use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering, compiler_fence,
};

use super::counters::{Counters, OPS, Op};
use super::held_frees::{SLOTS, used_slots};
use crate::sync::CacheLine;

/// New blocks a thread keeps waiting at most (its nursery); when it is full, the oldest
/// [`BATCH`] are applied together, so a block waits for at least `NURSERY − BATCH` of its
/// thread's later allocations before it can reach the table.
pub const NURSERY: usize = 64;
/// New blocks applied together (the oldest of a full nursery).
pub const BATCH: usize = 16;
/// Blocks of this many bytes or more are inserted directly: what waits in a slot stays
/// below `NURSERY` × 4 KiB per thread, which bounds what the published live bytes (and so
/// the peak) can miss, and a big block's insert is small beside what its program does with it.
pub const DIRECT_FROM: u64 = 4096;
/// Blocks of a batch of [`BATCH`] that, found still waiting when it is applied, make it a
/// batch of long-lived blocks (see [`NewSlot::limit`]).
pub(super) const OUTLIVED: u32 = 14;
/// Batches in a row of long-lived blocks that make a thread wait only [`BATCH`].
pub(super) const SHORT_AFTER: u32 = 8;
/// Batches after which a thread waiting only [`BATCH`] tries [`NURSERY`] again.
pub(super) const PROBE_EVERY: u32 = 1024;
/// Frees in a row that found their block nowhere in the slot before the search is skipped.
const CANCEL_MISSES: u32 = 64;
/// Once skipped, one free in this many searches the slot again.
const CANCEL_RETRY: u32 = 16;
/// Buckets of a slot's owner-private index (see [`NewSlot::index`]).
const INDEX: usize = 256;
/// Set in an entry's `ops` byte by whoever takes the entry out of the slot
/// ([`NewSlot::take`]): how the owner's lock-free cancel learns that its entry was taken
/// between its look and its store ([`NewSlot::cancel`]).
const TAKEN: u8 = 0x80;

/// One thread's new blocks (indexed like its `held_frees` slot): a ring of [`NURSERY`]
/// entries, position `n` at index `n % NURSERY`. Whenever every entry was applied, the next
/// position is the next multiple of [`NURSERY`] (index 0): a thread that keeps only
/// [`BATCH`] waiting ([`NewSlot::limit`]) uses the same few cache lines over and over.
#[repr(align(64))]
pub(super) struct NewSlot {
    /// Positions written so far (only the owner reads and writes it).
    tail: AtomicU32,
    /// Positions before this one were applied, a multiple of [`BATCH`] (owner only).
    head: AtomicU32,
    /// Blocks waiting at which the oldest [`BATCH`] are applied (owner only): [`NURSERY`],
    /// or [`BATCH`] for a thread whose blocks outlive the nursery. A thread whose blocks live
    /// long (perl's: 99% are freed more than 2,048 of its allocations later, and while it
    /// builds its heap it allocates 280 times for each free) gains nothing from blocks
    /// waiting longer and pays for a ring four times the size in cache lines: after
    /// [`SHORT_AFTER`] batches in a row of which [`OUTLIVED`] blocks or more were still
    /// waiting when applied, it keeps only [`BATCH`] waiting (all applied together, the ring
    /// restarting at index 0); it goes back to [`NURSERY`] as soon as a batch of its has
    /// fewer, and tries [`NURSERY`] again every [`PROBE_EVERY`] batches (blocks that die
    /// after more than [`BATCH`] allocations would not show otherwise).
    limit: AtomicU32,
    /// With [`NURSERY`] as the limit, the batches in a row of long-lived blocks; with
    /// [`BATCH`], the batches applied since (owner only).
    streak: AtomicU32,
    /// Whether the slot is counted in [`FILLED`] (owner only, or a fork child clearing it).
    counted: AtomicBool,
    /// The owner's frees in a row that found no block of theirs here ([`NewSlot::cancel`];
    /// owner only), and how many frees are still to skip the search: a thread whose frees
    /// are of old blocks (perl's) stops paying for it, and tries again every
    /// [`CANCEL_RETRY`]th free.
    misses: AtomicU32,
    skip: AtomicU32,
    /// Address of entry i, 0 when the entry is empty (never written, taken or cancelled).
    /// Readers look at every entry: the non-zero ones are the blocks waiting.
    pub(super) addrs: [AtomicU64; NURSERY],
    /// The rest of entry i: the block table's packed words (`blocks::Entry`).
    pub(super) words: [[AtomicU64; 3]; NURSERY],
    /// The hooked call (`Op`) of entry i, with [`TAKEN`] once anyone but the owner's cancel
    /// emptied it ([`NewSlot::take`]); the owner's next write of the entry clears it.
    pub(super) ops: [AtomicU8; NURSERY],
    /// Owner-private: for each bucket of addresses (`index_bucket`), 1 + the index of the
    /// newest entry written there (low byte) and of the one before it (high byte), 0 for
    /// none. Hints only: an entry one names is the address's only when its `addrs` word
    /// still holds that address (a taken entry is empty). A waiting block whose bucket two
    /// newer blocks took is not found here: its free is held and finds it under the shard
    /// lock (`blocks::find_new`). With one hint a bucket, 6% of sqlite3's frees went that
    /// way (77k of 1.25M on 50k rows, BENCHMARKS.md "Real programs"), each costing about
    /// 400 instructions more than a cancel.
    index: [AtomicU16; INDEX],
    /// Blocks allocated and freed by the owner while they waited here ([`NewSlot::cancel`]),
    /// or reallocated into a new block that took their entry ([`NewSlot::count_moved`]):
    /// they never reach a shard, so they are counted here (calls per allocating op, frees,
    /// bytes). Written by the owner only, read by [`account`].
    cancelled_calls: [AtomicU64; OPS],
    cancelled_frees: AtomicU64,
    cancelled_bytes: AtomicU64,
    /// 1 + the index of the entry its owner is rewriting for a finished realloc, 0 for none
    /// ([`NewSlot::rewrite`]): while set, that entry's words may be half old, half new, and
    /// its block is the one in `shadow`.
    replacing: AtomicU32,
    /// The block of the entry being rewritten, as it was (address, then its three packed
    /// words, marked moving) and its call.
    shadow: [AtomicU64; 4],
    shadow_op: AtomicU8,
    /// Set by a capture that took the shadow's block into the table while its owner was
    /// stopped in the middle of a rewrite (its owner clears it before the next one).
    shadow_taken: AtomicBool,
}

/// How an owner's rewrite of an entry for a finished realloc ([`NewSlot::rewrite`]) went.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Rewrite {
    /// The new block took the entry.
    Done,
    /// The entry was taken before (a capture moved the old block into the table): nothing
    /// written; the realloc finishes in the table.
    TakenBefore,
    /// The new block took the entry, but a capture took the old block, moving, into the table
    /// meanwhile (from the shadow): its entry there must go.
    OldTaken,
}

pub(super) static NEW: [NewSlot; SLOTS] = [const {
    NewSlot {
        tail: AtomicU32::new(0),
        head: AtomicU32::new(0),
        limit: AtomicU32::new(NURSERY as u32),
        streak: AtomicU32::new(0),
        counted: AtomicBool::new(false),
        misses: AtomicU32::new(0),
        skip: AtomicU32::new(0),
        addrs: [const { AtomicU64::new(0) }; NURSERY],
        words: [const { [const { AtomicU64::new(0) }; 3] }; NURSERY],
        ops: [const { AtomicU8::new(0) }; NURSERY],
        index: [const { AtomicU16::new(0) }; INDEX],
        cancelled_calls: [const { AtomicU64::new(0) }; OPS],
        cancelled_frees: AtomicU64::new(0),
        cancelled_bytes: AtomicU64::new(0),
        replacing: AtomicU32::new(0),
        shadow: [const { AtomicU64::new(0) }; 4],
        shadow_op: AtomicU8::new(0),
        shadow_taken: AtomicBool::new(false),
    }
}; SLOTS];

/// Slots that may hold new blocks, so that a free, lookup or mark of an address the table
/// does not hold (a block allocated before the constructor, or not tracked once the table is
/// full) skips reading every thread's slot when no new block waits anywhere
/// ([`any_waiting`]).
///
/// Only a slot's owner changes it: +1 in [`NewSlot::push`] when the ring is empty and the slot
/// not counted (`NewSlot::counted`), before the entry is written, and −1 in [`NewSlot::clear`]
/// once every entry was applied. So at every moment it is at least the number of non-empty
/// slots (a fork child may inherit it higher, from a thread stopped between the count and its
/// flag, which is set after the +1 and cleared before the −1: then it only searches for
/// nothing; a slot whose entries were all cancelled or applied in batches stays counted until
/// its next full apply, so that a thread keeping [`BATCH`] waiting does not count and uncount
/// itself on every batch).
///
/// Why a reader that reads 0 misses no entry it must see: the reader names the block's
/// address, so its call happens after the `malloc` that returned it, and so after the +1
/// that preceded the entry (the same happens-before edge by which it sees the entry with
/// Acquire); by coherence it reads that +1 or a later value. A later value can be 0 only
/// after this slot's −1, which follows its entries being taken, each under its shard's
/// lock: the reader holds the lock of the block's shard, so either the entry was taken
/// before (into the table the reader looked in, or as freed) or it cannot be taken before the
/// reader unlocks, and then the −1 comes after the read (read-write coherence). (The owner
/// cancels an entry without a lock, but only when the program frees that block: a reader
/// naming it then races the program's own free.)
static FILLED: CacheLine<AtomicU32> = CacheLine(AtomicU32::new(0));

/// Whether any slot may hold new blocks (see [`FILLED`]). The caller holds the lock of the
/// shard of the block it looks for; the Acquire keeps its reads of the slots after this.
#[inline]
pub(super) fn any_waiting() -> bool {
    FILLED.load(Ordering::Acquire) != 0
}

/// The bucket of `addr` in a slot's index.
#[inline]
fn index_bucket(addr: u64) -> usize {
    ((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 8)) as usize
}

/// A counter with a single writer: a plain load and store, no lock prefix.
#[inline]
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl NewSlot {
    /// Whether the ring takes one more entry without applying its oldest ones (read by the
    /// owner).
    #[inline]
    pub(super) fn has_room(&self) -> bool {
        self.tail
            .load(Ordering::Relaxed)
            .wrapping_sub(self.head.load(Ordering::Relaxed))
            < self.limit.load(Ordering::Relaxed)
    }

    /// Adds an entry (its owner, inside a hook): whether the ring holds its limit now
    /// ([`NewSlot::limit`]), so that its oldest [`BATCH`] must be applied
    /// ([`NewSlot::oldest`]); None (nothing added) when it was full already, or the entry to
    /// write was not empty (a broken invariant). Inlined into the hooks' fast path: a call
    /// there cost 15 instructions a block in saved registers and moved arguments (callgrind:
    /// sqlite3's 50k rows 19M, perl's 300k keys 9M).
    #[inline(always)]
    pub(super) fn push(&self, addr: u64, words: [u64; 3], op: Op) -> Option<bool> {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        let used = tail.wrapping_sub(head) as usize;
        if used >= NURSERY {
            return None;
        }
        let i = tail as usize % NURSERY;
        let at = &self.addrs[i];
        if at.load(Ordering::Relaxed) != 0 {
            return None;
        }
        if used == 0 && !self.counted.load(Ordering::Relaxed) {
            // Counted before the entry is written: the Release stores below publish it too.
            // The flag with Release (a plain store on x86): neither the compiler nor the CPU
            // may move it before the +1, or a fork child could inherit the flag without the +1
            // and its `clear` leave FILLED one too low. `clear` is the mirror: the flag cleared
            // first, then the −1 with Release.
            FILLED.fetch_add(1, Ordering::Relaxed);
            self.counted.store(true, Ordering::Release);
        }
        for (w, v) in self.words[i].iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        self.ops[i].store(op as u8, Ordering::Relaxed);
        // The words are written before the address that makes them an entry.
        at.store(addr, Ordering::Release);
        self.hint(addr, i);
        self.tail.store(tail.wrapping_add(1), Ordering::Relaxed);
        Some(used as u32 + 1 >= self.limit.load(Ordering::Relaxed))
    }

    /// The indexes of the oldest [`BATCH`] entries, to be applied, and marks them applied
    /// (the owner; the caller applies them at once, emptying each, then tells
    /// [`NewSlot::applied`] what it found). Empty unless the ring holds its limit.
    #[inline]
    pub(super) fn oldest(&self) -> std::ops::Range<usize> {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(head) < self.limit.load(Ordering::Relaxed) {
            return 0..0;
        }
        let mut next = head.wrapping_add(BATCH as u32);
        if next == tail {
            // Every entry applied once the caller is done: the next one goes to index 0
            // (only the owner writes entries, after its caller returns).
            next = restart_after(tail);
            self.tail.store(next, Ordering::Relaxed);
        }
        self.head.store(next, Ordering::Relaxed);
        let from = head as usize % NURSERY;
        from..from + BATCH
    }

    /// The owner applied a batch from [`NewSlot::oldest`], `outlived` of whose blocks were
    /// still waiting: adapts how many it keeps waiting ([`NewSlot::limit`]).
    #[inline]
    pub(super) fn applied(&self, outlived: u32) {
        let streak = self.streak.load(Ordering::Relaxed);
        if self.limit.load(Ordering::Relaxed) == NURSERY as u32 {
            if outlived < OUTLIVED {
                if streak != 0 {
                    self.streak.store(0, Ordering::Relaxed);
                }
            } else if streak + 1 >= SHORT_AFTER {
                self.set_limit(BATCH);
            } else {
                self.streak.store(streak + 1, Ordering::Relaxed);
            }
        } else if outlived < OUTLIVED || streak + 1 >= PROBE_EVERY {
            self.set_limit(NURSERY);
        } else {
            self.streak.store(streak + 1, Ordering::Relaxed);
        }
    }

    /// Switches the limit ([`NewSlot::limit`]), its streak starting again.
    #[cold]
    #[inline(never)]
    fn set_limit(&self, limit: usize) {
        self.limit.store(limit as u32, Ordering::Relaxed);
        self.streak.store(0, Ordering::Relaxed);
    }

    /// A thread claims this slot (after its last owner gave it up): it starts as a new
    /// thread, with [`NURSERY`] as its limit and its frees searching the slot.
    pub(super) fn new_owner(&self) {
        self.limit.store(NURSERY as u32, Ordering::Relaxed);
        self.streak.store(0, Ordering::Relaxed);
        self.misses.store(0, Ordering::Relaxed);
        self.skip.store(0, Ordering::Relaxed);
    }

    /// The owner frees `addr`: when it still waits here (never seen by the table or anyone
    /// else), the entry is emptied and the block counted as allocated and freed, and the
    /// caller hands it to libc. False, nothing done, when it is not found ([`NewSlot::
    /// find_own`]), or was taken meanwhile (by a capture, or a reader on another thread): the
    /// free then goes the usual way, which finds it in the table.
    #[inline]
    pub(super) fn cancel(&self, addr: u64) -> bool {
        let skip = self.skip.load(Ordering::Relaxed);
        if skip != 0 {
            self.skip.store(skip - 1, Ordering::Relaxed);
            return false;
        }
        let Some(i) = self.find_own(addr) else {
            self.missed();
            return false;
        };
        self.cancel_found(i, addr)
    }

    /// The rest of a cancel, once the owner's look found `addr` in entry i.
    #[inline(always)]
    fn cancel_found(&self, i: usize, addr: u64) -> bool {
        // A plain store, no compare-and-swap: a locked instruction cost each free about 4 ns
        // (BENCHMARKS.md "Real programs"). Who else empties entries: a capture without a
        // scanning child (the others take the child's copy), and only while this thread is
        // stopped, so at an instruction boundary of this sequence; or another thread freeing
        // or looking up this same block, a race of the program's own (a double free or a use
        // after free). A taker marks the entry TAKEN before emptying it: taken before our
        // look, the look fails; between the look and the store, the mark is seen below and the
        // free goes the usual way, which finds the block where the taker put it; after the
        // store, the taker found the entry empty and left it alone.
        self.addrs[i].store(0, Ordering::Relaxed);
        // Only the order of this thread's own instructions matters (see above): the mark is
        // read after the store.
        compiler_fence(Ordering::SeqCst);
        let code = self.ops[i].load(Ordering::Relaxed);
        if code & TAKEN != 0 {
            return false;
        }
        self.misses.store(0, Ordering::Relaxed);
        self.unhint(addr, i);
        // Only what is counted is read (an atomic load is never left out, even unused), and
        // the call's code is its counter's index (a code out of range, which `push` never
        // writes, counts as a malloc, as `op_of` reads it).
        let size = self.words[i][1].load(Ordering::Relaxed) & ((1 << 48) - 1);
        let calls = &self.cancelled_calls;
        bump(calls.get(usize::from(code)).unwrap_or(&calls[0]), 1);
        bump(&self.cancelled_frees, 1);
        bump(&self.cancelled_bytes, size);
        true
    }

    /// A free of the owner found no block of its own here: after [`CANCEL_MISSES`] in a row,
    /// the next `CANCEL_RETRY − 1` frees skip the search (a search that finds nothing costs
    /// a program whose frees are of old blocks, like perl's, more than it saves).
    #[cold]
    fn missed(&self) {
        let misses = self.misses.load(Ordering::Relaxed) + 1;
        if misses >= CANCEL_MISSES {
            self.skip.store(CANCEL_RETRY - 1, Ordering::Relaxed);
            self.misses.store(CANCEL_MISSES - 1, Ordering::Relaxed);
        } else {
            self.misses.store(misses, Ordering::Relaxed);
        }
    }

    /// The index of the owner's entry of `addr`, found through the index (the owner only; a
    /// hint: it may be taken the next moment, unless the caller holds `addr`'s shard lock).
    #[inline]
    pub(super) fn find_own(&self, addr: u64) -> Option<usize> {
        let hints = self.index[index_bucket(addr)].load(Ordering::Relaxed);
        self.named(hints & 0xff, addr)
            .or_else(|| self.named(hints >> 8, addr))
    }

    /// The entry a hint of the index names (1 + its index), when it holds `addr`.
    #[inline(always)]
    fn named(&self, hint: u16, addr: u64) -> Option<usize> {
        let i = (hint as usize).checked_sub(1)?;
        (self.addrs.get(i)?.load(Ordering::Relaxed) == addr).then_some(i)
    }

    /// Records entry i as the newest of `addr`'s bucket in the index; the bucket's newest
    /// before it stays as its second, unless that was entry i itself (reused for another
    /// address of the bucket): then the second stays, so the bucket never names i twice.
    #[inline(always)]
    fn hint(&self, addr: u64, i: usize) {
        let bucket = &self.index[index_bucket(addr)];
        let hints = bucket.load(Ordering::Relaxed);
        let me = i as u16 + 1;
        let kept = if hints & 0xff == me {
            hints >> 8
        } else {
            hints
        };
        bucket.store(kept << 8 | me, Ordering::Relaxed);
    }

    /// Forgets entry i (at `addr`) in the index: the bucket's other entry, if any, stays.
    #[inline]
    fn unhint(&self, addr: u64, i: usize) {
        let bucket = &self.index[index_bucket(addr)];
        let hints = bucket.load(Ordering::Relaxed);
        let me = i as u16 + 1;
        if hints & 0xff == me {
            bucket.store(hints >> 8, Ordering::Relaxed);
        } else if hints >> 8 == me {
            bucket.store(hints & 0xff, Ordering::Relaxed);
        }
    }

    /// The owner marks its entry i moving (a realloc of its block begins): `w2` is the
    /// entry's third word with the mark. False when a capture took the entry between the
    /// owner's look and this store (see [`NewSlot::cancel`] for why a plain store and the
    /// [`TAKEN`] mark read after it are enough): the realloc then goes through the table.
    /// A capture taking the entry after the store takes it moving, and the rewrite notices.
    #[inline]
    pub(super) fn mark_moving(&self, i: usize, w2: u64) -> bool {
        self.words[i][2].store(w2, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.ops[i].load(Ordering::Relaxed) & TAKEN == 0
    }

    /// The owner replaces its entry i, the moving block `old` (its address and packed words)
    /// made by `old_op`, by a new block at `addr` (a realloc finished with both in this
    /// slot), without a lock: nobody but a capture (only while the owner is stopped) takes
    /// an entry whose block is inside its realloc, and nobody can look for `addr` yet. So
    /// each step below is seen whole, and a capture between two of them sees the old block
    /// moving or the new one, never a torn entry: the old entry is copied to `shadow` and
    /// `replacing` names the entry before any of its words changes, and a capture that
    /// finds `replacing` set takes the shadow instead of the entry (`shadow_taken`).
    pub(super) fn rewrite(
        &self,
        i: usize,
        old: (u64, [u64; 3]),
        old_op: Op,
        addr: u64,
        words: [u64; 3],
        op: Op,
    ) -> Rewrite {
        if !self.start_rewrite(i, old, old_op) {
            return Rewrite::TakenBefore;
        }
        self.end_rewrite(i, old.0, addr, words, op)
    }

    /// The first half of [`NewSlot::rewrite`]: the shadow written and `replacing` set; false
    /// (nothing to undo) when the entry was taken before.
    #[inline(always)]
    pub(super) fn start_rewrite(&self, i: usize, old: (u64, [u64; 3]), old_op: Op) -> bool {
        self.shadow_taken.store(false, Ordering::Relaxed);
        self.shadow[0].store(old.0, Ordering::Relaxed);
        for (w, v) in self.shadow[1..].iter().zip(old.1) {
            w.store(v, Ordering::Relaxed);
        }
        self.shadow_op.store(old_op as u8, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.replacing.store(i as u32 + 1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // Taken before `replacing` was set: the entry is the capture's now.
        if self.addrs[i].load(Ordering::Relaxed) != old.0
            || self.ops[i].load(Ordering::Relaxed) & TAKEN != 0
        {
            self.replacing.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The second half of [`NewSlot::rewrite`]: the new block written over entry i, then
    /// `replacing` cleared.
    #[inline(always)]
    pub(super) fn end_rewrite(
        &self,
        i: usize,
        old: u64,
        addr: u64,
        words: [u64; 3],
        op: Op,
    ) -> Rewrite {
        // Empty while its words change: another thread looking for the old address (libc may
        // have given it away already) must not find the new words under it. A capture takes
        // the shadow meanwhile.
        self.addrs[i].store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        for (w, v) in self.words[i].iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        self.ops[i].store(op as u8, Ordering::Relaxed);
        self.addrs[i].store(addr, Ordering::Release);
        self.unhint(old, i);
        self.hint(addr, i);
        compiler_fence(Ordering::SeqCst);
        self.replacing.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        if self.shadow_taken.load(Ordering::Relaxed) {
            Rewrite::OldTaken
        } else {
            Rewrite::Done
        }
    }

    /// Entry i as a capture must see it: the shadow while its owner rewrites it (see
    /// [`NewSlot::rewrite`]; `true` with it), else the entry (its address 0 when empty).
    pub(super) fn seen(&self, i: usize) -> (u64, [u64; 3], Op, bool) {
        if self.rewriting(i) {
            let w = |j: usize| self.shadow[j].load(Ordering::Relaxed);
            let op = op_of(self.shadow_op.load(Ordering::Relaxed));
            return (w(0), [w(1), w(2), w(3)], op, true);
        }
        let addr = self.addrs[i].load(Ordering::Acquire);
        let (words, op) = self.entry(i);
        (addr, words, op, false)
    }

    /// Puts back the entry of a rewrite that never finished (its owner gone or not running:
    /// `blocks::apply_new`): the old block, moving, as the shadow holds it (or nothing, when a
    /// capture took it from the shadow already).
    pub(super) fn undo_rewrite(&self) {
        let replacing = self.replacing.load(Ordering::Relaxed);
        let Some(i) = (replacing as usize).checked_sub(1).filter(|&i| i < NURSERY) else {
            return;
        };
        if self.shadow_taken.load(Ordering::Relaxed) {
            self.addrs[i].store(0, Ordering::Release);
        } else {
            for (w, s) in self.words[i].iter().zip(&self.shadow[1..]) {
                w.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            self.ops[i].store(self.shadow_op.load(Ordering::Relaxed), Ordering::Relaxed);
            self.addrs[i].store(self.shadow[0].load(Ordering::Relaxed), Ordering::Release);
        }
        self.replacing.store(0, Ordering::Relaxed);
    }

    /// A capture took the shadow's block (see [`NewSlot::seen`]).
    pub(super) fn take_shadow(&self) {
        self.shadow_taken.store(true, Ordering::Relaxed);
    }

    /// Whether the owner is rewriting entry i ([`NewSlot::rewrite`]).
    pub(super) fn rewriting(&self, i: usize) -> bool {
        self.replacing.load(Ordering::Relaxed) == i as u32 + 1
    }

    /// The owner's waiting block of `size` bytes, allocated by `op`, was reallocated and its
    /// new block took its entry ([`NewSlot::rewrite`]): counted as allocated and released, no
    /// free, as a shard counts a realloc's old block (its counters, not a shard's: their
    /// sum is the same, and a shard's would cost the realloc five read-modify-writes and a
    /// settle instead of two).
    pub(super) fn count_moved(&self, op: Op, size: u64) {
        bump(&self.cancelled_calls[op as usize], 1);
        bump(&self.cancelled_bytes, size);
    }

    /// Empties the owner's entry i (at `addr`), under `addr`'s shard lock.
    pub(super) fn empty(&self, i: usize, addr: u64) {
        self.take(i);
        self.unhint(addr, i);
    }

    /// Takes entry i out of the slot (its owner applying it, a capture, or another thread
    /// that found its block here, each holding the lock of the block's shard): marked
    /// [`TAKEN`] first, then emptied, so that an owner's cancel of it that began meanwhile
    /// notices ([`NewSlot::cancel`]).
    pub(super) fn take(&self, i: usize) {
        let op = self.ops[i].load(Ordering::Relaxed);
        self.ops[i].store(op | TAKEN, Ordering::Relaxed);
        self.addrs[i].store(0, Ordering::Release);
    }

    /// Marks every entry applied (its owner, once each was taken; or a fork child for a
    /// thread it did not inherit) and uncounts the slot in [`FILLED`].
    pub(super) fn clear(&self) {
        let tail = self.tail.load(Ordering::Relaxed);
        if self.head.load(Ordering::Relaxed) != tail {
            let next = restart_after(tail);
            self.tail.store(next, Ordering::Relaxed);
            self.head.store(next, Ordering::Release);
        }
        if self.counted.load(Ordering::Relaxed) {
            // The flag first (the −1's Release keeps it before): a fork child that inherits
            // the slot between the two steps keeps the count higher, never lower (see FILLED;
            // `push` is the mirror).
            self.counted.store(false, Ordering::Relaxed);
            FILLED.fetch_sub(1, Ordering::Release);
        }
    }

    /// Every entry's index, the ring's oldest position first: the waiting blocks oldest
    /// first. All of them, not only those up to `tail`: an owner stopped inside `push` has
    /// written its entry but not yet moved `tail` (a capture takes that entry too).
    pub(super) fn oldest_first(&self) -> impl Iterator<Item = usize> {
        let head = self.head.load(Ordering::Relaxed) as usize;
        (0..NURSERY).map(move |j| (head + j) % NURSERY)
    }

    /// The bytes of the blocks waiting here (the owner, before a big block: `blocks::insert_new`).
    pub(super) fn waiting_bytes(&self) -> u64 {
        (0..NURSERY)
            .filter(|&i| self.addrs[i].load(Ordering::Relaxed) != 0)
            .map(|i| self.words[i][1].load(Ordering::Relaxed) & ((1 << 48) - 1))
            .sum()
    }

    /// The blocks waiting here (for tests and the size hint).
    pub(super) fn waiting(&self) -> usize {
        (0..NURSERY)
            .filter(|&i| self.addrs[i].load(Ordering::Relaxed) != 0)
            .count()
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

/// The position after `tail` at which an emptied ring starts again: the next multiple of
/// [`NURSERY`] (index 0; also a multiple of [`BATCH`], so that [`NewSlot::oldest`] keeps
/// returning whole runs of indexes, and `tail` itself when it is one). Positions wrap at
/// 2^32, a multiple of both.
fn restart_after(tail: u32) -> u32 {
    const { assert!(NURSERY.is_power_of_two() && NURSERY.is_multiple_of(BATCH)) };
    let mask = NURSERY as u32 - 1;
    tail.wrapping_add(mask) & !mask
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
    ALL.get(usize::from(code & !TAKEN))
        .copied()
        .unwrap_or(Op::Malloc)
}

/// Counts the blocks waiting in slots as allocated and live (see the module docs); returns
/// their bytes.
pub fn account(c: &mut Counters) -> u64 {
    let mut bytes = 0;
    for slot in &NEW[..used_slots()] {
        for (op, calls) in slot.cancelled_calls.iter().enumerate() {
            c.calls[op] += calls.load(Ordering::Relaxed);
        }
        c.calls[Op::Free as usize] += slot.cancelled_frees.load(Ordering::Relaxed);
        let cancelled = slot.cancelled_bytes.load(Ordering::Relaxed);
        c.allocated_bytes += cancelled;
        c.freed_bytes += cancelled;
        for i in 0..NURSERY {
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
    NEW[..used_slots()].iter().map(NewSlot::waiting).sum()
}

#[cfg(test)]
mod tests {
    use super::super::blocks::{apply_new, freeze, insert_new, remove};
    use super::super::held_frees::own_index;
    use super::*;
    use crate::sys;

    /// This thread's tid and its nursery slot's index, the slot emptied; and `n` addresses
    /// from `base` up that fall in one bucket of the slot's index.
    fn emptied_slot_and_one_bucket(base: u64, n: usize) -> (u32, usize, Vec<u64>) {
        let tid = sys::current_tid();
        let k = own_index(sys::thread_state(), tid).expect("a batch slot");
        apply_new(k);
        let bucket = index_bucket(base);
        let same = (0..)
            .map(|j| base + 64 * j)
            .filter(|&a| index_bucket(a) == bucket)
            .take(n)
            .collect();
        (tid, k, same)
    }

    #[test]
    fn a_free_finds_its_waiting_block_behind_a_newer_one_of_its_index_bucket() {
        // Addresses of this test only.
        const BASE: u64 = 0x6100_0000_0000;
        let (tid, k, same) = emptied_slot_and_one_bucket(BASE, 5);
        let slot = &NEW[k];
        let alloc = |addr: u64| assert!(insert_new(addr, 24, tid, 0, Op::Malloc, k));
        let frees = slot.cancelled_frees.load(Ordering::Relaxed);
        // The older of two, while the newer holds the bucket's first hint.
        alloc(same[0]);
        alloc(same[1]);
        assert!(slot.cancel(same[0]), "found behind the newer block");
        assert!(slot.cancel(same[1]));
        // Of three, the newest freed first gives its place back to the one before it.
        alloc(same[2]);
        alloc(same[3]);
        alloc(same[4]);
        assert!(slot.cancel(same[4]));
        assert!(slot.cancel(same[3]), "found once the newest left");
        // Two newer blocks took the oldest's place: its free goes the usual way, which finds
        // it in the slot.
        assert!(!slot.cancel(same[2]));
        assert_eq!(slot.cancelled_frees.load(Ordering::Relaxed), frees + 4);
        assert_eq!(remove(same[2], Some(Op::Free)).map(|r| r.size), Some(24));
        assert_eq!(slot.waiting(), 0);
        for &a in &same {
            assert_eq!(
                remove(a, Some(Op::Free)),
                None,
                "nothing of it left anywhere"
            );
        }
    }

    #[test]
    fn a_cancel_whose_entry_a_capture_took_after_its_look_leaves_the_free_to_the_table() {
        // Addresses of this test only.
        const BASE: u64 = 0x6300_0000_0000;
        let (tid, k, same) = emptied_slot_and_one_bucket(BASE, 1);
        let slot = &NEW[k];
        let frees = slot.cancelled_frees.load(Ordering::Relaxed);
        assert!(insert_new(same[0], 24, tid, 0, Op::Malloc, k));
        // The owner looks, and is stopped before its store: a capture without a scanning
        // child takes every waiting block into the table meanwhile.
        let i = slot.find_own(same[0]).expect("the block waits");
        {
            let frozen = freeze();
            let _listed = frozen.listed();
        }
        assert_eq!(slot.addrs[i].load(Ordering::Relaxed), 0, "taken");
        assert!(!slot.cancel_found(i, same[0]), "the owner notices the take");
        assert_eq!(slot.cancelled_frees.load(Ordering::Relaxed), frees);
        assert_eq!(
            remove(same[0], Some(Op::Free)).map(|r| r.size),
            Some(24),
            "the free finds the block where the capture put it"
        );
        // The entry written again for a new block: the mark went with the old one.
        apply_new(k);
        assert!(insert_new(same[0], 40, tid, 0, Op::Malloc, k));
        let j = slot.find_own(same[0]).expect("the new block waits");
        assert!(slot.cancel_found(j, same[0]), "a cancel of the new block");
        assert_eq!(slot.cancelled_frees.load(Ordering::Relaxed), frees + 1);
        assert_eq!(remove(same[0], Some(Op::Free)), None, "nothing of it left");
    }

    #[test]
    fn an_entry_reused_in_its_own_bucket_keeps_the_buckets_other_hint() {
        // Addresses of this test only.
        const BASE: u64 = 0x6200_0000_0000;
        let (_, k, same) = emptied_slot_and_one_bucket(BASE, 3);
        let slot = &NEW[k];
        let (older, reused) = (6, 5);
        let put = |i: usize, addr: u64| {
            slot.addrs[i].store(addr, Ordering::Relaxed);
            slot.hint(addr, i);
        };
        put(older, same[0]);
        put(reused, same[1]);
        // Entry `reused` taken and written again for another address of the bucket (a ring
        // going round): the bucket must still name the older waiting block.
        put(reused, same[2]);
        assert_eq!(
            slot.find_own(same[0]),
            Some(older),
            "the older block's hint kept"
        );
        assert_eq!(slot.find_own(same[2]), Some(reused));
        assert_eq!(
            slot.find_own(same[1]),
            None,
            "the entry's old address is not its own"
        );
        for (i, addr) in [(older, same[0]), (reused, same[2])] {
            slot.unhint(addr, i);
            slot.addrs[i].store(0, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_reclaimed_slot_starts_with_the_nursery_and_its_frees_searching_it() {
        // Addresses of this test only.
        const BASE: u64 = 0x6000_0000_0000;
        let tid = sys::current_tid();
        let k = own_index(sys::thread_state(), tid).expect("a batch slot");
        let slot = &NEW[k];
        apply_new(k);
        let mut live = Vec::new();
        let alloc = |live: &mut Vec<u64>| {
            let addr = BASE + 64 * live.len() as u64;
            assert!(insert_new(addr, 8, tid, 0, Op::Malloc, k));
            live.push(addr);
            addr
        };
        // The last owner's blocks outlived the nursery (only a batch waits) and its frees
        // missed the slot (the search is skipped).
        for _ in 0..NURSERY + BATCH * SHORT_AFTER as usize {
            alloc(&mut live);
        }
        assert_eq!(slot.limit.load(Ordering::Relaxed), BATCH as u32);
        for n in 0..CANCEL_MISSES as u64 {
            assert!(!slot.cancel(BASE - 64 * (n + 1)));
        }
        assert_ne!(slot.skip.load(Ordering::Relaxed), 0);
        apply_new(k);
        // A new owner starts as a new thread (`held_frees::own_index` calls this as a thread
        // claims the slot).
        slot.new_owner();
        assert_eq!(slot.limit.load(Ordering::Relaxed), NURSERY as u32);
        assert_eq!(slot.streak.load(Ordering::Relaxed), 0);
        assert_eq!(slot.misses.load(Ordering::Relaxed), 0);
        assert_eq!(slot.skip.load(Ordering::Relaxed), 0);
        for _ in 0..NURSERY - 1 {
            alloc(&mut live);
        }
        assert_eq!(slot.waiting(), NURSERY - 1, "the whole nursery waits");
        let young = live.pop().unwrap();
        assert!(slot.cancel(young), "its first free searches the slot");
        apply_new(k);
        for &addr in &live {
            assert_eq!(remove(addr, Some(Op::Free)).map(|r| r.size), Some(8));
        }
    }
}
