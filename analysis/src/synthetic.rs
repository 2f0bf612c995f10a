//! Synthetic heap graphs for benchmarks and tests: deterministic from a seed, built
//! directly in the compact column form, fast enough for ten million objects.
//!
//! A graph is a sequence of "structures" laid out at consecutive object indices, each a
//! tree in breadth-first layout (node `r` has children `r·b+1 ..= r·b+b`) topped up with
//! random references inside the structure, so dominators inside a structure are not just
//! the tree. Each structure has one owner, which decides who refers to its root:
//! - one frame (frame-proprietary data), sometimes through an interior pointer as well;
//! - two or three frames of one thread (a frame-shared context);
//! - frames of two to eight threads, sometimes the globals too (thread-shared caches);
//! - the globals alone (global-only configuration);
//! - nobody (a leaked tree, or an unreachable cycle).
//!
//! Long doubly linked lists hang off frames, the first one a tenth of the heap long, and
//! one thread-shared cache holds a fifth of the heap.
//! About one object in a hundred also points into an earlier thread-shared structure (its
//! root or its middle), and one in a hundred from frame data into a context of its own
//! thread, as real programs' objects point into caches and sessions.
//!
//! This module only builds graphs; it computes no figures and does no I/O.

use crate::graph::{
    Edges, Frame, FrameKind, HeapGraph, ObjectIndex, ObjectRecord, Objects, Process, Site, Thread,
};

/// The shape of a synthetic graph.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticConfig {
    pub objects: usize,
    pub threads: usize,
    pub frames_per_thread: usize,
    /// Average number of references per object (about; lists have two).
    pub edges_per_object: f64,
    pub seed: u64,
}

