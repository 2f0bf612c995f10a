//! Exact dominator trees of large directed graphs, without recursion.
//!
//! This module owns one algorithm: semi-NCA (Georgiadis, "Linear-Time Algorithms for
//! Dominators and Related Problems", 2005; the variant LLVM's `GenericDomTreeConstruction.h`
//! uses), which computes semidominators with Lengauer–Tarjan's link-eval forest and then
//! the immediate dominators as nearest common ancestors. Every walk is iterative — the
//! depth-first search keeps an explicit stack and path compression an explicit path — so a
//! ten-million-long linked list costs memory, not call stack.
//!
//! Nodes are dense `u32` ids and every per-node array is a flat `Vec<u32>`; predecessors
//! are one compressed adjacency list in depth-first preorder space, so the hot loops read
//! memory mostly in order. The module knows nothing about heaps, threads or frames: it
//! must never grow such knowledge (see `attribution` for that).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::both::{Both, OneThread};

/// Marks "no node": the immediate dominator of an unreached node, and unused slots.
pub const NONE: u32 = u32::MAX;

/// A graph as the dominator computation sees it: dense node ids and their successors.
pub trait Successors {
    /// Number of nodes; ids are `0..node_count()`.
    fn node_count(&self) -> usize;
    /// The successors of `v` (duplicates and self loops are allowed).
    fn successors(&self, v: u32) -> &[u32];
}

/// A small owned graph in compressed adjacency form, for building auxiliary graphs and
/// for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Csr {
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

impl Default for Csr {
    fn default() -> Self {
        Csr {
            offsets: vec![0],
            targets: Vec::new(),
        }
    }
}

impl Csr {
    /// Builds from per-node successor lists, in node order.
    pub fn from_lists<I, J>(lists: I) -> Csr
    where
        I: IntoIterator<Item = J>,
        J: IntoIterator<Item = u32>,
    {
        let mut csr = Csr::default();
        for list in lists {
            csr.push(list);
        }
        csr
    }

    /// An empty graph with room for `nodes` nodes and `edges` edges.
    pub fn with_capacity(nodes: usize, edges: usize) -> Csr {
        let mut offsets = Vec::with_capacity(nodes + 1);
        offsets.push(0);
        Csr {
            offsets,
            targets: Vec::with_capacity(edges),
        }
    }

    /// Appends the successor list of the next node.
    pub fn push(&mut self, list: impl IntoIterator<Item = u32>) {
        self.targets.extend(list);
        self.offsets.push(self.targets.len());
    }

    /// Appends `other`'s nodes after this graph's (their successor ids unchanged).
    pub fn append(&mut self, other: &Csr) {
        let base = self.targets.len();
        self.targets.extend_from_slice(&other.targets);
        self.offsets
            .extend(other.offsets[1..].iter().map(|&o| o + base));
    }

    /// Total number of edges.
    pub fn edge_count(&self) -> usize {
        self.targets.len()
    }

    /// Where each node's successors start in [`Csr::targets`], then the edge count.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Every node's successors, one node after another.
    pub fn targets(&self) -> &[u32] {
        &self.targets
    }
}

impl Successors for Csr {
    fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    fn successors(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize]..self.offsets[v as usize + 1]]
    }
}

/// The dominator tree of the nodes reachable from a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomTree {
    /// Immediate dominator of every node; the root's is itself, an unreached node's [`NONE`].
    pub idom: Vec<u32>,
    /// The reached nodes in depth-first preorder, root first. A node's immediate
    /// dominator is an ancestor in the depth-first tree, so it always comes earlier here:
    /// one pass in this order sees every dominator before the nodes it dominates.
    pub preorder: Vec<u32>,
}

impl DomTree {
    /// Whether `d` dominates `v` (reflexive), by walking up from `v`. `O(depth)`; for tests
    /// and occasional queries.
    pub fn dominates(&self, d: u32, v: u32) -> bool {
        if self.idom[v as usize] == NONE || self.idom[d as usize] == NONE {
            return false;
        }
        let mut x = v;
        loop {
            if x == d {
                return true;
            }
            let up = self.idom[x as usize];
            if up == x {
                return false;
            }
            x = up;
        }
    }
}

