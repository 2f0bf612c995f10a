//! Captures that show the program as it is and nothing else (docs/reference.md §3), on a real
//! idle multithreaded target under the real preload, snapshots taken over the real protocol:
//! ten captures in a row are the same graph to the last edge; the agent's frames (its
//! blocking-call wrappers, its thread trampoline) never show; a thread blocked in a system
//! call holds nothing through its dead registers, even when the stop cuts the call short and
//! its number is in another register; and the figures do not depend on where
//! ASLR put things, nor on the exit-time capture running inside the agent.

mod common;
mod policy_support;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use common::{TempDir, compile_c};
use heaptui_analysis::{Analysis, HeapGraph, ObjectClass, ThreadState, snapshot};
use policy_support::Target;

const SYNC: &str = include_str!("targets/sync.h");
const PROC_STATE: &str = include_str!("targets/proc_state.h");

/// Every worker's own block and the function holding it; the lost blocks.
const OWN: [(u64, &str); 8] = [
    (7000, "reader"),
    (8000, "raw_reader"),
    (1001, "sleeper"),
    (1002, "nanosleeper"),
    (1003, "poller"),
    (1004, "selecter"),
    (1005, "epoller"),
    (1006, "waiter"),
];
const LOST: [u64; 2] = [3003, 3004];

fn start(dir: &TempDir, env: &[(&str, &str)]) -> Target {
    let exe = compile_c(
        dir,
        "idle",
        &format!("{SYNC}\n{PROC_STATE}\n{}", include_str!("targets/idle.c")),
        &[],
    );
    let t = Target::start_with(dir, &exe, &[], None, env);
    wait_blocked_in_read(&t);
    t
}

/// Waits until the target's main thread, which printed "ready", is inside its read(2) of
/// stdin (the state every capture must find it in).
fn wait_blocked_in_read(t: &Target) {
    let pid = t.child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"));
        if syscall.is_ok_and(|s| s.split_whitespace().next() == Some("0")) {
            return;
        }
        assert!(Instant::now() < deadline, "main never blocked in read");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The whole graph, addresses included: objects with their references, every thread's
/// frames with theirs, the globals root.
fn render(g: &HeapGraph) -> String {
    let o = g.objects();
    let addr = |i: &u32| format!("{:#x}", o.addr[*i as usize]);
    let mut out = String::new();
    for i in 0..o.len() {
        let refs: Vec<String> = g.edges().of(i as u32).iter().map(addr).collect();
        writeln!(out, "object {:#x} {} -> {refs:?}", o.addr[i], o.size[i]).unwrap();
    }
    let mut threads: Vec<_> = g.threads.iter().collect();
    threads.sort_by_key(|t| t.tid);
    for t in threads {
        writeln!(out, "thread {} {:?}", t.tid, t.state).unwrap();
        for f in &t.frames {
            let refs: Vec<String> = f.refs.iter().map(addr).collect();
            writeln!(out, "  {} [{}] {refs:?}", f.function, f.module).unwrap();
        }
    }
    let globals: Vec<String> = g.globals.iter().map(addr).collect();
    writeln!(out, "globals {globals:?}").unwrap();
    out
}

/// What a capture says of each block, without addresses or thread ids: its size and class,
/// a frame named by its thread's innermost program function and its own function.
fn classes(g: &HeapGraph) -> Vec<(u64, String)> {
    let a = Analysis::new(g);
    let named = |thread: usize| {
        g.threads[thread]
            .frames
            .iter()
            .find(|f| OWN.iter().any(|(_, name)| f.function == *name))
            .map_or("main", |f| f.function.as_str())
    };
    let mut out: Vec<(u64, String)> = (0..g.objects().len())
        .map(|i| {
            let class = match a.class_of(i as u32) {
                ObjectClass::FrameProprietary { thread, frame } => format!(
                    "proprietary to {} in {}",
                    g.threads[thread].frames[frame].function,
                    named(thread)
                ),
                ObjectClass::FrameShared { thread } => format!("frame-shared in {}", named(thread)),
                other => format!("{other:?}"),
            };
            (g.objects().size[i], class)
        })
        .collect();
    out.sort();
    out
}

fn class_of_size(g: &HeapGraph, size: u64) -> ObjectClass {
    let sizes = &g.objects().size;
    let all: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] == size).collect();
    assert_eq!(all.len(), 1, "one block of {size} bytes");
    Analysis::new(g).class_of(all[0] as u32)
}

/// No frame of any thread is the agent's.
fn assert_program_frames_only(g: &HeapGraph) {
    for t in &g.threads {
        for f in &t.frames {
            assert!(
                !f.module.contains("heaptui_agent") && !f.function.starts_with("heaptui_agent"),
                "thread {} shows the agent's frame {} [{}]",
                t.tid,
                f.function,
                f.module
            );
        }
    }
}

