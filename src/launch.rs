//! Starting a program under the agent and looking after it, for `heaptui run` and
//! `heaptui demo`.
//!
//! The agent is preloaded (in front of any preload the user already has) and listens on a
//! private Unix socket unless told otherwise, so two runs never fight over a port. When the
//! TUI owns the terminal, the program's output goes to a log file instead of over the screen,
//! and the program is stopped (SIGTERM, then SIGKILL after a grace period) when the operator
//! quits. A program that says when it is ready (the demo prints `demo: ready` once all its
//! threads hold their first data) can be waited for, so the first snapshot sees it whole.
//! This module never talks the protocol beyond waiting for the agent's first answer.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::client::{Address, ClientError, Session, TokenSource, token};

/// How long to wait for the agent to answer after starting the program.
const AGENT_WAIT: Duration = Duration::from_secs(20);

/// How long to wait for the program's ready line once its agent answers.
const READY_WAIT: Duration = Duration::from_secs(20);

/// How long a program may take to end after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How the program is started.
#[derive(Debug, Default)]
pub struct Launch {
    /// Where the agent listens; default: a private Unix socket.
    pub listen: Option<Address>,
    /// The agent's policy file (`HEAPTUI_POLICY`).
    pub policy: Option<PathBuf>,
    /// The agent's audit log (`HEAPTUI_AUDIT`).
    pub audit: Option<PathBuf>,
    /// Where the program's stdout and stderr go; `None` leaves them on the terminal.
    pub output_log: Option<PathBuf>,
    /// The agent's event recording (`HEAPTUI_RECORD`), which the units view needs; `None`
    /// records nothing (unless the caller's own environment says so).
    pub record: Option<PathBuf>,
    /// Wait, before returning, until a line of the program's output (in `output_log`,
    /// which must be set) starts with this text.
    pub ready_line: Option<String>,
    /// The agent's allocator wrappers (`HEAPTUI_ALLOC_WRAPPERS`), which name its sites.
    pub wrappers: Option<String>,
}

/// A program running under the agent, with a session open to its agent.
pub struct Target {
    child: Child,
    pub address: Address,
    pub session: Session,
}

