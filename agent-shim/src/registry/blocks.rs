//! The block table: every live heap block of the process with its size, allocation
//! sequence number, allocating thread and allocation stack.
//!
//! 64 shards chosen by the address's 64 MiB region ([`shard_of`]), each an open-addressing
//! table (linear probing, backward-shift deletion, no tombstones) in its own anonymous
//! mapping, grown by 1.5× when 78% full (half full below 1 MiB: [`SMALL_TABLE`]) with
//! `mremap`, its entries rehashed in the same pages (`Table::grow_in_place`: the kernel zeroes
//! only the new part; the mapping moves when the address space after it is taken), guarded by
//! a futex lock ([`crate::sync::RawLock`]) that a thread waiting on it can still be
//! interrupted by signals. An entry packs address, size, sequence number, tid and stack id
//! into 24 bytes, so a block costs 24 / load ≈ 31–46 bytes (up to 72 in a small table).
//!
//! Hooks insert after libc returned a block and remove *before* handing a block back to libc,
//! so an address reused by another thread is never removed by the wrong hook. A realloc is
//! different: its block must stay visible while libc works on it, or a snapshot taken then
//! (the world stopped inside the realloc) would miss a live block. So realloc marks the
//! entry *moving* ([`begin_move`]) instead of removing it, and once libc returned, replaces
//! the old entry by the new one with both shard locks held ([`finish_move`]): a frozen table
//! holds exactly one of the two, at the old address and size until the new ones are known
//! (what the program itself holds until realloc returns). When libc moved the block and
//! already handed its old address to another thread, that thread's [`insert`] finds the
//! moving entry and waits (unlocked, yielding) until the realloc finished, instead of taking
//! the entry over; so the block is neither lost nor counted twice. The wait is bounded (a
//! realloc left by `longjmp` from a signal handler, or one in progress in a fork's parent,
//! never finishes): after it, the entry is taken over as stale. A fork child inherits the
//! marks of reallocs in progress on other threads; each such address costs one bounded wait
//! there if the child reuses it. While marked, a block's memory may already be gone (libc
//! moved it with mremap, or trimmed the heap after moving it): the capture reads moving
//! blocks with a checked copy (`Heap::moving`), so in a snapshot taken after libc moved the
//! block but before the hook recorded the new address, the block has its old address and
//! size and possibly no outgoing references.
//!
//! This module never allocates from the heap, never prints and holds a shard lock only for
//! one probe (two shard locks, taken in table order, for a realloc's swap).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::counters::{self, Op, Rare, ShardStats};
use super::held_frees::{HeldSet, used_slots};
use super::new_blocks::{BATCH, NEW, NURSERY, NewSlot, Rewrite};
use crate::sync::{self, CacheLine, RawLock};
use crate::sys;

pub const SHARDS: usize = 64;
const SHARD_BITS: u32 = 6;
/// Grow (by 1.5×) when `len / cap` would exceed 78/100, so the load stays between 0.52 and
/// 0.78: linear probing's expected probe count for an absent address, (1 + 1/(1−α)²)/2, is
/// 10.8 at 0.78 but 22 at 0.85, and every insert probes for an absent address.
const MAX_LOAD: (usize, usize) = (78, 100);
/// A table mapped in less than this stays at most half full instead: it is small enough to
/// stay in the cache, so its probes cost instructions rather than misses, and at 0.78 an
/// insert probed about 5 slots and a deletion shifted as many back (sqlite3's table of a few
/// thousand short-lived blocks: BENCHMARKS.md "Real programs"). The memory this costs is at
/// most a third of a MiB per shard.
const SMALL_TABLE: usize = 1 << 20;
const SMALL_MAX_LOAD: (usize, usize) = (1, 2);
const PAGE: usize = 4096;
const ENTRY: usize = std::mem::size_of::<Entry>();
const LOW48: u64 = (1 << 48) - 1;
const LOW24: u32 = (1 << 24) - 1;
const LOW47: u64 = (1 << 47) - 1;
const MOVING: u64 = 1 << 47;
/// How many times an insert yields to a realloc in progress at its address before it takes
/// the entry over as stale (see the module docs).
const MOVE_WAIT_LIMIT: u32 = 100_000;

/// One live block, as the capture sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecord {
    pub addr: u64,
    pub size: u64,
    pub seq: u64,
    pub tid: u32,
    /// Allocation stack id (see `stacks::frames`); 0 = none.
    pub stack: u32,
    /// A realloc of this block is in progress ([`begin_move`]): libc may already have moved
    /// it and unmapped its memory.
    pub moving: bool,
}

impl BlockRecord {
    /// A block the program just got, with the next sequence number (allocation order).
    #[inline]
    fn new_block(addr: u64, size: u64, tid: u32, stack: u32) -> BlockRecord {
        Self::numbered_block(addr, size, tid, stack, next_seq())
    }

    /// A block the program just got, to wait in its thread's slot: numbered when it leaves
    /// the slot, or in its place by [`number_waiting`] ([`UNNUMBERED`] until then), unless
    /// [`number_at_once`].
    #[inline]
    fn waiting_block(addr: u64, size: u64, tid: u32, stack: u32) -> BlockRecord {
        let seq = if number_at_once() {
            next_seq()
        } else {
            UNNUMBERED
        };
        Self::numbered_block(addr, size, tid, stack, seq)
    }

    #[inline(always)]
    fn numbered_block(addr: u64, size: u64, tid: u32, stack: u32, seq: u64) -> BlockRecord {
        BlockRecord {
            addr,
            size,
            seq,
            tid,
            stack,
            moving: false,
        }
    }
}

/// The next allocation sequence number.
#[inline]
fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed) + 1
}

/// The number a block that waited unnumbered takes: the next one, or, once a free was missed
/// ([`MISSED_ANY`]), the last one handed out before it ([`MISSED_AT`]). Every block still
/// unnumbered then was pushed before that free (pushes after it are numbered at once), so it
/// stays older than a block allocated at its address later, numbered at once: the stale one
/// of two entries at an address must never come out newer than the live one.
fn number_for_waiting() -> u64 {
    if MISSED_ANY.load(Ordering::Acquire) {
        MISSED_AT.load(Ordering::Relaxed)
    } else {
        next_seq()
    }
}

/// The sequence number of a block waiting in a slot that was not numbered yet. Most blocks
/// of a program like sqlite3 are freed while they wait: they never take a number, and so
/// cost no locked instruction (the `lock xadd` on [`SEQ`] cost each allocation about 4 ns,
/// BENCHMARKS.md "Real programs"). A block is numbered when it leaves its slot (its thread's
/// batch, a capture, a reader on another thread: [`Entry::numbered`]), when its realloc
/// begins, or in its place: a capture numbers every waiting block once the world is
/// stopped, before the scanning child is made (the child's numbers would be lost with it),
/// and the allocation clock numbers them at every tick ([`number_waiting`]), so a number
/// still dates its block to within a tick and orders it after every snapshot it missed and
/// before every one it is in. Numbers keep the allocation order within a thread (a slot's
/// blocks are numbered oldest first); across threads, blocks of one tick may be numbered
/// out of their allocation order. (A number wraps at 2^47; one that comes out 0 is just
/// numbered again.)
pub const UNNUMBERED: u64 = 0;

/// Whether a new block waiting in a slot is numbered at once: from the first missed free
/// on (then an address can have two entries, and the newer must be the one with the higher
/// number: a block allocated after that free is numbered at once, and the blocks still
/// unnumbered then take the number of that moment, [`number_for_waiting`]); and while the
/// program's events are recorded (a recording names each block by its number).
#[inline]
fn number_at_once() -> bool {
    MISSED_ANY.load(Ordering::Relaxed) || crate::record::enabled()
}

/// 24 bytes: `w0 = addr | tid[0..16] << 48`, `w1 = size | tid[16..24] << 48 | stack[0..8] << 56`,
/// `w2 = seq | moving << 47 | stack[8..24] << 48`. Addresses and sizes below 2^48 (x86-64
/// user space), seq wraps at 2^47, tid and stack ids below 2^24. `w0 == 0` marks an empty
/// slot; `moving` a block whose realloc is in progress.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Entry {
    w: [u64; 3],
}

impl Entry {
    fn pack(r: &BlockRecord) -> Self {
        let tid = u64::from(r.tid & LOW24);
        let stack = u64::from(r.stack & LOW24);
        Self {
            w: [
                r.addr | (tid & 0xffff) << 48,
                r.size | (tid >> 16) << 48 | (stack & 0xff) << 56,
                (r.seq & LOW47) | (stack >> 8) << 48,
            ],
        }
    }

    fn addr(&self) -> u64 {
        self.w[0] & LOW48
    }

    fn size(&self) -> u64 {
        self.w[1] & LOW48
    }

    fn moving(&self) -> bool {
        self.w[2] & MOVING != 0
    }

    fn seq(&self) -> u64 {
        self.w[2] & LOW47
    }

    /// This entry with a sequence number: its own, or the next one when it has none yet
    /// (a block leaving its slot, see [`UNNUMBERED`]).
    #[inline]
    fn numbered(mut self) -> Self {
        if self.seq() == UNNUMBERED {
            self.w[2] |= number_for_waiting() & LOW47;
        }
        self
    }

    fn unpack(&self) -> BlockRecord {
        let tid = (self.w[0] >> 48) as u32 | ((self.w[1] >> 48) as u32 & 0xff) << 16;
        let stack = (self.w[1] >> 56) as u32 | ((self.w[2] >> 48) as u32) << 8;
        BlockRecord {
            addr: self.addr(),
            size: self.size(),
            seq: self.w[2] & LOW47,
            tid,
            stack,
            moving: self.moving(),
        }
    }
}

struct Table {
    slots: *mut Entry,
    cap: usize,
    len: usize,
    /// Bytes of the mapping behind `slots`.
    mapped: usize,
    /// The most entries it holds before it grows ([`MAX_LOAD`], [`SMALL_MAX_LOAD`]): set when
    /// it grows, so an insert compares once instead of working the load out.
    limit: usize,
}

#[repr(align(64))]
struct Shard {
    lock: RawLock,
    /// Bit [`missed_bit`]`(a)` is set once the hooks passed a free of an address `a` of this
    /// shard to libc without seeing it ([`missed_free`]); bits are never cleared. Only such a
    /// free can leave an address in the table and in a slot, or in two slots, at once (see
    /// `new_blocks`): while an address's bit is clear, its table entry is the only one and
    /// nobody needs to look for another. Beside the lock, so reading it costs a free no
    /// cache miss of its own.
    missed: AtomicU64,
    table: UnsafeCell<Table>,
    /// The table's slots and capacity as of its last growth, readable without the lock: a
    /// hint to prefetch a home slot while the lock is being taken (possibly stale after a
    /// growth; only ever prefetched, which cannot fault).
    hint_slots: AtomicPtr<Entry>,
    hint_cap: AtomicUsize,
    stats: ShardStats,
}

impl Shard {
    /// Records the table's current slots for [`Shard::prefetch`]. Caller holds the lock.
    #[inline]
    fn publish_hint(&self, slots: *mut Entry, cap: usize) {
        if self.hint_cap.load(Ordering::Relaxed) != cap {
            self.hint_slots.store(slots, Ordering::Relaxed);
            self.hint_cap.store(cap, Ordering::Relaxed);
        }
    }

    /// Starts loading the home slot of hash `h` into the cache (the slot's first access is
    /// the hooks' main cache miss), so the miss overlaps taking the lock.
    #[inline]
    fn prefetch(&self, h: u64) {
        let cap = self.hint_cap.load(Ordering::Relaxed);
        if cap == 0 {
            return;
        }
        // Possibly the slots of a table that grew meanwhile: harmless for a prefetch.
        let at = self
            .hint_slots
            .load(Ordering::Relaxed)
            .wrapping_add(home(h, cap));
        sync::prefetch(at as u64);
    }
}

// SAFETY: `table` is only accessed with `lock` held; `stats` are atomics.
unsafe impl Sync for Shard {}

static SHARD: [Shard; SHARDS] = [const {
    Shard {
        lock: RawLock::new(),
        missed: AtomicU64::new(0),
        table: UnsafeCell::new(Table::EMPTY),
        hint_slots: AtomicPtr::new(std::ptr::null_mut()),
        hint_cap: AtomicUsize::new(0),
        stats: ShardStats::new(),
    }
}; SHARDS];

/// The global allocation sequence number (the last one handed out).
static SEQ: CacheLine<AtomicU64> = CacheLine(AtomicU64::new(0));
/// Tid of the thread that holds every shard lock (freeze or fork), 0 if none: its own hooks
/// must not try to lock a shard again.
static HOLDER: CacheLine<AtomicU32> = CacheLine(AtomicU32::new(0));
/// Set (and never cleared) with the first bit of any shard's `missed` ([`missed_free`]): until
/// then no address can have two entries, and [`cancel_new`] need not read the shard's word.
/// Why it is seen in time: as for [`duplicates_possible`], the store happens before the block
/// goes back to libc, so before any call that names a later block at its address.
static MISSED_ANY: AtomicBool = AtomicBool::new(false);
/// The last sequence number handed out when the first free was missed ([`missed_free`]),
/// stored before [`MISSED_ANY`]: the number of every block still unnumbered once
/// [`MISSED_ANY`] is set (see [`UNNUMBERED`]).
static MISSED_AT: AtomicU64 = AtomicU64::new(0);
/// Bytes mapped by all shard tables (for the agent-memory figure).
static TABLE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Cleared when a table could not grow, or broke an invariant ([`broken`]): the agent stops
/// tracking new blocks (counted).
static TRACKING: CacheLine<AtomicBool> = CacheLine(AtomicBool::new(true));
/// Set once [`broken`] said so in the log.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// An invariant of a shard's table broke (an index past its end, no empty slot, a count
/// below zero: memory corruption or a bug of the agent's). The hooks run inside the
/// program's malloc, where a panic would abort the program: instead the agent stops tracking
/// new blocks, says so once in its log, and every later probe stays within the table's
/// bounds, so the program runs on as if the agent had run out of table memory.
#[cold]
#[inline(never)]
fn broken(what: &'static str) {
    TRACKING.store(false, Ordering::Relaxed);
    if !BROKEN.swap(true, Ordering::Relaxed) {
        crate::log::note_problem();
        // A stack buffer and one write(2), no allocation and no lock (log.rs): safe here,
        // and it happens once.
        crate::agent_log!("block table broken ({what}); tracking stops, the program runs on");
    }
}

