//! The recording format: round trip of arbitrary events, a cut tail ignored at every byte,
//! damage reported with its offset, and a replay that gives the figures of the same events fed
//! to a tracker directly.

use heaptui_analysis::recording::{
    Event, MAGIC, RecordedCounters, RecordingError, RecordingReader, RecordingWriter, read_all,
    replay,
};
use heaptui_analysis::views::ages::Boundary;
use heaptui_analysis::views::mark_and_count::{SnapshotRule, Trigger};
use heaptui_analysis::views::units::{AllocKind, Charge, Granularity, UnitConfig};
use heaptui_analysis::views::{NO_STACK, Tracker, TrackerConfig};
use proptest::prelude::*;

fn write(events: &[Event]) -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new()).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.into_inner()
}

fn stack_id() -> impl Strategy<Value = u32> {
    prop_oneof![Just(NO_STACK), 0u32..1000]
}

fn kind() -> impl Strategy<Value = AllocKind> {
    prop_oneof![
        Just(AllocKind::Malloc),
        Just(AllocKind::Calloc),
        Just(AllocKind::Memalign)
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        ".{0,12}".prop_map(Event::String),
        prop::collection::vec((any::<u32>(), any::<u32>()), 0..6).prop_map(Event::Stack),
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(name, base, size)| Event::Module {
            name,
            base,
            size
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(tid, name)| Event::Thread { tid, name }),
        (
            kind(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            stack_id(),
            any::<u32>()
        )
            .prop_map(|(kind, seq, addr, size, stack, tid)| Event::Alloc {
                kind,
                seq,
                addr,
                size,
                stack,
                tid
            }),
        (any::<u64>(), stack_id(), any::<u32>()).prop_map(|(addr, stack, tid)| Event::Free {
            addr,
            stack,
            tid
        }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            stack_id(),
            any::<u32>()
        )
            .prop_map(
                |(seq, old_addr, new_addr, size, stack, tid)| Event::Realloc {
                    seq,
                    old_addr,
                    new_addr,
                    size,
                    stack,
                    tid
                }
            ),
        prop::array::uniform5(any::<u64>()).prop_map(|v| Event::Counters(RecordedCounters {
            live_bytes: v[0],
            live_blocks: v[1],
            allocated_bytes: v[2],
            peak_live_bytes: v[3],
            unix_ms: v[4],
        })),
        (any::<u64>(), any::<u64>())
            .prop_map(|(last_seq, unix_ms)| Event::Snapshot(Boundary { last_seq, unix_ms })),
        any::<u64>().prop_map(|unix_ms| Event::Clock { unix_ms }),
        any::<u64>().prop_map(|events| Event::Lost { events }),
    ]
}

proptest! {
    #[test]
    fn events_round_trip(events in prop::collection::vec(event(), 0..60)) {
        let bytes = write(&events);
        let (read, truncated) = read_all(&bytes).unwrap();
        prop_assert_eq!(read, events);
        prop_assert_eq!(truncated, None);
    }

    #[test]
    fn a_cut_tail_is_ignored(events in prop::collection::vec(event(), 1..20), cut in any::<prop::sample::Index>()) {
        let bytes = write(&events);
        let cut = 16 + cut.index(bytes.len() - 16);
        let (read, truncated) = read_all(&bytes[..cut]).unwrap();
        // What was read is a prefix of what was written; a cut inside a record says where.
        prop_assert_eq!(&events[..read.len()], &read[..]);
        let whole = write(&read).len();
        prop_assert_eq!(truncated.is_some(), whole < cut);
        if let Some(at) = truncated {
            prop_assert_eq!(at, whole);
        }
    }
}

/// A small run: strings and stacks through the writer's interning, two threads, a realloc,
/// frees (one of NULL, one unknown), snapshot boundaries and clocks.
fn sample_run() -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new()).unwrap();
    let exe = w.string("exe").unwrap();
    w.write(&Event::Module {
        name: exe,
        base: 0x400000,
        size: 0x1000,
    })
    .unwrap();
    let name = w.string("worker").unwrap();
    w.write(&Event::Thread { tid: 2, name }).unwrap();
    let a = w
        .stack([("malloc", "libc.so.6"), ("fa", "liba.so"), ("main", "exe")])
        .unwrap();
    let b = w
        .stack([("malloc", "libc.so.6"), ("fb", "libb.so"), ("main", "exe")])
        .unwrap();
    assert_eq!(
        w.stack([("malloc", "libc.so.6"), ("fa", "liba.so"), ("main", "exe")])
            .unwrap(),
        a
    );
    w.write(&Event::Clock { unix_ms: 1_000 }).unwrap();
    let alloc = |seq, addr, size, stack, tid| Event::Alloc {
        kind: AllocKind::Malloc,
        seq,
        addr,
        size,
        stack,
        tid,
    };
    for e in [
        alloc(1, 0x7f00_0000_1000, 60, a, 1),
        alloc(2, 0x7f00_0000_2000, 50, b, 2),
        Event::Free {
            addr: 0x7f00_0000_2000,
            stack: b,
            tid: 2,
        },
        alloc(3, 0x7f00_0000_3000, 30, a, 1),
        Event::Snapshot(Boundary {
            last_seq: 3,
            unix_ms: 1_500,
        }),
        alloc(4, 0x7f00_0000_4000, 100, b, 2),
        Event::Realloc {
            seq: 5,
            old_addr: 0x7f00_0000_3000,
            new_addr: 0x7f00_0000_5000,
            size: 80,
            stack: b,
            tid: 2,
        },
        Event::Free {
            addr: 0,
            stack: a,
            tid: 1,
        },
        Event::Free {
            addr: 0x1234,
            stack: a,
            tid: 1,
        },
        Event::Clock { unix_ms: 2_000 },
        Event::Counters(RecordedCounters {
            live_bytes: 240,
            live_blocks: 3,
            allocated_bytes: 320,
            peak_live_bytes: 240,
            unix_ms: 2_000,
        }),
    ] {
        w.write(&e).unwrap();
    }
    w.into_inner()
}

