//! Shared by the protocol's integration tests: one fixed sample of every message kind (for the
//! golden fixtures) and proptest strategies generating every message (for the round trips).

#![allow(dead_code)]

use heaptui_protocol::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Fixed samples: every field set to something distinctive, so a golden file pins them all.

pub fn sample_counters() -> LiveCounters {
    LiveCounters {
        live_bytes: 1 << 30,
        live_blocks: 123_456,
        allocated_bytes: 5 << 30,
        peak_live_bytes: (1 << 30) + 17,
        unix_ms: 1_790_000_000_123,
    }
}

pub fn sample_snapshot_info() -> SnapshotInfo {
    SnapshotInfo {
        snapshot: SnapshotId(3),
        taken_unix_ms: 1_790_000_000_000,
        pause_us: 1_234,
        capture_us: 5_678,
        analysis_us: 91_011,
        threads: 4,
        threads_not_stopped: 1,
        totals: Totals {
            objects: 16,
            bytes: 760,
            unreachable_bytes: 56,
            global_only_bytes: 100,
        },
        leaks: Leaks {
            bytes: 56,
            objects: 2,
            definitely_lost: 40,
            indirectly_lost: 16,
            definitely_lost_objects: 1,
            indirectly_lost_objects: 1,
            possibly_lost: 24,
            possibly_lost_objects: 1,
        },
        held_bytes: 4096,
    }
}

fn gid(kind: GroupKind, number: u32) -> GroupId {
    GroupId { kind, number }
}

pub fn sample_object_row() -> ObjectRow {
    ObjectRow {
        index: 4,
        id: 5,
        addr: 66816,
        size: 72,
        site: 4,
        site_label: "Class2.Cache".into(),
        thread: 1,
        seq: 12,
        age: Some(2),
    }
}

pub fn sample_hello() -> Hello {
    Hello::new("0123456789abcdef0123456789abcdef", "heaptui 0.1.0")
}

pub fn sample_welcome() -> Welcome {
    Welcome::accepted(AgentInfo {
        pid: 4242,
        command: "./server --port 80".into(),
        agent_version: "0.1.0".into(),
        started_unix_ms: 1_790_000_000_000,
    })
}

pub fn sample_refusal() -> Welcome {
    Welcome::refused(Refusal {
        reason: RefusalReason::WrongToken,
        message: "wrong token".into(),
    })
}

/// One request of every kind, named by `RequestBody::kind`.
pub fn sample_requests() -> Vec<Request> {
    let snapshot = SnapshotId(3);
    let t1 = gid(GroupKind::ThreadShared, 1);
    let bodies = vec![
        RequestBody::ProcessInfo,
        RequestBody::Subscribe,
        RequestBody::Unsubscribe,
        RequestBody::TakeSnapshot,
        RequestBody::Threads {
            sort: Sort::desc(ThreadKey::Total),
            page: Page::new(0, 100),
        },
        RequestBody::Frames {
            tid: 7,
            page: Page::new(10, 20),
        },
        RequestBody::Group {
            snapshot,
            group: t1,
        },
        RequestBody::GroupObjects {
            snapshot,
            group: gid(GroupKind::FrameShared, 2),
            sort: Sort::desc(ObjectKey::Size),
            page: Page::new(1000, 500),
            filter: Some(ObjectFilter::new("cache")),
        },
        RequestBody::SiteObjects {
            snapshot,
            site: 9,
            sort: Sort::asc(ObjectKey::Seq),
            page: Page::new(0, 50),
            filter: None,
        },
        RequestBody::Object {
            snapshot,
            object: 123_456,
            refs: Page::new(0, 200),
        },
        RequestBody::Sites {
            sort: Sort::asc(SiteKey::Label),
            page: Page::new(5, 25),
        },
        RequestBody::Release {
            tids: vec![1, 2, 3],
        },
        RequestBody::Policy,
        RequestBody::Cancel {
            tid: 77,
            dry_run: true,
        },
        RequestBody::SnapshotData {
            snapshot,
            offset: 1 << 23,
        },
        RequestBody::Units {
            query: UnitQuery {
                granularity: UnitGranularity::Function,
                position: UnitPosition::Inclusive,
                charge: UnitCharge::Freer,
            },
            sort: Sort::desc(UnitKey::Max),
            page: Page::new(0, 100),
        },
        RequestBody::Leaks {
            page: Page::new(0, 30),
        },
        RequestBody::Growth {
            page: Page::new(2, 40),
        },
        RequestBody::Ages {
            by: AgeScope::Threads,
            page: Page::new(0, 60),
            oldest: 20,
        },
        RequestBody::CounterHistory,
        RequestBody::KeptData {
            snapshot,
            offset: 1 << 23,
        },
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| Request {
            id: RequestId(1000 + i as u64),
            body,
        })
        .collect()
}

