//! Capture tests: target programs with known heap shapes, compiled here, run under the real
//! preload with `HEAPTUI_DUMP`; the snapshot each writes at its synchronisation point is read
//! back and analysed by the engine, and every figure is checked exactly.

mod common;

use std::path::PathBuf;

use common::captured::run;
use common::{TempDir, compile_c, compile_cpp, compile_rust};
use heaptui_analysis::{GroupKind, ObjectClass, ThreadState};

const SYNC: &str = include_str!("targets/sync.h");

fn c_target(dir: &TempDir, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    compile_c(dir, name, &format!("{SYNC}\n{src}"), extra)
}

#[test]
fn frame_shared_list_global_only_and_leaks_are_exact() {
    let dir = TempDir::new("cap-frames");
    let exe = c_target(&dir, "frames", include_str!("targets/frames.c"), &[]);
    let c = run(&dir, &exe, "sum 4999950002\n", 7);
    assert_eq!(c.graph.threads.len(), 1);
    assert_eq!(c.graph.threads[0].state, ThreadState::Stopped);
    let t = 0;
    let inner = c.frame(t, "inner");
    let outer = c.frame(t, "outer");
    assert!(inner < outer);
    assert!(c.frame(t, "main") > outer);

    // The buffer held by outer's and inner's locals is a frame-shared group of its own.
    let shared = c.object(40004);
    assert_eq!(
        c.analysis.class_of(shared),
        ObjectClass::FrameShared { thread: t }
    );
    let g = c.analysis.group_of(shared).expect("in a group");
    assert_eq!(g.kind, GroupKind::FrameShared);
    assert_eq!(c.analysis.members(g), vec![shared]);
    let figures = &c.analysis.threads()[t];
    assert!(figures.frames[inner].frame_shared.contains(&g));
    assert!(figures.frames[outer].frame_shared.contains(&g));

    // The 100k-node list is frame-proprietary to inner, to the byte.
    let list = c.analysis.frame_members(t, inner);
    assert_eq!(list.len(), 100_000);
    assert!(
        list.iter()
            .all(|&o| c.graph.objects().size[o as usize] == 40)
    );
    assert_eq!(figures.frames[inner].proprietary, 4_000_000);
    assert_eq!(figures.frames[outer].proprietary, 0);

    // Held only by a global.
    assert_eq!(c.analysis.class_of(c.object(8008)), ObjectClass::GlobalOnly);

    // Leaks: 5005 and 6006 definitely lost, 7007 (pointed to by 6006) indirectly lost.
    assert_eq!(
        c.analysis.class_of(c.object(5005)),
        ObjectClass::DefinitelyLost
    );
    assert_eq!(
        c.analysis.class_of(c.object(6006)),
        ObjectClass::DefinitelyLost
    );
    assert_eq!(
        c.analysis.class_of(c.object(7007)),
        ObjectClass::IndirectlyLost
    );
    let leaks = c.analysis.leaks();
    assert_eq!(leaks.definitely_lost, 5005 + 6006);
    assert_eq!(leaks.indirectly_lost, 7007);
    assert_eq!(leaks.objects, 3);
    assert_eq!(c.graph.threads[t].frames[inner].module, "frames");
    // Allocation sites are symbolized with file:line from the target's line tables.
    let label = c.graph.site_label(c.object(5005));
    assert!(
        label.starts_with("make_leaks (frames.c:") && label.ends_with(')'),
        "{label}"
    );
}

#[test]
fn blocked_masked_and_busy_threads_are_stopped_with_exact_figures() {
    let dir = TempDir::new("cap-threads");
    let exe = c_target(&dir, "threads", include_str!("targets/threads.c"), &[]);
    let c = run(&dir, &exe, "joined 4 threads\n", 0);
    assert_eq!(c.graph.threads.len(), 5, "{:?}", c.frame_names());
    // The thread that blocked every signal with the raw system call cannot be stopped; what
    // its stack holds (read from its blocked stack pointer) is still its own.
    let raw = c
        .graph
        .threads
        .iter()
        .position(|t| t.name == "rawmask")
        .expect("rawmask thread");
    assert_eq!(
        c.graph.threads[raw].state,
        ThreadState::NotStoppable("stop signal blocked".into())
    );
    assert_eq!(
        c.analysis.class_of(c.object(50005)),
        ObjectClass::FrameProprietary {
            thread: raw,
            frame: 0
        }
    );
    for t in c.graph.threads.iter().filter(|t| t.name != "rawmask") {
        assert_eq!(t.state, ThreadState::Stopped, "thread {} {}", t.tid, t.name);
    }
    let markers = [10001, 20002, 30003, 40004, 50005];
    let shared = c.object(40004);
    assert_eq!(c.analysis.class_of(shared), ObjectClass::ThreadShared);
    for (function, name, own, shares) in [
        ("reader", "reader", 10001, true),
        ("masked", "masked", 20002, true),
        ("busy", "busy", 30003, false),
    ] {
        let t = c.thread_running(function);
        assert_eq!(c.graph.threads[t].name, name);
        let f = c.frame(t, function);
        let o = c.object(own);
        assert_eq!(
            c.analysis.class_of(o),
            ObjectClass::FrameProprietary {
                thread: t,
                frame: f
            }
        );
        assert_eq!(c.analysis.frame_members(t, f), vec![o], "{function}");
        let figures = &c.analysis.threads()[t];
        let libc = c.thread_frame_bytes(t, &markers);
        assert_eq!(figures.proprietary, own + libc, "{function}");
        let shared_bytes = if shares { 40004 } else { 0 };
        assert_eq!(figures.shared, shared_bytes, "{function}");
        assert_eq!(figures.total, own + libc + shared_bytes, "{function}");
    }
    // The blocked reader's innermost frames are libc's read.
    let reader = c.thread_running("reader");
    let names = &c.frame_names()[reader];
    assert!(
        names.iter().take(3).any(|n| n.contains("read")),
        "{names:?}"
    );
    // The release of both sharers frees their own buffers and the shared one.
    let tid = |f: &str| c.graph.threads[c.thread_running(f)].tid;
    let both = [tid("reader"), tid("masked")];
    let libc: u64 = ["reader", "masked"]
        .iter()
        .map(|f| c.thread_frame_bytes(c.thread_running(f), &markers))
        .sum();
    assert_eq!(
        c.analysis.release(&both).unwrap(),
        10001 + 20002 + 40004 + libc
    );
}

