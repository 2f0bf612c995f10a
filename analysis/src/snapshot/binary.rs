//! The compact binary snapshot: what `heaptui snapshot` and the agent write.
//!
//! Layout: the 12-byte [`MAGIC`] `HEAPTUI\0SNAP`, the format version as a little-endian `u32`
//! ([`BINARY_VERSION`]), then the [`HeapGraph`] as one bincode 2 payload in the standard
//! configuration (little-endian, variable-length integers, so small sizes, ids and indices
//! take one byte). Nothing may follow the payload.
//!
//! Decoding never trusts the file: the payload is decoded with a byte limit derived from its
//! length, trailing bytes are refused, and the decoded graph must pass
//! [`HeapGraph::validate`] before anyone sees it. This module must never hand out a graph
//! that was not validated.

use std::io::{BufWriter, Write};

use bincode::config;
use bincode::error::DecodeError;
use serde::{Deserialize, Serialize, Serializer};

use super::SnapshotError;
use crate::graph::{
    Edges, Frame, HeapGraph, ObjectIndex, Objects, Process, Site, Thread, ThreadState,
};

/// The first bytes of every binary snapshot.
pub const MAGIC: [u8; 12] = *b"HEAPTUI\0SNAP";

/// The binary format version this build reads and writes. Bump it on any change of the
/// payload's layout (the wire types below, and the serde layout of `Process`, `Site` and
/// `Frame` that they embed).
pub const BINARY_VERSION: u32 = 1;

const HEADER_LEN: usize = MAGIC.len() + 4;

/// Little-endian, variable-length integers, no limit (limits are added when decoding).
fn encoding() -> config::Configuration {
    config::standard()
}

/// Writes `graph` in the binary form. The graph is validated first, so a file this writes
/// always reads back.
pub fn write_binary(graph: &HeapGraph, out: impl Write) -> Result<(), SnapshotError> {
    graph.validate()?;
    write_unchecked(graph, out)
}

fn write_unchecked(graph: &HeapGraph, out: impl Write) -> Result<(), SnapshotError> {
    let mut out = BufWriter::with_capacity(1 << 20, out);
    out.write_all(&MAGIC)?;
    out.write_all(&BINARY_VERSION.to_le_bytes())?;
    bincode::serde::encode_into_std_write(WireOut::of(graph), &mut out, encoding()).map_err(
        |e| match e {
            bincode::error::EncodeError::Io { inner, .. } => SnapshotError::Io(inner),
            other => SnapshotError::Encode(other.to_string()),
        },
    )?;
    out.flush()?;
    Ok(())
}

// The payload. The graph's columns are written as they are, except where a transform makes
// the varints short: ids, addresses and sequence numbers as wrapping differences from the
// previous object's (zigzag varints; agents allocate ids in order and addresses cluster),
// sites shifted by one so that "no site" takes one byte, and the edge list as one degree per
// object instead of cumulative offsets. Thread state is an externally tagged enum here
// because bincode cannot decode the graph's adjacently tagged `ThreadState`.

#[derive(Serialize)]
struct WireOut<'a> {
    process: &'a Process,
    sites: &'a [Site],
    ids: Deltas<'a>,
    addrs: Deltas<'a>,
    sizes: &'a [u64],
    object_sites: ShiftedSites<'a>,
    object_threads: &'a [u32],
    seqs: Deltas<'a>,
    degrees: Degrees<'a>,
    targets: &'a [ObjectIndex],
    threads: Vec<WireThread<&'a str, &'a [Frame]>>,
    globals: &'a [ObjectIndex],
}

#[derive(Deserialize)]
struct WireIn {
    process: Process,
    sites: Vec<Site>,
    ids: Vec<i64>,
    addrs: Vec<i64>,
    sizes: Vec<u64>,
    object_sites: Vec<u32>,
    object_threads: Vec<u32>,
    seqs: Vec<i64>,
    degrees: Vec<u32>,
    targets: Vec<ObjectIndex>,
    threads: Vec<WireThread<String, Vec<Frame>>>,
    globals: Vec<ObjectIndex>,
}