/// Computes the dominator tree of everything reachable from `root`.
///
/// Time `O(m log n)` for the semidominators plus the NCA walks, which are short on real
/// graphs; memory about `6n + m` words at the peak, freed before returning except for the
/// result.
pub fn dominator_tree(graph: &(impl Successors + Sync), root: u32) -> DomTree {
    dominator_tree_with(graph, root, &OneThread, || ()).0
}

/// [`dominator_tree`] on the two threads `both` may offer, one after the other: `beside`,
/// a caller's job, runs beside the depth-first search, then the predecessor lists are filled
/// in two halves, one on each; the semidominators and the tree run on the calling thread.
/// This call may itself run inside a `both` (as [`Analysis::with_during`]'s first job, whose
/// second is the waiting one); it starts no `both` inside its own closures.
///
/// [`Analysis::with_during`]: crate::Analysis::with_during
pub fn dominator_tree_with<S: Send>(
    graph: &(impl Successors + Sync),
    root: u32,
    both: &impl Both,
    beside: impl FnOnce() -> S + Send,
) -> (DomTree, S) {
    let (search, beside) = search_with(graph, root, both, beside);
    (finish(graph, search, both), beside)
}

/// The first step of [`dominator_tree_with`]: the depth-first search, with `beside` run by
/// `both` beside it. [`finish`] makes the tree of what it found.
pub(crate) fn search_with<S: Send>(
    graph: &(impl Successors + Sync),
    root: u32,
    both: &impl Both,
    beside: impl FnOnce() -> S + Send,
) -> (Search, S) {
    let n = graph.node_count();
    assert!(n < NONE as usize, "too many nodes for u32 ids");
    assert!((root as usize) < n, "root {root} out of range 0..{n}");
    let found = both.both(|| depth_first(graph, root), beside);
    both.pass_done("search");
    found
}

/// The rest of [`dominator_tree_with`] after [`search_with`] of the same graph: the
/// predecessor lists (in two halves when `both` has two threads), semi-NCA, the tree.
pub(crate) fn finish(
    graph: &(impl Successors + Sync),
    search: Search,
    both: &impl Both,
) -> DomTree {
    let n = graph.node_count();
    let Search {
        preorder,
        parent,
        number,
        indegree,
        edges,
    } = search;

    // Predecessors of every reached node, in preorder numbers; built here rather than
    // from the node-space graph so the semidominator loop reads numbers directly. Offsets
    // are `u32` when the edges allow (they nearly always do): half the memory to write, and
    // the search's counts are already theirs.
    let idom_pre = match u32::try_from(edges) {
        Ok(_) => {
            let preds = Preds::<u32>::new(graph, &number, indegree, true, edges as usize, both);
            drop(number);
            both.pass_done("predecessors");
            semi_nca(&preds, parent)
        }
        Err(_) => {
            drop(indegree);
            let offsets = vec![0u64; preorder.len() + 1];
            let preds = Preds::<u64>::new(graph, &number, offsets, false, edges as usize, both);
            drop(number);
            both.pass_done("predecessors");
            semi_nca(&preds, parent)
        }
    };
    both.pass_done("semi-nca");

    let mut idom = vec![NONE; n];
    for (i, &v) in preorder.iter().enumerate() {
        idom[v as usize] = preorder[idom_pre[i] as usize];
    }
    DomTree { idom, preorder }
}

/// What the depth-first search finds.
pub(crate) struct Search {
    /// The reached nodes in preorder.
    preorder: Vec<u32>,
    /// Each reached node's tree parent as a preorder number (the root's is 0, itself).
    parent: Vec<u32>,
    /// Each node's preorder number, [`NONE`] when not reached.
    number: Vec<u32>,
    /// At `1 + number`: how many edges from reached nodes lead to that node (saturating).
    indegree: Vec<u32>,
    /// How many edges leave the reached nodes.
    edges: u64,
}