/// One answer of every kind, named by `Response::kind`.
pub fn sample_responses() -> Vec<Response> {
    let snapshot = SnapshotId(3);
    let f1 = gid(GroupKind::FrameShared, 1);
    let t1 = gid(GroupKind::ThreadShared, 1);
    let t2 = gid(GroupKind::ThreadShared, 2);
    vec![
        Response::ProcessInfo(ProcessInfo {
            pid: 4242,
            command: "./server".into(),
            agent_version: "0.1.0".into(),
            counters: sample_counters(),
            threads: 9,
            snapshot: Some(sample_snapshot_info()),
            policy_loaded: true,
            peak_snapshot: Some(sample_snapshot_info()),
            snapshot_rule: SnapshotRule::Tolerance(1 << 20),
        }),
        Response::Subscribed { interval_ms: 1000 },
        Response::Unsubscribed,
        Response::Snapshot(sample_snapshot_info()),
        Response::Threads(ThreadPage {
            snapshot,
            page: PageInfo {
                offset: 0,
                total: 2,
            },
            rows: vec![
                ThreadRow {
                    tid: 1,
                    name: "thread-1".into(),
                    state: ThreadState::Stopped,
                    proprietary: 180,
                    shared: 84,
                    total: 264,
                    frames: 2,
                },
                ThreadRow {
                    tid: 5,
                    name: "vforker".into(),
                    state: ThreadState::NotStoppable("in vfork".into()),
                    proprietary: 0,
                    shared: 0,
                    total: 0,
                    frames: 0,
                },
            ],
        }),
        Response::Frames(FramePage {
            snapshot,
            tid: 1,
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![FrameRow {
                index: 0,
                function: "Class1.methodB".into(),
                module: "app".into(),
                kind: FrameKind::User,
                proprietary: 36,
                frame_shared: IdList {
                    ids: vec![f1],
                    total: 1,
                },
                thread_shared: IdList {
                    ids: vec![t1],
                    total: 300,
                },
                developed: IdList {
                    ids: vec![f1, t1, t2],
                    total: 3,
                },
            }],
        }),
        Response::Group(GroupInfo {
            snapshot,
            id: t1,
            entry: sample_object_row(),
            label: "Class2.Cache".into(),
            size: 72,
            members: 1,
            sharers: vec![Sharer::Thread(1), Sharer::Thread(2), Sharer::Globals],
            direct: IdList {
                ids: vec![t2],
                total: 1,
            },
            developed: IdList {
                ids: vec![t2],
                total: 1,
            },
        }),
        Response::Objects(ObjectPage {
            snapshot,
            page: PageInfo {
                offset: 1000,
                total: 1_000_000,
            },
            rows: vec![
                sample_object_row(),
                ObjectRow {
                    age: None,
                    site: u32::MAX,
                    site_label: "?".into(),
                    ..sample_object_row()
                },
            ],
        }),
        Response::Object(ObjectDetail {
            snapshot,
            object: sample_object_row(),
            class: ObjectClass::FrameProprietary { tid: 1, frame: 0 },
            possibly_lost: true,
            group: Some(t1),
            dominator: Some(6),
            stack: vec!["alloc_buf (server.c:42)".into(), "main".into()],
            outgoing_page: PageInfo {
                offset: 0,
                total: 1,
            },
            outgoing: vec![sample_object_row()],
            incoming_page: PageInfo {
                offset: 0,
                total: 3,
            },
            incoming: vec![
                Referrer::Frame {
                    tid: 1,
                    frame: 0,
                    function: "Class1.methodB".into(),
                },
                Referrer::Globals,
                Referrer::Object(sample_object_row()),
            ],
        }),
        Response::Sites(SitePage {
            snapshot,
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![SiteRow {
                site: 0,
                id: 1,
                label: "alloc_buf (server.c:42)".into(),
                frames: vec!["alloc_buf (server.c:42)".into(), "main".into()],
                live_bytes: 84,
                blocks: 1,
            }],
        }),
        Response::Release(ReleaseAnswer {
            snapshot,
            tids: vec![1, 2],
            bytes: 300,
        }),
        Response::Policy(PolicyAnswer::Loaded {
            path: "/etc/heaptui/policy.toml".into(),
            text: "dry_run = false\n".into(),
            summary: PolicySummary {
                dry_run: false,
                min_release: 1 << 20,
                permits: vec![
                    PermitRule {
                        thread: Some("report-*".into()),
                        function: None,
                        mechanism: Mechanism::Cooperative,
                    },
                    PermitRule {
                        thread: None,
                        function: Some("build_report".into()),
                        mechanism: Mechanism::PthreadCancel,
                    },
                ],
                trigger: Some(Trigger {
                    live_bytes: Some(512 << 20),
                    on_malloc_failure: true,
                }),
            },
        }),
        Response::Cancel(CancelVerdict {
            tid: 77,
            verdict: Verdict::Refused("no permit rule matches thread 77 (worker-3)".into()),
            predicted_release: Some(1 << 20),
            rule: Some("thread = \"report-*\"".into()),
            mechanism: Some(Mechanism::Cooperative),
        }),
        Response::error(ErrorKind::UnknownGroup, "unknown group T9 in snapshot 3"),
        Response::SnapshotData(SnapshotChunk {
            snapshot,
            offset: 1 << 23,
            total: (1 << 23) + 5,
            bytes: b"HSNAP".to_vec(),
        }),
        Response::KeptData(SnapshotChunk {
            snapshot,
            offset: 0,
            total: 12,
            bytes: b"HEAPTUI\0KEPT".to_vec(),
        }),
        Response::Units(UnitPage {
            query: UnitQuery::default(),
            events: 4,
            unknown_frees: 1,
            unknown_reallocs: 2,
            page: PageInfo {
                offset: 0,
                total: 2,
            },
            rows: vec![
                UnitRow {
                    name: "liba.so".into(),
                    live: 100,
                    min: 0,
                    max: 100,
                    malloc: 1,
                    realloc: 0,
                    free: 0,
                    memalign: 0,
                },
                UnitRow {
                    name: "libb.so".into(),
                    live: -20,
                    min: -50,
                    max: 50,
                    malloc: 1,
                    realloc: 1,
                    free: 1,
                    memalign: 3,
                },
            ],
        }),
        Response::Leaks(LeakPage {
            snapshot,
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![LeakRow {
                site: 2,
                label: "leak_loop (leak.c:9)".into(),
                frames: vec!["leak_loop (leak.c:9)".into(), "main".into()],
                definitely_lost: 40,
                definitely_lost_objects: 1,
                indirectly_lost: 16,
                indirectly_lost_objects: 1,
                possibly_lost: 24,
                possibly_lost_objects: 1,
            }],
        }),
        Response::Growth(GrowthPage {
            snapshots: 3,
            run: 3,
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![GrowthRow {
                label: "grow (grow.c:5)".into(),
                frames: vec!["grow (grow.c:5)".into()],
                history: vec![100, 200, 300],
                growing: true,
                dominant: false,
            }],
        }),
        Response::Ages(AgesAnswer {
            snapshot,
            by: AgeScope::Sites,
            boundaries: 2,
            total: AgeHistogram {
                blocks: [2, 1, 3, 0, 0],
                bytes: [20, 10, 30, 0, 0],
            },
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![AgeRow {
                key: 4,
                label: "Class2.Cache".into(),
                histogram: AgeHistogram {
                    blocks: [0, 0, 1, 0, 0],
                    bytes: [0, 0, 72, 0, 0],
                },
            }],
            oldest: vec![Survivor {
                object: sample_object_row(),
                age_ms: Some(60_000),
            }],
        }),
        Response::CounterHistory(CounterHistory {
            interval_ms: 1000,
            samples: vec![sample_counters(), sample_counters()],
        }),
    ]
}

