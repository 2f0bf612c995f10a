//! What the server knows beyond one connection: the latest snapshot (its kept form and
//! figures) shared by every client, the peak snapshot kept by the automatic rule, the history every
//! snapshot leaves behind (age boundaries, per-site growth), taking a new snapshot, and the
//! process description.
//!
//! A snapshot is kept as [`heaptui_analysis::Kept`], made by the capture's scanning child (the
//! graph and its analysis never exist in the process itself, see `capture::build`), so what
//! stays in the target after a snapshot is a few bytes per object (docs/reference.md §9); the
//! boundary and the per-site growth are read from it too. Two snapshots are kept at most, each behind an `Arc`, so a client answering from one never
//! holds a lock while another takes the next: the latest (every drill-down request is answered
//! from it) and, when `HEAPTUI_AUTO_SNAPSHOT` is on, the one taken at the highest heap bytes so
//! far (replaced only by a higher one; often the same `Arc` as the latest). Captures are
//! serialized here (one at a time from the server and the automatic rule's thread); a `SIGUSR2`
//! dump on the dump thread is serialized with them by the capture itself, which holds the
//! frozen block table for its whole stop window.
//!
//! Every snapshot records a boundary (the highest allocation sequence number it holds and
//! when it was taken), so the next snapshot's object rows carry ages (snapshots survived), and
//! is added to the per-site growth ([`views::growth::Growth`]). The growth keeps at most
//! [`GROWTH_WINDOW`] snapshots of history per site, so a long run of automatic snapshots does
//! not grow the agent without bound.
//!
//! Never: capture or analyse while holding a kept-snapshot lock, or answer the process's own
//! questions (counters) from a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use heaptui_analysis::Kept as Columns;
use heaptui_analysis::kept::EncodedHead;
use heaptui_analysis::views;
use heaptui_analysis::views::ages::Boundary;
use heaptui_protocol::answer::{
    ANSWER_BUDGET, Answerer, check_chunk_offset, clip, select_page, snapshot_chunk_into,
};
use heaptui_protocol::codec::encoded_len;
use heaptui_protocol::{
    AgentInfo, ErrorAnswer, ErrorKind, GrowthPage, GrowthRow, LiveCounters, MAX_CHUNK_BYTES,
    MAX_HISTORY, MAX_STACK_FRAMES, Page, PageInfo, ProcessInfo, SnapshotChunk, SnapshotId,
    SnapshotInfo, SnapshotRule,
};

use super::auto;
use crate::alloc::AGENT_ALLOC;
use crate::config::config;
use crate::registry::{counters, threads};
use crate::sync::PerProcess;

/// Snapshots in a row over which a site must grow to be flagged.
pub const GROWTH_RUN: usize = views::growth::DEFAULT_GROWTH_RUN;

/// Per-site history kept by the growth view, in snapshots (what a row can show).
pub const GROWTH_WINDOW: usize = MAX_HISTORY;

/// A kept snapshot.
pub struct Kept {
    /// The graph and its analysis, in their kept form.
    pub columns: Columns,
    pub info: SnapshotInfo,
    /// `last_seq` of the snapshots taken before this one, ascending: the ages of its blocks.
    pub boundaries: Vec<u64>,
    /// The allocation clock when it was taken (`auto::allocation_clock`): the wall-clock
    /// ages of its blocks.
    pub clock: Vec<(u64, u64)>,
    /// The snapshot file's bytes while clients fetch them (`SnapshotData`).
    file: Held<Vec<u8>>,
    /// The head of the `Kept` codec's bytes and where their parts start while clients fetch
    /// them (`KeptData`). The rest of each chunk is copied from the columns when it is asked
    /// for (`Kept::encode_window`): those bytes never exist whole beside the columns they
    /// copy.
    analysed: Held<EncodedHead>,
}

/// The two forms a client can fetch a kept snapshot in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A binary snapshot file (docs/reference.md §4): `heaptui snapshot`, exports.
    File = 0,
    /// The `Kept` codec, the agent's analysis included: the live report.
    Analysed = 1,
}

/// What a snapshot's chunks are made from while clients fetch it in one form: made on the
/// first chunk asked for and shared by every connection fetching that form at the time, each
/// of which holds it ([`Fetch`]) until its last chunk is sent or its client stops asking
/// (`conn::FETCH_IDLE`); the snapshot itself holds it only weakly, so it is freed with the
/// last fetch and never stays in the target for the life of the snapshot, even when a fetch
/// is abandoned. A client that asks after that has it made again: encoding is deterministic,
/// so the bytes are the same.
struct Held<T>(Mutex<Weak<T>>);

