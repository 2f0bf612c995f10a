//! State and action tests, without drawing: what keys do to the view stack, the tables and the
//! requests sent, over the patent fixture and synthetic graphs.

use heaptui_analysis::Analysis;
use heaptui_protocol::GroupId;
use heaptui_protocol::message::{Page, RequestBody};
use ratatui::crossterm::event::KeyCode;

use super::table::{PAGE_ROWS, TableModel};
use super::testing::{Harness, big_group_graph, fixture};
use super::views::{HomeTab, ObjectsOrigin, ViewKind};
use super::*;

fn thread_order(h: &Harness) -> Vec<u32> {
    let t = &h.app.home().threads;
    (0..t.len()).map(|i| t.row(i).unwrap().tid).collect()
}

fn selected_tid(h: &Harness) -> u32 {
    h.app.home().threads.selected_row().unwrap().tid
}

#[test]
fn home_ranks_threads_by_total() {
    let h = Harness::new(fixture());
    assert_eq!(thread_order(&h), [1, 3, 2, 4]);
    assert_eq!(h.app.home().threads.row(0).unwrap().total, 264);
    assert_eq!(h.app.screen(), Screen::Threads);
    assert_eq!(h.app.snapshot.as_ref().unwrap().totals.bytes, 760);
    assert_eq!(h.app.pending(), 0);
}

#[test]
fn drilling_down_five_levels_and_back_restores_every_selection() {
    let mut h = Harness::new(fixture());
    h.keys(&[KeyCode::Down, KeyCode::Down]);
    assert_eq!(selected_tid(&h), 2);

    h.key(KeyCode::Enter);
    let ViewKind::Frames(frames) = &h.app.top().kind else {
        panic!("frames expected")
    };
    assert_eq!(frames.tid, 2);
    assert_eq!(
        frames.table.selected_row().unwrap().function,
        "Class1.methodC"
    );

    h.key(KeyCode::Enter);
    let ViewKind::Group(group) = &h.app.top().kind else {
        panic!("group expected")
    };
    assert_eq!(group.id.to_string(), "F2");
    assert_eq!(group.info.as_ref().unwrap().label, "Class2.Context");

    // Entry, members, then the direct referent T1.
    h.keys(&[KeyCode::Down, KeyCode::Down, KeyCode::Enter]);
    let ViewKind::Group(group) = &h.app.top().kind else {
        panic!("group expected")
    };
    assert_eq!(group.id.to_string(), "T1");
    assert_eq!(group.info.as_ref().unwrap().sharers.len(), 3);

    h.key(KeyCode::Enter);
    let ViewKind::Object(object) = &h.app.top().kind else {
        panic!("object expected")
    };
    let detail = object.detail.as_ref().unwrap();
    assert_eq!(detail.object.id, 5);
    assert_eq!(detail.object.size, 72);
    assert_eq!(h.app.stack.len(), 5);

    h.key(KeyCode::Esc);
    assert!(matches!(&h.app.top().kind, ViewKind::Group(g) if g.id.to_string() == "T1"));
    h.key(KeyCode::Esc);
    let ViewKind::Group(group) = &h.app.top().kind else {
        panic!("group expected")
    };
    assert_eq!(group.id.to_string(), "F2");
    assert_eq!(group.selected, 2, "the referent row stays selected");
    h.key(KeyCode::Esc);
    assert!(matches!(&h.app.top().kind, ViewKind::Frames(f) if f.tid == 2));
    h.key(KeyCode::Esc);
    assert_eq!(h.app.stack.len(), 1);
    assert_eq!(selected_tid(&h), 2, "home keeps its selection");
    h.key(KeyCode::Esc);
    assert_eq!(h.app.stack.len(), 1, "Esc on home stays home");
    assert!(!h.app.quit);
}

