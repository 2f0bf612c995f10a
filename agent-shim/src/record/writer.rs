//! The recording's writer: one agent thread that drains the event ring every [`PERIOD`],
//! turns the hooks' raw events into recording events — symbolizing each allocation stack the
//! first time it is seen, naming threads, listing modules, reading the clock and, every
//! [`COUNTERS_PERIOD`], the live counters — writes them with
//! `heaptui_analysis::recording::RecordingWriter` and flushes. It does nothing else per
//! event, so that it keeps up with the hooks: the units are computed from the file, when
//! asked (`live`).
//!
//! The state sits behind one mutex: the writer thread takes it for each drain, a `Units`
//! request takes it to drain up to "now" ([`flush_now`]), and the exit handler for the last
//! drain. Everything here runs outside the hooks and allocates from the agent's allocator.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use heaptui_analysis::recording::{Event, RecordedCounters, RecordingWriter};
use heaptui_analysis::views::ages::Boundary;
use heaptui_analysis::views::units::AllocKind;
use heaptui_analysis::views::{NO_STACK, StackId, StackTable};

use super::ring::{self, Raw};
use crate::capture::modules::AddressSpace;
use crate::capture::symbolize::Symbolizer;
use crate::registry::{counters, stacks, threads};
use crate::sys;

/// How often the ring is drained and the file flushed: the most a crash can lose.
pub const PERIOD: Duration = Duration::from_millis(10);
/// How often the live counters and the thread names are recorded.
pub const COUNTERS_PERIOD: Duration = Duration::from_secs(1);
/// Most events one drain takes before it lets a waiting `Units` request in.
const DRAIN_BATCH: usize = 1 << 16;

/// The writer's state; `None` until [`start`] succeeded.
static STATE: Mutex<Option<Recorder>> = Mutex::new(None);
/// Set once the writer thread runs (the constructor waits for it).
static RUNNING: AtomicBool = AtomicBool::new(false);

fn state() -> std::sync::MutexGuard<'static, Option<Recorder>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Everything the writer keeps between drains.
pub struct Recorder {
    path: PathBuf,
    /// `None` once writing failed (the tracker goes on, the file stays as it was).
    out: Option<RecordingWriter<BufWriter<File>>>,
    /// The recording's strings and stacks, numbered as the file numbers them.
    table: StackTable,
    /// Agent stack id → recording stack id.
    stack_ids: HashMap<u32, StackId>,
    /// Leaked on purpose (a few per run: one per module-list change) so that the symbolizer,
    /// which borrows it and caches line tables, lives as long as the writer.
    space: &'static AddressSpace,
    symbolizer: Symbolizer<'static>,
    /// Modules written, by (name, base).
    modules: Vec<(String, u64)>,
    /// Thread names written.
    threads: HashMap<u32, String>,
    tail: u64,
    lost_written: u64,
    /// The clock reading written last, and the one taken at the start of this drain.
    clock_ms: u64,
    now_ms: u64,
    last_counters: Option<Instant>,
    /// Heap events (allocations, frees, reallocs) written.
    events: u64,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn load_space() -> &'static AddressSpace {
    Box::leak(Box::new(AddressSpace::load()))
}

impl Recorder {
    fn new(path: &Path) -> Result<Recorder, String> {
        let file = File::create(path)
            .and_then(crate::sys::own_fd)
            .map_err(|e| format!("cannot create the file: {e}"))?;
        let out = RecordingWriter::new(BufWriter::with_capacity(256 << 10, file))
            .map_err(|e| format!("cannot write the file: {e}"))?;
        let space = load_space();
        let mut rec = Recorder {
            path: path.to_path_buf(),
            out: Some(out),
            table: StackTable::new(),
            stack_ids: HashMap::new(),
            space,
            symbolizer: Symbolizer::new(space),
            modules: Vec::new(),
            threads: HashMap::new(),
            tail: ring::head(),
            lost_written: ring::lost(),
            clock_ms: 0,
            now_ms: 0,
            last_counters: None,
            events: 0,
        };
        rec.write_modules();
        rec.flush();
        Ok(rec)
    }

