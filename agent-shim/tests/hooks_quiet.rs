//! The agent is quiet and keeps off the program's descriptors (docs/reference.md §2): a
//! healthy run prints only the `listening on` line, fork children print nothing, problem
//! lines go to the standard error the program started with (a duplicate made at load), never
//! to a file the program later opened on fd 2, and the agent holds none of fds 0–2 when the
//! program has them closed. Runs without `HEAPTUI_LOG` (the point is where lines go without it).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const DESCRIPTORS: &str = include_str!("targets/descriptors.c");

/// Runs `exe args` under the agent with no `HEAPTUI_LOG`, a Unix socket of its own and
/// `env`: (exit code, stdout, stderr).
fn run_without_log(
    dir: &TempDir,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(exe);
    without_inherited_heaptui_env(&mut cmd)
        .args(args)
        .env("LD_PRELOAD", agent_path())
        .env("AGENT_SO", agent_path())
        .env(
            "HEAPTUI_LISTEN",
            format!("unix:{}", dir.path().join("agent.sock").display()),
        );
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = output_within(cmd, TARGET_TIMEOUT);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_healthy_run_prints_only_the_listening_line_and_fork_children_nothing() {
    let dir = TempDir::new("quiet");
    let exe = compile_c(&dir, "descriptors", DESCRIPTORS, &[]);
    let (code, stdout, stderr) = run_without_log(&dir, &exe, &["quiet", "20"], &[]);
    assert_eq!((code, stdout.as_str()), (Some(0), "ok\n"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("heaptui[") && lines[0].contains("]: listening on unix:"),
        "{stderr}"
    );
}

/// The test above, run again by this test binary with `HEAPTUI_*` variables of the kind a
/// developer's shell or a build tool sets (an unknown one, a malformed one, a log file): the
/// harness keeps them from the target, so the agent still prints only its listening line.
#[test]
fn the_harness_keeps_the_test_processes_heaptui_variables_from_the_target() {
    let dir = TempDir::new("quiet-inherited");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_healthy_run_prints_only_the_listening_line_and_fork_children_nothing",
            "--nocapture",
        ])
        .env("HEAPTUI_EMBEDDED_AGENT", "/nowhere/agent.so")
        .env("HEAPTUI_STACK_DEPTH", "lots")
        .env("HEAPTUI_LOG", dir.path().join("inherited.log"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn agent_lines_never_land_in_a_file_the_program_opened_on_fd_2() {
    let dir = TempDir::new("fd2-reuse");
    let exe = compile_c(&dir, "descriptors", DESCRIPTORS, &[]);
    let data = dir.path().join("data.txt");
    // A malformed variable: something went wrong, so the exit summary is written too, to the
    // standard error the program started with.
    let (code, stdout, stderr) = run_without_log(
        &dir,
        &exe,
        &["reuse", data.to_str().unwrap()],
        &[("HEAPTUI_STACK_DEPTH", "deep")],
    );
    assert_eq!((code, stdout.as_str()), (Some(0), "ok\n"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&data).unwrap(),
        "parent\nchild\n",
        "the program's file holds the program's lines only"
    );
    let summaries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("exit summary:"))
        .collect();
    // The parent's, on the real standard error; the fork child's nowhere.
    assert_eq!(summaries.len(), 1, "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("HEAPTUI_STACK_DEPTH=\"deep\"")),
        "{stderr}"
    );
}

#[test]
fn with_fds_closed_at_start_the_agent_is_silent_and_holds_none_of_0_to_2() {
    let dir = TempDir::new("fd-closed");
    let exe = compile_c(&dir, "descriptors", DESCRIPTORS, &[]);
    let data0 = dir.path().join("data0.txt");
    let data2 = dir.path().join("data2.txt");
    let (code, stdout, stderr) = run_without_log(
        &dir,
        &exe,
        &["closer", data0.to_str().unwrap(), data2.to_str().unwrap()],
        // Something goes wrong (a malformed variable): there is still nowhere to say so.
        &[("HEAPTUI_STACK_DEPTH", "deep")],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "fds 0 2 agent 1\n"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&data0).unwrap(), "data0\n");
    assert_eq!(std::fs::read_to_string(&data2).unwrap(), "data2\nchild\n");
    // Only the first image (fd 2 still open) said anything: its `listening on` line.
    assert!(
        stderr.lines().all(|l| !l.contains("exit summary")),
        "{stderr}"
    );
}
