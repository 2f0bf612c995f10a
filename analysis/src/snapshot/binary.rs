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
use serde::{Deserialize, Serialize};

use super::SnapshotError;
use crate::graph::{
    Edges, Frame, GraphError, HeapGraph, NO_SITE, ObjectIndex, Objects, Process, Site, Thread,
    ThreadState, validate_roots,
};
use crate::kept::Kept;

/// The first bytes of every binary snapshot.
pub const MAGIC: [u8; 12] = *b"HEAPTUI\0SNAP";

/// The binary format version this build reads and writes. Bump it on any change of the
/// payload's layout (the wire types below, and the serde layout of `Process`, `Site` and
/// `Frame` that they embed).
///
/// Version 2 added the kinds of references (start or interior): the positions of the interior
/// edges, each frame's interior references and the globals' ones. Version 1 files are still
/// read, every reference a start edge.
pub const BINARY_VERSION: u32 = 2;

/// The oldest version this build still reads.
pub const OLDEST_BINARY_VERSION: u32 = 1;

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
    write_wire(&WireOut::of(graph), out)
}

fn write_wire(wire: &WireOut<'_>, out: impl Write) -> Result<(), SnapshotError> {
    let mut out = BufWriter::with_capacity(1 << 20, out);
    out.write_all(&MAGIC)?;
    out.write_all(&BINARY_VERSION.to_le_bytes())?;
    bincode::serde::encode_into_std_write(wire, &mut out, encoding()).map_err(|e| match e {
        bincode::error::EncodeError::Io { inner, .. } => SnapshotError::Io(inner),
        other => SnapshotError::Encode(other.to_string()),
    })?;
    out.flush()?;
    Ok(())
}

// The payload. The per-object columns and the edge list are packed columns (see
// [`Packed`]): LEB128 varints in one byte string each, so that bincode copies a column in
// one go and a tight loop decodes it, several times faster than one serde call per value.
// Transforms keep the varints short: ids, addresses and sequence numbers are written as
// wrapping differences from the previous object's, zigzag-encoded (agents allocate ids in
// order and addresses cluster); sites are shifted by one so that "no site" takes one byte;
// the edge list is one degree per object instead of cumulative offsets. Threads, frames
// and sites are few and go through serde. Thread state is an externally tagged enum here
// because bincode cannot decode the graph's adjacently tagged `ThreadState`.

#[derive(Serialize)]
struct WireOut<'a> {
    process: &'a Process,
    sites: &'a [Site],
    ids: PackedOut,
    addrs: PackedOut,
    sizes: PackedOut,
    object_sites: PackedOut,
    object_threads: PackedOut,
    seqs: PackedOut,
    degrees: PackedOut,
    targets: PackedOut,
    threads: Vec<WireThread<&'a str, &'a [Frame]>>,
    globals: &'a [ObjectIndex],
    globals_interior: &'a [ObjectIndex],
    /// Positions in `targets` of the interior edges, ascending, as deltas.
    interior_edges: PackedOut,
}

/// Version 2's payload as read.
#[derive(Deserialize)]
struct WireIn<'a> {
    #[serde(borrow)]
    v1: WireInV1<'a, Frame>,
    globals_interior: Vec<ObjectIndex>,
    #[serde(borrow)]
    interior_edges: Packed<'a>,
}

/// A frame of a version 1 file (no interior references).
#[derive(Deserialize)]
struct FrameV1 {
    function: String,
    module: String,
    kind: crate::graph::FrameKind,
    refs: Vec<ObjectIndex>,
}

impl From<FrameV1> for Frame {
    fn from(f: FrameV1) -> Frame {
        Frame {
            function: f.function,
            module: f.module,
            kind: f.kind,
            refs: f.refs,
            interior: Vec::new(),
        }
    }
}

