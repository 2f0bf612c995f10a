//! Who is in a token directory (docs/reference.md §6): beside the token files, each agent with
//! a server writes a record `pid-<PID>.agent` saying where the agent of process PID listens, so
//! a client finds an agent from a pid (`pid:PID`, `heaptui ps`), and anyone can tell which
//! files belong to processes that are gone.
//!
//! A record is alive while its process runs (same pid, same start time: a reused pid is another
//! process) and its address is listening (an `exec` closes the agent's socket; a new image
//! without the agent leaves the record behind). Everything else of a dead agent goes with its
//! record: its token file, its socket when it lives in the directory (`pid-<PID>.sock`,
//! `run-<N>.sock`). Files without a record (agents older than records, half-written temporary
//! files) go when what they name is gone. Files that belong to something alive are never
//! removed.
//!
//! The decision is [`plan`], pure over what a [`Probe`] reads; [`sweep`] runs it on a real
//! directory (the records, `/proc/<pid>/stat`, the listening sockets of `/proc/net/unix`,
//! `/proc/net/tcp` and `/proc/net/tcp6`) and removes what it says, while the caller holds the
//! directory's lock ([`lock`]), which an agent also holds while it binds and writes its files,
//! so a sweep never sees an agent half-started. The agent (when it starts) and `heaptui` (`ps`,
//! `pid:PID`) run this one sweep, so they agree on what is alive. It is the only file I/O of
//! this crate; it never connects to an agent (a probe would cost every agent a connection).

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::token_file;

/// The lock file of a token directory: held (flock) by a sweep, and by an agent while it binds
/// and writes its files.
pub const LOCK_FILE: &str = ".lock";

/// The first line of a record: what it is and its format's version.
const RECORD_MAGIC: &str = "heaptui-agent 1";

/// The record file of the agent of process `pid`.
pub fn record_name(pid: u32) -> String {
    format!("pid-{pid}.agent")
}

/// The per-process socket of process `pid`: where a fork child's agent listens
/// (`HEAPTUI_FOLLOW_FORK=1`), and any agent that cannot take its configured address.
pub fn pid_socket_name(pid: u32) -> String {
    format!("pid-{pid}.sock")
}

/// What an agent tells about itself in its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub pid: u32,
    /// The process's start time, field 22 of `/proc/<pid>/stat` (clock ticks after boot): with
    /// the pid, it names one process for the machine's uptime.
    pub start: u64,
    /// Where the agent listens, as users write it: `127.0.0.1:8000`, `[::1]:8000` or
    /// `unix:/absolute/path`.
    pub address: String,
    /// The agent has told nobody where it listens (a fork child's server is silent): a program
    /// this process execs next, landing at the same place, says it once.
    pub quiet: bool,
}

impl Record {
    /// The record's file contents.
    pub fn to_text(&self) -> String {
        format!(
            "{RECORD_MAGIC}\npid {}\nstart {}\naddress {}\n{}",
            self.pid,
            self.start,
            self.address,
            if self.quiet { "quiet 1\n" } else { "" }
        )
    }

    /// Reads a record's file contents; `None` for anything else.
    pub fn parse(text: &str) -> Option<Record> {
        let mut lines = text.lines();
        if lines.next()? != RECORD_MAGIC {
            return None;
        }
        let (mut pid, mut start, mut address, mut quiet) = (None, None, None, false);
        for line in lines {
            match line.split_once(' ')? {
                ("pid", v) => pid = v.parse().ok(),
                ("start", v) => start = v.parse().ok(),
                ("address", v) if Endpoint::parse(v).is_some() => address = Some(v.to_string()),
                ("quiet", v) => quiet = v == "1",
                // Later versions may add lines.
                _ => {}
            }
        }
        Some(Record {
            pid: pid?,
            start: start?,
            address: address?,
            quiet,
        })
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::parse(&self.address).expect("a parsed record's address is an endpoint")
    }
}

/// What listens: a TCP port (any local address) or a Unix socket path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Tcp(u16),
    Unix(PathBuf),
}

impl Endpoint {
    /// `HOST:PORT`, `[V6]:PORT` or `unix:PATH`.
    pub fn parse(address: &str) -> Option<Endpoint> {
        if let Some(path) = address.strip_prefix("unix:") {
            return (!path.is_empty()).then(|| Endpoint::Unix(PathBuf::from(path)));
        }
        let (_, port) = address.rsplit_once(':')?;
        port.parse().ok().filter(|&p| p != 0).map(Endpoint::Tcp)
    }

