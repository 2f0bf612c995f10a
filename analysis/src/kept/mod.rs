//! A kept snapshot: everything drill-down asks of one analysed heap graph, in little memory.
//!
//! The agent keeps its latest snapshot inside the very process it describes, so what it keeps
//! must cost that process little: a [`Kept`] holds, per heap block, its address, size, site,
//! thread, sequence number, outgoing references, holder slot and dominator as [`Packed`]
//! columns (a few bytes each, see `packed`); per group its entry, size, member count, sharer
//! set and referents, the sharer sets interned (a million groups shared by the same two
//! threads hold one set); threads, frames and sites as they are (they are few). No per-group
//! or per-object heap vector: a group's members are found by one pass over the slot column
//! when asked (a few milliseconds for millions of blocks), an object's referrers by one pass
//! over the references.
//!
//! A `Kept` is made once from a [`HeapGraph`] and its [`Analysis`] ([`Kept::new`]), packed
//! straight from the graph's columns and the analysis's per-object and per-group columns (no
//! per-group record is made on the way), after which both can be dropped: every figure of docs/reference.md §3 and every question the
//! protocol asks is answered from it alone, and it writes the graph back as a binary snapshot
//! file. It travels between processes as bytes ([`Kept::encode`], [`Kept::decode`], see
//! `kept_codec`), decoded with fallible allocations so that a process short of memory refuses
//! instead of aborting.
//!
//! This module owns the kept form and its invariants. It computes nothing that `attribution`
//! decides (classes, groups, sharers); it only stores and reads them back.

use crate::attribution::{Analysis, UnknownThread, released_set, shared_within};
use crate::both::{Both, OneThread};
use crate::figures::{
    GroupId, GroupKind, Holder, Leaks, ObjectClass, Sharer, ThreadFigures, Totals,
};
use crate::graph::{HeapGraph, NO_SITE, ObjectIndex, ObjectRecord, Process, Site, Thread};
use crate::packed::{Packed, PackedCsr};

/// Group kinds in id order, as indices of [`GroupTable::kind_start`].
const KINDS: [GroupKind; 3] = [
    GroupKind::FrameShared,
    GroupKind::ThreadShared,
    GroupKind::GlobalOnly,
];

/// The groups of a snapshot, in id order `F1..`, `T1..`, `G1..`, as columns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupTable {
    /// First group index of each kind, then the group count.
    pub(crate) kind_start: [u32; 4],
    pub(crate) entries: Packed,
    pub(crate) sizes: Packed,
    pub(crate) members: Packed,
    /// Index in `sets` of each group's sharers.
    pub(crate) sharers: Packed,
    /// The distinct sharer sets, each ascending (threads by tid, globals last).
    pub(crate) sets: Vec<Vec<Sharer>>,
    /// Per set: bytes of the thread-shared groups with exactly that set (their release).
    pub(crate) set_bytes: Vec<u64>,
    /// Group indices each group refers to directly, ascending.
    pub(crate) refs: PackedCsr,
}

/// One group as read from a [`GroupTable`].
#[derive(Clone, Copy, Debug)]
pub struct GroupView<'a> {
    pub id: GroupId,
    /// The entry object.
    pub entry: ObjectIndex,
    /// Sum of the members' sizes.
    pub size: u64,
    /// Number of members.
    pub objects: u64,
    /// Threads (and globals) that reach the group, ascending, globals last.
    pub sharers: &'a [Sharer],
    table: &'a GroupTable,
    index: u32,
}

impl GroupView<'_> {
    /// Groups a member of this group refers to directly, ascending.
    pub fn refs(&self) -> impl ExactSizeIterator<Item = GroupId> + '_ {
        self.table
            .refs
            .of(self.index as usize)
            .map(|g| self.table.id(g as u32))
    }
}

impl GroupTable {
    /// Packs the analysis's groups, straight from its columns (no per-group record is made),
    /// with their referents `refs` as packed by [`GroupTable::refs_of`] (the caller packs them
    /// at the same time, on the other side of the split, passes an empty `PackedCsr` here and
    /// sets `refs` afterwards).
    fn new(analysis: &Analysis, refs: PackedCsr) -> GroupTable {
        let count = analysis.group_count() as usize;
        let sharers = analysis.sharers();
        GroupTable {
            kind_start: analysis.group_starts(),
            entries: Packed::from_slice(analysis.group_entries()),
            sizes: Packed::new(count, |g| analysis.group_bytes(g as u32)),
            members: Packed::new(count, |g| analysis.group_objects(g as u32)),
            sharers: Packed::from_slice(&sharers.of_group),
            sets: sharers.sets.clone(),
            set_bytes: sharers.thread_shared_bytes.clone(),
            refs,
        }
    }

