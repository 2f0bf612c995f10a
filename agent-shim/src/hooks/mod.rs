//! The malloc-family hooks: each forwards to glibc's own entry point (`__libc_malloc`, …) and
//! records the result in the block table with its size, thread, sequence number and
//! allocation stack (captured by `hooks::unwind`); `hooks::pthread` wraps thread creation for
//! the thread registry.
//!
//! Forwarding: the `__libc_*` functions are link-time symbols of libc.so.6, bound by the
//! dynamic linker before any code of the process runs (the cdylib is linked `-z now`), so no
//! hook can run before they resolve and no bootstrap allocator is needed — unlike a
//! `dlsym(RTLD_NEXT, "malloc")` design, where dlsym's own calloc must be served from a
//! static buffer before the pointer is known. Hooks that run before the agent's constructor
//! (other preloads' constructors, libc start-up) work the same way; they just record no stack
//! (capture is switched on by the constructor).
//!
//! Never in a hook: heap allocation, std/parking_lot locks, printing, `thread_local!`. The
//! per-thread state is the initial-exec TLS of `sys::thread_state`; a re-entrant call (a
//! signal handler that allocates while this thread is inside a hook) and the thread that
//! holds the whole table (freeze, fork) forward without tracking, and count it. Every table
//! change happens after libc returned the new block or before libc gets the old one back —
//! except realloc's, whose block stays in the table, marked moving, during the libc call.
//! A program thread's `free` usually goes nowhere yet: `registry::held_frees` holds it and
//! applies it with the thread's next fifteen (a request of 64 KiB or more applies them first);
//! likewise its new blocks under 4 KiB wait in its slot of `registry::new_blocks` and reach the
//! table sixteen at a time, the oldest of the 64 waiting (every reader of the table sees them
//! there). A free or realloc of a block still waiting in the calling thread's slot is done
//! there: the block never reaches the table (most of sqlite3's blocks).

pub mod pthread;
pub mod unwind;

use std::ffi::c_void;

use crate::config::{DEFAULT_STACK_DEPTH, MAX_STACK_DEPTH};
use crate::record;
use crate::registry::blocks;
use crate::registry::counters::{self, Op, Rare};
use crate::registry::held_frees;
use crate::registry::new_blocks;
use crate::registry::stacks;
use crate::sys;

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
}

const PAGE: usize = 4096;

/// The calling thread inside a hook: set while it may hold a table lock.
struct Busy {
    tid: u32,
}

impl Busy {
    /// None when this thread is already inside a hook or holds the whole table.
    #[inline]
    fn enter() -> Option<Self> {
        let st = sys::thread_state();
        if st.busy() {
            return None;
        }
        let tid = sys::current_tid();
        if !blocks::usable_by(tid) {
            return None;
        }
        st.set_busy(true);
        Some(Self { tid })
    }
}

impl Drop for Busy {
    #[inline]
    fn drop(&mut self) {
        sys::thread_state().set_busy(false);
    }
}

/// True on the agent's own threads: their calls are also counted apart (`AgentShare`).
#[inline]
fn on_agent_thread() -> bool {
    sys::thread_state().agent()
}

/// The agent-share bookkeeping of one hooked call on an agent thread.
#[inline]
fn agent_share(op: Op, block_in: Option<u64>, block_out: Option<u64>) {
    if on_agent_thread() {
        counters::agent_call(op);
        if let Some(size) = block_in {
            counters::agent_block_in(size);
        }
        if let Some(size) = block_out {
            counters::agent_block_out(size);
        }
    }
}

#[inline]
fn untracked(op: Op) {
    counters::count_call(op);
    counters::count_rare(Rare::Untracked);
}

#[inline]
fn failed(op: Op) {
    counters::count_call(op);
    counters::count_rare(Rare::NullReturn);
}

/// The allocation stack of the hooked call as an interned id (0 when capture is off).
#[inline(always)]
fn stack_id(entry_sp: usize, fp: usize) -> u32 {
    let depth = stacks::depth();
    if depth == 0 {
        return 0;
    }
    let id = capture(entry_sp, fp, depth);
    if id == 0 {
        counters::count_rare(Rare::StackDropped);
    }
    id
}

