//! The recording file (docs/reference.md §8 "Recording"): the agent's event stream — allocations,
//! frees, reallocs, threads, modules, counters, snapshot boundaries — in a compact, versioned form
//! that survives a crash of the target: a record cut short at the end of the file is ignored.
//!
//! Layout: the 12-byte [`MAGIC`] `HEAPTUI\0REC\0`, the version as a little-endian `u32`
//! ([`RECORDING_VERSION`]), then records. A record is a tag byte, the payload length as an
//! LEB128 varint, and the payload: LEB128 varints, strings as length + UTF-8. Addresses are
//! written as zigzag differences from the previous address of any record, sequence numbers as
//! differences from the previous sequence number, so a typical allocation takes about ten
//! bytes. A record with a tag this version does not know is skipped by its length, so later
//! versions may add records without breaking readers.
//!
//! Strings and stacks are interned: a [`Event::String`] or [`Event::Stack`] record defines the
//! next id, and events refer to ids. [`RecordingWriter::stack`] interns for the writer.
//!
//! [`replay`] feeds a recording through `views::Tracker` (mark-and-count, units, ages).
//! This module reads and writes bytes it is given; it must never know about the agent's
//! hooks, threads or sockets.

use std::io::{self, Write};

use thiserror::Error;

use crate::views::ages::Boundary;
use crate::views::units::AllocKind;
use crate::views::{NO_STACK, StackId, StackTable, Tracker, TrackerConfig};

/// The first bytes of every recording.
pub const MAGIC: [u8; 12] = *b"HEAPTUI\0REC\0";

/// The recording version this build reads and writes.
pub const RECORDING_VERSION: u32 = 1;

const HEADER_LEN: usize = MAGIC.len() + 4;

/// Longest payload a reader accepts: a stack of thousands of frames fits many times over;
/// anything longer is damage, not data.
const MAX_PAYLOAD: u64 = 1 << 24;

mod tag {
    pub const STRING: u8 = 1;
    pub const STACK: u8 = 2;
    pub const MODULE: u8 = 3;
    pub const THREAD: u8 = 4;
    pub const ALLOC: u8 = 5;
    pub const FREE: u8 = 6;
    pub const REALLOC: u8 = 7;
    pub const COUNTERS: u8 = 8;
    pub const SNAPSHOT: u8 = 9;
    pub const CLOCK: u8 = 10;
    pub const LOST: u8 = 11;
}

/// The counters as the agent read them (the protocol's `LiveCounters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordedCounters {
    pub live_bytes: u64,
    pub live_blocks: u64,
    pub allocated_bytes: u64,
    pub peak_live_bytes: u64,
    pub unix_ms: u64,
}

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Defines the next string id.
    String(String),
    /// Defines the next stack id: `(function, module)` string ids, innermost first.
    Stack(Vec<(u32, u32)>),
    /// A loaded module (name is a string id). Write the program's own module first: units
    /// take it as the program for stacks that do not reach `main`.
    Module {
        name: u32,
        base: u64,
        size: u64,
    },
    /// A thread and its name (a string id).
    Thread {
        tid: u32,
        name: u32,
    },
    Alloc {
        kind: AllocKind,
        seq: u64,
        addr: u64,
        size: u64,
        stack: StackId,
        tid: u32,
    },
    /// `addr == 0` is `free(NULL)`.
    Free {
        addr: u64,
        stack: StackId,
        tid: u32,
    },
    /// `old_addr == 0` is `realloc(NULL, size)`. The new block gets a new sequence number
    /// (its age restarts). A failed realloc is not recorded; `realloc(p, 0)` that frees is a
    /// `Free`.
    Realloc {
        seq: u64,
        old_addr: u64,
        new_addr: u64,
        size: u64,
        stack: StackId,
        tid: u32,
    },
    Counters(RecordedCounters),
    /// A snapshot was taken after allocation `last_seq`.
    Snapshot(Boundary),
    /// Wall-clock time, ms since the Unix epoch; later allocations are stamped with it.
    Clock {
        unix_ms: u64,
    },
    /// Events the agent could not record so far (its event buffer was full), a running total:
    /// a recording with any is incomplete (its figures are a lower bound).
    Lost {
        events: u64,
    },
}

