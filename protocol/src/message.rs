//! The messages exchanged after the handshake (docs/reference.md §6): the client's [`Request`]s,
//! the server's [`ServerMessage`]s (answers matched by [`RequestId`], and unsolicited [`Push`]es).
//!
//! Shapes only: every row type is small and flat so that a page of [`MAX_PAGE_ROWS`] rows stays
//! well under the frame maximum; lists that could grow without bound inside one row are
//! [`IdList`]s with a cap and the full count. Snapshot-scoped handles (group ids, object and
//! site indices) are only meaningful with the [`SnapshotId`] they came with; requests using them
//! carry it, and the server answers [`ErrorKind::StaleSnapshot`] once that snapshot is gone.
//!
//! The enums are `#[non_exhaustive]` so that adding a request is not a breaking change for
//! Rust users; on the wire any change at all means a new [`crate::PROTOCOL_VERSION`] (the
//! golden fixtures in `tests/golden/` make that loud). Building answers from an analysis is
//! `answer`'s job, never this module's.

use heaptui_analysis as engine;
use serde::{Deserialize, Serialize};

use crate::ids::{FrameKind, GroupId, ObjectClass, Sharer, ThreadState};
pub use crate::views::*;

/// Most rows one page may carry; larger `limit`s are clamped by the server.
pub const MAX_PAGE_ROWS: u32 = 10_000;

/// Most group ids one frame row carries per list ([`IdList::total`] gives the full count).
pub const MAX_IDS_PER_ROW: usize = 256;

/// Most group ids a group answer carries per list.
pub const MAX_IDS_PER_GROUP: usize = 10_000;

/// Most allocation-stack frames an object or site row carries.
pub const MAX_STACK_FRAMES: usize = 128;

/// Most bytes of the snapshot file one [`Response::SnapshotData`] chunk carries.
pub const MAX_CHUNK_BYTES: u32 = 8 << 20;

/// Chosen by the client, echoed by the server in the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// Names one snapshot of one agent; the offline `heaptui open` uses the id the file is given.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct SnapshotId(pub u64);

/// A window of rows: rows `offset .. offset + limit` of the sorted list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub offset: u32,
    pub limit: u32,
}

impl Page {
    pub const fn new(offset: u32, limit: u32) -> Self {
        Page { offset, limit }
    }

    /// The first page of the largest size.
    pub const FIRST: Page = Page {
        offset: 0,
        limit: MAX_PAGE_ROWS,
    };

    /// The limit actually served: at most [`MAX_PAGE_ROWS`].
    pub fn clamped_limit(self) -> u32 {
        self.limit.min(MAX_PAGE_ROWS)
    }
}

/// Where a page sits in its list. `rows.len()` may be smaller than the requested limit when
/// the list ends or the page reached the answer's byte budget; the client continues from
/// `offset + rows.len()` while that is below `total`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageInfo {
    pub offset: u32,
    pub total: u32,
}

/// A bounded list of group ids: the first ids (ascending) and how many there are in all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdList {
    pub ids: Vec<GroupId>,
    pub total: u32,
}

impl IdList {
    /// Keeps at most `cap` of `ids` (which the engine gives ascending).
    pub fn capped(ids: impl IntoIterator<Item = engine::GroupId>, cap: usize) -> Self {
        let mut total = 0u32;
        let mut kept = Vec::new();
        for id in ids {
            if kept.len() < cap {
                kept.push(id.into());
            }
            total = total.saturating_add(1);
        }
        IdList { ids: kept, total }
    }

    /// Whether ids were left out.
    pub fn is_truncated(&self) -> bool {
        (self.ids.len() as u64) < u64::from(self.total)
    }
}

/// Sort direction; ties are always broken by the row's natural key ascending (tid, object
/// index, site index) so that consecutive pages neither repeat nor skip rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    Ascending,
    Descending,
}

/// Thread ranking order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThreadKey {
    Total,
    Proprietary,
    Shared,
    Tid,
    Name,
    /// Number of frames.
    Frames,
}

