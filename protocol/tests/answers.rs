//! The answer builders against the worked example `tests/data/patent-example.json`
//! (figures from its `.expected.md`), and paging over larger hand-built graphs.

use std::path::PathBuf;

use heaptui_analysis::{
    self as engine, Analysis, Edges, HeapGraph, Kept, NO_SITE, ObjectRecord, Objects, Process, Site,
};
use heaptui_protocol::answer::{ANSWER_BUDGET, Answerer, MAX_TEXT_LEN, select_page};
use heaptui_protocol::*;
use proptest::prelude::*;

const SNAP: SnapshotId = SnapshotId(7);

fn fixture() -> (HeapGraph, Analysis) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/patent-example.json");
    let graph = engine::snapshot::read_file(&path).unwrap();
    let analysis = Analysis::new(&graph);
    (graph, analysis)
}

fn g(s: &str) -> GroupId {
    s.parse().unwrap()
}

fn ids(list: &IdList) -> Vec<String> {
    list.ids.iter().map(ToString::to_string).collect()
}

/// Object index of the fixture's object id (ids 1..16 are indices 0..15; checked).
fn index_of(graph: &HeapGraph, id: u64) -> u32 {
    graph.objects().id.iter().position(|&i| i == id).unwrap() as u32
}

fn expect<T>(response: Option<Response>, pick: impl FnOnce(Response) -> Option<T>) -> T {
    let response = response.expect("a snapshot request is answered");
    let kind = response.kind();
    pick(response).unwrap_or_else(|| panic!("unexpected {kind} answer"))
}

fn error_of(response: Option<Response>) -> ErrorAnswer {
    expect(response, |r| match r {
        Response::Error(e) => Some(e),
        _ => None,
    })
}

#[test]
fn the_ranking_is_by_total_and_pages_follow_it() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let page = a.threads(Sort::desc(ThreadKey::Total), Page::FIRST);
    assert_eq!(page.snapshot, SNAP);
    assert_eq!(
        page.page,
        PageInfo {
            offset: 0,
            total: 4
        }
    );
    let rows: Vec<_> = page
        .rows
        .iter()
        .map(|r| {
            (
                r.tid,
                r.name.as_str(),
                r.proprietary,
                r.shared,
                r.total,
                r.frames,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, "thread-1", 180, 84, 264, 2),
            (3, "thread-3", 50, 204, 254, 2),
            (2, "thread-2", 120, 84, 204, 2),
            (4, "thread-n", 30, 140, 170, 1),
        ]
    );
    assert!(page.rows.iter().all(|r| r.state == ThreadState::Stopped));

    let second = a.threads(Sort::desc(ThreadKey::Total), Page::new(1, 2));
    assert_eq!(
        second.rows.iter().map(|r| r.tid).collect::<Vec<_>>(),
        [3, 2]
    );
    assert_eq!(
        second.page,
        PageInfo {
            offset: 1,
            total: 4
        }
    );
    let past = a.threads(Sort::desc(ThreadKey::Total), Page::new(9, 2));
    assert!(past.rows.is_empty());

    let tids = |sort| {
        a.threads(sort, Page::FIRST)
            .rows
            .iter()
            .map(|r| r.tid)
            .collect::<Vec<_>>()
    };
    assert_eq!(tids(Sort::asc(ThreadKey::Proprietary)), [4, 3, 2, 1]);
    assert_eq!(tids(Sort::desc(ThreadKey::Shared)), [3, 4, 1, 2]);
    assert_eq!(tids(Sort::desc(ThreadKey::Tid)), [4, 3, 2, 1]);
    assert_eq!(tids(Sort::asc(ThreadKey::Name)), [1, 2, 3, 4]);
    // Equal frame counts fall back to tid ascending, whatever the direction.
    assert_eq!(tids(Sort::desc(ThreadKey::Frames)), [1, 2, 3, 4]);
}

#[test]
fn frames_carry_proprietary_bytes_and_referents() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let t1 = a.frames(1, Page::FIRST).unwrap();
    assert_eq!((t1.tid, t1.page.total), (1, 2));
    let f0 = &t1.rows[0];
    assert_eq!(
        (f0.index, f0.function.as_str(), f0.module.as_str(), f0.kind),
        (0, "Class1.methodB", "app", FrameKind::User)
    );
    assert_eq!(f0.proprietary, 36);
    assert_eq!(ids(&f0.frame_shared), ["F1"]);
    assert_eq!(ids(&f0.thread_shared), ["T1"]);
    assert_eq!(ids(&f0.developed), ["F1", "T1", "T2"]);
    assert_eq!(t1.rows[1].proprietary, 84);

    let t2 = a.frames(2, Page::FIRST).unwrap();
    assert_eq!(t2.rows[0].proprietary, 0);
    assert_eq!(ids(&t2.rows[0].frame_shared), ["F2"]);
    assert_eq!(ids(&t2.rows[0].developed), ["F2", "T1", "T2"]);
    assert_eq!(t2.rows[1].proprietary, 36);

    let t3 = a.frames(3, Page::new(1, 5)).unwrap();
    assert_eq!(t3.rows.len(), 1);
    assert_eq!(t3.rows[0].index, 1);
    assert_eq!(t3.rows[0].kind, FrameKind::System);
    assert_eq!(t3.rows[0].proprietary, 50);

    let e = error_of(a.answer(&RequestBody::Frames {
        tid: 99,
        page: Page::FIRST,
    }));
    assert_eq!(e.kind, ErrorKind::UnknownThread);
    assert!(e.message.contains("99"), "{}", e.message);
}