/// Why a recording could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordingError {
    #[error("not a heaptui recording (wrong magic)")]
    BadMagic,
    #[error(
        "heaptui recording: unsupported version {0} (this heaptui reads version {RECORDING_VERSION})"
    )]
    Version(u32),
    #[error("heaptui recording: damaged record at byte {offset}: {what}")]
    Damaged { offset: usize, what: &'static str },
}

// ---- writing ----

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Stack ids are written shifted by one so that "no stack" is the one-byte 0.
fn stack_code(stack: StackId) -> u64 {
    if stack == NO_STACK {
        0
    } else {
        stack as u64 + 1
    }
}

fn kind_code(kind: AllocKind) -> u64 {
    match kind {
        AllocKind::Malloc => 0,
        AllocKind::Calloc => 1,
        AllocKind::Memalign => 2,
    }
}

/// The delta state shared by writer and reader: both update it per whole record.
#[derive(Clone, Copy, Debug, Default)]
struct Deltas {
    addr: u64,
    seq: u64,
}

impl Deltas {
    fn addr_out(&mut self, out: &mut Vec<u8>, addr: u64) {
        put_varint(out, zigzag(addr.wrapping_sub(self.addr) as i64));
        self.addr = addr;
    }

    fn seq_out(&mut self, out: &mut Vec<u8>, seq: u64) {
        put_varint(out, zigzag(seq.wrapping_sub(self.seq) as i64));
        self.seq = seq;
    }
}

/// Writes a recording. Buffer `out` (a `BufWriter`, or the agent's own buffer): each event is
/// one `write_all` of a complete record, so a crash cuts at most the last record.
pub struct RecordingWriter<W: Write> {
    out: W,
    deltas: Deltas,
    record: Vec<u8>,
    table: StackTable,
    scratch: Vec<(u32, u32)>,
}