/// Version 1's payload, which version 2's starts with (bincode lays a struct's fields out one
/// after the other, so a nested struct is the same bytes as its fields inline).
#[derive(Deserialize)]
struct WireInV1<'a, F> {
    process: Process,
    sites: Vec<Site>,
    #[serde(borrow)]
    ids: Packed<'a>,
    #[serde(borrow)]
    addrs: Packed<'a>,
    #[serde(borrow)]
    sizes: Packed<'a>,
    #[serde(borrow)]
    object_sites: Packed<'a>,
    #[serde(borrow)]
    object_threads: Packed<'a>,
    #[serde(borrow)]
    seqs: Packed<'a>,
    #[serde(borrow)]
    degrees: Packed<'a>,
    #[serde(borrow)]
    targets: Packed<'a>,
    threads: Vec<WireThread<String, Vec<F>>>,
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
        let e = g.edges();
        let n = o.len();
        WireOut::new(
            &g.process,
            &g.sites,
            &g.threads,
            (&g.globals, &g.globals_interior),
            Columns {
                objects: n,
                id: &|i| o.id[i],
                addr: &|i| o.addr[i],
                size: &|i| o.size[i],
                site: &|i| o.site[i],
                thread: &|i| o.thread[i],
                seq: &|i| o.seq[i],
                degree: &|i| e.of(i as ObjectIndex).len(),
                edges: e.len(),
                targets: &mut e.targets().iter().copied(),
                interior: &|k| e.is_interior(k),
                interior_count: e.interior_count(),
            },
        )
    }

    fn new(
        process: &'a Process,
        sites: &'a [Site],
        threads: &'a [Thread],
        (globals, globals_interior): (&'a [ObjectIndex], &'a [ObjectIndex]),
        c: Columns<'_>,
    ) -> Self {
        let interior_positions = (0..c.edges).filter(|&k| (c.interior)(k)).map(|k| k as u64);
        let interior_edges = {
            let mut previous = 0u64;
            PackedOut::counted(
                c.interior_count,
                interior_positions.map(|k| {
                    let d = k - previous;
                    previous = k;
                    d
                }),
            )
        };
        let n = c.objects;
        let column = |value: &dyn Fn(usize) -> u64| PackedOut::new((0..n).map(value));
        let deltas = |value: &dyn Fn(usize) -> u64| PackedOut::deltas((0..n).map(value));
        WireOut {
            process,
            sites,
            ids: deltas(c.id),
            addrs: deltas(c.addr),
            sizes: column(c.size),
            object_sites: column(&|i| u64::from((c.site)(i).wrapping_add(1))),
            object_threads: column(&|i| u64::from((c.thread)(i))),
            seqs: deltas(c.seq),
            degrees: column(&|i| (c.degree)(i) as u64),
            targets: PackedOut::counted(c.edges, c.targets.map(u64::from)),
            threads: threads
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
            globals,
            globals_interior,
            interior_edges,
        }
    }
}

/// The object columns of a graph, however they are stored (a [`HeapGraph`] or a [`Kept`]).
struct Columns<'c> {
    objects: usize,
    id: &'c dyn Fn(usize) -> u64,
    addr: &'c dyn Fn(usize) -> u64,
    size: &'c dyn Fn(usize) -> u64,
    site: &'c dyn Fn(usize) -> u32,
    thread: &'c dyn Fn(usize) -> u32,
    seq: &'c dyn Fn(usize) -> u64,
    degree: &'c dyn Fn(usize) -> usize,
    /// How many references there are in all.
    edges: usize,
    /// Every object's references, one object after the other.
    targets: &'c mut dyn Iterator<Item = ObjectIndex>,
    /// Whether reference `k` (in `targets` order) is interior.
    interior: &'c dyn Fn(usize) -> bool,
    interior_count: usize,
}

