//! Roots as docs/reference.md §3 lists them, on real targets under the real preload: mapped
//! memory is a root (anonymous, shared, a page of a huge reservation, the TLS and descriptors
//! in glibc's cache of finished threads' stacks), while heap memory (freed blocks of every
//! arena, a freed mmapped chunk), the agent's own memory and the frames a finished thread
//! returned from never are.

mod common;

use common::captured::{Captured, run};
use common::{TempDir, compile_c};
use heaptui_analysis::{ObjectClass, ObjectIndex};

const SYNC: &str = include_str!("targets/sync.h");

/// The objects allocated with `function` on their allocation stack.
fn allocated_by(c: &Captured, function: &str) -> Vec<ObjectIndex> {
    let o = c.graph.objects();
    (0..o.len() as ObjectIndex)
        .filter(|&i| {
            c.graph
                .sites
                .get(o.site[i as usize] as usize)
                .is_some_and(|s| s.frames.iter().any(|f| f.starts_with(function)))
        })
        .collect()
}

#[test]
fn mapped_memory_is_a_root_and_heap_and_agent_memory_are_not() {
    let dir = TempDir::new("roots-mapped");
    let exe = compile_c(
        &dir,
        "mapped",
        &format!("{SYNC}\n{}", include_str!("targets/mapped.c")),
        &[],
    );
    let c = run(&dir, &exe, "mapped ", 0);
    for size in [1111, 6666, 7777] {
        assert_eq!(
            c.analysis.class_of(c.object(size)),
            ObjectClass::GlobalOnly,
            "the {size}-byte block is held by mapped memory only"
        );
    }
    for size in [2222, 3333, 4444, 5555] {
        assert_eq!(
            c.analysis.class_of(c.object(size)),
            ObjectClass::DefinitelyLost,
            "the {size}-byte block is lost"
        );
    }
    // The joined threads' TLS vectors: reachable from glibc's cache of their stacks.
    let dtvs = allocated_by(&c, "_dl_allocate_tls");
    assert!(!dtvs.is_empty(), "the threads' DTVs are tracked");
    for o in dtvs {
        assert!(
            !matches!(
                c.analysis.class_of(o),
                ObjectClass::DefinitelyLost | ObjectClass::IndirectlyLost
            ),
            "a finished thread's DTV ({} bytes) is not lost",
            c.graph.objects().size[o as usize]
        );
    }
    let leaks = c.analysis.leaks();
    assert_eq!(
        (leaks.objects, leaks.definitely_lost),
        (4, 2222 + 3333 + 4444 + 5555),
        "nothing else is lost"
    );
}

#[test]
fn a_finished_threads_stale_stack_words_are_not_roots() {
    let dir = TempDir::new("roots-finished-stack");
    let exe = compile_c(
        &dir,
        "finished_stack",
        &format!("{SYNC}\n{}", include_str!("targets/finished_stack.c")),
        &[],
    );
    let c = run(&dir, &exe, "joined", 0);
    let held = c.object(8888);
    let main = c.thread_running("main");
    assert_eq!(
        c.analysis.class_of(held),
        ObjectClass::FrameProprietary {
            thread: main,
            frame: c.frame(main, "main"),
        },
        "main's block is main's own: the copies in the finished worker's stack are no root"
    );
    assert_eq!(
        c.analysis.class_of(c.object(9999)),
        ObjectClass::DefinitelyLost,
        "the worker's block left only in its finished stack is lost"
    );
    let dtvs = allocated_by(&c, "_dl_allocate_tls");
    assert!(!dtvs.is_empty(), "the worker's DTV is tracked");
    for o in dtvs {
        assert!(
            !matches!(
                c.analysis.class_of(o),
                ObjectClass::DefinitelyLost | ObjectClass::IndirectlyLost
            ),
            "the finished worker's DTV is reachable from its cached descriptor"
        );
    }
    let leaks = c.analysis.leaks();
    assert_eq!(
        (leaks.objects, leaks.definitely_lost),
        (1, 9999),
        "nothing else is lost"
    );
}

#[test]
fn a_live_thread_running_a_fiber_keeps_the_roots_of_its_own_stack() {
    let dir = TempDir::new("roots-fiber-stack");
    let exe = compile_c(
        &dir,
        "fiber_stack",
        &format!("{SYNC}\n{}", include_str!("targets/fiber_stack.c")),
        &[],
    );
    let c = run(&dir, &exe, "in fiber", 0);
    assert_ne!(
        c.analysis.class_of(c.object(7777)),
        ObjectClass::DefinitelyLost,
        "the block held by the worker's suspended frame, on its own stack, is not lost"
    );
    let leaks = c.analysis.leaks();
    assert_eq!(
        (leaks.objects, leaks.definitely_lost),
        (0, 0),
        "nothing is lost"
    );
}

#[test]
fn a_thread_that_cannot_be_stopped_keeps_the_roots_of_its_own_stack() {
    let dir = TempDir::new("roots-spinning-stack");
    let exe = compile_c(
        &dir,
        "spinning_stack",
        &format!("{SYNC}\n{}", include_str!("targets/spinning_stack.c")),
        &[],
    );
    let c = run(&dir, &exe, "spinning", 0);
    assert_ne!(
        c.analysis.class_of(c.object(6161)),
        ObjectClass::DefinitelyLost,
        "the block held by the unstoppable thread's frame is not lost"
    );
    let leaks = c.analysis.leaks();
    assert_eq!(
        (leaks.objects, leaks.definitely_lost),
        (0, 0),
        "nothing is lost"
    );
}

#[test]
fn pointers_only_in_mappings_marked_wipeonfork_or_dontfork_are_roots() {
    let dir = TempDir::new("roots-fork-flags");
    let exe = compile_c(
        &dir,
        "fork_flags",
        &format!("{SYNC}\n{}", include_str!("targets/fork_flags.c")),
        &[],
    );
    // The program checks after the capture that both mappings still carry their flag.
    let c = run(&dir, &exe, "flags kept", 0);
    for (size, flag) in [(2468, "MADV_WIPEONFORK"), (1357, "MADV_DONTFORK")] {
        assert_eq!(
            c.analysis.class_of(c.object(size)),
            ObjectClass::GlobalOnly,
            "the {size}-byte block is held by a mapping marked {flag} only"
        );
    }
    assert_eq!(c.analysis.leaks().objects, 0, "nothing is lost");
}
