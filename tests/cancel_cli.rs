//! `heaptui cancel ADDR TID [--dry-run] [--wait SECONDS]` end to end: the real binary against
//! a C target run under the agent it embeds (`heaptui agent-path`), with a policy; verdicts,
//! exit codes, the release the agent measured after a cancel that acted (the very figure of
//! its audit log), and the target's own account of what happened.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TARGET: &str = include_str!("../agent-shim/tests/targets/policy_threads.c");

const POLICY: &str = r#"
min_release = "1 MiB"
[[permit]]
thread = "runaway"
[[permit]]
thread = "small"
"#;

fn heaptui() -> Command {
    Command::new(env!("CARGO_BIN_EXE_heaptui"))
}

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Target {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Target {
    fn start(dir: &Path, policy: Option<&str>) -> (Target, String) {
        let src = dir.join("policy_threads.c");
        std::fs::write(&src, TARGET).unwrap();
        let exe = dir.join("policy_threads");
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/agent-shim/include");
        let cc = Command::new("gcc")
            .args(["-O1", "-g", "-pthread", "-I", include])
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let agent = heaptui().arg("agent-path").output().unwrap();
        assert!(agent.status.success());
        let agent = String::from_utf8(agent.stdout).unwrap().trim().to_owned();
        let socket = dir.join("agent.sock");
        let mut cmd = Command::new(&exe);
        cmd.env("LD_PRELOAD", agent)
            .env("HEAPTUI_LISTEN", format!("unix:{}", socket.display()))
            .env("HEAPTUI_LOG", dir.join("agent.log"))
            .env("HEAPTUI_AUDIT", dir.join("audit.jsonl"))
            .env_remove("HEAPTUI_POLICY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(p) = policy {
            std::fs::write(dir.join("policy.toml"), p).unwrap();
            cmd.env("HEAPTUI_POLICY", dir.join("policy.toml"));
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        let t = Target { child, lines };
        t.wait_line("ready");
        (t, format!("unix:{}", socket.display()))
    }

    fn wait_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.starts_with(prefix))
            {
                return l.clone();
            }
            assert!(Instant::now() < deadline, "no {prefix:?} line");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn tid(&self, name: &str) -> String {
        let line = self.wait_line(&format!("tid {name} "));
        line.rsplit(' ').next().unwrap().to_owned()
    }

    fn quit(mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "quit").unwrap();
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "target exited with {status}");
        self.wait_line("exit ok");
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

fn cancel(addr: &str, args: &[&str]) -> (Output, String) {
    let out = heaptui()
        .arg("cancel")
        .arg(addr)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn scratch(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("heaptui-cancel-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// The `(N bytes)` counts of one line, in order.
fn byte_counts(line: &str) -> Vec<u64> {
    line.split('(')
        .skip(1)
        .filter_map(|p| p.split(" bytes)").next()?.parse().ok())
        .collect()
}

/// The printed measured-release line, if any.
fn release_line(text: &str) -> Option<&str> {
    text.lines().find(|l| l.starts_with("  release "))
}

/// The number after `"key":` in a JSON line.
fn json_number(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(&format!("\"{key}\":"))? + key.len() + 3..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn cancel_prints_the_verdict_and_exits_by_it() {
    let dir = scratch("policy");
    let (t, addr) = Target::start(&dir.0, Some(POLICY));
    let runaway = t.tid("runaway");

    // A refusal is not followed up: no release line, and no waiting for one.
    let started = Instant::now();
    let (out, text) = cancel(&addr, &[&t.tid("holder-1"), "--wait", "60"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("refused: not permitted"), "{text}");
    assert_eq!(release_line(&text), None, "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a refusal waited {:?}: {text}",
        started.elapsed()
    );
    assert!(
        text.contains("policy.toml: 2 permit rules, min_release 1.0 MiB"),
        "the policy in force is shown: {text}"
    );

    let started = Instant::now();
    let (out, text) = cancel(&addr, &[&t.tid("small"), "--wait", "60"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("refused: below min_release"), "{text}");
    assert!(text.contains("predicted release"), "{text}");
    assert_eq!(release_line(&text), None, "{text}");
    assert!(started.elapsed() < Duration::from_secs(30), "{text}");

    // A dry run acts on nothing, so nothing is measured or awaited either.
    let started = Instant::now();
    let (out, text) = cancel(&addr, &[&runaway, "--dry-run", "--wait", "60"]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("cancel of thread {runaway}: dry run")),
        "{text}"
    );
    assert!(text.contains("predicted release 8.0 MiB"), "{text}");
    assert_eq!(release_line(&text), None, "{text}");
    assert!(started.elapsed() < Duration::from_secs(30), "{text}");

    // The default wait (10 s) covers the agent's follow-up: the thread ends at once, and the
    // agent measures within its next ticks.
    let (out, text) = cancel(&addr, &[&runaway]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("cancel of thread {runaway}: done")),
        "{text}"
    );
    assert!(text.contains("mechanism cooperative"), "{text}");
    let released = release_line(&text).unwrap_or_else(|| panic!("no release line: {text}"));
    assert!(
        released.starts_with("  release measured ") && released.contains("; predicted "),
        "{released}"
    );
    let counts = byte_counts(released);
    assert_eq!(counts.len(), 2, "measured and predicted: {released}");
    let (measured, predicted) = (counts[0], counts[1]);
    let verdict_predicted = byte_counts(
        text.lines()
            .find(|l| l.starts_with("  predicted release "))
            .unwrap(),
    );
    assert_eq!(verdict_predicted, [predicted], "{text}");
    // The whole heap is measured (the snapshot at the decision minus the one after the
    // thread ended), so the other threads' churn counts too: within 5%, as the TUI's.
    let off = (measured as f64 - predicted as f64).abs() / predicted as f64;
    assert!(off < 0.05, "measured vs predicted: {released}");
    t.wait_line("runaway: cancelled");

    let audit = std::fs::read_to_string(dir.0.join("audit.jsonl")).unwrap();
    // The printed figure is the agent's own, as its audit log has it.
    let line = audit
        .lines()
        .find(|l| l.contains("\"event\":\"measured\""))
        .unwrap_or_else(|| panic!("no measured line: {audit}"));
    assert_eq!(
        json_number(line, "measured_release"),
        Some(measured),
        "{line}"
    );
    assert_eq!(
        json_number(line, "predicted_release"),
        Some(predicted),
        "{line}"
    );
    let decisions = audit
        .lines()
        .filter(|l| l.contains("\"event\":\"decision\""))
        .count();
    assert_eq!(decisions, 4, "{audit}");
    assert!(
        audit.contains("operator \\\"heaptui "),
        "the client is named: {audit}"
    );
    t.quit();
}

#[test]
fn cancel_without_a_policy_is_refused_and_usage_errors_exit_2() {
    let dir = scratch("none");
    let (t, addr) = Target::start(&dir.0, None);
    let (out, text) = cancel(&addr, &[&t.tid("runaway")]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("refused: no policy"), "{text}");
    assert!(
        text.contains("  policy none: the agent runs without HEAPTUI_POLICY"),
        "{text}"
    );
    let (out, text) = cancel(&addr, &["not-a-tid"]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    t.quit();
    let (out, text) = cancel(&addr, &["1"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot connect") || text.contains("connect"),
        "{text}"
    );
}

#[test]
fn cancel_under_an_invalid_policy_names_the_file_and_its_error() {
    let dir = scratch("invalid");
    let bad = "[[permit]]\nthread = \"runaway\"\nmechansim = \"cooperative\"\n";
    let (t, addr) = Target::start(&dir.0, Some(bad));
    let (out, text) = cancel(&addr, &[&t.tid("runaway"), "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("refused: policy invalid"), "{text}");
    let policy = text
        .lines()
        .find(|l| l.starts_with("  policy "))
        .unwrap_or_else(|| panic!("no policy line: {text}"));
    assert!(
        policy.contains("policy.toml is invalid, so every cancel is refused")
            && policy.contains("mechansim")
            && policy.contains("line 3"),
        "{policy}"
    );
    t.quit();
}

/// A permitted thread that never polls for its cancel: the cancel is done, but the thread does
/// not end, so the agent measures only after its own deadline (5 s). `--wait 1` gives up
/// first and says what it waited for; `--wait 0` does not wait at all. The exit status is the
/// cancel's.
#[test]
fn cancel_says_when_the_measured_release_does_not_come_in_time() {
    let dir = scratch("late");
    let policy = "min_release = \"512 KiB\"\n[[permit]]\nthread = \"holder-*\"\n";
    let (t, addr) = Target::start(&dir.0, Some(policy));
    let holder = t.tid("holder-1");

    let started = Instant::now();
    let (out, text) = cancel(&addr, &[&holder, "--wait", "1"]);
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("cancel of thread {holder}: done")),
        "{text}"
    );
    let late = release_line(&text).unwrap_or_else(|| panic!("no release line: {text}"));
    assert_eq!(
        late,
        format!(
            "  release not measured yet: the agent sent no measured release for thread \
             {holder} within 1 s (its audit log gets it when measured)"
        ),
        "{text}"
    );
    assert!(waited >= Duration::from_secs(1), "gave up after {waited:?}");

    let (out, text) = cancel(&addr, &[&t.tid("holder-2"), "--wait", "0"]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(": done"), "{text}");
    assert_eq!(release_line(&text), None, "{text}");

    let (out, text) = cancel(&addr, &[&holder, "--wait", "-1"]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    t.quit();
}
