//! 256 threads allocating at once under the agent: every call is counted exactly, nothing is
//! lost or double-counted, and the target finishes normally.

mod common;

use common::*;

/// argv[1] = allocations per thread (0 gives the baseline: the same threads, no work).
const MANY_THREADS: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 256
static int per_thread;
static pthread_barrier_t start;

static void *work(void *arg) {
    long id = (long)arg;
    void *keep[64];
    int kept = 0;
    pthread_barrier_wait(&start);
    for (int i = 0; i < per_thread; i++) {
        size_t size = 16 + (size_t)((i * 7 + id) % 500);
        char *p = malloc(size);
        if (!p) return (void *)1;
        memset(p, (int)id, size);
        if (i % 10 == 0 && kept < 64) { keep[kept++] = p; continue; }
        p = realloc(p, size * 2);
        if (!p) return (void *)1;
        free(p);
    }
    for (int i = 0; i < kept; i++) free(keep[i]);
    return NULL;
}

int main(int argc, char **argv) {
    per_thread = atoi(argv[1]);
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, work, (void *)i) != 0) return 3;
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= r != NULL;
    }
    printf("%s\n", bad ? "bad" : "joined");
    return bad;
}
"#;

#[test]
fn two_hundred_fifty_six_threads_are_counted_exactly() {
    let dir = TempDir::new("hooks-threads");
    let exe = compile_c(&dir, "threads", MANY_THREADS, &["-fno-builtin"]);
    let base = run_preloaded(&dir, &exe, &["0"], &[]);
    assert_eq!(
        (base.code, base.stdout.as_str()),
        (Some(0), "joined\n"),
        "{}",
        base.stderr
    );
    let per_thread = 1000i64;
    let run = run_preloaded(&dir, &exe, &[&per_thread.to_string()], &[]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "joined\n"),
        "{}",
        run.stderr
    );
    let d = run.summary().minus(&base.summary());
    let kept = 64.min(per_thread / 10) * 256;
    let moved = per_thread * 256 - kept;
    assert_eq!(d["malloc"], per_thread * 256);
    assert_eq!(d["realloc"], moved);
    assert_eq!(d["free"], moved + kept);
    assert_eq!(d["live_blocks"], 0);
    assert_eq!(d["live_bytes"], 0);
    for key in [
        "unknown_frees",
        "unknown_reallocs",
        "untracked",
        "stale_entries",
        "null_returns",
    ] {
        assert_eq!(d[key], 0, "{key}");
    }
    // Bytes: sum over threads and iterations of size (+ size*2 for the realloc'd ones).
    let mut bytes = 0i64;
    for id in 0..256i64 {
        let mut kept_here = 0;
        for i in 0..per_thread {
            let size = 16 + (i * 7 + id) % 500;
            bytes += size;
            if i % 10 == 0 && kept_here < 64 {
                kept_here += 1;
            } else {
                bytes += size * 2;
            }
        }
    }
    assert_eq!(d["allocated_bytes"], bytes);
    assert_eq!(d["freed_bytes"], bytes);
}