    /// The name of this endpoint's token file.
    pub fn token_file_name(&self) -> String {
        match self {
            Endpoint::Tcp(port) => token_file::tcp_file_name(*port),
            Endpoint::Unix(path) => token_file::unix_file_name(path),
        }
    }
}

/// The start time (field 22) of the process whose `/proc/<pid>/stat` is `stat`; `None` for a
/// zombie or text that is not a stat line.
pub fn start_of(stat: &str) -> Option<u64> {
    // The command (field 2) is in parentheses and may itself hold spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    // `rest` starts at field 3 (state), so field 22 is the 19th after it.
    fields.nth(18)?.parse().ok()
}

/// The listening sockets of this network namespace: each kind read the first time an endpoint
/// of its kind is asked about. Why lazily: reading `/proc/net/tcp` walks every TCP socket of
/// the machine (2.5 ms a `read` here, three reads for the two files: about 7 ms of every
/// agent's start-up sweep once any record was in the directory, BENCHMARKS.md "Real
/// programs"), and a sweep asks about TCP only for a record of a live process that says it
/// listens on a port, or a token file that may name one.
#[derive(Default)]
pub struct Listening {
    unix: OnceCell<HashSet<PathBuf>>,
    tcp: OnceCell<HashSet<u16>>,
    /// A path's text (empty when it cannot be read); none: nothing listens.
    read: Option<ReadProc>,
}

type ReadProc = Box<dyn Fn(&str) -> String>;

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening")
            .field("unix", &self.unix.get())
            .field("tcp", &self.tcp.get())
            .finish_non_exhaustive()
    }
}

impl Listening {
    /// From the text of `/proc/net/unix` and of `/proc/net/tcp` and `/proc/net/tcp6`.
    pub fn parse(unix: &str, tcp: &[&str]) -> Listening {
        Listening {
            unix: OnceCell::from(parse_unix(unix)),
            tcp: OnceCell::from(parse_tcp(tcp)),
            read: None,
        }
    }

    /// Read through `read` (a path's text, empty when it cannot be read) as it is asked.
    pub fn lazy(read: impl Fn(&str) -> String + 'static) -> Listening {
        Listening {
            read: Some(Box::new(read)),
            ..Listening::default()
        }
    }

    pub fn has(&self, endpoint: &Endpoint) -> bool {
        let read = |path: &str| self.read.as_ref().map(|r| r(path)).unwrap_or_default();
        match endpoint {
            Endpoint::Tcp(port) => self
                .tcp
                .get_or_init(|| parse_tcp(&[&read("/proc/net/tcp"), &read("/proc/net/tcp6")]))
                .contains(port),
            Endpoint::Unix(path) => self
                .unix
                .get_or_init(|| parse_unix(&read("/proc/net/unix")))
                .contains(path),
        }
    }
}

/// The listening Unix sockets of the text of `/proc/net/unix`.
fn parse_unix(unix: &str) -> HashSet<PathBuf> {
    // "Num RefCount Protocol Flags Type St Inode Path": flag __SO_ACCEPTCON (0x10000)
    // marks a listening socket; the path is the rest of the line (it may hold spaces).
    unix.lines()
        .skip(1)
        .filter_map(|line| {
            let mut rest = line.trim_start();
            let mut fields = Vec::with_capacity(7);
            for _ in 0..7 {
                let (field, after) = rest.split_once(char::is_whitespace)?;
                fields.push(field);
                rest = after.trim_start();
            }
            let flags = u32::from_str_radix(fields[3], 16).ok()?;
            (flags & 0x10000 != 0 && rest.starts_with('/')).then(|| PathBuf::from(rest))
        })
        .collect()
}

/// The listening TCP ports of the texts of `/proc/net/tcp` and `/proc/net/tcp6`.
fn parse_tcp(tcp: &[&str]) -> HashSet<u16> {
    // "sl local_address rem_address st …": state 0A is LISTEN; the port is hex after ':'.
    tcp.iter()
        .flat_map(|text| text.lines().skip(1))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            let (_, port) = local.rsplit_once(':')?;
            (state == "0A")
                .then(|| u16::from_str_radix(port, 16).ok())
                .flatten()
        })
        .collect()
}