/// Writes the graph a kept snapshot holds, in the binary form: the same file as
/// [`write_binary`] of the graph it was made from.
pub fn write_binary_kept(kept: &Kept, out: impl Write) -> Result<(), SnapshotError> {
    let wire = WireOut::new(
        kept.process(),
        kept.sites(),
        kept.threads(),
        (kept.globals(), kept.globals_interior()),
        Columns {
            objects: kept.object_count(),
            id: &|i| kept.id(i as ObjectIndex),
            addr: &|i| kept.addr(i as ObjectIndex),
            size: &|i| kept.size(i as ObjectIndex),
            site: &|i| kept.site(i as ObjectIndex),
            thread: &|i| kept.thread(i as ObjectIndex),
            seq: &|i| kept.seq(i as ObjectIndex),
            degree: &|i| kept.edges_of(i as ObjectIndex).len(),
            edges: kept.edge_count(),
            targets: &mut kept.all_edges().map(|(_, t)| t),
            interior: &|k| kept.is_interior_edge(k),
            interior_count: kept
                .interior_bits()
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum(),
        },
    );
    write_wire(&wire, out)
}

/// A column of unsigned integers: how many, then their LEB128 varints as one byte string.
/// Written from this owned form, read as [`Packed`], which borrows the bytes from the file.
#[derive(Serialize)]
struct PackedOut {
    count: u64,
    #[serde(serialize_with = "byte_string")]
    bytes: Vec<u8>,
}

/// A column as read: its bytes are borrowed from the file, not copied.
#[derive(Deserialize)]
struct Packed<'a> {
    count: u64,
    bytes: &'a [u8],
}

/// Writes bytes as one bincode byte string (length, then the bytes), which is what `&[u8]`
/// deserializes from; serde would otherwise write a `Vec<u8>` as a sequence of integers.
fn byte_string<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(bytes)
}

impl PackedOut {
    fn new(values: impl ExactSizeIterator<Item = u64>) -> PackedOut {
        PackedOut::counted(values.len(), values)
    }

    /// [`PackedOut::new`] of `count` values from an iterator that does not know its length.
    fn counted(count: usize, values: impl Iterator<Item = u64>) -> PackedOut {
        let mut bytes = Vec::with_capacity(count * 2);
        for mut v in values {
            while v >= 0x80 {
                bytes.push(v as u8 | 0x80);
                v >>= 7;
            }
            bytes.push(v as u8);
        }
        PackedOut {
            count: count as u64,
            bytes,
        }
    }

    /// Differences from the previous value (the first from 0), zigzag-encoded so that small
    /// steps down are as short as small steps up.
    fn deltas(column: impl ExactSizeIterator<Item = u64>) -> PackedOut {
        let mut previous = 0u64;
        PackedOut::new(column.map(|v| {
            let d = v.wrapping_sub(previous) as i64;
            previous = v;
            ((d << 1) ^ (d >> 63)) as u64
        }))
    }

    #[cfg(test)]
    fn view(&self) -> Packed<'_> {
        Packed {
            count: self.count,
            bytes: &self.bytes,
        }
    }
}

