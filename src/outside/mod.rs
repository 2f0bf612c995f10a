//! Capturing a process that was started without the agent, from outside (docs/reference.md §3).
//!
//! Owns the whole outside capture of one process, in this order:
//! 1. before the stop: whether heaptui may trace it ([`access`]), its memory map ([`maps`]),
//!    where glibc keeps its malloc state and whether heaptui knows that layout ([`glibc`]);
//! 2. the stop ([`ptrace`]): every thread stopped with `PTRACE_INTERRUPT`, registers read, the
//!    memory map read again, every readable and writable mapping copied ([`memory`]) — the
//!    heap, the stacks from each stack pointer up, the modules' data, mapped memory — and the
//!    threads resumed. If a stopped thread holds an arena's lock (a malloc under way), the
//!    process is resumed and stopped again a little later, a bounded number of times;
//! 3. after the resume, from the copy only: the live blocks ([`arenas`]), the roots, the
//!    pointer scan and the [`HeapGraph`] ([`graph`]).
//!
//! The stop runs on a thread of its own that ends right after it, because the kernel releases
//! whatever that thread still traces when it exits (see [`ptrace`]): the target is never left
//! stopped or traced, whatever happens in between — an error, a panic, heaptui being killed.
//!
//! Never writes to the target, never sends it a signal, never keeps it stopped while
//! analysing.

pub mod access;
pub mod agent;
pub mod arenas;
pub mod commands;
pub mod frames;
pub mod glibc;
pub mod graph;
pub mod maps;
pub mod memory;
pub mod ptrace;
pub mod source;

use std::io::BufRead;
use std::ops::Range;
use std::time::{Duration, Instant};

use heaptui_analysis::HeapGraph;
use nix::unistd::Pid;

use self::glibc::Glibc;
use self::maps::Maps;
use self::memory::Image;
use self::ptrace::World;

/// How many times the capture stops the process before it takes a stop in which an arena's
/// lock is held anyway (and says so).
const MAX_ATTEMPTS: u32 = 20;

/// The red zone below a stack pointer that leaf code may use (x86-64 psABI).
pub use heaptui_capture::registers::RED_ZONE;

/// A finished outside capture.
pub struct Capture {
    pub graph: HeapGraph,
    /// How long the process was stopped (first attach to last detach) in the stop kept.
    pub pause: Duration,
    /// The whole capture, analysis of the graph excluded.
    pub total: Duration,
    /// Bytes copied while stopped.
    pub copied: u64,
    /// What was inconsistent or partial, one line each.
    pub warnings: Vec<String>,
}