/// Unwinds up to `depth` frames and interns them; a walk the walk cache remembers
/// (`unwind::walks`) is only checked, not taken again (the buffer's size is chosen after
/// that check, so a hit tests nothing more).
#[inline(always)]
fn capture(entry_sp: usize, fp: usize, depth: usize) -> u32 {
    // SAFETY: `entry_sp` and `fp` are the stack and frame pointers at the hooked function's
    // entry (the export stubs pass them), and this hook still runs on that stack.
    let Some(start) = (unsafe { unwind::start(entry_sp, fp) }) else {
        return 0;
    };
    if let Some(id) = unwind::walks::lookup(&start, depth) {
        return id;
    }
    let unwind::walks::Start {
        sp,
        ret,
        fp,
        hi,
        generation,
    } = start;
    // The default depth gets a buffer of its size: zeroing 64 frames costs more than
    // unwinding a cached stack of 16.
    if depth <= DEFAULT_STACK_DEPTH {
        walk_and_intern::<DEFAULT_STACK_DEPTH>(sp, ret, fp, hi, generation, depth)
    } else {
        walk_and_intern::<MAX_STACK_DEPTH>(sp, ret, fp, hi, generation, depth)
    }
}

/// The walk cache's miss: the full walk from the `unwind::walks::Start` of these fields,
/// interned and remembered. The fields one by one, in registers: a `&Start` made every
/// lookup store the start to memory for this rare call (5 stores).
#[inline(never)]
fn walk_and_intern<const N: usize>(
    sp: usize,
    ret: usize,
    fp: usize,
    hi: usize,
    generation: u32,
    depth: usize,
) -> u32 {
    let start = unwind::walks::Start {
        sp,
        ret,
        fp,
        hi,
        generation,
    };
    let mut buf = [0u64; N];
    let mut reads = unwind::walks::Reads::default();
    // SAFETY: `start` came from `unwind::start` in this hook, on this stack.
    let n = unsafe { unwind::walk(&start, &mut buf[..depth.min(N)], &mut reads) };
    let id = stacks::intern(&buf[..n]);
    unwind::walks::store(&start, depth, &reads, id);
    id
}

/// A request of `size` bytes is about to go to libc: a big one first applies the frees this
/// thread holds back, so the memory they release is there for it (registry::held_frees).
#[inline]
fn before_request(size: usize) {
    if size >= held_frees::FLUSH_BEFORE {
        flush_held();
    }
}

#[cold]
fn flush_held() {
    let _errno = sys::KeepErrno::new();
    if let Some(_busy) = Busy::enter() {
        held_frees::flush_current(sys::thread_state());
    }
}

/// Records a block libc just returned (or counts the NULL).
#[inline]
fn allocated(p: *mut c_void, size: usize, op: Op, entry_sp: usize, fp: usize) {
    if !p.is_null() && allocated_fast(p as u64, size as u64, op, entry_sp, fp) {
        return;
    }
    allocated_general(p, size, op, entry_sp, fp);
}

/// Every allocation [`allocated_fast`] does not take: out of line, so that the common path
/// stays a few cache lines of code. The hooks run between the program's own code, which
/// keeps evicting them from the instruction cache: each line a call touches is a likely miss
/// (callgrind's cache simulation of sqlite3: 74 distinct lines for a malloc, a free and a
/// realloc at a2959ae, BENCHMARKS.md "Real programs").
#[cold]
#[inline(never)]
fn allocated_general(p: *mut c_void, size: usize, op: Op, entry_sp: usize, fp: usize) {
    if p.is_null() {
        agent_share(op, None, None);
        return failed(op);
    }
    let Some(busy) = Busy::enter() else {
        agent_share(op, None, None);
        return untracked(op);
    };
    let stack = stack_id(entry_sp, fp);
    // A program thread's new block waits in its batch slot (registry::new_blocks); the
    // agent's own threads insert directly, so their share of the counters stays exact.
    let st = sys::thread_state();
    let slot = if st.agent() {
        None
    } else {
        held_frees::own_index(st, busy.tid)
    };
    let tracked = match slot {
        Some(k) => blocks::insert_new(p as u64, size as u64, busy.tid, stack, op, k),
        None => blocks::insert(p as u64, size as u64, busy.tid, stack, op),
    };
    if tracked && record::enabled() {
        record::on_alloc(p as u64, size as u64, op, busy.tid, stack);
    }
    agent_share(op, tracked.then_some(size as u64), None);
}