#[test]
fn objects_of_a_group_and_an_object_lead_back_to_its_holders() {
    let mut h = Harness::new(fixture());
    // Thread 1 → frame 0 → F1 → members → the object → its first holder, a frame.
    h.keys(&[
        KeyCode::Enter,
        KeyCode::Enter,
        KeyCode::Down,
        KeyCode::Enter,
    ]);
    let ViewKind::Objects(objects) = &h.app.top().kind else {
        panic!("objects expected")
    };
    assert_eq!(objects.table.total(), Some(1));
    assert_eq!(objects.table.position_note(), "rows 1–1 of 1");
    h.key(KeyCode::Enter);
    let ViewKind::Object(object) = &h.app.top().kind else {
        panic!("object expected")
    };
    let d = object.detail.as_ref().unwrap();
    assert_eq!(d.object.site_label, "Class1.Session");
    // Items: the group, then the two frames of thread 1 that hold it.
    h.keys(&[KeyCode::Down, KeyCode::Down, KeyCode::Enter]);
    let ViewKind::Frames(frames) = &h.app.top().kind else {
        panic!("frames expected")
    };
    assert_eq!(frames.tid, 1);
    assert_eq!(frames.table.selected_row().unwrap().index, 1);
}

#[test]
fn the_filter_narrows_and_esc_clears_it() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('/'));
    assert!(h.app.input.is_some());
    h.type_text("thn");
    assert_eq!(thread_order(&h), [4], "fuzzy: t-h-n in thread-n only");
    assert_eq!(h.app.home().threads.matches(0), [0, 1, 7]);
    h.key(KeyCode::Enter);
    assert!(h.app.input.is_none());
    assert_eq!(thread_order(&h), [4], "Enter keeps the filter");
    h.key(KeyCode::Char('/'));
    assert_eq!(h.app.input.as_ref().unwrap().text, "thn");
    h.key(KeyCode::Esc);
    assert_eq!(thread_order(&h), [1, 3, 2, 4]);
    assert_eq!(selected_tid(&h), 4, "the filtered row stays selected");
}

/// An Escape typed just before `/` reaches the program as Alt-/ (the terminal's escape prefix):
/// it closes the filter being edited and opens a fresh one, as the two keys would.
#[test]
fn escape_then_a_key_read_as_alt_is_both_keys() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('/'));
    h.type_text("thn");
    h.app
        .on_key(KeyEvent::new(KeyCode::Char('/'), KeyModifiers::ALT));
    h.pump();
    let input = h
        .app
        .input
        .as_ref()
        .expect("a filter is being edited again");
    assert_eq!(input.text, "", "the old filter was cleared by the Escape");
    assert_eq!(thread_order(&h), [1, 3, 2, 4]);
}

#[test]
fn sort_keys_sort_by_column_and_again_reverse() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('3'));
    assert_eq!(
        thread_order(&h),
        [1, 2, 3, 4],
        "proprietary 180, 120, 50, 30"
    );
    h.key(KeyCode::Char('3'));
    assert_eq!(thread_order(&h), [4, 3, 2, 1]);
    h.key(KeyCode::Char('4'));
    assert_eq!(
        thread_order(&h),
        [3, 4, 1, 2],
        "shared 204, 140, 84 (tid 1), 84 (tid 2)"
    );
    h.key(KeyCode::Char('1'));
    assert_eq!(thread_order(&h), [1, 2, 3, 4], "tid ascending first");
    h.key(KeyCode::Char('6'));
    assert_eq!(
        thread_order(&h),
        [1, 2, 3, 4],
        "the bar column does not sort"
    );
}

#[test]
fn marked_threads_get_their_set_release_from_the_source() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Tab);
    assert_eq!(h.app.screen(), Screen::Release);
    // Release ranking: 1 (180), 2 (120), 3 (50), 4 (30).
    h.key(KeyCode::Char(' '));
    h.key(KeyCode::Down);
    h.key(KeyCode::Char(' '));
    assert!(h.log.contains(&RequestBody::Release { tids: vec![1, 2] }));
    let home = h.app.home();
    let set = home.set_release.as_ref().unwrap();
    assert_eq!((set.tids.clone(), set.bytes), (vec![1, 2], Some(300)));

    h.key(KeyCode::Char('x'));
    assert!(h.app.home().set_release.is_none());
    h.keys(&[
        KeyCode::Down,
        KeyCode::Char(' '),
        KeyCode::Down,
        KeyCode::Char(' '),
    ]);
    let home = h.app.home();
    let set = home.set_release.as_ref().unwrap();
    assert_eq!(set.tids, [3, 4]);
    assert_eq!(set.bytes, Some(200), "T3 (120 B) is shared by 3 and 4 only");
    assert_eq!(home.sum_of_singles(), 80, "so the release is not the sum");
    assert!(home.release.rows().iter().filter(|r| r.marked).count() == 2);
}

