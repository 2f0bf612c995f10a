//! Capture: stop the world, unwind every thread frame by frame, scan for pointers, and
//! build the heap graph (SPEC §3).
//!
//! Owns everything between "a snapshot is wanted" and a [`heaptui_analysis::HeapGraph`]. It
//! never runs on a hook's path: only the agent thread captures.

pub mod build;
pub mod modules;
pub mod scan;
pub mod stop;
pub mod symbolize;
pub mod unwind;

use heaptui_analysis::GraphError;

use crate::registry::{blocks, stacks, threads};
pub use build::{BlockInfo, Capture, Heap, ThreadInfo};

/// The agent's block table as the capture sees it.
pub struct Registry;

impl Heap for Registry {
    type Frozen = blocks::Frozen;

    fn freeze(&self) -> blocks::Frozen {
        blocks::freeze()
    }

    fn blocks(&self, frozen: &blocks::Frozen, out: &mut Vec<BlockInfo>) {
        frozen.for_each(|b| {
            out.push(BlockInfo {
                addr: b.addr,
                size: b.size,
                seq: b.seq,
                tid: b.tid,
                stack: b.stack,
            })
        });
    }

    fn len_hint(&self, frozen: &blocks::Frozen) -> usize {
        frozen.len()
    }

    fn stack(&self, id: u32) -> Vec<u64> {
        stacks::frames(id).to_vec()
    }

    fn agent_block(&self, b: &BlockInfo) -> bool {
        threads::is_agent_thread(b.tid) || crate::dump::started_agent_thread(b.seq)
    }
}

/// Captures this process now, from the calling (agent) thread: every listed thread, every
/// tracked block.
pub fn take() -> Result<Capture, GraphError> {
    let list: Vec<ThreadInfo> = threads::list()
        .into_iter()
        .map(|t| ThreadInfo {
            tid: t.tid,
            name: t.name,
        })
        .collect();
    build::capture(&Registry, &list, stop::Timeouts::default())
}
