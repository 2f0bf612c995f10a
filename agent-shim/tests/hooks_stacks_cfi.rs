//! Allocation stacks of code built without frame pointers (`-O2 -fomit-frame-pointer`): the
//! hooks' unwinder follows DWARF CFI, so the recorded stack is the real call chain even where
//! a frame-pointer walk goes wrong. In the target, `main` keeps a frame pointer while `a`,
//! `b` and `c` do not: at the malloc call rbp still holds main's frame, a valid-looking
//! chain that a frame-pointer walk follows straight to main's caller, skipping c's callers.
//! The same holds for a library loaded with dlopen, before and after a dlclose (which
//! clears the unwinder's rule cache) and a second dlopen.

mod common;

use common::*;

const CHAIN: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "heaptui.h"
#pragma weak heaptui_allocation_stack

#define KEEP __asm__ volatile("" ::: "memory")
__attribute__((noinline)) void *c(size_t n) { void *p = malloc(n); KEEP; return p; }
__attribute__((noinline)) void *b(size_t n) { void *p = c(n + 1); KEEP; return p; }
__attribute__((noinline)) void *a(size_t n) { void *p = b(n + 1); KEEP; return p; }

static void print_stack(const char *who, void *p) {
    uint64_t frames[64];
    size_t n = heaptui_allocation_stack(p, frames, 64);
    printf("%s", who);
    for (size_t i = 0; i < n && i < 64; i++) {
        Dl_info info;
        const char *name = "?";
        if (dladdr((void *)(uintptr_t)frames[i], &info) && info.dli_sname) name = info.dli_sname;
        printf(" %s", name);
    }
    printf("\n");
}

__attribute__((noinline)) void *worker(void *arg) {
    void *p = a(100);
    KEEP;
    print_stack("thread", p);
    free(p);
    return arg;
}

__attribute__((optimize("no-omit-frame-pointer"))) int main(void) {
    if (!heaptui_allocation_stack) { printf("no agent\n"); return 4; }
    void *p = a(10);
    KEEP;
    print_stack("main", p);
    free(p);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 3;
    pthread_join(t, NULL);
    return 0;
}
"#;

/// The symbolized allocation stacks the target printed, by line tag.
fn stacks(depth: Option<&str>) -> Vec<(String, Vec<String>)> {
    let dir = TempDir::new("hooks-stacks-cfi");
    let exe = compile_c(
        &dir,
        "chain",
        CHAIN,
        &[
            &include_flag(),
            "-rdynamic",
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ],
    );
    let env: Vec<(&str, &str)> = depth
        .map(|d| ("HEAPTUI_STACK_DEPTH", d))
        .into_iter()
        .collect();
    let run = run_preloaded(&dir, &exe, &[], &env);
    assert_eq!(
        run.code,
        Some(0),
        "stdout {} stderr {}",
        run.stdout,
        run.stderr
    );
    run.stdout
        .lines()
        .map(|l| {
            let mut words = l.split_whitespace().map(str::to_owned);
            (words.next().unwrap(), words.collect())
        })
        .collect()
}

#[test]
fn code_without_frame_pointers_has_its_whole_call_chain() {
    let all = stacks(None);
    assert_eq!(all.len(), 2, "{all:?}");
    let (tag, main) = &all[0];
    assert_eq!(tag, "main");
    assert!(main.len() >= 4 && main.len() <= 16, "{main:?}");
    assert_eq!(&main[..4], &["c", "b", "a", "main"], "{main:?}");
    // The walk goes on past main into libc's start-up code (CFI of libc.so.6).
    assert!(main.len() > 4, "{main:?}");
    let (tag, thread) = &all[1];
    assert_eq!(tag, "thread");
    assert_eq!(&thread[..4], &["c", "b", "a", "worker"], "{thread:?}");
}

#[test]
fn the_depth_limit_holds_for_cfi_walks() {
    let all = stacks(Some("3"));
    assert_eq!(all[0].1, ["c", "b", "a"]);
    assert_eq!(all[1].1, ["c", "b", "a"]);
}

const LIB: &str = r#"
#include <stdlib.h>
#define KEEP __asm__ volatile("" ::: "memory")
__attribute__((noinline)) void *lib_c(size_t n) { void *p = malloc(n); KEEP; return p; }
__attribute__((noinline)) void *lib_b(size_t n) { void *p = lib_c(n + 1); KEEP; return p; }
void *lib_a(size_t n) { void *p = lib_b(n + 1); KEEP; return p; }
"#;

const LOADER: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "heaptui.h"
#pragma weak heaptui_allocation_stack

