//! A capture whose copy-on-write child cannot be made (docs/reference.md §3: the scan then
//! runs while the world is stopped and the rest in the process after the resume) gives the
//! report a capture with a child gives.
//!
//! The target makes its own forks fail, as a full `pids.max` or `RLIMIT_NPROC` would: it
//! installs a seccomp filter on all of its threads (the agent's included, `TSYNC`) that
//! answers `EAGAIN` to every `clone` without `CLONE_THREAD`, to `fork` and `vfork`, and
//! `ENOSYS` to `clone3` (whose flags a filter cannot read; glibc then falls back to
//! `clone`). A filter needs no privilege and works in any container, where a cgroup's
//! `pids.max` needs root and a writable cgroup hierarchy, and `RLIMIT_NPROC` does not bind
//! root. The target checks that its own `fork()` now fails with `EAGAIN`. That a live capture
//! had no child the agent's log shows: a snapshot line without the scanning child's per-pass
//! line that a child sends, its `child_cpu_ms` zero, saying `no scanning child` and why. A
//! capture at exit logs only that sentence: there the target's figures for the children it
//! reaped show as well whether the agent made one.

mod live_common;

use std::time::{Duration, Instant};

use live_common::*;
use serde_json::Value;

const TARGET_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready, quit;
static char *shared;
void *kept[16];

static void say(const char *s) { if (write(1, s, strlen(s)) < 0) _exit(3); }

static void *worker(void *arg) {
    long i = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", i);
    pthread_setname_np(pthread_self(), name);
    char *volatile mine = malloc(1000 + i);
    char *volatile common = shared;
    memset(mine, 1, 1000 + i);
    pthread_mutex_lock(&mu);
    ready++;
    pthread_cond_broadcast(&cv);
    while (!quit) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    (void)common;
    free(mine);
    return 0;
}

/* Every new process refused: clone without CLONE_THREAD, fork and vfork with EAGAIN (what a
 * full pids.max answers), clone3 with ENOSYS (glibc falls back to clone). Threads may start. */
static int refuse_forks(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fork, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_vfork, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 1, 4),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program);
}

/* A lost ring of two and a lone lost block, made in a frame that returns. */
static __attribute__((noinline)) void lose(void) {
    void **a = malloc(48), **b = malloc(48);
    a[0] = b;
    b[0] = a;
    void *lone = malloc(200);
    __asm__ volatile("" ::"r"(a), "r"(b), "r"(lone) : "memory");
}

/* The stack below main's frame, zeroed: no stale copy of the lost blocks' addresses. */
static __attribute__((noinline)) void clear_stack(void) {
    volatile char pad[64 * 1024];
    memset((char *)pad, 0, sizeof pad);
    __asm__ volatile("" ::"r"(pad) : "memory");
}

int main(void) {
    shared = malloc(3000);
    for (int k = 0; k < 16; k++) {
        kept[k] = malloc(64 + k);
        memset(kept[k], 0, 64 + k);
    }
    lose();
    clear_stack();
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, (void *)i);
    pthread_mutex_lock(&mu);
    while (ready < 3) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    char line[128];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(0, line + len, 1);
        if (n <= 0) break;
        if (line[len] != '\n' && len < sizeof line - 1) { len++; continue; }
        line[len] = 0;
        len = 0;
        if (strcmp(line, "quit") == 0) break;
        if (strcmp(line, "refuse-forks") == 0) {
            char out[128];
            if (refuse_forks() != 0) {
                snprintf(out, sizeof out, "seccomp: %s\n", strerror(errno));
                say(out);
                continue;
            }
            pid_t pid = fork();
            if (pid == 0) _exit(0);
            snprintf(out, sizeof out, "fork: %s\n", pid < 0 ? strerror(errno) : "made a child");
            say(out);
        } else {
            say("?\n");
        }
    }
    pthread_mutex_lock(&mu);
    quit = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    say("done\n");
    return 0;
}
"#;

/// The agent log's snapshot lines and its lines of the scanning child's passes.
fn snapshot_lines(log: &str) -> (Vec<&str>, usize) {
    let snapshots = log
        .lines()
        .filter(|l| l.contains(": snapshot ") && l.contains("child_cpu_ms="))
        .collect();
    let passes = log
        .lines()
        .filter(|l| l.contains("the scanning child's analysis by pass"))
        .count();
    (snapshots, passes)
}

