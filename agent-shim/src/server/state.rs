//! What the server knows beyond one connection: the kept snapshot (graph, analysis, figures)
//! shared by every client, taking a new one, and the process description.
//!
//! One snapshot is kept at a time, behind an `Arc`, so a client answering from it never holds
//! a lock while another takes the next one. Captures are serialized here (one at a time from
//! the server); a `SIGUSR2` dump on the dump thread is serialized with them by the capture
//! itself, which holds the frozen block table for its whole stop window.
//!
//! Never: capture or analyse while holding the kept-snapshot lock, or answer the process's
//! own questions (counters) from a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use heaptui_analysis::{Analysis, HeapGraph};
use heaptui_protocol::answer::Answerer;
use heaptui_protocol::{
    AgentInfo, LiveCounters, ProcessInfo, SnapshotId, SnapshotInfo, SnapshotRule,
};

use crate::alloc::AGENT_ALLOC;
use crate::registry::{counters, threads};

/// The snapshot kept for drill-down.
pub struct Kept {
    pub graph: HeapGraph,
    pub analysis: Analysis,
    pub info: SnapshotInfo,
    /// The binary snapshot file of `graph`, made on the first `SnapshotData` request.
    encoded: OnceLock<Result<Vec<u8>, String>>,
}

impl Kept {
    pub fn answerer(&self) -> Answerer<'_> {
        Answerer::new(self.info.snapshot, &self.graph, &self.analysis)
    }

    /// The graph as a binary snapshot file, encoded once.
    pub fn encoded(&self) -> Result<&[u8], &str> {
        self.encoded
            .get_or_init(|| {
                let mut out = Vec::new();
                heaptui_analysis::snapshot::write_binary(&self.graph, &mut out)
                    .map_err(|e| format!("cannot encode snapshot {}: {e}", self.info.snapshot.0))?;
                Ok(out)
            })
            .as_deref()
            .map_err(String::as_str)
    }

    /// What keeping this snapshot costs, the encoded file included once made.
    pub fn held_bytes(&self) -> u64 {
        let encoded = match self.encoded.get() {
            Some(Ok(bytes)) => bytes.capacity() as u64,
            _ => 0,
        };
        self.info.held_bytes + encoded
    }
}

static KEPT: Mutex<Option<Arc<Kept>>> = Mutex::new(None);
static CAPTURING: Mutex<()> = Mutex::new(());
static NEXT_SNAPSHOT: AtomicU64 = AtomicU64::new(1);

/// The snapshot kept now, if any.
pub fn kept() -> Option<Arc<Kept>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Stops the world, captures, analyses and keeps the result; returns its figures.
pub fn take_snapshot() -> Result<SnapshotInfo, String> {
    let _one_at_a_time = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    // Large arrays come straight from mmap and go back on free, so the growth of the agent's
    // mapped memory across capture and analysis is what the new snapshot holds.
    let mapped_before = AGENT_ALLOC.mapped_bytes() as u64;
    let taken_unix_ms = unix_ms();
    let capture = std::panic::catch_unwind(crate::capture::take)
        .map_err(|_| "the capture panicked".to_string())?
        .map_err(|e| format!("the captured graph is invalid: {e}"))?;
    let started = Instant::now();
    let graph = capture.graph;
    let analysis = std::panic::catch_unwind(|| Analysis::new(&graph))
        .map_err(|_| "the analysis panicked".to_string())?;
    let analysis_us = started.elapsed().as_micros() as u64;
    let snapshot = SnapshotId(NEXT_SNAPSHOT.fetch_add(1, Ordering::Relaxed));
    let mut info = Answerer::new(snapshot, &graph, &analysis).snapshot_info();
    info.taken_unix_ms = taken_unix_ms;
    info.pause_us = capture.pause.as_micros() as u64;
    info.capture_us = capture.total.as_micros() as u64;
    info.analysis_us = analysis_us;
    info.held_bytes = (AGENT_ALLOC.mapped_bytes() as u64).saturating_sub(mapped_before);
    crate::policy::note_snapshot(&graph);
    let kept = Arc::new(Kept {
        graph,
        analysis,
        info: info.clone(),
        encoded: OnceLock::new(),
    });
    let old = KEPT.lock().unwrap_or_else(|e| e.into_inner()).replace(kept);
    // Freed outside the lock (a big graph takes a while to drop).
    drop(old);
    crate::agent_log!(
        "snapshot {}: {} objects, {} bytes, {} threads; pause_ms={:.3} capture_ms={:.3} analysis_ms={:.3} held_bytes={}",
        snapshot.0,
        info.totals.objects,
        info.totals.bytes,
        info.threads,
        info.pause_us as f64 / 1e3,
        info.capture_us as f64 / 1e3,
        info.analysis_us as f64 / 1e3,
        info.held_bytes
    );
    Ok(info)
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

/// The process, its counters and the kept snapshot.
pub fn process_info() -> ProcessInfo {
    let kept = kept();
    ProcessInfo {
        pid: std::process::id(),
        command: command().to_string(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        counters: live_counters(),
        threads: threads::list().len() as u32,
        snapshot: kept.map(|k| SnapshotInfo {
            held_bytes: k.held_bytes(),
            ..k.info.clone()
        }),
        policy_loaded: crate::policy::is_loaded(),
        peak_snapshot: None,
        snapshot_rule: SnapshotRule::Off,
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
