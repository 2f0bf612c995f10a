//! One capture, end to end: read the address space, freeze the block table, stop the world,
//! fork a copy-on-write child of the stopped process and resume the world at once; the child
//! lists, indexes and scans (unwinding every thread, scanning globals and blocks), asks the
//! parent to name its allocation stacks and frames before its block scan, so that the naming
//! overlaps it (symbolization stays in the parent, where the symbol tables are cached and the
//! loader may be called), then builds the
//! [`HeapGraph`], analyses it, makes the [`Kept`] and sends the kept snapshot's bytes over
//! the socket pair, the graph's own columns while the analysis runs and the analysis's after
//! it; the parent decodes them as they arrive. So the graph and its analysis
//! (about 200 bytes per object at their peak) only ever exist in the child, and the process
//! itself holds only the kept snapshot (docs/reference.md §9). If no child can be made, the
//! scan runs while the world is stopped and the rest in the process after the resume.
//!
//! Owns the order of those steps and what happens inside the stop window and in the child.
//! There: no libc malloc (the agent's allocator only, checked idle), no loader calls, no
//! stdio, and every read of target memory goes through the pre-read memory map, the map
//! re-read after the stop (the program's mapped memory, `mapped`) or a live, frozen block.
//!
//! It does not know the block table's layout: the table is reached through [`Heap`], so the
//! capture can be tested on any set of real memory blocks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use heaptui_analysis::kept::GraphColumns;
use heaptui_analysis::{
    Both, Edges, Frame, FrameKind, GraphError, HeapGraph, Kept, NO_SITE, ObjectIndex, Objects,
    OneThread, Process, Site, SiteIndex, Thread, ThreadState,
};

use super::alongside::alongside;
use super::dontfork;
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
use heaptui_capture::registers::KernelCall;

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
    /// Appends every live block of the program's to `out` (not the agent's own, allocated
    /// by libc for an agent thread: they are left out of the graph); called while frozen and
    /// stopped, so it must not allocate with libc.
    fn blocks(&self, frozen: &Self::Frozen, out: &mut Vec<BlockInfo>);
    /// Appends `(address, size)` of every block of 2 KiB or more (the only ones that can be
    /// mmapped chunks, which span whole pages) among those the last [`Heap::blocks`] call
    /// found, the agent's own included, and returns true; or returns false, and the capture
    /// looks through all the listed blocks. Called while stopped, like [`Heap::blocks`].
    fn large_blocks(&self, _frozen: &Self::Frozen, _out: &mut Vec<(u64, u64)>) -> bool {
        false
    }
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
    /// Appends the addresses of the blocks a realloc in progress is moving: libc may already
    /// have unmapped their memory, so the scan reads them with a checked copy. Called while
    /// stopped, like [`Heap::blocks`].
    fn moving(&self, _frozen: &Self::Frozen, _out: &mut Vec<u64>) {}
    /// Appends the addresses of blocks the program freed but that are still allocated in
    /// libc (held back): not live, but their memory is heap memory, never a mapped root.
    /// Called while stopped, after [`Heap::blocks`].
    fn held(&self, _frozen: &Self::Frozen, _out: &mut Vec<u64>) {}
    /// Gives every block a sequence number that has none yet (the agent's table numbers the
    /// blocks waiting in its threads' slots lazily: `registry::blocks::UNNUMBERED`). Called
    /// once the world is stopped and before the scanning child is made, so the numbers are
    /// the process's own, not the child's.
    fn number_blocks(&self, _frozen: &Self::Frozen) {}
}

/// A finished capture and how long it took.
pub struct Capture {
    /// The analysed graph, kept (the graph and its analysis exist only in the scanning child).
    pub kept: Kept,
    /// How long the threads were stopped (freeze to resume).
    pub pause: Duration,
    /// Stopping the threads (inside the pause); indexing the blocks, unwinding and scanning
    /// the roots, scanning the blocks (in the child, after the resume).
    pub phases: Phases,
    /// Building, analysing and keeping the graph (in the child) and receiving the kept
    /// snapshot: from the child's scan done and its names sent to the kept snapshot decoded.
    pub analysis: Duration,
    /// The whole capture, the analysis included.
    pub total: Duration,
}

/// What a capture makes of the graph.
pub enum Sink<'a> {
    /// Analyse it and keep it ([`capture`]).
    Kept,
    /// Write it, unanalysed, as a binary snapshot file (docs/reference.md §4) to the writer: a
    /// dump ([`capture_file`]). The graph never exists in this process either.
    File(&'a mut dyn std::io::Write),
}

/// A capture written as a snapshot file ([`capture_file`]).
pub struct FileCapture {
    /// Objects, their bytes and threads in the file.
    pub objects: u64,
    pub bytes: u64,
    pub threads: usize,
    /// The first thread the capture could not stop, and why (`None`: every one was).
    pub not_stopped: Option<(u32, String)>,
    pub pause: Duration,
    pub phases: Phases,
    /// The whole capture, the file written.
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
    /// The snapshot file could not be written.
    Write(std::io::Error),
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
            CaptureError::Write(e) => write!(f, "cannot write the snapshot file: {e}"),
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
    /// Inside the pause: making the program's `MADV_DONTFORK` and `MADV_WIPEONFORK` mappings
    /// visible to the scan child and marking them again (`dontfork`), how many flags were
    /// lifted, and the clone itself.
    pub dontfork: Duration,
    pub dontfork_mappings: u64,
    pub fork: Duration,
    /// CPU time (user and system) of the scanning child, from its start to its exit: the
    /// scan, the graph, the analysis and the kept snapshot (zero without a child).
    pub child_cpu: Duration,
    /// CPU time of the scan (index, roots and blocks above, both threads of the scanning
    /// child): what the capture costs however loaded the machine is, where the walls above
    /// stretch with the load.
    pub scan_cpu: Duration,
    /// Naming the allocation stacks and frames the scan found (in the process, where the
    /// symbol tables are cached): the scanning child waits for the names before it builds
    /// the graph.
    pub naming: Duration,
    /// The error (errno) that left the capture without a scanning child, when it had none:
    /// the scan then ran in the paused process, the rest after the resume.
    pub no_child: Option<i32>,
}

impl Phases {
    /// Where the scan ran, for the agent's log line of a snapshot: `in the scanning child`,
    /// or, without one, the process and why.
    pub fn scanned_in(&self) -> String {
        match self.no_child {
            None => "in the scanning child".to_string(),
            Some(error) => format!(
                "no scanning child ({}), in the paused process",
                std::io::Error::from_raw_os_error(error)
            ),
        }
    }

    /// The scanning child's message to its parent after the block scan: the phases it timed.
    fn encode_scan(&self) -> Vec<u8> {
        let mut m = Message::default();
        for v in [
            self.index.as_nanos() as u64,
            self.roots.as_nanos() as u64,
            self.blocks.as_nanos() as u64,
            self.mapped.as_nanos() as u64,
            self.mapped_bytes,
            self.scan_cpu.as_nanos() as u64,
        ] {
            m.u64(v);
        }
        m.0
    }

    fn decode_scan(bytes: &[u8]) -> Option<Phases> {
        let mut r = Reading { bytes, at: 0 };
        let d = Duration::from_nanos;
        let phases = Phases {
            index: d(r.u64()?),
            roots: d(r.u64()?),
            blocks: d(r.u64()?),
            mapped: d(r.u64()?),
            mapped_bytes: r.u64()?,
            scan_cpu: d(r.u64()?),
            ..Phases::default()
        };
        r.done().then_some(phases)
    }
}