#[test]
fn groups_carry_entry_sharers_and_referents() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let t1 = a.group(g("T1")).unwrap();
    assert_eq!((t1.entry.id, t1.entry.addr), (5, 66816));
    assert_eq!(t1.label, "Class2.Cache");
    assert_eq!((t1.size, t1.members), (72, 1));
    assert_eq!(
        t1.sharers,
        [Sharer::Thread(1), Sharer::Thread(2), Sharer::Thread(3)]
    );
    assert_eq!(ids(&t1.direct), ["T2"]);
    assert_eq!(ids(&t1.developed), ["T2"]);

    let f2 = a.group(g("F2")).unwrap();
    assert_eq!((f2.entry.id, f2.size, f2.members), (7, 84, 2));
    assert_eq!(f2.sharers, [Sharer::Thread(2)]);
    assert_eq!(ids(&f2.direct), ["T1"]);
    assert_eq!(ids(&f2.developed), ["T1", "T2"]);

    let t4 = a.group(g("T4")).unwrap();
    assert_eq!((t4.entry.id, t4.size), (16, 20));
    assert_eq!(t4.sharers, [Sharer::Thread(4), Sharer::Globals]);

    let g1 = a.group(g("G1")).unwrap();
    assert_eq!(
        (g1.entry.id, g1.label.as_str(), g1.size),
        (15, "Config", 100)
    );

    let e = error_of(a.answer(&RequestBody::Group {
        snapshot: SNAP,
        group: g("T9"),
    }));
    assert_eq!(e.kind, ErrorKind::UnknownGroup);
    assert!(e.message.contains("T9"), "{}", e.message);
}

#[test]
fn group_objects_are_sorted_and_paged() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let page = a
        .group_objects(g("F2"), Sort::desc(ObjectKey::Size), Page::FIRST, None)
        .unwrap();
    assert_eq!(page.page.total, 2);
    let rows: Vec<_> = page
        .rows
        .iter()
        .map(|r| (r.id, r.size, r.site_label.as_str()))
        .collect();
    assert_eq!(rows, [(7, 76, "Class2.Context"), (8, 8, "Class2.Token")]);
    let asc = a
        .group_objects(g("F2"), Sort::asc(ObjectKey::Size), Page::new(1, 1), None)
        .unwrap();
    assert_eq!(asc.rows.iter().map(|r| r.id).collect::<Vec<_>>(), [7]);
    let row = &page.rows[0];
    assert_eq!(row.index, index_of(&graph, 7));
    assert_eq!(row.addr, 67328);
    assert_eq!(row.age, None);

    let e = error_of(a.answer(&RequestBody::GroupObjects {
        snapshot: SNAP,
        group: g("F3"),
        sort: Sort::desc(ObjectKey::Size),
        page: Page::FIRST,
        filter: None,
    }));
    assert_eq!(e.kind, ErrorKind::UnknownGroup);
}

#[test]
fn a_filter_narrows_the_whole_group_before_paging() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let only_token = ObjectFilter::new("token");
    let page = a
        .group_objects(
            g("F2"),
            Sort::desc(ObjectKey::Size),
            Page::FIRST,
            Some(&only_token),
        )
        .unwrap();
    assert_eq!(page.page.total, 1, "the total counts matching rows only");
    assert_eq!(page.rows.iter().map(|r| r.id).collect::<Vec<_>>(), [8]);
    // Smart case: an upper-case letter makes the query case-sensitive.
    let none = a
        .group_objects(
            g("F2"),
            Sort::desc(ObjectKey::Size),
            Page::FIRST,
            Some(&ObjectFilter::new("TOKEN")),
        )
        .unwrap();
    assert_eq!(none.page.total, 0);
    assert!(none.rows.is_empty());
    // An empty query filters nothing; the address matches in hex, like a client shows it.
    let all = a
        .group_objects(
            g("F2"),
            Sort::desc(ObjectKey::Size),
            Page::FIRST,
            Some(&ObjectFilter::new("")),
        )
        .unwrap();
    assert_eq!(all.page.total, 2);
    let by_addr = a
        .group_objects(
            g("F2"),
            Sort::desc(ObjectKey::Size),
            Page::FIRST,
            Some(&ObjectFilter::new(format!("{:#x}", all.rows[0].addr))),
        )
        .unwrap();
    assert!(by_addr.rows.iter().any(|r| r.id == all.rows[0].id));
    // Through the request, for a site.
    let Some(Response::Objects(site_page)) = a.answer(&RequestBody::SiteObjects {
        snapshot: SNAP,
        site: page.rows[0].site,
        sort: Sort::asc(ObjectKey::Index),
        page: Page::FIRST,
        filter: Some(ObjectFilter::new("no such text")),
    }) else {
        panic!("not an object page");
    };
    assert_eq!(site_page.page.total, 0);
}

