//! The outside capture against real processes: C programs compiled here, each printing the
//! blocks it holds and the ones it freed, run without the agent — and once under the real
//! agent, to compare its snapshot with the capture from outside.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use super::*;

/// Compiles `testdata/FILE` with `compiler` and `flags` into a fresh directory.
fn build(compiler: &str, file: &str, flags: &[&str]) -> (tempdir::Dir, PathBuf) {
    let name = file.split('.').next().unwrap_or(file);
    let dir = tempdir::Dir::new(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("src/outside/testdata/{file}"));
    let exe = build_in(&dir, compiler, &src, flags);
    (dir, exe)
}

/// Compiles source file `src` with `compiler` and `flags` into `dir`, named after it.
fn build_in(dir: &tempdir::Dir, compiler: &str, src: &Path, flags: &[&str]) -> PathBuf {
    let exe = dir.path().join(src.file_stem().unwrap());
    let out = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("{compiler}, to build {}: {e}", src.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Compiles a C program of `testdata/` into a fresh directory.
pub fn compile(name: &str, flags: &[&str]) -> (tempdir::Dir, PathBuf) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let flags: Vec<&str> = ["-O1", "-g", "-pthread"]
        .iter()
        .chain(flags)
        .copied()
        .collect();
    build(&cc, &format!("{name}.c"), &flags)
}

mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory removed when dropped.
    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(tag: &str) -> Dir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "heaptui-outside-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A running target that printed its blocks and `ready`; killed when dropped.
pub struct Target {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    stdout: Option<std::io::Lines<BufReader<std::process::ChildStdout>>>,
    pub live: HashMap<u64, u64>,
    /// Blocks whose size asked for is known, not their usable size.
    pub asked: HashMap<u64, u64>,
    pub freed: Vec<u64>,
}

impl Target {
    pub fn start(exe: &Path) -> Target {
        Target::start_with(exe, &[])
    }

    pub fn start_with(exe: &Path, args: &[&str]) -> Target {
        Target::start_env(exe, args, &[])
    }

    pub fn start_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Target {
        let mut child = Command::new(exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut live = HashMap::new();
        let mut asked = HashMap::new();
        let mut freed = Vec::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let mut f = line.split(' ');
            match (f.next(), f.next(), f.next()) {
                (Some("ready"), ..) => break,
                (Some("live"), Some(a), Some(s)) => {
                    live.insert(u64::from_str_radix(a, 16).unwrap(), s.parse().unwrap());
                }
                (Some("asked"), Some(a), Some(s)) => {
                    asked.insert(u64::from_str_radix(a, 16).unwrap(), s.parse().unwrap());
                }
                (Some("freed"), Some(a), _) => freed.push(u64::from_str_radix(a, 16).unwrap()),
                _ => panic!("unexpected line {line:?}"),
            }
        }
        Target {
            child,
            stdin,
            stdout: Some(lines),
            live,
            asked,
            freed,
        }
    }

    /// Sends a command line and reads the one-line answer.
    pub fn command(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        self.stdout.as_mut().unwrap().next().unwrap().unwrap()
    }

    /// Says `quit` and returns the exit code.
    pub fn finish(&mut self) -> Option<i32> {
        writeln!(self.stdin.as_mut().unwrap(), "quit").unwrap();
        drop(self.stdin.take());
        self.child.wait().unwrap().code()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Target {
    /// A line, then the end of its input: every target exits on either, and threads.c then
    /// removes its System V semaphore, which would outlive a killed process. Killed only when it
    /// has not ended within `EXIT_GRACE` (stopped or stuck: a test failed).
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"\n");
        }
        let deadline = std::time::Instant::now() + EXIT_GRACE;
        while std::time::Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
                _ => return,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a dropped [`Target`] has to exit on its own.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

#[test]
fn the_blocks_of_several_arenas_are_found_with_their_usable_sizes_and_no_free_chunk() {
    let (_dir, exe) = compile("arenas", &[]);
    let target = Target::start(&exe);
    let cap = capture_agrees_with(&target);
    assert_eq!(cap.graph.threads.len(), 5);
}

/// Captures `target` and checks what it said: its live blocks with their usable sizes, the
/// blocks whose asked size it knows within a chunk's rounding of it, none of those it freed.
fn capture_agrees_with(target: &Target) -> Capture {
    let cap = capture(target.pid()).unwrap_or_else(|e| panic!("{e}"));
    let objects = cap.graph.objects();
    let found: HashMap<u64, u64> = objects
        .addr
        .iter()
        .copied()
        .zip(objects.size.iter().copied())
        .collect();
    for (addr, size) in &target.live {
        assert_eq!(found.get(addr), Some(size), "live block {addr:#x}");
    }
    for (addr, asked) in &target.asked {
        let usable = *found
            .get(addr)
            .unwrap_or_else(|| panic!("block {addr:#x} of {asked} bytes not found"));
        // A chunk is the size asked for plus its 8-byte header, rounded up to 16 (32 at least).
        assert!(
            (*asked..asked + 24).contains(&usable),
            "{addr:#x}: {asked} asked, {usable} usable"
        );
    }
    for addr in &target.freed {
        assert!(
            !found.contains_key(addr),
            "freed block {addr:#x} reported live"
        );
    }
    assert!(cap.warnings.is_empty(), "{:?}", cap.warnings);
    cap
}

#[test]
fn a_cpp_program_is_captured_with_its_strings_nodes_and_threads_blocks() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let (_dir, exe) = build(&cxx, "cpp_target.cc", &["-O1", "-g", "-pthread"]);
    let mut target = Target::start(&exe);
    assert!(target.live.len() > 150, "{}", target.live.len());
    capture_agrees_with(&target);
    assert_eq!(target.finish(), Some(0));
}

#[test]
fn a_rust_program_is_captured_with_its_boxes_and_strings() {
    let (_dir, exe) = build("rustc", "rust_target.rs", &["-O", "-g"]);
    let mut target = Target::start(&exe);
    assert_eq!(target.asked.len(), 150);
    capture_agrees_with(&target);
    assert_eq!(target.finish(), Some(0));
}

#[test]
fn only_the_touched_pages_of_a_large_reservation_are_copied_and_its_pointer_is_found() {
    let (_dir, exe) = compile("sparse", &[]);
    let mut target = Target::start(&exe);
    let cap = capture_agrees_with(&target);
    // One page of the 1 GiB block, the small block, the stacks and the modules' data: a few
    // MiB, not the gigabyte.
    assert!(cap.copied < 32 << 20, "{} bytes copied", cap.copied);
    // The small block is held through the big one's touched page.
    let g = &cap.graph;
    let a = heaptui_analysis::Analysis::new(g);
    let objects = g.objects();
    let small = (0..objects.len())
        .find(|&o| objects.size[o] == 104)
        .expect("the small block");
    let big = (0..objects.len())
        .find(|&o| objects.size[o] >= 1 << 30)
        .expect("the big block");
    assert_eq!(g.edges().of(big as u32), &[small as u32]);
    assert!(
        !matches!(
            a.class_of(small as u32),
            heaptui_analysis::ObjectClass::DefinitelyLost
        ),
        "{:?}",
        a.class_of(small as u32)
    );
    assert_eq!(target.finish(), Some(0));
}

/// The `threads` target, started with `n` idle threads.
fn threads_target(n: usize) -> (tempdir::Dir, Target) {
    let (dir, exe) = compile("threads", &[]);
    let target = Target::start_with(&exe, &[&n.to_string()]);
    (dir, target)
}

/// The checksum `step` prints: the list holds k*7+3 for k = 999 down to 0.
fn expected_step() -> String {
    let sum = (0..1000u64)
        .rev()
        .fold(0u64, |s, k| s.wrapping_mul(31).wrapping_add(k * 7 + 3));
    format!("step {sum:x} busy moving")
}

/// Whether any thread of `pid` is stopped or traced.
fn stopped_or_traced(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .map(str::trim)
        .unwrap_or("?");
    if tracer != "0" {
        return Some(format!("traced by {tracer}"));
    }
    for tid in ptrace::list_threads(Pid::from_raw(pid as i32)) {
        if let Some(s @ ('t' | 'T')) = ptrace::thread_state(Pid::from_raw(pid as i32), tid) {
            return Some(format!("thread {tid} in state {s}"));
        }
    }
    None
}

#[test]
fn blocked_busy_and_signal_masking_threads_run_on_unharmed_after_captures() {
    let (_dir, mut target) = threads_target(8);
    for _ in 0..3 {
        let cap = capture(target.pid()).unwrap_or_else(|e| panic!("{e}"));
        // main, 4 waiters, busy, sleeper, 8 idle
        assert_eq!(cap.graph.threads.len(), 15);
        for t in &cap.graph.threads {
            assert_eq!(t.state, heaptui_analysis::ThreadState::Stopped, "{}", t.tid);
        }
        assert_eq!(stopped_or_traced(target.pid()), None);
        for (addr, size) in &target.live {
            let o = cap.graph.object_at(*addr).expect("live block found");
            assert_eq!(cap.graph.objects().size[o as usize], *size);
        }
    }
    // The program goes on exactly as it would have: its heap unchanged, the busy thread
    // moving, every wait ending with its event (none saw EINTR), a clean exit.
    assert_eq!(target.command("step"), expected_step());
    assert_eq!(
        target.command("wake"),
        "woke epoll ok, sigwait ok, semop ok, inotify ok"
    );
    assert_eq!(target.command("step"), expected_step());
    assert_eq!(target.finish(), Some(0));
}

#[test]
fn two_hundred_fifty_six_threads_are_stopped_and_each_holds_its_block() {
    let (_dir, target) = threads_target(256);
    let cap = capture(target.pid()).unwrap_or_else(|e| panic!("{e}"));
    let g = &cap.graph;
    assert_eq!(g.threads.len(), 256 + 7);
    assert!(
        g.threads
            .iter()
            .all(|t| t.state == heaptui_analysis::ThreadState::Stopped)
    );
    // Each idle thread holds its own block from its frames (besides main's list head).
    let held: std::collections::HashSet<u32> = g
        .threads
        .iter()
        .flat_map(|t| t.frames.iter().flat_map(|f| f.refs.iter().copied()))
        .collect();
    assert!(held.len() > 256, "{} blocks held by threads", held.len());
    assert_eq!(stopped_or_traced(target.pid()), None);
}

#[test]
fn a_debugger_attaches_after_a_capture() {
    let (_dir, mut target) = threads_target(2);
    capture(target.pid()).unwrap_or_else(|e| panic!("{e}"));
    let gdb = Command::new("gdb")
        .args([
            "-batch",
            "-nx",
            "-p",
            &target.pid().to_string(),
            "-ex",
            "info threads",
        ])
        .output()
        .expect("gdb");
    let text = String::from_utf8_lossy(&gdb.stdout);
    assert!(
        gdb.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&gdb.stderr)
    );
    assert!(text.contains("threads"), "{text}");
    assert_eq!(target.command("step"), expected_step());
}

