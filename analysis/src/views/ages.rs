//! Ages of live blocks (docs/reference.md §8): how many snapshots each block survived, its
//! wall-clock age when times are known, a histogram by age range per site and per thread, and the
//! oldest survivors.
//!
//! A snapshot boundary records the sequence number of the last allocation made before the
//! snapshot; a block allocated with sequence number `s` survived every boundary `b` with
//! `s ≤ b`. Boundaries need not arrive sorted. This module computes only: the blocks come from
//! a snapshot's graph ([`Ages::of_graph`]) or from a replayed recording (`views::Tracker`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::graph::{HeapGraph, NO_SEQ};

/// Number of age ranges: 0, 1, 2, 3 and more than 3 snapshots.
pub const RANGES: usize = 5;

/// A recorded snapshot boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boundary {
    /// Sequence number of the last allocation before the snapshot.
    pub last_seq: u64,
    /// When it was taken, ms since the Unix epoch; 0 when unknown.
    pub unix_ms: u64,
}

/// One live block, as the age view needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgedBlock {
    pub seq: u64,
    pub size: u64,
    /// Site index (graph) or stack id (recording); `u32::MAX` when unknown.
    pub site: u32,
    pub tid: u32,
    /// When it was allocated, ms since the Unix epoch; 0 when unknown.
    pub unix_ms: u64,
}

/// Blocks per age range: `[0]` survived no snapshot, …, `[4]` more than three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    pub blocks: [u64; RANGES],
    pub bytes: [u64; RANGES],
}

impl Histogram {
    fn add(&mut self, age: u64, size: u64) {
        let r = (age as usize).min(RANGES - 1);
        self.blocks[r] += 1;
        self.bytes[r] += size;
    }
}

/// A long-lived block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Survivor {
    pub seq: u64,
    pub size: u64,
    pub site: u32,
    pub tid: u32,
    /// Snapshots survived.
    pub age: u64,
    /// Wall-clock age in ms, when both times are known.
    pub age_ms: Option<u64>,
}

/// The age view of a set of live blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ages {
    pub total: Histogram,
    pub by_site: HashMap<u32, Histogram>,
    pub by_thread: HashMap<u32, Histogram>,
    /// The oldest blocks (lowest sequence numbers), oldest first.
    pub oldest: Vec<Survivor>,
}

/// Snapshots survived by a block allocated with `seq`, given the boundaries sorted ascending.
pub fn age(seq: u64, sorted_boundaries: &[u64]) -> u64 {
    let younger = sorted_boundaries.partition_point(|&b| b < seq);
    (sorted_boundaries.len() - younger) as u64
}

impl Ages {
    /// Computes ages of `blocks` against `boundaries`; `now_ms` (ms since the Unix epoch, 0 if
    /// unknown) gives wall-clock ages; `oldest` is how many survivors to list.
    pub fn new(
        blocks: impl IntoIterator<Item = AgedBlock>,
        boundaries: &[Boundary],
        now_ms: u64,
        oldest: usize,
    ) -> Ages {
        let mut sorted: Vec<u64> = boundaries.iter().map(|b| b.last_seq).collect();
        sorted.sort_unstable();
        let mut ages = Ages::default();
        // The `oldest` lowest sequence numbers, kept as a bounded max-heap.
        let mut heap = std::collections::BinaryHeap::with_capacity(oldest + 1);
        for b in blocks {
            let a = age(b.seq, &sorted);
            ages.total.add(a, b.size);
            ages.by_site.entry(b.site).or_default().add(a, b.size);
            ages.by_thread.entry(b.tid).or_default().add(a, b.size);
            if oldest > 0 {
                heap.push((b.seq, b.size, b.site, b.tid, b.unix_ms, a));
                if heap.len() > oldest {
                    heap.pop();
                }
            }
        }
        ages.oldest = heap
            .into_sorted_vec()
            .into_iter()
            .map(|(seq, size, site, tid, unix_ms, age)| Survivor {
                seq,
                size,
                site,
                tid,
                age,
                age_ms: (unix_ms != 0 && now_ms >= unix_ms).then(|| now_ms - unix_ms),
            })
            .collect();
        ages
    }

    /// The ages of a snapshot's objects (by their sequence numbers; objects without one are
    /// left out), per site index and allocating thread.
    pub fn of_graph(graph: &HeapGraph, boundaries: &[Boundary], oldest: usize) -> Ages {
        let o = graph.objects();
        let blocks = (0..o.len())
            .filter(|&i| o.seq[i] != NO_SEQ)
            .map(|i| AgedBlock {
                seq: o.seq[i],
                size: o.size[i],
                site: o.site[i],
                tid: o.thread[i],
                unix_ms: 0,
            });
        Ages::new(blocks, boundaries, 0, oldest)
    }
}
