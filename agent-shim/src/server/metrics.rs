//! The Prometheus endpoint (`HEAPTUI_METRICS=ADDR`, docs/reference.md §2 and §8): `GET /metrics`
//! answers the live counters, the snapshots taken, and the per-thread proprietary, shared and total
//! bytes of the latest snapshot, in the Prometheus text exposition format (0.0.4), or in
//! OpenMetrics 1.0 when the scraper asks for it in `Accept`.
//!
//! Owns its listening socket (loopback unless `HEAPTUI_LISTEN_PUBLIC=1`, checked in
//! `config`) and one agent thread, `heaptui-metrics`, that serves one scrape at a time with a
//! minimal HTTP/1.1 (one request per connection, `Connection: close`): a scrape is a few
//! kilobytes once every few seconds. The request must arrive within [`IO_TIMEOUT`] and each
//! write completes within it, so a stalled scraper holds the next one up for about that long.
//!
//! Never: take a snapshot (the per-thread figures are those of the latest one, labelled with
//! its id), stop the program when the port is taken (one line on stderr, no endpoint), or
//! need a token — the figures are aggregate sizes; keep the address on loopback or behind
//! the network's own access control.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::state::{self, Cause};
use crate::registry::threads;

/// How long one scrape may take to send its request or read the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request head accepted.
const MAX_HEAD: usize = 8 << 10;

static SERVING: AtomicBool = AtomicBool::new(false);