#[test]
fn a_process_a_debugger_traces_is_refused_with_what_to_do() {
    let (_dir, mut target) = threads_target(2);
    let pid = target.pid();
    let mut strace = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace");
    // strace says "Process N attached" on stderr once it traces the process.
    let mut err = BufReader::new(strace.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("attached") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "strace ended");
    }
    let refused = match capture(pid) {
        Err(CaptureError::Access(why)) => why,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a traced process was captured"),
    };
    assert!(
        refused.contains(&format!("process {pid} "))
            && refused.contains("already traced by process"),
        "{refused}"
    );
    assert!(refused.contains("(strace)"), "{refused}");
    nix::sys::signal::kill(Pid::from_raw(strace.id() as i32), nix::sys::signal::SIGINT).unwrap();
    strace.wait().unwrap();
    // strace detached on SIGINT: the process runs on and can be captured.
    assert_eq!(target.command("step"), expected_step());
    capture(pid).unwrap_or_else(|e| panic!("{e}"));
}

/// The part of graph `g` that both captures can see alike: only the blocks at `kept`
/// addresses (and the references among them, the frames' included), each sized `size_of` its
/// address.
fn comparable(g: &HeapGraph, kept: &HashSet<u64>, size_of: impl Fn(u64) -> u64) -> HeapGraph {
    let objects = g.objects();
    let mut new_index = vec![None; objects.len()];
    let mut rows = heaptui_analysis::Objects::with_capacity(kept.len());
    for (o, slot) in new_index.iter_mut().enumerate() {
        let mut r = objects.record(o as u32);
        if kept.contains(&r.addr) {
            r.size = size_of(r.addr);
            *slot = Some(rows.push(r));
        }
    }
    let remap = |refs: &[u32]| -> Vec<u32> {
        let mut out: Vec<u32> = refs.iter().filter_map(|&r| new_index[r as usize]).collect();
        out.sort_unstable();
        out.dedup();
        out
    };
    let mut edges = heaptui_analysis::Edges::with_capacity(kept.len(), g.edges().len());
    for o in (0..objects.len()).filter(|&o| new_index[o].is_some()) {
        edges.push(remap(g.edges().of(o as u32)));
    }
    let threads = g
        .threads
        .iter()
        .map(|t| heaptui_analysis::Thread {
            frames: t
                .frames
                .iter()
                .map(|f| heaptui_analysis::Frame {
                    refs: remap(&f.refs),
                    interior: Vec::new(),
                    ..f.clone()
                })
                .collect(),
            ..t.clone()
        })
        .collect();
    let globals = remap(&g.globals);
    HeapGraph::new(
        g.process.clone(),
        g.sites.clone(),
        rows,
        edges,
        threads,
        globals,
    )
    .unwrap()
}

