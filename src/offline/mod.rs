//! The offline commands: those that work on a saved snapshot rather than a live agent
//! (`report` for now; `open` and `snapshot` later).
//!
//! This module owns turning a SOURCE argument into a heap graph. It never analyses (that is
//! `heaptui_analysis`) and never talks to an agent.

pub mod export;
pub mod report;
mod table;
mod text;

use std::path::Path;

use anyhow::bail;
use heaptui_analysis::HeapGraph;
use heaptui_analysis::snapshot;

/// Loads the graph a SOURCE names. A path to an existing file is read as a snapshot; a SOURCE
/// that is no file but looks like an agent's address is refused with a clear message, since
/// this build cannot connect to agents yet.
pub fn load(source: &Path) -> anyhow::Result<HeapGraph> {
    if let Some(address) = source.to_str().filter(|s| looks_like_address(s))
        && !source.exists()
    {
        bail!(
            "cannot connect to {address}: this build of heaptui reads snapshot files only \
             (live sources need the agent client, which is not built yet)"
        );
    }
    Ok(snapshot::read_file(source)?)
}

/// `:PORT`, `HOST:PORT` or `unix:PATH` (SPEC §2), as opposed to a file name.
fn looks_like_address(source: &str) -> bool {
    if source.starts_with("unix:") {
        return true;
    }
    match source.rsplit_once(':') {
        Some((host, port)) => {
            !host.contains('/')
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_told_from_file_names() {
        for address in [
            ":8000",
            "127.0.0.1:8000",
            "localhost:9",
            "[::1]:8000",
            "unix:/tmp/s",
        ] {
            assert!(looks_like_address(address), "{address}");
        }
        for file in ["snap.json", "dir/x:80", "a:b", ":", "host:99999", "x.hsnap"] {
            assert!(!looks_like_address(file), "{file}");
        }
    }

    #[test]
    fn an_address_is_refused_honestly() {
        let e = load(Path::new(":8000")).unwrap_err().to_string();
        assert!(e.starts_with("cannot connect to :8000: "), "{e}");
    }
}
