//! `heaptui snapshot ADDR -o FILE --peak` against a real target under the agent's automatic
//! rule (`HEAPTUI_AUTO_SNAPSHOT`): the saved file is the snapshot the agent took at the
//! peak, not the heap of the moment; without the rule, a one-line error and exit 1.

mod live_common;

use std::time::{Duration, Instant};

use heaptui_protocol::{ProcessInfo, RequestBody, Response};
use live_common::{Scratch, Target, compile_c, heaptui};

/// `up` holds four 1 MiB blocks, `down` frees them.
const UP_DOWN_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    char line[64];
    void *held[4] = {0};
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "up", 2)) {
            for (int i = 0; i < 4; i++) { held[i] = malloc(1 << 20); memset(held[i], 1, 64); }
            printf("up\n");
        } else if (!strncmp(line, "down", 4)) {
            for (int i = 0; i < 4; i++) { free(held[i]); held[i] = NULL; }
            printf("down\n");
        }
    }
    return 0;
}
"#;

fn process_info(target: &Target) -> ProcessInfo {
    match target.client().ask(RequestBody::ProcessInfo) {
        Response::ProcessInfo(p) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn snapshot_peak_saves_the_snapshot_taken_at_the_peak() {
    let dir = Scratch::new("peak");
    let exe = compile_c(dir.path(), "updown", UP_DOWN_C);
    let socket = format!("unix:{}", dir.path().join("agent.sock").display());
    let mut target = Target::start(
        dir.path(),
        &exe,
        &socket,
        &[("HEAPTUI_AUTO_SNAPSHOT", "tolerance:256KiB")],
    );
    assert_eq!(target.command("up"), "up");
    // The rule, due once more than 256 KiB went up since the last snapshot, stays due until a
    // snapshot is taken: one lands with the blocks held, a poll or two after the rise.
    let deadline = Instant::now() + Duration::from_secs(20);
    let peak = loop {
        if let Some(p) = process_info(&target).peak_snapshot
            && p.totals.bytes >= 3 << 20
        {
            break p;
        }
        assert!(Instant::now() < deadline, "{}", target.log_text());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(target.command("down"), "down");

    let file = dir.path().join("peak.hsnap");
    let out = heaptui()
        .args(["snapshot", &target.address, "--peak", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let graph = heaptui_analysis::snapshot::read_bytes(&std::fs::read(&file).unwrap())
        .expect("the saved peak reads back");
    let bytes: u64 = graph.objects().size.iter().sum();
    let now = process_info(&target);
    // The file is the peak snapshot (taken while the blocks were held), not today's heap.
    let kept = now.peak_snapshot.expect("the peak is still kept");
    assert_eq!(bytes, kept.totals.bytes);
    assert!(bytes >= 3 << 20, "{bytes}");
    assert!(now.counters.live_bytes < 1 << 20, "{:?}", now.counters);
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(
        said.starts_with(&format!("snapshot {} ", kept.snapshot.0)),
        "{said}"
    );
    assert!(kept.snapshot.0 >= peak.snapshot.0);
    let _ = target.finish();
}

#[test]
fn snapshot_peak_without_the_rule_is_one_line_and_exit_1() {
    let dir = Scratch::new("peak-off");
    let exe = compile_c(dir.path(), "updown", UP_DOWN_C);
    let socket = format!("unix:{}", dir.path().join("agent.sock").display());
    let target = Target::start(dir.path(), &exe, &socket, &[]);
    let file = dir.path().join("peak.hsnap");
    let out = heaptui()
        .args(["snapshot", &target.address, "--peak", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("HEAPTUI_AUTO_SNAPSHOT=tolerance:SIZE"),
        "{err}"
    );
    assert!(!file.exists());
    let _ = target.finish();
}