/// What a graph says of each block, by address: its referents' addresses and its class, with
/// threads named by tid.
fn by_address(g: &HeapGraph) -> BTreeMap<u64, (Vec<u64>, String)> {
    let a = heaptui_analysis::Analysis::new(g);
    let addr = &g.objects().addr;
    (0..addr.len())
        .map(|o| {
            let mut refs: Vec<u64> = g
                .edges()
                .of(o as u32)
                .iter()
                .map(|&r| addr[r as usize])
                .collect();
            refs.sort_unstable();
            let class = match a.class_of(o as u32) {
                // Thread indices may differ: name the thread by its tid.
                heaptui_analysis::ObjectClass::FrameProprietary { thread, .. }
                | heaptui_analysis::ObjectClass::FrameShared { thread } => {
                    format!("thread {}", g.threads[thread].tid)
                }
                other => format!("{other:?}"),
            };
            (addr[o], (refs, class))
        })
        .collect()
}

/// Each thread's frames, by tid: function, module, kind and the addresses of the blocks the
/// frame holds.
type FramesOf = BTreeMap<u32, Vec<(String, String, String, Vec<u64>)>>;

fn frames_of(g: &HeapGraph) -> FramesOf {
    let addr = &g.objects().addr;
    g.threads
        .iter()
        .map(|t| {
            let frames = t
                .frames
                .iter()
                .map(|f| {
                    let mut held: Vec<u64> = f.refs.iter().map(|&o| addr[o as usize]).collect();
                    held.sort_unstable();
                    (
                        f.function.clone(),
                        f.module.clone(),
                        format!("{:?}", f.kind),
                        held,
                    )
                })
                .collect();
            (t.tid, frames)
        })
        .collect()
}

