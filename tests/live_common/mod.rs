//! Helpers of the live tests: compile a C target, run it under the real agent (the one built
//! into `heaptui`, from `heaptui agent-path`), find its address and token from the agent log,
//! and talk to it with a small blocking protocol client.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use heaptui_protocol::handshake::client_handshake;
use heaptui_protocol::*;
use serde_json::Value;

/// A target running longer than this is killed and the test fails.
pub const TARGET_LIMIT: Duration = Duration::from_secs(120);

/// A directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "heaptui-live-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn heaptui() -> Command {
    Command::new(env!("CARGO_BIN_EXE_heaptui"))
}

/// The agent built into heaptui.
pub fn agent() -> PathBuf {
    let out = heaptui().arg("agent-path").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end())
}

/// Compiles `src` (C) into `dir/name`.
pub fn compile_c(dir: &Path, name: &str, src: &str) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    compile(&cc, dir, &format!("{name}.c"), src, &["-O1"])
}

/// Compiles the source file `file` (its text `src`) with `compiler` and `flags` into `dir/`
/// (the file name without its extension), with debug information and frame pointers.
pub fn compile(compiler: &str, dir: &Path, file: &str, src: &str, flags: &[&str]) -> PathBuf {
    let source = dir.join(file);
    std::fs::write(&source, src).unwrap();
    let exe = dir.join(file.rsplit_once('.').map_or(file, |(stem, _)| stem));
    let out = Command::new(compiler)
        .args(flags)
        .args(["-g", "-pthread", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} {file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A target program running under the agent. It reads commands from stdin; closing stdin
/// makes it finish.
pub struct Target {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub log: PathBuf,
    /// Where the agent listens, as `heaptui` takes it (`127.0.0.1:PORT` or `unix:PATH`).
    pub address: String,
    pub token_file: PathBuf,
    started: Instant,
}

impl Target {
    /// Starts `exe` under the agent listening on `listen` and waits for the agent's
    /// "listening on" log line.
    pub fn start(dir: &Path, exe: &Path, listen: &str, env: &[(&str, &str)]) -> Target {
        static N: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!("agent-{}.log", N.fetch_add(1, Ordering::Relaxed)));
        let mut cmd = Command::new(exe);
        // Only what this test gives the target: a `HEAPTUI_*` variable of the test process's
        // own environment would change the agent's behaviour or make it warn on stderr.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("HEAPTUI_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("LD_PRELOAD", agent())
            .env("HEAPTUI_LISTEN", listen)
            .env("HEAPTUI_LOG", &log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains("listening on ")) {
                let rest = line.split("listening on ").nth(1).unwrap();
                let (address, token) = rest.split_once(" (token file ").unwrap();
                return Target {
                    child,
                    stdin,
                    log,
                    address: address.to_string(),
                    token_file: PathBuf::from(token.trim_end_matches(')')),
                    started,
                };
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("target ended ({status}) before its agent listened: {err}\nlog: {text}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "agent never listened: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends one command line to the target and reads its one-line answer from stdout.
    pub fn command(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        let stdout = self.child.stdout.as_mut().unwrap();
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            answer.push(byte[0]);
        }
        String::from_utf8(answer).unwrap()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(&self.token_file)
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Closes stdin and waits for the target to end.
    pub fn finish(mut self) -> (Output, String) {
        drop(self.stdin.take());
        loop {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            if self.started.elapsed() > TARGET_LIMIT {
                let _ = self.child.kill();
                panic!("target did not finish within {TARGET_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self.child.wait().unwrap();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        if let Some(mut s) = self.child.stdout.take() {
            s.read_to_end(&mut stdout).unwrap();
        }
        if let Some(mut s) = self.child.stderr.take() {
            s.read_to_end(&mut stderr).unwrap();
        }
        let out = Output {
            status,
            stdout,
            stderr,
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        (out, log)
    }

    /// A raw connection, no handshake.
    pub fn raw(&self) -> Raw {
        Raw::connect(&self.address)
    }

    /// A connection that has shaken hands.
    pub fn client(&self) -> Client {
        let mut raw = self.raw();
        client_handshake(&mut raw, &Hello::new(self.token(), "live-test")).unwrap();
        Client { raw, next: 1 }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP or Unix stream.
pub enum Raw {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Raw {
    pub fn connect(address: &str) -> Raw {
        let raw = match address.strip_prefix("unix:") {
            Some(path) => Raw::Unix(UnixStream::connect(path).unwrap()),
            None => Raw::Tcp(TcpStream::connect(address).unwrap()),
        };
        raw.set_timeout(Some(Duration::from_secs(60)));
        raw
    }

    pub fn set_timeout(&self, t: Option<Duration>) {
        match self {
            Raw::Tcp(s) => {
                s.set_read_timeout(t).unwrap();
                s.set_write_timeout(t).unwrap();
            }
            Raw::Unix(s) => {
                s.set_read_timeout(t).unwrap();
                s.set_write_timeout(t).unwrap();
            }
        }
    }

    /// Reads until the server closes; returns the bytes read (a refusal, if any).
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        let _ = self.read_to_end(&mut all);
        all
    }
}

impl Read for Raw {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Raw::Tcp(s) => s.read(buf),
            Raw::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Raw {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Raw::Tcp(s) => s.write(buf),
            Raw::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Raw::Tcp(s) => s.flush(),
            Raw::Unix(s) => s.flush(),
        }
    }
}

/// A blocking protocol client.
pub struct Client {
    pub raw: Raw,
    next: u64,
}

impl Client {
    pub fn send(&mut self, body: RequestBody) -> RequestId {
        let id = RequestId(self.next);
        self.next += 1;
        send(&mut self.raw, &Request { id, body }).unwrap();
        id
    }

    /// The next message, pushes included.
    pub fn next_message(&mut self) -> ServerMessage {
        recv(&mut self.raw, MAX_FRAME_LEN).unwrap()
    }

    /// Sends a request and returns its answer (pushes are skipped).
    pub fn ask(&mut self, body: RequestBody) -> Response {
        let id = self.send(body);
        loop {
            match self.next_message() {
                ServerMessage::Response { id: got, body } if got == id => return *body,
                ServerMessage::Response { id: got, .. } => {
                    panic!("answer to {got:?}, asked {id:?}")
                }
                _ => continue,
            }
        }
    }

    pub fn snapshot(&mut self) -> SnapshotInfo {
        match self.ask(RequestBody::TakeSnapshot) {
            Response::Snapshot(s) => s,
            other => panic!("{other:?}"),
        }
    }

    pub fn counters(&mut self) -> LiveCounters {
        match self.ask(RequestBody::ProcessInfo) {
            Response::ProcessInfo(p) => p.counters,
            other => panic!("{other:?}"),
        }
    }

    pub fn threads(&mut self) -> ThreadPage {
        match self.ask(RequestBody::Threads {
            sort: Sort::desc(ThreadKey::Total),
            page: Page::FIRST,
        }) {
            Response::Threads(t) => t,
            other => panic!("{other:?}"),
        }
    }
}

/// A target with a known heap shape: four named workers, each with a private block of
/// 2000 + i bytes, all four sharing one 3000-byte block; a global pointer to a 1000-byte
/// block. Commands on stdin (answered with one line on stdout):
/// - `alloc N`: allocates N blocks of 100..(100+N) bytes and frees the even ones; answers
///   `allocated A freed F` with the bytes;
/// - `many N`: allocates N 48-byte blocks kept by a list from main's frame; answers `ok`;
/// - end of input: the workers stop, everything is freed, it prints `done` and exits 0.
pub const SHAPES_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int quit, ready;
static char *global_block;
static char *shared;

static void say(const char *s) { write(1, s, strlen(s)); }

static void *worker(void *arg) {
    long i = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", i);
    pthread_setname_np(pthread_self(), name);
    char *volatile mine = malloc(2000 + i);
    char *volatile common = shared;
    memset(mine, 1, 2000 + i);
    pthread_mutex_lock(&mu);
    ready++;
    pthread_cond_broadcast(&cv);
    while (!quit) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    (void)common;
    free(mine);
    return 0;
}

struct node { struct node *next; char pad[40]; };

int main(void) {
    global_block = malloc(1000);
    shared = malloc(3000);
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, (void *)i);
    pthread_mutex_lock(&mu);
    while (ready < 4) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    struct node *volatile list = 0;
    char line[128];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(0, line + len, 1);
        if (n <= 0) break;
        if (line[len] != '\n' && len < sizeof line - 1) { len++; continue; }
        line[len] = 0;
        len = 0;
        long count = 0;
        char out[128];
        if (sscanf(line, "alloc %ld", &count) == 1) {
            unsigned long allocated = 0, freed = 0;
            char **blocks = calloc(count, sizeof *blocks);
            allocated += count * sizeof *blocks;
            for (long k = 0; k < count; k++) { blocks[k] = malloc(100 + k); allocated += 100 + k; }
            for (long k = 0; k < count; k += 2) { free(blocks[k]); freed += 100 + k; }
            for (long k = 1; k < count; k += 2) { free(blocks[k]); freed += 100 + k; }
            free(blocks);
            freed += count * sizeof *blocks;
            snprintf(out, sizeof out, "allocated %lu freed %lu\n", allocated, freed);
            say(out);
        } else if (sscanf(line, "many %ld", &count) == 1) {
            for (long k = 0; k < count; k++) {
                struct node *n = malloc(sizeof *n);
                n->next = list;
                list = n;
            }
            say("ok\n");
        } else {
            say("?\n");
        }
    }
    while (list) { struct node *n = list->next; free(list); list = n; }
    pthread_mutex_lock(&mu);
    quit = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    free(shared);
    free(global_block);
    say("done\n");
    return 0;
}
"#;

/// Compiles the shapes target into `dir`.
pub fn shapes(dir: &Path) -> PathBuf {
    compile_c(dir, "shapes", SHAPES_C)
}

/// Waits until the target's agent log has `n` lines containing `what`.
pub fn wait_for_log(target: &Target, what: &str, n: usize, limit: Duration) -> String {
    let started = Instant::now();
    loop {
        let log = target.log_text();
        if log.matches(what).count() >= n {
            return log;
        }
        assert!(
            started.elapsed() < limit,
            "fewer than {n} log lines with {what:?} after {limit:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `heaptui report ARGS… --json`, which must succeed.
pub fn report_json(args: &[&str]) -> Value {
    let out = heaptui()
        .arg("report")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "heaptui report {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The live report less what only a live report has (its timing).
pub fn without_timing(mut report: Value) -> Value {
    let map = report.as_object_mut().unwrap();
    for key in ["pause_ms", "capture_ms", "analysis_ms"] {
        let ms = map
            .remove(key)
            .unwrap_or_else(|| panic!("no {key} in the live report"));
        assert!(ms.as_f64().unwrap() >= 0.0);
    }
    report
}
