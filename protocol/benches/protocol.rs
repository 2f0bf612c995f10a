//! Protocol benchmark: what the wire and the answer builders cost, in-process and over a real
//! loopback TCP connection served by the crate's blocking helpers (a stand-in for the agent's
//! server thread, without the agent's capture). Run:
//!
//!     cargo bench -p heaptui-protocol --bench protocol
//!
//! Figures go to BENCHMARKS.md, section "Protocol". Medians of repeated runs; the machine is
//! shared and noisy.

use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use heaptui_analysis::synthetic::{SyntheticConfig, generate};
use heaptui_analysis::{Analysis, Edges, HeapGraph, Kept, ObjectRecord, Objects, Process, Site};
use heaptui_protocol::answer::Answerer;
use heaptui_protocol::handshake::{client_handshake, server_handshake};
use heaptui_protocol::*;

const TOKEN: &str = "bench-token-0123456789abcdef";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let samples = (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(f());
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// `globals → entry → n members`: one global-only group of n + 1 objects, 64 sites.
fn star(n: u32) -> HeapGraph {
    let sites = (0..64)
        .map(|i| Site {
            id: i + 1,
            frames: vec![
                format!("alloc_site_{i} (src/module_{i}.c:{})", 100 + i),
                "main".into(),
            ],
        })
        .collect();
    let mut objects = Objects::with_capacity(n as usize + 1);
    let mut edges = Edges::with_capacity(n as usize + 1, n as usize);
    objects.push(ObjectRecord {
        id: 1,
        addr: 0x1000,
        size: 64,
        site: 0,
        thread: 1,
        seq: 1,
    });
    edges.push(1..=n);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 1..=u64::from(n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        objects.push(ObjectRecord {
            id: i + 1,
            addr: 0x10_0000 + i * 0x40,
            size: 16 + x % 4096,
            site: (x >> 20) as u32 % 64,
            thread: 1 + (x >> 40) as u32 % 8,
            seq: i + 1,
        });
        edges.push([]);
    }
    HeapGraph::new(Process::default(), sites, objects, edges, vec![], vec![0]).unwrap()
}

/// Serves `graph` on a loopback port with the blocking helpers; returns the port.
fn serve(graph: HeapGraph) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let analysis = Analysis::new(&graph);
        let kept = Kept::new(&graph, &analysis);
        let answerer = Answerer::new(SnapshotId(1), &kept);
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            stream.set_nodelay(true).unwrap();
            if server_handshake(&mut stream, TOKEN, AgentInfo::default()).is_err() {
                continue;
            }
            while let Ok(request) = recv::<_, Request>(&mut stream, MAX_FRAME_LEN) {
                let body = answerer
                    .answer(&request.body)
                    .unwrap_or_else(|| Response::error(ErrorKind::BadRequest, "not served"));
                let answer = ServerMessage::Response {
                    id: request.id,
                    body: Box::new(body),
                };
                if send(&mut stream, &answer).is_err() {
                    break;
                }
            }
        }
    });
    port
}

fn connect(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    client_handshake(&mut stream, &Hello::new(TOKEN, "bench")).unwrap();
    stream
}

fn ask(stream: &mut TcpStream, id: u64, body: RequestBody) -> Response {
    send(
        stream,
        &Request {
            id: RequestId(id),
            body,
        },
    )
    .unwrap();
    match recv::<_, ServerMessage>(stream, MAX_FRAME_LEN).unwrap() {
        ServerMessage::Response { body, .. } => *body,
        other => panic!("unexpected {other:?}"),
    }
}