#[inline]
fn hash(addr: u64) -> u64 {
    (addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
/// The shard of the block at `addr`: chosen by the address's 64 MiB region, not by its
/// hash. glibc gives each thread an arena of its own where it can (a thread arena is one or
/// more heaps of 64 MiB, each aligned to 64 MiB), so a thread's blocks mostly share one shard:
/// its lock, statistics and table stay in that thread's CPU cache instead of bouncing between
/// CPUs on every call, and threads contend on shard locks only where they already share a
/// glibc arena. The main arena (brk) spans one region per 64 MiB it grows.
fn shard_of(addr: u64) -> &'static Shard {
    let region = (addr >> 26).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &SHARD[(region >> (64 - SHARD_BITS)) as usize]
}

#[inline]
fn home(h: u64, cap: usize) -> usize {
    ((u128::from(h) * cap as u128) >> 64) as usize
}

impl Table {
    /// A table with no slots and no mapping: it maps its first slots on the first insert.
    const EMPTY: Table = Table {
        slots: std::ptr::null_mut(),
        cap: 0,
        len: 0,
        mapped: 0,
        limit: 0,
    };

    /// Slot `i`; an empty entry (and the table declared [`broken`]) past the end.
    fn slot(&self, i: usize) -> Entry {
        if i >= self.cap {
            broken("slot index past the end");
            return Entry::default();
        }
        // SAFETY: i < cap and slots points to cap initialised entries; the caller holds the
        // shard lock, so nobody writes them meanwhile.
        unsafe { *self.slots.add(i) }
    }

    /// Writes slot `i`; nothing (and the table declared [`broken`]) past the end.
    fn set(&mut self, i: usize, e: Entry) {
        if i >= self.cap {
            return broken("slot index past the end");
        }
        // SAFETY: as in `slot`, and `&mut self` makes this the only access.
        unsafe { *self.slots.add(i) = e }
    }

    /// The slot after `i`, wrapping at the end.
    fn next(&self, i: usize) -> usize {
        if i + 1 >= self.cap { 0 } else { i + 1 }
    }

    /// The index of `addr`, or of the empty slot where it would go, with that slot's first
    /// word (0: empty); None when the table has no empty slot (which its load factor rules
    /// out: [`broken`]). The index is below `cap`.
    #[inline]
    fn probe(&self, addr: u64, h: u64) -> Option<(usize, u64)> {
        let cap = self.cap;
        let mut i = home(h, cap);
        for _ in 0..cap {
            // SAFETY: i < cap (a home index is, and the step wraps at cap), and slots points
            // to cap initialised entries; the caller holds the shard lock. Only the first
            // word is read: it holds the address and marks an empty slot.
            let w0 = unsafe { (*self.slots.add(i)).w[0] };
            if w0 == 0 || w0 & LOW48 == addr {
                return Some((i, w0));
            }
            i += 1;
            if i == cap {
                i = 0;
            }
        }
        if self.cap != 0 {
            broken("no empty slot");
        }
        None
    }

    /// The slot holding `addr` (hash `h`), if it is tracked.
    fn find(&self, addr: u64, h: u64) -> Option<usize> {
        let (i, w0) = self.probe(addr, h)?;
        (w0 != 0).then_some(i)
    }

    /// Makes room for one more entry; false when the kernel refuses memory.
    #[inline]
    fn reserve_one(&mut self) -> bool {
        self.len < self.limit || self.grow()
    }

    /// The most entries a table of `cap` slots in `mapped` bytes holds before it grows.
    fn limit_of(cap: usize, mapped: usize) -> usize {
        let (most, of) = if mapped < SMALL_TABLE {
            SMALL_MAX_LOAD
        } else {
            MAX_LOAD
        };
        cap * most / of
    }

    /// Moves the entries into a table 1.5 times as big; false when the kernel refuses memory.
    #[cold]
    fn grow(&mut self) -> bool {
        let want = (self.cap + self.cap / 2).max(PAGE / ENTRY);
        let mapped = (want * ENTRY).next_multiple_of(PAGE);
        if self.mapped > 0 && self.grow_in_place(mapped) {
            return true;
        }
        let Some(p) = sys::map_anon(mapped, false) else {
            return false;
        };
        let cap = mapped / ENTRY;
        let slots: *mut Entry = p.cast();
        // A fresh table: the first (the old one has no slots), or when growing in place could
        // not have memory. Each entry moves with the bare probe, no bounds check per step (it
        // was every growth's path when e14020c measured it: BENCHMARKS.md "Real programs"):
        // the fresh table's `cap` slots are more than the old table's, which holds at most
        // `self.cap` entries, so each probe finds an empty slot within `cap` steps.
        for i in 0..self.cap {
            // SAFETY: i < self.cap, and self.slots points to self.cap initialised entries (the
            // caller holds the shard lock).
            let e = unsafe { *self.slots.add(i) };
            if e.w[0] == 0 {
                continue;
            }
            let mut j = home(hash(e.w[0] & LOW48), cap);
            // SAFETY: j < cap (a home index is, and the step wraps at cap); the fresh mapping
            // holds cap zeroed entries, only this thread's.
            while unsafe { (*slots.add(j)).w[0] } != 0 {
                j += 1;
                if j == cap {
                    j = 0;
                }
            }
            // SAFETY: as above, j < cap.
            unsafe { *slots.add(j) = e };
        }
        let bigger = Table {
            slots,
            cap,
            len: self.len,
            mapped,
            limit: Self::limit_of(cap, mapped),
        };
        TABLE_BYTES.fetch_add(mapped as u64, Ordering::Relaxed);
        let old = std::mem::replace(self, bigger);
        if old.mapped > 0 {
            // SAFETY: the old slots were copied out; nothing refers to them any more.
            unsafe { sys::unmap(old.slots.cast(), old.mapped) };
            TABLE_BYTES.fetch_sub(old.mapped as u64, Ordering::Relaxed);
        }
        true
    }

    /// Grows the table to `mapped` bytes with `mremap` (moved by the kernel when the address
    /// space after it is taken), its entries rehashed in the same pages; false (the table as it
    /// was) when the kernel refuses memory or the table's count is wrong. Why: a fresh mapping for every
    /// growth has the kernel zero (and fault in) three times the final table's pages over a
    /// table's life, and on perl's 1.5M keys that was 372 MiB for a table of 122 MiB, about
    /// 0.17 s of system time (BENCHMARKS.md "Real programs"); grown in place, only the new
    /// part is.
    ///
    /// How, with no second table: homes are monotone in the hash ([`home`]), so a table laid
    /// out by inserting its entries in hash order puts each at `max(its home, the previous
    /// one's slot + 1)`, at or after its rank. The entries are gathered at the front in that
    /// order (an old table is in hash order but within its runs, so sorting them as they are
    /// gathered, as an insertion sort would, has little to do), the slots worked out front
    /// to back (one bit per entry marks a run's
    /// first, in a scratch mapping), and the entries moved back to front: each goes at or
    /// after its rank, above every entry not yet moved. The last run may reach the end of the
    /// table; its entries past the end wait in the scratch mapping and are inserted last,
    /// probing from their homes over the end as any insert does.
    fn grow_in_place(&mut self, mapped: usize) -> bool {
        let (old_cap, old_mapped, len) = (self.cap, self.mapped, self.len);
        // Checked before anything moves: the steps below rely on exactly `len` entries and an
        // empty slot, and a table rehashed on a wrong count would lose entries. A wrong count
        // is a broken invariant: tracking stops, and the caller's fresh table, which copies
        // every occupied slot whatever the count, keeps the entries findable.
        let occupied = (0..old_cap)
            // SAFETY: i < self.cap, and self.slots points to self.cap initialised entries (the
            // caller holds the shard lock).
            .filter(|&i| unsafe { (*self.slots.add(i)).w[0] } != 0)
            .count();
        if occupied != len || len >= old_cap {
            if occupied != len {
                broken("entries counted wrong");
            }
            return false;
        }
        // Scratch, reserved and touched only as used: a bit per entry, then room for the
        // entries that wait outside the table (the run at the start that wraps from the end,
        // then those of the last run past the end): at most `len`.
        let bits_bytes = len.div_ceil(64) * 8;
        let scratch_bytes = (bits_bytes + len * ENTRY).next_multiple_of(PAGE).max(PAGE);
        let Some(scratch) = sys::map_anon(scratch_bytes, true) else {
            return false;
        };
        // SAFETY: `self.slots..+self.mapped` is this table's whole mapping (from `map_anon` or
        // an earlier `remap`); on success the old address is not used again.
        let Some(p) = (unsafe { sys::remap(self.slots.cast(), old_mapped, mapped) }) else {
            // SAFETY: the scratch mapping was never handed out.
            unsafe { sys::unmap(scratch, scratch_bytes) };
            return false;
        };
        let slots: *mut Entry = p.cast();
        let cap = mapped / ENTRY;
        self.slots = slots;
        self.cap = cap;
        self.mapped = mapped;
        self.limit = Self::limit_of(cap, mapped);
        TABLE_BYTES.fetch_add((mapped - old_mapped) as u64, Ordering::Relaxed);
        // Every index passed to these is below `cap` (slots) or `len` (entries aside, bits),
        // as each caller's comment says; the mapping holds `cap` entries, zero past the old
        // table's `old_cap`, and the caller holds the shard lock; the scratch holds `len` bits
        // and then `len` entries, and is this call's alone.
        // SAFETY: as above.
        let get = |i: usize| unsafe { *slots.add(i) };
        // SAFETY: as above.
        let set = |i: usize, e: Entry| unsafe { *slots.add(i) = e };
        let aside: *mut Entry = scratch.wrapping_add(bits_bytes).cast();
        // SAFETY: as above.
        let get_aside = |k: usize| unsafe { *aside.add(k) };
        // SAFETY: as above.
        let set_aside = |k: usize, e: Entry| unsafe { *aside.add(k) = e };
        let bits: *mut u64 = scratch.cast();
        // SAFETY: as above.
        let bit = |k: usize| unsafe { *bits.add(k / 64) } & 1 << (k % 64) != 0;
        // SAFETY: as above.
        let set_bit = |k: usize| unsafe { *bits.add(k / 64) |= 1 << (k % 64) };
        let h_of = |e: &Entry| hash(e.w[0] & LOW48);
        let done = |scratch: *mut u8| {
            // SAFETY: the scratch mapping was this call's alone; nothing in it is used again.
            unsafe { sys::unmap(scratch, scratch_bytes) }
        };

        // 1. Gathered at the front in hash order, but within runs. The first empty slot ends
        //    the run at the start, whose entries may have wrapped from the end: they wait
        //    aside, those whose homes are in that run go first, those from the end last.
        // Every table has an empty slot and exactly `len` entries (checked above), so the run
        // at the start holds at most `len`: the scratch has room for them.
        let first_empty = (0..old_cap).find(|&i| get(i).w[0] == 0).unwrap_or(0);
        debug_assert!(first_empty <= len);
        let (mut own, mut wrapped) = (0, first_empty);
        for i in 0..first_empty {
            // i < first_empty <= old_cap; own <= i < wrapped <= first_empty <= len.
            let e = get(i);
            set(i, Entry::default());
            if home(h_of(&e), old_cap) <= i {
                set_aside(own, e);
                own += 1;
            } else {
                wrapped -= 1;
                set_aside(wrapped, e);
            }
        }
        // Each entry gathered goes after the ones before it, or, when its hash is lower (only
        // within a run), among them as in an insertion sort.
        let mut n = 0;
        let mut highest = 0;
        let mut gather = |e: Entry| {
            // j <= n < cap: n counts the entries gathered, fewer than the old table's slots.
            let key = h_of(&e);
            if n == 0 || key >= highest {
                set(n, e);
                highest = key;
            } else {
                let mut j = n;
                while j > 0 && h_of(&get(j - 1)) > key {
                    set(j, get(j - 1));
                    j -= 1;
                }
                set(j, e);
            }
            n += 1;
        };
        for k in 0..own {
            // k < own <= first_empty <= len.
            gather(get_aside(k));
        }
        for i in first_empty + 1..old_cap {
            let e = get(i);
            if e.w[0] != 0 {
                // Gathered at or below i (every slot below i that holds an entry was gathered),
                // after i is emptied; at most len entries are in the table.
                set(i, Entry::default());
                gather(e);
            }
        }
        // Those from the end, stored aside in reverse order of slot.
        for k in (wrapped..first_empty).rev() {
            // wrapped <= k < first_empty <= len.
            gather(get_aside(k));
        }
        debug_assert_eq!(n, len, "every entry gathered once");
        // 3. Slots front to back, each entry at max(its home, the previous one's slot + 1):
        //    bit k set when entry k starts a run at its home. The entries from `fits` on would
        //    run past the end.
        let mut next = 0;
        let mut fits = len;
        for k in 0..len {
            // k < len.
            let h = home(h_of(&get(k)), cap);
            if h >= next {
                set_bit(k);
                next = h;
            }
            if next >= cap {
                fits = k;
                break;
            }
            next += 1;
        }
        for k in fits..len {
            // fits <= k < len; k - fits < len.
            set_aside(k - fits, get(k));
            set(k, Entry::default());
        }
        // 4. Back to front: entry k goes to its run's first entry's home plus its distance
        //    from that entry: at or after k, and below every entry already moved.
        let (mut run, mut run_home) = (fits, 0);
        for k in (0..fits).rev() {
            if k < run {
                // Bit 0 is set (the first entry starts a run): run >= 0 within len.
                run = k;
                while run > 0 && !bit(run) {
                    run -= 1;
                }
                run_home = home(h_of(&get(run)), cap);
            }
            let to = run_home + (k - run);
            if to != k && to < cap {
                // k < to < cap (step 3 found every slot below cap).
                set(to, get(k));
                set(k, Entry::default());
            }
        }
        #[cfg(test)]
        GROWN_IN_PLACE.with(|n| n.set(n.get() + 1));
        // 5. The entries past the end, inserted as any insert is: from their homes, over the
        //    end (a table with fewer entries than slots has an empty one).
        for k in 0..len - fits {
            // k < len - fits.
            let e = get_aside(k);
            if let Some((i, _)) = self.probe(e.w[0] & LOW48, h_of(&e)) {
                self.set(i, e);
            }
        }
        done(scratch);
        true
    }

    /// Removes slot `i` and shifts the following run back (keeps probing correct).
    fn delete(&mut self, mut hole: usize) {
        let cap = self.cap;
        if hole >= cap {
            return broken("slot index past the end");
        }
        let mut j = hole;
        // Bounded by the table's size: a table with no empty slot is broken, not looped on.
        for _ in 0..cap {
            j = self.next(j);
            // SAFETY: j < cap (`next` wraps at cap); the caller holds the shard lock.
            let e = unsafe { *self.slots.add(j) };
            if e.w[0] == 0 {
                break;
            }
            let h = home(hash(e.addr()), cap);
            // Move e into the hole if the hole lies on its probe path [h, j] (distances
            // back from j, wrapping; every index is below cap, so no division is needed).
            if back(j, h, cap) >= back(j, hole, cap) {
                // SAFETY: hole < cap (checked above, then an earlier j); as above.
                unsafe { *self.slots.add(hole) = e };
                hole = j;
            }
        }
        // SAFETY: as above.
        unsafe { *self.slots.add(hole) = Entry::default() };
        match self.len.checked_sub(1) {
            Some(len) => self.len = len,
            None => broken("more deletions than entries"),
        }
    }
}

/// How far index `from` lies back from index `to` in a table of `cap` slots (both below cap),
/// going backwards and wrapping: `(to − from) mod cap`.
#[inline]
fn back(to: usize, from: usize, cap: usize) -> usize {
    if to >= from {
        to - from
    } else {
        to + cap - from
    }
}

/// A shard locked by the calling thread, unlocked on drop.
struct Locked(&'static Shard);

impl Locked {
    fn new(shard: &'static Shard) -> Self {
        shard.lock.lock();
        Self(shard)
    }

    fn table(&mut self) -> &mut Table {
        // SAFETY: the lock is held for this guard's lifetime and the guard is borrowed mutably.
        unsafe { &mut *self.0.table.get() }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        self.0.lock.unlock();
    }
}

/// True when the calling thread (tid) may touch the table now: tracking is on and it does
/// not itself hold every shard lock (freeze, fork).
#[inline]
pub fn usable_by(tid: u32) -> bool {
    HOLDER.load(Ordering::Relaxed) != tid
}

/// A hook passed a free or realloc of `addr` to libc without removing its block (a
/// re-entrant call, or on the thread holding the whole table): the block's entry may outlive
/// it, and the address come back as a new block beside it. From now on every removal or
/// lookup of an address sharing `addr`'s shard and [`missed_bit`] looks for the newest entry
/// of its address (`Shard::missed`); other addresses keep the fast path. Called before the
/// block goes to libc, so before any thread can get its address again.
#[cold]
pub fn missed_free(addr: u64) {
    shard_of(addr)
        .missed
        .fetch_or(missed_bit(addr), Ordering::Relaxed);
    if !MISSED_ANY.load(Ordering::Relaxed) {
        // At least 1: 0 is UNNUMBERED. Two first missed frees at once store close numbers,
        // both older than any drawn after.
        let _ = MISSED_AT.compare_exchange(
            0,
            current_seq().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    MISSED_ANY.store(true, Ordering::Release);
}

/// The bit of `addr` in its shard's record of missed frees: one of 64 buckets by hash, so a
/// missed free slows the removals of about 1/64 of its shard's addresses, not all of them.
#[inline]
fn missed_bit(addr: u64) -> u64 {
    bucket(hash(addr))
}

/// [`missed_bit`] of an address of hash `h`.
#[inline]
fn bucket(h: u64) -> u64 {
    1 << (h >> 58)
}

/// Whether `addr` may have two entries (see `Shard::missed`). Why a reader cannot miss the
/// record it needs: two entries at `addr` exist only after a free of `addr` was missed, and
/// the reader names the newer block there, so its call comes after libc handed `addr` out
/// again, which comes after the missed free gave it back to libc, which comes after the bit
/// was set: the bit's store happens before the reader's load, which therefore reads it or a
/// later value of the word (read-write coherence), and every later value keeps the bit (only
/// `fetch_or` writes the word). That holds per address, and `addr`'s bit is in the word of
/// the shard whose lock every reader of `addr` takes, so a record per shard and bucket is as
/// sound as one for the whole process.
#[inline]
fn duplicates_possible(addr: u64) -> bool {
    shard_of(addr).missed.load(Ordering::Relaxed) & missed_bit(addr) != 0
}

#[cfg(test)]
thread_local! {
    /// Slot searches [`find_new`] made on the calling thread (for the test that checks a
    /// missed free slows only the frees at its own addresses).
    static SLOT_SEARCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether a new block can be recorded at all (counts it as untracked when not).
#[inline]
fn trackable(addr: u64, size: u64, op: Op) -> bool {
    if addr > LOW48 || size > LOW48 || addr == 0 || !TRACKING.load(Ordering::Relaxed) {
        counters::count_call(op);
        counters::count_rare(Rare::Untracked);
        return false;
    }
    true
}

#[cfg(test)]
thread_local! {
    /// Growths done in place on this thread ([`Table::grow_in_place`]), for the test of them:
    /// per thread, so that other tests growing their tables meanwhile do not count.
    static GROWN_IN_PLACE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Rounds spent in [`wait_for_mover`], for the test that checks an insert really waits.
#[cfg(test)]
static MOVER_WAITS: AtomicU64 = AtomicU64::new(0);

/// Waits a little for a realloc in progress on another thread (see the module docs).
#[cold]
fn wait_for_mover(round: u32) {
    #[cfg(test)]
    MOVER_WAITS.fetch_add(1, Ordering::Relaxed);
    if round < 64 {
        std::hint::spin_loop();
    } else {
        // SAFETY: sched_yield has no arguments and cannot fail.
        unsafe { libc::sched_yield() };
    }
}

/// What putting a new entry into a locked table did.
enum Placed {
    /// Stored; the size of a stale entry it replaced (0 if none).
    Stored { stale: u64 },
    /// A realloc of another thread is moving the block at this address: retry later.
    Busy,
    /// The table could not grow.
    Full,
}

/// Stores entry `e` (hash `h`) in a locked shard (`stats` its statistics). A moving entry at
/// the address is left alone (`Busy`) unless `take_moving`.
#[inline(always)]
fn place(table: &mut Table, stats: &ShardStats, e: Entry, h: u64, take_moving: bool) -> Placed {
    if !table.reserve_one() {
        return Placed::Full;
    }
    let Some((i, w0)) = table.probe(e.addr(), h) else {
        return Placed::Full;
    };
    if w0 == 0 {
        // The common case, a new address: stored without `set`'s bounds check.
        table.len += 1;
        // SAFETY: `probe` returns an index below cap; the caller holds the shard lock.
        unsafe { *table.slots.add(i) = e };
        return Placed::Stored { stale: 0 };
    }
    // The address is in the table already.
    let slot = table.slot(i);
    if slot.moving() && !take_moving {
        return Placed::Busy;
    }
    if !slot.moving() && newer(slot.seq(), e.seq()) {
        // A batch of new blocks applied late (`new_blocks`) after the address was
        // allocated again, its free unseen: the table's entry is the live one, `e`
        // counts as allocated and freed.
        stats.released(None, e.size());
        return Placed::Stored {
            stale: e.size().max(1),
        };
    }
    let stale = slot.size();
    stats.released(None, stale);
    table.set(i, e);
    Placed::Stored { stale }
}

/// Whether sequence number `a` was handed out after `b` (they wrap at 2^47).
fn newer(a: u64, b: u64) -> bool {
    a != b && a.wrapping_sub(b) & LOW47 < 1 << 46
}

/// Records a new block of a program thread whose batch slot (`new_blocks`) is `k`: it waits
/// there with the thread's next ones and reaches the table with them. Returns false (and
/// counts it) when it could not be tracked.
#[inline]
pub fn insert_new(addr: u64, size: u64, tid: u32, stack: u32, op: Op, k: usize) -> bool {
    let Some(slot) = NEW.get(k) else {
        return insert(addr, size, tid, stack, op);
    };
    if size >= super::new_blocks::DIRECT_FROM {
        // A big block goes straight in, and the peak counts the thread's waiting blocks with
        // it: such a moment is what makes a peak (`new_blocks` module docs).
        let tracked = insert(addr, size, tid, stack, op);
        counters::raise_peak_above_published(slot.waiting_bytes());
        return tracked;
    }
    if !trackable(addr, size, op) {
        return false;
    }
    let e = Entry::pack(&BlockRecord::new_block(addr, size, tid, stack));
    let full = match slot.push(addr, e.w, op) {
        Some(full) => full,
        None => {
            // Full already, or its next entry not empty (only a broken invariant gets
            // there): apply it all, then add.
            apply_new(k);
            match slot.push(addr, e.w, op) {
                Some(full) => full,
                None => return insert(addr, size, tid, stack, op),
            }
        }
    };
    if full {
        apply_oldest(k);
    }
    true
}

/// Whether the calling thread's batch slot `k` takes one more new block of `size` bytes
/// without applying anything (no shard lock is taken then: the hooks' fast path).
#[inline]
pub fn new_fits(k: usize, size: u64) -> bool {
    size < super::new_blocks::DIRECT_FROM && NEW.get(k).is_some_and(NewSlot::has_room)
}

/// Records a new block of a program thread in its batch slot `k`, which [`new_fits`] said
/// takes it (so this takes no lock unless the slot is full now). False (and counted) when it
/// could not be tracked.
#[inline(always)]
pub fn push_new(addr: u64, size: u64, tid: u32, stack: u32, op: Op, k: usize) -> bool {
    let Some(slot) = NEW.get(k) else {
        return insert(addr, size, tid, stack, op);
    };
    if !trackable(addr, size, op) {
        return false;
    }
    let e = Entry::pack(&BlockRecord::waiting_block(addr, size, tid, stack));
    match slot.push(addr, e.w, op) {
        Some(false) => true,
        // Full now: its oldest blocks go to the table, as `insert_new` would.
        Some(true) => {
            apply_oldest(k);
            true
        }
        None => insert(addr, size, tid, stack, op),
    }
}

/// The calling thread frees `addr`, a block of its own that may still wait in its batch slot
/// `k`: when it does (and no free of an address like it was missed, so that this entry is
/// the address's only one), it leaves the slot without ever reaching the table or taking a
/// lock, counted as allocated and freed, and the caller hands the block to libc. False,
/// nothing done, otherwise. Most blocks of a program like sqlite3 are freed within a few
/// dozen allocations of their thread (BENCHMARKS.md "Real programs"): they cost the table
/// nothing.
#[inline]
pub fn cancel_new(addr: u64, k: usize) -> bool {
    let Some(slot) = NEW.get(k) else {
        return false;
    };
    if MISSED_ANY.load(Ordering::Relaxed) && duplicates_possible(addr) {
        return false;
    }
    slot.cancel(addr)
}

/// A realloc of the block at `addr`, which waits in the calling thread's slot `k`, starts:
/// the entry stays where it is, marked moving, without a lock (`NewSlot::mark_moving`: the
/// program's realloc of its own block, which only a capture with the thread stopped takes
/// meanwhile; two locks and their unlocks cost a realloc ~10 ns, BENCHMARKS.md "Real
/// programs"). Its record and index, or None when the block is not there (or a free of an
/// address like it was missed, or a capture took it): then [`begin_move`]. The new block
/// must be one that waits too (under [`super::new_blocks::DIRECT_FROM`] bytes).
pub fn begin_move_waiting(addr: u64, k: usize) -> Option<(BlockRecord, usize)> {
    let slot = NEW.get(k)?;
    if MISSED_ANY.load(Ordering::Relaxed) && duplicates_possible(addr) {
        return None;
    }
    let i = slot.find_own(addr)?;
    let (words, _) = slot.entry(i);
    if words[2] & MOVING != 0 {
        return None;
    }
    // Numbered now: the finish in the table knows its entry by the number (`is_own_move`).
    let mut e = Entry { w: words }.numbered();
    e.w[2] |= MOVING;
    if !slot.mark_moving(i, e.w[2]) {
        return None;
    }
    Some((e.unpack(), i))
}

/// The entry a [`begin_move_waiting`] marked, locked: its call when it is still there (not
/// taken meanwhile by a capture, which moved it into the table; the caller then uses the
/// table's [`finish_move`], [`end_move`] or [`cancel_move`]).
fn own_move_in_slot(slot: &NewSlot, i: usize, old: &BlockRecord) -> Option<Op> {
    if slot.addrs.get(i)?.load(Ordering::Relaxed) != old.addr {
        return None;
    }
    let (words, op) = slot.entry(i);
    is_own_move(&Entry { w: words }, old).then_some(op)
}

/// The realloc of a block that waited in slot `k` (entry `i`, see [`begin_move_waiting`])
/// returned `addr` with `size` bytes: the new block takes the old one's entry, without a
/// lock (`NewSlot::rewrite`: a capture sees one of the two). The old block is counted as
/// allocated and released in the slot's own counters (`NewSlot::count_moved`; in its shard
/// when the new block cannot be tracked and the entry goes, or when a capture took the old
/// block into the table meanwhile). Some(whether the new block is tracked), or None when
/// the entry was taken meanwhile (then [`finish_move`]).
#[allow(clippy::too_many_arguments)]
pub fn finish_move_waiting(
    old: &BlockRecord,
    k: usize,
    i: usize,
    addr: u64,
    size: u64,
    tid: u32,
    stack: u32,
    op: Op,
) -> Option<bool> {
    let slot = NEW.get(k)?;
    if !trackable(addr, size, op) {
        return untracked_move_waiting(slot, old, i);
    }
    let (old_words, made) = slot.entry(i);
    let e = Entry::pack(&BlockRecord::waiting_block(addr, size, tid, stack));
    match slot.rewrite(i, (old.addr, old_words), made, addr, e.w, op) {
        Rewrite::Done => slot.count_moved(made, old.size),
        Rewrite::TakenBefore => return None,
        // The capture counted it in the table, where it waits moving: it goes as released.
        Rewrite::OldTaken => end_move(old),
    }
    Some(true)
}

/// [`finish_move_waiting`] of a new block that cannot be tracked: the old block's entry goes,
/// counted as allocated and released in its shard. Out of line: the finish's common path
/// stays a few cache lines of code.
#[cold]
#[inline(never)]
fn untracked_move_waiting(slot: &NewSlot, old: &BlockRecord, i: usize) -> Option<bool> {
    let shard = shard_of(old.addr);
    let locked = Locked::new(shard);
    let Some(made) = own_move_in_slot(slot, i, old) else {
        // Taken into the table meanwhile (a capture): its move ends there. The untracked new
        // block was counted already (`trackable`), so not through `finish_move` again.
        drop(locked);
        end_move(old);
        return Some(false);
    };
    slot.empty(i, old.addr);
    shard.stats.tracked(made, old.size);
    shard.stats.released(None, old.size);
    shard.stats.settle();
    Some(false)
}

/// The realloc of a waiting block gave it back to libc with no new one (`realloc(p, 0)`):
/// its entry goes, counted as allocated and released. False when it was taken meanwhile
/// (then [`end_move`]).
pub fn end_move_waiting(old: &BlockRecord, k: usize, i: usize) -> bool {
    let Some(slot) = NEW.get(k) else {
        return false;
    };
    let shard = shard_of(old.addr);
    let _locked = Locked::new(shard);
    let Some(made) = own_move_in_slot(slot, i, old) else {
        return false;
    };
    slot.empty(i, old.addr);
    shard.stats.tracked(made, old.size);
    shard.stats.released(None, old.size);
    shard.stats.settle();
    true
}

/// The realloc of a waiting block failed (libc kept it): the mark goes. False when it was
/// taken meanwhile (then [`cancel_move`]).
pub fn cancel_move_waiting(old: &BlockRecord, k: usize, i: usize) -> bool {
    let Some(slot) = NEW.get(k) else {
        return false;
    };
    let _locked = Locked::new(shard_of(old.addr));
    if own_move_in_slot(slot, i, old).is_none() {
        return false;
    }
    let w2 = slot.words[i][2].load(Ordering::Relaxed);
    slot.words[i][2].store(w2 & !MOVING, Ordering::Relaxed);
    true
}

/// Applies every new block of batch slot `k` (its owner thread, inside a hook or ending; or
/// a fork child for a thread it did not inherit), and marks the slot applied.
pub fn apply_new(k: usize) {
    let Some(slot) = NEW.get(k) else {
        return;
    };
    // A thread whose rewrite never finished (a fork child applying its parent's threads'
    // slots, a `longjmp` out of a signal handler): its realloc is left in progress, the old
    // block moving, as a fork child inherits any realloc in progress.
    slot.undo_rewrite();
    for from in (0..super::new_blocks::NURSERY).step_by(BATCH) {
        let _ = apply_run(slot, from..from + BATCH);
    }
    slot.clear();
}

/// Applies the oldest [`BATCH`] new blocks of the calling thread's slot `k`, which holds its
/// limit, and lets the slot adapt that limit to how many of them were still waiting.
fn apply_oldest(k: usize) {
    if let Some(slot) = NEW.get(k) {
        let waited = apply_run(slot, slot.oldest());
        slot.applied(waited);
    }
}

/// Applies the new blocks at indexes `run` (at most [`BATCH`]) of `slot`: their table slots
/// are prefetched together, then each shard is locked once for all of its blocks (see
/// `new_blocks` for why an entry leaves the slot only under its shard's lock). Returns how
/// many were waiting (the rest were empty: cancelled, taken or never written).
fn apply_run(slot: &NewSlot, run: std::ops::Range<usize>) -> u32 {
    let Some(addrs) = slot.addrs.get(run.clone()) else {
        return 0;
    };
    let n = addrs.len().min(BATCH);
    let from = run.start;
    let mut waited = 0;
    for a in &addrs[..n] {
        let a = a.load(Ordering::Relaxed);
        if a != 0 {
            waited += 1;
            let _ = prefetch(a);
        }
    }
    if waited == 0 {
        return 0;
    }
    // Bit i: entry from + i not yet applied.
    let mut left: u32 = (1u32 << n).wrapping_sub(1);
    let mut round = 0;
    while left != 0 {
        let first = left.trailing_zeros() as usize;
        let a = addrs[first].load(Ordering::Acquire);
        if a == 0 {
            // Empty: taken by a reader (a free from another thread, a capture), cancelled by
            // its owner's free, or never written.
            left &= !(1 << first);
            continue;
        }
        let shard = shard_of(a);
        let mut locked = Locked::new(shard);
        let mut stalled = false;
        for (i, cell) in addrs[..n].iter().enumerate().skip(first) {
            if left & 1 << i == 0 {
                continue;
            }
            let a = cell.load(Ordering::Acquire);
            if a == 0 {
                left &= !(1 << i);
                continue;
            }
            if !std::ptr::eq(shard_of(a), shard) {
                continue;
            }
            match apply_entry(
                slot,
                from + i,
                locked.table(),
                &shard.stats,
                round >= MOVE_WAIT_LIMIT,
            ) {
                Placed::Busy => {
                    stalled = true;
                    break;
                }
                Placed::Stored { .. } | Placed::Full => left &= !(1 << i),
            }
        }
        shard.stats.settle();
        let (slots, cap) = {
            let t = locked.table();
            (t.slots, t.cap)
        };
        shard.publish_hint(slots, cap);
        drop(locked);
        if stalled {
            round += 1;
            wait_for_mover(round);
        }
    }
    waited
}

/// Moves entry `i` of `slot` into its shard's `table` (whose lock the caller holds) and
/// takes it out of the slot, unless a realloc in progress holds its address (`Busy`, and the
/// entry stays) and `take_moving` is false.
#[inline(always)]
fn apply_entry(
    slot: &NewSlot,
    i: usize,
    table: &mut Table,
    stats: &ShardStats,
    take_moving: bool,
) -> Placed {
    let (words, op) = slot.entry(i);
    let placed = place_new(Entry { w: words }, op, table, stats, take_moving);
    if !matches!(placed, Placed::Busy) {
        slot.take(i);
    }
    placed
}

/// Places new block `e` (made by `op`; numbered here if it was not) in a locked shard's
/// `table` and counts it there, unless a realloc in progress holds its address (`Busy`) and
/// `take_moving` is false.
fn place_new(e: Entry, op: Op, table: &mut Table, stats: &ShardStats, take_moving: bool) -> Placed {
    let e = e.numbered();
    let placed = place(table, stats, e, hash(e.addr()), take_moving);
    if !matches!(placed, Placed::Busy) {
        count_placed(&placed, stats, op, e.size());
    }
    placed
}

/// Counts a new block `place` stored (or could not store) in a locked shard.
fn count_placed(placed: &Placed, stats: &ShardStats, op: Op, size: u64) {
    match placed {
        Placed::Stored { stale } => {
            stats.tracked(op, size);
            if *stale != 0 {
                counters::count_rare(Rare::StaleEntry);
            }
        }
        Placed::Full | Placed::Busy => {
            TRACKING.store(false, Ordering::Relaxed);
            counters::count_call(op);
            counters::count_rare(Rare::Untracked);
        }
    }
}

/// A new block found waiting in a slot (by a holder of its shard's lock, so it stays there
/// until taken).
struct Waiting {
    slot: &'static NewSlot,
    i: usize,
    /// Its packed record.
    e: Entry,
    op: Op,
}

impl Waiting {
    /// Takes it out of its slot; the caller accounts for it in its locked shard.
    fn take(&self) {
        self.slot.take(self.i);
    }

    /// Takes it as a stale entry (an older block at an address that was allocated again,
    /// its free unseen): counted as allocated and released in the caller's locked shard.
    fn drop_stale(&self, stats: &ShardStats) {
        self.take();
        stats.tracked(self.op, self.e.size());
        stats.released(None, self.e.size());
        counters::count_rare(Rare::StaleEntry);
    }

    /// Takes it as the live block at `addr` (the newest there): any other block waiting at
    /// that address is older, and dropped as stale.
    fn take_live(self, addr: u64, stats: &ShardStats) -> Live {
        self.take();
        drop_waiting(addr, stats);
        Live::Taken(self.e.numbered(), self.op)
    }
}

/// The newest new block at `addr` waiting in any slot, the calling thread's slot searched
/// first. The caller holds the lock of `addr`'s shard, so the entry stays as found. When no
/// slot holds anything (`new_blocks::any_waiting`), no slot is read; unless a free at an
/// address of its record was missed ([`duplicates_possible`]) the first entry found is the
/// only one.
fn find_new(addr: u64) -> Option<Waiting> {
    if !super::new_blocks::any_waiting() {
        return None;
    }
    #[cfg(test)]
    SLOT_SEARCHES.with(|n| n.set(n.get() + 1));
    let all = duplicates_possible(addr);
    let used = used_slots();
    let own = (sys::thread_state().held() as usize).wrapping_sub(1);
    let order = (own < used)
        .then_some(own)
        .into_iter()
        .chain((0..used).filter(|&k| k != own));
    let mut newest: Option<Waiting> = None;
    for k in order {
        let slot = &NEW[k];
        let Some(i) = (0..NURSERY).find(|&i| slot.addrs[i].load(Ordering::Acquire) == addr) else {
            continue;
        };
        let (words, op) = slot.entry(i);
        let e = Entry { w: words };
        // A realloc in progress on the slot's owner (`begin_move_waiting`): a new block at the
        // address supersedes it, and only that realloc ends it (as a moving table entry, which
        // only a free finding no other block takes, and only a program's race can make it).
        if e.moving() {
            continue;
        }
        // Two slots hold an address only after a missed free: the entry with the higher
        // sequence number is the live block (see `new_blocks`).
        if newest.as_ref().is_none_or(|n| newer(e.seq(), n.e.seq())) {
            newest = Some(Waiting { slot, i, e, op });
        }
        if !all {
            break;
        }
    }
    newest
}

/// Drops every block at `addr` still waiting in a slot as stale: the caller (holding the
/// lock of `addr`'s shard) has just taken the address's newest entry, so the rest are older.
fn drop_waiting(addr: u64, stats: &ShardStats) {
    if duplicates_possible(addr) {
        while let Some(w) = find_new(addr) {
            w.drop_stale(stats);
        }
    }
}

/// The record of the new block at `addr` waiting in a slot, if one does. Caller holds
/// `addr`'s shard lock.
fn peek_new(addr: u64) -> Option<BlockRecord> {
    find_new(addr).map(|w| w.e.unpack())
}

/// Where the live block at `addr` is, in a locked shard: a table slot, or taken out of a
/// `new_blocks` slot (its packed record and call; the caller accounts it in this shard).
enum Live {
    Table(usize),
    Taken(Entry, Op),
}

/// The newer of two blocks at `addr` (only after a free the agent did not see): the settled
/// table entry in slot `i` and the block `w` waiting in a slot. The other is dropped as
/// stale (counted, `StaleEntry`), and so is any other block waiting at `addr`.
fn newest_of(table: &mut Table, stats: &ShardStats, i: usize, w: Waiting, addr: u64) -> Live {
    let settled = table.slot(i);
    if !newer(w.e.seq(), settled.seq()) {
        w.drop_stale(stats);
        drop_waiting(addr, stats);
        return Live::Table(i);
    }
    table.delete(i);
    stats.released(None, settled.size());
    counters::count_rare(Rare::StaleEntry);
    w.take_live(addr, stats)
}

/// Finds the live block at `addr` for a free. The newest block wins: when the table and a
/// slot both hold the address (only after a free the agent did not see), the one with the
/// higher sequence number is the live block and the other is dropped as stale (counted,
/// `StaleEntry`). A free prefers a block waiting in a slot to a realloc in progress at the
/// address (a new block there supersedes it), and takes the moving entry only when no slot
/// holds one. (A realloc removes its own moving entry with [`end_move`].)
#[inline(always)]
fn live_at(table: &mut Table, shard: &Shard, addr: u64, h: u64) -> Option<Live> {
    let stats = &shard.stats;
    let found = table.find(addr, h);
    let settled = found.filter(|&i| !table.slot(i).moving());
    // A settled table entry is the only one unless a free at an address of its record was
    // missed.
    let waiting = if settled.is_some() && shard.missed.load(Ordering::Relaxed) & bucket(h) == 0 {
        None
    } else {
        find_new(addr)
    };
    match (settled, waiting) {
        (Some(i), None) => Some(Live::Table(i)),
        (Some(i), Some(w)) => Some(newest_of(table, stats, i, w, addr)),
        (None, Some(w)) => Some(w.take_live(addr, stats)),
        (None, None) => found.map(Live::Table),
    }
}

/// Removes the live block at `addr` from a locked shard as released by `op` (a free; see
/// [`live_at`]); its packed record, None when not tracked.
#[inline(always)]
fn remove_locked(table: &mut Table, shard: &Shard, addr: u64, op: Option<Op>) -> Option<Entry> {
    let stats = &shard.stats;
    match live_at(table, shard, addr, hash(addr))? {
        Live::Table(i) => Some(delete_at(table, stats, i, op)),
        Live::Taken(e, made) => {
            stats.tracked(made, e.size());
            stats.released(op, e.size());
            Some(e)
        }
    }
}

/// Records a new block. Returns false (and counts it) when it could not be tracked.
pub fn insert(addr: u64, size: u64, tid: u32, stack: u32, op: Op) -> bool {
    if !trackable(addr, size, op) {
        return false;
    }
    let h = hash(addr);
    shard_of(addr).prefetch(h);
    let e = Entry::pack(&BlockRecord::new_block(addr, size, tid, stack));
    let mut round = 0;
    loop {
        let mut shard = Locked::new(shard_of(addr));
        let stats = &shard.0.stats;
        let placed = place(shard.table(), stats, e, h, round >= MOVE_WAIT_LIMIT);
        match placed {
            Placed::Stored { stale } => {
                stats.tracked(op, size);
                stats.settle();
                let (slots, cap) = {
                    let t = shard.table();
                    (t.slots, t.cap)
                };
                shard.0.publish_hint(slots, cap);
                drop(shard);
                if stale != 0 || round >= MOVE_WAIT_LIMIT {
                    counters::count_rare(Rare::StaleEntry);
                }
                return true;
            }
            Placed::Busy => {
                drop(shard);
                round += 1;
                wait_for_mover(round);
            }
            Placed::Full => {
                drop(shard);
                TRACKING.store(false, Ordering::Relaxed);
                counters::count_call(op);
                counters::count_rare(Rare::Untracked);
                return false;
            }
        }
    }
}

/// Starts loading the table slot of `addr` into the cache, unless its shard's table is small
/// enough to stay there ([`SMALL_TABLE`]): a batch of frees or new blocks prefetches every
/// slot before it touches any (`held_frees`, [`apply_new`]), so their misses overlap. Whether
/// it did (a small table's blocks are few, and so are the lines of their libc chunks).
#[inline]
pub fn prefetch(addr: u64) -> bool {
    let shard = shard_of(addr);
    if shard.hint_cap.load(Ordering::Relaxed) < SMALL_TABLE / ENTRY {
        return false;
    }
    shard.prefetch(hash(addr));
    true
}

/// The size of the tracked block at `addr`; usable by the thread that holds the whole table
/// (it reads without locking then).
pub fn peek_size(addr: u64) -> Option<u64> {
    if HOLDER.load(Ordering::Relaxed) != sys::current_tid() {
        return lookup(addr).map(|r| r.size);
    }
    // SAFETY: the calling thread holds every shard lock (freeze or fork).
    let table = unsafe { &*shard_of(addr).table.get() };
    let found = table.find(addr, hash(addr)).map(|i| table.slot(i));
    current(found, addr).map(|r| r.size)
}

/// The live block at `addr` given its table entry (found under the shard lock): the newer of
/// the entry and a new block at that address waiting in a slot (which also supersedes a
/// realloc in progress there; see `new_blocks`).
fn current(found: Option<Entry>, addr: u64) -> Option<BlockRecord> {
    let waiting = match found {
        Some(e) if !e.moving() && !duplicates_possible(addr) => None,
        _ => peek_new(addr),
    };
    match (found, waiting) {
        (Some(e), Some(w)) if !e.moving() && !newer(w.seq, e.seq()) => Some(e.unpack()),
        (_, Some(w)) => Some(w),
        (found, None) => found.map(|e| e.unpack()),
    }
}

/// Removes the block at `addr` (freed by the program); returns its record, or None if it is
/// not tracked. `op` is counted as the call when the block is found. A realloc removes its
/// own block with [`end_move`].
pub fn remove(addr: u64, op: Option<Op>) -> Option<BlockRecord> {
    let shard = shard_of(addr);
    shard.prefetch(hash(addr));
    let mut locked = Locked::new(shard);
    let removed = remove_locked(locked.table(), shard, addr, op);
    shard.stats.settle();
    drop(locked);
    removed.map(|e| e.unpack())
}

/// Deletes table slot `i` (locked), counting its block as released by `op`; its entry.
fn delete_at(table: &mut Table, stats: &ShardStats, i: usize, op: Option<Op>) -> Entry {
    let e = table.slot(i);
    table.delete(i);
    stats.released(op, e.size());
    e
}

/// Removes the blocks at `addrs` as frees (a batch of `held_frees`), taking each shard lock
/// once for a run of addresses in the same shard. Returns how many were not tracked.
pub fn remove_freed(addrs: &[u64]) -> usize {
    let mut unknown = 0;
    let mut next = 0;
    while let Some(&first) = addrs.get(next) {
        let shard = shard_of(first);
        let mut locked = Locked::new(shard);
        let table = locked.table();
        // The run of addresses in this shard.
        for &addr in &addrs[next..] {
            if !std::ptr::eq(shard_of(addr), shard) {
                break;
            }
            if remove_locked(table, shard, addr, Some(Op::Free)).is_none() {
                unknown += 1;
            }
            next += 1;
        }
        shard.stats.settle();
        drop(locked);
    }
    unknown
}

/// The record of the live block at `addr` (its start), if tracked.
pub fn lookup(addr: u64) -> Option<BlockRecord> {
    let h = hash(addr);
    let mut shard = Locked::new(shard_of(addr));
    let table = shard.table();
    let found = table.find(addr, h).map(|i| table.slot(i));
    current(found, addr)
}

/// Sets or clears the moving mark of the entry at `addr`; its record if tracked. A block
/// still waiting in a slot (`new_blocks`) is moved into the table to be marked; if another
/// realloc in progress holds its address there, that realloc is waited for, as an insert
/// waits.
fn mark(addr: u64, moving: bool) -> Option<BlockRecord> {
    let h = hash(addr);
    let mut round = 0;
    loop {
        let mut shard = Locked::new(shard_of(addr));
        let stats = &shard.0.stats;
        let table = shard.table();
        let found = table.find(addr, h);
        // Clearing the mark: the realloc's own moving entry, in the table. A settled table
        // entry is the only one unless a free at an address of its record was missed.
        let settled = found.is_some_and(|i| !table.slot(i).moving());
        let waiting = if moving && (!settled || duplicates_possible(addr)) {
            find_new(addr)
        } else {
            None
        };
        let live = match (found, waiting) {
            (found, None) => Live::Table(found?),
            (Some(i), Some(w)) if !table.slot(i).moving() => newest_of(table, stats, i, w, addr),
            (Some(_), Some(_)) if round < MOVE_WAIT_LIMIT => {
                // Another thread's realloc in progress holds the address in the table.
                drop(shard);
                round += 1;
                wait_for_mover(round);
                continue;
            }
            (_, Some(w)) => w.take_live(addr, stats),
        };
        let i = match live {
            Live::Table(i) => i,
            Live::Taken(e, op) => {
                // Into the table, to be marked there (over another realloc's moving entry
                // once that was waited for long enough).
                let placed = place_new(e, op, table, stats, true);
                if !matches!(placed, Placed::Stored { .. }) {
                    stats.settle();
                    return None;
                }
                match table.find(addr, h) {
                    Some(i) => i,
                    None => {
                        stats.settle();
                        return None;
                    }
                }
            }
        };
        stats.settle();
        let mut e = table.slot(i);
        e.w[2] = if moving {
            e.w[2] | MOVING
        } else {
            e.w[2] & !MOVING
        };
        table.set(i, e);
        return Some(e.unpack());
    }
}

/// A realloc of the block at `addr` starts: the entry stays, marked moving. Its record, or
/// None when the block is not tracked.
pub fn begin_move(addr: u64) -> Option<BlockRecord> {
    mark(addr, true)
}

/// The realloc failed and libc kept the block where it was: the mark goes.
pub fn cancel_move(addr: u64) {
    mark(addr, false);
}

/// Whether table entry `e` is the moving entry [`begin_move`] returned as `old`. A new block
/// at the address (libc handed it out again once the realloc gave it back) can have replaced
/// that entry meanwhile, taken out of its thread's slot by a capture or by an insert that
/// waited long enough (see `place`), and be reallocated itself: that entry is not ours.
fn is_own_move(e: &Entry, old: &BlockRecord) -> bool {
    e.moving() && e.seq() == old.seq
}

/// The realloc gave its block back to libc without a new one to record (`realloc(p, 0)`
/// freed it, or the new block cannot be tracked): its moving entry goes, if it is still
/// there ([`is_own_move`]); a new block at that address stays.
pub fn end_move(old: &BlockRecord) {
    let h = hash(old.addr);
    let mut shard = Locked::new(shard_of(old.addr));
    let stats = &shard.0.stats;
    let table = shard.table();
    if let Some(i) = table.find(old.addr, h)
        && is_own_move(&table.slot(i), old)
    {
        delete_at(table, stats, i, None);
    }
    stats.settle();
}

/// The realloc returned the block at `addr` with `size` bytes (moved or not): the entry of
/// `old` (see [`begin_move`]) is replaced by the new one with both shard locks held, so a
/// frozen table holds exactly one of them. Returns false (and counts it) when the new block
/// could not be tracked (the old entry is gone all the same).
pub fn finish_move(old: &BlockRecord, addr: u64, size: u64, tid: u32, stack: u32, op: Op) -> bool {
    if !trackable(addr, size, op) {
        end_move(old);
        return false;
    }
    let rec = BlockRecord::new_block(addr, size, tid, stack);
    let (h_old, h_new) = (hash(old.addr), hash(addr));
    let (s_old, s_new) = (shard_of(old.addr), shard_of(addr));
    let same = std::ptr::eq(s_old, s_new);
    let mut round = 0;
    loop {
        // Two shards are locked in table order, as `lock_all` does.
        let (low, high) = if (s_old as *const Shard) <= (s_new as *const Shard) {
            (s_old, s_new)
        } else {
            (s_new, s_old)
        };
        let first = Locked::new(low);
        let second = (!same).then(|| Locked::new(high));
        // SAFETY: the lock of s_old is held (by `first` or `second`) until they drop below.
        let t_old = unsafe { &mut *s_old.table.get() };
        // SAFETY: likewise for s_new, a different shard (so a different table) when !same.
        let t_other = (!same).then(|| unsafe { &mut *s_new.table.get() });
        if addr != old.addr && round < MOVE_WAIT_LIMIT {
            let t_new: &Table = t_other.as_deref().unwrap_or(t_old);
            if let Some(i) = t_new.find(addr, h_new)
                && t_new.slot(i).moving()
            {
                // libc handed us the old address of a block another thread is
                // reallocating: let that realloc finish first (see the module docs).
                drop((first, second));
                round += 1;
                wait_for_mover(round);
                continue;
            }
        }
        // The old entry leaves first (the new block may have the same address).
        if let Some(i) = t_old.find(old.addr, h_old) {
            let e = t_old.slot(i);
            if is_own_move(&e, old) {
                t_old.delete(i);
                s_old.stats.released(None, e.size());
            }
        }
        let t_new: &mut Table = match t_other {
            Some(t) => t,
            None => t_old,
        };
        let placed = place(t_new, &s_new.stats, Entry::pack(&rec), h_new, true);
        if let Placed::Stored { .. } = placed {
            s_new.stats.tracked(op, size);
        }
        s_old.stats.settle();
        s_new.stats.settle();
        s_new.publish_hint(t_new.slots, t_new.cap);
        drop((first, second));
        return match placed {
            Placed::Stored { stale } => {
                if stale != 0 {
                    counters::count_rare(Rare::StaleEntry);
                }
                true
            }
            Placed::Busy | Placed::Full => {
                TRACKING.store(false, Ordering::Relaxed);
                counters::count_call(op);
                counters::count_rare(Rare::Untracked);
                false
            }
        };
    }
}

/// The last allocation sequence number handed out.
pub fn current_seq() -> u64 {
    SEQ.load(Ordering::Relaxed)
}

/// Numbers every block waiting unnumbered in a slot ([`UNNUMBERED`]), in its place, each
/// slot's oldest first, then returns the last number handed out: every block allocated
/// before this call has a number at most that. Called by the allocation clock at every tick,
/// around the start of an agent thread (its libc blocks are known by their numbers), and by
/// a capture once the world is stopped.
///
/// Lock-free beside the slots' owners, which write their entries without a lock: an entry's
/// number goes in with a compare-and-swap of the word that holds it, against the value just
/// read. If the owner emptied the entry and wrote a new block there meanwhile, the swap fails
/// (or, when the new word is the same, numbers the new block, as rightly); an entry being
/// taken meanwhile leaves its slot with its own number instead (`Entry::numbered`).
pub fn number_waiting() -> u64 {
    // One numbering at a time: a number drawn by one (the allocation clock) and stored after
    // another (a capture, a spawn window's end) returned would date its block before that
    // boundary, and an entry's word can read the same for the next block written there.
    NUMBERING.lock();
    for slot in &NEW[..used_slots()] {
        for i in slot.oldest_first() {
            // Half rewritten (its old block, in the shadow, was numbered as its realloc
            // began; the new one is numbered later).
            if slot.rewriting(i) {
                continue;
            }
            let word = &slot.words[i][2];
            let w2 = word.load(Ordering::Relaxed);
            if w2 & LOW47 != UNNUMBERED || slot.addrs[i].load(Ordering::Acquire) == 0 {
                continue;
            }
            let numbered = w2 | (number_for_waiting() & LOW47);
            let _ = word.compare_exchange(w2, numbered, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
    let last = current_seq();
    NUMBERING.unlock();
    last
}

/// Held by [`number_waiting`], and around a `fork` (`lifecycle`'s handlers: [`lock_numbering`],
/// [`unlock_numbering`]), so that a fork child never inherits it held by a thread it has not.
static NUMBERING: RawLock = RawLock::new();

/// Takes [`NUMBERING`] (before a fork).
pub(crate) fn lock_numbering() {
    NUMBERING.lock();
}

/// Releases [`NUMBERING`] (after a fork, in the parent and the child).
pub(crate) fn unlock_numbering() {
    NUMBERING.unlock();
}

/// Bytes of memory held by the block table (every shard's mapping).
pub fn table_bytes() -> u64 {
    TABLE_BYTES.load(Ordering::Relaxed)
}

/// False once a table failed to grow and the agent stopped tracking new blocks.
pub fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

pub(super) fn for_each_shard_stats(mut f: impl FnMut(&ShardStats)) {
    for s in &SHARD {
        f(&s.stats);
    }
}

/// Takes every shard lock for the fork handlers and marks `tid` as their holder.
pub(crate) fn lock_all(tid: u32) {
    for s in &SHARD {
        s.lock.lock();
    }
    HOLDER.store(tid, Ordering::Relaxed);
}

/// Releases what [`lock_all`] took.
pub(crate) fn unlock_all() {
    HOLDER.store(0, Ordering::Relaxed);
    for s in SHARD.iter().rev() {
        s.lock.unlock();
    }
}

/// The whole table, held still: every shard lock is taken (see [`freeze`]).
pub struct Frozen {
    /// Set while a [`Listed`] of it exists: HELD is being read and must not be refreshed.
    listing: AtomicBool,
}

/// The blocks held back by `held_frees` as a capture found them; used only by the thread
/// that holds the whole table (a [`Frozen`]).
struct HeldCell(UnsafeCell<HeldSet>);
// SAFETY: only accessed through a `Frozen`, and one thread at a time holds all shard locks.
unsafe impl Sync for HeldCell {}
static HELD: HeldCell = HeldCell(UnsafeCell::new(HeldSet::new()));

/// Takes every shard lock, so no hook is mid-update; hooks on other threads wait (they stay
/// interruptible by signals). The caller must not call libc malloc/free while holding it:
/// its own hooks would not be tracked (they are counted as untracked instead of deadlocking).
pub fn freeze() -> Frozen {
    lock_all(sys::current_tid());
    Frozen {
        listing: AtomicBool::new(false),
    }
}

impl Frozen {
    fn tables(&self) -> impl Iterator<Item = &Table> {
        // SAFETY: every shard lock is held for the lifetime of `self`.
        SHARD.iter().map(|s| unsafe { &*s.table.get() })
    }

    /// The number of tracked blocks, including those whose free is held back and new ones
    /// waiting in slots (`new_blocks`; more may arrive before [`Frozen::listed`]).
    pub fn len(&self) -> usize {
        self.tables().map(|t| t.len).sum::<usize>() + super::new_blocks::waiting()
    }

    /// Moves every new block waiting in a slot into the table (see `new_blocks`): with every
    /// shard lock held, so no owner is applying them meanwhile.
    fn take_all_new(&self) {
        for slot in &NEW[..used_slots()] {
            for i in 0..NURSERY {
                let (a, words, op, shadow) = slot.seen(i);
                if a == 0 {
                    continue;
                }
                let shard = shard_of(a);
                // SAFETY: this thread holds every shard lock (`self`), and this is the only
                // reference to the table made while it runs.
                let table = unsafe { &mut *shard.table.get() };
                // Taking moving entries too, so never `Busy`.
                place_new(Entry { w: words }, op, table, &shard.stats, true);
                if shadow {
                    // Its owner is stopped rewriting the entry for a finished realloc: the
                    // old block, moving, is what the program holds.
                    slot.take_shadow();
                } else {
                    slot.take(i);
                }
                shard.stats.settle();
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` for every live tracked block (in table order, not address order). Blocks
    /// the program freed but `held_frees` still holds are not live: they are left out. The
    /// tests' whole listing; the capture lists parts of [`Frozen::listed`].
    #[cfg(test)]
    pub fn for_each(&self, f: impl FnMut(&BlockRecord)) {
        self.listed().for_each_in(0..self.slots(), f);
    }

    /// The live blocks, settled for listing: new blocks waiting in slots moved into the
    /// table, the held-back frees read. [`Listed::for_each_in`] then lists any part of them,
    /// as often as wanted, from several threads at once (it only reads).
    ///
    /// While a `Listed` exists, another is the same listing (not settled again).
    pub fn listed(&self) -> Listed<'_> {
        let nested = self.listing.swap(true, Ordering::Acquire);
        if !nested {
            // After the world stopped (the capture calls this then): the blocks being added
            // to a slot now are inside their malloc.
            self.take_all_new();
            // SAFETY: this thread holds every shard lock (`self`), the condition of HELD, and
            // no `Listed` exists to read it meanwhile (`listing` was clear).
            unsafe { (*HELD.0.get()).refresh() };
        }
        Listed {
            frozen: self,
            first: !nested,
        }
    }

    /// How many slots the shards' tables have together: [`Listed::for_each_in`] takes a range
    /// of them (the tables laid end to end), so that two threads can list halves.
    pub fn slots(&self) -> usize {
        self.tables().map(|t| t.cap).sum()
    }

    /// Appends the blocks whose free `held_frees` holds back, as [`Frozen::listed`] last
    /// found them (call it after `listed`): still allocated in libc, though not live.
    pub fn held(&self, out: &mut Vec<u64>) {
        // SAFETY: this thread holds every shard lock (`self`), the condition of HELD.
        let held = unsafe { &*HELD.0.get() };
        out.extend_from_slice(held.as_slice());
    }

    /// Bytes of memory the table occupies (all shard mappings).
    pub fn table_bytes(&self) -> usize {
        self.tables().map(|t| t.mapped).sum()
    }
}

/// The live blocks of a frozen table, settled ([`Frozen::listed`]).
pub struct Listed<'a> {
    frozen: &'a Frozen,
    /// Whether this one clears `listing` when dropped (the first of nested ones).
    first: bool,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        if self.first {
            self.frozen.listing.store(false, Ordering::Release);
        }
    }
}

impl Listed<'_> {
    /// Calls `f` for every live tracked block whose slot lies in `slots` (a range of
    /// [`Frozen::slots`]), in table order. Blocks the program freed but `held_frees` still
    /// holds are not live: they are left out.
    pub fn for_each_in(&self, slots: std::ops::Range<usize>, mut f: impl FnMut(&BlockRecord)) {
        // SAFETY: every shard lock is held (`self.frozen`) and HELD was refreshed when `self`
        // was made; nothing writes it while `self` lives.
        let held = unsafe { &*HELD.0.get() };
        let mut first = 0;
        for t in self.frozen.tables() {
            let (from, to) = (slots.start.max(first), slots.end.min(first + t.cap));
            for i in from.saturating_sub(first)..to.saturating_sub(first) {
                // SAFETY: i < cap; the lock is held, nobody writes the slot.
                let e = unsafe { *t.slots.add(i) };
                if e.w[0] != 0 && !held.contains(e.addr()) {
                    f(&e.unpack());
                }
            }
            first += t.cap;
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        unlock_all();
    }
}

#[cfg(test)]
mod tests {
    // Each test's addresses start at a base of its own (0x5500_… to 0x5f00_…; 0x5600_… is
    // `capture`'s, 0x6000_… `new_blocks`'): `cargo test` runs the tests as threads of one
    // process, which share the block table.
    use super::super::new_blocks::any_waiting;
    use super::*;

    /// This thread's id and the index of its new-block slot (claimed on first use).
    fn own_slot() -> (u32, usize) {
        let tid = sys::current_tid();
        let k = super::super::held_frees::own_index(sys::thread_state(), tid);
        (tid, k.expect("a batch slot"))
    }

    /// Inserts a block at `a` (its size `a / 2`) that `t` does not hold, with room reserved.
    fn insert_new_entry(t: &mut Table, a: u64) {
        let (i, w0) = t.probe(a, hash(a)).unwrap();
        assert_eq!(w0, 0, "{a:#x} already in the table");
        let rec = BlockRecord {
            addr: a,
            size: a / 2,
            seq: 1,
            tid: 1,
            stack: 0,
            moving: false,
        };
        t.set(i, Entry::pack(&rec));
        t.len += 1;
    }

    #[test]
    fn entries_pack_every_field() {
        let r = BlockRecord {
            addr: 0x7fff_1234_5670,
            size: (1 << 47) + 3,
            seq: (1 << 46) + 9,
            tid: 4_194_303,
            stack: 0xab_cdef,
            moving: false,
        };
        assert_eq!(Entry::pack(&r).unpack(), r);
        assert_eq!(std::mem::size_of::<Entry>(), 24);
    }

    #[test]
    fn concurrent_inserts_and_removes_leave_an_exact_frozen_table() {
        // Addresses of this test only (other tests of the process may use the table too).
        const BASE: u64 = 0x5500_0000_0000;
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let addr = BASE + (t << 32) + i * 32;
                        assert!(insert(addr, i, t as u32 + 1, 0, Op::Malloc));
                        if i % 4 == 0 {
                            assert_eq!(remove(addr, Some(Op::Free)).map(|r| r.size), Some(i));
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let frozen = freeze();
        let mut mine = 0;
        let mut bytes = 0;
        frozen.for_each(|r| {
            if (BASE..BASE + (4 << 32)).contains(&r.addr) {
                mine += 1;
                bytes += r.size;
                assert_eq!(r.tid as u64, ((r.addr - BASE) >> 32) + 1);
                assert!(r.seq > 0);
            }
        });
        assert_eq!(mine, 4 * 15_000);
        assert_eq!(
            bytes,
            4 * (0..20_000u64).filter(|i| i % 4 != 0).sum::<u64>()
        );
        assert!(frozen.len() >= mine);
        // The freezing thread's own hooks must not lock again: the table says so.
        assert!(!usable_by(sys::current_tid()));
        drop(frozen);
        assert!(usable_by(sys::current_tid()));
        assert_eq!(lookup(BASE + 32).map(|r| r.size), Some(1));
        assert_eq!(lookup(BASE), None);
        // A failed realloc leaves its block as it was.
        let rec = begin_move(BASE + 32).unwrap();
        cancel_move(BASE + 32);
        assert_eq!(
            lookup(BASE + 32),
            Some(BlockRecord {
                moving: false,
                ..rec
            })
        );
    }

    /// Addresses of a frozen table within `range`, with their sizes.
    fn frozen_in(range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
        let frozen = freeze();
        let mut seen = Vec::new();
        frozen.for_each(|r| {
            if range.contains(&r.addr) {
                seen.push((r.addr, r.size));
            }
        });
        drop(frozen);
        seen.sort_unstable();
        seen
    }

    #[test]
    fn new_blocks_waiting_in_a_slot_are_seen_taken_by_other_threads_and_applied_once() {
        const BASE: u64 = 0x5700_0000_0000;
        let (tid, k) = own_slot();
        let slot = &NEW[k];
        super::apply_new(k);
        // Nothing waits in any slot (nextest gives this test its own process): a search for
        // an address the table does not hold reads no slot.
        assert!(!any_waiting());
        // Three new blocks wait in this thread's slot, none in the table yet.
        for i in 0..3u64 {
            assert!(insert_new(BASE + 64 * i, 10 + i, tid, 0, Op::Malloc, k));
        }
        assert_eq!(slot.waiting(), 3);
        assert!(any_waiting(), "a slot holding blocks is counted");
        let waiting = lookup(BASE + 64).expect("a waiting block is found");
        assert_eq!((waiting.size, waiting.tid), (11, tid));
        assert!(waiting.seq > 0);
        // Freed from another thread before its owner applied it: taken, not unknown.
        let other = std::thread::spawn(|| remove_freed(&[BASE + 64]));
        assert_eq!(other.join().unwrap(), 0);
        assert_eq!(lookup(BASE + 64), None);
        // Reallocated from another thread: moved into the table and marked.
        let moved = std::thread::spawn(|| begin_move(BASE + 128));
        let old = moved
            .join()
            .unwrap()
            .expect("a waiting block can be reallocated");
        assert_eq!((old.size, old.moving), (12, true));
        // A capture sees the one left waiting and the moving one, not the freed one.
        assert_eq!(frozen_in(BASE..BASE + 4096), [(BASE, 10), (BASE + 128, 12)]);
        assert!(finish_move(&old, BASE + 192, 30, tid, 0, Op::Realloc));
        // The owner's batch applies what is left, once: the freed block does not come back.
        super::apply_new(k);
        assert_eq!(slot.waiting(), 0);
        assert!(!any_waiting(), "an applied slot is uncounted");
        assert_eq!(frozen_in(BASE..BASE + 4096), [(BASE, 10), (BASE + 192, 30)]);
        // A full slot's oldest blocks are applied by the insert that fills it; the rest wait.
        let full = NURSERY as u64;
        for i in 0..full {
            assert!(insert_new(BASE + 4096 + 32 * i, 1, tid, 0, Op::Malloc, k));
        }
        assert_eq!(slot.waiting(), NURSERY - BATCH);
        let applied = {
            let h = |i: u64| BASE + 4096 + 32 * i;
            (0..full)
                .filter(|&i| {
                    let mut shard = Locked::new(shard_of(h(i)));
                    shard.table().find(h(i), hash(h(i))).is_some()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            applied,
            (0..BATCH as u64).collect::<Vec<_>>(),
            "the oldest went first"
        );
        assert!(any_waiting());
        assert_eq!(frozen_in(BASE + 4096..BASE + 8192).len(), NURSERY);
        for i in 0..full {
            assert_eq!(
                remove(BASE + 4096 + 32 * i, Some(Op::Free)).map(|r| r.size),
                Some(1)
            );
        }
        assert_eq!(remove(BASE, Some(Op::Free)).map(|r| r.size), Some(10));
        assert_eq!(remove(BASE + 192, Some(Op::Free)).map(|r| r.size), Some(30));
    }

    #[test]
    fn a_thread_whose_blocks_outlive_the_nursery_keeps_a_batch_waiting_at_the_ring_start() {
        use super::super::new_blocks::{OUTLIVED, PROBE_EVERY, SHORT_AFTER};
        const BASE: u64 = 0x5b00_0000_0000;
        let (tid, k) = own_slot();
        let slot = &NEW[k];
        super::apply_new(k);
        let before = counters::counters();
        let next = std::cell::Cell::new(BASE);
        let mut live = Vec::new();
        let alloc = |live: &mut Vec<u64>| {
            let addr = next.get();
            next.set(addr + 64);
            assert!(insert_new(addr, 8, tid, 0, Op::Malloc, k));
            live.push(addr);
            addr
        };
        let used_indexes = || {
            (0..NURSERY)
                .filter(|&i| slot.addrs[i].load(Ordering::Relaxed) != 0)
                .collect::<Vec<_>>()
        };
        // Blocks that outlive their wait: the ring fills to NURSERY, and after SHORT_AFTER
        // batches still holding OUTLIVED blocks or more, only a batch waits.
        for _ in 0..NURSERY + BATCH * (SHORT_AFTER as usize - 1) {
            alloc(&mut live);
        }
        assert_eq!(
            slot.waiting(),
            NURSERY - BATCH,
            "a nursery while it may pay"
        );
        // What waited drains a batch at a time; from the ring's next start, a batch at most
        // waits, at its first indexes.
        for _ in 0..NURSERY {
            alloc(&mut live);
        }
        for n in 0..3 * BATCH {
            alloc(&mut live);
            let used = used_indexes();
            assert_eq!(used, (0..(n + 1) % BATCH).collect::<Vec<_>>(), "after {n}");
        }
        // Every block is seen once, waiting or applied; counted as live.
        assert_eq!(frozen_in(BASE..next.get()).len(), live.len());
        let during = counters::counters();
        assert_eq!(during.live_blocks - before.live_blocks, live.len() as u64);
        assert_eq!(during.live_bytes - before.live_bytes, 8 * live.len() as u64);
        // Counted in FILLED across the batches, uncounted once all is applied.
        assert!(any_waiting());
        super::apply_new(k);
        assert!(!any_waiting());
        assert!(used_indexes().is_empty());
        // Blocks freed young again: a batch with fewer than OUTLIVED waiting brings the
        // nursery back.
        for _ in 0..BATCH - OUTLIVED as usize + 1 {
            let addr = alloc(&mut live);
            assert!(cancel_new(addr, k));
            live.pop();
        }
        for _ in 0..OUTLIVED as usize - 1 {
            alloc(&mut live);
        }
        assert!(used_indexes().is_empty(), "the batch was applied");
        for _ in 0..NURSERY - 1 {
            alloc(&mut live);
        }
        assert_eq!(slot.waiting(), NURSERY - 1);
        // Back to a batch, and every PROBE_EVERY batches the nursery is tried again.
        super::apply_new(k);
        for _ in 0..NURSERY + BATCH * (SHORT_AFTER as usize - 1) {
            alloc(&mut live);
        }
        let mut most = 0;
        for n in 0..(PROBE_EVERY + SHORT_AFTER + 2) as usize * BATCH + NURSERY {
            alloc(&mut live);
            if n > NURSERY {
                most = most.max(slot.waiting());
            }
        }
        assert_eq!(most, NURSERY - 1, "tried again");
        assert!(slot.waiting() < BATCH, "and a batch again");
        // Freed, the blocks leave nothing behind.
        super::apply_new(k);
        assert_eq!(frozen_in(BASE..next.get()).len(), live.len());
        for &addr in &live {
            assert_eq!(remove(addr, Some(Op::Free)).map(|r| r.size), Some(8));
        }
        let after = counters::counters();
        assert_eq!(after.live_blocks, before.live_blocks);
        assert_eq!(after.live_bytes, before.live_bytes);
    }

    #[test]
    fn a_block_its_owner_frees_while_it_waits_never_reaches_the_table() {
        const BASE: u64 = 0x5a00_0000_0000;
        let (tid, k) = own_slot();
        super::apply_new(k);
        let before = counters::counters();
        assert!(insert_new(BASE, 40, tid, 0, Op::Malloc, k));
        assert!(insert_new(BASE + 64, 8, tid, 0, Op::Calloc, k));
        assert!(cancel_new(BASE, k), "found through the slot's index");
        assert!(!cancel_new(BASE, k), "cancelled once");
        assert_eq!(lookup(BASE), None);
        let after = counters::counters();
        assert_eq!(after.calls(Op::Malloc) - before.calls(Op::Malloc), 1);
        assert_eq!(after.calls(Op::Calloc) - before.calls(Op::Calloc), 1);
        assert_eq!(after.calls(Op::Free) - before.calls(Op::Free), 1);
        assert_eq!(after.allocated_bytes - before.allocated_bytes, 48);
        assert_eq!(after.freed_bytes - before.freed_bytes, 40);
        assert_eq!(after.live_blocks - before.live_blocks, 1);
        // A block a capture moved into the table is no longer the slot's: its free goes the
        // table's way.
        assert_eq!(frozen_in(BASE..BASE + 4096), [(BASE + 64, 8)]);
        assert!(!cancel_new(BASE + 64, k));
        assert_eq!(remove(BASE + 64, Some(Op::Free)).map(|r| r.size), Some(8));
        // After a missed free at an address like it, an entry is not cancelled (another one
        // may be newer): the table's way finds the newest.
        missed_free(BASE + 128);
        assert!(insert_new(BASE + 128, 3, tid, 0, Op::Malloc, k));
        assert!(!cancel_new(BASE + 128, k));
        assert_eq!(remove(BASE + 128, Some(Op::Free)).map(|r| r.size), Some(3));
        let end = counters::counters();
        assert_eq!(end.live_blocks, before.live_blocks);
        assert_eq!(end.live_bytes, before.live_bytes);
    }

    #[test]
    fn a_waiting_block_is_numbered_when_it_leaves_its_slot_or_in_its_place_and_never_if_freed_there()
     {
        const BASE: u64 = 0x5d00_0000_0000;
        let (tid, k) = own_slot();
        super::apply_new(k);
        let start = current_seq();
        let seq_of = |addr: u64| lookup(addr).expect("tracked").seq;
        // Three blocks wait unnumbered; one is freed while it waits and never takes a number.
        for i in 0..3 {
            assert!(push_new(BASE + 64 * i, 8, tid, 0, Op::Malloc, k));
        }
        assert!(cancel_new(BASE + 64, k));
        assert_eq!(current_seq(), start, "no number taken");
        assert_eq!(seq_of(BASE), UNNUMBERED);
        // Numbered in their places (a capture, the allocation clock), oldest first.
        assert_eq!(number_waiting(), start + 2);
        assert_eq!((seq_of(BASE), seq_of(BASE + 128)), (start + 1, start + 2));
        // The batch applies them with their numbers; a block still unnumbered takes the next.
        assert!(push_new(BASE + 192, 8, tid, 0, Op::Malloc, k));
        super::apply_new(k);
        assert_eq!(NEW[k].waiting(), 0);
        assert_eq!(
            [BASE, BASE + 128, BASE + 192].map(seq_of),
            [start + 1, start + 2, start + 3]
        );
        // After a free the agent did not see, a new block is numbered at once: its entry must
        // be the newer of two at one address.
        missed_free(BASE + 4096);
        assert!(push_new(BASE + 256, 8, tid, 0, Op::Malloc, k));
        assert_eq!(seq_of(BASE + 256), start + 4);
        super::apply_new(k);
        for a in [BASE, BASE + 128, BASE + 192, BASE + 256] {
            assert_eq!(remove(a, Some(Op::Free)).map(|r| r.size), Some(8));
        }
    }

    /// This thread's tid, slot index and slot, the slot applied (emptied), and the counters then.
    fn emptied_own_slot() -> (u32, usize, &'static NewSlot, counters::Counters) {
        let (tid, k) = own_slot();
        super::apply_new(k);
        (tid, k, &NEW[k], counters::counters())
    }

    /// The blocks a capture lists at `addrs`: address, size, moving.
    fn captured(addrs: &[u64]) -> Vec<(u64, u64, bool)> {
        let frozen = freeze();
        let mut seen = Vec::new();
        frozen.for_each(|r| {
            if addrs.contains(&r.addr) {
                seen.push((r.addr, r.size, r.moving));
            }
        });
        seen
    }

    #[test]
    fn after_a_missed_free_a_block_left_unnumbered_stays_older_than_the_live_one_at_its_address() {
        const AT: u64 = 0x5f00_0000_0000;
        let (tid, k, _, _) = emptied_own_slot();
        // A block waits unnumbered; its free is missed (a signal handler's, say), and libc
        // hands the address out again: the live block is numbered at once.
        assert!(push_new(AT, 8, tid, 0, Op::Malloc, k));
        missed_free(AT);
        assert!(push_new(AT, 24, tid, 0, Op::Malloc, k));
        // The stale entry leaves the slot first, after the live one took its number.
        super::apply_new(k);
        assert_eq!(lookup(AT).map(|r| r.size), Some(24), "the live block");
        assert_eq!(remove(AT, Some(Op::Free)).map(|r| r.size), Some(24));
        assert_eq!(
            remove(AT, Some(Op::Free)),
            None,
            "the stale one is gone too"
        );
    }

    #[test]
    fn a_rewrite_its_owner_never_finished_leaves_the_old_block_moving() {
        const OLD: u64 = 0x5e80_0000_0000;
        const MOVED_TO: u64 = 0x5e80_1000_0000;
        let (tid, k, slot, _) = emptied_own_slot();
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        let (old_words, made) = slot.entry(i);
        assert!(slot.start_rewrite(i, (OLD, old_words), made));
        // Half written (a fork child applies its parent's threads' slots, whose owners are
        // gone): the shadow's block is put back and applied, moving.
        let e = Entry::pack(&BlockRecord::waiting_block(MOVED_TO, 40, tid, 0));
        slot.words[i][0].store(e.w[0], Ordering::Relaxed);
        super::apply_new(k);
        assert_eq!(captured(&[OLD, MOVED_TO]), [(OLD, 24, true)]);
        end_move(&old);
        assert_eq!(captured(&[OLD, MOVED_TO]), []);
    }

    #[test]
    fn an_untracked_new_block_of_a_realloc_taken_into_the_table_is_counted_once() {
        const OLD: u64 = 0x5e90_0000_0000;
        let (tid, k, _, before) = emptied_own_slot();
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        // A capture takes the moving entry into the table; libc returns an address the table
        // cannot hold (at or above 2^48).
        drop(captured(&[OLD]));
        let beyond = 1 << 48;
        assert_eq!(
            finish_move_waiting(&old, k, i, beyond, 40, tid, 0, Op::Realloc),
            Some(false)
        );
        assert_eq!(
            captured(&[OLD]),
            [],
            "the old block's move ended in the table"
        );
        assert_eq!(counters::counters().untracked - before.untracked, 1);
    }

    #[test]
    fn a_capture_that_stops_a_realloc_in_a_slot_halfway_sees_the_old_block_moving() {
        // Old and new blocks in different shards (64 MiB regions).
        const OLD: u64 = 0x5e00_0000_0000;
        const MOVED_TO: u64 = 0x5e00_1000_0000;
        let (tid, k, slot, before) = emptied_own_slot();
        // Stopped between its look and its mark: the capture takes the block as it is, and
        // the mark then fails, so the realloc goes through the table.
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let i = slot.find_own(OLD).expect("waiting");
        assert_eq!(captured(&[OLD]), [(OLD, 24, false)]);
        let (words, _) = slot.entry(i);
        assert!(
            !slot.mark_moving(i, words[2] | MOVING),
            "the take is noticed"
        );
        let old = begin_move(OLD).expect("in the table");
        assert!(finish_move(&old, MOVED_TO, 40, tid, 0, Op::Realloc));
        assert_eq!(remove(MOVED_TO, Some(Op::Free)).map(|r| r.size), Some(40));
        // Stopped halfway through its rewrite: the capture takes the old block, moving, from
        // the shadow, and leaves the entry to its owner, which then ends the old block's move
        // in the table.
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        let (old_words, made) = slot.entry(i);
        assert!(slot.start_rewrite(i, (OLD, old_words), made));
        assert_eq!(
            captured(&[OLD, MOVED_TO]),
            [(OLD, 24, true)],
            "one of the two: the old block, moving"
        );
        let e = Entry::pack(&BlockRecord::waiting_block(MOVED_TO, 40, tid, 0));
        assert_eq!(
            slot.end_rewrite(i, OLD, MOVED_TO, e.w, Op::Realloc),
            Rewrite::OldTaken
        );
        end_move(&old);
        assert_eq!(lookup(OLD), None, "the old block's entry is gone");
        assert_eq!(
            lookup(MOVED_TO).map(|r| (r.size, r.moving)),
            Some((40, false))
        );
        assert_eq!(captured(&[OLD, MOVED_TO]), [(MOVED_TO, 40, false)]);
        assert_eq!(remove(MOVED_TO, Some(Op::Free)).map(|r| r.size), Some(40));
        let after = counters::counters();
        assert_eq!(after.live_blocks, before.live_blocks);
        assert_eq!(after.allocated_bytes - before.allocated_bytes, 128);
        assert_eq!(after.freed_bytes - before.freed_bytes, 128);
    }

    #[test]
    fn a_realloc_of_a_waiting_block_stays_in_its_slot_and_a_capture_sees_one_of_the_two() {
        // Old and new blocks in different shards (64 MiB regions).
        const OLD: u64 = 0x5c00_0000_0000;
        const MOVED_TO: u64 = 0x5c00_1000_0000;
        let (tid, k, slot, before) = emptied_own_slot();
        let in_table = |addr: u64| {
            let mut shard = Locked::new(shard_of(addr));
            shard.table().find(addr, hash(addr)).is_some()
        };
        // Finished in the slot: the new block takes the old one's entry.
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        assert_eq!((old.size, old.moving), (24, true));
        assert_eq!(
            lookup(OLD),
            None,
            "a realloc in progress in a slot is its owner's"
        );
        assert_eq!(
            finish_move_waiting(&old, k, i, MOVED_TO, 40, tid, 0, Op::Realloc),
            Some(true)
        );
        assert_eq!(slot.waiting(), 1);
        assert!(!in_table(OLD) && !in_table(MOVED_TO));
        let moved = lookup(MOVED_TO).expect("the new block waits");
        assert_eq!((moved.size, moved.moving), (40, false));
        assert_eq!(moved.seq, UNNUMBERED, "the new block waits unnumbered");
        number_waiting();
        assert!(lookup(MOVED_TO).unwrap().seq > old.seq);
        let after = counters::counters();
        assert_eq!(after.calls(Op::Malloc) - before.calls(Op::Malloc), 1);
        assert_eq!(after.calls(Op::Realloc) - before.calls(Op::Realloc), 1);
        assert_eq!(after.allocated_bytes - before.allocated_bytes, 64);
        assert_eq!(after.freed_bytes - before.freed_bytes, 24);
        assert!(
            cancel_new(MOVED_TO, k),
            "the new block is its thread's to free"
        );
        // A capture in between moves the moving entry into the table, where it shows moving;
        // the realloc then finishes there.
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        let frozen = freeze();
        let mut seen = Vec::new();
        frozen.for_each(|r| {
            if r.addr == OLD || r.addr == MOVED_TO {
                seen.push((r.addr, r.size, r.moving));
            }
        });
        drop(frozen);
        assert_eq!(seen, [(OLD, 24, true)]);
        assert_eq!(
            finish_move_waiting(&old, k, i, MOVED_TO, 40, tid, 0, Op::Realloc),
            None
        );
        assert!(finish_move(&old, MOVED_TO, 40, tid, 0, Op::Realloc));
        assert!(!in_table(OLD) && in_table(MOVED_TO));
        assert_eq!(remove(MOVED_TO, Some(Op::Free)).map(|r| r.size), Some(40));
        // A failed realloc leaves the block waiting, unmarked; realloc(p, 0) frees it.
        assert!(insert_new(OLD, 24, tid, 0, Op::Malloc, k));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        assert!(cancel_move_waiting(&old, k, i));
        assert_eq!(lookup(OLD).map(|r| (r.size, r.moving)), Some((24, false)));
        let (old, i) = begin_move_waiting(OLD, k).expect("waiting in its slot");
        assert!(end_move_waiting(&old, k, i));
        assert_eq!(lookup(OLD), None);
        assert_eq!(slot.waiting(), 0);
        let end = counters::counters();
        assert_eq!(end.live_blocks, before.live_blocks);
        assert_eq!(end.live_bytes, before.live_bytes);
    }

    #[test]
    fn a_late_batch_does_not_replace_a_newer_block_at_its_address() {
        const ADDR: u64 = 0x5800_0000_0000;
        let (tid, k) = own_slot();
        super::apply_new(k);
        // The first block's free was never seen; the address came back to another thread,
        // whose insert reached the table first.
        assert!(insert_new(ADDR, 5, tid, 0, Op::Malloc, k));
        let newer = std::thread::spawn(move || {
            insert(ADDR, 7, 99, 0, Op::Malloc);
        });
        newer.join().unwrap();
        assert_eq!(lookup(ADDR).map(|r| r.size), Some(7));
        super::apply_new(k);
        assert_eq!(lookup(ADDR).map(|r| (r.size, r.tid)), Some((7, 99)));
        assert_eq!(remove(ADDR, Some(Op::Free)).map(|r| r.size), Some(7));
        assert_eq!(lookup(ADDR), None);
    }

    #[test]
    fn after_a_missed_free_the_newest_block_at_an_address_wins() {
        // Addresses of this test only. In each case the agent missed the free of the first
        // block at the address (`missed_free`, as the hooks count a re-entrant free), so two
        // entries hold it; the free, realloc or lookup must get the newer one, and the older
        // must go with it (counted stale), not come back when its batch is applied.
        const TABLE_OLDER: u64 = 0x5900_0000_0000;
        const SLOT_OLDER: u64 = 0x5900_0000_1000;
        const TWO_SLOTS: u64 = 0x5900_0000_2000;
        const REALLOCATED: u64 = 0x5900_0000_3000;
        const MOVED_TO: u64 = 0x5900_0000_4000;
        let (tid, k) = own_slot();
        super::apply_new(k);
        let stale_before = counters::counters().stale_entries;
        for addr in [TABLE_OLDER, SLOT_OLDER, TWO_SLOTS, REALLOCATED] {
            missed_free(addr);
            assert!(duplicates_possible(addr), "{addr:#x}");
        }

        // The table's entry is the older: the waiting block is freed, the stale entry dropped.
        assert!(insert(TABLE_OLDER, 5, tid, 0, Op::Malloc));
        assert!(insert_new(TABLE_OLDER, 50, tid, 0, Op::Malloc, k));
        assert_eq!(lookup(TABLE_OLDER).map(|r| r.size), Some(50));
        assert_eq!(
            remove(TABLE_OLDER, Some(Op::Free)).map(|r| r.size),
            Some(50)
        );
        assert_eq!(lookup(TABLE_OLDER), None);

        // The waiting block is the older (another thread's insert reached the table): a
        // held-free batch frees the table's, and the stale one does not come back.
        assert!(insert_new(SLOT_OLDER, 6, tid, 0, Op::Malloc, k));
        let other = std::thread::spawn(|| insert(SLOT_OLDER, 60, 99, 0, Op::Malloc));
        assert!(other.join().unwrap());
        assert_eq!(lookup(SLOT_OLDER).map(|r| (r.size, r.tid)), Some((60, 99)));
        assert_eq!(remove_freed(&[SLOT_OLDER]), 0);
        assert_eq!(lookup(SLOT_OLDER), None);

        // Waiting in two slots: this thread's (older) and another thread's (newer).
        assert!(insert_new(TWO_SLOTS, 7, tid, 0, Op::Malloc, k));
        let other = std::thread::spawn(|| {
            let (tid, k) = own_slot();
            // Its slot keeps the block after the thread ends (no exit destructor here).
            insert_new(TWO_SLOTS, 70, tid, 0, Op::Malloc, k)
        });
        assert!(other.join().unwrap());
        assert_eq!(lookup(TWO_SLOTS).map(|r| r.size), Some(70));
        assert_eq!(remove(TWO_SLOTS, Some(Op::Free)).map(|r| r.size), Some(70));
        assert_eq!(lookup(TWO_SLOTS), None);

        // A realloc of a waiting block beside an older table entry moves the waiting one.
        assert!(insert(REALLOCATED, 8, tid, 0, Op::Malloc));
        assert!(insert_new(REALLOCATED, 80, tid, 0, Op::Malloc, k));
        let old = begin_move(REALLOCATED).expect("a tracked block");
        assert_eq!((old.size, old.moving), (80, true));
        assert!(finish_move(&old, MOVED_TO, 90, tid, 0, Op::Realloc));
        assert_eq!(lookup(REALLOCATED), None);
        assert_eq!(lookup(MOVED_TO).map(|r| r.size), Some(90));

        // This thread's batch is applied: none of the stale entries comes back.
        super::apply_new(k);
        for addr in [TABLE_OLDER, SLOT_OLDER, TWO_SLOTS, REALLOCATED] {
            assert_eq!(lookup(addr), None, "{addr:#x}");
        }
        assert_eq!(frozen_in(0x5900_0000_0000..0x5900_0000_4000), []);
        assert_eq!(remove(MOVED_TO, Some(Op::Free)).map(|r| r.size), Some(90));
        // One stale entry per case (other tests of the process may add theirs).
        assert!(counters::counters().stale_entries >= stale_before + 4);
    }

    #[test]
    fn a_missed_free_slows_only_the_frees_at_addresses_of_its_shard_and_bucket() {
        // Addresses of this test only. A block waits in this thread's slot, so a free whose
        // address may have another entry reads the slots (counted per thread, SLOT_SEARCHES);
        // one whose table entry is the only one reads none.
        const WAITING: u64 = 0x5d00_0000_0000;
        const MISSED: u64 = 0x5d10_0000_0000;
        let (tid, k) = own_slot();
        super::apply_new(k);
        assert!(insert_new(WAITING, 1, tid, 0, Op::Malloc, k));
        assert!(any_waiting());
        let in_missed_shard = |a: u64| std::ptr::eq(shard_of(a), shard_of(MISSED));
        let bucket = missed_bit(MISSED);
        let other_shard = (1..)
            .map(|i| MISSED + (i << 26))
            .find(|&a| !in_missed_shard(a))
            .unwrap();
        let other_bucket = (1..)
            .map(|i| MISSED + 16 * i)
            .find(|&a| missed_bit(a) != bucket)
            .unwrap();
        let same_bucket = (1..)
            .map(|i| MISSED + 16 * i)
            .find(|&a| missed_bit(a) == bucket)
            .unwrap();
        assert!(in_missed_shard(other_bucket) && in_missed_shard(same_bucket));
        let searches_to_free = |addr: u64| {
            assert!(insert(addr, 3, tid, 0, Op::Malloc));
            let before = SLOT_SEARCHES.with(|n| n.get());
            assert_eq!(remove(addr, Some(Op::Free)).map(|r| r.size), Some(3));
            assert!(insert(addr, 4, tid, 0, Op::Malloc));
            assert_eq!(remove_freed(&[addr]), 0);
            SLOT_SEARCHES.with(|n| n.get()) - before
        };
        // Before the miss, no free that finds its address in the table searches the slots.
        for addr in [other_shard, other_bucket, same_bucket] {
            assert_eq!(searches_to_free(addr), 0, "{addr:#x} before the miss");
        }
        missed_free(MISSED);
        assert_eq!(searches_to_free(other_shard), 0, "another shard");
        assert_eq!(searches_to_free(other_bucket), 0, "another bucket");
        // A free and a held-free batch at an address of its bucket each search.
        assert_eq!(searches_to_free(same_bucket), 2, "its own bucket");
        assert_eq!(remove(WAITING, Some(Op::Free)).map(|r| r.size), Some(1));
        super::apply_new(k);
    }

    #[test]
    fn a_realloc_that_freed_its_block_leaves_a_newer_block_at_its_address_alone() {
        // Addresses of this test only. A realloc whose block libc freed (realloc(p, 0)), or
        // whose new block cannot be tracked, ends by removing its own moving entry. If libc
        // handed the address out again meanwhile, and a capture took the new block out of
        // its thread's slot into the table over the moving entry, that new block must stay.
        const FREED: u64 = 0x5e00_0000_0000;
        const UNTRACKABLE: u64 = 0x5e00_0000_1000;
        let new_block_elsewhere = |addr: u64| {
            std::thread::spawn(move || {
                let (tid, k) = own_slot();
                insert_new(addr, 40, tid, 0, Op::Malloc, k)
            })
            .join()
            .unwrap()
        };
        for addr in [FREED, UNTRACKABLE] {
            assert!(insert(addr, 100, 7, 0, Op::Malloc));
            let old = begin_move(addr).expect("a tracked block");
            assert!(new_block_elsewhere(addr));
            // A capture now: the new block supersedes the realloc in progress.
            assert_eq!(frozen_in(addr..addr + 1), [(addr, 40)]);
            if addr == FREED {
                end_move(&old);
            } else {
                // An address beyond 48 bits cannot be tracked.
                assert!(!finish_move(&old, 1 << 50, 200, 7, 0, Op::Realloc));
            }
            assert_eq!(lookup(addr).map(|r| r.size), Some(40), "{addr:#x}");
            assert_eq!(remove(addr, Some(Op::Free)).map(|r| r.size), Some(40));
        }
    }

    #[test]
    fn a_realloc_keeps_its_block_visible_and_a_reuser_of_its_address_waits() {
        const OLD: u64 = 0x5f00_0000_0000;
        const NEW: u64 = 0x5f00_0010_0000;
        assert!(insert(OLD, 100, 7, 0, Op::Malloc));
        let old = begin_move(OLD).unwrap();
        assert_eq!((old.addr, old.size, old.moving), (OLD, 100, true));
        // While libc works, the block is still there (old address and size) for a snapshot.
        let frozen = freeze();
        let mut seen = Vec::new();
        frozen.for_each(|r| {
            if r.addr == OLD || r.addr == NEW {
                seen.push((r.addr, r.size, r.moving));
            }
        });
        drop(frozen);
        assert_eq!(seen, [(OLD, 100, true)]);
        // libc moved the block and gave its old address to another thread, whose insert must
        // wait until the realloc recorded the new address.
        let waits = MOVER_WAITS.load(Ordering::Relaxed);
        let reuser = std::thread::spawn(|| insert(OLD, 40, 8, 0, Op::Malloc));
        // The reuser found the moving entry and waits (as long as the realloc goes on).
        while MOVER_WAITS.load(Ordering::Relaxed) < waits + 100 {
            assert!(
                !reuser.is_finished(),
                "the insert did not wait for the move"
            );
            std::thread::yield_now();
        }
        assert_eq!(lookup(OLD).map(|r| (r.size, r.tid)), Some((100, 7)));
        assert!(finish_move(&old, NEW, 300, 7, 0, Op::Realloc));
        assert!(reuser.join().unwrap());
        assert_eq!(lookup(NEW).map(|r| (r.size, r.tid)), Some((300, 7)));
        assert_eq!(lookup(OLD).map(|r| (r.size, r.tid)), Some((40, 8)));
        // In place: same address, new size, one entry.
        let old = begin_move(NEW).unwrap();
        assert!(finish_move(&old, NEW, 500, 7, 0, Op::Realloc));
        assert_eq!(lookup(NEW).map(|r| r.size), Some(500));
        assert!(lookup(NEW).unwrap().seq > old.seq);
        assert_eq!(remove(NEW, Some(Op::Free)).map(|r| r.size), Some(500));
        assert_eq!(remove(OLD, Some(Op::Free)).map(|r| r.size), Some(40));
    }

    #[test]
    fn a_broken_table_stops_tracking_instead_of_panicking_or_looping() {
        // A table with no empty slot (its load factor forbids it: only memory corruption
        // gets there): a probe for an absent address ends, and tracking stops.
        let mut t = Table::EMPTY;
        assert!(t.reserve_one());
        for i in 0..t.cap {
            let rec = BlockRecord {
                addr: 0x10_0000 + 16 * i as u64,
                size: 1,
                seq: 1,
                tid: 1,
                stack: 0,
                moving: false,
            };
            t.set(i, Entry::pack(&rec));
        }
        t.len = t.cap;
        assert!(tracking());
        assert_eq!(t.find(0x99_0000, hash(0x99_0000)), None);
        assert!(!tracking());
        // More deletions than entries, an index past the end: no panic.
        t.len = 0;
        t.delete(0);
        assert_eq!(t.len, 0);
        assert_eq!(t.slot(t.cap).w[0], 0);
        t.set(t.cap + 5, Entry::default());
        // SAFETY: the table's mapping is not used after this.
        unsafe { sys::unmap(t.slots.cast(), t.mapped) };
    }

    #[test]
    fn table_inserts_finds_and_deletes_through_growth() {
        let mut t = Table::EMPTY;
        let addrs: Vec<u64> = (1..20_000u64).map(|i| i * 48 + 0x10_0000).collect();
        for &a in &addrs {
            assert!(t.reserve_one());
            insert_new_entry(&mut t, a);
        }
        assert!(t.len * MAX_LOAD.1 <= t.cap * MAX_LOAD.0);
        // Delete every other one, then every survivor is still found.
        for &a in addrs.iter().step_by(2) {
            let (i, _) = t.probe(a, hash(a)).unwrap();
            assert_eq!(t.slot(i).addr(), a);
            t.delete(i);
        }
        for (k, &a) in addrs.iter().enumerate() {
            let (i, _) = t.probe(a, hash(a)).unwrap();
            if k % 2 == 0 {
                assert_eq!(t.slot(i).w[0], 0, "deleted {a:#x} still present");
            } else {
                assert_eq!(t.slot(i).unpack().size, a / 2);
            }
        }
        assert_eq!(t.len, addrs.len() / 2);
        // SAFETY: the table's mapping is not used after this.
        unsafe { sys::unmap(t.slots.cast(), t.mapped) };
    }

    #[test]
    fn a_table_grown_in_place_keeps_every_entry_on_an_unbroken_path_from_its_home() {
        let mut t = Table::EMPTY;
        // Every entry's probe path, from its home to its slot, holds no empty slot.
        let check = |t: &Table, live: &[u64]| {
            let mut n = 0;
            for i in 0..t.cap {
                let e = t.slot(i);
                if e.w[0] == 0 {
                    continue;
                }
                n += 1;
                let mut j = home(hash(e.addr()), t.cap);
                while j != i {
                    assert_ne!(t.slot(j).w[0], 0, "a gap on the path of {:#x}", e.addr());
                    j = t.next(j);
                }
            }
            assert_eq!(n, t.len);
            assert_eq!(n, live.len());
            for &a in live {
                let (i, w0) = t.probe(a, hash(a)).unwrap();
                assert_eq!(w0 & LOW48, a, "{a:#x} not found");
                assert_eq!(t.slot(i).size(), a / 2);
            }
        };
        // Addresses whose homes crowd the table's last 64th, so that its last run goes over
        // the end into the first slots, beside addresses spread over the whole table.
        let crowded = (0x20_0000u64..)
            .step_by(16)
            .filter(|&a| hash(a) >> 58 == 63)
            .take(3000);
        let spread = (0x4000_0000u64..).step_by(48).take(17_000);
        let mut addrs: Vec<u64> = crowded.chain(spread).collect();
        // Interleaved, so that every growth meets both.
        addrs.sort_by_key(|&a| a.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let grown = GROWN_IN_PLACE.with(|n| n.get());
        let mut live = Vec::new();
        for (n, &a) in addrs.iter().enumerate() {
            let cap = t.cap;
            assert!(t.reserve_one());
            if t.cap != cap {
                check(&t, &live);
            }
            insert_new_entry(&mut t, a);
            live.push(a);
            // Some deleted on the way, so that runs have holes filled back.
            if n % 5 == 4 {
                let gone = live.swap_remove(n % live.len());
                let (i, _) = t.probe(gone, hash(gone)).unwrap();
                t.delete(i);
            }
        }
        check(&t, &live);
        assert!(
            GROWN_IN_PLACE.with(|n| n.get()) >= grown + 5,
            "the table grew in place"
        );
        // SAFETY: the table's mapping is not used after this.
        unsafe { sys::unmap(t.slots.cast(), t.mapped) };
    }
}