/// One thread's frames as found inside the stop window, not yet symbolized.
struct RawThread {
    tid: u32,
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
/// every block of `heap`, analysed and kept.
pub fn capture<H: Heap>(
    heap: &H,
    threads: &[ThreadInfo],
    timeouts: Timeouts,
) -> Result<Capture, CaptureError> {
    let begin = Instant::now();
    let (kept, _, pause, phases, named) = run(heap, threads, timeouts, Sink::Kept)?;
    Ok(Capture {
        kept: kept.ok_or(CaptureError::Child)?,
        pause,
        phases,
        analysis: named.elapsed(),
        total: begin.elapsed(),
    })
}

/// As [`capture`], written to `out` as a binary snapshot file instead, unanalysed (a dump).
pub fn capture_file<H: Heap>(
    heap: &H,
    threads: &[ThreadInfo],
    timeouts: Timeouts,
    out: &mut dyn std::io::Write,
) -> Result<FileCapture, CaptureError> {
    let begin = Instant::now();
    let (_, unnamed, pause, phases, _) = run(heap, threads, timeouts, Sink::File(out))?;
    Ok(FileCapture {
        objects: unnamed.summary[0],
        bytes: unnamed.summary[1],
        threads: unnamed.stopped.len(),
        not_stopped: unnamed.not_stopped,
        pause,
        phases,
        total: begin.elapsed(),
    })
}

/// One capture into `sink`: the kept snapshot (for [`Sink::Kept`]), what the scan found (its
/// summary), the pause, the phases and when the names were sent.
type Ran = (Option<Kept>, Unnamed, Duration, Phases, Instant);

fn run<H: Heap>(
    heap: &H,
    threads: &[ThreadInfo],
    timeouts: Timeouts,
    mut sink: Sink<'_>,
) -> Result<Ran, CaptureError> {
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
    // The system call each thread is in now, as the kernel records it: tells the number of a
    // call the stop cuts short with EINTR when its registers cannot (`registers`).
    let seen_calls: Vec<(u32, KernelCall)> = tids
        .iter()
        .filter_map(|&tid| Some((tid, kernel_call(tid)?)))
        .collect();
    // Whether the program has mappings a fork leaves out or wipes (read again inside the pause
    // only then: see `dontfork`), and may have them lifted (no device that DMAs into its
    // memory).
    let any_hidden_from_fork = !dontfork::hidden_now().is_empty() && !dontfork::holds_dma_device();

    // ---- stop window ----
    let frozen = heap.freeze();
    let paused = Instant::now();
    let capacity = heap.len_hint(&frozen) + 1024;
    // The listing only: a sort's scratch is wanted only when a listing comes out of address
    // order (not the agent's table), and is taken then, from the agent's allocator, which the
    // loop below finds idle.
    let mut blocks: Vec<BlockInfo> = Vec::with_capacity(capacity);
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
    heap.number_blocks(&frozen);
    let stop_time = paused.elapsed();
    let pid = process.pid;
    let mut scan = |world: &stop::World, ask_names: Option<&mut dyn FnMut(&Unnamed)>| {
        scan_stopped(
            heap,
            &frozen,
            world,
            &space,
            &mut unwinder,
            &globals_ranges,
            (&own_tls, &own),
            &mut blocks,
            pid,
            &seen_calls,
            ask_names,
        )
    };
    // The scan runs in a copy-on-write child of the stopped process, so the threads run
    // again as soon as the child exists; the child also builds, analyses and keeps the
    // graph, so that the process itself only ever holds the kept snapshot. Without a child,
    // the scan runs while the threads are stopped and the rest after the resume, here.
    // The program's MADV_DONTFORK and MADV_WIPEONFORK mappings are lifted for the clone only.
    let lift_mark = Instant::now();
    let hidden = if any_hidden_from_fork && every_program_thread_stopped(&world) {
        dontfork::hidden_now()
    } else {
        Vec::new()
    };
    // SAFETY: read while every thread of the program is stopped (checked just above; the
    // agent's never mark a mapping); put back in the parent right after the clone, before
    // any of them runs.
    let lifted = unsafe { dontfork::Lifted::lift(&hidden) };
    let dontfork_mappings = lifted.len() as u64;
    let mut dontfork_time = lift_mark.elapsed();
    let fork_mark = Instant::now();
    let forked = fork_child();
    let fork_time = fork_mark.elapsed();
    let mut put_back = |lifted: dontfork::Lifted| {
        let mark = Instant::now();
        let failed = lifted.restore();
        dontfork_time += mark.elapsed();
        failed
    };
    let to_file = matches!(sink, Sink::File(_));
    let no_child = match forked {
        Fork::Failed(error) => Some(error),
        _ => None,
    };
    let (kept, unnamed, pause, mut phases, named) = match forked {
        Fork::Child(fd) => {
            lifted.forget_in_child();
            // The scan's buffers, freed before the analysis, are handed to it again.
            crate::alloc::AGENT_ALLOC.reuse_large();
            super::scan::allow_second_thread();
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // The names are asked for before the block scan, and read after it.
                let mut asked = false;
                let scanned = scan(
                    &world,
                    Some(&mut |unnamed| asked = send_message(fd, &unnamed.encode())),
                );
                asked && analyse_in_child(fd, process, scanned, threads, to_file)
            }))
            .unwrap_or(false);
            // SAFETY: the child ends here without running any exit handler of the program.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        Fork::Parent(child, fd) => {
            let not_put_back = put_back(lifted);
            world.wake();
            drop(frozen);
            let pause = paused.elapsed();
            drop(world);
            dontfork::put_back_late(not_put_back);
            let received = receive_from_child(heap, &space, fd, &mut sink);
            // SAFETY: our own descriptor; closing it first ends a child still sending.
            unsafe { libc::close(fd) };
            let mut status = 0;
            // SAFETY: a zeroed rusage is valid output space.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: reaps our own child (it has no exit signal: __WALL finds it) and reads
            // its resource usage into `usage`.
            unsafe { libc::wait4(child, &mut status, libc::__WALL, &mut usage) };
            let (kept, unnamed, mut phases, named) = received?;
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                return Err(CaptureError::Child);
            }
            let time = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
            };
            phases.child_cpu = time(usage.ru_utime) + time(usage.ru_stime);
            (kept, unnamed, pause, phases, named)
        }
        Fork::Failed(_) => {
            let not_put_back = put_back(lifted);
            // Nothing to name before the block scan here: what is to be named is found once
            // the threads run again, not inside the pause.
            let scanned = scan(&world, None);
            world.wake();
            drop(frozen);
            let pause = paused.elapsed();
            drop(world);
            dontfork::put_back_late(not_put_back);
            let unnamed = Unnamed::of(&scanned.blocks, &scanned.raw);
            let mut phases = scanned.phases;
            let naming = Instant::now();
            let names = name(heap, &space, &unnamed);
            let named = Instant::now();
            let naming = named - naming;
            let kept = match &mut sink {
                Sink::Kept => Some(analyse(process, scanned, &unnamed.stacks, names, threads)?),
                Sink::File(out) => {
                    let graph = build_graph(
                        process,
                        scanned,
                        &unnamed.stacks,
                        names,
                        threads,
                        &OneThread,
                    )?;
                    heaptui_analysis::snapshot::write_binary(&graph, out)
                        .map_err(|e| CaptureError::Write(std::io::Error::other(e.to_string())))?;
                    None
                }
            };
            phases.naming = naming;
            (kept, unnamed, pause, phases, named)
        }
    };
    phases.stop = stop_time;
    phases.no_child = no_child;
    phases.dontfork = dontfork_time;
    phases.dontfork_mappings = dontfork_mappings;
    phases.fork = fork_time;
    // ---- end of stop window ----
    Ok((kept, unnamed, pause, phases, named))
}

/// Sorts blocks by address (`scan::sort_by_address`), in `scratch` (grown as needed).
fn sort_by_address(blocks: &mut [BlockInfo], scratch: &mut Vec<BlockInfo>) {
    super::scan::sort_by_address(blocks, scratch, |b| b.addr);
}

/// The block index of `blocks`, none if they are not sorted by address
/// (`BlockIndex::of_sorted`); made in two halves on the scanning child's two threads when
/// there are enough blocks (`scan::second_thread`).
fn index_blocks(blocks: &[BlockInfo]) -> Option<BlockIndex> {
    let block = |b: &BlockInfo| (b.addr, b.size);
    if !super::scan::second_thread(blocks.len()) {
        return BlockIndex::of_sorted(blocks.iter().map(block));
    }
    BlockIndex::of_sorted_in_halves(blocks, block, |first, second| {
        // SAFETY: only in the scanning child (`second_thread`); the second half copies
        // blocks and builds maps, touching no thread-local storage (the agent's allocator,
        // a hash map without random keys) and not panicking.
        unsafe { alongside(first, second) };
    })
}

