//! Shared by the policy tests: a target started under the real preload with a policy and an
//! audit log, its stdout followed line by line, its stdin used as a command channel, and a
//! blocking protocol client over the agent's Unix socket (token from the agent's token file).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use heaptui_agent::config::Listen;
use heaptui_agent::server::token;
use heaptui_analysis::{HeapGraph, snapshot};
use heaptui_protocol::handshake::client_handshake;
use heaptui_protocol::{
    CancelVerdict, Hello, MAX_FRAME_LEN, Page, PolicyAnswer, Push, Request, RequestBody, RequestId,
    Response, ServerMessage, SnapshotInfo, Sort, ThreadKey, ThreadRow, recv, send,
};

use crate::common::{TempDir, agent_path, without_inherited_heaptui_env};

pub const POLICY_C: &str = include_str!("../targets/policy_threads.c");

/// A running target.
pub struct Target {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    /// Reads stdout into `lines` until the target closes it.
    reader: Option<JoinHandle<()>>,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub audit: PathBuf,
    pub stderr_path: PathBuf,
}

impl Target {
    /// Starts `exe args` with the agent, `policy` (None: no HEAPTUI_POLICY) and an audit log.
    pub fn start(dir: &TempDir, exe: &Path, args: &[&str], policy: Option<&str>) -> Target {
        Target::start_with(dir, exe, args, policy, &[])
    }

    /// [`Target::start`] with more variables (`HEAPTUI_AUTO_SNAPSHOT`, `HEAPTUI_METRICS`…).
    pub fn start_with(
        dir: &TempDir,
        exe: &Path,
        args: &[&str],
        policy: Option<&str>,
        env: &[(&str, &str)],
    ) -> Target {
        let socket = dir.path().join("agent.sock");
        let log = dir.path().join("agent.log");
        let audit = dir.path().join("audit.jsonl");
        let stderr_path = dir.path().join("stderr.txt");
        let mut cmd = Command::new(exe);
        without_inherited_heaptui_env(&mut cmd)
            .args(args)
            .env("LD_PRELOAD", agent_path())
            .env("HEAPTUI_LOG", &log)
            .env("HEAPTUI_LISTEN", format!("unix:{}", socket.display()))
            .env("HEAPTUI_AUDIT", &audit)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(text) = policy {
            let path = dir.path().join("policy.toml");
            std::fs::write(&path, text).unwrap();
            cmd.env("HEAPTUI_POLICY", path);
        }
        let mut child = cmd.spawn().expect("start target");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        let stdin = child.stdin.take();
        let t = Target {
            child,
            stdin,
            lines,
            reader: Some(reader),
            socket,
            log,
            audit,
            stderr_path,
        };
        t.wait_line("ready");
        t
    }

    /// Every stdout line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (up to 30 s) for a stdout line starting with `prefix`; returns it.
    pub fn wait_line(&self, prefix: &str) -> String {
        self.wait_line_after(0, prefix)
    }

