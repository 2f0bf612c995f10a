//! The protocol benchmark (BENCHMARKS.md "Protocol"), run by `bench/protocol.sh`:
//! - latency of a thread-ranking request against a live agent with 256 threads;
//! - throughput of paging through the 1M objects of one allocation site;
//! - the target's malloc/free throughput with and without a subscribed client.
//!
//! Usage: protocol_bench AGENT.so TARGET (TARGET is bench/protocol_target.c compiled).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use heaptui_protocol::handshake::client_handshake;
use heaptui_protocol::*;

struct Agent {
    child: Child,
    address: String,
    token: String,
}

// A failed start panics and ends the benchmark; the target is then reaped by init.
#[allow(clippy::zombie_processes)]
fn start(agent: &Path, target: &Path, args: &[&str], log: &Path) -> Agent {
    let _ = std::fs::remove_file(log);
    let mut child = Command::new(target)
        .args(args)
        .env("LD_PRELOAD", agent)
        .env("HEAPTUI_LISTEN", "127.0.0.1:0")
        .env("HEAPTUI_LOG", log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the target");
    if args[0] == "hold" {
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
    }
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("listening on ")) {
            let rest = line.split("listening on ").nth(1).unwrap();
            let (address, token_file) = rest.split_once(" (token file ").unwrap();
            let token = std::fs::read_to_string(token_file.trim_end_matches(')')).unwrap();
            return Agent {
                child,
                address: address.to_string(),
                token: token.trim().to_string(),
            };
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no agent: {text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Client {
    stream: TcpStream,
    next: u64,
}

impl Client {
    fn connect(agent: &Agent) -> Client {
        let mut stream = TcpStream::connect(&agent.address).unwrap();
        stream.set_nodelay(true).unwrap();
        client_handshake(&mut stream, &Hello::new(agent.token.clone(), "bench")).unwrap();
        Client { stream, next: 1 }
    }

    fn ask(&mut self, body: RequestBody) -> Response {
        let id = RequestId(self.next);
        self.next += 1;
        send(&mut self.stream, &Request { id, body }).unwrap();
        loop {
            if let ServerMessage::Response { id: got, body } =
                recv(&mut self.stream, MAX_FRAME_LEN).unwrap()
                && got == id
            {
                return *body;
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [agent, target] = &args[..] else {
        eprintln!("usage: protocol_bench AGENT.so TARGET");
        std::process::exit(2);
    };
    let log =
        std::env::temp_dir().join(format!("heaptui-protocol-bench-{}.log", std::process::id()));

    // 1. Ranking latency, 256 threads (and 1M objects, for the paging below).
    let mut held = start(agent, target, &["hold", "256", "1000000"], &log);
    let mut client = Client::connect(&held);
    let Response::Snapshot(snap) = client.ask(RequestBody::TakeSnapshot) else {
        panic!("no snapshot")
    };
    println!(
        "snapshot: {} threads, {} objects; pause {:.1} ms, capture {:.1} ms, analysis {:.1} ms, held {:.1} MiB",
        snap.threads,
        snap.totals.objects,
        snap.pause_us as f64 / 1e3,
        snap.capture_us as f64 / 1e3,
        snap.analysis_us as f64 / 1e3,
        snap.held_bytes as f64 / (1 << 20) as f64
    );
    let mut times = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        let Response::Threads(page) = client.ask(RequestBody::Threads {
            sort: Sort::desc(ThreadKey::Total),
            page: Page::new(0, 100),
        }) else {
            panic!()
        };
        times.push(started.elapsed());
        assert_eq!(page.page.total, 257);
    }
    times.sort();
    println!(
        "ranking (257 threads, page of 100): median {:.3} ms, p95 {:.3} ms, max {:.3} ms over {} requests",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.95).as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3,
        times.len()
    );

    // 2. Paging through the 1M list nodes: the site with the most blocks.
    let Response::Sites(sites) = client.ask(RequestBody::Sites {
        sort: Sort::desc(SiteKey::Blocks),
        page: Page::new(0, 1),
    }) else {
        panic!()
    };
    let site = &sites.rows[0];
    let started = Instant::now();
    let (mut offset, mut rows, mut pages) = (0u32, 0u64, 0u32);
    loop {
        let Response::Objects(page) = client.ask(RequestBody::SiteObjects {
            snapshot: snap.snapshot,
            site: site.site,
            sort: Sort::asc(ObjectKey::Index),
            page: Page::new(offset, MAX_PAGE_ROWS),
            filter: None,
        }) else {
            panic!()
        };
        rows += page.rows.len() as u64;
        pages += 1;
        offset += page.rows.len() as u32;
        if offset >= page.page.total || page.rows.is_empty() {
            break;
        }
    }
    let took = started.elapsed();
    println!(
        "paging {rows} objects of one site in {pages} pages of {MAX_PAGE_ROWS}: {:.2} s, {:.0} objects/s",
        took.as_secs_f64(),
        rows as f64 / took.as_secs_f64()
    );
    drop(client);
    drop(held.child.stdin.take());
    held.child.wait().unwrap();

    // 3. The target's malloc throughput, alone and with a subscribed client (alternating).
    let run = |subscribed: bool| -> f64 {
        let mut agent_run = start(agent, target, &["stress", "3"], &log);
        let mut sub = subscribed.then(|| {
            let mut c = Client::connect(&agent_run);
            assert!(matches!(
                c.ask(RequestBody::Subscribe),
                Response::Subscribed { .. }
            ));
            c
        });
        let mut out = String::new();
        std::io::Read::read_to_string(agent_run.child.stdout.as_mut().unwrap(), &mut out).unwrap();
        if let Some(c) = sub.as_mut() {
            let _ = c.stream.flush();
        }
        agent_run.child.wait().unwrap();
        out.trim().parse().unwrap()
    };
    let (mut alone, mut with) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        alone.push(run(false));
        with.push(run(true));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "malloc+free/s (4 threads, 3 s): alone {:.2} M {:?}, subscribed {:.2} M {:?}; ratio {:.3}",
        mean(&alone) / 1e6,
        alone
            .iter()
            .map(|x| (x / 1e4).round() / 1e2)
            .collect::<Vec<_>>(),
        mean(&with) / 1e6,
        with.iter()
            .map(|x| (x / 1e4).round() / 1e2)
            .collect::<Vec<_>>(),
        mean(&with) / mean(&alone)
    );
    let _ = std::fs::remove_file(&log);
}