/// Whether two captures of a thread agree frame by frame. A thread that runs between sleeps
/// (`moving`: its frames name one of those functions) may be caught inside its sleep by one
/// capture and between two by the other: then its innermost system frames (the sleep's) are
/// left out and what they held goes to the first frame kept.
fn same_frames(
    ours: &[(String, String, String, Vec<u64>)],
    theirs: &[(String, String, String, Vec<u64>)],
    moving: &[&str],
) -> bool {
    if ours == theirs {
        return true;
    }
    let moves = ours.iter().any(|f| moving.contains(&f.0.as_str()));
    let trimmed = |frames: &[(String, String, String, Vec<u64>)]| {
        let inner = frames.iter().take_while(|f| f.2 == "System").count();
        let mut out = frames[inner.min(frames.len())..].to_vec();
        if let Some(first) = out.first_mut() {
            for f in &frames[..inner] {
                first.3.extend(f.3.iter().copied());
            }
            first.3.sort_unstable();
            first.3.dedup();
        }
        out
    };
    moves && trimmed(ours) == trimmed(theirs)
}

/// Takes the agent's snapshot of `target` (run under the agent) and a capture from outside —
/// after it, or before it when `outside_first` — and checks that they agree on the blocks the agent tracks (the outside's sizes are the usable
/// ones), each thread's frames (names and the blocks each holds) and every figure. Returns
/// both graphs (the agent's first) and the outside capture's usable sizes.
fn captured_both_ways(
    target: &Target,
    outside_first: bool,
    moving: &[&str],
) -> (HeapGraph, Capture, HashMap<u64, u64>) {
    captured_both_ways_with(target, outside_first, moving, false)
}