    /// Writes one event to the file.
    fn emit(&mut self, event: Event) {
        if let Some(out) = &mut self.out
            && let Err(e) = out.write(&event)
        {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        crate::agent_log!(
            "HEAPTUI_RECORD={}: write failed ({e}); the recording stops here",
            self.path.display()
        );
        self.out = None;
    }

    fn string(&mut self, s: &str) -> u32 {
        let (id, new) = self.table.intern(s);
        if new {
            self.emit(Event::String(s.to_string()));
        }
        id
    }

    /// Modules not written yet, the program first (units take the first as the program).
    fn write_modules(&mut self) {
        let exe = std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let space = self.space;
        let mut order: Vec<usize> = (0..space.modules.len()).collect();
        order.sort_by_key(|&i| space.modules[i].path != exe);
        for i in order {
            let m = &space.modules[i];
            let base = m.text.iter().map(|r| r.start).min().unwrap_or(m.bias);
            let end = m.text.iter().map(|r| r.end).max().unwrap_or(base);
            if self.modules.iter().any(|(n, b)| *n == m.name && *b == base) {
                continue;
            }
            self.modules.push((m.name.clone(), base));
            let name = self.string(&m.name);
            self.emit(Event::Module {
                name,
                base,
                size: end - base,
            });
        }
    }

    /// The recording's id of an agent stack id, symbolizing and writing it when new.
    fn stack(&mut self, id: u32) -> StackId {
        if id == 0 {
            return NO_STACK;
        }
        if let Some(&s) = self.stack_ids.get(&id) {
            return s;
        }
        let pcs = stacks::frames(id);
        // A code address outside every known module: a library was loaded since the module
        // list was read.
        if pcs
            .iter()
            .any(|&pc| self.space.module_for_pc(pc.wrapping_sub(1)).is_none())
        {
            self.reload_modules();
        }
        let mut frames = Vec::with_capacity(pcs.len());
        for &pc in pcs {
            // Inlined calls are frames of their own, as in a snapshot's sites.
            let chain: Vec<(String, String)> = self
                .symbolizer
                .symbolize_inlined(pc, false)
                .iter()
                .map(|s| (s.function.clone(), s.module.clone()))
                .collect();
            for (function, module) in chain {
                let f = self.string(&function);
                let m = self.string(&module);
                frames.push((f, m));
            }
        }
        let (sid, new) = self.table.intern_stack(&frames);
        if new {
            self.emit(Event::Stack(frames));
        }
        self.stack_ids.insert(id, sid);
        sid
    }

    /// Reads the module list again (at most once per drain: a code address in no module
    /// may simply be JIT code).
    fn reload_modules(&mut self) {
        let space = load_space();
        self.space = space;
        self.symbolizer = Symbolizer::new(space);
        self.write_modules();
    }

    /// Names a thread at its first event, from its `comm`.
    fn thread(&mut self, tid: u32) {
        if tid == 0 || self.threads.contains_key(&tid) {
            return;
        }
        let mut buf = [0u8; 32];
        let n = sys::thread_comm(tid, &mut buf);
        let name = String::from_utf8_lossy(&buf[..n]).into_owned();
        self.name_thread(tid, name);
    }

    fn name_thread(&mut self, tid: u32, name: String) {
        let id = self.string(&name);
        self.emit(Event::Thread { tid, name: id });
        self.threads.insert(tid, name);
    }

    /// What every heap event needs first: the clock, if it moved since the last one
    /// written (an idle target's recording does not grow), its thread's name at first
    /// sight, and its stack's recording id.
    fn heap_event(&mut self, tid: u32, stack: u32) -> StackId {
        if self.now_ms != self.clock_ms {
            self.clock_ms = self.now_ms;
            self.emit(Event::Clock {
                unix_ms: self.now_ms,
            });
        }
        self.thread(tid);
        self.events += 1;
        self.stack(stack)
    }

    fn apply(&mut self, raw: Raw) {
        match raw {
            Raw::Alloc {
                kind,
                seq,
                addr,
                size,
                stack,
                tid,
            } => {
                let stack = self.heap_event(tid, stack);
                let kind = match kind {
                    1 => AllocKind::Calloc,
                    2 => AllocKind::Memalign,
                    _ => AllocKind::Malloc,
                };
                self.emit(Event::Alloc {
                    kind,
                    seq,
                    addr,
                    size,
                    stack,
                    tid,
                });
            }
            Raw::Free { addr, stack, tid } => {
                let stack = self.heap_event(tid, stack);
                self.emit(Event::Free { addr, stack, tid });
            }
            Raw::Realloc {
                seq,
                old,
                new,
                size,
                stack,
                tid,
            } => {
                let stack = self.heap_event(tid, stack);
                self.emit(Event::Realloc {
                    seq,
                    old_addr: old,
                    new_addr: new,
                    size,
                    stack,
                    tid,
                });
            }
            Raw::Boundary { last_seq, unix_ms } => {
                self.emit(Event::Snapshot(Boundary { last_seq, unix_ms }))
            }
            Raw::Nothing => {}
        }
    }

    /// Takes what the ring holds (up to a batch), and the counters and thread names when
    /// they are due; then flushes.
    fn drain(&mut self) -> usize {
        self.now_ms = unix_ms();
        let mut n = 0;
        while n < DRAIN_BATCH {
            let Some(raw) = ring::pop(&mut self.tail) else {
                break;
            };
            self.apply(raw);
            n += 1;
        }
        let lost = ring::lost();
        if lost > self.lost_written {
            self.lost_written = lost;
            self.emit(Event::Lost { events: lost });
        }
        if self
            .last_counters
            .is_none_or(|t| t.elapsed() >= COUNTERS_PERIOD)
        {
            self.last_counters = Some(Instant::now());
            self.write_counters();
            for t in threads::list() {
                if self.threads.get(&t.tid) != Some(&t.name) {
                    self.name_thread(t.tid, t.name);
                }
            }
        }
        self.flush();
        n
    }

    /// Drains every event claimed before this call, waiting up to `patience` for a claimed
    /// slot whose thread has not published it yet (it is between claim and publish, or
    /// stopped there).
    fn catch_up(&mut self, patience: Duration) {
        let until = ring::head();
        let started = Instant::now();
        loop {
            let n = self.drain();
            if self.tail >= until {
                break;
            }
            if n == 0 {
                if started.elapsed() >= patience {
                    crate::agent_log!(
                        "recording: an event claimed by a hook was not published within {} ms",
                        patience.as_millis()
                    );
                    break;
                }
                std::thread::yield_now();
            }
        }
    }

    fn write_counters(&mut self) {
        let c = counters::counters();
        self.emit(Event::Counters(RecordedCounters {
            live_bytes: c.live_bytes,
            live_blocks: c.live_blocks,
            allocated_bytes: c.allocated_bytes,
            peak_live_bytes: c.peak_live_bytes,
            unix_ms: unix_ms(),
        }));
    }

    fn flush(&mut self) {
        if let Some(out) = &mut self.out
            && let Err(e) = out.flush()
        {
            self.fail(e);
        }
    }
}

/// Creates the file and starts the writer thread.
pub fn start(path: &Path) -> Result<(), String> {
    let rec = Recorder::new(path)?;
    *state() = Some(rec);
    // The libc blocks of the thread's creation are allocated here, on the program's main
    // thread, in the constructor: their sequence numbers are kept so captures leave them out.
    let first = crate::registry::blocks::number_waiting();
    let launched = std::thread::Builder::new()
        .name("heaptui-record".into())
        .spawn(run);
    if let Err(e) = launched {
        *state() = None;
        return Err(format!("cannot start the writer thread: {e}"));
    }
    let started = Instant::now();
    while !RUNNING.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(50));
    }
    threads::note_agent_spawn(first);
    Ok(())
}