#[test]
fn an_object_shows_class_stack_and_both_directions_of_references() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let cache = index_of(&graph, 5);
    let d = a.object(cache, Page::FIRST).unwrap();
    assert_eq!(d.object.id, 5);
    assert_eq!(d.class, ObjectClass::ThreadShared);
    assert_eq!(d.group, Some(g("T1")));
    assert_eq!(d.dominator, None);
    assert_eq!(d.stack, ["Class2.Cache"]);
    assert_eq!(d.outgoing.iter().map(|r| r.id).collect::<Vec<_>>(), [6]);
    assert_eq!(d.outgoing_page.total, 1);
    let incoming: Vec<String> = d
        .incoming
        .iter()
        .map(|r| match r {
            Referrer::Frame {
                tid,
                frame,
                function,
            } => format!("{tid}:{frame} {function}"),
            Referrer::Globals => "globals".into(),
            Referrer::Object(row) => format!("object {}", row.id),
        })
        .collect();
    assert_eq!(
        incoming,
        ["1:0 Class1.methodB", "3:1 Class2.methodE", "object 7"]
    );
    assert_eq!(d.incoming_page.total, 3);

    // Paging the reference lists.
    let d = a.object(cache, Page::new(1, 1)).unwrap();
    assert!(d.outgoing.is_empty());
    assert_eq!(d.incoming.len(), 1);
    assert!(matches!(&d.incoming[0], Referrer::Frame { tid: 3, .. }));

    let token = a.object(index_of(&graph, 8), Page::FIRST).unwrap();
    assert_eq!(token.class, ObjectClass::FrameShared { tid: 2 });
    assert_eq!(token.dominator, Some(index_of(&graph, 7)));

    let buffer = a.object(index_of(&graph, 1), Page::FIRST).unwrap();
    assert_eq!(
        buffer.class,
        ObjectClass::FrameProprietary { tid: 1, frame: 1 }
    );
    assert_eq!(buffer.group, None);

    let registry = a.object(index_of(&graph, 16), Page::FIRST).unwrap();
    assert!(registry.incoming.contains(&Referrer::Globals));

    let leak = a.object(index_of(&graph, 13), Page::FIRST).unwrap();
    assert_eq!(leak.class, ObjectClass::DefinitelyLost);
    assert!(leak.incoming.is_empty());
    let child = a.object(index_of(&graph, 14), Page::FIRST).unwrap();
    assert_eq!(child.class, ObjectClass::IndirectlyLost);
    assert!(matches!(&child.incoming[..], [Referrer::Object(r)] if r.id == 13));

    let e = error_of(a.answer(&RequestBody::Object {
        snapshot: SNAP,
        object: 16,
        refs: Page::FIRST,
    }));
    assert_eq!(e.kind, ErrorKind::UnknownObject);
}

#[test]
fn sites_list_live_bytes_and_their_objects() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let page = a.sites(Sort::desc(SiteKey::LiveBytes), Page::new(0, 3));
    assert_eq!(page.page.total, 16);
    let rows: Vec<_> = page
        .rows
        .iter()
        .map(|r| (r.label.as_str(), r.live_bytes, r.blocks))
        .collect();
    assert_eq!(
        rows,
        [
            ("Class3.Pool", 120, 1),
            ("Config", 100, 1),
            ("Class1.Buffer", 84, 1)
        ]
    );
    assert_eq!(page.rows[0].frames, ["Class3.Pool"]);
    assert_eq!(page.rows[0].id, 10);
    let by_label = a.sites(Sort::asc(SiteKey::Label), Page::new(0, 2));
    assert_eq!(by_label.rows[0].label, "Class1.Buffer");
    assert_eq!(by_label.rows[1].label, "Class1.Payload");

    let pool = page.rows[0].site;
    let objects = a
        .site_objects(pool, Sort::desc(ObjectKey::Size), Page::FIRST, None)
        .unwrap();
    assert_eq!(objects.rows.iter().map(|r| r.id).collect::<Vec<_>>(), [10]);

    let e = error_of(a.answer(&RequestBody::SiteObjects {
        snapshot: SNAP,
        site: 16,
        sort: Sort::desc(ObjectKey::Size),
        page: Page::FIRST,
        filter: None,
    }));
    assert_eq!(e.kind, ErrorKind::UnknownSite);
}

#[test]
fn release_is_of_the_set_not_a_sum() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    for (tids, bytes) in [
        (vec![1, 2], 300),
        (vec![3, 4], 200),
        (vec![1, 2, 3], 434),
        (vec![2, 1, 2], 300),
    ] {
        let r = a.release(&tids).unwrap();
        assert_eq!(r.bytes, bytes, "{tids:?}");
    }
    assert_eq!(a.release(&[2, 1, 2]).unwrap().tids, [1, 2]);
    let e = error_of(a.answer(&RequestBody::Release { tids: vec![1, 99] }));
    assert_eq!(e.kind, ErrorKind::UnknownThread);
    assert!(e.message.contains("99"), "{}", e.message);
}

