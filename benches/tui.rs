//! TUI benchmark (docs/reference.md §9, issue 5): from keypress to redrawn screen with 10k threads
//! and a group of 1M objects, and the fuzzy filter over 100k rows; with `-- --five-million`,
//! issue 14's 5M objects: from the kept snapshot to the first full Threads screen, and each
//! drill (frames, a group, a page of objects, an object).
//!
//! Drives the real state and drawing code in-process: a key goes through `App::on_key`, the
//! requests it makes are answered by the same code the offline source runs (so a key that needs
//! a new page pays for the page), and the frame is drawn to a 120×36 `TestBackend`. Prints the
//! median and the 90th percentile of each case.
//!
//!     cargo bench -p heaptui --bench tui
//!     cargo bench -p heaptui --bench tui -- --five-million
//!
//! The binary crate has no library, so the TUI's modules are compiled in here by path.

#![allow(dead_code, unused_imports)]
// Checked with `cfg(test)`, `app` brings its own `testing` as well as the one below.
#![allow(clippy::duplicate_mod)]

#[path = "../src/app/mod.rs"]
mod app;
#[path = "../src/figures.rs"]
mod figures;
#[path = "../src/offline/recording.rs"]
mod offline_recording;
/// The recording source (`source` answers recordings with it), where `source` looks for it.
mod offline {
    pub(crate) use super::offline_recording as recording;
}
#[path = "../src/size.rs"]
mod size;
#[path = "../src/source.rs"]
mod source;
#[path = "../src/app/testing.rs"]
mod testing;
#[path = "../src/ui/mod.rs"]
mod ui;

use std::time::{Duration, Instant};

use heaptui_protocol::ThreadState;
use heaptui_protocol::message::ThreadRow;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;

use app::table::{LocalTable, SortSpec, TableModel};
use testing::{HEIGHT, Harness, WIDTH, big_group_graph};

const THREADS: usize = 10_000;
const MEMBERS: usize = 1_000_000;
const RUNS: usize = 41;

fn draw(terminal: &mut Terminal<TestBackend>, h: &Harness) {
    terminal.draw(|f| ui::render(&h.app, f)).unwrap();
}

fn stats(name: &str, mut times: Vec<Duration>) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<58} median {:>8.3} ms   p90 {:>8.3} ms   ({} runs)",
        ms(times[times.len() / 2]),
        ms(times[times.len() * 9 / 10]),
        times.len()
    );
}

/// Times `RUNS` presses of `key` (after `setup` each time), each until the frame is drawn.
fn keypress(
    name: &str,
    h: &mut Harness,
    terminal: &mut Terminal<TestBackend>,
    key: KeyCode,
    setup: &dyn Fn(&mut Harness),
) {
    stats(name, presses(RUNS, h, terminal, key, setup));
}

/// The times of `runs` presses of `key`, in order (after `setup` each time), each until the
/// frame is drawn.
fn presses(
    runs: usize,
    h: &mut Harness,
    terminal: &mut Terminal<TestBackend>,
    key: KeyCode,
    setup: &dyn Fn(&mut Harness),
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        setup(h);
        draw(terminal, h);
        let start = Instant::now();
        h.key(key);
        draw(terminal, h);
        times.push(start.elapsed());
    }
    times
}

/// Threads, members and presses of the 5M-object case (issue 14's targets: the first full
/// Threads screen ≤ 1 s after the snapshot, every drill ≤ 100 ms).
const SCALE_THREADS: usize = 16;
const SCALE_MEMBERS: usize = 5_000_000;
const SCALE_RUNS: usize = 11;

/// A drill at 5M objects: the first press (nothing of it asked before) and the median and
/// 90th percentile of `SCALE_RUNS`.
fn drill(
    name: &str,
    h: &mut Harness,
    terminal: &mut Terminal<TestBackend>,
    key: KeyCode,
    setup: &dyn Fn(&mut Harness),
) {
    let mut times = presses(SCALE_RUNS, h, terminal, key, setup);
    let first = times[0];
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<58} first {:>8.3} ms   median {:>8.3} ms   p90 {:>8.3} ms   ({} runs)",
        ms(first),
        ms(times[times.len() / 2]),
        ms(times[times.len() * 9 / 10]),
        times.len()
    );
}

fn back_home(h: &mut Harness) {
    while h.app.stack.len() > 1 {
        h.key(KeyCode::Esc);
    }
}