/// The common allocation of a program thread, recorded without the general path's checks:
/// the thread is not inside a hook and not holding the whole table, its batch slot is claimed
/// and takes this block without filling up (so nothing is applied and no shard lock taken),
/// and nothing records the call. False, with nothing done, when [`allocated`]'s general path
/// must take it. The same steps as that path's, minus the ones these conditions make moot.
#[inline]
fn allocated_fast(p: u64, size: u64, op: Op, entry_sp: usize, fp: usize) -> bool {
    let st = sys::thread_state();
    if st.busy() || st.agent() || record::enabled() {
        return false;
    }
    let Some(k) = held_frees::claimed_index(st.held()) else {
        return false;
    };
    let tid = sys::current_tid();
    if !blocks::usable_by(tid) {
        return false;
    }
    st.set_busy(true);
    // Read once busy: only this thread's own hooks fill its slot.
    let fits = blocks::new_fits(k, size);
    if fits {
        let stack = stack_id(entry_sp, fp);
        blocks::push_new(p, size, tid, stack, op, k);
    }
    st.set_busy(false);
    fits
}

/// # Safety
/// As `malloc(3)`; `entry_sp` and `fp` are the stack pointer at the hooked function's entry
/// (pointing at the call's return address) and the caller's frame pointer (passed by the
/// export stub).
pub(crate) unsafe extern "C" fn malloc(size: usize, entry_sp: usize, fp: usize) -> *mut c_void {
    before_request(size);
    // SAFETY: forwarding the caller's arguments unchanged.
    let p = unsafe { __libc_malloc(size) };
    allocated(p, size, Op::Malloc, entry_sp, fp);
    p
}

/// # Safety
/// As `calloc(3)`; `entry_sp`/`fp` as for [`malloc`].
pub(crate) unsafe extern "C" fn calloc(
    n: usize,
    size: usize,
    entry_sp: usize,
    fp: usize,
) -> *mut c_void {
    before_request(n.saturating_mul(size));
    // SAFETY: forwarding; libc checks n * size for overflow and returns NULL.
    let p = unsafe { __libc_calloc(n, size) };
    allocated(p, n.wrapping_mul(size), Op::Calloc, entry_sp, fp);
    p
}

/// realloc and reallocarray (after its overflow check).
///
/// # Safety
/// As `realloc(3)`.
unsafe fn resize(p: *mut c_void, size: usize, op: Op, entry_sp: usize, fp: usize) -> *mut c_void {
    // SAFETY: as the caller's realloc.
    if let Some(q) = unsafe { resize_in_slot(p, size, op, entry_sp, fp) } {
        return q;
    }
    // SAFETY: as the caller's realloc.
    unsafe { resize_general(p, size, op, entry_sp, fp) }
}

/// The common realloc of a program thread: its block still waits in its slot, and the new
/// one (under [`new_blocks::DIRECT_FROM`] bytes) takes its entry there
/// (`blocks::begin_move_waiting`, `blocks::finish_move_waiting`). The same steps as
/// [`resize_general`]'s for such a block, minus the ones its conditions make moot (no
/// recording, no agent thread, no frees to apply first); None, with nothing done and libc
/// not called, when that path must take the call. Its own small code: the general path's
/// cost a realloc 41 lines of code, each a likely instruction-cache miss (see
/// [`allocated_general`]).
///
/// # Safety
/// As `realloc(3)`.
#[inline(always)]
unsafe fn resize_in_slot(
    p: *mut c_void,
    size: usize,
    op: Op,
    entry_sp: usize,
    fp: usize,
) -> Option<*mut c_void> {
    if p.is_null() || size == 0 || size >= new_blocks::DIRECT_FROM as usize {
        return None;
    }
    let st = sys::thread_state();
    if st.busy() || st.agent() || record::enabled() {
        return None;
    }
    let k = held_frees::claimed_index(st.held())?;
    let tid = sys::current_tid();
    if !blocks::usable_by(tid) {
        return None;
    }
    st.set_busy(true);
    let Some((old, i)) = blocks::begin_move_waiting(p as u64, k) else {
        st.set_busy(false);
        return None;
    };
    let stack = stack_id(entry_sp, fp);
    // SAFETY: the caller's block, waiting in this thread's slot; `size` > 0.
    let q = unsafe { move_young_block(p, size) };
    if q.is_null() {
        kept_in_slot(&old, k, i, op);
    } else if blocks::finish_move_waiting(&old, k, i, q as u64, size as u64, tid, stack, op)
        .is_none()
    {
        moved_from_slot(&old, q as u64, size as u64, tid, stack, op);
    }
    st.set_busy(false);
    Some(q)
}