/// Object page order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectKey {
    Size,
    Addr,
    /// Allocation order: ascending is oldest first.
    Seq,
    Id,
    /// Alphabetical by the allocation-site label.
    Site,
    /// Allocating thread id.
    Thread,
    /// Dense object index (the snapshot's order).
    Index,
}

/// Site list order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SiteKey {
    LiveBytes,
    Blocks,
    Label,
}

/// A sort order for a list of rows keyed by `K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sort<K> {
    pub key: K,
    pub direction: Direction,
}

impl<K> Sort<K> {
    pub const fn desc(key: K) -> Self {
        Sort {
            key,
            direction: Direction::Descending,
        }
    }

    pub const fn asc(key: K) -> Self {
        Sort {
            key,
            direction: Direction::Ascending,
        }
    }
}

/// One request from the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub id: RequestId,
    pub body: RequestBody,
}

/// What the client asks.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestBody {
    /// The process, the live counters and the latest snapshot → [`Response::ProcessInfo`].
    ProcessInfo,
    /// Start pushing [`Push::Counters`] about once a second → [`Response::Subscribed`].
    Subscribe,
    /// Stop the pushes → [`Response::Unsubscribed`].
    Unsubscribe,
    /// Stop the world, capture, analyse, keep the result → [`Response::Snapshot`].
    TakeSnapshot,
    /// The thread ranking of the latest snapshot → [`Response::Threads`].
    Threads { sort: Sort<ThreadKey>, page: Page },
    /// One thread's frames, innermost first → [`Response::Frames`].
    Frames { tid: u32, page: Page },
    /// One group → [`Response::Group`].
    Group {
        snapshot: SnapshotId,
        group: GroupId,
    },
    /// A page of a group's member objects → [`Response::Objects`]; with a `filter`, only the
    /// members it matches (see [`ObjectFilter`]), and the page counts those.
    GroupObjects {
        snapshot: SnapshotId,
        group: GroupId,
        sort: Sort<ObjectKey>,
        page: Page,
        filter: Option<ObjectFilter>,
    },
    /// A page of the live objects allocated at one site → [`Response::Objects`], filtered
    /// like [`RequestBody::GroupObjects`].
    SiteObjects {
        snapshot: SnapshotId,
        site: u32,
        sort: Sort<ObjectKey>,
        page: Page,
        filter: Option<ObjectFilter>,
    },
    /// One object with its class, allocation stack and a page of its outgoing and incoming
    /// references (`refs` applies to both lists) → [`Response::Object`].
    Object {
        snapshot: SnapshotId,
        object: u32,
        refs: Page,
    },
    /// Allocation sites with their live bytes and blocks → [`Response::Sites`].
    Sites { sort: Sort<SiteKey>, page: Page },
    /// What ending all of these threads would free, docs/reference.md §3 → [`Response::Release`].
    Release { tids: Vec<u32> },
    /// The memory-shortage policy in force → [`Response::Policy`].
    Policy,
    /// Cancel a thread under the policy (docs/reference.md §7) → [`Response::Cancel`].
    Cancel { tid: u32, dry_run: bool },
    /// The kept snapshot's whole heap graph as a binary snapshot file (docs/reference.md §4), bytes
    /// `offset ..` up to [`MAX_CHUNK_BYTES`] → [`Response::SnapshotData`]. For `heaptui
    /// snapshot` and the live report, which need every object rather than pages.
    SnapshotData { snapshot: SnapshotId, offset: u64 },
    /// Allocation counts and live bytes per unit (docs/reference.md §8 "Allocation units"), the
    /// unit chosen by `query` → [`Response::Units`]. Needs the agent's event stream; without it
    /// the answer is [`ErrorKind::Refused`] with the reason.
    Units {
        query: UnitQuery,
        sort: Sort<UnitKey>,
        page: Page,
    },
    /// Unreachable blocks of the kept snapshot by allocation site, most bytes first →
    /// [`Response::Leaks`].
    Leaks { page: Page },
    /// Per-site live bytes across the snapshots taken so far, flagged sites first →
    /// [`Response::Growth`].
    Growth { page: Page },
    /// Block ages of the kept snapshot: the histogram, one row per site or thread, and the
    /// `oldest` longest-lived blocks → [`Response::Ages`].
    Ages {
        by: AgeScope,
        page: Page,
        oldest: u32,
    },
    /// The live counters of the recent past, oldest first, for the live-vs-allocated chart →
    /// [`Response::CounterHistory`].
    CounterHistory,
    /// The kept snapshot as the agent analysed it (the `heaptui_analysis::Kept` codec: figures,
    /// groups, classes and the compact graph), bytes `offset ..` up to [`MAX_CHUNK_BYTES`] →
    /// [`Response::KeptData`]. For the live report, which then prints the agent's analysis
    /// instead of analysing the graph a second time.
    KeptData { snapshot: SnapshotId, offset: u64 },
}

