//! The bytes of a [`Kept`]: how a kept snapshot travels from the agent's scanning child to the
//! agent (a pipe), or is stored.
//!
//! Layout: [`KEPT_MAGIC`], [`KEPT_VERSION`] (u32), the length of the head (u64) and the head —
//! process, sites, threads with their frames, globals, figures, totals, leaks, sharer sets,
//! little-endian integers and length-prefixed strings and lists —, then every packed column:
//! its length, width, runs, exceptions and raw bytes. Both ends are the same build of heaptui,
//! but the decoder trusts nothing: every length is checked against what follows and against
//! the other columns, every index against what it indexes, and every buffer is reserved
//! fallibly, so a reader short of memory gets [`DecodeError::Memory`] instead of aborting.
//!
//! Between the agent's scanning child and the agent the same parts travel split in two, so
//! that the first can travel while the child still analyses: [`SPLIT_MAGIC`], the object
//! count, whether ids are kept, the graph's own columns (ids, addresses, sizes, sites,
//! threads, sequence numbers, references) and the references' interior bits
//! ([`GraphColumns::encode`]); then the magic, the version, the head, the analysis's columns
//! and the possibly-lost bits ([`Kept::encode_rest`]). [`Kept::decode_split`] reads both and
//! checks them together, as [`Kept::decode`] does the whole.
//!
//! The encoding can also be made a window at a time ([`Kept::encode_window`]): the agent
//! serves a client's chunks that way, so the bytes of a large snapshot never exist whole in
//! the target beside the snapshot they copy (its columns are stored as they travel, so a
//! window is mostly one copy of the column bytes it covers). A window starts at the part
//! (the head, a column, a bit vector) it begins in, found from the part offsets kept in the
//! [`EncodedHead`], so fetching the whole encoding window by window costs one encoding, not
//! one per window.

use std::collections::TryReserveError;
use std::io::{self, BufRead, Write};

use thiserror::Error;

use super::{GraphColumns, GroupTable, Kept};
use crate::figures::{FrameFigures, GroupId, GroupKind, Leaks, Sharer, ThreadFigures, Totals};
use crate::graph::{Frame, FrameKind, Process, Site, Thread, ThreadState};
use crate::packed::{Packed, PackedCsr};

/// The first bytes of a kept snapshot.
pub const KEPT_MAGIC: [u8; 12] = *b"HEAPTUI\0KEPT";

/// Bump on any change of the layout.
pub const KEPT_VERSION: u32 = 2;

/// The first bytes of a split encoding's first part ([`GraphColumns::encode`]), followed by
/// [`KEPT_VERSION`].
pub const SPLIT_MAGIC: [u8; 12] = *b"HEAPTUI\0COLS";

/// Longest head accepted (threads, frames and sites are few; a bad length must not allocate).
const MAX_HEAD: u64 = 1 << 30;

/// Why bytes are not a kept snapshot.
#[derive(Debug, Error)]
pub enum DecodeError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("not a kept snapshot (bad magic or version)")]
    NotKept,
    #[error("the kept snapshot is malformed: {0}")]
    Malformed(String),
    /// The memory for a column could not be had.
    #[error("cannot reserve {bytes} bytes for the kept snapshot")]
    Memory { bytes: usize },
}

fn malformed(what: impl Into<String>) -> DecodeError {
    DecodeError::Malformed(what.into())
}

/// Little-endian writer of the head.
struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn u32s(&mut self, v: &[u32]) {
        self.len(v.len());
        v.iter().for_each(|&x| self.u32(x));
    }
    fn group_ids(&mut self, ids: &[GroupId]) {
        self.len(ids.len());
        for id in ids {
            self.u8(kind_tag(id.kind));
            self.u32(id.number);
        }
    }
}