/// Removes the blocks that words of `ranges` point into (blocks sorted by address): a
/// search of the blocks per word (a few hundred words of the capturing thread's TLS), not
/// of the words per block (millions).
fn drop_referenced(blocks: &mut Vec<BlockInfo>, ranges: &[std::ops::Range<u64>]) {
    let mut referenced: Vec<usize> = Vec::new();
    for r in ranges {
        // SAFETY: clamped to readable mappings; this thread's own TLS.
        let words = unsafe {
            std::slice::from_raw_parts(r.start as *const u64, ((r.end - r.start) / 8) as usize)
        };
        for &w in words {
            // The last block starting at or below `w`: the only one that can hold it.
            let i = blocks.partition_point(|b| b.addr <= w);
            if i > 0 && w < blocks[i - 1].addr + blocks[i - 1].size.max(1) {
                referenced.push(i - 1);
            }
        }
    }
    if referenced.is_empty() {
        return;
    }
    referenced.sort_unstable();
    let mut at = 0;
    blocks.retain(|_| {
        let keep = referenced.binary_search(&at).is_err();
        at += 1;
        keep
    });
}

/// What the scan of a stopped world found.
struct Scanned {
    blocks: Vec<BlockInfo>,
    raw: Vec<RawThread>,
    globals: Refs,
    edges: Edges,
    phases: Phases,
    /// What the parent is asked to name (made before the block scan, see `scan_stopped`).
    unnamed: Unnamed,
}

/// Everything done while the world is stopped (or in the copy-on-write child): list, sort
/// and index the blocks, unwind and scan every stopped thread, scan globals and blocks.
/// What is to be named (the blocks' allocation stacks, the threads' frames) is known before
/// the block scan, the longest step: it is handed to `ask_names` then, so that the child's
/// parent names it while the child scans the blocks. Without `ask_names` (no child: the world
/// is still stopped) it is not made here, and `Scanned::unnamed` is empty.
#[allow(clippy::too_many_arguments)]
fn scan_stopped<H: Heap>(
    heap: &H,
    frozen: &H::Frozen,
    world: &stop::World,
    space: &AddressSpace,
    unwinder: &mut Unwinder<'_, AddressSpace>,
    globals_ranges: &[(std::ops::Range<u64>, bool)],
    (own_tls, own): (&[std::ops::Range<u64>], &Registers),
    blocks: &mut Vec<BlockInfo>,
    pid: u32,
    seen_calls: &[(u32, KernelCall)],
    ask_names: Option<&mut dyn FnMut(&Unnamed)>,
) -> Scanned {
    let mut phases = Phases::default();
    let cpu_start = process_cpu();
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
        // The large blocks as the table kept them aside while listing (the agent's own
        // among them), or else all of them.
        let mut large = Vec::new();
        let large_known = heap.large_blocks(frozen, &mut large);
        // SAFETY: the table's blocks, live, held back or being moved by a realloc, are glibc
        // chunks; the map was read after the stop.
        unsafe {
            if large_known {
                exclude.add_mmapped_chunks(&maps, large.iter().map(|&(a, s)| (a, Some(s))));
            } else {
                exclude.add_mmapped_chunks(&maps, blocks.iter().map(|b| (b.addr, Some(b.size))));
            }
            exclude.add_mmapped_chunks(&maps, held.iter().map(|&a| (a, None)));
            exclude.add_arena_heaps(&maps);
        }
    }
    exclude.add_modules(space);
    let mut agent_threads = Vec::with_capacity(threads::MAX_AGENT_THREADS);
    threads::agent_thread_pointers(&mut agent_threads);
    // The thread pointers of the threads that exist: their stacks are no finished ones. A
    // thread that could not be stopped has no known thread pointer, and maybe no known stack
    // pointer: its own stack could be taken for a finished one and its frames lost, so then
    // no stack is (the cached stacks' stale words are roots again in that capture, as they
    // were before the exclusion).
    let mut live_tps: Vec<u64> = Vec::with_capacity(world.threads.len() + agent_threads.len() + 1);
    live_tps.extend(&agent_threads);
    live_tps.push(own.fs_base);
    let mut all_known = true;
    for (_, outcome) in &world.threads {
        match outcome {
            Outcome::Stopped(regs) => live_tps.push(regs.fs_base),
            Outcome::NotStoppable(_) => all_known = false,
            Outcome::Gone => {}
        }
    }
    if all_known {
        // SAFETY: the map was read after the stop.
        unsafe { exclude.add_finished_stacks(&maps, space.static_tls, &live_tps) };
    }
    for tp in agent_threads {
        exclude.add_thread(&maps, space.static_tls, None, Some(tp));
    }
    exclude.add_thread(
        &maps,
        space.static_tls,
        Some(own.gpr[RSP]),
        Some(own.fs_base),
    );
    // The agent's table lists its blocks in address order (`by_address`), so they are not
    // read once more to make sure: the index finds out in the pass that copies them, and
    // only blocks that came out of order are sorted here, their TLS search made again (made
    // on blocks out of order it drops only blocks that hold a TLS word, but may miss some).
    drop_referenced(blocks, own_tls);
    let index = match index_blocks(blocks) {
        Some(index) => index,
        None => {
            sort_by_address(blocks, &mut Vec::new());
            drop_referenced(blocks, own_tls);
            BlockIndex::new(blocks.iter().map(|b| (b.addr, b.size)))
        }
    };
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
                let seen = seen_calls.iter().find(|(t, _)| t == tid).map(|(_, c)| c);
                let unwound = unwinder.unwind_seen(regs, seen);
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
    let unnamed = match ask_names {
        Some(ask_names) => {
            let unnamed = Unnamed::of(blocks, &raw);
            ask_names(&unnamed);
            unnamed
        }
        None => Unnamed::default(),
    };
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
    let edges = scan_blocks(&index, &maps, &mut collector, &checked);
    phases.blocks = mark.elapsed();
    phases.scan_cpu = process_cpu().saturating_sub(cpu_start);
    Scanned {
        blocks: std::mem::take(blocks),
        raw,
        globals,
        edges,
        phases,
        unnamed,
    }
}

/// CPU time (user and system) of this process's threads so far.
fn process_cpu() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time (user and system) of the calling thread so far.
fn thread_cpu() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes a timespec into our own live struct.
    unsafe { libc::clock_gettime(clock, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// What `/proc/self/task/TID/syscall` says thread `tid` is blocked in, if anything.
fn kernel_call(tid: u32) -> Option<KernelCall> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    KernelCall::parse(&text)
}

enum Fork {
    /// In the child, with its end of the socket pair.
    Child(i32),
    /// In the parent: the child's pid and its end of the socket pair.
    Parent(libc::pid_t, i32),
    /// No child could be made: the error of the call that failed.
    Failed(i32),
}

/// Whether every thread of the process is stopped in `world`, the calling thread or the
/// agent's own, so that none can remap a mapping while a fork flag is lifted (see
/// `dontfork`). When not, says once in the log that such mappings are left out.
fn every_program_thread_stopped(world: &stop::World) -> bool {
    // SAFETY: gettid has no arguments.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let quiet = dontfork::only_quiet_threads(|tid| {
        tid == me
            || threads::is_agent_thread(tid)
            || world
                .threads
                .iter()
                .any(|(t, o)| *t == tid && matches!(o, Outcome::Stopped(_)))
    });
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !quiet && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::agent_log!(
            "a thread of the program runs during the capture (not stoppable, or started \
             after the stop): its MADV_DONTFORK and MADV_WIPEONFORK mappings are left out of \
             this capture's roots"
        );
    }
    quiet
}

/// Makes a copy-on-write child of this process (only the calling thread runs in it), with
/// no exit signal, so the program's own `wait` calls never see it; the two talk over a
/// socket pair (sent to with `MSG_NOSIGNAL`: a child that died must not raise `SIGPIPE` in
/// the program).
fn fork_child() -> Fork {
    let mut fds = [0i32; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Fork::Failed(crate::sys::errno());
    }
    // The scan in the child allocates from the agent's allocator, whose locks the agent's
    // own threads (not stopped: the recording writer, the server) may hold at the clone; a
    // lock copied held would never be released in the child. Held across the clone, as the
    // fork handlers do, they are free on both sides.
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    crate::alloc::AGENT_ALLOC.lock_all();
    // SAFETY: a raw clone without CLONE_VM and without a new stack is a fork whose child
    // gets a copy of this thread's stack; glibc's fork handlers are deliberately skipped
    // (the child only runs the scan, the analysis, raw system calls and _exit).
    let pid = unsafe { libc::syscall(libc::SYS_clone, 0u64, 0u64, 0u64, 0u64, 0u64) };
    crate::alloc::AGENT_ALLOC.unlock_all();
    match pid {
        0 => {
            detach_from_program(parent);
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
            let error = crate::sys::errno();
            // SAFETY: our own descriptors.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            Fork::Failed(error)
        }
    }
}

