//! The autonomous mode under a soft limit on live heap bytes, on a C target under the real
//! preload: it cancels the right thread when a permitted one suffices, and reports a memory
//! shortage (cancelling nothing) when none does; either way a subscribed client gets the
//! episode as a `Push::Shortage`, and the measured release as a `Push::ReleaseMeasured`.

mod common;
mod policy_support;

use common::{TempDir, compile_c, include_flag};
use heaptui_protocol::{Push, ShortageCause, ShortageOutcome};
use policy_support::{POLICY_C, Target};

/// holder-1 and holder-2 hold 1 MiB each, grow-a 2 MiB, then (on the "grow-b" command, once
/// the client has subscribed) grow-b 6 MiB in one block: live bytes jump from about 4 MiB to
/// about 10 MiB, 3 MiB over a 7 MiB limit.
const LIMIT: &str = "[trigger]\nlive_bytes = \"7 MiB\"\n";

#[test]
fn the_trigger_cancels_the_thread_that_covers_the_need() {
    let dir = TempDir::new("policy-trigger");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    let policy = format!(
        "[[permit]]\nthread = \"grow-*\"\nmechanism = \"pthread_cancel\"\n\n[[permit]]\nthread = \"holder-*\"\nmechanism = \"pthread_cancel\"\n\n{LIMIT}"
    );
    let mut t = Target::start(&dir, &exe, &["grow-late"], Some(&policy));
    let mut c = t.client();
    c.subscribe();
    t.command("grow-b");
    t.wait_line("grow-b started");
    // The thread prints its tid once it runs, which may be after the main thread's line.
    t.wait_line("tid grow-b ");
    let tids = t.tids();
    let audit = t.wait_audit("the measured line of the autonomous cancel", |a| {
        a.iter().any(|l| l["event"] == "measured")
    });
    let decisions: Vec<_> = audit.iter().filter(|l| l["event"] == "decision").collect();
    assert_eq!(decisions.len(), 1, "one thread suffices: {audit:#?}");
    let d = decisions[0];
    assert_eq!(d["who"], "autonomous");
    assert_eq!(d["verdict"], "done");
    assert_eq!(d["tid"], tids["grow-b"], "{d}");
    assert_eq!(d["thread"], "grow-b");
    assert_eq!(d["mechanism"], "pthread_cancel");
    let predicted = d["predicted_release"].as_u64().unwrap();
    assert!((6 << 20..(6 << 20) + 4096).contains(&predicted), "{d}");
    let need = d["need"].as_u64().unwrap();
    assert!(need > 2 << 20 && need < 4 << 20, "need {need}: {d}");
    let line = t.wait_line("grow-b: cancelled");
    assert!(line.ends_with("freed 6291456 bytes"), "{line}");
    t.wait_thread_gone(tids["grow-b"]);
    let measured = audit.iter().find(|l| l["event"] == "measured").unwrap();
    let m = measured["measured_release"].as_u64().unwrap() as f64;
    assert!(
        (m - predicted as f64).abs() <= 0.05 * predicted as f64,
        "{measured}"
    );
    // The subscribed client was told: the episode, then the measured release.
    let Push::Shortage(report) = c.wait_push("the shortage", |p| matches!(p, Push::Shortage(_)))
    else {
        unreachable!()
    };
    assert_eq!(report.cause, ShortageCause::SoftLimit { limit: 7 << 20 });
    assert_eq!(report.need_bytes, need);
    assert_eq!(
        report.outcome,
        ShortageOutcome::Cancelled {
            tids: vec![tids["grow-b"]],
            predicted_release: predicted,
        }
    );
    let Push::ReleaseMeasured(m) = c.wait_push("the measured release", |p| {
        matches!(p, Push::ReleaseMeasured(_))
    }) else {
        unreachable!()
    };
    assert_eq!(m.decision, d["decision"].as_u64().unwrap());
    assert_eq!((m.tids, m.predicted), (vec![tids["grow-b"]], predicted));
    assert_eq!(m.measured, measured["measured_release"].as_u64());
    // Back under the limit: three more rounds of the policy thread (the trigger needs two in
    // a row over the limit) cancel nothing else.
    t.wait_agent_rounds("heaptui-policy", 3);
    assert_eq!(
        t.audit()
            .iter()
            .filter(|l| l["event"] == "decision")
            .count(),
        1
    );
    let lines = t.quit();
    for ok in ["grow-a ok", "holder-1 ok", "holder-2 ok", "exit ok"] {
        assert!(lines.iter().any(|l| l == ok), "{ok} missing: {lines:?}");
    }
}

