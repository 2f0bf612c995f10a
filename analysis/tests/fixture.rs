//! The worked example `tests/data/patent-example.json`: every figure of its
//! `.expected.md`, read through the real JSON snapshot reader and the real engine.

use std::path::Path;

use heaptui_analysis::snapshot::read_file;
use heaptui_analysis::{
    Analysis, GroupId, GroupKind, HeapGraph, Holder, ObjectClass, ObjectIndex, Sharer,
    UnknownThread,
};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/data/patent-example.json"
);

fn load() -> (HeapGraph, Analysis) {
    let graph = read_file(Path::new(FIXTURE)).expect("the fixture reads");
    let analysis = Analysis::new(&graph);
    (graph, analysis)
}

/// Object index of the object with snapshot id `id`.
fn ix(graph: &HeapGraph, id: u64) -> ObjectIndex {
    graph
        .objects()
        .id
        .iter()
        .position(|&i| i == id)
        .unwrap_or_else(|| panic!("no object {id}")) as ObjectIndex
}

fn ids(graph: &HeapGraph, objects: &[ObjectIndex]) -> Vec<u64> {
    objects
        .iter()
        .map(|&o| graph.objects().id[o as usize])
        .collect()
}

fn gid(s: &str) -> GroupId {
    s.parse().unwrap()
}

fn gids(list: &[&str]) -> Vec<GroupId> {
    list.iter().map(|s| gid(s)).collect()
}

#[test]
fn per_thread_figures() {
    let (graph, a) = load();
    let got: Vec<(u32, &str, u64, u64, u64)> = a
        .threads()
        .iter()
        .zip(&graph.threads)
        .map(|(f, t)| (f.tid, t.name.as_str(), f.proprietary, f.shared, f.total))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "thread-1", 180, 84, 264),
            (2, "thread-2", 120, 84, 204),
            (3, "thread-3", 50, 204, 254),
            (4, "thread-n", 30, 140, 170),
        ]
    );
    assert_eq!(a.ranking(), vec![0, 2, 1, 3]);
}

#[test]
fn per_frame_proprietary_bytes_and_members() {
    let (graph, a) = load();
    let expected = [
        (0, 0, "Class1.methodB", 36, vec![3, 4]),
        (0, 1, "Class1.methodA", 84, vec![1]),
        (1, 0, "Class1.methodC", 0, vec![]),
        (1, 1, "Class2.methodD", 36, vec![9]),
        (2, 0, "Class3.methodG", 0, vec![]),
        (2, 1, "Class2.methodE", 50, vec![11]),
        (3, 0, "Class1.methodF", 30, vec![12]),
    ];
    let frame_count: usize = a.threads().iter().map(|t| t.frames.len()).sum();
    assert_eq!(frame_count, expected.len());
    for (t, f, function, bytes, members) in expected {
        assert_eq!(graph.threads[t].frames[f].function, function);
        assert_eq!(a.threads()[t].frames[f].proprietary, bytes, "frame {t}:{f}");
        assert_eq!(
            ids(&graph, &a.frame_members(t, f)),
            members,
            "frame {t}:{f}"
        );
    }
    assert!(a.frame_members(3, 1).is_empty());
    assert!(a.frame_members(9, 0).is_empty());
}

#[test]
fn every_group() {
    let (graph, a) = load();
    let t = Sharer::Thread;
    // (id, kind, entry id, label, member ids, size, sharers, refs)
    let expected = [
        (
            "F1",
            GroupKind::FrameShared,
            2,
            "Class1.Session",
            vec![2],
            60,
            vec![t(1)],
            vec![],
        ),
        (
            "F2",
            GroupKind::FrameShared,
            7,
            "Class2.Context",
            vec![7, 8],
            84,
            vec![t(2)],
            vec!["T1"],
        ),
        (
            "T1",
            GroupKind::ThreadShared,
            5,
            "Class2.Cache",
            vec![5],
            72,
            vec![t(1), t(2), t(3)],
            vec!["T2"],
        ),
        (
            "T2",
            GroupKind::ThreadShared,
            6,
            "Class2.Entry",
            vec![6],
            12,
            vec![t(1), t(2), t(3)],
            vec![],
        ),
        (
            "T3",
            GroupKind::ThreadShared,
            10,
            "Class3.Pool",
            vec![10],
            120,
            vec![t(3), t(4)],
            vec![],
        ),
        (
            "T4",
            GroupKind::ThreadShared,
            16,
            "Registry",
            vec![16],
            20,
            vec![t(4), Sharer::Globals],
            vec![],
        ),
        (
            "G1",
            GroupKind::GlobalOnly,
            15,
            "Config",
            vec![15],
            100,
            vec![Sharer::Globals],
            vec![],
        ),
    ];
    assert_eq!(a.groups().len(), expected.len());
    for (g, (id, kind, entry, label, members, size, sharers, refs)) in
        a.groups().iter().zip(expected)
    {
        assert_eq!(g.id, gid(id));
        assert_eq!(g.id.kind, kind);
        assert_eq!(graph.objects().id[g.entry as usize], entry, "{id}");
        assert_eq!(graph.site_label(g.entry), label, "{id}");
        assert_eq!(ids(&graph, &a.members(g.id)), members, "{id}");
        assert_eq!(g.objects, members.len() as u64, "{id}");
        assert_eq!(g.size, size, "{id}");
        assert_eq!(g.sharers, sharers, "{id}");
        assert_eq!(g.refs, gids(&refs), "{id}");
        assert_eq!(a.group(g.id), Some(g));
        assert_eq!(a.direct_referents(Holder::Group(g.id)), gids(&refs), "{id}");
        for &m in &a.members(g.id) {
            assert_eq!(a.group_of(m), Some(g.id));
        }
    }
    assert_eq!(a.group(gid("T5")), None);
    assert!(a.members(gid("G2")).is_empty());
    assert_eq!(
        a.developed_referents(Holder::Group(gid("F2"))),
        gids(&["T1", "T2"])
    );
}

