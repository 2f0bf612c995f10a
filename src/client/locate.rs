//! Finding agents by process (docs/reference.md §2, §6): `pid:PID` in every address argument,
//! and the agents `heaptui ps` lists, through the records agents write in their token
//! directory (`heaptui_protocol::token_dir`). On the way it sweeps the files of dead agents from
//! the directories that are this user's (another user's, seen as root, are only read).
//!
//! [`locate`] is the one answer to "where is the agent of process P": an agent at an address,
//! or none ([`Located::NoAgent`], the case a capture from outside takes over). It never
//! connects to anything: whether the agent answers is the caller's business.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use heaptui_protocol::token_dir::{self, Record};
use heaptui_protocol::token_file;

use super::{Address, ClientError, TokenSource, token};
use crate::offline::views::UsageError;

/// How long a sweep waits for an agent that holds a directory's lock while it starts.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// What an address argument names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Named {
    Address(Address),
    /// `pid:PID`: the agent of that process.
    Pid(u32),
}

impl Named {
    /// `:PORT`, `HOST:PORT`, `unix:PATH` or `pid:PID`; the error is one line naming the input.
    pub fn parse(text: &str) -> Result<Named, String> {
        let Some(pid) = text.strip_prefix("pid:") else {
            return Address::parse(text).map(Named::Address);
        };
        match pid.parse::<u32>() {
            Ok(pid) if pid > 0 && pid <= i32::MAX as u32 => Ok(Named::Pid(pid)),
            _ => Err(format!(
                "invalid process {text:?}: {pid:?} is not a process id (expected pid:PID, \
                 e.g. pid:4242; heaptui ps lists the processes with an agent)"
            )),
        }
    }
}

/// Where the agent of a process is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// Its agent listens at `address`; its token is in `token_file`.
    Agent {
        address: Address,
        token_file: PathBuf,
    },
    /// The process runs, but no agent of it listens: it was started without the agent
    /// (`agent_loaded` false), or its agent has no server (a fork child without
    /// `HEAPTUI_FOLLOW_FORK=1`, a server that could not start).
    NoAgent {
        pid: u32,
        command: String,
        agent_loaded: bool,
    },
}

/// A running process, as `/proc` tells it.
struct Process {
    uid: u32,
    command: String,
    /// `XDG_RUNTIME_DIR` of its environment at exec, when readable: its agent's token
    /// directory follows it.
    xdg_runtime_dir: Option<PathBuf>,
}

impl Process {
    /// `Ok(None)`: no such process (or a zombie).
    fn read(pid: u32) -> Result<Option<Process>, ClientError> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let alive = std::fs::read_to_string(proc_dir.join("stat"))
            .ok()
            .as_deref()
            .and_then(token_dir::start_of)
            .is_some();
        let status = std::fs::read_to_string(proc_dir.join("status"));
        let (true, Ok(status)) = (alive, status) else {
            return Ok(None);
        };
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| {
                ClientError::new(format!("pid:{pid}: cannot read its owner from /proc"))
            })?;
        let xdg_runtime_dir = std::fs::read(proc_dir.join("environ"))
            .ok()
            .and_then(|env| {
                env.split(|&b| b == 0)
                    .find_map(|var| var.strip_prefix(b"XDG_RUNTIME_DIR="))
                    .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
            });
        Ok(Some(Process {
            uid,
            command: command_of(pid).unwrap_or_default(),
            xdg_runtime_dir,
        }))
    }
}

/// The command line of process `pid` (as it shows itself now: a server that renames its
/// workers shows their names), arguments joined by spaces.
pub fn command_of(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    Some(words.join(" "))
}

/// Whether the agent's shared object is mapped into process `pid` (false when its maps cannot
/// be read).
fn agent_loaded(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.contains("libheaptui_agent"))
}

