//! The exact attribution of every heap byte to threads and frames (docs/reference.md §3).
//!
//! [`Analysis::new`] builds the dominator tree of the heap graph under a super-root —
//! super-root → thread nodes and the globals node → frame nodes → objects — and reads every
//! figure off it:
//! - an object's class is decided by its nearest dominator that is not an object: a frame
//!   `f` makes it frame-proprietary to `f` (every root reaching it is `f`), a thread node
//!   frame-shared, the globals node global-only, the super-root thread-shared, and no
//!   dominator at all (unreached) a leak;
//! - groups are the objects whose immediate dominator is a thread, the super-root or the
//!   globals, with their dominator subtrees; their sharers come from the small graph of
//!   holders (see `groups`), never from per-object sets;
//! - release of a thread set needs only per-thread proprietary bytes and the sharers of the
//!   thread-shared groups.
//!
//! Unreached objects are split into definitely and indirectly lost, and reached ones marked
//! possibly lost, by `leaks` (docs/reference.md §3 "Leak classes"): one definitely lost block
//! per lost structure, its lowest-address member that nothing else lost points into.
//!
//! What is kept per object is three `u32`s (immediate dominator, holder slot, and the
//! member lists); per group, columns: its bytes, its interned sharer set, and its referents
//! in one adjacency list (`Sharers`, `referents`). No group owns a vector: [`Group`] records,
//! two small vectors each, are made only when [`Analysis::groups`] is asked, because a heap of
//! millions of small groups (a hash table's entries) would spend more on them than on
//! everything else, and the kept form (`kept`) packs the columns directly. Every temporary of
//! the computation is dropped before `new` returns.
//! This module computes; it must never read or write files, nor know the wire protocol.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use thiserror::Error;

use crate::both::{Both, OneThread};
use crate::dominators::{self, Csr, DomTree, NONE, Successors};
use crate::figures::{
    FrameFigures, Group, GroupId, GroupKind, Holder, Leaks, ObjectClass, Sharer, ThreadFigures,
    Totals,
};
use crate::graph::{HeapGraph, ObjectIndex};
use crate::groups::{self, FRAME_SHARED, GLOBAL_ONLY, Numbering, SlotMembers, THREAD_SHARED};
use crate::leaks;

/// A thread id that is not in the snapshot.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown thread id {0}")]
pub struct UnknownThread(pub u32);

/// The first half of a release, shared by every form of an analysed snapshot: the threads of
/// `tids` sorted and deduplicated, and the bytes they hold alone (each must be one of `threads`).
/// What they share only among themselves is added by the caller, from its own group form.
pub(crate) fn released_set(
    threads: &[ThreadFigures],
    tids: &[u32],
) -> Result<(Vec<u32>, u64), UnknownThread> {
    let mut set: Vec<u32> = tids.to_vec();
    set.sort_unstable();
    set.dedup();
    let mut proprietary = 0;
    for &tid in &set {
        let thread = threads
            .iter()
            .find(|f| f.tid == tid)
            .ok_or(UnknownThread(tid))?;
        proprietary += thread.proprietary;
    }
    Ok((set, proprietary))
}

/// Hashes sharer sets one word at a time with a multiply (a set is interned per thread-shared
/// component, and components can be millions; std's SipHash was a visible part of it). The
/// sets are the engine's own, not chosen by anyone.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_u64(u64::from(b)));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

/// Bytes the thread-shared groups of `sets` free when the threads of `released` (sorted) end:
/// those of every set made of released threads only.
pub(crate) fn shared_within(
    sets: &[Vec<Sharer>],
    thread_shared_bytes: &[u64],
    released: &[u32],
) -> u64 {
    sets.iter()
        .zip(thread_shared_bytes)
        .filter(|(sharers, _)| {
            sharers.iter().all(|s| match s {
                Sharer::Thread(tid) => released.binary_search(tid).is_ok(),
                Sharer::Globals => false,
            })
        })
        .map(|(_, &bytes)| bytes)
        .sum()
}

/// Where the non-object nodes sit in the dominator computation's node ids: objects keep
/// their index, then come the globals node, one node per thread, one per frame (threads'
/// frames one after another, "flat" frame indices) and the super-root last.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub objects: u32,
    pub threads: u32,
    /// First flat frame index of each thread, then the frame count.
    frame_base: Vec<u32>,
    /// Thread index of each flat frame.
    frame_thread: Vec<u32>,
}

