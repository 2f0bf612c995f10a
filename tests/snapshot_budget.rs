//! A snapshot the process cannot afford is refused (docs/reference.md §7 "When memory for a
//! snapshot cannot be had"): a real target under the real agent, its address-space limit
//! lowered from outside with `prlimit`, asked for a report over the real protocol. The client
//! gets one sentence naming the limit; the target and its agent run on unharmed, and once the
//! limit is lifted the same agent takes the snapshot.

mod live_common;

use std::process::Command;

use live_common::*;

/// The process's current address-space size, from `/proc/PID/status` (`VmSize`, kB).
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

/// Sets the soft and hard `RLIMIT_AS` of process `pid` (`unlimited` or bytes).
fn prlimit_as(pid: u32, limit: &str) {
    let out = Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--as={limit}:unlimited"),
        ])
        .output()
        .expect("prlimit (util-linux) runs");
    assert!(
        out.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_snapshot_that_does_not_fit_the_address_space_limit_is_refused_and_the_target_runs_on() {
    let dir = Scratch::new("snapshot-budget");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    // 300k more blocks: a snapshot takes some 80 MiB more than the process maps now (and,
    // were it tried, would abort the process when its allocations failed at the limit).
    assert_eq!(target.command("many 300000"), "ok");
    let pid = target.child.id();
    prlimit_as(pid, &(vm_size(pid) + (24 << 20)).to_string());

    let out = heaptui()
        .args(["report", &target.address])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not enough memory for a snapshot")
            && err.contains("RLIMIT_AS")
            && err.contains("no snapshot taken"),
        "{err}"
    );

    // Unharmed: the program works, the agent answers, and a lifted limit lets it snapshot.
    assert_eq!(target.command("many 10"), "ok");
    prlimit_as(pid, "unlimited");
    let out = heaptui()
        .args(["report", &target.address, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["totals"]["objects"].as_u64().unwrap() > 300_010,
        "{}",
        report["totals"]
    );
    let (output, log) = target.finish();
    assert!(output.status.success(), "{log}");
    assert!(String::from_utf8_lossy(&output.stdout).ends_with("done\n"));
}