#[derive(Serialize, Deserialize)]
struct WireThread<S, F> {
    tid: u32,
    name: S,
    state: WireState<S>,
    frames: F,
}

#[derive(Serialize, Deserialize)]
enum WireState<S> {
    Stopped,
    NotStoppable(S),
}

impl<'a> WireOut<'a> {
    fn of(g: &'a HeapGraph) -> Self {
        let o = g.objects();
        WireOut {
            process: &g.process,
            sites: &g.sites,
            ids: Deltas(&o.id),
            addrs: Deltas(&o.addr),
            sizes: &o.size,
            object_sites: ShiftedSites(&o.site),
            object_threads: &o.thread,
            seqs: Deltas(&o.seq),
            degrees: Degrees(g.edges()),
            targets: g.edges().targets(),
            threads: g
                .threads
                .iter()
                .map(|t| WireThread {
                    tid: t.tid,
                    name: t.name.as_str(),
                    state: match &t.state {
                        ThreadState::Stopped => WireState::Stopped,
                        ThreadState::NotStoppable(r) => WireState::NotStoppable(r.as_str()),
                    },
                    frames: t.frames.as_slice(),
                })
                .collect(),
            globals: &g.globals,
        }
    }
}

struct Deltas<'a>(&'a [u64]);

impl Serialize for Deltas<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut previous = 0u64;
        s.collect_seq(self.0.iter().map(|&v| {
            let delta = v.wrapping_sub(previous) as i64;
            previous = v;
            delta
        }))
    }
}

/// Undoes [`Deltas`] in place (the `i64` → `u64` collect reuses the allocation).
fn undelta(deltas: Vec<i64>) -> Vec<u64> {
    let mut previous = 0u64;
    deltas
        .into_iter()
        .map(|d| {
            previous = previous.wrapping_add(d as u64);
            previous
        })
        .collect()
}

struct ShiftedSites<'a>(&'a [u32]);

impl Serialize for ShiftedSites<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&site| site.wrapping_add(1)))
    }
}

struct Degrees<'a>(&'a Edges);

impl Serialize for Degrees<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        s.collect_seq((0..e.sources() as ObjectIndex).map(|o| e.of(o).len() as u32))
    }
}

impl WireIn {
    /// Rebuilds the graph; [`HeapGraph::new`] checks every invariant.
    fn into_graph(self) -> Result<HeapGraph, SnapshotError> {
        let n = self.ids.len();
        if self.degrees.len() != n {
            return Err(SnapshotError::Decode(format!(
                "{} objects but {} edge degrees (file damaged)",
                n,
                self.degrees.len()
            )));
        }
        let listed: u64 = self.degrees.iter().map(|&d| u64::from(d)).sum();
        if listed != self.targets.len() as u64 {
            return Err(SnapshotError::Decode(format!(
                "the edge degrees add up to {listed} but there are {} edge targets (file damaged)",
                self.targets.len()
            )));
        }
        let mut edges = Edges::with_capacity(n, self.targets.len());
        let mut start = 0usize;
        for &d in &self.degrees {
            let end = start + d as usize;
            edges.push(self.targets[start..end].iter().copied());
            start = end;
        }
        drop(self.targets);
        let objects = Objects {
            id: undelta(self.ids),
            addr: undelta(self.addrs),
            size: self.sizes,
            site: self
                .object_sites
                .into_iter()
                .map(|s| s.wrapping_sub(1))
                .collect(),
            thread: self.object_threads,
            seq: undelta(self.seqs),
        };
        let threads = self
            .threads
            .into_iter()
            .map(|t| Thread {
                tid: t.tid,
                name: t.name,
                state: match t.state {
                    WireState::Stopped => ThreadState::Stopped,
                    WireState::NotStoppable(r) => ThreadState::NotStoppable(r),
                },
                frames: t.frames,
            })
            .collect();
        Ok(HeapGraph::new(
            self.process,
            self.sites,
            objects,
            edges,
            threads,
            self.globals,
        )?)
    }
}

