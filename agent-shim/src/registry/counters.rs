//! The live counters (docs/reference.md §8): live bytes and blocks, bytes allocated so far, peak
//! live bytes, calls per hooked function, NULL returns, frees and reallocs of unknown pointers.
//!
//! Keeping the hot path cheap: the common events (a block tracked or released) are counted
//! in the statistics of the block table's shard, under the shard lock the hook holds anyway,
//! with plain loads and stores (no extra atomic read-modify-write). Rare events (NULL returns,
//! `free(NULL)`, unknown pointers, untracked blocks) use shared atomics. [`counters`] sums
//! them on read.
//!
//! Live bytes are exact: each shard's allocated minus freed bytes, summed on read (like the
//! live blocks).
//!
//! Peak: each shard publishes its live bytes into one global atomic ([`ShardStats::settle`],
//! under the shard lock) once they moved by at least the shard's *quantum* since it last did,
//! and the peak is the highest value that global total ever held (`fetch_add`, then
//! `fetch_max` only when higher), or that total plus the new blocks waiting in slots at a
//! reading of the counters (below).
//! A quantum is 0 while the published total is below 1 MiB — every change is published and
//! the peak is exact, as it was when every hook updated the global counter — and 1/4096 of
//! the published total above that. So the global total is off the true live bytes by less
//! than 64 quanta (one per shard), and the peak is within that of the true maximum: less
//! than 1/64 (1.6%) of the live bytes around the peak, never more than the true peak plus
//! that. Why not exact at any size: every hook would then need a read-modify-write on one
//! cache line shared by all threads (a hot spot of the stacks-off profile on the stress
//! benchmark, BENCHMARKS.md "Hook overhead"); with the quantum, the stress workload (80 MB
//! live) publishes about once per ten calls of a shard.
//!
//! Held frees (`held_frees`): a freed block leaves its shard's statistics only when its
//! thread's batch is applied. [`counters`] counts the blocks held at the moment it reads as
//! freed, so live bytes and blocks stay exact; the peak is published by the shards and can
//! include blocks held then, up to 15 per thread above the true peak.
//!
//! New blocks (`new_blocks`) enter their shard's statistics only when their thread's batch
//! is applied; [`counters`] counts those waiting as allocated and live. The shards never
//! publish those, so a reading records a peak itself: the live bytes it computed, but no more
//! than the published total (read last) plus the bytes it found waiting in slots. The bound
//! is there because those live bytes can come out too high: they subtract the held frees
//! read after the shards were summed, so a batch of held frees applied in between is
//! subtracted by neither, and recorded, that excess would stay in the peak for good. The
//! published total read after the batch was applied no longer counts it (below 1 MiB it is
//! exact; above, within the quanta), while what it still counts of held frees is what the
//! shards' own peak may count anyway. (The published total plus the waiting bytes can count
//! a batch of new blocks twice, when it is published between the two reads; the live bytes,
//! which count it at most once, bound that too.) So a reading adds to the peak only the new
//! blocks waiting, never held frees in flight. The peak a reading reports is never below the live
//! bytes it reports, but only what it recorded stays. The peak can miss what waits in slots
//! (blocks under 4 KiB, fewer than 16 per thread) when it is freed before its batch is
//! applied and no reading fell in between.
//!
//! Never allocates or prints, and what the hooks call never locks; [`counters`] (never
//! called from a hook) takes a shard lock per held block to learn its size.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::sync::CacheLine;

/// The hooked functions, as counter indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    Malloc,
    Calloc,
    Realloc,
    Reallocarray,
    Free,
    PosixMemalign,
    AlignedAlloc,
    Memalign,
    Valloc,
    Pvalloc,
}

pub const OPS: usize = 10;

/// Counters kept per block-table shard, written only under that shard's lock.
#[derive(Default)]
pub struct ShardStats {
    calls: [AtomicU64; OPS],
    allocated_bytes: AtomicU64,
    freed_bytes: AtomicU64,
    blocks_in: AtomicU64,
    blocks_out: AtomicU64,
    /// The live bytes (allocated − freed) this shard last published into [`PUBLISHED`].
    published: AtomicI64,
    /// How far its live bytes may move before it publishes them again (see the module docs).
    quantum: AtomicI64,
}