    /// Waits (up to 30 s) for a stdout line starting with `prefix` among the lines after the
    /// first `skip`; returns it.
    fn wait_line_after(&self, skip: usize, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self
                .lines()
                .into_iter()
                .skip(skip)
                .find(|l| l.starts_with(prefix))
            {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no line {prefix:?} from the target; stdout so far: {:?}\nlog:\n{}",
                self.lines(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Tids the target printed (`tid NAME TID`), by name.
    pub fn tids(&self) -> BTreeMap<String, u32> {
        self.lines()
            .iter()
            .filter_map(|l| {
                let mut w = l.strip_prefix("tid ")?.split_whitespace();
                Some((w.next()?.to_owned(), w.next()?.parse().ok()?))
            })
            .collect()
    }

    pub fn command(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends `text` and returns the first line starting with `prefix` printed after it.
    pub fn ask(&mut self, text: &str, prefix: &str) -> String {
        let skip = self.lines().len();
        self.command(text);
        self.wait_line_after(skip, prefix)
    }

    /// Waits until the target's thread `name` has been through `more` more rounds of its loop
    /// (policy_threads.c: "rounds NAME"), so whatever a decision was going to do to it, it
    /// would have done.
    pub fn wait_rounds(&mut self, name: &str, more: u64) {
        let prefix = format!("rounds {name} ");
        let mut rounds = || -> u64 {
            let line = self.ask(&format!("rounds {name}"), &prefix);
            line[prefix.len()..]
                .parse()
                .unwrap_or_else(|_| panic!("no thread {name}: {line}"))
        };
        let first = rounds();
        let deadline = Instant::now() + Duration::from_secs(30);
        while rounds() < first + more {
            assert!(Instant::now() < deadline, "thread {name} does not go round");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the agent's thread `name` (`heaptui-policy`, `heaptui-watch`) has run at
    /// least `more` whole rounds of its loop from now, seen in `/proc`: it sleeps once a round
    /// (nanosleep), so a round is over each time it is found sleeping again after one more
    /// context switch than before.
    pub fn wait_agent_rounds(&self, name: &str, more: u64) {
        let task = std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim_end() == name))
            .unwrap_or_else(|| panic!("the agent has no thread {name}"));
        let sleeping = || {
            let call = std::fs::read_to_string(task.join("syscall")).unwrap_or_default();
            let nr: i64 = call
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1);
            nr == libc::SYS_nanosleep || nr == libc::SYS_clock_nanosleep
        };
        let switches = || -> u64 {
            let status = std::fs::read_to_string(task.join("status")).unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let wait_until = |what: &str, done: &mut dyn FnMut() -> bool| {
            while !done() {
                assert!(Instant::now() < deadline, "agent thread {name}: {what}");
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        // Between two rounds first: the round after this sleep starts from now.
        wait_until("never sleeps", &mut || sleeping());
        let mut seen = switches();
        for _ in 0..more {
            let from = seen;
            wait_until("does not go round", &mut || {
                let now = switches();
                if now > from && sleeping() {
                    seen = now;
                    true
                } else {
                    false
                }
            });
        }
    }

    /// Whether thread `tid` of the target still exists.
    pub fn thread_alive(&self, tid: u32) -> bool {
        Path::new(&format!("/proc/{}/task/{tid}", self.child.id())).exists()
    }

    /// Waits up to 10 s for thread `tid` to end.
    pub fn wait_thread_gone(&self, tid: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.thread_alive(tid) {
            assert!(Instant::now() < deadline, "thread {tid} did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends "quit" and waits for a normal exit; returns the stdout lines.
    pub fn quit(mut self) -> Vec<String> {
        self.command("quit");
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("target did not exit after quit");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Every line the target wrote.
        self.reader.take().unwrap().join().unwrap();
        assert!(
            status.success(),
            "target exited with {status}; stdout {:?}; stderr {}",
            self.lines(),
            self.stderr()
        );
        self.lines()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The audit log's lines, parsed.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad audit line {l:?}: {e}"))
            })
            .collect()
    }

    /// Waits up to 20 s until `pred` holds for the audit lines.
    pub fn wait_audit(
        &self,
        what: &str,
        pred: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let a = self.audit();
            if pred(&a) {
                return a;
            }
            assert!(
                Instant::now() < deadline,
                "audit log never showed {what}: {a:#?}\nagent log:\n{}",
                self.agent_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A blocking protocol client. Pushes other than the counters that arrive while it waits are
/// kept in `pushes`.
pub struct Client {
    stream: UnixStream,
    next: u64,
    pub pushes: Vec<Push>,
}

impl Client {
    pub fn connect(socket: &Path) -> Client {
        let listen = Listen::Unix(socket.to_path_buf());
        let token_path = token::directory().join(token::file_name(&listen));
        let token = std::fs::read_to_string(&token_path)
            .unwrap_or_else(|e| panic!("token file {}: {e}", token_path.display()));
        let mut stream = UnixStream::connect(socket).expect("connect to the agent");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        client_handshake(&mut stream, &Hello::new(token.trim(), "policy-test")).expect("handshake");
        Client {
            stream,
            next: 1,
            pushes: Vec::new(),
        }
    }

    pub fn request(&mut self, body: RequestBody) -> Response {
        let id = RequestId(self.next);
        self.next += 1;
        send(&mut self.stream, &Request { id, body }).expect("send");
        loop {
            let m: ServerMessage = recv(&mut self.stream, MAX_FRAME_LEN).expect("answer");
            match m {
                ServerMessage::Response { id: got, body } if got == id => return *body,
                ServerMessage::Push(Push::Counters(_)) => {}
                ServerMessage::Push(p) => self.pushes.push(p),
                _ => {}
            }
        }
    }

    /// Subscribes to the agent's pushes.
    pub fn subscribe(&mut self) {
        match self.request(RequestBody::Subscribe) {
            Response::Subscribed { .. } => {}
            other => panic!("subscribe answered {other:?}"),
        }
    }

    /// Reads pushes (after [`Client::subscribe`]) until one satisfies `pred`, for at most
    /// 30 s; returns it (it stays in `pushes` too).
    pub fn wait_push(&mut self, what: &str, pred: impl Fn(&Push) -> bool) -> Push {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(p) = self.pushes.iter().find(|p| pred(p)) {
                return p.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no push for {what} within 30 s; got {:?}",
                self.pushes
            );
            let m: ServerMessage = recv(&mut self.stream, MAX_FRAME_LEN).expect("a push");
            match m {
                ServerMessage::Push(Push::Counters(_)) => {}
                ServerMessage::Push(p) => self.pushes.push(p),
                _ => {}
            }
        }
    }

    pub fn cancel(&mut self, tid: u32, dry_run: bool) -> CancelVerdict {
        match self.request(RequestBody::Cancel { tid, dry_run }) {
            Response::Cancel(v) => v,
            other => panic!("cancel answered {other:?}"),
        }
    }

    pub fn policy(&mut self) -> PolicyAnswer {
        match self.request(RequestBody::Policy) {
            Response::Policy(p) => p,
            other => panic!("policy answered {other:?}"),
        }
    }

    pub fn snapshot(&mut self) -> SnapshotInfo {
        match self.request(RequestBody::TakeSnapshot) {
            Response::Snapshot(s) => s,
            other => panic!("snapshot answered {other:?}"),
        }
    }

    /// Takes a snapshot and downloads its whole heap graph (`SnapshotData`).
    pub fn graph(&mut self) -> HeapGraph {
        let info = self.snapshot();
        let mut bytes = Vec::new();
        loop {
            let body = RequestBody::SnapshotData {
                snapshot: info.snapshot,
                offset: bytes.len() as u64,
            };
            let chunk = match self.request(body) {
                Response::SnapshotData(c) => c,
                other => panic!("snapshot data answered {other:?}"),
            };
            bytes.extend_from_slice(&chunk.bytes);
            if chunk.bytes.is_empty() || bytes.len() as u64 >= chunk.total {
                break;
            }
        }
        snapshot::read_bytes(&bytes).expect("the agent's snapshot reads back")
    }

    /// The kept snapshot's thread rows, by tid.
    pub fn threads(&mut self) -> BTreeMap<u32, ThreadRow> {
        let body = RequestBody::Threads {
            sort: Sort {
                key: ThreadKey::Tid,
                direction: heaptui_protocol::Direction::Ascending,
            },
            page: Page::FIRST,
        };
        match self.request(body) {
            Response::Threads(p) => p.rows.into_iter().map(|r| (r.tid, r)).collect(),
            other => panic!("threads answered {other:?}"),
        }
    }
}
