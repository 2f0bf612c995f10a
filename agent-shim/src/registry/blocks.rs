//! The block table: every live heap block of the process with its size, allocation
//! sequence number, allocating thread and allocation stack.
//!
//! 64 shards chosen by a hash of the address, each an open-addressing table (linear probing,
//! backward-shift deletion, no tombstones) in its own anonymous mapping, grown by 1.5× when
//! 85% full, guarded by a futex lock ([`crate::sync::RawLock`]) that a thread waiting on it
//! can still be interrupted by signals. An entry packs address, size, sequence number, tid
//! and stack id into 24 bytes, so a block costs 24 / load ≈ 28–42 bytes.
//!
//! Hooks insert after libc returned a block and remove *before* handing a block back to libc,
//! so an address reused by another thread is never removed by the wrong hook. This module
//! never allocates from the heap, never prints and holds a shard lock only for one probe.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::counters::{self, Op, Rare, ShardStats};
use crate::sync::{CacheLine, RawLock};
use crate::sys;

pub const SHARDS: usize = 64;
const SHARD_BITS: u32 = 6;
/// Grow when `len / cap` would exceed 85/100.
const MAX_LOAD: (usize, usize) = (85, 100);
const PAGE: usize = 4096;
const ENTRY: usize = std::mem::size_of::<Entry>();
const LOW48: u64 = (1 << 48) - 1;
const LOW24: u32 = (1 << 24) - 1;

/// One live block, as the capture sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecord {
    pub addr: u64,
    pub size: u64,
    pub seq: u64,
    pub tid: u32,
    /// Allocation stack id (see `stacks::frames`); 0 = none.
    pub stack: u32,
}

/// 24 bytes: `w0 = addr | tid[0..16] << 48`, `w1 = size | tid[16..24] << 48 | stack[0..8] << 56`,
/// `w2 = seq | stack[8..24] << 48`. Addresses and sizes below 2^48 (x86-64 user space), seq
/// wraps at 2^48, tid and stack ids below 2^24. `w0 == 0` marks an empty slot.
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
                (r.seq & LOW48) | (stack >> 8) << 48,
            ],
        }
    }

    fn addr(&self) -> u64 {
        self.w[0] & LOW48
    }

    fn size(&self) -> u64 {
        self.w[1] & LOW48
    }

    fn unpack(&self) -> BlockRecord {
        let tid = (self.w[0] >> 48) as u32 | ((self.w[1] >> 48) as u32 & 0xff) << 16;
        let stack = (self.w[1] >> 56) as u32 | ((self.w[2] >> 48) as u32) << 8;
        BlockRecord {
            addr: self.addr(),
            size: self.size(),
            seq: self.w[2] & LOW48,
            tid,
            stack,
        }
    }
}

struct Table {
    slots: *mut Entry,
    cap: usize,
    len: usize,
    /// Bytes of the mapping behind `slots`.
    mapped: usize,
}

#[repr(align(64))]
struct Shard {
    lock: RawLock,
    table: UnsafeCell<Table>,
    stats: ShardStats,
}

// SAFETY: `table` is only accessed with `lock` held; `stats` are atomics.
unsafe impl Sync for Shard {}

static SHARD: [Shard; SHARDS] = [const {
    Shard {
        lock: RawLock::new(),
        table: UnsafeCell::new(Table {
            slots: std::ptr::null_mut(),
            cap: 0,
            len: 0,
            mapped: 0,
        }),
        stats: ShardStats::new(),
    }
}; SHARDS];

/// The global allocation sequence number (the last one handed out).
static SEQ: CacheLine<AtomicU64> = CacheLine(AtomicU64::new(0));
/// Tid of the thread that holds every shard lock (freeze or fork), 0 if none: its own hooks
/// must not try to lock a shard again.
static HOLDER: CacheLine<AtomicU32> = CacheLine(AtomicU32::new(0));
/// Bytes mapped by all shard tables (for the agent-memory figure).
static TABLE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Cleared when a table could not grow: the agent stops tracking new blocks (counted).
static TRACKING: CacheLine<AtomicBool> = CacheLine(AtomicBool::new(true));