#[test]
fn sites_list_and_open_their_objects() {
    let mut h = Harness::new(fixture());
    assert!(!h.log.iter().any(|r| matches!(r, RequestBody::Sites { .. })));
    h.keys(&[KeyCode::Tab, KeyCode::Tab]);
    assert_eq!(h.app.home().tab, HomeTab::Sites);
    let sites = &h.app.home().sites;
    assert!(sites.len() > 3);
    let first = sites.row(0).unwrap().clone();
    assert!(first.live_bytes >= sites.row(1).unwrap().live_bytes);
    h.key(KeyCode::Enter);
    let ViewKind::Objects(objects) = &h.app.top().kind else {
        panic!("objects expected")
    };
    assert_eq!(
        objects.origin,
        ObjectsOrigin::Site {
            site: first.site,
            label: first.label.clone()
        }
    );
    assert_eq!(objects.table.total(), Some(first.blocks as usize));
}

#[test]
fn offline_refresh_says_why_nothing_happens() {
    let mut h = Harness::new(fixture());
    let before = h.log.len();
    h.key(KeyCode::Char('r'));
    assert_eq!(h.log.len(), before, "no snapshot request to a file");
    assert!(h.app.status.as_ref().unwrap().contains("live agent"));
}

#[test]
fn help_opens_and_any_key_closes_it() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('?'));
    assert!(h.app.help);
    h.key(KeyCode::Down);
    assert!(!h.app.help);
    assert_eq!(selected_tid(&h), 1, "the closing key does nothing else");
    h.key(KeyCode::Char('q'));
    assert!(h.app.quit);
}

#[test]
fn a_disconnect_marks_the_data_stale_and_a_reconnect_reloads_it() {
    let mut h = Harness::new(fixture());
    h.app.on_source(SourceEvent::Disconnected {
        reason: "connection reset".into(),
    });
    assert!(h.app.stale);
    assert!(h.app.banner().unwrap().contains("connection reset"));
    assert_eq!(thread_order(&h), [1, 3, 2, 4], "the last data is kept");
    let before = h.log.len();
    h.app.on_source(SourceEvent::Connected {
        description: "again".into(),
    });
    h.pump();
    assert!(!h.app.stale);
    assert!(h.app.banner().is_none());
    assert!(h.log[before..].contains(&RequestBody::ProcessInfo));
    assert!(
        h.log[before..]
            .iter()
            .any(|r| matches!(r, RequestBody::Threads { .. }))
    );
}

/// The largest group of a graph.
fn largest_group(graph: &heaptui_analysis::HeapGraph) -> (GroupId, u64) {
    let analysis = Analysis::new(graph);
    let g = analysis.groups().iter().max_by_key(|g| g.objects).unwrap();
    (g.id.into(), g.objects)
}

fn object_pages(log: &[RequestBody]) -> Vec<u32> {
    log.iter()
        .filter_map(|r| match r {
            RequestBody::GroupObjects { page, .. } => Some(page.offset),
            _ => None,
        })
        .collect()
}

