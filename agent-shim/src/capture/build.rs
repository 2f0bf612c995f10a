//! One capture, end to end: read the address space, freeze the block table, stop the world,
//! fork a copy-on-write child of the stopped process and resume the world at once; the child
//! lists, indexes and scans (unwinding every thread, scanning globals and blocks) and sends
//! its findings back through a pipe; then the parent symbolizes and assembles the
//! [`HeapGraph`]. If no child can be made, the scan runs while the world is stopped.
//!
//! Owns the order of those steps and what happens inside the stop window and in the child.
//! There: no libc malloc (the agent's allocator only, checked idle), no loader calls, no
//! stdio, and every read of target memory goes through the pre-read memory map, the map
//! re-read after the stop (the program's mapped memory, `mapped`) or a live, frozen block. Symbolization and graph assembly happen after the resume, in the parent.
//!
//! It does not know the block table's layout: the table is reached through [`Heap`], so the
//! capture can be tested on any set of real memory blocks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use heaptui_analysis::{
    Edges, Frame, FrameKind, GraphError, HeapGraph, NO_SITE, ObjectIndex, ObjectRecord, Objects,
    Process, Site, SiteIndex, Thread, ThreadState,
};

use super::mapped::{self, Exclusions, MappedRoots};
use super::modules::AddressSpace;
use super::scan::{BlockIndex, Collector, scan_blocks};
use super::stop::{self, Outcome, Timeouts};
use super::symbolize::Symbolizer;
use super::unwind::{
    FrameSort, RED_ZONE, RSP, Registers, THREAD_DESCRIPTOR, Unwinder, current_registers,
};
use crate::own_memory;
use crate::registry::threads;

/// A live block as the block table records it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockInfo {
    pub addr: u64,
    pub size: u64,
    pub seq: u64,
    pub tid: u32,
    /// Interned allocation stack, 0 for none.
    pub stack: u32,
}

/// A thread to stop and capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u32,
    pub name: String,
}

/// The block table, as the capture needs it.
pub trait Heap {
    /// Keeps the table frozen (no hook mid-update, none able to complete) while alive.
    type Frozen;
    /// Freezes the table. Must not be called while the world is stopped.
    fn freeze(&self) -> Self::Frozen;
    /// Appends every live block to `out`; called while frozen and stopped, so it must not
    /// allocate with libc.
    fn blocks(&self, frozen: &Self::Frozen, out: &mut Vec<BlockInfo>);
    /// How many live blocks there are (to reserve memory before the stop).
    fn len_hint(&self, frozen: &Self::Frozen) -> usize;
    /// Return addresses of an interned allocation stack, innermost first (after the resume).
    fn stack(&self, id: u32) -> Vec<u64>;
    /// Whether the agent's own allocator is free to use (no stopped thread holds its locks).
    /// Called while stopped.
    fn allocator_idle(&self) -> bool {
        true
    }
    /// Whether the blocks are glibc malloc chunks (a size word below each block).
    fn glibc_blocks(&self) -> bool {
        true
    }
    /// Whether a block is the agent's own (allocated by libc for an agent thread), left out
    /// of the graph. Called while stopped: must not allocate or lock.
    fn agent_block(&self, _b: &BlockInfo) -> bool {
        false
    }
    /// Appends the addresses of the blocks a realloc in progress is moving: libc may already
    /// have unmapped their memory, so the scan reads them with a checked copy. Called while
    /// stopped, like [`Heap::blocks`].
    fn moving(&self, _frozen: &Self::Frozen, _out: &mut Vec<u64>) {}
    /// Appends the addresses of blocks the program freed but that are still allocated in
    /// libc (held back): not live, but their memory is heap memory, never a mapped root.
    /// Called while stopped, after [`Heap::blocks`].
    fn held(&self, _frozen: &Self::Frozen, _out: &mut Vec<u64>) {}
}

/// A finished capture and how long it took.
pub struct Capture {
    pub graph: HeapGraph,
    /// How long the threads were stopped (freeze to resume).
    pub pause: Duration,
    /// Stopping the threads (inside the pause); indexing the blocks, unwinding and scanning
    /// the roots, scanning the blocks (in the child, after the resume).
    pub phases: Phases,
    /// The whole capture, symbolization and graph assembly included.
    pub total: Duration,
}

