//! State and action tests of the other views (units, leaks, growth, ages) and of a recording
//! as a source, without drawing: what keys ask of the source, where answers land, what Enter
//! opens, and what the operator is told when the source cannot answer.

use heaptui_protocol::message::{
    AgeScope, ErrorKind, GrowthPage, GrowthRow, LiveCounters, PageInfo, RequestBody, Response,
    UnitCharge, UnitGranularity, UnitPage, UnitQuery, UnitRow,
};
use ratatui::crossterm::event::KeyCode;

use super::action::Screen;
use super::ages::AgeList;
use super::other::OtherView;
use super::table::TableModel;
use super::testing::{Harness, big_group_graph, fixture};
use super::views::{ObjectsOrigin, ViewKind};
use crate::offline::recording::tests::{ages_vector, counters_vector};

fn other(h: &Harness) -> &OtherView {
    match &h.app.top().kind {
        ViewKind::Other(v) => v,
        _ => panic!("expected one of the other views, on {:?}", h.app.screen()),
    }
}

fn unit_names(h: &Harness) -> Vec<String> {
    let OtherView::Units(v) = other(h) else {
        panic!("expected units")
    };
    (0..v.table.len())
        .map(|i| v.table.row(i).unwrap().name.clone())
        .collect()
}

fn last_units_query(h: &Harness) -> UnitQuery {
    h.log
        .iter()
        .rev()
        .find_map(|b| match b {
            RequestBody::Units { query, .. } => Some(*query),
            _ => None,
        })
        .expect("a units request")
}

#[test]
fn a_recording_opens_on_its_units_and_every_switch_asks_again() {
    let mut h = Harness::recording(ages_vector());
    assert!(h.app.recording);
    assert_eq!(h.app.screen(), Screen::Units);
    assert!(h.app.status.as_deref().unwrap().contains("no heap graph"));
    // No library on these stacks: the program's own module is the unit.
    assert_eq!(unit_names(&h), ["prog"]);

    h.key(KeyCode::Char('f'));
    assert_eq!(
        last_units_query(&h).granularity,
        UnitGranularity::Function,
        "f asks for functions"
    );
    assert_eq!(unit_names(&h), ["odd_site (prog)", "even_site (prog)"]);

    h.key(KeyCode::Char('f'));
    assert_eq!(unit_names(&h), ["thread 1", "thread 2"]);
    h.key(KeyCode::Char('c'));
    assert_eq!(last_units_query(&h).charge, UnitCharge::Freer);
    // Sorting and filtering are the table's, on the rows answered.
    h.key(KeyCode::Char('1'));
    assert_eq!(unit_names(&h), ["thread 1", "thread 2"]);
    h.key(KeyCode::Char('1'));
    assert_eq!(unit_names(&h), ["thread 2", "thread 1"]);
    h.key(KeyCode::Char('/'));
    h.type_text("d 1");
    h.key(KeyCode::Enter);
    assert_eq!(unit_names(&h), ["thread 1"]);
    assert_eq!(h.app.pending(), 0);
}

#[test]
fn a_recording_shows_the_issue_counters_and_its_recorded_history() {
    let h = Harness::recording(counters_vector());
    let c = h.app.counters.expect("the recomputed counters");
    assert_eq!((c.live_bytes, c.allocated_bytes), (200, 300));
    assert_eq!(crate::figures::utilization(&c), "66.7%");
    assert_eq!(h.app.chart.len(), 1, "the one recorded Counters event");
    assert!(
        h.log
            .iter()
            .any(|b| matches!(b, RequestBody::CounterHistory))
    );
}