pub fn sample_pushes() -> Vec<Push> {
    vec![
        Push::Counters(sample_counters()),
        Push::Shortage(ShortageReport {
            unix_ms: 1_790_000_000_456,
            cause: ShortageCause::SoftLimit { limit: 512 << 20 },
            live_bytes: 600 << 20,
            need_bytes: 88 << 20,
            outcome: ShortageOutcome::Unresolved {
                reason: "no permitted thread set releases 88.0 MiB".into(),
            },
        }),
        Push::ReleaseMeasured(MeasuredRelease {
            decision: 3,
            tids: vec![77],
            predicted: 44 << 20,
            measured: Some(43 << 20),
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, empty included; short so that cases stay fast.
    ".{0,12}"
}

fn snapshot_id() -> impl Strategy<Value = SnapshotId> {
    any::<u64>().prop_map(SnapshotId)
}

fn page() -> impl Strategy<Value = Page> {
    (any::<u32>(), any::<u32>()).prop_map(|(o, l)| Page::new(o, l))
}

fn page_info() -> impl Strategy<Value = PageInfo> {
    (any::<u32>(), any::<u32>()).prop_map(|(offset, total)| PageInfo { offset, total })
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![Just(Direction::Ascending), Just(Direction::Descending)]
}

fn thread_sort() -> impl Strategy<Value = Sort<ThreadKey>> {
    let key = prop_oneof![
        Just(ThreadKey::Total),
        Just(ThreadKey::Proprietary),
        Just(ThreadKey::Shared),
        Just(ThreadKey::Tid),
        Just(ThreadKey::Name),
        Just(ThreadKey::Frames),
    ];
    (key, direction()).prop_map(|(key, direction)| Sort { key, direction })
}

fn object_sort() -> impl Strategy<Value = Sort<ObjectKey>> {
    let key = prop_oneof![
        Just(ObjectKey::Size),
        Just(ObjectKey::Addr),
        Just(ObjectKey::Seq),
        Just(ObjectKey::Id),
        Just(ObjectKey::Site),
        Just(ObjectKey::Thread),
        Just(ObjectKey::Index),
    ];
    (key, direction()).prop_map(|(key, direction)| Sort { key, direction })
}

fn site_sort() -> impl Strategy<Value = Sort<SiteKey>> {
    let key = prop_oneof![
        Just(SiteKey::LiveBytes),
        Just(SiteKey::Blocks),
        Just(SiteKey::Label)
    ];
    (key, direction()).prop_map(|(key, direction)| Sort { key, direction })
}

pub fn group_id() -> impl Strategy<Value = GroupId> {
    let kind = prop_oneof![
        Just(GroupKind::FrameShared),
        Just(GroupKind::ThreadShared),
        Just(GroupKind::GlobalOnly)
    ];
    (kind, any::<u32>()).prop_map(|(kind, number)| GroupId { kind, number })
}

fn id_list() -> impl Strategy<Value = IdList> {
    (vec(group_id(), 0..4), any::<u32>()).prop_map(|(ids, total)| IdList { ids, total })
}

fn sharer() -> impl Strategy<Value = Sharer> {
    prop_oneof![any::<u32>().prop_map(Sharer::Thread), Just(Sharer::Globals)]
}

fn thread_state() -> impl Strategy<Value = ThreadState> {
    prop_oneof![
        Just(ThreadState::Stopped),
        text().prop_map(ThreadState::NotStoppable)
    ]
}

fn frame_kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![Just(FrameKind::User), Just(FrameKind::System)]
}

fn object_class() -> impl Strategy<Value = ObjectClass> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(tid, frame)| ObjectClass::FrameProprietary { tid, frame }),
        any::<u32>().prop_map(|tid| ObjectClass::FrameShared { tid }),
        Just(ObjectClass::ThreadShared),
        Just(ObjectClass::GlobalOnly),
        Just(ObjectClass::DefinitelyLost),
        Just(ObjectClass::IndirectlyLost),
    ]
}

