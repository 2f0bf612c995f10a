//! fork and exec under the agent: fork children (also forked while other threads allocate)
//! keep a working agent and exit normally; exec'd children do not inherit the agent in
//! LD_PRELOAD unless HEAPTUI_FOLLOW_EXEC=1, and other preloads are kept; a clone made through
//! `syscall(3)` with a child stack returns on that stack as glibc's `syscall` leaves it.

mod common;

use common::*;

const FORKER: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *churn(void *arg) {
    (void)arg;
    /* No rand(): its lock may be held by another thread when fork() happens. */
    for (unsigned i = 0; !stop; i++) {
        void *p = malloc(64 + (i * 37) % 1000);
        free(p);
    }
    return NULL;
}

int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, NULL);
    int ok = 0;
    for (int round = 0; round < 40; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* The child: only this thread exists; the agent must not be stuck on a lock. */
            char *keep = NULL;
            for (int i = 0; i < 1000; i++) {
                char *p = malloc(100 + i);
                memset(p, 1, 100 + i);
                if (i == 500) { keep = p; continue; }
                free(p);
            }
            pthread_t inner;
            pthread_create(&inner, NULL, churn, NULL);
            stop = 1;
            pthread_join(inner, NULL);
            exit(keep ? 0 : 1);
        }
        int status;
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
    }
    stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("children ok: %d\n", ok);
    return ok == 40 ? 0 : 1;
}
"#;

#[test]
fn fork_children_keep_a_working_agent_while_threads_allocate() {
    let dir = TempDir::new("hooks-fork");
    let exe = compile_c(&dir, "forker", FORKER, &[]);
    let run = run_preloaded(&dir, &exe, &[], &[]);
    assert_eq!(run.stdout, "children ok: 40\n", "stderr: {}", run.stderr);
    assert_eq!(run.code, Some(0));
    let summaries = run.summaries();
    assert_eq!(summaries.len(), 41, "one summary per process:\n{}", run.log);
    let parent = summaries
        .iter()
        .find(|s| s.values["malloc"] > 0 && s.pid == summaries.last().unwrap().pid);
    assert!(parent.is_some());
    for s in &summaries {
        for key in ["unknown_frees", "unknown_reallocs", "stale_entries"] {
            assert_eq!(s.get(key), 0, "{key} in process {}: {:?}", s.pid, s.values);
        }
    }
    // Each child's own work is visible in its summary: 1000 mallocs on top of what it
    // inherited, with the kept block among its live ones.
    let parent_pid = summaries.last().unwrap().pid;
    for child in summaries.iter().filter(|s| s.pid != parent_pid) {
        assert!(child.get("malloc") >= 1000, "{:?}", child.values);
        assert!(child.get("live_blocks") >= 1);
    }
}

/// `syscall(SYS_clone, ...)` with a child stack whose top holds where the child is to go: the
/// child comes back from the system call on that stack, and glibc's `syscall` then returns
/// with `ret`, popping that address and writing nothing. The agent exports `syscall`
/// (signals::raw_syscall): a frame of its own there would be popped from the child's stack,
/// or written on it. The child's code touches no stack (it sets a flag and exits by the
/// instruction), so the stack must come back exactly as the parent filled it.
const CLONE_ON_STACK: &str = r#"
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

volatile int child_ran;
void child_entry(void);
__asm__(".text\n"
        "child_entry:\n"
        "    movl $1, child_ran(%rip)\n"
        "    movl $60, %eax\n" /* exit(7), with no stack */
        "    movl $7, %edi\n"
        "    syscall\n");

int main(void) {
    size_t size = 1 << 16;
    char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                       -1, 0);
    if (stack == MAP_FAILED) return 3;
    memset(stack, 0xa5, size);
    uintptr_t *top = (uintptr_t *)(stack + size - 16);
    top[0] = (uintptr_t)child_entry;
    char before[1 << 16];
    memcpy(before, stack, size);
    long pid = syscall(SYS_clone, CLONE_VM | SIGCHLD, top, NULL, NULL, 0);
    if (pid < 0) {
        perror("clone");
        return 4;
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return 5;
    if (WIFEXITED(status))
        printf("child ran %d, exited %d\n", child_ran, WEXITSTATUS(status));
    else
        printf("child ran %d, killed by signal %d\n", child_ran, WTERMSIG(status));
    size_t written = 0;
    for (size_t i = 0; i < size; i++) written += stack[i] != before[i];
    printf("child stack bytes written: %zu\n", written);
    return 0;
}
"#;

#[test]
fn a_clone_through_syscall_returns_on_the_child_stack_as_glibc_leaves_it() {
    let dir = TempDir::new("hooks-clone-syscall");
    let exe = compile_c(&dir, "clone_on_stack", CLONE_ON_STACK, &[]);
    let bare = std::process::Command::new(&exe).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&bare.stdout),
        "child ran 1, exited 7\nchild stack bytes written: 0\n"
    );
    let run = run_preloaded(&dir, &exe, &[], &[]);
    assert_eq!(
        (run.stdout.as_str(), run.code),
        (
            "child ran 1, exited 7\nchild stack bytes written: 0\n",
            Some(0)
        ),
        "stderr: {}\nlog:\n{}",
        run.stderr,
        run.log
    );
}

const EXECER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *preload(void) { return getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : ""; }

int main(int argc, char **argv) {
    if (argc > 1) {
        /* The exec'd child: a plain program that returns from main. */
        printf("child LD_PRELOAD=[%s]\n", preload());
        return 0;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "execer", "child", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("parent LD_PRELOAD=[%s]\n", preload());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}
"#;

#[test]
fn exec_children_lose_the_agent_but_keep_other_preloads() {
    let dir = TempDir::new("hooks-exec");
    let exe = compile_c(&dir, "execer", EXECER, &[]);
    let agent = agent_path();
    let preload = format!("libm.so.6 {}", agent.display());
    let run = run_preloaded(&dir, &exe, &[], &[("LD_PRELOAD", &preload)]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "child LD_PRELOAD=[libm.so.6]\nparent LD_PRELOAD=[libm.so.6]\n"
    );
    // Only the parent ran the agent.
    assert_eq!(run.summaries().len(), 1, "{}", run.log);

    let run = run_preloaded(&dir, &exe, &[], &[]);
    assert_eq!(
        run.stdout, "child LD_PRELOAD=[]\nparent LD_PRELOAD=[]\n",
        "{}",
        run.stderr
    );
}

#[test]
fn follow_exec_keeps_the_agent_in_children() {
    let dir = TempDir::new("hooks-exec-follow");
    let exe = compile_c(&dir, "execer", EXECER, &[]);
    let agent = agent_path().display().to_string();
    let run = run_preloaded(&dir, &exe, &[], &[("HEAPTUI_FOLLOW_EXEC", "1")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!("child LD_PRELOAD=[{agent}]\nparent LD_PRELOAD=[{agent}]\n")
    );
    // The exec'd child ran under the agent too: two processes, two summaries.
    let summaries = run.summaries();
    assert_eq!(summaries.len(), 2, "{}", run.log);
    assert_ne!(summaries[0].pid, summaries[1].pid);
}
