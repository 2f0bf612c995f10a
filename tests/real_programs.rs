//! Programs nobody here wrote, under the real agent: perl, python, node, sqlite3, git, xz and
//! zstd (each with two threads). Each runs twice on the same input, bare and under the agent
//! (`LD_PRELOAD=$(heaptui agent-path)`), fed the same stdin in the same steps; its stdout and
//! exit status must be the same, byte for byte. Under the agent, `heaptui report` is taken over
//! the real protocol at the workload's peak (the program waiting for its next input: the
//! report must see its heap) and again while it works on the rest. Python with its default
//! allocator, holding a large dict, must show under 1% of its heap unreachable: its pymalloc
//! arenas are mapped memory, a root; so must node holding a large Map, whose V8 pages are
//! mapped memory its fork leaves out (`MADV_DONTFORK`).
//!
//! PostgreSQL, which refuses root, runs as an unprivileged user the test creates: started by
//! `pg_ctl` under the agent (`HEAPTUI_FOLLOW_EXEC`, `HEAPTUI_FOLLOW_FORK`), it answers psql as
//! the bare server does, its postmaster and a backend answer `heaptui report pid:PID` and are
//! listed by `heaptui ps`, it shuts down clean, and its log has none of the agent's lines.
//!
//! A program missing from PATH fails its test, saying so: `.ci/run` installs them all.

mod live_common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use live_common::*;
use serde_json::Value;

/// The longest any one program may take to reach its peak or to end.
const LIMIT: Duration = Duration::from_secs(300);

/// `name` as found on PATH; the test fails, saying so, when it is not there.
fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not installed (not on PATH): .ci/run installs it with apt-get")
        })
}

/// Leaves out every `HEAPTUI_*` variable this test inherited (a developer's own `HEAPTUI_LOG`
/// or `HEAPTUI_LISTEN` would change where the agent speaks and listens): the programs start as
/// a user would start them, with only what each run adds.
fn without_heaptui_env(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("HEAPTUI_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A program run the same way bare and under the agent.
struct Workload {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Fed to stdin first.
    before: Vec<u8>,
    /// A line of stdout saying the program reached its peak (None: `before` fed is the peak).
    marker: Option<String>,
    /// Fed to stdin after the peak, stdin kept open: the program works on it and cannot end
    /// while the report "while it works" is taken.
    after: Vec<u8>,
    /// Fed once that report is taken; then stdin is closed. A command that ends the program
    /// (fast-import's `done`) goes here, never in `after`.
    last: Vec<u8>,
}

impl Workload {
    fn new(program: PathBuf, args: &[&str]) -> Workload {
        Workload {
            program,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            before: Vec::new(),
            marker: None,
            after: Vec::new(),
            last: Vec::new(),
        }
    }

    fn describe(&self) -> String {
        format!("{} {}", self.program.display(), self.args.join(" "))
    }
}

/// What the program wrote and how it ended.
struct Ended {
    stdout: Vec<u8>,
    stderr: String,
    status: ExitStatus,
}

/// A stream read to its end on a thread of its own, so the program never waits on us; the
/// bytes so far are visible while it runs.
struct Drain {
    shared: Arc<Received>,
    thread: JoinHandle<()>,
}

/// What a [`Drain`] has read so far, and whether the stream ended.
#[derive(Default)]
struct Received {
    got: Mutex<(Vec<u8>, bool)>,
    changed: Condvar,
}

impl Drain {
    fn new(mut from: impl Read + Send + 'static) -> Drain {
        let shared = Arc::new(Received::default());
        let sink = shared.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let mut got = sink.got.lock().unwrap();
                if n == 0 {
                    got.1 = true;
                } else {
                    got.0.extend_from_slice(&buf[..n]);
                }
                sink.changed.notify_all();
                if n == 0 {
                    return;
                }
            }
        });
        Drain { shared, thread }
    }

    /// Waits until a whole line for which `wanted` holds has been read, and returns it (None:
    /// the stream ended first).
    fn wait_for_line(&self, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let mut got = self.shared.got.lock().unwrap();
        let started = Instant::now();
        loop {
            let complete = got.0.rsplitn(2, |&b| b == b'\n').nth(1).unwrap_or_default();
            let text = String::from_utf8_lossy(complete);
            if let Some(line) = text.lines().find(|l| wanted(l)) {
                return Some(line.to_string());
            }
            if got.1 {
                return None;
            }
            let left = LIMIT.saturating_sub(started.elapsed());
            assert!(!left.is_zero(), "no such line within {LIMIT:?}: {text}");
            got = self.shared.changed.wait_timeout(got, left).unwrap().0;
        }
    }

    fn finish(self) -> Vec<u8> {
        self.thread.join().unwrap();
        std::mem::take(&mut self.shared.got.lock().unwrap().0)
    }
}

