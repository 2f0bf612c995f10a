//! `HEAPTUI_RECORD` and the live `Units` answer under the real preload (issue 7): a C program
//! with two libraries built here (main → func_0 (exe) → func_a0 (liba.so) → func_a1 (liba.so)
//! → func_b0 (libb.so) → malloc) runs the issue's vector; its recording replays to the
//! issue's unit figures, the live answer over the protocol equals the replay for every unit
//! configuration, and a target killed mid-run leaves a recording that replays. A program whose
//! main allocates in its own frame has `main` as the unit of those blocks, live and replayed.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, agent_path, without_inherited_heaptui_env};
use heaptui_agent::config::Listen;
use heaptui_agent::server::token;
use heaptui_analysis::recording::{Replay, replay};
use heaptui_analysis::views::TrackerConfig;
use heaptui_analysis::views::units::UnitFigures;
use heaptui_protocol::answer::unit_config;
use heaptui_protocol::handshake::client_handshake;
use heaptui_protocol::views::{
    UnitCharge, UnitGranularity, UnitKey, UnitPage, UnitPosition, UnitQuery, UnitRow,
};
use heaptui_protocol::{
    ErrorKind, Hello, MAX_FRAME_LEN, Page, Push, Request, RequestBody, RequestId, Response,
    ServerMessage, Sort, recv, send,
};

const LIBA: &str = include_str!("targets/record_liba.c");
const LIBB: &str = include_str!("targets/record_libb.c");
const MAIN: &str = include_str!("targets/record_units.c");
const MAIN_THREAD: &str = include_str!("targets/record_main.c");