impl Packed<'_> {
    /// Decodes every value through `convert` (which refuses values out of its range).
    fn unpack<T>(
        &self,
        column: &str,
        mut convert: impl FnMut(u64) -> Option<T>,
    ) -> Result<Vec<T>, SnapshotError> {
        let mut out = Vec::with_capacity(self.count as usize);
        self.each(column, |v| convert(v).map(|t| out.push(t)))?;
        Ok(out)
    }

    /// Hands every value to `take` (which refuses values out of its range), in place: nothing
    /// is allocated. The count is checked against the bytes first: each value takes at least
    /// one byte.
    fn each(
        &self,
        column: &str,
        mut take: impl FnMut(u64) -> Option<()>,
    ) -> Result<(), SnapshotError> {
        let damaged =
            |what: String| SnapshotError::Decode(format!("column {column}: {what} (file damaged)"));
        if self.count > self.bytes.len() as u64 {
            return Err(damaged(format!(
                "{} values cannot fit in {} bytes",
                self.count,
                self.bytes.len()
            )));
        }
        let mut bytes = self.bytes.iter();
        for i in 0..self.count {
            let mut v = 0u64;
            let mut shift = 0u32;
            loop {
                let Some(&b) = bytes.next() else {
                    return Err(damaged(format!("ends inside value {i}")));
                };
                // The tenth byte of a u64 may only carry its top bit.
                if shift == 63 && b > 1 {
                    return Err(damaged(format!("value {i} overflows 64 bits")));
                }
                v |= u64::from(b & 0x7f) << shift;
                if b < 0x80 {
                    break;
                }
                shift += 7;
            }
            take(v).ok_or_else(|| damaged(format!("value {i} is out of range")))?;
        }
        if bytes.len() != 0 {
            return Err(damaged(format!(
                "{} bytes after the last value",
                bytes.len()
            )));
        }
        Ok(())
    }

    fn unpack_u64(&self, column: &str) -> Result<Vec<u64>, SnapshotError> {
        self.unpack(column, Some)
    }

    fn unpack_u32(&self, column: &str) -> Result<Vec<u32>, SnapshotError> {
        self.unpack(column, |v| u32::try_from(v).ok())
    }

    fn unpack_deltas(&self, column: &str) -> Result<Vec<u64>, SnapshotError> {
        let mut previous = 0u64;
        self.unpack(column, |z| {
            let d = (z >> 1) ^ (z & 1).wrapping_neg();
            previous = previous.wrapping_add(d);
            Some(previous)
        })
    }
}

impl WireIn<'_> {
    /// Rebuilds the graph; [`HeapGraph::new`] checks every invariant.
    fn into_graph(self) -> Result<HeapGraph, SnapshotError> {
        let bits = self.interior_bits()?;
        self.v1.into_graph(bits, self.globals_interior)
    }

    /// What [`WireIn::into_graph`] would refuse, without building the graph.
    fn check(self) -> Result<(), SnapshotError> {
        self.interior_bits()?;
        self.v1.check(self.globals_interior)
    }

    /// The interior edges as one bit per edge position.
    fn interior_bits(&self) -> Result<Vec<u64>, SnapshotError> {
        let mut previous = 0u64;
        let mut first = true;
        let interior = self.interior_edges.unpack("interior_edges", |d| {
            let k = if first { d } else { previous.checked_add(d)? };
            if !first && d == 0 {
                return None;
            }
            first = false;
            previous = k;
            usize::try_from(k).ok()
        })?;
        let edge_count = self.v1.targets.count;
        if let Some(&last) = interior.last()
            && last as u64 >= edge_count
        {
            return Err(SnapshotError::Decode(format!(
                "interior edge {last} of {edge_count} edges (file damaged)"
            )));
        }
        let mut bits = vec![0u64; interior.last().map_or(0, |&k| k / 64 + 1)];
        for k in interior {
            bits[k / 64] |= 1 << (k % 64);
        }
        Ok(bits)
    }
}