/// Starts `program` under the agent and waits until the agent answers on its address.
pub fn start(program: &[OsString], launch: &Launch) -> anyhow::Result<Target> {
    let Some((prog, args)) = program.split_first() else {
        bail!("no program to run: give it after --, e.g. heaptui run -- ./server");
    };
    anyhow::ensure!(
        launch.ready_line.is_none() || launch.output_log.is_some(),
        "waiting for a ready line needs the program's output in a log file"
    );
    let agent = crate::embedded::agent_path()?;
    let address = match &launch.listen {
        Some(a) => a.clone(),
        None => {
            let dir = token::directory();
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Address::Unix(dir.join(format!("run-{}.sock", std::process::id())))
        }
    };
    let mut command = Command::new(prog);
    command
        .args(args)
        .env(
            "LD_PRELOAD",
            preload_with(&agent, std::env::var_os("LD_PRELOAD")),
        )
        .env("HEAPTUI_LISTEN", address.to_string());
    if let Some(policy) = &launch.policy {
        command.env("HEAPTUI_POLICY", policy);
    }
    if let Some(audit) = &launch.audit {
        command.env("HEAPTUI_AUDIT", audit);
    }
    if let Some(record) = &launch.record {
        command.env("HEAPTUI_RECORD", record);
    }
    if let Some(wrappers) = &launch.wrappers {
        command.env("HEAPTUI_ALLOC_WRAPPERS", wrappers);
    }
    if let Some(log) = &launch.output_log {
        let file = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {}", Path::new(prog).display()))?;
    let ready = wait_for_agent(&mut child, &address).and_then(|session| {
        if let (Some(line), Some(log)) = (&launch.ready_line, &launch.output_log) {
            wait_for_line(&mut child, Path::new(prog), log, line, READY_WAIT)?;
        }
        Ok(session)
    });
    match ready {
        Ok(session) => Ok(Target {
            child,
            address,
            session,
        }),
        Err(e) => {
            // A program whose agent never answered is of no use to the caller: do not leave
            // it running behind an error message.
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

impl Target {
    /// Waits for the program to end by itself.
    pub fn wait(mut self) -> anyhow::Result<ExitStatus> {
        drop(self.session);
        Ok(self.child.wait()?)
    }

    /// Asks the program to end (SIGTERM), kills it after a grace period, and returns how it
    /// ended.
    pub fn stop(mut self) -> anyhow::Result<ExitStatus> {
        drop(self.session);
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let asked = Instant::now();
        while asked.elapsed() < STOP_GRACE {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        Ok(self.child.wait()?)
    }
}

/// `LD_PRELOAD` with the agent first, keeping whatever the user preloads already.
fn preload_with(agent: &Path, existing: Option<OsString>) -> OsString {
    let mut preload = agent.as_os_str().to_owned();
    if let Some(existing) = existing.filter(|e| !e.is_empty()) {
        preload.push(OsStr::new(" "));
        preload.push(existing);
    }
    preload
}

fn wait_for_agent(child: &mut Child, address: &Address) -> anyhow::Result<Session> {
    let started = Instant::now();
    let mut last: Option<ClientError> = None;
    while started.elapsed() < AGENT_WAIT {
        if let Some(status) = child.try_wait()? {
            bail!("the program ended ({status}) before its agent answered on {address}");
        }
        match Session::connect(address, &TokenSource::Discover) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "the agent did not answer on {address} within {} s: {}",
        AGENT_WAIT.as_secs(),
        last.map_or_else(String::new, |e| e.to_string())
    )
}

/// Waits until a line of `log` (the program's output) starts with `line`; fails when the
/// program ends first or `limit` passes, naming the program and the log.
fn wait_for_line(
    child: &mut Child,
    prog: &Path,
    log: &Path,
    line: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let printed = || -> anyhow::Result<bool> {
        let text = std::fs::read(log).with_context(|| format!("cannot read {}", log.display()))?;
        Ok(has_line(&text, line))
    };
    loop {
        if printed()? {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            // It may have printed the line between the read above and its end.
            if printed()? {
                return Ok(());
            }
            bail!(
                "{} ended ({status}) before printing '{line}'; its output is in {}",
                prog.display(),
                log.display()
            );
        }
        if started.elapsed() >= limit {
            bail!(
                "{} did not print '{line}' within {} s; its output is in {}",
                prog.display(),
                limit.as_secs_f64(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a whole line of `text` starts with `line` (a line still being written does not
/// count until its end of line is there).
fn has_line(text: &[u8], line: &str) -> bool {
    let mut lines = text.split(|&b| b == b'\n');
    // The last piece has no end of line yet (or is empty after the last one).
    let _unfinished = lines.next_back();
    lines.any(|l| l.starts_with(line.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_goes_in_front_of_existing_preloads() {
        let agent = Path::new("/cache/libheaptui_agent.so");
        assert_eq!(preload_with(agent, None), "/cache/libheaptui_agent.so");
        assert_eq!(
            preload_with(agent, Some("".into())),
            "/cache/libheaptui_agent.so"
        );
        assert_eq!(
            preload_with(agent, Some("/usr/lib/libfoo.so".into())),
            "/cache/libheaptui_agent.so /usr/lib/libfoo.so"
        );
    }

    #[test]
    fn a_ready_line_counts_once_it_is_whole() {
        assert!(has_line(b"starting\ndemo: ready (pid 1)\n", "demo: ready"));
        assert!(has_line(b"demo: ready\n", "demo: ready"));
        assert!(!has_line(b"starting\ndemo: rea", "demo: ready"));
        assert!(!has_line(b"demo: ready (pid 1)", "demo: ready"));
        assert!(!has_line(b"not demo: ready\n", "demo: ready"));
        assert!(!has_line(b"", "demo: ready"));
    }

    /// `sh -c script` with its output in a fresh log, as `start` runs a program.
    fn spawn_logged(name: &str, script: &str) -> (Child, PathBuf) {
        let log =
            std::env::temp_dir().join(format!("heaptui-launch-{}-{name}.log", std::process::id()));
        let file = File::create(&log).unwrap();
        let child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        (child, log)
    }

    #[test]
    fn waits_for_the_ready_line_of_a_running_program() {
        let (mut child, log) = spawn_logged(
            "ready",
            "echo starting; sleep 0.3; echo 'demo: ready (7 threads)'; sleep 30",
        );
        let started = Instant::now();
        let got = wait_for_line(
            &mut child,
            Path::new("sh"),
            &log,
            "demo: ready",
            Duration::from_secs(20),
        );
        let _ = child.kill();
        let _ = child.wait();
        got.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert!(child.try_wait().unwrap().is_some());
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn a_program_that_ends_unready_is_named_with_its_log() {
        let (mut child, log) = spawn_logged("ends", "echo 'demo: out of memory'; exit 3");
        let e = wait_for_line(
            &mut child,
            Path::new("/opt/demo"),
            &log,
            "demo: ready",
            Duration::from_secs(20),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            format!(
                "/opt/demo ended (exit status: 3) before printing 'demo: ready'; its output is in {}",
                log.display()
            )
        );
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn a_program_that_never_gets_ready_times_out() {
        let (mut child, log) = spawn_logged("silent", "echo starting; sleep 30");
        let e = wait_for_line(
            &mut child,
            Path::new("/opt/demo"),
            &log,
            "demo: ready",
            Duration::from_millis(300),
        )
        .unwrap_err()
        .to_string();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            e,
            format!(
                "/opt/demo did not print 'demo: ready' within 0.3 s; its output is in {}",
                log.display()
            )
        );
        let _ = std::fs::remove_file(log);
    }
}