/// How many times the capture stops the world before giving up on a busy allocator.
const MAX_ATTEMPTS: u32 = 100;

/// Why a capture failed.
#[derive(Debug)]
pub enum CaptureError {
    Graph(GraphError),
    Busy,
    /// The copy-on-write child that scans died or sent something unreadable.
    Child,
    /// The process cannot afford the memory a snapshot takes (`budget`): the sentence says
    /// which limit and by how much.
    NoMemory(String),
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::Graph(e) => write!(f, "the captured graph is invalid: {e}"),
            CaptureError::Busy => f.write_str(
                "the agent's allocator stayed busy in a stopped thread; no snapshot taken",
            ),
            CaptureError::Child => f.write_str("the scanning child process failed"),
            CaptureError::NoMemory(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for CaptureError {}

impl From<GraphError> for CaptureError {
    fn from(e: GraphError) -> Self {
        CaptureError::Graph(e)
    }
}

/// Where the pause went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Phases {
    pub stop: Duration,
    pub index: Duration,
    pub roots: Duration,
    pub blocks: Duration,
    /// Reading the program's mapped memory (inside `roots`), and how many bytes of it were
    /// present and read.
    pub mapped: Duration,
    pub mapped_bytes: u64,
}

/// One thread's frames as found inside the stop window, not yet symbolized.
struct RawThread {
    tid: u32,
    name: String,
    state: ThreadState,
    /// Each frame's sort, pc, references and (a sorted subset) interior references.
    frames: Vec<(FrameSort, u64, Refs)>,
}

/// A root's references and, sorted, those only interior words point into.
type Refs = (Vec<ObjectIndex>, Vec<ObjectIndex>);

fn command_line() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Captures the heap graph of this process: the threads `threads` (the caller excluded) and
/// every block of `heap`.
pub fn capture<H: Heap>(
    heap: &H,
    threads: &[ThreadInfo],
    timeouts: Timeouts,
) -> Result<Capture, CaptureError> {
    let begin = Instant::now();
    let space = AddressSpace::load();
    let mut unwinder = Unwinder::new(&space).fold_agent(!cfg!(test));
    let process = Process {
        pid: std::process::id(),
        command: command_line(),
    };
    let globals_ranges = space.globals();
    let tids: Vec<u32> = threads.iter().map(|t| t.tid).collect();
    // The capturing thread's own descriptor: libc blocks it points at (its DTV) are the
    // agent's, not the program's, and are left out of the graph. (Not its static TLS below
    // the thread pointer: the top of its stack lies right under it.)
    let own = current_registers();
    let own_tls = space.clamp(own.fs_base..own.fs_base + THREAD_DESCRIPTOR);

    // ---- stop window ----
    let frozen = heap.freeze();
    let paused = Instant::now();
    let capacity = heap.len_hint(&frozen) + 1024;
    let mut blocks: Vec<BlockInfo> = Vec::with_capacity(capacity);
    let mut scratch: Vec<BlockInfo> = Vec::with_capacity(capacity);
    let mut world = stop::stop(&tids, timeouts);
    let mut attempts = 1;
    while !heap.allocator_idle() {
        // A stopped thread holds a lock of the agent's allocator: let it finish and retry.
        drop(world);
        if attempts == MAX_ATTEMPTS {
            return Err(CaptureError::Busy);
        }
        attempts += 1;
        std::thread::sleep(Duration::from_millis(1));
        world = stop::stop(&tids, timeouts);
    }
    let stop_time = paused.elapsed();
    let mut scan = |world: &stop::World| {
        scan_stopped(
            heap,
            &frozen,
            world,
            &space,
            &mut unwinder,
            &globals_ranges,
            (&own_tls, &own),
            (&mut blocks, &mut scratch),
            process.pid,
        )
    };
    // The scan runs in a copy-on-write child of the stopped process, so the threads run
    // again as soon as the child exists; without a child, it runs while they are stopped.
    let (scanned, pause) = match fork_child() {
        Fork::Child(fd) => {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let scanned = scan(&world);
                write_all(fd, &encode(&scanned))
            }))
            .unwrap_or(false);
            // SAFETY: the child ends here without running any exit handler of the program.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        Fork::Parent(child, fd) => {
            world.wake();
            drop(frozen);
            let pause = paused.elapsed();
            drop(world);
            let bytes = read_all(fd);
            let mut status = 0;
            // SAFETY: reaps our own child (it has no exit signal: __WALL finds it).
            unsafe { libc::waitpid(child, &mut status, libc::__WALL) };
            let scanned = decode(&bytes).ok_or(CaptureError::Child)?;
            (scanned, pause)
        }
        Fork::Failed => {
            let scanned = scan(&world);
            world.wake();
            drop(frozen);
            let pause = paused.elapsed();
            drop(world);
            (scanned, pause)
        }
    };
    let Scanned {
        blocks,
        mut raw,
        globals,
        edges,
        mut phases,
    } = scanned;
    phases.stop = stop_time;
    for t in &mut raw {
        t.name = threads
            .iter()
            .find(|i| i.tid == t.tid)
            .map_or_else(String::new, |i| i.name.clone());
    }
    // ---- end of stop window ----

    let graph = assemble(heap, &space, process, &blocks, edges, raw, globals)?;
    Ok(Capture {
        graph,
        pause,
        phases,
        total: begin.elapsed(),
    })
}