fn counters() -> impl Strategy<Value = LiveCounters> {
    any::<[u64; 5]>().prop_map(|[a, b, c, d, e]| LiveCounters {
        live_bytes: a,
        live_blocks: b,
        allocated_bytes: c,
        peak_live_bytes: d,
        unix_ms: e,
    })
}

fn snapshot_info() -> impl Strategy<Value = SnapshotInfo> {
    (
        snapshot_id(),
        any::<[u64; 4]>(),
        any::<[u32; 2]>(),
        any::<[u64; 4]>(),
        any::<[u64; 8]>(),
        any::<u64>(),
    )
        .prop_map(
            |(snapshot, [t, p, c, a], [threads, not_stopped], tot, l, held)| SnapshotInfo {
                snapshot,
                taken_unix_ms: t,
                pause_us: p,
                capture_us: c,
                analysis_us: a,
                threads,
                threads_not_stopped: not_stopped,
                totals: Totals {
                    objects: tot[0],
                    bytes: tot[1],
                    unreachable_bytes: tot[2],
                    global_only_bytes: tot[3],
                },
                leaks: Leaks {
                    bytes: l[0],
                    objects: l[1],
                    definitely_lost: l[2],
                    indirectly_lost: l[3],
                    definitely_lost_objects: l[4],
                    indirectly_lost_objects: l[5],
                    possibly_lost: l[6],
                    possibly_lost_objects: l[7],
                },
                held_bytes: held,
            },
        )
}

fn object_row() -> impl Strategy<Value = ObjectRow> {
    (
        any::<u32>(),
        any::<[u64; 3]>(),
        any::<u32>(),
        text(),
        any::<u32>(),
        any::<u64>(),
        option::of(any::<u32>()),
    )
        .prop_map(
            |(index, [id, addr, size], site, site_label, thread, seq, age)| ObjectRow {
                index,
                id,
                addr,
                size,
                site,
                site_label,
                thread,
                seq,
                age,
            },
        )
}

fn mechanism() -> impl Strategy<Value = Mechanism> {
    prop_oneof![Just(Mechanism::Cooperative), Just(Mechanism::PthreadCancel)]
}