/// The signals whose disposition the scan child puts back to the default: every one but
/// `SIGKILL` and `SIGSTOP` (which cannot be changed), the real-time ones included.
const LAST_SIGNAL: libc::c_int = 64;

/// First thing in the scan child, before it allocates: makes it a process of the agent's
/// rather than a copy of the program. The child builds the whole graph (some 320 bytes an
/// object) and can run out of memory; Rust's allocation-error handler then writes "memory
/// allocation of N bytes failed" on fd 2 and aborts. Without this, that line would land on
/// the program's standard error, the abort would run the program's own `SIGABRT` handler
/// (inherited across the clone: a crash reporter of the program's, say, reporting a crash the
/// program never had), a core could be dumped under the program's name, and a child whose
/// parent died would scan on. So: fds 0, 1 and 2 become `/dev/null` (the agent's log keeps
/// its own descriptor), every signal disposition goes back to the default, no core file, and
/// the child dies with the thread that cloned it. Raw system calls only: nothing here
/// allocates, and the agent's `sigaction` and `signal` wrappers are not in the way.
///
/// No core file needs more than `RLIMIT_CORE` 0: when `core_pattern` pipes cores to a handler
/// (systemd-coredump, apport), the kernel ignores that limit, and the handler would record a
/// crash of the program's. So the child also makes itself undumpable (`PR_SET_DUMPABLE` 0),
/// which the kernel honours for every kind of core. That gives its `/proc/self` files to root,
/// and the child reads some after: `maps` (mode 0444, and a process may always read its own
/// through the access check), and `pagemap` (mode 0400: a program not run as root could not
/// open it) — so the pagemap is opened first and kept ([`mapped::open_pagemap_early`]). The
/// graph's analysis reads `statm` and `cgroup` (0444) and `/proc/meminfo`: unaffected.
///
/// Should the machine run out of memory while the child works, the kernel's OOM killer must
/// take the child, whose end only fails the snapshot, and not the program, which the child's
/// copy-on-write pages make look larger: the child raises its `oom_score_adj` to the most
/// (any process may raise its own; before `PR_SET_DUMPABLE` 0 gives the file to root).
fn detach_from_program(parent: libc::pid_t) {
    // SAFETY: a NUL-terminated path; dup2 and close on descriptors of this process only.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    // The kernel's `struct sigaction` (x86-64, aarch64): handler, flags, restorer, mask.
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SIGPIPE is ignored instead: a log on a pipe whose reader is gone must not kill the
    // child (its socket to the parent is written with MSG_NOSIGNAL).
    let ignore = KernelSigaction {
        handler: libc::SIG_IGN,
        ..default
    };
    for sig in 1..=LAST_SIGNAL {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let action = if sig == libc::SIGPIPE {
            &ignore
        } else {
            &default
        };
        // SAFETY: rt_sigaction reads a kernel sigaction of 8-byte mask from a live struct.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                action as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
    }
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 on this process reads a live rlimit; prctl and getppid take no
    // pointers; _exit ends only this child.
    unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_CORE,
            &no_core as *const libc::rlimit,
            std::ptr::null_mut::<libc::rlimit>(),
        );
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let oom = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if oom >= 0 {
            libc::write(oom, b"1000".as_ptr().cast(), 4);
            libc::close(oom);
        }
        mapped::open_pagemap_early();
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
        // The parent may have ended before the line above: nothing would kill the child then.
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
}

/// One end of the socket pair between the parent and the scanning child. Its calls are raw
/// system calls ([`crate::sys::raw_syscall`]): they never touch `errno` nor the thread descriptor's
/// cancellation state, so the same type serves the child's bare thread (`alongside`), which
/// shares its first thread's thread pointer and so would share both with glibc's `send`.
struct Socket(i32);

impl Socket {
    /// Makes the system call `n` on this socket with a buffer and its length, again while a
    /// signal cuts it short (the parent's program may have handlers; the child has none).
    fn call(
        &self,
        n: libc::c_long,
        buf: *const u8,
        len: usize,
        flags: i32,
    ) -> std::io::Result<usize> {
        loop {
            // SAFETY: `n` is read or sendto on this descriptor with a live buffer of `len`
            // bytes (the callers pass their slice); sendto's address arguments are null.
            let ret = unsafe {
                crate::sys::raw_syscall(
                    n,
                    [
                        self.0 as libc::c_long,
                        buf as libc::c_long,
                        len as libc::c_long,
                        flags as libc::c_long,
                        0,
                        0,
                    ],
                )
            };
            if ret >= 0 {
                return Ok(ret as usize);
            }
            if ret != -libc::c_long::from(libc::EINTR) {
                return Err(std::io::Error::from_raw_os_error(-ret as i32));
            }
        }
    }
}

impl std::io::Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.call(libc::SYS_read, buf.as_mut_ptr(), buf.len(), 0)
    }
}

impl std::io::Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // MSG_NOSIGNAL: EPIPE instead of SIGPIPE when the other end is gone.
        self.call(
            libc::SYS_sendto,
            buf.as_ptr(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends one length-prefixed message.
fn send_message(fd: i32, bytes: &[u8]) -> bool {
    use std::io::Write;
    let mut s = Socket(fd);
    s.write_all(&(bytes.len() as u64).to_le_bytes()).is_ok() && s.write_all(bytes).is_ok()
}

/// Longest message accepted (names and frames are few; a bad length must not allocate).
const MAX_MESSAGE: u64 = 1 << 32;

/// Reads one length-prefixed message.
fn read_message(fd: i32) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut s = Socket(fd);
    let mut len = [0u8; 8];
    s.read_exact(&mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len > MAX_MESSAGE {
        return None;
    }
    let mut out = Vec::new();
    out.try_reserve_exact(len as usize).ok()?;
    out.resize(len as usize, 0);
    s.read_exact(&mut out).ok()?;
    Some(out)
}

/// Little-endian writer of the messages between the child and the parent (both ends are
/// this very program; the reader still checks every length).
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn text(&mut self, t: &str) {
        self.u64(t.len() as u64);
        self.0.extend_from_slice(t.as_bytes());
    }
}

/// Reader of a [`Message`]: `None` at the first length that does not fit.
struct Reading<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reading<'_> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_le_bytes(self.bytes.get(self.at..self.at + 8)?.try_into().ok()?);
        self.at += 8;
        Some(v)
    }
    /// A count of items of at least `min` bytes each, checked against what is left.
    fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u64()? as usize;
        (n <= (self.bytes.len() - self.at) / min.max(1)).then_some(n)
    }
    fn text(&mut self) -> Option<String> {
        let n = self.count(1)?;
        let t = self.bytes.get(self.at..self.at + n)?;
        self.at += n;
        Some(String::from_utf8_lossy(t).into_owned())
    }
    fn done(&self) -> bool {
        self.at == self.bytes.len()
    }
}

fn frame_sort_code(sort: FrameSort) -> u64 {
    match sort {
        FrameSort::Call => 0,
        FrameSort::Signal => 1,
        FrameSort::Thread => 2,
    }
}

/// Allocation stack id → site index ([`NO_SITE`] when unset): a dense table, as the agent's
/// stack ids count up from 1 (one lookup per block of millions: no hashing), or a hash map
/// for ids too sparse for one.
enum StackMap {
    Dense(Vec<SiteIndex>),
    Sparse(HashMap<u32, SiteIndex, std::hash::BuildHasherDefault<heaptui_capture::FxHasher>>),
}

/// Fewest stack ids past which a [`StackMap`] is a hash map.
const SPARSE_IDS: u32 = 1 << 24;

impl StackMap {
    fn new(max_id: u32) -> StackMap {
        if max_id < SPARSE_IDS {
            StackMap::Dense(vec![NO_SITE; max_id as usize + 1])
        } else {
            StackMap::Sparse(HashMap::default())
        }
    }

    fn get(&self, id: u32) -> SiteIndex {
        match self {
            StackMap::Dense(v) => v.get(id as usize).copied().unwrap_or(NO_SITE),
            StackMap::Sparse(m) => m.get(&id).copied().unwrap_or(NO_SITE),
        }
    }

