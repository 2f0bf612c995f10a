//! `heaptui report ADDR`, `heaptui snapshot ADDR -o FILE` and `heaptui run` against a real
//! target under the real agent, over TCP and over a Unix socket.

mod live_common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use live_common::*;
use serde_json::Value;

fn live_equals_file(listen: &str) {
    let dir = Scratch::new("report");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, listen, &[]);
    // Its agent listens before its workers are up; its main thread reads commands only once
    // all four hold their blocks.
    assert_eq!(target.command("many 0"), "ok");
    let live = report_json(&[&target.address]);

    let file = dir.path().join("live.hsnap");
    let out = heaptui()
        .args(["snapshot", &target.address, "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(said.contains(&file.display().to_string()), "{said}");
    let offline = report_json(&[file.to_str().unwrap()]);

    // The same quiescent state, captured twice: the same report, to the byte.
    assert_eq!(without_timing(live.clone()), offline);
    // Every thread was stopped: the capture is complete.
    assert_eq!(live["threads_not_stopped"], 0, "{live}");
    assert_eq!(
        live["leaks"]["may_be_overstated"], false,
        "{}",
        live["leaks"]
    );

    // And it is the target's shape: four workers, each holding its own block, sharing one.
    let threads = live["threads"].as_array().unwrap();
    let workers: Vec<&Value> = threads
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("worker-"))
        .collect();
    assert_eq!(workers.len(), 4, "{threads:#?}");
    for w in &workers {
        let i: u64 = w["name"].as_str().unwrap()[7..].parse().unwrap();
        assert!(w["proprietary"].as_u64().unwrap() >= 2000 + i, "{w}");
        assert!(w["shared"].as_u64().unwrap() >= 3000, "{w}");
    }
    let shared = live["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["size"] == 3000)
        .expect("the 3000-byte block is a shared group");
    assert_eq!(shared["kind"], "thread-shared");
    assert!(shared["sharers"].as_array().unwrap().len() >= 4, "{shared}");
    assert_eq!(live["process"]["pid"], target.child.id());

    // The token file is private.
    let mode = std::fs::metadata(&target.token_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let dir_mode = std::fs::metadata(target.token_file.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    let token_file = target.token_file.clone();

    let (out, log) = target.finish();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        log.contains("closed: the client closed the connection"),
        "{log}"
    );
    assert!(!token_file.exists(), "the token file is removed at exit");
}

#[test]
fn a_report_over_tcp_equals_the_report_of_a_snapshot_file() {
    live_equals_file("127.0.0.1:0");
}

#[test]
fn a_report_over_a_unix_socket_equals_the_report_of_a_snapshot_file() {
    let dir = Scratch::new("unix-sock");
    let socket = dir.path().join("agent.sock");
    live_equals_file(&format!("unix:{}", socket.display()));
}

#[test]
fn the_unix_socket_is_private_and_removed_at_exit() {
    let dir = Scratch::new("unix-mode");
    let exe = shapes(dir.path());
    let socket = dir.path().join("agent.sock");
    let target = Target::start(dir.path(), &exe, &format!("unix:{}", socket.display()), &[]);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));
    assert!(!socket.exists());
}

#[test]
fn a_report_with_release_and_text_output() {
    let dir = Scratch::new("text");
    let exe = shapes(dir.path());
    let target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    let json = report_json(&[&target.address]);
    let tids: Vec<String> = json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("worker-"))
        .map(|t| t["tid"].to_string())
        .collect();
    let all = tids.join(",");
    let out = heaptui()
        .args(["report", &target.address, "--release", &all])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("heaptui report of {}", target.address)),
        "{text}"
    );
    assert!(text.contains("snapshot live: pause "), "{text}");
    assert!(text.contains("would free"), "{text}");
    // Ending all four workers frees their own blocks, but not the block they share, which a
    // global also holds.
    let json = report_json(&[&target.address, "--release", &all]);
    let freed = json["release"]["bytes"].as_u64().unwrap();
    assert!(
        (2000 * 4 + 6..2000 * 4 + 6 + 3000).contains(&freed),
        "{json}"
    );
    drop(target);
}

