//! The TUI's data source: one request/answer channel that a live agent (`client::connect`) and
//! a snapshot file ([`offline`]) both speak with the protocol's own `Request`/`Response`
//! (docs/reference.md §6), so every screen works the same on both.
//!
//! This module owns the handle (queued requests with fresh ids), the event type coming back, and
//! the offline sources, which answer in-process on a thread of their own: a snapshot file with
//! `heaptui_protocol::answer::Answerer`, a recording with `offline::recording::Recording`. It
//! never blocks its caller, never draws, and computes no figure itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use heaptui_analysis::{Analysis, HeapGraph, Kept};
use heaptui_protocol::answer::Answerer;
use heaptui_protocol::message::{
    ErrorKind, ProcessInfo, Push, Request, RequestBody, RequestId, Response, SnapshotId,
};
use tokio::sync::mpsc;

use crate::offline::recording::Recording;

/// What a source sends back to its user.
// `body` stays unboxed: each event is moved once, from the source into the TUI's loop, so a
// box would cost an allocation per answer and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum SourceEvent {
    /// The answer to a request made through [`SourceHandle::request`].
    Answer { id: RequestId, body: Response },
    /// Unsolicited (live counters).
    #[allow(dead_code, reason = "sent by the live client only")]
    Push(Push),
    /// (Re)connected: the agent's/file's description, e.g. "pid 4242 ./server (agent 0.1.0)".
    Connected { description: String },
    /// Lost the agent; the source keeps trying to reconnect (live only). `reason` is one line.
    #[allow(dead_code, reason = "sent by the live client only")]
    Disconnected { reason: String },
}

/// Cheap to clone; requests are queued, never block.
#[derive(Clone, Debug)]
pub struct SourceHandle {
    requests: mpsc::UnboundedSender<Request>,
    next_id: Arc<AtomicU64>,
    live: bool,
    recording: bool,
    outside: bool,
}

pub type SourceEvents = mpsc::UnboundedReceiver<SourceEvent>;

impl SourceHandle {
    /// A handle whose requests go to `requests`, for the source that drains it (the live
    /// client's connection task, the offline thread, a test).
    pub fn new(requests: mpsc::UnboundedSender<Request>, live: bool) -> Self {
        SourceHandle {
            requests,
            next_id: Arc::new(AtomicU64::new(1)),
            live,
            recording: false,
            outside: false,
        }
    }

    /// The same handle, marked as a recording's (no heap graph: the TUI opens on its views).
    pub fn for_recording(mut self) -> Self {
        self.recording = true;
        self
    }

    /// The same handle, marked as an outside capture's (a process without an agent: snapshots
    /// can be taken again, nothing else that needs the agent can be asked).
    pub fn for_outside(mut self) -> Self {
        self.outside = true;
        self
    }

    /// Whether this source captures a process without an agent, from outside.
    pub fn is_outside(&self) -> bool {
        self.outside
    }

    /// Whether this source is a replayed recording.
    pub fn is_recording(&self) -> bool {
        self.recording
    }

    /// Queues a request and returns its id; the answer comes back as [`SourceEvent::Answer`].
    /// A source that has gone away drops the request: its events channel closing tells the
    /// user so, and a live source's reconnect makes the user ask again.
    pub fn request(&self, body: RequestBody) -> RequestId {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let _ = self.requests.send(Request { id, body });
        id
    }

    /// Whether this source is a live agent (TakeSnapshot, counters, cancel make sense).
    pub fn is_live(&self) -> bool {
        self.live
    }
}

/// The snapshot id an offline source gives its one snapshot.
pub const OFFLINE_SNAPSHOT: SnapshotId = SnapshotId(1);

/// Offline: answers from a snapshot file's graph + analysis, kept as a `Kept` (the graph and
/// the analysis are dropped once it is made), on a thread of its own, since the analysis of a
/// big graph takes a while and answers over millions of objects are not free. `Connected`
/// comes once the analysis is done; requests made before wait in the queue.
pub fn offline(graph: HeapGraph, description: String) -> (SourceHandle, SourceEvents) {
    let (request_tx, mut request_rx) = mpsc::unbounded_channel::<Request>();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("heaptui-offline".into())
        .spawn(move || {
            let kept = Kept::new(&graph, &Analysis::new(&graph));
            drop(graph);
            let answerer = Answerer::new(OFFLINE_SNAPSHOT, &kept);
            if event_tx
                .send(SourceEvent::Connected { description })
                .is_err()
            {
                return;
            }
            while let Some(request) = request_rx.blocking_recv() {
                let body = answer_offline(&answerer, &request.body);
                let answer = SourceEvent::Answer {
                    id: request.id,
                    body,
                };
                if event_tx.send(answer).is_err() {
                    return;
                }
            }
        })
        .expect("spawning the offline source thread");
    (SourceHandle::new(request_tx, false), event_rx)
}

