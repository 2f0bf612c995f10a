//! Roots as docs/reference.md §3 lists them, on real targets under the real preload: mapped
//! memory is a root (anonymous, shared, a page of a huge reservation, glibc's cache of
//! finished threads' stacks), while heap memory (freed blocks of every arena, a freed mmapped
//! chunk) and the agent's own memory never are.

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
