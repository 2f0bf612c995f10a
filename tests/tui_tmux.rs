//! The TUI in a real terminal: `heaptui open` of the patent fixture runs in a detached tmux
//! session of 120×36 (every screen also at 80×24 and 160×45, as insta snapshots); keys go in with `send-keys`, the screen comes back with `capture-pane`.
//! Every wait polls the pane against a deadline — no fixed sleeps.
//!
//! tmux is required (CI installs it); without it these tests fail and say so.

mod tmux_common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tmux_common::{DEADLINE, PROMPT, Tmux};

impl Tmux {
    fn open_fixture(&self) {
        let fixture =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/patent-example.json");
        self.literal(&format!(
            "{} open {}",
            env!("CARGO_BIN_EXE_heaptui"),
            fixture.display()
        ));
        self.keys(&["Enter"]);
        self.wait_for("the thread ranking", |s| {
            s.contains("Threads by total") && s.contains("thread-n")
        });
    }
}

/// The line of the table that mentions `name`.
fn row<'a>(screen: &'a str, name: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(name) && l.starts_with('│'))
        .unwrap_or_else(|| panic!("no row for {name} in\n{screen}"))
}

/// The order in which the names appear on the screen.
fn order(screen: &str, names: &[&str]) -> Vec<String> {
    let mut found: Vec<(usize, String)> = names
        .iter()
        .filter_map(|n| screen.find(&format!(" {n} ")).map(|at| (at, n.to_string())))
        .collect();
    found.sort();
    found.into_iter().map(|(_, n)| n).collect()
}

const THREADS: [&str; 4] = ["thread-1", "thread-2", "thread-3", "thread-n"];

#[test]
fn home_ranks_by_total_and_drills_to_an_object_and_back() {
    let t = Tmux::start();
    t.open_fixture();
    let s = t.screen();
    assert_eq!(
        order(&s, &THREADS),
        ["thread-1", "thread-3", "thread-2", "thread-n"]
    );
    let first = row(&s, "thread-1");
    assert!(first.contains("264 B") && first.contains('▶'), "{first}");

    t.keys(&["Enter"]);
    t.wait_for("the frames of thread 1", |s| {
        s.contains("Frames of thread 1") && s.contains("Class1.methodB")
    });
    t.keys(&["Enter"]);
    t.wait_for("group F1", |s| {
        s.contains("Group F1") && s.contains("Class1.Session")
    });
    t.keys(&["Down", "Enter"]);
    t.wait_for("the objects of F1", |s| {
        s.contains("Objects of group F1") && s.contains("rows 1–1 of 1")
    });
    t.keys(&["Enter"]);
    let s = t.wait_for("the object", |s| s.contains("Object #"));
    assert!(s.contains("frame-shared within thread 1"), "{s}");
    assert!(
        s.contains("held by  frame #0 Class1.methodB of thread 1"),
        "{s}"
    );

    t.keys(&["Escape"]);
    t.wait_for("back to the objects", |s| s.contains("Objects of group F1"));
    t.keys(&["Escape"]);
    let s = t.wait_for("back to the group", |s| s.contains("Group F1"));
    assert!(
        row(&s, "members").contains('▶'),
        "the members line stays selected:\n{s}"
    );
    // One Escape at a time: two in one write read as Alt+Escape.
    t.keys(&["Escape"]);
    t.wait_for("back to the frames", |s| s.contains("Frames of thread 1"));
    t.keys(&["Escape"]);
    let s = t.wait_for("back home", |s| s.contains("Threads by total"));
    assert!(row(&s, "thread-1").contains('▶'));
}

#[test]
fn filter_and_sort() {
    let t = Tmux::start();
    t.open_fixture();
    t.keys(&["/"]);
    t.literal("thn");
    let s = t.wait_for("the filter to narrow", |s| {
        s.contains("rows 1–1 of 1 (of 4)")
    });
    assert_eq!(order(&s, &THREADS), ["thread-n"]);
    assert!(s.contains("filter /thn"), "{s}");
    t.keys(&["Escape"]);
    t.wait_for("the filter to clear", |s| order(s, &THREADS).len() == 4);

    t.keys(&["3"]);
    let s = t.wait_for("sorted by proprietary", |s| s.contains("PROPRIETARY▼"));
    assert_eq!(
        order(&s, &THREADS),
        ["thread-1", "thread-2", "thread-3", "thread-n"]
    );
    t.keys(&["3"]);
    let s = t.wait_for("the order reversed", |s| s.contains("PROPRIETARY▲"));
    assert_eq!(
        order(&s, &THREADS),
        ["thread-n", "thread-3", "thread-2", "thread-1"]
    );
}