/// Iterative depth-first search from `root`. It looks at every edge of every reached node
/// once, so it also counts their predecessors for the lists built next.
fn depth_first(graph: &impl Successors, root: u32) -> Search {
    let n = graph.node_count();
    let mut number = vec![NONE; n];
    let mut indegree = vec![0u32; n + 1];
    let mut edges = 0u64;
    let mut preorder = Vec::new();
    let mut parent = Vec::new();
    // The node being looked at (its preorder number) and its successors not yet looked at;
    // the nodes above it on the open path that still have some, each with how many (the
    // last ones of its list), resumed when the nodes below are done. A node whose last
    // successor was just taken is not kept: a long chain costs no stack.
    let mut at = 0u32;
    let mut rest = graph.successors(root);
    let mut suspended: Vec<(u32, u32)> = Vec::new();
    number[root as usize] = 0;
    preorder.push(root);
    parent.push(0);
    loop {
        let Some((&w, tail)) = rest.split_first() else {
            let Some((i, left)) = suspended.pop() else {
                break;
            };
            let succ = graph.successors(preorder[i as usize]);
            rest = &succ[succ.len() - left as usize..];
            at = i;
            continue;
        };
        rest = tail;
        edges += 1;
        let mut j = number[w as usize];
        if j == NONE {
            j = preorder.len() as u32;
            number[w as usize] = j;
            preorder.push(w);
            parent.push(at);
            if !rest.is_empty() {
                suspended.push((at, rest.len() as u32));
            }
            at = j;
            rest = graph.successors(w);
        }
        let c = &mut indegree[j as usize + 1];
        *c = c.saturating_add(1);
    }
    indegree.truncate(preorder.len() + 1);
    Search {
        preorder,
        parent,
        number,
        indegree,
        edges,
    }
}

/// The predecessors of every reached node, in preorder numbers, as one adjacency list
/// whose offsets are `O` (`u32` or `u64`).
struct Preds<O> {
    offsets: Vec<O>,
    targets: Vec<u32>,
}

impl<O: Copy + Default + TryFrom<usize> + Into<u64> + Send + Sync> Preds<O> {
    /// `number` is each node's preorder number and `edges` how many successors the reached
    /// nodes have in all (which `O` must hold); `offsets` has one entry per reached node and
    /// one more: each node's count of predecessors at `1 + number` when `counted` (the
    /// search counted them), else zeros (they are counted here).
    ///
    /// On one thread the lists are filled in place: each node's entry at `1 + number` starts
    /// as its list's start and moves along as the list fills, ending at the list's end, which
    /// is the next list's start. On two threads ([`Both::two_threads`]) the nodes below the
    /// middle id fill each list from its start and the others from its end, each half with
    /// cursors of its own (two copies of the offsets: 8 bytes per node, not at the scan
    /// child's peak, BENCHMARKS.md "What a snapshot costs the target"), so that each thread
    /// reads only its half of the edges; the halves meet and write different places.
    fn new(
        graph: &(impl Successors + Sync),
        number: &[u32],
        mut offsets: Vec<O>,
        counted: bool,
        edges: usize,
        both: &impl Both,
    ) -> Self {
        let offset =
            |k: usize| O::try_from(k).unwrap_or_else(|_| unreachable!("checked by the caller"));
        let at = |o: O| o.into() as usize;
        let reached = offsets.len() - 1;
        // Nodes in id order, so that the graph's own lists are read in order; the order of a
        // node's predecessors does not matter to the semidominators.
        let reached_nodes = |ids: std::ops::Range<u32>| ids.filter(|&v| number[v as usize] != NONE);
        let all = 0..number.len() as u32;
        if !counted {
            for v in reached_nodes(all.clone()) {
                for &w in graph.successors(v) {
                    let c = &mut offsets[number[w as usize] as usize + 1];
                    *c = offset(at(*c) + 1);
                }
            }
        }
        if !both.two_threads() {
            // Counts at `1 + number` become each list's start there, then its end.
            let mut start = 0;
            for c in &mut offsets[1..] {
                let count = at(*c);
                *c = offset(start);
                start += count;
            }
            let mut targets = vec![0u32; edges];
            for v in reached_nodes(all) {
                let i = number[v as usize];
                for &w in graph.successors(v) {
                    let c = &mut offsets[number[w as usize] as usize + 1];
                    targets[at(*c)] = i;
                    *c = offset(at(*c) + 1);
                }
            }
            return Preds { offsets, targets };
        }
        // Counts at `1 + number`, summed into the offsets: each node's list starts at
        // `offsets[number]` and ends at `offsets[number + 1]`.
        for i in 0..reached {
            offsets[i + 1] = offset(at(offsets[i + 1]) + at(offsets[i]));
        }
        let targets: Vec<AtomicU32> = (0..edges).map(|_| AtomicU32::new(0)).collect();
        let middle = all.end / 2;
        both.both(
            || {
                let mut next = offsets[..reached].to_vec();
                for v in reached_nodes(0..middle) {
                    let i = number[v as usize];
                    for &w in graph.successors(v) {
                        let c = &mut next[number[w as usize] as usize];
                        targets[at(*c)].store(i, Ordering::Relaxed);
                        *c = offset(at(*c) + 1);
                    }
                }
            },
            || {
                let mut end = offsets[1..].to_vec();
                for v in reached_nodes(middle..all.end) {
                    let i = number[v as usize];
                    for &w in graph.successors(v) {
                        let c = &mut end[number[w as usize] as usize];
                        *c = offset(at(*c) - 1);
                        targets[at(*c)].store(i, Ordering::Relaxed);
                    }
                }
            },
        );
        let targets = targets.into_iter().map(AtomicU32::into_inner).collect();
        Preds { offsets, targets }
    }
}

