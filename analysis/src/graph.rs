//! The heap-graph model: live heap blocks, the references between them, and the roots
//! (stack frames of every thread, and the globals) that hold them.
//!
//! The model is laid out for heaps of millions of blocks: objects are stored as columns
//! and their outgoing references as one compressed adjacency list (CSR), so a block costs
//! a few dozen bytes here and no allocation of its own. Objects are addressed by their
//! dense [`ObjectIndex`]; the `id` column keeps the identifier a snapshot file gave them.
//!
//! This module owns the shape of the data and its invariants (every reference names an
//! existing object, columns have one length). It computes nothing; see `attribution`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Dense index of an object in [`HeapGraph::objects`], `0..objects.len()`.
pub type ObjectIndex = u32;

/// Dense index of an allocation site in [`HeapGraph::sites`].
pub type SiteIndex = u32;

/// Marks an object whose allocation site is unknown.
pub const NO_SITE: SiteIndex = u32::MAX;

/// Marks an object whose allocating thread is unknown (no Linux thread has id 0).
pub const NO_THREAD: u32 = 0;

/// Marks an object whose allocation sequence number is unknown (sequence numbers start at 1).
pub const NO_SEQ: u64 = 0;

/// The profiled process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub command: String,
}

/// An allocation site: the call stack of an allocation, innermost frame first, each frame
/// already symbolized (e.g. `alloc_buf (server.c:42)`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    pub id: u64,
    pub frames: Vec<String>,
}

impl Site {
    /// A one-line label: the first frame outside the allocator and its wrappers (the
    /// process-wide [`Wrappers`](crate::labels::Wrappers)), or `?` for an empty stack.
    pub fn label(&self) -> &str {
        crate::labels::Wrappers::process().label(&self.frames)
    }
}

/// Whether a frame belongs to the program (`user`) or to libc, ld.so, libstdc++, libgcc or
/// the agent itself (`system`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    #[default]
    User,
    System,
}

/// One stack frame of a thread, a root of the heap graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub function: String,
    pub module: String,
    pub kind: FrameKind,
    /// Objects referenced by words of this frame's stack range (and, for frame 0, the
    /// registers), deduplicated.
    pub refs: Vec<ObjectIndex>,
    /// The members of `refs` that only interior words point into (no word of the frame
    /// holds their first byte), ascending. Empty when every reference is a start edge.
    pub interior: Vec<ObjectIndex>,
}

/// Whether the agent could stop a thread for the capture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "reason")]
pub enum ThreadState {
    /// Stopped for the capture; its frames are exact.
    #[default]
    Stopped,
    /// Could not be stopped (signals blocked, in vfork, stuck); the reason says which.
    /// Its frames hold whatever could be read without stopping it (usually nothing).
    NotStoppable(String),
}

/// A thread and its frames, innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub tid: u32,
    pub name: String,
    pub state: ThreadState,
    pub frames: Vec<Frame>,
}

/// The per-object columns. All have the same length, the number of objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objects {
    /// Identifier from the snapshot (the agent uses the block's sequence number).
    pub id: Vec<u64>,
    /// Start address of the block.
    pub addr: Vec<u64>,
    /// Requested size in bytes.
    pub size: Vec<u64>,
    /// Allocation site index, or [`NO_SITE`].
    pub site: Vec<SiteIndex>,
    /// Allocating thread id, or [`NO_THREAD`].
    pub thread: Vec<u32>,
    /// Allocation sequence number, or [`NO_SEQ`].
    pub seq: Vec<u64>,
}

/// One object's scalar fields, for building [`Objects`] row by row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectRecord {
    pub id: u64,
    pub addr: u64,
    pub size: u64,
    pub site: SiteIndex,
    pub thread: u32,
    pub seq: u64,
}

impl Objects {
    pub fn with_capacity(n: usize) -> Self {
        Objects {
            id: Vec::with_capacity(n),
            addr: Vec::with_capacity(n),
            size: Vec::with_capacity(n),
            site: Vec::with_capacity(n),
            thread: Vec::with_capacity(n),
            seq: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.id.is_empty()
    }

    pub fn push(&mut self, record: ObjectRecord) -> ObjectIndex {
        let index = self.id.len() as ObjectIndex;
        self.id.push(record.id);
        self.addr.push(record.addr);
        self.size.push(record.size);
        self.site.push(record.site);
        self.thread.push(record.thread);
        self.seq.push(record.seq);
        index
    }

    pub fn record(&self, o: ObjectIndex) -> ObjectRecord {
        let i = o as usize;
        ObjectRecord {
            id: self.id[i],
            addr: self.addr[i],
            size: self.size[i],
            site: self.site[i],
            thread: self.thread[i],
            seq: self.seq[i],
        }
    }
}

/// Outgoing references of every object as a compressed adjacency list: the targets of
/// object `o` are `targets[offsets[o]..offsets[o + 1]]`.
///
/// Each reference is a *start* edge (some word of the holder points at the target's first
/// byte) or an *interior* one (only words pointing further in). The kind costs one bit per
/// reference: bit `k` of `interior` is set when reference `k` is interior. The bit vector
/// is as long as its last set bit needs (empty when every reference is a start edge), so
/// that equal graphs compare equal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edges {
    offsets: Vec<u64>,
    targets: Vec<ObjectIndex>,
    #[serde(default)]
    interior: Vec<u64>,
}