#[test]
fn the_snapshot_summary_has_the_totals_and_leaks() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let info = Answerer::new(SNAP, &kept).snapshot_info();
    assert_eq!(info.snapshot, SNAP);
    assert_eq!(info.threads, 4);
    assert_eq!(
        info.totals,
        Totals {
            objects: 16,
            bytes: 760,
            unreachable_bytes: 56,
            global_only_bytes: 100
        }
    );
    assert_eq!(
        (
            info.leaks.bytes,
            info.leaks.definitely_lost,
            info.leaks.indirectly_lost
        ),
        (56, 40, 16)
    );
}

#[test]
fn snapshot_requests_name_their_snapshot() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    for request in [
        RequestBody::Group {
            snapshot: SnapshotId(6),
            group: g("T1"),
        },
        RequestBody::GroupObjects {
            snapshot: SnapshotId(6),
            group: g("T1"),
            sort: Sort::desc(ObjectKey::Size),
            page: Page::FIRST,
            filter: None,
        },
        RequestBody::SiteObjects {
            snapshot: SnapshotId(6),
            site: 0,
            sort: Sort::desc(ObjectKey::Size),
            page: Page::FIRST,
            filter: None,
        },
        RequestBody::Object {
            snapshot: SnapshotId(6),
            object: 0,
            refs: Page::FIRST,
        },
    ] {
        let e = error_of(a.answer(&request));
        assert_eq!(e.kind, ErrorKind::StaleSnapshot, "{}", request.kind());
        assert!(e.message.contains("snapshot 6"), "{}", e.message);
    }
}

#[test]
fn exactly_the_snapshot_requests_are_answered_here() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let requests = [
        RequestBody::ProcessInfo,
        RequestBody::Subscribe,
        RequestBody::Unsubscribe,
        RequestBody::TakeSnapshot,
        RequestBody::Threads {
            sort: Sort::desc(ThreadKey::Total),
            page: Page::FIRST,
        },
        RequestBody::Frames {
            tid: 1,
            page: Page::FIRST,
        },
        RequestBody::Group {
            snapshot: SNAP,
            group: g("T1"),
        },
        RequestBody::GroupObjects {
            snapshot: SNAP,
            group: g("T1"),
            sort: Sort::desc(ObjectKey::Size),
            page: Page::FIRST,
            filter: None,
        },
        RequestBody::SiteObjects {
            snapshot: SNAP,
            site: 0,
            sort: Sort::desc(ObjectKey::Size),
            page: Page::FIRST,
            filter: None,
        },
        RequestBody::Object {
            snapshot: SNAP,
            object: 0,
            refs: Page::FIRST,
        },
        RequestBody::Sites {
            sort: Sort::desc(SiteKey::LiveBytes),
            page: Page::FIRST,
        },
        RequestBody::Release { tids: vec![1] },
        RequestBody::Policy,
        RequestBody::Cancel {
            tid: 1,
            dry_run: true,
        },
        RequestBody::SnapshotData {
            snapshot: SNAP,
            offset: 0,
        },
        RequestBody::Units {
            query: UnitQuery::default(),
            sort: Sort::desc(UnitKey::Live),
            page: Page::FIRST,
        },
        RequestBody::Leaks { page: Page::FIRST },
        RequestBody::Growth { page: Page::FIRST },
        RequestBody::Ages {
            by: AgeScope::Sites,
            page: Page::FIRST,
            oldest: 5,
        },
        RequestBody::CounterHistory,
        RequestBody::KeptData {
            snapshot: SNAP,
            offset: 0,
        },
    ];
    let kinds: std::collections::BTreeSet<_> = requests.iter().map(|r| r.kind()).collect();
    assert_eq!(kinds.len(), RequestBody::KINDS.len());
    for request in &requests {
        let answer = a.answer(request);
        assert_eq!(
            answer.is_some(),
            request.needs_snapshot(),
            "{}",
            request.kind()
        );
        if let Some(answer) = answer {
            assert!(
                !matches!(answer, Response::Error(_)),
                "{}: {answer:?}",
                request.kind()
            );
        }
    }
}

/// `globals → entry → n members` (one global-only group of n + 1 objects) with sizes that
/// repeat, plus objects of unknown site, to page through.
fn big_group(n: u32) -> HeapGraph {
    let sites = vec![
        Site {
            id: 1,
            frames: vec!["zeta".into()],
        },
        Site {
            id: 2,
            frames: vec!["alpha".into(), "main".into()],
        },
    ];
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    objects.push(ObjectRecord {
        id: 1,
        addr: 0x1000,
        size: 64,
        site: 0,
        thread: 1,
        seq: 1,
    });
    edges.push(1..=n);
    for i in 1..=n {
        let i64 = u64::from(i);
        objects.push(ObjectRecord {
            id: i64 + 1,
            addr: 0x10_0000 + i64 * 0x40,
            size: (i64 * 7919) % 97,
            site: match i % 3 {
                0 => 0,
                1 => 1,
                _ => NO_SITE,
            },
            thread: i % 5,
            seq: i64 + 1,
        });
        edges.push([]);
    }
    HeapGraph::new(Process::default(), sites, objects, edges, vec![], vec![0]).unwrap()
}