#[test]
fn errors_are_one_sentence_and_exit_1() {
    let out = heaptui().args(["report", "127.0.0.1:1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "heaptui: cannot connect to 127.0.0.1:1: connection refused — is the target running \
         with LD_PRELOAD=$(heaptui agent-path)?\n"
    );
    let out = heaptui()
        .args([
            "snapshot",
            "unix:/nonexistent/heaptui.sock",
            "-o",
            "/tmp/x.hsnap",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("heaptui: cannot connect to unix:/nonexistent/heaptui.sock: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
    let out = heaptui()
        .args(["snapshot", "nohost", "-o", "x"])
        .output()
        .unwrap();
    // A malformed address is a usage error.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("invalid agent address \"nohost\""), "{err}");
}

#[test]
fn a_wrong_token_file_is_refused_with_the_reason() {
    let dir = Scratch::new("token");
    let exe = shapes(dir.path());
    let target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let out = heaptui()
        .args(["report", &target.address, "--token-file"])
        .arg(&wrong)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("wrong token"), "{err}");
    // The right file given explicitly works.
    let out = heaptui()
        .args(["report", &target.address, "--json", "--token-file"])
        .arg(&target.token_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, log) = target.finish();
    assert_eq!(out.status.code(), Some(0));
    assert!(log.contains("wrong token"), "{log}");
}

#[test]
fn run_starts_the_program_reports_and_waits_for_it() {
    let dir = Scratch::new("run");
    let exe = compile_c(
        dir.path(),
        "runner",
        r#"
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    char *volatile keep = malloc(4321);
    /* Runs until the test creates the file "go". */
    while (access("go", F_OK) != 0) usleep(20000);
    printf("finished %s\n", keep != NULL ? "ok" : "no");
    return 3;
}
"#,
    );
    let mut child = heaptui()
        .current_dir(dir.path())
        .args(["run", "--"])
        .arg(&exe)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The report is printed while the program still runs.
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    loop {
        let mut buf = [0u8; 4096];
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        assert!(
            n > 0,
            "heaptui run ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&seen).contains("keeps running") {
            break;
        }
        assert!(started.elapsed().as_secs() < 60);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.contains("heaptui report of unix:"), "{text}");
    assert!(text.contains("4.2 KiB") || text.contains("4321"), "{text}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(rest.contains("finished ok"), "{rest}");
    assert_eq!(
        status.code(),
        Some(3),
        "run exits with the program's status"
    );
}

/// A program with a thread the agent cannot stop: it blocks every signal with the raw system
/// call (which no wrapper sees, so the stop signal too) and waits in read(2), holding a block.
const UNSTOPPABLE: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int gate[2];
static volatile int masked;

static void *rawmask(void *arg) {
    sigset_t all;
    sigfillset(&all);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8);
    char *mine = malloc(4321);
    memset(mine, 1, 4321);
    masked = 1;
    char c;
    if (read(gate[0], &c, 1) != 1) abort();
    free(mine);
    return arg;
}

int main(void) {
    if (pipe(gate) != 0) abort();
    pthread_t t;
    pthread_create(&t, NULL, rawmask, NULL);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        while (!masked) usleep(1000);
        printf("ok\n");
        fflush(stdout);
    }
    return 0;
}
"#;

#[test]
fn a_capture_with_a_thread_that_was_not_stopped_says_it_is_incomplete() {
    let dir = Scratch::new("report-incomplete");
    let exe = compile_c(dir.path(), "unstoppable", UNSTOPPABLE);
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    assert_eq!(target.command("masked?"), "ok");
    // The protocol says so in the snapshot's figures.
    let info = target.client().snapshot();
    assert_eq!((info.threads, info.threads_not_stopped), (2, 1), "{info:?}");
    // The report JSON: the count, the thread with its reason, leaks that may be overstated.
    let json = report_json(&[&target.address]);
    assert_eq!(json["threads_not_stopped"], 1, "{json}");
    assert_eq!(
        json["leaks"]["may_be_overstated"], true,
        "{}",
        json["leaks"]
    );
    let reasons: Vec<&str> = json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["not_stoppable"].as_str())
        .collect();
    assert_eq!(reasons, vec!["stop signal blocked"], "{json}");
    // The text report says it under its header.
    let out = heaptui()
        .args(["report", &target.address])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "\nINCOMPLETE: 1 thread was not stopped (frames unknown); leak figures may be \
             overstated\n"
        ),
        "{text}"
    );
}