#[inline]
fn bump(c: &AtomicU64, by: u64) {
    // Single writer (the shard lock holder): a plain load and store, no lock prefix.
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl ShardStats {
    pub const fn new() -> Self {
        Self {
            calls: [const { AtomicU64::new(0) }; OPS],
            allocated_bytes: AtomicU64::new(0),
            freed_bytes: AtomicU64::new(0),
            blocks_in: AtomicU64::new(0),
            blocks_out: AtomicU64::new(0),
            published: AtomicI64::new(0),
            quantum: AtomicI64::new(0),
        }
    }

    /// Publishes this shard's live bytes into the global total when they moved by at least
    /// the quantum since the last time, and raises the peak. Caller holds the shard lock
    /// (after its `tracked`/`released` calls).
    #[inline]
    pub fn settle(&self) {
        let live = self
            .allocated_bytes
            .load(Ordering::Relaxed)
            .wrapping_sub(self.freed_bytes.load(Ordering::Relaxed)) as i64;
        let delta = live.wrapping_sub(self.published.load(Ordering::Relaxed));
        if delta == 0 || delta.unsigned_abs() < self.quantum.load(Ordering::Relaxed) as u64 {
            return;
        }
        self.published.store(live, Ordering::Relaxed);
        let now = PUBLISHED
            .fetch_add(delta, Ordering::Relaxed)
            .wrapping_add(delta);
        if delta > 0 && now > PEAK_BYTES.load(Ordering::Relaxed) {
            PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
        }
        let quantum = if now < EXACT_BELOW {
            0
        } else {
            now >> QUANTUM_SHIFT
        };
        self.quantum.store(quantum, Ordering::Relaxed);
    }

    /// A block entered the table. Caller holds the shard lock.
    #[inline]
    pub fn tracked(&self, op: Op, size: u64) {
        bump(&self.calls[op as usize], 1);
        bump(&self.allocated_bytes, size);
        bump(&self.blocks_in, 1);
    }

    /// A block left the table; `op` is counted when this is the whole call (a free).
    #[inline]
    pub fn released(&self, op: Option<Op>, size: u64) {
        if let Some(op) = op {
            bump(&self.calls[op as usize], 1);
        }
        bump(&self.freed_bytes, size);
        bump(&self.blocks_out, 1);
    }

    /// Undoes a `released(None, size)` (a failed realloc puts its block back).
    #[inline]
    pub fn unreleased(&self, size: u64) {
        bump(&self.freed_bytes, size.wrapping_neg());
        bump(&self.blocks_out, u64::MAX);
    }

    fn add_to(&self, c: &mut Counters) {
        for (i, calls) in self.calls.iter().enumerate() {
            c.calls[i] += calls.load(Ordering::Relaxed);
        }
        c.allocated_bytes += self.allocated_bytes.load(Ordering::Relaxed);
        c.freed_bytes += self.freed_bytes.load(Ordering::Relaxed);
        c.live_blocks += self.blocks_in.load(Ordering::Relaxed);
        c.live_blocks = c
            .live_blocks
            .wrapping_sub(self.blocks_out.load(Ordering::Relaxed));
    }
}

/// Rare events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Rare {
    /// A hooked call returned NULL (or ENOMEM/EINVAL for posix_memalign) while asked for memory.
    NullReturn,
    FreeNull,
    UnknownFree,
    UnknownRealloc,
    /// A block the table could not take (table out of memory, re-entrant call, address
    /// beyond 48 bits, or while the world is frozen by the calling thread).
    Untracked,
    /// An insert found the address still in the table (its free was not seen): the old
    /// entry was replaced and counted as released.
    StaleEntry,
    /// An allocation stack that the stack table could not intern (stack id 0).
    StackDropped,
}

const RARES: usize = 7;