#[test]
fn leaks_are_grouped_by_site_most_bytes_first() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let Some(Response::Leaks(page)) = a.answer(&RequestBody::Leaks { page: Page::FIRST }) else {
        panic!("not a leak page");
    };
    // patent-example.expected.md: entry 13 definitely lost (40), 14 indirectly lost (16).
    let definitely: u64 = page.rows.iter().map(|r| r.definitely_lost).sum();
    let indirectly: u64 = page.rows.iter().map(|r| r.indirectly_lost).sum();
    assert_eq!((definitely, indirectly), (40, 16));
    let objects: u64 = page
        .rows
        .iter()
        .map(|r| r.definitely_lost_objects + r.indirectly_lost_objects)
        .sum();
    assert_eq!(objects, 2);
    assert_eq!(page.page.total as usize, page.rows.len());
    let bytes: Vec<u64> = page
        .rows
        .iter()
        .map(|r| r.definitely_lost + r.indirectly_lost)
        .collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "{bytes:?}");
    let first = &page.rows[0];
    assert_eq!(first.label, graph.sites[first.site as usize].label());
    // The site index drills into the site's objects.
    let objects = a
        .site_objects(first.site, Sort::desc(ObjectKey::Size), Page::FIRST, None)
        .unwrap();
    assert!(!objects.rows.is_empty());
}

#[test]
fn ages_count_the_boundaries_each_block_survived() {
    // The vector of docs/reference.md §8: boundaries after allocations 5 and 8; live blocks 1, 3,
    // 5, 7, 9, 10 → ages 2, 2, 2, 1, 0, 0.
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    for (i, seq) in [1u64, 3, 5, 7, 9, 10].into_iter().enumerate() {
        objects.push(ObjectRecord {
            id: seq,
            addr: 0x1000 + 0x100 * i as u64,
            size: 10 * seq,
            site: (i % 2) as u32,
            thread: 7 + (i % 2) as u32,
            seq,
        });
        edges.push([]);
    }
    let sites = vec![
        Site {
            id: 1,
            frames: vec!["even".into()],
        },
        Site {
            id: 2,
            frames: vec!["odd".into()],
        },
    ];
    let graph = HeapGraph::new(Process::default(), sites, objects, edges, vec![], vec![]).unwrap();
    let analysis = Analysis::new(&graph);
    let boundaries = [5u64, 8];
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept).with_boundaries(&boundaries);
    let ages: Vec<Option<u32>> = (0..6).map(|o| a.object_row(o).age).collect();
    assert_eq!(ages, [2, 2, 2, 1, 0, 0].map(Some));
    let answer = a.ages(AgeScope::Sites, Page::FIRST, 2);
    assert_eq!(answer.boundaries, 2);
    assert_eq!(answer.total.blocks, [2, 1, 3, 0, 0]);
    assert_eq!(answer.total.bytes, [190, 70, 90, 0, 0]);
    assert_eq!(answer.page.total, 2);
    let odd = answer.rows.iter().find(|r| r.label == "odd").unwrap();
    // Odd positions: seqs 3, 7, 10 → ages 2, 1, 0.
    assert_eq!(odd.histogram.blocks, [1, 1, 1, 0, 0]);
    let oldest: Vec<u64> = answer.oldest.iter().map(|s| s.object.seq).collect();
    assert_eq!(oldest, [1, 3]);
    assert_eq!(answer.oldest[0].object.age, Some(2));
    let by_thread = a.ages(AgeScope::Threads, Page::new(0, 1), 0);
    assert_eq!(by_thread.page.total, 2);
    assert_eq!(by_thread.rows.len(), 1);
    assert_eq!(
        by_thread.rows[0].label, "thread 8",
        "no thread list: named by id"
    );
    assert!(by_thread.oldest.is_empty());
    // An allocation clock dates each block by its sequence number: before the first
    // reading numbered at least as high, or just before the snapshot after the last one.
    let clock = [(2u64, 1000u64), (6, 2000), (9, 3000)];
    let dated = a
        .with_clock(&clock, 5000)
        .ages(AgeScope::Sites, Page::FIRST, 6);
    let age_ms: Vec<(u64, Option<u64>)> = dated
        .oldest
        .iter()
        .map(|s| (s.object.seq, s.age_ms))
        .collect();
    assert_eq!(
        age_ms,
        [
            (1, Some(4000)),
            (3, Some(3000)),
            (5, Some(3000)),
            (7, Some(2000)),
            (9, Some(2000)),
            (10, Some(0)),
        ]
    );
    assert!(
        answer.oldest.iter().all(|s| s.age_ms.is_none()),
        "no clock, no date"
    );
    // Without boundaries the ages are unknown, not zero.
    let kept = Kept::new(&graph, &analysis);
    let plain = Answerer::new(SNAP, &kept);
    assert_eq!(plain.object_row(0).age, None);
    assert_eq!(plain.ages(AgeScope::Sites, Page::FIRST, 0).boundaries, 0);
}

