//! The live units: a `heaptui_analysis::views::Tracker` that reads the recording file on from
//! where it stopped, each time a `Units` request comes, after the writer drained and flushed
//! every event claimed so far. So the live answer is the replay of the file up to the
//! request — the same figures `heaptui open` computes — and the writer pays nothing per
//! event for units nobody asked for.
//!
//! The tracker computes the units under every configuration a client can ask for
//! ([`unit_configs`]), so any query is answered from it. It runs on the requesting server
//! thread, never in a hook, and reads the file in bounded chunks. The first request after a
//! long unobserved run pays for the whole file once (a replay runs at roughly a million
//! events per second per unit configuration computed; BENCHMARKS.md "Views"); later ones
//! only for what was written since.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Mutex;

use heaptui_analysis::recording::{Event, ReadPosition, RecordingReader};
use heaptui_analysis::views::units::{Charge, Granularity, Position, UnitConfig};
use heaptui_analysis::views::{Tracker, TrackerConfig};

/// Bytes read from the file at a time (a record is far smaller; a longer one doubles it).
const CHUNK: usize = 4 << 20;

/// Every unit configuration a client can ask for (thread units do not depend on the
/// position: one per charge).
pub fn unit_configs() -> Vec<UnitConfig> {
    let mut configs = Vec::new();
    for granularity in [
        Granularity::Library,
        Granularity::Function,
        Granularity::Thread,
    ] {
        for position in [
            Position::Outermost,
            Position::Innermost,
            Position::Inclusive,
        ] {
            if granularity == Granularity::Thread && position != Position::Outermost {
                continue;
            }
            for charge in [Charge::Allocator, Charge::Freer] {
                configs.push(UnitConfig {
                    granularity,
                    position,
                    charge,
                    program: None,
                });
            }
        }
    }
    configs
}

/// A tracker of every unit configuration.
pub fn new_tracker() -> Tracker {
    let mut tracker = Tracker::new(TrackerConfig::default());
    for config in unit_configs() {
        tracker.track_units(config);
    }
    tracker
}

struct Live {
    file: File,
    tracker: Tracker,
    /// Where reading stopped; `None` before the header was read.
    at: Option<ReadPosition>,
    /// Heap events (allocations, frees, reallocs) applied.
    events: u64,
}

static LIVE: Mutex<Option<Live>> = Mutex::new(None);

impl Live {
    /// Applies what the file holds beyond `at`.
    fn read_on(&mut self) -> Result<(), String> {
        let mut chunk = CHUNK;
        let mut buf = Vec::new();
        loop {
            let offset = self.at.map_or(0, |a| a.offset);
            buf.clear();
            self.file
                .seek(SeekFrom::Start(offset))
                .and_then(|_| (&self.file).take(chunk as u64).read_to_end(&mut buf))
                .map_err(|e| format!("cannot read the recording: {e}"))?;
            let mut reader = match self.at {
                Some(at) => RecordingReader::resume(&buf, at),
                None => RecordingReader::new(&buf).map_err(|e| e.to_string())?,
            };
            for event in reader.by_ref() {
                let event = event.map_err(|e| e.to_string())?;
                if matches!(
                    event,
                    Event::Alloc { .. } | Event::Free { .. } | Event::Realloc { .. }
                ) {
                    self.events += 1;
                }
                self.tracker.apply(&event);
            }
            let at = reader.position();
            let moved = at.offset != offset;
            self.at = Some(at);
            if buf.len() < chunk {
                // The end of the file: the rest is a record still being written, if any.
                return Ok(());
            }
            if !moved {
                // A record longer than a chunk.
                chunk *= 2;
            }
        }
    }
}

/// Runs `f` on the tracker brought up to every event claimed so far, with the number of heap
/// events it applied; `Err` says why there is none.
pub fn with_tracker<T>(f: impl FnOnce(&Tracker, u64) -> T) -> Result<T, String> {
    let path = super::writer::flush_now()?;
    let mut guard = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let file = File::open(&path)
            .map_err(|e| format!("cannot open the recording {}: {e}", path.display()))?;
        *guard = Some(Live {
            file,
            tracker: new_tracker(),
            at: None,
            events: 0,
        });
    }
    let live = guard.as_mut().expect("set above");
    live.read_on()?;
    Ok(f(&live.tracker, live.events))
}
