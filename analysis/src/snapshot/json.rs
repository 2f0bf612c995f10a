//! JSON snapshots, `heaptui-snapshot` version 1 (docs/reference.md §4): interchange, hand-written
//! test graphs and other tools' dumps.
//!
//! The file names objects and sites by arbitrary `u64` ids; reading maps them to the graph's
//! dense indices, and writing maps them back, so write → read gives the same graph. Required:
//! `format`, `version`, `objects` with each object's `id`, `size` and `refs`, `threads` with
//! each thread's `tid` and each frame's `refs`. Everything else has a default: `process`
//! (pid 0, empty command), `sites` (none), an object's `addr` (0), `site`, `thread` and `seq`
//! (unknown), a thread's `name` (empty), `state` and `frames` (none), a frame's `function`
//! (`?`), `module` (empty) and `kind` (`user`), `globals` (no refs). Unknown fields are ignored.
//!
//! A reference (in an object's, a frame's or the globals' `refs`) is an object id, or
//! `{"id": 7, "interior": true}` for an interior edge (only words pointing past the block's
//! first byte); a bare id, or `"interior": false`, is a start edge.
//!
//! A thread's `state` is `"stopped"` (the default: the capture stopped it, its frames are
//! exact) or `{"not-stoppable": "<reason>"}` (the agent could not stop it).
//!
//! Every error names the JSON path of the offending value, e.g.
//! `objects[3].refs[1]: reference to unknown object id 99`.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufWriter, Write};

use serde::de::{self, Deserializer, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

use super::SnapshotError;
use crate::graph::{
    Edges, Frame, FrameKind, HeapGraph, NO_SEQ, NO_SITE, NO_THREAD, ObjectIndex, ObjectRecord,
    Objects, Process, Site, SiteIndex, Thread, ThreadState,
};

/// The value of the `format` field.
pub const JSON_FORMAT: &str = "heaptui-snapshot";

/// The JSON format version this build reads and writes.
pub const JSON_VERSION: u64 = 1;

/// Reads a JSON snapshot.
pub fn read_json(bytes: &[u8]) -> Result<HeapGraph, SnapshotError> {
    // The fast path parses once without tracking paths. Only a file that fails is parsed
    // again, tracking where, and its header first, so that a file of another format or
    // version is named as such instead of failing on whatever field changed shape.
    if let Ok(doc) = serde_json::from_slice::<Doc>(bytes) {
        check_header(&doc.format, doc.version)?;
        return build(doc);
    }
    let header: Header = parse_tracked(bytes)?;
    check_header(&header.format, header.version)?;
    let doc: Doc = parse_tracked(bytes)?;
    build(doc)
}

fn check_header(format: &str, version: u64) -> Result<(), SnapshotError> {
    if format != JSON_FORMAT {
        return Err(SnapshotError::Format {
            found: format!("{format:?}"),
        });
    }
    if version != JSON_VERSION {
        return Err(SnapshotError::JsonVersion { found: version });
    }
    Ok(())
}

fn parse_tracked<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, SnapshotError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(|e| SnapshotError::Json {
        path: String::new(),
        message: e.to_string(),
    })?;
    Ok(value)
}

fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> SnapshotError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let message = if inner.is_eof() {
        format!("truncated JSON: {inner}")
    } else if inner.is_syntax() {
        format!("invalid JSON: {inner}")
    } else {
        inner.to_string()
    };
    SnapshotError::Json { path, message }
}

/// The two fields checked before the rest is parsed (serde skips all others unbuilt).
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u64,
}

#[derive(Deserialize)]
struct Doc {
    format: String,
    version: u64,
    #[serde(default)]
    process: JsonProcess,
    #[serde(default)]
    sites: Vec<JsonSite>,
    objects: Vec<JsonObject>,
    threads: Vec<JsonThread>,
    #[serde(default)]
    globals: JsonGlobals,
}

#[derive(Default, Deserialize)]
struct JsonProcess {
    #[serde(default)]
    pid: u32,
    #[serde(default)]
    command: String,
}