/// Sorts blocks by address with an LSD radix sort over the 48 address bits (three 16-bit
/// passes): linear, and several times faster than a comparison sort at a million blocks.
/// `scratch` must have at least `blocks.len()` capacity (no allocation while stopped).
fn sort_by_address(blocks: &mut Vec<BlockInfo>, scratch: &mut Vec<BlockInfo>) {
    if blocks.len() < 4096 {
        blocks.sort_unstable_by_key(|b| b.addr);
        return;
    }
    let mut counts = [0usize; 1 << 16];
    for shift in [0u32, 16, 32] {
        counts.iter_mut().for_each(|c| *c = 0);
        for b in blocks.iter() {
            counts[((b.addr >> shift) & 0xffff) as usize] += 1;
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = sum;
            sum += n;
        }
        scratch.clear();
        scratch.resize(blocks.len(), BlockInfo::default());
        for b in blocks.iter() {
            let k = ((b.addr >> shift) & 0xffff) as usize;
            scratch[counts[k]] = *b;
            counts[k] += 1;
        }
        std::mem::swap(blocks, scratch);
    }
    if blocks.windows(2).any(|w| w[0].addr > w[1].addr) {
        // Addresses above 2^48 (not x86-64 user space): fall back to a comparison sort.
        blocks.sort_unstable_by_key(|b| b.addr);
    }
}

/// Removes the blocks that words of `ranges` point into (blocks sorted by address).
fn drop_referenced(blocks: &mut Vec<BlockInfo>, ranges: &[std::ops::Range<u64>]) {
    let mut words: Vec<u64> = Vec::new();
    for r in ranges {
        // SAFETY: clamped to readable mappings; this thread's own TLS.
        let slice = unsafe {
            std::slice::from_raw_parts(r.start as *const u64, ((r.end - r.start) / 8) as usize)
        };
        words.extend_from_slice(slice);
    }
    words.sort_unstable();
    blocks.retain(|b| {
        let i = words.partition_point(|&w| w < b.addr);
        words.get(i).is_none_or(|&w| w >= b.addr + b.size.max(1))
    });
}

/// What the scan of a stopped world found.
struct Scanned {
    blocks: Vec<BlockInfo>,
    raw: Vec<RawThread>,
    globals: Refs,
    edges: Edges,
    phases: Phases,
}