impl SyntheticConfig {
    /// `objects` objects over `threads` × `frames_per_thread` frames, four references per
    /// object, seed 1.
    pub fn new(objects: usize, threads: usize, frames_per_thread: usize) -> Self {
        SyntheticConfig {
            objects,
            threads,
            frames_per_thread,
            edges_per_object: 4.0,
            seed: 1,
        }
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// A small, fast, seedable generator (SplitMix64): the graphs must be the same on every
/// machine and every run, and no dependency is worth that.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Frame(u32),
    Context(u32),
    Shared,
    Global,
    Leak,
    LeakedCycle,
}

#[derive(Clone, Copy, Debug)]
struct Structure {
    start: u32,
    len: u32,
    /// Tree branching; 1 makes a doubly linked list.
    branching: u32,
    owner: Owner,
}

const SITE_KINDS: [&str; 7] = [
    "frame_data",
    "list_node",
    "context",
    "cache",
    "config",
    "leaked",
    "ring",
];

/// Builds the graph described by `config`.
pub fn generate(config: &SyntheticConfig) -> HeapGraph {
    let n = config.objects;
    assert!(n < u32::MAX as usize - 1, "too many objects");
    let threads = config.threads.max(1);
    let frames_per_thread = config.frames_per_thread.max(1);
    let frame_count = threads * frames_per_thread;
    let mut rng = Rng::new(config.seed);
    let max_extra = (2.0 * config.edges_per_object).ceil() as usize;

    let structures = plan(n, threads, frames_per_thread, &mut rng);

    let mut frame_refs: Vec<Vec<ObjectIndex>> = vec![Vec::new(); frame_count];
    let mut globals: Vec<ObjectIndex> = Vec::new();
    let mut contexts: Vec<Vec<ObjectIndex>> = vec![Vec::new(); threads];
    let mut shared: Vec<Structure> = Vec::new();
    let mut objects = Objects::with_capacity(n);
    let mut edges = Edges::with_capacity(n, (n as f64 * config.edges_per_object) as usize);
    let mut addr = 0x1000_0000u64;
    let mut refs: Vec<ObjectIndex> = Vec::with_capacity(16);

    for s in &structures {
        let root = s.start;
        let thread_of_frame = |f: u32| f as usize / frames_per_thread;
        let mut owner_thread = None;
        match s.owner {
            Owner::Frame(f) => {
                frame_refs[f as usize].push(root);
                if s.len > 1 && rng.chance(0.1) {
                    frame_refs[f as usize].push(root + 1 + rng.below(s.len as u64 - 1) as u32);
                }
                owner_thread = Some(thread_of_frame(f));
            }
            Owner::Context(t) => {
                let t = t as usize;
                let sharers = 2 + rng.below(2) as usize;
                let first = rng.below(frames_per_thread as u64) as usize;
                for k in 0..sharers.min(frames_per_thread) {
                    let f = t * frames_per_thread + (first + k) % frames_per_thread;
                    frame_refs[f].push(root);
                }
                owner_thread = Some(t);
            }
            Owner::Shared => {
                let sharers = (2 + rng.below(7) as usize).min(threads);
                let mut used: Vec<usize> = Vec::with_capacity(sharers);
                while used.len() < sharers {
                    let t = rng.below(threads as u64) as usize;
                    if !used.contains(&t) {
                        used.push(t);
                        let f =
                            t * frames_per_thread + rng.below(frames_per_thread as u64) as usize;
                        frame_refs[f].push(root);
                    }
                }
                if rng.chance(0.1) {
                    globals.push(root);
                }
            }
            Owner::Global => globals.push(root),
            Owner::Leak | Owner::LeakedCycle => {}
        }
        let site = match s.owner {
            Owner::Frame(_) if s.branching == 1 => 1,
            Owner::Frame(_) => 0,
            Owner::Context(_) => 2,
            Owner::Shared => 3,
            Owner::Global => 4,
            Owner::Leak => 5,
            Owner::LeakedCycle => 6,
        };
        let tid = owner_thread.map_or(crate::graph::NO_THREAD, |t| t as u32 + 1);

        for r in 0..s.len {
            let o = s.start + r;
            let size = match rng.below(100) {
                0..=69 => 16 + 8 * rng.below(16),
                70..=97 => 128 + 16 * rng.below(64),
                _ => 4096 + rng.below(60_000),
            };
            objects.push(ObjectRecord {
                id: o as u64 + 1,
                addr,
                size,
                site: site as u32,
                thread: tid,
                seq: o as u64 + 1,
            });
            addr += size.div_ceil(16) * 16 + 16;

            refs.clear();
            if s.branching == 1 {
                // Doubly linked: next and previous.
                if r + 1 < s.len {
                    refs.push(o + 1);
                } else if s.owner == Owner::LeakedCycle {
                    refs.push(s.start);
                }
                if r > 0 {
                    refs.push(o - 1);
                }
            } else {
                let first_child = r as u64 * s.branching as u64 + 1;
                for c in first_child..first_child + s.branching as u64 {
                    if c < s.len as u64 {
                        refs.push(s.start + c as u32);
                    }
                }
                // A leaked tree stays a tree, so its root is the one definitely lost block.
                if s.len > 1 && s.owner != Owner::Leak {
                    // Trees make up for lists and leaks, which have fewer references,
                    // so the whole graph gets close to the configured average.
                    let want = ((o as f64 + 1.0) * config.edges_per_object) as usize;
                    let deficit = want.saturating_sub(edges.len() + refs.len());
                    let extra = deficit.min(max_extra);
                    for _ in 0..extra {
                        refs.push(s.start + nearby(r, s.len, s.branching, &mut rng));
                    }
                }
            }
            if !shared.is_empty() && rng.chance(0.01) {
                let target = shared[rng.below(shared.len() as u64) as usize];
                let offset = if rng.chance(0.5) {
                    0
                } else {
                    rng.below(target.len as u64) as u32
                };
                refs.push(target.start + offset);
            }
            if let Some(t) = owner_thread
                && !contexts[t].is_empty()
                && rng.chance(0.01)
            {
                refs.push(contexts[t][rng.below(contexts[t].len() as u64) as usize]);
            }
            edges.push(refs.iter().copied());
        }
        match s.owner {
            Owner::Shared => shared.push(*s),
            Owner::Context(t) => contexts[t as usize].push(root),
            _ => {}
        }
    }

    let sites = SITE_KINDS
        .iter()
        .enumerate()
        .map(|(i, name)| Site {
            id: i as u64 + 1,
            frames: vec![format!("synthetic::{name}"), "main".to_string()],
        })
        .collect();
    let mut frame_refs = frame_refs.into_iter();
    let threads = (0..threads)
        .map(|t| Thread {
            tid: t as u32 + 1,
            name: format!("worker-{t}"),
            frames: (0..frames_per_thread)
                .map(|f| Frame {
                    function: format!("work_level_{f}"),
                    module: "synthetic".to_string(),
                    kind: if f + 1 == frames_per_thread {
                        FrameKind::System
                    } else {
                        FrameKind::User
                    },
                    refs: frame_refs.next().unwrap_or_default(),
                    interior: Vec::new(),
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    HeapGraph::new(
        Process {
            pid: 1,
            command: format!("synthetic {} objects, seed {}", n, config.seed),
        },
        sites,
        objects,
        edges,
        threads,
        globals,
    )
    .expect("synthetic graphs are well formed")
}

/// A random node near `r` in a breadth-first tree of `len` nodes and branching `b`: its
/// parent, or a node at about its depth under its parent or grandparent (a sibling or a
/// cousin, as back pointers and neighbour links are in real data). Such references make
/// diamonds — the target's immediate dominator becomes the shared ancestor — while a
/// pointer into the middle of a structure still cuts off only the path above it, as in
/// real heaps; uniformly random targets would make every large structure one tangle.
fn nearby(r: u32, len: u32, b: u32, rng: &mut Rng) -> u32 {
    let (r, len, b) = (r as u64, len as u64, b as u64);
    if r == 0 {
        return (1 + rng.below((len - 1).min(b))) as u32;
    }
    let parent = (r - 1) / b;
    if rng.chance(0.3) {
        return parent as u32;
    }
    let (mut ancestor, mut up) = (parent, 1);
    if ancestor > 0 && rng.chance(0.5) {
        ancestor = (ancestor - 1) / b;
        up = 2;
    }
    // Descendants of `ancestor` `up` levels down are one contiguous range; go one level
    // further down half of the time.
    let levels = up + rng.below(2);
    let (mut lo, mut hi) = (ancestor, ancestor + 1);
    for _ in 0..levels {
        lo = lo * b + 1;
        hi = hi * b + 1;
    }
    let hi = hi.min(len);
    if lo >= hi {
        return parent as u32;
    }
    (lo + rng.below(hi - lo)) as u32
}

/// Cuts `0..n` into structures and chooses their owners.
fn plan(n: usize, threads: usize, frames_per_thread: usize, rng: &mut Rng) -> Vec<Structure> {
    let frames = (threads * frames_per_thread) as u64;
    let frame = |rng: &mut Rng| Owner::Frame(rng.below(frames) as u32);
    let mut out = Vec::new();
    let mut next = 0usize;
    let mut count = 0u64;
    while next < n {
        let (len, branching, owner) = if count == 0 && n >= 100 {
            // One long list, a tenth of the heap.
            (n / 10, 1, frame(rng))
        } else if count == 6 && n >= 100 {
            // One process-wide cache, a fifth of the heap: what makes one search per
            // root expensive in real heaps.
            (n / 5, 4, Owner::Shared)
        } else if count % 1000 == 999 {
            (1000 + rng.below(9000) as usize, 1, frame(rng))
        } else {
            let len = match rng.below(100) {
                0..=69 => 1 + rng.below(16) as usize,
                70..=96 => 16 + rng.below(496) as usize,
                _ => 512 + rng.below(7680) as usize,
            };
            // Small graphs still get many structures.
            let len = len.min((n / 40).max(1));
            let branching = 2 + rng.below(7) as u32;
            // The first few structures take every kind of owner in turn, so even a small
            // graph has each; after that the owner is drawn.
            let draw = match count {
                1 => 60,
                2 => 70,
                3 => 87,
                4 => 92,
                5 => 97,
                _ => rng.below(100),
            };
            match draw {
                0..=59 => (len, branching, frame(rng)),
                60..=69 if frames_per_thread >= 2 => (
                    len,
                    branching,
                    Owner::Context(rng.below(threads as u64) as u32),
                ),
                60..=69 => (len, branching, frame(rng)),
                70..=86 if threads >= 2 => (len, branching, Owner::Shared),
                70..=91 => (len, branching, Owner::Global),
                // Leaks have at least two blocks, so something is indirectly lost.
                92..=96 => (len.max(2), branching, Owner::Leak),
                _ => (len.max(2), 1, Owner::LeakedCycle),
            }
        };
        let len = len.min(n - next);
        out.push(Structure {
            start: next as u32,
            len: len as u32,
            branching,
            owner,
        });
        next += len;
        count += 1;
    }
    out
}

/// `graph` with every `every`-th reference between objects made an interior edge, and each
/// frame's and the globals' first reference too: graphs with possibly lost blocks, for the
/// tests of everything that carries the kinds of references.
pub fn with_interior_edges(graph: &HeapGraph, every: usize) -> HeapGraph {
    let n = graph.object_count();
    let mut edges = Edges::with_capacity(n, graph.edges().len());
    let mut k = 0usize;
    for o in 0..n as ObjectIndex {
        edges.push_with_kinds(graph.edges().of(o).iter().map(|&t| {
            k += 1;
            (t, k.is_multiple_of(every.max(1)))
        }));
    }
    let first = |refs: &[ObjectIndex]| refs.first().map(|&o| vec![o]).unwrap_or_default();
    let threads = graph
        .threads
        .iter()
        .map(|t| Thread {
            frames: t
                .frames
                .iter()
                .map(|f| Frame {
                    interior: first(&f.refs),
                    ..f.clone()
                })
                .collect(),
            ..t.clone()
        })
        .collect();
    let globals_interior = first(&graph.globals);
    HeapGraph::new(
        graph.process.clone(),
        graph.sites.clone(),
        graph.objects().clone(),
        edges,
        threads,
        graph.globals.clone(),
    )
    .and_then(|g| g.with_globals_interior(globals_interior))
    .expect("the same graph with kinds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_graph() {
        let c = SyntheticConfig::new(20_000, 8, 4).seed(7);
        assert_eq!(generate(&c), generate(&c));
        assert_ne!(generate(&c), generate(&c.clone().seed(8)));
    }

    #[test]
    fn shape_follows_the_config() {
        let g = generate(&SyntheticConfig::new(100_000, 16, 8));
        assert_eq!(g.object_count(), 100_000);
        assert_eq!(g.threads.len(), 16);
        assert!(g.threads.iter().all(|t| t.frames.len() == 8));
        let per_object = g.edges().len() as f64 / 100_000.0;
        assert!(
            (3.0..=4.5).contains(&per_object),
            "{per_object} edges per object"
        );
        assert!(!g.globals.is_empty());
        // The first structure is a long doubly linked list.
        assert_eq!(g.edges().of(0), &[1]);
        assert_eq!(g.edges().of(5), &[6, 4]);
    }

    #[test]
    fn tiny_and_empty_graphs_are_fine() {
        for n in [0, 1, 2, 99, 100] {
            let g = generate(&SyntheticConfig::new(n, 1, 1));
            assert_eq!(g.object_count(), n);
        }
    }
}