#[derive(Deserialize)]
struct JsonSite {
    id: u64,
    #[serde(default)]
    frames: Vec<String>,
}

#[derive(Deserialize)]
struct JsonObject {
    id: u64,
    #[serde(default)]
    addr: u64,
    size: Size,
    #[serde(default)]
    site: Option<u64>,
    #[serde(default)]
    thread: Option<u32>,
    #[serde(default)]
    seq: Option<u64>,
    refs: Vec<JsonRef>,
}

/// One reference: an id (a start edge) or `{"id": .., "interior": bool}`.
#[derive(Clone, Copy)]
struct JsonRef {
    id: u64,
    interior: bool,
}

impl<'de> Deserialize<'de> for JsonRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RefVisitor;
        impl<'de> Visitor<'de> for RefVisitor {
            type Value = JsonRef;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object id or {\"id\": .., \"interior\": true}")
            }
            fn visit_u64<E: de::Error>(self, id: u64) -> Result<JsonRef, E> {
                Ok(JsonRef {
                    id,
                    interior: false,
                })
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<JsonRef, A::Error> {
                let (mut id, mut interior) = (None, false);
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*key {
                        "id" => id = Some(map.next_value::<u64>()?),
                        "interior" => interior = map.next_value::<bool>()?,
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                let id = id.ok_or_else(|| de::Error::missing_field("id"))?;
                Ok(JsonRef { id, interior })
            }
        }
        d.deserialize_any(RefVisitor)
    }
}

#[derive(Deserialize)]
struct JsonThread {
    tid: u32,
    #[serde(default)]
    name: String,
    #[serde(default)]
    state: JsonState,
    #[serde(default)]
    frames: Vec<JsonFrame>,
}

#[derive(Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
enum JsonState {
    #[default]
    Stopped,
    NotStoppable(String),
}

#[derive(Deserialize)]
struct JsonFrame {
    #[serde(default = "unknown_function")]
    function: String,
    #[serde(default)]
    module: String,
    #[serde(default)]
    kind: FrameKind,
    refs: Vec<JsonRef>,
}

fn unknown_function() -> String {
    "?".to_string()
}

#[derive(Default, Deserialize)]
struct JsonGlobals {
    #[serde(default)]
    refs: Vec<JsonRef>,
}

/// A block size: a non-negative integer, with a clear message for negative ones.
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size in bytes (a non-negative integer)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("negative size {v}")))
            }
        }
        d.deserialize_u64(SizeVisitor)
    }
}

