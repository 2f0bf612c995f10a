//! Finding an agent's token (docs/reference.md §6): for a local address, the file the agent wrote
//! under `$XDG_RUNTIME_DIR/heaptui/` or `/tmp/heaptui-$UID/`, named after the port or socket (the
//! same rule as the agent's `server/token.rs`); otherwise the file given with `--token-file`.

use std::path::{Path, PathBuf};

use heaptui_protocol::token_file;

use super::Address;

/// Where the token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// The agent's token file for a local address.
    Discover,
    /// A file the user names (`--token-file`), e.g. copied from a remote machine.
    File(PathBuf),
}

/// This user's token directory.
pub fn directory() -> PathBuf {
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    token_file::directory(xdg.as_deref(), uid())
}

/// The real uid, from /proc (the crate forbids the unsafe a libc call would need).
pub fn uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|u| u.parse().ok()))
        })
        .unwrap_or(0)
}

/// The token file name of an agent listening on `address`.
pub fn file_name(address: &Address) -> String {
    match address {
        Address::Tcp { port, .. } => token_file::tcp_file_name(*port),
        Address::Unix(path) => token_file::unix_file_name(path),
    }
}

/// Reads the token for `address`; the error is one sentence saying what to do.
pub fn read(address: &Address, source: &TokenSource) -> Result<String, String> {
    let path = match source {
        TokenSource::File(path) => path.clone(),
        TokenSource::Discover if address.is_local() => directory().join(file_name(address)),
        TokenSource::Discover => {
            return Err(format!(
                "{address} is not on this machine, so its token file cannot be found: copy the \
                 agent's token file and pass it with --token-file FILE"
            ));
        }
    };
    read_file(&path, address, matches!(source, TokenSource::Discover))
}

fn read_file(path: &Path, address: &Address, discovered: bool) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_string()),
        Ok(_) => Err(format!("the token file {} is empty", path.display())),
        Err(e) if discovered && e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "cannot connect to {address}: no agent token at {} — is the target running with \
             LD_PRELOAD=$(heaptui agent-path) and HEAPTUI_LISTEN={address}?",
            path.display()
        )),
        Err(e) => Err(format!(
            "cannot read the token file {}: {e}",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_agents_rule() {
        assert_eq!(
            file_name(&Address::parse(":8000").unwrap()),
            "tcp-8000.token"
        );
        assert_eq!(
            file_name(&Address::parse("unix:/run/user/1000/app sock").unwrap()),
            "unix-%2Frun%2Fuser%2F1000%2Fapp%20sock.token"
        );
    }

    #[test]
    fn a_remote_address_needs_a_token_file() {
        let e = read(
            &Address::parse("example.com:8000").unwrap(),
            &TokenSource::Discover,
        )
        .unwrap_err();
        assert!(e.contains("--token-file"), "{e}");
    }
}