#[test]
fn a_big_group_is_fetched_page_by_page_as_the_cursor_moves() {
    let graph = big_group_graph(3, 20_000);
    let (group, members) = largest_group(&graph);
    assert_eq!(members, 20_001);
    let mut h = Harness::new(graph);
    h.log.clear();
    h.app.open_objects(ObjectsOrigin::Group(group));
    h.pump();
    assert_eq!(object_pages(&h.log), [0], "only the first page at first");
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    assert_eq!(view.table.total(), Some(members as usize));
    let note = view.table.position_note();
    assert_eq!(note, "rows 1–28 of 20001");

    // Scrolling a screen at a time asks for each page once, just ahead of the cursor.
    for _ in 0..20 {
        h.key(KeyCode::PageDown);
    }
    let pages = object_pages(&h.log);
    let mut dedup = pages.clone();
    dedup.dedup();
    assert_eq!(pages, dedup, "no page asked twice");
    assert!(pages.iter().all(|p| p % PAGE_ROWS == 0));
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    let selected = view.table.cursor().selected as u32;
    assert!(*pages.last().unwrap() <= selected + 2 * PAGE_ROWS);
    assert!(
        view.table.selected_row().is_some(),
        "the row in view has arrived"
    );

    // The end of the list: its last page and the one before (the screen shows both), in
    // one request, not everything in between.
    h.log.clear();
    h.key(KeyCode::End);
    let last = (members as u32 - 1) / PAGE_ROWS * PAGE_ROWS;
    let asked: Vec<(u32, u32)> = h
        .log
        .iter()
        .filter_map(|r| match r {
            RequestBody::GroupObjects { page, .. } => Some((page.offset, page.limit)),
            _ => None,
        })
        .collect();
    assert_eq!(asked, [(last - PAGE_ROWS, 2 * PAGE_ROWS)]);
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    assert!(view.table.selected_row().is_some(), "the last row arrived");

    // A new sort starts over from the first page, in the server's new order.
    h.log.clear();
    h.key(KeyCode::Char('1'));
    assert_eq!(object_pages(&h.log), [0]);
    let sorted = h.log.iter().find_map(|r| match r {
        RequestBody::GroupObjects { sort, page, .. } => Some((*sort, *page)),
        _ => None,
    });
    let (sort, page) = sorted.unwrap();
    assert_eq!(sort.key, heaptui_protocol::ObjectKey::Addr);
    assert_eq!(page, Page::new(0, PAGE_ROWS));
}