/// Reader of the head, over bytes already in memory.
struct In<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl In<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| malformed(format!("the head ends before byte {}", self.at + n)))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A count of items of at least `min` bytes each, checked against the bytes left.
    fn len(&mut self, min: usize) -> Result<usize, DecodeError> {
        let n = self.u64()?;
        let left = (self.bytes.len() - self.at) as u64;
        if n.saturating_mul(min.max(1) as u64) > left {
            return Err(malformed(format!(
                "a list of {n} items does not fit the head"
            )));
        }
        Ok(n as usize)
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let n = self.len(1)?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| malformed("a string is not UTF-8"))
    }
    fn u32s(&mut self) -> Result<Vec<u32>, DecodeError> {
        let n = self.len(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    fn group_ids(&mut self) -> Result<Vec<GroupId>, DecodeError> {
        let n = self.len(5)?;
        (0..n)
            .map(|_| {
                let kind = kind_of(self.u8()?)?;
                let number = self.u32()?;
                Ok(GroupId { kind, number })
            })
            .collect()
    }
}

fn kind_tag(kind: GroupKind) -> u8 {
    match kind {
        GroupKind::FrameShared => 0,
        GroupKind::ThreadShared => 1,
        GroupKind::GlobalOnly => 2,
    }
}

fn kind_of(tag: u8) -> Result<GroupKind, DecodeError> {
    Ok(match tag {
        0 => GroupKind::FrameShared,
        1 => GroupKind::ThreadShared,
        2 => GroupKind::GlobalOnly,
        _ => return Err(malformed(format!("group kind {tag}"))),
    })
}

fn write_head(k: &Kept) -> Vec<u8> {
    let mut o = Out(Vec::new());
    o.u32(k.process.pid);
    o.str(&k.process.command);
    o.len(k.sites.len());
    for s in &k.sites {
        o.u64(s.id);
        o.len(s.frames.len());
        s.frames.iter().for_each(|f| o.str(f));
    }
    o.len(k.threads.len());
    for t in &k.threads {
        o.u32(t.tid);
        o.str(&t.name);
        match &t.state {
            ThreadState::Stopped => o.u8(0),
            ThreadState::NotStoppable(why) => {
                o.u8(1);
                o.str(why);
            }
        }
        o.len(t.frames.len());
        for f in &t.frames {
            o.str(&f.function);
            o.str(&f.module);
            o.u8(matches!(f.kind, FrameKind::System) as u8);
            o.u32s(&f.refs);
            o.u32s(&f.interior);
        }
    }
    o.u32s(&k.globals);
    o.u32s(&k.globals_interior);
    for f in &k.figures {
        o.u32(f.tid);
        for v in [f.proprietary, f.shared, f.total] {
            o.u64(v);
        }
        o.len(f.frames.len());
        for fr in &f.frames {
            o.u64(fr.proprietary);
            o.group_ids(&fr.frame_shared);
            o.group_ids(&fr.thread_shared);
        }
    }
    let t = &k.totals;
    for v in [t.objects, t.bytes, t.unreachable_bytes, t.global_only_bytes] {
        o.u64(v);
    }
    let l = &k.leaks;
    for v in [
        l.bytes,
        l.objects,
        l.definitely_lost,
        l.indirectly_lost,
        l.definitely_lost_objects,
        l.indirectly_lost_objects,
        l.possibly_lost,
        l.possibly_lost_objects,
    ] {
        o.u64(v);
    }
    o.u32s(&k.frame_base);
    o.len(k.objects);
    o.u8(k.ids.is_some() as u8);
    k.groups.kind_start.iter().for_each(|&s| o.u32(s));
    o.len(k.groups.sets.len());
    for set in &k.groups.sets {
        o.len(set.len());
        for s in set {
            match s {
                Sharer::Thread(tid) => {
                    o.u8(0);
                    o.u32(*tid);
                }
                Sharer::Globals => {
                    o.u8(1);
                    o.u32(0);
                }
            }
        }
    }
    k.groups.set_bytes.iter().for_each(|&b| o.u64(b));
    o.0
}

/// The head of a kept snapshot's encoding (see the module docs) and where each part of the
/// encoding starts: what [`Kept::encode_window`] takes, so that a reader fetching the bytes
/// window by window has the head made once and every window starts at the part it begins in
/// (not at byte 0: a fetch of `n` bytes costs `O(n)`, not `O(n² / window)`). A few bytes per
/// site, thread and frame, and 8 per part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedHead {
    head: Vec<u8>,
    /// The offset of each part in [`Kept::parts`]'s order, then the encoding's length.
    starts: Vec<u64>,
}

impl EncodedHead {
    /// The length of the whole encoding.
    pub fn encoded_len(&self) -> u64 {
        *self.starts.last().expect("the end is always there")
    }

    /// The memory this head holds.
    pub fn heap_bytes(&self) -> usize {
        self.head.capacity() + self.starts.capacity() * size_of::<u64>()
    }
}