/// Everything done while the world is stopped (or in the copy-on-write child): list, sort
/// and index the blocks, unwind and scan every stopped thread, scan globals and blocks.
#[allow(clippy::too_many_arguments)]
fn scan_stopped<H: Heap>(
    heap: &H,
    frozen: &H::Frozen,
    world: &stop::World,
    space: &AddressSpace,
    unwinder: &mut Unwinder<'_, AddressSpace>,
    globals_ranges: &[(std::ops::Range<u64>, bool)],
    (own_tls, own): (&[std::ops::Range<u64>], &Registers),
    (blocks, scratch): (&mut Vec<BlockInfo>, &mut Vec<BlockInfo>),
    pid: u32,
) -> Scanned {
    let mut phases = Phases::default();
    let mark = Instant::now();
    heap.blocks(frozen, blocks);
    // What is not the program's mapped memory: every block's own mapping (the agent's
    // blocks and held-back ones included), the agent's memory, the modules' data (scanned
    // as module globals), and below, each thread's stack and TLS.
    let maps = mapped::current_maps();
    let mut exclude = Exclusions::with_capacity(blocks.len() / 64 + 4096);
    let mut held = Vec::new();
    heap.held(frozen, &mut held);
    if heap.glibc_blocks() {
        // SAFETY: the table's blocks, live or held back, are allocated glibc chunks; the map
        // was read after the stop.
        unsafe {
            exclude.add_mmapped_chunks(blocks.iter().map(|b| (b.addr, Some(b.size))));
            exclude.add_mmapped_chunks(held.iter().map(|&a| (a, None)));
            exclude.add_arena_heaps(&maps);
        }
    }
    exclude.add_modules(space);
    let mut agent_threads = Vec::with_capacity(threads::MAX_AGENT_THREADS);
    threads::agent_thread_pointers(&mut agent_threads);
    for tp in agent_threads {
        exclude.add_thread(&maps, space.static_tls, None, Some(tp));
    }
    exclude.add_thread(
        &maps,
        space.static_tls,
        Some(own.gpr[RSP]),
        Some(own.fs_base),
    );
    blocks.retain(|b| !heap.agent_block(b));
    sort_by_address(blocks, scratch);
    drop_referenced(blocks, own_tls);
    let index = BlockIndex::new(blocks.iter().map(|b| (b.addr, b.size)));
    let mut collector = Collector::new(blocks.len());
    phases.index = mark.elapsed();
    let mark = Instant::now();
    let mut raw: Vec<RawThread> = Vec::with_capacity(world.threads.len());
    for (tid, outcome) in &world.threads {
        let (state, frames) = match outcome {
            Outcome::Gone => continue,
            Outcome::NotStoppable(why) => {
                // Not stopped, but maybe blocked in a system call: its stack from the
                // blocked stack pointer up is what it holds (best effort: it may have moved).
                let sp = stop::blocked_stack_pointer(pid, *tid);
                exclude.add_thread(&maps, space.static_tls, sp, None);
                let frames = sp
                    .and_then(|sp| space.mapping(sp).map(|m| (sp, m.end)))
                    .map(|(sp, end)| {
                        collector.begin();
                        for r in space.clamp(sp.saturating_sub(RED_ZONE)..end) {
                            // SAFETY: clamped to readable mappings (a copy-on-write copy
                            // of them in the scanning child).
                            unsafe { collector.range(&index, r, &[]) };
                        }
                        vec![(FrameSort::Thread, 0, collector.take_sorted())]
                    })
                    .unwrap_or_default();
                (ThreadState::NotStoppable((*why).into()), frames)
            }
            Outcome::Stopped(regs) => {
                exclude.add_thread(
                    &maps,
                    space.static_tls,
                    Some(regs.gpr[RSP]),
                    Some(regs.fs_base),
                );
                let unwound = unwinder.unwind(regs);
                let frames = unwound
                    .frames
                    .iter()
                    .map(|f| {
                        collector.begin();
                        for r in &f.ranges {
                            // SAFETY: the unwinder clamped every range to readable mappings,
                            // and the thread owning them is stopped (or this is a frozen
                            // copy of it).
                            unsafe { collector.range(&index, r.clone(), &unwound.skip) };
                        }
                        for &v in &f.values {
                            collector.word(&index, v);
                        }
                        (f.sort, f.pc, collector.take_sorted())
                    })
                    .collect();
                (ThreadState::Stopped, frames)
            }
        };
        raw.push(RawThread {
            tid: *tid,
            name: String::new(),
            state,
            frames,
        });
    }
    collector.begin();
    for (r, libc) in globals_ranges {
        if *libc && heap.glibc_blocks() {
            let words = (r.end - r.start) / 8;
            for k in 0..words {
                // SAFETY: clamped to readable mappings by `AddressSpace::globals`; the blocks
                // are glibc's live blocks.
                unsafe {
                    let v = std::ptr::read_volatile((r.start + 8 * k) as *const u64);
                    collector.allocator_word(&index, v);
                }
            }
        } else {
            // SAFETY: clamped to readable mappings by `AddressSpace::globals`.
            unsafe { collector.range(&index, r.clone(), &[]) };
        }
    }
    let mapped_mark = Instant::now();
    // The agent's mappings as they are now, after the scan's own allocations (which hold
    // copies of block addresses) were made.
    let mut agent_mappings = Vec::with_capacity(own_memory::len_hint() + 64);
    own_memory::ranges(&mut agent_mappings);
    agent_mappings.into_iter().for_each(|r| exclude.add(r));
    phases.mapped_bytes = MappedRoots::new(&maps, exclude).scan(&index, &mut collector);
    phases.mapped = mapped_mark.elapsed();
    let globals = collector.take_sorted();
    phases.roots = mark.elapsed();
    let mark = Instant::now();
    // Blocks a realloc is moving may have lost their memory since the map was read.
    let mut moving = Vec::new();
    heap.moving(frozen, &mut moving);
    let mut checked: Vec<ObjectIndex> = moving
        .iter()
        .filter_map(|&a| blocks.binary_search_by_key(&a, |b| b.addr).ok())
        .map(|i| i as ObjectIndex)
        .collect();
    checked.sort_unstable();
    let edges = scan_blocks(&index, space, &mut collector, &checked);
    phases.blocks = mark.elapsed();
    Scanned {
        blocks: std::mem::take(blocks),
        raw,
        globals,
        edges,
        phases,
    }
}

