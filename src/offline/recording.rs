//! A recording (docs/reference.md §8 "Recording", `HEAPTUI_RECORD=FILE`) as a source of the views:
//! the file is replayed through `heaptui_analysis::views::Tracker`, and requests are answered with
//! the protocol's own answer types, so that `heaptui open REC` shows the live screens and
//! `heaptui report REC` prints the same figures.
//!
//! What a recording can answer: the counters (recomputed from the events), allocation units
//! for any query (each new query replays the file once more with that unit configuration;
//! answers are kept per query), block ages against the recorded snapshot boundaries, and the
//! counter samples the agent recorded. What it cannot: anything about the heap graph (threads
//! ranking, groups, objects, leaks, which need reachability) — those are refused with one line
//! that says so. Growth follows each allocation stack across the recorded snapshot boundaries
//! (its live bytes at each, one pass over the live blocks per boundary). This module computes no figure itself: the tracker does; it only sorts, pages
//! and names.

use std::collections::{HashMap, HashSet};

use heaptui_analysis::labels::Wrappers;
use heaptui_analysis::recording::{Event, RecordingError, RecordingReader};
use heaptui_analysis::views::ages::Ages;
use heaptui_analysis::views::growth::{DEFAULT_GROWTH_RUN, Growth, SiteGrowth};
use heaptui_analysis::views::units::{UnitFigures, Unknown};
use heaptui_analysis::views::{StackId, Tracker, TrackerConfig};
use heaptui_protocol::answer::{clip, select_page, unit_config, unit_page};
use heaptui_protocol::message::{
    AgeHistogram, AgeRow, AgeScope, AgesAnswer, CounterHistory, ErrorKind, GrowthPage, GrowthRow,
    LiveCounters, MAX_COUNTER_SAMPLES, MAX_HISTORY, MAX_PAGE_ROWS, MAX_STACK_FRAMES, ObjectRow,
    Page, PageInfo, ProcessInfo, RequestBody, Response, SnapshotId, Sort, Survivor, UnitKey,
    UnitPage, UnitQuery,
};

/// The snapshot id a recording's answers carry: it has no snapshot of its own.
pub const RECORDING_SNAPSHOT: SnapshotId = SnapshotId(0);

/// The one line for what a recording cannot answer.
pub const NO_GRAPH: &str = "a recording has no heap graph (no reachability): threads, groups, \
                            objects and leaks need a snapshot (`heaptui snapshot` or \
                            HEAPTUI_DUMP)";

/// Whether `bytes` (the start of a file is enough) are a recording rather than a snapshot.
pub fn looks_like(bytes: &[u8]) -> bool {
    RecordingReader::looks_like(bytes)
}

/// Whether the file at `path` is a recording (by its first bytes); unreadable files are not.
pub fn is_recording(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| {
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..])? {
                    0 => break,
                    k => n += k,
                }
            }
            Ok(n)
        })
        .is_ok_and(|n| looks_like(&head[..n]))
}