    /// Sets `id`'s site; a dense table grows to hold it, or becomes a hash map when `id` is
    /// too large for one.
    fn set(&mut self, id: u32, site: SiteIndex) {
        match self {
            StackMap::Dense(v) if (id as usize) < v.len() => v[id as usize] = site,
            StackMap::Dense(v) if id < SPARSE_IDS => {
                let len = (id as usize + 1).max(2 * v.len());
                v.resize(len, NO_SITE);
                v[id as usize] = site;
            }
            StackMap::Dense(v) => {
                let mut m: HashMap<_, _, _> = HashMap::default();
                for (k, &s) in v.iter().enumerate() {
                    if s != NO_SITE {
                        m.insert(k as u32, s);
                    }
                }
                m.insert(id, site);
                *self = StackMap::Sparse(m);
            }
            StackMap::Sparse(m) => {
                m.insert(id, site);
            }
        }
    }
}

/// What the child asks the parent to name, before its block scan: the allocation stacks of
/// its blocks (each once, in order of first appearance over the blocks by address: the order
/// of the graph's sites) and each thread's frames (sort and pc). The phases of its scan
/// follow once it is done ([`Phases::encode_scan`]).
#[derive(Debug, Default, PartialEq)]
struct Unnamed {
    stacks: Vec<u32>,
    frames: Vec<Vec<(FrameSort, u64)>>,
    /// Objects and their bytes.
    summary: [u64; 2],
    /// Per thread: whether it was stopped.
    stopped: Vec<bool>,
    /// The first thread not stopped, and why.
    not_stopped: Option<(u32, String)>,
}

impl Unnamed {
    fn of(blocks: &[BlockInfo], raw: &[RawThread]) -> Unnamed {
        // One pass over the blocks (146 MB at 4.6M; it runs before the block scan, inside the
        // capture): their stacks, each once, through a table grown as the ids appear, and
        // their bytes.
        let mut seen = StackMap::new(0);
        let mut stacks = Vec::new();
        let mut bytes = 0;
        for b in blocks {
            bytes += b.size;
            if b.stack != 0 && seen.get(b.stack) == NO_SITE {
                seen.set(b.stack, stacks.len() as SiteIndex);
                stacks.push(b.stack);
            }
        }
        Unnamed {
            stacks,
            frames: raw
                .iter()
                .map(|t| t.frames.iter().map(|(sort, pc, _)| (*sort, *pc)).collect())
                .collect(),
            summary: [blocks.len() as u64, bytes],
            stopped: raw
                .iter()
                .map(|t| t.state == ThreadState::Stopped)
                .collect(),
            not_stopped: raw.iter().find_map(|t| match &t.state {
                ThreadState::Stopped => None,
                ThreadState::NotStoppable(why) => Some((t.tid, why.clone())),
            }),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut m = Message::default();
        m.u64(self.stacks.len() as u64);
        self.stacks.iter().for_each(|&k| m.u64(u64::from(k)));
        m.u64(self.frames.len() as u64);
        for t in &self.frames {
            m.u64(t.len() as u64);
            for &(sort, pc) in t {
                m.u64(frame_sort_code(sort));
                m.u64(pc);
            }
        }
        self.summary.iter().for_each(|&v| m.u64(v));
        m.u64(self.stopped.len() as u64);
        self.stopped.iter().for_each(|&v| m.u64(u64::from(v)));
        // A tid is never 0: 0 says "every thread was stopped".
        let (tid, why) = self.not_stopped.as_ref().map_or((0, ""), |(t, w)| (*t, w));
        m.u64(u64::from(tid));
        m.text(why);
        m.0
    }

    fn decode(bytes: &[u8]) -> Option<Unnamed> {
        let mut r = Reading { bytes, at: 0 };
        let n = r.count(8)?;
        let stacks = (0..n)
            .map(|_| r.u64().map(|k| k as u32))
            .collect::<Option<_>>()?;
        let threads = r.count(8)?;
        let mut frames = Vec::with_capacity(threads);
        for _ in 0..threads {
            let n = r.count(16)?;
            let mut t = Vec::with_capacity(n);
            for _ in 0..n {
                let sort = match r.u64()? {
                    0 => FrameSort::Call,
                    1 => FrameSort::Signal,
                    _ => FrameSort::Thread,
                };
                t.push((sort, r.u64()?));
            }
            frames.push(t);
        }
        let summary = [r.u64()?, r.u64()?];
        let n = r.count(8)?;
        let stopped = (0..n)
            .map(|_| r.u64().map(|v| v == 1))
            .collect::<Option<_>>()?;
        let tid = r.u64()? as u32;
        let why = r.text()?;
        r.done().then_some(Unnamed {
            stacks,
            frames,
            summary,
            stopped,
            not_stopped: (tid != 0).then_some((tid, why)),
        })
    }
}

/// The parent's answer to [`Unnamed`]: one site per stack asked for, same order, and each
/// thread's frames named.
#[derive(Debug, Default, PartialEq)]
struct Names {
    sites: Vec<Site>,
    /// Per thread, per frame: function, module, kind.
    frames: Vec<Vec<(String, String, FrameKind)>>,
}

impl Names {
    fn encode(&self) -> Vec<u8> {
        let mut m = Message::default();
        m.u64(self.sites.len() as u64);
        for s in &self.sites {
            m.u64(s.id);
            m.u64(s.frames.len() as u64);
            s.frames.iter().for_each(|f| m.text(f));
        }
        m.u64(self.frames.len() as u64);
        for t in &self.frames {
            m.u64(t.len() as u64);
            for (function, module, kind) in t {
                m.text(function);
                m.text(module);
                m.u64(u64::from(*kind == FrameKind::System));
            }
        }
        m.0
    }

    fn decode(bytes: &[u8]) -> Option<Names> {
        let mut r = Reading { bytes, at: 0 };
        let n = r.count(16)?;
        let mut sites = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.u64()?;
            let k = r.count(8)?;
            let frames = (0..k).map(|_| r.text()).collect::<Option<_>>()?;
            sites.push(Site { id, frames });
        }
        let threads = r.count(8)?;
        let mut frames = Vec::with_capacity(threads);
        for _ in 0..threads {
            let k = r.count(24)?;
            let mut t = Vec::with_capacity(k);
            for _ in 0..k {
                let function = r.text()?;
                let module = r.text()?;
                let kind = if r.u64()? == 1 {
                    FrameKind::System
                } else {
                    FrameKind::User
                };
                t.push((function, module, kind));
            }
            frames.push(t);
        }
        r.done().then_some(Names { sites, frames })
    }
}

/// Names what the child asks for (in the parent: the symbol tables are cached here for the
/// life of the agent, and the loader may be called).
fn name<H: Heap>(heap: &H, space: &AddressSpace, unnamed: &Unnamed) -> Names {
    let mut symbols = Symbolizer::new(space);
    let sites = unnamed
        .stacks
        .iter()
        .map(|&stack| {
            let mut frames: Vec<String> = Vec::new();
            for &pc in &heap.stack(stack) {
                // Inlined calls are frames of their own: a site names its caller with the
                // caller's own line.
                for s in symbols.symbolize_inlined(pc, false) {
                    if !s.agent {
                        frames.push(match &s.location {
                            Some(at) => format!("{} ({at})", s.function),
                            None => s.function.clone(),
                        });
                    }
                }
            }
            Site {
                id: u64::from(stack),
                frames,
            }
        })
        .collect();
    let frames = unnamed
        .frames
        .iter()
        .map(|t| {
            t.iter()
                .enumerate()
                .map(|(i, &(sort, pc))| match sort {
                    FrameSort::Call => {
                        let s = symbols.symbolize(pc, i == 0);
                        (s.function, s.module, s.kind)
                    }
                    FrameSort::Signal => (
                        "<signal handler called>".into(),
                        "[kernel]".into(),
                        FrameKind::System,
                    ),
                    FrameSort::Thread => ("<thread>".into(), String::new(), FrameKind::System),
                })
                .collect()
        })
        .collect();
    Names { sites, frames }
}

/// The graph of what the scan found, named, analysed and kept in the process itself, when no
/// child could be made (the child's own path is [`analyse_in_child`]).
fn analyse(
    process: Process,
    scanned: Scanned,
    stacks: &[u32],
    names: Names,
    threads: &[ThreadInfo],
) -> Result<Kept, CaptureError> {
    let graph = build_graph(process, scanned, stacks, names, threads, &OneThread)?;
    Ok(Kept::analysed(&graph, &OneThread).0)
}

/// The scan child's two threads for the analysis: the second is a bare clone (`alongside`),
/// which the engine's second closures allow (they touch no thread-local storage and panic
/// only when memory cannot be had: heaptui_analysis's `both`; the child then aborts and is
/// reported as failed, as a panic on its one thread would be). It also times the passes
/// where they end ([`Both::pass_done`]): the parent logs them.
struct ChildThreads {
    /// Where the last pass ended (or the first began): wall clock, the child's CPU (both
    /// threads), the first thread's.
    last: std::cell::Cell<(Instant, Duration, Duration)>,
    passes: std::cell::RefCell<Vec<Pass>>,
    /// The child may run on one CPU only (its affinity): `both` runs its closures in turn.
    one_thread: bool,
}