#[test]
fn release_of_two_marked_threads() {
    let t = Tmux::start();
    t.open_fixture();
    t.keys(&["Tab"]);
    t.wait_for("the release ranking", |s| s.contains("RELEASE ALONE"));
    t.keys(&["Space", "Down", "Space"]);
    let s = t.wait_for("the release of {1, 2}", |s| {
        s.contains("Ending threads {1, 2} frees 300 B")
    });
    assert!(row(&s, "thread-1").contains("[x]"));
    assert!(row(&s, "thread-2").contains("[x]"));
    assert!(row(&s, "thread-3").contains("[ ]"));
}

#[test]
fn quitting_gives_the_terminal_back() {
    let t = Tmux::start();
    t.open_fixture();
    let alternate = |t: &Tmux| {
        String::from_utf8_lossy(
            &t.run(&["display-message", "-p", "-t", "0", "#{alternate_on}"])
                .stdout,
        )
        .trim()
        .to_string()
    };
    assert_eq!(alternate(&t), "1", "the TUI runs on the alternate screen");
    t.keys(&["q"]);
    let s = t.wait_for("the shell again", |s| {
        !s.contains("Threads by total") && s.matches(PROMPT.trim_end()).count() >= 2
    });
    assert!(
        s.contains("open "),
        "the command line is back on screen:\n{s}"
    );
    assert_eq!(alternate(&t), "0", "no alternate screen left");
    // The shell reads keys normally again: no raw mode, no mouse reporting left on.
    t.literal("echo still-here");
    t.keys(&["Enter"]);
    t.wait_for("the shell to answer", |s| s.contains("\nstill-here"));
}

/// A TCP port on 127.0.0.1 that nothing holds now, below the ephemeral range
/// (`net.ipv4.ip_local_port_range` starts at 32768 by default): a port in that range can be
/// handed to any outgoing connection on the machine, and the agent would then fall back to its
/// per-pid socket. Starts at a place that depends on the test process, so parallel runs differ.
fn free_port_below_the_ephemeral_range() -> u16 {
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    let start = std::process::id() % COUNT;
    (0..COUNT)
        .map(|i| (FIRST + (start + i) % COUNT) as u16)
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("no free TCP port on 127.0.0.1 between 20000 and 31999")
}

/// The demo workload compiled for this test run, started under the real agent.
fn demo_workload() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("heaptui-tui-tmux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("workload");
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("demo/workload.c"))
        .status()
        .expect("gcc is required to build the demo workload");
    assert!(status.success(), "compiling demo/workload.c failed");
    exe
}

#[test]
fn attach_to_a_live_agent_that_is_killed_and_restarted() {
    let t = Tmux::start();
    let heaptui = env!("CARGO_BIN_EXE_heaptui");
    let agent = Command::new(heaptui).arg("agent-path").output().unwrap();
    assert!(agent.status.success());
    let agent = String::from_utf8(agent.stdout).unwrap().trim().to_string();
    let workload = demo_workload();
    // The restarted target must take the same address for the TUI to find it again, so the
    // port is fixed for the test: one proved free, below the kernel's ephemeral range, where
    // no other test's connection can be given it while the target runs.
    let port = free_port_below_the_ephemeral_range();
    let log = workload.with_file_name("agent.log");
    let target = format!(
        "env LD_PRELOAD={agent} HEAPTUI_LISTEN=127.0.0.1:{port} HEAPTUI_LOG={} {}",
        log.display(),
        workload.display()
    );
    t.run(&["new-window", "-d", "-t", "1", &target]);
    // The agent listens shortly after the target starts; attach when it does.
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < DEADLINE,
            "the agent never listened on {port}; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t.literal(&format!("{heaptui} attach 127.0.0.1:{port}"));
    t.keys(&["Enter"]);
    let s = t.wait_for("the live ranking", |s| {
        s.contains("live (agent") && s.contains("report-builder")
    });
    assert!(s.contains("worker-1"), "{s}");

    t.run(&["kill-window", "-t", "1"]);
    t.wait_for("the disconnect banner", |s| {
        s.contains("disconnected:") && s.contains("STALE") && s.contains("report-builder")
    });

    t.run(&["new-window", "-d", "-t", "1", &target]);
    t.wait_for("the reattached agent", |s| {
        s.contains("live (agent") && !s.contains("disconnected:") && s.contains("report-builder")
    });
    t.keys(&["q"]);
    t.wait_for("the shell again", |s| {
        s.matches(PROMPT.trim_end()).count() >= 2
    });
    t.run(&["kill-window", "-t", "1"]);
}