/// Offline: answers from a replayed recording, on a thread of its own (a query of units not
/// asked before replays the file again).
pub fn recording(mut recording: Recording, description: String) -> (SourceHandle, SourceEvents) {
    let (request_tx, mut request_rx) = mpsc::unbounded_channel::<Request>();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("heaptui-recording".into())
        .spawn(move || {
            if event_tx
                .send(SourceEvent::Connected { description })
                .is_err()
            {
                return;
            }
            while let Some(request) = request_rx.blocking_recv() {
                let answer = SourceEvent::Answer {
                    id: request.id,
                    body: recording.answer(&request.body),
                };
                if event_tx.send(answer).is_err() {
                    return;
                }
            }
        })
        .expect("spawning the recording source thread");
    (
        SourceHandle::new(request_tx, false).for_recording(),
        event_rx,
    )
}

/// The offline answer to one request: snapshot requests from the answerer, the process from the
/// file, and an honest refusal for what only a live agent can do.
pub(crate) fn answer_offline(answerer: &Answerer<'_>, body: &RequestBody) -> Response {
    let kept = answerer.kept();
    // Ages count snapshot boundaries between allocations: a file without allocation order
    // (a JSON snapshot, an outside capture) would give an empty table with no word on why.
    if matches!(body, RequestBody::Ages { .. })
        && (0..kept.object_count() as u32).all(|o| kept.seq(o) == heaptui_analysis::NO_SEQ)
    {
        return Response::error(
            ErrorKind::Refused,
            "ages: this snapshot file has no allocation order; ages need a recording \
             (heaptui open FILE.rec) or a live agent",
        );
    }
    if let Some(answer) = answerer.answer(body) {
        return answer;
    }
    match body {
        RequestBody::ProcessInfo => Response::ProcessInfo(ProcessInfo {
            pid: kept.process().pid,
            command: kept.process().command.clone(),
            agent_version: String::new(),
            counters: Default::default(),
            threads: kept.threads().len() as u32,
            snapshot: Some(answerer.snapshot_info()),
            policy_loaded: false,
            peak_snapshot: None,
            snapshot_rule: Default::default(),
        }),
        // Units and growth count allocation events, which a recording has and a snapshot
        // file does not; the rest asks a running process.
        RequestBody::Units { .. } | RequestBody::Growth { .. } => Response::error(
            ErrorKind::Refused,
            format!(
                "{}: a snapshot file has no allocation events; open a recording (heaptui open \
                 FILE.rec, written under HEAPTUI_RECORD) or attach to a live agent",
                body.kind()
            ),
        ),
        other => Response::error(
            ErrorKind::Refused,
            format!(
                "{}: a snapshot file is not a live agent (this needs `heaptui attach`)",
                other.kind()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_protocol::message::{Page, Sort, ThreadKey};

    fn fixture() -> HeapGraph {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/patent-example.json"
        );
        heaptui_analysis::snapshot::read_file(std::path::Path::new(path)).expect("fixture")
    }

    #[test]
    fn the_offline_source_answers_in_order_with_the_ids_it_handed_out() {
        let (handle, mut events) = offline(fixture(), "fixture".into());
        assert!(!handle.is_live());
        let threads = handle.request(RequestBody::Threads {
            sort: Sort::desc(ThreadKey::Total),
            page: Page::FIRST,
        });
        let release = handle.request(RequestBody::Release { tids: vec![1, 2] });
        let snapshot = handle.request(RequestBody::TakeSnapshot);
        assert_ne!(threads, release);
        match events.blocking_recv() {
            Some(SourceEvent::Connected { description }) => assert_eq!(description, "fixture"),
            other => panic!("expected Connected first, got {other:?}"),
        }
        match events.blocking_recv() {
            Some(SourceEvent::Answer {
                id,
                body: Response::Threads(page),
            }) => {
                assert_eq!(id, threads);
                assert_eq!(page.rows[0].tid, 1);
                assert_eq!(page.rows[0].total, 264);
            }
            other => panic!("expected the threads, got {other:?}"),
        }
        match events.blocking_recv() {
            Some(SourceEvent::Answer {
                id,
                body: Response::Release(r),
            }) => {
                assert_eq!(id, release);
                assert_eq!(r.bytes, 300);
            }
            other => panic!("expected the release, got {other:?}"),
        }
        match events.blocking_recv() {
            Some(SourceEvent::Answer {
                id,
                body: Response::Error(e),
            }) => {
                assert_eq!(id, snapshot);
                assert_eq!(e.kind, ErrorKind::Refused);
                assert!(e.message.starts_with("take-snapshot: "), "{}", e.message);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