    /// The groups' referents, packed.
    fn refs_of(analysis: &Analysis) -> PackedCsr {
        let count = analysis.group_count() as usize;
        let (ref_offsets, ref_targets) = analysis.group_ref_lists();
        let base = ref_offsets[0];
        PackedCsr::from_columns(
            Packed::new(count + 1, |g| (ref_offsets[g] - base) as u64),
            Packed::from_slice(ref_targets),
        )
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.kind_start[3] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of group index `g`.
    pub fn id(&self, g: u32) -> GroupId {
        let k = (0..3).rev().find(|&k| g >= self.kind_start[k]).unwrap_or(0);
        GroupId {
            kind: KINDS[k],
            number: g - self.kind_start[k] + 1,
        }
    }

    /// The index of a group id, if the snapshot has that group.
    pub fn index(&self, id: GroupId) -> Option<u32> {
        let k = KINDS.iter().position(|&k| k == id.kind)?;
        let count = self.kind_start[k + 1] - self.kind_start[k];
        (id.number >= 1 && id.number <= count).then(|| self.kind_start[k] + id.number - 1)
    }

    /// Group index `g`.
    pub fn at(&self, g: u32) -> GroupView<'_> {
        let i = g as usize;
        GroupView {
            id: self.id(g),
            entry: self.entries.get_u32(i),
            size: self.sizes.get(i),
            objects: self.members.get(i),
            sharers: &self.sets[self.sharers.get(i) as usize],
            table: self,
            index: g,
        }
    }

    pub fn get(&self, id: GroupId) -> Option<GroupView<'_>> {
        self.index(id).map(|g| self.at(g))
    }

    /// Every group, in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = GroupView<'_>> + '_ {
        (0..self.len() as u32).map(|g| self.at(g))
    }

    /// The size of group index `g` (for sorting without building views).
    pub fn size_at(&self, g: u32) -> u64 {
        self.sizes.get(g as usize)
    }

    /// The distinct sharer sets.
    pub fn sharer_sets(&self) -> &[Vec<Sharer>] {
        &self.sets
    }

    /// Each distinct sharer set with the bytes of the thread-shared groups that have exactly
    /// that set (0 when only groups of other kinds have it).
    pub fn thread_shared_by_set(&self) -> impl Iterator<Item = (&[Sharer], u64)> + '_ {
        self.sets
            .iter()
            .zip(&self.set_bytes)
            .map(|(s, &b)| (s.as_slice(), b))
    }
}

/// The columns of a [`Kept`] that come from the graph alone (each block's id, address, size,
/// site, thread, sequence number and references), packed apart from the analysis's so that
/// the two can be made at the same time ([`Kept::analysed`] packs these beside the dominator
/// tree).
#[derive(Clone, Debug, Default)]
struct KeptObjects {
    ids: Option<Packed>,
    addrs: Packed,
    sizes: Packed,
    site: Packed,
    thread: Packed,
    seqs: Packed,
    edges: PackedCsr,
    edge_interior: Vec<u64>,
}

/// The columns of a [`Kept`] that come from the graph alone, packed before (or while) the
/// graph is analysed, so that they can travel while the analysis runs: the agent's scanning
/// child packs and sends them on a thread of their own ([`GraphColumns::encode`]) while its
/// other threads analyse, and the agent decodes them meanwhile; then come the analysis's
/// parts ([`Kept::encode_rest`]), and [`Kept::decode_split`] reads both as one `Kept`.
#[derive(Clone, Debug, Default)]
pub struct GraphColumns(KeptObjects);

impl GraphColumns {
    /// Packs the graph's object columns and references. Touches no thread-local storage and
    /// panics only when memory cannot be had.
    pub fn new(graph: &HeapGraph) -> GraphColumns {
        GraphColumns(KeptObjects::new(graph))
    }
}

impl KeptObjects {
    /// Packs the graph's object columns and references. Touches no thread-local storage
    /// and panics only when memory cannot be had.
    fn new(graph: &HeapGraph) -> KeptObjects {
        let cols = graph.objects();
        let n = graph.object_count();
        KeptObjects {
            ids: (cols.id != cols.seq).then(|| Packed::from_slice(&cols.id)),
            addrs: Packed::from_slice(&cols.addr),
            sizes: Packed::from_slice(&cols.size),
            site: Packed::new(n, |o| u64::from(cols.site[o].wrapping_add(1))),
            thread: Packed::from_slice(&cols.thread),
            seqs: Packed::from_slice(&cols.seq),
            edges: PackedCsr::from_columns(
                Packed::from_slice(graph.edges().offsets()),
                Packed::from_slice(graph.edges().targets()),
            ),
            edge_interior: graph.edges().interior_bits().to_vec(),
        }
    }
}