/// What a file of a token directory is, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Record(u32),
    Socket,
    Token,
    /// `.<name>.<pid>.tmp`: a file being written by process pid.
    Temp(u32),
    Other,
}

fn kind(name: &str) -> Kind {
    let pid_of = |s: &str| s.parse::<u32>().ok();
    if let Some(pid) = name
        .strip_prefix("pid-")
        .and_then(|n| n.strip_suffix(".agent"))
        .and_then(pid_of)
    {
        return Kind::Record(pid);
    }
    if (name.starts_with("pid-") || name.starts_with("run-")) && name.ends_with(".sock") {
        return Kind::Socket;
    }
    if (name.starts_with("tcp-") || name.starts_with("unix-")) && name.ends_with(".token") {
        return Kind::Token;
    }
    if let Some(pid) = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .and_then(|n| n.rsplit_once('.'))
        .and_then(|(_, pid)| pid_of(pid))
    {
        return Kind::Temp(pid);
    }
    Kind::Other
}

/// The endpoint a token file's name stands for, when the name says it (a long Unix path is
/// named by a hash, which does not).
fn endpoint_of_token(name: &str) -> Option<Endpoint> {
    let stem = name.strip_suffix(".token")?;
    if let Some(port) = stem.strip_prefix("tcp-") {
        return port.parse().ok().map(Endpoint::Tcp);
    }
    let escaped = stem.strip_prefix("unix-")?;
    if !escaped.starts_with("%2F") {
        return None;
    }
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut rest = escaped.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(Endpoint::Unix(PathBuf::from(std::ffi::OsString::from_vec(
        bytes,
    ))))
}

/// What [`plan`] reads through its caller.
pub trait Probe {
    /// The contents of file `name` of the directory, if readable.
    fn read(&mut self, name: &str) -> Option<String>;
    /// The contents of `/proc/<pid>/stat`, if the process exists.
    fn stat(&mut self, pid: u32) -> Option<String>;
}

/// What a sweep found: the live agents, and the files of the gone ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The records of live agents, by pid.
    pub live: Vec<Record>,
    /// Names of files of `dir` to remove.
    pub remove: Vec<String>,
}

/// Decides, for the files `names` of token directory `dir`, which agents are alive and which
/// files belong to nothing alive (see the module docs).
pub fn plan<P: Probe>(dir: &Path, names: &[String], listening: &Listening, probe: &mut P) -> Plan {
    let mut starts: HashMap<u32, Option<u64>> = HashMap::new();
    let mut start = |probe: &mut P, pid: u32| {
        *starts
            .entry(pid)
            .or_insert_with(|| probe.stat(pid).as_deref().and_then(start_of))
    };
    let mut plan = Plan::default();
    // Token files and sockets of the directory that a live record names, and what the token
    // files of dead records named (a hashed name does not say it).
    let mut claimed: HashSet<String> = HashSet::new();
    let mut named_by_dead: HashMap<String, Endpoint> = HashMap::new();
    let in_dir = |endpoint: &Endpoint| match endpoint {
        Endpoint::Unix(path) if path.parent() == Some(dir) => path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string),
        _ => None,
    };
    for name in names {
        let Kind::Record(pid) = kind(name) else {
            continue;
        };
        let record = probe.read(name).and_then(|text| Record::parse(&text));
        let alive = start(probe, pid);
        match record {
            Some(r) if r.pid == pid && alive == Some(r.start) && listening.has(&r.endpoint()) => {
                let endpoint = r.endpoint();
                claimed.insert(name.clone());
                claimed.insert(endpoint.token_file_name());
                claimed.extend(in_dir(&endpoint));
                plan.live.push(r);
            }
            Some(r) => {
                let endpoint = r.endpoint();
                named_by_dead.insert(endpoint.token_file_name(), endpoint);
                plan.remove.push(name.clone());
            }
            // Not a record (it is written whole, by rename): garbage once its process is gone.
            None if alive.is_none() => plan.remove.push(name.clone()),
            None => {}
        }
    }
    for name in names {
        if claimed.contains(name) {
            continue;
        }
        let gone = match kind(name) {
            Kind::Socket => !listening.has(&Endpoint::Unix(dir.join(name))),
            Kind::Token => named_by_dead
                .get(name)
                .cloned()
                .or_else(|| endpoint_of_token(name))
                .is_some_and(|endpoint| !listening.has(&endpoint)),
            Kind::Temp(pid) => start(probe, pid).is_none(),
            Kind::Record(_) | Kind::Other => false,
        };
        if gone {
            plan.remove.push(name.clone());
        }
    }
    plan.live.sort_by_key(|r| r.pid);
    plan.remove.sort();
    plan
}