#[test]
fn frame_referents_direct_and_developed() {
    let (_, a) = load();
    let direct = [
        ((0, 0), vec!["F1"], vec!["T1"]),
        ((0, 1), vec!["F1"], vec![]),
        ((1, 0), vec!["F2"], vec![]),
        ((1, 1), vec!["F2"], vec![]),
        ((2, 0), vec![], vec!["T2"]),
        ((2, 1), vec![], vec!["T1", "T2", "T3"]),
        ((3, 0), vec![], vec!["T3", "T4"]),
    ];
    for ((t, f), frame_shared, thread_shared) in direct {
        let figures = &a.threads()[t].frames[f];
        assert_eq!(figures.frame_shared, gids(&frame_shared), "frame {t}:{f}");
        assert_eq!(figures.thread_shared, gids(&thread_shared), "frame {t}:{f}");
        let mut all = gids(&frame_shared);
        all.extend(gids(&thread_shared));
        assert_eq!(
            a.direct_referents(Holder::Frame {
                thread: t,
                frame: f
            }),
            all
        );
    }
    // Class1.methodB: frame-shared {entry 2}; thread-shared {entry 5 → entry 6}.
    assert_eq!(
        a.developed_referents(Holder::Frame {
            thread: 0,
            frame: 0
        }),
        gids(&["F1", "T1", "T2"])
    );
    // Class1.methodC: frame-shared {entry 7 → entry 5 → entry 6}.
    assert_eq!(
        a.developed_referents(Holder::Frame {
            thread: 1,
            frame: 0
        }),
        gids(&["F2", "T1", "T2"])
    );
    assert!(
        a.direct_referents(Holder::Frame {
            thread: 0,
            frame: 5
        })
        .is_empty()
    );
}

#[test]
fn classes_and_dominators_of_every_object() {
    let (graph, a) = load();
    use ObjectClass::*;
    let expected = [
        (
            1,
            FrameProprietary {
                thread: 0,
                frame: 1,
            },
            None,
        ),
        (2, FrameShared { thread: 0 }, None),
        (
            3,
            FrameProprietary {
                thread: 0,
                frame: 0,
            },
            None,
        ),
        (
            4,
            FrameProprietary {
                thread: 0,
                frame: 0,
            },
            Some(3),
        ),
        (5, ThreadShared, None),
        (6, ThreadShared, None),
        (7, FrameShared { thread: 1 }, None),
        (8, FrameShared { thread: 1 }, Some(7)),
        (
            9,
            FrameProprietary {
                thread: 1,
                frame: 1,
            },
            None,
        ),
        (10, ThreadShared, None),
        (
            11,
            FrameProprietary {
                thread: 2,
                frame: 1,
            },
            None,
        ),
        (
            12,
            FrameProprietary {
                thread: 3,
                frame: 0,
            },
            None,
        ),
        (13, DefinitelyLost, None),
        (14, IndirectlyLost, None),
        (15, GlobalOnly, None),
        (16, ThreadShared, None),
    ];
    for (id, class, dominator) in expected {
        let o = ix(&graph, id);
        assert_eq!(a.class_of(o), class, "object {id}");
        assert_eq!(
            a.dominator(o),
            dominator.map(|d| ix(&graph, d)),
            "object {id}"
        );
        let grouped = matches!(class, FrameShared { .. } | ThreadShared | GlobalOnly);
        assert_eq!(a.group_of(o).is_some(), grouped, "object {id}");
    }
}

#[test]
fn leaks_and_totals() {
    let (graph, a) = load();
    let leaks = a.leaks();
    assert_eq!((leaks.bytes, leaks.objects), (56, 2));
    assert_eq!(
        (leaks.definitely_lost, leaks.definitely_lost_objects),
        (40, 1)
    );
    assert_eq!(
        (leaks.indirectly_lost, leaks.indirectly_lost_objects),
        (16, 1)
    );
    let (definitely, indirectly) = a.leaked();
    assert_eq!(ids(&graph, definitely), vec![13]);
    assert_eq!(ids(&graph, indirectly), vec![14]);
    let totals = a.totals();
    assert_eq!(totals.objects, 16);
    assert_eq!(totals.bytes, 760);
    assert_eq!(totals.unreachable_bytes, 56);
    assert_eq!(totals.global_only_bytes, 100);
}

#[test]
fn release_of_thread_sets() {
    let (_, a) = load();
    assert_eq!(a.release(&[1, 2]), Ok(300));
    assert_eq!(a.release(&[3, 4]), Ok(200));
    assert_eq!(a.release(&[1, 2, 3]), Ok(434));
    assert_eq!(a.release(&[3, 2, 1, 2]), Ok(434));
    // Registry (entry 16) stays even when every thread ends: the globals hold it.
    assert_eq!(
        a.release(&[1, 2, 3, 4]),
        Ok(180 + 120 + 50 + 30 + 72 + 12 + 120)
    );
    assert_eq!(a.release(&[]), Ok(0));
    assert_eq!(a.release(&[1]), Ok(180));
    assert_eq!(a.release(&[1, 99]), Err(UnknownThread(99)));
}