/// What a node id stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Object(ObjectIndex),
    Globals,
    Thread(u32),
    /// A flat frame index.
    Frame(u32),
    SuperRoot,
}

impl Layout {
    fn new(graph: &HeapGraph) -> Layout {
        let mut frame_base = Vec::with_capacity(graph.threads.len() + 1);
        let mut frame_thread = Vec::new();
        for (t, thread) in graph.threads.iter().enumerate() {
            frame_base.push(frame_thread.len() as u32);
            frame_thread.extend(std::iter::repeat_n(t as u32, thread.frames.len()));
        }
        frame_base.push(frame_thread.len() as u32);
        let total = graph.object_count() as u64
            + graph.threads.len() as u64
            + frame_thread.len() as u64
            + 2;
        assert!(
            total < NONE as u64,
            "too many objects, threads and frames for u32 ids"
        );
        Layout {
            objects: graph.object_count() as u32,
            threads: graph.threads.len() as u32,
            frame_base,
            frame_thread,
        }
    }

    pub fn frames(&self) -> u32 {
        self.frame_thread.len() as u32
    }

    fn globals(&self) -> u32 {
        self.objects
    }

    fn thread(&self, t: u32) -> u32 {
        self.objects + 1 + t
    }

    fn frame(&self, f: u32) -> u32 {
        self.objects + 1 + self.threads + f
    }

    fn super_root(&self) -> u32 {
        self.objects + 1 + self.threads + self.frames()
    }

    pub fn node(&self, v: u32) -> Node {
        if v < self.objects {
            Node::Object(v)
        } else if v == self.globals() {
            Node::Globals
        } else if v < self.frame(0) {
            Node::Thread(v - self.thread(0))
        } else if v < self.super_root() {
            Node::Frame(v - self.frame(0))
        } else {
            Node::SuperRoot
        }
    }

    /// Thread index and frame index within the thread of a flat frame index.
    pub fn frame_position(&self, f: u32) -> (usize, usize) {
        let t = self.frame_thread[f as usize];
        (t as usize, (f - self.frame_base[t as usize]) as usize)
    }

    /// Flat index of a thread's frame, if both exist.
    fn flat_frame(&self, thread: usize, frame: usize) -> Option<u32> {
        let start = *self.frame_base.get(thread)?;
        let end = *self.frame_base.get(thread + 1)?;
        let f = start.checked_add(u32::try_from(frame).ok()?)?;
        (f < end).then_some(f)
    }
}

/// The heap graph with its roots, as the dominator computation walks it. Objects' edges
/// are read in place; only the roots' few edges are copied.
struct RootedHeap<'g> {
    graph: &'g HeapGraph,
    objects: u32,
    /// Successors of the nodes from the globals node on.
    roots: Csr,
}

impl<'g> RootedHeap<'g> {
    fn new(graph: &'g HeapGraph, layout: &Layout) -> Self {
        let mut roots = Csr::default();
        roots.push(graph.globals.iter().copied());
        for t in 0..layout.threads {
            let (start, end) = (
                layout.frame_base[t as usize],
                layout.frame_base[t as usize + 1],
            );
            roots.push((start..end).map(|f| layout.frame(f)));
        }
        for thread in &graph.threads {
            for frame in &thread.frames {
                roots.push(frame.refs.iter().copied());
            }
        }
        roots.push(
            (0..layout.threads)
                .map(|t| layout.thread(t))
                .chain([layout.globals()]),
        );
        RootedHeap {
            graph,
            objects: layout.objects,
            roots,
        }
    }
}

impl Successors for RootedHeap<'_> {
    fn node_count(&self) -> usize {
        self.objects as usize + self.roots.node_count()
    }

    fn successors(&self, v: u32) -> &[u32] {
        if v < self.objects {
            self.graph.edges().of(v)
        } else {
            self.roots.successors(v - self.objects)
        }
    }
}

/// Every figure of docs/reference.md §3 for one heap graph.
#[derive(Clone, Debug)]
pub struct Analysis {
    layout: Layout,
    /// Immediate dominator of each object as a node id ([`Layout::node`]), or [`NONE`].
    idom: Vec<u32>,
    /// Holder slot of each object: its flat frame when frame-proprietary, `frames + g` when
    /// a member of group `g`, or one of the two leak slots after the groups.
    slot: Vec<u32>,
    /// One bit per object: possibly lost (reached, but by no path of start edges).
    possibly: Vec<u64>,
    members: SlotMembers,
    numbering: Numbering,
    threads: Vec<ThreadFigures>,
    /// Bytes held in each holder slot (frames, groups, the two leak slots).
    slot_bytes: Vec<u64>,
    /// The groups each holder slot refers to directly (frames first, then groups), group
    /// indices ascending.
    referents: Csr,
    sharers: Sharers,
    /// The groups as [`Group`] records, made only when asked ([`Analysis::groups`]): millions
    /// of groups with two small vectors each would cost more than everything else here, and
    /// the kept form reads the columns above instead.
    groups: OnceLock<Vec<Group>>,
    leaks: Leaks,
    totals: Totals,
}