/// 5M objects: from the kept snapshot to the first full Threads screen, then each drill down
/// to one object.
fn five_million_objects() {
    let start = Instant::now();
    let graph = big_group_graph(SCALE_THREADS, SCALE_MEMBERS);
    let objects = graph.object_count();
    let built = start.elapsed();
    let start = Instant::now();
    let mut h = Harness::offline_unconnected(graph);
    let kept = start.elapsed();
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap();
    let start = Instant::now();
    h.connect();
    draw(&mut terminal, &h);
    let first_screen = start.elapsed();
    assert_eq!(h.app.home().threads.len(), SCALE_THREADS);
    println!(
        "graph: {SCALE_THREADS} threads, a group of {} objects, {objects} objects in all; \
         built in {:.1} s, analysed and kept in {:.1} s",
        SCALE_MEMBERS + 1,
        built.as_secs_f64(),
        kept.as_secs_f64()
    );
    println!(
        "{:<58} once  {:>8.3} ms",
        "5M: first full Threads screen after the snapshot",
        first_screen.as_secs_f64() * 1000.0
    );
    drill(
        "5M: frames of a thread (Enter on Threads)",
        &mut h,
        &mut terminal,
        KeyCode::Enter,
        &back_home,
    );
    drill(
        "5M: the frame's 5M-object group (Enter on Frames)",
        &mut h,
        &mut terminal,
        KeyCode::Enter,
        &|h| {
            back_home(h);
            h.key(KeyCode::Enter);
        },
    );
    drill(
        "5M: the group's first page of objects (Enter on Members)",
        &mut h,
        &mut terminal,
        KeyCode::Enter,
        &|h| {
            back_home(h);
            h.keys(&[KeyCode::Enter, KeyCode::Enter]);
            h.app.act(app::action::Action::Top);
            h.key(KeyCode::Down);
        },
    );
    assert_eq!(h.app.stack.len(), 4, "the member list is open");
    drill(
        "5M: the next page of objects (PageDown)",
        &mut h,
        &mut terminal,
        KeyCode::PageDown,
        &|_| {},
    );
    drill(
        "5M: the last page of objects, a new order (End)",
        &mut h,
        &mut terminal,
        KeyCode::End,
        &|h| h.key(KeyCode::Char('2')),
    );
    drill(
        "5M: an object (Enter on Objects)",
        &mut h,
        &mut terminal,
        KeyCode::Enter,
        &|h| {
            if h.app.stack.len() == 5 {
                h.key(KeyCode::Esc);
            }
            h.key(KeyCode::Down);
        },
    );
    assert_eq!(h.app.stack.len(), 5, "the object is open");
}

fn main() {
    if std::env::args().any(|a| a == "--five-million") {
        five_million_objects();
        return;
    }
    let start = Instant::now();
    let graph = big_group_graph(THREADS, MEMBERS);
    let objects = graph.object_count();
    let mut h = Harness::new(graph);
    println!(
        "graph: {THREADS} threads, a group of {} objects, {objects} objects in all; \
         analysed and loaded in {:.1} s",
        MEMBERS + 1,
        start.elapsed().as_secs_f64()
    );
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap();
    assert_eq!(h.app.home().threads.len(), THREADS);

    keypress(
        "threads (10k): Down",
        &mut h,
        &mut terminal,
        KeyCode::Down,
        &|_| {},
    );
    keypress(
        "threads (10k): sort by proprietary (3)",
        &mut h,
        &mut terminal,
        KeyCode::Char('3'),
        &|_| {},
    );
    keypress(
        "threads (10k): filter keystroke (/w then 9)",
        &mut h,
        &mut terminal,
        KeyCode::Char('9'),
        &|h| {
            h.app.input = None;
            h.app.set_query("");
            h.key(KeyCode::Char('/'));
            h.key(KeyCode::Char('w'));
        },
    );
    h.key(KeyCode::Esc);

    // Home → frames → T1 (the 1M-object cache) → its members.
    h.keys(&[KeyCode::Enter, KeyCode::Enter]);
    keypress(
        "group (1M members): open the member list (Enter)",
        &mut h,
        &mut terminal,
        KeyCode::Enter,
        &|h| {
            if h.app.stack.len() == 4 {
                h.key(KeyCode::Esc);
            }
            h.app.act(app::action::Action::Top);
            h.key(KeyCode::Down);
        },
    );
    keypress(
        "objects (1M): Down within the loaded page",
        &mut h,
        &mut terminal,
        KeyCode::Down,
        &|_| {},
    );
    keypress(
        "objects (1M): PageDown, fetching the next page",
        &mut h,
        &mut terminal,
        KeyCode::PageDown,
        &|_| {},
    );
    keypress(
        "objects (1M): End, fetching the last page",
        &mut h,
        &mut terminal,
        KeyCode::End,
        // A new order (size, either way) each time, so the last page is never cached.
        &|h| h.key(KeyCode::Char('2')),
    );
    keypress(
        "objects (1M): sort by address (1), first page again",
        &mut h,
        &mut terminal,
        KeyCode::Char('1'),
        &|_| {},
    );

    // The filter alone over 100k rows: each keystroke re-filters every row.
    let rows: Vec<ThreadRow> = (0..100_000u32)
        .map(|i| ThreadRow {
            tid: i + 1,
            name: format!(
                "worker-{i}-{}",
                ["io", "cpu", "report", "cache"][i as usize % 4]
            ),
            state: ThreadState::Stopped,
            proprietary: u64::from(i) * 37 % 100_000,
            shared: u64::from(i) * 11 % 50_000,
            total: 0,
            frames: 4,
        })
        .collect();
    let mut table = LocalTable::new(SortSpec {
        column: 4,
        descending: true,
    });
    table.set_rows(rows, 100_000);
    for query in ["r", "rep", "w12r"] {
        let mut times = Vec::with_capacity(RUNS);
        let mut kept = 0;
        for _ in 0..RUNS {
            table.set_query("");
            let start = Instant::now();
            table.set_query(query);
            times.push(start.elapsed());
            kept = table.len();
        }
        stats(
            &format!("filter 100k rows by {query:?} ({kept} kept)"),
            times,
        );
    }
}
