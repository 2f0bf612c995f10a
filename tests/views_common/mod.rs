//! Recordings written by the tests with the real `RecordingWriter`, holding the issue's
//! vectors (issue 7), so that `heaptui report REC` and `heaptui open REC` can be checked
//! against figures known by hand.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use heaptui_analysis::recording::{Event, RecordedCounters, RecordingWriter};
use heaptui_analysis::views::ages::Boundary;
use heaptui_analysis::views::units::AllocKind;

/// A directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("heaptui-recording-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn alloc(w: &mut RecordingWriter<Vec<u8>>, seq: u64, addr: u64, size: u64, stack: u32, tid: u32) {
    w.write(&Event::Alloc {
        kind: AllocKind::Malloc,
        seq,
        addr,
        size,
        stack,
        tid,
    })
    .unwrap();
}

/// alloc 100, alloc 200, free 100 → live 200, allocated 300, utilization 66.7%; the agent's
/// counters recorded after each event.
pub fn counters_vector() -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new()).unwrap();
    let stack = w.stack([("work", "prog"), ("main", "prog")]).unwrap();
    let counters = |w: &mut RecordingWriter<Vec<u8>>, live, blocks, allocated, peak, ms| {
        w.write(&Event::Counters(RecordedCounters {
            live_bytes: live,
            live_blocks: blocks,
            allocated_bytes: allocated,
            peak_live_bytes: peak,
            unix_ms: ms,
        }))
        .unwrap();
    };
    alloc(&mut w, 1, 0x1000, 100, stack, 7);
    counters(&mut w, 100, 1, 100, 100, 1_000);
    alloc(&mut w, 2, 0x2000, 200, stack, 7);
    counters(&mut w, 300, 2, 300, 300, 2_000);
    w.write(&Event::Free {
        addr: 0x1000,
        stack,
        tid: 7,
    })
    .unwrap();
    counters(&mut w, 200, 1, 300, 300, 3_000);
    w.into_inner()
}

/// Boundaries after allocations 5 and 8; blocks 1..=10, the even ones up to 8 freed: live
/// 1, 3, 5, 7, 9, 10 → ages 2, 2, 2, 1, 0, 0 → histogram {0: 2, 1: 1, 2: 3}. Odd blocks
/// come from `odd_site` on thread 1, even ones from `even_site` on thread 2 ("worker").
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
        alloc(&mut w, seq, 0x1000 * seq, 10 * seq, stack, tid);
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

/// The issue's units vector: stacks main → func_0 (exe) → func_a0 (liba.so) → … → malloc;
/// malloc 100 in liba, malloc 50 in libb, free of the first from a libb stack, realloc of the
/// second to 80 in libb.
pub fn units_vector() -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new()).unwrap();
    let exe = w.string("exe").unwrap();
    w.write(&Event::Module {
        name: exe,
        base: 0x40_0000,
        size: 0x1000,
    })
    .unwrap();
    let liba = w
        .stack([
            ("malloc", "libc.so.6"),
            ("func_a1", "liba.so"),
            ("func_a0", "liba.so"),
            ("func_0", "exe"),
            ("main", "exe"),
        ])
        .unwrap();
    let libb = w
        .stack([
            ("malloc", "libc.so.6"),
            ("func_b0", "libb.so"),
            ("func_0", "exe"),
            ("main", "exe"),
        ])
        .unwrap();
    alloc(&mut w, 1, 0x1000, 100, liba, 1);
    alloc(&mut w, 2, 0x2000, 50, libb, 1);
    w.write(&Event::Free {
        addr: 0x1000,
        stack: libb,
        tid: 1,
    })
    .unwrap();
    w.write(&Event::Realloc {
        seq: 3,
        old_addr: 0x2000,
        new_addr: 0x3000,
        size: 80,
        stack: libb,
        tid: 1,
    })
    .unwrap();
    w.into_inner()
}

// ----- an agent of the test's own ------------------------------------------------------

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use heaptui_analysis::{Analysis, HeapGraph, Kept};
use heaptui_protocol::answer::Answerer;
use heaptui_protocol::handshake::server_handshake;
use heaptui_protocol::{
    AgentInfo, CounterHistory, GrowthPage, GrowthRow, LiveCounters, MAX_FRAME_LEN, PageInfo,
    ProcessInfo, Request, RequestBody, Response, ServerMessage, SnapshotId, UnitCharge, UnitPage,
    UnitRow, read_frame,
};

pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// Three blocks allocated as numbers 1, 3 and 5, one of them (a `Leak.Node` at no root's
/// reach): with the agent's boundaries after allocations 2 and 4 their ages are 2, 1 and 0.
pub fn aged_graph() -> HeapGraph {
    let json = r#"{"format": "heaptui-snapshot", "version": 1,
        "process": {"pid": 4242, "command": "./aged"},
        "sites": [{"id": 1, "frames": ["keep (aged.c:7)", "main"]},
                  {"id": 2, "frames": ["Leak.Node (aged.c:9)", "main"]}],
        "objects": [{"id": 1, "addr": 4096, "size": 100, "site": 1, "thread": 7, "seq": 1, "refs": []},
                    {"id": 2, "addr": 8192, "size": 30, "site": 1, "thread": 7, "seq": 3, "refs": []},
                    {"id": 3, "addr": 12288, "size": 40, "site": 2, "thread": 7, "seq": 5, "refs": []}],
        "threads": [{"tid": 7, "name": "main", "frames": [{"function": "main", "refs": [1, 2]}]}]}"#;
    heaptui_analysis::snapshot::read_bytes(json.as_bytes()).unwrap()
}