int main(int argc, char **argv) {
    if (!heaptui_allocation_stack || argc < 2) { printf("no agent\n"); return 4; }
    for (int round = 0; round < 2; round++) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) { printf("dlopen: %s\n", dlerror()); return 3; }
        void *(*a)(size_t) = (void *(*)(size_t))dlsym(h, "lib_a");
        void *p = a(10);
        __asm__ volatile("" ::: "memory");
        uint64_t frames[64];
        size_t n = heaptui_allocation_stack(p, frames, 64);
        printf("round%d", round);
        for (size_t i = 0; i < n && i < 64; i++) {
            Dl_info info;
            const char *name = "?";
            if (dladdr((void *)(uintptr_t)frames[i], &info) && info.dli_sname) name = info.dli_sname;
            printf(" %s", name);
        }
        printf("\n");
        free(p);
        if (dlclose(h) != 0) return 5;
    }
    return 0;
}
"#;

#[test]
fn a_dlopened_library_without_frame_pointers_unwinds_before_and_after_dlclose() {
    let dir = TempDir::new("hooks-stacks-cfi-dlopen");
    let lib = compile_c(
        &dir,
        "libchain.so",
        LIB,
        &[
            "-shared",
            "-fPIC",
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ],
    );
    let exe = compile_c(
        &dir,
        "loader",
        LOADER,
        &[
            &include_flag(),
            "-rdynamic",
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ],
    );
    let run = run_preloaded(&dir, &exe, &[lib.to_str().unwrap()], &[]);
    assert_eq!(
        run.code,
        Some(0),
        "stdout {} stderr {}",
        run.stdout,
        run.stderr
    );
    let lines: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    for (round, words) in lines.iter().enumerate() {
        assert_eq!(words[0], format!("round{round}"));
        assert_eq!(
            &words[1..5],
            &["lib_c", "lib_b", "lib_a", "main"],
            "{}",
            run.stdout
        );
    }
}

/// Five callers of one allocating function, alike to the byte in their frames, so every
/// allocation enters malloc at the same stack pointer with the same return address, and
/// only the words further up (which caller, and the callers' saved registers) differ. The
/// hooks' walk cache (`hooks/unwind/walks.rs`) remembers walks by where they start and
/// keeps four per start: here it must still give every block the stack of its own caller,
/// through alternation, replacement and rbp holding a different value on every call.
const PATHS: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "heaptui.h"
#pragma weak heaptui_allocation_stack

#define KEEP __asm__ volatile("" ::: "memory")
__attribute__((noinline)) void *c(size_t n) { void *p = malloc(n); KEEP; return p; }
/* rbp is a general register here: it holds the loop's value at the malloc call. */
#define PATH(k) __attribute__((noinline)) void *x##k(size_t n) { \
    register size_t v __asm__("rbp") = n * k; __asm__ volatile("" : "+r"(v)); \
    void *p = c(v / k + k); KEEP; return p; }
PATH(1) PATH(2) PATH(3) PATH(4) PATH(5)
static void *(*const path[5])(size_t) = {x1, x2, x3, x4, x5};

enum { ROUNDS = 2000 };
static void *block[ROUNDS];
static int took[ROUNDS];

int main(void) {
    if (!heaptui_allocation_stack) { printf("no agent\n"); return 4; }
    unsigned seed = 1;
    for (int i = 0; i < ROUNDS; i++) {
        seed = seed * 1103515245 + 12345;
        /* Runs of one path, then switches: hits, misses and replacements. */
        took[i] = i < 1000 ? (i / 7) % 5 : (seed >> 16) % 5;
        block[i] = path[took[i]](16 + i % 100);
    }
    int wrong = 0;
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t frames[16];
        size_t n = heaptui_allocation_stack(block[i], frames, 16);
        char want[4];
        snprintf(want, sizeof want, "x%d", took[i] + 1);
        Dl_info info;
        const char *caller = "?";
        if (n >= 2 && dladdr((void *)(uintptr_t)frames[1], &info) && info.dli_sname)
            caller = info.dli_sname;
        if (n < 3 || strcmp(caller, want) != 0) {
            if (wrong++ < 5) printf("block %d: caller %s, want %s (%zu frames)\n", i, caller, want, n);
        }
        free(block[i]);
    }
    printf("wrong %d of %d\n", wrong, ROUNDS);
    return 0;
}
"#;

#[test]
fn every_block_has_its_own_callers_stack_where_paths_share_the_entry_stack_pointer() {
    let dir = TempDir::new("hooks-stacks-paths");
    let exe = compile_c(
        &dir,
        "paths",
        PATHS,
        &[
            &include_flag(),
            "-rdynamic",
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-fno-ipa-icf",
            "-fno-inline",
        ],
    );
    let run = run_preloaded(&dir, &exe, &[], &[]);
    assert_eq!(
        run.code,
        Some(0),
        "stdout {} stderr {}",
        run.stdout,
        run.stderr
    );
    assert_eq!(run.stdout.trim(), "wrong 0 of 2000", "{}", run.stdout);
}