enum Fork {
    /// In the child, with the write end of the result pipe.
    Child(i32),
    /// In the parent: the child's pid and the read end.
    Parent(libc::pid_t, i32),
    /// No child could be made.
    Failed,
}

/// Makes a copy-on-write child of this process (only the calling thread runs in it), with
/// no exit signal, so the program's own `wait` calls never see it.
fn fork_child() -> Fork {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Fork::Failed;
    }
    // The scan in the child allocates from the agent's allocator, whose locks the agent's
    // own threads (not stopped: the recording writer, the server) may hold at the clone; a
    // lock copied held would never be released in the child. Held across the clone, as the
    // fork handlers do, they are free on both sides.
    crate::alloc::AGENT_ALLOC.lock_all();
    // SAFETY: a raw clone without CLONE_VM and without a new stack is a fork whose child
    // gets a copy of this thread's stack; glibc's fork handlers are deliberately skipped
    // (the child only runs the scan, raw system calls and _exit).
    let pid = unsafe { libc::syscall(libc::SYS_clone, 0u64, 0u64, 0u64, 0u64, 0u64) };
    crate::alloc::AGENT_ALLOC.unlock_all();
    match pid {
        0 => {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fds[0]) };
            Fork::Child(fds[1])
        }
        p if p > 0 => {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fds[1]) };
            Fork::Parent(p as libc::pid_t, fds[0])
        }
        _ => {
            // SAFETY: our own descriptors.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            Fork::Failed
        }
    }
}

fn write_all(fd: i32, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    true
}

fn read_all(fd: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 20);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // SAFETY: reads into a live buffer of the given length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    out
}

/// The child's results, as little-endian words (both ends are this very program).
fn encode(s: &Scanned) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(s.blocks.len() * 48 + s.edges.len() * 4 + 4096);
    let u64s = |v: u64, out: &mut Vec<u8>| out.extend_from_slice(&v.to_le_bytes());
    u64s(s.blocks.len() as u64, &mut out);
    for b in &s.blocks {
        for v in [b.addr, b.size, b.seq, u64::from(b.tid), u64::from(b.stack)] {
            u64s(v, &mut out);
        }
    }
    let refs = |r: &[ObjectIndex], out: &mut Vec<u8>| {
        out.extend_from_slice(&(r.len() as u64).to_le_bytes());
        for &o in r {
            out.extend_from_slice(&o.to_le_bytes());
        }
    };
    u64s(s.raw.len() as u64, &mut out);
    for t in &s.raw {
        u64s(u64::from(t.tid), &mut out);
        let why = match &t.state {
            ThreadState::Stopped => None,
            ThreadState::NotStoppable(w) => Some(w.as_bytes()),
        };
        u64s(why.map_or(u64::MAX, |w| w.len() as u64), &mut out);
        out.extend_from_slice(why.unwrap_or(&[]));
        u64s(t.frames.len() as u64, &mut out);
        for (sort, pc, r) in &t.frames {
            let sort = match sort {
                FrameSort::Call => 0,
                FrameSort::Signal => 1,
                FrameSort::Thread => 2,
            };
            u64s(sort, &mut out);
            u64s(*pc, &mut out);
            refs(&r.0, &mut out);
            refs(&r.1, &mut out);
        }
    }
    refs(&s.globals.0, &mut out);
    refs(&s.globals.1, &mut out);
    for o in 0..s.blocks.len() as ObjectIndex {
        refs(s.edges.of(o), &mut out);
    }
    let bits = s.edges.interior_bits();
    u64s(bits.len() as u64, &mut out);
    bits.iter().for_each(|&w| u64s(w, &mut out));
    for d in [
        s.phases.index,
        s.phases.roots,
        s.phases.blocks,
        s.phases.mapped,
    ] {
        u64s(d.as_nanos() as u64, &mut out);
    }
    u64s(s.phases.mapped_bytes, &mut out);
    out
}