fn main() {
    // Ranking: 256 threads × 16 frames over 200k objects.
    let ranking_graph = generate(&SyntheticConfig::new(200_000, 256, 16));
    let analysis = Analysis::new(&ranking_graph);
    let kept = Kept::new(&ranking_graph, &analysis);
    let a = Answerer::new(SnapshotId(1), &kept);
    let ranking = RequestBody::Threads {
        sort: Sort::desc(ThreadKey::Total),
        page: Page::FIRST,
    };
    let build = time(200, || a.answer(&ranking));
    let answer = a.answer(&ranking).unwrap();
    let frame = to_frame(&answer).unwrap();
    let decode = time(200, || decode_payload::<Response>(&frame[4..]).unwrap());
    println!(
        "ranking, 256 threads: build {} · encode {} · decode {} · {} bytes",
        ms(build),
        ms(time(200, || to_frame(&answer).unwrap())),
        ms(decode),
        frame.len()
    );
    let port = serve(ranking_graph);
    let mut stream = connect(port);
    let rtt = time(500, || ask(&mut stream, 1, ranking.clone()));
    println!(
        "ranking, 256 threads, loopback TCP round trip: median {}",
        ms(rtt)
    );
    let frames = time(200, || {
        ask(
            &mut stream,
            2,
            RequestBody::Frames {
                tid: 1,
                page: Page::FIRST,
            },
        )
    });
    println!(
        "frames of one thread (16), loopback round trip: median {}",
        ms(frames)
    );

    // Paging: one group of 1M objects.
    let n = 1_000_000;
    let started = Instant::now();
    let graph = star(n);
    let analysis = Analysis::new(&graph);
    println!(
        "1M-object group: graph + analysis built in {}",
        ms(started.elapsed())
    );
    let kept = Kept::new(&graph, &analysis);
    let a = Answerer::new(SnapshotId(1), &kept);
    let group: GroupId = "G1".parse().unwrap();
    for offset in [0, 500_000, 990_000] {
        let t = time(9, || {
            a.group_objects(
                group,
                Sort::desc(ObjectKey::Size),
                Page::new(offset, 10_000),
                None,
            )
            .unwrap()
        });
        println!(
            "1M group, page of 10k by size desc at offset {offset}: {}",
            ms(t)
        );
    }
    let t = time(9, || {
        a.group_objects(group, Sort::asc(ObjectKey::Site), Page::new(0, 100), None)
            .unwrap()
    });
    println!("1M group, page of 100 by site label: {}", ms(t));
    // The server-side `/` filter: every member's row text is matched before paging.
    for query in ["alpha", "0x10"] {
        let filter = ObjectFilter::new(query);
        let t = time(9, || {
            a.group_objects(
                group,
                Sort::desc(ObjectKey::Size),
                Page::new(0, 100),
                Some(&filter),
            )
            .unwrap()
        });
        println!(
            "1M group, filtered by {query:?}, page of 100 by size: {}",
            ms(t)
        );
    }
    let t = time(9, || a.object(0, Page::new(0, 100)).unwrap());
    println!(
        "1M group, object detail of the entry (1M outgoing refs), 100 per list: {}",
        ms(t)
    );
    let t = time(9, || a.object(n / 2, Page::new(0, 100)).unwrap());
    println!(
        "1M group, object detail of a member (incoming scan of all refs): {}",
        ms(t)
    );
    let page = Response::Objects(
        a.group_objects(
            group,
            Sort::desc(ObjectKey::Size),
            Page::new(0, 10_000),
            None,
        )
        .unwrap(),
    );
    let frame = to_frame(&page).unwrap();
    println!(
        "10k-row object page: {} bytes · encode {} · decode {}",
        frame.len(),
        ms(time(21, || to_frame(&page).unwrap())),
        ms(time(21, || decode_payload::<Response>(&frame[4..]).unwrap()))
    );

    let port = serve(graph);
    let mut stream = connect(port);
    let started = Instant::now();
    let mut offset = 0u32;
    let mut rows = 0usize;
    let mut pages = 0;
    loop {
        let body = ask(
            &mut stream,
            3,
            RequestBody::GroupObjects {
                snapshot: SnapshotId(1),
                group,
                sort: Sort::desc(ObjectKey::Size),
                page: Page::new(offset, MAX_PAGE_ROWS),
                filter: None,
            },
        );
        let Response::Objects(page) = body else {
            panic!("unexpected {body:?}")
        };
        if page.rows.is_empty() {
            break;
        }
        rows += page.rows.len();
        offset += page.rows.len() as u32;
        pages += 1;
    }
    let elapsed = started.elapsed();
    println!(
        "paging all {rows} objects of the 1M group by size over loopback: {pages} pages in {} ({:.0} rows/s)",
        ms(elapsed),
        rows as f64 / elapsed.as_secs_f64()
    );
}
