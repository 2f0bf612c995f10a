//! Shared-memory groups (docs/reference.md §3 "Groups"): which objects head a group, which groups
//! each holder refers to, and which threads (and the globals) reach each thread-shared group.
//!
//! Everything here works on "holders" — each frame with the objects proprietary to it,
//! and each group with its members — instead of single objects, because every member of
//! a group has the entry's reachability: if `e` dominates `m`, every root reaching `m`
//! passes through `e`, and `m` is reachable from `e`. So sharers are computed once per
//! group, on the small graph of holders, never per object. The module reads the graph and
//! the dominator tree; it must never decide classes itself (that is `attribution`'s).

use crate::attribution::{Layout, Node};
use crate::dominators::{Csr, NONE, Successors};
use crate::graph::{HeapGraph, ObjectIndex};

/// Group kinds in id order (F, T, G), as indices into [`Numbering::kind_start`].
pub(crate) const FRAME_SHARED: usize = 0;
pub(crate) const THREAD_SHARED: usize = 1;
pub(crate) const GLOBAL_ONLY: usize = 2;

/// The groups of a snapshot in id order: `F1..Fn`, `T1..Tn`, `G1..Gn`, each kind
/// numbered in ascending order of its entry's object index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Numbering {
    /// First group index of each kind, and the group count at the end.
    pub kind_start: [u32; 4],
    /// Entry object of each group.
    pub entries: Vec<ObjectIndex>,
    /// For a frame-shared group, the index of its thread; [`NONE`] otherwise.
    pub thread: Vec<u32>,
}

impl Numbering {
    /// Finds the entries: objects whose immediate dominator is a thread node (F), the
    /// super-root (T) or the globals node (G). `idom` is indexed by object.
    pub fn new(layout: &Layout, idom: &[u32]) -> Numbering {
        let kind = |d: u32| match layout.node(d) {
            Node::Thread(_) => Some(FRAME_SHARED),
            Node::SuperRoot => Some(THREAD_SHARED),
            Node::Globals => Some(GLOBAL_ONLY),
            Node::Object(_) | Node::Frame(_) => None,
        };
        let mut count = [0u32; 3];
        for &d in idom {
            if d != NONE
                && let Some(k) = kind(d)
            {
                count[k] += 1;
            }
        }
        let kind_start = [
            0,
            count[0],
            count[0] + count[1],
            count[0] + count[1] + count[2],
        ];
        let total = kind_start[3] as usize;
        let mut entries = vec![0; total];
        let mut thread = vec![NONE; total];
        let mut next = [kind_start[0], kind_start[1], kind_start[2]];
        for (o, &d) in idom.iter().enumerate() {
            if d == NONE {
                continue;
            }
            if let Some(k) = kind(d) {
                let g = next[k] as usize;
                next[k] += 1;
                entries[g] = o as ObjectIndex;
                if let Node::Thread(t) = layout.node(d) {
                    thread[g] = t;
                }
            }
        }
        Numbering {
            kind_start,
            entries,
            thread,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The kind index of group `g`.
    pub fn kind(&self, g: u32) -> usize {
        if g < self.kind_start[1] {
            FRAME_SHARED
        } else if g < self.kind_start[2] {
            THREAD_SHARED
        } else {
            GLOBAL_ONLY
        }
    }
}

/// Objects listed per holder slot (a counting sort of objects by slot), ascending within
/// each slot; also the thread-shared groups listed per strongly connected component.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotMembers {
    offsets: Vec<u32>,
    objects: Vec<ObjectIndex>,
}

impl SlotMembers {
    pub fn new(slot: &[u32], slots: usize) -> SlotMembers {
        let mut offsets = vec![0u32; slots + 1];
        for &s in slot {
            offsets[s as usize + 1] += 1;
        }
        for i in 0..slots {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut objects = vec![0; slot.len()];
        for (o, &s) in slot.iter().enumerate() {
            let at = &mut fill[s as usize];
            objects[*at as usize] = o as ObjectIndex;
            *at += 1;
        }
        SlotMembers { offsets, objects }
    }

    pub fn of(&self, slot: u32) -> &[ObjectIndex] {
        let s = slot as usize;
        &self.objects[self.offsets[s] as usize..self.offsets[s + 1] as usize]
    }

    /// The first slot from which the slots below `slots` hold at most half of their members
    /// (where to split them into two halves of about equal work).
    pub fn first_holding_half(&self, slots: u32) -> u32 {
        let below = &self.offsets[..=slots as usize];
        let half = below[below.len() - 1] / 2;
        below.partition_point(|&o| o < half) as u32
    }
}

/// The groups each holder of `holders` refers to directly, as a graph over those holder slots
/// (frames first, then groups; node 0 is `holders.start`) whose successors are group indices,
/// ascending. A holder refers to a group when one of its edges — a frame's own references,
/// or a member's references — leads into a member of another group. Disjoint ranges of
/// holders can be listed at once and their graphs appended ([`Csr::append`]).
pub(crate) fn referents(
    graph: &HeapGraph,
    layout: &Layout,
    slot: &[u32],
    members: &SlotMembers,
    groups: u32,
    holders: std::ops::Range<u32>,
) -> Csr {
    let frames = layout.frames();
    // `seen[g]` is the last holder that listed g, so each list is built without duplicates
    // and without clearing anything between holders.
    let mut seen = vec![NONE; groups as usize];
    let mut list: Vec<u32> = Vec::new();
    let mut out = Csr::with_capacity(holders.len(), 0);
    for h in holders {
        let mut visit = |y: ObjectIndex| {
            let s = slot[y as usize];
            if s >= frames && s < frames + groups && s != h {
                let g = s - frames;
                if seen[g as usize] != h {
                    seen[g as usize] = h;
                    list.push(g);
                }
            }
        };
        if h < frames {
            let (t, f) = layout.frame_position(h);
            for &y in &graph.threads[t].frames[f].refs {
                visit(y);
            }
        }
        for &o in members.of(h) {
            for &y in graph.edges().of(o) {
                visit(y);
            }
        }
        list.sort_unstable();
        out.push(list.drain(..));
    }
    out
}

/// Sharer sets of the thread-shared groups, as bitsets.
pub(crate) struct SharerSets {
    /// `u64` words per set.
    pub words: usize,
    /// For each thread-shared group (in id order), its set's index in `bits`.
    pub set_of: Vec<u32>,
    /// The sets, `words` words each. Bit `rank` is the thread of that rank in tid order;
    /// bit `threads` is the globals.
    pub bits: Vec<u64>,
}

impl SharerSets {
    /// Number of distinct sets (strongly connected components of thread-shared groups).
    pub fn components(&self) -> usize {
        self.bits.len().checked_div(self.words).unwrap_or(0)
    }