impl Default for Edges {
    fn default() -> Self {
        Edges {
            offsets: vec![0],
            targets: Vec::new(),
            interior: Vec::new(),
        }
    }
}

impl Edges {
    pub fn with_capacity(objects: usize, edges: usize) -> Self {
        let mut offsets = Vec::with_capacity(objects + 1);
        offsets.push(0);
        Edges {
            offsets,
            targets: Vec::with_capacity(edges),
            interior: Vec::new(),
        }
    }

    /// Appends the references of the next object (objects are added in index order), all
    /// start edges.
    pub fn push(&mut self, refs: impl IntoIterator<Item = ObjectIndex>) {
        self.targets.extend(refs);
        self.offsets.push(self.targets.len() as u64);
    }

    /// Appends the references of the next object with their kinds: `(target, interior)`.
    pub fn push_with_kinds(&mut self, refs: impl IntoIterator<Item = (ObjectIndex, bool)>) {
        for (target, interior) in refs {
            if interior {
                self.set_interior(self.targets.len());
            }
            self.targets.push(target);
        }
        self.offsets.push(self.targets.len() as u64);
    }

    fn set_interior(&mut self, k: usize) {
        let word = k / 64;
        if self.interior.len() <= word {
            self.interior.resize(word + 1, 0);
        }
        self.interior[word] |= 1 << (k % 64);
    }

    /// Whether reference `k` (an index into [`Edges::targets`]) is an interior edge.
    #[inline]
    pub fn is_interior(&self, k: usize) -> bool {
        self.interior
            .get(k / 64)
            .is_some_and(|w| (w >> (k % 64)) & 1 != 0)
    }

    /// The positions in [`Edges::targets`] of the references of `o`.
    pub fn range(&self, o: ObjectIndex) -> std::ops::Range<usize> {
        self.offsets[o as usize] as usize..self.offsets[o as usize + 1] as usize
    }

    /// The references of `o` with their kinds: `(target, interior)`.
    pub fn of_with_kinds(
        &self,
        o: ObjectIndex,
    ) -> impl ExactSizeIterator<Item = (ObjectIndex, bool)> + '_ {
        self.range(o)
            .map(|k| (self.targets[k], self.is_interior(k)))
    }

    /// Number of interior references.
    pub fn interior_count(&self) -> usize {
        self.interior.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The interior bits, one per reference, as stored (see the type's docs).
    pub fn interior_bits(&self) -> &[u64] {
        &self.interior
    }

    /// Replaces the interior bits (as [`Edges::interior_bits`] gives them); trailing zero
    /// words are dropped. [`HeapGraph::validate`] refuses bits past the last reference.
    pub fn set_interior_bits(&mut self, mut bits: Vec<u64>) {
        while bits.last() == Some(&0) {
            bits.pop();
        }
        self.interior = bits;
    }

    /// Number of objects whose references were pushed.
    pub fn sources(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Total number of references.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The objects `o` refers to.
    pub fn of(&self, o: ObjectIndex) -> &[ObjectIndex] {
        let start = self.offsets[o as usize] as usize;
        let end = self.offsets[o as usize + 1] as usize;
        &self.targets[start..end]
    }

    pub fn targets(&self) -> &[ObjectIndex] {
        &self.targets
    }

    /// Where each object's references start in [`Edges::targets`], then their count.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }
}

/// Why a graph is not well formed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GraphError {
    #[error("object columns have different lengths ({0})")]
    ColumnLengths(String),
    #[error("edges list {sources} objects but there are {objects}")]
    EdgeSources { sources: usize, objects: usize },
    #[error("edge offsets are not monotonic at object {0}")]
    EdgeOffsets(usize),
    #[error("{holder} refers to object index {target}, but there are only {objects} objects")]
    DanglingRef {
        holder: String,
        target: ObjectIndex,
        objects: usize,
    },
    #[error("object {object} names site index {site}, but there are only {sites} sites")]
    DanglingSite {
        object: usize,
        site: SiteIndex,
        sites: usize,
    },
    #[error("thread id {0} appears twice")]
    DuplicateThread(u32),
    #[error("more than {} objects", u32::MAX - 1)]
    TooManyObjects,
    #[error("interior bits name reference {0}, past the last reference")]
    InteriorBits(usize),
    #[error("{holder} lists object index {target} as interior but does not refer to it")]
    InteriorNotReferred { holder: String, target: ObjectIndex },
}

/// A whole snapshot: the process, its allocation sites, its live blocks and their
/// references, its threads with their frames, and the globals root.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapGraph {
    pub process: Process,
    pub sites: Vec<Site>,
    objects: Objects,
    edges: Edges,
    pub threads: Vec<Thread>,
    /// Objects referenced from the process-wide roots (modules' writable data, mapped
    /// memory).
    pub globals: Vec<ObjectIndex>,
    /// The members of `globals` that only interior words point into, ascending.
    #[serde(default)]
    pub globals_interior: Vec<ObjectIndex>,
}

