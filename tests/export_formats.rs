//! `heaptui report --format json|csv|collapsed` (and `--json`), run as users run it: the real
//! binary on a snapshot this test writes, with known sites and sizes.

use std::process::{Command, Output};

mod export_common;
use export_common::snapshot_file;

fn heaptui(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heaptui"))
        .args(args)
        .output()
        .expect("the heaptui binary runs")
}

fn report(format: &[&str]) -> String {
    let path = snapshot_file(&format.join("-"));
    let mut args = vec!["report", path.to_str().unwrap()];
    args.extend_from_slice(format);
    let out = heaptui(&args);
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn collapsed_stacks_are_outermost_first_with_live_bytes() {
    assert_eq!(
        report(&["--format", "collapsed"]),
        "[unknown] 16\n\
         main;handle;alloc_buf (server.c:42) 128\n\
         main;handle;make_node 64\n\
         main;weird:name 8\n"
    );
}

#[test]
fn csv_is_the_thread_ranking() {
    // Thread 7 reaches objects 1, 2, 3 (128 + 64, 3 shared with thread 8); thread 8 reaches 3.
    assert_eq!(
        report(&["--format", "csv"]),
        "tid,name,state,proprietary,shared,total,frames,top_frame\n\
         7,\"worker, \"\"one\"\"\",stopped,128,64,192,2,handle\n\
         8,idle,stopped,0,64,64,2,loop\n"
    );
}

#[test]
fn json_is_the_report_json_and_json_is_its_alias() {
    let by_format = report(&["--format", "json"]);
    assert_eq!(by_format, report(&["--json"]));
    let v: serde_json::Value = serde_json::from_str(&by_format).unwrap();
    assert_eq!(v["format"], "heaptui-report");
    assert_eq!(v["totals"]["bytes"], 216);
    // Text names the file in its first line; the rest is the same with or without --format.
    let body = |text: String| text.split_once('\n').unwrap().1.to_string();
    let text = body(report(&["--format", "text"]));
    assert!(text.starts_with("process  ./server (pid 42)"), "{text}");
    assert_eq!(text, body(report(&[])));
}

#[test]
fn a_bad_format_is_a_usage_error() {
    let out = heaptui(&["report", "x.json", "--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'xml'"), "{err}");
    let out = heaptui(&["report", "x.json", "--json", "--format", "csv"]);
    assert_eq!(out.status.code(), Some(2));
}