/// The token directories where agents of user `uid` may have written: the one of `xdg` (the
/// process's environment), ours when it is our user, and the two defaults (`/tmp/heaptui-UID`,
/// `/run/user/UID/heaptui`), without repeats.
fn directories_of(uid: u32, xdg: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if xdg.is_some() {
        dirs.push(token_file::directory(xdg, uid));
    }
    if uid == token::uid() {
        dirs.push(token::directory());
    }
    dirs.push(token_file::directory(None, uid));
    dirs.push(PathBuf::from(format!("/run/user/{uid}/heaptui")));
    dedup(dirs)
}

fn dedup(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = Vec::new();
    for dir in dirs {
        if !seen.contains(&dir) {
            seen.push(dir);
        }
    }
    seen
}

/// The live agents of `dir`: swept first when the directory is ours (the files of the gone
/// are removed), only read when it is another user's.
fn live_in(dir: &Path) -> Vec<Record> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Vec::new();
    };
    if !meta.is_dir() {
        return Vec::new();
    }
    if meta.uid() != token::uid() {
        return token_dir::survey(dir).live;
    }
    match token_dir::lock(dir, LOCK_PATIENCE) {
        Some(_held) => token_dir::sweep(dir).live,
        None => token_dir::survey(dir).live,
    }
}

/// An agent found in a token directory.
#[derive(Clone, Debug)]
pub struct Found {
    pub record: Record,
    pub address: Address,
    pub token_file: PathBuf,
}

fn found(dir: &Path, record: Record) -> Option<Found> {
    let address = Address::parse(&record.address).ok()?;
    let token_file = dir.join(record.endpoint().token_file_name());
    Some(Found {
        record,
        address,
        token_file,
    })
}

/// Where the agent of process `pid` is. The error is one sentence: no such process, or one
/// of another user's that we may not reach.
pub fn locate(pid: u32) -> Result<Located, ClientError> {
    let Some(process) = Process::read(pid)? else {
        return Err(ClientError::new(format!(
            "pid:{pid}: no such process (heaptui ps lists the processes with an agent)"
        )));
    };
    let me = token::uid();
    if process.uid != me && me != 0 {
        return Err(ClientError::new(format!(
            "pid:{pid} ({}) belongs to uid {}: only that user or root can reach it (its agent, \
             or a capture from outside) — run heaptui as that user, or with sudo",
            short(&process.command),
            process.uid
        )));
    }
    for dir in directories_of(process.uid, process.xdg_runtime_dir.as_deref()) {
        let record = live_in(&dir).into_iter().find(|r| r.pid == pid);
        if let Some(found) = record.and_then(|r| found(&dir, r)) {
            return Ok(Located::Agent {
                address: found.address,
                token_file: found.token_file,
            });
        }
    }
    Ok(Located::NoAgent {
        pid,
        agent_loaded: agent_loaded(pid),
        command: process.command,
    })
}

/// Every live agent in the token directories of this user (root: of every user), by pid.
pub fn agents() -> Vec<Found> {
    let me = token::uid();
    let mut dirs = directories_of(me, None);
    if me == 0 {
        dirs.extend(glob_dirs(Path::new("/tmp"), |name| {
            name.strip_prefix("heaptui-")
                .is_some_and(|uid| uid.parse::<u32>().is_ok())
                .then(PathBuf::new)
        }));
        dirs.extend(glob_dirs(Path::new("/run/user"), |_| {
            Some(PathBuf::from("heaptui"))
        }));
    }
    let mut all: Vec<Found> = dedup(dirs)
        .iter()
        .flat_map(|dir| live_in(dir).into_iter().filter_map(move |r| found(dir, r)))
        .collect();
    all.sort_by_key(|f| f.record.pid);
    all.dedup_by_key(|f| f.record.pid);
    all
}

/// `parent/<entry>/<tail>` for each entry of `parent` that `tail` accepts.
fn glob_dirs(parent: &Path, tail: impl Fn(&str) -> Option<PathBuf>) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let tail = tail(&name)?;
            Some(parent.join(name).join(tail))
        })
        .collect()
}

