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
    /// Blocks found moving by the last `blocks` call (see `Heap::moving`).
    moving: std::cell::RefCell<Vec<u64>>,
    /// Blocks that may be mmapped chunks, found by the last `blocks` call (see
    /// `Heap::large_blocks`).
    large: std::cell::RefCell<Vec<(u64, u64)>>,
}

impl Heap for Registry {
    type Frozen = blocks::Frozen;

    fn freeze(&self) -> blocks::Frozen {
        blocks::freeze()
    }

    fn number_blocks(&self, _frozen: &blocks::Frozen) {
        blocks::number_waiting();
    }

    fn blocks(&self, frozen: &blocks::Frozen, out: &mut Vec<BlockInfo>) {
        // Listed in address order as they are listed (`by_address`), the two halves of the
        // table on two threads in the scanning child; the agent's own blocks left out and the
        // large ones kept aside in the same walk, so no later pass reads all of them again.
        let live = LiveBlocks(frozen.listed());
        let slots = frozen.slots();
        let mut parts = [0..slots / 2, slots / 2..slots].map(|slots| Part {
            slots,
            moving: Vec::new(),
            large: Vec::new(),
            last: (0, false),
        });
        let two = scan::second_thread(frozen.len());
        by_address::list_by_address(&live, &mut parts, out, two);
        let (mut moving, mut large) = (self.moving.borrow_mut(), self.large.borrow_mut());
        moving.clear();
        large.clear();
        for p in &parts {
            moving.extend(&p.moving);
            large.extend(&p.large);
        }
    }

    fn large_blocks(&self, _frozen: &blocks::Frozen, out: &mut Vec<(u64, u64)>) -> bool {
        out.append(&mut self.large.borrow_mut());
        true
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
}

/// The live blocks of the frozen table, as `by_address` lists them.
struct LiveBlocks<'a>(blocks::Listed<'a>);

/// A part of the table's slots, and the blocks found moving there (see `Heap::moving`) and
/// those that may be mmapped chunks (`Heap::large_blocks`).
struct Part {
    slots: std::ops::Range<usize>,
    moving: Vec<u64>,
    large: Vec<(u64, u64)>,
    /// The last `(tid, is an agent thread)` looked up: most blocks come from a handful of
    /// threads.
    last: (u32, bool),
}

/// Fewest bytes of a block that may be an mmapped chunk: one spans whole pages, and
/// `mapped::Exclusions::add_mmapped_chunks` passes over blocks under a page (a lower bound
/// here keeps every one it would look at).
const LARGE_BLOCK: u64 = 2048;

impl by_address::Listing for LiveBlocks<'_> {
    type Item = BlockInfo;
    type Part = Part;

    fn each(&self, part: &mut Part, mut f: impl FnMut(BlockInfo)) {
        part.moving.clear();
        part.large.clear();
        self.0.for_each_in(part.slots.clone(), |b| {
            if b.moving {
                part.moving.push(b.addr);
            }
            if b.size >= LARGE_BLOCK {
                part.large.push((b.addr, b.size));
            }
            // The agent's own blocks (allocated by libc for an agent thread) are left out.
            if b.tid != part.last.0 {
                part.last = (b.tid, threads::is_agent_thread(b.tid));
            }
            if part.last.1 || threads::spawned_for_agent(b.seq) {
                return;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::counters::Op;

    /// Blocks of this test only, over many 64 MiB regions (and so many shards' tables).
    const BASE: u64 = 0x5600_0000_0000;

    fn ours(addr: u64) -> bool {
        (BASE..BASE + (1 << 36)).contains(&addr)
    }

    #[test]
    fn parts_of_the_frozen_table_list_each_block_once_in_address_order() {
        let mut expect: Vec<u64> = (0..3000u64)
            .map(|i| BASE + (i % 300) * (64 << 20) + (i / 300) * 48)
            .collect();
        for &a in &expect {
            assert!(blocks::insert(a, 40, 1, 0, Op::Malloc));
        }
        // Some freed again, so that parts begin and end among empty slots too.
        for &a in expect.iter().step_by(7) {
            assert!(blocks::remove(a, Some(Op::Free)).is_some());
        }
        expect = expect
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 7 != 0)
            .map(|(_, &a)| a)
            .collect();
        expect.sort_unstable();
        let frozen = blocks::freeze();
        let listed = frozen.listed();
        let slots = frozen.slots();
        // Cut into 1, 2, 3 and 61 parts, at points that fall inside the shards' tables and
        // on their ends alike.
        for parts in [1, 2, 3, 61] {
            let mut seen = Vec::new();
            for k in 0..parts {
                let part = slots * k / parts..slots * (k + 1) / parts;
                listed.for_each_in(part, |b| {
                    if ours(b.addr) {
                        seen.push(b.addr);
                    }
                });
            }
            seen.sort_unstable();
            assert_eq!(seen, expect, "{parts} parts");
        }
        // A range past the end, or empty, lists nothing.
        let mut none = 0;
        listed.for_each_in(slots..slots + 10, |_| none += 1);
        listed.for_each_in(5..5, |_| none += 1);
        assert_eq!(none, 0);
        drop(listed);
        // The capture's listing: the same blocks, in address order, from the table's two
        // halves.
        let mut out = Vec::new();
        Registry::default().blocks(&frozen, &mut out);
        drop(frozen);
        let listed: Vec<u64> = out.iter().map(|b| b.addr).filter(|&a| ours(a)).collect();
        assert_eq!(listed, expect);
        assert!(out.is_sorted_by_key(|b| b.addr));
        for a in expect {
            blocks::remove(a, Some(Op::Free));
        }
    }
}