impl<T> Held<T> {
    fn new() -> Held<T> {
        Held(Mutex::new(Weak::new()))
    }

    /// What a fetch holds now, made by `make` (outside the lock) when no fetch holds it.
    fn get_or_make(
        &self,
        make: impl FnOnce() -> Result<T, ErrorAnswer>,
    ) -> Result<Arc<T>, ErrorAnswer> {
        if let Some(held) = self.now() {
            return Ok(held);
        }
        let made = Arc::new(make()?);
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&made);
        Ok(made)
    }

    /// What a fetch holds now, if any.
    fn now(&self) -> Option<Arc<T>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).upgrade()
    }
}

/// What one connection holds while its client fetches a snapshot chunk by chunk: the
/// buffer the next chunk's bytes are copied into (the previous chunk's, handed back, so that
/// a fetch does not fault in fresh pages for every chunk) and what the chunks are made from
/// ([`Held`]). Dropped when the client stops asking (`conn::FETCH_IDLE`).
#[derive(Default)]
pub struct Fetch {
    pub spare: Vec<u8>,
    source: Option<Source>,
}

/// What a fetch's chunks are made from, in either form.
enum Source {
    File(Arc<Vec<u8>>),
    Analysed(Arc<EncodedHead>),
}

impl Fetch {
    /// The memory held for the next chunk: its buffer, and the snapshot file's bytes while
    /// no other fetch shares them.
    pub fn held_bytes(&self) -> usize {
        self.spare.capacity()
            + match &self.source {
                Some(Source::File(bytes)) if Arc::strong_count(bytes) == 1 => bytes.capacity(),
                Some(Source::Analysed(head)) if Arc::strong_count(head) == 1 => head.heap_bytes(),
                _ => 0,
            }
    }
}

impl Kept {
    pub fn answerer(&self) -> Answerer<'_> {
        Answerer::new(self.info.snapshot, &self.columns)
            .with_boundaries(&self.boundaries)
            .with_clock(&self.clock, self.info.taken_unix_ms)
    }

    /// The chunk at `offset` of the snapshot in `form`, its bytes in `fetch`'s spare buffer
    /// (emptied first). A snapshot file is encoded whole when no client is fetching it now;
    /// the `Kept` codec's chunks are copied from the columns one at a time. `fetch` holds
    /// what the chunks are made from until the last one ([`Held`]).
    pub fn chunk(
        &self,
        form: Form,
        offset: u64,
        fetch: &mut Fetch,
    ) -> Result<SnapshotChunk, ErrorAnswer> {
        let mut spare = std::mem::take(&mut fetch.spare);
        let (chunk, source) = match form {
            Form::File => {
                let bytes = self.file.get_or_make(|| self.file_bytes())?;
                let chunk = snapshot_chunk_into(self.info.snapshot, &bytes, offset, spare)?;
                (chunk, Source::File(bytes))
            }
            Form::Analysed => {
                let head = self
                    .analysed
                    .get_or_make(|| Ok(self.columns.encoded_head()))?;
                let total = head.encoded_len();
                check_chunk_offset(self.info.snapshot, offset, total)?;
                spare.clear();
                self.columns
                    .encode_window(&head, offset, MAX_CHUNK_BYTES as usize, &mut spare);
                let chunk = SnapshotChunk {
                    snapshot: self.info.snapshot,
                    offset,
                    total,
                    bytes: spare,
                };
                (chunk, Source::Analysed(head))
            }
        };
        let more = chunk.offset + (chunk.bytes.len() as u64) < chunk.total;
        fetch.source = more.then_some(source);
        Ok(chunk)
    }

    /// The snapshot file's bytes.
    fn file_bytes(&self) -> Result<Vec<u8>, ErrorAnswer> {
        let mut out = Vec::new();
        heaptui_analysis::snapshot::write_binary_kept(&self.columns, &mut out).map_err(|e| {
            ErrorAnswer {
                kind: ErrorKind::Internal,
                message: format!("cannot encode snapshot {}: {e}", self.info.snapshot.0),
            }
        })?;
        Ok(out)
    }

    /// What keeping this snapshot costs, with the bytes being fetched now.
    pub fn held_bytes(&self) -> u64 {
        let file = self.file.now().map_or(0, |b| b.capacity());
        let analysed = self.analysed.now().map_or(0, |h| h.heap_bytes());
        self.info.held_bytes + (file + analysed) as u64
    }

    /// The figures with the memory held now.
    pub fn info_now(&self) -> SnapshotInfo {
        SnapshotInfo {
            held_bytes: self.held_bytes(),
            ..self.info.clone()
        }
    }

    /// Live heap bytes the snapshot holds.
    pub fn heap_bytes(&self) -> u64 {
        self.info.totals.bytes
    }
}