impl<O: Copy + Into<u64>> Successors for Preds<O> {
    fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    fn successors(&self, v: u32) -> &[u32] {
        let v = v as usize;
        &self.targets[self.offsets[v].into() as usize..self.offsets[v + 1].into() as usize]
    }
}

/// Semi-NCA over preorder numbers: `preds` are the predecessors of each number and
/// `parent` the depth-first tree. Returns each number's immediate dominator number.
fn semi_nca(preds: &impl Successors, parent: Vec<u32>) -> Vec<u32> {
    let count = parent.len();
    let mut idom = parent.clone();
    // The link-eval forest: `ancestor[v]` starts as the tree parent; once `v` is linked
    // (every number above the one being processed) path compression shortcuts it.
    let mut ancestor = parent;
    let mut semi: Vec<u32> = (0..count as u32).collect();
    // `label[v]`: the number with the smallest semidominator on the compressed path
    // from `v` up to its forest root.
    let mut label: Vec<u32> = (0..count as u32).collect();
    let mut path: Vec<u32> = Vec::new();

    for w in (1..count).rev() {
        // Not yet linked, so `ancestor[w]` is still the tree parent.
        let mut s = ancestor[w];
        let first_linked = w as u32 + 1;
        for &v in preds.successors(w as u32) {
            if v < first_linked {
                // Not linked (the tree parent, an ancestor, or `w` itself): its own label
                // and semidominator are still itself, so `eval` would give `v`.
                s = s.min(v);
                continue;
            }
            let u = eval(v, first_linked, &mut ancestor, &mut label, &semi, &mut path);
            s = s.min(semi[u as usize]);
        }
        semi[w] = s;
    }
    for w in 1..count {
        let s = semi[w];
        let mut c = idom[w];
        while c > s {
            c = idom[c as usize];
        }
        idom[w] = c;
    }
    idom
}

