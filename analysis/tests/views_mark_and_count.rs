//! Mark-and-count against every vector of issue 7, and the tolerance guarantee on random
//! traces.

use heaptui_analysis::views::mark_and_count::{MarkAndCount, SnapshotRule, Trigger};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Ev {
    A(u64),
    F(u64),
}
use Ev::{A, F};

/// Runs a trace; returns the live bytes of every snapshot the rule took, and the machine.
fn run(rule: SnapshotRule, trace: &[Ev]) -> (Vec<u64>, MarkAndCount) {
    let mut m = MarkAndCount::new(rule);
    let mut snapshots = Vec::new();
    for &e in trace {
        match e {
            A(n) => {
                if let Some(Trigger { live_bytes, .. }) = m.alloc(n) {
                    snapshots.push(live_bytes);
                }
            }
            F(n) => m.free(n),
        }
    }
    (snapshots, m)
}

#[test]
fn counters_and_utilization() {
    let (snapshots, m) = run(SnapshotRule::Off, &[A(100), A(200), F(100)]);
    let c = m.counters();
    assert!(snapshots.is_empty());
    assert_eq!(c.live_bytes, 200);
    assert_eq!(c.live_blocks, 1);
    assert_eq!(c.allocated_bytes, 300);
    assert_eq!(c.peak_live_bytes, 300);
    assert_eq!(format!("{:.1}%", c.utilization() * 100.0), "66.7%");
    assert_eq!(MarkAndCount::default().counters().utilization(), 0.0);
}

const FIRST: [Ev; 8] = [A(60), A(50), F(50), A(30), A(100), F(100), F(30), A(200)];
const SECOND: [Ev; 8] = [
    A(150),
    F(150),
    A(100),
    F(100),
    A(100),
    F(100),
    A(100),
    F(100),
];

#[test]
fn tolerance_rule_first_vector() {
    let (snapshots, m) = run(SnapshotRule::Tolerance(100), &FIRST);
    assert_eq!(snapshots, vec![110, 190, 260]);
    assert_eq!(m.counters().kept_peak_bytes, Some(260));
    assert_eq!(m.counters().snapshots, 3);
}

#[test]
fn every_bytes_rule_first_vector() {
    let (snapshots, m) = run(SnapshotRule::EveryBytes(100), &FIRST);
    assert_eq!(snapshots, vec![110, 190, 260]);
    assert_eq!(m.counters().kept_peak_bytes, Some(260));
}

#[test]
fn tolerance_rule_second_vector_keeps_the_higher_snapshot() {
    let mut m = MarkAndCount::new(SnapshotRule::Tolerance(100));
    let mut triggers = Vec::new();
    for e in SECOND {
        match e {
            A(n) => triggers.extend(m.alloc(n)),
            F(n) => m.free(n),
        }
    }
    assert_eq!(
        triggers,
        vec![
            Trigger {
                live_bytes: 150,
                keep: true
            },
            Trigger {
                live_bytes: 100,
                keep: false
            },
        ]
    );
    assert_eq!(m.counters().kept_peak_bytes, Some(150));
    assert_eq!(m.counters().peak_live_bytes, 150);
}

#[test]
fn every_bytes_rule_second_vector() {
    let (snapshots, m) = run(SnapshotRule::EveryBytes(100), &SECOND);
    assert_eq!(snapshots, vec![150, 100, 100, 100]);
    assert_eq!(m.counters().kept_peak_bytes, Some(150));
}

#[test]
fn the_tolerance_comparison_is_strict() {
    // X + Y = 100 + 0 is not > 0 + 100; one byte more is.
    let (snapshots, _) = run(SnapshotRule::Tolerance(100), &[A(100)]);
    assert!(snapshots.is_empty());
    let (snapshots, _) = run(SnapshotRule::Tolerance(100), &[A(100), A(1)]);
    assert_eq!(snapshots, vec![101]);
}

#[test]
fn a_manual_snapshot_restarts_the_rule() {
    let mut m = MarkAndCount::new(SnapshotRule::EveryBytes(100));
    assert_eq!(m.alloc(60), None);
    assert!(m.snapshot_taken(60));
    // 60 since the manual snapshot: not yet; 120: now.
    assert_eq!(m.alloc(60), None);
    assert_eq!(
        m.alloc(60),
        Some(Trigger {
            live_bytes: 180,
            keep: true
        })
    );
    assert!(
        !m.snapshot_taken(10),
        "a lower snapshot never replaces the kept one"
    );
    assert_eq!(m.counters().kept_peak_bytes, Some(180));
}

#[test]
fn realloc_frees_the_old_size_and_allocates_the_new() {
    let mut m = MarkAndCount::new(SnapshotRule::Off);
    m.alloc(50);
    m.realloc(50, 80);
    let c = m.counters();
    assert_eq!(
        (c.live_bytes, c.live_blocks, c.allocated_bytes),
        (80, 1, 130)
    );
}

fn trace() -> impl Strategy<Value = Vec<(bool, u64)>> {
    prop::collection::vec((any::<bool>(), 1u64..500), 0..200)
}

/// Replays (alloc?, size) pairs: a "free" frees the oldest live block, if any.
fn true_and_kept_peak(rule: SnapshotRule, trace: &[(bool, u64)]) -> (u64, u64) {
    let mut m = MarkAndCount::new(rule);
    let mut live = std::collections::VecDeque::new();
    let mut kept = 0;
    for &(alloc, size) in trace {
        if alloc || live.is_empty() {
            live.push_back(size);
            if let Some(t) = m.alloc(size)
                && t.keep
            {
                kept = t.live_bytes;
            }
        } else if let Some(size) = live.pop_front() {
            m.free(size);
        }
    }
    assert_eq!(m.counters().kept_peak_bytes.unwrap_or(0), kept);
    (m.counters().peak_live_bytes, kept)
}

proptest! {
    #[test]
    fn the_kept_peak_is_within_the_tolerance(t in 0u64..1000, trace in trace()) {
        let (peak, kept) = true_and_kept_peak(SnapshotRule::Tolerance(t), &trace);
        prop_assert!(kept <= peak);
        prop_assert!(peak - kept <= t, "peak {} kept {} tolerance {}", peak, kept, t);
    }

    #[test]
    fn the_kept_peak_is_within_n_for_every_n_bytes(n in 1u64..1000, trace in trace()) {
        let (peak, kept) = true_and_kept_peak(SnapshotRule::EveryBytes(n), &trace);
        prop_assert!(kept <= peak);
        prop_assert!(peak - kept < n, "peak {} kept {} n {}", peak, kept, n);
    }
}