/// The realloc of a young block (waiting in its thread's slot, under 4 KiB before and
/// after): a new block, the old one's usable bytes copied (up to `size`), the old one freed,
/// as glibc's realloc does when it moves a block -- but through malloc's and free's
/// per-thread caches. glibc's realloc takes its arena's lock whenever the process has more
/// than one thread, and the agent's own threads make every program so: on sqlite3 (0.8M
/// reallocs of young blocks) the lock cost 0.02 s of its 0.66 (BENCHMARKS.md "Real
/// programs"). The block always moves (so does any realloc glibc cannot do in place); what the
/// program may read of it is the same: its usable bytes, as `malloc_usable_size` says.
///
/// # Safety
/// `p` is a live block of libc's; `size` > 0.
#[inline(always)]
unsafe fn move_young_block(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: `p` is live (the caller's contract), `q` fresh and at least `size` bytes, so
    // the two do not overlap and both hold the bytes copied.
    unsafe {
        let q = __libc_malloc(size);
        if !q.is_null() {
            let kept = malloc_usable_size(p).min(size);
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), kept);
            __libc_free(p);
        }
        q
    }
}

unsafe extern "C" {
    /// glibc's: the usable bytes of a live block (the agent does not hook it).
    fn malloc_usable_size(p: *mut c_void) -> usize;
}

/// [`resize_in_slot`]'s realloc failed (`size` was not 0): libc kept the block, its mark
/// goes.
#[cold]
#[inline(never)]
fn kept_in_slot(old: &blocks::BlockRecord, k: usize, i: usize, op: Op) {
    if !blocks::cancel_move_waiting(old, k, i) {
        blocks::cancel_move(old.addr);
    }
    failed(op);
}

/// [`resize_in_slot`]'s block was taken into the table meanwhile (a capture): the move
/// finishes there.
#[cold]
#[inline(never)]
fn moved_from_slot(old: &blocks::BlockRecord, addr: u64, size: u64, tid: u32, stack: u32, op: Op) {
    blocks::finish_move(old, addr, size, tid, stack, op);
}

