//! The token file of docs/reference.md §6: a random token, written where only this user can
//! read it, named after the port or socket the agent listens on, so that a local client finds
//! it from the address alone; and beside it the agent's record (`pid-<PID>.agent`, see
//! `heaptui_protocol::token_dir`), so a client finds the agent of a pid.
//!
//! Directory: `$XDG_RUNTIME_DIR/heaptui/` when `XDG_RUNTIME_DIR` is an absolute path, else
//! `/tmp/heaptui-$UID/`, decided once when the agent loads (a fork child uses its parent's);
//! created 0700 and refused when it belongs to someone else or others may enter it. File:
//! `tcp-<port>.token` or `unix-<escaped absolute socket path>.token`, mode 0600, written under
//! a temporary name and renamed, so a client never reads half a token. `heaptui`'s client
//! applies the same rule (`src/client/token.rs`); the live tests check that the two agree.
//!
//! Never: write the token anywhere else, or leave a file readable by others.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use heaptui_protocol::token_dir::{self, Record};
use heaptui_protocol::token_file;

use crate::config::Listen;

/// The directory holding this user's token files, as the environment said when the agent
/// loaded (read once: a fork child must not read the environment, whose lock a thread of its
/// parent may have held).
pub fn directory() -> &'static Path {
    static DIRECTORY: OnceLock<PathBuf> = OnceLock::new();
    DIRECTORY.get_or_init(|| {
        let xdg = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        token_file::directory(xdg.as_deref(), uid)
    })
}

/// The token file's name for a listening address.
pub fn file_name(listen: &Listen) -> String {
    match listen {
        Listen::Tcp(addr) => token_file::tcp_file_name(addr.port()),
        Listen::Unix(path) => token_file::unix_file_name(path),
    }
}

/// 32 random bytes from the kernel, as 64 hex digits.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    let mut got = 0;
    while got < bytes.len() {
        // SAFETY: getrandom writes at most `len - got` bytes into our buffer.
        let n = unsafe { libc::getrandom(bytes[got..].as_mut_ptr().cast(), bytes.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes sure `dir` exists, is ours and is closed to others (0700).
fn private_directory(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != uid {
        return Err(format!(
            "{} is not a directory owned by uid {uid}; refusing to put the token there",
            dir.display()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    Ok(())
}

/// How long an agent waits for the directory's lock (a sweep by `heaptui ps` holds it for a
/// directory listing and a few `/proc` reads) before going on without it.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The token directory, made private, and its lock: held while the agent binds and writes
/// its files, so a sweep never sees it half-started. `None` for the lock when it could not be
/// had in time (the agent goes on: the lock only narrows races).
pub fn open_directory() -> Result<(&'static Path, Option<File>), String> {
    let dir = directory();
    private_directory(dir)?;
    Ok((dir, token_dir::lock(dir, LOCK_PATIENCE)))
}

/// Writes `contents` to `dir/name`, mode 0600, through a temporary file renamed over it; the
/// error names the file as `what`.
fn write_private(dir: &Path, name: &str, contents: &str, what: &str) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {what} {}: {e}", path.display()));
    }
    Ok(path)
}

/// Writes `token` to the token file of `listen`; returns its path.
pub fn write(dir: &Path, listen: &Listen, token: &str) -> Result<PathBuf, String> {
    write_private(
        dir,
        &file_name(listen),
        &format!("{token}\n"),
        "the token file",
    )
}

/// Writes this process's record (`pid-<PID>.agent`): its agent listens at `address`, and has
/// told nobody so when `quiet`.
pub fn write_record(dir: &Path, address: &str, quiet: bool) -> Result<PathBuf, String> {
    let pid = std::process::id();
    let start = own_start().ok_or("cannot read the process start time from /proc/self/stat")?;
    let record = Record {
        pid,
        start,
        address: address.to_string(),
        quiet,
    };
    write_private(
        dir,
        &token_dir::record_name(pid),
        &record.to_text(),
        "the agent record",
    )
}

/// This process's start time (field 22 of `/proc/self/stat`).
fn own_start() -> Option<u64> {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(token_dir::start_of)
}

/// Whether this process's parent runs the agent with a server of its own: its record (its pid,
/// its start time) is in the directory. Under `HEAPTUI_FOLLOW_EXEC` the parent has then said
/// where the programs it starts listen.
pub fn parent_serves(dir: &Path) -> bool {
    // SAFETY: getppid cannot fail.
    let ppid = unsafe { libc::getppid() } as u32;
    let Some(record) = std::fs::read_to_string(dir.join(token_dir::record_name(ppid)))
        .ok()
        .as_deref()
        .and_then(Record::parse)
    else {
        return false;
    };
    let start = std::fs::read_to_string(format!("/proc/{ppid}/stat"))
        .ok()
        .as_deref()
        .and_then(token_dir::start_of);
    record.pid == ppid && Some(record.start) == start
}

/// Where this very process listened, and said so, before an `exec` replaced its program with
/// the agent there too: its record (same pid, same start time, not quiet) is still in the
/// directory.
pub fn said_before_exec(dir: &Path) -> Option<String> {
    let text =
        std::fs::read_to_string(dir.join(token_dir::record_name(std::process::id()))).ok()?;
    let record = Record::parse(&text)?;
    (record.pid == std::process::id() && Some(record.start) == own_start() && !record.quiet)
        .then_some(record.address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_address() {
        let tcp = Listen::Tcp("127.0.0.1:8000".parse().unwrap());
        assert_eq!(file_name(&tcp), "tcp-8000.token");
        let unix = Listen::Unix("/run/user/1000/app sock".into());
        assert_eq!(
            file_name(&unix),
            "unix-%2Frun%2Fuser%2F1000%2Fapp%20sock.token"
        );
        let long = Listen::Unix(format!("/{}", "x".repeat(300)).into());
        let name = file_name(&long);
        assert!(name.len() < 64 && name.starts_with("unix-"), "{name}");
    }

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
