//! Every hooked allocation function, exercised by a real C target under the real preload;
//! the agent's exit summary must show exactly the calls, bytes and failures the target made
//! (minus the start-up noise of an empty C program, measured the same way).

mod common;

use common::*;
use std::collections::BTreeMap;

/// Uses only write(2) for output, so stdio adds no allocations of its own.
const EVERY_FUNCTION: &str = r#"
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(const char *s) { write(1, s, strlen(s)); }
static void fail(const char *s) { say("FAIL "); say(s); say("\n"); _exit(1); }
static int aligned(void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

int main(void) {
    char *a = malloc(100);
    if (!a) fail("malloc");
    memset(a, 'x', 100);
    unsigned char *b = calloc(10, 10);
    if (!b) fail("calloc");
    for (int i = 0; i < 100; i++) if (b[i]) fail("calloc zeroing");
    a = realloc(a, 100000);                    /* grows: moves */
    if (!a) fail("realloc grow");
    for (int i = 0; i < 100; i++) if (a[i] != 'x') fail("realloc kept data");
    a = realloc(a, 50);                        /* shrinks */
    if (!a || a[49] != 'x') fail("realloc shrink");
    int *r = reallocarray(NULL, 4, 8);
    if (!r) fail("reallocarray");
    errno = 0;
    if (reallocarray(r, SIZE_MAX / 2, 4) != NULL || errno != ENOMEM) fail("reallocarray overflow");
    void *pm = NULL;
    if (posix_memalign(&pm, 64, 200) != 0 || !aligned(pm, 64)) fail("posix_memalign");
    void *bad = (void *)1;
    if (posix_memalign(&bad, 3, 8) != EINVAL || bad != (void *)1) fail("posix_memalign EINVAL");
    void *al = aligned_alloc(256, 512);
    if (!al || !aligned(al, 256)) fail("aligned_alloc");
    void *m = memalign(4096, 100);
    if (!m || !aligned(m, 4096)) fail("memalign");
    void *v = valloc(10);
    if (!v || !aligned(v, 4096)) fail("valloc");
    void *pv = pvalloc(5000);
    if (!pv || !aligned(pv, 4096)) fail("pvalloc");
    free(NULL);
    volatile size_t huge = SIZE_MAX / 2;
    if (malloc(huge) != NULL) fail("huge malloc");
    char *big = malloc(64 << 20);
    if (!big) fail("big malloc");
    big[0] = 1; big[(64 << 20) - 1] = 2;
    char *z = realloc(NULL, 16);
    if (!z) fail("realloc(NULL)");
    char *t = malloc(8);
    if (realloc(t, 0) != NULL) fail("realloc(p, 0) frees");
    free(pm); free(al); free(m); free(v); free(pv); free(big); free(z); free(r);
    say("ok\n");
    return 7; /* a and b stay live */
}
"#;

fn check(depth: Option<&str>) {
    let dir = TempDir::new("hooks-basic");
    let empty = compile_c(&dir, "empty", EMPTY_C, &[]);
    // -fno-builtin: gcc would turn realloc(NULL, n) into malloc(n) and drop free(NULL).
    let target = compile_c(&dir, "every", EVERY_FUNCTION, &["-fno-builtin"]);
    let env: Vec<(&str, &str)> = depth
        .map(|d| ("HEAPTUI_STACK_DEPTH", d))
        .into_iter()
        .collect();
    let base = run_preloaded(&dir, &empty, &[], &env);
    assert_eq!(base.code, Some(0), "{}", base.stderr);
    let run = run_preloaded(&dir, &target, &[], &env);
    assert_eq!(run.stdout, "ok\n", "stderr: {}", run.stderr);
    assert_eq!(run.code, Some(7));
    assert_eq!(
        run.stderr, "",
        "nothing on stderr (the summary goes to HEAPTUI_LOG)"
    );
    let summary = run.summary();
    let d = summary.minus(&base.summary());

    let big = 64 << 20;
    let allocated = 100 + 100 + 100_000 + 50 + 32 + 200 + 512 + 100 + 10 + 8192 + big + 16 + 8;
    let freed = 100 + 100_000 + 200 + 512 + 100 + 10 + 8192 + big + 16 + 32 + 8;
    let expected: &[(&str, i64)] = &[
        ("malloc", 4),
        ("calloc", 1),
        ("realloc", 4),
        ("reallocarray", 2),
        ("posix_memalign", 2),
        ("aligned_alloc", 1),
        ("memalign", 1),
        ("valloc", 1),
        ("pvalloc", 1),
        ("free", 9),
        ("free_null", 1),
        ("null_returns", 3),
        ("unknown_frees", 0),
        ("unknown_reallocs", 0),
        ("untracked", 0),
        ("stale_entries", 0),
        ("live_blocks", 2),
        ("live_bytes", 150),
        ("allocated_bytes", allocated),
        ("freed_bytes", freed),
    ];
    for &(key, want) in expected {
        assert_eq!(d[key], want, "{key}: summary {:?}", summary.values);
    }
    // When `big` was allocated, a, b, r, pm, al, m, v and pv were live too.
    let at_big = big + 50 + 100 + 32 + 200 + 512 + 100 + 10 + 8192;
    assert!(
        summary.get("peak_live_bytes") >= at_big,
        "{:?}",
        summary.values
    );
    assert!(summary.get("peak_live_bytes") >= summary.get("live_bytes"));
}

#[test]
fn every_hooked_function_is_counted_exactly_with_stacks() {
    check(None);
}

#[test]
fn every_hooked_function_is_counted_exactly_without_stacks() {
    check(Some("0"));
}

/// Compiles `src` (with `flags`), runs it under the agent, checks it printed `done` and
/// exited 0, and returns its exit summary's counts minus an empty C program's.
fn counts_of_a_run(name: &str, src: &str, flags: &[&str]) -> BTreeMap<String, i64> {
    let dir = TempDir::new(&format!("hooks-{name}"));
    let empty = compile_c(&dir, "empty", EMPTY_C, &[]);
    let target = compile_c(&dir, name, src, flags);
    let base = run_preloaded(&dir, &empty, &[], &[]).summary();
    let run = run_preloaded(&dir, &target, &[], &[]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "done\n"),
        "{}",
        run.stderr
    );
    run.summary().minus(&base)
}