impl HeapGraph {
    /// Assembles a graph and checks its invariants, so that every consumer may index
    /// without checking again.
    pub fn new(
        process: Process,
        sites: Vec<Site>,
        objects: Objects,
        edges: Edges,
        threads: Vec<Thread>,
        globals: Vec<ObjectIndex>,
    ) -> Result<Self, GraphError> {
        let graph = HeapGraph {
            process,
            sites,
            objects,
            edges,
            threads,
            globals,
            globals_interior: Vec::new(),
        };
        graph.validate()?;
        Ok(graph)
    }

    /// Sets which of the globals' references are interior (a subset of `globals`), checked.
    pub fn with_globals_interior(
        mut self,
        mut interior: Vec<ObjectIndex>,
    ) -> Result<Self, GraphError> {
        interior.sort_unstable();
        interior.dedup();
        self.globals_interior = interior;
        // The rest of the graph was checked when it was made.
        validate_roots(
            self.objects.len(),
            &self.globals,
            &self.globals_interior,
            &self.threads,
        )?;
        Ok(self)
    }

    /// Checks every invariant; decoders call it on whatever they read.
    pub fn validate(&self) -> Result<(), GraphError> {
        let o = &self.objects;
        let n = o.len();
        if n >= u32::MAX as usize {
            return Err(GraphError::TooManyObjects);
        }
        let lengths = [
            o.addr.len(),
            o.size.len(),
            o.site.len(),
            o.thread.len(),
            o.seq.len(),
        ];
        if lengths.iter().any(|&l| l != n) {
            return Err(GraphError::ColumnLengths(format!(
                "id {n}, addr {}, size {}, site {}, thread {}, seq {}",
                lengths[0], lengths[1], lengths[2], lengths[3], lengths[4]
            )));
        }
        if self.edges.offsets.is_empty() || self.edges.sources() != n {
            return Err(GraphError::EdgeSources {
                sources: self.edges.offsets.len().saturating_sub(1),
                objects: n,
            });
        }
        if self.edges.offsets[0] != 0
            || *self.edges.offsets.last().unwrap_or(&0) != self.edges.targets.len() as u64
        {
            return Err(GraphError::EdgeOffsets(0));
        }
        for (i, pair) in self.edges.offsets.windows(2).enumerate() {
            if pair[0] > pair[1] {
                return Err(GraphError::EdgeOffsets(i));
            }
        }
        dangling(n, &|| "an object".to_string(), &self.edges.targets)?;
        if self.edges.interior.len() * 64 > self.edges.targets.len()
            && let Some(k) = (self.edges.targets.len()..self.edges.interior.len() * 64)
                .find(|&k| self.edges.is_interior(k))
        {
            return Err(GraphError::InteriorBits(k));
        }
        validate_roots(n, &self.globals, &self.globals_interior, &self.threads)?;
        if let Some((object, &site)) = o
            .site
            .iter()
            .enumerate()
            .find(|&(_, &s)| s != NO_SITE && s as usize >= self.sites.len())
        {
            return Err(GraphError::DanglingSite {
                object,
                site,
                sites: self.sites.len(),
            });
        }
        Ok(())
    }

    pub fn objects(&self) -> &Objects {
        &self.objects
    }

    pub fn edges(&self) -> &Edges {
        &self.edges
    }

    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// Sum of the sizes of all objects.
    pub fn total_bytes(&self) -> u64 {
        self.objects.size.iter().sum()
    }