/// The writer thread: never stopped by a capture, never listed, never ends.
fn run() {
    threads::enter_agent_thread();
    RUNNING.store(true, Ordering::Release);
    loop {
        std::thread::sleep(PERIOD);
        let mut guard = state();
        let Some(rec) = guard.as_mut() else { return };
        while rec.drain() == DRAIN_BATCH {}
    }
}

/// Drains every event claimed so far into the file and flushes it; returns the file's path,
/// or why it cannot be read for units (recording off, or writing failed).
pub fn flush_now() -> Result<PathBuf, String> {
    let mut guard = state();
    let Some(rec) = guard.as_mut() else {
        return Err(super::units::NOT_RECORDING.to_string());
    };
    rec.catch_up(Duration::from_secs(1));
    if rec.out.is_none() {
        return Err(format!(
            "writing the recording {} failed (see the agent log): its units stop there",
            rec.path.display()
        ));
    }
    Ok(rec.path.clone())
}

/// The last drain, at exit: every event claimed so far and the final counters.
pub fn finish() {
    let mut guard = state();
    if let Some(rec) = guard.as_mut() {
        rec.catch_up(Duration::from_millis(200));
        rec.write_counters();
        rec.flush();
        let line = format_args!(
            "recording {}: {} heap events, {} lost{}",
            rec.path.display(),
            rec.events,
            rec.lost_written,
            if rec.lost_written > 0 {
                " (the recording is incomplete: the writer fell behind)"
            } else {
                ""
            }
        );
        if rec.lost_written > 0 {
            crate::log::note_problem();
            crate::log::log(line);
        } else {
            crate::log::info(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_analysis::recording::replay;
    use heaptui_analysis::views::TrackerConfig;

    #[inline(never)]
    fn allocating_function() -> u64 {
        std::hint::black_box(allocating_function as *const () as u64)
    }

    // One test: the ring is a process-wide singleton.
    #[test]
    fn drained_events_replay_with_symbolized_stacks_thread_names_and_lost_events() {
        assert!(ring::init());
        assert!(stacks::init(16));
        // Return addresses inside a function of this binary.
        let pc = allocating_function() + 4;
        let stack = stacks::intern(&[pc, pc + 1]);
        assert_ne!(stack, 0);
        let dir = std::env::temp_dir().join(format!("heaptui-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.hrec");
        let mut rec = Recorder::new(&path).unwrap();
        let tid = sys::current_tid();
        let events = [
            Raw::Alloc {
                kind: 0,
                seq: 1,
                addr: 0x1000,
                size: 100,
                stack,
                tid,
            },
            Raw::Alloc {
                kind: 1,
                seq: 2,
                addr: 0x2000,
                size: 50,
                stack: 0,
                tid,
            },
            Raw::Free {
                addr: 0x1000,
                stack,
                tid,
            },
            Raw::Realloc {
                seq: 3,
                old: 0x2000,
                new: 0x3000,
                size: 80,
                stack,
                tid,
            },
            Raw::Free {
                addr: 0,
                stack: 0,
                tid,
            },
            Raw::Boundary {
                last_seq: 3,
                unix_ms: 5,
            },
        ];
        for raw in events {
            assert!(ring::push(raw));
        }
        // Fill the ring with empty claims, then three events do not fit: lost.
        while ring::claim().is_some() {}
        assert!(!ring::push(Raw::Nothing));
        assert!(!ring::push(Raw::Nothing));
        let lost = ring::lost();
        assert!(lost >= 3);
        rec.catch_up(Duration::from_secs(1));
        assert_eq!(rec.tail, ring::head());
        assert_eq!(rec.events, 5);
        drop(rec);

        let bytes = std::fs::read(&path).unwrap();
        let r = replay(&bytes, TrackerConfig::default()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(r.truncated, None);
        let c = r.tracker.counters().counters();
        assert_eq!(
            (c.live_bytes, c.live_blocks, c.allocated_bytes),
            (80, 1, 230)
        );
        assert_eq!(r.tracker.lost(), lost);
        assert_eq!(r.tracker.boundaries().len(), 1);
        assert_eq!(r.tracker.units().unknown().frees, 0);
        // Stamped with the wall clock of the drain that wrote it.
        let (addr, block) = r.tracker.live_blocks().next().unwrap();
        assert_eq!((addr, block.seq), (0x3000, 3));
        assert!(block.unix_ms > 1_700_000_000_000, "{block:?}");
        let frames = r.tracker.stacks().frame_names(0);
        assert_eq!(frames.len(), 2);
        assert!(frames[0].contains("allocating_function"), "{frames:?}");
        let mut comm = [0u8; 32];
        let n = sys::thread_comm(tid, &mut comm);
        assert_eq!(
            r.tracker.thread_name(tid),
            Some(String::from_utf8_lossy(&comm[..n]).as_ref())
        );
        assert!(r.tracker.modules().count() > 1);
        assert!(r.tracker.recorded_counters().is_some());
    }
}
