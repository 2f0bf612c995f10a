//! The other views' screens (units, leaks, growth, ages) and the header's counters chart,
//! drawn to a `TestBackend` at 120×36 and compared with the accepted insta snapshots, over a
//! recording made in the test, the patent fixture, and an agent's hand-made answers.

use heaptui_protocol::message::{ErrorKind, RequestBody, Response};
use ratatui::crossterm::event::KeyCode;

use super::tests::screen;
use crate::app::other_tests::agent_units;
use crate::app::testing::{Harness, fixture};
use crate::offline::recording::tests::{ages_vector, counters_vector};

#[test]
fn units_of_a_recording_by_function() {
    let mut h = Harness::recording(ages_vector());
    h.key(KeyCode::Char('f'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn counters_of_a_recording_in_the_header() {
    let h = Harness::recording(counters_vector());
    let text = screen(&h);
    assert!(
        text.contains("live 200 B in 1 block · allocated 300 B · util 66.7% · peak 300 B"),
        "{text}"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn ages_of_a_recording() {
    let mut h = Harness::recording(ages_vector());
    h.keys(&[KeyCode::Esc, KeyCode::Char('A')]);
    let text = screen(&h);
    assert!(
        text.contains("2 snapshot boundaries · all blocks 0: 2, 1: 1, 2: 3, 3: 0, >3: 0"),
        "{text}"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn oldest_survivors_of_a_recording() {
    let mut h = Harness::recording(ages_vector());
    h.keys(&[KeyCode::Esc, KeyCode::Char('A'), KeyCode::Char('o')]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn leaks_of_a_recording_say_why_there_are_none() {
    let mut h = Harness::recording(ages_vector());
    h.keys(&[KeyCode::Esc, KeyCode::Char('L')]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn leaks_of_a_snapshot() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('L'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn leaks_say_when_most_of_the_heap_is_possibly_lost() {
    // 100 of 110 bytes reached only through a pointer into the block's middle, as in perl's heap.
    let json = br#"{"format": "heaptui-snapshot", "version": 1,
        "objects": [{"id": 1, "size": 100, "refs": []}, {"id": 2, "size": 10, "refs": []}],
        "threads": [{"tid": 1, "name": "main", "frames": [{"function": "main",
          "refs": [{"id": 1, "interior": true}, 2]}]}]}"#;
    let mut h = Harness::new(heaptui_analysis::snapshot::read_bytes(json).unwrap());
    h.key(KeyCode::Char('L'));
    let text = screen(&h);
    assert!(
        text.contains(
            "Leaks by site: most of the heap is possibly lost (interior pointers), seldom leaks · \
             rows"
        ),
        "{text}"
    );
}

#[test]
fn live_units_charged_to_the_freer_with_the_counter_chart() {
    let mut h = Harness::live_with(fixture(), agent_units);
    h.keys(&[KeyCode::Char('u'), KeyCode::Char('c')]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn live_growth_with_a_flagged_site() {
    let mut h = Harness::live_with(fixture(), agent_units);
    h.key(KeyCode::Char('w'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn live_units_refused_by_the_agent() {
    let mut h = Harness::live_with(fixture(), |body| match body {
        RequestBody::Units { .. } => Some(Response::error(
            ErrorKind::Refused,
            "units need the agent's event stream",
        )),
        _ => None,
    });
    h.key(KeyCode::Char('u'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn the_header_follows_the_agents_kept_peak_snapshot() {
    use heaptui_protocol::message::{ProcessInfo, SnapshotId, SnapshotInfo, SnapshotRule, Totals};
    let mut asked = 0;
    let mut h = Harness::live_with(fixture(), move |body| match body {
        RequestBody::ProcessInfo => {
            asked += 1;
            // The agent keeps a peak snapshot from its second answer on.
            let peak = (asked > 1).then(|| SnapshotInfo {
                snapshot: SnapshotId(9),
                totals: Totals {
                    bytes: 2048,
                    ..Totals::default()
                },
                ..SnapshotInfo::default()
            });
            Some(Response::ProcessInfo(ProcessInfo {
                pid: 4242,
                command: "patent-example".into(),
                agent_version: "test".into(),
                peak_snapshot: peak,
                snapshot_rule: SnapshotRule::Tolerance(1 << 20),
                ..ProcessInfo::default()
            }))
        }
        _ => agent_units(body),
    });
    assert!(!screen(&h).contains("kept peak #"));
    h.app.tick(crate::app::PEAK_EVERY_MS);
    h.pump();
    let text = screen(&h);
    assert!(
        text.contains("· global-only 100 B · kept peak #9 2.0 KiB · auto ±1.0 MiB"),
        "{text}"
    );
    insta::assert_snapshot!(text);
}