#[test]
fn paging_through_a_big_group_visits_every_member_once_in_order() {
    let graph = big_group(5000);
    let analysis = Analysis::new(&graph);
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let g1 = g("G1");
    assert_eq!(a.group(g1).unwrap().members, 5001);
    let sizes = &graph.objects().size;
    for sort in [
        Sort::desc(ObjectKey::Size),
        Sort::asc(ObjectKey::Size),
        Sort::asc(ObjectKey::Site),
        Sort::desc(ObjectKey::Addr),
    ] {
        let mut seen = Vec::new();
        let mut offset = 0;
        loop {
            let page = a
                .group_objects(g1, sort, Page::new(offset, 333), None)
                .unwrap();
            assert_eq!(page.page.total, 5001);
            if page.rows.is_empty() {
                break;
            }
            offset += page.rows.len() as u32;
            seen.extend(page.rows.into_iter().map(|r| r.index));
        }
        let mut expected: Vec<u32> = (0..5001).collect();
        let site_rank = |o: u32| match graph.objects().site[o as usize] {
            1 => 0, // "alpha"
            0 => 1, // "zeta"
            _ => 2, // unknown last
        };
        match (sort.key, sort.direction) {
            (ObjectKey::Size, Direction::Descending) => {
                expected.sort_by_key(|&o| (std::cmp::Reverse(sizes[o as usize]), o))
            }
            (ObjectKey::Size, _) => expected.sort_by_key(|&o| (sizes[o as usize], o)),
            (ObjectKey::Site, _) => expected.sort_by_key(|&o| (site_rank(o), o)),
            _ => expected.reverse(), // addresses grow with the index
        }
        assert_eq!(seen, expected, "{sort:?}");
    }
}

#[test]
fn blocks_of_unknown_site_get_their_own_site_row() {
    let graph = big_group(30);
    let analysis = Analysis::new(&graph);
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let sites = a.sites(Sort::desc(SiteKey::Blocks), Page::FIRST);
    let rows: Vec<_> = sites
        .rows
        .iter()
        .map(|r| (r.site, r.label.as_str(), r.blocks))
        .collect();
    assert_eq!(
        rows,
        [(0, "zeta", 11), (1, "alpha", 10), (u32::MAX, "?", 10)]
    );
    assert_eq!(sites.rows[1].frames, ["alpha", "main"]);
    let unknown = a
        .site_objects(u32::MAX, Sort::asc(ObjectKey::Index), Page::FIRST, None)
        .unwrap();
    assert_eq!(unknown.page.total, 10);
    assert!(
        unknown
            .rows
            .iter()
            .all(|r| r.site == u32::MAX && r.site_label == "?")
    );
}

#[test]
fn long_names_are_clipped_so_rows_stay_small() {
    let mut graph = big_group(3);
    graph.sites[0].frames[0] = "x".repeat(100_000);
    let analysis = Analysis::new(&graph);
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let page = a.sites(Sort::asc(SiteKey::Label), Page::FIRST);
    assert!(page.rows.iter().all(|r| r.label.len() <= MAX_TEXT_LEN));
    assert!(
        page.rows
            .iter()
            .all(|r| r.frames.iter().all(|f| f.len() <= MAX_TEXT_LEN))
    );
}

#[test]
fn a_page_of_long_rows_is_cut_by_the_byte_budget() {
    // Ten thousand rows with maximal labels would not fit: the budget cuts the page, and the
    // client continues from offset + rows.len().
    let mut graph = big_group(20_000);
    graph.sites[0].frames[0] = "y".repeat(10_000);
    graph.sites[1].frames[0] = "z".repeat(10_000);
    let analysis = Analysis::new(&graph);
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let page = a
        .group_objects(
            g("G1"),
            Sort::asc(ObjectKey::Index),
            Page::new(0, MAX_PAGE_ROWS),
            None,
        )
        .unwrap();
    let message = ServerMessage::Response {
        id: RequestId(1),
        body: Box::new(Response::Objects(page.clone())),
    };
    let frame = to_frame(&message).unwrap();
    assert!(frame.len() <= ANSWER_BUDGET + (64 << 10), "{}", frame.len());
    assert!(frame.len() > ANSWER_BUDGET * 9 / 10, "{}", frame.len());
    assert_eq!(
        decode_payload::<ServerMessage>(&frame[4..]).unwrap(),
        message
    );
    // Rows of about 4 KiB (clipped labels): a few hundred fit, not ten thousand.
    assert!(page.rows.len() > 300, "{}", page.rows.len());
    assert!(page.rows.len() < 1000, "{}", page.rows.len());
    // The next page starts where this one stopped.
    let next = a
        .group_objects(
            g("G1"),
            Sort::asc(ObjectKey::Index),
            Page::new(page.rows.len() as u32, 1),
            None,
        )
        .unwrap();
    assert_eq!(next.rows[0].index, page.rows.len() as u32);
}

proptest! {
    /// Any window of `select_page` equals the same window of a full sort, duplicates included.
    #[test]
    fn select_page_matches_a_full_sort(
        keys in proptest::collection::vec(0u8..8, 0..200),
        offset in 0u32..220,
        limit in 0u32..220,
    ) {
        let cmp = |a: &u32, b: &u32| keys[*b as usize].cmp(&keys[*a as usize]).then(a.cmp(b));
        let mut items: Vec<u32> = (0..keys.len() as u32).collect();
        let mut sorted = items.clone();
        sorted.sort_by(cmp);
        let got = select_page(&mut items, Page::new(offset, limit), cmp).to_vec();
        let start = (offset as usize).min(sorted.len());
        let end = (start + limit as usize).min(sorted.len());
        prop_assert_eq!(got, sorted[start..end].to_vec());
    }
}