/// Writes `bytes` to the program's stdin on a thread (the program may read it slowly while
/// we read its output), handing stdin back to be written to again or closed.
fn feed(mut stdin: ChildStdin, bytes: Vec<u8>) -> JoinHandle<ChildStdin> {
    std::thread::spawn(move || {
        stdin.write_all(&bytes).unwrap();
        stdin.flush().unwrap();
        stdin
    })
}

/// A started workload: stdin held by us, stdout and stderr drained.
struct Running {
    child: Child,
    stdin: Option<JoinHandle<ChildStdin>>,
    stdout: Drain,
    stderr: Drain,
    what: String,
}

impl Running {
    fn start(w: &Workload, cwd: &Path, agent_env: &[(&str, String)]) -> Running {
        let mut cmd = Command::new(&w.program);
        without_heaptui_env(&mut cmd)
            // python's own allocator (pymalloc), as a user runs it, whatever this test inherited.
            .env_remove("PYTHONMALLOC")
            .args(&w.args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &w.env {
            cmd.env(k, v);
        }
        for (k, v) in agent_env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", w.describe()));
        let stdout = Drain::new(child.stdout.take().unwrap());
        let stderr = Drain::new(child.stderr.take().unwrap());
        let stdin = feed(child.stdin.take().unwrap(), w.before.clone());
        Running {
            child,
            stdin: Some(stdin),
            stdout,
            stderr,
            what: w.describe(),
        }
    }

    /// Waits until the program took `before` and, with a marker, said it reached its peak.
    fn wait_for_peak(&mut self, w: &Workload) {
        let stdin = self.stdin.take().unwrap().join().unwrap();
        self.stdin = Some(std::thread::spawn(move || stdin));
        if let Some(marker) = &w.marker {
            assert!(
                self.stdout.wait_for_line(|l| l == marker).is_some(),
                "{} ended before printing {marker:?}",
                self.what
            );
        }
    }

    /// Feeds `after`, keeping stdin open.
    fn go_on(&mut self, w: &Workload) {
        let stdin = self.stdin.take().unwrap().join().unwrap();
        self.stdin = Some(feed(stdin, w.after.clone()));
    }

    /// Feeds `last`, closes stdin and waits for the program to end.
    fn finish(mut self, w: &Workload) -> Ended {
        let stdin = self.stdin.take().unwrap().join().unwrap();
        drop(feed(stdin, w.last.clone()).join().unwrap());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > LIMIT {
                let _ = self.child.kill();
                panic!("{} did not end within {LIMIT:?}", self.what);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ended {
            stdout: self.stdout.finish(),
            stderr: String::from_utf8_lossy(&self.stderr.finish()).into_owned(),
            status,
        }
    }
}

/// One run without the agent, fed in the same steps.
fn run_bare(w: &Workload, cwd: &Path) -> Ended {
    let mut run = Running::start(w, cwd, &[]);
    run.wait_for_peak(w);
    run.go_on(w);
    run.finish(w)
}

/// `heaptui report ADDRESS --json`, which must succeed.
fn report(address: &str, what: &str) -> Value {
    let out = heaptui()
        .args(["report", address, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "heaptui report {address} ({what}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["format"], "heaptui-report", "{report}");
    report
}

/// Under the agent, listening on a Unix socket in `dir`. With `at_peak`: a report at the peak,
/// handed to it, and one more while the program works on `after`, before it gets `last` (a
/// program that does not wait for its stdin, like `git log`, gets none: it may be gone before
/// the report).
fn run_under_agent(
    w: &Workload,
    cwd: &Path,
    dir: &Path,
    at_peak: Option<&dyn Fn(&Value)>,
) -> Ended {
    let socket = dir.join("agent.sock");
    let log = dir.join("agent.log");
    let address = format!("unix:{}", socket.display());
    let env = [
        ("LD_PRELOAD", agent().display().to_string()),
        ("HEAPTUI_LISTEN", address.clone()),
        ("HEAPTUI_LOG", log.display().to_string()),
    ];
    let mut run = Running::start(w, cwd, &env);
    run.wait_for_peak(w);
    if let Some(check) = at_peak {
        let peak = report(&address, &format!("{} at its peak", run.what));
        assert_eq!(
            peak["process"]["pid"],
            run.child.id(),
            "{}",
            peak["process"]
        );
        check(&peak);
    }
    run.go_on(w);
    if at_peak.is_some() {
        report(&address, &format!("{} while it works", run.what));
    }
    let ended = run.finish(w);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log.contains("panicked"),
        "the agent panicked in {}:\n{log}",
        w.describe()
    );
    ended
}

/// Runs `w` bare in `scratch/bare` and under the agent in `scratch/agent` (each directory
/// fresh), and checks that stdout and exit status are the same. Returns the agent's run.
fn same_bare_and_under_agent(
    w: &Workload,
    scratch: &Path,
    at_peak: Option<&dyn Fn(&Value)>,
) -> Ended {
    let bare_dir = scratch.join("bare");
    let agent_dir = scratch.join("agent");
    for d in [&bare_dir, &agent_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let bare = run_bare(w, &bare_dir);
    assert!(
        bare.status.success(),
        "{} failed bare ({}): {}",
        w.describe(),
        bare.status,
        bare.stderr
    );
    let under = run_under_agent(w, &agent_dir, scratch, at_peak);
    assert_eq!(
        under.status,
        bare.status,
        "{}: exit status under the agent; stderr:\n{}",
        w.describe(),
        under.stderr
    );
    assert_same_output(&w.describe(), &bare.stdout, &under.stdout);
    under
}

/// Byte-identical stdout, with a readable message when not (the first difference).
fn assert_same_output(what: &str, bare: &[u8], under: &[u8]) {
    if bare == under {
        return;
    }
    let at = bare.iter().zip(under).take_while(|(a, b)| a == b).count();
    let show = |b: &[u8]| {
        String::from_utf8_lossy(&b[at.saturating_sub(40)..(at + 80).min(b.len())]).into_owned()
    };
    panic!(
        "{what}: stdout differs at byte {at} (bare {} bytes, under the agent {}):\nbare:  {:?}\nagent: {:?}",
        bare.len(),
        under.len(),
        show(bare),
        show(under)
    );
}

fn total(report: &Value, key: &str) -> u64 {
    report["totals"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no totals.{key} in {report}"))
}

fn thread_count(report: &Value) -> usize {
    report["threads"].as_array().map_or(0, Vec::len)
}

/// tests/real_programs/NAME, the workloads the benchmark runs too.
fn workload_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/real_programs")
        .join(name)
}

#[test]
fn perl_builds_a_hash_under_the_agent_as_it_does_bare() {
    let keys = 30_000u64;
    let dir = Scratch::new("real-perl");
    let mut w = Workload::new(
        program("perl"),
        &[
            workload_file("hash.pl").to_str().unwrap(),
            &keys.to_string(),
        ],
    );
    w.marker = Some(format!("keys: {keys}"));
    w.after = b"go\n".to_vec();
    let run = same_bare_and_under_agent(
        &w,
        dir.path(),
        Some(&|peak| {
            // Every key and every value string is a block of its own.
            assert!(total(peak, "objects") >= 2 * keys, "{}", peak["totals"]);
        }),
    );
    let expected = format!("keys: {keys}\nvalue bytes: {}\n", value_bytes(keys));
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);
}

/// Bytes of the strings "value1" … "valueN".
fn value_bytes(n: u64) -> u64 {
    (1..=n).map(|i| 5 + i.to_string().len() as u64).sum()
}

/// The python interpreter itself: a pyenv-style shim would put a shell between the agent and
/// python (the agent leaves exec'd programs alone), so this is the interpreter the shim runs.
fn python_interpreter() -> PathBuf {
    let out = Command::new(program("python3"))
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end())
}

#[test]
fn python_builds_a_dict_under_the_agent_as_it_does_bare() {
    let keys = 30_000u64;
    let dir = Scratch::new("real-python");
    let mut w = Workload::new(
        python_interpreter(),
        &[
            workload_file("dict.py").to_str().unwrap(),
            &keys.to_string(),
        ],
    );
    w.marker = Some(format!("keys: {keys}"));
    w.after = b"go\n".to_vec();
    let run = same_bare_and_under_agent(
        &w,
        dir.path(),
        Some(&|peak| {
            // pymalloc keeps the small objects in arenas of its own; the dict's tables are
            // malloc blocks, eight bytes and more per key.
            assert!(total(peak, "bytes") >= 8 * keys, "{}", peak["totals"]);
        }),
    );
    let expected = format!(
        "keys: {keys}\nsum: {} value bytes: {}\n",
        keys * (keys + 1) / 2,
        value_bytes(keys)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);
}

/// Python with its default allocator keeps its small objects (the dict's keys, the lists, the
/// strings, the ints) in pymalloc's arenas, anonymous mmaps that are not heap blocks; the malloc
/// blocks it also holds (the dict's tables among them) are reachable only through pointers kept
/// in those arenas. Mapped memory is a root (docs/reference.md §3), so while python holds a
/// 200,000-key dict, under 1% of its heap may be unreachable (95.6% was, before mapped memory
/// was a root).
#[test]
fn python_holding_a_dict_in_pymalloc_arenas_has_under_one_percent_unreachable() {
    let keys = 200_000u64;
    let dir = Scratch::new("real-python-heap");
    let mut w = Workload::new(
        python_interpreter(),
        &[
            workload_file("dict.py").to_str().unwrap(),
            &keys.to_string(),
        ],
    );
    w.marker = Some(format!("keys: {keys}"));
    w.after = b"go\n".to_vec();
    let run = run_under_agent(
        &w,
        dir.path(),
        dir.path(),
        Some(&|peak| {
            let (bytes, unreachable) = (total(peak, "bytes"), total(peak, "unreachable_bytes"));
            // The dict's table alone is a malloc block of eight bytes and more per key.
            assert!(bytes >= 8 * keys, "{}", peak["totals"]);
            assert!(
                unreachable * 100 < bytes,
                "{unreachable} of {bytes} heap bytes unreachable while python holds its dict: {} {}",
                peak["totals"],
                peak["leaks"]
            );
        }),
    );
    assert!(run.status.success(), "{}: {}", run.status, run.stderr);
}

/// node keeps its JavaScript objects in V8's pages, anonymous mmaps that V8 marks
/// `MADV_DONTFORK`, so a fork does not copy them; the malloc blocks V8 keeps for its objects
/// are reachable only through pointers kept in those pages. Mapped memory is a root
/// (docs/reference.md §3), those pages included: while node holds a 100,000-entry Map of
/// objects and Buffers, under 1% of its heap may be unreachable (3.3% was, while the scan child
/// could not see them), and its output is the same as bare.
#[test]
fn node_holding_a_map_in_v8_pages_has_under_one_percent_unreachable() {
    let entries = 100_000u64;
    let dir = Scratch::new("real-node-heap");
    let mut w = Workload::new(
        program("node"),
        &[
            workload_file("map.js").to_str().unwrap(),
            &entries.to_string(),
        ],
    );
    w.marker = Some(format!("entries: {entries}"));
    w.after = b"go\n".to_vec();
    let run = same_bare_and_under_agent(
        &w,
        dir.path(),
        Some(&|peak| {
            let (bytes, unreachable) = (total(peak, "bytes"), total(peak, "unreachable_bytes"));
            // Every 16th entry's Buffer is a malloc block of 64 bytes or more.
            assert!(bytes >= 64 * entries / 16, "{}", peak["totals"]);
            assert!(
                unreachable * 100 < bytes,
                "{unreachable} of {bytes} heap bytes unreachable while node holds its Map: {} {}",
                peak["totals"],
                peak["leaks"]
            );
        }),
    );
    let buffer_byte_sum: u64 = (16..=entries)
        .step_by(16)
        .map(|i| (64 + i % 64) * (i & 0xff))
        .sum();
    let name_bytes: u64 = (1..=entries).map(|i| 5 + i.to_string().len() as u64).sum();
    let expected = format!(
        "entries: {entries}\nsum: {} buffer byte sum: {buffer_byte_sum} name bytes: {name_bytes}\n",
        entries * (entries + 1) / 2
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);
}

#[test]
fn sqlite_inserts_rows_under_the_agent_as_it_does_bare() {
    let rows = 20_000u64;
    let dir = Scratch::new("real-sqlite");
    let script = std::fs::read_to_string(workload_file("rows.sql")).unwrap();
    let (before, after) = script
        .split_once("-- peak\n")
        .expect("rows.sql has a '-- peak' line");
    let mut w = Workload::new(
        program("sqlite3"),
        &["-cmd", &format!(".parameter set @n {rows}"), "db"],
    );
    w.before = before.as_bytes().to_vec();
    w.marker = Some(format!("rows|{rows}"));
    w.after = after.as_bytes().to_vec();
    let run = same_bare_and_under_agent(
        &w,
        dir.path(),
        Some(&|peak| {
            // Its page cache (2 MB by default) holds every page of the database it wrote.
            let db = std::fs::metadata(dir.path().join("agent/db"))
                .unwrap()
                .len();
            assert!(
                total(peak, "bytes") >= db,
                "db {db} bytes: {}",
                peak["totals"]
            );
        }),
    );
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(out.starts_with(&format!("rows|{rows}\n")), "{out}");
    assert!(out.ends_with(&format!("{rows}|10\n")), "{out}");
}

/// `len` bytes of text that compresses like text does: words from a small vocabulary, chosen
/// by a fixed pseudo-random sequence.
fn text(len: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "heap", "frame", "thread", "pointer", "block", "shared", "release", "capture", "stack",
        "agent", "snapshot", "owner", "graph", "root", "group", "object",
    ];
    let mut out = Vec::with_capacity(len + 16);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut line = 0;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % 16) as usize].as_bytes());
        line += 1;
        out.push(if line % 12 == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

/// A compressor with two threads: half the input fed is the peak. Its output, compressed
/// under the agent, must be the bare run's to the byte, and decompress (under the agent too)
/// to the input.
fn compressor(name: &str, compress: &[&str], decompress: &[&str], min_threads: usize) {
    let dir = Scratch::new(&format!("real-{name}"));
    let input = text(8 << 20);
    let mut w = Workload::new(program(name), compress);
    w.before = input[..input.len() / 2].to_vec();
    w.after = input[input.len() / 2..].to_vec();
    let packed = same_bare_and_under_agent(
        &w,
        dir.path(),
        Some(&|peak| {
            assert!(
                thread_count(peak) >= min_threads,
                "{name}: {} threads in {peak}",
                thread_count(peak)
            );
        }),
    )
    .stdout;
    assert!(
        packed.len() < input.len() / 2,
        "{name} compressed to {}",
        packed.len()
    );

    let unpack_dir = dir.path().join("unpack");
    std::fs::create_dir_all(&unpack_dir).unwrap();
    let mut u = Workload::new(program(name), decompress);
    u.before = packed[..packed.len() / 2].to_vec();
    u.after = packed[packed.len() / 2..].to_vec();
    let unpacked = same_bare_and_under_agent(&u, &unpack_dir, Some(&|_| {})).stdout;
    assert!(unpacked == input, "{name} did not give the input back");
}

#[test]
fn xz_compresses_with_two_threads_under_the_agent_as_it_does_bare() {
    // 1 MiB blocks: the 4 MiB fed before the peak keep both worker threads busy.
    compressor(
        "xz",
        &["-T2", "-3", "--block-size=1MiB", "-c"],
        &["-T2", "-d", "-c"],
        2,
    );
}

#[test]
fn zstd_compresses_with_two_threads_under_the_agent_as_it_does_bare() {
    // zstd starts its two workers with the first job: the main thread and both are there.
    compressor("zstd", &["-T2", "-9", "-B1M", "-c"], &["-d", "-c"], 3);
}

/// A `git fast-import` stream of `commits` commits by fixed authors at fixed times, each
/// changing one of twenty files; "progress peak" halfway; the marks of the last commit and
/// of its blob asked back at the end (their hashes go to stdout).
fn fast_import_stream(commits: usize) -> (Vec<u8>, Vec<u8>) {
    let mut before = String::new();
    let mut after = String::new();
    for i in 1..=commits {
        let out = if i <= commits / 2 {
            &mut before
        } else {
            &mut after
        };
        let content: String = (0..40)
            .map(|line| format!("file {} line {line}: commit {i}\n", i % 20))
            .collect();
        let message = format!("commit {i}\n");
        out.push_str(&format!(
            "blob\nmark :{}\ndata {}\n{content}\n",
            2 * i,
            content.len()
        ));
        out.push_str(&format!(
            "commit refs/heads/main\nmark :{}\n\
             author A U Thor <author@example.com> {} +0000\n\
             committer C O Mitter <committer@example.com> {} +0000\n\
             data {}\n{message}M 100644 :{} dir{}/file{}.txt\n\n",
            2 * i + 1,
            1_700_000_000 + i,
            1_700_000_000 + i,
            message.len(),
            2 * i,
            i % 5,
            i % 20
        ));
        if i == commits / 2 {
            before.push_str("progress peak\n");
        }
    }
    after.push_str(&format!(
        "get-mark :{}\nget-mark :{}\n",
        2 * commits + 1,
        2 * commits
    ));
    (before.into_bytes(), after.into_bytes())
}

#[test]
fn git_imports_and_logs_a_history_under_the_agent_as_it_does_bare() {
    let commits = 300;
    let dir = Scratch::new("real-git");
    let git = program("git");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env = |w: &mut Workload| {
        w.env = vec![
            ("HOME".into(), home.display().to_string()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ];
    };
    // Two empty repositories, made bare: one for each run.
    for side in ["bare", "agent"] {
        let out = Command::new(&git)
            .args(["init", "-q", "-b", "main"])
            .arg(dir.path().join(side))
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (before, after) = fast_import_stream(commits);
    let mut import = Workload::new(git.clone(), &["fast-import", "--quiet", "--done"]);
    env(&mut import);
    import.before = before;
    import.marker = Some("progress peak".into());
    import.after = after;
    // `done` ends fast-import: held back until the report while it works is taken.
    import.last = b"done\n".to_vec();
    let run = same_bare_and_under_agent(
        &import,
        dir.path(),
        Some(&|peak| {
            assert!(total(peak, "objects") >= 100, "{}", peak["totals"]);
        }),
    );
    let out = String::from_utf8_lossy(&run.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "progress peak");
    assert!(lines[1..].iter().all(|l| l.len() == 40), "{out}");

    // The history, read back: every commit with the files it changed.
    let mut log = Workload::new(git, &["log", "--numstat", "--format=%H %an %at %s"]);
    env(&mut log);
    let run = same_bare_and_under_agent(&log, dir.path(), None);
    let out = String::from_utf8_lossy(&run.stdout);
    assert_eq!(out.matches(" A U Thor ").count(), commits, "{out}");
}
/// The unprivileged user PostgreSQL runs as (it refuses root, and CI runs as root), created
/// when missing: (uid, gid).
const PG_USER: &str = "heaptui-test";

fn unprivileged_user() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, PG_USER]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    if id("-u").is_none() {
        let out = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                PG_USER,
            ])
            .output()
            .expect("useradd (to create the user PostgreSQL runs as)");
        // Another test run may have created it meanwhile: only the user's absence fails.
        assert!(
            id("-u").is_some(),
            "cannot create user {PG_USER}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// The directory of PostgreSQL's server programs: where `postgres` is on PATH, else Debian's
/// /usr/lib/postgresql/<newest version>/bin; the test fails, saying so, when there is none.
fn postgres_bin() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    // A link on PATH (Debian's wrappers, /usr/local/bin links) leads to the installation.
    if let Some(postgres) = std::env::split_paths(&path)
        .map(|d| d.join("postgres"))
        .find(|p| p.is_file())
    {
        return postgres
            .canonicalize()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|v| v.1).unwrap_or_else(|| {
        panic!("PostgreSQL is not installed (no postgres on PATH or in /usr/lib/postgresql/*/bin): .ci/run installs it with apt-get")
    })
}

/// A PostgreSQL cluster in a directory of the unprivileged user, served on a Unix socket there
/// (no TCP: test runs side by side never meet).
struct Cluster {
    bin: PathBuf,
    user: (u32, u32),
    data: PathBuf,
    sockets: PathBuf,
    log: PathBuf,
}

const PG_PORT: &str = "5432";
const PG_ROLE: &str = "tester";

impl Cluster {
    /// `initdb` into `dir/name` (owned by the user), with its socket directory beside it.
    fn init(dir: &Path, name: &str) -> Cluster {
        let user = unprivileged_user();
        let home = dir.join(name);
        std::fs::create_dir_all(home.join("sockets")).unwrap();
        chown_tree(&home, user);
        let cluster = Cluster {
            bin: postgres_bin(),
            user,
            data: home.join("data"),
            sockets: home.join("sockets"),
            log: home.join("server.log"),
        };
        let out = cluster
            .command("initdb")
            .arg("-D")
            .arg(&cluster.data)
            .args(["-A", "trust", "-U", PG_ROLE, "--locale=C", "-E", "UTF8"])
            .args(["--no-sync", "--no-instructions"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    /// A program of the cluster's installation, run as the unprivileged user.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        without_heaptui_env(&mut cmd)
            .uid(self.user.0)
            .gid(self.user.1)
            .current_dir(&self.sockets);
        cmd
    }

    /// `pg_ctl start -w` (with `env` added: the postmaster is pg_ctl's child's exec'd
    /// program), which returns once the server accepts connections; pg_ctl's own output.
    fn start(&self, env: &[(&str, String)]) -> String {
        let mut cmd = self.command("pg_ctl");
        cmd.args(["start", "-w", "-t", "120", "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(format!(
                "-k {} -p {PG_PORT} -c listen_addresses= -c fsync=off",
                self.sockets.display()
            ));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "pg_ctl start ({}): {said}\nserver log:\n{}",
            out.status,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        said
    }

    /// The postmaster's pid, from the first line of `postmaster.pid`.
    fn postmaster(&self) -> u32 {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).unwrap();
        text.lines().next().unwrap().parse().unwrap()
    }

    /// `pg_ctl stop -m fast`, which must succeed, and then the cluster's state as
    /// `pg_controldata` gives it ("shut down": the next start needs no recovery).
    fn stop(&self) -> String {
        let out = self
            .command("pg_ctl")
            .args(["stop", "-w", "-t", "120", "-m", "fast", "-D"])
            .arg(&self.data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl stop: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        let out = self
            .command("pg_controldata")
            .arg(&self.data)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("Database cluster state:"))
            .unwrap_or_else(|| panic!("pg_controldata gave no cluster state: {text}"))
            .trim()
            .to_string()
    }

    /// psql on the cluster, unaligned and quiet, reading its statements from stdin.
    fn psql(&self) -> Command {
        let mut cmd = self.command("psql");
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            PG_ROLE,
        ])
        .arg("-h")
        .arg(&self.sockets)
        .args(["-p", PG_PORT, "-d", "postgres"]);
        cmd
    }

    /// `sql` through psql; its stdout (which must come with success).
    fn query(&self, sql: &str) -> Vec<u8> {
        let mut child = self
            .psql()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Written on a thread and closed there: psql ends at the end of its input.
        let input = feed(child.stdin.take().unwrap(), sql.as_bytes().to_vec());
        let closed = std::thread::spawn(move || drop(input.join().unwrap()));
        let out = child.wait_with_output().unwrap();
        closed.join().unwrap();
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The server's log, so far.
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn chown_tree(path: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), (uid, gid));
        }
    }
}