static RARE: [AtomicU64; RARES] = [const { AtomicU64::new(0) }; RARES];
/// Calls that did not reach a shard (NULL results, free(NULL), unknown pointers, untracked).
static RARE_CALLS: [AtomicU64; OPS] = [const { AtomicU64::new(0) }; OPS];
/// What the agent's own threads did through libc (a share of the totals, not in addition).
static AGENT_CALLS: [AtomicU64; OPS] = [const { AtomicU64::new(0) }; OPS];
static AGENT_BYTES_IN: AtomicU64 = AtomicU64::new(0);
static AGENT_BYTES_OUT: AtomicU64 = AtomicU64::new(0);
static AGENT_BLOCKS_IN: AtomicU64 = AtomicU64::new(0);
static AGENT_BLOCKS_OUT: AtomicU64 = AtomicU64::new(0);
/// The sum of what the shards published of their live bytes (see [`ShardStats::settle`]).
static PUBLISHED: CacheLine<AtomicI64> = CacheLine(AtomicI64::new(0));
static PEAK_BYTES: CacheLine<AtomicI64> = CacheLine(AtomicI64::new(0));
/// Below this published total every change is published (an exact peak).
const EXACT_BELOW: i64 = 1 << 20;
/// Above it, a shard's quantum is the published total over 2^12.
const QUANTUM_SHIFT: u32 = 12;

#[inline]
pub fn count_rare(what: Rare) {
    RARE[what as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts a call that no shard counted.
#[inline]
pub fn count_call(op: Op) {
    RARE_CALLS[op as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts a call made on an agent thread (on top of its normal counting).
#[inline]
pub fn agent_call(op: Op) {
    AGENT_CALLS[op as usize].fetch_add(1, Ordering::Relaxed);
}

/// A block tracked on an agent thread.
#[inline]
pub fn agent_block_in(size: u64) {
    AGENT_BYTES_IN.fetch_add(size, Ordering::Relaxed);
    AGENT_BLOCKS_IN.fetch_add(1, Ordering::Relaxed);
}

/// A block released on an agent thread.
#[inline]
pub fn agent_block_out(size: u64) {
    AGENT_BYTES_OUT.fetch_add(size, Ordering::Relaxed);
    AGENT_BLOCKS_OUT.fetch_add(1, Ordering::Relaxed);
}

/// Raises the peak to the live bytes the shards published plus `waiting`, the bytes of the
/// calling thread's new blocks waiting in its slot, which no shard published (a big block's
/// insert, `blocks::insert_new`: see the module docs).
#[inline]
pub fn raise_peak_above_published(waiting: u64) {
    if waiting == 0 {
        return;
    }
    let reached = PUBLISHED
        .load(Ordering::Relaxed)
        .saturating_add(i64::try_from(waiting).unwrap_or(i64::MAX));
    if reached > PEAK_BYTES.load(Ordering::Relaxed) {
        PEAK_BYTES.fetch_max(reached, Ordering::Relaxed);
    }
}

/// A snapshot of every counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Bytes of every block ever tracked (a realloc counts its new size).
    pub allocated_bytes: u64,
    /// Bytes of every block released (a realloc counts its old size).
    pub freed_bytes: u64,
    pub peak_live_bytes: u64,
    /// Calls per hooked function (index: [`Op`]), NULL results and unknown pointers included.
    pub calls: [u64; OPS],
    pub null_returns: u64,
    pub free_null: u64,
    pub unknown_frees: u64,
    pub unknown_reallocs: u64,
    pub untracked: u64,
    pub stale_entries: u64,
    pub stacks_dropped: u64,
    /// The share of the agent's own threads in the figures above.
    pub agent: AgentShare,
}

/// Calls, blocks and bytes of the agent's own threads (included in the totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentShare {
    pub calls: [u64; OPS],
    pub allocated_bytes: u64,
    pub freed_bytes: u64,
    pub blocks_in: u64,
    pub blocks_out: u64,
}

impl Counters {
    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op as usize]
    }
}

