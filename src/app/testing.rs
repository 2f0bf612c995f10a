//! A test harness: an [`App`] over a fixture or a synthetic graph, its requests answered in
//! the test's own thread by the same code the offline source runs, and every request logged,
//! so tests can say what was asked as well as what is shown.

use heaptui_analysis::{
    Analysis, Edges, Frame, FrameKind, HeapGraph, Kept, ObjectRecord, Objects, Process, Site,
    Thread, ThreadState,
};
use heaptui_protocol::answer::Answerer;
use std::collections::VecDeque;

use heaptui_protocol::message::{Request, RequestBody, Response, SnapshotId};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use tokio::sync::mpsc;

use crate::app::App;
use crate::source::{OFFLINE_SNAPSHOT, SourceEvent, SourceHandle, answer_offline};

pub const WIDTH: u16 = 120;
pub const HEIGHT: u16 = 36;

pub fn fixture() -> HeapGraph {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/patent-example.json"
    );
    heaptui_analysis::snapshot::read_file(std::path::Path::new(path)).expect("the fixture")
}

/// `threads` workers that each hold a private buffer and all share one cache of `members`
/// entries: one thread-shared group with `members + 1` objects (the big-group case).
pub fn big_group_graph(threads: usize, members: usize) -> HeapGraph {
    let n = members + 1 + threads;
    let mut objects = Objects::with_capacity(n);
    let mut edges = Edges::with_capacity(n, members);
    let sites = vec![
        Site {
            id: 1,
            frames: vec!["Cache::new (cache.rs:10)".into(), "main".into()],
        },
        Site {
            id: 2,
            frames: vec![
                "Cache::insert (cache.rs:42)".into(),
                "handle_request".into(),
            ],
        },
        Site {
            id: 3,
            frames: vec!["alloc_buf (server.c:7)".into(), "handle_request".into()],
        },
    ];
    let tid = |i: usize| 1000 + i as u32;
    for o in 0..n {
        let (site, size) = match o {
            0 => (0, 4096),
            o if o <= members => (1, 32 + (o as u64 * 7919) % 480),
            _ => (2, 1 << 16),
        };
        objects.push(ObjectRecord {
            id: o as u64 + 1,
            addr: 0x7f00_0000_0000 + o as u64 * 512,
            size,
            site,
            thread: tid(o % threads),
            seq: o as u64 + 1,
        });
        if o == 0 {
            edges.push(1..=members as u32);
        } else {
            edges.push([]);
        }
    }
    let threads = (0..threads)
        .map(|i| Thread {
            tid: tid(i),
            name: format!("worker-{i}"),
            state: ThreadState::Stopped,
            frames: vec![
                Frame {
                    function: "handle_request".into(),
                    module: "server".into(),
                    kind: FrameKind::User,
                    refs: vec![(members + 1 + i) as u32, 0],
                    interior: Vec::new(),
                },
                Frame {
                    function: "worker_main".into(),
                    module: "server".into(),
                    kind: FrameKind::User,
                    refs: Vec::new(),
                    interior: Vec::new(),
                },
            ],
        })
        .collect();
    let process = Process {
        pid: 4242,
        command: "./server".into(),
    };
    HeapGraph::new(process, sites, objects, edges, threads, Vec::new()).expect("a valid graph")
}

/// A test's own answers: `None` leaves a request to the harness.
pub type Answers = dyn FnMut(&RequestBody) -> Option<Response>;

pub struct Harness {
    pub app: App,
    requests: mpsc::UnboundedReceiver<Request>,
    kept: Kept,
    /// Every request the app made, in order.
    pub log: Vec<RequestBody>,
    /// Requests are held (not answered) while false.
    pub answering: bool,
    /// Live harness: the snapshot id the answers speak for.
    snapshot: SnapshotId,
    /// Live harness: the hand-made answers to `Cancel` requests, in order.
    pub cancel_answers: VecDeque<Response>,
    /// Live harness: the graph the next `TakeSnapshot` sees (else the same one again).
    pub next_graph: Option<HeapGraph>,
    /// Answers the test gives before anyone else (e.g. what an agent says of units); `None`
    /// leaves the request to the usual answer.
    pub answers: Option<Box<Answers>>,
    /// A recording harness: every request is answered by the replayed recording.
    recording: Option<crate::offline::recording::Recording>,
}

impl Harness {
    /// Over a snapshot file: live-only requests are refused as the offline source does.
    pub fn new(graph: HeapGraph) -> Harness {
        Harness::with_source(graph, false)
    }

    /// As if attached to a live agent: snapshots can be taken, cancels are answered from
    /// [`Harness::cancel_answers`].
    pub fn live(graph: HeapGraph) -> Harness {
        Harness::with_source(graph, true)
    }