/// One message from the server.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerMessage {
    /// The answer to the request with this id (boxed: answers are large, pushes are not,
    /// and the box costs nothing on the wire).
    Response { id: RequestId, body: Box<Response> },
    /// Sent unasked to subscribed clients.
    Push(Push),
}

/// The answer to one request.
// A response lives for one answer and travels boxed inside a `Message` already; a box more
// around process info (two snapshot summaries) would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    ProcessInfo(ProcessInfo),
    Subscribed { interval_ms: u32 },
    Unsubscribed,
    Snapshot(SnapshotInfo),
    Threads(ThreadPage),
    Frames(FramePage),
    Group(GroupInfo),
    Objects(ObjectPage),
    Object(ObjectDetail),
    Sites(SitePage),
    Release(ReleaseAnswer),
    Policy(PolicyAnswer),
    Cancel(CancelVerdict),
    Error(ErrorAnswer),
    SnapshotData(SnapshotChunk),
    Units(UnitPage),
    Leaks(LeakPage),
    Growth(GrowthPage),
    Ages(AgesAnswer),
    CounterHistory(CounterHistory),
    KeptData(SnapshotChunk),
}

/// Unsolicited messages.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Push {
    Counters(LiveCounters),
    /// The autonomous mode found memory short (docs/reference.md §7): what it did about it.
    Shortage(ShortageReport),
    /// A cancel that acted has been followed up: the release measured after the threads
    /// ended, beside the prediction (the audit log's `measured` line).
    ReleaseMeasured(MeasuredRelease),
}

/// The agent's mark-and-count figures (docs/reference.md §8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveCounters {
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Bytes allocated since the agent loaded, freed or not.
    pub allocated_bytes: u64,
    pub peak_live_bytes: u64,
    /// When the counters were read, milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

/// Whole-heap totals of a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub objects: u64,
    pub bytes: u64,
    pub unreachable_bytes: u64,
    pub global_only_bytes: u64,
}

/// The leak classes of a snapshot (docs/reference.md §3): `bytes` and `objects` are the
/// unreachable blocks (definitely + indirectly lost); possibly lost blocks are reachable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaks {
    pub bytes: u64,
    pub objects: u64,
    pub definitely_lost: u64,
    pub indirectly_lost: u64,
    pub definitely_lost_objects: u64,
    pub indirectly_lost_objects: u64,
    pub possibly_lost: u64,
    pub possibly_lost_objects: u64,
}

/// One snapshot: its id, what it cost, what it found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub snapshot: SnapshotId,
    /// When it was taken, milliseconds since the Unix epoch (0 when unknown, e.g. a file).
    pub taken_unix_ms: u64,
    /// How long the target's threads were stopped.
    pub pause_us: u64,
    /// Stack walking and pointer scan (includes the pause).
    pub capture_us: u64,
    pub analysis_us: u64,
    pub threads: u32,
    /// Threads the capture could not stop (docs/reference.md §3): their frames are unknown,
    /// so the snapshot is incomplete and its leak figures may be overstated.
    pub threads_not_stopped: u32,
    pub totals: Totals,
    pub leaks: Leaks,
    /// Memory the agent spends keeping this snapshot and its analysis for drill-down.
    pub held_bytes: u64,
}

