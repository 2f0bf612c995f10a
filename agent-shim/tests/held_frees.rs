//! Frees the agent holds back to apply in batches (`registry::held_frees`), seen from real C
//! targets under the real preload: a held block is freed as far as snapshots and counters
//! go, and its memory reaches libc before a big request, when its thread ends, and in a
//! fork child whose parent thread held it. libc's own count of mmap'd chunks
//! (`mallinfo2().hblks`) shows when a held 1 MiB block really went back.

mod common;

use std::path::PathBuf;

use common::{TempDir, compile_c, include_flag, run_dumping, run_preloaded};
use heaptui_analysis::snapshot;

const SYNC: &str = include_str!("targets/sync.h");

/// Frees five blocks (fewer than a batch) and reports the counters' view through the C API,
/// then snapshots: none of the five may be in it.
const HELD_IN_SNAPSHOT: &str = r#"
#include <stdint.h>
#include "heaptui.h"
#pragma weak heaptui_counters

int main(void) {
    struct heaptui_counters before, after;
    if (!heaptui_counters || heaptui_counters(&before) != 0) return 3;
    char *keep = malloc(777);
    keep[0] = 1;
    for (int i = 0; i < 5; i++) {
        char *p = malloc(1000 + i);
        p[0] = 1;
        free(p);
    }
    if (heaptui_counters(&after) != 0) return 3;
    printf("blocks %lld bytes %lld frees %llu\n",
           (long long)(after.live_blocks - before.live_blocks),
           (long long)(after.live_bytes - before.live_bytes),
           (unsigned long long)(after.calls[HEAPTUI_FREE] - before.calls[HEAPTUI_FREE]));
    fflush(stdout);
    snapshot_and_wait(1);
    free(keep);
    return 0;
}
"#;

#[test]
fn held_frees_are_out_of_snapshots_and_counted_as_freed() {
    let dir = TempDir::new("held-snapshot");
    let exe = compile_c(
        &dir,
        "held",
        &format!("{SYNC}\n{HELD_IN_SNAPSHOT}"),
        &[&include_flag(), "-fno-builtin"],
    );
    let r = run_dumping(&dir, &exe);
    assert_eq!(r.code, Some(0), "stderr:\n{}\nlog:\n{}", r.stderr, r.log);
    // The counters read as if the five frees were applied: one block (777 bytes) more.
    assert_eq!(r.stdout, "blocks 1 bytes 777 frees 5\n");
    let snap: PathBuf = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".1.hsnap"))
        .expect("snapshot 1");
    let graph = snapshot::read_file(&snap).unwrap();
    let sizes = &graph.objects().size;
    assert_eq!(sizes.iter().filter(|&&s| s == 777).count(), 1);
    let freed: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|s| (1000..1005).contains(s))
        .collect();
    assert!(freed.is_empty(), "freed blocks in the snapshot: {freed:?}");
}

/// Prints libc's count of mmap'd chunks at each step of `body`, run with `env`.
fn mmapped_chunks(name: &str, body: &str, env: &[(&str, &str)]) -> String {
    let src = format!(
        r#"
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (1 << 20)
static void chunks(const char *when) {{ printf("%s %zu\n", when, mallinfo2().hblks); fflush(stdout); }}
{body}
"#
    );
    let dir = TempDir::new(name);
    let exe = compile_c(&dir, name, &src, &["-pthread", "-fno-builtin"]);
    let r = run_preloaded(&dir, &exe, &[], env);
    assert_eq!(r.code, Some(0), "stderr:\n{}\nlog:\n{}", r.stderr, r.log);
    r.stdout
}

#[test]
fn a_big_request_first_gets_the_memory_of_held_frees() {
    let out = mmapped_chunks(
        "held-big",
        r#"
int main(void) {
    mallopt(M_MMAP_THRESHOLD, 64 << 10); /* fixed: a freed mmap'd chunk would raise it */
    char *a = malloc(BIG);
    a[0] = 1;
    chunks("allocated");
    free(a);
    char *b = malloc(BIG);
    b[0] = 1;
    chunks("reallocated");
    free(b);
    return 0;
}
"#,
        &[],
    );
    // Without the flush before a big request, a (held) and b would both be mapped.
    assert_eq!(out, "allocated 1\nreallocated 1\n");
}

#[test]
fn hold_frees_0_hands_every_free_to_libc_at_once() {
    let program = r#"
int main(void) {
    mallopt(M_MMAP_THRESHOLD, 64 << 10);
    char *a = malloc(BIG);
    a[0] = 1;
    chunks("allocated");
    free(a);
    chunks("freed");
    return 0;
}
"#;
    // Held by default (the batch is not full), handed over at once when turned off.
    let held = mmapped_chunks("held-default", program, &[]);
    assert_eq!(held, "allocated 1\nfreed 1\n");
    let direct = mmapped_chunks("held-off", program, &[("HEAPTUI_HOLD_FREES", "0")]);
    assert_eq!(direct, "allocated 1\nfreed 0\n");
}