/// One pass of the child's analysis, timed on its first thread: its name, wall time, the
/// CPU time of all the child's threads (the process's) and of the first thread, from the end
/// of the previous pass. Or a job beside the passes, timed on its own thread: its wall and
/// CPU time, and no first-thread CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pass {
    name: String,
    wall: Duration,
    cpu: Duration,
    /// None for a job beside the passes (`beside_done`).
    first_cpu: Option<Duration>,
}

/// [`Pass::first_cpu`]'s None in the passes' message.
const NO_FIRST_CPU: u64 = u64::MAX;

impl ChildThreads {
    /// # Safety
    /// Only in the scan child (see `alongside`).
    unsafe fn new() -> ChildThreads {
        // A second thread only costs where the child may run on one CPU.
        // SAFETY: a zeroed cpu_set_t is valid output space for our own affinity.
        let one_thread = unsafe {
            let mut cpus: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut cpus) == 0
                && libc::CPU_COUNT(&cpus) < 2
        };
        ChildThreads {
            last: std::cell::Cell::new((Instant::now(), process_cpu(), thread_cpu())),
            passes: std::cell::RefCell::new(Vec::with_capacity(16)),
            one_thread,
        }
    }

    /// Records work done beside the passes, on a thread of its own, as that thread timed it
    /// (its wall and CPU time; not from the end of the previous pass).
    fn beside_done(&self, name: &str, wall: Duration, cpu: Duration) {
        self.passes.borrow_mut().push(Pass {
            name: name.to_string(),
            wall,
            cpu,
            first_cpu: None,
        });
    }

    /// The passes timed so far, as a message for the parent.
    fn encode_passes(&self) -> Vec<u8> {
        let passes = self.passes.borrow();
        let mut m = Message::default();
        m.u64(passes.len() as u64);
        for p in passes.iter() {
            m.text(&p.name);
            m.u64(p.wall.as_micros() as u64);
            m.u64(p.cpu.as_micros() as u64);
            m.u64(p.first_cpu.map_or(NO_FIRST_CPU, |c| c.as_micros() as u64));
        }
        m.0
    }
}

/// Reads [`ChildThreads::encode_passes`]'s message.
fn decode_passes(bytes: &[u8]) -> Option<Vec<Pass>> {
    let mut r = Reading { bytes, at: 0 };
    let n = r.count(8 * 4)?;
    let mut passes = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.text()?;
        let wall = Duration::from_micros(r.u64()?);
        let cpu = Duration::from_micros(r.u64()?);
        let first_cpu = Some(r.u64()?)
            .filter(|&us| us != NO_FIRST_CPU)
            .map(Duration::from_micros);
        passes.push(Pass {
            name,
            wall,
            cpu,
            first_cpu,
        });
    }
    r.done().then_some(passes)
}

impl Both for ChildThreads {
    fn both<A, B: Send>(
        &self,
        first: impl FnOnce() -> A,
        second: impl FnOnce() -> B + Send,
    ) -> (A, B) {
        if self.one_thread {
            return OneThread.both(first, second);
        }
        // SAFETY: made only in the scan child (`ChildThreads::new`); the engine's `second`
        // closures touch no thread-local storage and do not panic but when memory fails.
        unsafe { alongside(first, second) }
    }

    fn two_threads(&self) -> bool {
        !self.one_thread
    }

    fn pass_done(&self, pass: &'static str) {
        let now = (Instant::now(), process_cpu(), thread_cpu());
        let last = self.last.replace(now);
        self.passes.borrow_mut().push(Pass {
            name: pass.to_string(),
            wall: now.0 - last.0,
            cpu: now.1.saturating_sub(last.1),
            first_cpu: Some(now.2.saturating_sub(last.2)),
        });
    }
}

/// The graph of what the scan found, named; its object columns made in two halves by `both`.
fn build_graph(
    process: Process,
    scanned: Scanned,
    stacks: &[u32],
    names: Names,
    threads: &[ThreadInfo],
    both: &impl Both,
) -> Result<HeapGraph, CaptureError> {
    let Scanned {
        blocks,
        raw,
        globals: (globals, globals_interior),
        edges,
        ..
    } = scanned;
    if names.sites.len() != stacks.len() || names.frames.len() != raw.len() {
        return Err(CaptureError::Child);
    }
    let mut site_of = StackMap::new(stacks.iter().copied().max().unwrap_or(0));
    for (i, &k) in stacks.iter().enumerate() {
        site_of.set(k, i as SiteIndex);
    }
    // The columns in two halves at once, each one pass over the blocks (146 MB at 4.6M
    // blocks: reading them is most of the cost) into fresh pages: three columns of 8 bytes
    // here, two of 4 and one of 8 there. The agent's blocks are known by their sequence
    // numbers (`id`, a second copy of `seq`).
    let n = blocks.len();
    let ((addr, size, seq), (site, thread, id)) = both.both(
        || {
            let (mut addr, mut size, mut seq) = (
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
            );
            for b in &blocks {
                addr.push(b.addr);
                size.push(b.size);
                seq.push(b.seq);
            }
            (addr, size, seq)
        },
        || {
            let (mut site, mut thread, mut id) = (
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
            );
            for b in &blocks {
                site.push(site_of.get(b.stack));
                thread.push(b.tid);
                id.push(b.seq);
            }
            (site, thread, id)
        },
    );
    both.pass_done("graph columns");
    let objects = Objects {
        id,
        addr,
        size,
        site,
        thread,
        seq,
    };
    drop(blocks);
    drop(site_of);
    let mut graph_threads = Vec::with_capacity(raw.len());
    for (t, named) in raw.into_iter().zip(names.frames) {
        if named.len() != t.frames.len() {
            return Err(CaptureError::Child);
        }
        graph_threads.push(Thread {
            tid: t.tid,
            name: threads
                .iter()
                .find(|i| i.tid == t.tid)
                .map_or_else(String::new, |i| i.name.clone()),
            state: t.state,
            frames: t
                .frames
                .into_iter()
                .zip(named)
                .map(
                    |((_, _, (refs, interior)), (function, module, kind))| Frame {
                        function,
                        module,
                        kind,
                        refs,
                        interior,
                    },
                )
                .collect(),
        });
    }
    let graph = HeapGraph::new(process, names.sites, objects, edges, graph_threads, globals)?
        .with_globals_interior(globals_interior)?;
    both.pass_done("graph");
    Ok(graph)
}

/// In the child, after the scan (the names were asked for before the block scan): sends
/// the scan's phases, reads the names, then builds, analyses and keeps the graph and sends
/// the kept snapshot's bytes. False on any failure (the parent then reports the child as
/// failed).
fn analyse_in_child(
    fd: i32,
    process: Process,
    mut scanned: Scanned,
    threads: &[ThreadInfo],
    to_file: bool,
) -> bool {
    if !send_message(fd, &scanned.phases.encode_scan()) {
        return false;
    }
    let Some(names) = read_message(fd).and_then(|b| Names::decode(&b)) else {
        return false;
    };
    let stacks = std::mem::take(&mut scanned.unnamed.stacks);
    let mut out = std::io::BufWriter::with_capacity(1 << 20, Socket(fd));
    if to_file {
        // A dump: the graph as a snapshot file, not analysed.
        // SAFETY: in the scan child.
        let both = unsafe { ChildThreads::new() };
        let Ok(graph) = build_graph(process, scanned, &stacks, names, threads, &both) else {
            return false;
        };
        let sent = heaptui_analysis::snapshot::write_binary(&graph, &mut out).is_ok()
            && std::io::Write::flush(&mut out).is_ok();
        std::mem::forget(graph);
        return sent;
    }
    // SAFETY: in the scan child.
    let both = unsafe { ChildThreads::new() };
    let Ok(graph) = build_graph(process, scanned, &stacks, names, threads, &both) else {
        return false;
    };
    // The graph's own kept columns (about half the kept snapshot's bytes) are sent on a third
    // thread (when the child has two CPUs) as soon as they are packed (beside the depth-first search), while the analysis
    // goes on, so that the parent decodes them meanwhile, on the core the analysis's
    // one-thread passes leave idle; the analysis's part follows once it is done.
    let (kept, analysis, (sent_ahead, ahead_wall, ahead_cpu)) =
        Kept::analysed_during(&graph, &both, |columns| send_graph_columns(fd, columns));
    // On one CPU there is no third thread: the columns went after the analysis, on the first
    // thread, within its `joined` pass.
    if both.two_threads() {
        both.beside_done("graph columns sent beside", ahead_wall, ahead_cpu);
    }
    if !sent_ahead {
        return false;
    }
    let sent = kept.encode_rest(&mut out).is_ok() && std::io::Write::flush(&mut out).is_ok();
    // Left to the child's exit: freeing millions of allocations one by one would only cost
    // time.
    std::mem::forget((kept, analysis, graph));
    both.pass_done("sent");
    // The passes' timings are for the log only: the capture does not fail without them.
    let _ = send_message(fd, &both.encode_passes());
    sent
}