/// The profiled process and its agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub command: String,
    pub agent_version: String,
    pub counters: LiveCounters,
    /// Threads alive now (not at the snapshot).
    pub threads: u32,
    /// The snapshot kept for drill-down, if one was taken.
    pub snapshot: Option<SnapshotInfo>,
    pub policy_loaded: bool,
    /// The automatic snapshot taken at the highest live bytes so far (docs/reference.md §8), kept
    /// until a higher one replaces it; its graph is fetched with [`RequestBody::SnapshotData`].
    pub peak_snapshot: Option<SnapshotInfo>,
    /// The automatic snapshot rule in force.
    pub snapshot_rule: SnapshotRule,
}

/// One row of the thread ranking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRow {
    pub tid: u32,
    pub name: String,
    pub state: ThreadState,
    /// `Σ size(o) : T(o) = {t}` — also the release of this thread alone (docs/reference.md §3), so
    /// a single-thread release ranking needs no [`RequestBody::Release`] per thread.
    pub proprietary: u64,
    pub shared: u64,
    pub total: u64,
    pub frames: u32,
}

/// A page of the thread ranking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPage {
    pub snapshot: SnapshotId,
    pub page: PageInfo,
    pub rows: Vec<ThreadRow>,
}

/// One frame of a thread, with what it holds (docs/reference.md §3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameRow {
    /// 0 is the innermost frame.
    pub index: u32,
    pub function: String,
    pub module: String,
    pub kind: FrameKind,
    /// Bytes frame-proprietary to this frame.
    pub proprietary: u64,
    /// Frame-shared groups the frame refers to directly.
    pub frame_shared: IdList,
    /// Thread-shared groups the frame refers to directly.
    pub thread_shared: IdList,
    /// Every group reachable through referents (the developed chain `F3 → T1 → F2`).
    pub developed: IdList,
}

/// A page of one thread's frames.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FramePage {
    pub snapshot: SnapshotId,
    pub tid: u32,
    pub page: PageInfo,
    pub rows: Vec<FrameRow>,
}

/// One object as a row of a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRow {
    /// Dense index: the handle for [`RequestBody::Object`] within this snapshot.
    pub index: u32,
    /// The snapshot's identifier of the block (the agent uses its sequence number).
    pub id: u64,
    pub addr: u64,
    pub size: u64,
    /// Allocation-site index, `u32::MAX` when unknown.
    pub site: u32,
    pub site_label: String,
    /// Allocating thread id, 0 when unknown.
    pub thread: u32,
    /// Allocation sequence number, 0 when unknown.
    pub seq: u64,
    /// Snapshots this block survived; `None` when the source does not track ages.
    pub age: Option<u32>,
}

/// A shared-memory group (docs/reference.md §3 "Groups").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    pub snapshot: SnapshotId,
    pub id: GroupId,
    pub entry: ObjectRow,
    /// The allocation site of the entry.
    pub label: String,
    pub size: u64,
    pub members: u64,
    /// Threads, ascending, then globals.
    pub sharers: Vec<Sharer>,
    pub direct: IdList,
    pub developed: IdList,
}

/// A page of objects (of a group or of a site).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectPage {
    pub snapshot: SnapshotId,
    pub page: PageInfo,
    pub rows: Vec<ObjectRow>,
}

/// Who points at an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Referrer {
    /// A stack frame (`frame` 0 is the innermost).
    Frame {
        tid: u32,
        frame: u32,
        function: String,
    },
    Globals,
    Object(ObjectRow),
}

/// One object in detail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectDetail {
    pub snapshot: SnapshotId,
    pub object: ObjectRow,
    pub class: ObjectClass,
    /// Reachable, but by no path of start pointers (docs/reference.md §3 "Leak classes").
    pub possibly_lost: bool,
    /// The group the object belongs to (none for frame-proprietary and unreachable objects).
    pub group: Option<GroupId>,
    /// Immediate dominator when that is another object: the step back towards its root.
    pub dominator: Option<u32>,
    /// Allocation stack, innermost first (at most [`MAX_STACK_FRAMES`]).
    pub stack: Vec<String>,
    /// The objects it points to, in reference order.
    pub outgoing_page: PageInfo,
    pub outgoing: Vec<ObjectRow>,
    /// Who points at it: frames (innermost first, threads in snapshot order), globals, then
    /// objects by index.
    pub incoming_page: PageInfo,
    pub incoming: Vec<Referrer>,
}