/// Reads and replays the recording at `path`; errors name the file.
pub fn load(path: &std::path::Path) -> anyhow::Result<Recording> {
    let bytes =
        std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    Recording::replay(bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `rec.bin (recording: 26 records, 2 snapshot boundaries)`, and the cut tail when there is one.
pub fn describe(path: &std::path::Path, recording: &Recording) -> String {
    let mut text = format!(
        "{} (recording: {}, {}",
        path.display(),
        crate::figures::count(recording.events(), "record", "records"),
        crate::figures::count(
            recording.boundaries() as u64,
            "snapshot boundary",
            "snapshot boundaries"
        )
    );
    if let Some(at) = recording.truncated() {
        text.push_str(&format!("; a record cut at byte {at} ignored"));
    }
    text.push(')');
    text
}

/// The units of one query over the whole recording.
#[derive(Clone, Debug)]
pub struct UnitTable {
    pub figures: Vec<UnitFigures>,
    pub unknown: Unknown,
}

/// A replayed recording; see the module documentation.
pub struct Recording {
    bytes: Vec<u8>,
    /// The replay with the default unit query (and every other view's state).
    tracker: Tracker,
    /// Allocations, frees and reallocs replayed.
    heap_events: u64,
    /// Every record replayed.
    events: u64,
    /// Offset of a record cut short at the end of the file (the target crashed mid-write).
    truncated: Option<usize>,
    /// The counters the agent recorded, oldest first (the latest [`MAX_COUNTER_SAMPLES`]).
    history: Vec<LiveCounters>,
    threads: usize,
    units: HashMap<UnitQuery, UnitTable>,
    /// Live bytes per allocation stack at each recorded snapshot boundary.
    growth: Growth,
}

impl Recording {
    /// Replays `bytes` once; a damaged record or a foreign file is an error, a cut tail is not.
    pub fn replay(bytes: Vec<u8>) -> Result<Recording, RecordingError> {
        let query = UnitQuery::default();
        let mut reader = RecordingReader::new(&bytes)?;
        let mut tracker = Tracker::new(TrackerConfig {
            units: unit_config(query),
            ..TrackerConfig::default()
        });
        let mut history = Vec::new();
        let mut threads = HashSet::new();
        let mut growth = Growth::new(DEFAULT_GROWTH_RUN);
        let (mut events, mut heap_events) = (0u64, 0u64);
        for event in reader.by_ref() {
            let event = event?;
            match &event {
                Event::Counters(c) => history.push(LiveCounters {
                    live_bytes: c.live_bytes,
                    live_blocks: c.live_blocks,
                    allocated_bytes: c.allocated_bytes,
                    peak_live_bytes: c.peak_live_bytes,
                    unix_ms: c.unix_ms,
                }),
                Event::Thread { tid, .. } => {
                    threads.insert(*tid);
                }
                Event::Alloc { .. } | Event::Free { .. } | Event::Realloc { .. } => {
                    heap_events += 1;
                }
                _ => {}
            }
            tracker.apply(&event);
            if let Event::Snapshot(_) = event {
                growth.push(live_by_stack(&tracker));
            }
            events += 1;
        }
        let truncated = reader.truncated();
        if history.len() > MAX_COUNTER_SAMPLES {
            history.drain(..history.len() - MAX_COUNTER_SAMPLES);
        }
        let mut recording = Recording {
            tracker,
            heap_events,
            events,
            truncated,
            history,
            threads: threads.len(),
            units: HashMap::new(),
            bytes: Vec::new(),
            growth,
        };
        let table = UnitTable {
            figures: recording.tracker.units().figures().to_vec(),
            unknown: recording.tracker.units().unknown(),
        };
        recording.units.insert(query, table);
        recording.bytes = bytes;
        Ok(recording)
    }

    /// Records replayed (every kind).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Allocations, frees and reallocs replayed.
    pub fn heap_events(&self) -> u64 {
        self.heap_events
    }

    /// Where a cut tail starts, if the file ends mid-record.
    pub fn truncated(&self) -> Option<usize> {
        self.truncated
    }

    /// Snapshot boundaries recorded.
    pub fn boundaries(&self) -> usize {
        self.tracker.boundaries().len()
    }

    /// The counters recomputed from the events.
    pub fn counters(&self) -> heaptui_analysis::views::mark_and_count::Counters {
        self.tracker.counters().counters()
    }

    /// The counters the agent recorded, oldest first.
    pub fn history(&self) -> &[LiveCounters] {
        &self.history
    }

    /// The counters as a live agent reports them (stamped with the latest recorded time).
    pub fn live_counters(&self) -> LiveCounters {
        let c = self.counters();
        LiveCounters {
            live_bytes: c.live_bytes,
            live_blocks: c.live_blocks,
            allocated_bytes: c.allocated_bytes,
            peak_live_bytes: c.peak_live_bytes,
            unix_ms: self.history.last().map_or(0, |s| s.unix_ms),
        }
    }

    /// The units of `query`, replaying the file again the first time a query is asked.
    pub fn units(&mut self, query: UnitQuery) -> Result<&UnitTable, RecordingError> {
        if !self.units.contains_key(&query) {
            let mut tracker = Tracker::new(TrackerConfig {
                units: unit_config(query),
                ..TrackerConfig::default()
            });
            for event in RecordingReader::new(&self.bytes)? {
                tracker.apply(&event?);
            }
            let table = UnitTable {
                figures: tracker.units().figures().to_vec(),
                unknown: tracker.units().unknown(),
            };
            self.units.insert(query, table);
        }
        Ok(&self.units[&query])
    }

    /// A sorted page of the units of `query`.
    pub fn unit_page(
        &mut self,
        query: UnitQuery,
        sort: Sort<UnitKey>,
        page: Page,
    ) -> Result<UnitPage, RecordingError> {
        let events = self.heap_events;
        let table = self.units(query)?;
        Ok(unit_page(
            &table.figures,
            table.unknown,
            query,
            sort,
            page,
            events,
        ))
    }

    /// The age view of the live blocks at the end of the recording, against its boundaries.
    pub fn ages(&self, by: AgeScope, page: Page, oldest: u32) -> AgesAnswer {
        let oldest = (oldest as usize).min(MAX_PAGE_ROWS as usize);
        let ages: Ages = self.tracker.ages(oldest);
        let stacks = self.tracker.stacks();
        let groups = match by {
            AgeScope::Sites => &ages.by_site,
            AgeScope::Threads => &ages.by_thread,
        };
        let mut rows: Vec<(u32, AgeHistogram)> = groups
            .iter()
            .map(|(&k, h)| {
                (
                    k,
                    AgeHistogram {
                        blocks: h.blocks,
                        bytes: h.bytes,
                    },
                )
            })
            .collect();
        let total = rows.len();
        let bytes = |h: &AgeHistogram| h.bytes.iter().sum::<u64>();
        let window = select_page(&mut rows, page, |a, b| {
            bytes(&b.1).cmp(&bytes(&a.1)).then(a.0.cmp(&b.0))
        });
        let rows = window
            .iter()
            .map(|&(key, histogram)| AgeRow {
                key,
                label: match by {
                    AgeScope::Sites => stack_label(stacks, key),
                    AgeScope::Threads => self.thread_label(key),
                },
                histogram,
            })
            .collect();
        // The survivors come as sequence numbers: one pass over the live blocks finds their
        // addresses.
        let wanted: HashMap<u64, usize> = ages
            .oldest
            .iter()
            .enumerate()
            .map(|(i, s)| (s.seq, i))
            .collect();
        let mut addrs = vec![0u64; ages.oldest.len()];
        for (addr, block) in self.tracker.live_blocks() {
            if let Some(&i) = wanted.get(&block.seq) {
                addrs[i] = addr;
            }
        }
        let oldest = ages
            .oldest
            .iter()
            .zip(addrs)
            .map(|(s, addr)| Survivor {
                object: ObjectRow {
                    // No graph: the block has no object index to open.
                    index: u32::MAX,
                    id: s.seq,
                    addr,
                    size: s.size,
                    site: s.site,
                    site_label: stack_label(stacks, s.site),
                    thread: s.tid,
                    seq: s.seq,
                    age: Some(u32::try_from(s.age).unwrap_or(u32::MAX)),
                },
                age_ms: s.age_ms,
            })
            .collect();
        AgesAnswer {
            snapshot: RECORDING_SNAPSHOT,
            by,
            boundaries: u32::try_from(self.boundaries()).unwrap_or(u32::MAX),
            total: AgeHistogram {
                blocks: ages.total.blocks,
                bytes: ages.total.bytes,
            },
            page: page_info(page, total),
            rows,
            oldest,
        }
    }

    /// Per-stack live bytes across the recorded snapshot boundaries: flagged stacks first
    /// (growing over the run, or over 75% of the heap), then most live bytes at the latest.
    pub fn growth(&self, page: Page) -> GrowthPage {
        let mut rows: Vec<&SiteGrowth> = self.growth.sites().iter().collect();
        let total = rows.len();
        let latest = |s: &SiteGrowth| s.history.last().copied().unwrap_or(0);
        let flagged = |s: &SiteGrowth| s.growing || s.dominant;
        let window = select_page(&mut rows, page, |a, b| {
            flagged(b)
                .cmp(&flagged(a))
                .then(latest(b).cmp(&latest(a)))
                .then_with(|| a.frames.cmp(&b.frames))
        });
        let rows = window
            .iter()
            .map(|s| GrowthRow {
                label: label_of(&s.frames),
                frames: s
                    .frames
                    .iter()
                    .take(MAX_STACK_FRAMES)
                    .map(|f| clip(f))
                    .collect(),
                history: s.history[s.history.len().saturating_sub(MAX_HISTORY)..].to_vec(),
                growing: s.growing,
                dominant: s.dominant,
            })
            .collect();
        GrowthPage {
            snapshots: u32::try_from(self.growth.snapshots()).unwrap_or(u32::MAX),
            run: DEFAULT_GROWTH_RUN as u32,
            page: page_info(page, total),
            rows,
        }
    }

    fn thread_label(&self, tid: u32) -> String {
        match self.tracker.thread_name(tid) {
            Some(name) if !name.is_empty() => clip(name),
            _ => format!("thread {tid}"),
        }
    }

    /// What the TUI's `ProcessInfo` says of a recording: the recomputed counters; no snapshot.
    pub fn process_info(&self) -> ProcessInfo {
        ProcessInfo {
            pid: 0,
            command: String::new(),
            agent_version: String::new(),
            counters: self.live_counters(),
            threads: u32::try_from(self.threads).unwrap_or(u32::MAX),
            snapshot: None,
            policy_loaded: false,
            peak_snapshot: None,
            snapshot_rule: Default::default(),
        }
    }

    /// The answer to one request, as the offline sources answer: what a recording knows, and
    /// one clear line for the rest.
    pub fn answer(&mut self, body: &RequestBody) -> Response {
        match body {
            RequestBody::ProcessInfo => Response::ProcessInfo(self.process_info()),
            RequestBody::Units { query, sort, page } => {
                match self.unit_page(*query, *sort, *page) {
                    Ok(page) => Response::Units(page),
                    Err(e) => Response::error(ErrorKind::Internal, e.to_string()),
                }
            }
            RequestBody::Ages { by, page, oldest } => {
                Response::Ages(self.ages(*by, *page, *oldest))
            }
            RequestBody::CounterHistory => Response::CounterHistory(CounterHistory {
                interval_ms: 0,
                samples: self.history.clone(),
            }),
            // Everything about a snapshot's graph (leaks need reachability).
            other if other.needs_snapshot() => {
                Response::error(ErrorKind::Refused, format!("{}: {NO_GRAPH}", other.kind()))
            }
            RequestBody::Growth { page } => Response::Growth(self.growth(*page)),
            other => Response::error(
                ErrorKind::Refused,
                format!(
                    "{}: a recording is not a live agent (this needs `heaptui attach`)",
                    other.kind()
                ),
            ),
        }
    }
}

/// A stack's label as a site's: its first frame that is neither the agent nor the allocator
/// or a wrapper of it (docs/reference.md §3 "Labels"), `function (module)`; `?` without a
/// stack.
fn stack_label(stacks: &heaptui_analysis::views::StackTable, stack: StackId) -> String {
    label_of(&stacks.frame_names(stack))
}

/// The label of frames written `function (module)`, innermost first (see [`stack_label`]).
fn label_of(frames: &[String]) -> String {
    let own: Vec<&String> = frames
        .iter()
        .filter(|frame| !frame.contains("heaptui_agent"))
        .collect();
    match Wrappers::process().label_index(&own) {
        Some(i) => clip(own[i]),
        None => frames.first().map_or_else(|| "?".to_string(), |f| clip(f)),
    }
}

/// Live bytes per allocation stack now, keyed by the stack's frames (as growth matches
/// sites across snapshots).
fn live_by_stack(tracker: &Tracker) -> Vec<(Vec<String>, u64)> {
    let mut per_stack: HashMap<StackId, u64> = HashMap::new();
    for (_, block) in tracker.live_blocks() {
        *per_stack.entry(block.stack).or_default() += block.size;
    }
    per_stack
        .into_iter()
        .map(|(stack, bytes)| (tracker.stacks().frame_names(stack), bytes))
        .collect()
}

fn page_info(page: Page, total: usize) -> PageInfo {
    PageInfo {
        offset: page.offset,
        total: u32::try_from(total).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use heaptui_analysis::recording::{RecordedCounters, RecordingWriter};
    use heaptui_analysis::views::ages::Boundary;
    use heaptui_analysis::views::units::AllocKind;
    use heaptui_protocol::message::UnitGranularity;

    /// The issue's counter vector: alloc 100, alloc 200, free 100 → live 200, allocated 300.
    pub fn counters_vector() -> Vec<u8> {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        let main = w.stack([("work", "prog"), ("main", "prog")]).unwrap();
        let alloc = |w: &mut RecordingWriter<Vec<u8>>, seq: u64, addr: u64, size: u64| {
            w.write(&Event::Alloc {
                kind: AllocKind::Malloc,
                seq,
                addr,
                size,
                stack: main,
                tid: 7,
            })
            .unwrap();
        };
        alloc(&mut w, 1, 0x1000, 100);
        alloc(&mut w, 2, 0x2000, 200);
        w.write(&Event::Free {
            addr: 0x1000,
            stack: main,
            tid: 7,
        })
        .unwrap();
        w.write(&Event::Counters(RecordedCounters {
            live_bytes: 200,
            live_blocks: 1,
            allocated_bytes: 300,
            peak_live_bytes: 300,
            unix_ms: 1_700_000_000_000,
        }))
        .unwrap();
        w.into_inner()
    }

    /// The issue's ages vector: boundaries after allocations 5 and 8; blocks 1..=10 allocated,
    /// the even ones up to 8 freed, so 1, 3, 5, 7, 9, 10 live → histogram {0: 2, 1: 1, 2: 3}.
    /// Odd blocks come from `odd_site` on thread 1, even ones from `even_site` on thread 2.
    pub fn ages_vector() -> Vec<u8> {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        let name = w.string("worker").unwrap();
        w.write(&Event::Thread { tid: 2, name }).unwrap();
        let odd = w
            .stack([
                ("malloc", "libc.so.6"),
                ("odd_site", "prog"),
                ("main", "prog"),
            ])
            .unwrap();
        let even = w.stack([("even_site", "prog"), ("main", "prog")]).unwrap();
        for seq in 1..=10u64 {
            let (stack, tid) = if seq % 2 == 1 { (odd, 1) } else { (even, 2) };
            w.write(&Event::Alloc {
                kind: AllocKind::Malloc,
                seq,
                addr: 0x1000 * seq,
                size: 10 * seq,
                stack,
                tid,
            })
            .unwrap();
            if seq == 5 || seq == 8 {
                w.write(&Event::Snapshot(Boundary {
                    last_seq: seq,
                    unix_ms: 0,
                }))
                .unwrap();
            }
        }
        for seq in [2u64, 4, 6, 8] {
            w.write(&Event::Free {
                addr: 0x1000 * seq,
                stack: even,
                tid: 2,
            })
            .unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn the_counter_vector_replays_to_live_200_of_300() {
        let r = Recording::replay(counters_vector()).unwrap();
        let c = r.counters();
        assert_eq!(
            (c.live_bytes, c.allocated_bytes, c.live_blocks),
            (200, 300, 1)
        );
        assert_eq!(format!("{:.1}", c.utilization() * 100.0), "66.7");
        assert_eq!(r.history().len(), 1);
        assert_eq!(r.history()[0].allocated_bytes, 300);
        assert_eq!(r.truncated(), None);
    }

    #[test]
    fn a_recording_is_described_with_its_counts() {
        let path = std::path::Path::new("rec.bin");
        let text = describe(path, &Recording::replay(ages_vector()).unwrap());
        assert!(text.ends_with("records, 2 snapshot boundaries)"), "{text}");
        let text = describe(path, &Recording::replay(counters_vector()).unwrap());
        assert!(
            !text.contains("1 records") && !text.contains("1 snapshot boundaries"),
            "{text}"
        );
    }

    #[test]
    fn the_ages_vector_gives_the_issue_histogram_and_oldest_first() {
        let r = Recording::replay(ages_vector()).unwrap();
        let a = r.ages(AgeScope::Sites, Page::FIRST, 3);
        assert_eq!(a.boundaries, 2);
        assert_eq!(a.total.blocks, [2, 1, 3, 0, 0]);
        let seqs: Vec<u64> = a.oldest.iter().map(|s| s.object.seq).collect();
        assert_eq!(seqs, [1, 3, 5]);
        assert_eq!(a.oldest[0].object.addr, 0x1000);
        assert_eq!(a.oldest[0].object.age, Some(2));
        assert_eq!(a.oldest[0].object.site_label, "odd_site (prog)");
        // Only the odd site holds blocks: 1, 3, 5 (age 2), 7 (1), 9 (0); the even one 10 (0).
        let odd = a
            .rows
            .iter()
            .find(|r| r.label == "odd_site (prog)")
            .unwrap();
        assert_eq!(odd.histogram.blocks, [1, 1, 3, 0, 0]);
        let t = r.ages(AgeScope::Threads, Page::FIRST, 0);
        let worker = t.rows.iter().find(|r| r.key == 2).unwrap();
        assert_eq!(worker.label, "worker");
        assert_eq!(worker.histogram.blocks, [1, 0, 0, 0, 0]);
        assert_eq!(
            t.rows.iter().find(|r| r.key == 1).unwrap().label,
            "thread 1"
        );
    }

    #[test]
    fn units_are_recomputed_per_query_and_graph_requests_refused() {
        let mut r = Recording::replay(ages_vector()).unwrap();
        let by_function = UnitQuery {
            granularity: UnitGranularity::Function,
            ..UnitQuery::default()
        };
        let page = r
            .unit_page(by_function, Sort::desc(UnitKey::Live), Page::FIRST)
            .unwrap();
        let names: Vec<&str> = page.rows.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["odd_site (prog)", "even_site (prog)"]);
        assert_eq!(page.rows[0].live, 10 + 30 + 50 + 70 + 90);
        assert_eq!(page.rows[1].live, 100);
        assert_eq!(page.rows[1].free, 4);
        assert_eq!(page.events, 14);
        let by_thread = UnitQuery {
            granularity: UnitGranularity::Thread,
            ..UnitQuery::default()
        };
        let page = r
            .unit_page(by_thread, Sort::asc(UnitKey::Name), Page::FIRST)
            .unwrap();
        let names: Vec<&str> = page.rows.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["thread 1", "thread 2"]);
        match r.answer(&RequestBody::Leaks { page: Page::FIRST }) {
            Response::Error(e) => {
                assert_eq!(e.kind, ErrorKind::Refused);
                assert!(
                    e.message
                        .starts_with("leaks: a recording has no heap graph")
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn growth_follows_each_stack_across_the_recorded_boundaries() {
        let r = Recording::replay(ages_vector()).unwrap();
        let g = r.growth(Page::FIRST);
        assert_eq!((g.snapshots, g.page.total), (2, 2));
        // After allocation 5: odd 10+30+50, even 20+40; after 8: odd +70, even +60+80.
        assert_eq!(g.rows[0].label, "even_site (prog)");
        assert_eq!(g.rows[0].history, [60, 200]);
        assert_eq!(g.rows[1].label, "odd_site (prog)");
        assert_eq!(g.rows[1].history, [90, 160]);
        assert!(!g.rows.iter().any(|r| r.growing || r.dominant));

        // 100 → 200 → 300 at one stack: growing over the run of 3, and all of the heap.
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        let leak = w.stack([("leak", "prog"), ("main", "prog")]).unwrap();
        for seq in 1..=3u64 {
            w.write(&Event::Alloc {
                kind: AllocKind::Malloc,
                seq,
                addr: 0x1000 * seq,
                size: 100,
                stack: leak,
                tid: 1,
            })
            .unwrap();
            w.write(&Event::Snapshot(Boundary {
                last_seq: seq,
                unix_ms: 0,
            }))
            .unwrap();
        }
        let r = Recording::replay(w.into_inner()).unwrap();
        let g = r.growth(Page::FIRST);
        assert_eq!(g.rows[0].history, [100, 200, 300]);
        assert!(g.rows[0].growing && g.rows[0].dominant);
        assert!(matches!(
            Recording::replay(ages_vector())
                .unwrap()
                .answer(&RequestBody::Growth { page: Page::FIRST }),
            Response::Growth(_)
        ));
    }

    #[test]
    fn a_cut_tail_is_ignored_and_told() {
        let mut bytes = counters_vector();
        let whole = Recording::replay(bytes.clone()).unwrap();
        bytes.truncate(bytes.len() - 3);
        let cut = Recording::replay(bytes).unwrap();
        assert!(cut.truncated().is_some());
        assert_eq!(cut.events(), whole.events() - 1);
        assert!(cut.history().is_empty());
        assert_eq!(cut.counters().live_bytes, 200);
    }
}