fn policy() -> impl Strategy<Value = PolicyAnswer> {
    let permit = (option::of(text()), option::of(text()), mechanism()).prop_map(
        |(thread, function, mechanism)| PermitRule {
            thread,
            function,
            mechanism,
        },
    );
    let trigger =
        (option::of(any::<u64>()), any::<bool>()).prop_map(|(live_bytes, on_malloc_failure)| {
            Trigger {
                live_bytes,
                on_malloc_failure,
            }
        });
    let summary = (
        any::<bool>(),
        any::<u64>(),
        vec(permit, 0..3),
        option::of(trigger),
    )
        .prop_map(|(dry_run, min_release, permits, trigger)| PolicySummary {
            dry_run,
            min_release,
            permits,
            trigger,
        });
    prop_oneof![
        Just(PolicyAnswer::NotLoaded),
        (text(), text()).prop_map(|(path, error)| PolicyAnswer::Invalid { path, error }),
        (text(), text(), summary).prop_map(|(path, text, summary)| PolicyAnswer::Loaded {
            path,
            text,
            summary
        }),
    ]
}

fn verdict() -> impl Strategy<Value = CancelVerdict> {
    let verdict = prop_oneof![
        Just(Verdict::Done),
        text().prop_map(Verdict::Refused),
        Just(Verdict::DryRun)
    ];
    (
        any::<u32>(),
        verdict,
        option::of(any::<u64>()),
        option::of(text()),
        option::of(mechanism()),
    )
        .prop_map(
            |(tid, verdict, predicted_release, rule, mechanism)| CancelVerdict {
                tid,
                verdict,
                predicted_release,
                rule,
                mechanism,
            },
        )
}

fn error_kind() -> impl Strategy<Value = ErrorKind> {
    prop_oneof![
        Just(ErrorKind::UnknownThread),
        Just(ErrorKind::UnknownGroup),
        Just(ErrorKind::UnknownObject),
        Just(ErrorKind::UnknownSite),
        Just(ErrorKind::NoSnapshot),
        Just(ErrorKind::StaleSnapshot),
        Just(ErrorKind::BadRequest),
        Just(ErrorKind::Refused),
        Just(ErrorKind::Internal),
    ]
}

pub fn request_body() -> impl Strategy<Value = RequestBody> {
    prop_oneof![
        Just(RequestBody::ProcessInfo),
        Just(RequestBody::Subscribe),
        Just(RequestBody::Unsubscribe),
        Just(RequestBody::TakeSnapshot),
        (thread_sort(), page()).prop_map(|(sort, page)| RequestBody::Threads { sort, page }),
        (any::<u32>(), page()).prop_map(|(tid, page)| RequestBody::Frames { tid, page }),
        (snapshot_id(), group_id())
            .prop_map(|(snapshot, group)| RequestBody::Group { snapshot, group }),
        (
            snapshot_id(),
            group_id(),
            object_sort(),
            page(),
            object_filter()
        )
            .prop_map(
                |(snapshot, group, sort, page, filter)| RequestBody::GroupObjects {
                    snapshot,
                    group,
                    sort,
                    page,
                    filter
                }
            ),
        (
            snapshot_id(),
            any::<u32>(),
            object_sort(),
            page(),
            object_filter()
        )
            .prop_map(
                |(snapshot, site, sort, page, filter)| RequestBody::SiteObjects {
                    snapshot,
                    site,
                    sort,
                    page,
                    filter
                }
            ),
        (snapshot_id(), any::<u32>(), page()).prop_map(|(snapshot, object, refs)| {
            RequestBody::Object {
                snapshot,
                object,
                refs,
            }
        }),
        (site_sort(), page()).prop_map(|(sort, page)| RequestBody::Sites { sort, page }),
        vec(any::<u32>(), 0..8).prop_map(|tids| RequestBody::Release { tids }),
        Just(RequestBody::Policy),
        (any::<u32>(), any::<bool>())
            .prop_map(|(tid, dry_run)| RequestBody::Cancel { tid, dry_run }),
        (snapshot_id(), any::<u64>())
            .prop_map(|(snapshot, offset)| RequestBody::SnapshotData { snapshot, offset }),
        (unit_query(), unit_sort(), page()).prop_map(|(query, sort, page)| RequestBody::Units {
            query,
            sort,
            page
        }),
        page().prop_map(|page| RequestBody::Leaks { page }),
        page().prop_map(|page| RequestBody::Growth { page }),
        (age_scope(), page(), any::<u32>()).prop_map(|(by, page, oldest)| RequestBody::Ages {
            by,
            page,
            oldest
        }),
        Just(RequestBody::CounterHistory),
        (snapshot_id(), any::<u64>())
            .prop_map(|(snapshot, offset)| RequestBody::KeptData { snapshot, offset }),
    ]
}