/// Turns the parsed document into a graph, mapping ids to indices and checking every
/// reference.
fn build(doc: Doc) -> Result<HeapGraph, SnapshotError> {
    let n = doc.objects.len();
    if n >= u32::MAX as usize {
        return Err(SnapshotError::TooManyObjects);
    }

    let mut site_index: HashMap<u64, SiteIndex> = HashMap::with_capacity(doc.sites.len());
    let mut sites = Vec::with_capacity(doc.sites.len());
    for (i, s) in doc.sites.into_iter().enumerate() {
        if site_index.insert(s.id, i as SiteIndex).is_some() {
            return Err(SnapshotError::DuplicateSite {
                path: format!("sites[{i}].id"),
                id: s.id,
            });
        }
        sites.push(Site {
            id: s.id,
            frames: s.frames,
        });
    }

    let index = IdIndex::build(doc.objects.iter().map(|o| o.id))?;
    let resolve = |refs: &[JsonRef], path: &dyn Fn(usize) -> String| {
        refs.iter()
            .enumerate()
            .map(|(k, r)| {
                index.get(r.id).map(|o| (o, r.interior)).ok_or_else(|| {
                    SnapshotError::UnknownObject {
                        path: path(k),
                        id: r.id,
                    }
                })
            })
            .collect::<Result<Vec<(ObjectIndex, bool)>, _>>()
    };
    // A root's references as the graph keeps them: every target, and the sorted targets
    // only interior words point into (a target listed both ways is a start reference).
    let root_refs = |refs: Vec<(ObjectIndex, bool)>| -> (Vec<ObjectIndex>, Vec<ObjectIndex>) {
        let mut start: Vec<ObjectIndex> = refs.iter().filter(|r| !r.1).map(|r| r.0).collect();
        start.sort_unstable();
        let mut interior: Vec<ObjectIndex> = refs
            .iter()
            .filter(|r| r.1 && start.binary_search(&r.0).is_err())
            .map(|r| r.0)
            .collect();
        interior.sort_unstable();
        interior.dedup();
        (refs.into_iter().map(|r| r.0).collect(), interior)
    };

    let edge_count = doc.objects.iter().map(|o| o.refs.len()).sum();
    let mut objects = Objects::with_capacity(n);
    let mut edges = Edges::with_capacity(n, edge_count);
    for (i, o) in doc.objects.iter().enumerate() {
        let site = match o.site {
            None => NO_SITE,
            Some(id) => *site_index
                .get(&id)
                .ok_or_else(|| SnapshotError::UnknownSite {
                    path: format!("objects[{i}].site"),
                    id,
                })?,
        };
        objects.push(ObjectRecord {
            id: o.id,
            addr: o.addr,
            size: o.size.0,
            site,
            thread: o.thread.unwrap_or(NO_THREAD),
            seq: o.seq.unwrap_or(NO_SEQ),
        });
        edges.push_with_kinds(resolve(&o.refs, &|k| format!("objects[{i}].refs[{k}]"))?);
    }

    let mut threads = Vec::with_capacity(doc.threads.len());
    let mut tids = HashMap::with_capacity(doc.threads.len());
    for (i, t) in doc.threads.into_iter().enumerate() {
        if tids.insert(t.tid, i).is_some() {
            return Err(SnapshotError::DuplicateThread {
                path: format!("threads[{i}].tid"),
                tid: t.tid,
            });
        }
        let mut frames = Vec::with_capacity(t.frames.len());
        for (j, f) in t.frames.into_iter().enumerate() {
            let (refs, interior) = root_refs(resolve(&f.refs, &|k| {
                format!("threads[{i}].frames[{j}].refs[{k}]")
            })?);
            frames.push(Frame {
                function: f.function,
                module: f.module,
                kind: f.kind,
                refs,
                interior,
            });
        }
        threads.push(Thread {
            tid: t.tid,
            name: t.name,
            state: match t.state {
                JsonState::Stopped => ThreadState::Stopped,
                JsonState::NotStoppable(reason) => ThreadState::NotStoppable(reason),
            },
            frames,
        });
    }
    let (globals, globals_interior) = root_refs(resolve(&doc.globals.refs, &|k| {
        format!("globals.refs[{k}]")
    })?);
    let process = Process {
        pid: doc.process.pid,
        command: doc.process.command,
    };
    Ok(
        HeapGraph::new(process, sites, objects, edges, threads, globals)?
            .with_globals_interior(globals_interior)?,
    )
}

/// Object id → dense index. Ids in a compact range (sequence numbers, `1..=n`, what agents
/// and generators write) go through a table, which is several times faster than hashing
/// for millions of references; scattered ids go through a hash map.
enum IdIndex {
    Table { min: u64, slots: Vec<ObjectIndex> },
    Map(HashMap<u64, ObjectIndex>),
}

impl IdIndex {
    const FREE: ObjectIndex = ObjectIndex::MAX;