/// On the scanning child's third thread, beside the analysis after its depth-first search
/// (`Kept::analysed_during`): sends the graph's own kept columns, the first part of the kept
/// snapshot's split encoding ([`GraphColumns::encode`]). Returns whether they were sent, and
/// the thread's wall and CPU time. Runs on a bare thread (`alongside`): it touches no
/// thread-local storage (a [`Socket`] makes raw system calls) and panics only when memory cannot
/// be had.
fn send_graph_columns(fd: i32, columns: &GraphColumns) -> (bool, Duration, Duration) {
    let (wall, cpu) = (Instant::now(), thread_cpu());
    let mut out = std::io::BufWriter::with_capacity(64 << 10, Socket(fd));
    let sent = columns.encode(&mut out).is_ok() && std::io::Write::flush(&mut out).is_ok();
    drop(out);
    (sent, wall.elapsed(), thread_cpu().saturating_sub(cpu))
}

/// In the parent: names what the child asks for (while the child scans the blocks), then
/// receives what it makes: the phases of its scan, then the kept snapshot, or the snapshot
/// file's bytes copied to `sink`'s writer. Returns the kept snapshot (for [`Sink::Kept`]),
/// what the child asked (the capture's summary), its phases with the time naming took, and
/// when the child had both its scan done and the names.
fn receive_from_child<H: Heap>(
    heap: &H,
    space: &AddressSpace,
    fd: i32,
    sink: &mut Sink<'_>,
) -> Result<(Option<Kept>, Unnamed, Phases, Instant), CaptureError> {
    let unnamed = read_message(fd)
        .and_then(|b| Unnamed::decode(&b))
        .ok_or(CaptureError::Child)?;
    let naming = Instant::now();
    let names = name(heap, space, &unnamed);
    let naming = naming.elapsed();
    // Sent whole only once the child reads it, after its scan, when the names are longer
    // than the socket's buffer; its phases (a few bytes) meanwhile wait in the other
    // direction.
    if !send_message(fd, &names.encode()) {
        return Err(CaptureError::Child);
    }
    drop(names);
    let mut phases = read_message(fd)
        .and_then(|b| Phases::decode_scan(&b))
        .ok_or(CaptureError::Child)?;
    phases.naming = naming;
    let named = Instant::now();
    let mut input = std::io::BufReader::with_capacity(1 << 20, Socket(fd));
    let kept = match sink {
        Sink::File(out) => {
            std::io::copy(&mut input, out).map_err(CaptureError::Write)?;
            None
        }
        Sink::Kept => Some(Kept::decode_split(&mut input).map_err(|e| match e {
            heaptui_analysis::kept::DecodeError::Memory { bytes } => {
                CaptureError::NoMemory(format!(
                    "not enough memory for a snapshot: {} MiB for the kept snapshot could not \
                     be had",
                    bytes.div_ceil(1 << 20)
                ))
            }
            _ => CaptureError::Child,
        })?),
    };
    if kept.is_some() {
        log_passes(&mut input);
    }
    Ok((kept, unnamed, phases, named))
}