/// Whether `bytes` were meant to be a binary snapshot (they start like [`MAGIC`]), so that a
/// damaged header is reported as such rather than as "not a snapshot".
pub(crate) fn looks_like_binary(bytes: &[u8]) -> bool {
    bytes.starts_with(b"HEAPTUI") || (!bytes.is_empty() && MAGIC.starts_with(bytes))
}

/// Reads a binary snapshot: header, payload, then the graph's invariants.
pub fn read_binary(bytes: &[u8]) -> Result<HeapGraph, SnapshotError> {
    if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
        return Err(SnapshotError::Truncated {
            what: format!("header ({} of {HEADER_LEN} bytes)", bytes.len()),
        });
    }
    if !bytes.starts_with(&MAGIC) {
        let found = &bytes[..bytes.len().min(MAGIC.len())];
        return Err(SnapshotError::BadMagic {
            expected: MAGIC.escape_ascii().to_string(),
            found: found.escape_ascii().to_string(),
        });
    }
    let Some(version) = bytes.get(MAGIC.len()..HEADER_LEN) else {
        return Err(SnapshotError::Truncated {
            what: format!("header ({} of {HEADER_LEN} bytes)", bytes.len()),
        });
    };
    let version = u32::from_le_bytes(version.try_into().expect("slice of 4 bytes"));
    if version != BINARY_VERSION {
        return Err(SnapshotError::BinaryVersion { found: version });
    }
    let payload = &bytes[HEADER_LEN..];
    let (wire, used) = decode_limited(payload).map_err(|e| decode_error(e, payload.len()))?;
    if used != payload.len() {
        return Err(SnapshotError::TrailingBytes {
            count: payload.len() - used,
        });
    }
    wire.into_graph()
}

/// Decodes the payload with a limit derived from its length.
///
/// bincode charges the limit, before allocating, with the in-memory size of everything it
/// decodes: 8 bytes for a `u64` however short its varint, and a string's length for the
/// string. Every integer takes at least one byte of input and none is wider than 8 bytes in
/// memory, and a string takes at least its length, so an honest payload never charges more
/// than [`CLAIM_PER_BYTE`] times its length. A forged length (a string of 2^60 bytes) is
/// refused instead of allocated. bincode takes the limit as a const generic, hence the tiers.
/// Sequences are not charged: serde preallocates at most 1 MiB for them and every element
/// consumes input, so they cannot outgrow the file by more than a constant factor.
fn decode_limited(payload: &[u8]) -> Result<(WireIn, usize), DecodeError> {
    const MIB: usize = 1 << 20;
    match payload.len().saturating_mul(CLAIM_PER_BYTE) {
        n if n <= MIB => decode::<MIB>(payload),
        n if n <= 64 * MIB => decode::<{ 64 * MIB }>(payload),
        n if n <= 4096 * MIB => decode::<{ 4096 * MIB }>(payload),
        n if n <= 64 * 4096 * MIB => decode::<{ 64 * 4096 * MIB }>(payload),
        n if n <= 4096 * 4096 * MIB => decode::<{ 4096 * 4096 * MIB }>(payload),
        _ => Err(DecodeError::LimitExceeded),
    }
}

/// The most in-memory bytes one payload byte can honestly stand for (a one-byte varint
/// decoded as a `u64` or a sequence length).
const CLAIM_PER_BYTE: usize = 8;

fn decode<const LIMIT: usize>(payload: &[u8]) -> Result<(WireIn, usize), DecodeError> {
    bincode::serde::decode_from_slice(payload, encoding().with_limit::<LIMIT>())
}

