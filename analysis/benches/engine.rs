//! Engine benchmark (docs/reference.md §9 "Engine"): `Analysis::new` on synthetic graphs of 100k,
//! 1M and 10M objects — median time, peak memory per object — and, at 100k and 1M objects,
//! the ratio to a brute-force computation (one breadth-first search per frame) whose
//! per-thread and per-frame figures must equal the engine's.
//!
//! Run: `cargo bench -p heaptui-analysis --bench engine` (add `-- 100k 1m` to pick sizes).
//! Memory is counted by a counting global allocator: "analysis peak" is the most the
//! analysis held at once on top of the graph, "kept" what the finished `Analysis` holds.
//! A second line gives the same analysis with its passes on two threads
//! (`Analysis::with` over `ScopedThreads`, as the agent's scanning child runs it): its
//! median time and its peak, which is higher than one thread's (the dominator tree's
//! predecessor lists are filled from both ends at once, with a cursor per half).

use std::time::{Duration, Instant};

use heaptui_analysis::synthetic::{SyntheticConfig, generate};
use heaptui_analysis::{Analysis, HeapGraph, ObjectIndex, ScopedThreads};
use peak_alloc::PeakAlloc;

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

struct Case {
    name: &'static str,
    objects: usize,
    threads: usize,
    frames: usize,
    runs: usize,
}

const CASES: [Case; 3] = [
    Case {
        name: "100k",
        objects: 100_000,
        threads: 64,
        frames: 16,
        runs: 7,
    },
    Case {
        name: "1m",
        objects: 1_000_000,
        threads: 64,
        frames: 16,
        runs: 5,
    },
    Case {
        name: "10m",
        objects: 10_000_000,
        threads: 64,
        frames: 16,
        runs: 3,
    },
];

fn main() {
    // `cargo bench` passes `--bench`; anything else not starting with `-` picks sizes.
    let picked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(|a| a.to_lowercase())
        .collect();
    println!(
        "{:>5} {:>7} {:>9} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "size",
        "threads",
        "edges",
        "groups",
        "gen s",
        "median s",
        "min s",
        "peak B/o",
        "graph B/o",
        "kept B/o"
    );
    for case in CASES
        .iter()
        .filter(|c| picked.is_empty() || picked.iter().any(|p| p == c.name))
    {
        run(case);
    }
}

fn run(case: &Case) {
    let base = ALLOCATOR.current_usage();
    let started = Instant::now();
    let graph = generate(&SyntheticConfig::new(
        case.objects,
        case.threads,
        case.frames,
    ));
    let generated = started.elapsed();
    let graph_bytes = ALLOCATOR.current_usage() - base;

    let mut times = Vec::with_capacity(case.runs);
    let mut peak = 0;
    let mut kept = 0;
    let mut groups = 0;
    let mut analysis = None;
    for _ in 0..case.runs {
        drop(analysis.take());
        let before = ALLOCATOR.current_usage();
        ALLOCATOR.reset_peak_usage();
        let t = Instant::now();
        let a = Analysis::new(&graph);
        times.push(t.elapsed());
        peak = peak.max(ALLOCATOR.peak_usage() - before);
        kept = ALLOCATOR.current_usage() - before;
        groups = a.group_count() as usize;
        analysis = Some(a);
    }
    times.sort();
    let n = case.objects as f64;
    println!(
        "{:>5} {:>7} {:>9} {:>7} {:>8.2} {:>10.3} {:>10.3} {:>10.1} {:>10.1} {:>8.1}",
        case.name,
        format!("{}x{}", case.threads, case.frames),
        graph.edges().len(),
        groups,
        generated.as_secs_f64(),
        times[times.len() / 2].as_secs_f64(),
        times[0].as_secs_f64(),
        peak as f64 / n,
        graph_bytes as f64 / n,
        kept as f64 / n,
    );
    let analysis = analysis.expect("at least one run");
    let totals = analysis.totals();
    println!(
        "      graph + analysis peak {:.1} B/object; {} leaked objects, {} global-only bytes",
        (graph_bytes + peak) as f64 / n,
        analysis.leaks().objects,
        totals.global_only_bytes
    );
    // The brute force is the yardstick at 100k objects; at 1M it runs once, to show how
    // the gap grows with the heap.
    let brute_runs = match case.objects {
        0..=100_000 => 3,
        100_001..=1_000_000 => 1,
        _ => 0,
    };
    if brute_runs > 0 {
        let mut brute_times = Vec::new();
        for _ in 0..brute_runs {
            let t = Instant::now();
            let figures = brute_force(&graph);
            brute_times.push(t.elapsed());
            check(&analysis, &figures);
        }
        brute_times.sort();
        let brute: Duration = brute_times[brute_times.len() / 2];
        let engine = times[times.len() / 2];
        println!(
            "      brute force (BFS per frame) median {:.3} s: {:.1}x the engine's time; figures equal",
            brute.as_secs_f64(),
            brute.as_secs_f64() / engine.as_secs_f64()
        );
    }

    drop(analysis);

    let mut both_times = Vec::with_capacity(case.runs);
    let mut both_peak = 0;
    for _ in 0..case.runs {
        let before = ALLOCATOR.current_usage();
        ALLOCATOR.reset_peak_usage();
        let t = Instant::now();
        let (a, ()) = Analysis::with(&graph, &ScopedThreads, || ());
        both_times.push(t.elapsed());
        both_peak = both_peak.max(ALLOCATOR.peak_usage() - before);
        assert_eq!(a.totals(), totals, "two threads, other figures");
    }
    both_times.sort();
    println!(
        "      on two threads: median {:.3} s (min {:.3} s), peak {:.1} B/object ({:+.1} against one thread)",
        both_times[both_times.len() / 2].as_secs_f64(),
        both_times[0].as_secs_f64(),
        both_peak as f64 / n,
        (both_peak as f64 - peak as f64) / n,
    );
}