#[test]
fn a_recordings_ages_give_the_issue_histogram_and_its_blocks_do_not_open() {
    let mut h = Harness::recording(ages_vector());
    h.key(KeyCode::Esc);
    h.key(KeyCode::Char('A'));
    let OtherView::Ages(v) = other(&h) else {
        panic!("expected ages")
    };
    let (total, boundaries) = v.total.expect("answered");
    assert_eq!(boundaries, 2);
    assert_eq!(total.blocks, [2, 1, 3, 0, 0]);
    assert_eq!(v.rows.len(), 2);

    h.key(KeyCode::Char('o'));
    let OtherView::Ages(v) = other(&h) else {
        panic!("expected ages")
    };
    assert_eq!(v.list, AgeList::Oldest);
    let seqs: Vec<u64> = (0..v.oldest.len())
        .map(|i| v.oldest.row(i).unwrap().object.seq)
        .collect();
    assert_eq!(seqs, [1, 3, 5, 7, 9, 10]);
    let depth = h.app.stack.len();
    h.key(KeyCode::Enter);
    assert_eq!(h.app.stack.len(), depth, "nothing to open without a graph");
    assert!(h.app.status.as_deref().unwrap().contains("no heap graph"));

    h.key(KeyCode::Char('t'));
    assert!(matches!(
        h.log.last(),
        Some(RequestBody::Ages {
            by: AgeScope::Threads,
            ..
        })
    ));
}

#[test]
fn a_recording_says_in_the_leaks_screen_why_it_has_none() {
    let mut h = Harness::recording(ages_vector());
    h.key(KeyCode::Esc);
    h.key(KeyCode::Char('L'));
    let OtherView::Leaks(v) = other(&h) else {
        panic!("expected leaks")
    };
    let error = v.error.as_deref().expect("a refusal shown in the screen");
    assert!(
        error.starts_with("leaks: a recording has no heap graph"),
        "{error}"
    );
    assert_eq!(v.table.total(), None);
}

#[test]
fn leaks_of_a_snapshot_list_sites_and_enter_opens_their_objects() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('L'));
    assert_eq!(h.app.screen(), Screen::Leaks);
    let OtherView::Leaks(v) = other(&h) else {
        panic!("expected leaks")
    };
    let first = v.table.row(0).unwrap();
    assert_eq!(first.label, "Leak.Node");
    assert_eq!(
        (first.definitely_lost, first.definitely_lost_objects),
        (40, 1)
    );
    let second = v.table.row(1).unwrap();
    assert_eq!(
        (second.label.as_str(), second.indirectly_lost),
        ("Leak.Child", 16)
    );

    h.key(KeyCode::Enter);
    match &h.app.top().kind {
        ViewKind::Objects(o) => {
            assert!(matches!(&o.origin, ObjectsOrigin::Site { label, .. } if label == "Leak.Node"));
            assert_eq!(o.table.row(0).unwrap().size, 40);
        }
        _ => panic!("expected the site's objects"),
    }
    h.key(KeyCode::Esc);
    assert_eq!(h.app.screen(), Screen::Leaks, "Esc comes back to the leaks");
}

#[test]
fn ages_of_a_snapshot_without_boundaries_are_all_zero_and_open_objects() {
    let mut h = Harness::new(big_group_graph(2, 50));
    h.key(KeyCode::Char('A'));
    let OtherView::Ages(v) = other(&h) else {
        panic!("expected ages")
    };
    let (total, boundaries) = v.total.unwrap();
    assert_eq!(boundaries, 0);
    assert_eq!(total.blocks, [53, 0, 0, 0, 0]);
    h.key(KeyCode::Char('o'));
    h.key(KeyCode::Enter);
    match &h.app.top().kind {
        ViewKind::Object(o) => assert_eq!(o.detail.as_ref().unwrap().object.seq, 1),
        _ => panic!("expected the oldest object"),
    }
}

fn unit_row(name: &str, live: i64, min: i64, max: i64, counts: [u64; 3]) -> UnitRow {
    UnitRow {
        name: name.into(),
        live,
        min,
        max,
        malloc: counts[0],
        realloc: counts[1],
        free: counts[2],
        memalign: 0,
    }
}