#[test]
fn unknown_frees_and_reallocs_are_forwarded_and_counted() {
    // Blocks obtained from glibc's own entry point bypass the hooks: the agent never saw them.
    let src = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern void *__libc_malloc(size_t);
int main(void) {
    char *p = __libc_malloc(40);
    char *q = __libc_malloc(40);
    strcpy(q, "kept");
    free(p);
    q = realloc(q, 4000);
    if (strcmp(q, "kept") != 0) return 1;
    free(q);
    write(1, "done\n", 5);
    return 0;
}
"#;
    let d = counts_of_a_run("unknown", src, &[]);
    assert_eq!(d["unknown_frees"], 1);
    assert_eq!(d["unknown_reallocs"], 1);
    assert_eq!(d["free"], 2);
    assert_eq!(d["realloc"], 1);
    // The realloc'd block became known and was then freed: nothing is left live.
    assert_eq!(d["live_blocks"], 0);
    assert_eq!(d["allocated_bytes"], 4000);
    assert_eq!(d["freed_bytes"], 4000);
}

#[test]
fn a_realloc_of_a_young_block_keeps_every_usable_byte_and_errno() {
    // A block reallocated right after its malloc (still waiting in its thread's slot): the
    // agent moves it itself (malloc, copy, free). Every usable byte is kept, growing and
    // shrinking, and a success leaves errno alone, as glibc's realloc does.
    let src = r#"
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void fail(const char *s) { write(1, s, strlen(s)); _exit(1); }
int main(void) {
    unsigned char *p = malloc(10);
    size_t usable = malloc_usable_size(p);
    if (usable < 10) fail("usable");
    for (size_t i = 0; i < usable; i++) p[i] = (unsigned char)(i * 7 + 1);
    errno = 1234;
    unsigned char *q = realloc(p, 300);
    if (!q || errno != 1234) fail("grow");
    for (size_t i = 0; i < usable; i++) if (q[i] != (unsigned char)(i * 7 + 1)) fail("grow kept");
    for (size_t i = 0; i < 300; i++) q[i] = (unsigned char)(i * 3 + 2);
    unsigned char *r = realloc(q, 40);
    if (!r) fail("shrink");
    for (size_t i = 0; i < 40; i++) if (r[i] != (unsigned char)(i * 3 + 2)) fail("shrink kept");
    unsigned char *s = realloc(r, 4095);
    if (!s) fail("to 4095");
    for (size_t i = 0; i < 40; i++) if (s[i] != (unsigned char)(i * 3 + 2)) fail("4095 kept");
    free(s);
    write(1, "done\n", 5);
    return 0;
}
"#;
    let d = counts_of_a_run("young-realloc", src, &["-fno-builtin"]);
    assert_eq!(d["realloc"], 3);
    assert_eq!(d["malloc"], 1);
    assert_eq!(d["unknown_reallocs"], 0);
    assert_eq!(d["live_blocks"], 0);
    assert_eq!(d["allocated_bytes"], 10 + 300 + 40 + 4095);
    assert_eq!(d["freed_bytes"], 10 + 300 + 40 + 4095);
}

#[test]
fn malformed_environment_gives_one_line_each_and_the_target_still_runs() {
    let dir = TempDir::new("hooks-env");
    let target = compile_c(&dir, "every", EVERY_FUNCTION, &["-fno-builtin"]);
    let run = run_preloaded(
        &dir,
        &target,
        &[],
        &[
            ("HEAPTUI_STACK_DEPTH", "deep"),
            ("HEAPTUI_BOGUS", "1"),
            ("HEAPTUI_LISTEN", "nowhere"),
        ],
    );
    assert_eq!((run.code, run.stdout.as_str()), (Some(7), "ok\n"));
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "stderr: {}", run.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("HEAPTUI_STACK_DEPTH=\"deep\"")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("unknown variable HEAPTUI_BOGUS")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("HEAPTUI_LISTEN=\"nowhere\"")),
        "{lines:?}"
    );
    // Defaults in force: the summary is still written.
    assert_eq!(run.summary().get("posix_memalign"), 2);
}