/// Every realloc [`resize_in_slot`] does not take.
///
/// # Safety
/// As `realloc(3)`.
#[inline(never)]
unsafe fn resize_general(
    p: *mut c_void,
    size: usize,
    op: Op,
    entry_sp: usize,
    fp: usize,
) -> *mut c_void {
    before_request(size);
    if p.is_null() {
        // SAFETY: realloc(NULL, n) is malloc(n).
        let q = unsafe { __libc_realloc(p, size) };
        allocated(q, size, op, entry_sp, fp);
        return q;
    }
    let Some(busy) = Busy::enter() else {
        agent_share(op, None, None);
        untracked(op);
        // libc may free p: its entry stays (registry::blocks::missed_free).
        blocks::missed_free(p as u64);
        // SAFETY: forwarding.
        return unsafe { __libc_realloc(p, size) };
    };
    // The block stays in the table, marked moving, while libc works on it: a snapshot taken
    // meanwhile sees it where the program still holds it (registry::blocks docs). A block
    // still waiting in this thread's slot (most reallocs follow their malloc closely) stays
    // there, marked the same way, and its new block takes its entry.
    let st = sys::thread_state();
    let waiting = (size < new_blocks::DIRECT_FROM as usize && !st.agent())
        .then(|| held_frees::claimed_index(st.held()))
        .flatten()
        .and_then(|k| blocks::begin_move_waiting(p as u64, k).map(|(old, i)| (old, k, i)));
    let old = match &waiting {
        Some((old, ..)) => Some(*old),
        None => blocks::begin_move(p as u64),
    };
    if old.is_none() {
        counters::count_rare(Rare::UnknownRealloc);
    }
    // Before the call: the new address is then recorded right after libc returns it.
    let stack = stack_id(entry_sp, fp);
    // SAFETY: forwarding the caller's block.
    let q = unsafe { __libc_realloc(p, size) };
    // Its place in the recording: after libc returned, before the move is finished.
    let recorded = record::Realloc::claim();
    let old_size = old.map(|r| r.size);
    if q.is_null() {
        if size == 0 {
            // glibc's realloc(p, 0) frees p and returns NULL: a release, not a failure.
            if let Some(old) = &old
                && !waiting.is_some_and(|(old, k, i)| blocks::end_move_waiting(&old, k, i))
            {
                blocks::end_move(old);
            }
            recorded.freed(p as u64, busy.tid, || stack_id(entry_sp, fp));
            counters::count_call(op);
            agent_share(op, None, old_size);
        } else {
            // p is untouched.
            if old.is_some()
                && !waiting.is_some_and(|(old, k, i)| blocks::cancel_move_waiting(&old, k, i))
            {
                blocks::cancel_move(p as u64);
            }
            failed(op);
            agent_share(op, None, None);
        }
        return q;
    }
    let (q64, size64) = (q as u64, size as u64);
    let tracked = match (&waiting, &old) {
        (Some((old, k, i)), _) => {
            blocks::finish_move_waiting(old, *k, *i, q64, size64, busy.tid, stack, op)
                .unwrap_or_else(|| blocks::finish_move(old, q64, size64, busy.tid, stack, op))
        }
        (None, Some(old)) => blocks::finish_move(old, q64, size64, busy.tid, stack, op),
        (None, None) => blocks::insert(q64, size64, busy.tid, stack, op),
    };
    recorded.moved(p as u64, q as u64, size as u64, busy.tid, stack);
    agent_share(op, tracked.then_some(size as u64), old_size);
    q
}

/// # Safety
/// As `realloc(3)`; `entry_sp`/`fp` as for [`malloc`].
pub(crate) unsafe extern "C" fn realloc(
    p: *mut c_void,
    size: usize,
    entry_sp: usize,
    fp: usize,
) -> *mut c_void {
    // SAFETY: as the caller's realloc.
    unsafe { resize(p, size, Op::Realloc, entry_sp, fp) }
}

/// # Safety
/// As `reallocarray(3)`; `entry_sp`/`fp` as for [`malloc`].
pub(crate) unsafe extern "C" fn reallocarray(
    p: *mut c_void,
    n: usize,
    size: usize,
    entry_sp: usize,
    fp: usize,
) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        sys::set_errno(libc::ENOMEM);
        failed(Op::Reallocarray);
        agent_share(Op::Reallocarray, None, None);
        return std::ptr::null_mut();
    };
    // SAFETY: as the caller's reallocarray, whose product did not overflow.
    unsafe { resize(p, total, Op::Reallocarray, entry_sp, fp) }
}

/// # Safety
/// As `free(3)`; `entry_sp`/`fp` as for [`malloc`] (the freeing stack, for a recording).
pub(crate) unsafe extern "C" fn free(p: *mut c_void, entry_sp: usize, fp: usize) {
    if !p.is_null() && !record::enabled() {
        let st = sys::thread_state();
        match free_fast(p as u64, st) {
            FastFree::Cancelled(k) => {
                if held_frees::count_unheld_free(k) {
                    // SAFETY: the program's free of p, whose block just left the slot.
                    return unsafe { apply_held_and_free(p, k, st) };
                }
                st.set_busy(false);
                // SAFETY: the program's free of p, whose block left the thread's slot (it
                // never reached the table).
                return unsafe { __libc_free(p) };
            }
            // Applied with the thread's next batch (registry::held_frees).
            FastFree::Held => return,
            FastFree::No => {}
        }
    }
    // SAFETY: as the caller's free.
    unsafe { free_general(p, entry_sp, fp) }
}

/// What the free hook's fast path did.
enum FastFree {
    /// The block was still waiting in the slot `k` of new blocks of the thread, which is still
    /// marked busy: it left it (`blocks::cancel_new`), and [`free`] finishes the free (libc's
    /// free, or [`apply_held_and_free`] when the held frees are due).
    Cancelled(usize),
    /// Held back in the thread's slot (`held_frees::hold_unless_full`).
    Held,
    /// Nothing: the general path takes the free.
    No,
}