/// What an agent with its event stream says of units: liba/libb of the issue's vector
/// (malloc 100 in liba, malloc 50 in libb, free of the first from libb, realloc of the second
/// to 80 in libb) charged to the allocator or to the freer, its growth and counter history.
pub fn agent_units(body: &RequestBody) -> Option<Response> {
    match body {
        RequestBody::Units { query, page, .. } => {
            let rows = match query.charge {
                UnitCharge::Allocator => vec![
                    unit_row("liba.so", 0, 0, 100, [1, 0, 1]),
                    unit_row("libb.so", 80, 0, 80, [1, 1, 0]),
                ],
                UnitCharge::Freer => vec![
                    unit_row("liba.so", 100, 0, 100, [1, 0, 0]),
                    unit_row("libb.so", -20, -50, 50, [1, 1, 1]),
                ],
            };
            Some(Response::Units(UnitPage {
                query: *query,
                events: 4,
                page: PageInfo {
                    offset: page.offset,
                    total: 2,
                },
                rows,
                ..UnitPage::default()
            }))
        }
        RequestBody::Growth { .. } => Some(Response::Growth(GrowthPage {
            snapshots: 3,
            run: 3,
            page: PageInfo {
                offset: 0,
                total: 2,
            },
            rows: vec![
                GrowthRow {
                    label: "grow (leaky.c:9)".into(),
                    history: vec![100, 200, 300],
                    growing: true,
                    ..GrowthRow::default()
                },
                GrowthRow {
                    label: "steady (leaky.c:20)".into(),
                    history: vec![100, 200, 100],
                    ..GrowthRow::default()
                },
            ],
        })),
        RequestBody::CounterHistory => Some(Response::CounterHistory(
            heaptui_protocol::message::CounterHistory {
                interval_ms: 1000,
                samples: (1..=3)
                    .map(|i| LiveCounters {
                        live_bytes: 100 * i,
                        allocated_bytes: 300 * i,
                        unix_ms: 1000 * i,
                        ..LiveCounters::default()
                    })
                    .collect(),
            },
        )),
        _ => None,
    }
}

#[test]
fn live_units_show_what_the_agent_answers_for_each_charge() {
    let mut h = Harness::live_with(fixture(), agent_units);
    assert_eq!(h.app.chart.len(), 3, "the agent's history at attach");
    h.key(KeyCode::Char('u'));
    assert_eq!(unit_names(&h), ["libb.so", "liba.so"]);
    h.key(KeyCode::Char('c'));
    assert_eq!(unit_names(&h), ["liba.so", "libb.so"]);
    let OtherView::Units(v) = other(&h) else {
        panic!("expected units")
    };
    assert_eq!(v.table.row(1).unwrap().live, -20);
    assert_eq!(v.events, Some((4, 0, 0)));
}

#[test]
fn live_growth_keeps_the_agents_flags() {
    let mut h = Harness::live_with(fixture(), agent_units);
    h.key(KeyCode::Char('w'));
    let OtherView::Growth(v) = other(&h) else {
        panic!("expected growth")
    };
    assert_eq!(v.snapshots, Some((3, 3)));
    let first = v.table.row(0).unwrap();
    assert!(first.growing && first.label.starts_with("grow"));
    assert!(!v.table.row(1).unwrap().growing);
}

#[test]
fn an_agent_that_cannot_answer_units_shows_its_line_in_the_screen() {
    let mut h = Harness::live_with(fixture(), |body| match body {
        RequestBody::Units { .. } => Some(Response::error(
            ErrorKind::Refused,
            "units need the agent's event stream (HEAPTUI_RECORD or a newer agent)",
        )),
        _ => None,
    });
    h.key(KeyCode::Char('u'));
    let OtherView::Units(v) = other(&h) else {
        panic!("expected units")
    };
    assert_eq!(
        v.error.as_deref(),
        Some("units need the agent's event stream (HEAPTUI_RECORD or a newer agent)")
    );
    assert_eq!(
        h.app.screen(),
        Screen::Units,
        "still there, nothing crashed"
    );
    // Keys still work on an empty screen.
    h.keys(&[
        KeyCode::Down,
        KeyCode::Enter,
        KeyCode::Char('p'),
        KeyCode::Esc,
    ]);
    assert_eq!(h.app.screen(), Screen::Threads);
}

#[test]
fn a_recordings_growth_follows_its_stacks_across_its_boundaries() {
    let mut h = Harness::recording(ages_vector());
    h.key(KeyCode::Esc);
    h.key(KeyCode::Char('w'));
    let OtherView::Growth(v) = other(&h) else {
        panic!("expected growth")
    };
    assert_eq!(v.snapshots, Some((2, 3)));
    assert_eq!(v.error, None);
    let first = v.table.row(0).unwrap();
    assert_eq!(
        (first.label.as_str(), first.history.as_slice()),
        ("even_site (prog)", &[60, 200][..])
    );
}