fn object_filter() -> impl Strategy<Value = Option<ObjectFilter>> {
    option::of(text().prop_map(ObjectFilter::new))
}

fn unit_query() -> impl Strategy<Value = UnitQuery> {
    let granularity = prop_oneof![
        Just(UnitGranularity::Library),
        Just(UnitGranularity::Function),
        Just(UnitGranularity::Thread),
    ];
    let position = prop_oneof![
        Just(UnitPosition::Outermost),
        Just(UnitPosition::Innermost),
        Just(UnitPosition::Inclusive),
    ];
    let charge = prop_oneof![Just(UnitCharge::Allocator), Just(UnitCharge::Freer)];
    (granularity, position, charge).prop_map(|(granularity, position, charge)| UnitQuery {
        granularity,
        position,
        charge,
    })
}

fn unit_sort() -> impl Strategy<Value = Sort<UnitKey>> {
    let key = prop_oneof![
        Just(UnitKey::Live),
        Just(UnitKey::Max),
        Just(UnitKey::Malloc),
        Just(UnitKey::Free),
        Just(UnitKey::Name),
    ];
    (key, direction()).prop_map(|(key, direction)| Sort { key, direction })
}

fn snapshot_rule() -> impl Strategy<Value = SnapshotRule> {
    prop_oneof![
        Just(SnapshotRule::Off),
        any::<u64>().prop_map(SnapshotRule::EveryBytes),
        any::<u64>().prop_map(SnapshotRule::Tolerance),
    ]
}

fn age_scope() -> impl Strategy<Value = AgeScope> {
    prop_oneof![Just(AgeScope::Sites), Just(AgeScope::Threads)]
}

fn age_histogram() -> impl Strategy<Value = AgeHistogram> {
    (any::<[u64; AGE_RANGES]>(), any::<[u64; AGE_RANGES]>())
        .prop_map(|(blocks, bytes)| AgeHistogram { blocks, bytes })
}

fn view_response() -> impl Strategy<Value = Response> {
    let unit_row = (text(), any::<[i64; 3]>(), any::<[u64; 4]>()).prop_map(
        |(name, [live, min, max], [malloc, realloc, free, memalign])| UnitRow {
            name,
            live,
            min,
            max,
            malloc,
            realloc,
            free,
            memalign,
        },
    );
    let leak_row = (any::<u32>(), text(), vec(text(), 0..3), any::<[u64; 6]>()).prop_map(
        |(site, label, frames, [dl, dlo, il, ilo, pl, plo])| LeakRow {
            site,
            label,
            frames,
            definitely_lost: dl,
            definitely_lost_objects: dlo,
            indirectly_lost: il,
            indirectly_lost_objects: ilo,
            possibly_lost: pl,
            possibly_lost_objects: plo,
        },
    );
    let growth_row = (
        text(),
        vec(text(), 0..3),
        vec(any::<u64>(), 0..5),
        any::<[bool; 2]>(),
    )
        .prop_map(|(label, frames, history, [growing, dominant])| GrowthRow {
            label,
            frames,
            history,
            growing,
            dominant,
        });
    let age_row =
        (any::<u32>(), text(), age_histogram()).prop_map(|(key, label, histogram)| AgeRow {
            key,
            label,
            histogram,
        });
    let survivor = (object_row(), option::of(any::<u64>()))
        .prop_map(|(object, age_ms)| Survivor { object, age_ms });
    prop_oneof![
        (
            unit_query(),
            any::<[u64; 3]>(),
            page_info(),
            vec(unit_row, 0..3)
        )
            .prop_map(
                |(query, [events, unknown_frees, unknown_reallocs], page, rows)| {
                    Response::Units(UnitPage {
                        query,
                        events,
                        unknown_frees,
                        unknown_reallocs,
                        page,
                        rows,
                    })
                }
            ),
        (snapshot_id(), page_info(), vec(leak_row, 0..3)).prop_map(|(snapshot, page, rows)| {
            Response::Leaks(LeakPage {
                snapshot,
                page,
                rows,
            })
        }),
        (any::<[u32; 2]>(), page_info(), vec(growth_row, 0..3)).prop_map(
            |([snapshots, run], page, rows)| Response::Growth(GrowthPage {
                snapshots,
                run,
                page,
                rows
            })
        ),
        (
            snapshot_id(),
            age_scope(),
            any::<u32>(),
            age_histogram(),
            page_info(),
            vec(age_row, 0..3),
            vec(survivor, 0..3)
        )
            .prop_map(|(snapshot, by, boundaries, total, page, rows, oldest)| {
                Response::Ages(AgesAnswer {
                    snapshot,
                    by,
                    boundaries,
                    total,
                    page,
                    rows,
                    oldest,
                })
            }),
        (any::<u32>(), vec(counters(), 0..4)).prop_map(|(interval_ms, samples)| {
            Response::CounterHistory(CounterHistory {
                interval_ms,
                samples,
            })
        }),
    ]
}

