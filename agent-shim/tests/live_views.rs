//! The agent's views around the core (docs/reference.md §8) on real targets under the real preload,
//! through the real protocol: automatic snapshots keeping the peak (`HEAPTUI_AUTO_SNAPSHOT`), the
//! counter history, per-site growth across snapshots, block ages, and the Prometheus endpoint
//! (`HEAPTUI_METRICS`) scraped over plain TCP.

mod common;
mod policy_support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{TempDir, compile_c, run_preloaded};
use heaptui_protocol::{
    AgeScope, Direction, GrowthPage, ObjectKey, Page, ProcessInfo, RequestBody, Response,
    SnapshotId, SnapshotRule, Sort,
};
use policy_support::{Client, Target};

fn process_info(c: &mut Client) -> ProcessInfo {
    match c.request(RequestBody::ProcessInfo) {
        Response::ProcessInfo(p) => p,
        other => panic!("process info answered {other:?}"),
    }
}

/// Steps of 256 KiB on command: `up` allocates one more, `down` frees the top one, each
/// answered with `step N` (N counts the commands); `quit` ends.
const PEAK_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define STEP (256 * 1024)
__attribute__((noinline)) static void *step_alloc(void) {
    void *p = malloc(STEP);
    memset(p, 1, 64);
    return p;
}
int main(void) {
    char line[64];
    /* On main's stack: the blocks are the main thread's in the per-thread figures. */
    void *blocks[64] = {0};
    int held = 0, steps = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "up", 2) && held < 64) blocks[held++] = step_alloc();
        else if (!strncmp(line, "down", 4) && held > 0) { free(blocks[--held]); blocks[held] = NULL; }
        else if (!strncmp(line, "quit", 4)) break;
        printf("step %d\n", ++steps);
    }
    for (int i = 0; i < 64; i++) free(blocks[i]);
    return 0;
}
"#;

const STEP: u64 = 256 * 1024;

/// A scrape of the metrics endpoint: the HTTP status line and the samples by name+labels.
fn scrape(addr: &str, accept: &str) -> (String, String, BTreeMap<String, f64>) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap_or("").to_string();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a Content-Length")
        .parse()
        .unwrap();
    assert_eq!(length, body.len(), "Content-Length");
    let samples = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').expect("NAME VALUE");
            (name.to_string(), value.parse::<f64>().expect("a number"))
        })
        .collect();
    (status, body.to_string(), samples)
}

/// The status line the endpoint answers `request_line` with.
fn status_of(addr: &str, request_line: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{request_line}\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines().next().unwrap_or("").to_string()
}

