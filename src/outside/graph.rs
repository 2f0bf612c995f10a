//! The heap graph of an outside capture, built from the copy of the stopped process.
//!
//! Owns turning the walked blocks, the threads' registers and the copied memory into a
//! [`HeapGraph`] the same shape as the agent's, so every consumer (report, TUI, snapshot
//! files) works unchanged:
//! - objects: the live blocks, identified by their address (stable from one capture to the
//!   next), with their usable size; no allocating thread, no sequence number, and one site
//!   that says why: [`UNKNOWN_SITE`];
//! - threads: each unwound frame by frame from its registers by the agent's unwinder, over
//!   the copy and the modules' files ([`frames`](super::frames)), each frame named as the agent
//!   names it and holding what the agent's frame holds: its stack words, the registers it owns
//!   (only a system call's arguments for a thread stopped in one:
//!   `heaptui_capture::registers`, the agent's rule) and the callee-saved values spilled for
//!   it; the last frame is `<thread>`, with the stack above the outermost frame, the static
//!   TLS and the thread descriptor;
//! - globals: every other readable, writable mapping (modules' data, mapped memory), less
//!   the heap's own memory, glibc's malloc state and the stack part of glibc's cached stacks
//!   of finished threads (`heaptui_capture::stacks`);
//! - edges: every aligned word of a block that points into a live block.
//!
//! Reads only the copy; never the live process.

use std::ops::Range;

use heaptui_analysis::{
    Edges, Frame, FrameKind, HeapGraph, NO_SEQ, NO_THREAD, ObjectIndex, ObjectRecord, Objects,
    Process, Site, Thread, ThreadState,
};
use heaptui_capture::BlockIndex;
use heaptui_capture::registers;
use heaptui_capture::stacks;
use heaptui_capture::unwind::{FrameSort, Registers, THREAD_DESCRIPTOR};

use super::agent::{self, Agent};
use super::arenas::{self, Block};
use super::frames::{ModuleFiles, OutsideSpace};
use super::glibc::Glibc;
use super::memory::Image;
use super::ptrace::{self, Stop};
use super::{CaptureError, Stopped};

/// The allocation site of every block of an outside capture: only hooks see allocations.
pub const UNKNOWN_SITE: &str = "unknown: started without the agent";

/// How many blocks the graph's block scan reads between two gives-back of the copy above.
const RELEASE_EVERY: usize = 4096;

/// The words of `ranges` in the copy, but for the stack slots at `skip` (sorted): callee-saved
/// values a callee spilled, which are roots of the frame they belong to instead.
fn words_but<'a>(
    image: &'a Image,
    ranges: &'a [Range<u64>],
    skip: &'a [u64],
) -> impl Iterator<Item = u64> + 'a {
    ranges.iter().flat_map(move |r| {
        let start = r.start.next_multiple_of(8);
        let end = (r.end & !7).max(start);
        image.pieces(start..end).flat_map(move |(at, bytes)| {
            bytes.chunks_exact(8).enumerate().filter_map(move |(k, w)| {
                let addr = at + 8 * k as u64;
                skip.binary_search(&addr)
                    .is_err()
                    .then(|| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            })
        })
    })
}

/// The references of one holder: sorted, without duplicates.
fn refs_of(index: &BlockIndex, words: impl Iterator<Item = u64>) -> Vec<(ObjectIndex, bool)> {
    let mut cache = (u64::MAX, 0);
    // (target, interior): a start word sorts before the interior ones and wins the dedup.
    let mut out: Vec<(ObjectIndex, bool)> = words
        .filter_map(|w| {
            let o = index.lookup_cached(w, &mut cache)?;
            Some((o, w != index.range(o).start))
        })
        .collect();
    out.sort_unstable();
    out.dedup_by_key(|r| r.0);
    out
}

/// A root's references as the graph keeps them: the targets, and those only interior words
/// point into.
fn root_refs(refs: Vec<(ObjectIndex, bool)>) -> (Vec<ObjectIndex>, Vec<ObjectIndex>) {
    let interior = refs.iter().filter(|r| r.1).map(|r| r.0).collect();
    (refs.into_iter().map(|r| r.0).collect(), interior)
}

/// The aligned words of the copied parts of `range`.
fn words<'a>(image: &'a Image, range: Range<u64>) -> impl Iterator<Item = u64> + 'a {
    let start = range.start.next_multiple_of(8);
    let end = range.end & !7;
    image.pieces(start..end.max(start)).flat_map(|(at, bytes)| {
        // A piece starts where its segment or the range starts: both 8-aligned here.
        debug_assert!(at.is_multiple_of(8));
        bytes
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
    })
}

/// Subtracts the sorted, disjoint `holes` from `range`.
fn subtract(range: Range<u64>, holes: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = range.start;
    let first = holes.partition_point(|h| h.end <= range.start);
    for h in &holes[first..] {
        if h.start >= range.end {
            break;
        }
        if h.start > at {
            out.push(at..h.start);
        }
        at = at.max(h.end);
    }
    if at < range.end {
        out.push(at..range.end);
    }
    out
}

fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn thread_name(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|n| n.trim_end().to_string())
        .unwrap_or_default()
}

/// A stopped thread's general registers in DWARF order, as the agent's capture has them.
fn dwarf_registers(r: &nix::libc::user_regs_struct) -> registers::Gprs {
    [
        r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15, r.rip,
    ]
}

/// Where a thread was stopped, by the rule the agent's capture follows too: ptrace's record
/// of the system call it is in, and the code around its pc read while it was stopped.
fn where_stopped(t: &ptrace::Thread, r: &nix::libc::user_regs_struct) -> registers::Stopped {
    registers::where_stopped(&dwarf_registers(r), kernel_nr(r), |at, buf| {
        let Some((start, bytes)) = &t.code else {
            return false;
        };
        let Some(offset) = at.checked_sub(*start) else {
            return false;
        };
        let offset = offset as usize;
        match bytes.get(offset..offset + buf.len()) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        }
    })
}

/// The system call ptrace says a stopped thread is in.
fn kernel_nr(r: &nix::libc::user_regs_struct) -> Option<u64> {
    (r.orig_rax as i64 >= 0).then_some(r.orig_rax)
}

/// Builds the graph of a stopped process (module docs).
pub(super) fn build(
    pid: u32,
    glibc: &Glibc,
    agent: Option<&Agent>,
    stopped: &mut Stopped,
    warnings: &mut Vec<String>,
) -> Result<HeapGraph, CaptureError> {
    let image = &stopped.image;
    let fs_bases: Vec<u64> = stopped
        .threads
        .iter()
        .filter_map(|t| t.regs.as_ref().map(|r| r.fs_base))
        .collect();
    let heap = arenas::walk(image, &stopped.maps, glibc, &fs_bases)
        .map_err(|e| CaptureError::Walk(pid, e))?;
    warnings.extend(heap.warnings.iter().cloned());
    let blocks: &[Block] = &heap.blocks;
    let index = BlockIndex::new(blocks.iter().map(|b| (b.addr, b.size)));

    // Memory that is never a root of its own: the heap's chunks, glibc's malloc state, and
    // each live thread's stack and TLS (those are the thread's).
    let mut not_globals: Vec<Range<u64>> = heap.regions.clone();
    not_globals.push(glibc.main_arena..glibc.main_arena + glibc.layout.arena_size);
    not_globals.push(glibc.mp..glibc.mp + glibc.layout.par_size);
    if let Some(agent) = agent {
        not_globals.extend(agent.memory(image));
    }
    let target = nix::unistd::Pid::from_raw(pid as i32);
    let files = ModuleFiles::read(target, &stopped.maps);
    let space = OutsideSpace::new(&files, &stopped.maps, image, glibc.static_tls);
    let names = space.names(target);
    let mut unwinder = space.unwinder();
    let mut threads = Vec::with_capacity(stopped.threads.len());
    for t in &stopped.threads {
        let name = thread_name(pid, t.tid);
        if agent.is_some() && agent::is_agent_thread(&name) {
            // The agent's thread: neither a thread of the program nor part of `globals`.
            if let Some(regs) = &t.regs {
                let tls =
                    regs.fs_base.saturating_sub(glibc.static_tls)..regs.fs_base + THREAD_DESCRIPTOR;
                not_globals.extend(stopped.maps.find(regs.rsp).map(|m| m.start..m.end));
                not_globals.push(tls);
            }
            continue;
        }
        let (state, frames) = match (&t.stop, &t.regs) {
            (Stop::Gone, _) => continue,
            (Stop::Trap | Stop::Signal(_), Some(regs)) => {
                // A thread in a system call holds only its arguments and callee-saved
                // registers, and no red zone (docs/reference.md §3).
                let at = where_stopped(t, regs);
                let stack = stopped
                    .maps
                    .find(regs.rsp)
                    .map_or(0..0, |m| registers::frame_low(regs.rsp, at)..m.end);
                let tls =
                    regs.fs_base.saturating_sub(glibc.static_tls)..regs.fs_base + THREAD_DESCRIPTOR;
                let owned = heaptui_capture::ranges::merge(vec![stack, tls]);
                not_globals.extend(owned.iter().cloned());
                // The dead part of its stack, below the stack pointer, is no root at all (as
                // in the agent's capture): it holds what finished calls left there.
                not_globals.extend(stopped.maps.find(regs.rsp).map(|m| m.start..m.end));
                let unwound = unwinder.unwind_stopped(
                    &Registers {
                        gpr: dwarf_registers(regs),
                        fs_base: regs.fs_base,
                    },
                    kernel_nr(regs),
                );
                let frames = unwound
                    .frames
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let words = words_but(image, &f.ranges, &unwound.skip)
                            .chain(f.values.iter().copied());
                        let (refs, interior) = root_refs(refs_of(&index, words));
                        let (function, module, kind) = match f.sort {
                            FrameSort::Call => space.name(&names, f.pc, i == 0),
                            FrameSort::Signal => (
                                "<signal handler called>".into(),
                                "[kernel]".into(),
                                FrameKind::System,
                            ),
                            FrameSort::Thread => {
                                ("<thread>".into(), String::new(), FrameKind::System)
                            }
                        };
                        Frame {
                            function,
                            module,
                            kind,
                            refs,
                            interior,
                        }
                    })
                    .collect();
                (ThreadState::Stopped, frames)
            }
            (Stop::NotStopped(_), _) | (Stop::Trap | Stop::Signal(_), None) => {
                let why = match &t.stop {
                    Stop::NotStopped(s) => format!("did not stop within 1 s (state {s})"),
                    _ => "its registers could not be read".to_string(),
                };
                (ThreadState::NotStoppable(why), Vec::new())
            }
        };
        threads.push(Thread {
            tid: t.tid,
            name,
            state,
            frames,
        });
    }
    // glibc's cache of finished threads' stacks: only their TLS and descriptors are roots, not
    // the frames the threads returned from (docs/reference.md §3, as in the agent's capture).
    // A live thread's stack is no finished one, even when the thread runs on another stack (a
    // fiber, an alternate signal stack): the frames suspended on its own are then its roots.
    let view = |m: &super::maps::Mapping| {
        let extent = stacks::Extent {
            start: m.start,
            end: m.end,
            readable: m.readable,
            writable: m.writable,
        };
        (extent, m.is_anonymous())
    };
    not_globals.extend(stacks::finished_stacks(
        &stopped.maps.maps,
        view,
        |m| stacks::descriptor_at_top(m.start, m.end, |at| image.word(at)),
        &fs_bases,
        glibc.static_tls,
    ));
    let not_globals = heaptui_capture::ranges::merge(not_globals);
    let globals_ranges: Vec<Range<u64>> = image
        .ranges()
        .flat_map(|r| subtract(r, &not_globals))
        .collect();
    let (globals, globals_interior) = root_refs(refs_of(
        &index,
        globals_ranges.iter().flat_map(|r| words(image, r.clone())),
    ));

    // The blocks from the last down, the copy given back above each run of them as it goes
    // (`Image::release_from`): the roots above were its only other readers.
    let mut image = std::mem::take(&mut stopped.image);
    let mut last_first = Edges::with_capacity(blocks.len(), blocks.len() * 2);
    for (i, b) in blocks.iter().enumerate().rev() {
        let mut refs = refs_of(&index, words(&image, b.addr..b.addr + b.size));
        refs.retain(|&(o, _)| o as usize != i);
        last_first.push_with_kinds(refs);
        if i % RELEASE_EVERY == 0 {
            image.release_from(b.addr);
        }
    }
    drop(image);
    let mut objects = Objects::with_capacity(blocks.len());
    let mut edges = Edges::with_capacity(blocks.len(), last_first.len());
    for (i, b) in blocks.iter().enumerate() {
        objects.push(ObjectRecord {
            id: b.addr,
            addr: b.addr,
            size: b.size,
            site: 0,
            thread: NO_THREAD,
            seq: NO_SEQ,
        });
        edges.push_with_kinds(last_first.of_with_kinds((blocks.len() - 1 - i) as ObjectIndex));
    }
    drop(last_first);
    let sites = vec![Site {
        id: 1,
        frames: vec![UNKNOWN_SITE.to_string()],
    }];
    let process = Process {
        pid,
        command: command_line(pid),
    };
    HeapGraph::new(process, sites, objects, edges, threads, globals)
        .and_then(|g| g.with_globals_interior(globals_interior))
        .map_err(|e| CaptureError::Graph(pid, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_cut_out_of_ranges() {
        assert_eq!(
            subtract(0..100, &[10..20, 30..40]),
            vec![0..10, 20..30, 40..100]
        );
        let whole = vec![0..50u64, 50..100];
        assert_eq!(subtract(0..100, &whole), Vec::<Range<u64>>::new());
        assert_eq!(subtract(50..60, &[0..10, 55..70]), vec![50..55]);
        assert_eq!(
            heaptui_capture::ranges::merge(vec![5..9, 0..4, 3..6]),
            vec![0..9]
        );
    }

    #[test]
    fn words_are_read_from_the_copied_pieces_only() {
        let mut bytes = Vec::new();
        for v in [1u64, 2, 3] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let image = Image::from_parts(vec![(0x1000, bytes)]);
        assert_eq!(
            words(&image, 0x0ff8..0x1020).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(words(&image, 0x1003..0x1011).collect::<Vec<_>>(), vec![2]);
    }
}