/// Logs the child's passes, the message it sends after the kept snapshot's bytes.
fn log_passes(input: &mut impl std::io::Read) {
    let mut len = [0u8; 8];
    let mut bytes = vec![0u8; 0];
    let passes = input
        .read_exact(&mut len)
        .ok()
        .filter(|_| u64::from_le_bytes(len) < 1 << 16)
        .and_then(|_| {
            bytes.resize(u64::from_le_bytes(len) as usize, 0);
            input.read_exact(&mut bytes).ok()
        })
        .and_then(|_| decode_passes(&bytes));
    let Some(passes) = passes else { return };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let line: Vec<String> = passes
        .iter()
        .map(|p| {
            let name = p.name.replace(' ', "_");
            match p.first_cpu {
                Some(first) => {
                    format!("{name}={:.0}/{:.0}/{:.0}", ms(p.wall), ms(p.cpu), ms(first))
                }
                None => format!("{name}={:.0}/{:.0}", ms(p.wall), ms(p.cpu)),
            }
        })
        .collect();
    crate::agent_info!(
        "the scanning child's analysis by pass (wall/CPU of all threads/CPU of the first, ms; \
         a job beside: wall/CPU of its own thread): {}",
        line.join(" ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_passes_message_keeps_a_beside_job_without_a_first_thread_cpu() {
        let threads = ChildThreads {
            last: std::cell::Cell::new((Instant::now(), process_cpu(), thread_cpu())),
            passes: std::cell::RefCell::new(Vec::new()),
            one_thread: false,
        };
        threads.pass_done("graph");
        threads.beside_done("sent beside", Duration::from_millis(7), Duration::ZERO);
        let passes = decode_passes(&threads.encode_passes()).expect("decodes");
        let names: Vec<&str> = passes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["graph", "sent beside"]);
        assert!(passes[0].first_cpu.is_some());
        assert_eq!(passes[1].first_cpu, None);
        assert_eq!(passes[1].wall, Duration::from_millis(7));
    }

    /// Where the program's `SIGABRT` handler of the test below writes.
    static PROGRAM_HANDLER_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

    extern "C" fn programs_abort_handler(_: libc::c_int) {
        let fd = PROGRAM_HANDLER_FD.load(std::sync::atomic::Ordering::Relaxed);
        // SAFETY: writes a static string to a descriptor of this process.
        unsafe { libc::write(fd, c"handler ran".as_ptr().cast(), 11) };
    }

    /// A scan child that aborts (as Rust's allocation-error handler does) writes nothing on
    /// the program's standard error, runs none of its signal handlers and dumps no core.
    #[test]
    fn a_detached_child_that_aborts_leaves_no_trace_on_the_program() {
        let mut pipe = [0i32; 2];
        // SAFETY: pipe writes two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child only makes raw system calls and ends by abort or _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the program's setup in the child: its stderr is the pipe, its SIGABRT
            // handler writes to the pipe; then the detach, a write on fd 2 and an abort.
            unsafe {
                libc::dup2(pipe[1], 2);
                PROGRAM_HANDLER_FD.store(pipe[1], std::sync::atomic::Ordering::Relaxed);
                libc::signal(
                    libc::SIGABRT,
                    programs_abort_handler as *const () as libc::sighandler_t,
                );
                detach_from_program(parent);
                libc::write(2, c"memory allocation failed".as_ptr().cast(), 24);
                let mut core = libc::rlimit {
                    rlim_cur: 1,
                    rlim_max: 1,
                };
                if libc::getrlimit(libc::RLIMIT_CORE, &mut core) != 0 || core.rlim_cur != 0 {
                    libc::_exit(3);
                }
                libc::abort();
            }
        }
        // SAFETY: our own descriptor.
        unsafe { libc::close(pipe[1]) };
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            // SAFETY: reads into a live buffer.
            let n = unsafe { libc::read(pipe[0], buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n as usize]);
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        // SAFETY: our own descriptor.
        unsafe { libc::close(pipe[0]) };
        assert_eq!(String::from_utf8_lossy(&seen), "");
        assert!(
            libc::WIFSIGNALED(status)
                && libc::WTERMSIG(status) == libc::SIGABRT
                && !libc::WCOREDUMP(status),
            "status {status:#x}"
        );
    }

    /// A detached child is undumpable (no core, even through a `core_pattern` pipe), the OOM
    /// killer's first choice, and, run as a user that is not root, still reads its own
    /// pagemap, which it can then no longer open.
    #[test]
    fn a_detached_child_is_undumpable_and_still_reads_its_pagemap() {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child only makes raw system calls and ends by _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let local = 0u64;
            // SAFETY: credential changes and reads of this child only; it ends by _exit.
            unsafe {
                // Not root (root opens any /proc file): nobody, dumpable again after the
                // change of credentials (which clears it).
                if libc::geteuid() == 0
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setresgid(65534, 65534, 65534) != 0
                        || libc::setresuid(65534, 65534, 65534) != 0)
                {
                    libc::_exit(2);
                }
                libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong);
                detach_from_program(parent);
                if libc::prctl(libc::PR_GET_DUMPABLE) != 0 {
                    libc::_exit(3);
                }
                let mut adj = [0u8; 8];
                let oom = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_RDONLY);
                if oom < 0 || libc::read(oom, adj.as_mut_ptr().cast(), adj.len()) != 5 {
                    libc::_exit(6);
                }
                if &adj[..5] != b"1000\n" {
                    libc::_exit(6);
                }
                let fd = libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY);
                if fd >= 0 {
                    libc::_exit(4);
                }
                let page = &local as *const u64 as u64 / 4096;
                let mut entry = [0u64; 1];
                let read = mapped::Pagemap::open().is_some_and(|m| m.read(page, &mut entry));
                // Bit 63: present (the child's stack page is).
                libc::_exit(if read && entry[0] >> 63 == 1 { 0 } else { 5 });
            }
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x} (2: no user change, 3: still dumpable, 4: pagemap still \
             opens, 5: the pagemap opened early does not read, 6: oom_score_adj not 1000)"
        );
    }

    /// Blocks given by hand: real memory owned by the test. Listed in descending address
    /// order on purpose: the capture must sort blocks a table lists out of order (the
    /// agent's own comes sorted) before it indexes them.
    struct Fixed(Vec<BlockInfo>);

    impl Heap for Fixed {
        type Frozen = ();
        fn freeze(&self) {}
        fn blocks(&self, _: &(), out: &mut Vec<BlockInfo>) {
            let from = out.len();
            out.extend_from_slice(&self.0);
            out[from..].sort_unstable_by_key(|b| std::cmp::Reverse(b.addr));
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

    /// A heap that grows between the capture's first look at the memory map and the stop (as
    /// an arena grows by `mprotect` under a thread allocating right then): its freeze maps
    /// fresh memory holding two blocks, the first pointing at the second.
    struct GrowsBeforeTheStop;

    const GROWN: usize = 2 * 4096;

    impl Heap for GrowsBeforeTheStop {
        type Frozen = u64;
        fn freeze(&self) -> u64 {
            // SAFETY: a fresh anonymous private mapping; the test unmaps it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    GROWN,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            let base = p as u64;
            // SAFETY: inside the mapping just made.
            unsafe { *((base + 16) as *mut u64) = base + 4096 + 16 };
            base
        }
        fn blocks(&self, &base: &u64, out: &mut Vec<BlockInfo>) {
            for (seq, addr) in [(1, base + 16), (2, base + 4096 + 16)] {
                out.push(BlockInfo {
                    addr,
                    size: 64,
                    seq,
                    tid: 0,
                    stack: 0,
                });
            }
        }
        fn len_hint(&self, _: &u64) -> usize {
            2
        }
        fn stack(&self, _: u32) -> Vec<u64> {
            Vec::new()
        }
        fn glibc_blocks(&self) -> bool {
            false
        }
    }

    #[test]
    fn blocks_in_memory_mapped_after_the_first_look_at_the_map_are_scanned() {
        stop::install().unwrap();
        let cap = capture(&GrowsBeforeTheStop, &[], Timeouts::default()).unwrap();
        let k = &cap.kept;
        let first = (0..k.object_count() as ObjectIndex)
            .find(|&o| k.seq(o) == 1)
            .expect("the first block");
        let second = (0..k.object_count() as ObjectIndex)
            .find(|&o| k.seq(o) == 2)
            .expect("the second block");
        assert_eq!(
            k.edges_of(first).collect::<Vec<_>>(),
            vec![second],
            "the first block's pointer to the second is an edge"
        );
        // SAFETY: the mapping `freeze` made, no longer used.
        unsafe { libc::munmap((k.addr(first) - 16) as *mut libc::c_void, GROWN) };
    }

    #[test]
    fn the_messages_between_child_and_parent_survive_their_encoding() {
        let unnamed = Unnamed {
            stacks: vec![3, 1, 7],
            frames: vec![
                vec![(FrameSort::Call, 0x4000), (FrameSort::Thread, 0)],
                vec![],
                vec![(FrameSort::Signal, 0x5000)],
            ],
            summary: [3, 96],
            stopped: vec![true, false, true],
            not_stopped: Some((42, "stop signal blocked".into())),
        };
        let bytes = unnamed.encode();
        assert_eq!(Unnamed::decode(&bytes), Some(unnamed));
        let ms = Duration::from_millis;
        let scan = Phases {
            index: ms(5),
            roots: ms(6),
            blocks: ms(7),
            mapped: ms(3),
            mapped_bytes: 4096,
            scan_cpu: ms(9),
            ..Phases::default()
        };
        let phases = scan.encode_scan();
        let back = Phases::decode_scan(&phases).expect("the scan's phases decode");
        assert_eq!(
            (back.index, back.roots, back.blocks, back.mapped),
            (scan.index, scan.roots, scan.blocks, scan.mapped)
        );
        assert_eq!(
            (back.mapped_bytes, back.scan_cpu),
            (scan.mapped_bytes, scan.scan_cpu)
        );
        assert!(Phases::decode_scan(&phases[..phases.len() - 1]).is_none());
        let names = Names {
            sites: vec![
                Site {
                    id: 3,
                    frames: vec!["malloc".into(), "make (a.c:3)".into()],
                },
                Site {
                    id: 1,
                    frames: vec![],
                },
            ],
            frames: vec![vec![
                ("main".into(), "/bin/x".into(), FrameKind::User),
                ("<thread>".into(), String::new(), FrameKind::System),
            ]],
        };
        let named = names.encode();
        assert_eq!(Names::decode(&named), Some(names));
        // A truncated or over-long message is refused, never half-read.
        for bytes in [&bytes, &named] {
            assert!(Unnamed::decode(&bytes[..bytes.len() - 1]).is_none());
            assert!(Names::decode(&bytes[..bytes.len() - 1]).is_none());
        }
        let mut longer = named.clone();
        longer.push(0);
        assert!(Names::decode(&longer).is_none());
    }

    #[test]
    fn stack_ids_map_to_sites_densely_or_sparsely() {
        for max in [7u32, 1 << 30] {
            let mut m = StackMap::new(max);
            assert_eq!(m.get(3), NO_SITE);
            m.set(3, 0);
            m.set(max, 1);
            assert_eq!((m.get(3), m.get(max), m.get(5)), (0, 1, NO_SITE));
            assert_eq!(
                m.get(u32::MAX),
                NO_SITE,
                "an id beyond the table is no site"
            );
        }
        assert!(matches!(StackMap::new(7), StackMap::Dense(_)));
        assert!(matches!(StackMap::new(1 << 30), StackMap::Sparse(_)));
        // Grown as ids appear: dense while they are small, a hash map past that, every site
        // set before kept.
        let mut m = StackMap::new(0);
        m.set(5, 0);
        m.set(1000, 1);
        assert!(matches!(m, StackMap::Dense(_)));
        m.set(1 << 30, 2);
        assert!(matches!(m, StackMap::Sparse(_)));
        assert_eq!(
            (m.get(5), m.get(1000), m.get(1 << 30), m.get(6)),
            (0, 1, 2, NO_SITE)
        );
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
        let k = &cap.kept;
        assert_eq!(k.threads().len(), 2);
        assert!(k.threads().iter().all(|t| t.state == ThreadState::Stopped));
        for t in k.threads() {
            assert_eq!(t.frames.last().unwrap().function, "<thread>");
            assert!(
                t.frames.iter().any(|f| f.function.ends_with("hold")),
                "{:?}",
                t.frames.iter().map(|f| &f.function).collect::<Vec<_>>()
            );
        }
        for (i, t) in k.threads().iter().enumerate() {
            // Named in the child from the list it was given.
            assert_eq!(t.name, format!("t{}", t.tid));
            let f = &k.figures()[i];
            assert_eq!(f.proprietary, 512, "thread {}", t.tid);
            assert_eq!(f.shared, 256, "thread {}", t.tid);
            assert_eq!(f.total, 768);
        }
        drop(shared);
    }
}
