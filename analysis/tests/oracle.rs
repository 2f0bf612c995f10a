//! The engine against a brute-force oracle written from docs/reference.md §3's definitions alone.
//!
//! The oracle never builds a dominator tree the clever way: `F(o)` is a breadth-first
//! search from every frame, `T(o)` adds the threads and a search from the globals, and "d
//! dominates v" is checked by its definition — v is unreachable from the super-root once d
//! is removed. Every figure the engine gives is compared with the oracle's on random small
//! graphs with cycles, self references, diamonds, objects shared by frames of one thread
//! and by several threads, globals, unreachable cycles and long chains.
//!
//! The leak classes are written again from the wording of docs/reference.md §3 "Leak
//! classes", sharing nothing with the engine's `leaks` module: strongly connected components
//! by mutual reachability (x and y are in one component when each reaches the other through
//! unreachable blocks), "entered" by looking at every edge, possibly lost by a search that
//! follows start edges only. Addresses are shuffled, so that the lowest-address member is not
//! the lowest index, and references are start or interior at random.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use heaptui_analysis::{
    Analysis, Edges, Frame, Group, GroupId, GroupKind, HeapGraph, Holder, ObjectClass, ObjectIndex,
    ObjectRecord, Objects, Process, ScopedThreads, Sharer, Thread, UnknownThread,
};
use proptest::collection::vec;
use proptest::prelude::*;

/// A reference: its target and whether it is an interior edge.
type Ref = (u32, bool);

/// A graph to build: sizes, addresses (a permutation of slots), each object's references,
/// threads as (tid, frames' refs), globals' refs.
#[derive(Clone, Debug)]
struct Spec {
    sizes: Vec<u64>,
    addr_slots: Vec<u64>,
    edges: Vec<Vec<Ref>>,
    threads: Vec<(u32, Vec<Vec<Ref>>)>,
    globals: Vec<Ref>,
}

/// A root's references as the graph keeps them: every target, and the sorted targets that no
/// start reference names.
fn root_refs(refs: &[Ref]) -> (Vec<u32>, Vec<u32>) {
    let mut interior: Vec<u32> = refs
        .iter()
        .filter(|r| r.1 && !refs.contains(&(r.0, false)))
        .map(|r| r.0)
        .collect();
    interior.sort_unstable();
    interior.dedup();
    (refs.iter().map(|r| r.0).collect(), interior)
}

/// Plain references (all start edges), for hand-written shapes.
fn starts(refs: &[u32]) -> Vec<Ref> {
    refs.iter().map(|&r| (r, false)).collect()
}