/// The agent an address argument names, and where its token comes from (`--token-file`
/// wins). A malformed argument is a usage error; a process without an agent is a runtime
/// error saying so.
pub fn resolve(text: &str, token_file: Option<&Path>) -> anyhow::Result<(Address, TokenSource)> {
    let given = token_file.map(|f| TokenSource::File(f.to_path_buf()));
    match Named::parse(text).map_err(UsageError)? {
        Named::Address(address) => Ok((address, given.unwrap_or(TokenSource::Discover))),
        Named::Pid(pid) => match locate(pid)? {
            Located::Agent {
                address,
                token_file,
            } => Ok((address, given.unwrap_or(TokenSource::File(token_file)))),
            Located::NoAgent {
                pid,
                command,
                agent_loaded,
            } => Err(ClientError::new(no_agent(pid, &command, agent_loaded)).into()),
        },
    }
}

/// Where an address argument leads: an agent, or a process without one, which is captured
/// from outside (`crate::outside`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Agent(Address, TokenSource),
    Outside(u32),
}

/// As [`resolve`], but a process started without the agent is a source too: `report`,
/// `snapshot` and `attach` capture it from outside. A process that has the agent loaded but
/// no server is still refused (its agent's memory and held frees would be counted as the
/// program's).
pub fn resolve_source(text: &str, token_file: Option<&Path>) -> anyhow::Result<Source> {
    if let Ok(Named::Pid(pid)) = Named::parse(text)
        && let Located::NoAgent {
            agent_loaded: false,
            ..
        } = locate(pid)?
    {
        return Ok(Source::Outside(pid));
    }
    let (address, token) = resolve(text, token_file)?;
    Ok(Source::Agent(address, token))
}

/// A command line printable and short enough for a one-line error.
fn short(command: &str) -> String {
    const MAX: usize = 60;
    let command = crate::figures::one_line(command.to_string());
    if command.chars().count() <= MAX {
        return command;
    }
    let mut cut: String = command.chars().take(MAX - 1).collect();
    cut.push('…');
    cut
}

/// The one line for a process without an agent that answers.
fn no_agent(pid: u32, command: &str, agent_loaded: bool) -> String {
    let command = short(command);
    if agent_loaded {
        format!(
            "pid:{pid} ({command}) has the agent loaded but no server: a fork child gets one \
             with HEAPTUI_FOLLOW_FORK=1, otherwise see the agent's log for why it is off"
        )
    } else {
        format!(
            "pid:{pid} ({command}) has no heaptui agent: start it with \
             LD_PRELOAD=$(heaptui agent-path) (heaptui ps lists the processes with one)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_arguments_parse_and_bad_ones_name_the_input() {
        assert_eq!(Named::parse("pid:4242"), Ok(Named::Pid(4242)));
        assert_eq!(
            Named::parse(":8000"),
            Ok(Named::Address(Address::parse(":8000").unwrap()))
        );
        for bad in [
            "pid:",
            "pid:abc",
            "pid:-1",
            "pid:0",
            "pid:4294967295",
            "pid: 12",
        ] {
            let e = Named::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert_eq!(e.lines().count(), 1);
        }
    }

    #[test]
    fn our_own_process_has_no_agent() {
        let me = std::process::id();
        match locate(me).unwrap() {
            Located::NoAgent {
                pid,
                command,
                agent_loaded,
            } => {
                assert_eq!(pid, me);
                assert!(!agent_loaded);
                assert!(!command.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_directories_of_a_user_start_with_its_processes_own() {
        let dirs = directories_of(4242, Some(Path::new("/run/user/4242")));
        assert_eq!(
            dirs,
            [
                PathBuf::from("/run/user/4242/heaptui"),
                PathBuf::from("/tmp/heaptui-4242"),
            ]
        );
    }
}