/// One part of the encoding after the magic: the head, a packed column, or a bit vector.
#[derive(Clone, Copy)]
enum Part<'a> {
    /// The magic, the version, the head's length and the head.
    Head(&'a [u8]),
    Column(&'a Packed),
    Bits(&'a [u64]),
}

impl Part<'_> {
    fn write(self, out: &mut impl Write) -> io::Result<()> {
        match self {
            Part::Head(head) => {
                out.write_all(&KEPT_MAGIC)?;
                out.write_all(&KEPT_VERSION.to_le_bytes())?;
                out.write_all(&(head.len() as u64).to_le_bytes())?;
                out.write_all(head)
            }
            Part::Column(p) => p.encode(out),
            Part::Bits(words) => {
                out.write_all(&(words.len() as u64).to_le_bytes())?;
                write_words(out, words)
            }
        }
    }

    /// The number of bytes [`Part::write`] writes.
    fn len(self) -> u64 {
        match self {
            Part::Head(head) => (KEPT_MAGIC.len() + 4 + 8 + head.len()) as u64,
            Part::Column(p) => p.encoded_len(),
            Part::Bits(words) => 8 + 8 * words.len() as u64,
        }
    }
}

impl Kept {
    /// Writes the kept snapshot (see the module docs).
    pub fn encode(&self, out: &mut impl Write) -> io::Result<()> {
        let head = write_head(self);
        self.parts(&head).into_iter().try_for_each(|p| p.write(out))
    }

    /// The head of the encoding and where its parts start (see [`EncodedHead`]).
    pub fn encoded_head(&self) -> EncodedHead {
        let head = write_head(self);
        let mut starts = vec![0];
        for part in self.parts(&head) {
            starts.push(starts.last().expect("0 is there") + part.len());
        }
        EncodedHead { head, starts }
    }

    /// The bytes `offset .. offset + max` of the encoding (fewer at its end), appended to
    /// `out`: the same bytes as [`Kept::encode`]'s, made from the part the window starts in
    /// without the rest of them, so that the encoding of a large snapshot never exists whole.
    /// `head` is this snapshot's [`Kept::encoded_head`].
    pub fn encode_window(&self, head: &EncodedHead, offset: u64, max: usize, out: &mut Vec<u8>) {
        // The last part starting at or before `offset` (none after the end).
        let first = head.starts.partition_point(|&s| s <= offset) - 1;
        let parts = self.parts(&head.head);
        let Some(parts) = parts.get(first..) else {
            return;
        };
        let mut window = Window::new(offset, max);
        window.at = head.starts[first];
        window.out = std::mem::take(out);
        // The window stops the encoding with an error once it is full.
        let _ = parts.iter().try_for_each(|p| p.write(&mut window));
        *out = window.out;
    }

    /// The parts of the encoding in their order on the wire: the head, every packed column,
    /// the two bit vectors.
    fn parts<'a>(&'a self, head: &'a [u8]) -> Vec<Part<'a>> {
        let mut parts = vec![Part::Head(head)];
        parts.extend(graph_columns(
            self.ids.as_ref(),
            [
                &self.addrs,
                &self.sizes,
                &self.site,
                &self.thread,
                &self.seqs,
            ],
            &self.edges,
        ));
        parts.extend(self.analysis_columns());
        parts.extend([Part::Bits(&self.edge_interior), Part::Bits(&self.possibly)]);
        parts
    }

    /// The analysis's columns, in their order on the wire.
    fn analysis_columns(&self) -> [Part<'_>; 8] {
        [
            &self.slots,
            &self.doms,
            &self.groups.entries,
            &self.groups.sizes,
            &self.groups.members,
            &self.groups.sharers,
            &self.groups.refs.offsets,
            &self.groups.refs.targets,
        ]
        .map(Part::Column)
    }

    /// Writes the second part of a split encoding (see the module docs): everything
    /// [`GraphColumns::encode`] does not write, the head first.
    pub fn encode_rest(&self, out: &mut impl Write) -> io::Result<()> {
        let head = write_head(self);
        Part::Head(&head).write(out)?;
        for part in self.analysis_columns() {
            part.write(out)?;
        }
        Part::Bits(&self.possibly).write(out)
    }

    /// Reads a split encoding ([`GraphColumns::encode`] then [`Kept::encode_rest`]), checking
    /// it whole: the same `Kept` as [`Kept::decode`] of its [`Kept::encode`].
    pub fn decode_split(input: &mut impl BufRead) -> Result<Kept, DecodeError> {
        read_magic(input, SPLIT_MAGIC)?;
        let n = read_u64(input)?;
        if n >= u64::from(u32::MAX) {
            return Err(malformed(format!("{n} objects")));
        }
        let n = n as usize;
        let mut has_ids = [0u8];
        input.read_exact(&mut has_ids)?;
        let mut k = Kept {
            objects: n,
            ids: (has_ids[0] != 0).then(Packed::default),
            ..Kept::default()
        };
        read_graph_columns(input, &mut k)?;
        k.edge_interior = read_bits(input, k.edges.len())?;
        let head = read_magic_and_head(input)?;
        if head.objects != n || head.ids.is_some() != k.ids.is_some() {
            return Err(malformed(format!(
                "the head is of {} objects, the columns before it of {n}",
                head.objects
            )));
        }
        // The head's parts (it has no columns yet) beside the columns read.
        k = Kept {
            ids: k.ids,
            addrs: k.addrs,
            sizes: k.sizes,
            site: k.site,
            thread: k.thread,
            seqs: k.seqs,
            edges: k.edges,
            edge_interior: k.edge_interior,
            ..head
        };
        read_analysis_columns(input, &mut k)?;
        k.possibly = read_bits(input, n)?;
        k.check()?;
        Ok(k)
    }

    /// Reads a kept snapshot written by [`Kept::encode`], checking it whole.
    pub fn decode(input: &mut impl BufRead) -> Result<Kept, DecodeError> {
        let mut k = read_magic_and_head(input)?;
        read_graph_columns(input, &mut k)?;
        read_analysis_columns(input, &mut k)?;
        k.edge_interior = read_bits(input, k.edges.len())?;
        k.possibly = read_bits(input, k.objects)?;
        k.check()?;
        Ok(k)
    }

    /// The indices every reader relies on are in range.
    fn check(&self) -> Result<(), DecodeError> {
        let n = self.objects as u64;
        let frames = u64::from(*self.frame_base.last().unwrap_or(&0));
        let groups = self.groups.len() as u64;
        let below = |what: &str, p: &Packed, bound: u64| match p.first_at_least(bound) {
            Some(i) => Err(malformed(format!(
                "{what} {i} is {} (bound {bound})",
                p.get(i)
            ))),
            None => Ok(()),
        };
        below("reference", &self.edges.targets, n)?;
        below("slot of object", &self.slots, frames + groups + 2)?;
        below("dominator of object", &self.doms, n + 1)?;
        below("site of object", &self.site, self.sites.len() as u64 + 1)?;
        below("entry of group", &self.groups.entries, n)?;
        below(
            "sharer set of group",
            &self.groups.sharers,
            self.groups.sets.len() as u64,
        )?;
        below("referent", &self.groups.refs.targets, groups)?;
        let roots = self
            .threads
            .iter()
            .flat_map(|t| {
                t.frames
                    .iter()
                    .flat_map(|f| f.refs.iter().chain(&f.interior))
            })
            .chain(&self.globals)
            .chain(&self.globals_interior);
        if let Some(r) = roots.into_iter().find(|&&r| u64::from(r) >= n) {
            return Err(malformed(format!("a root refers to object {r} of {n}")));
        }
        Ok(())
    }
}

/// The graph's own columns, in their order on the wire: ids (when kept), addresses, sizes,
/// sites, threads, sequence numbers, references.
fn graph_columns<'a>(
    ids: Option<&'a Packed>,
    columns: [&'a Packed; 5],
    edges: &'a PackedCsr,
) -> impl Iterator<Item = Part<'a>> {
    ids.into_iter()
        .chain(columns)
        .chain([&edges.offsets, &edges.targets])
        .map(Part::Column)
}

