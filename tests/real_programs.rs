//! Programs nobody here wrote, under the real agent: perl, python, sqlite3, git, xz and zstd
//! (each with two threads). Each runs twice on the same input, bare and under the agent
//! (`LD_PRELOAD=$(heaptui agent-path)`), fed the same stdin in the same steps; its stdout and
//! exit status must be the same, byte for byte. Under the agent, `heaptui report` is taken over
//! the real protocol at the workload's peak (the program waiting for its next input: the
//! report must see its heap) and again while it works on the rest.
//!
//! A program missing from PATH fails its test, saying so: `.ci/run` installs them all.

mod live_common;

use std::io::{Read, Write};
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
        cmd.args(&w.args)
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

#[test]
fn python_builds_a_dict_under_the_agent_as_it_does_bare() {
    let keys = 30_000u64;
    let dir = Scratch::new("real-python");
    // A pyenv-style shim would put a shell between the agent and python (the agent leaves
    // exec'd programs alone): run the interpreter the shim would run.
    let out = Command::new(program("python3"))
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let python = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end());
    let mut w = Workload::new(
        python,
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