/// `heaptui demo`, exactly as a newcomer runs it: the bundled workload starts under the
/// embedded agent, the ranking shows its threads, a thread drills to its frames, and quitting
/// stops the workload and gives the shell back.
#[test]
fn demo_runs_the_workload_under_the_agent_and_stops_it_on_quit() {
    let t = Tmux::start();
    // A cache of its own, so the demo's unpacked files and logs are this test's.
    let cache = std::env::temp_dir().join(format!("heaptui-demo-test-{}", std::process::id()));
    t.literal(&format!(
        "XDG_CACHE_HOME={} {} demo",
        cache.display(),
        env!("CARGO_BIN_EXE_heaptui")
    ));
    t.keys(&["Enter"]);
    // Settled: a capture of the pane can catch the frame half drawn (rows below worker-2
    // missing, seen in CI).
    let s = t.wait_settled("the demo's ranking", |s| {
        s.contains("· live") && s.contains("report-builder") && s.contains("worker-4")
    });
    for name in [
        "worker-1",
        "worker-2",
        "worker-3",
        "log-shipper",
        "demo-main",
    ] {
        assert!(s.contains(name), "{name} missing from the ranking:\n{s}");
    }
    // The first snapshot is taken once every thread runs: the runaway report thread (8 MiB
    // by then) ranks first. The workers' connection buffers grow with their index, so by
    // total (the default order) worker-4 ranks above worker-1.
    let ranked = order(
        &s,
        &[
            "report-builder",
            "worker-4",
            "worker-3",
            "worker-2",
            "worker-1",
        ],
    );
    assert_eq!(
        ranked,
        [
            "report-builder",
            "worker-4",
            "worker-3",
            "worker-2",
            "worker-1"
        ],
        "{s}"
    );
    assert!(s.contains("snapshot #1"), "the first snapshot:\n{s}");

    // Filter down to one worker and open its frames: the request path of the demo.
    t.literal("/worker-2");
    t.keys(&["Enter"]);
    t.wait_for("the filtered ranking", |s| {
        s.contains("worker-2") && !s.contains("worker-3")
    });
    t.keys(&["Enter"]);
    t.wait_for("worker-2's frames", |s| {
        s.contains("Frames of thread") && s.contains("worker_main")
    });

    let demo_pids = || {
        let out = Command::new("pgrep")
            .args(["-f", &format!("{}/heaptui/heaptui-demo", cache.display())])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(!demo_pids().is_empty(), "the demo workload is not running");
    t.keys(&["q"]);
    t.wait_for("the shell again with the demo's exit line", |s| {
        s.contains("the demo ended") && s.matches(PROMPT.trim_end()).count() >= 2
    });
    assert!(demo_pids().is_empty(), "the demo workload outlived the TUI");
    let _ = std::fs::remove_dir_all(&cache);
}

/// `heaptui demo` records its workload (`HEAPTUI_RECORD`), so `u` shows the allocation units
/// of the demo's own code rather than the agent's refusal; `f` and `p` turn them into the
/// workload's functions. Quitting names the recording, which is there to replay.
#[test]
fn demo_units_show_the_workload_code() {
    let t = Tmux::start();
    let dir = std::env::temp_dir().join(format!("heaptui-units-tmux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Its own cache and runtime directory: the unpacked demo, its log and its recording are
    // this test's.
    t.literal(&format!(
        "XDG_CACHE_HOME={0}/cache XDG_RUNTIME_DIR={0}/run {1} demo",
        dir.display(),
        env!("CARGO_BIN_EXE_heaptui")
    ));
    t.keys(&["Enter"]);
    t.wait_within("the demo's ranking", Duration::from_secs(30), |s| {
        s.contains("· live") && s.contains("report-builder")
    });

    t.keys(&["u"]);
    let s = t.wait_for("the units by library", |s| {
        s.contains("Allocation units · library · outermost")
            && s.lines()
                .any(|l| l.starts_with('│') && l.contains(" heaptui-demo-"))
    });
    assert!(
        !s.contains("HEAPTUI_RECORD"),
        "the units were refused:\n{s}"
    );
    // The demo program's row counts real calls: its malloc column is not zero.
    let program = row(&s, " heaptui-demo-");
    // The figure right-aligned under the MALLOC header (the columns after it may give way
    // to the unit's name).
    let header: Vec<char> = s
        .lines()
        .find(|l| l.contains("MALLOC"))
        .unwrap_or_else(|| panic!("no MALLOC column in\n{s}"))
        .chars()
        .collect();
    let end = (0..header.len())
        .find(|&i| header[i..].starts_with(&['M', 'A', 'L', 'L', 'O', 'C']))
        .unwrap()
        + "MALLOC".len();
    let mallocs: u64 = program
        .chars()
        .take(end)
        .collect::<String>()
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no MALLOC figure in {program}"));
    assert!(mallocs > 0, "{program}");

    // Per function, innermost: the functions of demo/workload.c that call malloc.
    t.keys(&["f"]);
    t.wait_for("the units by function", |s| {
        s.contains("Allocation units · function · outermost") && s.contains("worker_main (")
    });
    t.keys(&["p"]);
    // `main`'s start-up helpers are inlined into it, and so is `xmalloc`: the inline frames
    // name them (docs/reference.md §3 "Labels"), not `main` or `?`.
    let functions = [
        "build_cache (",
        "load_config (",
        "append_rows (",
        "parse_request (",
        "ship_batch (",
    ];
    // Every row drawn: tmux can be read while the terminal is half redrawn (one loaded run
    // caught the new title over the first seven rows, without load_config's).
    let s = t.wait_for("the innermost functions", |s| {
        s.contains("Allocation units · function · innermost")
            && functions.iter().all(|f| s.contains(f))
    });
    for function in functions {
        assert!(
            row(&s, function).contains("heaptui-demo-"),
            "{function}:\n{s}"
        );
    }
    assert!(!s.contains("HEAPTUI_RECORD"), "{s}");

    t.keys(&["q"]);
    let s = t.wait_within("the demo's closing line", Duration::from_secs(20), |s| {
        s.contains("the demo ended") && s.matches(PROMPT.trim_end()).count() >= 2
    });
    // The closing line names the recording (tmux wraps it at 120 columns).
    let closing: String = s.lines().collect();
    let record = closing
        .split("its recording in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no recording named in:\n{s}"))
        .to_string();
    assert!(
        record.starts_with(&format!("{}/run/heaptui/demo-", dir.display()))
            && record.ends_with(".rec"),
        "{record}"
    );
    let size = std::fs::metadata(&record)
        .unwrap_or_else(|e| panic!("{record}: {e}"))
        .len();
    assert!(size > 0, "{record} is empty");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The demo workload's `demo: ready` line (which `heaptui demo` waits for before its first
/// snapshot) comes only once every thread is up and named: at that moment /proc already
/// lists all seven by name.
#[test]
fn demo_workload_says_ready_once_every_thread_is_up() {
    use std::io::{BufRead, BufReader};
    let workload = demo_workload();
    for _ in 0..5 {
        let mut child = Command::new(&workload)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", child.id()))
            .unwrap()
            .map(|t| {
                std::fs::read_to_string(t.unwrap().path().join("comm"))
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .collect();
        let _ = terminate(child.id());
        let status = child.wait().unwrap();
        names.sort();
        assert!(line.starts_with("demo: ready"), "{line}");
        assert_eq!(
            names,
            [
                "demo-main",
                "log-shipper",
                "report-builder",
                "worker-1",
                "worker-2",
                "worker-3",
                "worker-4"
            ]
        );
        assert!(
            status.success(),
            "SIGTERM ends the workload cleanly: {status}"
        );
    }
}

/// SIGTERM through kill(1): the test crate has no libc binding of its own.
fn terminate(pid: u32) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
}

/// `heaptui run` in a terminal: the TUI on the program, the socket in the header; `q` stops
/// the program, exits 0 and names the log file that holds the program's output.
#[test]
fn run_in_a_terminal_quits_with_0_and_names_the_log() {
    let t = Tmux::start();
    let dir = std::env::temp_dir().join(format!("heaptui-run-tmux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("p.pl");
    std::fs::write(
        &program,
        "$| = 1; print \"hello from the program\\n\"; sleep 1000;\n",
    )
    .unwrap();
    t.literal(&format!(
        "XDG_RUNTIME_DIR={} {} run -- perl {}; echo status=$?",
        dir.display(),
        env!("CARGO_BIN_EXE_heaptui"),
        program.display()
    ));
    t.keys(&["Enter"]);
    let s = t.wait_for("the program's ranking", |s| {
        s.contains("· live") && s.contains("Threads by total") && s.contains("rows 1–1 of 1")
    });
    assert!(
        s.lines().next().unwrap().contains(".sock"),
        "the socket in the header:\n{s}"
    );
    t.keys(&["q"]);
    // The typed command line says `status=$?` too: the answer is a line of its own.
    let s = t.wait_for("the shell again", |s| {
        s.lines().any(|l| l.starts_with("status="))
    });
    assert!(s.lines().any(|l| l == "status=0"), "{s}");
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let log = flat
        .split_once("its output is in ")
        .unwrap_or_else(|| panic!("no log named:\n{s}"))
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let output = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{log}: {e}\n{s}"));
    assert!(output.contains("hello from the program"), "{output}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every core screen of the patent fixture and the help's two pages in real terminals of
/// 80×24 (the smallest the TUI is made for) and 160×45: no header line or column header cut,
/// and each screen is its accepted insta snapshot. Each screen is reached from a fresh start,
/// a key at a time, each waited for.
#[test]
fn every_screen_at_80x24_and_160x45() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/patent-example.json");
    let screens: &[(&str, &[(&str, &str)])] = &[
        ("threads", &[]),
        ("release", &[("Tab", "RELEASE ALONE")]),
        (
            "sites",
            &[("Tab", "RELEASE ALONE"), ("Tab", "Allocation sites by")],
        ),
        ("frames", &[("Enter", "Frames of thread 1")]),
        (
            "group",
            &[("Enter", "Frames of thread 1"), ("Enter", "Group F1")],
        ),
        (
            "objects",
            &[
                ("Enter", "Frames of thread 1"),
                ("Enter", "Group F1"),
                ("Down", "▶ members"),
                ("Enter", "Objects of group F1"),
            ],
        ),
        (
            "object",
            &[
                ("Enter", "Frames of thread 1"),
                ("Enter", "Group F1"),
                ("Down", "▶ members"),
                ("Enter", "Objects of group F1"),
                ("Enter", "Object #"),
            ],
        ),
        ("help", &[("?", "Help ·")]),
        (
            "help_figures",
            &[("?", "Help ·"), ("Tab", "What the figures mean")],
        ),
    ];
    for (width, height) in [(80u16, 24u16), (160, 45)] {
        let t = Tmux::start_sized(width, height);
        for (name, steps) in screens {
            t.literal(&format!(
                "{} open {}",
                env!("CARGO_BIN_EXE_heaptui"),
                fixture.display()
            ));
            t.keys(&["Enter"]);
            let mut s = t.wait_settled("the thread ranking", |s| {
                s.contains("Threads by total") && s.contains("thread-n")
            });
            for (key, shown) in *steps {
                t.keys(&[key]);
                // A screen's title can show before its rows arrive ("loading…").
                s = t.wait_settled(shown, |s| s.contains(shown) && !s.contains("loading…"));
            }
            let s: String = s.lines().map(|l| format!("{}\n", l.trim_end())).collect();
            for cut in [" ROPRIETARY", " RAMES", " OTAL", "│ROPRIETARY"] {
                assert!(!s.contains(cut), "{name} {width}x{height}: cut\n{s}");
            }
            if !name.starts_with("help") {
                assert!(
                    s.lines().next().unwrap().contains("snapshot #1"),
                    "{name} {width}x{height}: the header\n{s}"
                );
            }
            insta::assert_snapshot!(format!("{name}_{width}x{height}"), s);
            t.keys(&["q"]);
            t.wait_for("the shell again", |s| {
                !s.contains("heaptui ·") && !s.contains("Help ·")
            });
        }
    }
}