#[test]
fn a_report_without_a_scanning_child_equals_the_report_with_one() {
    let dir = Scratch::new("without-child");
    let exe = compile_c(dir.path(), "refuses_forks", TARGET_C);
    let socket = dir.path().join("agent.sock");
    let mut target = Target::start(dir.path(), &exe, &format!("unix:{}", socket.display()), &[]);

    let with_child = report_json(&[&target.address]);
    let log = target.log_text();
    let (snapshots, passes) = snapshot_lines(&log);
    assert_eq!(
        (snapshots.len(), passes),
        (1, 1),
        "one snapshot, analysed by a child:\n{log}"
    );

    assert_eq!(
        target.command("refuse-forks"),
        "fork: Resource temporarily unavailable"
    );
    let without_child = report_json(&[&target.address]);
    let log = target.log_text();
    let (snapshots, passes) = snapshot_lines(&log);
    assert_eq!(
        (snapshots.len(), passes),
        (2, 1),
        "a second snapshot, and no child to analyse it:\n{log}"
    );
    assert!(
        snapshots[1].contains("child_cpu_ms=0.000"),
        "{}",
        snapshots[1]
    );
    // Each line says where its scan ran.
    assert!(
        snapshots[0].contains("(in the scanning child: "),
        "{}",
        snapshots[0]
    );
    assert!(
        snapshots[1].contains("(no scanning child (Resource temporarily unavailable"),
        "{}",
        snapshots[1]
    );

    // The same idle process: the same report, every figure, frame, group and leak.
    assert_eq!(
        without_timing(with_child.clone()),
        without_timing(without_child)
    );
    // And it is the target's: three workers, each with its own block, a lost ring of two and
    // a lost block.
    assert_eq!(with_child["threads_not_stopped"], 0, "{with_child}");
    let workers = with_child["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("worker-"))
        .count();
    assert_eq!(workers, 3, "{with_child}");
    let leaks = &with_child["leaks"];
    assert_eq!(leaks["definitely_lost_objects"], 2, "{leaks}");
    assert_eq!(leaks["indirectly_lost_objects"], 1, "{leaks}");
    assert_eq!(leaks["definitely_lost"], 248, "{leaks}");

    let (out, _) = target.finish();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(out.status.code(), Some(0));
}

/// A report less what differs between two processes running the same program: their pid,
/// command line and thread ids, and where their blocks are (addresses, and the snapshot's
/// order of the blocks, which is by address).
fn of_any_process(mut report: Value) -> Value {
    let map = report.as_object_mut().unwrap();
    map.remove("process");
    for group in map["groups"].as_array_mut().unwrap() {
        let group = group.as_object_mut().unwrap();
        group.remove("addr");
        group.remove("entry");
    }
    for thread in map["threads"].as_array_mut().unwrap() {
        thread.as_object_mut().unwrap().remove("tid");
    }
    report
}

/// Minor page faults of the children `target` reaped, read from its `/proc/PID/stat` once it
/// has ended and before it is reaped itself (a zombie: its figures are still there). The
/// target makes no child of its own: any is the agent's, and a child faults on the first page
/// it writes (copy on write). The snapshot at exit logs no line of its child's (the live
/// snapshot's `child_cpu_ms` and per-pass lines are the kept snapshot's): this is how a test
/// tells a capture at exit that had one.
fn faults_of_reaped_children(target: &Target) -> u64 {
    let stat_file = format!("/proc/{}/stat", target.child.id());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stat = std::fs::read_to_string(&stat_file).unwrap();
        // The fields after the command's closing parenthesis, from the third (state) on.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        if fields[0] == "Z" {
            return fields[11 - 3].parse().unwrap(); // cminflt
        }
        assert!(
            Instant::now() < deadline,
            "the target did not end: {stat}\n{}",
            target.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The snapshot at exit (`HEAPTUI_DUMP`, written to a file, no kept snapshot) of a process
/// whose forks fail, reported: equal to the one of the same program whose forks succeed,
/// whose capture had a child.
#[test]
fn a_snapshot_at_exit_without_a_scanning_child_equals_one_with_it() {
    let dir = Scratch::new("without-child-exit");
    let exe = compile_c(dir.path(), "refuses_forks", TARGET_C);
    let report_at_exit = |refuse: bool| {
        let tag = if refuse { "refused" } else { "allowed" };
        let prefix = dir.path().join(tag);
        let mut target = Target::start(
            dir.path(),
            &exe,
            &format!("unix:{}", dir.path().join(format!("{tag}.sock")).display()),
            &[("HEAPTUI_DUMP", prefix.to_str().unwrap())],
        );
        if refuse {
            assert_eq!(
                target.command("refuse-forks"),
                "fork: Resource temporarily unavailable"
            );
        }
        let pid = target.child.id();
        assert_eq!(target.command("quit"), "done");
        let faults = faults_of_reaped_children(&target);
        let (out, log) = target.finish();
        assert_eq!(out.status.code(), Some(0), "{out:?}\n{log}");
        let file = dir.path().join(format!("{tag}.{pid}.1.hsnap"));
        let snapshots: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!(": snapshot {}: ", file.display())))
            .collect();
        assert_eq!(snapshots.len(), 1, "{log}");
        // The line says where the scan ran.
        let said = if refuse {
            "; no scanning child (Resource temporarily unavailable"
        } else {
            "; in the scanning child: "
        };
        assert!(snapshots[0].contains(said), "{}", snapshots[0]);
        (
            of_any_process(report_json(&[file.to_str().unwrap()])),
            faults,
        )
    };
    let (allowed, allowed_faults) = report_at_exit(false);
    let (refused, refused_faults) = report_at_exit(true);
    // The first capture had its child, the second none: two captures alike would compare
    // nothing.
    assert!(allowed_faults > 0, "no child reaped with forks allowed");
    assert_eq!(refused_faults, 0, "a child reaped with forks refused");
    assert_eq!(refused, allowed);
    let leaks = &allowed["leaks"];
    assert_eq!(leaks["definitely_lost_objects"], 2, "{leaks}");
    assert_eq!(leaks["definitely_lost"], 248, "{leaks}");
    assert_eq!(leaks["indirectly_lost"], 48, "{leaks}");
}