/// [`captured_both_ways`], where `stale_slack` says the program leaves stale pointers in the
/// slack between the size it asked for and the chunk's usable size (Rust's `String` growth
/// does): the capture from outside, which knows only the usable size, finds references there
/// that the agent does not, so a block's references in the agent's capture need only be among
/// the outside's, and the figures that follow from them are not compared.
fn captured_both_ways_with(
    target: &Target,
    outside_first: bool,
    moving: &[&str],
    stale_slack: bool,
) -> (HeapGraph, Capture, HashMap<u64, u64>) {
    let first = outside_first.then(|| capture(target.pid()).unwrap_or_else(|e| panic!("{e}")));
    let (address, token) =
        crate::client::locate::resolve(&format!("pid:{}", target.pid()), None).unwrap();
    let mut session = crate::client::Session::connect(&address, &token).unwrap();
    let file = crate::client::commands::live_snapshot(&mut session)
        .unwrap()
        .file;
    let agents = heaptui_analysis::snapshot::read_bytes(&file).unwrap();
    // Captured after the agent's snapshot, which the agent keeps in its own memory (every
    // block's address among it): that memory must not be taken for the program's.
    let outside = first.unwrap_or_else(|| capture(target.pid()).unwrap_or_else(|e| panic!("{e}")));
    let usable: HashMap<u64, u64> = outside
        .graph
        .objects()
        .addr
        .iter()
        .copied()
        .zip(outside.graph.objects().size.iter().copied())
        .collect();
    // Every block the agent tracks is one libc holds, the agent's size the one asked for, the
    // outside's its usable size.
    let tracked: HashSet<u64> = agents.objects().addr.iter().copied().collect();
    for o in 0..agents.objects().len() {
        let (addr, asked) = (agents.objects().addr[o], agents.objects().size[o]);
        let got = *usable
            .get(&addr)
            .unwrap_or_else(|| panic!("{addr:#x} not found"));
        assert!(
            asked <= got && got - asked < 4096 + 32,
            "{addr:#x}: {asked} asked, {got} usable"
        );
    }
    // The same threads, the agent's own left out.
    let tids = |g: &HeapGraph| g.threads.iter().map(|t| t.tid).collect::<Vec<_>>();
    assert_eq!(tids(&agents), tids(&outside.graph));

    // The same edges and roots, so the same class block by block and the same figures, once
    // the agent's sizes are the usable ones.
    let theirs_g = comparable(&agents, &tracked, |a| usable[&a]);
    let ours_g = comparable(&outside.graph, &tracked, |a| usable[&a]);
    // The same frames, named alike and holding the same blocks.
    let (theirs, ours) = (frames_of(&theirs_g), frames_of(&ours_g));
    for (tid, frames) in &theirs {
        assert!(
            frames.len() > 1 && frames.iter().any(|f| f.2 == "User"),
            "thread {tid} unwound: {frames:#?}"
        );
        assert!(
            same_frames(&ours[tid], frames, moving),
            "thread {tid}: outside {:#?}\nagent {frames:#?}",
            ours[tid]
        );
    }
    let (by_theirs, by_ours) = (by_address(&theirs_g), by_address(&ours_g));
    for (addr, seen) in &by_theirs {
        let o = agents
            .objects()
            .addr
            .iter()
            .position(|a| a == addr)
            .unwrap();
        let why = format!(
            "block {addr:#x} ({} asked, {} usable): agent {seen:?}, outside {:?}",
            agents.objects().size[o],
            usable[addr],
            by_ours.get(addr)
        );
        if stale_slack {
            let ours = &by_ours[addr].0;
            assert!(seen.0.iter().all(|r| ours.contains(r)), "{why}");
        } else {
            assert_eq!(Some(seen), by_ours.get(addr), "{why}");
        }
    }
    if stale_slack {
        return (agents, outside, usable);
    }
    let (a, b) = (
        heaptui_analysis::Analysis::new(&theirs_g),
        heaptui_analysis::Analysis::new(&ours_g),
    );
    assert_eq!(a.totals(), b.totals());
    assert_eq!(a.leaks(), b.leaks());
    let figures = |x: &heaptui_analysis::Analysis| {
        x.threads()
            .iter()
            .map(|t| (t.tid, t.proprietary, t.shared, t.total))
            .collect::<Vec<_>>()
    };
    assert_eq!(figures(&a), figures(&b));
    (agents, outside, usable)
}

