//! `heaptui report`, run as users run it: the real binary on the shared fixture, on files
//! this test writes (good and bad), and with bad command lines. Checks output, stderr and
//! exit codes (0 ok, 1 runtime failure, 2 usage error).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use heaptui_analysis::snapshot;
use serde_json::{Value, json};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/patent-example.json")
}

fn heaptui(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .args(args)
        .output()
        .expect("the heaptui binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// A fresh directory for one test's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("heaptui-report-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn report_json(path: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["report", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = heaptui(&args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(out.stderr.is_empty(), "stderr: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("report --json prints JSON")
}

/// The rows of the text report's thread table: (tid, name, total bytes).
fn thread_rows(text: &str) -> Vec<(u32, String, u64)> {
    let mut lines = text
        .lines()
        .skip_while(|l| *l != "Threads, ranked by total")
        .skip(1);
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "TID",
            "NAME",
            "PROPRIETARY",
            "SHARED",
            "TOTAL",
            "TOTAL",
            "BYTES",
            "FRAMES"
        ]
    );
    lines
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (
                cells[0].parse().unwrap(),
                cells[1].to_string(),
                cells[cells.len() - 2].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn text_report_ranks_the_fixtures_threads() {
    let out = heaptui(&["report", fixture().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        thread_rows(&text),
        [
            (1, "thread-1".to_string(), 264),
            (3, "thread-3".to_string(), 254),
            (2, "thread-2".to_string(), 204),
            (4, "thread-n".to_string(), 170),
        ]
    );
    assert!(
        text.contains("process  patent-example (pid 4242)"),
        "{text}"
    );
    assert!(
        text.contains("heap     760 B in 16 objects; unreachable 56 B, global-only 100 B"),
        "{text}"
    );
    // A frame row, a group row and the leaks line, as the tables print them.
    let has_row = |cells: &[&str]| {
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == cells)
    };
    assert!(
        has_row(&["0", "Class1.methodB", "app", "user", "36", "B", "F1", "T1"]),
        "{text}"
    );
    assert!(
        has_row(&[
            "1",
            "Class2.methodE",
            "libsystem",
            "system",
            "50",
            "B",
            "-",
            "T1,",
            "T2,",
            "T3"
        ]),
        "{text}"
    );
    assert!(
        has_row(&[
            "T4",
            "thread-shared",
            "16",
            "0x11000",
            "Registry",
            "20",
            "B",
            "1",
            "4,",
            "globals",
            "-"
        ]),
        "{text}"
    );
    assert!(
        text.contains(
            "56 B in 2 objects: definitely lost 40 B (1 object), indirectly lost 16 B (1 object)"
        ),
        "{text}"
    );
    assert!(
        !text.contains("Release"),
        "no release section without --release"
    );
}

#[test]
fn text_report_prints_the_release() {
    let out = heaptui(&["report", fixture().to_str().unwrap(), "--release", "2,1"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).ends_with("Release\n  ending threads 1, 2 would free 300 B\n"),
        "{}",
        stdout(&out)
    );
}

/// Every figure of `patent-example.expected.md` that the report JSON carries.
#[test]
fn json_report_has_every_figure_of_the_fixture() {
    let r = report_json(&fixture(), &["--release", "1,2"]);
    assert_eq!(r["format"], "heaptui-report");
    assert_eq!(r["version"], 1);
    assert_eq!(
        r["totals"],
        json!({"objects": 16, "bytes": 760, "unreachable_bytes": 56, "global_only_bytes": 100})
    );

    let threads: Vec<Value> = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            json!([
                t["tid"],
                t["name"],
                t["proprietary"],
                t["shared"],
                t["total"]
            ])
        })
        .collect();
    assert_eq!(
        threads,
        [
            json!([1, "thread-1", 180, 84, 264]),
            json!([3, "thread-3", 50, 204, 254]),
            json!([2, "thread-2", 120, 84, 204]),
            json!([4, "thread-n", 30, 140, 170]),
        ]
    );

    let mut frames = Vec::new();
    for t in r["threads"].as_array().unwrap() {
        for f in t["frames"].as_array().unwrap() {
            frames.push(json!([
                t["tid"],
                f["index"],
                f["function"],
                f["proprietary"]
            ]));
        }
    }
    frames.sort_by_key(|f| (f[0].as_u64(), f[1].as_u64()));
    assert_eq!(
        frames,
        [
            json!([1, 0, "Class1.methodB", 36]),
            json!([1, 1, "Class1.methodA", 84]),
            json!([2, 0, "Class1.methodC", 0]),
            json!([2, 1, "Class2.methodD", 36]),
            json!([3, 0, "Class3.methodG", 0]),
            json!([3, 1, "Class2.methodE", 50]),
            json!([4, 0, "Class1.methodF", 30]),
        ]
    );

    // Groups, named by their entry object's id as the expected figures are.
    let groups = r["groups"].as_array().unwrap();
    let id_of = |entry: u64| -> Value {
        groups
            .iter()
            .find(|g| g["entry"] == entry)
            .unwrap_or_else(|| panic!("no group with entry {entry}"))["id"]
            .clone()
    };
    let summary: Vec<Value> = groups
        .iter()
        .map(|g| {
            json!([
                g["entry"],
                g["kind"],
                g["label"],
                g["size"],
                g["objects"],
                g["sharers"]
            ])
        })
        .collect();
    // Largest first.
    assert_eq!(
        summary,
        [
            json!([10, "thread-shared", "Class3.Pool", 120, 1, [3, 4]]),
            json!([15, "global-only", "Config", 100, 1, ["globals"]]),
            json!([7, "frame-shared", "Class2.Context", 84, 2, [2]]),
            json!([5, "thread-shared", "Class2.Cache", 72, 1, [1, 2, 3]]),
            json!([2, "frame-shared", "Class1.Session", 60, 1, [1]]),
            json!([16, "thread-shared", "Registry", 20, 1, [4, "globals"]]),
            json!([6, "thread-shared", "Class2.Entry", 12, 1, [1, 2, 3]]),
        ]
    );
    assert_eq!(r["groups_omitted"], 0);
    // The ids of docs/reference.md §5: entry 5 is T1, entry 6 is T2.
    assert_eq!(id_of(5), "T1");
    assert_eq!(id_of(6), "T2");
    let group = |entry: u64| groups.iter().find(|g| g["entry"] == entry).unwrap();
    assert_eq!(group(5)["addr"], 66816);
    assert_eq!(group(7)["refs"], json!([id_of(5)]));
    assert_eq!(group(5)["refs"], json!([id_of(6)]));
    for entry in [2, 6, 10, 15, 16] {
        assert_eq!(group(entry)["refs"], json!([]), "entry {entry}");
    }

    // Direct referents of the frames the expected figures develop.
    let frame = |tid: u64, index: u64| {
        let t = r["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == tid)
            .unwrap();
        t["frames"][index as usize].clone()
    };
    assert_eq!(frame(1, 0)["frame_shared"], json!([id_of(2)]));
    assert_eq!(frame(1, 0)["thread_shared"], json!([id_of(5)]));
    assert_eq!(frame(2, 0)["frame_shared"], json!([id_of(7)]));
    assert_eq!(frame(2, 0)["thread_shared"], json!([]));

    assert_eq!(r["leaks"]["bytes"], 56);
    assert_eq!(r["leaks"]["objects"], 2);
    assert_eq!(r["leaks"]["definitely_lost"], 40);
    assert_eq!(r["leaks"]["indirectly_lost"], 16);
    assert_eq!(r["release"], json!({"threads": [1, 2], "bytes": 300}));
}

#[test]
fn json_report_carries_release_only_when_asked() {
    assert!(report_json(&fixture(), &[]).get("release").is_none());
    assert_eq!(
        report_json(&fixture(), &["--release", "4,3"])["release"],
        json!({"threads": [3, 4], "bytes": 200})
    );
    assert_eq!(
        report_json(&fixture(), &["--release", "1,2,3,2"])["release"],
        json!({"threads": [1, 2, 3], "bytes": 434})
    );
}

/// A snapshot of `n` thread-shared groups: objects of sizes 1..=n, each referred to by the
/// frames of threads 1 and 2.
fn many_groups(scratch: &Scratch, n: u64) -> PathBuf {
    let objects: Vec<String> = (1..=n)
        .map(|id| format!(r#"{{"id": {id}, "size": {id}, "refs": []}}"#))
        .collect();
    let refs: Vec<String> = (1..=n).map(|id| id.to_string()).collect();
    let refs = refs.join(", ");
    let frame = |tid: u32| {
        format!(
            r#"{{"tid": {tid}, "name": "t{tid}", "frames": [{{"function": "f", "refs": [{refs}]}}]}}"#
        )
    };
    let json = format!(
        r#"{{"format": "heaptui-snapshot", "version": 1, "objects": [{}], "threads": [{}, {}]}}"#,
        objects.join(", "),
        frame(1),
        frame(2)
    );
    scratch.file("many.json", json)
}

fn group_sizes(report: &Value) -> Vec<u64> {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["size"].as_u64().unwrap())
        .collect()
}

#[test]
fn json_lists_the_largest_groups_up_to_a_limit_and_says_how_many_it_left_out() {
    let scratch = Scratch::new("groups-limit");
    let file = many_groups(&scratch, 60);

    let default = report_json(&file, &[]);
    assert_eq!(group_sizes(&default), (11..=60).rev().collect::<Vec<_>>());
    assert_eq!(default["groups_omitted"], 10);

    let five = report_json(&file, &["--groups", "5"]);
    assert_eq!(group_sizes(&five), [60, 59, 58, 57, 56]);
    assert_eq!(five["groups_omitted"], 55);
    // The figures do not depend on how many groups are listed.
    assert_eq!(five["totals"], default["totals"]);
    assert_eq!(five["threads"], default["threads"]);

    let all = report_json(&file, &["--groups", "all"]);
    assert_eq!(group_sizes(&all), (1..=60).rev().collect::<Vec<_>>());
    assert_eq!(all["groups_omitted"], 0);

    let text = heaptui(&["report", file.to_str().unwrap(), "--groups", "3"]);
    let text = stdout(&text);
    assert!(
        text.contains("Shared groups, largest first (3 of 60)"),
        "{text}"
    );
    assert!(
        text.contains("… 57 smaller groups not shown (`--groups all` lists every group)"),
        "{text}"
    );

    let bad = heaptui(&["report", file.to_str().unwrap(), "--groups", "many"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("--groups") && stderr(&bad).contains("\"many\""),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn a_binary_snapshot_reports_exactly_like_its_json() {
    let scratch = Scratch::new("binary");
    let graph = snapshot::read_file(&fixture()).unwrap();
    let mut bytes = Vec::new();
    snapshot::write_binary(&graph, &mut bytes).unwrap();
    let binary = scratch.file("patent.hsnap", &bytes);
    let mut json_bytes = Vec::new();
    snapshot::write_json(&graph, &mut json_bytes).unwrap();
    let rewritten = scratch.file("patent.json", &json_bytes);

    let from_fixture = heaptui(&[
        "report",
        fixture().to_str().unwrap(),
        "--json",
        "--release",
        "1,2",
    ]);
    for path in [&binary, &rewritten] {
        let out = heaptui(&[
            "report",
            path.to_str().unwrap(),
            "--json",
            "--release",
            "1,2",
        ]);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
        assert_eq!(stdout(&out), stdout(&from_fixture), "{}", path.display());
    }
    let text = heaptui(&["report", binary.to_str().unwrap()]);
    assert_eq!(thread_rows(&stdout(&text)).len(), 4);
}

/// Runs `report` on a bad file; it must exit 1 with exactly one line naming the file.
fn refused(scratch: &Scratch, name: &str, bytes: impl AsRef<[u8]>) -> String {
    let path = scratch.file(name, bytes);
    let out = heaptui(&["report", path.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{name}: stderr {}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty(), "{name}: printed {}", stdout(&out));
    let err = stderr(&out);
    let prefix = format!("heaptui: {}: ", path.display());
    assert!(err.starts_with(&prefix), "{name}: {err}");
    assert!(
        err.ends_with('\n') && err.lines().count() == 1,
        "{name}: {err:?}"
    );
    err[prefix.len()..].trim_end().to_string()
}

#[test]
fn bad_snapshot_files_exit_1_with_one_clear_line() {
    let s = Scratch::new("bad");
    let fixture_text = std::fs::read_to_string(fixture()).unwrap();
    let graph = snapshot::read_file(&fixture()).unwrap();
    let mut binary = Vec::new();
    snapshot::write_binary(&graph, &mut binary).unwrap();

    // Cut inside the objects: the error names the top-level field, the line and the column.
    let cut = fixture_text.find("\"id\": 3,\n   \"addr\"").unwrap();
    let e = refused(&s, "truncated.json", &fixture_text[..cut]);
    assert!(
        e.starts_with("objects: truncated JSON: EOF while parsing an object at line "),
        "{e}"
    );

    let e = refused(
        &s,
        "v2.json",
        fixture_text.replace("\"version\": 1", "\"version\": 2"),
    );
    assert_eq!(
        e,
        "version: unsupported version 2 (this heaptui reads version 1)"
    );

    let e = refused(
        &s,
        "dup.json",
        fixture_text.replace("\"id\": 9,\n   \"addr\"", "\"id\": 8,\n   \"addr\""),
    );
    assert_eq!(e, "objects[8].id: duplicate object id 8");

    let e = refused(
        &s,
        "dangling.json",
        fixture_text.replace("[\n    14\n   ]", "[\n    99\n   ]"),
    );
    assert_eq!(e, "objects[12].refs[0]: reference to unknown object id 99");

    let e = refused(
        &s,
        "negative.json",
        fixture_text.replace("\"size\": 84", "\"size\": -84"),
    );
    assert!(
        e.starts_with("objects[0].size: negative size -84 at line "),
        "{e}"
    );

    let mut bad_magic = binary.clone();
    bad_magic[8..12].copy_from_slice(b"JUNK");
    let e = refused(&s, "magic.hsnap", bad_magic);
    assert!(e.starts_with("binary snapshot: wrong magic"), "{e}");

    let e = refused(&s, "short.hsnap", &binary[..binary.len() - 7]);
    assert!(e.starts_with("binary snapshot: truncated graph"), "{e}");

    let e = refused(&s, "elf", b"\x7fELF\x02\x01\x01\0");
    assert!(e.starts_with("not a heaptui snapshot"), "{e}");

    let out = heaptui(&["report", "/nonexistent/snap.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "heaptui: /nonexistent/snap.json: No such file or directory (os error 2)\n"
    );
}

#[test]
fn an_unknown_thread_in_release_is_a_usage_error_naming_the_threads() {
    let out = heaptui(&["report", fixture().to_str().unwrap(), "--release", "1,9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr(&out),
        "heaptui: unknown thread id 9 in --release (threads in this snapshot: 1, 2, 3, 4)\n"
    );
}

#[test]
fn an_address_without_an_agent_is_refused_in_one_line() {
    // A port that was free a moment ago (not 8000, where an agent may really listen on a
    // shared machine).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = heaptui(&["report", &format!(":{port}")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("heaptui: cannot connect to 127.0.0.1:{port}: ")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn usage_errors_exit_2() {
    let file = fixture();
    let file = file.to_str().unwrap();
    for args in [
        &[][..],
        &["report"][..],
        &["report", file, "--release", "1,x"][..],
        &["report", file, "--release"][..],
        &["report", file, "--bogus"][..],
        &["frobnicate"][..],
    ] {
        let out = heaptui(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            stderr(&out).starts_with("error: ") || stderr(&out).contains("\nUsage: heaptui"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = heaptui(&["report", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("--release <TID,TID…>"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_bare_port_is_answered_with_the_address_to_write() {
    let out = heaptui(&["report", "8000"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "heaptui: 8000: no such file; for the agent listening on port 8000, write :8000\n"
    );
}

#[test]
fn open_of_a_file_that_is_no_snapshot_names_it_once() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let out = heaptui(&["open", readme.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("README.md").count(), 1, "{err}");
    assert!(err.contains("not a heaptui snapshot"), "{err}");
}

#[test]
fn demo_without_a_terminal_names_the_one_program_to_run() {
    let cache = Scratch::new("demo-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .arg("demo")
        .env("XDG_CACHE_HOME", &cache.0)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let path = err
        .trim_end()
        .rsplit_once("heaptui run -- ")
        .unwrap_or_else(|| panic!("{err}"))
        .1;
    assert!(!path.contains('*'), "{err}");
    assert!(Path::new(path).is_file(), "{err}");
}

/// The three leak classes of docs/reference.md §3 from a hand-written file with interior
/// edges: a lost ring of three whose lowest address is its middle block (the one definitely
/// lost block), a lost block entering another lost pair (only the entry is definitely lost),
/// and blocks reached only through an interior pointer (possibly lost, in JSON, text and
/// leak sites, and still reachable everywhere else).
#[test]
fn the_three_leak_classes_in_text_and_json() {
    let scratch = Scratch::new("leak-classes");
    let doc = json!({
        "format": "heaptui-snapshot", "version": 1,
        "sites": [{"id": 1, "frames": ["make_ring (ring.c:3)", "main"]},
                  {"id": 2, "frames": ["make_buffer (buf.c:7)", "main"]}],
        "objects": [
            {"id": 1, "addr": 0x3000, "size": 10, "site": 1, "refs": [2]},
            {"id": 2, "addr": 0x1000, "size": 20, "site": 1, "refs": [3]},
            {"id": 3, "addr": 0x2000, "size": 30, "site": 1, "refs": [1]},
            {"id": 4, "addr": 0x9000, "size": 5, "site": 1, "refs": [5]},
            {"id": 5, "addr": 0x5000, "size": 6, "site": 1, "refs": [6]},
            {"id": 6, "addr": 0x6000, "size": 7, "site": 1, "refs": [5]},
            {"id": 7, "addr": 0x7000, "size": 100, "site": 2,
             "refs": [{"id": 8, "interior": false}]},
            {"id": 8, "addr": 0x8000, "size": 50, "site": 2, "refs": []},
            {"id": 9, "addr": 0xa000, "size": 64, "site": 2, "refs": []}
        ],
        "threads": [{"tid": 1, "frames": [{"function": "main",
                                           "refs": [{"id": 7, "interior": true}, 9]}]}],
        "globals": {"refs": [{"id": 9, "interior": true}]}
    });
    let path = scratch.file("leaks.json", doc.to_string());
    let report = report_json(&path, &["--leaks"]);
    assert_eq!(
        report["leaks"],
        json!({"bytes": 78, "objects": 6,
               "definitely_lost": 25, "definitely_lost_objects": 2,
               "indirectly_lost": 53, "indirectly_lost_objects": 4,
               "possibly_lost": 150, "possibly_lost_objects": 2,
               "may_be_overstated": false})
    );
    // Possibly lost blocks stay reachable: only the lost ones are unreachable.
    assert_eq!(report["totals"]["unreachable_bytes"], 78);
    let sites = report["leak_sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2);
    assert_eq!(sites[1]["label"], "make_buffer (buf.c:7)");
    assert_eq!(
        (
            &sites[1]["possibly_lost"],
            &sites[1]["possibly_lost_objects"]
        ),
        (&json!(150), &json!(2))
    );
    let out = heaptui(&["report", path.to_str().unwrap(), "--leaks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "78 B in 6 objects: definitely lost 25 B (2 objects), indirectly lost 53 B (4 objects)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "possibly lost 150 B (2 objects): reachable only through pointers into their middle"
        ),
        "{text}"
    );
}
