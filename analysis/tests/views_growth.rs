//! Growth and leaks by site against the vectors of issue 7.

use heaptui_analysis::Analysis;
use heaptui_analysis::graph::{
    Edges, Frame, HeapGraph, NO_SITE, ObjectRecord, Objects, Process, Site, Thread,
};
use heaptui_analysis::views::growth::{Growth, leaks_by_site, live_by_site};

fn site(name: &str) -> Vec<String> {
    vec![name.to_string(), "main".to_string()]
}

#[test]
fn a_site_growing_across_three_snapshots_is_flagged() {
    let mut g = Growth::new(3);
    for (a, b, c) in [(100, 100, 500), (200, 200, 500), (300, 100, 500)] {
        g.push([(site("a"), a), (site("b"), b), (site("c"), c)]);
    }
    let flagged: Vec<&str> = g.flagged().iter().map(|s| s.frames[0].as_str()).collect();
    assert_eq!(
        flagged,
        ["a"],
        "100→200→300 flagged, 100→200→100 not, flat not"
    );
    assert_eq!(g.sites()[0].history, [100, 200, 300]);
    assert!(!g.sites()[1].growing);
    // Two snapshots are not yet a run of three.
    let mut short = Growth::new(3);
    short.push([(site("a"), 100)]);
    short.push([(site("a"), 200)]);
    assert!(!short.sites()[0].growing);
}

#[test]
fn a_site_appearing_late_starts_from_zero() {
    let mut g = Growth::new(3);
    g.push([(site("old"), 10)]);
    g.push([(site("old"), 10), (site("new"), 5)]);
    g.push([(site("old"), 10), (site("new"), 6)]);
    let new = &g.sites()[1];
    assert_eq!(new.history, [0, 5, 6]);
    assert!(new.growing);
}

#[test]
fn a_site_over_three_quarters_of_the_heap_is_flagged() {
    let mut g = Growth::new(3);
    g.push([(site("big"), 76), (site("small"), 24)]);
    assert!(g.sites()[0].dominant);
    assert!(!g.sites()[1].dominant);
    g.push([(site("big"), 75), (site("small"), 25)]);
    assert!(!g.sites()[0].dominant, "exactly 75% is not over 75%");
}

/// Objects 0 (site a, held by a frame), 1 (site b, unreachable, points to 2),
/// 2 (site a, pointed to by 1 only), 3 (no site, unreachable).
fn leaky_graph() -> HeapGraph {
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    let rows = [
        (0, 10, &[][..]),
        (1, 20, &[2][..]),
        (0, 40, &[][..]),
        (NO_SITE, 80, &[][..]),
    ];
    for (i, (site, size, refs)) in rows.into_iter().enumerate() {
        objects.push(ObjectRecord {
            id: i as u64 + 1,
            addr: 0x1000 * (i as u64 + 1),
            size,
            site,
            thread: 1,
            seq: i as u64 + 1,
        });
        edges.push(refs.iter().copied());
    }
    let sites = vec![
        Site {
            id: 1,
            frames: site("a"),
        },
        Site {
            id: 2,
            frames: site("b"),
        },
    ];
    let threads = vec![Thread {
        tid: 1,
        frames: vec![Frame {
            function: "main".into(),
            refs: vec![0],
            ..Frame::default()
        }],
        ..Thread::default()
    }];
    HeapGraph::new(Process::default(), sites, objects, edges, threads, vec![]).unwrap()
}

#[test]
fn leaks_by_site_split_definitely_and_indirectly_lost() {
    let g = leaky_graph();
    let a = Analysis::new(&g);
    let rows = leaks_by_site(&g, &a);
    let summary: Vec<(Vec<String>, u64, u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.frames.clone(),
                r.definitely_lost,
                r.definitely_lost_objects,
                r.indirectly_lost,
                r.indirectly_lost_objects,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (vec![], 80, 1, 0, 0),
            (site("a"), 0, 0, 40, 1),
            (site("b"), 20, 1, 0, 0),
        ]
    );
    let total: u64 = rows.iter().map(|r| r.bytes()).sum();
    assert_eq!(total, a.leaks().bytes);
}

#[test]
fn growth_from_graphs() {
    let g = leaky_graph();
    let live = live_by_site(&g);
    assert_eq!(live[&site("a")], 50);
    assert_eq!(live[&site("b")], 20);
    assert_eq!(live[&Vec::<String>::new()], 80);
    let mut growth = Growth::new(2);
    growth.push_graph(&g);
    assert_eq!(growth.snapshots(), 1);
    assert!(
        growth.flagged().is_empty(),
        "no site over 75%, no history yet"
    );
}