/// A kept snapshot (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    pub(crate) process: Process,
    pub(crate) sites: Vec<Site>,
    pub(crate) threads: Vec<Thread>,
    pub(crate) globals: Vec<ObjectIndex>,
    /// The members of `globals` only interior words point into, ascending.
    pub(crate) globals_interior: Vec<ObjectIndex>,
    pub(crate) figures: Vec<ThreadFigures>,
    pub(crate) totals: Totals,
    pub(crate) leaks: Leaks,
    /// First flat frame index of each thread, then the frame count.
    pub(crate) frame_base: Vec<u32>,
    pub(crate) objects: usize,
    /// `None` when every id equals the sequence number (the agent's blocks).
    pub(crate) ids: Option<Packed>,
    pub(crate) addrs: Packed,
    pub(crate) sizes: Packed,
    /// Site index + 1, 0 for [`NO_SITE`] (so that "no site" does not widen the column).
    pub(crate) site: Packed,
    pub(crate) thread: Packed,
    pub(crate) seqs: Packed,
    pub(crate) edges: PackedCsr,
    /// One bit per reference of `edges`: interior (as [`crate::Edges`] keeps them, trailing
    /// zero words dropped).
    pub(crate) edge_interior: Vec<u64>,
    /// One bit per object: possibly lost (trailing zero words dropped).
    pub(crate) possibly: Vec<u64>,
    /// Holder slot: flat frame when frame-proprietary, `frames + g` in group `g`, then the
    /// definitely and the indirectly lost slots.
    pub(crate) slots: Packed,
    /// Immediate dominator + 1 when that is an object, else 0.
    pub(crate) doms: Packed,
    pub(crate) groups: GroupTable,
}

impl Kept {
    /// Keeps `graph` analysed by `analysis` (which must be `Analysis::new(graph)`).
    pub fn new(graph: &HeapGraph, analysis: &Analysis) -> Kept {
        Kept::with_objects(graph, analysis, KeptObjects::new(graph), &OneThread)
    }

    /// Analyses `graph` and keeps it, the passes that need not wait for each other run by
    /// `both` (see `both`): the graph's own columns are packed beside the dominator tree's
    /// depth-first search, the analysis's in two halves. The same `Kept` as [`Kept::new`]; the
    /// analysis is returned for the caller to drop (or to leave to its exit).
    pub fn analysed(graph: &HeapGraph, both: &impl Both) -> (Kept, Analysis) {
        let (analysis, columns) = Analysis::with(graph, both, || KeptObjects::new(graph));
        let kept = Kept::with_objects(graph, &analysis, columns, both);
        (kept, analysis)
    }

    /// [`Kept::analysed`], and `during` given the graph's own columns as soon as they are
    /// packed (beside the depth-first search), on a thread of its own beside the rest of the
    /// analysis ([`Analysis::with_during`]): the agent's scanning child sends them to the
    /// agent there ([`GraphColumns::encode`]), and the rest once the analysis is done
    /// ([`Kept::encode_rest`]). Returns `during`'s result too.
    pub fn analysed_during<R: Send>(
        graph: &HeapGraph,
        both: &impl Both,
        during: impl FnOnce(&GraphColumns) -> R + Send,
    ) -> (Kept, Analysis, R) {
        let (analysis, columns, r) = Analysis::with_during(
            graph,
            both,
            || GraphColumns(KeptObjects::new(graph)),
            Some(during),
        );
        let r = r.expect("`during` runs when given");
        let kept = Kept::with_objects(graph, &analysis, columns.0, both);
        (kept, analysis, r)
    }