pub fn push() -> impl Strategy<Value = Push> {
    let cause = prop_oneof![
        any::<u64>().prop_map(|limit| ShortageCause::SoftLimit { limit }),
        any::<u64>().prop_map(|failures| ShortageCause::AllocationFailed { failures }),
    ];
    let outcome = prop_oneof![
        (vec(any::<u32>(), 0..4), any::<u64>()).prop_map(|(tids, predicted_release)| {
            ShortageOutcome::Cancelled {
                tids,
                predicted_release,
            }
        }),
        (vec(any::<u32>(), 0..4), any::<u64>()).prop_map(|(tids, predicted_release)| {
            ShortageOutcome::DryRun {
                tids,
                predicted_release,
            }
        }),
        text().prop_map(|reason| ShortageOutcome::Unresolved { reason }),
    ];
    prop_oneof![
        counters().prop_map(Push::Counters),
        (any::<[u64; 3]>(), cause, outcome).prop_map(
            |([unix_ms, live_bytes, need_bytes], cause, outcome)| {
                Push::Shortage(ShortageReport {
                    unix_ms,
                    cause,
                    live_bytes,
                    need_bytes,
                    outcome,
                })
            }
        ),
        (
            any::<u64>(),
            vec(any::<u32>(), 0..4),
            any::<u64>(),
            option::of(any::<u64>())
        )
            .prop_map(|(decision, tids, predicted, measured)| {
                Push::ReleaseMeasured(MeasuredRelease {
                    decision,
                    tids,
                    predicted,
                    measured,
                })
            }),
    ]
}

pub fn request() -> impl Strategy<Value = Request> {
    (any::<u64>(), request_body()).prop_map(|(id, body)| Request {
        id: RequestId(id),
        body,
    })
}

pub fn response() -> impl Strategy<Value = Response> {
    prop_oneof![4 => core_response(), 1 => view_response()]
}

