//! A block being reallocated stays in every snapshot: one thread reallocates a buffer in a
//! tight loop (sizes that make glibc move it: arena chunks and mremap'd ones) while the main
//! thread takes snapshot after snapshot. Whenever the world stops — before, inside or after
//! the libc call — the buffer must be in the graph exactly once, with one of its sizes.

mod common;

use std::path::PathBuf;

use common::{TempDir, compile_c, run_dumping};
use heaptui_analysis::snapshot;

const SYNC: &str = include_str!("targets/sync.h");

const SNAPSHOTS: u32 = 40;
const SIZES: [u64; 6] = [10_007, 70_001, 20_011, 150_001, 333_331, 4_099];

const TARGET: &str = r#"
#include <pthread.h>

static const size_t sizes[] = {10007, 70001, 20011, 150001, 333331, 4099};
static void *volatile cur;
static volatile int stop;
static volatile unsigned long rounds;

static void *reallocer(void *arg) {
    (void)arg;
    void *p = malloc(sizes[0]);
    unsigned i = 0;
    while (!stop) {
        i++;
        p = realloc(p, sizes[i % 6]);
        if (!p) abort();
        ((char *)p)[0] = 1;
        cur = p;
        rounds++;
    }
    cur = 0;
    free(p);
    return 0;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, 0, reallocer, 0) != 0) return 3;
    while (rounds < 1000) usleep(100);
    for (int n = 1; n <= SNAPSHOTS; n++) snapshot_and_wait(n);
    stop = 1;
    pthread_join(t, 0);
    printf("done %d\n", rounds > 0);
    return 0;
}
"#;

fn snapshot_path(dir: &std::path::Path, n: u32) -> PathBuf {
    let suffix = format!(".{n}.hsnap");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("snap.") && name.ends_with(&suffix)
        })
        .unwrap_or_else(|| panic!("no snapshot {n} in {}", dir.display()))
}

#[test]
fn a_buffer_reallocated_in_a_tight_loop_is_in_every_snapshot_once() {
    let dir = TempDir::new("cap-realloc");
    let src = format!("{SYNC}\n#define SNAPSHOTS {SNAPSHOTS}\n{TARGET}");
    let exe = compile_c(&dir, "realloc_loop", &src, &["-O2"]);
    let run = run_dumping(&dir, &exe);
    assert_eq!(
        run.code,
        Some(0),
        "stdout {} stderr {}\nlog:\n{}",
        run.stdout,
        run.stderr,
        run.log
    );
    assert_eq!(run.stdout, "done 1\n");
    let mut seen = Vec::new();
    for n in 1..=SNAPSHOTS {
        let path = snapshot_path(dir.path(), n);
        let graph =
            snapshot::read_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let found: Vec<u64> = graph
            .objects()
            .size
            .iter()
            .copied()
            .filter(|s| SIZES.contains(s))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "snapshot {n}: the reallocated buffer once, found sizes {found:?}"
        );
        seen.push(found[0]);
    }
    // The loop really was caught at different points of its cycle.
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() >= 2, "sizes seen {seen:?}");
}
