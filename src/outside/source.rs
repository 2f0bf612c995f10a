//! The outside capture as a source of answers: for the TUI (`attach pid:PID` of a process
//! without an agent) and for `report pid:PID`.
//!
//! Owns [`Kept`] — a capture's analysis in kept form and its snapshot info — and the answer to
//! every request over it: the graph questions from the protocol's `Answerer`, as for a snapshot file;
//! a new outside capture for `TakeSnapshot` (the TUI's `r` and `a`); and, for what only the
//! agent knows or does (allocation stacks, ages, units, growth per site, counters, policy,
//! cancel), a refusal that says why and what to do.
//!
//! Like the agent's kept snapshot and a file's, everything the TUI and the report read comes
//! from the kept form: the captured graph and its analysis are dropped once it is made, so a
//! capture of millions of blocks does not stay in memory three times.
//!
//! The source answers on a thread of its own, like the offline ones (`crate::source`); a new
//! capture stops the target for its pause only, never while the TUI waits.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use heaptui_analysis::{Analysis, HeapGraph, Process};
use heaptui_protocol::answer::Answerer;
use heaptui_protocol::message::{
    ErrorKind, ProcessInfo, Request, RequestBody, Response, SnapshotId, SnapshotInfo,
};
use tokio::sync::mpsc;

use super::Capture;
use crate::source::{SourceEvent, SourceEvents, SourceHandle};

/// A capture kept for answering.
pub struct Kept {
    /// The capture and its analysis as the `Answerer` reads them.
    pub columns: heaptui_analysis::Kept,
    pub info: SnapshotInfo,
    /// What the capture found partial, one line each.
    pub warnings: Vec<String>,
}

impl Kept {
    /// Analyses a capture and keeps it as snapshot `id`; the graph and its analysis are
    /// dropped.
    pub fn new(id: SnapshotId, capture: Capture) -> Kept {
        Kept::with_graph(id, capture).0
    }

    /// [`Kept::new`], giving the captured graph back for the one use that reads it (the exports
    /// by allocation stack); the analysis is dropped.
    pub fn with_graph(id: SnapshotId, capture: Capture) -> (Kept, HeapGraph) {
        let began = Instant::now();
        let columns = heaptui_analysis::Kept::new(&capture.graph, &Analysis::new(&capture.graph));
        let analysis_us = began.elapsed().as_micros() as u64;
        let mut info = Answerer::new(id, &columns).snapshot_info();
        info.taken_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        info.pause_us = capture.pause.as_micros() as u64;
        info.capture_us = capture.total.as_micros() as u64;
        info.analysis_us = analysis_us;
        let kept = Kept {
            columns,
            info,
            warnings: capture.warnings,
        };
        (kept, capture.graph)
    }

    pub fn process(&self) -> &Process {
        self.columns.process()
    }

    /// The answer to `body` (a `TakeSnapshot` is the caller's: it needs a new capture).
    pub fn answer(&self, body: &RequestBody) -> Response {
        let pid = self.process().pid;
        let refuse = |why: &str| -> Response {
            Response::error(
                ErrorKind::Refused,
                format!(
                    "{why} — process {pid} was started without it (restart it with \
                     LD_PRELOAD=$(heaptui agent-path))"
                ),
            )
        };
        if let Some(why) = agent_only(body) {
            return refuse(why);
        }
        let answerer = Answerer::new(self.info.snapshot, &self.columns);
        if let Some(answer) = answerer.answer(body) {
            return answer;
        }
        match body {
            RequestBody::ProcessInfo => Response::ProcessInfo(ProcessInfo {
                pid,
                command: self.process().command.clone(),
                agent_version: String::new(),
                counters: Default::default(),
                threads: self.columns.threads().len() as u32,
                snapshot: Some(self.info.clone()),
                policy_loaded: false,
                peak_snapshot: None,
                snapshot_rule: Default::default(),
            }),
            other => refuse(&format!("{} needs the agent", other.kind())),
        }
    }
}

/// Why a request needs the agent, when it does.
fn agent_only(body: &RequestBody) -> Option<&'static str> {
    Some(match body {
        RequestBody::Units { .. } => "units sum allocation events, which only the agent sees",
        RequestBody::Ages { .. } => {
            "ages count the snapshots a block survived since its allocation, which only the \
             agent sees"
        }
        RequestBody::Growth { .. } => {
            "growth compares allocation sites, which only the agent records"
        }
        RequestBody::Cancel { .. } | RequestBody::Policy => {
            "cancelling a thread needs the agent, which applies the policy inside the process"
        }
        RequestBody::Subscribe | RequestBody::CounterHistory => {
            "live counters count allocations as they happen, which only the agent sees"
        }
        _ => return None,
    })
}

/// The TUI's source on a process without an agent, starting from its first capture (taken
/// before the screen opens, so a refusal is one line on the terminal).
pub fn source(pid: u32, first: Capture) -> (SourceHandle, SourceEvents) {
    let (request_tx, mut request_rx) = mpsc::unbounded_channel::<Request>();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("heaptui-outside".into())
        .spawn(move || {
            let mut id = SnapshotId(1);
            let mut kept = Kept::new(id, first);
            let description = format!(
                "pid {pid} {} (no agent: captured from outside)",
                kept.process().command
            );
            if event_tx
                .send(SourceEvent::Connected { description })
                .is_err()
            {
                return;
            }
            while let Some(request) = request_rx.blocking_recv() {
                let body = match request.body {
                    RequestBody::TakeSnapshot => match super::capture(pid) {
                        Ok(capture) => {
                            id = SnapshotId(id.0 + 1);
                            kept = Kept::new(id, capture);
                            Response::Snapshot(kept.info.clone())
                        }
                        Err(e) => Response::error(ErrorKind::Internal, e.to_string()),
                    },
                    ref other => kept.answer(other),
                };
                let answer = SourceEvent::Answer {
                    id: request.id,
                    body,
                };
                if event_tx.send(answer).is_err() {
                    return;
                }
            }
        })
        .expect("spawning the outside source thread");
    (SourceHandle::new(request_tx, true).for_outside(), event_rx)
}