/// Who asked for a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A client's `TakeSnapshot`.
    Request,
    /// The automatic rule (`HEAPTUI_AUTO_SNAPSHOT`).
    Rule,
}

/// What every snapshot leaves behind.
struct History {
    /// Every boundary so far, ascending by `last_seq`.
    boundaries: Vec<Boundary>,
    growth: views::growth::Growth,
}

static KEPT: PerProcess<Mutex<Option<Arc<Kept>>>> = PerProcess::new(Mutex::new(None));
static PEAK: PerProcess<Mutex<Option<Arc<Kept>>>> = PerProcess::new(Mutex::new(None));
static HISTORY: PerProcess<Mutex<Option<History>>> = PerProcess::new(Mutex::new(None));
static CAPTURING: PerProcess<Mutex<()>> = PerProcess::new(Mutex::new(()));
static NEXT_SNAPSHOT: AtomicU64 = AtomicU64::new(1);
static TAKEN: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// In a fork child that serves (`HEAPTUI_FOLLOW_FORK`): no snapshot yet, no history, and no
/// capture under way (the parent's may have been, on a thread the child does not have).
pub fn renew_in_child() {
    KEPT.renew(Mutex::new(None));
    PEAK.renew(Mutex::new(None));
    HISTORY.renew(Mutex::new(None));
    CAPTURING.renew(Mutex::new(()));
    for taken in &TAKEN {
        taken.store(0, Ordering::Relaxed);
    }
}