#[test]
fn ten_captures_of_an_idle_process_are_one_graph_of_program_frames() {
    let dir = TempDir::new("stable-ten");
    let t = start(&dir, &[]);
    let mut c = t.client();
    let first = c.graph();
    let expect = render(&first);
    for n in 2..=10 {
        let g = c.graph();
        assert_eq!(render(&g), expect, "capture {n} differs from capture 1");
    }
    assert_eq!(first.threads.len(), 9, "main and eight workers");
    assert!(
        first
            .threads
            .iter()
            .all(|t| t.state == ThreadState::Stopped),
        "every thread was stopped"
    );
    assert_program_frames_only(&first);
    // Each worker's block is its own function's, in the frame that called the (folded)
    // blocking-call wrapper or libc's blocking call.
    let a = Analysis::new(&first);
    for (size, function) in OWN {
        let ObjectClass::FrameProprietary { thread, frame } = class_of_size(&first, size) else {
            panic!(
                "the {size}-byte block is {:?}, not {function}'s",
                class_of_size(&first, size)
            );
        };
        let frames = &first.threads[thread].frames;
        assert_eq!(frames[frame].function, function, "{size}");
        assert!(a.threads()[thread].proprietary >= size);
    }
    // The wrapped calls show as the program called them: nothing of the agent between.
    for function in ["sleeper", "nanosleeper", "poller", "selecter", "epoller"] {
        let thread = first
            .threads
            .iter()
            .find(|t| t.frames.iter().any(|f| f.function == function))
            .unwrap();
        assert!(
            thread.frames[0].function == function || thread.frames[0].module.starts_with("libc"),
            "{function}: {:?}",
            thread.frames
        );
    }
    // Held only by dead registers of threads blocked in read(2): lost.
    for size in LOST {
        assert_eq!(
            class_of_size(&first, size),
            ObjectClass::DefinitelyLost,
            "the {size}-byte block"
        );
    }
    t.quit();
}

/// A thread whose sleep the stop cuts short with EINTR, made with the number in another
/// register (`targets/eintr.c`): its registers do not tell the call, the kernel's record of
/// it read before the stop does, so only nanosleep's two argument registers are roots.
#[test]
fn a_sleep_cut_short_whose_number_is_in_another_register_gives_only_its_arguments() {
    let dir = TempDir::new("stable-eintr");
    let exe = compile_c(
        &dir,
        "eintr",
        &format!("{SYNC}\n{PROC_STATE}\n{}", include_str!("targets/eintr.c")),
        &[],
    );
    let t = Target::start_with(&dir, &exe, &[], None, &[]);
    t.wait_line("ready");
    wait_idle(t.child.id());
    let mut c = t.client();
    for n in 1..=3 {
        let g = c.graph();
        wait_idle(t.child.id());
        let ObjectClass::FrameProprietary { thread, frame } = class_of_size(&g, 1007) else {
            panic!(
                "capture {n}: the call's rem block is {:?}",
                class_of_size(&g, 1007)
            );
        };
        assert_eq!(
            g.threads[thread].frames[frame].function, "nap",
            "capture {n}"
        );
        assert_eq!(
            class_of_size(&g, 3005),
            ObjectClass::DefinitelyLost,
            "capture {n}: held only by registers nanosleep does not take"
        );
    }
    t.quit();
}

#[test]
fn another_layout_and_the_exit_time_capture_give_the_same_figures() {
    let dir = TempDir::new("stable-aslr");
    let one = {
        let t = start(&dir, &[]);
        let g = t.client().graph();
        t.quit();
        g
    };
    // A second process (another address layout), whose exit writes a snapshot from inside
    // the agent's exit handler.
    let dir2 = TempDir::new("stable-aslr-exit");
    let prefix = dir2.path().join("snap");
    let t = start(&dir2, &[("HEAPTUI_DUMP", prefix.to_str().unwrap())]);
    let two = t.client().graph();
    let pid = t.child.id();
    t.quit();
    assert_ne!(
        one.objects().addr[0] & !0xfff,
        two.objects().addr[0] & !0xfff,
        "ASLR gave both processes the same heap"
    );
    assert_eq!(classes(&one), classes(&two));
    let exit_file = dir2.path().join(format!("snap.{pid}.1.hsnap"));
    let at_exit =
        snapshot::read_file(&exit_file).unwrap_or_else(|e| panic!("{}: {e}", exit_file.display()));
    assert_program_frames_only(&at_exit);
    // At exit main holds nothing any more, and the workers still hold what they held.
    for (size, _) in OWN {
        assert_eq!(
            format!("{:?}", class_of_size(&at_exit, size))
                .split(' ')
                .next(),
            Some("FrameProprietary"),
            "the {size}-byte block at exit"
        );
    }
    assert_eq!(
        Analysis::new(&at_exit).leaks(),
        Analysis::new(&two).leaks(),
        "the exit-time capture finds the same leaks"
    );
}