/// The number with the smallest semidominator on the forest path from `v` up to (not
/// including) its forest root — or `v` itself when `v` is a root — compressing that path.
/// Numbers at or above `first_linked` are linked to their `ancestor`.
fn eval(
    v: u32,
    first_linked: u32,
    ancestor: &mut [u32],
    label: &mut [u32],
    semi: &[u32],
    path: &mut Vec<u32>,
) -> u32 {
    if ancestor[v as usize] < first_linked || v < first_linked {
        return label[v as usize];
    }
    // Collect the path up to the last node whose ancestor is the forest root.
    let mut x = v;
    while ancestor[x as usize] >= first_linked {
        path.push(x);
        x = ancestor[x as usize];
    }
    // `x` hangs directly below the root; walk back down, pointing each node at the root
    // and carrying the best label downwards.
    let root = ancestor[x as usize];
    let mut best = label[x as usize];
    while let Some(y) = path.pop() {
        ancestor[y as usize] = root;
        let own = label[y as usize];
        if semi[best as usize] < semi[own as usize] {
            label[y as usize] = best;
        } else {
            best = own;
        }
    }
    label[v as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::both::ScopedThreads;

    fn tree(edges: &[(u32, u32)], n: usize, root: u32) -> DomTree {
        let mut lists = vec![Vec::new(); n];
        for &(a, b) in edges {
            lists[a as usize].push(b);
        }
        dominator_tree(&Csr::from_lists(lists), root)
    }

    /// Dominators by their definition: `d` dominates `v` iff `v` is unreachable from the
    /// root once `d` is removed.
    fn brute_idom(edges: &[(u32, u32)], n: usize, root: u32) -> Vec<u32> {
        let reach = |removed: Option<u32>| {
            let mut seen = vec![false; n];
            if removed == Some(root) {
                return seen;
            }
            let mut todo = vec![root];
            seen[root as usize] = true;
            while let Some(x) = todo.pop() {
                for &(a, b) in edges {
                    if a == x && Some(b) != removed && !seen[b as usize] {
                        seen[b as usize] = true;
                        todo.push(b);
                    }
                }
            }
            seen
        };
        let all = reach(None);
        let doms: Vec<Vec<bool>> = (0..n as u32)
            .map(|d| {
                let without = reach(Some(d));
                (0..n).map(|v| all[v] && !without[v]).collect()
            })
            .collect();
        (0..n)
            .map(|v| {
                if !all[v] {
                    return NONE;
                }
                if v as u32 == root {
                    return root;
                }
                // The strict dominator dominated by every other strict dominator.
                let strict: Vec<usize> = (0..n).filter(|&d| d != v && doms[d][v]).collect();
                *strict
                    .iter()
                    .find(|&&d| strict.iter().all(|&e| doms[e][d]))
                    .expect("a reached node has an immediate dominator") as u32
            })
            .collect()
    }

    /// The predecessor lists, with `u32` offsets from the search's counts or `u64` offsets
    /// counted apart (for more than 2^32 edges), filled on one thread or two, are each the
    /// lists read straight off the graph: a meeting point shared by both halves but wrong
    /// would show against these.
    #[test]
    fn predecessors_are_the_graph_s_edges_reversed() {
        // Node 3 is reached from 1 (twice, below the middle id) and from 2 (above it);
        // node 4 is not reached. Then a larger graph whose lists mix both halves.
        let mut state = 0x9e37_79b9_u32;
        let mut random = |below: u32| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state % below
        };
        let larger: Vec<Vec<u32>> = (0..300)
            .map(|_| (0..random(5)).map(|_| random(300)).collect())
            .collect();
        let graphs = [
            Csr::from_lists([vec![1, 2], vec![3, 3], vec![3, 1], vec![0], vec![2]]),
            Csr::from_lists(larger),
        ];
        for g in &graphs {
            let search = depth_first(g, 0);
            let edges = search.edges as usize;
            let reached = search.preorder.len();
            let mut expected = vec![Vec::new(); reached];
            for (v, &i) in search.number.iter().enumerate() {
                if i != NONE {
                    for &w in g.successors(v as u32) {
                        expected[search.number[w as usize] as usize].push(i);
                    }
                }
            }
            let check = |preds: &dyn Fn(u32) -> Vec<u32>, how: &str| {
                for (v, want) in expected.iter().enumerate() {
                    let mut got = preds(v as u32);
                    got.sort_unstable();
                    let mut want = want.clone();
                    want.sort_unstable();
                    assert_eq!(got, want, "number {v}, {how}");
                }
            };
            let counts = || search.indegree.clone();
            let one = Preds::<u32>::new(g, &search.number, counts(), true, edges, &OneThread);
            let two = Preds::<u32>::new(g, &search.number, counts(), true, edges, &ScopedThreads);
            check(&|v| one.successors(v).to_vec(), "u32, one thread");
            check(&|v| two.successors(v).to_vec(), "u32, two threads");
            assert_eq!(one.node_count(), reached);
            let zeros = || vec![0u64; reached + 1];
            let one = Preds::<u64>::new(g, &search.number, zeros(), false, edges, &OneThread);
            let two = Preds::<u64>::new(g, &search.number, zeros(), false, edges, &ScopedThreads);
            check(&|v| one.successors(v).to_vec(), "u64, one thread");
            check(&|v| two.successors(v).to_vec(), "u64, two threads");
        }
        // Node 3 (reached from 1 twice and from 2) has three predecessors.
        let search = depth_first(&graphs[0], 0);
        assert_eq!(search.preorder.len(), 4, "node 4 is not reached");
        assert_eq!(search.indegree[search.number[3] as usize + 1], 3);
    }

    #[test]
    fn lengauer_tarjan_paper_example() {
        // The flow graph of Lengauer & Tarjan (1979), fig. 1: R=0 A=1 B=2 C=3 D=4 E=5
        // F=6 G=7 H=8 I=9 J=10 K=11 L=12.
        let e = [
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 4),
            (2, 1),
            (2, 4),
            (2, 5),
            (3, 6),
            (3, 7),
            (4, 12),
            (5, 8),
            (6, 9),
            (7, 9),
            (7, 10),
            (8, 5),
            (8, 11),
            (9, 11),
            (10, 9),
            (11, 9),
            (11, 0),
            (12, 8),
        ];
        let t = tree(&e, 13, 0);
        // Published answer: idom(I)=R, idom(K)=R, idom(E)=R, idom(H)=R, idom(F)=C,
        // idom(G)=C, idom(J)=G, idom(L)=D, idom(D)=R, idom(A)=R, idom(B)=R.
        assert_eq!(t.idom, vec![0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 7, 0, 4]);
        assert_eq!(t.idom, brute_idom(&e, 13, 0));
    }

    #[test]
    fn diamond_and_unreached_nodes() {
        let e = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (5, 4), (5, 6)];
        let t = tree(&e, 7, 0);
        assert_eq!(t.idom, vec![0, 0, 0, 0, 3, NONE, NONE]);
        assert_eq!(t.preorder.len(), 5);
        assert!(t.dominates(3, 4));
        assert!(!t.dominates(1, 3));
        assert!(!t.dominates(5, 6));
    }

    #[test]
    fn self_loops_duplicates_and_cycles() {
        let e = [
            (0, 1),
            (1, 1),
            (1, 2),
            (1, 2),
            (2, 1),
            (2, 3),
            (3, 2),
            (0, 3),
        ];
        let t = tree(&e, 4, 0);
        assert_eq!(t.idom, brute_idom(&e, 4, 0));
        assert_eq!(t.idom, vec![0, 0, 0, 0]);
    }

    #[test]
    fn a_two_million_long_chain_needs_no_call_stack() {
        let n = 2_000_000u32;
        let lists = (0..n).map(|v| if v + 1 < n { vec![v + 1] } else { vec![] });
        let t = dominator_tree(&Csr::from_lists(lists), 0);
        assert_eq!(t.preorder.len(), n as usize);
        assert!(
            t.idom
                .iter()
                .enumerate()
                .skip(1)
                .all(|(v, &d)| d == v as u32 - 1)
        );
    }

    #[test]
    fn a_long_chain_with_back_edges_to_the_root_region() {
        // Every node also points back at node 1, so path compression has long paths to
        // shorten, and a second entry at the end makes the whole chain hang off 0.
        let n = 200_000u32;
        let lists = (0..n).map(|v| {
            let mut s = vec![];
            if v + 1 < n {
                s.push(v + 1);
            }
            if v > 1 {
                s.push(1);
            }
            if v == 0 {
                s.push(n - 1);
            }
            s
        });
        let t = dominator_tree(&Csr::from_lists(lists), 0);
        assert_eq!(t.idom[1], 0);
        assert_eq!(t.idom[(n - 1) as usize], 0);
        // A middle node is reached only along the chain from 1: the back edges all go
        // to 1 and the shortcut from 0 lands on the last node.
        assert_eq!(t.idom[5], 4);
        assert_eq!(t.idom[(n - 2) as usize], n - 3);
    }

    #[test]
    fn random_small_graphs_agree_with_the_definition() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as u32
        };
        for _ in 0..300 {
            let n = 1 + next(14) as usize;
            let m = next(3 * n as u32 + 1);
            let e: Vec<(u32, u32)> = (0..m).map(|_| (next(n as u32), next(n as u32))).collect();
            let root = next(n as u32);
            assert_eq!(
                tree(&e, n, root).idom,
                brute_idom(&e, n, root),
                "{e:?} root {root}"
            );
        }
    }
}