    /// Indexes the ids in order; fails on the first id seen twice.
    fn build(ids: impl ExactSizeIterator<Item = u64> + Clone) -> Result<IdIndex, SnapshotError> {
        let n = ids.len();
        let duplicate = |i: usize, id: u64| SnapshotError::DuplicateObject {
            path: format!("objects[{i}].id"),
            id,
        };
        let (min, max) = ids
            .clone()
            .fold((u64::MAX, 0), |(lo, hi), id| (lo.min(id), hi.max(id)));
        // A table of up to four slots per object (16 bytes) costs less than a hash map's
        // entry, and n is below u32::MAX, so the span fits in usize.
        if n > 0 && max - min < 4 * n as u64 {
            let mut slots = vec![Self::FREE; (max - min + 1) as usize];
            for (i, id) in ids.enumerate() {
                let slot = &mut slots[(id - min) as usize];
                if *slot != Self::FREE {
                    return Err(duplicate(i, id));
                }
                *slot = i as ObjectIndex;
            }
            return Ok(IdIndex::Table { min, slots });
        }
        let mut map = HashMap::with_capacity(n);
        for (i, id) in ids.enumerate() {
            if map.insert(id, i as ObjectIndex).is_some() {
                return Err(duplicate(i, id));
            }
        }
        Ok(IdIndex::Map(map))
    }

    fn get(&self, id: u64) -> Option<ObjectIndex> {
        match self {
            IdIndex::Table { min, slots } => id
                .checked_sub(*min)
                .and_then(|k| slots.get(usize::try_from(k).ok()?))
                .copied()
                .filter(|&o| o != Self::FREE),
            IdIndex::Map(map) => map.get(&id).copied(),
        }
    }
}

/// Writes `graph` as a JSON snapshot, objects and sites by their ids, one object, site or
/// thread a line.
///
/// Fails when two objects or two sites share an id: JSON refers to them by id, so such a
/// graph (possible in memory, where objects are addressed by index) has no JSON form.
pub fn write_json(graph: &HeapGraph, out: impl Write) -> Result<(), SnapshotError> {
    graph.validate()?;
    check_unique("object", graph.objects().id.iter().copied())?;
    check_unique("site", graph.sites.iter().map(|s| s.id))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let doc = OutDoc {
        format: JSON_FORMAT,
        version: JSON_VERSION,
        process: &graph.process,
        sites: &graph.sites,
        objects: OutObjects(graph),
        threads: OutThreads(graph),
        globals: OutGlobals {
            refs: OutRefs(graph, &graph.globals, Kinds::Roots(&graph.globals_interior)),
        },
    };
    let mut ser = serde_json::Serializer::with_formatter(&mut out, LineFormatter::default());
    doc.serialize(&mut ser).map_err(|e| {
        if e.is_io() {
            SnapshotError::Io(e.into())
        } else {
            SnapshotError::Encode(e.to_string())
        }
    })?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

fn check_unique(what: &str, ids: impl ExactSizeIterator<Item = u64>) -> Result<(), SnapshotError> {
    let mut seen = HashMap::with_capacity(ids.len());
    for (i, id) in ids.enumerate() {
        if let Some(first) = seen.insert(id, i) {
            return Err(SnapshotError::Encode(format!(
                "{what} id {id} is used twice ({what}s {first} and {i}); JSON names {what}s by id"
            )));
        }
    }
    Ok(())
}

// Borrowing views of the graph in the JSON layout, serialized as they are walked so that
// writing a large graph does not build a second copy of it.

#[derive(Serialize)]
struct OutDoc<'a> {
    format: &'static str,
    version: u64,
    process: &'a Process,
    sites: &'a [Site],
    objects: OutObjects<'a>,
    threads: OutThreads<'a>,
    globals: OutGlobals<'a>,
}

#[derive(Serialize)]
struct OutGlobals<'a> {
    refs: OutRefs<'a>,
}

/// Object indices, written as the objects' ids (`{"id": .., "interior": true}` for an
/// interior edge).
struct OutRefs<'a>(&'a HeapGraph, &'a [ObjectIndex], Kinds<'a>);

/// Where the kinds of a list of references come from.
#[derive(Clone, Copy)]
enum Kinds<'a> {
    /// A root's: the sorted targets that are interior.
    Roots(&'a [ObjectIndex]),
    /// An object's: its references start at this position of the edge list.
    Edges(usize),
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutRef {
    Start(u64),
    Interior { id: u64, interior: bool },
}

impl Serialize for OutRefs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ids = &self.0.objects().id;
        let edges = self.0.edges();
        s.collect_seq(self.1.iter().enumerate().map(|(k, &o)| {
            let interior = match self.2 {
                Kinds::Roots(interior) => interior.binary_search(&o).is_ok(),
                Kinds::Edges(start) => edges.is_interior(start + k),
            };
            let id = ids[o as usize];
            if interior {
                OutRef::Interior { id, interior }
            } else {
                OutRef::Start(id)
            }
        }))
    }
}