/// Fetches snapshot `id`'s `KeptData` whole over `c`, chunk by chunk, calling `between` after
/// every chunk but the last; returns the bytes and the number of chunks.
fn fetch_kept(
    c: &mut Client,
    id: heaptui_protocol::SnapshotId,
    mut between: impl FnMut(&mut Client, &heaptui_protocol::SnapshotChunk),
) -> (Vec<u8>, usize) {
    use heaptui_protocol::{RequestBody, Response};
    let mut bytes = Vec::new();
    let mut chunks = 0;
    loop {
        let chunk = match c.ask(RequestBody::KeptData {
            snapshot: id,
            offset: bytes.len() as u64,
        }) {
            Response::KeptData(chunk) => chunk,
            other => panic!("{other:?}"),
        };
        chunks += 1;
        assert_eq!(chunk.offset, bytes.len() as u64);
        bytes.extend_from_slice(&chunk.bytes);
        if bytes.len() as u64 == chunk.total {
            return (bytes, chunks);
        }
        between(c, &chunk);
    }
}

/// The live report's source: the agent's analysed snapshot (`KeptData`), fetched in chunks,
/// decodes to the figures the agent announced, and the agent never holds the encoding whole:
/// each chunk is copied from the kept columns when asked for (docs/reference.md §6).
#[test]
fn the_analysed_snapshot_travels_in_chunks_and_the_agent_holds_no_copy_of_it() {
    use heaptui_protocol::{RequestBody, Response};

    let dir = Scratch::new("kept-data");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    // About 20 bytes an object: more than one 8 MiB chunk.
    assert_eq!(target.command("many 600000"), "ok");
    let mut c = target.client();
    let info = c.snapshot();
    let held = |c: &mut Client| match c.ask(RequestBody::ProcessInfo) {
        Response::ProcessInfo(p) => p.snapshot.expect("a kept snapshot").held_bytes,
        other => panic!("{other:?}"),
    };
    let (bytes, chunks) = fetch_kept(&mut c, info.snapshot, |c, chunk| {
        // While a client fetches, the agent holds the encoding's head at most (a few KB
        // here), not a copy of the snapshot's bytes.
        let during = held(c);
        assert!(
            during < info.held_bytes + chunk.total / 100,
            "{during} bytes held while fetching, {} before, {} to fetch",
            info.held_bytes,
            chunk.total
        );
    });
    assert!(chunks >= 2, "{} bytes in {chunks} chunk(s)", bytes.len());
    assert_eq!(held(&mut c), info.held_bytes, "the bytes were let go");
    let kept = heaptui_analysis::Kept::decode(&mut bytes.as_slice()).unwrap();
    let totals = kept.totals();
    assert_eq!(
        (totals.objects, totals.bytes, totals.unreachable_bytes),
        (
            info.totals.objects,
            info.totals.bytes,
            info.totals.unreachable_bytes
        )
    );
    assert!(kept.object_count() > 600_000);
    drop(c);
    let (out, log) = target.finish();
    assert!(out.status.success(), "{log}");
}

/// The target's resident memory, in bytes.
fn resident_bytes(target: &Target) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", target.child.id())).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb << 10
}