/// Binds `addr` and starts the endpoint's thread from the agent's constructor. A failure is
/// one line on stderr and the program runs on without the endpoint.
pub fn start(addr: SocketAddr) {
    let listener = match TcpListener::bind(addr)
        .and_then(crate::sys::own_fd)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
    {
        Ok(l) => l,
        Err(e) => {
            crate::log::to_stderr(format_args!(
                "heaptui metrics off: cannot listen on HEAPTUI_METRICS={addr}: {e}; the program runs on without it"
            ));
            return;
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    // A fork child closes it: it must not hold the port.
    super::own_fd(std::os::fd::AsRawFd::as_raw_fd(&listener));
    let first = crate::registry::blocks::number_waiting();
    let launched = std::thread::Builder::new()
        .name("heaptui-metrics".into())
        .spawn(move || serve(listener));
    if launched.is_ok() {
        let started = Instant::now();
        while !SERVING.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    threads::note_agent_spawn(first);
    match launched {
        Ok(_) => crate::agent_info!("metrics on http://{bound}/metrics"),
        Err(e) => crate::log::to_stderr(format_args!(
            "heaptui metrics off: cannot start its thread ({e}); the program runs on without it"
        )),
    }
}

fn serve(listener: TcpListener) {
    threads::enter_agent_thread();
    SERVING.store(true, Ordering::Release);
    loop {
        // Non-blocking listener: accept only what is there (sys::wait_for_connection).
        crate::sys::wait_for_connection(listener.as_raw_fd());
        match listener.accept().and_then(|(s, _)| crate::sys::own_fd(s)) {
            Ok(s) => {
                if let Err(e) = scrape(s) {
                    crate::agent_info!("metrics scrape failed: {e}");
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => {
                crate::agent_log!("metrics accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Answers one connection's request.
fn scrape(mut s: TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    // The whole request within IO_TIMEOUT, not each read: a scraper trickling a byte at a
    // time would otherwise hold the endpoint indefinitely.
    let started = Instant::now();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return respond(&mut s, "431 Request Header Fields Too Large", TEXT, "");
        }
        if started.elapsed() >= IO_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request did not arrive within the timeout",
            ));
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let mut request = lines.next().unwrap_or("").split(' ');
    let (method, target) = (request.next().unwrap_or(""), request.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    });
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let (body, kind) = if openmetrics {
                (exposition(true), OPENMETRICS)
            } else {
                (exposition(false), TEXT)
            };
            let body = if method == "HEAD" { "" } else { &body };
            respond(&mut s, "200 OK", kind, body)
        }
        (_, "/metrics") => respond(&mut s, "405 Method Not Allowed", TEXT, "use GET\n"),
        _ => respond(
            &mut s,
            "404 Not Found",
            TEXT,
            "the metrics are at /metrics\n",
        ),
    }
}

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn respond(s: &mut TcpStream, status: &str, kind: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

/// The metrics page, from the counters now and the latest snapshot.
pub fn exposition(openmetrics: bool) -> String {
    let c = crate::registry::counters::counters();
    let mut m = Metrics::new(openmetrics);
    m.single(
        "heaptui_live_bytes",
        Kind::Gauge,
        "Bytes in live heap blocks.",
        c.live_bytes,
    );
    m.single(
        "heaptui_live_blocks",
        Kind::Gauge,
        "Live heap blocks.",
        c.live_blocks,
    );
    m.single(
        "heaptui_allocated_bytes",
        Kind::Counter,
        "Bytes allocated since the agent loaded, freed or not.",
        c.allocated_bytes,
    );
    m.single(
        "heaptui_peak_live_bytes",
        Kind::Gauge,
        "The highest live heap bytes so far.",
        c.peak_live_bytes,
    );
    m.family(
        "heaptui_snapshots",
        Kind::Counter,
        "Snapshots taken, by who asked: a client (request) or the automatic rule (rule).",
    );
    for (cause, name) in [(Cause::Request, "request"), (Cause::Rule, "rule")] {
        m.sample(&[("cause", name)], state::snapshots_taken(cause));
    }
    if let Some(peak) = state::peak() {
        m.single(
            "heaptui_peak_snapshot_bytes",
            Kind::Gauge,
            "Heap bytes of the peak snapshot kept by the automatic rule.",
            peak.heap_bytes(),
        );
    }
    if let Some(kept) = state::kept() {
        m.single(
            "heaptui_snapshot_heap_bytes",
            Kind::Gauge,
            "Heap bytes of the latest snapshot.",
            kept.heap_bytes(),
        );
        m.single(
            "heaptui_snapshot_timestamp_seconds",
            Kind::Gauge,
            "When the latest snapshot was taken, seconds since the Unix epoch.",
            kept.info.taken_unix_ms / 1000,
        );
        let figures = kept.columns.figures();
        let graph_threads = kept.columns.threads();
        for (metric, help, value) in [
            (
                "heaptui_thread_proprietary_bytes",
                "Bytes reachable from this thread only, at the latest snapshot.",
                (|f: &heaptui_analysis::ThreadFigures| f.proprietary) as fn(&_) -> u64,
            ),
            (
                "heaptui_thread_shared_bytes",
                "Bytes this thread shares with other threads, at the latest snapshot.",
                |f| f.shared,
            ),
            (
                "heaptui_thread_total_bytes",
                "Proprietary plus shared bytes of this thread, at the latest snapshot.",
                |f| f.total,
            ),
        ] {
            m.family(metric, Kind::Gauge, help);
            for (t, f) in graph_threads.iter().zip(figures) {
                let tid = t.tid.to_string();
                m.sample(&[("tid", &tid), ("name", &t.name)], value(f));
            }
        }
    }
    m.finish()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
}

/// Builds an exposition: a family's `# HELP`/`# TYPE` lines, then its samples.
struct Metrics {
    out: String,
    openmetrics: bool,
    /// Name of the current family's samples (a counter's end in `_total`).
    sample_name: String,
}

impl Metrics {
    fn new(openmetrics: bool) -> Self {
        Metrics {
            out: String::with_capacity(4096),
            openmetrics,
            sample_name: String::new(),
        }
    }

    /// Starts a family. A counter's samples are `NAME_total`; Prometheus text names the
    /// family by its sample name, OpenMetrics without the suffix.
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let (kind, sample_name) = match kind {
            Kind::Gauge => ("gauge", name.to_string()),
            Kind::Counter => ("counter", format!("{name}_total")),
        };
        let family = if self.openmetrics { name } else { &sample_name };
        let _ = writeln!(self.out, "# HELP {family} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {family} {kind}");
        self.sample_name = sample_name;
    }

    /// One sample of the current family.
    fn sample(&mut self, labels: &[(&str, &str)], value: u64) {
        self.out.push_str(&self.sample_name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    fn single(&mut self, name: &str, kind: Kind, help: &str, value: u64) {
        self.family(name, kind, help);
        self.sample(&[], value);
    }

    fn finish(mut self) -> String {
        if self.openmetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

/// A label value as the exposition formats want it: `\`, `"` and newlines escaped.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_label("plain-name 7"), "plain-name 7");
    }

    #[test]
    fn families_and_counters_in_both_formats() {
        for openmetrics in [false, true] {
            let mut m = Metrics::new(openmetrics);
            m.single("t_bytes", Kind::Gauge, "Some bytes.", 5);
            m.single("t_allocated", Kind::Counter, "Allocated.", 7);
            m.family("t_thread", Kind::Gauge, "Per thread.");
            m.sample(&[("tid", "1"), ("name", "a\"b")], 3);
            let text = m.finish();
            assert!(text.contains("# TYPE t_bytes gauge\nt_bytes 5\n"), "{text}");
            assert!(text.contains("t_allocated_total 7\n"), "{text}");
            assert!(
                text.contains("t_thread{tid=\"1\",name=\"a\\\"b\"} 3\n"),
                "{text}"
            );
            if openmetrics {
                assert!(text.contains("# TYPE t_allocated counter\n"), "{text}");
                assert!(text.ends_with("# EOF\n"));
            } else {
                assert!(
                    text.contains("# TYPE t_allocated_total counter\n"),
                    "{text}"
                );
                assert!(!text.contains("# EOF"));
            }
        }
    }
}