/// What the test asks of each server: a table of rows, queries over it.
const PG_WORK: &str = "\
CREATE TABLE t(id int PRIMARY KEY, name text, grp int);
INSERT INTO t SELECT i, 'name-' || i, i % 97 FROM generate_series(1, 50000) i;
SELECT count(*), sum(id), count(DISTINCT grp) FROM t;
SELECT grp, count(*), min(name) FROM t GROUP BY grp ORDER BY grp LIMIT 5;
SELECT name FROM t ORDER BY name DESC LIMIT 3;
";
/// Short connections after the work: a backend forked for each.
const PG_CONNECTIONS: usize = 30;

fn churn(cluster: &Cluster) -> Vec<u8> {
    (0..PG_CONNECTIONS)
        .flat_map(|i| cluster.query(&format!("SELECT {i}, count(*) FROM t WHERE grp = {i};")))
        .collect()
}

/// The agent's lines in `text`.
fn agent_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("heaptui[")).collect()
}

/// The pids `heaptui ps --json` lists.
fn ps_pids() -> Vec<u64> {
    let out = heaptui().args(["ps", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "heaptui ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    listed
        .as_array()
        .unwrap_or_else(|| panic!("heaptui ps --json: {listed}"))
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect()
}

/// PostgreSQL started by `pg_ctl` under the agent as a user starts it (`HEAPTUI_FOLLOW_EXEC=1`:
/// the postmaster is exec'd by pg_ctl's child; `HEAPTUI_FOLLOW_FORK=1`: each backend gets a
/// server), against the same cluster run bare.
#[test]
fn postgres_serves_queries_under_the_agent_and_its_processes_answer_reports() {
    let dir = Scratch::new("real-pg");
    // The user must be able to read the agent: a copy in a directory it can enter.
    let agent_copy = dir.path().join("libheaptui_agent.so");
    std::fs::copy(agent(), &agent_copy).unwrap();
    let bare = Cluster::init(dir.path(), "bare");
    let under = Cluster::init(dir.path(), "agent");

    bare.start(&[]);
    let bare_work = bare.query(PG_WORK);
    let bare_churn = churn(&bare);
    assert_eq!(bare.stop(), "shut down", "bare: {}", bare.log_text());

    let env = [
        ("LD_PRELOAD", agent_copy.display().to_string()),
        ("HEAPTUI_FOLLOW_EXEC", "1".to_string()),
        ("HEAPTUI_FOLLOW_FORK", "1".to_string()),
        (
            "HEAPTUI_LISTEN",
            format!("unix:{}", under.sockets.join("agent.sock").display()),
        ),
    ];
    let pg_ctl_said = under.start(&env);
    let postmaster = under.postmaster();
    let at_postmaster = format!("pid:{postmaster}");
    let first = report(&at_postmaster, "the postmaster");
    assert_eq!(first["process"]["pid"], postmaster, "{}", first["process"]);

    // A session held open: its backend, a fork child of the postmaster, answers too.
    let mut session = under
        .psql()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let session_out = Drain::new(session.stdout.take().unwrap());
    let session_in = feed(
        session.stdin.take().unwrap(),
        b"CREATE TEMP TABLE mine AS SELECT i, repeat('x', 100) AS pad FROM generate_series(1, 20000) i;\n\
          SELECT 'backend', pg_backend_pid();\n"
            .to_vec(),
    );
    let backend: u32 = session_out
        .wait_for_line(|l| l.starts_with("backend|"))
        .expect("psql ended before naming its backend")["backend|".len()..]
        .parse()
        .unwrap();
    let at_backend = report(&format!("pid:{backend}"), "a backend");
    assert_eq!(
        at_backend["process"]["pid"], backend,
        "{}",
        at_backend["process"]
    );
    assert!(
        total(&at_backend, "objects") > 0,
        "{}",
        at_backend["totals"]
    );
    let listed = ps_pids();
    for pid in [postmaster, backend] {
        assert!(
            listed.contains(&u64::from(pid)),
            "heaptui ps lists {listed:?}, not {pid}"
        );
    }

    // The work and the connection churn, the postmaster reported on meanwhile.
    let work = under.query(PG_WORK);
    let reporter = {
        let at_postmaster = at_postmaster.clone();
        std::thread::spawn(move || {
            for _ in 0..3 {
                report(&at_postmaster, "the postmaster during connection churn");
            }
        })
    };
    let churned = churn(&under);
    reporter.join().unwrap();
    drop(session_in.join().unwrap());
    assert!(session.wait().unwrap().success());
    session_out.finish();
    let state = under.stop();
    let log = under.log_text();
    assert_eq!(state, "shut down", "under the agent:\n{log}");
    assert_same_output("psql work", &bare_work, &work);
    assert_same_output("psql connections", &bare_churn, &churned);
    // Quiet: one line, pg_ctl's, on its output: where it listens, and that the programs it
    // starts (`postgres -V` to check its installation, the postmaster: exec'd by shells) listen
    // on per-process sockets, where they said nothing; the server's own log, with its
    // processes' exits, has none of ours.
    let ours = agent_lines(&pg_ctl_said);
    assert!(
        ours.len() == 1
            && !ours[0].starts_with(&format!("heaptui[{postmaster}]: "))
            && ours[0].contains("per-process sockets: heaptui ps lists them"),
        "the agent's lines in pg_ctl's output (postmaster {postmaster}):\n{pg_ctl_said}"
    );
    assert_eq!(agent_lines(&log), Vec::<&str>::new(), "server log:\n{log}");
}
