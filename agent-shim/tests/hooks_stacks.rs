//! Allocation stacks recorded by the hooks, read back by the target through the agent's C
//! API (heaptui.h) and symbolized with dladdr: the frames are the real call chain.

mod common;

use common::*;

const CHAIN: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "heaptui.h"
#pragma weak heaptui_counters
#pragma weak heaptui_allocation_stack

__attribute__((noinline)) void *leaf(size_t n) { void *p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) void *middle(size_t n) { void *p = leaf(n); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) void *outer(size_t n) { void *p = middle(n); __asm__ volatile("" ::: "memory"); return p; }

int main(void) {
    if (!heaptui_allocation_stack || !heaptui_counters) { printf("no agent\n"); return 4; }
    void *p = outer(24);
    uint64_t frames[64];
    size_t n = heaptui_allocation_stack(p, frames, 64);
    printf("%zu", n);
    for (size_t i = 0; i < n && i < 64; i++) {
        Dl_info info;
        const char *name = "?";
        if (dladdr((void *)(uintptr_t)frames[i], &info) && info.dli_sname) name = info.dli_sname;
        printf(" %s", name);
    }
    printf("\n");
    struct heaptui_counters c;
    if (heaptui_counters(&c) != 0 || c.calls[HEAPTUI_MALLOC] == 0 || c.live_blocks == 0) return 2;
    if (heaptui_allocation_stack(&c, frames, 64) != 0) return 3; /* not a heap block */
    free(p);
    return 0;
}
"#;

fn stack_of(depth: Option<&str>) -> Vec<String> {
    let dir = TempDir::new("hooks-stacks");
    let exe = compile_c(&dir, "chain", CHAIN, &[&include_flag(), "-rdynamic"]);
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
    let mut words = run.stdout.split_whitespace().map(str::to_owned);
    let n: usize = words.next().unwrap().parse().unwrap();
    let names: Vec<String> = words.collect();
    assert_eq!(names.len(), n);
    names
}

#[test]
fn default_depth_records_the_call_chain_innermost_first() {
    let names = stack_of(None);
    assert!(names.len() >= 4 && names.len() <= 16, "{names:?}");
    assert_eq!(
        &names[..4],
        &["leaf", "middle", "outer", "main"],
        "{names:?}"
    );
}

#[test]
fn depth_limits_and_zero_turns_capture_off() {
    assert_eq!(stack_of(Some("2")), ["leaf", "middle"]);
    assert!(stack_of(Some("0")).is_empty());
}