/// The entry of a group is an object row like any other: its fields come from the graph.
#[test]
fn object_rows_copy_the_graph_columns() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    for o in 0..graph.object_count() as u32 {
        let row = a.object_row(o);
        let r = graph.objects().record(o);
        assert_eq!(
            (
                row.index, row.id, row.addr, row.size, row.site, row.thread, row.seq
            ),
            (o, r.id, r.addr, r.size, r.site, r.thread, r.seq)
        );
        assert_eq!(row.site_label, graph.site_label(o));
    }
}

/// Every byte of a chunked answer, asked for from offset 0 on: each chunk starts where the
/// last ended and only the last may be short of the rest.
fn every_chunk(
    request: impl Fn(u64) -> RequestBody,
    answer: impl Fn(RequestBody) -> Option<Response>,
    chunk_of: impl Fn(Response) -> Option<SnapshotChunk>,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let chunk = expect(answer(request(bytes.len() as u64)), &chunk_of);
        assert_eq!(chunk.offset, bytes.len() as u64);
        bytes.extend_from_slice(&chunk.bytes);
        if bytes.len() as u64 == chunk.total {
            return bytes;
        }
        assert!(!chunk.bytes.is_empty());
    }
}

#[test]
fn kept_data_chunks_rebuild_the_kept_snapshot() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let bytes = every_chunk(
        |offset| RequestBody::KeptData {
            snapshot: SNAP,
            offset,
        },
        |body| a.answer(&body),
        |r| match r {
            Response::KeptData(c) => Some(c),
            _ => None,
        },
    );
    // The analysis travels whole: what the client decodes is the agent's kept snapshot.
    assert_eq!(Kept::decode(&mut bytes.as_slice()).unwrap(), kept);
    let stale = error_of(a.answer(&RequestBody::KeptData {
        snapshot: SnapshotId(SNAP.0 + 1),
        offset: 0,
    }));
    assert_eq!(stale.kind, ErrorKind::StaleSnapshot);
}

#[test]
fn snapshot_data_chunks_rebuild_the_graph() {
    let (graph, analysis) = fixture();
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let bytes = every_chunk(
        |offset| RequestBody::SnapshotData {
            snapshot: SNAP,
            offset,
        },
        |body| a.answer(&body),
        |r| match r {
            Response::SnapshotData(c) => Some(c),
            _ => None,
        },
    );
    let back = heaptui_analysis::snapshot::read_bytes(&bytes).unwrap();
    assert_eq!(back.object_count(), graph.object_count());
    assert_eq!(back.total_bytes(), graph.total_bytes());
    let past = error_of(a.answer(&RequestBody::SnapshotData {
        snapshot: SNAP,
        offset: bytes.len() as u64 + 1,
    }));
    assert_eq!(past.kind, ErrorKind::BadRequest);
}

#[test]
fn snapshot_chunks_are_capped_and_cover_the_file() {
    let encoded: Vec<u8> = (0..(MAX_CHUNK_BYTES as usize * 2 + 10))
        .map(|i| i as u8)
        .collect();
    let mut offset = 0u64;
    let mut sizes = Vec::new();
    while offset < encoded.len() as u64 {
        let chunk = heaptui_protocol::answer::snapshot_chunk(SNAP, &encoded, offset).unwrap();
        assert_eq!(
            chunk.bytes[..],
            encoded[offset as usize..][..chunk.bytes.len()]
        );
        sizes.push(chunk.bytes.len());
        offset += chunk.bytes.len() as u64;
    }
    assert_eq!(
        sizes,
        [MAX_CHUNK_BYTES as usize, MAX_CHUNK_BYTES as usize, 10]
    );
    // A chunk must fit in one frame with its envelope.
    let big = heaptui_protocol::answer::snapshot_chunk(SNAP, &encoded, 0).unwrap();
    assert!(encoded_len(&Response::SnapshotData(big)) < MAX_FRAME_LEN);
}

