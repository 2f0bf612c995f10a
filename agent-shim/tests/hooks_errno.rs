//! errno-exact interposition: every function the agent exports or wraps returns what glibc
//! returns and leaves errno as glibc leaves it, on success and on failure — also when the
//! agent's own system calls fail under it (a contended lock's futex wait, a /proc read with
//! no descriptor left, a table that cannot grow). tests/targets/errno_table.c prints one row
//! per call (its result and errno); the rows bare and under the real preload must be equal.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const ERRNO_TABLE: &str = include_str!("targets/errno_table.c");

fn bare(exe: &Path, mode: &str) -> (Option<i32>, String) {
    let mut cmd = Command::new(exe);
    cmd.arg(mode).env_remove("LD_PRELOAD");
    let out = output_within(cmd, TARGET_TIMEOUT);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs `mode` bare and under the agent (with `env`); the outputs must be identical. Returns
/// the agent's run.
fn same_as_bare(dir: &TempDir, exe: &Path, mode: &str, env: &[(&str, &str)]) -> Run {
    let (code, stdout) = bare(exe, mode);
    assert_eq!(code, Some(0), "bare {mode} run failed:\n{stdout}");
    let run = run_preloaded(dir, exe, &[mode], env);
    assert_eq!(
        run.stdout, stdout,
        "{mode} under the agent ({env:?}) differs from the bare run\nagent stderr:\n{}",
        run.stderr
    );
    assert_eq!(run.code, code, "{}", run.stderr);
    run
}

fn compile(dir: &TempDir) -> std::path::PathBuf {
    // -fno-builtin: every call must reach the library (gcc folds malloc(SIZE_MAX/2) and more).
    compile_c(dir, "errno_table", ERRNO_TABLE, &["-fno-builtin"])
}

#[test]
fn every_wrapped_call_returns_and_sets_errno_as_glibc_does() {
    let dir = TempDir::new("errno-table");
    let exe = compile(&dir);
    let run = same_as_bare(&dir, &exe, "table", &[]);
    // The table really holds the calls of issue 12 (a successful sigprocmask leaving errno
    // alone) and failures with their errno.
    for row in [
        "sigprocmask_block ret=0 errno=kept",
        "pthread_sigmask_bad_how ret=22 errno=kept",
        "malloc_huge ret=null errno=12",
        "posix_memalign_3 ret=22 errno=kept",
        "free ret=void errno=kept",
        "pause ret=-1 errno=4",
        "execve_missing ret=-1 errno=2",
        "atexit_handler ret=void errno=kept",
        "semop_interrupted ret=-1 errno=4",
        "msgrcv_interrupted ret=-1 errno=4",
        "semtimedop_timeout ret=-1 errno=11",
        "msgrcv ret=3 errno=kept",
        "read ret=1 errno=kept",
        "read_timeout ret=-1 errno=11",
        "read_interrupted ret=-1 errno=4",
        "recvmmsg ret=1 errno=kept",
        "sem_timedwait_timeout ret=-1 errno=110",
        "sem_timedwait_interrupted ret=-1 errno=4",
        "thrd_sleep ret=0 errno=kept",
    ] {
        assert!(run.stdout.lines().any(|l| l == row), "no row {row:?}");
    }
    assert!(run.stdout.lines().count() > 120, "{}", run.stdout);
    // With HEAPTUI_DUMP the agent owns SIGUSR2 (signals::chain): the same answers.
    let prefix = dir.path().join("snap");
    same_as_bare(
        &dir,
        &exe,
        "table",
        &[("HEAPTUI_DUMP", prefix.to_str().unwrap())],
    );
    // Without allocation stacks and without held frees: other hook paths, same answers.
    same_as_bare(
        &dir,
        &exe,
        "table",
        &[("HEAPTUI_STACK_DEPTH", "0"), ("HEAPTUI_HOLD_FREES", "0")],
    );
}

#[test]
fn a_contended_table_lock_leaves_errno_alone() {
    let dir = TempDir::new("errno-contention");
    let exe = compile(&dir);
    let run = same_as_bare(&dir, &exe, "contention", &[]);
    assert_eq!(
        run.stdout.trim(),
        "contention_errno_changes ret=0 errno=kept"
    );
}

#[test]
fn a_failed_stack_lookup_leaves_errno_alone() {
    let dir = TempDir::new("errno-emfile");
    let exe = compile(&dir);
    let run = same_as_bare(&dir, &exe, "emfile", &[]);
    assert!(run.stdout.contains("emfile_open ret=-1 errno=24"));
    // The lookups really failed: the calls whose stack was needed got none.
    assert!(run.summary().get("stacks_dropped") >= 3, "{}", run.log);
}

#[test]
fn a_table_that_cannot_grow_leaves_errno_alone() {
    let dir = TempDir::new("errno-enomem");
    let exe = compile(&dir);
    let run = same_as_bare(&dir, &exe, "enomem", &[]);
    assert!(
        run.stdout
            .contains("enomem_failed_mallocs ret=0 errno=kept")
    );
    // The growth really failed: tracking stopped, the program did not notice.
    assert_eq!(run.summary().get("tracking_stopped"), 1, "{}", run.log);
}