#[test]
fn an_ending_thread_and_a_fork_child_apply_the_frees_held_for_them() {
    let out = mmapped_chunks(
        "held-exit-fork",
        r#"
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int stage;

static void set_stage(int s) {
    pthread_mutex_lock(&m); stage = s; pthread_cond_broadcast(&c); pthread_mutex_unlock(&m);
}
static void await_stage(int s) {
    pthread_mutex_lock(&m); while (stage < s) pthread_cond_wait(&c, &m); pthread_mutex_unlock(&m);
}

static void *frees_and_ends(void *arg) {
    (void)arg;
    char *p = malloc(BIG);
    p[0] = 1;
    free(p);
    return NULL;
}

static void *frees_and_waits(void *arg) {
    (void)arg;
    char *p = malloc(BIG);
    p[0] = 1;
    free(p);
    set_stage(1);
    await_stage(2);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, frees_and_ends, NULL);
    pthread_join(t, NULL);
    chunks("ended");
    pthread_create(&t, NULL, frees_and_waits, NULL);
    await_stage(1);
    pid_t pid = fork();
    if (pid == 0) {
        chunks("child");
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    set_stage(2);
    pthread_join(t, NULL);
    chunks("joined");
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
"#,
        &[],
    );
    // The ending thread's block went back with it; the child applied the waiting thread's
    // (a thread it does not have); the parent got it back when that thread ended.
    assert_eq!(out, "ended 0\nchild 0\njoined 0\n");
}

/// Two producers allocate messages that two consumers free (every free crosses threads),
/// while the main thread has the agent capture a snapshot after each sixth of the messages
/// went through (sync.h: it waits for the file; the workers go on meanwhile): held frees in
/// flight on every thread, captured repeatedly. The counters are read through the C API around the
/// work alone (threads already started, not yet ended): glibc's own allocations for thread
/// start and end vary from run to run with its stack cache.
const CROSS_THREAD: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "heaptui.h"
#pragma weak heaptui_counters

#define MESSAGES 100000
#define RING 64
static void *ring[RING];
static long head, tail, consumed;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t start, done, leave;

static long progress(void) {
    pthread_mutex_lock(&m);
    long n = consumed;
    pthread_mutex_unlock(&m);
    return n;
}

static void *producer(void *arg) {
    long id = (long)arg;
    pthread_barrier_wait(&start);
    for (long i = 0; i < MESSAGES; i++) {
        size_t size = 24 + (i * 37 + id) % 2000;
        char *msg = malloc(size);
        memset(msg, (int)i, size);
        pthread_mutex_lock(&m);
        while (head - tail == RING) pthread_cond_wait(&not_full, &m);
        ring[head++ % RING] = msg;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&m);
    }
    pthread_barrier_wait(&done);
    pthread_barrier_wait(&leave);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (;;) {
        pthread_mutex_lock(&m);
        while (head == tail && consumed < 2 * MESSAGES) pthread_cond_wait(&not_empty, &m);
        if (head == tail) { pthread_mutex_unlock(&m); break; }
        void *msg = ring[tail++ % RING];
        if (++consumed == 2 * MESSAGES) pthread_cond_broadcast(&not_empty);
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&m);
        free(msg);
    }
    pthread_barrier_wait(&done);
    pthread_barrier_wait(&leave);
    return NULL;
}

int main(void) {
    if (!heaptui_counters) return 3;
    pthread_barrier_init(&start, NULL, 5);
    pthread_barrier_init(&done, NULL, 5);
    pthread_barrier_init(&leave, NULL, 5);
    pthread_t t[4];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, consumer, NULL);
    for (long i = 0; i < 2; i++) pthread_create(&t[2 + i], NULL, producer, (void *)i);
    struct heaptui_counters before, after;
    heaptui_counters(&before);
    pthread_barrier_wait(&start);
    for (int i = 1; i <= 5; i++) {
        while (progress() < i * 2 * MESSAGES / 6) usleep(1000);
        snapshot_and_wait(i);
    }
    pthread_barrier_wait(&done);
    heaptui_counters(&after);
    pthread_barrier_wait(&leave);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("malloc %llu free %llu blocks %lld bytes %lld unknown %llu\n",
           (unsigned long long)(after.calls[HEAPTUI_MALLOC] - before.calls[HEAPTUI_MALLOC]),
           (unsigned long long)(after.calls[HEAPTUI_FREE] - before.calls[HEAPTUI_FREE]),
           (long long)(after.live_blocks - before.live_blocks),
           (long long)(after.live_bytes - before.live_bytes),
           (unsigned long long)(after.unknown_frees - before.unknown_frees));
    return 0;
}
"#;