fn decode_error(e: DecodeError, payload_len: usize) -> SnapshotError {
    match e {
        DecodeError::UnexpectedEnd { additional } => SnapshotError::Truncated {
            what: format!(
                "graph: the {payload_len}-byte payload ends at least {additional} bytes early"
            ),
        },
        DecodeError::LimitExceeded => SnapshotError::Decode(format!(
            "a length field claims more than the {payload_len}-byte payload holds (file damaged)"
        )),
        other => SnapshotError::Decode(format!("damaged payload: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{NO_SITE, ObjectRecord, Process};

    fn graph() -> HeapGraph {
        let mut objects = Objects::default();
        let mut edges = Edges::default();
        for (id, site) in [(1, 0), (2, NO_SITE)] {
            objects.push(ObjectRecord {
                id,
                addr: 0x7f00_0000_0000 + id * 64,
                size: 48,
                site,
                thread: 7,
                seq: id,
            });
            edges.push([0]);
        }
        let site = Site {
            id: 9,
            frames: vec!["f".into()],
        };
        let thread = Thread {
            tid: 7,
            frames: vec![Frame {
                refs: vec![1],
                ..Default::default()
            }],
            ..Default::default()
        };
        HeapGraph::new(
            Process::default(),
            vec![site],
            objects,
            edges,
            vec![thread],
            vec![],
        )
        .unwrap()
    }

    #[test]
    fn a_decoded_graph_that_breaks_an_invariant_is_refused() {
        let mut g = graph();
        g.threads[0].frames[0].refs.push(2);
        assert!(
            write_binary(&g, Vec::new()).is_err(),
            "the writer validates"
        );
        let mut forged = Vec::new();
        write_unchecked(&g, &mut forged).unwrap();
        let e = read_binary(&forged).unwrap_err().to_string();
        assert_eq!(
            e,
            "the snapshot's graph is inconsistent: thread 7 frame 0 refers to object index 2, \
             but there are only 2 objects"
        );
    }

    /// Graphs whose payloads fall just under and over each of the smaller limit tiers read
    /// back: the limit must follow what bincode charges, not the payload's length.
    #[test]
    fn payloads_of_every_size_read_back() {
        for n in [1, 1_000, 18_000, 20_000, 100_000, 200_000] {
            let mut objects = Objects::default();
            let mut edges = Edges::default();
            for id in 0..n {
                objects.push(ObjectRecord {
                    id,
                    site: NO_SITE,
                    ..Default::default()
                });
                edges.push([]);
            }
            let g =
                HeapGraph::new(Process::default(), vec![], objects, edges, vec![], vec![]).unwrap();
            let mut bytes = Vec::new();
            write_binary(&g, &mut bytes).unwrap();
            assert_eq!(read_binary(&bytes).unwrap(), g, "{n} objects");
        }
    }

    #[test]
    fn forged_degrees_are_refused() {
        let g = graph();
        let mut wire = WireOut::of(&g);
        let targets = [0, 0, 0];
        wire.targets = &targets;
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&BINARY_VERSION.to_le_bytes());
        forged.extend(bincode::serde::encode_to_vec(wire, encoding()).unwrap());
        assert_eq!(
            read_binary(&forged).unwrap_err().to_string(),
            "binary snapshot: the edge degrees add up to 2 but there are 3 edge targets \
             (file damaged)"
        );
    }

    #[test]
    fn varints_keep_objects_small() {
        // A list of 1000 blocks as an agent sees them: sequential ids and sequence numbers,
        // 47-bit addresses close together. Each column costs a byte per object (the target
        // index up to three), instead of up to nine for a raw 64-bit varint.
        let n = 1000u64;
        let mut objects = Objects::default();
        let mut edges = Edges::default();
        for id in 1..=n {
            objects.push(ObjectRecord {
                id,
                addr: 0x7f3a_1200_0000 + id * 64,
                size: 48,
                site: NO_SITE,
                thread: 7,
                seq: id,
            });
            edges.push([(id % n) as ObjectIndex]);
        }
        let g = HeapGraph::new(Process::default(), vec![], objects, edges, vec![], vec![]).unwrap();
        let mut bytes = Vec::new();
        write_binary(&g, &mut bytes).unwrap();
        assert_eq!(read_binary(&bytes).unwrap(), g);
        let per_object = bytes.len() as f64 / n as f64;
        assert!(per_object < 10.5, "{per_object} bytes per object");
    }
}