impl<W: Write> RecordingWriter<W> {
    /// Writes the header.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        out.write_all(&RECORDING_VERSION.to_le_bytes())?;
        Ok(RecordingWriter {
            out,
            deltas: Deltas::default(),
            record: Vec::with_capacity(80),
            table: StackTable::new(),
            scratch: Vec::new(),
        })
    }

    /// The id of a string, writing its definition first if it is new.
    pub fn string(&mut self, s: &str) -> io::Result<u32> {
        let (id, new) = self.table.intern(s);
        if new {
            self.write_raw(&Event::String(s.to_string()))?;
        }
        Ok(id)
    }

    /// The id of a stack of `(function, module)` names, innermost first, writing the
    /// definitions of it and its new strings first.
    pub fn stack<'s>(
        &mut self,
        frames: impl IntoIterator<Item = (&'s str, &'s str)>,
    ) -> io::Result<StackId> {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        for (function, module) in frames {
            let f = self.string(function)?;
            let m = self.string(module)?;
            ids.push((f, m));
        }
        let (id, new) = self.table.intern_stack(&ids);
        if new {
            self.write_raw(&Event::Stack(ids.clone()))?;
        }
        self.scratch = ids;
        Ok(id)
    }

    /// Writes one event. `String` and `Stack` events written here must follow the writer's
    /// own numbering; prefer [`RecordingWriter::string`] and [`RecordingWriter::stack`].
    pub fn write(&mut self, event: &Event) -> io::Result<()> {
        match event {
            Event::String(s) => {
                self.table.push_string(s.clone());
            }
            Event::Stack(frames) => {
                self.table.push_stack(frames);
            }
            _ => {}
        }
        self.write_raw(event)
    }

    fn write_raw(&mut self, event: &Event) -> io::Result<()> {
        // The payload is encoded in place after a tag byte and a one-byte length, which every
        // record but a long string or stack fits; those are moved up once their length is known.
        let p = &mut self.record;
        p.clear();
        p.extend_from_slice(&[0, 0]);
        let d = &mut self.deltas;
        let tag = match event {
            Event::String(s) => {
                put_varint(p, s.len() as u64);
                p.extend_from_slice(s.as_bytes());
                tag::STRING
            }
            Event::Stack(frames) => {
                put_varint(p, frames.len() as u64);
                for &(f, m) in frames {
                    put_varint(p, f as u64);
                    put_varint(p, m as u64);
                }
                tag::STACK
            }
            &Event::Module { name, base, size } => {
                put_varint(p, name as u64);
                put_varint(p, base);
                put_varint(p, size);
                tag::MODULE
            }
            &Event::Thread { tid, name } => {
                put_varint(p, tid as u64);
                put_varint(p, name as u64);
                tag::THREAD
            }
            &Event::Alloc {
                kind,
                seq,
                addr,
                size,
                stack,
                tid,
            } => {
                put_varint(p, kind_code(kind));
                d.seq_out(p, seq);
                d.addr_out(p, addr);
                put_varint(p, size);
                put_varint(p, stack_code(stack));
                put_varint(p, tid as u64);
                tag::ALLOC
            }
            &Event::Free { addr, stack, tid } => {
                d.addr_out(p, addr);
                put_varint(p, stack_code(stack));
                put_varint(p, tid as u64);
                tag::FREE
            }
            &Event::Realloc {
                seq,
                old_addr,
                new_addr,
                size,
                stack,
                tid,
            } => {
                d.seq_out(p, seq);
                d.addr_out(p, old_addr);
                d.addr_out(p, new_addr);
                put_varint(p, size);
                put_varint(p, stack_code(stack));
                put_varint(p, tid as u64);
                tag::REALLOC
            }
            Event::Counters(c) => {
                for v in [
                    c.live_bytes,
                    c.live_blocks,
                    c.allocated_bytes,
                    c.peak_live_bytes,
                    c.unix_ms,
                ] {
                    put_varint(p, v);
                }
                tag::COUNTERS
            }
            Event::Snapshot(b) => {
                put_varint(p, b.last_seq);
                put_varint(p, b.unix_ms);
                tag::SNAPSHOT
            }
            &Event::Clock { unix_ms } => {
                put_varint(p, unix_ms);
                tag::CLOCK
            }
            &Event::Lost { events } => {
                put_varint(p, events);
                tag::LOST
            }
        };
        let r = &mut self.record;
        r[0] = tag;
        let len = r.len() - 2;
        if len < 0x80 {
            r[1] = len as u8;
        } else {
            let mut prefix = Vec::with_capacity(4);
            put_varint(&mut prefix, len as u64);
            r.splice(1..2, prefix);
        }
        self.out.write_all(r)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

// ---- reading ----

/// A cursor over one record's payload; `None` means the payload ended early.
struct Payload<'a> {
    bytes: &'a [u8],
}

impl Payload<'_> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.bytes.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Some(v);
            }
        }
        None
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint()?).ok()
    }

    fn stack(&mut self) -> Option<StackId> {
        match self.varint()? {
            0 => Some(NO_STACK),
            s => u32::try_from(s - 1).ok().filter(|&s| s != NO_STACK),
        }
    }
}

/// Where a reader stopped: after its last whole record. A recording still being written is
/// read on from there with [`RecordingReader::resume`], without reading its start again.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadPosition {
    /// Byte offset in the file.
    pub offset: u64,
    deltas: Deltas,
}

/// Reads a recording's events in order; see [`RecordingReader::truncated`] for a cut tail.
pub struct RecordingReader<'a> {
    bytes: &'a [u8],
    /// File offset of `bytes[0]`.
    base: u64,
    pos: usize,
    deltas: Deltas,
    truncated: Option<usize>,
    failed: bool,
}

impl<'a> RecordingReader<'a> {
    /// Checks the header.
    pub fn new(bytes: &'a [u8]) -> Result<Self, RecordingError> {
        if bytes.len() < HEADER_LEN || bytes[..MAGIC.len()] != MAGIC {
            return Err(RecordingError::BadMagic);
        }
        let mut version = [0u8; 4];
        version.copy_from_slice(&bytes[MAGIC.len()..HEADER_LEN]);
        let version = u32::from_le_bytes(version);
        if version != RECORDING_VERSION {
            return Err(RecordingError::Version(version));
        }
        Ok(RecordingReader {
            bytes,
            base: 0,
            pos: HEADER_LEN,
            deltas: Deltas::default(),
            truncated: None,
            failed: false,
        })
    }