/// The sharer set of every group, interned: a million groups shared by the same two threads
/// hold one set.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sharers {
    /// Index in `sets` of each group's sharers.
    pub of_group: Vec<u32>,
    /// The distinct sets, each ascending (threads by tid, globals last), in the order their
    /// first group comes in.
    pub sets: Vec<Vec<Sharer>>,
    /// Per set: bytes of the thread-shared groups with exactly that set (their release).
    pub thread_shared_bytes: Vec<u64>,
}

impl Sharers {
    /// Each group's set: its thread's for a frame-shared group, the globals' for a global-only
    /// one, its component's (`sharer_sets`) for a thread-shared one. Interned by content in
    /// group order, asked once per thread, component and the globals rather than per group.
    /// Adds the thread-shared groups' bytes to each sharer thread's `shared`, and the
    /// frame-shared groups' to their thread's `proprietary`.
    fn new(
        graph: &HeapGraph,
        numbering: &Numbering,
        group_bytes: &[u64],
        sharer_sets: &groups::SharerSets,
        by_tid: &[u32],
        threads: &mut [ThreadFigures],
    ) -> Sharers {
        let mut index: HashMap<Vec<Sharer>, u32, BuildHasherDefault<WordHasher>> =
            HashMap::default();
        let mut out = Sharers {
            of_group: Vec::with_capacity(numbering.len()),
            ..Sharers::default()
        };
        let mut intern = |set: Vec<Sharer>, out: &mut Sharers| -> u32 {
            *index.entry(set).or_insert_with_key(|set| {
                out.sets.push(set.clone());
                out.thread_shared_bytes.push(0);
                (out.sets.len() - 1) as u32
            })
        };
        let mut of_thread = vec![NONE; threads.len()];
        let mut of_globals = NONE;
        let mut of_component = vec![NONE; sharer_sets.components()];
        let mut by_bits: HashMap<&[u64], u32, BuildHasherDefault<WordHasher>> = HashMap::default();
        // Neighbouring components mostly have the same set: it is tried before hashing.
        let mut previous: (&[u64], u32) = (&[], NONE);
        let mut component_bytes = vec![0u64; sharer_sets.components()];
        let t0 = numbering.kind_start[THREAD_SHARED];
        for g in 0..numbering.len() as u32 {
            let size = group_bytes[g as usize];
            let s = match numbering.kind(g) {
                FRAME_SHARED => {
                    let t = numbering.thread[g as usize] as usize;
                    threads[t].proprietary += size;
                    if of_thread[t] == NONE {
                        of_thread[t] = intern(vec![Sharer::Thread(graph.threads[t].tid)], &mut out);
                    }
                    of_thread[t]
                }
                GLOBAL_ONLY => {
                    if of_globals == NONE {
                        of_globals = intern(vec![Sharer::Globals], &mut out);
                    }
                    of_globals
                }
                _ => {
                    let c = sharer_sets.set_of[(g - t0) as usize] as usize;
                    component_bytes[c] += size;
                    if of_component[c] == NONE {
                        // Components are many (a million in a hash table shared by a thread
                        // and the globals), their distinct sets few.
                        let bits = sharer_sets.words_of(c);
                        of_component[c] = if previous.0 == bits {
                            previous.1
                        } else {
                            match by_bits.get(bits) {
                                Some(&s) => s,
                                None => {
                                    let set = sharer_sets
                                        .members(c)
                                        .map(|bit| match by_tid.get(bit) {
                                            Some(&t) => {
                                                Sharer::Thread(graph.threads[t as usize].tid)
                                            }
                                            None => Sharer::Globals,
                                        })
                                        .collect();
                                    let s = intern(set, &mut out);
                                    by_bits.insert(bits, s);
                                    s
                                }
                            }
                        };
                        previous = (bits, of_component[c]);
                    }
                    out.thread_shared_bytes[of_component[c] as usize] += size;
                    of_component[c]
                }
            };
            out.of_group.push(s);
        }
        for (c, &bytes) in component_bytes.iter().enumerate() {
            for bit in sharer_sets.members(c) {
                if let Some(&t) = by_tid.get(bit) {
                    threads[t as usize].shared += bytes;
                }
            }
        }
        out
    }
}

