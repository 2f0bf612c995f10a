//! The offline commands: those that work on a saved snapshot or a recording rather than a
//! live agent (`report`, and the recording source of `open`).
//!
//! This module owns turning a snapshot file into a heap graph and printing what the engine
//! makes of it. It never analyses (that is `heaptui_analysis`) and never talks to an agent.

pub mod export;
pub mod recording;
pub mod report;
pub mod table;
mod text;
pub mod views;

use std::path::Path;

use heaptui_analysis::HeapGraph;
use heaptui_analysis::snapshot;

/// Loads the snapshot file a SOURCE names (live addresses never get here: `main` sends them
/// to the client, `client::Address::looks_like` deciding).
pub fn load(source: &Path) -> anyhow::Result<HeapGraph> {
    Ok(snapshot::read_file(source)?)
}

/// Writes `bytes` to `path` under a temporary name first, then renames it, so `path` is never
/// half written (`heaptui snapshot`).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow::anyhow!("cannot write {}: {e}", path.display())
        })
}