impl<F: Into<Frame>> WireInV1<'_, F> {
    /// Rebuilds the graph with these interior bits and interior globals;
    /// [`HeapGraph::new`] checks every invariant.
    fn into_graph(
        self,
        interior: Vec<u64>,
        globals_interior: Vec<ObjectIndex>,
    ) -> Result<HeapGraph, SnapshotError> {
        let degrees = self.degrees.unpack_u32("degrees")?;
        let targets = self.targets.unpack_u32("targets")?;
        let n = degrees.len();
        let listed: u64 = degrees.iter().map(|&d| u64::from(d)).sum();
        if listed != targets.len() as u64 {
            return Err(SnapshotError::Decode(format!(
                "the edge degrees add up to {listed} but there are {} edge targets (file damaged)",
                targets.len()
            )));
        }
        let mut edges = Edges::with_capacity(n, targets.len());
        let mut start = 0usize;
        for &d in &degrees {
            let end = start + d as usize;
            edges.push(targets[start..end].iter().copied());
            start = end;
        }
        drop(targets);
        edges.set_interior_bits(interior);
        // Column lengths are checked by `HeapGraph::new` (degrees against objects too).
        let objects = Objects {
            id: self.ids.unpack_deltas("ids")?,
            addr: self.addrs.unpack_deltas("addrs")?,
            size: self.sizes.unpack_u64("sizes")?,
            site: self.object_sites.unpack("sites", |s| {
                u32::try_from(s).ok().map(|s| s.wrapping_sub(1))
            })?,
            thread: self.object_threads.unpack_u32("threads")?,
            seq: self.seqs.unpack_deltas("seqs")?,
        };
        let threads = threads_of(self.threads);
        Ok(HeapGraph::new(
            self.process,
            self.sites,
            objects,
            edges,
            threads,
            self.globals,
        )?
        .with_globals_interior(globals_interior)?)
    }

    /// What [`WireInV1::into_graph`] would refuse, the columns walked where they lie in the
    /// file: only the roots (threads, frames, globals, sites) are decoded, and they are few.
    fn check(self, globals_interior: Vec<ObjectIndex>) -> Result<(), SnapshotError> {
        // Each value takes a byte at least (`Packed::each` checks it), so counts fit a usize.
        let n = self.degrees.count as usize;
        if n >= u32::MAX as usize {
            return Err(GraphError::TooManyObjects.into());
        }
        let mut listed = 0u64;
        self.degrees.each("degrees", |d| {
            listed += u64::from(u32::try_from(d).ok()?);
            Some(())
        })?;
        let mut dangling = None;
        self.targets.each("targets", |t| {
            let t = u32::try_from(t).ok()?;
            if t as usize >= n {
                dangling.get_or_insert(t);
            }
            Some(())
        })?;
        if listed != self.targets.count {
            return Err(SnapshotError::Decode(format!(
                "the edge degrees add up to {listed} but there are {} edge targets (file damaged)",
                self.targets.count
            )));
        }
        let columns = [
            &self.ids,
            &self.addrs,
            &self.sizes,
            &self.object_sites,
            &self.object_threads,
            &self.seqs,
        ];
        if columns.iter().any(|c| c.count != n as u64) {
            return Err(GraphError::ColumnLengths(format!(
                "id {}, addr {}, size {}, site {}, thread {}, seq {}, edge sources {n}",
                columns[0].count,
                columns[1].count,
                columns[2].count,
                columns[3].count,
                columns[4].count,
                columns[5].count
            ))
            .into());
        }
        if let Some(target) = dangling {
            return Err(GraphError::DanglingRef {
                holder: "an object".to_string(),
                target,
                objects: n,
            }
            .into());
        }
        let any = |_| Some(());
        self.ids.each("ids", any)?;
        self.addrs.each("addrs", any)?;
        self.sizes.each("sizes", any)?;
        self.seqs.each("seqs", any)?;
        self.object_threads
            .each("threads", |t| u32::try_from(t).ok().map(drop))?;
        let mut unknown_site = None;
        let mut object = 0;
        self.object_sites.each("sites", |s| {
            let site = u32::try_from(s).ok()?.wrapping_sub(1);
            if site != NO_SITE && site as usize >= self.sites.len() {
                unknown_site.get_or_insert((object, site));
            }
            object += 1;
            Some(())
        })?;
        let threads = threads_of(self.threads);
        validate_roots(n, &self.globals, &globals_interior, &threads)?;
        if let Some((object, site)) = unknown_site {
            return Err(GraphError::DanglingSite {
                object,
                site,
                sites: self.sites.len(),
            }
            .into());
        }
        Ok(())
    }
}

/// The threads of a payload as the graph holds them.
fn threads_of<F: Into<Frame>>(threads: Vec<WireThread<String, Vec<F>>>) -> Vec<Thread> {
    threads
        .into_iter()
        .map(|t| Thread {
            tid: t.tid,
            name: t.name,
            state: match t.state {
                WireState::Stopped => ThreadState::Stopped,
                WireState::NotStoppable(r) => ThreadState::NotStoppable(r),
            },
            frames: t.frames.into_iter().map(Into::into).collect(),
        })
        .collect()
}