    /// The allocation-site label of an object, `?` when unknown.
    pub fn site_label(&self, o: ObjectIndex) -> &str {
        match self.objects.site[o as usize] {
            NO_SITE => "?",
            s => self.sites[s as usize].label(),
        }
    }

    /// Index of the thread with this id.
    pub fn thread_index(&self, tid: u32) -> Option<usize> {
        self.threads.iter().position(|t| t.tid == tid)
    }

    /// Index of the object starting at or containing `addr`, if any (objects are
    /// searched in address order; `O(n)` when unsorted — callers with many lookups build
    /// their own index).
    pub fn object_at(&self, addr: u64) -> Option<ObjectIndex> {
        let o = &self.objects;
        (0..o.len()).find_map(|i| {
            let start = o.addr[i];
            let end = start + o.size[i].max(1);
            (start..end).contains(&addr).then_some(i as ObjectIndex)
        })
    }
}

/// A reference of `holder` past the `n` objects, if any.
fn dangling(n: usize, holder: &dyn Fn() -> String, refs: &[ObjectIndex]) -> Result<(), GraphError> {
    match refs.iter().find(|&&t| t as usize >= n) {
        Some(&target) => Err(GraphError::DanglingRef {
            holder: holder(),
            target,
            objects: n,
        }),
        None => Ok(()),
    }
}

/// The invariants of a graph of `n` objects that concern its roots: the globals and the
/// threads' frames refer to objects, their interior references are among their references,
/// thread ids are unique. [`HeapGraph::validate`] checks them, and so does the binary codec's
/// check of a file without building its graph.
pub(crate) fn validate_roots(
    n: usize,
    globals: &[ObjectIndex],
    globals_interior: &[ObjectIndex],
    threads: &[Thread],
) -> Result<(), GraphError> {
    dangling(n, &|| "globals".to_string(), globals)?;
    let subset = |holder: &dyn Fn() -> String, interior: &[ObjectIndex], refs: &[ObjectIndex]| {
        if interior.is_empty() {
            return Ok(());
        }
        let mut sorted = refs.to_vec();
        sorted.sort_unstable();
        match interior.iter().find(|t| sorted.binary_search(t).is_err()) {
            Some(&target) => Err(GraphError::InteriorNotReferred {
                holder: holder(),
                target,
            }),
            None => Ok(()),
        }
    };
    subset(&|| "globals".to_string(), globals_interior, globals)?;
    let mut tids = std::collections::HashSet::with_capacity(threads.len());
    for t in threads {
        if !tids.insert(t.tid) {
            return Err(GraphError::DuplicateThread(t.tid));
        }
        for (i, f) in t.frames.iter().enumerate() {
            dangling(n, &|| format!("thread {} frame {i}", t.tid), &f.refs)?;
            subset(
                &|| format!("thread {} frame {i}", t.tid),
                &f.interior,
                &f.refs,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_objects() -> (Objects, Edges) {
        let mut objects = Objects::default();
        let mut edges = Edges::default();
        for id in 1..=2 {
            objects.push(ObjectRecord {
                id,
                addr: id * 0x100,
                size: 16,
                site: NO_SITE,
                ..Default::default()
            });
        }
        edges.push([1]);
        edges.push([]);
        (objects, edges)
    }

    #[test]
    fn a_well_formed_graph_is_accepted() {
        let (objects, edges) = two_objects();
        let g =
            HeapGraph::new(Process::default(), vec![], objects, edges, vec![], vec![0]).unwrap();
        assert_eq!(g.edges().of(0), &[1]);
        assert_eq!(g.edges().of(1), &[] as &[u32]);
        assert_eq!(g.total_bytes(), 32);
        assert_eq!(g.object_at(0x208), Some(1));
        assert_eq!(g.object_at(0x210), None);
    }

    #[test]
    fn a_dangling_reference_is_refused() {
        let (objects, edges) = two_objects();
        let err = HeapGraph::new(Process::default(), vec![], objects, edges, vec![], vec![7])
            .unwrap_err();
        assert_eq!(
            err,
            GraphError::DanglingRef {
                holder: "globals".into(),
                target: 7,
                objects: 2
            }
        );
    }

    #[test]
    fn a_duplicate_thread_is_refused() {
        let (objects, edges) = two_objects();
        let t = Thread {
            tid: 3,
            ..Default::default()
        };
        let err = HeapGraph::new(
            Process::default(),
            vec![],
            objects,
            edges,
            vec![t.clone(), t],
            vec![],
        )
        .unwrap_err();
        assert_eq!(err, GraphError::DuplicateThread(3));
    }
}