impl Analysis {
    /// Runs the whole attribution: dominator tree, classes, per-thread and per-frame
    /// figures, groups, leaks. Linear in objects + edges except the dominator tree's
    /// near-linear passes; no recursion anywhere.
    pub fn new(graph: &HeapGraph) -> Analysis {
        Analysis::with(graph, &OneThread, || ()).0
    }

    /// [`Analysis::new`], with the passes that need not wait for each other run by `both`
    /// (see `both`), and `beside`, a caller's job that reads only the graph (the agent packs
    /// the graph's own kept columns there). On two threads: the dominator tree's depth-first
    /// search beside the start-edge reach and `beside`, then the tree's predecessor lists in
    /// two halves; no `both` nests inside another here (only [`Analysis::with_during`] nests,
    /// and its second job is the waiting one). The same figures whatever `both` does.
    pub fn with<S: Send>(
        graph: &HeapGraph,
        both: &impl Both,
        beside: impl FnOnce() -> S + Send,
    ) -> (Analysis, S) {
        let (analysis, s, _) = Analysis::with_during(graph, both, beside, None::<fn(&S)>);
        (analysis, s)
    }

    /// [`Analysis::with`], and `during`, a caller's job given `beside`'s result, on a thread
    /// of its own beside everything after the depth-first search, when `both` has two
    /// threads (else after it): a third thread, for a job that mostly waits (the agent's
    /// scanning child sends the graph's own kept columns there, so that the agent decodes them
    /// on the core the one-thread passes leave idle). Returns `during`'s result too. `during`
    /// is a `second` closure of `both`: it must keep their rules (see `both`).
    pub fn with_during<S: Send, R: Send>(
        graph: &HeapGraph,
        both: &impl Both,
        beside: impl FnOnce() -> S + Send,
        during: Option<impl FnOnce(&S) -> R + Send>,
    ) -> (Analysis, S, Option<R>) {
        let layout = Layout::new(graph);
        // The start-edge reach reads only the graph: beside the dominator tree's depth-first
        // search (the tree's predecessor fill then takes both threads).
        let heap = RootedHeap::new(graph, &layout);
        let (search, (possibly, beside)) =
            dominators::search_with(&heap, layout.super_root(), both, || {
                (leaks::start_reached(graph), beside())
            });
        let rest = || {
            let tree = dominators::finish(&heap, search, both);
            Analysis::after_search(graph, both, layout, tree, possibly)
        };
        match during {
            // `beside`'s result goes to `during`'s thread and comes back with its result
            // (nothing else reads it meanwhile), so `S` need only be `Send`.
            Some(during) => {
                let (analysis, (beside, r)) = both.both(rest, move || {
                    let r = during(&beside);
                    (beside, r)
                });
                both.pass_done("joined");
                (analysis, beside, Some(r))
            }
            None => (rest(), beside, None),
        }
    }