fn gcc(args: &[&str], what: &str) {
    let out = Command::new("gcc")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc for {what}: {e}"));
    assert!(
        out.status.success(),
        "compiling {what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds libb.so, liba.so (linked to libb) and the program (linked to both, rpath to the
/// directory), with frame pointers and no sibling calls, so every frame of the issue's stack
/// is on the allocation stack.
fn build(dir: &TempDir) -> PathBuf {
    let d = dir.path();
    let flags = [
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fno-optimize-sibling-calls",
    ];
    for (name, src) in [
        ("record_libb", LIBB),
        ("record_liba", LIBA),
        ("units", MAIN),
    ] {
        std::fs::write(d.join(format!("{name}.c")), src).unwrap();
    }
    let s = |p: &str| d.join(p).to_string_lossy().into_owned();
    let mut args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    args.extend(["-shared", "-fPIC", "-o"].map(String::from));
    let libb = [args.clone(), vec![s("libb.so"), s("record_libb.c")]].concat();
    gcc(
        &libb.iter().map(String::as_str).collect::<Vec<_>>(),
        "libb.so",
    );
    let liba = [
        args,
        vec![
            s("liba.so"),
            s("record_liba.c"),
            format!("-L{}", s("")),
            "-lb".into(),
        ],
    ]
    .concat();
    gcc(
        &liba.iter().map(String::as_str).collect::<Vec<_>>(),
        "liba.so",
    );
    let mut exe: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    exe.extend([
        "-o".into(),
        s("units"),
        s("units.c"),
        format!("-L{}", s("")),
        "-la".into(),
        "-lb".into(),
        format!("-Wl,-rpath,{}", s("")),
    ]);
    gcc(&exe.iter().map(String::as_str).collect::<Vec<_>>(), "units");
    d.join("units")
}

/// The program running under the agent, stdin held open (closing it ends the program).
struct Target {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Target {
    fn start(dir: &TempDir, exe: &Path, args: &[&str], record: Option<&Path>) -> Target {
        let socket = dir.path().join("agent.sock");
        let log = dir.path().join("agent.log");
        let mut cmd = Command::new(exe);
        without_inherited_heaptui_env(&mut cmd)
            .args(args)
            .env("LD_PRELOAD", agent_path())
            .env("HEAPTUI_LOG", &log)
            .env("HEAPTUI_LISTEN", format!("unix:{}", socket.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(path) = record {
            cmd.env("HEAPTUI_RECORD", path);
        }
        let child = cmd.spawn().expect("start the target");
        Target { child, socket, log }
    }

    fn wait_ready(&mut self) {
        let out = self.child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "agent log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Client {
    stream: UnixStream,
    next: u64,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let listen = Listen::Unix(socket.to_path_buf());
        let token_path = token::directory().join(token::file_name(&listen));
        let deadline = Instant::now() + Duration::from_secs(30);
        let token = loop {
            match std::fs::read_to_string(&token_path) {
                Ok(t) => break t,
                Err(e) if Instant::now() > deadline => {
                    panic!("token file {}: {e}", token_path.display())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let mut stream = UnixStream::connect(socket).expect("connect to the agent");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        client_handshake(&mut stream, &Hello::new(token.trim(), "record-test")).expect("handshake");
        Client { stream, next: 1 }
    }

    fn request(&mut self, body: RequestBody) -> Response {
        let id = RequestId(self.next);
        self.next += 1;
        send(&mut self.stream, &Request { id, body }).expect("send");
        loop {
            match recv(&mut self.stream, MAX_FRAME_LEN).expect("answer") {
                ServerMessage::Response { id: got, body } if got == id => return *body,
                ServerMessage::Push(Push::Counters(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    fn units(&mut self, query: UnitQuery) -> UnitPage {
        let r = self.request(RequestBody::Units {
            query,
            sort: Sort::asc(UnitKey::Name),
            page: Page::FIRST,
        });
        match r {
            Response::Units(p) => p,
            other => panic!("Units {query:?}: {other:?}"),
        }
    }
}

fn queries() -> Vec<UnitQuery> {
    let mut all = Vec::new();
    for granularity in [
        UnitGranularity::Library,
        UnitGranularity::Function,
        UnitGranularity::Thread,
    ] {
        for position in [
            UnitPosition::Outermost,
            UnitPosition::Innermost,
            UnitPosition::Inclusive,
        ] {
            for charge in [UnitCharge::Allocator, UnitCharge::Freer] {
                all.push(UnitQuery {
                    granularity,
                    position,
                    charge,
                });
            }
        }
    }
    all
}

fn replayed(bytes: &[u8], query: UnitQuery) -> Replay {
    replay(
        bytes,
        TrackerConfig {
            units: unit_config(query),
            ..TrackerConfig::default()
        },
    )
    .expect("the recording replays")
}

fn row(f: &UnitFigures) -> UnitRow {
    UnitRow {
        name: f.name.clone(),
        live: f.live,
        min: f.min,
        max: f.max,
        malloc: f.malloc,
        realloc: f.realloc,
        free: f.free,
        memalign: f.memalign,
    }
}

/// (live, min, max, malloc, realloc, free) of a unit.
fn figures(r: &Replay, name: &str) -> (i64, i64, i64, u64, u64, u64) {
    let f = r
        .tracker
        .units()
        .get(name)
        .unwrap_or_else(|| panic!("no unit {name}: {:?}", r.tracker.units().figures()));
    (f.live, f.min, f.max, f.malloc, f.realloc, f.free)
}

fn names(r: &Replay) -> Vec<String> {
    r.tracker
        .units()
        .figures()
        .iter()
        .map(|f| f.name.clone())
        .collect()
}

#[test]
fn the_recording_replays_to_the_issue_units_and_equals_the_live_answer() {
    let dir = TempDir::new("record-units");
    let exe = build(&dir);
    let file = dir.path().join("run.hrec");
    let mut target = Target::start(&dir, &exe, &[], Some(&file));
    target.wait_ready();
    let mut client = Client::connect(&target.socket);
    // A snapshot boundary goes into the recording too.
    assert!(matches!(
        client.request(RequestBody::TakeSnapshot),
        Response::Snapshot(_)
    ));
    let live: Vec<(UnitQuery, UnitPage)> = queries()
        .into_iter()
        .map(|q| (q, client.units(q)))
        .collect();
    // Killed, not ended: the file must hold everything the answers counted.
    target.kill();
    let bytes = std::fs::read(&file).unwrap();

    let q = |granularity, position, charge| UnitQuery {
        granularity,
        position,
        charge,
    };
    use UnitCharge::{Allocator, Freer};
    use UnitGranularity::{Function, Library};
    use UnitPosition::{Inclusive, Innermost, Outermost};

    // Innermost library: malloc 100 in liba, malloc 50 in libb, the first freed from libb,
    // the second reallocated to 80 in libb.
    let r = replayed(&bytes, q(Library, Innermost, Freer));
    assert_eq!(r.tracker.lost(), 0);
    assert_eq!(figures(&r, "liba.so"), (100, 0, 100, 1, 0, 0));
    assert_eq!(figures(&r, "libb.so"), (-20, -50, 50, 1, 1, 1));
    // free(NULL) counts a free (from the program's own frame) and changes no size; the free
    // and realloc of blocks the agent never saw are reported, totals unchanged.
    assert_eq!(figures(&r, "units"), (0, 0, 0, 0, 0, 1));
    assert_eq!(r.tracker.units().unknown().frees, 1);
    assert_eq!(r.tracker.units().unknown().reallocs, 1);
    let r = replayed(&bytes, q(Library, Innermost, Allocator));
    assert_eq!(figures(&r, "liba.so").0, 0);
    assert_eq!(figures(&r, "libb.so").0, 80);
    // The unit of the issue's stack: outermost liba / func_a0, innermost libb / func_b0,
    // inclusive both libraries.
    let r = replayed(&bytes, q(Function, Outermost, Allocator));
    assert_eq!(figures(&r, "func_a0 (liba.so)").3, 2, "{:?}", names(&r));
    assert!(!names(&r).iter().any(|n| n.contains("func_b0")));
    let r = replayed(&bytes, q(Function, Innermost, Allocator));
    assert_eq!(figures(&r, "func_b0 (libb.so)").3, 1, "{:?}", names(&r));
    assert_eq!(figures(&r, "func_a0 (liba.so)").3, 1);
    let r = replayed(&bytes, q(Library, Outermost, Allocator));
    assert_eq!(figures(&r, "liba.so").3, 2);
    let r = replayed(&bytes, q(Library, Inclusive, Allocator));
    assert_eq!(figures(&r, "liba.so").3, 2);
    assert_eq!(figures(&r, "libb.so").3, 1);
    let r = replayed(&bytes, q(Function, Inclusive, Allocator));
    for f in [
        "func_a0 (liba.so)",
        "func_a1 (liba.so)",
        "func_b0 (libb.so)",
    ] {
        assert!(names(&r).iter().any(|n| n == f), "{f} in {:?}", names(&r));
    }

    // The rest of the recording: the program's module first, its main thread named, one
    // snapshot boundary, counters.
    assert_eq!(r.tracker.modules().next(), Some("units"));
    let pid = target.child.id();
    assert_eq!(r.tracker.thread_name(pid), Some("units"));
    assert_eq!(r.tracker.boundaries().len(), 1);
    assert!(r.tracker.recorded_counters().is_some());

    // Live and replay of the same run: the same rows for every configuration.
    for (query, page) in &live {
        let r = replayed(&bytes, *query);
        let mut rows: Vec<UnitRow> = r.tracker.units().figures().iter().map(row).collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(page.rows, rows, "{query:?}");
        assert_eq!(page.page.total as usize, rows.len());
        assert_eq!(page.query, *query);
        assert_eq!(
            (page.unknown_frees, page.unknown_reallocs),
            (
                r.tracker.units().unknown().frees,
                r.tracker.units().unknown().reallocs
            ),
            "{query:?}"
        );
    }
}

/// The demo's case: `main` allocating in its own frame (its stack is `main` and the C
/// runtime's frames above it) is the unit `main`, outermost and innermost, never `?`; next to
/// it a helper's and a worker thread's blocks.
#[test]
fn the_main_threads_own_allocations_are_main_not_unknown() {
    let dir = TempDir::new("record-main");
    let src = dir.path().join("mainunits.c");
    std::fs::write(&src, MAIN_THREAD).unwrap();
    let exe = dir.path().join("mainunits");
    gcc(
        &[
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-pthread",
            "-o",
            &exe.to_string_lossy(),
            &src.to_string_lossy(),
        ],
        "mainunits",
    );
    let file = dir.path().join("main.hrec");
    let mut target = Target::start(&dir, &exe, &[], Some(&file));
    target.wait_ready();
    let mut client = Client::connect(&target.socket);
    let q = |granularity, position| UnitQuery {
        granularity,
        position,
        charge: UnitCharge::Allocator,
    };
    use UnitGranularity::{Function, Library};
    use UnitPosition::{Innermost, Outermost};
    let asked = [
        q(Function, Outermost),
        q(Function, Innermost),
        q(Library, Outermost),
        q(Library, Innermost),
    ];
    let live: Vec<UnitPage> = asked.iter().map(|&query| client.units(query)).collect();
    target.kill();
    let bytes = std::fs::read(&file).unwrap();

    // (live, malloc, free): 40 blocks of 1001 bytes, 4 of them freed, in main's own frame;
    // 12 of 1002 through helper; 9 of 1003 in the worker's start routine.
    let main = (36 * 1001, 40, 4);
    let helper = (12 * 1002, 12, 0);
    let worker = (9 * 1003, 9, 0);
    let of = |rows: &[UnitRow], name: &str| {
        let r = rows
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no unit {name} in {rows:#?}"));
        (r.live, r.malloc, r.free)
    };
    for (query, page) in asked.iter().zip(&live) {
        let r = replayed(&bytes, *query);
        assert_eq!(r.tracker.lost(), 0);
        let mut rows: Vec<UnitRow> = r.tracker.units().figures().iter().map(row).collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(page.rows, rows, "live and replay of {query:?}");
        if query.granularity == Function {
            // main's own blocks, and the worker's TLS vector: pthread_create allocates it for
            // main, and glibc's thread creation is an allocator wrapper (docs/reference.md §3
            // "Labels"), so it is main's too. Its size depends on the loaded modules.
            let (live, malloc, free) = of(&rows, "main (mainunits)");
            assert_eq!((malloc, free), (main.1 + 1, main.2), "{query:?}");
            assert!(
                (main.0 + 16..=main.0 + 1024).contains(&live),
                "{query:?}: {live}"
            );
            assert_eq!(of(&rows, "helper (mainunits)"), helper, "{query:?}");
            assert_eq!(of(&rows, "worker (mainunits)"), worker, "{query:?}");
        } else {
            // Every block above is the program's: its unit holds at least all of them.
            let (live, malloc, free) = of(&rows, "mainunits");
            assert!(live >= main.0 + helper.0 + worker.0, "{query:?}: {rows:#?}");
            assert!(
                malloc >= main.1 + helper.1 + worker.1,
                "{query:?}: {rows:#?}"
            );
            assert!(free >= main.2, "{query:?}: {rows:#?}");
        }
        // Whatever lands in `?` (the C runtime's own calls) holds none of those blocks.
        if let Some(unknown) = rows.iter().find(|r| r.name == "?") {
            assert!(unknown.live < 1001, "{query:?}: {unknown:?}");
        }
    }
}

#[test]
fn without_a_recording_units_are_refused_naming_the_variable() {
    let dir = TempDir::new("record-off");
    let exe = build(&dir);
    let mut target = Target::start(&dir, &exe, &[], None);
    target.wait_ready();
    let mut client = Client::connect(&target.socket);
    match client.request(RequestBody::Units {
        query: UnitQuery::default(),
        sort: Sort::desc(UnitKey::Live),
        page: Page::FIRST,
    }) {
        Response::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Refused);
            assert!(e.message.contains("HEAPTUI_RECORD=FILE"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_target_killed_mid_run_leaves_a_recording_that_replays() {
    let dir = TempDir::new("record-kill");
    let exe = build(&dir);
    let file = dir.path().join("killed.hrec");
    let mut target = Target::start(&dir, &exe, &["loop"], Some(&file));
    // Let it write a good part of a megabyte, then kill it mid-stream.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&file).map_or(0, |m| m.len()) < 600_000 {
        assert!(Instant::now() < deadline, "the recording does not grow");
        std::thread::sleep(Duration::from_millis(20));
    }
    target.kill();
    let bytes = std::fs::read(&file).unwrap();
    let r = replayed(
        &bytes,
        UnitQuery {
            granularity: UnitGranularity::Library,
            position: UnitPosition::Innermost,
            charge: UnitCharge::Allocator,
        },
    );
    assert!(r.events > 10_000, "only {} events", r.events);
    let b = r.tracker.units().get("libb.so").expect("libb unit");
    assert!(b.malloc > 1000 && b.free > 1000 && b.realloc > 100, "{b:?}");
    if r.tracker.lost() == 0 {
        // Complete: at most 64 blocks of the loop's ring are live at any time, plus the C
        // runtime's few, and every free names a recorded block.
        let c = r.tracker.counters().counters();
        assert!(c.live_blocks <= 64 + 8, "{c:?}");
        assert_eq!(r.tracker.units().unknown().frees, 0);
    }
    // A cut anywhere in the last records still replays (the reader ignores the cut tail).
    for cut in [1, 3, 7] {
        let shorter = &bytes[..bytes.len() - cut];
        assert!(replay(shorter, TrackerConfig::default()).is_ok());
    }
}