#[test]
fn automatic_snapshots_keep_the_peak_and_metrics_show_it() {
    let dir = TempDir::new("views-peak");
    let exe = compile_c(&dir, "peak", PEAK_C, &[]);
    // 1.1 MiB: 4.4 steps, so the rule fires every fifth step while rising.
    let tolerance = 1_153_434u64;
    let mut t = Target::start_with(
        &dir,
        &exe,
        &[],
        None,
        &[
            ("HEAPTUI_AUTO_SNAPSHOT", "tolerance:1153434"),
            ("HEAPTUI_METRICS", "127.0.0.1:0"),
        ],
    );
    let log = t.agent_log();
    let metrics = log
        .lines()
        .find_map(|l| l.split_once("metrics on http://").map(|(_, r)| r))
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"))
        .to_string();
    let mut c = t.client();
    let before = process_info(&mut c);
    assert_eq!(before.snapshot_rule, SnapshotRule::Tolerance(tolerance));
    assert!(before.peak_snapshot.is_none());

    // Rise to 64 steps, one at a time, each seen by a round of the agent's watch thread (which
    // takes a due snapshot within its round): T = 4.4 steps fires at every fifth step, so the
    // last automatic snapshot of the rise holds 60 steps.
    let mut steps = 0;
    let mut step = |t: &mut Target, command: &str, watched: bool| {
        steps += 1;
        t.ask(command, &format!("step {steps}"));
        if watched {
            t.wait_agent_rounds("heaptui-watch", 1);
        }
    };
    for _ in 0..64 {
        step(&mut t, "up", true);
    }
    let at_top = process_info(&mut c);
    let peak = at_top.peak_snapshot.clone().expect("a peak snapshot");
    let true_peak = at_top.counters.peak_live_bytes;
    let bytes = peak.totals.bytes;
    assert!(true_peak >= 64 * STEP, "{true_peak}");
    // The graph leaves out what the agent's own threads hold; the counters do not.
    assert!(
        bytes <= true_peak,
        "peak snapshot {bytes} > true peak {true_peak}"
    );
    assert!(
        bytes + tolerance >= true_peak,
        "peak snapshot {bytes} more than {tolerance} below the true peak {true_peak}\n{}",
        t.agent_log()
    );
    // Down to 16 steps (frees never make the rule due), then up again to 40: the first step
    // up makes it due once more (X > T from the last snapshot); that snapshot, 17 steps, is
    // lower, so the peak stays, and nothing else is due before 40.
    for _ in 0..48 {
        step(&mut t, "down", false);
    }
    for _ in 0..24 {
        step(&mut t, "up", true);
    }
    let after = process_info(&mut c);
    let latest = after.snapshot.clone().unwrap();
    assert!(
        latest.snapshot > peak.snapshot,
        "no snapshot in the second rise"
    );
    assert_eq!(
        after.peak_snapshot.as_ref().unwrap().snapshot,
        peak.snapshot
    );
    assert!(
        latest.totals.bytes < bytes,
        "{} {bytes}",
        latest.totals.bytes
    );
    assert!(latest.totals.bytes >= 16 * STEP, "{}", latest.totals.bytes);

    // The peak's graph is served whole.
    let file = fetch(&mut c, peak.snapshot);
    let graph = heaptui_analysis::snapshot::read_bytes(&file).expect("the peak's file reads");
    let in_graph: u64 = graph.objects().size.iter().sum();
    assert_eq!(in_graph, bytes);

    // The counter history: one sample a second, allocated bytes never going down; the first
    // sample taken after the top saw the peak (waited for: samples come once a second).
    let deadline = Instant::now() + Duration::from_secs(30);
    let history = loop {
        let history = match c.request(RequestBody::CounterHistory) {
            Response::CounterHistory(h) => h,
            other => panic!("counter history answered {other:?}"),
        };
        if history.samples.len() >= 2
            && history.samples.last().unwrap().peak_live_bytes >= 64 * STEP
        {
            break history;
        }
        assert!(
            Instant::now() < deadline,
            "no sample after the top: {history:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(history.interval_ms, 1000);
    assert!(
        history
            .samples
            .windows(2)
            .all(|w| w[0].unix_ms < w[1].unix_ms && w[0].allocated_bytes <= w[1].allocated_bytes)
    );

    // The metrics agree with the protocol.
    let (status, body, m) = scrape(&metrics, "text/plain");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("# TYPE heaptui_allocated_bytes_total counter"));
    let rule = m["heaptui_snapshots_total{cause=\"rule\"}"] as u64;
    // Rising 64 steps with T = 4.4 steps fires every fifth step (12 snapshots), every step
    // seen; the second rise once more: 13.
    assert_eq!(rule, 13, "automatic snapshots\n{body}");
    assert_eq!(m["heaptui_snapshots_total{cause=\"request\"}"], 0.0);
    assert_eq!(m["heaptui_peak_snapshot_bytes"] as u64, bytes);
    assert_eq!(m["heaptui_snapshot_heap_bytes"] as u64, latest.totals.bytes);
    assert!(m["heaptui_peak_live_bytes"] as u64 >= true_peak);
    assert!(m["heaptui_live_bytes"] as u64 >= 40 * STEP);
    assert!(m["heaptui_allocated_bytes_total"] as u64 >= 88 * STEP);
    assert!(m["heaptui_live_blocks"] >= 40.0);
    // One row per thread of the latest snapshot: the main thread's stack holds the blocks.
    let tid = t.child.id();
    let total = m
        .iter()
        .find(|(k, _)| {
            k.starts_with("heaptui_thread_total_bytes{")
                && k.contains(&format!("tid=\"{tid}\""))
                && k.contains("name=\"peak\"")
        })
        .map(|(_, v)| *v as u64)
        .unwrap_or_else(|| panic!("no main thread row:\n{body}"));
    // The latest snapshot is the second rise's (17 steps).
    assert!(
        total >= 16 * STEP && total <= latest.totals.bytes,
        "{total} of {}",
        latest.totals.bytes
    );
    let own = m[&format!("heaptui_thread_proprietary_bytes{{tid=\"{tid}\",name=\"peak\"}}")];
    let shared = m[&format!("heaptui_thread_shared_bytes{{tid=\"{tid}\",name=\"peak\"}}")];
    assert_eq!(own + shared, total as f64);
    let (_, om, _) = scrape(&metrics, "application/openmetrics-text; version=1.0.0");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE heaptui_allocated_bytes counter"));
    assert_eq!(
        status_of(&metrics, "GET /elsewhere HTTP/1.1"),
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        status_of(&metrics, "POST /metrics HTTP/1.1"),
        "HTTP/1.1 405 Method Not Allowed"
    );
    // A client that never finishes its request does not keep the endpoint from the next.
    let stalled = TcpStream::connect(&metrics).unwrap();
    (&stalled).write_all(b"GET /metr").unwrap();
    let (status, _, _) = scrape(&metrics, "text/plain");
    assert_eq!(status, "HTTP/1.1 200 OK");
    drop(stalled);
    let _ = t.quit();
}

/// Fetches a kept snapshot's file chunk by chunk.
fn fetch(c: &mut Client, snapshot: SnapshotId) -> Vec<u8> {
    let mut file = Vec::new();
    loop {
        let chunk = match c.request(RequestBody::SnapshotData {
            snapshot,
            offset: file.len() as u64,
        }) {
            Response::SnapshotData(d) => d,
            other => panic!("snapshot data answered {other:?}"),
        };
        file.extend_from_slice(&chunk.bytes);
        if file.len() as u64 >= chunk.total || chunk.bytes.is_empty() {
            return file;
        }
    }
}

/// On each `step`: `grow` keeps one more 10 KiB block (10, 20, 30 KiB…), `rise_fall` holds
/// 100, 200, then 100 KiB; `steady` holds 200 KiB from the start.
const GROWTH_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *grown[16];
static void *rf[2];
static void *steady;
__attribute__((noinline)) void *grow(void) { void *p = malloc(10 * 1024); memset(p, 0, 16); return p; }
__attribute__((noinline)) void *rise_fall(void) { void *p = malloc(100 * 1024); memset(p, 0, 16); return p; }
__attribute__((noinline)) void *hold_steady(void) { void *p = malloc(200 * 1024); memset(p, 0, 16); return p; }
int main(void) {
    char line[64];
    int n = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    steady = hold_steady();
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "quit", 4)) break;
        grown[n] = grow();
        if (n < 2) rf[n] = rise_fall();
        if (n == 2) { free(rf[1]); rf[1] = NULL; }
        n++;
        printf("stepped %d\n", n);
    }
    for (int i = 0; i < n; i++) free(grown[i]);
    free(rf[0]); free(rf[1]); free(steady);
    return 0;
}
"#;