#[test]
fn allocation_stacks_show_no_agent_frame_in_sites_or_the_recording() {
    let dir = TempDir::new("stable-stacks");
    let recording = dir.path().join("events.hrec");
    let t = start(&dir, &[("HEAPTUI_RECORD", recording.to_str().unwrap())]);
    let g = t.client().graph();
    t.quit();
    // Sites: every worker's block was allocated by `own`, called from the worker, which the
    // agent's thread trampoline called.
    for (size, function) in OWN {
        let o = (0..g.objects().len())
            .find(|&i| g.objects().size[i] == size)
            .unwrap();
        let frames = &g.sites[g.objects().site[o] as usize].frames;
        assert!(
            frames.iter().any(|f| f.starts_with(function)),
            "{size}: {frames:?}"
        );
        assert!(
            frames.iter().all(|f| !f.contains("heaptui_agent")),
            "{size}: {frames:?}"
        );
    }
    // The recording's stacks: (function, module) string ids.
    let bytes = std::fs::read(&recording).expect("the recording");
    let (events, _) = heaptui_analysis::recording::read_all(&bytes).expect("it reads");
    let mut strings: Vec<String> = Vec::new();
    let mut worker_stacks = 0;
    for e in events {
        match e {
            heaptui_analysis::recording::Event::String(s) => strings.push(s),
            heaptui_analysis::recording::Event::Stack(frames) => {
                let named: Vec<(&str, &str)> = frames
                    .iter()
                    .map(|&(f, m)| (strings[f as usize].as_str(), strings[m as usize].as_str()))
                    .collect();
                assert!(
                    named.iter().all(|(_, m)| !m.contains("heaptui_agent")),
                    "a recorded stack shows the agent: {named:?}"
                );
                worker_stacks += usize::from(named.iter().any(|(f, _)| *f == "reader"));
            }
            _ => {}
        }
    }
    assert!(
        worker_stacks > 0,
        "the reader's allocation stack is recorded"
    );
}

/// Waits until every thread of process `pid` but the agent's sleeps (state `S`) inside a
/// system call: the state each capture of an idle process must find it in.
fn wait_idle(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let idle = |tid: &str| {
        let task = format!("/proc/{pid}/task/{tid}");
        let comm = std::fs::read_to_string(format!("{task}/comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("{task}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        let syscall = std::fs::read_to_string(format!("{task}/syscall")).unwrap_or_default();
        comm.starts_with("heaptui")
            || (state == Some('S') && !syscall.starts_with("running") && !syscall.is_empty())
    };
    loop {
        let tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        if tids.iter().all(|t| idle(t)) {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} never went idle");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Ten captures of the idle target `t` over the real protocol: one graph, to the last edge.
fn ten_captures_are_one_graph(t: &Target, what: &str) -> HeapGraph {
    wait_idle(t.child.id());
    let mut c = t.client();
    let first = c.graph();
    let expect = render(&first);
    for n in 2..=10 {
        assert_eq!(
            render(&c.graph()),
            expect,
            "{what}: capture {n} differs from capture 1"
        );
    }
    assert!(
        first
            .threads
            .iter()
            .all(|t| t.state == ThreadState::Stopped),
        "{what}: every thread was stopped"
    );
    assert_program_frames_only(&first);
    first
}

/// The interpreter a `python3` on PATH runs (a pyenv shim is a shell script, which would put a
/// shell between the agent and python).
fn python() -> std::path::PathBuf {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is installed");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim_end().into()
}

#[test]
fn ten_captures_of_an_idle_python_with_threads_are_one_graph() {
    let dir = TempDir::new("stable-python");
    // A dict of strings (pymalloc arenas and malloc blocks) and three threads blocked in a
    // sleep, a condition wait and a select, while the main thread reads stdin.
    let script = r#"
import select, sys, threading, time
data = {i: "value %d" % i for i in range(5000)}
event = threading.Event()
def sleeper(): time.sleep(1000)
def waiter(): event.wait()
def selecter(): select.select([], [], [], 1000)
for f in (sleeper, waiter, selecter):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"#;
    let t = Target::start_with(&dir, &python(), &["-c", script], None, &[]);
    t.wait_line("ready");
    let g = ten_captures_are_one_graph(&t, "python");
    assert_eq!(g.threads.len(), 4, "main and three threads");
    t.quit();
}

#[test]
fn ten_captures_of_an_idle_perl_are_one_graph() {
    let dir = TempDir::new("stable-perl");
    let script = r#"
$| = 1;
my %h = map { $_ => "value $_" x 3 } 1 .. 5000;
my @list = map { [$_, "item $_"] } 1 .. 1000;
print "ready\n";
my @rest = <STDIN>;
print scalar(keys %h) + scalar(@list), "\n";
"#;
    let t = Target::start_with(
        &dir,
        std::path::Path::new("/usr/bin/perl"),
        &["-e", script],
        None,
        &[],
    );
    t.wait_line("ready");
    let g = ten_captures_are_one_graph(&t, "perl");
    assert!(g.objects().len() > 5000, "perl's hash is in the graph");
    t.quit();
}