/// The latest snapshot, if any.
pub fn kept() -> Option<Arc<Kept>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The snapshot taken at the highest heap bytes while the automatic rule is on, if any.
pub fn peak() -> Option<Arc<Kept>> {
    PEAK.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The kept snapshot (latest or peak) with this id.
pub fn kept_by_id(id: SnapshotId) -> Option<Arc<Kept>> {
    [kept(), peak()]
        .into_iter()
        .flatten()
        .find(|k| k.info.snapshot == id)
}

/// Snapshots taken so far for `cause`.
pub fn snapshots_taken(cause: Cause) -> u64 {
    TAKEN[cause as usize].load(Ordering::Relaxed)
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Stops the world, captures, analyses and keeps the result; returns its figures.
pub fn take_snapshot() -> Result<SnapshotInfo, String> {
    take(Cause::Request)
}

/// [`take_snapshot`] for `cause`: the snapshot also restarts the automatic rule, and becomes
/// the peak snapshot when the rule is on and it holds more heap bytes than the peak.
pub fn take(cause: Cause) -> Result<SnapshotInfo, String> {
    let _one_at_a_time = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    take_locked(cause)
}

/// The automatic rule's snapshot: `None` when a snapshot taken meanwhile (a client's, waited
/// for here) has made it no longer due.
pub fn take_automatic() -> Result<Option<SnapshotInfo>, String> {
    let _one_at_a_time = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    if !auto::due_now() {
        return Ok(None);
    }
    take_locked(Cause::Rule).map(Some)
}

fn take_locked(cause: Cause) -> Result<SnapshotInfo, String> {
    // Read before the freeze: what is allocated between this read and the freeze counts
    // towards the next automatic snapshot as well, which only makes the rule fire earlier.
    let allocated_before = counters::counters().allocated_bytes;
    let seq_before = crate::registry::blocks::current_seq();
    // Large arrays come straight from mmap and go back on free, so the growth of the agent's
    // mapped memory across capture and analysis is what the new snapshot holds.
    let mapped_before = AGENT_ALLOC.mapped_bytes() as u64;
    let taken_unix_ms = unix_ms();
    let capture = std::panic::catch_unwind(crate::capture::take)
        .map_err(|_| "the capture panicked".to_string())?
        .map_err(|e| e.to_string())?;
    let columns = capture.kept;
    let phases = capture.phases;
    let snapshot = SnapshotId(NEXT_SNAPSHOT.fetch_add(1, Ordering::Relaxed));
    let mut info = Answerer::new(snapshot, &columns).snapshot_info();
    info.taken_unix_ms = taken_unix_ms;
    info.pause_us = capture.pause.as_micros() as u64;
    info.capture_us = capture.total.saturating_sub(capture.analysis).as_micros() as u64;
    info.analysis_us = capture.analysis.as_micros() as u64;
    crate::policy::note_snapshot(&columns);
    let boundary = Boundary {
        last_seq: columns.last_seq().unwrap_or(seq_before),
        unix_ms: taken_unix_ms,
    };
    let boundaries = record(&columns, boundary);
    crate::record::snapshot_boundary(boundary.last_seq, boundary.unix_ms);
    info.held_bytes = (AGENT_ALLOC.mapped_bytes() as u64).saturating_sub(mapped_before);
    let kept = Arc::new(Kept {
        columns,
        info: info.clone(),
        boundaries,
        clock: super::auto::allocation_clock(),
        file: Held::new(),
        analysed: Held::new(),
    });
    // Where the kept snapshot's bytes go, per object (BENCHMARKS.md "What a kept snapshot
    // holds", from bench/snapshot_cost.sh).
    let per_object = info.totals.objects.max(1) as f64;
    let parts: Vec<String> = kept
        .columns
        .heap_bytes_by_part()
        .iter()
        .map(|(name, bytes)| {
            format!(
                "{}={:.1}",
                name.replace(' ', "_"),
                *bytes as f64 / per_object
            )
        })
        .collect();
    let sites = kept.columns.sites().len();
    TAKEN[cause as usize].fetch_add(1, Ordering::Relaxed);
    // Every snapshot restarts the rule; only with a rule on is a peak snapshot kept.
    let higher = auto::snapshot_taken(allocated_before, kept.heap_bytes())
        && config().auto_snapshot != SnapshotRule::Off;
    let old_peak = if higher {
        PEAK.lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(kept.clone())
    } else {
        None
    };
    let old = KEPT.lock().unwrap_or_else(|e| e.into_inner()).replace(kept);
    // Freed outside the locks (a big graph takes a while to drop).
    drop((old, old_peak));
    crate::agent_info!(
        "snapshot {}{}: {} objects, {} bytes, {} threads; pause_ms={:.3} capture_ms={:.3} analysis_ms={:.3} held_bytes={} ({}: index_ms={:.3} roots_ms={:.3} blocks_ms={:.3} scan_cpu_ms={:.3} child_cpu_ms={:.3}; naming its {} sites in the agent: name_ms={:.3}){}",
        snapshot.0,
        match cause {
            Cause::Request => "",
            Cause::Rule => " (automatic)",
        },
        info.totals.objects,
        info.totals.bytes,
        info.threads,
        info.pause_us as f64 / 1e3,
        info.capture_us as f64 / 1e3,
        info.analysis_us as f64 / 1e3,
        info.held_bytes,
        phases.scanned_in(),
        phases.index.as_secs_f64() * 1e3,
        phases.roots.as_secs_f64() * 1e3,
        phases.blocks.as_secs_f64() * 1e3,
        phases.scan_cpu.as_secs_f64() * 1e3,
        phases.child_cpu.as_secs_f64() * 1e3,
        sites,
        phases.naming.as_secs_f64() * 1e3,
        if higher { "; kept as the peak" } else { "" }
    );
    crate::agent_info!(
        "kept bytes per object (snapshot #{}): {}",
        snapshot.0,
        parts.join(" ")
    );
    Ok(info)
}

/// Records a snapshot's boundary and growth; returns the boundaries before it, ascending.
fn record(kept: &Columns, boundary: Boundary) -> Vec<u64> {
    let mut guard = HISTORY.lock().unwrap_or_else(|e| e.into_inner());
    let h = guard.get_or_insert_with(|| History {
        boundaries: Vec::new(),
        growth: views::growth::Growth::new(GROWTH_RUN),
    });
    let before = h.boundaries.iter().map(|b| b.last_seq).collect();
    let at = h
        .boundaries
        .partition_point(|b| b.last_seq <= boundary.last_seq);
    h.boundaries.insert(at, boundary);
    h.growth.push_kept(kept);
    if h.growth.snapshots() >= 2 * GROWTH_WINDOW {
        h.growth = trimmed(&h.growth, GROWTH_WINDOW);
    }
    before
}

/// `growth` with only its last `window` snapshots (sites without live bytes in them dropped).
/// The flags look at the last `GROWTH_RUN ≤ window` snapshots, so they are unchanged.
fn trimmed(growth: &views::growth::Growth, window: usize) -> views::growth::Growth {
    let n = growth.snapshots();
    let window = window.min(n);
    let kept: Vec<_> = growth
        .sites()
        .iter()
        .filter(|s| s.history[n - window..].iter().any(|&b| b > 0))
        .collect();
    let mut out = views::growth::Growth::new(GROWTH_RUN);
    for k in n - window..n {
        out.push(kept.iter().map(|s| (s.frames.clone(), s.history[k])));
    }
    out
}

/// A page of per-site growth: flagged sites (growing or dominant) first, then by live bytes at
/// the latest snapshot, then by frames.
pub fn growth_page(page: Page) -> GrowthPage {
    // The growth view's own count restarts when trimmed: the page counts every snapshot.
    let guard = HISTORY.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = guard.as_ref() else {
        return GrowthPage {
            snapshots: 0,
            run: GROWTH_RUN as u32,
            page: PageInfo {
                offset: page.offset,
                total: 0,
            },
            rows: Vec::new(),
        };
    };
    let sites = h.growth.sites();
    let latest = |i: usize| sites[i].history.last().copied().unwrap_or(0);
    let flagged = |i: usize| sites[i].growing || sites[i].dominant;
    let mut order: Vec<usize> = (0..sites.len()).collect();
    let total = order.len();
    let window = select_page(&mut order, page, |&a, &b| {
        flagged(b)
            .cmp(&flagged(a))
            .then(latest(b).cmp(&latest(a)))
            .then_with(|| sites[a].frames.cmp(&sites[b].frames))
    });
    let mut left = ANSWER_BUDGET;
    let mut rows = Vec::with_capacity(window.len());
    for &i in window {
        let s = &sites[i];
        let row = GrowthRow {
            // Named as every site is (docs/reference.md §3 "Labels"): not `xmalloc`.
            label: clip(heaptui_analysis::labels::Wrappers::process().label(&s.frames)),
            frames: s
                .frames
                .iter()
                .take(MAX_STACK_FRAMES)
                .map(|f| clip(f))
                .collect(),
            history: s.history[s.history.len().saturating_sub(MAX_HISTORY)..].to_vec(),
            growing: s.growing,
            dominant: s.dominant,
        };
        let len = encoded_len(&row);
        if len > left {
            break;
        }
        left -= len;
        rows.push(row);
    }
    GrowthPage {
        snapshots: snapshots_total(),
        run: GROWTH_RUN as u32,
        page: PageInfo {
            offset: page.offset,
            total: u32::try_from(total).unwrap_or(u32::MAX),
        },
        rows,
    }
}

fn snapshots_total() -> u32 {
    u32::try_from(snapshots_taken(Cause::Request) + snapshots_taken(Cause::Rule))
        .unwrap_or(u32::MAX)
}

/// The live counters now.
pub fn live_counters() -> LiveCounters {
    let c = counters::counters();
    LiveCounters {
        live_bytes: c.live_bytes,
        live_blocks: c.live_blocks,
        allocated_bytes: c.allocated_bytes,
        peak_live_bytes: c.peak_live_bytes,
        unix_ms: unix_ms(),
    }
}

/// The agent's description, for the welcome.
pub fn agent_info() -> AgentInfo {
    static STARTED: OnceLock<u64> = OnceLock::new();
    AgentInfo {
        pid: std::process::id(),
        command: command().to_string(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix_ms: *STARTED.get_or_init(unix_ms),
    }
}

/// Marks the agent's start time (called when the server starts).
pub fn mark_started() {
    let _ = agent_info();
}

/// The process, its counters and the kept snapshots.
pub fn process_info() -> ProcessInfo {
    ProcessInfo {
        pid: std::process::id(),
        command: command().to_string(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        counters: live_counters(),
        threads: threads::list().len() as u32,
        snapshot: kept().map(|k| k.info_now()),
        policy_loaded: crate::policy::is_loaded(),
        peak_snapshot: peak().map(|k| k.info_now()),
        snapshot_rule: config().auto_snapshot,
    }
}

/// The command line, arguments joined by spaces, read once.
fn command() -> &'static str {
    static COMMAND: OnceLock<String> = OnceLock::new();
    COMMAND.get_or_init(|| {
        std::fs::read("/proc/self/cmdline")
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn trimming_keeps_the_window_and_the_flags() {
        let mut g = views::growth::Growth::new(GROWTH_RUN);
        for k in 0..10u64 {
            g.push([
                (site(&["grow"]), 100 * (k + 1)),
                (site(&["gone"]), if k < 3 { 50 } else { 0 }),
                (site(&["flat"]), 10),
            ]);
        }
        let t = trimmed(&g, 4);
        assert_eq!(t.snapshots(), 4);
        let by: std::collections::HashMap<_, _> = t
            .sites()
            .iter()
            .map(|s| (s.frames[0].as_str(), s))
            .collect();
        assert_eq!(by["grow"].history, [700, 800, 900, 1000]);
        assert!(by["grow"].growing && by["grow"].dominant);
        assert_eq!(by["flat"].history, [10; 4]);
        assert!(!by["flat"].growing);
        assert!(!by.contains_key("gone"));
    }
}
