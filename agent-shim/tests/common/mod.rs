//! Helpers shared by the agent's integration tests: find the built agent, compile C, C++ and
//! Rust targets into a temporary directory, run them under the real `LD_PRELOAD`, and read
//! the agent's exit summary from its log.
#![allow(dead_code)]

pub mod captured;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The agent shared object built for this test run. The test executable is
/// target/<profile>/deps/<test>-<hash>; cargo builds the cdylib next to it in deps/ (and
/// copies it to target/<profile>/ only on `cargo build`, so that copy may be stale).
pub fn agent_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let fresh = deps.join("libheaptui_agent.so");
    if fresh.exists() {
        return fresh;
    }
    let so = deps
        .parent()
        .expect("target/<profile>")
        .join("libheaptui_agent.so");
    assert!(so.exists(), "agent not built at {}", so.display());
    so
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "heaptui-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn build(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the compiler for {what}: {e}"));
    assert!(
        out.status.success(),
        "compiling {what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles C source `src` into `dir/name` with gcc (frame pointers kept, -pthread, -ldl and
/// `extra` flags).
pub fn compile_c(dir: &TempDir, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    compile_with("gcc", "c", dir, name, src, extra)
}

/// Compiles C++ source with g++, as [`compile_c`].
pub fn compile_cpp(dir: &TempDir, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    compile_with("g++", "cpp", dir, name, src, extra)
}

fn compile_with(
    cc: &str,
    ext: &str,
    dir: &TempDir,
    name: &str,
    src: &str,
    extra: &[&str],
) -> PathBuf {
    let src_path = dir.path().join(format!("{name}.{ext}"));
    std::fs::write(&src_path, src).expect("write source");
    let exe = dir.path().join(name);
    let mut cmd = Command::new(cc);
    cmd.args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src_path)
        .arg("-o")
        .arg(&exe)
        .args(extra)
        .arg("-ldl");
    build(&mut cmd, name);
    exe
}

/// Compiles a Rust program (system allocator, the default for binaries) with rustc.
pub fn compile_rust(dir: &TempDir, name: &str, src: &str) -> PathBuf {
    let src_path = dir.path().join(format!("{name}.rs"));
    std::fs::write(&src_path, src).expect("write source");
    let exe = dir.path().join(name);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args(["--edition", "2021", "-O", "-C", "force-frame-pointers=yes"])
        .arg(&src_path)
        .arg("-o")
        .arg(&exe);
    build(&mut cmd, name);
    exe
}

/// What a target run under the agent did.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The agent log (HEAPTUI_LOG), one entry per line.
    pub log: String,
}

impl Run {
    /// The key=value counters of the last `exit summary:` line of the log whose pid is
    /// `pid` (any pid if None).
    pub fn summaries(&self) -> Vec<Summary> {
        self.log
            .lines()
            .filter_map(|l| {
                let (head, rest) = l.split_once("exit summary: ")?;
                let pid = head
                    .trim_start_matches("heaptui[")
                    .split(']')
                    .next()?
                    .parse()
                    .ok()?;
                let values = rest
                    .split_whitespace()
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_owned(), v.parse().ok()?))
                    })
                    .collect();
                Some(Summary { pid, values })
            })
            .collect()
    }

    /// The only exit summary of the run.
    pub fn summary(&self) -> Summary {
        let mut all = self.summaries();
        assert_eq!(
            all.len(),
            1,
            "expected one exit summary in the log:\n{}",
            self.log
        );
        all.remove(0)
    }
}

/// One exit summary line.
#[derive(Debug, Clone)]
pub struct Summary {
    pub pid: u32,
    pub values: BTreeMap<String, i64>,
}

impl Summary {
    pub fn get(&self, key: &str) -> i64 {
        *self
            .values
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in summary {:?}", self.values))
    }

    /// A figure without the share of the agent's own threads (`agent.<key>`), which run
    /// concurrently with the target and would make exact comparisons depend on timing.
    pub fn user(&self, key: &str) -> i64 {
        let agent = self
            .values
            .get(&format!("agent.{key}"))
            .copied()
            .unwrap_or(0);
        self.get(key) - agent
    }

    /// `self.user(key) - base.user(key)` for every figure.
    pub fn minus(&self, base: &Summary) -> BTreeMap<String, i64> {
        self.values
            .keys()
            .filter(|k| !k.starts_with("agent."))
            .map(|k| (k.clone(), self.user(k) - base.user(k)))
            .collect()
    }
}

/// A target still running after this long is killed and the test fails (never hangs CI).
pub const TARGET_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `cmd` to completion with captured output, killing it after `limit`.
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start target");
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            // Our own child, not yet reaped (wait_with_output below), so the pid is still its.
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            return true;
        }
        false
    });
    let out = child.wait_with_output().expect("wait for target");
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap();
    assert!(!timed_out, "target did not finish within {limit:?}");
    out
}

/// Leaves out of `cmd`'s environment every `HEAPTUI_*` variable the test process has (a
/// developer's shell, or a build tool, may set some): a target starts with only what its test
/// gives it, and the agent has nothing to warn about on the target's stderr.
pub fn without_inherited_heaptui_env(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("HEAPTUI_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Runs `exe` with the agent preloaded, `env` added, the agent log in `dir`.
pub fn run_preloaded(dir: &TempDir, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    static N: AtomicUsize = AtomicUsize::new(0);
    let log = dir
        .path()
        .join(format!("agent-{}.log", N.fetch_add(1, Ordering::Relaxed)));
    let mut cmd = Command::new(exe);
    without_inherited_heaptui_env(&mut cmd)
        .args(args)
        .env("LD_PRELOAD", agent_path())
        .env("HEAPTUI_LOG", &log)
        // A socket of its own: parallel tests never compete for the default TCP port.
        .env("HEAPTUI_LISTEN", format!("unix:{}.sock", log.display()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = output_within(cmd, TARGET_TIMEOUT);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        log: std::fs::read_to_string(&log).unwrap_or_default(),
    }
}

/// Runs `exe` under the agent with `HEAPTUI_DUMP=<dir>/snap`: every SIGUSR2 (and the exit)
/// writes `<dir>/snap.<pid>.<n>.hsnap`.
pub fn run_dumping(dir: &TempDir, exe: &Path) -> Run {
    let prefix = dir.path().join("snap");
    run_preloaded(dir, exe, &[], &[("HEAPTUI_DUMP", prefix.to_str().unwrap())])
}

/// A C program that does nothing: its summary is the start-up/exit noise of the C runtime
/// under the agent, subtracted from a target's summary to get exact figures.
pub const EMPTY_C: &str = "int main(void) { return 0; }\n";

/// `-I` flag for agent-shim/include (heaptui.h).
pub fn include_flag() -> String {
    format!("-I{}/include", env!("CARGO_MANIFEST_DIR"))
}