/// Whether `bytes` were meant to be a binary snapshot (they start like [`MAGIC`]), so that a
/// damaged header is reported as such rather than as "not a snapshot".
pub(crate) fn looks_like_binary(bytes: &[u8]) -> bool {
    bytes.starts_with(b"HEAPTUI") || (!bytes.is_empty() && MAGIC.starts_with(bytes))
}

/// Reads a binary snapshot: header, payload, then the graph's invariants.
pub fn read_binary(bytes: &[u8]) -> Result<HeapGraph, SnapshotError> {
    match read_wire(bytes)? {
        Wire::V2(wire) => wire.into_graph(),
        Wire::V1(wire) => wire.into_graph(Vec::new(), Vec::new()),
    }
}

/// Checks that [`read_binary`] would read `bytes` back, without building the graph: the
/// columns are walked where they lie in `bytes` and only the roots are decoded, so checking a
/// file of millions of blocks costs little more memory than the file (the graph costs about
/// five times as much). The invariants are [`HeapGraph::validate`]'s.
pub fn check_binary(bytes: &[u8]) -> Result<(), SnapshotError> {
    match read_wire(bytes)? {
        Wire::V2(wire) => wire.check(),
        Wire::V1(wire) => wire.check(Vec::new()),
    }
}

/// A payload as decoded, its columns still in the file's bytes.
enum Wire<'a> {
    V2(WireIn<'a>),
    V1(WireInV1<'a, FrameV1>),
}

/// Checks the header and decodes the payload, refusing trailing bytes.
fn read_wire(bytes: &[u8]) -> Result<Wire<'_>, SnapshotError> {
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
    let payload = &bytes[HEADER_LEN..];
    let whole = |used: usize| {
        if used != payload.len() {
            return Err(SnapshotError::TrailingBytes {
                count: payload.len() - used,
            });
        }
        Ok(())
    };
    match version {
        BINARY_VERSION => {
            let (wire, used) = decode_limited::<WireIn<'_>>(payload)
                .map_err(|e| decode_error(e, payload.len()))?;
            whole(used)?;
            Ok(Wire::V2(wire))
        }
        OLDEST_BINARY_VERSION => {
            let (wire, used) = decode_limited::<WireInV1<'_, FrameV1>>(payload)
                .map_err(|e| decode_error(e, payload.len()))?;
            whole(used)?;
            Ok(Wire::V1(wire))
        }
        found => Err(SnapshotError::BinaryVersion { found }),
    }
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
fn decode_limited<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<(T, usize), DecodeError> {
    const MIB: usize = 1 << 20;
    match payload.len().saturating_mul(CLAIM_PER_BYTE) {
        n if n <= MIB => decode::<MIB, T>(payload),
        n if n <= 64 * MIB => decode::<{ 64 * MIB }, T>(payload),
        n if n <= 4096 * MIB => decode::<{ 4096 * MIB }, T>(payload),
        n if n <= 64 * 4096 * MIB => decode::<{ 64 * 4096 * MIB }, T>(payload),
        n if n <= 4096 * 4096 * MIB => decode::<{ 4096 * 4096 * MIB }, T>(payload),
        _ => Err(DecodeError::LimitExceeded),
    }
}

/// The most in-memory bytes one payload byte can honestly stand for (a one-byte varint
/// decoded as a `u64` or a sequence length).
const CLAIM_PER_BYTE: usize = 8;

fn decode<'a, const LIMIT: usize, T: Deserialize<'a>>(
    payload: &'a [u8],
) -> Result<(T, usize), DecodeError> {
    bincode::serde::borrow_decode_from_slice(payload, encoding().with_limit::<LIMIT>())
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
        assert_eq!(check_binary(&forged).unwrap_err().to_string(), e);
    }

    /// Forges `graph()`'s payload with `forge` applied to it.
    fn forged(forge: impl FnOnce(&mut WireOut<'_>)) -> Vec<u8> {
        let g = graph();
        let mut wire = WireOut::of(&g);
        forge(&mut wire);
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&BINARY_VERSION.to_le_bytes());
        forged.extend(bincode::serde::encode_to_vec(wire, encoding()).unwrap());
        forged
    }

    /// The check without a graph refuses what reading refuses, with the same words.
    #[test]
    fn the_check_refuses_each_broken_column_as_reading_does() {
        let untouched = forged(|_| ());
        check_binary(&untouched).unwrap();
        assert_eq!(read_binary(&untouched).unwrap(), graph());
        let cases = [
            forged(|w| w.targets = PackedOut::new([0, 2].into_iter())),
            forged(|w| w.targets = PackedOut::new([0, 1, 1].into_iter())),
            forged(|w| w.object_sites = PackedOut::new([1, 2].into_iter())),
            forged(|w| w.object_threads = PackedOut::new([7, 1 << 40].into_iter())),
            forged(|w| w.sizes = PackedOut::new([48].into_iter())),
            forged(|w| w.interior_edges = PackedOut::new([2].into_iter())),
            forged(|w| w.globals = &[3]),
        ];
        for (i, bytes) in cases.iter().enumerate() {
            let read = read_binary(bytes).unwrap_err().to_string();
            let checked = check_binary(bytes).unwrap_err().to_string();
            if i == 4 {
                // Reading names every column's length, the check the edge sources too.
                assert!(checked.contains("size 1"), "{checked}");
            } else {
                assert_eq!(checked, read, "case {i}");
            }
        }
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
    fn packed_columns_round_trip_every_width() {
        let values = [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX];
        let p = PackedOut::new(values.into_iter());
        assert_eq!(p.bytes.len(), 1 + 1 + 1 + 2 + 2 + 6 + 10 + 10);
        assert_eq!(p.view().unpack_u64("c").unwrap(), values);
        let column = [5, 3, u64::MAX, 0, 1 << 63];
        let deltas = PackedOut::deltas(column.iter().copied());
        assert_eq!(deltas.view().unpack_deltas("c").unwrap(), column);
        // Sequential ids: one byte each after the first.
        assert_eq!(
            PackedOut::deltas([1000, 1001, 1002, 1003].into_iter())
                .bytes
                .len(),
            2 + 3
        );
    }

    #[test]
    fn damaged_packed_columns_are_refused() {
        let err = |p: Packed| p.unpack_u64("ids").unwrap_err().to_string();
        let bad = |count, bytes| Packed { count, bytes };
        assert_eq!(
            err(bad(3, &[1, 2])),
            "binary snapshot: column ids: 3 values cannot fit in 2 bytes (file damaged)"
        );
        assert_eq!(
            err(bad(1, &[0x80, 0x80])),
            "binary snapshot: column ids: ends inside value 0 (file damaged)"
        );
        assert_eq!(
            err(bad(1, &[1, 2])),
            "binary snapshot: column ids: 1 bytes after the last value (file damaged)"
        );
        let mut overflow = vec![0xff; 9];
        overflow.push(0x02);
        let overflow = overflow.as_slice();
        assert_eq!(
            err(bad(1, overflow)),
            "binary snapshot: column ids: value 0 overflows 64 bits (file damaged)"
        );
        let wide = PackedOut::new([u64::from(u32::MAX) + 1].into_iter());
        assert_eq!(
            wide.view().unpack_u32("targets").unwrap_err().to_string(),
            "binary snapshot: column targets: value 0 is out of range (file damaged)"
        );
    }

    #[test]
    fn forged_degrees_are_refused() {
        let forged = forged(|w| w.targets = PackedOut::new([0, 0, 0].into_iter()));
        let e = "binary snapshot: the edge degrees add up to 2 but there are 3 edge targets \
                 (file damaged)";
        assert_eq!(read_binary(&forged).unwrap_err().to_string(), e);
        assert_eq!(check_binary(&forged).unwrap_err().to_string(), e);
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