fn object_filters(log: &[RequestBody]) -> Vec<(u32, Option<String>)> {
    log.iter()
        .filter_map(|r| match r {
            RequestBody::GroupObjects { page, filter, .. } => {
                Some((page.offset, filter.as_ref().map(|f| f.query.clone())))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn the_objects_filter_is_the_agents_over_the_whole_group() {
    let graph = big_group_graph(3, 20_000);
    let (group, members) = largest_group(&graph);
    let mut h = Harness::new(graph);
    h.app.open_objects(ObjectsOrigin::Group(group));
    h.pump();
    // Smallest first: the entry (4 KiB, the largest) is the last row, far from the pages
    // loaded.
    h.key(KeyCode::Char('2'));
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    assert!(view.table.loaded() < 1000);
    assert!(!(0..view.table.loaded()).any(|i| {
        view.table
            .row(i)
            .is_some_and(|r| r.site_label.contains("Cache::new"))
    }));
    h.log.clear();

    // Each query the agent answers before the next key is asked once, from the first page.
    // (Keys typed while an answer is on its way are coalesced: see table::tests.)
    h.type_text("/new");
    assert_eq!(
        object_filters(&h.log),
        [
            (0, Some("n".to_string())),
            (0, Some("ne".to_string())),
            (0, Some("new".to_string()))
        ]
    );
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    // Of the 20 001 members only the entry (allocated by `Cache::new`) matches "new", even
    // though it was never among the rows loaded before: the agent filtered the whole group.
    assert_eq!(view.table.total(), Some(1));
    assert!(
        view.table
            .selected_row()
            .unwrap()
            .site_label
            .contains("Cache::new")
    );
    assert_eq!(
        view.table.filter_note(),
        "filter “new”: 1 matching in the whole list"
    );
    // Enter keeps the filter; Esc in the filter clears it: the whole list again, from page 0.
    h.key(KeyCode::Enter);
    h.log.clear();
    h.type_text("/");
    h.key(KeyCode::Esc);
    assert_eq!(object_filters(&h.log), [(0, None)]);
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    assert_eq!(view.table.total(), Some(members as usize));
    assert_eq!(view.table.filter_note(), "");
}

#[test]
fn answers_for_an_old_sort_are_dropped() {
    let graph = big_group_graph(2, 2_000);
    let (group, _) = largest_group(&graph);
    let mut h = Harness::new(graph);
    h.answering = false;
    h.app.open_objects(ObjectsOrigin::Group(group));
    let old = h.take_requests();
    h.app.act(Action::Sort(1));
    h.answering = true;
    // The first page in the old order arrives late; then the new one.
    let answerer_rows = {
        h.pump();
        let ViewKind::Objects(view) = &h.app.top().kind else {
            panic!("objects")
        };
        view.table.row(0).unwrap().addr
    };
    assert_eq!(old.len(), 1);
    // Rows are in address order (the new sort), whatever came first.
    let ViewKind::Objects(view) = &h.app.top().kind else {
        panic!("objects")
    };
    assert!(view.table.row(0).unwrap().addr <= view.table.row(1).unwrap().addr);
    assert_eq!(answerer_rows, view.table.row(0).unwrap().addr);
}

// ----- the cancel dialog -------------------------------------------------------------------

use crate::source::SourceEvent;
use heaptui_protocol::message::{
    CancelVerdict, ErrorKind, MeasuredRelease, Mechanism, PolicyAnswer, Push, Response,
    ShortageReport, Verdict,
};

fn verdict(tid: u32, verdict: Verdict, predicted: u64) -> Response {
    let permitted = !matches!(verdict, Verdict::Refused(_));
    Response::Cancel(CancelVerdict {
        tid,
        verdict,
        predicted_release: Some(predicted),
        rule: permitted.then(|| "thread = \"worker-*\"".to_string()),
        mechanism: permitted.then_some(Mechanism::Cooperative),
    })
}

fn cancels(h: &Harness) -> Vec<(u32, bool)> {
    h.log
        .iter()
        .filter_map(|r| match r {
            RequestBody::Cancel { tid, dry_run } => Some((*tid, *dry_run)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_cancel_key_opens_the_dialog_with_only_a_dry_run_and_esc_sends_nothing_more() {
    let mut h = Harness::live(fixture());
    h.cancel_answers.push_back(verdict(1, Verdict::DryRun, 180));
    h.key(KeyCode::Char('c'));
    assert_eq!(cancels(&h), [(1, true)], "opening asks for a dry run only");
    let dialog = h.app.cancel.as_ref().expect("the dialog is open");
    assert_eq!((dialog.tid, dialog.name.as_str()), (1, "thread-1"));
    assert_eq!(dialog.phase, CancelPhase::Ready);
    let p = dialog.prediction.as_ref().unwrap();
    assert_eq!(p.predicted_release, Some(180));
    assert_eq!(p.mechanism, Some(Mechanism::Cooperative));

    h.key(KeyCode::Down);
    assert_eq!(selected_tid(&h), 1, "the dialog takes the keys");
    h.key(KeyCode::Esc);
    assert!(h.app.cancel.is_none());
    assert_eq!(cancels(&h), [(1, true)], "Esc sends nothing");

    // `n` closes as well, on the Release tab too.
    h.cancel_answers.push_back(verdict(1, Verdict::DryRun, 180));
    h.keys(&[KeyCode::Tab, KeyCode::Char('c'), KeyCode::Char('n')]);
    assert!(h.app.cancel.is_none());
    assert_eq!(cancels(&h), [(1, true), (1, true)]);
}

#[test]
fn confirming_sends_exactly_one_real_cancel_and_shows_the_agents_measured_release() {
    let mut h = Harness::live(big_group_graph(3, 100));
    assert!(h.app.home_mut().threads.select_where(|t| t.tid == 1002));
    h.cancel_answers
        .push_back(verdict(1002, Verdict::DryRun, 65_536));
    h.cancel_answers
        .push_back(verdict(1002, Verdict::Done, 65_536));
    // The screen's next snapshot differs from the one on screen by more than the thread:
    // the TUI must not measure against its own (older) snapshot.
    h.next_graph = Some(big_group_graph(1, 100));
    h.key(KeyCode::Char('c'));
    h.key(KeyCode::Enter);
    h.key(KeyCode::Char('y'));
    h.key(KeyCode::Enter);
    assert_eq!(
        cancels(&h),
        [(1002, true), (1002, false)],
        "one real cancel"
    );
    let dialog = h.app.cancel.as_ref().unwrap();
    assert_eq!(dialog.phase, CancelPhase::Finished);
    assert_eq!(dialog.outcome.as_ref().unwrap().verdict, Verdict::Done);
    assert_eq!(
        dialog.measured, None,
        "nothing measured before the agent says"
    );
    assert!(h.app.status.as_ref().unwrap().contains("agent measures"));
    let snapshots = |h: &Harness| {
        h.log
            .iter()
            .filter(|r| **r == RequestBody::TakeSnapshot)
            .count()
    };
    let before = snapshots(&h);

    // A measured release of another cancel does not land in this dialog.
    h.app
        .on_source(SourceEvent::Push(Push::ReleaseMeasured(MeasuredRelease {
            decision: 4,
            tids: vec![1000],
            predicted: 10,
            measured: Some(10),
        })));
    h.pump();
    assert_eq!(h.app.cancel.as_ref().unwrap().measured, None);

    h.app
        .on_source(SourceEvent::Push(Push::ReleaseMeasured(MeasuredRelease {
            decision: 5,
            tids: vec![1002],
            predicted: 65_536,
            measured: Some(63_000),
        })));
    h.pump();
    assert_eq!(
        h.app.cancel.as_ref().unwrap().measured.as_deref(),
        Some("measured 61.5 KiB (63000 bytes); predicted 64.0 KiB (65536 bytes)")
    );
    assert_eq!(
        h.app.status.as_deref(),
        Some(
            "cancel of thread 1002: measured 61.5 KiB (63000 bytes); predicted 64.0 KiB (65536 bytes)"
        )
    );
    assert!(
        snapshots(&h) > before,
        "a new snapshot shows the thread gone"
    );
}

#[test]
fn a_shortage_push_shows_a_banner_for_a_while() {
    let mut h = Harness::live(fixture());
    assert_eq!(h.app.banner(), None);
    let main_before = h.app.areas().main;
    let report = ShortageReport {
        unix_ms: 1_000_000,
        cause: heaptui_protocol::message::ShortageCause::SoftLimit { limit: 7 << 20 },
        live_bytes: 10 << 20,
        need_bytes: 3 << 20,
        outcome: heaptui_protocol::message::ShortageOutcome::Unresolved {
            reason: "the 1 permitted thread(s) free at most 2 MiB together".into(),
        },
    };
    h.app.tick(1_000_500);
    h.app
        .on_source(SourceEvent::Push(Push::Shortage(report.clone())));
    let banner = h.app.banner().expect("a banner");
    assert!(
        banner.starts_with("MEMORY SHORTAGE: live 10.0 MiB > 7.0 MiB limit, need 3.0 MiB"),
        "{banner}"
    );
    assert!(
        banner.contains("nothing cancelled: the 1 permitted"),
        "{banner}"
    );
    assert_eq!(h.app.areas().main.height + 1, main_before.height);
    // A disconnect says so first; back connected, the shortage is still news.
    h.app.on_source(SourceEvent::Disconnected {
        reason: "gone".into(),
    });
    assert!(h.app.banner().unwrap().starts_with("disconnected"));
    h.app.on_source(SourceEvent::Connected {
        description: "again".into(),
    });
    h.pump();
    assert!(h.app.banner().unwrap().starts_with("MEMORY SHORTAGE"));
    h.app.tick(1_000_000 + SHORTAGE_BANNER_MS);
    assert_eq!(h.app.banner(), None, "gone after a minute");
}

#[test]
fn an_invalid_policy_is_shown_in_the_status_and_the_dialog() {
    let policy = PolicyAnswer::Invalid {
        path: "/tmp/p.toml".into(),
        error: "policy file /tmp/p.toml invalid: line 4, column 1: unknown field `mechansim`"
            .into(),
    };
    let mut h = Harness::live(fixture());
    // On (re)connecting the policy is asked for; the agent's answer is given by hand.
    h.answering = false;
    h.app.on_source(SourceEvent::Connected {
        description: "again".into(),
    });
    let asked = h.take_requests();
    let ask = asked
        .iter()
        .find(|r| r.body == RequestBody::Policy)
        .expect("the policy is asked for on connecting");
    h.app.on_source(SourceEvent::Answer {
        id: ask.id,
        body: Response::Policy(policy.clone()),
    });
    assert_eq!(h.app.policy.as_ref(), Some(&policy));
    assert!(
        h.app
            .status
            .as_ref()
            .unwrap()
            .contains("/tmp/p.toml is invalid, so every cancel is refused"),
        "{:?}",
        h.app.status
    );
    h.answering = true;
    let reason = "policy invalid: policy file /tmp/p.toml invalid: line 4, column 1: …";
    h.cancel_answers
        .push_back(verdict(1, Verdict::Refused(reason.into()), 180));
    let policy_asks = |h: &Harness| h.log.iter().filter(|r| **r == RequestBody::Policy).count();
    let before = policy_asks(&h);
    h.key(KeyCode::Char('c'));
    let dialog = h.app.cancel.as_ref().unwrap();
    assert_eq!(dialog.policy.as_ref(), Some(&policy));
    assert_eq!(
        policy_asks(&h),
        before + 1,
        "opening the dialog asks for the policy again"
    );
}

#[test]
fn a_refusal_and_a_failure_stay_in_the_dialog() {
    let mut h = Harness::live(fixture());
    let reason = "no permit rule matches thread `thread-1`";
    h.cancel_answers
        .push_back(verdict(1, Verdict::Refused(reason.into()), 180));
    h.key(KeyCode::Char('c'));
    let p = h.app.cancel.as_ref().unwrap().prediction.clone().unwrap();
    assert_eq!(p.verdict, Verdict::Refused(reason.into()));
    assert_eq!(super::verdict_line(&p), format!("refused: {reason}"));
    // A refused dry run offers no confirmation: `y` sends nothing.
    assert!(!h.app.cancel.as_ref().unwrap().can_confirm());
    h.key(KeyCode::Char('y'));
    let dialog = h.app.cancel.as_ref().unwrap();
    assert!(dialog.outcome.is_none());
    assert_eq!(cancels(&h), [(1, true)], "the dry run only");
    assert!(h.log.iter().all(|r| r != &RequestBody::TakeSnapshot));

    // A failed request (here the agent lost the thread) is kept in the dialog too.
    h.key(KeyCode::Esc);
    h.cancel_answers.push_back(verdict(1, Verdict::DryRun, 180));
    h.cancel_answers.push_back(Response::error(
        ErrorKind::UnknownThread,
        "thread 1 is gone",
    ));
    h.keys(&[KeyCode::Char('c'), KeyCode::Enter]);
    let dialog = h.app.cancel.as_ref().unwrap();
    assert_eq!(dialog.error.as_deref(), Some("thread 1 is gone"));
    assert_eq!(dialog.phase, CancelPhase::Finished);
    h.key(KeyCode::Enter);
    assert_eq!(cancels(&h).len(), 3, "nothing more after the failure");
}

#[test]
fn offline_cancel_says_why_not() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('c'));
    assert!(h.app.cancel.is_none());
    assert!(cancels(&h).is_empty());
    assert!(h.app.status.as_ref().unwrap().contains("live agent"));
}

#[test]
fn a_reconnect_while_cancelling_says_the_answer_is_lost() {
    let mut h = Harness::live(fixture());
    h.cancel_answers.push_back(verdict(1, Verdict::DryRun, 180));
    h.key(KeyCode::Char('c'));
    h.answering = false;
    h.key(KeyCode::Enter);
    assert_eq!(h.app.cancel.as_ref().unwrap().phase, CancelPhase::Sending);
    h.app.on_source(SourceEvent::Connected {
        description: "again".into(),
    });
    let dialog = h.app.cancel.as_ref().unwrap();
    assert_eq!(dialog.phase, CancelPhase::Finished);
    assert!(dialog.error.as_ref().unwrap().contains("audit log"));
}