/// The common free of a program thread (not inside a hook, with a claimed slot): the block
/// leaves the thread's slot of new blocks if it still waits there, else it is held back
/// unless that fills the thread's slot of held frees.
#[inline]
fn free_fast(p: u64, st: &sys::ThreadState) -> FastFree {
    if st.busy() {
        return FastFree::No;
    }
    let Some(k) = held_frees::claimed_index(st.held()) else {
        return FastFree::No;
    };
    st.set_busy(true);
    if blocks::cancel_new(p, k) {
        return FastFree::Cancelled(k);
    }
    let done = if held_frees::hold_unless_full(p, k) {
        FastFree::Held
    } else {
        FastFree::No
    };
    st.set_busy(false);
    done
}

/// A free whose block left the thread's slot of new blocks ([`free_fast`]) and whose count
/// makes the held frees due (`held_frees::count_unheld_free`): applies them, then frees.
/// Out of line and tail-called, so that the free hook's common paths call nothing before
/// libc's free. Before ac4aa85 (this apply inlined, `free_general` called, not tail-called)
/// the hook saved five registers, now one; its inclusive count fell 258.4M → 249.1M on
/// sqlite3's 50k rows and 222.4M → 217.6M on perl's 300k keys (callgrind, BENCHMARKS.md
/// "Real programs", the 15:00–15:25 UTC entry of 2026-11-28).
///
/// # Safety
/// `p` is the program's block that just left slot `k` of this thread, marked busy in `st`.
#[cold]
unsafe extern "C" fn apply_held_and_free(p: *mut c_void, k: usize, st: &sys::ThreadState) {
    held_frees::apply_after_unheld(k);
    st.set_busy(false);
    // SAFETY: the program's free of p, whose block left the thread's slot (it never reached
    // the table).
    unsafe { __libc_free(p) }
}

/// Every free the fast paths above do not take; out of line, so that the fast path saves no
/// registers, and `extern "C"` like the hook, so that the hook tail-calls it (LLVM did not
/// for the Rust ABI).
///
/// # Safety
/// As [`free`].
#[inline(never)]
unsafe extern "C" fn free_general(p: *mut c_void, entry_sp: usize, fp: usize) {
    if p.is_null() {
        counters::count_call(Op::Free);
        counters::count_rare(Rare::FreeNull);
        agent_share(Op::Free, None, None);
        if record::enabled()
            && let Some(busy) = Busy::enter()
        {
            record::on_free(0, busy.tid, stack_id(entry_sp, fp));
        }
        return;
    }
    match Busy::enter() {
        Some(busy) => {
            if !on_agent_thread() && held_frees::hold(p as u64, sys::thread_state(), busy.tid) {
                // Applied with the thread's next batch (registry::held_frees).
                if record::enabled() {
                    record::on_free(p as u64, busy.tid, stack_id(entry_sp, fp));
                }
                return;
            }
            match blocks::remove(p as u64, Some(Op::Free)) {
                Some(rec) => agent_share(Op::Free, None, Some(rec.size)),
                None => {
                    counters::count_call(Op::Free);
                    counters::count_rare(Rare::UnknownFree);
                    agent_share(Op::Free, None, None);
                }
            }
            if record::enabled() {
                record::on_free(p as u64, busy.tid, stack_id(entry_sp, fp));
            }
        }
        None => {
            untracked(Op::Free);
            blocks::missed_free(p as u64);
            agent_share(Op::Free, None, None);
        }
    }
    // SAFETY: forwarding the caller's block (after it left the table).
    unsafe { __libc_free(p) }
}

fn valid_alignment(align: usize) -> bool {
    align.is_power_of_two() && align.is_multiple_of(std::mem::size_of::<*const c_void>())
}