    /// The rest of [`Analysis::with_during`] once the dominator tree is made.
    fn after_search(
        graph: &HeapGraph,
        both: &impl Both,
        layout: Layout,
        tree: DomTree,
        mut possibly: Vec<u64>,
    ) -> Analysis {
        let n = layout.objects as usize;
        let frames = layout.frames();
        let DomTree { mut idom, preorder } = tree;
        idom.truncate(n);
        idom.shrink_to_fit();
        both.pass_done("dominators");

        let numbering = Numbering::new(&layout, &idom);
        let group_count = numbering.len() as u32;
        let definitely_lost = frames + group_count;
        let indirectly_lost = definitely_lost + 1;

        let mut slot = vec![definitely_lost; n];
        for (g, &e) in numbering.entries.iter().enumerate() {
            slot[e as usize] = frames + g as u32;
        }
        // Preorder visits each dominator before what it dominates, so one pass hands every
        // object the holder of its immediate dominator.
        for &v in &preorder {
            match idom.get(v as usize) {
                Some(&d) if d < layout.objects => slot[v as usize] = slot[d as usize],
                Some(&d) => {
                    if let Node::Frame(f) = layout.node(d) {
                        slot[v as usize] = f;
                    }
                }
                None => {}
            }
        }
        drop(preorder);
        {
            let lost: Vec<bool> = slot.iter().map(|&s| s >= definitely_lost).collect();
            let definitely = leaks::split_lost(graph, &lost);
            for o in 0..n {
                if lost[o] && !definitely[o] {
                    slot[o] = indirectly_lost;
                }
            }
        }
        // Possibly lost: reached, but by no path of start edges.
        for (w, word) in possibly.iter_mut().enumerate() {
            let mut not_start = !*word;
            let mut out = 0u64;
            while not_start != 0 {
                let b = not_start.trailing_zeros() as usize;
                not_start &= not_start - 1;
                let o = w * 64 + b;
                if o < n && slot[o] < definitely_lost {
                    out |= 1 << b;
                }
            }
            *word = out;
        }
        let (possibly_lost, possibly_lost_objects) = (0..n as ObjectIndex)
            .filter(|&o| leaks::bit(&possibly, o))
            .fold((0u64, 0u64), |(b, c), o| {
                (b + graph.objects().size[o as usize], c + 1)
            });

        let slots = indirectly_lost as usize + 1;
        let members = SlotMembers::new(&slot, slots);
        let sizes = &graph.objects().size;
        let slot_bytes: Vec<u64> = (0..slots as u32)
            .map(|s| members.of(s).iter().map(|&o| sizes[o as usize]).sum())
            .collect();
        both.pass_done("slots");

        // Two halves of the holders, with about as many members each, listed at once.
        let referents = {
            let holders = frames + group_count;
            let half = members.first_holding_half(holders);
            let (mut first, second) = both.both(
                || groups::referents(graph, &layout, &slot, &members, group_count, 0..half),
                || groups::referents(graph, &layout, &slot, &members, group_count, half..holders),
            );
            first.append(&second);
            first
        };
        both.pass_done("referents");

        // Sharer bits follow tid order, so reading a set's bits upwards lists tids ascending.
        let mut by_tid: Vec<u32> = (0..layout.threads).collect();
        by_tid.sort_unstable_by_key(|&t| graph.threads[t as usize].tid);
        let mut rank = vec![0u32; by_tid.len()];
        for (r, &t) in by_tid.iter().enumerate() {
            rank[t as usize] = r as u32;
        }
        let sharer_sets =
            groups::thread_shared_sharers(graph, &layout, &numbering, &slot, &referents, &rank);

        let id_of = |g: u32| group_id(&numbering, g);
        let mut threads: Vec<ThreadFigures> = graph
            .threads
            .iter()
            .map(|t| ThreadFigures {
                tid: t.tid,
                ..Default::default()
            })
            .collect();
        for f in 0..frames {
            let (t, _) = layout.frame_position(f);
            let (frame_shared, thread_shared) = referents
                .successors(f)
                .iter()
                .map(|&g| id_of(g))
                .partition(|id| id.kind == GroupKind::FrameShared);
            threads[t].proprietary += slot_bytes[f as usize];
            threads[t].frames.push(FrameFigures {
                proprietary: slot_bytes[f as usize],
                frame_shared,
                thread_shared,
            });
        }

        let sharers = Sharers::new(
            graph,
            &numbering,
            &slot_bytes[frames as usize..],
            &sharer_sets,
            &by_tid,
            &mut threads,
        );
        drop(sharer_sets);
        for t in &mut threads {
            t.total = t.proprietary + t.shared;
        }

        let leaks = Leaks {
            bytes: slot_bytes[definitely_lost as usize] + slot_bytes[indirectly_lost as usize],
            objects: (members.of(definitely_lost).len() + members.of(indirectly_lost).len()) as u64,
            definitely_lost: slot_bytes[definitely_lost as usize],
            indirectly_lost: slot_bytes[indirectly_lost as usize],
            definitely_lost_objects: members.of(definitely_lost).len() as u64,
            indirectly_lost_objects: members.of(indirectly_lost).len() as u64,
            possibly_lost,
            possibly_lost_objects,
        };
        let g0 = (frames + numbering.kind_start[GLOBAL_ONLY]) as usize;
        let g1 = (frames + numbering.kind_start[3]) as usize;
        let totals = Totals {
            objects: n as u64,
            bytes: graph.total_bytes(),
            unreachable_bytes: leaks.bytes,
            global_only_bytes: slot_bytes[g0..g1].iter().sum(),
        };

        both.pass_done("figures");
        Analysis {
            layout,
            idom,
            slot,
            possibly,
            members,
            numbering,
            threads,
            slot_bytes,
            referents,
            sharers,
            groups: OnceLock::new(),
            leaks,
            totals,
        }
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// One entry per `graph.threads[i]`, same order.
    pub fn threads(&self) -> &[ThreadFigures] {
        &self.threads
    }

    /// Thread indices ranked by total descending, ties by tid ascending.
    pub fn ranking(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.threads.len()).collect();
        order.sort_by_key(|&t| {
            (
                std::cmp::Reverse(self.threads[t].total),
                self.threads[t].tid,
            )
        });
        order
    }