    /// Over a recording, answered as `heaptui open REC` answers it.
    pub fn recording(bytes: Vec<u8>) -> Harness {
        let recording =
            crate::offline::recording::Recording::replay(bytes).expect("a readable recording");
        Harness::build(fixture(), false, Some(recording))
    }

    /// As if attached to a live agent that answers the other views with `answers`.
    pub fn live_with(
        graph: HeapGraph,
        answers: impl FnMut(&RequestBody) -> Option<Response> + 'static,
    ) -> Harness {
        let (tx, requests) = mpsc::unbounded_channel();
        let mut h = Harness::unconnected(graph, SourceHandle::new(tx, true), requests, None);
        h.answers = Some(Box::new(answers));
        h.connect();
        h
    }

    /// Over a snapshot file, its kept snapshot built but nothing asked yet: [`Harness::connect`]
    /// brings up the first screen (the TUI benchmark times the two apart).
    #[allow(dead_code)] // benches/tui.rs's alone
    pub fn offline_unconnected(graph: HeapGraph) -> Harness {
        let (tx, requests) = mpsc::unbounded_channel();
        Harness::unconnected(graph, SourceHandle::new(tx, false), requests, None)
    }

    fn with_source(graph: HeapGraph, live: bool) -> Harness {
        Harness::build(graph, live, None)
    }

    fn build(
        graph: HeapGraph,
        live: bool,
        recording: Option<crate::offline::recording::Recording>,
    ) -> Harness {
        let (tx, requests) = mpsc::unbounded_channel();
        let mut source = SourceHandle::new(tx, live);
        if recording.is_some() {
            source = source.for_recording();
        }
        let mut h = Harness::unconnected(graph, source, requests, recording);
        h.connect();
        h
    }

    fn unconnected(
        graph: HeapGraph,
        source: SourceHandle,
        requests: mpsc::UnboundedReceiver<Request>,
        recording: Option<crate::offline::recording::Recording>,
    ) -> Harness {
        let kept = Kept::new(&graph, &Analysis::new(&graph));
        let app = App::new(source, "test".into(), Rect::new(0, 0, WIDTH, HEIGHT));
        Harness {
            app,
            requests,
            kept,
            log: Vec::new(),
            answering: true,
            snapshot: OFFLINE_SNAPSHOT,
            cancel_answers: VecDeque::new(),
            next_graph: None,
            answers: None,
            recording,
        }
    }

    pub fn connect(&mut self) {
        self.app.on_source(SourceEvent::Connected {
            description: if self.recording.is_some() {
                "rec.bin (recording)".into()
            } else {
                "fixture (snapshot file)".into()
            },
        });
        self.pump();
    }

    /// Answers every queued request, and those the answers lead to.
    pub fn pump(&mut self) {
        if !self.answering {
            return;
        }
        while let Ok(request) = self.requests.try_recv() {
            self.log.push(request.body.clone());
            let body = self.answer(&request.body);
            self.app.on_source(SourceEvent::Answer {
                id: request.id,
                body,
            });
        }
    }

    fn answer(&mut self, body: &RequestBody) -> Response {
        if let Some(answers) = &mut self.answers
            && let Some(answer) = answers(body)
        {
            return answer;
        }
        if let Some(recording) = &mut self.recording {
            return recording.answer(body);
        }
        if self.app.live {
            match body {
                RequestBody::Subscribe => return Response::Subscribed { interval_ms: 1000 },
                RequestBody::Cancel { .. } => {
                    return self
                        .cancel_answers
                        .pop_front()
                        .expect("the test gives an answer for every cancel it expects");
                }
                RequestBody::TakeSnapshot => {
                    if let Some(graph) = self.next_graph.take() {
                        self.kept = Kept::new(&graph, &Analysis::new(&graph));
                    }
                    self.snapshot = SnapshotId(self.snapshot.0 + 1);
                    let answerer = Answerer::new(self.snapshot, &self.kept);
                    return Response::Snapshot(answerer.snapshot_info());
                }
                _ => {}
            }
        }
        let answerer = Answerer::new(self.snapshot, &self.kept);
        answer_offline(&answerer, body)
    }

    /// Takes the queued requests without answering them.
    pub fn take_requests(&mut self) -> Vec<Request> {
        let mut out = Vec::new();
        while let Ok(r) = self.requests.try_recv() {
            self.log.push(r.body.clone());
            out.push(r);
        }
        out
    }

    pub fn key(&mut self, code: KeyCode) {
        self.app.on_key(KeyEvent::new(code, KeyModifiers::NONE));
        self.pump();
    }

    pub fn keys(&mut self, codes: &[KeyCode]) {
        for &c in codes {
            self.key(c);
        }
    }

    pub fn type_text(&mut self, text: &str) {
        for c in text.chars() {
            self.key(KeyCode::Char(c));
        }
    }
}