/// Starts `exe` with `args` under the real agent (every free reaching libc at once: a free
/// the agent held back would be a live chunk to libc).
fn under_agent(dir: &tempdir::Dir, exe: &Path, args: &[&str]) -> Target {
    let agent = crate::embedded::agent_path().expect("the agent built into heaptui");
    let socket = dir.path().join("agent.sock");
    Target::start_env(
        exe,
        args,
        &[
            ("LD_PRELOAD", agent.to_str().unwrap()),
            ("HEAPTUI_LISTEN", &format!("unix:{}", socket.display())),
            ("HEAPTUI_HOLD_FREES", "0"),
        ],
    )
}

/// The start of the arena heap (or the main heap) that holds `addr`: non-main heaps are
/// aligned to their largest size.
fn heap_of(addr: u64, main_heap: &Range<u64>) -> u64 {
    if main_heap.contains(&addr) {
        main_heap.start
    } else {
        addr & !(glibc::LAYOUT_2_35.heap_max - 1)
    }
}

/// Waits (at most 10 s) until every thread of `pid` but the agent's sits in one of the system
/// calls `idle` (by number): a target says "ready" once its workers passed a barrier, but a
/// worker can still be leaving `pthread_barrier_wait` for its `pause` (seen in CI), and two
/// captures a moment apart would then find it at two places.
fn wait_until_idle_in(pid: u32, idle: &[u32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let settled = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .all(|task| {
                let read = |what: &str| std::fs::read_to_string(task.path().join(what));
                read("comm").is_ok_and(|c| c.starts_with("heaptui"))
                    || read("syscall").is_ok_and(|s| {
                        s.split_whitespace()
                            .next()
                            .and_then(|n| n.parse().ok())
                            .is_some_and(|n: u32| idle.contains(&n))
                    })
            })
    };
    while !settled() {
        assert!(
            std::time::Instant::now() < deadline,
            "the target's threads never all sat in {idle:?}"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_target_under_the_agent_gives_the_same_blocks_frames_and_figures_captured_both_ways() {
    let (dir, exe) = compile("arenas", &[]);
    let target = under_agent(&dir, &exe, &[]);
    // Main in read(2) of stdin (0), the workers in pause(2) (34).
    wait_until_idle_in(target.pid(), &[0, 34]);
    let (agents, outside, usable) = captured_both_ways(&target, false, &[]);
    let tracked: HashSet<u64> = agents.objects().addr.iter().copied().collect();
    for (addr, size) in &target.live {
        assert_eq!(usable[addr], *size, "{addr:#x}");
    }
    // libc holds a few blocks more, which no hook saw: those allocated before the agent's
    // hooks were ready (below its first block in the main heap), and those of the agent's own
    // threads (in arenas that hold no block of the program).
    let maps = maps::Maps::parse(
        &std::fs::read_to_string(format!("/proc/{}/maps", target.pid())).unwrap(),
    );
    let main_heap = maps
        .maps
        .iter()
        .find(|m| m.path == "[heap]")
        .map(|m| m.start..m.end)
        .unwrap();
    let first_tracked = tracked
        .iter()
        .copied()
        .filter(|a| main_heap.contains(a))
        .min()
        .unwrap();
    let program_heaps: HashSet<u64> = tracked.iter().map(|&a| heap_of(a, &main_heap)).collect();
    let untracked: Vec<u64> = usable
        .keys()
        .copied()
        .filter(|a| !tracked.contains(a))
        .collect();
    for a in &untracked {
        assert!(
            (main_heap.contains(a) && *a < first_tracked)
                || !program_heaps.contains(&heap_of(*a, &main_heap)),
            "{a:#x} ({} bytes) is live to libc, unknown to the agent",
            usable[a]
        );
    }

    let _ = outside;
}

#[test]
fn blocked_busy_and_signal_masking_threads_have_the_same_frames_captured_both_ways() {
    let (dir, exe) = compile("threads", &["-fno-omit-frame-pointer"]);
    let mut target = under_agent(&dir, &exe, &["3"]);
    // The outside capture first: the agent's stop cuts the semop(2) wait short with EINTR
    // (System V semaphores are never restarted after a signal handler), which ends that thread.
    let (agents, ..) = captured_both_ways(&target, true, &["sleeper"]);
    // Every kind of thread is there, unwound through its own function: the waits, the busy
    // thread, the sleeper with every signal blocked, the idle ones.
    let functions: HashSet<String> = agents
        .threads
        .iter()
        .flat_map(|t| t.frames.iter().map(|f| f.function.clone()))
        .collect();
    for f in [
        "main",
        "epoll_waiter",
        "signal_waiter",
        "sem_waiter",
        "inotify_reader",
        "busy",
        "sleeper",
        "idle",
    ] {
        assert!(functions.contains(f), "{f} in {functions:?}");
    }
    assert_eq!(target.command("step"), expected_step());
}

#[test]
fn a_thread_inside_its_signal_handler_has_the_same_frames_captured_both_ways() {
    let (dir, exe) = compile("handler", &[]);
    let mut target = under_agent(&dir, &exe, &[]);
    let (agents, outside, _) = captured_both_ways(&target, false, &[]);
    // The handler's frame, the kernel's signal frame, then the code it interrupted: each
    // holding its own block.
    for g in [&agents, &outside.graph] {
        let worker = g
            .threads
            .iter()
            .find(|t| t.frames.iter().any(|f| f.function == "handler"))
            .unwrap_or_else(|| panic!("{:#?}", g.threads));
        let names: Vec<&str> = worker.frames.iter().map(|f| f.function.as_str()).collect();
        let at = |name: &str| names.iter().position(|n| *n == name);
        let (handler, signal, interrupted) = (
            at("handler").unwrap(),
            at("<signal handler called>").unwrap_or_else(|| panic!("{names:?}")),
            at("interrupted").unwrap_or_else(|| panic!("{names:?}")),
        );
        assert!(handler < signal && signal < interrupted, "{names:?}");
        let size_held = |i: usize| -> Vec<u64> {
            worker.frames[i]
                .refs
                .iter()
                .map(|&o| g.objects().addr[o as usize])
                .filter(|a| target.live.contains_key(a))
                .map(|a| target.live[&a])
                .collect()
        };
        assert_eq!(size_held(handler), vec![3016], "{names:?}");
        assert_eq!(size_held(interrupted), vec![2008], "{names:?}");
    }
    assert_eq!(target.finish(), Some(0));
}

#[test]
fn a_cpp_target_has_the_same_frames_captured_both_ways() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let (dir, exe) = build(&cxx, "cpp_target.cc", &["-O1", "-g", "-pthread"]);
    let mut target = under_agent(&dir, &exe, &[]);
    captured_both_ways(&target, false, &[]);
    assert_eq!(target.finish(), Some(0));
}

#[test]
fn a_rust_target_has_the_same_frames_captured_both_ways() {
    let (dir, exe) = build("rustc", "rust_target.rs", &["-O", "-g"]);
    let mut target = under_agent(&dir, &exe, &[]);
    let (agents, ..) = captured_both_ways_with(&target, false, &[], true);
    assert!(
        agents.threads[0]
            .frames
            .iter()
            .any(|f| f.function.starts_with("rust_target::main")),
        "{:#?}",
        agents.threads[0].frames
    );
    assert_eq!(target.finish(), Some(0));
}

/// The agent's idle target (agent-shim/tests/targets/idle.c): threads blocked in read(2),
/// sleeps, poll, select, epoll and a condition variable, two of them with the address of a
/// lost block left in registers their system call does not take.
fn compile_idle() -> (tempdir::Dir, PathBuf) {
    let dir = tempdir::Dir::new("idle");
    let targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent-shim/tests/targets");
    let mut src = String::new();
    for file in ["sync.h", "proc_state.h", "idle.c"] {
        src.push_str(&std::fs::read_to_string(targets.join(file)).unwrap());
        src.push('\n');
    }
    let path = dir.path().join("idle.c");
    std::fs::write(&path, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = build_in(
        &dir,
        &cc,
        &path,
        &["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"],
    );
    (dir, exe)
}

#[test]
fn a_dead_register_of_a_thread_blocked_in_a_system_call_holds_nothing_captured_from_outside() {
    let (_dir, exe) = compile_idle();
    let target = Target::start(&exe);
    let pid = target.pid();
    // Main prints "ready" before its read(2) of stdin: wait until it is inside it.
    let main_reads = || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
            .is_ok_and(|s| s.split_whitespace().next() == Some("0"))
    };
    while !main_reads() {
        std::thread::yield_now();
    }
    let first = capture(pid).unwrap_or_else(|e| panic!("{e}"));
    let g = &first.graph;
    let a = heaptui_analysis::Analysis::new(g);
    let objects = g.objects();
    // malloc(3003) and malloc(3004), each left only in registers that its thread's read(2)
    // does not take (r8, r9, r10): both lost. (Their usable size is 3016.)
    let lost: Vec<String> = (0..objects.len())
        .filter(|&o| objects.size[o] == 3016)
        .map(|o| format!("{:?}", a.class_of(o as u32)))
        .collect();
    assert_eq!(lost, vec!["DefinitelyLost", "DefinitelyLost"], "{lost:?}");
    // Each worker's own block is its thread's alone (malloc(7000) and malloc(8000), by their
    // usable sizes).
    for size in [7000u64, 8008] {
        let o = (0..objects.len())
            .find(|&o| objects.size[o] == size)
            .unwrap_or_else(|| panic!("no {size}-byte block"));
        assert!(
            matches!(
                a.class_of(o as u32),
                heaptui_analysis::ObjectClass::FrameProprietary { .. }
            ),
            "{size}: {:?}",
            a.class_of(o as u32)
        );
    }
    // And the same again: nothing a dead register or the red zone held moves a block.
    let classes = |g: &HeapGraph| {
        let a = heaptui_analysis::Analysis::new(g);
        (0..g.objects().len())
            .map(|o| (g.objects().addr[o], format!("{:?}", a.class_of(o as u32))))
            .collect::<Vec<_>>()
    };
    let expect = classes(g);
    for _ in 0..4 {
        let again = capture(pid).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(classes(&again.graph), expect);
    }
}