    /// [`Kept::new`] with the graph's columns already packed (`KeptObjects::new(graph)`).
    fn with_objects(
        graph: &HeapGraph,
        analysis: &Analysis,
        columns: KeptObjects,
        both: &impl Both,
    ) -> Kept {
        let n = graph.object_count();
        assert_eq!(columns.addrs.len(), n, "the columns are another graph's");
        let mut frame_base = Vec::with_capacity(graph.threads.len() + 1);
        let mut frames = 0u32;
        for t in &graph.threads {
            frame_base.push(frames);
            frames += t.frames.len() as u32;
        }
        frame_base.push(frames);
        let objects = graph.object_count() as ObjectIndex;
        // The per-object columns on both sides: the slots and the groups' own columns here,
        // the dominators and the groups' referents there (about as much work each).
        let ((slots, mut groups), (doms, group_refs)) = both.both(
            || {
                (
                    Packed::from_slice(analysis.slots()),
                    GroupTable::new(analysis, PackedCsr::default()),
                )
            },
            || {
                let doms = analysis.dominators();
                // Immediate dominators that are not objects (frames, threads, the roots) are 0.
                let packed = Packed::new(n, |o| match doms[o] {
                    d if d < objects => u64::from(d) + 1,
                    _ => 0,
                });
                (packed, GroupTable::refs_of(analysis))
            },
        );
        groups.refs = group_refs;
        both.pass_done("kept columns");
        let KeptObjects {
            ids,
            addrs,
            sizes,
            site,
            thread,
            seqs,
            edges,
            edge_interior,
        } = columns;
        Kept {
            process: graph.process.clone(),
            sites: graph.sites.clone(),
            threads: graph.threads.clone(),
            globals: graph.globals.clone(),
            globals_interior: graph.globals_interior.clone(),
            figures: analysis.threads().to_vec(),
            totals: analysis.totals(),
            leaks: analysis.leaks(),
            objects: n,
            ids,
            addrs,
            sizes,
            site,
            thread,
            seqs,
            edges,
            edge_interior,
            possibly: {
                let mut bits = analysis.possibly_bits().to_vec();
                while bits.last() == Some(&0) {
                    bits.pop();
                }
                bits
            },
            slots,
            doms,
            frame_base,
            groups,
        }
    }

    /// Memory held, in bytes (columns, sites, threads and frames).
    pub fn heap_bytes(&self) -> usize {
        self.heap_bytes_by_part().iter().map(|p| p.1).sum()
    }

    /// Where [`Kept::heap_bytes`] goes: each column and table with the bytes it holds, in a
    /// fixed order (what BENCHMARKS.md "What a kept snapshot holds" splits per object).
    pub fn heap_bytes_by_part(&self) -> [(&'static str, usize); 18] {
        let strings = |s: &String| s.capacity();
        let sites: usize = self
            .sites
            .iter()
            .map(|s| size_of::<Site>() + s.frames.iter().map(strings).sum::<usize>())
            .sum();
        let threads: usize = self
            .threads
            .iter()
            .map(|t| {
                size_of::<Thread>()
                    + t.name.capacity()
                    + t.frames
                        .iter()
                        .map(|f| {
                            size_of_val(f)
                                + f.function.capacity()
                                + f.module.capacity()
                                + (f.refs.capacity() + f.interior.capacity()) * 4
                        })
                        .sum::<usize>()
            })
            .sum();
        let figures: usize = self
            .figures
            .iter()
            .map(|t| {
                size_of::<ThreadFigures>()
                    + t.frames
                        .iter()
                        .map(|f| {
                            size_of_val(f)
                                + (f.frame_shared.capacity() + f.thread_shared.capacity())
                                    * size_of::<GroupId>()
                        })
                        .sum::<usize>()
            })
            .sum();
        let g = &self.groups;
        let sets = g
            .sets
            .iter()
            .map(|s| s.capacity() * size_of::<Sharer>() + size_of::<Vec<Sharer>>())
            .sum::<usize>()
            + g.set_bytes.capacity() * 8
            + g.sharers.heap_bytes();
        [
            ("ids", self.ids.as_ref().map_or(0, Packed::heap_bytes)),
            ("addrs", self.addrs.heap_bytes()),
            ("sizes", self.sizes.heap_bytes()),
            ("sites", self.site.heap_bytes()),
            ("threads", self.thread.heap_bytes()),
            ("seqs", self.seqs.heap_bytes()),
            ("edge offsets", self.edges.offsets.heap_bytes()),
            ("edge targets", self.edges.targets.heap_bytes()),
            (
                "edge and object bits",
                (self.edge_interior.capacity() + self.possibly.capacity()) * 8,
            ),
            ("slots", self.slots.heap_bytes()),
            ("dominators", self.doms.heap_bytes()),
            ("group entries", g.entries.heap_bytes()),
            (
                "group sizes and counts",
                g.sizes.heap_bytes() + g.members.heap_bytes(),
            ),
            ("group sharer sets", sets),
            ("group refs", g.refs.heap_bytes()),
            (
                "roots",
                threads + (self.globals.capacity() + self.globals_interior.capacity()) * 4,
            ),
            ("site table", sites),
            ("figures", figures + self.frame_base.capacity() * 4),
        ]
    }

    pub fn process(&self) -> &Process {
        &self.process
    }

    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// The threads with their frames (and each frame's references), in snapshot order.
    pub fn threads(&self) -> &[Thread] {
        &self.threads
    }

    /// Objects referenced from the globals root.
    pub fn globals(&self) -> &[ObjectIndex] {
        &self.globals
    }

    /// The members of [`Kept::globals`] that only interior words point into, ascending.
    pub fn globals_interior(&self) -> &[ObjectIndex] {
        &self.globals_interior
    }

    /// Whether reference `k` of [`Kept::all_edges`] (in that order) is an interior edge.
    pub fn is_interior_edge(&self, k: usize) -> bool {
        self.edge_interior
            .get(k / 64)
            .is_some_and(|w| (w >> (k % 64)) & 1 != 0)
    }

    /// The interior bits of the references, one per reference in [`Kept::all_edges`] order.
    pub fn interior_bits(&self) -> &[u64] {
        &self.edge_interior
    }

    /// The objects `o` refers to with their kinds: `(target, interior)`.
    pub fn edges_with_kinds(
        &self,
        o: ObjectIndex,
    ) -> impl ExactSizeIterator<Item = (ObjectIndex, bool)> + '_ {
        let range = self.edges.range(o as usize);
        range.map(|k| {
            (
                self.edges.target(k) as ObjectIndex,
                self.is_interior_edge(k),
            )
        })
    }