impl GraphColumns {
    /// Writes the first part of a split encoding (see the module docs). Touches no
    /// thread-local storage beyond what `out` does.
    pub fn encode(&self, out: &mut impl Write) -> io::Result<()> {
        let k = &self.0;
        out.write_all(&SPLIT_MAGIC)?;
        out.write_all(&KEPT_VERSION.to_le_bytes())?;
        out.write_all(&(k.addrs.len() as u64).to_le_bytes())?;
        out.write_all(&[k.ids.is_some() as u8])?;
        let columns = [&k.addrs, &k.sizes, &k.site, &k.thread, &k.seqs];
        for part in graph_columns(k.ids.as_ref(), columns, &k.edges) {
            part.write(out)?;
        }
        Part::Bits(&k.edge_interior).write(out)
    }
}

/// Reads `magic` and [`KEPT_VERSION`].
fn read_magic(input: &mut impl BufRead, magic: [u8; 12]) -> Result<(), DecodeError> {
    let mut first = [0u8; 16];
    input.read_exact(&mut first)?;
    if first[..12] != magic || first[12..] != KEPT_VERSION.to_le_bytes() {
        return Err(DecodeError::NotKept);
    }
    Ok(())
}

/// Reads the magic, the version and the head: a `Kept` with no columns yet.
fn read_magic_and_head(input: &mut impl BufRead) -> Result<Kept, DecodeError> {
    read_magic(input, KEPT_MAGIC)?;
    let len = read_u64(input)?;
    if len > MAX_HEAD {
        return Err(malformed(format!("a head of {len} bytes")));
    }
    let head = read_bytes(input, len as usize)?;
    read_head(&mut In {
        bytes: &head,
        at: 0,
    })
}

/// Reads the graph's own columns of `k` (`k.objects` values each; ids when `k.ids` is some).
fn read_graph_columns(input: &mut impl BufRead, k: &mut Kept) -> Result<(), DecodeError> {
    let n = k.objects;
    if k.ids.is_some() {
        k.ids = Some(Packed::decode(input, n)?);
    }
    k.addrs = Packed::decode(input, n)?;
    k.sizes = Packed::decode(input, n)?;
    k.site = Packed::decode(input, n)?;
    k.thread = Packed::decode(input, n)?;
    k.seqs = Packed::decode(input, n)?;
    k.edges = PackedCsr::decode(input, n)?;
    Ok(())
}

/// Reads the analysis's columns of `k`, whose head is read.
fn read_analysis_columns(input: &mut impl BufRead, k: &mut Kept) -> Result<(), DecodeError> {
    let n = k.objects;
    k.slots = Packed::decode(input, n)?;
    k.doms = Packed::decode(input, n)?;
    let g = k.groups.len();
    k.groups.entries = Packed::decode(input, g)?;
    k.groups.sizes = Packed::decode(input, g)?;
    k.groups.members = Packed::decode(input, g)?;
    k.groups.sharers = Packed::decode(input, g)?;
    k.groups.refs = PackedCsr::decode(input, g)?;
    Ok(())
}