/// Why the process could not be captured; each a sentence saying what to do.
#[derive(Debug)]
pub enum CaptureError {
    /// Out of reach: not running, not traceable (the sentence comes from [`access`]).
    Access(String),
    Glibc(u32, glibc::GlibcError),
    Walk(u32, arenas::WalkError),
    /// The process ended during the capture.
    Gone(u32),
    Graph(u32, heaptui_analysis::GraphError),
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::Access(why) => f.write_str(why),
            CaptureError::Glibc(pid, e) => {
                write!(f, "cannot read the heap of process {pid} from outside: {e}")
            }
            CaptureError::Walk(pid, e) => {
                write!(f, "cannot read the heap of process {pid} from outside: {e}")
            }
            CaptureError::Gone(pid) => write!(f, "process {pid} ended during the capture"),
            CaptureError::Graph(pid, e) => {
                write!(f, "the graph captured from process {pid} is invalid: {e}")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// What the stop produced.
struct Stopped {
    maps: Maps,
    image: Image,
    threads: Vec<ptrace::Thread>,
    pause: Duration,
    /// Whether an arena's lock was held (only in the last attempt, which keeps it anyway).
    busy: bool,
}

/// Captures process `pid` from outside (module docs).
pub fn capture(pid: u32) -> Result<Capture, CaptureError> {
    let begin = Instant::now();
    let target = Pid::from_raw(pid as i32);
    let facts = access::facts(target);
    if let Some(why) = access::refuse_early(&facts) {
        return Err(CaptureError::Access(why));
    }
    let maps = read_maps(target).ok_or(CaptureError::Gone(pid))?;
    if let Some(m) = maps
        .maps
        .iter()
        .find(|m| m.readable && !m.is_kernel_special())
        && let Err(errno @ (nix::errno::Errno::EPERM | nix::errno::Errno::EACCES)) =
            memory::may_read(target, m.start)
    {
        return Err(CaptureError::Access(access::explain(&facts, errno)));
    }
    let glibc = glibc::locate(target, &maps).map_err(|e| CaptureError::Glibc(pid, e))?;
    let agent = agent::locate(target, &maps);
    let mut attempts = 0;
    let mut stopped = loop {
        attempts += 1;
        let last = attempts == MAX_ATTEMPTS;
        let buffer = memory::prepared(planned_bytes(target, &maps));
        let dense = dense_mappings(target, &maps);
        let outcome = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("heaptui-ptrace".into())
                .spawn_scoped(s, || stop_once(target, &glibc, last, buffer, &dense))
                .map_err(|e| {
                    CaptureError::Access(format!(
                        "cannot capture process {pid}: no thread to trace it from ({e})"
                    ))
                })?
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        match outcome {
            Some(stopped) => break stopped,
            // A malloc was under way in a stopped thread: let it finish.
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    let mut warnings = Vec::new();
    if stopped.busy {
        warnings.push(format!(
            "a thread was inside malloc or free in each of {attempts} stops: its arena was read \
             mid-update"
        ));
    }
    let copied = stopped.image.len();
    // Takes the copy and gives it back as it reads the blocks.
    let graph = graph::build(pid, &glibc, agent.as_ref(), &mut stopped, &mut warnings)?;
    Ok(Capture {
        graph,
        pause: stopped.pause,
        total: begin.elapsed(),
        copied,
        warnings,
    })
}

fn read_maps(pid: Pid) -> Option<Maps> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .ok()
        .map(|t| Maps::parse(&t))
}

/// One stop: stop, read, copy, resume. `None` when an arena's lock was held and this is not
/// the last attempt.
fn stop_once(
    pid: Pid,
    glibc: &Glibc,
    last: bool,
    buffer: Vec<u8>,
    dense: &[Range<u64>],
) -> Result<Option<Stopped>, CaptureError> {
    let began = Instant::now();
    let mut world = World::stop(pid, ptrace::STOP_DEADLINE).map_err(|e| match e {
        ptrace::StopError::Attach(errno) => {
            CaptureError::Access(access::explain(&access::facts(pid), errno))
        }
        ptrace::StopError::Gone => CaptureError::Gone(pid.as_raw() as u32),
    })?;
    test_hold(&world)?;
    let maps = read_maps(pid).ok_or(CaptureError::Gone(pid.as_raw() as u32))?;
    let busy = arena_locked(pid, glibc);
    if busy && !last {
        return Ok(None);
    }
    let pages = memory::PageMap::open(pid);
    let plan = copy_plan(&maps, &world, pages.as_ref().map(|p| (p, dense)));
    let image = memory::copy(pid, &plan, buffer);
    world.resume();
    let pause = began.elapsed();
    Ok(Some(Stopped {
        maps,
        image,
        threads: world.threads().cloned().collect(),
        pause,
        busy,
    }))
}

/// How many bytes the stop will copy ([`copy_plan`]), estimated before it: every mapping it
/// copies, less the part of each stack below the stack pointer of a thread blocked in a system
/// call (`/proc/PID/task/TID/syscall` shows it; a running thread's whole stack is counted).
fn planned_bytes(pid: Pid, maps: &Maps) -> u64 {
    let whole: u64 = maps
        .maps
        .iter()
        .filter(|m| m.readable && m.writable && !m.is_kernel_special())
        .map(|m| m.end - m.start)
        .sum();
    let mut below_sp: Vec<(u64, u64)> = ptrace::list_threads(pid)
        .into_iter()
        .filter_map(|tid| {
            let call = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
            let sp = call.split_whitespace().nth(7)?.strip_prefix("0x")?;
            let sp = u64::from_str_radix(sp, 16).ok()?;
            let m = maps.find(sp)?;
            Some((m.start, sp.saturating_sub(RED_ZONE).max(m.start) - m.start))
        })
        .collect();
    // Threads sharing a stack mapping: the least of their unused parts.
    below_sp.sort_unstable();
    below_sp.dedup_by_key(|(start, _)| *start);
    let planned = whole.saturating_sub(below_sp.iter().map(|&(_, unused)| unused).sum());
    // A reservation the program never touched reads as zeros but is mapped all the same:
    // preparing more than its resident memory (plus room for what it touches meanwhile) would
    // only cost heaptui memory.
    planned.min(resident_anon(pid).saturating_add(16 << 20))
}

/// The process's resident anonymous and shared memory in bytes (`/proc/PID/status`), or
/// unbounded when unknown.
fn resident_anon(pid: Pid) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return u64::MAX;
    };
    ["RssAnon:", "RssShmem:"]
        .iter()
        .map(|key| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|kb| kb.trim().parse::<u64>().ok())
                .map_or(u64::MAX / 4, |kb| kb * 1024)
        })
        .sum()
}

