//! Views benchmark: the per-event cost of what an agent or a replay runs for every heap event.
//!
//! - mark-and-count: `MarkAndCount::alloc`/`free` with the tolerance rule, ns per event;
//! - recording: `RecordingWriter::write` of allocations and frees into memory, ns and bytes per
//!   event;
//! - replay: `recording::replay` (block table, counters with the rule, library units, live
//!   blocks for ages), ns per event and events per second.
//!
//! Run: `cargo bench -p heaptui-analysis --bench views`. The workload: 2M events, allocations
//! of 16–4,111 bytes from 1,000 stacks of 12 frames in 40 libraries, 8 threads, a free for
//! every allocation once 100k blocks are live (a steady state), a snapshot boundary every 100k
//! allocations.

use std::hint::black_box;
use std::time::Instant;

use heaptui_analysis::recording::{Event, RecordingWriter, replay};
use heaptui_analysis::synthetic::Rng;
use heaptui_analysis::views::ages::Boundary;
use heaptui_analysis::views::mark_and_count::{MarkAndCount, SnapshotRule};
use heaptui_analysis::views::units::{AllocKind, Granularity, Position, UnitConfig};
use heaptui_analysis::views::{StackId, TrackerConfig};

const EVENTS: usize = 2_000_000;
const LIVE: usize = 100_000;
const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The workload's events, stack definitions excluded.
fn workload(rng: &mut Rng, stacks: &[StackId]) -> Vec<Event> {
    let mut events = Vec::with_capacity(EVENTS + EVENTS / LIVE);
    let mut live = std::collections::VecDeque::with_capacity(LIVE + 1);
    let mut seq = 0u64;
    let mut next_addr = 0x5555_0000_0000u64;
    while events.len() < EVENTS {
        if live.len() >= LIVE {
            let (addr, stack, tid) = live.pop_front().unwrap();
            events.push(Event::Free { addr, stack, tid });
            continue;
        }
        seq += 1;
        let size = 16 + rng.below(4096);
        let stack = stacks[rng.below(stacks.len() as u64) as usize];
        let tid = 1000 + rng.below(8) as u32;
        let addr = next_addr;
        next_addr += (size + 15) & !15;
        live.push_back((addr, stack, tid));
        events.push(Event::Alloc {
            kind: AllocKind::Malloc,
            seq,
            addr,
            size,
            stack,
            tid,
        });
        if seq.is_multiple_of(LIVE as u64) {
            events.push(Event::Snapshot(Boundary {
                last_seq: seq,
                unix_ms: 0,
            }));
        }
    }
    events
}

fn main() {
    let mut rng = Rng::new(1);
    // Stack definitions through the writer, so ids match what a replay rebuilds.
    let mut header = RecordingWriter::new(Vec::new()).unwrap();
    let names: Vec<(String, String)> = (0..12_000)
        .map(|i| (format!("function_{i}"), format!("lib{}.so", i % 40)))
        .collect();
    let mut stacks = Vec::new();
    for s in 0..1000 {
        let frames: Vec<(&str, &str)> = (0..12)
            .map(|f| {
                let (func, module) = &names[(s * 12 + f + rng.below(7) as usize) % names.len()];
                (func.as_str(), module.as_str())
            })
            .chain([("main", "exe")])
            .collect();
        stacks.push(header.stack(frames).unwrap());
    }
    let events = workload(&mut rng, &stacks);
    let n = events.len() as f64;

    let mut mc_ns = Vec::new();
    for _ in 0..RUNS {
        let mut m = MarkAndCount::new(SnapshotRule::Tolerance(1 << 20));
        let start = Instant::now();
        for e in &events {
            match *e {
                Event::Alloc { size, .. } => {
                    black_box(m.alloc(size));
                }
                Event::Free { .. } => m.free(black_box(2048)),
                _ => {}
            }
        }
        mc_ns.push(start.elapsed().as_secs_f64() * 1e9 / n);
        black_box(m.counters());
    }

    let mut write_ns = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..RUNS {
        let mut w = RecordingWriter::new(Vec::with_capacity(32 << 20)).unwrap();
        let start = Instant::now();
        for e in &events {
            w.write(e).unwrap();
        }
        write_ns.push(start.elapsed().as_secs_f64() * 1e9 / n);
        bytes = w.into_inner();
    }
    let mut file = header.into_inner();
    file.extend_from_slice(&bytes[16..]);
    let per_event = (bytes.len() - 16) as f64 / n;

    let config = TrackerConfig {
        rule: SnapshotRule::Tolerance(1 << 20),
        units: UnitConfig {
            granularity: Granularity::Library,
            position: Position::Inclusive,
            ..UnitConfig::default()
        },
    };
    let mut replay_ns = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let r = replay(&file, config.clone()).unwrap();
        replay_ns.push(start.elapsed().as_secs_f64() * 1e9 / n);
        assert_eq!(r.tracker.counters().counters().live_blocks, LIVE as u64);
        black_box(r.tracker.ages(10));
    }

    println!(
        "events: {} ({} live blocks at steady state)",
        events.len(),
        LIVE
    );
    println!(
        "mark-and-count: {:.1} ns/event (median of {RUNS})",
        median(mc_ns)
    );
    println!(
        "recording write: {:.1} ns/event, {per_event:.2} bytes/event",
        median(write_ns)
    );
    let r = median(replay_ns);
    println!(
        "replay (inclusive library units): {r:.1} ns/event, {:.1} M events/s",
        1e3 / r
    );
}