/// One allocation site with its live blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteRow {
    /// Dense index: the handle for [`RequestBody::SiteObjects`].
    pub site: u32,
    /// The snapshot's identifier of the site.
    pub id: u64,
    pub label: String,
    /// Call stack, innermost first (at most [`MAX_STACK_FRAMES`]).
    pub frames: Vec<String>,
    pub live_bytes: u64,
    pub blocks: u64,
}

/// A page of the allocation sites.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SitePage {
    pub snapshot: SnapshotId,
    pub page: PageInfo,
    pub rows: Vec<SiteRow>,
}

/// Release of a set of threads (docs/reference.md §3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseAnswer {
    pub snapshot: SnapshotId,
    pub tids: Vec<u32>,
    pub bytes: u64,
}

/// A chunk of the kept snapshot as a binary snapshot file ([`Response::SnapshotData`]) or as
/// the agent's analysed `Kept` ([`Response::KeptData`]): bytes `offset .. offset +
/// bytes.len()` of `total`. The client asks again from `offset + bytes.len()` until `total`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    pub snapshot: SnapshotId,
    pub offset: u64,
    pub total: u64,
    /// Sent as one run of bytes (serde's bytes), not a sequence of `u8`s: the same bincode
    /// encoding (a length, then the bytes), copied whole instead of one element at a time
    /// (decoding an 8 MiB chunk element by element was a third of the live report's CPU).
    #[serde(with = "raw_bytes")]
    pub bytes: Vec<u8>,
}

/// `Vec<u8>` through serde as bytes (`serialize_bytes`, `deserialize_byte_buf`) rather than as
/// a sequence: bincode writes both as a length then the bytes, so the wire does not change.
mod raw_bytes {
    use serde::de::{Deserializer, Error, SeqAccess, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        // Formats that give bytes as a sequence (JSON's array of numbers).
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

/// How a permitted thread is cancelled (docs/reference.md §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mechanism {
    Cooperative,
    PthreadCancel,
}

/// One `[[permit]]` rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitRule {
    /// Glob on the thread name.
    pub thread: Option<String>,
    /// Function on the thread's stack.
    pub function: Option<String>,
    pub mechanism: Mechanism,
}

/// The optional autonomous-mode trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    pub live_bytes: Option<u64>,
    pub on_malloc_failure: bool,
}

/// The policy as the agent parsed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySummary {
    pub dry_run: bool,
    pub min_release: u64,
    pub permits: Vec<PermitRule>,
    pub trigger: Option<Trigger>,
}

/// The policy in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyAnswer {
    /// No `HEAPTUI_POLICY`: every cancel is refused.
    NotLoaded,
    Loaded {
        /// The file it came from.
        path: String,
        /// Its text, as read.
        text: String,
        summary: PolicySummary,
    },
    /// `HEAPTUI_POLICY` names a file that could not be used: every cancel is refused.
    Invalid {
        path: String,
        /// The one-line error, naming the key or line at fault.
        error: String,
    },
}

/// What happened to a cancel request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Done,
    /// Refused; the one-line reason says which rule or condition.
    Refused(String),
    /// Decided and logged, not acted on.
    DryRun,
}

/// The answer to a cancel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelVerdict {
    pub tid: u32,
    pub verdict: Verdict,
    /// Bytes the cancel is predicted to free, when a snapshot allowed predicting it.
    pub predicted_release: Option<u64>,
    /// The permit rule that matched, as written in the policy.
    pub rule: Option<String>,
    pub mechanism: Option<Mechanism>,
}

/// Why the autonomous mode fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShortageCause {
    /// Live heap bytes stayed above the policy's soft limit.
    SoftLimit { limit: u64 },
    /// Allocations returned NULL (`failures` since the last episode).
    AllocationFailed { failures: u64 },
}