fn growth(c: &mut Client) -> GrowthPage {
    match c.request(RequestBody::Growth { page: Page::FIRST }) {
        Response::Growth(g) => g,
        other => panic!("growth answered {other:?}"),
    }
}

#[test]
fn growth_flags_the_growing_site_and_ages_count_snapshots() {
    let dir = TempDir::new("views-growth");
    let exe = compile_c(&dir, "growth", GROWTH_C, &[]);
    let mut t = Target::start(&dir, &exe, &[], None);
    let mut c = t.client();
    assert_eq!(growth(&mut c).snapshots, 0);
    // The blocks of `hold_steady` (before "ready") get a wall-clock age of over a second.
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1200));
    for n in 1..=3 {
        t.command("step");
        t.wait_line(&format!("stepped {n}"));
        c.snapshot();
    }
    let g = growth(&mut c);
    assert_eq!((g.snapshots, g.run), (3, 3));
    let row = |name: &str| {
        g.rows
            .iter()
            .find(|r| r.label.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("no {name} row in {:#?}", g.rows))
    };
    let (grow, rise_fall, steady) = (row("grow"), row("rise_fall"), row("hold_steady"));
    assert_eq!(grow.history, [10240, 20480, 30720]);
    assert!(grow.growing && !grow.dominant);
    assert_eq!(rise_fall.history, [102400, 204800, 102400]);
    assert!(!rise_fall.growing && !rise_fall.dominant);
    assert_eq!(steady.history, [204800; 3]);
    assert!(!steady.growing);
    // Flagged sites first.
    assert!(g.rows[0].growing || g.rows[0].dominant, "{:#?}", g.rows[0]);
    assert_eq!(g.page.total as usize, g.rows.len());

    // Ages in the third snapshot: the first `grow` block and `steady` were allocated before
    // snapshots 1 and 2 (age 2), the second before snapshot 2 (age 1), the third after.
    let ages = match c.request(RequestBody::Ages {
        by: AgeScope::Sites,
        page: Page::FIRST,
        oldest: 5,
    }) {
        Response::Ages(a) => a,
        other => panic!("ages answered {other:?}"),
    };
    assert_eq!(ages.boundaries, 2);
    let site_row = |name: &str| {
        ages.rows
            .iter()
            .find(|r| r.label.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("no {name} age row in {:#?}", ages.rows))
    };
    assert_eq!(site_row("grow").histogram.blocks, [1, 1, 1, 0, 0]);
    assert_eq!(
        site_row("grow").histogram.bytes,
        [10240, 10240, 10240, 0, 0]
    );
    assert_eq!(site_row("hold_steady").histogram.blocks, [0, 0, 1, 0, 0]);
    assert_eq!(site_row("rise_fall").histogram.blocks, [0, 0, 1, 0, 0]);
    assert!(ages.oldest.iter().all(|s| s.object.age == Some(2)));
    // Wall-clock ages from the agent's allocation clock (read every 100 ms): the oldest
    // block, `hold_steady`'s, is older than the 1.2 s slept, younger than the whole test.
    let oldest_ms = ages.oldest[0].age_ms.expect("a wall-clock age");
    assert!(
        oldest_ms >= 1000 && u128::from(oldest_ms) <= started.elapsed().as_millis() + 1000,
        "{oldest_ms} ms"
    );
    assert!(ages.oldest.iter().all(|s| s.age_ms.is_some()));
    assert_eq!(ages.oldest.len(), 5);
    // Object rows carry their age too.
    let site = site_row("grow").key;
    let objects = match c.request(RequestBody::SiteObjects {
        snapshot: ages.snapshot,
        site,
        sort: Sort {
            key: ObjectKey::Seq,
            direction: Direction::Ascending,
        },
        page: Page::FIRST,
        filter: None,
    }) {
        Response::Objects(o) => o,
        other => panic!("site objects answered {other:?}"),
    };
    let got: Vec<Option<u32>> = objects.rows.iter().map(|r| r.age).collect();
    assert_eq!(got, [Some(2), Some(1), Some(0)]);
    // No rule: no peak snapshot.
    let p = process_info(&mut c);
    assert_eq!(p.snapshot_rule, SnapshotRule::Off);
    assert!(p.peak_snapshot.is_none());
    let _ = t.quit();
}

#[test]
fn bad_metrics_and_rule_values_are_one_line_each_and_the_target_runs() {
    let dir = TempDir::new("views-bad");
    let exe = compile_c(&dir, "empty", common::EMPTY_C, &[]);
    let run = run_preloaded(
        &dir,
        &exe,
        &[],
        &[
            ("HEAPTUI_METRICS", "nowhere"),
            ("HEAPTUI_AUTO_SNAPSHOT", "sometimes"),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("HEAPTUI_METRICS=\"nowhere\"")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("HEAPTUI_AUTO_SNAPSHOT=\"sometimes\"")),
        "{lines:?}"
    );

    // A port already taken: one line naming it, and the program still runs.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let run = run_preloaded(&dir, &exe, &[], &[("HEAPTUI_METRICS", &addr)]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0].contains(&format!("HEAPTUI_METRICS={addr}")),
        "{lines:?}"
    );
}