#[test]
fn cross_thread_frees_under_repeated_captures_end_exact() {
    let dir = TempDir::new("held-cross");
    let exe = compile_c(
        &dir,
        "cross",
        &format!("{SYNC}\n{CROSS_THREAD}"),
        &["-pthread", "-fno-builtin", &include_flag()],
    );
    let run = run_dumping(&dir, &exe);
    assert_eq!(
        run.code,
        Some(0),
        "stderr:\n{}\nlog:\n{}",
        run.stderr,
        run.log
    );
    assert_eq!(
        run.stdout,
        "malloc 200000 free 200000 blocks 0 bytes 0 unknown 0\n"
    );
    let summary = run.summary();
    for key in ["unknown_frees", "untracked", "stale_entries"] {
        assert_eq!(summary.get(key), 0, "{key}");
    }
    let snapshots = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".hsnap")
        })
        .count();
    // Five during the work, one at exit.
    assert_eq!(snapshots, 6, "{}", run.log);
}

/// Two fresh threads (their slots empty), one after the other, reading the counters through
/// the C API. The first allocates 15 blocks of 4000 bytes (under 4 KiB and fewer than a batch:
/// all wait in its slot, never published by a shard), reads, and frees them (taken back from
/// the slot: never published either). The second allocates 20 such blocks (16 applied, 4
/// waiting), reads, frees 10 (held back: fewer than a batch), and reads again.
const PEAK_WITH_HELD_AND_WAITING: &str = r#"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "heaptui.h"
#pragma weak heaptui_counters

enum { SIZE = 4000 };
static struct heaptui_counters before, waiting, gone, full, held;

static void *only_waiting(void *arg) {
    (void)arg;
    char *blocks[15];
    heaptui_counters(&before);
    for (int i = 0; i < 15; i++) {
        blocks[i] = malloc(SIZE);
        blocks[i][0] = 1;
    }
    heaptui_counters(&waiting);
    for (int i = 0; i < 15; i++) free(blocks[i]);
    heaptui_counters(&gone);
    return NULL;
}

static void *some_held(void *arg) {
    (void)arg;
    static char *blocks[20];
    for (int i = 0; i < 20; i++) {
        blocks[i] = malloc(SIZE);
        blocks[i][0] = 1;
    }
    heaptui_counters(&full);
    for (int i = 0; i < 10; i++) free(blocks[i]);
    heaptui_counters(&held);
    return NULL;
}

int main(void) {
    if (!heaptui_counters) return 3;
    pthread_t t;
    pthread_create(&t, NULL, only_waiting, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, some_held, NULL);
    pthread_join(t, NULL);
    int64_t top = (int64_t)before.live_bytes + 15 * SIZE;
    printf("room for the waiting blocks: %s\n", (int64_t)before.peak_live_bytes < top ? "yes" : "no");
    printf("waiting: live gained %lld, peak reaches them %s, kept after their free %s\n",
           (long long)(waiting.live_bytes - before.live_bytes),
           (int64_t)waiting.peak_live_bytes >= top ? "yes" : "no",
           (int64_t)gone.peak_live_bytes >= top ? "yes" : "no");
    printf("held: live lost %lld, peak moved %lld\n",
           (long long)(full.live_bytes - held.live_bytes),
           (long long)(held.peak_live_bytes - full.peak_live_bytes));
    return 0;
}
"#;

#[test]
fn a_reading_records_the_blocks_waiting_in_slots_and_held_frees_never_raise_the_peak() {
    let dir = TempDir::new("held-peak");
    let exe = compile_c(
        &dir,
        "peak",
        PEAK_WITH_HELD_AND_WAITING,
        &["-pthread", "-fno-builtin", &include_flag()],
    );
    let run = run_preloaded(&dir, &exe, &[], &[]);
    assert_eq!(
        run.code,
        Some(0),
        "stderr:\n{}\nlog:\n{}",
        run.stderr,
        run.log
    );
    // The 15 waiting blocks were never published by a shard: only the reading taken while
    // they waited can have put them into the peak (the first line says the peak before them
    // was lower, so the check means something). The 10 frees held back leave the live bytes
    // at once and the recorded peak where it was.
    assert_eq!(
        run.stdout,
        "room for the waiting blocks: yes\n\
         waiting: live gained 60000, peak reaches them yes, kept after their free yes\n\
         held: live lost 40000, peak moved 0\n"
    );
}
