//! Snapshot files (docs/reference.md §4): one heap graph, saved so it can be analysed offline.
//!
//! Two encodings of the same [`HeapGraph`]:
//! - JSON `heaptui-snapshot` version 1 ([`json`]), for interchange, hand-written test graphs
//!   and other tools' dumps;
//! - a compact binary form ([`binary`]): a magic header, a format version and a bincode 2
//!   payload; this is what `heaptui snapshot` and the agent write.
//!
//! Readers tell the two apart by content, never by file name, and hand back a graph whose
//! invariants hold ([`HeapGraph::validate`]), so the engine may index without checking. Every
//! error is one line that names the offending place (JSON path, object id, byte offset).
//!
//! This module owns only the file formats. It never analyses, and its only I/O is reading and
//! writing the bytes it is given.

pub mod binary;
pub mod json;

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::graph::{GraphError, HeapGraph};

pub use binary::{
    BINARY_VERSION, MAGIC, OLDEST_BINARY_VERSION, check_binary, write_binary, write_binary_kept,
};
pub use json::{JSON_FORMAT, JSON_VERSION, write_json};

/// Why a snapshot could not be read or written. Each variant is one clear line; paths such as
/// `objects[3].refs[1]` are JSON paths into the file.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// Wraps any other error with the file it came from (what [`read_file`] returns).
    // Not a `source`: the message already includes the inner one, and error reporters that
    // walk the source chain would print it twice.
    #[error("{}: {error}", path.display())]
    File {
        path: PathBuf,
        error: Box<SnapshotError>,
    },
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("empty file: not a heaptui snapshot")]
    Empty,
    #[error(
        "not a heaptui snapshot (neither JSON nor the binary form; it starts with bytes {start})"
    )]
    NotASnapshot { start: String },
    /// Malformed JSON, a missing field or a value of the wrong type; `message` carries serde's
    /// line and column.
    #[error("{}{message}", path_prefix(path))]
    Json { path: String, message: String },
    #[error("format: expected \"{JSON_FORMAT}\", found {found}")]
    Format { found: String },
    #[error("version: unsupported version {found} (this heaptui reads version {JSON_VERSION})")]
    JsonVersion { found: u64 },
    #[error("{path}: duplicate object id {id}")]
    DuplicateObject { path: String, id: u64 },
    #[error("{path}: reference to unknown object id {id}")]
    UnknownObject { path: String, id: u64 },
    #[error("{path}: duplicate site id {id}")]
    DuplicateSite { path: String, id: u64 },
    #[error("{path}: unknown site id {id}")]
    UnknownSite { path: String, id: u64 },
    #[error("{path}: duplicate thread id {tid}")]
    DuplicateThread { path: String, tid: u32 },
    #[error("objects: more than {} objects, heaptui's limit", u32::MAX - 1)]
    TooManyObjects,
    #[error("binary snapshot: wrong magic (expected {expected:?}, found {found:?})")]
    BadMagic { expected: String, found: String },
    #[error(
        "binary snapshot: unsupported version {found} (this heaptui reads versions {OLDEST_BINARY_VERSION} to {BINARY_VERSION})"
    )]
    BinaryVersion { found: u32 },
    #[error("binary snapshot: truncated {what}")]
    Truncated { what: String },
    #[error(
        "binary snapshot: {count} trailing bytes after the graph (file damaged or not a snapshot)"
    )]
    TrailingBytes { count: usize },
    #[error("binary snapshot: {0}")]
    Decode(String),
    #[error("the snapshot's graph is inconsistent: {0}")]
    Invalid(GraphError),
    #[error("cannot write the snapshot: {0}")]
    Encode(String),
}

/// `objects[3].refs: ` for a JSON path; nothing for the document itself. serde_path_to_error
/// writes `?` for a map key it could not read, which says nothing a reader can use.
impl From<GraphError> for SnapshotError {
    fn from(e: GraphError) -> Self {
        SnapshotError::Invalid(e)
    }
}

fn path_prefix(path: &str) -> String {
    let path = path.trim_end_matches('?').trim_end_matches('.');
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

impl SnapshotError {
    /// The error without its [`SnapshotError::File`] wrapper, for callers that match on kinds.
    pub fn kind(&self) -> &SnapshotError {
        match self {
            SnapshotError::File { error, .. } => error.kind(),
            other => other,
        }
    }
}

/// Reads a snapshot in either encoding, told apart by content: the binary form starts with
/// [`MAGIC`], JSON with `{` (after optional whitespace or a UTF-8 byte-order mark).
pub fn read_bytes(bytes: &[u8]) -> Result<HeapGraph, SnapshotError> {
    if bytes.starts_with(&MAGIC) || binary::looks_like_binary(bytes) {
        return binary::read_binary(bytes);
    }
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => json::read_json(text),
        Some(_) => Err(SnapshotError::NotASnapshot {
            start: hex_start(bytes),
        }),
        None => Err(SnapshotError::Empty),
    }
}

/// Checks that [`read_bytes`] would read `bytes` back. A binary snapshot is checked without
/// building its graph ([`binary::check_binary`]); JSON, which no agent sends, is read whole.
pub fn check_bytes(bytes: &[u8]) -> Result<(), SnapshotError> {
    if bytes.starts_with(&MAGIC) || binary::looks_like_binary(bytes) {
        return binary::check_binary(bytes);
    }
    read_bytes(bytes).map(drop)
}

/// Reads a snapshot file in either encoding; errors name the path.
pub fn read_file(path: &Path) -> Result<HeapGraph, SnapshotError> {
    let in_file = |error: SnapshotError| SnapshotError::File {
        path: path.to_path_buf(),
        error: Box::new(error),
    };
    let bytes = std::fs::read(path).map_err(|e| in_file(SnapshotError::Io(e)))?;
    read_bytes(&bytes).map_err(in_file)
}

/// The first few bytes in hex, to show what a file that is not a snapshot starts with.
fn hex_start(bytes: &[u8]) -> String {
    let shown: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    shown.join(" ")
}