/// The boundaries the test agent says it recorded (`last_seq` of two earlier snapshots).
pub const BOUNDARIES: [u64; 2] = [2, 4];

/// A server over the real protocol (TCP on loopback, the real handshake and frames) that
/// answers snapshot requests with `Answerer` over [`aged_graph`] and [`BOUNDARIES`], and
/// units, growth-free counters as an agent with its event stream would: what the client
/// shows must be what it answers.
pub struct FakeAgent {
    pub port: u16,
    pub token_file: PathBuf,
    stop: Arc<AtomicBool>,
}

impl FakeAgent {
    pub fn start(dir: &Path) -> FakeAgent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let token_file = dir.join("token");
        std::fs::write(&token_file, TOKEN).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                std::thread::spawn(move || serve(stream));
            }
        });
        FakeAgent {
            port,
            token_file,
            stop,
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// The units of the issue's vector, charged as asked.
pub fn agent_units(charge: UnitCharge) -> Vec<UnitRow> {
    let row = |name: &str, live, min, max, [malloc, realloc, free]: [u64; 3]| UnitRow {
        name: name.into(),
        live,
        min,
        max,
        malloc,
        realloc,
        free,
        memalign: 0,
    };
    match charge {
        UnitCharge::Allocator => vec![
            row("libb.so", 80, 0, 80, [1, 1, 0]),
            row("liba.so", 0, 0, 100, [1, 0, 1]),
        ],
        UnitCharge::Freer => vec![
            row("liba.so", 100, 0, 100, [1, 0, 0]),
            row("libb.so", -20, -50, 50, [1, 1, 1]),
        ],
    }
}

fn serve(mut stream: std::net::TcpStream) {
    let agent = AgentInfo {
        pid: 4242,
        command: "./aged".into(),
        agent_version: "test".into(),
        started_unix_ms: 1,
    };
    if server_handshake(&mut stream, TOKEN, agent).is_err() {
        return;
    }
    let graph = aged_graph();
    let analysis = Analysis::new(&graph);
    let snapshot = SnapshotId(3);
    let kept = Kept::new(&graph, &analysis);
    let answerer = Answerer::new(snapshot, &kept).with_boundaries(&BOUNDARIES);
    let counters = LiveCounters {
        live_bytes: 170,
        live_blocks: 3,
        allocated_bytes: 510,
        peak_live_bytes: 200,
        unix_ms: 3_000,
    };
    while let Ok(payload) = read_frame(&mut stream, MAX_FRAME_LEN) {
        let Ok(request) = heaptui_protocol::decode_payload::<Request>(&payload) else {
            return;
        };
        let body = match &request.body {
            RequestBody::TakeSnapshot => Response::Snapshot(answerer.snapshot_info()),
            RequestBody::ProcessInfo => Response::ProcessInfo(ProcessInfo {
                pid: 4242,
                command: "./aged".into(),
                agent_version: "test".into(),
                counters,
                threads: 1,
                snapshot: Some(answerer.snapshot_info()),
                ..ProcessInfo::default()
            }),
            RequestBody::Subscribe => Response::Subscribed { interval_ms: 1000 },
            RequestBody::CounterHistory => Response::CounterHistory(CounterHistory {
                interval_ms: 1000,
                samples: (1..=3)
                    .map(|i| LiveCounters {
                        live_bytes: 100 + 35 * (i - 1),
                        allocated_bytes: 170 * i,
                        unix_ms: 1_000 * i,
                        ..counters
                    })
                    .collect(),
            }),
            RequestBody::Units { query, page, .. } => {
                let rows = agent_units(query.charge);
                Response::Units(UnitPage {
                    query: *query,
                    events: 4,
                    page: PageInfo {
                        offset: page.offset,
                        total: rows.len() as u32,
                    },
                    rows: if page.offset == 0 { rows } else { Vec::new() },
                    ..UnitPage::default()
                })
            }
            // Three snapshots: `keep` grew over each (flagged), the leak stayed; `keep` was
            // allocated through a wrapper, which names no site.
            RequestBody::Growth { page } => Response::Growth(GrowthPage {
                snapshots: 3,
                run: 3,
                page: PageInfo {
                    offset: page.offset,
                    total: 2,
                },
                rows: if page.offset == 0 {
                    vec![
                        GrowthRow {
                            label: "keep (aged.c:7)".into(),
                            frames: vec![
                                "xmalloc (aged.c:3)".into(),
                                "keep (aged.c:7)".into(),
                                "main (aged.c:20)".into(),
                            ],
                            history: vec![60, 100, 130],
                            growing: true,
                            dominant: false,
                        },
                        GrowthRow {
                            label: "Leak.Node (aged.c:9)".into(),
                            frames: vec!["Leak.Node (aged.c:9)".into(), "main (aged.c:21)".into()],
                            history: vec![40, 40, 40],
                            growing: false,
                            dominant: false,
                        },
                    ]
                } else {
                    Vec::new()
                },
            }),
            other => answerer.answer(other).unwrap_or_else(|| {
                Response::error(
                    heaptui_protocol::ErrorKind::Refused,
                    "not in this test agent",
                )
            }),
        };
        let message = ServerMessage::Response {
            id: request.id,
            body: Box::new(body),
        };
        if heaptui_protocol::send(&mut stream, &message).is_err() {
            return;
        }
    }
}