/// What the autonomous mode did about a shortage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShortageOutcome {
    /// These threads were cancelled; together they were predicted to free this much.
    Cancelled {
        tids: Vec<u32>,
        predicted_release: u64,
    },
    /// The policy is `dry_run`: these would have been cancelled.
    DryRun {
        tids: Vec<u32>,
        predicted_release: u64,
    },
    /// Nothing permitted frees enough: nothing was cancelled (the memory-shortage error).
    Unresolved { reason: String },
}

/// A memory-shortage episode, as pushed to attached clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShortageReport {
    pub unix_ms: u64,
    pub cause: ShortageCause,
    /// Live heap bytes when it fired.
    pub live_bytes: u64,
    /// Bytes the mode set out to free.
    pub need_bytes: u64,
    pub outcome: ShortageOutcome,
}

/// The measured release of a cancel decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasuredRelease {
    /// The decision's number in the audit log.
    pub decision: u64,
    pub tids: Vec<u32>,
    pub predicted: u64,
    /// Heap bytes of the decision's snapshot minus those of the snapshot after the threads
    /// ended; `None` when it could not be measured (the line says why in the audit log).
    pub measured: Option<u64>,
}

/// What kind of request failed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    UnknownThread,
    UnknownGroup,
    UnknownObject,
    UnknownSite,
    /// No snapshot has been taken yet.
    NoSnapshot,
    /// The request names a snapshot that is no longer the one kept.
    StaleSnapshot,
    BadRequest,
    Refused,
    Internal,
}

/// A failed request: its kind and one line for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    pub kind: ErrorKind,
    pub message: String,
}

impl Response {
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
        Response::Error(ErrorAnswer {
            kind,
            message: message.into(),
        })
    }
}

impl RequestBody {
    /// Every kind name [`RequestBody::kind`] can return.
    pub const KINDS: &'static [&'static str] = &[
        "process-info",
        "subscribe",
        "unsubscribe",
        "take-snapshot",
        "threads",
        "frames",
        "group",
        "group-objects",
        "site-objects",
        "object",
        "sites",
        "release",
        "policy",
        "cancel",
        "snapshot-data",
        "units",
        "leaks",
        "growth",
        "ages",
        "counter-history",
        "kept-data",
    ];

    /// Whether the request is about the kept snapshot (answered by `answer::Answerer`, or
    /// with [`ErrorKind::NoSnapshot`] before the first snapshot).
    pub fn needs_snapshot(&self) -> bool {
        match self {
            RequestBody::Threads { .. }
            | RequestBody::Frames { .. }
            | RequestBody::Group { .. }
            | RequestBody::GroupObjects { .. }
            | RequestBody::SiteObjects { .. }
            | RequestBody::Object { .. }
            | RequestBody::Sites { .. }
            | RequestBody::Release { .. }
            | RequestBody::SnapshotData { .. }
            | RequestBody::KeptData { .. }
            | RequestBody::Leaks { .. }
            | RequestBody::Ages { .. } => true,
            RequestBody::ProcessInfo
            | RequestBody::Subscribe
            | RequestBody::Unsubscribe
            | RequestBody::TakeSnapshot
            | RequestBody::Policy
            | RequestBody::Cancel { .. }
            | RequestBody::Units { .. }
            | RequestBody::Growth { .. }
            | RequestBody::CounterHistory => false,
        }
    }

    /// A short name for logs and for the golden fixtures.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestBody::ProcessInfo => "process-info",
            RequestBody::Subscribe => "subscribe",
            RequestBody::Unsubscribe => "unsubscribe",
            RequestBody::TakeSnapshot => "take-snapshot",
            RequestBody::Threads { .. } => "threads",
            RequestBody::Frames { .. } => "frames",
            RequestBody::Group { .. } => "group",
            RequestBody::GroupObjects { .. } => "group-objects",
            RequestBody::SiteObjects { .. } => "site-objects",
            RequestBody::Object { .. } => "object",
            RequestBody::Sites { .. } => "sites",
            RequestBody::Release { .. } => "release",
            RequestBody::Policy => "policy",
            RequestBody::Cancel { .. } => "cancel",
            RequestBody::SnapshotData { .. } => "snapshot-data",
            RequestBody::Units { .. } => "units",
            RequestBody::Leaks { .. } => "leaks",
            RequestBody::Growth { .. } => "growth",
            RequestBody::Ages { .. } => "ages",
            RequestBody::CounterHistory => "counter-history",
            RequestBody::KeptData { .. } => "kept-data",
        }
    }
}

