//! `heaptui report` with the other views (issue 7), run as users run it: recordings written
//! by the test with the issue's vectors, the shared patent fixture with `--leaks`/`--ages`,
//! and flags that do not fit their source (usage errors, exit 2, naming the flag).

mod views_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use views_common::{Scratch, ages_vector, counters_vector, units_vector};

fn heaptui(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .args(args)
        .output()
        .expect("the heaptui binary runs")
}

fn report(path: &Path, flags: &[&str]) -> String {
    let mut args = vec!["report", path.to_str().unwrap()];
    args.extend(flags);
    let out = heaptui(&args);
    assert!(
        out.status.success(),
        "heaptui {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/patent-example.json")
}

/// The data row of a text table whose first cell is `first`, split on runs of spaces.
fn row<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{first}  ")))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{text}"));
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn a_recording_reports_the_issue_counters() {
    let dir = Scratch::new("counters");
    let rec = dir.write("counters.rec", &counters_vector());
    let text = report(&rec, &[]);
    assert!(
        text.contains(
            "counters live 200 B in 1 blocks · allocated 300 B · utilization 66.7% · peak 300 B"
        ),
        "{text}"
    );
    assert!(
        text.contains("3 counter samples recorded by the agent"),
        "{text}"
    );
    // Strings work, prog, main; one stack; two allocations and a free; three counters.
    assert!(text.contains("records  10 (3 heap events)"), "{text}");
    let json: Value = serde_json::from_str(&report(&rec, &["--json"])).unwrap();
    assert_eq!(json["format"], "heaptui-recording-report");
    assert_eq!(json["version"], 1);
    assert_eq!(json["counters"]["live_bytes"], 200);
    assert_eq!(json["counters"]["allocated_bytes"], 300);
    let u = json["counters"]["utilization"].as_f64().unwrap();
    assert!((u - 2.0 / 3.0).abs() < 1e-9, "{u}");
}