struct OutObjects<'a>(&'a HeapGraph);

#[derive(Serialize)]
struct OutObject<'a> {
    id: u64,
    addr: u64,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    site: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    refs: OutRefs<'a>,
}

impl Serialize for OutObjects<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let g = self.0;
        let mut seq = s.serialize_seq(Some(g.object_count()))?;
        for o in 0..g.object_count() as ObjectIndex {
            let r = g.objects().record(o);
            seq.serialize_element(&OutObject {
                id: r.id,
                addr: r.addr,
                size: r.size,
                site: (r.site != NO_SITE).then(|| g.sites[r.site as usize].id),
                thread: (r.thread != NO_THREAD).then_some(r.thread),
                seq: (r.seq != NO_SEQ).then_some(r.seq),
                refs: OutRefs(g, g.edges().of(o), Kinds::Edges(g.edges().range(o).start)),
            })?;
        }
        seq.end()
    }
}

struct OutThreads<'a>(&'a HeapGraph);

#[derive(Serialize)]
struct OutThread<'a> {
    tid: u32,
    name: &'a str,
    state: JsonState,
    frames: Vec<OutFrame<'a>>,
}

#[derive(Serialize)]
struct OutFrame<'a> {
    function: &'a str,
    module: &'a str,
    kind: FrameKind,
    refs: OutRefs<'a>,
}

impl Serialize for OutThreads<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let g = self.0;
        s.collect_seq(g.threads.iter().map(|t| {
            OutThread {
                tid: t.tid,
                name: &t.name,
                state: match &t.state {
                    ThreadState::Stopped => JsonState::Stopped,
                    ThreadState::NotStoppable(reason) => JsonState::NotStoppable(reason.clone()),
                },
                frames: t
                    .frames
                    .iter()
                    .map(|f| OutFrame {
                        function: &f.function,
                        module: &f.module,
                        kind: f.kind,
                        refs: OutRefs(g, &f.refs, Kinds::Roots(&f.interior)),
                    })
                    .collect(),
            }
        }))
    }
}

/// Pretty-prints the outer two levels of a document and writes everything deeper on one
/// line: each object, site and thread of a snapshot gets a line of its own. Fully pretty
/// JSON puts every reference on its own line, which made files several times larger and
/// no easier to read.
#[derive(Default)]
struct LineFormatter {
    depth: usize,
    /// Whether the container open at each broken level has had a value yet.
    has_value: [bool; LineFormatter::BROKEN + 1],
}

impl LineFormatter {
    /// Containers nested this deep or less are broken into lines.
    const BROKEN: usize = 2;

    fn open(&mut self, w: &mut (impl ?Sized + Write), bracket: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        if self.depth <= Self::BROKEN {
            self.has_value[self.depth] = false;
        }
        w.write_all(bracket)
    }

    fn close(&mut self, w: &mut (impl ?Sized + Write), bracket: &[u8]) -> std::io::Result<()> {
        let closed = self.depth;
        self.depth -= 1;
        if closed <= Self::BROKEN && self.has_value[closed] {
            self.newline(w, self.depth)?;
        }
        w.write_all(bracket)
    }

    fn item(&mut self, w: &mut (impl ?Sized + Write), first: bool) -> std::io::Result<()> {
        if self.depth <= Self::BROKEN {
            if !first {
                w.write_all(b",")?;
            }
            self.newline(w, self.depth)
        } else if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn item_done(&mut self) {
        if self.depth <= Self::BROKEN {
            self.has_value[self.depth] = true;
        }
    }

    fn newline(&self, w: &mut (impl ?Sized + Write), depth: usize) -> std::io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for LineFormatter {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.item_done();
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.item_done();
        Ok(())
    }
}