fn config() -> TrackerConfig {
    TrackerConfig {
        rule: SnapshotRule::Tolerance(100),
        units: UnitConfig {
            granularity: Granularity::Library,
            charge: Charge::Allocator,
            ..UnitConfig::default()
        },
    }
}

#[test]
fn replay_gives_the_figures_of_the_events_fed_directly() {
    let bytes = sample_run();
    let r = replay(&bytes, config()).unwrap();
    assert_eq!(r.truncated, None);
    let c = r.tracker.counters().counters();
    assert_eq!(
        (c.live_bytes, c.live_blocks, c.allocated_bytes),
        (240, 3, 320)
    );
    assert_eq!(c.peak_live_bytes, 240);
    assert_eq!(
        r.tracker.recorded_counters().unwrap().live_bytes,
        c.live_bytes
    );
    // 60 → no; +50 = 110 > 100 → snapshot at 110; then 30, 100 → 130 + 110 > 210 → at 190;
    // the realloc allocates 80: 80 + 190 > 290? no.
    assert_eq!(
        r.tracker.triggers(),
        [
            Trigger {
                live_bytes: 110,
                keep: true
            },
            Trigger {
                live_bytes: 190,
                keep: true
            }
        ]
    );
    let units = r.tracker.units();
    assert_eq!(units.get("liba.so").unwrap().live, 60);
    assert_eq!(units.get("libb.so").unwrap().live, 180);
    assert_eq!(units.unknown().frees, 1);
    assert_eq!(r.tracker.thread_name(2), Some("worker"));
    assert_eq!(r.tracker.modules().collect::<Vec<_>>(), ["exe"]);
    let ages = r.tracker.ages(10);
    // Seqs 1 (before the boundary at 3), 4 and 5 (after): ages 1, 0, 0.
    assert_eq!(ages.total.blocks, [2, 1, 0, 0, 0]);
    assert_eq!(ages.oldest[0].age_ms, Some(1_000));

    // The same events applied one by one to a tracker give the same figures.
    let (events, _) = read_all(&bytes).unwrap();
    let mut direct = Tracker::new(config());
    for e in &events {
        direct.apply(e);
    }
    assert_eq!(direct.counters(), r.tracker.counters());
    assert_eq!(direct.units().figures(), r.tracker.units().figures());
    assert_eq!(direct.ages(10), ages);
}

#[test]
fn a_crashed_recording_replays_up_to_the_last_whole_record() {
    let bytes = sample_run();
    let whole = replay(&bytes, config()).unwrap();
    let cut = &bytes[..bytes.len() - 3];
    let r = replay(cut, config()).unwrap();
    assert!(r.truncated.is_some());
    assert_eq!(r.events, whole.events - 1);
    assert!(
        r.tracker.recorded_counters().is_none(),
        "the counters were the cut record"
    );
    // Zero-filled space after the last record counts as an unwritten tail, too.
    let mut padded = bytes.clone();
    padded.extend([0u8; 64]);
    assert_eq!(replay(&padded, config()).unwrap().events, whole.events);
}