/// A client that fetches one chunk of a snapshot in `form` and then stays connected without
/// asking for the next: after `FETCH_IDLE` the agent lets go of the buffers it kept for the
/// next chunk (the chunk's bytes and its frame, 16 MiB) and of what the chunks are made from
/// (for a snapshot file, its whole encoding): the target's resident memory is back to what it
/// was before the fetch, and so is the memory the agent says the snapshot holds.
/// `keep_asking`: after the first chunk the client goes on asking `ProcessInfo` about every
/// 20 ms (more often than the agent's idle wake-ups) instead of going quiet: the fetch is
/// abandoned all the same, and let go.
fn an_abandoned_fetch_lets_go(
    blocks: u32,
    keep_asking: bool,
    first_chunk: fn(heaptui_protocol::SnapshotId) -> heaptui_protocol::RequestBody,
) {
    use heaptui_protocol::{RequestBody, Response};

    let dir = Scratch::new("kept-data-abandoned");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    assert_eq!(target.command(&format!("many {blocks}")), "ok");
    let mut c = target.client();
    let info = c.snapshot();
    let before = resident_bytes(&target);
    let chunk = match c.ask(first_chunk(info.snapshot)) {
        Response::KeptData(chunk) | Response::SnapshotData(chunk) => chunk,
        other => panic!("{other:?}"),
    };
    assert!(
        (chunk.bytes.len() as u64) < chunk.total,
        "one chunk of several: {} of {} bytes",
        chunk.bytes.len(),
        chunk.total
    );
    let released = "stopped fetching a snapshot: let go of";
    if keep_asking {
        // Until the snapshot holds, in this connection's answers, what it held before the
        // fetch.
        let started = std::time::Instant::now();
        loop {
            let held = match c.ask(RequestBody::ProcessInfo) {
                Response::ProcessInfo(p) => p.snapshot.expect("a kept snapshot").held_bytes,
                other => panic!("{other:?}"),
            };
            if held == info.held_bytes {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "a client asking every 20 ms kept its abandoned fetch's {} bytes for 30 s:\n{}",
                held - info.held_bytes,
                target.log_text()
            );
            // The pace of the client's requests, not a wait for the agent.
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            target.log_text().contains(released),
            "{}",
            target.log_text()
        );
    } else {
        wait_for_log(&target, released, 1, Duration::from_secs(30));
    }
    let after = resident_bytes(&target);
    assert!(
        after < before + (4 << 20),
        "{after} bytes resident after the fetch was abandoned, {before} before it"
    );
    // Asked on another connection: the first one's fetch is over.
    let held = match target.client().ask(RequestBody::ProcessInfo) {
        Response::ProcessInfo(p) => p.snapshot.expect("a kept snapshot").held_bytes,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        held, info.held_bytes,
        "the snapshot holds what it held before the fetch"
    );
    drop(c);
    let (out, log) = target.finish();
    assert!(out.status.success(), "{log}");
}

#[test]
fn an_abandoned_fetch_does_not_keep_its_buffers_in_the_target() {
    an_abandoned_fetch_lets_go(600_000, false, |snapshot| {
        heaptui_protocol::RequestBody::KeptData {
            snapshot,
            offset: 0,
        }
    });
}

#[test]
fn an_abandoned_fetch_of_a_snapshot_file_does_not_keep_its_encoding_in_the_target() {
    // About 13 bytes an object in a snapshot file: more than one 8 MiB chunk.
    an_abandoned_fetch_lets_go(1_000_000, false, |snapshot| {
        heaptui_protocol::RequestBody::SnapshotData {
            snapshot,
            offset: 0,
        }
    });
}

#[test]
fn an_abandoned_fetch_is_let_go_while_the_client_keeps_asking_other_things() {
    an_abandoned_fetch_lets_go(1_000_000, true, |snapshot| {
        heaptui_protocol::RequestBody::SnapshotData {
            snapshot,
            offset: 0,
        }
    });
}

/// Two clients fetching the same snapshot's `KeptData` with their fetches overlapping (the
/// second fetches the whole snapshot after the first client's first chunk: the first
/// connection holds the encoded head, the second shares it) get the same bytes, and a third
/// fetch after both, when nothing holds the head any more, has it made again and gets the
/// same bytes too. The two are driven in turn from this one thread: this tests sharing the
/// head and making it again, not two connection threads asking at the same instant.
#[test]
fn two_clients_with_overlapping_fetches_of_the_analysed_snapshot_get_the_same_bytes() {
    let dir = Scratch::new("kept-data-two");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    assert_eq!(target.command("many 600000"), "ok");
    let mut first = target.client();
    let mut second = target.client();
    let info = first.snapshot();
    let mut second_bytes = None;
    let (first_bytes, chunks) = fetch_kept(&mut first, info.snapshot, |_, chunk| {
        // After the first client's first chunk, the second fetches the whole snapshot.
        if second_bytes.is_none() {
            assert_eq!(chunk.offset, 0);
            second_bytes = Some(fetch_kept(&mut second, info.snapshot, |_, _| {}).0);
        }
    });
    assert!(
        chunks >= 2,
        "{} bytes in {chunks} chunk(s)",
        first_bytes.len()
    );
    let second_bytes = second_bytes.expect("the second client fetched");
    assert!(
        first_bytes == second_bytes,
        "the two clients got different bytes"
    );
    // And a third fetch after both, with nothing held any more, gets them again.
    let (third_bytes, _) = fetch_kept(&mut first, info.snapshot, |_, _| {});
    assert!(
        third_bytes == first_bytes,
        "a later fetch got different bytes"
    );
    heaptui_analysis::Kept::decode(&mut first_bytes.as_slice()).unwrap();
    drop((first, second));
    let (out, log) = target.finish();
    assert!(out.status.success(), "{log}");
}
