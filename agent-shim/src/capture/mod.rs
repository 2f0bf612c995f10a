//! Capture: stop the world, unwind every thread frame by frame, scan for pointers, build the
//! heap graph and analyse it (docs/reference.md §3), in a copy-on-write child of the process.
//!
//! Owns everything between "a snapshot is wanted" and a [`heaptui_analysis::Kept`]. It never
//! runs on a hook's path: only the agent thread captures.

mod alongside;
pub mod budget;
pub mod build;
mod by_address;
pub mod dontfork;
pub mod mapped;
pub mod modules;
pub mod scan;
pub mod stop;
pub mod symbolize;
pub mod unwind;

use crate::registry::{blocks, stacks, threads};
pub use build::{BlockInfo, Capture, CaptureError, FileCapture, Heap, Phases, ThreadInfo};

/// The agent's block table as the capture sees it.
#[derive(Default)]
pub struct Registry {
    /// The last `(tid, is an agent thread)` looked up.
    last: std::cell::Cell<(u32, bool)>,
    /// Blocks found moving by the last `blocks` call (see `Heap::moving`).
    moving: std::cell::RefCell<Vec<u64>>,
}

impl Heap for Registry {
    type Frozen = blocks::Frozen;

    fn freeze(&self) -> blocks::Frozen {
        blocks::freeze()
    }

    fn blocks(&self, frozen: &blocks::Frozen, out: &mut Vec<BlockInfo>) {
        // Listed in address order as they are listed (`by_address`), the two halves of the
        // table on two threads in the scanning child.
        let live = LiveBlocks(frozen.listed());
        let slots = frozen.slots();
        let mut parts = [0..slots / 2, slots / 2..slots].map(|slots| Part {
            slots,
            moving: Vec::new(),
        });
        let two = scan::second_thread(frozen.len());
        by_address::list_by_address(&live, &mut parts, out, two);
        let mut moving = self.moving.borrow_mut();
        moving.clear();
        parts.iter().for_each(|p| moving.extend(&p.moving));
    }

    fn len_hint(&self, frozen: &blocks::Frozen) -> usize {
        frozen.len()
    }

    fn moving(&self, _frozen: &blocks::Frozen, out: &mut Vec<u64>) {
        out.append(&mut self.moving.borrow_mut());
    }

    fn held(&self, frozen: &blocks::Frozen, out: &mut Vec<u64>) {
        frozen.held(out);
    }

    fn stack(&self, id: u32) -> Vec<u64> {
        stacks::frames(id).to_vec()
    }

    fn allocator_idle(&self) -> bool {
        crate::alloc::AGENT_ALLOC.idle()
    }

    fn agent_block(&self, b: &BlockInfo) -> bool {
        // Most blocks come from a handful of threads: remember the last answer.
        let (last_tid, last_agent) = self.last.get();
        let agent = if b.tid == last_tid {
            last_agent
        } else {
            let agent = threads::is_agent_thread(b.tid);
            self.last.set((b.tid, agent));
            agent
        };
        agent || threads::spawned_for_agent(b.seq)
    }
}

/// The live blocks of the frozen table, as `by_address` lists them.
struct LiveBlocks<'a>(blocks::Listed<'a>);

/// A part of the table's slots, and the blocks found moving there (see `Heap::moving`).
struct Part {
    slots: std::ops::Range<usize>,
    moving: Vec<u64>,
}

impl by_address::Listing for LiveBlocks<'_> {
    type Item = BlockInfo;
    type Part = Part;

    fn each(&self, part: &mut Part, mut f: impl FnMut(BlockInfo)) {
        part.moving.clear();
        self.0.for_each_in(part.slots.clone(), |b| {
            if b.moving {
                part.moving.push(b.addr);
            }
            f(BlockInfo {
                addr: b.addr,
                size: b.size,
                seq: b.seq,
                tid: b.tid,
                stack: b.stack,
            })
        });
    }

    fn addr(b: &BlockInfo) -> u64 {
        b.addr
    }
}

/// Captures this process now, from the calling (agent) thread: every listed thread, every
/// tracked block, analysed and kept; refused when the process cannot afford it (`budget`).
pub fn take() -> Result<Capture, CaptureError> {
    let list = before_capture()?;
    let capture = build::capture(&Registry::default(), &list, stop::Timeouts::default());
    after_capture(match &capture {
        Err(e) => Some(e.to_string()),
        Ok(c) => c.kept.threads().iter().find_map(|t| match &t.state {
            heaptui_analysis::ThreadState::Stopped => None,
            heaptui_analysis::ThreadState::NotStoppable(why) => {
                Some(format!("thread {} was not stopped ({why})", t.tid))
            }
        }),
    });
    capture
}

/// As [`take`], written unanalysed to `out` as a binary snapshot file (a dump).
pub fn take_file(out: &mut dyn std::io::Write) -> Result<FileCapture, CaptureError> {
    let list = before_capture()?;
    let capture = build::capture_file(&Registry::default(), &list, stop::Timeouts::default(), out);
    after_capture(match &capture {
        Err(e) => Some(e.to_string()),
        Ok(c) => c
            .not_stopped
            .as_ref()
            .map(|(tid, why)| format!("thread {tid} was not stopped ({why})")),
    });
    capture
}

/// The budget check and the thread list of a capture.
fn before_capture() -> Result<Vec<ThreadInfo>, CaptureError> {
    // A snapshot that ran out of memory half-way would abort the host: refuse it up front.
    let live_blocks = crate::registry::counters::counters().live_blocks;
    budget::Room::now()
        .admits(budget::Need::of(live_blocks))
        .map_err(CaptureError::NoMemory)?;
    Ok(threads::list()
        .into_iter()
        .map(|t| ThreadInfo {
            tid: t.tid,
            name: t.name,
        })
        .collect())
}

/// An incomplete capture (`why`: a thread it could not stop, or the error that ended it) is
/// something that went wrong: the first one is said in the log, so that the exit summary
/// that then goes to stderr (log.rs) is not the only trace of it.
fn after_capture(incomplete: Option<String>) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(why) = incomplete else {
        return;
    };
    crate::log::note_problem();
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::agent_log!("a capture was incomplete: {why} (said for the first one only)");
    }
}