/// Per-thread (proprietary, shared) and per-frame proprietary bytes by their definition:
/// F(o) from one breadth-first search per frame, T(o) from F(o) and a search from the
/// globals.
struct BruteFigures {
    threads: Vec<(u64, u64)>,
    frames: Vec<Vec<u64>>,
}

fn brute_force(g: &HeapGraph) -> BruteFigures {
    const NONE: u32 = u32::MAX;
    const MANY: u32 = u32::MAX - 1;
    let n = g.object_count();
    let threads = g.threads.len();
    let words = (threads + 1).div_ceil(64);
    let mut reached_by = vec![0u64; n * words];
    // The single frame reaching an object, MANY when several do, NONE when none.
    let mut frame_of = vec![NONE; n];
    let mut stamp = vec![NONE; n];
    let mut queue: Vec<ObjectIndex> = Vec::new();
    let mut search = |roots: &[ObjectIndex], id: u32, mut visit: Box<dyn FnMut(usize) + '_>| {
        queue.clear();
        for &r in roots {
            if stamp[r as usize] != id {
                stamp[r as usize] = id;
                queue.push(r);
            }
        }
        let mut head = 0;
        while head < queue.len() {
            let o = queue[head];
            head += 1;
            visit(o as usize);
            for &y in g.edges().of(o) {
                if stamp[y as usize] != id {
                    stamp[y as usize] = id;
                    queue.push(y);
                }
            }
        }
    };
    let mut flat = 0u32;
    for (t, thread) in g.threads.iter().enumerate() {
        for frame in &thread.frames {
            let f = flat;
            let bits = &mut reached_by;
            let frames = &mut frame_of;
            search(
                &frame.refs,
                f,
                Box::new(move |o| {
                    bits[o * words + t / 64] |= 1 << (t % 64);
                    frames[o] = if frames[o] == NONE { f } else { MANY };
                }),
            );
            flat += 1;
        }
    }
    let bits = &mut reached_by;
    search(
        &g.globals,
        flat,
        Box::new(move |o| bits[o * words + threads / 64] |= 1 << (threads % 64)),
    );

    let mut figures = BruteFigures {
        threads: vec![(0, 0); threads],
        frames: g.threads.iter().map(|t| vec![0; t.frames.len()]).collect(),
    };
    let mut frame_thread = Vec::new();
    for (t, thread) in g.threads.iter().enumerate() {
        for f in 0..thread.frames.len() {
            frame_thread.push((t, f));
        }
    }
    let globals_bit = |o: usize| reached_by[o * words + threads / 64] >> (threads % 64) & 1 == 1;
    for o in 0..n {
        let set = &reached_by[o * words..(o + 1) * words];
        let members: u32 = set.iter().map(|w| w.count_ones()).sum();
        let size = g.objects().size[o];
        for t in 0..threads {
            if set[t / 64] >> (t % 64) & 1 == 1 {
                if members == 1 {
                    figures.threads[t].0 += size;
                } else {
                    figures.threads[t].1 += size;
                }
            }
        }
        if frame_of[o] != NONE && frame_of[o] != MANY && !globals_bit(o) {
            let (t, f) = frame_thread[frame_of[o] as usize];
            figures.frames[t][f] += size;
        }
    }
    figures
}

fn check(a: &Analysis, brute: &BruteFigures) {
    for (t, figures) in a.threads().iter().enumerate() {
        assert_eq!(
            (figures.proprietary, figures.shared),
            brute.threads[t],
            "thread {} differs from brute force",
            figures.tid
        );
        let frames: Vec<u64> = figures.frames.iter().map(|f| f.proprietary).collect();
        assert_eq!(
            frames, brute.frames[t],
            "frames of thread {} differ",
            figures.tid
        );
    }
}