/// The real directory and `/proc`.
struct Disk<'a> {
    dir: &'a Path,
}

impl Probe for Disk<'_> {
    fn read(&mut self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name)).ok()
    }
    fn stat(&mut self, pid: u32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
    }
}

/// The names of the files of `dir` (none when it cannot be read).
fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The live agents of `dir`, and the files [`sweep`] would remove; reads only.
pub fn survey(dir: &Path) -> Plan {
    let names = names(dir);
    let listening = Listening::lazy(|path| std::fs::read_to_string(path).unwrap_or_default());
    plan(dir, &names, &listening, &mut Disk { dir })
}

/// [`survey`], then removes the files of the gone; the caller holds [`lock`]. Returns the
/// live agents and the files removed.
pub fn sweep(dir: &Path) -> Plan {
    let mut plan = survey(dir);
    plan.remove
        .retain(|name| std::fs::remove_file(dir.join(name)).is_ok());
    plan
}

/// Takes the lock of `dir` (an exclusive `flock` on its [`LOCK_FILE`], created 0600 when
/// missing), waiting at most `patience`; the lock is held until the file is dropped. `None`
/// when the directory has no lock file to open or someone held it all that time (a stopped
/// process, say): callers then do without, since the lock only narrows races.
pub fn lock(dir: &Path, patience: Duration) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join(LOCK_FILE))
        .ok()?;
    let started = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < patience => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "/run/user/1000/heaptui";

    fn stat(pid: u32, state: &str, start: u64) -> String {
        // Fields 3.. of a real line, with a command holding a space and a parenthesis.
        let mut fields = vec![state.to_string()];
        fields.extend((4..22).map(|i| i.to_string()));
        fields.push(start.to_string());
        fields.extend((23..53).map(|i| i.to_string()));
        format!("{pid} (my (prog) x) {}", fields.join(" "))
    }

    struct Fake {
        files: HashMap<String, String>,
        procs: HashMap<u32, String>,
    }

    impl Probe for Fake {
        fn read(&mut self, name: &str) -> Option<String> {
            self.files.get(name).cloned()
        }
        fn stat(&mut self, pid: u32) -> Option<String> {
            self.procs.get(&pid).cloned()
        }
    }

    fn record(pid: u32, start: u64, address: &str) -> Record {
        Record {
            pid,
            start,
            address: address.to_string(),
            quiet: false,
        }
    }

    #[test]
    fn records_read_back_what_was_written() {
        let r = record(42, 987_654, "unix:/run/user/1000/heaptui/pid-42.sock");
        assert_eq!(Record::parse(&r.to_text()), Some(r.clone()));
        let later = format!("{}agent 0.2.0\n", r.to_text());
        assert_eq!(Record::parse(&later), Some(r.clone()));
        let quiet = Record { quiet: true, ..r };
        assert_eq!(Record::parse(&quiet.to_text()), Some(quiet));
        for bad in [
            "",
            "heaptui-agent 2\npid 1\nstart 1\naddress :1\n",
            "heaptui-agent 1\npid x\nstart 1\naddress 127.0.0.1:1\n",
            "heaptui-agent 1\npid 1\nstart 1\naddress nowhere\n",
            "heaptui-agent 1\npid 1\nstart 1\n",
        ] {
            assert_eq!(Record::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_start_time_is_field_22_and_zombies_have_none() {
        assert_eq!(start_of(&stat(7, "S", 123_456)), Some(123_456));
        assert_eq!(start_of(&stat(7, "Z", 123_456)), None);
        assert_eq!(start_of("7 (short) S 1 2"), None);
        assert_eq!(start_of("garbage"), None);
    }

    #[test]
    fn listening_sockets_are_read_from_proc_net() {
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 1001 /run/user/1000/heaptui/pid-1.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 1002 /tmp/with space.sock\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 1003 /run/connected.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 1004 @abstract\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 1005\n";
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue\n\
            0: 0100007F:1F40 00000000:0000 0A 00000000:00000000\n\
            1: 0100007F:1F41 0100007F:9C40 01 00000000:00000000\n";
        let tcp6 = "  sl  local_address rem_address st\n\
            0: 00000000000000000000000001000000:2328 00000000000000000000000000000000:0000 0A\n";
        let l = Listening::parse(unix, &[tcp, tcp6]);
        assert!(l.has(&Endpoint::Unix("/run/user/1000/heaptui/pid-1.sock".into())));
        assert!(l.has(&Endpoint::Unix("/tmp/with space.sock".into())));
        assert!(!l.has(&Endpoint::Unix("/run/connected.sock".into())));
        assert!(l.has(&Endpoint::Tcp(8000)));
        assert!(l.has(&Endpoint::Tcp(9000)));
        assert!(!l.has(&Endpoint::Tcp(8001)));
    }

    #[test]
    fn proc_net_is_read_only_for_what_a_sweep_asks_about() {
        let dir = Path::new(DIR);
        // The paths read for a directory of `files` where the processes `procs` run.
        let reads = |files: &[(&str, String)], procs: &[(u32, u64)]| {
            let read = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let log = read.clone();
            let listening = Listening::lazy(move |path| {
                log.borrow_mut().push(path.to_string());
                match path {
                    "/proc/net/unix" => format!(
                        "Num RefCount Protocol Flags Type St Inode Path\n\
                         0000000000000000: 00000002 00000000 00010000 0001 01 1001 {DIR}/pid-5.sock\n"
                    ),
                    "/proc/net/tcp" => "  sl  local_address rem_address   st\n\
                        0: 0100007F:1F40 00000000:0000 0A\n"
                        .to_string(),
                    _ => String::new(),
                }
            });
            let mut probe = Fake {
                files: files
                    .iter()
                    .map(|(n, t)| (n.to_string(), t.clone()))
                    .collect(),
                procs: procs.iter().map(|&(p, t)| (p, stat(p, "S", t))).collect(),
            };
            let names: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
            let plan = plan(dir, &names, &listening, &mut probe);
            (read.take(), plan)
        };
        fn file(name: &str) -> (&str, String) {
            (name, String::new())
        }
        let rec = |pid: u32, address: &str| {
            (
                format!("pid-{pid}.agent"),
                record(pid, 100, address).to_text(),
            )
        };
        // Logs, policy files, temporary files: nothing to ask /proc/net about.
        let (read, _) = reads(
            &[
                file("demo-1.log"),
                file("demo-policy.toml"),
                file(".pid-3.agent.3.tmp"),
            ],
            &[],
        );
        assert!(read.is_empty(), "{read:?}");
        // A socket file: only Unix sockets are asked about.
        let (read, plan) = reads(&[file("pid-5.sock"), file("demo-1.log")], &[]);
        assert_eq!(read, ["/proc/net/unix"]);
        assert!(plan.remove.is_empty(), "pid-5.sock listens");
        // The record of a process that is gone: nothing is asked, it goes.
        let (name, text) = rec(7, "127.0.0.1:8000");
        let (read, plan) = reads(&[(name.as_str(), text)], &[]);
        assert!(read.is_empty(), "{read:?}");
        assert_eq!(plan.remove, std::slice::from_ref(&name));
        // A live agent on a Unix socket: only Unix sockets.
        let (name, text) = rec(5, &format!("unix:{DIR}/pid-5.sock"));
        let (read, plan) = reads(&[(name.as_str(), text)], &[(5, 100)]);
        assert_eq!(read, ["/proc/net/unix"]);
        assert_eq!(plan.live.len(), 1);
        // A live agent on a TCP port, and a token file naming one: TCP only.
        let (name, text) = rec(6, "127.0.0.1:8000");
        let (read, plan) = reads(&[(name.as_str(), text)], &[(6, 100)]);
        assert_eq!(read, ["/proc/net/tcp", "/proc/net/tcp6"]);
        assert_eq!(plan.live.len(), 1);
        let (read, plan) = reads(&[file("tcp-8001.token")], &[]);
        assert_eq!(read, ["/proc/net/tcp", "/proc/net/tcp6"]);
        assert_eq!(plan.remove, ["tcp-8001.token"]);
    }

    #[test]
    fn token_names_say_their_endpoint_unless_hashed() {
        assert_eq!(
            endpoint_of_token("tcp-8000.token"),
            Some(Endpoint::Tcp(8000))
        );
        let path = Path::new("/run/user/1000/app sock");
        assert_eq!(
            endpoint_of_token(&token_file::unix_file_name(path)),
            Some(Endpoint::Unix(path.into()))
        );
        let long = format!("/{}", "x".repeat(300));
        assert_eq!(
            endpoint_of_token(&token_file::unix_file_name(Path::new(&long))),
            None
        );
    }

    /// A directory with: a live agent on TCP 8000; a live fork child on its pid socket; a
    /// killed agent on a run socket; a reused pid; an exec'd process whose new image has no
    /// agent; an agent older than records, alive; one of those, dead; a dead writer's
    /// temporary file; a user file.
    #[test]
    fn a_sweep_keeps_the_living_and_removes_the_files_of_the_gone() {
        let dir = Path::new(DIR);
        let sock = |name: &str| format!("unix:{DIR}/{name}");
        let records = [
            record(10, 100, "127.0.0.1:8000"),
            record(11, 110, &sock("pid-11.sock")),
            record(12, 120, &sock("run-99.sock")),
            record(13, 130, &sock("pid-13.sock")),
            record(14, 140, "127.0.0.1:8001"),
        ];
        let mut files: HashMap<String, String> = records
            .iter()
            .map(|r| (record_name(r.pid), r.to_text()))
            .collect();
        files.insert("pid-15.agent".into(), "not a record".into());
        let procs = HashMap::from([
            (10, stat(10, "S", 100)),
            (11, stat(11, "R", 110)),
            // 12 is gone; 13 is another process now; 14 exec'd (same start, socket closed).
            (13, stat(13, "S", 999)),
            (14, stat(14, "S", 140)),
        ]);
        let listening = Listening::parse(
            &format!(
                "h\n0: 2 0 00010000 0001 01 1 {DIR}/pid-11.sock\n0: 2 0 00010000 0001 01 2 {DIR}/run-7.sock\n"
            ),
            &["h\n0: 0100007F:1F40 00000000:0000 0A\n0: 0100007F:2328 00000000:0000 0A\n"],
        );
        let mut names: Vec<String> = files.keys().cloned().collect();
        for r in &records {
            names.push(r.endpoint().token_file_name());
        }
        names.extend(
            [
                "pid-11.sock",
                "run-99.sock",
                "pid-13.sock",
                "run-7.sock",
                "unix-%2Frun%2Fuser%2F1000%2Fheaptui%2Frun-7.sock.token",
                "tcp-9000.token",
                "tcp-9001.token",
                ".tcp-8002.token.12.tmp",
                ".tcp-8003.token.10.tmp",
                "run-5.log",
                ".lock",
            ]
            .map(String::from),
        );
        let mut probe = Fake { files, procs };
        let plan = plan(dir, &names, &listening, &mut probe);
        assert_eq!(
            plan.live,
            vec![records[0].clone(), records[1].clone()],
            "{plan:#?}"
        );
        let mut expected: Vec<String> = [
            "pid-12.agent",
            "pid-15.agent",
            "pid-13.agent",
            "pid-14.agent",
            "run-99.sock",
            "pid-13.sock",
            "tcp-8001.token",
            "tcp-9001.token",
            ".tcp-8002.token.12.tmp",
        ]
        .map(String::from)
        .into();
        expected.push(records[2].endpoint().token_file_name());
        expected.push(records[3].endpoint().token_file_name());
        expected.sort();
        assert_eq!(plan.remove, expected);
        // What is not a record is left alone while its process runs.
        let mut probe = Fake {
            files: HashMap::from([("pid-15.agent".into(), "?".into())]),
            procs: HashMap::from([(15, stat(15, "S", 150))]),
        };
        let unknown = super::plan(
            dir,
            &["pid-15.agent".to_string()],
            &Listening::default(),
            &mut probe,
        );
        assert_eq!(unknown, Plan::default());
    }
}