impl Spec {
    fn build(&self) -> HeapGraph {
        let mut objects = Objects::default();
        let mut edges = Edges::default();
        for (o, (&size, refs)) in self.sizes.iter().zip(&self.edges).enumerate() {
            let slot = self.addr_slots.get(o).copied().unwrap_or(o as u64);
            objects.push(ObjectRecord {
                id: 1000 + o as u64,
                addr: 0x10_000 + 0x100 * slot,
                size,
                site: heaptui_analysis::NO_SITE,
                ..Default::default()
            });
            edges.push_with_kinds(refs.iter().copied());
        }
        let threads = self
            .threads
            .iter()
            .map(|(tid, frames)| Thread {
                tid: *tid,
                name: format!("t{tid}"),
                frames: frames
                    .iter()
                    .enumerate()
                    .map(|(i, refs)| {
                        let (refs, interior) = root_refs(refs);
                        Frame {
                            function: format!("f{i}"),
                            refs,
                            interior,
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        let (globals, globals_interior) = root_refs(&self.globals);
        HeapGraph::new(Process::default(), vec![], objects, edges, threads, globals)
            .and_then(|g| g.with_globals_interior(globals_interior))
            .expect("generated graphs are well formed")
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let refs = |max: usize| vec((any::<u32>(), prop::bool::weighted(0.2)), 0..max);
    (
        Just((0..40u64).collect::<Vec<_>>()).prop_shuffle(),
        (0usize..=40, any::<u32>()),
        vec(0u64..300, 40),
        vec(refs(4), 40),
        vec(prop::bool::weighted(0.15), 40),
        vec(prop::bool::weighted(0.1), 40),
        prop::option::of((any::<u32>(), 2usize..40, any::<bool>())),
        vec(vec(refs(4), 1..=4), 1..=5),
        Just((1..=5u32).map(|t| t * 10 + 1).collect::<Vec<_>>()).prop_shuffle(),
        refs(4),
    )
        .prop_map(
            |(
                addr_slots,
                (n, cut),
                sizes,
                raw_edges,
                self_refs,
                bridges,
                chain,
                raw_threads,
                tids,
                globals,
            )| {
                // Roots only name objects below `reached`; objects at or above it are
                // reached only through the occasional bridge edge, so unreachable
                // structures (cycles among them included) are common.
                let reached = if n == 0 { 0 } else { 1 + cut as usize % n };
                let map = |r: &Ref, within: usize| -> Option<Ref> {
                    (within > 0).then(|| (r.0 % within as u32, r.1))
                };
                let mut edges: Vec<Vec<Ref>> = (0..n)
                    .map(|o| {
                        let within = if o < reached && !bridges[o] {
                            reached
                        } else {
                            n
                        };
                        let mut list: Vec<Ref> =
                            raw_edges[o].iter().filter_map(|r| map(r, within)).collect();
                        if self_refs[o] {
                            list.push((o as u32, false));
                        }
                        list
                    })
                    .collect();
                if let Some((start, len, closed)) = chain
                    && n >= 2
                {
                    let start = start as usize % n;
                    let end = (start + len).min(n - 1);
                    for (o, list) in edges.iter_mut().enumerate().take(end).skip(start) {
                        list.push((o as u32 + 1, false));
                    }
                    if closed && end > start {
                        edges[end].push((start as u32, false));
                    }
                }
                let threads = raw_threads
                    .iter()
                    .zip(&tids)
                    .map(|(frames, &tid)| {
                        let frames = frames
                            .iter()
                            .map(|refs| refs.iter().filter_map(|r| map(r, reached)).collect())
                            .collect();
                        (tid, frames)
                    })
                    .collect();
                let globals = globals.iter().filter_map(|r| map(r, reached)).collect();
                Spec {
                    sizes: sizes[..n].to_vec(),
                    addr_slots: addr_slots[..n].to_vec(),
                    edges,
                    threads,
                    globals,
                }
            },
        )
}

/// Who may be a member of T(o): a thread (by index) or the globals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Root {
    Thread(usize),
    Globals,
}

/// Every figure, computed from the definitions.
struct Oracle {
    n: usize,
    /// Flat frames as (thread, frame).
    frames: Vec<(usize, usize)>,
    /// F(o): flat frame indices.
    f: Vec<BTreeSet<usize>>,
    /// T(o).
    t: Vec<BTreeSet<Root>>,
    class: Vec<ObjectClass>,
    /// Immediate dominator of each object as a node of the oracle's own numbering.
    idom: Vec<Option<usize>>,
    /// dominates[d][v] over the oracle's node numbering.
    dominates: Vec<Vec<bool>>,
    groups: Vec<Group>,
    /// Members of each group, ascending.
    members: Vec<Vec<ObjectIndex>>,
    /// Direct referents of each flat frame.
    frame_refs: Vec<Vec<GroupId>>,
    /// Possibly lost objects.
    possibly: Vec<bool>,
}

// The oracle's node numbering: 0 super-root, 1 globals, then threads, frames, objects.
const SUPER_ROOT: usize = 0;
const GLOBALS: usize = 1;

impl Oracle {
    fn new(g: &HeapGraph) -> Oracle {
        let n = g.object_count();
        let frames: Vec<(usize, usize)> = g
            .threads
            .iter()
            .enumerate()
            .flat_map(|(t, th)| (0..th.frames.len()).map(move |f| (t, f)))
            .collect();
        let thread_node = |t: usize| 2 + t;
        let frame_node = |f: usize| 2 + g.threads.len() + f;
        let object_node = |o: usize| 2 + g.threads.len() + frames.len() + o;
        let nodes = object_node(n);
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        adj[SUPER_ROOT].push(GLOBALS);
        for t in 0..g.threads.len() {
            adj[SUPER_ROOT].push(thread_node(t));
        }
        adj[GLOBALS] = g.globals.iter().map(|&o| object_node(o as usize)).collect();
        for (fi, &(t, f)) in frames.iter().enumerate() {
            adj[thread_node(t)].push(frame_node(fi));
            adj[frame_node(fi)] = g.threads[t].frames[f]
                .refs
                .iter()
                .map(|&o| object_node(o as usize))
                .collect();
        }
        for o in 0..n {
            adj[object_node(o)] = g
                .edges()
                .of(o as u32)
                .iter()
                .map(|&x| object_node(x as usize))
                .collect();
        }
        let reach = |from: usize, removed: Option<usize>| -> Vec<bool> {
            let mut seen = vec![false; nodes];
            if Some(from) == removed {
                return seen;
            }
            seen[from] = true;
            let mut todo = VecDeque::from([from]);
            while let Some(x) = todo.pop_front() {
                for &y in &adj[x] {
                    if Some(y) != removed && !seen[y] {
                        seen[y] = true;
                        todo.push_back(y);
                    }
                }
            }
            seen
        };

        let from_frames: Vec<Vec<bool>> = (0..frames.len())
            .map(|fi| reach(frame_node(fi), None))
            .collect();
        let from_globals = reach(GLOBALS, None);
        let mut f_sets = vec![BTreeSet::new(); n];
        let mut t_sets = vec![BTreeSet::new(); n];
        for o in 0..n {
            for (fi, seen) in from_frames.iter().enumerate() {
                if seen[object_node(o)] {
                    f_sets[o].insert(fi);
                    t_sets[o].insert(Root::Thread(frames[fi].0));
                }
            }
            if from_globals[object_node(o)] {
                t_sets[o].insert(Root::Globals);
            }
        }
        // Leak classes, from the wording of §3. Among unreachable blocks, x and y are in one
        // strongly connected component when each reaches the other through unreachable
        // blocks; a component is entered when an unreachable block outside it points into it.
        let unreachable: Vec<bool> = (0..n).map(|o| t_sets[o].is_empty()).collect();
        let reach_among_lost = |x: usize| -> Vec<bool> {
            let mut seen = vec![false; n];
            seen[x] = true;
            let mut todo = vec![x];
            while let Some(p) = todo.pop() {
                for &y in g.edges().of(p as u32) {
                    let y = y as usize;
                    if unreachable[y] && !seen[y] {
                        seen[y] = true;
                        todo.push(y);
                    }
                }
            }
            seen
        };
        let lost_reach: Vec<Vec<bool>> = (0..n)
            .map(|x| {
                if unreachable[x] {
                    reach_among_lost(x)
                } else {
                    vec![false; n]
                }
            })
            .collect();
        let same_component = |x: usize, y: usize| lost_reach[x][y] && lost_reach[y][x];
        let addr = &g.objects().addr;
        let definitely_lost = |x: usize| -> bool {
            let members: Vec<usize> = (0..n).filter(|&y| same_component(x, y)).collect();
            let entered = (0..n).any(|p| {
                unreachable[p]
                    && !members.contains(&p)
                    && g.edges()
                        .of(p as u32)
                        .iter()
                        .any(|&y| members.contains(&(y as usize)))
            });
            let lowest = members.iter().min_by_key(|&&y| (addr[y], y)).copied();
            !entered && lowest == Some(x)
        };
        // Possibly lost: reachable, but no path of start edges from a root reaches it.
        let mut by_start = vec![false; n];
        let mut todo: Vec<usize> = Vec::new();
        let root_lists = std::iter::once((&g.globals, &g.globals_interior)).chain(
            g.threads
                .iter()
                .flat_map(|t| t.frames.iter().map(|f| (&f.refs, &f.interior))),
        );
        for (refs, interior) in root_lists {
            for &o in refs {
                if !interior.contains(&o) && !by_start[o as usize] {
                    by_start[o as usize] = true;
                    todo.push(o as usize);
                }
            }
        }
        while let Some(p) = todo.pop() {
            for (y, interior) in g.edges().of_with_kinds(p as u32) {
                if !interior && !by_start[y as usize] {
                    by_start[y as usize] = true;
                    todo.push(y as usize);
                }
            }
        }
        let possibly: Vec<bool> = (0..n).map(|o| !unreachable[o] && !by_start[o]).collect();
        let class: Vec<ObjectClass> = (0..n)
            .map(|o| {
                let t = &t_sets[o];
                if t.is_empty() {
                    if definitely_lost(o) {
                        ObjectClass::DefinitelyLost
                    } else {
                        ObjectClass::IndirectlyLost
                    }
                } else if t.len() >= 2 {
                    ObjectClass::ThreadShared
                } else if t.contains(&Root::Globals) {
                    ObjectClass::GlobalOnly
                } else if f_sets[o].len() >= 2 {
                    let Some(&Root::Thread(thread)) = t.first() else {
                        unreachable!()
                    };
                    ObjectClass::FrameShared { thread }
                } else {
                    let &fi = f_sets[o].first().unwrap();
                    ObjectClass::FrameProprietary {
                        thread: frames[fi].0,
                        frame: frames[fi].1,
                    }
                }
            })
            .collect();

        // Dominators by definition.
        let all = reach(SUPER_ROOT, None);
        let dominates: Vec<Vec<bool>> = (0..nodes)
            .map(|d| {
                let without = reach(SUPER_ROOT, Some(d));
                (0..nodes).map(|v| all[v] && !without[v]).collect()
            })
            .collect();
        let idom_node = |v: usize| -> Option<usize> {
            if !all[v] || v == SUPER_ROOT {
                return None;
            }
            let strict: Vec<usize> = (0..nodes).filter(|&d| d != v && dominates[d][v]).collect();
            strict
                .iter()
                .copied()
                .find(|&d| strict.iter().all(|&e| dominates[e][d]))
        };
        let idom: Vec<Option<usize>> = (0..n).map(|o| idom_node(object_node(o))).collect();

        // Groups: entries by the kind of their immediate dominator, numbered per kind in
        // ascending entry index.
        let mut entries: BTreeMap<GroupKind, Vec<usize>> = BTreeMap::new();
        for (o, d) in idom.iter().enumerate() {
            let kind = match *d {
                Some(SUPER_ROOT) => GroupKind::ThreadShared,
                Some(GLOBALS) => GroupKind::GlobalOnly,
                Some(d) if (2..2 + g.threads.len()).contains(&d) => GroupKind::FrameShared,
                _ => continue,
            };
            entries.entry(kind).or_default().push(o);
        }
        let mut groups = Vec::new();
        let mut members = Vec::new();
        for (&kind, list) in &entries {
            for (i, &e) in list.iter().enumerate() {
                let m: Vec<ObjectIndex> = (0..n)
                    .filter(|&o| dominates[object_node(e)][object_node(o)])
                    .map(|o| o as ObjectIndex)
                    .collect();
                let reach_set: BTreeSet<Root> =
                    m.iter().flat_map(|&o| t_sets[o as usize].clone()).collect();
                let mut sharers: Vec<Sharer> = reach_set
                    .iter()
                    .filter_map(|r| match r {
                        Root::Thread(t) => Some(Sharer::Thread(g.threads[*t].tid)),
                        Root::Globals => None,
                    })
                    .collect();
                sharers.sort();
                if reach_set.contains(&Root::Globals) {
                    sharers.push(Sharer::Globals);
                }
                groups.push(Group {
                    id: GroupId {
                        kind,
                        number: i as u32 + 1,
                    },
                    entry: e as ObjectIndex,
                    size: m.iter().map(|&o| g.objects().size[o as usize]).sum(),
                    objects: m.len() as u64,
                    sharers,
                    refs: vec![],
                });
                members.push(m);
            }
        }
        let group_of = |o: usize| -> Option<usize> {
            members.iter().position(|m| m.contains(&(o as ObjectIndex)))
        };
        // A holder refers to a group when one of its edges leads into a member of
        // another group.
        let ids: Vec<GroupId> = groups.iter().map(|g| g.id).collect();
        let referents = |sources: &[usize], own: Option<usize>| -> Vec<GroupId> {
            let mut out = BTreeSet::new();
            for &x in sources {
                for &y in &adj[x] {
                    let o = y - object_node(0);
                    if let Some(k) = group_of(o)
                        && Some(k) != own
                    {
                        out.insert(ids[k]);
                    }
                }
            }
            out.into_iter().collect()
        };
        for k in 0..groups.len() {
            let sources: Vec<usize> = members[k]
                .iter()
                .map(|&o| object_node(o as usize))
                .collect();
            groups[k].refs = referents(&sources, Some(k));
        }
        let frame_refs = (0..frames.len())
            .map(|fi| {
                let (t, f) = frames[fi];
                let mut sources = vec![frame_node(fi)];
                let own = ObjectClass::FrameProprietary {
                    thread: t,
                    frame: f,
                };
                sources.extend((0..n).filter(|&o| class[o] == own).map(object_node));
                referents(&sources, None)
            })
            .collect();
        let idom = idom
            .into_iter()
            .map(|d| {
                d.filter(|&d| d >= object_node(0))
                    .map(|d| d - object_node(0))
            })
            .collect();
        Oracle {
            n,
            frames,
            f: f_sets,
            t: t_sets,
            class,
            idom,
            dominates,
            groups,
            members,
            frame_refs,
            possibly,
        }
    }

    fn release(&self, g: &HeapGraph, tids: &BTreeSet<u32>) -> u64 {
        (0..self.n)
            .filter(|&o| {
                !self.t[o].is_empty()
                    && self.t[o].iter().all(|r| match r {
                        Root::Thread(t) => tids.contains(&g.threads[*t].tid),
                        Root::Globals => false,
                    })
            })
            .map(|o| g.objects().size[o])
            .sum()
    }

    fn developed(&self, direct: Vec<GroupId>, own: Option<GroupId>) -> Vec<GroupId> {
        let mut seen = BTreeSet::new();
        let mut todo = direct;
        while let Some(id) = todo.pop() {
            if seen.insert(id) {
                let k = self.groups.iter().position(|g| g.id == id).unwrap();
                todo.extend(self.groups[k].refs.iter().copied());
            }
        }
        if let Some(own) = own {
            seen.remove(&own);
        }
        seen.into_iter().collect()
    }
}

/// Checks the engine on one thread and with its passes on two (`ScopedThreads`): both
/// against the oracle.
fn check(g: &HeapGraph, release_sets: &[Vec<bool>]) -> Result<(), TestCaseError> {
    let o = Oracle::new(g);
    check_against(g, &Analysis::new(g), &o, release_sets)?;
    let (two_threads, ()) = Analysis::with(g, &ScopedThreads, || ());
    check_against(g, &two_threads, &o, release_sets)
}

fn check_against(
    g: &HeapGraph,
    a: &Analysis,
    o: &Oracle,
    release_sets: &[Vec<bool>],
) -> Result<(), TestCaseError> {
    let sizes = &g.objects().size;
    let n = o.n;

    for x in 0..n {
        let xi = x as ObjectIndex;
        prop_assert_eq!(a.class_of(xi), o.class[x], "class of object {}", x);
        prop_assert_eq!(
            a.is_possibly_lost(xi),
            o.possibly[x],
            "possibly lost: object {}",
            x
        );
        prop_assert_eq!(
            a.dominator(xi),
            o.idom[x].map(|d| d as ObjectIndex),
            "idom {}",
            x
        );
    }

    // Per thread and per frame.
    for (t, th) in g.threads.iter().enumerate() {
        let me = Root::Thread(t);
        let proprietary: u64 = (0..n)
            .filter(|&x| o.t[x].len() == 1 && o.t[x].contains(&me))
            .map(|x| sizes[x])
            .sum();
        let shared: u64 = (0..n)
            .filter(|&x| o.t[x].len() >= 2 && o.t[x].contains(&me))
            .map(|x| sizes[x])
            .sum();
        let figures = &a.threads()[t];
        prop_assert_eq!(figures.tid, th.tid);
        prop_assert_eq!(
            figures.proprietary,
            proprietary,
            "proprietary of {}",
            th.tid
        );
        prop_assert_eq!(figures.shared, shared, "shared of {}", th.tid);
        prop_assert_eq!(figures.total, proprietary + shared);
        prop_assert_eq!(figures.frames.len(), th.frames.len());
    }
    for (fi, &(t, f)) in o.frames.iter().enumerate() {
        let mine: Vec<ObjectIndex> = (0..n)
            .filter(|&x| o.f[x] == BTreeSet::from([fi]) && !o.t[x].contains(&Root::Globals))
            .map(|x| x as ObjectIndex)
            .collect();
        let figures = &a.threads()[t].frames[f];
        prop_assert_eq!(
            &a.frame_members(t, f),
            &mine,
            "members of frame {}:{}",
            t,
            f
        );
        prop_assert_eq!(
            figures.proprietary,
            mine.iter().map(|&x| sizes[x as usize]).sum::<u64>()
        );
        let holder = Holder::Frame {
            thread: t,
            frame: f,
        };
        prop_assert_eq!(
            &a.direct_referents(holder),
            &o.frame_refs[fi],
            "frame {}:{}",
            t,
            f
        );
        let (fs, ts): (Vec<GroupId>, Vec<GroupId>) = o.frame_refs[fi]
            .iter()
            .partition(|id| id.kind == GroupKind::FrameShared);
        prop_assert_eq!(&figures.frame_shared, &fs);
        prop_assert_eq!(&figures.thread_shared, &ts);
        prop_assert_eq!(
            a.developed_referents(holder),
            o.developed(o.frame_refs[fi].clone(), None)
        );
    }
    let mut ranking: Vec<usize> = (0..g.threads.len()).collect();
    ranking.sort_by(|&x, &y| {
        let (fx, fy) = (&a.threads()[x], &a.threads()[y]);
        fy.total.cmp(&fx.total).then(fx.tid.cmp(&fy.tid))
    });
    prop_assert_eq!(a.ranking(), ranking);

    // Groups, whole.
    prop_assert_eq!(a.groups(), &o.groups[..]);
    for (k, group) in o.groups.iter().enumerate() {
        prop_assert_eq!(
            &a.members(group.id),
            &o.members[k],
            "members of {}",
            group.id
        );
        for &m in &o.members[k] {
            prop_assert_eq!(a.group_of(m), Some(group.id));
            // Every member has the entry's reachability (the engine relies on it).
            prop_assert_eq!(&o.t[m as usize], &o.t[group.entry as usize]);
        }
        prop_assert_eq!(a.group(group.id), Some(group));
        let holder = Holder::Group(group.id);
        prop_assert_eq!(&a.direct_referents(holder), &group.refs);
        prop_assert_eq!(
            a.developed_referents(holder),
            o.developed(group.refs.clone(), Some(group.id))
        );
    }
    for x in 0..n {
        if !o.members.iter().any(|m| m.contains(&(x as ObjectIndex))) {
            prop_assert_eq!(a.group_of(x as ObjectIndex), None);
        }
    }
    for kind in [
        GroupKind::FrameShared,
        GroupKind::ThreadShared,
        GroupKind::GlobalOnly,
    ] {
        let past = o.groups.iter().filter(|g| g.id.kind == kind).count() as u32 + 1;
        prop_assert_eq!(a.group(GroupId { kind, number: past }), None);
    }

    // Leaks and totals.
    let lost = |c: ObjectClass| -> (u64, u64) {
        let xs: Vec<usize> = (0..n).filter(|&x| o.class[x] == c).collect();
        (xs.iter().map(|&x| sizes[x]).sum(), xs.len() as u64)
    };
    let (dl, dl_n) = lost(ObjectClass::DefinitelyLost);
    let (il, il_n) = lost(ObjectClass::IndirectlyLost);
    let leaks = a.leaks();
    prop_assert_eq!(
        (
            leaks.bytes,
            leaks.objects,
            leaks.definitely_lost,
            leaks.indirectly_lost
        ),
        (dl + il, dl_n + il_n, dl, il)
    );
    prop_assert_eq!(
        (leaks.definitely_lost_objects, leaks.indirectly_lost_objects),
        (dl_n, il_n)
    );
    let possibly: Vec<ObjectIndex> = (0..n)
        .filter(|&x| o.possibly[x])
        .map(|x| x as ObjectIndex)
        .collect();
    prop_assert_eq!(&a.possibly_lost(), &possibly);
    prop_assert_eq!(
        (leaks.possibly_lost, leaks.possibly_lost_objects),
        (
            possibly.iter().map(|&x| sizes[x as usize]).sum::<u64>(),
            possibly.len() as u64
        )
    );
    let totals = a.totals();
    prop_assert_eq!(totals.objects, n as u64);
    prop_assert_eq!(totals.bytes, sizes.iter().sum::<u64>());
    prop_assert_eq!(totals.unreachable_bytes, dl + il);
    prop_assert_eq!(totals.global_only_bytes, lost(ObjectClass::GlobalOnly).0);

    // Release.
    for pick in release_sets {
        let tids: BTreeSet<u32> = g
            .threads
            .iter()
            .zip(pick.iter().cycle())
            .filter(|(_, p)| **p)
            .map(|(t, _)| t.tid)
            .collect();
        let list: Vec<u32> = tids.iter().copied().collect();
        prop_assert_eq!(
            a.release(&list),
            Ok(o.release(g, &tids)),
            "release {:?}",
            list
        );
    }
    let all: Vec<u32> = g.threads.iter().map(|t| t.tid).collect();
    prop_assert_eq!(
        a.release(&all),
        Ok(o.release(g, &all.iter().copied().collect()))
    );
    prop_assert_eq!(a.release(&[7]), Err(UnknownThread(7)));

    // Sanity of the oracle's own dominator relation: reflexive on reached nodes.
    for v in 0..o.dominates.len() {
        prop_assert_eq!(o.dominates[v][v], o.dominates[SUPER_ROOT][v]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_figure_agrees_with_brute_force(
        spec in spec(),
        release_sets in vec(vec(any::<bool>(), 5), 1..4),
    ) {
        check(&spec.build(), &release_sets)?;
    }
}

/// Shapes the random generator reaches only by luck, spelled out.
#[test]
fn hand_picked_shapes_agree_with_brute_force() {
    let cases = [
        // Two threads reaching a two-object cycle from different ends, one object of
        // which points back into a frame-proprietary structure: thread-shared groups that
        // refer to each other.
        Spec {
            sizes: vec![10, 20, 30, 40],
            addr_slots: vec![],
            edges: vec![starts(&[1]), starts(&[0, 2]), starts(&[3]), starts(&[])],
            threads: vec![
                (2, vec![starts(&[0])]),
                (1, vec![starts(&[1]), starts(&[2])]),
            ],
            globals: vec![],
        },
        // A diamond under one frame, a frame-shared object under two frames, the globals
        // and a thread sharing one object, and an unreachable self loop.
        Spec {
            sizes: vec![1, 2, 3, 4, 5, 6, 7],
            addr_slots: vec![],
            edges: vec![
                starts(&[1, 2]),
                starts(&[3]),
                starts(&[3]),
                starts(&[]),
                starts(&[]),
                starts(&[]),
                starts(&[6]),
            ],
            threads: vec![(9, vec![starts(&[0, 4]), starts(&[4])])],
            globals: starts(&[5, 4]),
        },
        // No objects at all, and a thread without frames.
        Spec {
            sizes: vec![],
            addr_slots: vec![],
            edges: vec![],
            threads: vec![(3, vec![]), (4, vec![vec![]])],
            globals: vec![],
        },
    ];
    for spec in cases {
        check(&spec.build(), &[vec![true, false], vec![false, true]]).unwrap();
    }
}

/// The random graphs must actually contain the shapes the property is about; otherwise
/// the property could pass on trivial graphs.
#[test]
fn the_generator_covers_every_shape() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    let cases = 512;
    for _ in 0..cases {
        let spec = spec().new_tree(&mut runner).unwrap().current();
        let g = spec.build();
        let a = Analysis::new(&g);
        let mut note = |what: &'static str, present: bool| {
            if present {
                *seen.entry(what).or_default() += 1;
            }
        };
        let kinds = |k: GroupKind| a.groups().iter().filter(|g| g.id.kind == k).count();
        note("frame-shared group", kinds(GroupKind::FrameShared) > 0);
        note("thread-shared group", kinds(GroupKind::ThreadShared) > 0);
        note("global-only group", kinds(GroupKind::GlobalOnly) > 0);
        note(
            "thread-shared with globals",
            a.groups()
                .iter()
                .any(|g| g.sharers.contains(&Sharer::Globals) && g.sharers.len() > 1),
        );
        note(
            "thread-shared referring to thread-shared",
            a.groups().iter().any(|g| {
                g.id.kind == GroupKind::ThreadShared
                    && g.refs.iter().any(|r| r.kind == GroupKind::ThreadShared)
            }),
        );
        note(
            "group of several objects",
            a.groups().iter().any(|g| g.objects > 1),
        );
        note("definitely lost", a.leaks().definitely_lost_objects > 0);
        note("indirectly lost", a.leaks().indirectly_lost_objects > 0);
        note("possibly lost", a.leaks().possibly_lost_objects > 0);
        note(
            "definitely lost block in a lost cycle",
            // A lost block pointing to a definitely lost one: they are on one cycle.
            a.leaked()
                .1
                .iter()
                .any(|&i| g.edges().of(i).iter().any(|d| a.leaked().0.contains(d))),
        );
        note(
            "object dominated by an object",
            (0..g.object_count() as u32).any(|o| a.dominator(o).is_some()),
        );
        note(
            "self reference",
            (0..g.object_count() as u32).any(|o| g.edges().of(o).contains(&o)),
        );
    }
    for what in [
        "frame-shared group",
        "thread-shared group",
        "global-only group",
        "thread-shared with globals",
        "thread-shared referring to thread-shared",
        "group of several objects",
        "definitely lost",
        "indirectly lost",
        "possibly lost",
        "definitely lost block in a lost cycle",
        "object dominated by an object",
        "self reference",
    ] {
        let count = seen.get(what).copied().unwrap_or(0);
        assert!(
            count >= cases / 20,
            "{what}: only {count} of {cases} graphs"
        );
    }
    eprintln!("{seen:?}");
}

/// The benchmark's generator, at a size the oracle can afford: its structures (long
/// lists, contexts, caches, leaks, cross references) must come out exactly right too.
#[test]
fn synthetic_graphs_agree_with_brute_force() {
    use heaptui_analysis::synthetic::{SyntheticConfig, generate};
    for seed in 1..=3 {
        let g = generate(&SyntheticConfig::new(1200, 4, 3).seed(seed));
        let a = Analysis::new(&g);
        for kind in [
            GroupKind::FrameShared,
            GroupKind::ThreadShared,
            GroupKind::GlobalOnly,
        ] {
            assert!(
                a.groups().iter().any(|g| g.id.kind == kind),
                "seed {seed}: no {kind:?}"
            );
        }
        let leaks = a.leaks();
        assert!(leaks.definitely_lost_objects > 0 && leaks.indirectly_lost_objects > 0);
        let release_sets = [
            vec![true, false, true, false],
            vec![true, true, true, false],
        ];
        check(&g, &release_sets).unwrap();
        // With interior edges: possibly lost blocks among the benchmark's structures.
        let g = heaptui_analysis::synthetic::with_interior_edges(&g, 3);
        assert!(Analysis::new(&g).leaks().possibly_lost_objects > 0);
        check(&g, &release_sets).unwrap();
    }
}