    /// All groups, ordered F1..Fn, T1..Tn, G1..Gn, made on the first call (see the field).
    pub fn groups(&self) -> &[Group] {
        self.groups.get_or_init(|| {
            (0..self.group_count())
                .map(|g| Group {
                    id: group_id(&self.numbering, g),
                    entry: self.numbering.entries[g as usize],
                    size: self.group_bytes(g),
                    objects: self.group_objects(g),
                    sharers: self.sharers.sets[self.sharers.of_group[g as usize] as usize].clone(),
                    refs: self
                        .group_refs(g)
                        .iter()
                        .map(|&r| group_id(&self.numbering, r))
                        .collect(),
                })
                .collect()
        })
    }

    pub fn group(&self, id: GroupId) -> Option<&Group> {
        self.group_index(id).map(|g| &self.groups()[g as usize])
    }

    /// Number of groups.
    pub fn group_count(&self) -> u32 {
        self.numbering.len() as u32
    }

    /// First group index of each kind (F, T, G), then the group count.
    pub(crate) fn group_starts(&self) -> [u32; 4] {
        self.numbering.kind_start
    }

    /// Entry object of each group, in group order.
    pub(crate) fn group_entries(&self) -> &[ObjectIndex] {
        &self.numbering.entries
    }

    /// Bytes of group index `g`.
    pub(crate) fn group_bytes(&self, g: u32) -> u64 {
        self.slot_bytes[(self.layout.frames() + g) as usize]
    }

    /// Members of group index `g`.
    pub(crate) fn group_objects(&self, g: u32) -> u64 {
        self.members.of(self.layout.frames() + g).len() as u64
    }

    /// Group indices group `g` refers to directly, ascending.
    pub(crate) fn group_refs(&self, g: u32) -> &[u32] {
        self.referents.successors(self.layout.frames() + g)
    }

    /// The groups' referents as one adjacency list: offsets (one per group, then the end,
    /// relative to the first) and group indices.
    pub(crate) fn group_ref_lists(&self) -> (&[usize], &[u32]) {
        let frames = self.layout.frames() as usize;
        let offsets = &self.referents.offsets()[frames..=frames + self.numbering.len()];
        let base = offsets[0];
        (
            offsets,
            &self.referents.targets()[base..offsets[offsets.len() - 1]],
        )
    }

    /// The interned sharer sets of the groups.
    pub(crate) fn sharers(&self) -> &Sharers {
        &self.sharers
    }

    /// Immediate dominator of every object as a node id (see the field).
    pub(crate) fn dominators(&self) -> &[u32] {
        &self.idom
    }

    /// Holder slot of every object (see the field).
    pub(crate) fn slots(&self) -> &[u32] {
        &self.slot
    }

    /// The class of one object.
    pub fn class_of(&self, o: ObjectIndex) -> ObjectClass {
        let s = self.slot[o as usize];
        let frames = self.layout.frames();
        let groups = self.numbering.len() as u32;
        if s < frames {
            let (thread, frame) = self.layout.frame_position(s);
            return ObjectClass::FrameProprietary { thread, frame };
        }
        if s == frames + groups {
            return ObjectClass::DefinitelyLost;
        }
        if s > frames + groups {
            return ObjectClass::IndirectlyLost;
        }
        let g = s - frames;
        match self.numbering.kind(g) {
            FRAME_SHARED => ObjectClass::FrameShared {
                thread: self.numbering.thread[g as usize] as usize,
            },
            THREAD_SHARED => ObjectClass::ThreadShared,
            _ => ObjectClass::GlobalOnly,
        }
    }

    /// The group an object belongs to (None for frame-proprietary and unreachable objects).
    pub fn group_of(&self, o: ObjectIndex) -> Option<GroupId> {
        let s = self.slot[o as usize];
        let frames = self.layout.frames();
        let g = s.checked_sub(frames)?;
        (g < self.numbering.len() as u32).then(|| group_id(&self.numbering, g))
    }