/// Whether a stopped thread holds the lock of an arena (read from the live, stopped process).
fn arena_locked(pid: Pid, glibc: &Glibc) -> bool {
    let l = &glibc.layout;
    let mut a = glibc.main_arena;
    for _ in 0..4096 {
        let Some(head) = memory::read_exact(pid, a, 8) else {
            return false;
        };
        if u32::from_le_bytes([head[0], head[1], head[2], head[3]]) != 0 {
            return true;
        }
        let Some(next) = memory::read_exact(pid, a + l.arena_next, 8) else {
            return false;
        };
        a = u64::from_le_bytes(next.try_into().unwrap_or_default());
        if a == glibc.main_arena || a == 0 {
            return false;
        }
    }
    false
}

/// What to copy while stopped: every readable, writable mapping but the kernel's own pages;
/// of a thread's stack, only what lies above its stack pointer (less the red zone); of private
/// anonymous memory (the heaps, stacks, anonymous mappings), only the pages the page map says
/// were ever touched: a large reservation the program barely uses (a thread's 8 MiB stack, a
/// 1 GiB arena reserve) reads as zeros everywhere else, which hold no pointer. `pages` is the
/// page map and the mappings found mostly touched before the stop ([`dense_mappings`]), whose
/// page map is not read again.
fn copy_plan(
    maps: &Maps,
    world: &World,
    pages: Option<(&memory::PageMap, &[Range<u64>])>,
) -> Vec<Range<u64>> {
    let mut stack_from: Vec<(u64, u64)> = world
        .threads()
        .filter_map(|t| t.regs.as_ref())
        .filter_map(|r| {
            let sp = r.rsp.saturating_sub(RED_ZONE) & !7;
            maps.find(r.rsp).map(|m| (m.start, sp.max(m.start)))
        })
        .collect();
    stack_from.sort_unstable();
    maps.maps
        .iter()
        .filter(|m| m.readable && m.writable && !m.is_kernel_special())
        .flat_map(|m| {
            let sparse = sparse_candidate(m);
            // The lowest stack pointer of the threads on this mapping (threads may share one:
            // signal stacks, coroutines).
            let from = stack_from
                .iter()
                .filter(|(start, _)| *start == m.start)
                .map(|&(_, sp)| sp)
                .min()
                .unwrap_or(m.start);
            let r = from..m.end;
            match pages {
                Some((pages, dense)) if sparse && !dense.contains(&(m.start..m.end)) => {
                    pages.touched(r.clone()).unwrap_or_else(|| vec![r])
                }
                _ => vec![r],
            }
        })
        .collect()
}

/// Mappings up to this size are copied whole: reading their page map would cost about as much.
const SPARSE_FROM: u64 = 64 * 1024;

/// Whether mapping `m` is private anonymous memory (the heaps, stacks, anonymous mappings),
/// large enough for its page map to be worth reading.
fn sparse_candidate(m: &maps::Mapping) -> bool {
    m.inode == 0
        && !m.path.starts_with('/')
        && m.readable
        && m.writable
        && !m.is_kernel_special()
        && m.end - m.start > SPARSE_FROM
}

/// The private anonymous mappings that are mostly touched, read before the stop: copied whole
/// while stopped, without reading their page map again then (about 4 ms per 256 MiB). A page
/// touched in between is copied all the same; a mapping not listed here (sparse, or new) has
/// its page map read while stopped.
fn dense_mappings(pid: Pid, maps: &Maps) -> Vec<Range<u64>> {
    let Some(pages) = memory::PageMap::open(pid) else {
        return Vec::new();
    };
    maps.maps
        .iter()
        .filter(|m| sparse_candidate(m))
        .filter(|m| {
            pages.touched(m.start..m.end).is_some_and(|t| {
                2 * t.iter().map(|r| r.end - r.start).sum::<u64>() >= m.end - m.start
            })
        })
        .map(|m| m.start..m.end)
        .collect()
}

/// The test hook of the safety tests (`tests/outside_safety.rs`): with
/// `HEAPTUI_TEST_STOPPED_FIFO=PATH`, once every thread is stopped heaptui prints `stopped` on
/// stderr and reads one line from the FIFO at PATH: `go` goes on, `error` fails the capture,
/// `panic` panics (anything else fails too). It lets the tests check the target while it is
/// stopped and what each way out leaves behind.
fn test_hold(_world: &World) -> Result<(), CaptureError> {
    let Some(path) = std::env::var_os("HEAPTUI_TEST_STOPPED_FIFO") else {
        return Ok(());
    };
    eprintln!("stopped");
    let mut line = String::new();
    if let Ok(f) = std::fs::File::open(&path) {
        let _ = std::io::BufReader::new(f).read_line(&mut line);
    }
    match line.trim() {
        "go" => Ok(()),
        "panic" => panic!("test hook: panic while the target is stopped"),
        other => Err(CaptureError::Access(format!(
            "test hook: stopped on request ({other:?})"
        ))),
    }
}

#[cfg(test)]
mod tests;