    /// The words of set `c`.
    pub fn words_of(&self, c: usize) -> &[u64] {
        &self.bits[c * self.words..(c + 1) * self.words]
    }

    /// The bits set in set `c`, ascending.
    pub fn members(&self, c: usize) -> impl Iterator<Item = usize> + '_ {
        self.words_of(c).iter().enumerate().flat_map(|(w, &word)| {
            let mut word = word;
            std::iter::from_fn(move || {
                (word != 0).then(|| {
                    let bit = w * 64 + word.trailing_zeros() as usize;
                    word &= word - 1;
                    bit
                })
            })
        })
    }
}

/// Who reaches each thread-shared group. A group's sharers are the union of the sharers
/// of every holder with an edge into it: `{t}` for a frame or frame-shared group of thread
/// `t`, `{globals}` for a global-only group or the globals' own references, and the
/// sharers of a thread-shared group. Thread-shared groups can refer to each other in
/// cycles, so the union runs over their strongly connected components in topological order.
pub(crate) fn thread_shared_sharers(
    graph: &HeapGraph,
    layout: &Layout,
    numbering: &Numbering,
    slot: &[u32],
    referents: &Csr,
    rank: &[u32],
) -> SharerSets {
    let frames = layout.frames();
    let threads = layout.threads as usize;
    let words = (threads + 1).div_ceil(64);
    let t0 = numbering.kind_start[THREAD_SHARED];
    let t1 = numbering.kind_start[GLOBAL_ONLY];
    let count = (t1 - t0) as usize;
    let globals_bit = threads;
    let set =
        |bits: &mut [u64], k: usize, bit: usize| bits[k * words + bit / 64] |= 1 << (bit % 64);
    if threads <= 1 {
        // A thread-shared group is reached from at least two roots (thread nodes or the
        // globals: no single one dominates it), so with one thread each is shared by that
        // thread and the globals: one set, nothing to propagate.
        let mut bits = vec![0u64; words];
        (0..=threads).for_each(|bit| set(&mut bits, 0, bit));
        return SharerSets {
            words,
            set_of: vec![0; count],
            bits,
        };
    }

    let mut seeds = vec![0u64; count * words];
    for h in 0..frames + numbering.len() as u32 {
        let bit = if h < frames {
            Some(rank[layout.frame_position(h).0] as usize)
        } else {
            let g = h - frames;
            match numbering.kind(g) {
                FRAME_SHARED => Some(rank[numbering.thread[g as usize] as usize] as usize),
                GLOBAL_ONLY => Some(globals_bit),
                _ => None,
            }
        };
        if let Some(bit) = bit {
            for &g in referents.successors(h) {
                if (t0..t1).contains(&g) {
                    set(&mut seeds, (g - t0) as usize, bit);
                }
            }
        }
    }
    for &r in &graph.globals {
        let s = slot[r as usize];
        if s >= frames + t0 && s < frames + t1 {
            set(&mut seeds, (s - frames - t0) as usize, globals_bit);
        }
    }

    let mut among = Csr::with_capacity(count, referents.edge_count());
    for g in t0..t1 {
        among.push(
            referents
                .successors(frames + g)
                .iter()
                .filter(|&&r| (t0..t1).contains(&r))
                .map(|&r| r - t0),
        );
    }
    let (component, components) = strongly_connected(&among);
    let components = components as usize;
    let mut bits = vec![0u64; components * words];
    for k in 0..count {
        let c = component[k] as usize;
        for w in 0..words {
            bits[c * words + w] |= seeds[k * words + w];
        }
    }
    drop(seeds);
    // The groups of each component (the counting sort that lists objects per slot).
    let by_component = SlotMembers::new(&component, components);
    // Components are numbered sinks first, so walking them downwards visits every
    // component after all those with edges into it.
    for c in (0..components).rev() {
        let (lower, upper) = bits.split_at_mut(c * words);
        let own = &upper[..words];
        for &k in by_component.of(c as u32) {
            for &h in among.successors(k) {
                let d = component[h as usize] as usize;
                if d != c {
                    for w in 0..words {
                        lower[d * words + w] |= own[w];
                    }
                }
            }
        }
    }
    SharerSets {
        words,
        set_of: component,
        bits,
    }
}

/// Strongly connected components by Tarjan's algorithm with an explicit call stack.
/// Returns each node's component and the component count; components are numbered in
/// the order Tarjan completes them, so every edge between two components goes from a
/// higher number to a lower one.
pub(crate) fn strongly_connected(graph: &impl Successors) -> (Vec<u32>, u32) {
    let n = graph.node_count();
    let mut index = vec![NONE; n];
    let mut low = vec![0u32; n];
    let mut component = vec![NONE; n];
    let mut open: Vec<u32> = Vec::new();
    let mut call: Vec<(u32, u32)> = Vec::new();
    let mut next = 0u32;
    let mut count = 0u32;
    for root in 0..n as u32 {
        if index[root as usize] != NONE {
            continue;
        }
        index[root as usize] = next;
        low[root as usize] = next;
        next += 1;
        open.push(root);
        call.push((root, 0));
        while let Some(top) = call.last_mut() {
            let (v, cursor) = *top;
            let succ = graph.successors(v);
            if let Some(&w) = succ.get(cursor as usize) {
                top.1 += 1;
                if index[w as usize] == NONE {
                    index[w as usize] = next;
                    low[w as usize] = next;
                    next += 1;
                    open.push(w);
                    call.push((w, 0));
                } else if component[w as usize] == NONE {
                    // Visited and not yet in a component: still on the open stack.
                    low[v as usize] = low[v as usize].min(index[w as usize]);
                }
                continue;
            }
            call.pop();
            if let Some(&(p, _)) = call.last() {
                low[p as usize] = low[p as usize].min(low[v as usize]);
            }
            if low[v as usize] == index[v as usize] {
                while let Some(x) = open.pop() {
                    component[x as usize] = count;
                    if x == v {
                        break;
                    }
                }
                count += 1;
            }
        }
    }
    (component, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_of_two_cycles_and_a_tail() {
        // 0 ⇄ 1 → 2 ⇄ 3 → 4, and 5 alone with a self loop.
        let g = Csr::from_lists([vec![1], vec![0, 2], vec![3], vec![2, 4], vec![], vec![5]]);
        let (c, count) = strongly_connected(&g);
        assert_eq!(count, 4);
        assert_eq!(c[0], c[1]);
        assert_eq!(c[2], c[3]);
        assert_ne!(c[0], c[2]);
        // Edges between components go from higher numbers to lower ones.
        assert!(c[1] > c[2] && c[3] > c[4]);
    }

    #[test]
    fn a_long_chain_of_components_needs_no_call_stack() {
        let n = 1_000_000u32;
        let g = Csr::from_lists((0..n).map(|v| if v + 1 < n { vec![v + 1] } else { vec![] }));
        let (c, count) = strongly_connected(&g);
        assert_eq!(count, n);
        assert!(c.windows(2).all(|w| w[0] == w[1] + 1));
    }
}
