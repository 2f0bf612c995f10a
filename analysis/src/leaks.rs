//! The leak classes of docs/reference.md §3, the same as valgrind memcheck's.
//!
//! - [`split_lost`] splits the unreachable blocks into definitely and indirectly lost: the
//!   strongly connected components of the edges among unreachable blocks (the groups'
//!   iterative Tarjan, `groups::strongly_connected`: linear, no recursion, so that a lost list
//!   of millions of blocks is one loop);
//!   in each component that no other unreachable block points into, the member with the
//!   lowest address (then the lowest index) is definitely lost, every other unreachable block
//!   indirectly lost.
//! - [`start_reached`] marks the blocks reached from a root by a path of start edges only;
//!   a reachable block it does not mark is possibly lost.
//!
//! Both are linear in objects + edges. Their temporaries (a few `u32` per unreachable block,
//! one bit per block) are dropped when they return. This module computes; it knows nothing
//! of slots, groups or files.

use crate::dominators::{Csr, Successors};
use crate::graph::{HeapGraph, ObjectIndex};
use crate::groups::strongly_connected;

const UNSEEN: u32 = u32::MAX;

/// For every unreachable block (`lost[o]`), whether it is definitely lost. Entries of
/// reachable blocks are `false`.
pub fn split_lost(graph: &HeapGraph, lost: &[bool]) -> Vec<bool> {
    let n = graph.object_count();
    let edges = graph.edges();
    let addr = &graph.objects().addr;
    // Dense numbering of the unreachable blocks.
    let members: Vec<ObjectIndex> = (0..n as ObjectIndex)
        .filter(|&o| lost[o as usize])
        .collect();
    let mut dense = vec![UNSEEN; n];
    for (d, &o) in members.iter().enumerate() {
        dense[o as usize] = d as u32;
    }
    // The edges among them, in that numbering; their components by the Tarjan the groups use.
    let among = Csr::from_lists(members.iter().map(|&o| {
        edges
            .of(o)
            .iter()
            .map(|&t| dense[t as usize])
            .filter(|&w| w != UNSEEN)
    }));
    drop(dense);
    let (component, components) = strongly_connected(&among);
    let c = components as usize;
    let mut entered = vec![false; c];
    let mut leader = vec![UNSEEN; c];
    for (v, &o) in members.iter().enumerate() {
        let cv = component[v] as usize;
        for &w in among.successors(v as u32) {
            if component[w as usize] as usize != cv {
                entered[component[w as usize] as usize] = true;
            }
        }
        // Members ascend in index, so the first of equal addresses stays.
        let l = leader[cv];
        if l == UNSEEN || addr[o as usize] < addr[members[l as usize] as usize] {
            leader[cv] = v as u32;
        }
    }
    let mut definitely = vec![false; n];
    for (cv, &l) in leader.iter().enumerate() {
        if !entered[cv] && l != UNSEEN {
            definitely[members[l as usize] as usize] = true;
        }
    }
    definitely
}

/// One bit per block: set when a path of start edges leads from a root (a frame's or the
/// globals' start reference) to it.
pub fn start_reached(graph: &HeapGraph) -> Vec<u64> {
    let n = graph.object_count();
    let mut seen = vec![0u64; n.div_ceil(64)];
    let mut todo: Vec<ObjectIndex> = Vec::new();
    let visit = |o: ObjectIndex, seen: &mut Vec<u64>, todo: &mut Vec<ObjectIndex>| {
        let (w, b) = (o as usize / 64, o % 64);
        if seen[w] & (1 << b) == 0 {
            seen[w] |= 1 << b;
            todo.push(o);
        }
    };
    let roots = std::iter::once((&graph.globals, &graph.globals_interior)).chain(
        graph
            .threads
            .iter()
            .flat_map(|t| t.frames.iter().map(|f| (&f.refs, &f.interior))),
    );
    for (refs, interior) in roots {
        for &o in refs {
            if interior.binary_search(&o).is_err() {
                visit(o, &mut seen, &mut todo);
            }
        }
    }
    let edges = graph.edges();
    while let Some(o) = todo.pop() {
        for (t, interior) in edges.of_with_kinds(o) {
            if !interior {
                visit(t, &mut seen, &mut todo);
            }
        }
    }
    seen
}

/// Whether bit `o` of a bit set is set.
#[inline]
pub fn bit(bits: &[u64], o: ObjectIndex) -> bool {
    bits.get(o as usize / 64)
        .is_some_and(|w| (w >> (o % 64)) & 1 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Edges, ObjectRecord, Objects, Process};

    fn graph(addrs: &[u64], refs: &[&[u32]], globals: &[u32]) -> HeapGraph {
        let mut objects = Objects::default();
        let mut edges = Edges::default();
        for (&addr, r) in addrs.iter().zip(refs) {
            objects.push(ObjectRecord {
                id: addr,
                addr,
                size: 8,
                site: crate::graph::NO_SITE,
                ..Default::default()
            });
            edges.push(r.iter().copied());
        }
        HeapGraph::new(
            Process::default(),
            vec![],
            objects,
            edges,
            vec![],
            globals.to_vec(),
        )
        .unwrap()
    }

    #[test]
    fn one_definitely_lost_block_per_lost_structure_the_lowest_address() {
        // 0 <-> 1 <-> 2 (addresses 30, 10, 20: 1 is the leader), a lone self loop 3, and
        // 4 -> 5 -> 6 -> 5 (the cycle is entered from 4: only 4 is definitely lost).
        let g = graph(
            &[30, 10, 20, 40, 90, 60, 50],
            &[&[1], &[0, 2], &[1], &[3], &[5], &[6], &[5]],
            &[],
        );
        let d = split_lost(&g, &[true; 7]);
        assert_eq!(d, [false, true, false, true, true, false, false]);
    }

    #[test]
    fn a_list_of_a_million_blocks_is_one_loop() {
        let n = 1_000_000u32;
        let refs: Vec<Vec<u32>> = (0..n).map(|o| vec![(o + 1) % n]).collect();
        let refs: Vec<&[u32]> = refs.iter().map(Vec::as_slice).collect();
        let addrs: Vec<u64> = (0..n as u64).rev().collect();
        let g = graph(&addrs, &refs, &[]);
        let d = split_lost(&g, &vec![true; n as usize]);
        let definite: Vec<usize> = (0..n as usize).filter(|&o| d[o]).collect();
        assert_eq!(definite, [n as usize - 1]);
    }

    #[test]
    fn start_edges_alone_decide_possibly_lost() {
        let mut objects = Objects::default();
        let mut edges = Edges::default();
        for o in 0..4u64 {
            objects.push(ObjectRecord {
                id: o,
                addr: o * 16,
                size: 16,
                site: crate::graph::NO_SITE,
                ..Default::default()
            });
        }
        // globals -> 0 (start) -> 1 (interior) -> 2 (start); globals -> 3 interior.
        edges.push_with_kinds([(1, true)]);
        edges.push_with_kinds([(2, false)]);
        edges.push([]);
        edges.push([]);
        let g = HeapGraph::new(
            Process::default(),
            vec![],
            objects,
            edges,
            vec![],
            vec![0, 3],
        )
        .unwrap()
        .with_globals_interior(vec![3])
        .unwrap();
        let s = start_reached(&g);
        let got: Vec<bool> = (0..4).map(|o| bit(&s, o)).collect();
        assert_eq!(got, [true, false, false, false]);
    }
}