#[test]
fn a_recording_reports_the_issue_ages() {
    let dir = Scratch::new("ages");
    let rec = dir.write("ages.rec", &ages_vector());
    let text = report(&rec, &[]);
    assert!(text.contains("against 2 snapshot boundaries"), "{text}");
    assert!(
        text.contains("all blocks  0: 2, 1: 1, 2: 3, 3: 0, >3: 0"),
        "{text}"
    );
    assert_eq!(
        row(&text, "odd_site (prog)"),
        ["odd_site (prog)", "1", "1", "3", "0", "0", "250 B"]
    );
    assert_eq!(
        row(&text, "2 worker"),
        ["2 worker", "1", "0", "0", "0", "0", "100 B"]
    );
    let json: Value = serde_json::from_str(&report(&rec, &["--format", "json"])).unwrap();
    assert_eq!(
        json["ages"]["total"]["blocks"],
        serde_json::json!([2, 1, 3, 0, 0])
    );
    let oldest: Vec<u64> = json["ages"]["oldest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(oldest, [1, 3, 5, 7, 9, 10]);
    let ages: Vec<u64> = json["ages"]["oldest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["age"].as_u64().unwrap())
        .collect();
    assert_eq!(ages, [2, 2, 2, 1, 0, 0]);
}

#[test]
fn a_recording_reports_the_issue_units_for_each_query() {
    let dir = Scratch::new("units");
    let rec = dir.write("units.rec", &units_vector());
    // Charged to the freer: liba {live 100, min 0, max 100, malloc 1};
    // libb {live −20, min −50, max 50, malloc 1, realloc 1, free 1}.
    let text = report(&rec, &["--units", "library", "--charge", "freer"]);
    assert!(
        text.contains("Allocation units · library · outermost · frees charged to the freer"),
        "{text}"
    );
    assert_eq!(
        row(&text, "liba.so"),
        ["liba.so", "100", "0", "100", "1", "0", "0", "0"]
    );
    assert_eq!(
        row(&text, "libb.so"),
        ["libb.so", "-20", "-50", "50", "1", "1", "1", "0"]
    );
    // Charged to the allocator (the default): liba 0, libb 80.
    let text = report(&rec, &[]);
    assert_eq!(row(&text, "liba.so")[1], "0");
    assert_eq!(row(&text, "libb.so")[1], "80");
    // Functions: outermost → func_a0, innermost → func_a1, inclusive → both.
    let text = report(&rec, &["--units", "function"]);
    assert!(row(&text, "func_a0 (liba.so)").len() == 8, "{text}");
    let text = report(&rec, &["--units", "function", "--position", "innermost"]);
    assert_eq!(row(&text, "func_a1 (liba.so)")[4], "1", "{text}");
    let json: Value = serde_json::from_str(&report(
        &rec,
        &["--json", "--units", "library", "--position", "inclusive"],
    ))
    .unwrap();
    assert_eq!(json["units"]["position"], "inclusive");
    let names: Vec<&str> = json["units"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["libb.so", "liba.so"]);
    let text = report(&rec, &["--units", "thread"]);
    assert_eq!(row(&text, "thread 1")[1], "80");
}

#[test]
fn a_snapshot_reports_leaks_by_site_and_ages_in_text_and_json() {
    let text = report(&fixture(), &["--leaks", "--ages"]);
    assert!(
        text.contains("Leaks by site, most lost bytes first (2 of 2)"),
        "{text}"
    );
    assert_eq!(
        row(&text, "Leak.Node"),
        ["Leak.Node", "40 B", "1", "0 B", "0", "40", "0 B", "0"]
    );
    assert_eq!(
        row(&text, "Leak.Child"),
        ["Leak.Child", "0 B", "0", "16 B", "1", "16", "0 B", "0"]
    );
    assert!(
        text.contains("against 0 snapshot boundaries"),
        "a snapshot file records no boundaries: {text}"
    );
    let json: Value = serde_json::from_str(&report(&fixture(), &["--json", "--leaks"])).unwrap();
    // Still the v1 report, with its members' meaning unchanged, and one member more.
    assert_eq!(json["format"], "heaptui-report");
    assert_eq!(json["version"], 1);
    assert_eq!(json["leaks"]["bytes"], 56);
    assert_eq!(json["leak_sites"][0]["label"], "Leak.Node");
    assert_eq!(json["leak_sites"][0]["definitely_lost"], 40);
    assert_eq!(json["leak_sites"][1]["indirectly_lost"], 16);
    assert!(json.get("ages").is_none(), "only what was asked");
    let plain: Value = serde_json::from_str(&report(&fixture(), &["--json"])).unwrap();
    assert!(plain.get("leak_sites").is_none() && plain.get("ages").is_none());
}

fn usage_error(args: &[&str]) -> String {
    let out = heaptui(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "heaptui {args:?} must be a usage error"
    );
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn flags_that_do_not_fit_the_source_are_usage_errors_naming_the_flag() {
    let dir = Scratch::new("usage");
    let rec = dir.write("run.rec", &ages_vector());
    let rec = rec.to_str().unwrap();
    for (flags, flag) in [
        (&["--leaks"][..], "--leaks"),
        (&["--release", "1"], "--release"),
        (&["--format", "collapsed"], "--format collapsed"),
    ] {
        let mut args = vec!["report", rec];
        args.extend(flags);
        let err = usage_error(&args);
        assert!(
            err.starts_with(&format!(
                "heaptui: {flag} needs a snapshot or a live agent: {rec} is a recording"
            )),
            "{err}"
        );
    }
    let snap = fixture();
    let snap = snap.to_str().unwrap();
    for flag in ["--units", "--position", "--charge"] {
        let value = match flag {
            "--units" => "thread",
            "--position" => "innermost",
            _ => "freer",
        };
        let err = usage_error(&["report", snap, flag, value]);
        assert!(
            err.starts_with(&format!("heaptui: {flag} needs a recording")),
            "{err}"
        );
    }
    let err = usage_error(&["report", snap, "--leaks", "--format", "csv"]);
    assert_eq!(
        err,
        "heaptui: --leaks prints with the text or json format only, not --format csv\n"
    );
    let out = heaptui(&["report", rec, "--units", "module"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--units"));
}

#[test]
fn a_damaged_recording_is_one_line_naming_the_file() {
    let dir = Scratch::new("damaged");
    let mut bytes = ages_vector();
    // A record claiming a payload far longer than any heaptui writes.
    bytes.extend_from_slice(&[5, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    let rec = dir.write("bad.rec", &bytes);
    let out = heaptui(&["report", rec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.rec") && err.contains("damaged record"),
        "{err}"
    );
    // A tail cut mid-record (the target crashed) is not damage: reported, then ignored.
    let mut cut = counters_vector();
    cut.truncate(cut.len() - 2);
    let rec = dir.write("cut.rec", &cut);
    let text = report(&rec, &[]);
    assert!(
        text.contains("was ignored (the target stopped mid-write)"),
        "{text}"
    );
    assert!(text.contains("live 200 B"), "{text}");
}

#[test]
fn a_live_report_shows_the_agents_leaks_ages_and_units() {
    let dir = Scratch::new("live");
    let agent = views_common::FakeAgent::start(dir.path());
    let address = agent.address();
    let token = agent.token_file.to_str().unwrap().to_string();
    let out = heaptui(&[
        "report",
        &address,
        "--token-file",
        &token,
        "--leaks",
        "--ages",
        "--units",
        "library",
        "--charge",
        "freer",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // The agent's boundaries (after allocations 2 and 4) age blocks 1, 3, 5 as 2, 1, 0: a
    // snapshot file alone would have said 0 for all.
    assert!(text.contains("against 2 snapshot boundaries"), "{text}");
    assert!(
        text.contains("all blocks  0: 1, 1: 1, 2: 1, 3: 0, >3: 0"),
        "{text}"
    );
    assert_eq!(
        row(&text, "Leak.Node (aged.c:9)"),
        [
            "Leak.Node (aged.c:9)",
            "40 B",
            "1",
            "0 B",
            "0",
            "40",
            "0 B",
            "0"
        ]
    );
    assert_eq!(
        row(&text, "libb.so"),
        ["libb.so", "-20", "-50", "50", "1", "1", "1", "0"]
    );
    let json = heaptui(&[
        "report",
        &address,
        "--token-file",
        &token,
        "--json",
        "--ages",
    ]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["format"], "heaptui-report");
    assert_eq!(json["ages"]["boundaries"], 2);
    let ages: Vec<u64> = json["ages"]["oldest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["age"].as_u64().unwrap())
        .collect();
    assert_eq!(ages, [2, 1, 0]);
    assert_eq!(
        json["pause_ms"], 0.0,
        "the live report's timing is still there"
    );
}
