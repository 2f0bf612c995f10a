//! Ages against the vector of issue 7, on a snapshot's graph and through a replayed tracker.

use heaptui_analysis::graph::{Edges, HeapGraph, ObjectRecord, Objects, Process, Site};
use heaptui_analysis::views::ages::{AgedBlock, Ages, Boundary, age};
use heaptui_analysis::views::units::{AllocKind, Caller};
use heaptui_analysis::views::{NO_STACK, Tracker, TrackerConfig};

fn boundaries(seqs: &[u64]) -> Vec<Boundary> {
    seqs.iter()
        .map(|&last_seq| Boundary {
            last_seq,
            unix_ms: 0,
        })
        .collect()
}

#[test]
fn the_issue_vector() {
    let sorted = [5, 8];
    let ages: Vec<u64> = [1, 3, 5, 7, 9, 10]
        .iter()
        .map(|&s| age(s, &sorted))
        .collect();
    assert_eq!(ages, [2, 2, 2, 1, 0, 0]);
    let blocks = [1, 3, 5, 7, 9, 10].map(|seq| AgedBlock {
        seq,
        size: 10 * seq,
        site: (seq % 2) as u32,
        tid: 1,
        unix_ms: 0,
    });
    // Boundaries may arrive in any order.
    let a = Ages::new(blocks, &boundaries(&[8, 5]), 0, 2);
    assert_eq!(a.total.blocks, [2, 1, 3, 0, 0]);
    assert_eq!(a.total.bytes, [190, 70, 90, 0, 0]);
    assert_eq!(a.by_thread[&1], a.total);
    // Site 1: seqs 1, 3, 5, 7, 9 → ages 2, 2, 2, 1, 0; site 0: seq 10 → 0.
    assert_eq!(a.by_site[&1].blocks, [1, 1, 3, 0, 0]);
    assert_eq!(a.by_site[&0].blocks, [1, 0, 0, 0, 0]);
    let oldest: Vec<(u64, u64)> = a.oldest.iter().map(|s| (s.seq, s.age)).collect();
    assert_eq!(oldest, [(1, 2), (3, 2)]);
}

#[test]
fn more_than_three_snapshots_share_the_last_range() {
    let blocks = [1, 2, 3, 4, 5].map(|seq| AgedBlock {
        seq,
        size: 1,
        ..AgedBlock::default()
    });
    let a = Ages::new(blocks, &boundaries(&[1, 2, 3, 4, 5]), 0, 0);
    // Ages 5, 4, 3, 2, 1.
    assert_eq!(a.total.blocks, [0, 1, 1, 1, 2]);
    assert!(a.oldest.is_empty());
}

#[test]
fn ages_of_a_snapshot_graph() {
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    for (seq, thread) in [(1, 7), (6, 7), (9, 8), (0, 8)] {
        objects.push(ObjectRecord {
            id: seq + 100,
            addr: 0x1000 * (seq + 1),
            size: 8,
            site: 0,
            thread,
            seq,
        });
        edges.push([]);
    }
    let sites = vec![Site {
        id: 1,
        frames: vec!["f".into()],
    }];
    let g = HeapGraph::new(Process::default(), sites, objects, edges, vec![], vec![]).unwrap();
    let a = Ages::of_graph(&g, &boundaries(&[5, 8]), 10);
    // Seq 0 (unknown) is left out.
    assert_eq!(a.total.blocks, [1, 1, 1, 0, 0]);
    assert_eq!(a.by_thread[&7].blocks, [0, 1, 1, 0, 0]);
    assert_eq!(a.by_thread[&8].blocks, [1, 0, 0, 0, 0]);
}

#[test]
fn wall_clock_ages_from_the_tracker() {
    let mut t = Tracker::new(TrackerConfig::default());
    let by = Caller {
        stack: NO_STACK,
        tid: 3,
    };
    t.apply(&heaptui_analysis::recording::Event::Clock { unix_ms: 1_000 });
    for seq in 1..=10 {
        t.alloc(AllocKind::Malloc, seq, 0x100 * seq, 16, by);
        if seq == 5 || seq == 8 {
            t.snapshot_boundary();
        }
    }
    for seq in [2, 4, 6, 8] {
        t.free(0x100 * seq, by);
    }
    t.apply(&heaptui_analysis::recording::Event::Clock { unix_ms: 4_500 });
    let a = t.ages(1);
    assert_eq!(a.total.blocks, [2, 1, 3, 0, 0]);
    assert_eq!(a.oldest[0].seq, 1);
    assert_eq!(a.oldest[0].age_ms, Some(3_500));
}