fn decode(bytes: &[u8]) -> Option<Scanned> {
    let mut at = 0usize;
    let u64_at = |at: &mut usize| -> Option<u64> {
        let v = u64::from_le_bytes(bytes.get(*at..*at + 8)?.try_into().ok()?);
        *at += 8;
        Some(v)
    };
    let n = u64_at(&mut at)? as usize;
    let mut blocks = Vec::with_capacity(n.min(bytes.len() / 40));
    for _ in 0..n {
        blocks.push(BlockInfo {
            addr: u64_at(&mut at)?,
            size: u64_at(&mut at)?,
            seq: u64_at(&mut at)?,
            tid: u64_at(&mut at)? as u32,
            stack: u64_at(&mut at)? as u32,
        });
    }
    let refs_at = |at: &mut usize| -> Option<Vec<ObjectIndex>> {
        let k = u64_at(at)? as usize;
        let raw = bytes.get(*at..*at + 4 * k)?;
        *at += 4 * k;
        Some(
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    };
    let threads = u64_at(&mut at)? as usize;
    let mut raw = Vec::with_capacity(threads.min(1 << 20));
    for _ in 0..threads {
        let tid = u64_at(&mut at)? as u32;
        let why = u64_at(&mut at)?;
        let state = if why == u64::MAX {
            ThreadState::Stopped
        } else {
            let w = bytes.get(at..at + why as usize)?;
            at += why as usize;
            ThreadState::NotStoppable(String::from_utf8_lossy(w).into_owned())
        };
        let frames_n = u64_at(&mut at)? as usize;
        let mut frames = Vec::with_capacity(frames_n.min(1 << 16));
        for _ in 0..frames_n {
            let sort = match u64_at(&mut at)? {
                0 => FrameSort::Call,
                1 => FrameSort::Signal,
                _ => FrameSort::Thread,
            };
            let pc = u64_at(&mut at)?;
            let refs = refs_at(&mut at)?;
            frames.push((sort, pc, (refs, refs_at(&mut at)?)));
        }
        raw.push(RawThread {
            tid,
            name: String::new(),
            state,
            frames,
        });
    }
    let globals = (refs_at(&mut at)?, refs_at(&mut at)?);
    let mut edges = Edges::with_capacity(blocks.len(), blocks.len() * 2);
    for _ in 0..blocks.len() {
        edges.push(refs_at(&mut at)?);
    }
    let words = u64_at(&mut at)? as usize;
    if words > edges.len().div_ceil(64) {
        return None;
    }
    let bits = (0..words)
        .map(|_| u64_at(&mut at))
        .collect::<Option<Vec<u64>>>()?;
    edges.set_interior_bits(bits);
    let mut d = || u64_at(&mut at).map(Duration::from_nanos);
    let phases = Phases {
        stop: Duration::ZERO,
        index: d()?,
        roots: d()?,
        blocks: d()?,
        mapped: d()?,
        mapped_bytes: u64_at(&mut at)?,
    };
    Some(Scanned {
        blocks,
        raw,
        globals,
        edges,
        phases,
    })
}

fn assemble<H: Heap>(
    heap: &H,
    space: &AddressSpace,
    process: Process,
    blocks: &[BlockInfo],
    edges: Edges,
    raw: Vec<RawThread>,
    (globals, globals_interior): Refs,
) -> Result<HeapGraph, GraphError> {
    let mut symbols = Symbolizer::new(space);
    let mut sites: Vec<Site> = Vec::new();
    let mut site_of: HashMap<u32, SiteIndex> = HashMap::new();
    let mut objects = Objects::with_capacity(blocks.len());
    for b in blocks {
        let site = if b.stack == 0 {
            NO_SITE
        } else {
            *site_of.entry(b.stack).or_insert_with(|| {
                let mut frames: Vec<String> = Vec::new();
                for &pc in &heap.stack(b.stack) {
                    // Inlined calls are frames of their own: a site names its caller with
                    // the caller's own line.
                    for s in symbols.symbolize_inlined(pc, false) {
                        if !s.agent {
                            frames.push(match &s.location {
                                Some(at) => format!("{} ({at})", s.function),
                                None => s.function.clone(),
                            });
                        }
                    }
                }
                sites.push(Site {
                    id: u64::from(b.stack),
                    frames,
                });
                (sites.len() - 1) as SiteIndex
            })
        };
        objects.push(ObjectRecord {
            id: b.seq,
            addr: b.addr,
            size: b.size,
            site,
            thread: b.tid,
            seq: b.seq,
        });
    }
    let threads = raw
        .into_iter()
        .map(|t| Thread {
            tid: t.tid,
            name: t.name,
            state: t.state,
            frames: t
                .frames
                .into_iter()
                .enumerate()
                .map(|(i, (sort, pc, (refs, interior)))| match sort {
                    FrameSort::Call => {
                        let s = symbols.symbolize(pc, i == 0);
                        Frame {
                            function: s.function,
                            module: s.module,
                            kind: s.kind,
                            refs,
                            interior,
                        }
                    }
                    FrameSort::Signal => Frame {
                        function: "<signal handler called>".into(),
                        module: "[kernel]".into(),
                        kind: FrameKind::System,
                        refs,
                        interior,
                    },
                    FrameSort::Thread => Frame {
                        function: "<thread>".into(),
                        module: String::new(),
                        kind: FrameKind::System,
                        refs,
                        interior,
                    },
                })
                .collect(),
        })
        .collect();
    HeapGraph::new(process, sites, objects, edges, threads, globals)?
        .with_globals_interior(globals_interior)
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_analysis::attribution::Analysis;
    use std::sync::mpsc;

    /// Blocks given by hand: real memory owned by the test.
    struct Fixed(Vec<BlockInfo>);

    impl Heap for Fixed {
        type Frozen = ();
        fn freeze(&self) {}
        fn blocks(&self, _: &(), out: &mut Vec<BlockInfo>) {
            out.extend_from_slice(&self.0);
        }
        fn len_hint(&self, _: &()) -> usize {
            self.0.len()
        }
        fn stack(&self, _: u32) -> Vec<u64> {
            Vec::new()
        }
        fn glibc_blocks(&self) -> bool {
            false
        }
    }

    #[test]
    fn the_childs_findings_survive_the_pipe_encoding() {
        let mut edges = Edges::with_capacity(2, 1);
        edges.push_with_kinds([(1, true)]);
        edges.push([]);
        let scanned = Scanned {
            blocks: vec![
                BlockInfo {
                    addr: 0x1000,
                    size: 16,
                    seq: 1,
                    tid: 7,
                    stack: 3,
                },
                BlockInfo {
                    addr: 0x2000,
                    size: 32,
                    seq: 2,
                    tid: 8,
                    stack: 0,
                },
            ],
            raw: vec![
                RawThread {
                    tid: 7,
                    name: String::new(),
                    state: ThreadState::Stopped,
                    frames: vec![
                        (FrameSort::Call, 0x4000, (vec![0], vec![0])),
                        (FrameSort::Thread, 0, (vec![], vec![])),
                    ],
                },
                RawThread {
                    tid: 9,
                    name: String::new(),
                    state: ThreadState::NotStoppable("stop signal blocked".into()),
                    frames: vec![(FrameSort::Signal, 0x5000, (vec![0, 1], vec![1]))],
                },
            ],
            globals: (vec![0, 1], vec![1]),
            edges,
            phases: Phases {
                stop: Duration::ZERO,
                index: Duration::from_nanos(5),
                roots: Duration::from_nanos(6),
                blocks: Duration::from_nanos(7),
                mapped: Duration::from_nanos(3),
                mapped_bytes: 4096,
            },
        };
        let bytes = encode(&scanned);
        let back = decode(&bytes).expect("decodes");
        assert_eq!(back.blocks, scanned.blocks);
        assert_eq!(back.globals, scanned.globals);
        assert_eq!(back.edges, scanned.edges);
        assert_eq!(back.phases.blocks, Duration::from_nanos(7));
        assert_eq!(back.phases.mapped, Duration::from_nanos(3));
        assert_eq!(back.phases.mapped_bytes, 4096);
        for (a, b) in back.raw.iter().zip(&scanned.raw) {
            assert_eq!((a.tid, &a.state, &a.frames), (b.tid, &b.state, &b.frames));
        }
        // A truncated message is refused, never half-read.
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
    }

    #[test]
    fn radix_sort_orders_blocks_by_address() {
        let mut x = 0x1234_5678_9abc_u64;
        let mut blocks: Vec<BlockInfo> = (0..10_000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                BlockInfo {
                    addr: x & 0xffff_ffff_fff0,
                    seq: i,
                    ..Default::default()
                }
            })
            .collect();
        let mut expect = blocks.clone();
        expect.sort_by_key(|b| b.addr);
        let mut scratch = Vec::with_capacity(blocks.len());
        sort_by_address(&mut blocks, &mut scratch);
        assert_eq!(
            blocks.iter().map(|b| b.addr).collect::<Vec<_>>(),
            expect.iter().map(|b| b.addr).collect::<Vec<_>>()
        );
    }

    #[inline(never)]
    fn hold(
        own: Box<[u64; 64]>,
        shared: u64,
        ready: mpsc::Sender<(u32, u64)>,
        go: mpsc::Receiver<()>,
    ) {
        let own = std::hint::black_box(own);
        // SAFETY: gettid has no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        ready.send((tid, own.as_ptr() as u64)).unwrap();
        go.recv().unwrap();
        std::hint::black_box(&own);
        std::hint::black_box(shared);
    }

    #[test]
    fn two_threads_with_private_and_shared_blocks() {
        stop::install().unwrap();
        let shared = Box::new([0u64; 32]);
        let shared_addr = shared.as_ptr() as u64;
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut gos = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..2 {
            let (go_tx, go_rx) = mpsc::channel();
            gos.push(go_tx);
            let ready = ready_tx.clone();
            handles.push(std::thread::spawn(move || {
                hold(Box::new([0u64; 64]), shared_addr, ready, go_rx)
            }));
        }
        let got: Vec<(u32, u64)> = (0..2).map(|_| ready_rx.recv().unwrap()).collect();
        let heap = Fixed(vec![
            BlockInfo {
                addr: got[0].1,
                size: 512,
                seq: 1,
                tid: got[0].0,
                stack: 0,
            },
            BlockInfo {
                addr: got[1].1,
                size: 512,
                seq: 2,
                tid: got[1].0,
                stack: 0,
            },
            BlockInfo {
                addr: shared_addr,
                size: 256,
                seq: 3,
                tid: 0,
                stack: 0,
            },
        ]);
        let threads: Vec<ThreadInfo> = got
            .iter()
            .map(|&(tid, _)| ThreadInfo {
                tid,
                name: format!("t{tid}"),
            })
            .collect();
        let cap = capture(&heap, &threads, Timeouts::default()).unwrap();
        for g in &gos {
            g.send(()).unwrap();
        }
        for h in handles {
            h.join().unwrap();
        }
        let g = &cap.graph;
        assert_eq!(g.threads.len(), 2);
        assert!(g.threads.iter().all(|t| t.state == ThreadState::Stopped));
        for t in &g.threads {
            assert_eq!(t.frames.last().unwrap().function, "<thread>");
            assert!(
                t.frames.iter().any(|f| f.function.ends_with("hold")),
                "{:?}",
                t.frames.iter().map(|f| &f.function).collect::<Vec<_>>()
            );
        }
        let a = Analysis::new(g);
        for (i, t) in g.threads.iter().enumerate() {
            let f = &a.threads()[i];
            assert_eq!(f.proprietary, 512, "thread {}", t.tid);
            assert_eq!(f.shared, 256, "thread {}", t.tid);
            assert_eq!(f.total, 768);
        }
        drop(shared);
    }
}