#[inline]
fn hash(addr: u64) -> u64 {
    (addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
fn shard_of(h: u64) -> &'static Shard {
    &SHARD[(h >> (64 - SHARD_BITS)) as usize]
}

#[inline]
fn home(h: u64, cap: usize) -> usize {
    ((u128::from(h << SHARD_BITS) * cap as u128) >> 64) as usize
}

impl Table {
    fn slot(&self, i: usize) -> Entry {
        assert!(i < self.cap);
        // SAFETY: i < cap and slots points to cap initialised entries; the caller holds the
        // shard lock, so nobody writes them meanwhile.
        unsafe { *self.slots.add(i) }
    }

    fn set(&mut self, i: usize, e: Entry) {
        assert!(i < self.cap);
        // SAFETY: as in `slot`, and `&mut self` makes this the only access.
        unsafe { *self.slots.add(i) = e }
    }

    /// The index of `addr`, or of the empty slot where it would go.
    fn probe(&self, addr: u64, h: u64) -> usize {
        let mut i = home(h, self.cap);
        loop {
            let e = self.slot(i);
            if e.w[0] == 0 || e.addr() == addr {
                return i;
            }
            i = if i + 1 == self.cap { 0 } else { i + 1 };
        }
    }

    /// Makes room for one more entry; false when the kernel refuses memory.
    fn reserve_one(&mut self) -> bool {
        if (self.len + 1) * MAX_LOAD.1 <= self.cap * MAX_LOAD.0 {
            return true;
        }
        let want = (self.cap + self.cap / 2).max(PAGE / ENTRY);
        let mapped = (want * ENTRY).next_multiple_of(PAGE);
        let Some(p) = sys::map_anon(mapped, false) else {
            return false;
        };
        let mut bigger = Table {
            slots: p.cast(),
            cap: mapped / ENTRY,
            len: self.len,
            mapped,
        };
        for i in 0..self.cap {
            let e = self.slot(i);
            if e.w[0] != 0 {
                let j = bigger.probe(e.addr(), hash(e.addr()));
                bigger.set(j, e);
            }
        }
        TABLE_BYTES.fetch_add(mapped as u64, Ordering::Relaxed);
        let old = std::mem::replace(self, bigger);
        if old.mapped > 0 {
            // SAFETY: the old slots were copied out; nothing refers to them any more.
            unsafe { sys::unmap(old.slots.cast(), old.mapped) };
            TABLE_BYTES.fetch_sub(old.mapped as u64, Ordering::Relaxed);
        }
        true
    }

    /// Removes slot `i` and shifts the following run back (keeps probing correct).
    fn delete(&mut self, mut hole: usize) {
        let cap = self.cap;
        let mut j = hole;
        loop {
            j = if j + 1 == cap { 0 } else { j + 1 };
            let e = self.slot(j);
            if e.w[0] == 0 {
                break;
            }
            let h = home(hash(e.addr()), cap);
            // Move e into the hole if the hole lies on its probe path [h, j].
            if (j + cap - h) % cap >= (j + cap - hole) % cap {
                self.set(hole, e);
                hole = j;
            }
        }
        self.set(hole, Entry::default());
        self.len -= 1;
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

/// Records a new block. Returns false (and counts it) when it could not be tracked.
pub fn insert(addr: u64, size: u64, tid: u32, stack: u32, op: Op) -> bool {
    if addr > LOW48 || size > LOW48 || addr == 0 || !TRACKING.load(Ordering::Relaxed) {
        counters::count_call(op);
        counters::count_rare(Rare::Untracked);
        return false;
    }
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
    let h = hash(addr);
    let mut shard = Locked::new(shard_of(h));
    let stats = &shard.0.stats;
    let table = shard.table();
    if !table.reserve_one() {
        drop(shard);
        TRACKING.store(false, Ordering::Relaxed);
        counters::count_call(op);
        counters::count_rare(Rare::Untracked);
        return false;
    }
    let i = table.probe(addr, h);
    let slot = table.slot(i);
    let (mut stale, mut was_stale) = (0, false);
    if slot.w[0] != 0 {
        (stale, was_stale) = (slot.size(), true);
        stats.released(None, stale);
    } else {
        table.len += 1;
    }
    table.set(
        i,
        Entry::pack(&BlockRecord {
            addr,
            size,
            seq,
            tid,
            stack,
        }),
    );
    stats.tracked(op, size);
    drop(shard);
    if was_stale {
        counters::count_rare(Rare::StaleEntry);
    }
    counters::add_live(size as i64 - stale as i64);
    true
}

/// Removes the block at `addr`; returns its record, or None if it is not tracked. `op` is
/// counted as the call when the block is found (free); a realloc counts itself on insert.
pub fn remove(addr: u64, op: Option<Op>) -> Option<BlockRecord> {
    let h = hash(addr);
    let mut shard = Locked::new(shard_of(h));
    let stats = &shard.0.stats;
    let table = shard.table();
    if table.cap == 0 {
        return None;
    }
    let i = table.probe(addr, h);
    let e = table.slot(i);
    if e.w[0] == 0 {
        return None;
    }
    table.delete(i);
    let rec = e.unpack();
    stats.released(op, rec.size);
    drop(shard);
    counters::add_live(-(rec.size as i64));
    Some(rec)
}

/// The record of the live block at `addr` (its start), if tracked.
pub fn lookup(addr: u64) -> Option<BlockRecord> {
    let h = hash(addr);
    let mut shard = Locked::new(shard_of(h));
    let table = shard.table();
    if table.cap == 0 {
        return None;
    }
    let e = table.slot(table.probe(addr, h));
    (e.w[0] != 0).then(|| e.unpack())
}

/// Puts back a block that `remove` took out for a realloc that then failed.
pub fn restore(rec: &BlockRecord) {
    let h = hash(rec.addr);
    let mut shard = Locked::new(shard_of(h));
    let stats = &shard.0.stats;
    let table = shard.table();
    // The slot it left is free or reusable: remove() never shrinks the table.
    let i = table.probe(rec.addr, h);
    if table.slot(i).w[0] == 0 {
        table.len += 1;
    }
    table.set(i, Entry::pack(rec));
    stats.unreleased(rec.size);
    drop(shard);
    counters::add_live(rec.size as i64);
}

/// The last allocation sequence number handed out.
pub fn current_seq() -> u64 {
    SEQ.load(Ordering::Relaxed)
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
    _locked: (),
}

/// Takes every shard lock, so no hook is mid-update; hooks on other threads wait (they stay
/// interruptible by signals). The caller must not call libc malloc/free while holding it:
/// its own hooks would not be tracked (they are counted as untracked instead of deadlocking).
pub fn freeze() -> Frozen {
    lock_all(sys::current_tid());
    Frozen { _locked: () }
}

impl Frozen {
    fn tables(&self) -> impl Iterator<Item = &Table> {
        // SAFETY: every shard lock is held for the lifetime of `self`.
        SHARD.iter().map(|s| unsafe { &*s.table.get() })
    }

    /// The number of live tracked blocks.
    pub fn len(&self) -> usize {
        self.tables().map(|t| t.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` for every live tracked block (in table order, not address order).
    pub fn for_each(&self, mut f: impl FnMut(&BlockRecord)) {
        for t in self.tables() {
            for i in 0..t.cap {
                // SAFETY: i < cap; the lock is held, nobody writes the slot.
                let e = unsafe { *t.slots.add(i) };
                if e.w[0] != 0 {
                    f(&e.unpack());
                }
            }
        }
    }

    /// Bytes of memory the table occupies (all shard mappings).
    pub fn table_bytes(&self) -> usize {
        self.tables().map(|t| t.mapped).sum()
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        unlock_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_pack_every_field() {
        let r = BlockRecord {
            addr: 0x7fff_1234_5670,
            size: (1 << 47) + 3,
            seq: (1 << 47) + 9,
            tid: 4_194_303,
            stack: 0xab_cdef,
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
        // A removed block put back by a failed realloc is found again.
        let rec = remove(BASE + 32, None).unwrap();
        restore(&rec);
        assert_eq!(lookup(BASE + 32), Some(rec));
    }

    #[test]
    fn table_inserts_finds_and_deletes_through_growth() {
        let mut t = Table {
            slots: std::ptr::null_mut(),
            cap: 0,
            len: 0,
            mapped: 0,
        };
        let addrs: Vec<u64> = (1..20_000u64).map(|i| i * 48 + 0x10_0000).collect();
        for &a in &addrs {
            assert!(t.reserve_one());
            let i = t.probe(a, hash(a));
            assert_eq!(t.slot(i).w[0], 0);
            let rec = BlockRecord {
                addr: a,
                size: a / 2,
                seq: 1,
                tid: 1,
                stack: 0,
            };
            t.set(i, Entry::pack(&rec));
            t.len += 1;
        }
        assert!(t.len * 100 <= t.cap * 85);
        // Delete every other one, then every survivor is still found.
        for &a in addrs.iter().step_by(2) {
            let i = t.probe(a, hash(a));
            assert_eq!(t.slot(i).addr(), a);
            t.delete(i);
        }
        for (k, &a) in addrs.iter().enumerate() {
            let i = t.probe(a, hash(a));
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
}
