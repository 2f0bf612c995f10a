//! `heaptui report pid:PID` and `heaptui snapshot pid:PID -o FILE` on processes started without
//! the agent (docs/reference.md §2, §3): the real `heaptui` binary captures a real C process
//! from outside with ptrace, and each refusal is one line that names the process, with the
//! process left running.

mod live_common;
mod outside_common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use live_common::{Scratch, heaptui};
use outside_common::{SUM, TARGET, Target, stopped_or_traced, target_exe};

/// Runs `command`, which must succeed, and returns its standard output.
fn succeed(mut command: Command) -> Vec<u8> {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn json_report(source: &str) -> serde_json::Value {
    let mut report = heaptui();
    report.args(["report", source, "--json"]);
    serde_json::from_slice(&succeed(report)).unwrap()
}

#[test]
fn report_and_snapshot_of_a_process_without_the_agent_count_its_blocks_and_leave_it_running() {
    let dir = Scratch::new("outside-cli");
    let mut target = Target::start(Command::new(target_exe(dir.path())));
    let pid = target.pid();
    let source = format!("pid:{pid}");

    let live = json_report(&source);
    assert_eq!(live["process"]["pid"], pid);
    // Its blocks, and one of glibc's: the worker thread's DTV, which pthread_create got from
    // calloc (the agent counts it too: it is a malloc block like any other).
    assert_eq!(live["totals"]["objects"], target.objects + 1, "{live}");
    let extra = live["totals"]["bytes"].as_u64().unwrap() - target.bytes;
    assert!((16..=1024).contains(&extra), "{live}");
    assert_eq!(live["outside"], true, "{live}");
    // Every block is reachable: the list and the 1 MiB block from their statics.
    assert_eq!(live["leaks"]["bytes"], 0, "{live}");
    // main and the worker: every thread is listed, unwound frame by frame. The
    // worker's 50 blocks of 24 bytes and its DTV are its own: no other thread's stack or TLS
    // reaches them.
    let threads = live["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{live}");
    let worker = threads
        .iter()
        .find(|t| t["tid"] != pid)
        .expect("the worker thread");
    assert_eq!(worker["proprietary"], 50 * 24 + extra, "{live}");
    assert_eq!(worker["shared"], 0, "{live}");
    // Each frame by name: the worker's function holds its array of 50 pointers on its stack, so
    // its frame holds the 50 blocks; main's chain reaches `main`.
    let frames = |t: &serde_json::Value| -> Vec<(String, u64)> {
        t["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["function"].as_str().unwrap().to_string(),
                    f["proprietary"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let worker_frames = frames(worker);
    assert!(
        worker_frames.contains(&("worker".to_string(), 50 * 24)),
        "{worker_frames:?}"
    );
    assert_eq!(worker_frames.last().unwrap().0, "<thread>");
    let main = threads.iter().find(|t| t["tid"] == pid).unwrap();
    assert!(
        frames(main).iter().any(|(f, _)| f == "main"),
        "{:?}",
        frames(main)
    );
    assert_eq!(stopped_or_traced(pid), None);
    assert_eq!(target.check(), SUM);

    let file = dir.path().join("kept.hsnap");
    let mut snapshot = heaptui();
    snapshot.args(["snapshot", &source, "-o"]).arg(&file);
    let said = String::from_utf8(succeed(snapshot)).unwrap();
    assert!(
        said.contains(&format!("snapshot of pid {pid}")) && said.contains("from outside"),
        "{said}"
    );
    let saved = json_report(file.to_str().unwrap());
    assert_eq!(saved["totals"], live["totals"], "{saved}");
    assert_eq!(saved["threads"].as_array().unwrap().len(), 2);

    assert_eq!(stopped_or_traced(pid), None);
    assert_eq!(target.check(), SUM);
    assert_eq!(target.quit(), Some(0));
}

/// A worker thread leaves 1024 copies of a block main holds and 1024 of a block of its own in
/// a frame it returns from (16 KiB, deeper than glibc's thread exit reaches), then ends and is
/// joined: glibc keeps its stack in its cache. The copies are no root (docs/reference.md §3):
/// main's block is main's frame's own, the worker's is definitely lost. Prints
/// `ready HELD LOST`, the two blocks' usable sizes.
const FINISHED_STACK: &str = r#"
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile mailbox;
static size_t lost_size;

__attribute__((noinline)) static void leave_copies(void *a, void *b) {
  void *volatile copies[2048];
  for (int i = 0; i < 2048; i += 2) { copies[i] = a; copies[i + 1] = b; }
  __asm__ volatile("" ::"r"(copies) : "memory");
}

static void *worker(void *arg) {
  (void)arg;
  void *lost = malloc(9999);
  memset(lost, 1, 9999);
  lost_size = malloc_usable_size(lost);
  leave_copies(mailbox, lost);
  mailbox = 0;
  return 0;
}

int main(void) {
  void *volatile held = malloc(8888);
  memset((void *)held, 2, 8888);
  mailbox = (void *)held;
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  pthread_join(t, 0);
  char line[64];
  snprintf(line, sizeof line, "ready %zu %zu\n", malloc_usable_size((void *)held), lost_size);
  write(1, line, strlen(line));
  char cmd[16];
  while (read(0, cmd, sizeof cmd) > 0) {}
  return 0;
}
"#;

/// `exe` started without the agent, stdin held open, and the first line it printed.
fn started(exe: &Path) -> (std::process::Child, String) {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

#[test]
fn a_finished_threads_stale_stack_words_are_no_root_from_outside_either() {
    let dir = Scratch::new("outside-finished-stack");
    let exe = live_common::compile_c(dir.path(), "finished", FINISHED_STACK);
    let (mut child, line) = started(&exe);
    let sizes: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    let (held, lost) = (sizes[0], sizes[1]);
    let pid = child.id();
    let live = json_report(&format!("pid:{pid}"));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(live["leaks"]["definitely_lost"], lost, "{live}");
    assert_eq!(live["leaks"]["definitely_lost_objects"], 1, "{live}");
    let main = live["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == pid)
        .expect("main");
    let main_frame = main["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "main")
        .expect("main's frame");
    assert_eq!(main_frame["proprietary"], held, "{live}");
}

/// A worker thread holds a block only in a frame on its own stack and runs a fiber on another
/// stack (swapcontext), where it waits: the suspended frame is a live thread's, a root, though
/// its stack has the shape of glibc's cached ones (docs/reference.md §3). Prints `ready SIZE`.
const FIBER_STACK: &str = r#"
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

static size_t held_size;

static void fiber(void) {
  char line[64];
  snprintf(line, sizeof line, "ready %zu\n", held_size);
  write(1, line, strlen(line));
  char cmd[16];
  while (read(0, cmd, sizeof cmd) > 0) {}
}

/* The address lands in the caller's frame only, in no register getcontext saves. */
__attribute__((noinline)) static void allocate_into(void *volatile *slot) {
  void *p = malloc(7777);
  memset(p, 3, 7777);
  held_size = malloc_usable_size(p);
  *slot = p;
}

__attribute__((noinline)) static void *worker(void *arg) {
  (void)arg;
  void *volatile held;
  allocate_into(&held);
  size_t size = 1 << 18;
  char *stack = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ucontext_t own, in_fiber;
  getcontext(&in_fiber);
  in_fiber.uc_stack.ss_sp = stack;
  in_fiber.uc_stack.ss_size = size;
  in_fiber.uc_link = &own;
  makecontext(&in_fiber, fiber, 0);
  swapcontext(&own, &in_fiber);
  free((void *)held);
  return 0;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  pthread_join(t, 0);
  return 0;
}
"#;

#[test]
fn a_live_thread_running_a_fiber_keeps_its_own_stacks_roots_from_outside() {
    let dir = Scratch::new("outside-fiber-stack");
    let exe = live_common::compile_c(dir.path(), "fiber", FIBER_STACK);
    let (mut child, line) = started(&exe);
    assert!(line.starts_with("ready "), "{line}");
    let pid = child.id();
    let live = json_report(&format!("pid:{pid}"));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(live["leaks"]["definitely_lost"], 0, "{live}");
    assert_eq!(live["leaks"]["definitely_lost_objects"], 0, "{live}");
}

/// Runs `command` and expects the one-line refusal of process `pid`, containing `why`.
fn expect_refusal(mut command: Command, pid: u32, why: &str) -> Output {
    let out = command.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("heaptui: "), "{err}");
    assert!(
        err.contains(&format!("pid:{pid}")) || err.contains(&format!("process {pid}")),
        "the error does not name the process: {err}"
    );
    assert!(err.contains(why), "{err:?} lacks {why:?}");
    out
}

fn report_of(pid: u32) -> Command {
    let mut c = heaptui();
    c.args(["report", &format!("pid:{pid}")]);
    c
}

#[test]
fn a_process_that_is_gone_is_refused_in_one_line() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    expect_refusal(report_of(pid), pid, "no such process");
}

#[test]
fn a_process_a_debugger_traces_is_refused_and_runs_on() {
    let dir = Scratch::new("outside-traced");
    let mut target = Target::start(Command::new(target_exe(dir.path())));
    let pid = target.pid();
    let mut strace = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace (apt-get install strace)");
    // strace says "Process N attached" on stderr once it traces the process.
    let mut err = BufReader::new(strace.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("attached") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "strace ended");
    }
    let file = dir.path().join("never.hsnap");
    let mut snapshot = heaptui();
    snapshot
        .args(["snapshot", &format!("pid:{pid}"), "-o"])
        .arg(&file);
    expect_refusal(snapshot, pid, "already traced by process");
    expect_refusal(report_of(pid), pid, "(strace)");
    assert!(!file.exists());
    nix_kill(strace.id(), "INT");
    strace.wait().unwrap();
    assert_eq!(target.check(), SUM);
    assert_eq!(target.quit(), Some(0));
}

fn nix_kill(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn a_static_program_is_refused_as_not_glibc_and_runs_on() {
    let dir = Scratch::new("outside-static");
    let src = dir.path().join("kept.c");
    std::fs::write(&src, TARGET).unwrap();
    let exe = dir.path().join("kept-static");
    let built = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-static", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("a C compiler (cc)");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut target = Target::start(Command::new(&exe));
    let pid = target.pid();
    expect_refusal(report_of(pid), pid, "no glibc libc.so.6");
    assert_eq!(target.check(), SUM);
    assert_eq!(target.quit(), Some(0));
}

/// The uid and gid the permission tests run as (Debian's `nobody`).
const NOBODY: &str = "65534";

/// `command` run as `nobody` (setpriv, from util-linux).
fn as_nobody(program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
    ])
    .arg(program)
    .args(args);
    c
}

/// A directory `nobody` may enter and whose files it may run.
fn open_to_everyone(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn another_users_process_is_refused_and_so_is_root_without_cap_sys_ptrace() {
    let dir = Scratch::new("outside-users");
    open_to_everyone(dir.path());
    let exe = target_exe(dir.path());

    // Run by root, reached by nobody: not nobody's process.
    let mut roots = Target::start(Command::new(&exe));
    let pid = roots.pid();
    let heaptui_exe = Path::new(env!("CARGO_BIN_EXE_heaptui"));
    expect_refusal(
        as_nobody(heaptui_exe, &["report", &format!("pid:{pid}")]),
        pid,
        "belongs to uid 0",
    );
    assert_eq!(roots.check(), SUM);

    // Run by nobody, reached by root without CAP_SYS_PTRACE (a restricted service).
    let mut nobodys = Target::start(as_nobody(&exe, &[]));
    let pid = nobodys.pid();
    let mut restricted = Command::new("setpriv");
    restricted
        .args(["--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"])
        .arg(heaptui_exe)
        .args(["report", &format!("pid:{pid}")]);
    expect_refusal(restricted, pid, "without CAP_SYS_PTRACE");
    assert_eq!(stopped_or_traced(pid), None);
    assert_eq!(nobodys.check(), SUM);
    assert_eq!(nobodys.quit(), Some(0));
    assert_eq!(roots.quit(), Some(0));
}

/// A Debian allocator library preloaded into the target (`.ci/run` installs them).
fn allocator_library(file: &str) -> std::path::PathBuf {
    let path = Path::new("/usr/lib/x86_64-linux-gnu").join(file);
    assert!(
        path.exists(),
        "{} is missing: apt-get install libjemalloc2 libtcmalloc-minimal4",
        path.display()
    );
    path
}

#[test]
fn a_process_on_jemalloc_or_tcmalloc_is_refused_naming_the_allocator_and_runs_on() {
    let dir = Scratch::new("outside-allocators");
    let exe = target_exe(dir.path());
    for (library, name) in [
        ("libjemalloc.so.2", "jemalloc"),
        ("libtcmalloc_minimal.so.4", "tcmalloc"),
    ] {
        let mut command = Command::new(&exe);
        command.env("LD_PRELOAD", allocator_library(library));
        let mut target = Target::start(command);
        let pid = target.pid();
        let out = expect_refusal(report_of(pid), pid, "its malloc is not glibc's");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(name) && err.contains("agent-path"), "{err}");
        assert_eq!(stopped_or_traced(pid), None, "{name}");
        assert_eq!(target.check(), SUM, "{name}");
        assert_eq!(target.quit(), Some(0), "{name}");
    }
}