    /// Members of a group, ascending object index (entry included).
    pub fn members(&self, id: GroupId) -> Vec<ObjectIndex> {
        match self.group_index(id) {
            Some(g) => self.members.of(self.layout.frames() + g).to_vec(),
            None => Vec::new(),
        }
    }

    /// Objects frame-proprietary to a frame, ascending object index (empty when the frame
    /// does not exist).
    pub fn frame_members(&self, thread: usize, frame: usize) -> Vec<ObjectIndex> {
        match self.layout.flat_frame(thread, frame) {
            Some(f) => self.members.of(f).to_vec(),
            None => Vec::new(),
        }
    }

    /// Unreachable objects, ascending object index: definitely lost ones, then indirectly
    /// lost ones.
    pub fn leaked(&self) -> (&[ObjectIndex], &[ObjectIndex]) {
        let definitely = self.layout.frames() + self.numbering.len() as u32;
        (self.members.of(definitely), self.members.of(definitely + 1))
    }

    /// Whether a (reachable) object is possibly lost: no path of start edges reaches it.
    pub fn is_possibly_lost(&self, o: ObjectIndex) -> bool {
        leaks::bit(&self.possibly, o)
    }

    /// The possibly lost objects, ascending.
    pub fn possibly_lost(&self) -> Vec<ObjectIndex> {
        (0..self.slot.len() as ObjectIndex)
            .filter(|&o| self.is_possibly_lost(o))
            .collect()
    }

    /// The possibly lost bits, one per object (for the kept form).
    pub(crate) fn possibly_bits(&self) -> &[u64] {
        &self.possibly
    }

    /// Immediate dominator of an object, when that is another object (None when it is a
    /// frame, thread, globals or super-root node, or the object is unreachable).
    pub fn dominator(&self, o: ObjectIndex) -> Option<ObjectIndex> {
        let d = self.idom[o as usize];
        (d < self.layout.objects).then_some(d)
    }

    pub fn leaks(&self) -> Leaks {
        self.leaks
    }

    /// Bytes freed if every thread in `tids` ended: `Σ size(o) : ∅ ≠ T(o) ⊆ S`.
    pub fn release(&self, tids: &[u32]) -> Result<u64, UnknownThread> {
        let (set, bytes) = released_set(&self.threads, tids)?;
        Ok(bytes + shared_within(&self.sharers.sets, &self.sharers.thread_shared_bytes, &set))
    }