impl Response {
    /// Every kind name [`Response::kind`] can return.
    pub const KINDS: &'static [&'static str] = &[
        "process-info",
        "subscribed",
        "unsubscribed",
        "snapshot",
        "threads",
        "frames",
        "group",
        "objects",
        "object",
        "sites",
        "release",
        "policy",
        "cancel",
        "error",
        "snapshot-data",
        "units",
        "leaks",
        "growth",
        "ages",
        "counter-history",
        "kept-data",
    ];

    /// A short name for logs and for the golden fixtures.
    pub fn kind(&self) -> &'static str {
        match self {
            Response::ProcessInfo(_) => "process-info",
            Response::Subscribed { .. } => "subscribed",
            Response::Unsubscribed => "unsubscribed",
            Response::Snapshot(_) => "snapshot",
            Response::Threads(_) => "threads",
            Response::Frames(_) => "frames",
            Response::Group(_) => "group",
            Response::Objects(_) => "objects",
            Response::Object(_) => "object",
            Response::Sites(_) => "sites",
            Response::Release(_) => "release",
            Response::Policy(_) => "policy",
            Response::Cancel(_) => "cancel",
            Response::Error(_) => "error",
            Response::SnapshotData(_) => "snapshot-data",
            Response::Units(_) => "units",
            Response::Leaks(_) => "leaks",
            Response::Growth(_) => "growth",
            Response::Ages(_) => "ages",
            Response::CounterHistory(_) => "counter-history",
            Response::KeptData(_) => "kept-data",
        }
    }
}

impl Push {
    /// Every kind name [`Push::kind`] can return.
    pub const KINDS: &'static [&'static str] = &["counters", "shortage", "release-measured"];

    pub fn kind(&self) -> &'static str {
        match self {
            Push::Counters(_) => "counters",
            Push::Shortage(_) => "shortage",
            Push::ReleaseMeasured(_) => "release-measured",
        }
    }
}

impl From<engine::Totals> for Totals {
    fn from(t: engine::Totals) -> Self {
        Totals {
            objects: t.objects,
            bytes: t.bytes,
            unreachable_bytes: t.unreachable_bytes,
            global_only_bytes: t.global_only_bytes,
        }
    }
}

impl From<engine::Leaks> for Leaks {
    fn from(l: engine::Leaks) -> Self {
        Leaks {
            bytes: l.bytes,
            objects: l.objects,
            definitely_lost: l.definitely_lost,
            indirectly_lost: l.indirectly_lost,
            definitely_lost_objects: l.definitely_lost_objects,
            indirectly_lost_objects: l.indirectly_lost_objects,
            possibly_lost: l.possibly_lost,
            possibly_lost_objects: l.possibly_lost_objects,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_keep_the_cap_and_count_everything() {
        let ids = (1..=5).map(|number| engine::GroupId {
            kind: engine::GroupKind::ThreadShared,
            number,
        });
        let list = IdList::capped(ids, 3);
        assert_eq!(list.ids.len(), 3);
        assert_eq!(list.total, 5);
        assert!(list.is_truncated());
        assert_eq!(list.ids[2].to_string(), "T3");
        assert!(!IdList::capped(std::iter::empty(), 3).is_truncated());
    }

    #[test]
    fn pages_are_clamped() {
        assert_eq!(Page::new(0, u32::MAX).clamped_limit(), MAX_PAGE_ROWS);
        assert_eq!(Page::new(5, 7).clamped_limit(), 7);
    }
}