/// # Safety
/// As `posix_memalign(3)`; `entry_sp`/`fp` as for [`malloc`].
pub(crate) unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    entry_sp: usize,
    fp: usize,
) -> i32 {
    if !valid_alignment(align) {
        failed(Op::PosixMemalign);
        agent_share(Op::PosixMemalign, None, None);
        return libc::EINVAL;
    }
    before_request(size);
    // SAFETY: forwarding with a valid alignment.
    let p = unsafe { __libc_memalign(align, size) };
    if p.is_null() {
        failed(Op::PosixMemalign);
        agent_share(Op::PosixMemalign, None, None);
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer slot (posix_memalign's contract).
    unsafe { *out = p };
    allocated(p, size, Op::PosixMemalign, entry_sp, fp);
    0
}

/// Whether this glibc's `aligned_alloc` refuses alignments that are not a power of two
/// (EINVAL, NULL), as C17 asks: glibc 2.38 and later; before, it was `memalign`, which
/// rounds them up. Asked of `gnu_get_libc_version` (a constant string) on first use.
fn aligned_alloc_is_strict() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 0;
    const STRICT: u8 = 1;
    const LENIENT: u8 = 2;
    static ANSWER: AtomicU8 = AtomicU8::new(UNKNOWN);
    match ANSWER.load(Ordering::Relaxed) {
        STRICT => true,
        LENIENT => false,
        _ => {
            // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
            let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
            let strict = glibc_at_least(v.to_bytes(), (2, 38));
            ANSWER.store(if strict { STRICT } else { LENIENT }, Ordering::Relaxed);
            strict
        }
    }
}

/// Whether a glibc version string ("2.36", "2.38.9000") is at least `min`.
fn glibc_at_least(version: &[u8], min: (u32, u32)) -> bool {
    let mut parts = version.split(|&c| c == b'.').map(|p| {
        p.iter()
            .take_while(|c| c.is_ascii_digit())
            .fold(0u32, |n, &c| {
                n.saturating_mul(10).saturating_add(u32::from(c - b'0'))
            })
    });
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= min
}

/// # Safety
/// As `aligned_alloc(3)`: this glibc's rules for the alignment ([`aligned_alloc_is_strict`]),
/// then its memalign entry point.
pub(crate) unsafe extern "C" fn aligned_alloc(
    align: usize,
    size: usize,
    entry_sp: usize,
    fp: usize,
) -> *mut c_void {
    if !align.is_power_of_two() && aligned_alloc_is_strict() {
        sys::set_errno(libc::EINVAL);
        failed(Op::AlignedAlloc);
        agent_share(Op::AlignedAlloc, None, None);
        return std::ptr::null_mut();
    }
    before_request(size);
    // SAFETY: forwarding.
    let p = unsafe { __libc_memalign(align, size) };
    allocated(p, size, Op::AlignedAlloc, entry_sp, fp);
    p
}

/// # Safety
/// As `memalign(3)`.
pub(crate) unsafe extern "C" fn memalign(
    align: usize,
    size: usize,
    entry_sp: usize,
    fp: usize,
) -> *mut c_void {
    before_request(size);
    // SAFETY: forwarding.
    let p = unsafe { __libc_memalign(align, size) };
    allocated(p, size, Op::Memalign, entry_sp, fp);
    p
}

/// # Safety
/// As `valloc(3)`.
pub(crate) unsafe extern "C" fn valloc(size: usize, entry_sp: usize, fp: usize) -> *mut c_void {
    before_request(size);
    // SAFETY: forwarding.
    let p = unsafe { __libc_valloc(size) };
    allocated(p, size, Op::Valloc, entry_sp, fp);
    p
}

/// # Safety
/// As `pvalloc(3)`; the block is recorded with its page-rounded size (what pvalloc grants).
pub(crate) unsafe extern "C" fn pvalloc(size: usize, entry_sp: usize, fp: usize) -> *mut c_void {
    before_request(size);
    // SAFETY: forwarding.
    let p = unsafe { __libc_pvalloc(size) };
    let granted = size.checked_next_multiple_of(PAGE).unwrap_or(size);
    allocated(p, granted, Op::Pvalloc, entry_sp, fp);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_versions_compare_by_number() {
        assert!(glibc_at_least(b"2.38", (2, 38)));
        assert!(glibc_at_least(b"2.39.9000", (2, 38)));
        assert!(glibc_at_least(b"3.0", (2, 38)));
        assert!(!glibc_at_least(b"2.36", (2, 38)));
        assert!(!glibc_at_least(b"2.4", (2, 38)));
        assert!(!glibc_at_least(b"", (2, 38)));
    }
}
