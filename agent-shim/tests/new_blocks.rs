//! New blocks waiting in their thread's batch slot (`registry::new_blocks`), seen from real C
//! targets under the real preload: a block freed or reallocated by another thread before its
//! allocating thread applied its batch is neither an unknown free nor left behind, a snapshot
//! holds the blocks still waiting, and a fork child frees the waiting blocks of a parent
//! thread it did not inherit as known blocks.

mod common;

use std::path::PathBuf;

use common::{TempDir, compile_c, run_dumping};
use heaptui_analysis::snapshot;

const SYNC: &str = include_str!("targets/sync.h");

/// A producer allocates small blocks and hands each to a consumer, which frees it (every
/// third one after a realloc) before the producer's batch of sixteen is applied, mostly. Then
/// a worker allocates three blocks that wait in its slot while the process forks: the child
/// frees them. Last, the main thread allocates five blocks and snapshots while they wait.
const TARGET: &str = r#"
#include <pthread.h>
#include <semaphore.h>
#include <sys/wait.h>

#define HANDED 20000
static void *volatile box;
static sem_t full, empty;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 0; i < HANDED; i++) {
        char *p = malloc(24 + i % 200);
        p[0] = 1;
        sem_wait(&empty);
        box = p;
        sem_post(&full);
    }
    return 0;
}

static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < HANDED; i++) {
        sem_wait(&full);
        char *p = box;
        sem_post(&empty);
        if (i % 3 == 0) p = realloc(p, 300);
        free(p);
    }
    return 0;
}

static void *worker_blocks[3];
static pthread_barrier_t allocated, forked;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) worker_blocks[i] = malloc(40 + i);
    pthread_barrier_wait(&allocated);
    pthread_barrier_wait(&forked);
    for (int i = 0; i < 3; i++) free(worker_blocks[i]);
    return 0;
}

static void *kept[5];

int main(void) {
    sem_init(&full, 0, 0);
    sem_init(&empty, 0, 1);
    pthread_t p, c, w;
    if (pthread_create(&p, 0, producer, 0) || pthread_create(&c, 0, consumer, 0)) return 3;
    pthread_join(p, 0);
    pthread_join(c, 0);

    pthread_barrier_init(&allocated, 0, 2);
    pthread_barrier_init(&forked, 0, 2);
    if (pthread_create(&w, 0, worker, 0)) return 3;
    pthread_barrier_wait(&allocated);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 3; i++) free(worker_blocks[i]);
        exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    pthread_barrier_wait(&forked);
    pthread_join(w, 0);

    for (int i = 0; i < 5; i++) {
        kept[i] = malloc(1001 + i);
        ((char *)kept[i])[0] = 1;
    }
    snapshot_and_wait(1);
    for (int i = 0; i < 5; i++) free(kept[i]);
    printf("child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
"#;

#[test]
fn waiting_blocks_are_freed_across_threads_and_forks_and_are_in_snapshots() {
    let dir = TempDir::new("new-blocks");
    let exe = compile_c(
        &dir,
        "new_blocks",
        &format!("{SYNC}\n{TARGET}"),
        &["-pthread", "-fno-builtin"],
    );
    let run = run_dumping(&dir, &exe);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "child 0\n"),
        "stderr:\n{}\nlog:\n{}",
        run.stderr,
        run.log
    );
    // The parent's summary and the fork child's: no free of a waiting block was unknown, and
    // no waiting block was applied after its address had been reused.
    let summaries = run.summaries();
    assert_eq!(summaries.len(), 2, "log:\n{}", run.log);
    for s in &summaries {
        for key in [
            "unknown_frees",
            "unknown_reallocs",
            "stale_entries",
            "untracked",
        ] {
            assert_eq!(
                s.get(key),
                0,
                "{key} in the summary of {}:\n{}",
                s.pid,
                run.log
            );
        }
    }
    // The parent freed everything it allocated but what the C runtime keeps: every handed
    // block and its realloc left the table.
    let parent = summaries
        .iter()
        .max_by_key(|s| s.get("malloc"))
        .expect("the parent's summary");
    assert!(parent.get("malloc") >= 20_000 + 3 + 5);
    assert!(
        parent.user("live_blocks") < 16,
        "blocks left behind: {:?}",
        parent.values
    );

    // The snapshot holds the five blocks the main thread allocated just before it, once each.
    let snap: PathBuf = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".1.hsnap"))
        .expect("snapshot 1");
    let graph = snapshot::read_file(&snap).unwrap();
    let mut kept: Vec<u64> = graph
        .objects()
        .size
        .iter()
        .copied()
        .filter(|s| (1001..=1005).contains(s))
        .collect();
    kept.sort_unstable();
    assert_eq!(kept, [1001, 1002, 1003, 1004, 1005]);
}