#[test]
fn a_shortage_is_reported_and_nothing_cancelled_when_no_permitted_set_suffices() {
    let dir = TempDir::new("policy-shortage");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    // Only grow-a (2 MiB) may go: not enough for a 3 MiB need.
    let policy =
        format!("[[permit]]\nthread = \"grow-a\"\nmechanism = \"pthread_cancel\"\n\n{LIMIT}");
    let mut t = Target::start(&dir, &exe, &["grow-late"], Some(&policy));
    let mut c = t.client();
    c.subscribe();
    t.command("grow-b");
    t.wait_line("grow-b started");
    // The thread prints its tid once it runs, which may be after the main thread's line.
    t.wait_line("tid grow-b ");
    let tids = t.tids();
    let audit = t.wait_audit("a shortage line", |a| {
        a.iter().any(|l| l["event"] == "shortage")
    });
    let s = audit.iter().find(|l| l["event"] == "shortage").unwrap();
    assert_eq!(s["who"], "autonomous");
    assert_eq!(s["permitted_threads"], serde_json::json!([tids["grow-a"]]));
    let best = s["permitted_release"].as_u64().unwrap();
    let need = s["need"].as_u64().unwrap();
    assert!(best < need, "{s}");
    let Push::Shortage(report) = c.wait_push("the shortage", |p| matches!(p, Push::Shortage(_)))
    else {
        unreachable!()
    };
    assert_eq!(report.need_bytes, need);
    let ShortageOutcome::Unresolved { reason } = &report.outcome else {
        panic!("expected an unresolved shortage, got {report:?}");
    };
    assert!(
        reason.contains(&format!("need {need} bytes")) && reason.contains("nothing cancelled"),
        "{reason}"
    );
    assert!(
        t.agent_log().contains("memory shortage"),
        "{}",
        t.agent_log()
    );
    // Reported once per episode, and nothing cancelled, three rounds of the policy thread on.
    t.wait_agent_rounds("heaptui-policy", 3);
    let audit = t.audit();
    assert_eq!(audit.len(), 1, "{audit:#?}");
    assert!(t.thread_alive(tids["grow-a"]) && t.thread_alive(tids["grow-b"]));
    let lines = t.quit();
    for ok in ["grow-a ok", "grow-b ok", "holder-1 ok", "exit ok"] {
        assert!(lines.iter().any(|l| l == ok), "{ok} missing: {lines:?}");
    }
}

/// The process's current address-space size (`VmSize`), in bytes.
fn vm_size(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmSize in /proc/PID/status");
    kib * 1024
}

#[test]
fn a_shortage_with_no_memory_for_a_snapshot_is_reported_and_nothing_cancelled() {
    let dir = TempDir::new("policy-no-room");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    // grow-b alone would be cancelled, were there a snapshot to decide on.
    let policy =
        format!("[[permit]]\nthread = \"grow-*\"\nmechanism = \"pthread_cancel\"\n\n{LIMIT}");
    let mut t = Target::start(&dir, &exe, &["grow-late"], Some(&policy));
    let mut c = t.client();
    c.subscribe();
    // Room for grow-b's 6 MiB, not for a snapshot (docs/reference.md §7).
    let pid = t.child.id();
    let limit = vm_size(pid) + (24 << 20);
    let out = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--as={limit}:unlimited"),
        ])
        .output()
        .expect("prlimit (util-linux) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.command("grow-b");
    t.wait_line("grow-b started");
    t.wait_line("tid grow-b ");
    let tids = t.tids();
    let Push::Shortage(report) = c.wait_push("the shortage", |p| matches!(p, Push::Shortage(_)))
    else {
        unreachable!()
    };
    let ShortageOutcome::Unresolved { reason } = &report.outcome else {
        panic!("expected an unresolved shortage, got {report:?}");
    };
    assert!(
        reason
            .contains("no snapshot could be taken to decide on: not enough memory for a snapshot")
            && reason.contains("RLIMIT_AS"),
        "{reason}"
    );
    assert!(
        t.agent_log().contains("no snapshot could be taken"),
        "{}",
        t.agent_log()
    );
    // Nothing was decided or cancelled, and the program runs on to a clean exit.
    t.wait_agent_rounds("heaptui-policy", 2);
    assert!(
        !t.audit().iter().any(|l| l["event"] == "decision"),
        "{:#?}",
        t.audit()
    );
    assert!(t.thread_alive(tids["grow-a"]) && t.thread_alive(tids["grow-b"]));
    let lines = t.quit();
    for ok in ["grow-a ok", "grow-b ok", "holder-1 ok", "exit ok"] {
        assert!(lines.iter().any(|l| l == ok), "{ok} missing: {lines:?}");
    }
}