/// Sums the shard statistics and the rare counters.
pub fn counters() -> Counters {
    let mut c = Counters::default();
    super::blocks::for_each_shard_stats(|s| s.add_to(&mut c));
    for (i, rare) in RARE_CALLS.iter().enumerate() {
        c.calls[i] += rare.load(Ordering::Relaxed);
    }
    let rare = |r: Rare| RARE[r as usize].load(Ordering::Relaxed);
    c.null_returns = rare(Rare::NullReturn);
    c.free_null = rare(Rare::FreeNull);
    c.unknown_frees = rare(Rare::UnknownFree);
    c.unknown_reallocs = rare(Rare::UnknownRealloc);
    c.untracked = rare(Rare::Untracked);
    c.stale_entries = rare(Rare::StaleEntry);
    c.stacks_dropped = rare(Rare::StackDropped);
    for (i, calls) in AGENT_CALLS.iter().enumerate() {
        c.agent.calls[i] = calls.load(Ordering::Relaxed);
    }
    c.agent.allocated_bytes = AGENT_BYTES_IN.load(Ordering::Relaxed);
    c.agent.freed_bytes = AGENT_BYTES_OUT.load(Ordering::Relaxed);
    c.agent.blocks_in = AGENT_BLOCKS_IN.load(Ordering::Relaxed);
    c.agent.blocks_out = AGENT_BLOCKS_OUT.load(Ordering::Relaxed);
    let waiting = super::new_blocks::account(&mut c);
    super::held_frees::account(&mut c);
    c.live_bytes = (c.allocated_bytes.wrapping_sub(c.freed_bytes) as i64).max(0) as u64;
    // What this reading may record as a peak: its live bytes, but never more than what the
    // shards published plus what waits in `new_blocks` slots (module docs).
    let published = PUBLISHED.load(Ordering::Acquire);
    let live = i64::try_from(c.live_bytes).unwrap_or(i64::MAX);
    let reached = live.min(published.saturating_add(i64::try_from(waiting).unwrap_or(i64::MAX)));
    let peak = PEAK_BYTES
        .fetch_max(reached, Ordering::Relaxed)
        .max(reached);
    c.peak_live_bytes = (peak.max(0) as u64).max(c.live_bytes);
    c
}

impl std::fmt::Display for Counters {
    /// The exit summary's `key=value` list.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "live_bytes={} live_blocks={} allocated_bytes={} freed_bytes={} peak_live_bytes={} \
             malloc={} calloc={} realloc={} reallocarray={} free={} posix_memalign={} \
             aligned_alloc={} memalign={} valloc={} pvalloc={} null_returns={} free_null={} \
             unknown_frees={} unknown_reallocs={} untracked={} stale_entries={} stacks_dropped={}",
            self.live_bytes,
            self.live_blocks,
            self.allocated_bytes,
            self.freed_bytes,
            self.peak_live_bytes,
            self.calls(Op::Malloc),
            self.calls(Op::Calloc),
            self.calls(Op::Realloc),
            self.calls(Op::Reallocarray),
            self.calls(Op::Free),
            self.calls(Op::PosixMemalign),
            self.calls(Op::AlignedAlloc),
            self.calls(Op::Memalign),
            self.calls(Op::Valloc),
            self.calls(Op::Pvalloc),
            self.null_returns,
            self.free_null,
            self.unknown_frees,
            self.unknown_reallocs,
            self.untracked,
            self.stale_entries,
            self.stacks_dropped,
        )?;
        let a = &self.agent;
        for (name, calls) in OP_NAMES.iter().zip(a.calls) {
            write!(f, " agent.{name}={calls}")?;
        }
        write!(
            f,
            " agent.allocated_bytes={} agent.freed_bytes={} agent.live_blocks={} agent.live_bytes={}",
            a.allocated_bytes,
            a.freed_bytes,
            a.blocks_in.wrapping_sub(a.blocks_out) as i64,
            a.allocated_bytes.wrapping_sub(a.freed_bytes) as i64
        )
    }
}

/// Names of the hooked functions, in [`Op`] order.
pub const OP_NAMES: [&str; OPS] = [
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
];

/// `struct heaptui_counters` of include/heaptui.h (same order; append only).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CCounters {
    pub live_bytes: u64,
    pub live_blocks: u64,
    pub allocated_bytes: u64,
    pub freed_bytes: u64,
    pub peak_live_bytes: u64,
    pub calls: [u64; OPS],
    pub null_returns: u64,
    pub free_null: u64,
    pub unknown_frees: u64,
    pub unknown_reallocs: u64,
    pub untracked: u64,
}

impl From<Counters> for CCounters {
    fn from(c: Counters) -> Self {
        Self {
            live_bytes: c.live_bytes,
            live_blocks: c.live_blocks,
            allocated_bytes: c.allocated_bytes,
            freed_bytes: c.freed_bytes,
            peak_live_bytes: c.peak_live_bytes,
            calls: c.calls,
            null_returns: c.null_returns,
            free_null: c.free_null,
            unknown_frees: c.unknown_frees,
            unknown_reallocs: c.unknown_reallocs,
            untracked: c.untracked,
        }
    }
}
