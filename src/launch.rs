//! Starting a program under the agent and looking after it, for `heaptui run` and
//! `heaptui demo`.
//!
//! The agent is preloaded (in front of any preload the user already has) and listens on a
//! private Unix socket unless told otherwise, so two runs never fight over a port. When the
//! TUI owns the terminal, the program's output goes to a log file instead of over the screen,
//! and the program is stopped (SIGTERM, then SIGKILL after a grace period) when the operator
//! quits. This module never talks the protocol beyond waiting for the agent's first answer.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::client::{Address, ClientError, Session, TokenSource, token};

/// How long to wait for the agent to answer after starting the program.
const AGENT_WAIT: Duration = Duration::from_secs(20);

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
    match wait_for_agent(&mut child, &address) {
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
}