    /// Whether an object is possibly lost (reachable, but by no path of start edges).
    pub fn is_possibly_lost(&self, o: ObjectIndex) -> bool {
        crate::leaks::bit(&self.possibly, o)
    }

    /// The possibly lost objects, ascending.
    pub fn possibly_lost(&self) -> Vec<ObjectIndex> {
        let mut out = Vec::with_capacity(self.leaks.possibly_lost_objects as usize);
        for (w, &word) in self.possibly.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                out.push((w * 64) as ObjectIndex + word.trailing_zeros());
                word &= word - 1;
            }
        }
        out
    }

    /// One entry per thread of [`Kept::threads`], same order.
    pub fn figures(&self) -> &[ThreadFigures] {
        &self.figures
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    pub fn leaks(&self) -> Leaks {
        self.leaks
    }

    pub fn object_count(&self) -> usize {
        self.objects
    }

    /// The highest sequence number among the objects (those without one left out).
    pub fn last_seq(&self) -> Option<u64> {
        (0..self.objects)
            .map(|o| self.seqs.get(o))
            .filter(|&s| s != crate::graph::NO_SEQ)
            .max()
    }

    /// Index of the thread with this id.
    pub fn thread_index(&self, tid: u32) -> Option<usize> {
        self.threads.iter().position(|t| t.tid == tid)
    }

    /// Thread indices ranked by total descending, ties by tid ascending.
    pub fn ranking(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.figures.len()).collect();
        order.sort_by_key(|&t| {
            (
                std::cmp::Reverse(self.figures[t].total),
                self.figures[t].tid,
            )
        });
        order
    }

    pub fn size(&self, o: ObjectIndex) -> u64 {
        self.sizes.get(o as usize)
    }

    pub fn addr(&self, o: ObjectIndex) -> u64 {
        self.addrs.get(o as usize)
    }

    pub fn seq(&self, o: ObjectIndex) -> u64 {
        self.seqs.get(o as usize)
    }

    pub fn id(&self, o: ObjectIndex) -> u64 {
        match &self.ids {
            Some(ids) => ids.get(o as usize),
            None => self.seq(o),
        }
    }

    /// The allocation site index, or [`NO_SITE`].
    pub fn site(&self, o: ObjectIndex) -> u32 {
        (self.site.get(o as usize) as u32).wrapping_sub(1)
    }

    /// The allocating thread's id.
    pub fn thread(&self, o: ObjectIndex) -> u32 {
        self.thread.get(o as usize) as u32
    }

    /// One object's scalar fields.
    pub fn record(&self, o: ObjectIndex) -> ObjectRecord {
        ObjectRecord {
            id: self.id(o),
            addr: self.addr(o),
            size: self.size(o),
            site: self.site(o),
            thread: self.thread(o),
            seq: self.seq(o),
        }
    }

    /// The allocation-site label of an object, `?` when unknown.
    pub fn site_label(&self, o: ObjectIndex) -> &str {
        match self.site(o) {
            NO_SITE => "?",
            s => self.sites[s as usize].label(),
        }
    }

    /// The objects `o` refers to, in reference order.
    pub fn edges_of(&self, o: ObjectIndex) -> impl ExactSizeIterator<Item = ObjectIndex> + '_ {
        self.edges.of(o as usize).map(|t| t as ObjectIndex)
    }

    /// Number of references between objects.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// Every reference of every object, as `(holder, target)`, holders ascending.
    pub fn all_edges(&self) -> impl Iterator<Item = (ObjectIndex, ObjectIndex)> + '_ {
        let mut holder = 0usize;
        let mut end = if self.objects > 0 {
            self.edges.range(0).end
        } else {
            0
        };
        (0..self.edges.len()).map(move |k| {
            while k >= end {
                holder += 1;
                end = self.edges.range(holder).end;
            }
            (holder as ObjectIndex, self.edges.target(k) as ObjectIndex)
        })
    }

    pub fn groups(&self) -> &GroupTable {
        &self.groups
    }

    pub fn group(&self, id: GroupId) -> Option<GroupView<'_>> {
        self.groups.get(id)
    }

    fn frames(&self) -> u32 {
        *self.frame_base.last().unwrap_or(&0)
    }

    /// Thread and frame index of a flat frame.
    fn frame_position(&self, f: u32) -> (usize, usize) {
        let t = self.frame_base.partition_point(|&b| b <= f) - 1;
        (t, (f - self.frame_base[t]) as usize)
    }

    /// The class of one object.
    pub fn class_of(&self, o: ObjectIndex) -> ObjectClass {
        let s = self.slots.get_u32(o as usize);
        let frames = self.frames();
        let groups = self.groups.len() as u32;
        if s < frames {
            let (thread, frame) = self.frame_position(s);
            return ObjectClass::FrameProprietary { thread, frame };
        }
        if s == frames + groups {
            return ObjectClass::DefinitelyLost;
        }
        if s > frames + groups {
            return ObjectClass::IndirectlyLost;
        }
        let g = self.groups.at(s - frames);
        match g.id.kind {
            GroupKind::FrameShared => ObjectClass::FrameShared {
                thread: self
                    .thread_of_sharer(g.sharers)
                    .expect("a frame-shared group has its thread as sharer"),
            },
            GroupKind::ThreadShared => ObjectClass::ThreadShared,
            GroupKind::GlobalOnly => ObjectClass::GlobalOnly,
        }
    }

    fn thread_of_sharer(&self, sharers: &[Sharer]) -> Option<usize> {
        match sharers {
            [Sharer::Thread(tid)] => self.thread_index(*tid),
            _ => None,
        }
    }

    /// The group an object belongs to (None for frame-proprietary and unreachable objects).
    pub fn group_of(&self, o: ObjectIndex) -> Option<GroupId> {
        let s = self.slots.get_u32(o as usize);
        let g = s.checked_sub(self.frames())?;
        ((g as usize) < self.groups.len()).then(|| self.groups.id(g))
    }

    /// Immediate dominator of an object, when that is another object.
    pub fn dominator(&self, o: ObjectIndex) -> Option<ObjectIndex> {
        (self.doms.get(o as usize) as u32).checked_sub(1)
    }

    /// Members of a group, ascending object index (entry included); empty for an unknown id.
    pub fn members(&self, id: GroupId) -> Vec<ObjectIndex> {
        match self.groups.index(id) {
            Some(g) => self.slot_members(self.frames() + g),
            None => Vec::new(),
        }
    }

    /// Objects frame-proprietary to a frame, ascending (empty when the frame does not exist).
    pub fn frame_members(&self, thread: usize, frame: usize) -> Vec<ObjectIndex> {
        let (Some(&start), Some(&end)) =
            (self.frame_base.get(thread), self.frame_base.get(thread + 1))
        else {
            return Vec::new();
        };
        let f = start + frame as u32;
        if f >= end {
            return Vec::new();
        }
        self.slot_members(f)
    }

    /// Unreachable objects, ascending: definitely lost ones, then indirectly lost ones.
    pub fn leaked(&self) -> (Vec<ObjectIndex>, Vec<ObjectIndex>) {
        let definitely = self.frames() + self.groups.len() as u32;
        let (mut d, mut i) = (Vec::new(), Vec::new());
        for o in 0..self.objects {
            let s = self.slots.get_u32(o);
            if s == definitely {
                d.push(o as ObjectIndex);
            } else if s > definitely {
                i.push(o as ObjectIndex);
            }
        }
        (d, i)
    }

    /// Bytes freed if every thread in `tids` ended: `Σ size(o) : ∅ ≠ T(o) ⊆ S`
    /// (docs/reference.md §3 "Release").
    pub fn release(&self, tids: &[u32]) -> Result<u64, UnknownThread> {
        let (set, bytes) = released_set(&self.figures, tids)?;
        Ok(bytes + shared_within(&self.groups.sets, &self.groups.set_bytes, &set))
    }

    /// Groups the holder refers to directly (ascending).
    pub fn direct_referents(&self, holder: Holder) -> Vec<GroupId> {
        match holder {
            Holder::Frame { thread, frame } => self
                .figures
                .get(thread)
                .and_then(|t| t.frames.get(frame))
                .map(|f| {
                    let mut ids: Vec<GroupId> = f
                        .frame_shared
                        .iter()
                        .chain(&f.thread_shared)
                        .copied()
                        .collect();
                    ids.sort_unstable();
                    ids
                })
                .unwrap_or_default(),
            Holder::Group(id) => self
                .group(id)
                .map(|g| g.refs().collect())
                .unwrap_or_default(),
        }
    }

    /// Transitive closure of [`Kept::direct_referents`] (ascending), e.g. F3 → T1 → F2 gives
    /// [F2, F3, T1]. A group holder is not listed among its own developed referents even when
    /// a cycle of references leads back to it. One walk over the groups reached, with a bitset
    /// of all groups.
    pub fn developed_referents(&self, holder: Holder) -> Vec<GroupId> {
        let mut seen = vec![0u64; self.groups.len().div_ceil(64)];
        let mut reached: Vec<u32> = Vec::new();
        let mut todo: Vec<u32> = self
            .direct_referents(holder)
            .into_iter()
            .filter_map(|id| self.groups.index(id))
            .collect();
        while let Some(g) = todo.pop() {
            let (w, b) = (g as usize / 64, g % 64);
            if seen[w] & (1 << b) != 0 {
                continue;
            }
            seen[w] |= 1 << b;
            reached.push(g);
            todo.extend(self.groups.refs.of(g as usize).map(|r| r as u32));
        }
        if let Holder::Group(id) = holder
            && let Some(g) = self.groups.index(id)
        {
            reached.retain(|&r| r != g);
        }
        // Group indices ascend in id order (F, T, G, each by number).
        reached.sort_unstable();
        reached.into_iter().map(|g| self.groups.id(g)).collect()
    }
}