/// Possibly lost blocks (docs/reference.md §3): the leak page counts them per site, the
/// object's detail says so, and they keep their reachable class.
#[test]
fn possibly_lost_blocks_are_counted_by_site_and_named_in_the_detail() {
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    for (i, site) in [(0u64, 0u32), (1, 0), (2, NO_SITE)] {
        objects.push(ObjectRecord {
            id: i + 1,
            addr: 0x1000 + 0x100 * i,
            size: 16 * (i + 1),
            site,
            thread: 1,
            seq: i + 1,
        });
    }
    // globals -> 0 (interior) -> 1 (start); globals -> 2 (start).
    edges.push([1]);
    edges.push([]);
    edges.push([]);
    let sites = vec![Site {
        id: 1,
        frames: vec!["make_buffer".into(), "main".into()],
    }];
    let graph = HeapGraph::new(
        Process::default(),
        sites,
        objects,
        edges,
        vec![],
        vec![0, 2],
    )
    .unwrap()
    .with_globals_interior(vec![0])
    .unwrap();
    let analysis = Analysis::new(&graph);
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SNAP, &kept);
    let Some(Response::Leaks(page)) = a.answer(&RequestBody::Leaks { page: Page::FIRST }) else {
        panic!("not a leak page");
    };
    assert_eq!(page.rows.len(), 1, "{page:?}");
    let row = &page.rows[0];
    assert_eq!(row.label, "make_buffer");
    assert_eq!((row.possibly_lost, row.possibly_lost_objects), (48, 2));
    assert_eq!(row.definitely_lost + row.indirectly_lost, 0);
    for (o, possibly) in [(0, true), (1, true), (2, false)] {
        let detail = a.object(o, Page::FIRST).unwrap();
        assert_eq!(detail.possibly_lost, possibly, "object {o}");
        assert_eq!(detail.class, ObjectClass::GlobalOnly, "object {o}");
    }
}

/// `globals → entry → n members` whose every column repeats values (ties in every sort key),
/// drawn from `seed`: sizes with a few huge ones (kept aside by the packed column), ids apart
/// from sequence numbers, sites including unknown ones, and addresses either ascending with
/// terabyte gaps (runs) or small and repeated.
fn tied_group(n: u32, seed: u64) -> HeapGraph {
    let mut x = seed | 1;
    let mut next = move |below: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % below
    };
    let sites = vec![
        Site {
            id: 1,
            frames: vec!["zeta".into()],
        },
        Site {
            id: 2,
            frames: vec!["alpha".into()],
        },
        Site {
            id: 3,
            frames: vec!["alpha".into()],
        },
    ];
    let spread = next(2) == 0;
    let mut objects = Objects::default();
    let mut edges = Edges::default();
    edges.push(1..=n);
    for i in 0..=n {
        let i64 = u64::from(i);
        objects.push(ObjectRecord {
            id: next(50) + 1,
            addr: if spread {
                0x1000 + i64 * 0x40 + ((i64 / 700) << 40)
            } else {
                0x1000 + next(64) * 0x10
            },
            size: match next(40) {
                0 => 1 << 36,
                r => r % 9,
            },
            site: match next(4) {
                3 => NO_SITE,
                s => s as u32,
            },
            thread: next(4) as u32,
            seq: next(30),
        });
        if i > 0 {
            edges.push([]);
        }
    }
    HeapGraph::new(Process::default(), sites, objects, edges, vec![], vec![0]).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// A page of a group's members, in every sort column and direction, equals the same window
    /// of a full sort by (key, index) — near either end (the streamed selections) and in the
    /// middle (the collected one), ties included.
    #[test]
    fn a_page_of_objects_is_that_window_of_a_full_sort(
        seed in any::<u64>(),
        small in any::<bool>(),
        at in 0.0f64..1.0,
        limit in 1u32..300,
    ) {
        let n = if small { 250 } else { 9_000 };
        let graph = tied_group(n, seed);
        let kept = Kept::new(&graph, &Analysis::new(&graph));
        let a = Answerer::new(SNAP, &kept);
        let group = kept.group_of(0).map(GroupId::from).expect("the entry is in a group");
        let total = n + 1;
        let o = graph.objects();
        // Site order: by label, ties by index; unknown last.
        let site_rank = |s: u32| match s {
            1 => 0, // "alpha", site 1
            2 => 1, // "alpha", site 2
            0 => 2, // "zeta"
            _ => u64::MAX,
        };
        let keys = [
            ObjectKey::Size,
            ObjectKey::Addr,
            ObjectKey::Seq,
            ObjectKey::Id,
            ObjectKey::Site,
            ObjectKey::Thread,
            ObjectKey::Index,
        ];
        for key in keys {
            let of = |i: usize| match key {
                ObjectKey::Size => o.size[i],
                ObjectKey::Addr => o.addr[i],
                ObjectKey::Seq => o.seq[i],
                ObjectKey::Id => o.id[i],
                ObjectKey::Site => site_rank(o.site[i]),
                ObjectKey::Thread => u64::from(o.thread[i]),
                ObjectKey::Index => i as u64,
            };
            for sort in [Sort::asc(key), Sort::desc(key)] {
                let mut sorted: Vec<u32> = (0..total).collect();
                match sort.direction {
                    Direction::Ascending => sorted.sort_by_key(|&i| (of(i as usize), i)),
                    Direction::Descending => {
                        sorted.sort_by_key(|&i| (std::cmp::Reverse(of(i as usize)), i))
                    }
                }
                let middle = (f64::from(total) * at) as u32;
                for offset in [0, 1, middle, total.saturating_sub(limit), total - 1, total] {
                    let page = a
                        .group_objects(group, sort, Page::new(offset, limit), None)
                        .unwrap();
                    let got: Vec<u32> = page.rows.iter().map(|r| r.index).collect();
                    let start = (offset as usize).min(sorted.len());
                    let end = (start + limit as usize).min(sorted.len());
                    prop_assert_eq!(got, sorted[start..end].to_vec(), "{:?} offset {}", sort, offset);
                }
            }
        }
    }
}