    /// Reads on from `at`: `bytes` are the file's bytes from `at.offset` on (the header was
    /// checked by the reader that stopped there).
    pub fn resume(bytes: &'a [u8], at: ReadPosition) -> Self {
        RecordingReader {
            bytes,
            base: at.offset,
            pos: 0,
            deltas: at.deltas,
            truncated: None,
            failed: false,
        }
    }

    /// Where this reader stands: after the last whole record it returned (before a cut
    /// record at the end).
    pub fn position(&self) -> ReadPosition {
        ReadPosition {
            offset: self.base + self.pos as u64,
            deltas: self.deltas,
        }
    }

    /// Whether `bytes` start like a recording.
    pub fn looks_like(bytes: &[u8]) -> bool {
        bytes.starts_with(&MAGIC)
    }

    /// The byte offset of a record cut short by the end of the file, once reading got there.
    pub fn truncated(&self) -> Option<usize> {
        self.truncated
    }

    fn next_event(&mut self) -> Result<Option<Event>, RecordingError> {
        loop {
            let start = self.pos;
            let rest = &self.bytes[start..];
            if rest.is_empty() {
                return Ok(None);
            }
            let tag = rest[0];
            if tag == 0 && rest.iter().all(|&b| b == 0) {
                // Zero-filled space after the last record (a preallocated or mapped file cut
                // by a crash): the tail that was never written.
                self.truncated = Some(self.base as usize + start);
                return Ok(None);
            }
            let mut header = Payload { bytes: &rest[1..] };
            let Some(len) = header.varint() else {
                self.truncated = Some(self.base as usize + start);
                return Ok(None);
            };
            if len > MAX_PAYLOAD {
                return Err(RecordingError::Damaged {
                    offset: start,
                    what: "record longer than any heaptui writes",
                });
            }
            let body_start = rest.len() - header.bytes.len();
            if header.bytes.len() < len as usize {
                self.truncated = Some(self.base as usize + start);
                return Ok(None);
            }
            let body = &rest[body_start..body_start + len as usize];
            self.pos = start + body_start + len as usize;
            let damaged = |what| RecordingError::Damaged {
                offset: start,
                what,
            };
            let mut p = Payload { bytes: body };
            let event = match tag {
                tag::STRING => {
                    let n = p.varint().ok_or(damaged("string length"))? as usize;
                    if p.bytes.len() < n {
                        return Err(damaged("string longer than its record"));
                    }
                    let s = std::str::from_utf8(&p.bytes[..n])
                        .map_err(|_| damaged("string is not UTF-8"))?;
                    Event::String(s.to_string())
                }
                tag::STACK => {
                    let n = p.varint().ok_or(damaged("stack length"))?;
                    // Each frame takes at least two bytes: bound the allocation by the payload.
                    if n > body.len() as u64 / 2 {
                        return Err(damaged("stack longer than its record"));
                    }
                    let mut frames = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        let f = p.u32().ok_or(damaged("stack frame"))?;
                        let m = p.u32().ok_or(damaged("stack frame"))?;
                        frames.push((f, m));
                    }
                    Event::Stack(frames)
                }
                tag::MODULE => Event::Module {
                    name: p.u32().ok_or(damaged("module"))?,
                    base: p.varint().ok_or(damaged("module"))?,
                    size: p.varint().ok_or(damaged("module"))?,
                },
                tag::THREAD => Event::Thread {
                    tid: p.u32().ok_or(damaged("thread"))?,
                    name: p.u32().ok_or(damaged("thread"))?,
                },
                tag::ALLOC => {
                    let kind = match p.varint().ok_or(damaged("alloc"))? {
                        0 => AllocKind::Malloc,
                        1 => AllocKind::Calloc,
                        2 => AllocKind::Memalign,
                        _ => return Err(damaged("unknown allocation kind")),
                    };
                    let seq = self.seq(&mut p).ok_or(damaged("alloc"))?;
                    let addr = self.addr(&mut p).ok_or(damaged("alloc"))?;
                    Event::Alloc {
                        kind,
                        seq,
                        addr,
                        size: p.varint().ok_or(damaged("alloc"))?,
                        stack: p.stack().ok_or(damaged("alloc"))?,
                        tid: p.u32().ok_or(damaged("alloc"))?,
                    }
                }
                tag::FREE => Event::Free {
                    addr: self.addr(&mut p).ok_or(damaged("free"))?,
                    stack: p.stack().ok_or(damaged("free"))?,
                    tid: p.u32().ok_or(damaged("free"))?,
                },
                tag::REALLOC => {
                    let seq = self.seq(&mut p).ok_or(damaged("realloc"))?;
                    let old_addr = self.addr(&mut p).ok_or(damaged("realloc"))?;
                    let new_addr = self.addr(&mut p).ok_or(damaged("realloc"))?;
                    Event::Realloc {
                        seq,
                        old_addr,
                        new_addr,
                        size: p.varint().ok_or(damaged("realloc"))?,
                        stack: p.stack().ok_or(damaged("realloc"))?,
                        tid: p.u32().ok_or(damaged("realloc"))?,
                    }
                }
                tag::COUNTERS => {
                    let mut v = [0u64; 5];
                    for x in &mut v {
                        *x = p.varint().ok_or(damaged("counters"))?;
                    }
                    Event::Counters(RecordedCounters {
                        live_bytes: v[0],
                        live_blocks: v[1],
                        allocated_bytes: v[2],
                        peak_live_bytes: v[3],
                        unix_ms: v[4],
                    })
                }
                tag::SNAPSHOT => Event::Snapshot(Boundary {
                    last_seq: p.varint().ok_or(damaged("snapshot"))?,
                    unix_ms: p.varint().ok_or(damaged("snapshot"))?,
                }),
                tag::CLOCK => Event::Clock {
                    unix_ms: p.varint().ok_or(damaged("clock"))?,
                },
                tag::LOST => Event::Lost {
                    events: p.varint().ok_or(damaged("lost"))?,
                },
                0 => return Err(damaged("zero tag (zero-filled space, not a record)")),
                // A record of a later minor version: skipped by its length.
                _ => continue,
            };
            return Ok(Some(event));
        }
    }

    fn addr(&mut self, p: &mut Payload<'_>) -> Option<u64> {
        let a = self.deltas.addr.wrapping_add(unzigzag(p.varint()?) as u64);
        self.deltas.addr = a;
        Some(a)
    }

    fn seq(&mut self, p: &mut Payload<'_>) -> Option<u64> {
        let s = self.deltas.seq.wrapping_add(unzigzag(p.varint()?) as u64);
        self.deltas.seq = s;
        Some(s)
    }
}

impl Iterator for RecordingReader<'_> {
    type Item = Result<Event, RecordingError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads every event; a truncated tail is ignored (its offset is returned).
pub fn read_all(bytes: &[u8]) -> Result<(Vec<Event>, Option<usize>), RecordingError> {
    let mut reader = RecordingReader::new(bytes)?;
    let events = reader.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok((events, reader.truncated()))
}

/// The figures of a replayed recording.
#[derive(Debug)]
pub struct Replay {
    pub tracker: Tracker,
    pub events: u64,
    /// Offset of a record cut short at the end (the target crashed mid-write).
    pub truncated: Option<usize>,
}

/// Feeds a recording through a [`Tracker`]: counters with the automatic-snapshot rule, units
/// and live blocks for ages, as the live agent computes them from the same events.
pub fn replay(bytes: &[u8], config: TrackerConfig) -> Result<Replay, RecordingError> {
    let mut reader = RecordingReader::new(bytes)?;
    let mut tracker = Tracker::new(config);
    let mut events = 0;
    for event in reader.by_ref() {
        tracker.apply(&event?);
        events += 1;
    }
    Ok(Replay {
        tracker,
        events,
        truncated: reader.truncated(),
    })
}