mod bulk;
mod codec;
pub use bulk::ObjectColumn;
pub use codec::{DecodeError, EncodedHead, KEPT_MAGIC, KEPT_VERSION, SPLIT_MAGIC};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::synthetic::{SyntheticConfig, generate};

    /// The first part of the split encoding.
    fn encoded(columns: &GraphColumns) -> Vec<u8> {
        let mut bytes = Vec::new();
        columns.encode(&mut bytes).unwrap();
        bytes
    }

    /// Every answer of the kept form equals the graph's and the analysis's.
    fn agrees(graph: &HeapGraph) {
        let analysis = Analysis::new(graph);
        let k = Kept::new(graph, &analysis);
        // The same, whether the passes that may run at once do or not.
        assert!(Kept::analysed(graph, &crate::ScopedThreads).0 == k);
        assert!(Kept::analysed(graph, &OneThread).0 == k);
        // And with the graph's own columns given to a third thread as soon as they are packed,
        // as the agent's scanning child does (it sends them there, the rest after).
        for during in [
            Kept::analysed_during(graph, &crate::ScopedThreads, encoded),
            Kept::analysed_during(graph, &OneThread, encoded),
        ] {
            let (apart, _, mut bytes) = during;
            assert!(apart == k);
            apart.encode_rest(&mut bytes).unwrap();
            assert!(Kept::decode_split(&mut bytes.as_slice()).unwrap() == k);
        }
        let n = graph.object_count();
        assert_eq!(k.object_count(), n);
        assert_eq!(k.totals(), analysis.totals());
        assert_eq!(k.leaks(), analysis.leaks());
        assert_eq!(k.figures(), analysis.threads());
        assert_eq!(k.ranking(), analysis.ranking());
        // What the agent reads of a kept snapshot beside the answers: its boundary, its
        // per-site growth and the policy's shared bytes per sharer set.
        let seqs = &graph.objects().seq;
        let last = seqs
            .iter()
            .copied()
            .filter(|&s| s != crate::graph::NO_SEQ)
            .max();
        assert_eq!(k.last_seq(), last);
        assert_eq!(
            crate::views::growth::live_by_site_kept(&k),
            crate::views::growth::live_by_site(graph)
        );
        let mut by_set: HashMap<Vec<Sharer>, u64> = HashMap::new();
        for g in analysis.groups() {
            let bytes = by_set.entry(g.sharers.clone()).or_default();
            if g.id.kind == GroupKind::ThreadShared {
                *bytes += g.size;
            }
        }
        let kept_sets: HashMap<Vec<Sharer>, u64> = k
            .groups()
            .thread_shared_by_set()
            .map(|(s, b)| (s.to_vec(), b))
            .collect();
        assert_eq!(kept_sets, by_set);
        for o in 0..n as ObjectIndex {
            assert_eq!(k.record(o), graph.objects().record(o), "object {o}");
            assert_eq!(k.class_of(o), analysis.class_of(o), "object {o}");
            assert_eq!(k.group_of(o), analysis.group_of(o), "object {o}");
            assert_eq!(k.dominator(o), analysis.dominator(o), "object {o}");
            assert_eq!(k.site_label(o), graph.site_label(o));
            assert!(k.edges_of(o).eq(graph.edges().of(o).iter().copied()));
        }
        let edges: Vec<_> = k.all_edges().collect();
        let expected: Vec<_> = (0..n as ObjectIndex)
            .flat_map(|o| graph.edges().of(o).iter().map(move |&t| (o, t)))
            .collect();
        assert_eq!(edges, expected);
        assert_eq!(k.groups().len(), analysis.groups().len());
        for (view, g) in k.groups().iter().zip(analysis.groups()) {
            assert_eq!(view.id, g.id);
            assert_eq!(k.groups().index(g.id).map(|i| k.groups().id(i)), Some(g.id));
            assert_eq!(
                (view.entry, view.size, view.objects, view.sharers),
                (g.entry, g.size, g.objects, g.sharers.as_slice())
            );
            assert!(view.refs().eq(g.refs.iter().copied()), "{}", g.id);
            assert_eq!(k.members(g.id), analysis.members(g.id), "{}", g.id);
            assert_eq!(
                k.developed_referents(Holder::Group(g.id)),
                analysis.developed_referents(Holder::Group(g.id)),
                "{}",
                g.id
            );
        }
        for (t, thread) in graph.threads.iter().enumerate() {
            for f in 0..thread.frames.len() + 1 {
                let frame = Holder::Frame {
                    thread: t,
                    frame: f,
                };
                assert_eq!(k.frame_members(t, f), analysis.frame_members(t, f));
                assert_eq!(
                    k.developed_referents(frame),
                    analysis.developed_referents(frame)
                );
                let mut direct = analysis.direct_referents(frame);
                direct.sort_unstable();
                assert_eq!(k.direct_referents(frame), direct);
            }
        }
        let (d, i) = analysis.leaked();
        assert_eq!(k.leaked(), (d.to_vec(), i.to_vec()));
        let tids: Vec<u32> = graph.threads.iter().map(|t| t.tid).collect();
        for size in 0..=tids.len().min(4) {
            for start in 0..tids.len() {
                let set: Vec<u32> = tids
                    .iter()
                    .cycle()
                    .skip(start)
                    .take(size)
                    .copied()
                    .collect();
                assert_eq!(k.release(&set), analysis.release(&set), "{set:?}");
            }
        }
        assert_eq!(k.release(&[u32::MAX]), Err(UnknownThread(u32::MAX)));
        let (mut from_graph, mut from_kept) = (Vec::new(), Vec::new());
        crate::snapshot::write_binary(graph, &mut from_graph).unwrap();
        crate::snapshot::write_binary_kept(&k, &mut from_kept).unwrap();
        assert!(
            from_kept == from_graph,
            "the kept graph writes the same file"
        );
    }

    #[test]
    fn the_kept_form_answers_like_the_graph_and_its_analysis() {
        for (objects, threads, frames, seed) in [(0, 0, 0, 1), (300, 3, 4, 2), (5_000, 6, 5, 3)] {
            let graph = generate(&SyntheticConfig::new(objects, threads, frames).seed(seed));
            agrees(&graph);
            agrees(&crate::synthetic::with_interior_edges(&graph, 3));
        }
    }

    #[test]
    fn interior_edges_and_possibly_lost_blocks_are_kept() {
        let graph = crate::synthetic::with_interior_edges(
            &generate(&SyntheticConfig::new(5_000, 6, 5).seed(4)),
            3,
        );
        let analysis = Analysis::new(&graph);
        let k = Kept::new(&graph, &analysis);
        assert!(graph.edges().interior_count() > 0);
        assert!(k.leaks().possibly_lost_objects > 0, "{:?}", k.leaks());
        assert_eq!(k.possibly_lost(), analysis.possibly_lost());
        assert_eq!(k.globals_interior(), graph.globals_interior.as_slice());
        for o in 0..graph.object_count() as ObjectIndex {
            assert!(k.edges_with_kinds(o).eq(graph.edges().of_with_kinds(o)));
        }
    }

    #[test]
    fn objects_keep_in_a_few_bytes_each() {
        let graph = generate(&SyntheticConfig::new(200_000, 64, 16));
        let k = Kept::new(&graph, &Analysis::new(&graph));
        let per_object = k.heap_bytes() / graph.object_count();
        // Four references per object here: ids, columns and references fit well under 48.
        assert!(per_object < 48, "{per_object} bytes per object");
    }
}