#[test]
fn damage_and_foreign_files_are_refused() {
    assert_eq!(read_all(b"hello").unwrap_err(), RecordingError::BadMagic);
    let mut v2 = MAGIC.to_vec();
    v2.extend(2u32.to_le_bytes());
    assert_eq!(read_all(&v2).unwrap_err(), RecordingError::Version(2));
    assert_eq!(
        read_all(&v2).unwrap_err().to_string(),
        "heaptui recording: unsupported version 2 (this heaptui reads version 1)"
    );
    let mut bytes = write(&[Event::Clock { unix_ms: 5 }]);
    // An alloc record whose kind is 9.
    bytes.extend([5, 6, 9, 0, 0, 0, 0, 0]);
    let e = read_all(&bytes).unwrap_err();
    assert_eq!(
        e,
        RecordingError::Damaged {
            offset: 19,
            what: "unknown allocation kind"
        }
    );
    // A record of an unknown tag from a later version is skipped by its length.
    let mut later = write(&[Event::Clock { unix_ms: 5 }]);
    later.extend([42, 2, 0xff, 0xff]);
    later.extend(write(&[Event::Clock { unix_ms: 6 }])[16..].iter().copied());
    let (events, _) = read_all(&later).unwrap();
    assert_eq!(
        events,
        [Event::Clock { unix_ms: 5 }, Event::Clock { unix_ms: 6 }]
    );
    assert!(RecordingReader::looks_like(&later));
}

#[test]
fn a_typical_allocation_is_compact() {
    let mut events = Vec::new();
    for i in 0..1000u64 {
        events.push(Event::Alloc {
            kind: AllocKind::Malloc,
            seq: i + 1,
            addr: 0x5555_0000_0000 + i * 48,
            size: 40,
            stack: (i % 50) as u32,
            tid: 4242,
        });
    }
    let bytes = write(&events);
    let per_event = (bytes.len() - 16) as f64 / 1000.0;
    assert!(per_event <= 10.0, "{per_event} bytes per allocation");
}

#[test]
fn long_strings_and_stacks_take_a_longer_length_prefix() {
    let long = "x".repeat(300);
    let stack: Vec<(u32, u32)> = (0..100).map(|i| (u32::MAX - i, i)).collect();
    let events = [
        Event::String(long.clone()),
        Event::Stack(stack.clone()),
        Event::Clock { unix_ms: 1 },
    ];
    let bytes = write(&events);
    // The tag, then the payload length 302 (two varint bytes, 0xae 0x02): 300 bytes of
    // string after its own two-byte length.
    assert_eq!(&bytes[16..19], &[1, 0xae, 0x02]);
    let (read, truncated) = read_all(&bytes).unwrap();
    assert_eq!(read, events);
    assert_eq!(truncated, None);
}

#[test]
fn units_tracked_alongside_equal_a_replay_under_that_configuration() {
    use heaptui_analysis::views::units::Position;
    let bytes = sample_run();
    let mut with_more = Tracker::new(config());
    let configs: Vec<UnitConfig> = [
        Granularity::Library,
        Granularity::Function,
        Granularity::Thread,
    ]
    .into_iter()
    .flat_map(|granularity| {
        [
            Position::Outermost,
            Position::Innermost,
            Position::Inclusive,
        ]
        .into_iter()
        .flat_map(move |position| {
            [Charge::Allocator, Charge::Freer].map(|charge| UnitConfig {
                granularity,
                position,
                charge,
                program: None,
            })
        })
    })
    .collect();
    for c in &configs {
        with_more.track_units(c.clone());
    }
    let (events, _) = read_all(&bytes).unwrap();
    for e in &events {
        with_more.apply(e);
    }
    for c in &configs {
        let alone = replay(
            &bytes,
            TrackerConfig {
                units: c.clone(),
                ..config()
            },
        )
        .unwrap();
        let tracked = with_more.units_for(c).expect("tracked");
        assert_eq!(tracked.figures(), alone.tracker.units().figures(), "{c:?}");
        assert_eq!(tracked.unknown(), alone.tracker.units().unknown());
    }
    // A recording with lost events says so.
    let mut w = RecordingWriter::new(Vec::new()).unwrap();
    w.write(&Event::Lost { events: 7 }).unwrap();
    assert_eq!(replay(&w.into_inner(), config()).unwrap().tracker.lost(), 7);
}

#[test]
fn a_growing_recording_is_read_on_from_where_the_reader_stopped() {
    use heaptui_analysis::recording::ReadPosition;
    let bytes = sample_run();
    let (all, _) = read_all(&bytes).unwrap();
    // The file as a writer leaves it at every byte: read what is there, stop at the cut
    // record, and read on from there once more is written.
    for cut in [20, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let mut reader = RecordingReader::new(&bytes[..cut]).unwrap();
        let mut events: Vec<Event> = reader.by_ref().map(Result::unwrap).collect();
        let at: ReadPosition = reader.position();
        assert!(at.offset as usize <= cut);
        let mut rest = RecordingReader::resume(&bytes[at.offset as usize..], at);
        events.extend(rest.by_ref().map(Result::unwrap));
        assert_eq!(events, all, "cut at {cut}");
        assert_eq!(rest.position().offset as usize, bytes.len());
        assert_eq!(rest.truncated(), None);
    }
}