    /// Groups the holder refers to directly (ascending).
    pub fn direct_referents(&self, holder: Holder) -> Vec<GroupId> {
        match holder {
            Holder::Frame { thread, frame } => self
                .threads
                .get(thread)
                .and_then(|t| t.frames.get(frame))
                .map(|f| {
                    f.frame_shared
                        .iter()
                        .chain(&f.thread_shared)
                        .copied()
                        .collect()
                })
                .unwrap_or_default(),
            Holder::Group(id) => self
                .group_index(id)
                .map(|g| {
                    self.group_refs(g)
                        .iter()
                        .map(|&r| group_id(&self.numbering, r))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Transitive closure of `direct_referents` (ascending), e.g. F3 → T1 → F2 gives
    /// [F2, F3, T1]. A group holder is not listed among its own developed referents even
    /// when a cycle of references leads back to it.
    pub fn developed_referents(&self, holder: Holder) -> Vec<GroupId> {
        let mut seen = vec![false; self.numbering.len()];
        let mut todo: Vec<u32> = self
            .direct_referents(holder)
            .into_iter()
            .filter_map(|id| self.group_index(id))
            .collect();
        while let Some(g) = todo.pop() {
            if !std::mem::replace(&mut seen[g as usize], true) {
                todo.extend(self.group_refs(g).iter().filter(|&&r| !seen[r as usize]));
            }
        }
        if let Holder::Group(id) = holder
            && let Some(g) = self.group_index(id)
        {
            seen[g as usize] = false;
        }
        // Group indices ascend in id order (F, T, G, each by number).
        (0..self.group_count())
            .filter(|&g| seen[g as usize])
            .map(|g| group_id(&self.numbering, g))
            .collect()
    }

    fn group_index(&self, id: GroupId) -> Option<u32> {
        let k = match id.kind {
            GroupKind::FrameShared => FRAME_SHARED,
            GroupKind::ThreadShared => THREAD_SHARED,
            GroupKind::GlobalOnly => GLOBAL_ONLY,
        };
        let start = self.numbering.kind_start[k];
        let count = self.numbering.kind_start[k + 1] - start;
        (id.number >= 1 && id.number <= count).then(|| start + id.number - 1)
    }
}

fn group_id(numbering: &Numbering, g: u32) -> GroupId {
    let k = numbering.kind(g);
    let kind = match k {
        FRAME_SHARED => GroupKind::FrameShared,
        THREAD_SHARED => GroupKind::ThreadShared,
        _ => GroupKind::GlobalOnly,
    };
    GroupId {
        kind,
        number: g - numbering.kind_start[k] + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Edges, Frame, ObjectRecord, Objects, Process, Thread};

    /// A doubly linked list of `n` blocks of 8 bytes; `heads` lists (tid, object) roots.
    fn list(n: u32, heads: &[(u32, u32)]) -> HeapGraph {
        let mut objects = Objects::with_capacity(n as usize);
        let mut edges = Edges::with_capacity(n as usize, 2 * n as usize);
        for o in 0..n {
            objects.push(ObjectRecord {
                id: o as u64 + 1,
                addr: 0x1000 + 16 * o as u64,
                size: 8,
                site: crate::graph::NO_SITE,
                ..Default::default()
            });
            let next = (o + 1 < n).then_some(o + 1);
            let prev = o.checked_sub(1);
            edges.push(next.into_iter().chain(prev));
        }
        let threads = heads
            .iter()
            .map(|&(tid, o)| Thread {
                tid,
                frames: vec![Frame {
                    refs: vec![o],
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        HeapGraph::new(Process::default(), vec![], objects, edges, threads, vec![])
            .expect("a well-formed list")
    }

    #[test]
    fn a_million_long_list_under_one_frame_is_proprietary() {
        let n = 1_000_000;
        let g = list(n, &[(1, 0)]);
        let a = Analysis::new(&g);
        assert_eq!(a.threads()[0].proprietary, 8 * n as u64);
        assert_eq!(a.threads()[0].frames[0].proprietary, 8 * n as u64);
        assert!(a.groups().is_empty());
        assert_eq!(a.dominator(n - 1), Some(n - 2));
        assert_eq!(a.release(&[1]), Ok(8 * n as u64));
    }

    #[test]
    fn a_long_list_held_at_both_ends_by_two_threads_is_one_cycle_of_groups() {
        // Every block is reached from both ends, so each heads its own thread-shared
        // group, and the groups refer to each other in one long cycle.
        let n = 200_000;
        let g = list(n, &[(1, 0), (2, n - 1)]);
        let a = Analysis::new(&g);
        assert_eq!(a.groups().len(), n as usize);
        assert!(
            a.groups()
                .iter()
                .all(|g| g.id.kind == GroupKind::ThreadShared
                    && g.sharers == [Sharer::Thread(1), Sharer::Thread(2)])
        );
        assert_eq!(a.threads()[0].shared, 8 * n as u64);
        assert_eq!(a.threads()[1].proprietary, 0);
        assert_eq!(a.release(&[1]), Ok(0));
        assert_eq!(a.release(&[2, 1]), Ok(8 * n as u64));
        assert_eq!(a.release(&[3]), Err(UnknownThread(3)));
    }

    #[test]
    fn an_empty_graph_has_empty_figures() {
        let a = Analysis::new(&HeapGraph::default());
        assert_eq!(a.totals(), Totals::default());
        assert_eq!(a.leaks(), Leaks::default());
        assert!(a.threads().is_empty() && a.groups().is_empty() && a.ranking().is_empty());
        assert_eq!(a.release(&[]), Ok(0));
        assert_eq!(a.release(&[1]), Err(UnknownThread(1)));
        assert!(a.frame_members(0, 0).is_empty());
    }

    #[test]
    fn node_layout_round_trips() {
        let g = list(3, &[(5, 0), (6, 1)]);
        let layout = Layout::new(&g);
        assert_eq!(layout.node(2), Node::Object(2));
        assert_eq!(layout.node(layout.globals()), Node::Globals);
        assert_eq!(layout.node(layout.thread(1)), Node::Thread(1));
        assert_eq!(layout.node(layout.frame(1)), Node::Frame(1));
        assert_eq!(layout.node(layout.super_root()), Node::SuperRoot);
        assert_eq!(layout.frame_position(1), (1, 0));
        assert_eq!(layout.flat_frame(1, 0), Some(1));
        assert_eq!(layout.flat_frame(1, 1), None);
        assert_eq!(layout.flat_frame(2, 0), None);
    }
}