#[test]
fn a_callee_saved_register_across_a_blocking_call_counts_for_its_frame() {
    let dir = TempDir::new("cap-regs");
    let exe = c_target(&dir, "regs", include_str!("targets/regs.c"), &["-O2"]);
    let c = run(&dir, &exe, "r=3\n", 0);
    let t = 0;
    let holder = c.frame(t, "holder");
    let o = c.object(9009);
    assert_eq!(
        c.analysis.class_of(o),
        ObjectClass::FrameProprietary {
            thread: t,
            frame: holder
        },
        "{:?}",
        c.frame_names()
    );
}

#[test]
fn two_hundred_fifty_six_threads_each_hold_their_own_buffer() {
    let dir = TempDir::new("cap-many");
    let exe = c_target(&dir, "many", include_str!("targets/many.c"), &[]);
    let c = run(&dir, &exe, "joined 256 threads\n", 0);
    assert_eq!(c.graph.threads.len(), 257);
    let mut seen = 0;
    for (t, thread) in c.graph.threads.iter().enumerate() {
        assert_eq!(thread.state, ThreadState::Stopped);
        let Some(f) = thread.frames.iter().position(|f| f.function == "worker") else {
            continue;
        };
        let members = c.analysis.frame_members(t, f);
        assert_eq!(members.len(), 1, "thread {t}");
        let size = c.graph.objects().size[members[0] as usize];
        assert!((1000..1256).contains(&size));
        seen += 1;
    }
    assert_eq!(seen, 256);
    for i in 0..256 {
        c.object(1000 + i);
    }
}

#[test]
fn a_cpp_target_has_demangled_frames_and_a_frame_shared_object() {
    let dir = TempDir::new("cap-cpp");
    let exe = compile_cpp(
        &dir,
        "basket",
        &format!("{SYNC}\n{}", include_str!("targets/basket.cpp")),
        &[],
    );
    let c = run(&dir, &exe, "items 1504\n", 0);
    let t = 0;
    let hold = c.frame(t, "shop::Basket::hold()");
    assert!(hold < c.frame(t, "main"));
    let items = c.object(1500 * 8);
    let basket = c.object(24);
    assert_eq!(
        c.analysis.class_of(basket),
        ObjectClass::FrameShared { thread: t }
    );
    let g = c.analysis.group_of(basket).unwrap();
    assert_eq!(c.analysis.group_of(items), Some(g));
    assert_eq!(c.analysis.dominator(items), Some(basket));
    let mut members = c.analysis.members(g);
    members.sort_unstable();
    let mut expect = vec![basket, items];
    expect.sort_unstable();
    assert_eq!(members, expect);
}

#[test]
fn a_rust_target_has_demangled_frames_and_its_vec_in_the_right_frame() {
    let dir = TempDir::new("cap-rust");
    let exe = compile_rust(&dir, "hold", include_str!("targets/hold.rs"));
    let c = run(&dir, &exe, "len 12345\n", 5);
    let t = 0;
    let f = c.frame(t, "hold::hold_buffer");
    let o = c.object(12345);
    assert_eq!(
        c.analysis.class_of(o),
        ObjectClass::FrameProprietary {
            thread: t,
            frame: f
        }
    );
    assert!(c.frame(t, "hold::main") > f);
}

/// The targets' `snapshot_and_wait` (sync.h for C, hold.rs for Rust) ends the target at once,
/// with the agent's reason, when a snapshot fails (here: its file cannot be created), rather
/// than waiting for a file that never comes until the test's own timeout.
#[test]
fn a_failed_snapshot_ends_the_targets_wait_at_once_with_the_reason() {
    let dir = TempDir::new("cap-failed");
    let c_exe = c_target(&dir, "frames", include_str!("targets/frames.c"), &[]);
    let rust_exe = compile_rust(&dir, "hold", include_str!("targets/hold.rs"));
    let nowhere = dir.path().join("no-such-dir").join("snap");
    for exe in [c_exe, rust_exe] {
        let started = std::time::Instant::now();
        let run = common::run_preloaded(
            &dir,
            &exe,
            &[],
            &[("HEAPTUI_DUMP", nowhere.to_str().unwrap())],
        );
        assert_eq!(
            run.code,
            Some(86),
            "stderr:\n{}\nlog:\n{}",
            run.stderr,
            run.log
        );
        let line = run.stderr.lines().last().unwrap_or_default();
        assert!(
            line.starts_with("snapshot 1 failed: snapshot failed: ")
                && line.contains("No such file or directory"),
            "{}",
            run.stderr
        );
        // Far below the 30 s the wait allows a file that is merely slow.
        assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
    }
}