fn read_head(i: &mut In<'_>) -> Result<Kept, DecodeError> {
    let pid = i.u32()?;
    let command = i.str()?;
    let sites = (0..i.len(16)?)
        .map(|_| {
            let id = i.u64()?;
            let frames = (0..i.len(8)?).map(|_| i.str()).collect::<Result<_, _>>()?;
            Ok(Site { id, frames })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let threads = (0..i.len(13)?)
        .map(|_| {
            let tid = i.u32()?;
            let name = i.str()?;
            let state = match i.u8()? {
                0 => ThreadState::Stopped,
                _ => ThreadState::NotStoppable(i.str()?),
            };
            let frames = (0..i.len(25)?)
                .map(|_| {
                    Ok(Frame {
                        function: i.str()?,
                        module: i.str()?,
                        kind: if i.u8()? == 0 {
                            FrameKind::User
                        } else {
                            FrameKind::System
                        },
                        refs: i.u32s()?,
                        interior: i.u32s()?,
                    })
                })
                .collect::<Result<_, DecodeError>>()?;
            Ok(Thread {
                tid,
                name,
                state,
                frames,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let globals = i.u32s()?;
    let globals_interior = i.u32s()?;
    let figures = threads
        .iter()
        .map(|t| {
            let tid = i.u32()?;
            let (proprietary, shared, total) = (i.u64()?, i.u64()?, i.u64()?);
            let n = i.len(24)?;
            if tid != t.tid || n != t.frames.len() {
                return Err(malformed(format!(
                    "the figures of thread {tid} do not match it"
                )));
            }
            let frames = (0..n)
                .map(|_| {
                    Ok(FrameFigures {
                        proprietary: i.u64()?,
                        frame_shared: i.group_ids()?,
                        thread_shared: i.group_ids()?,
                    })
                })
                .collect::<Result<_, DecodeError>>()?;
            Ok(ThreadFigures {
                tid,
                proprietary,
                shared,
                total,
                frames,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let totals = Totals {
        objects: i.u64()?,
        bytes: i.u64()?,
        unreachable_bytes: i.u64()?,
        global_only_bytes: i.u64()?,
    };
    let leaks = Leaks {
        bytes: i.u64()?,
        objects: i.u64()?,
        definitely_lost: i.u64()?,
        indirectly_lost: i.u64()?,
        definitely_lost_objects: i.u64()?,
        indirectly_lost_objects: i.u64()?,
        possibly_lost: i.u64()?,
        possibly_lost_objects: i.u64()?,
    };
    let frame_base = i.u32s()?;
    let counts: Vec<usize> = threads.iter().map(|t| t.frames.len()).collect();
    let consistent = frame_base.len() == threads.len() + 1
        && frame_base.first() == Some(&0)
        && frame_base
            .windows(2)
            .zip(&counts)
            .all(|(w, &c)| u64::from(w[1]) == u64::from(w[0]) + c as u64);
    if !consistent {
        return Err(malformed("the frame numbering does not match the threads"));
    }
    let objects = i.u64()?;
    if objects >= u64::from(u32::MAX) {
        return Err(malformed(format!("{objects} objects")));
    }
    let has_ids = i.u8()? != 0;
    let mut kind_start = [0u32; 4];
    for s in &mut kind_start {
        *s = i.u32()?;
    }
    if kind_start[0] != 0 || kind_start.windows(2).any(|w| w[0] > w[1]) {
        return Err(malformed("the group numbering is not ascending"));
    }
    let sets = (0..i.len(8)?)
        .map(|_| {
            (0..i.len(5)?)
                .map(|_| {
                    let tag = i.u8()?;
                    let tid = i.u32()?;
                    Ok(if tag == 0 {
                        Sharer::Thread(tid)
                    } else {
                        Sharer::Globals
                    })
                })
                .collect::<Result<Vec<_>, DecodeError>>()
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let set_bytes = (0..sets.len())
        .map(|_| i.u64())
        .collect::<Result<Vec<_>, _>>()?;
    if i.at != i.bytes.len() {
        return Err(malformed("bytes after the head"));
    }
    Ok(Kept {
        process: Process { pid, command },
        sites,
        threads,
        globals,
        globals_interior,
        figures,
        totals,
        leaks,
        frame_base,
        objects: objects as usize,
        ids: has_ids.then(Packed::default),
        groups: GroupTable {
            kind_start,
            sets,
            set_bytes,
            ..GroupTable::default()
        },
        ..Kept::default()
    })
}

/// `n` bytes of `input`, in a buffer reserved fallibly.
fn read_bytes(input: &mut impl BufRead, n: usize) -> Result<Vec<u8>, DecodeError> {
    let mut buf = Vec::new();
    reserve(&mut buf, n)?;
    append(input, n, &mut buf)?;
    Ok(buf)
}

/// Appends the next `n` bytes of `input` to `buf` (room for them reserved by the caller),
/// copied from the reader's own buffer: nothing is written twice, where `read_to_end` on a
/// reader with only `read` zeroes the room first (`memset`, 311M of the live report client's
/// 2,505M instructions: BENCHMARKS.md, "The snapshot's fetch and the client's decode").
fn append(input: &mut impl BufRead, n: usize, buf: &mut Vec<u8>) -> Result<(), DecodeError> {
    let mut left = n;
    while left > 0 {
        let got = match input.fill_buf() {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if got.is_empty() {
            return Err(malformed(format!(
                "{} bytes where {n} were announced",
                n - left
            )));
        }
        let k = got.len().min(left);
        buf.extend_from_slice(&got[..k]);
        input.consume(k);
        left -= k;
    }
    Ok(())
}

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), DecodeError> {
    v.try_reserve_exact(n)
        .map_err(|_: TryReserveError| DecodeError::Memory {
            bytes: n * size_of::<T>(),
        })
}

/// A bit vector of at most `bits` bits (its words, trailing zero words dropped).
fn read_bits(input: &mut impl BufRead, bits: usize) -> Result<Vec<u64>, DecodeError> {
    let n = read_u64(input)?;
    if n > bits.div_ceil(64) as u64 {
        return Err(malformed(format!("{n} words of bits for {bits} values")));
    }
    let bytes = read_bytes(input, n as usize * 8)?;
    let mut out = Vec::new();
    reserve(&mut out, n as usize)?;
    out.extend(
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8"))),
    );
    if let Some(&last) = out.last()
        && (last == 0 || (n as usize * 64 > bits && last >> (bits % 64) != 0))
    {
        return Err(malformed("bits past the last value"));
    }
    Ok(out)
}

fn read_u64(input: &mut impl BufRead) -> Result<u64, DecodeError> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_pairs(input: &mut impl BufRead, max: usize) -> Result<Vec<(u32, u64)>, DecodeError> {
    let n = read_u64(input)?;
    if n > max as u64 {
        return Err(malformed(format!(
            "{n} runs or exceptions for {max} values"
        )));
    }
    let bytes = read_bytes(input, n as usize * 12)?;
    let mut out = Vec::new();
    reserve(&mut out, n as usize)?;
    out.extend(bytes.chunks_exact(12).map(|c| {
        (
            u32::from_le_bytes(c[..4].try_into().expect("4")),
            u64::from_le_bytes(c[4..].try_into().expect("8")),
        )
    }));
    Ok(out)
}

/// A writer that keeps only the bytes from `from` to `to` of what is written to it and counts
/// them all (`at`); once it has them all it stops the writing with an error.
struct Window {
    at: u64,
    from: u64,
    to: u64,
    out: Vec<u8>,
}

impl Window {
    /// The window of at most `max` bytes from `from`.
    fn new(from: u64, max: usize) -> Window {
        Window {
            at: 0,
            from,
            to: from.saturating_add(max as u64),
            out: Vec::new(),
        }
    }
}

impl Write for Window {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.at >= self.to && !buf.is_empty() {
            return Err(io::Error::other("the window is full"));
        }
        let end = self.at + buf.len() as u64;
        if end > self.from {
            let lo = (self.from.max(self.at) - self.at) as usize;
            let hi = (self.to.min(end) - self.at) as usize;
            self.out.extend_from_slice(&buf[lo..hi]);
        }
        self.at = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `words` little-endian, a few thousand bytes per write.
fn write_words(out: &mut impl Write, words: &[u64]) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    for part in words.chunks(buf.len() / 8) {
        for (b, w) in buf.chunks_exact_mut(8).zip(part) {
            b.copy_from_slice(&w.to_le_bytes());
        }
        out.write_all(&buf[..part.len() * 8])?;
    }
    Ok(())
}

/// Writes `(index, value)` pairs little-endian, 12 bytes each, a few thousand bytes per write.
fn write_pairs(out: &mut impl Write, pairs: &[(u32, u64)]) -> io::Result<()> {
    let mut buf = [0u8; 12 * 341];
    for part in pairs.chunks(buf.len() / 12) {
        for (b, &(i, v)) in buf.chunks_exact_mut(12).zip(part) {
            b[..4].copy_from_slice(&i.to_le_bytes());
            b[4..].copy_from_slice(&v.to_le_bytes());
        }
        out.write_all(&buf[..part.len() * 12])?;
    }
    Ok(())
}

impl Packed {
    fn encode(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&(self.len as u64).to_le_bytes())?;
        out.write_all(&[self.width as u8])?;
        for pairs in [&self.runs, &self.exceptions] {
            out.write_all(&(pairs.len() as u64).to_le_bytes())?;
            write_pairs(out, pairs)?;
        }
        out.write_all(&self.bytes[..self.len * self.width])
    }

    /// The number of bytes [`Packed::encode`] writes.
    fn encoded_len(&self) -> u64 {
        let pairs = self.runs.len() + self.exceptions.len();
        (8 + 1 + 8 + 8 + 12 * pairs + self.len * self.width) as u64
    }

    /// Reads a column that must hold `len` values.
    fn decode(input: &mut impl BufRead, len: usize) -> Result<Packed, DecodeError> {
        let got = read_u64(input)?;
        if got != len as u64 {
            return Err(malformed(format!(
                "a column of {got} values where {len} were due"
            )));
        }
        let mut width = [0u8];
        input.read_exact(&mut width)?;
        let width = width[0] as usize;
        if width > 8 {
            return Err(malformed(format!("a column {width} bytes wide")));
        }
        let runs = read_pairs(input, len.max(1))?;
        let exceptions = read_pairs(input, len)?;
        let ascending = |p: &[(u32, u64)]| p.windows(2).all(|w| w[0].0 < w[1].0);
        if runs.first().map(|r| r.0) != Some(0) || !ascending(&runs) {
            return Err(malformed("a column's runs do not start at 0 and ascend"));
        }
        if !ascending(&exceptions) || exceptions.last().is_some_and(|e| e.0 as usize >= len) {
            return Err(malformed("a column's exceptions are out of order"));
        }
        if runs.len() > 1 && !exceptions.is_empty() {
            return Err(malformed("a column has both runs and exceptions"));
        }
        let mut bytes = read_bytes_padded(input, len * width)?;
        bytes.resize(len * width + crate::packed::PAD, 0);
        let column = Packed::from_parts(len, width, runs, exceptions, bytes);
        // A value is kept aside only where its marker is stored (so that every reader, one
        // value at a time or a range at once, reads the same values).
        if !column.exceptions_are_marked() {
            return Err(malformed("a column keeps aside a value it does not mark"));
        }
        Ok(column)
    }
}

/// `n` bytes with room for the padding after them, reserved fallibly.
fn read_bytes_padded(input: &mut impl BufRead, n: usize) -> Result<Vec<u8>, DecodeError> {
    let mut buf = Vec::new();
    reserve(&mut buf, n + crate::packed::PAD)?;
    append(input, n, &mut buf)?;
    Ok(buf)
}

impl PackedCsr {
    /// Reads a list of `sources` sources; offsets must ascend from 0 to the target count.
    fn decode(input: &mut impl BufRead, sources: usize) -> Result<PackedCsr, DecodeError> {
        let offsets = Packed::decode(input, sources + 1)?;
        let total = offsets.get(sources);
        let targets = Packed::decode(input, usize::try_from(total).unwrap_or(usize::MAX))?;
        if offsets.get(0) != 0 {
            return Err(malformed("list offsets descend at 0"));
        }
        // Read a few thousand at a time by the column's own loop, not one `get` each.
        const STEP: usize = 4096;
        let mut values = Vec::with_capacity(STEP);
        let mut previous = 0;
        for start in (0..=sources).step_by(STEP) {
            values.clear();
            offsets.decode_range(start..(start + STEP).min(sources + 1), &mut values);
            let before = previous;
            let descends = values.iter().fold(false, |descends, &o| {
                let d = descends | (o < previous);
                previous = o;
                d
            });
            if descends {
                let mut previous = before;
                let k = values.iter().position(|&o| {
                    let d = o < previous;
                    previous = o;
                    d
                });
                let at = start + k.unwrap_or(0);
                return Err(malformed(format!("list offsets descend at {at}")));
            }
        }
        Ok(PackedCsr { offsets, targets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Analysis;
    use crate::graph::NO_SITE;
    use crate::synthetic::{SyntheticConfig, generate};

    fn kept(objects: usize) -> Kept {
        let graph = generate(&SyntheticConfig::new(objects, 4, 5));
        Kept::new(&graph, &Analysis::new(&graph))
    }

    #[test]
    fn a_kept_snapshot_survives_its_bytes() {
        let k = kept(20_000);
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        let back = Kept::decode(&mut bytes.as_slice()).unwrap();
        assert_eq!(back, k);
        // With interior edges and possibly lost blocks.
        let graph = crate::synthetic::with_interior_edges(
            &generate(&SyntheticConfig::new(20_000, 4, 5)),
            4,
        );
        let k = Kept::new(&graph, &Analysis::new(&graph));
        assert!(k.leaks().possibly_lost_objects > 0);
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        assert_eq!(Kept::decode(&mut bytes.as_slice()).unwrap(), k);
    }

    /// Every window of `max` bytes from `offset` is the encoding's bytes there.
    fn assert_window(k: &Kept, head: &EncodedHead, bytes: &[u8], offset: usize, max: usize) {
        let mut window = vec![7];
        k.encode_window(head, offset as u64, max, &mut window);
        let end = bytes.len().min(offset + max);
        assert!(
            window[0] == 7 && window[1..] == bytes[offset..end],
            "the window of {max} bytes at {offset} of {}",
            bytes.len()
        );
    }

    #[test]
    fn windows_of_the_encoding_are_its_bytes() {
        let graph = crate::synthetic::with_interior_edges(
            &generate(&SyntheticConfig::new(20_000, 4, 5)),
            4,
        );
        let mut k = Kept::new(&graph, &Analysis::new(&graph));
        // A column with runs and one with exceptions, so that windows start in their pairs.
        k.addrs = Packed::new(k.objects, |o| {
            if o < 1_000 {
                o as u64
            } else {
                1 << 40 | o as u64
            }
        });
        k.seqs = Packed::new(k.objects, |o| {
            if o % 97 == 0 {
                u64::MAX - o as u64
            } else {
                o as u64
            }
        });
        assert!(k.addrs.runs.len() > 1 && !k.seqs.exceptions.is_empty());
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        let head = k.encoded_head();
        assert_eq!(head.encoded_len(), bytes.len() as u64);
        assert_eq!(head.starts.len(), k.parts(&head.head).len() + 1);
        // Windows in a row, that start and end inside the magic, the head, a column's runs,
        // its bytes.
        for max in [977, 4096, 65_537, bytes.len() / 3, bytes.len()] {
            let mut joined = Vec::new();
            let mut offset = 0;
            while offset < bytes.len() {
                let mut window = Vec::new();
                k.encode_window(&head, offset as u64, max, &mut window);
                assert_eq!(window.len(), max.min(bytes.len() - offset), "at {offset}");
                offset += window.len();
                joined.extend_from_slice(&window);
            }
            assert!(joined == bytes, "windows of {max} bytes");
        }
        // Windows that start at every part's first byte, just before it, just after it and
        // in the middle of the part, and that end at a part's end or past it.
        for (i, pair) in head.starts.windows(2).enumerate() {
            let (start, end) = (pair[0] as usize, pair[1] as usize);
            for offset in [
                start.saturating_sub(1),
                start,
                start + 1,
                start + 13,
                (start + end) / 2,
            ] {
                for max in [1, 12, end - start, end.saturating_sub(offset), 100_000] {
                    if offset < bytes.len() && max > 0 {
                        assert_window(&k, &head, &bytes, offset, max);
                    }
                }
            }
            assert!(start < end, "part {i} is empty");
        }
        let mut past = vec![1, 2];
        k.encode_window(&head, bytes.len() as u64, 10, &mut past);
        assert_eq!(past, [1, 2], "nothing past the end");
        k.encode_window(&head, bytes.len() as u64 + 5, 10, &mut past);
        assert_eq!(past, [1, 2], "nothing past the end");
    }

    /// The split encoding, graph columns then the rest.
    fn split_bytes(graph: &crate::HeapGraph, k: &Kept) -> Vec<u8> {
        let mut bytes = Vec::new();
        GraphColumns::new(graph).encode(&mut bytes).unwrap();
        k.encode_rest(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_kept_snapshot_survives_its_split_bytes() {
        for graph in [
            generate(&SyntheticConfig::new(20_000, 4, 5)),
            // Interior edges and possibly lost blocks.
            crate::synthetic::with_interior_edges(
                &generate(&SyntheticConfig::new(20_000, 4, 5)),
                4,
            ),
        ] {
            let k = Kept::new(&graph, &Analysis::new(&graph));
            let bytes = split_bytes(&graph, &k);
            assert_eq!(Kept::decode_split(&mut bytes.as_slice()).unwrap(), k);
            // The same parts as the whole encoding, the magic twice and the counts once more.
            let mut whole = Vec::new();
            k.encode(&mut whole).unwrap();
            assert_eq!(bytes.len(), whole.len() + 16 + 8 + 1);
        }
        // Ids that are not the sequence numbers travel too.
        let plain = generate(&SyntheticConfig::new(2_000, 2, 3));
        let mut objects = plain.objects().clone();
        objects.id.iter_mut().for_each(|id| *id += 7);
        let graph = crate::HeapGraph::new(
            plain.process.clone(),
            plain.sites.clone(),
            objects,
            plain.edges().clone(),
            plain.threads.clone(),
            plain.globals.clone(),
        )
        .unwrap();
        let k = Kept::new(&graph, &Analysis::new(&graph));
        assert!(k.ids.is_some());
        let bytes = split_bytes(&graph, &k);
        assert_eq!(Kept::decode_split(&mut bytes.as_slice()).unwrap(), k);
    }

    #[test]
    fn split_bytes_cut_short_or_of_two_graphs_are_refused() {
        let graph = generate(&SyntheticConfig::new(2_000, 4, 5));
        let k = Kept::new(&graph, &Analysis::new(&graph));
        let bytes = split_bytes(&graph, &k);
        for cut in [0, 10, 20, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                Kept::decode_split(&mut &bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // The whole encoding is not a split one, and the reverse.
        let mut whole = Vec::new();
        k.encode(&mut whole).unwrap();
        assert!(matches!(
            Kept::decode_split(&mut whole.as_slice()),
            Err(DecodeError::NotKept)
        ));
        assert!(matches!(
            Kept::decode(&mut bytes.as_slice()),
            Err(DecodeError::NotKept)
        ));
        // Another graph's columns before this head.
        let other = generate(&SyntheticConfig::new(2_001, 4, 5));
        let mut mixed = Vec::new();
        GraphColumns::new(&other).encode(&mut mixed).unwrap();
        k.encode_rest(&mut mixed).unwrap();
        let err = Kept::decode_split(&mut mixed.as_slice())
            .unwrap_err()
            .to_string();
        assert!(err.contains("the head is of 2000 objects"), "{err}");
    }

    #[test]
    fn truncated_or_altered_bytes_are_refused() {
        let k = kept(2_000);
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        for cut in [0, 10, 20, bytes.len() / 2, bytes.len() - 1] {
            assert!(Kept::decode(&mut &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong = bytes.clone();
        wrong[12] ^= 1;
        assert!(matches!(
            Kept::decode(&mut wrong.as_slice()),
            Err(DecodeError::NotKept)
        ));
    }

    #[test]
    fn an_impossible_length_is_refused_without_allocating_it() {
        let k = kept(100);
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        // The head's length, then a head claiming 2^60 sites.
        let mut huge = bytes[..24].to_vec();
        huge[16..24].copy_from_slice(&(1u64 << 29).to_le_bytes());
        huge.extend_from_slice(&[0u8; 64]);
        assert!(Kept::decode(&mut huge.as_slice()).is_err());
    }

    #[test]
    fn out_of_range_indices_are_refused() {
        let mut k = kept(1_000);
        let n = k.objects;
        k.doms = Packed::new(n, |o| if o == 7 { n as u64 + 5 } else { 0 });
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        let err = Kept::decode(&mut bytes.as_slice()).unwrap_err().to_string();
        assert!(err.contains("dominator of object 7"), "{err}");
    }

    #[test]
    fn descending_list_offsets_are_refused_where_they_descend() {
        let mut k = kept(10_000);
        let n = k.objects;
        // Offsets over more than one of the decoder's steps of 4096, descending at 5000.
        let edges = k.edges.len() as u64;
        assert!(edges > 2 * n as u64);
        let offsets: Vec<u64> = (0..=n as u64)
            .map(|i| if i == 5000 { 3 } else { i * edges / n as u64 })
            .collect();
        k.edges = PackedCsr::from_columns(Packed::from_slice(&offsets), k.edges.targets.clone());
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        let err = Kept::decode(&mut bytes.as_slice()).unwrap_err().to_string();
        assert!(err.contains("list offsets descend at 5000"), "{err}");
    }

    #[test]
    fn a_value_kept_aside_without_its_marker_is_refused() {
        let mut k = kept(1_000);
        let n = k.objects;
        let mut sizes: Vec<u64> = (0..n as u64).map(|i| 16 + i % 100).collect();
        sizes[40] = 1 << 30;
        k.sizes = Packed::from_slice(&sizes);
        assert_eq!((k.sizes.width(), k.sizes.exceptions.len()), (1, 1));
        let mut bytes = Vec::new();
        k.encode(&mut bytes).unwrap();
        assert_eq!(
            Kept::decode(&mut bytes.as_slice()).unwrap().sizes.get(40),
            1 << 30
        );
        // The marker (0xff) overwritten with a plain offset: the exception is no longer marked.
        let marker = bytes
            .windows(n)
            .position(|w| *w == k.sizes.bytes[..n])
            .expect("the column's bytes");
        bytes[marker + 40] = 3;
        let err = Kept::decode(&mut bytes.as_slice()).unwrap_err().to_string();
        assert!(
            err.contains("keeps aside a value it does not mark"),
            "{err}"
        );
    }

    #[test]
    fn no_site_stays_no_site() {
        let k = kept(500);
        for o in 0..k.objects as u32 {
            assert!(k.site(o) == NO_SITE || (k.site(o) as usize) < k.sites.len());
        }
    }
}