fn core_response() -> impl Strategy<Value = Response> {
    let thread_row = (
        any::<u32>(),
        text(),
        thread_state(),
        any::<[u64; 3]>(),
        any::<u32>(),
    )
        .prop_map(|(tid, name, state, [p, s, t], frames)| ThreadRow {
            tid,
            name,
            state,
            proprietary: p,
            shared: s,
            total: t,
            frames,
        });
    let frame_row = (
        any::<u32>(),
        text(),
        text(),
        frame_kind(),
        any::<u64>(),
        id_list(),
        id_list(),
        id_list(),
    )
        .prop_map(
            |(index, function, module, kind, proprietary, fs, ts, dev)| FrameRow {
                index,
                function,
                module,
                kind,
                proprietary,
                frame_shared: fs,
                thread_shared: ts,
                developed: dev,
            },
        );
    let referrer = prop_oneof![
        (any::<u32>(), any::<u32>(), text()).prop_map(|(tid, frame, function)| Referrer::Frame {
            tid,
            frame,
            function
        }),
        Just(Referrer::Globals),
        object_row().prop_map(Referrer::Object),
    ];
    let site_row = (
        any::<u32>(),
        any::<u64>(),
        text(),
        vec(text(), 0..3),
        any::<[u64; 2]>(),
    )
        .prop_map(|(site, id, label, frames, [b, n])| SiteRow {
            site,
            id,
            label,
            frames,
            live_bytes: b,
            blocks: n,
        });
    let process_info = (
        any::<u32>(),
        text(),
        text(),
        counters(),
        any::<u32>(),
        option::of(snapshot_info()),
        any::<bool>(),
        option::of(snapshot_info()),
        snapshot_rule(),
    )
        .prop_map(
            |(
                pid,
                command,
                agent_version,
                counters,
                threads,
                snapshot,
                policy_loaded,
                peak_snapshot,
                snapshot_rule,
            )| {
                ProcessInfo {
                    pid,
                    command,
                    agent_version,
                    counters,
                    threads,
                    snapshot,
                    policy_loaded,
                    peak_snapshot,
                    snapshot_rule,
                }
            },
        );
    let group = (
        snapshot_id(),
        group_id(),
        object_row(),
        text(),
        any::<[u64; 2]>(),
        vec(sharer(), 0..4),
        id_list(),
        id_list(),
    )
        .prop_map(
            |(snapshot, id, entry, label, [size, members], sharers, direct, developed)| GroupInfo {
                snapshot,
                id,
                entry,
                label,
                size,
                members,
                sharers,
                direct,
                developed,
            },
        );
    let detail = (
        snapshot_id(),
        object_row(),
        (object_class(), any::<bool>()),
        option::of(group_id()),
        option::of(any::<u32>()),
        vec(text(), 0..3),
        (page_info(), vec(object_row(), 0..3)),
        (page_info(), vec(referrer, 0..3)),
    )
        .prop_map(
            |(snapshot, object, (class, possibly_lost), group, dominator, stack, out, inc)| {
                ObjectDetail {
                    snapshot,
                    object,
                    class,
                    possibly_lost,
                    group,
                    dominator,
                    stack,
                    outgoing_page: out.0,
                    outgoing: out.1,
                    incoming_page: inc.0,
                    incoming: inc.1,
                }
            },
        );
    prop_oneof![
        process_info.prop_map(Response::ProcessInfo),
        any::<u32>().prop_map(|interval_ms| Response::Subscribed { interval_ms }),
        Just(Response::Unsubscribed),
        snapshot_info().prop_map(Response::Snapshot),
        (snapshot_id(), page_info(), vec(thread_row, 0..4)).prop_map(|(snapshot, page, rows)| {
            Response::Threads(ThreadPage {
                snapshot,
                page,
                rows,
            })
        }),
        (
            snapshot_id(),
            any::<u32>(),
            page_info(),
            vec(frame_row, 0..3)
        )
            .prop_map(|(snapshot, tid, page, rows)| Response::Frames(FramePage {
                snapshot,
                tid,
                page,
                rows
            })),
        group.prop_map(Response::Group),
        (snapshot_id(), page_info(), vec(object_row(), 0..4)).prop_map(|(snapshot, page, rows)| {
            Response::Objects(ObjectPage {
                snapshot,
                page,
                rows,
            })
        }),
        detail.prop_map(Response::Object),
        (snapshot_id(), page_info(), vec(site_row, 0..3)).prop_map(|(snapshot, page, rows)| {
            Response::Sites(SitePage {
                snapshot,
                page,
                rows,
            })
        }),
        (snapshot_id(), vec(any::<u32>(), 0..5), any::<u64>()).prop_map(
            |(snapshot, tids, bytes)| Response::Release(ReleaseAnswer {
                snapshot,
                tids,
                bytes
            })
        ),
        policy().prop_map(Response::Policy),
        verdict().prop_map(Response::Cancel),
        (error_kind(), text()).prop_map(|(kind, message)| Response::error(kind, message)),
        (
            snapshot_id(),
            any::<u64>(),
            any::<u64>(),
            vec(any::<u8>(), 0..64)
        )
            .prop_map(|(snapshot, offset, total, bytes)| Response::SnapshotData(
                SnapshotChunk {
                    snapshot,
                    offset,
                    total,
                    bytes
                }
            )),
        (
            snapshot_id(),
            any::<u64>(),
            any::<u64>(),
            vec(any::<u8>(), 0..64)
        )
            .prop_map(|(snapshot, offset, total, bytes)| Response::KeptData(
                SnapshotChunk {
                    snapshot,
                    offset,
                    total,
                    bytes
                }
            )),
    ]
}

pub fn server_message() -> impl Strategy<Value = ServerMessage> {
    prop_oneof![
        (any::<u64>(), response()).prop_map(|(id, body)| ServerMessage::Response {
            id: RequestId(id),
            body: Box::new(body),
        }),
        push().prop_map(ServerMessage::Push),
    ]
}

pub fn hello() -> impl Strategy<Value = Hello> {
    (any::<[u8; 8]>(), any::<u32>(), text(), text()).prop_map(|(magic, version, token, client)| {
        Hello {
            magic,
            version,
            token,
            client,
        }
    })
}

pub fn welcome() -> impl Strategy<Value = Welcome> {
    let reason = prop_oneof![
        Just(RefusalReason::BadMagic),
        Just(RefusalReason::NotHello),
        Just(RefusalReason::VersionMismatch),
        Just(RefusalReason::WrongToken),
        Just(RefusalReason::Malformed),
        Just(RefusalReason::Busy),
    ];
    let admission = prop_oneof![
        (any::<u32>(), text(), text(), any::<u64>()).prop_map(
            |(pid, command, agent_version, started_unix_ms)| Admission::Accepted(AgentInfo {
                pid,
                command,
                agent_version,
                started_unix_ms
            })
        ),
        (reason, text())
            .prop_map(|(reason, message)| Admission::Refused(Refusal { reason, message })),
    ];
    (any::<[u8; 8]>(), any::<u32>(), admission).prop_map(|(magic, version, admission)| Welcome {
        magic,
        version,
        admission,
    })
}
