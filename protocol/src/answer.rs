//! Builds every answer about a snapshot from its kept form ([`Kept`]: the heap graph and its
//! analysis in a few bytes per object), so that the live agent and the offline `heaptui open`
//! answer identically: both keep a `Kept` and call [`Answerer::answer`].
//!
//! Pure: no I/O, no clock, no state between calls; the same request over the same snapshot
//! gives the same answer. Requests about the process or the agent (process info, counters,
//! taking a snapshot, the policy, cancel) are not answered here — [`Answerer::answer`] returns
//! `None` for them and the server answers from its own state.
//!
//! Built for big heaps: a page of a million-object group reads the sort keys once and selects
//! its window with two `select_nth_unstable` passes, sorting only the window
//! (`O(n + limit·log limit)` per request, never per row), or, for a page near either end of
//! the list (the first, the last), keeps it in a bounded heap as the keys stream by; every answer stays within
//! [`ANSWER_BUDGET`] (rows stop when the next one would not fit; the client continues from
//! `offset + rows.len()`), so that it always fits a frame and always decodes, and every
//! string and list inside a row is capped.

use std::cmp::{Ordering, Reverse};

use heaptui_analysis::kept::ObjectColumn;
use heaptui_analysis::{self as engine, Holder, Kept, NO_SITE, ObjectIndex, views};
use serde::Serialize;

use crate::codec::{MAX_FRAME_LEN, encoded_len};
use crate::ids::{GroupId, ObjectClass, Sharer, ThreadState};
use crate::message::{
    AgeHistogram, AgeRow, AgeScope, AgesAnswer, Direction, ErrorAnswer, ErrorKind, FramePage,
    FrameRow, GroupInfo, IdList, LeakPage, LeakRow, MAX_CHUNK_BYTES, MAX_IDS_PER_GROUP,
    MAX_IDS_PER_ROW, MAX_PAGE_ROWS, MAX_STACK_FRAMES, ObjectDetail, ObjectFilter, ObjectKey,
    ObjectPage, ObjectRow, Page, PageInfo, Referrer, ReleaseAnswer, RequestBody, Response, SiteKey,
    SitePage, SiteRow, SnapshotChunk, SnapshotId, SnapshotInfo, Sort, Survivor, ThreadKey,
    ThreadPage, ThreadRow,
};
use crate::views::{
    UnitCharge, UnitGranularity, UnitKey, UnitPage, UnitPosition, UnitQuery, UnitRow,
};

/// The chunk of `encoded` (a snapshot file's bytes) starting at `offset`.
pub fn snapshot_chunk(
    snapshot: SnapshotId,
    encoded: &[u8],
    offset: u64,
) -> Result<SnapshotChunk, ErrorAnswer> {
    snapshot_chunk_into(snapshot, encoded, offset, Vec::new())
}

/// As [`snapshot_chunk`], its bytes copied into `spare` (emptied first): a server that answers
/// chunk after chunk hands back the previous chunk's buffer.
pub fn snapshot_chunk_into(
    snapshot: SnapshotId,
    encoded: &[u8],
    offset: u64,
    mut spare: Vec<u8>,
) -> Result<SnapshotChunk, ErrorAnswer> {
    let total = encoded.len() as u64;
    check_chunk_offset(snapshot, offset, total)?;
    let start = offset as usize;
    let end = encoded.len().min(start + MAX_CHUNK_BYTES as usize);
    spare.clear();
    spare.extend_from_slice(&encoded[start..end]);
    Ok(SnapshotChunk {
        snapshot,
        offset,
        total,
        bytes: spare,
    })
}

/// A chunk of a snapshot of `total` bytes must start within them (at their end: an empty
/// last chunk).
pub fn check_chunk_offset(
    snapshot: SnapshotId,
    offset: u64,
    total: u64,
) -> Result<(), ErrorAnswer> {
    if offset > total {
        return Err(error(
            ErrorKind::BadRequest,
            format!(
                "offset {offset} is past the end of snapshot {} ({total} bytes)",
                snapshot.0
            ),
        ));
    }
    Ok(())
}

/// Wire bytes an answer's rows may take. Not the frame maximum: bincode's decoding limit
/// counts what decoding allocates, and a value can cost up to 8 times its wire size (a `u64`
/// sent as a one-byte varint is charged 8 bytes), so only answers of at most an eighth of
/// [`MAX_FRAME_LEN`] are sure to decode whatever their shape. A further 64 KiB is left for the
/// envelope and the fields around the rows.
pub const ANSWER_BUDGET: usize = MAX_FRAME_LEN / 8 - (64 << 10);

/// Longest string (function, module, label, thread name) sent in a row, in bytes; longer ones
/// (C++ template names can run to kilobytes) are cut at a character boundary and end in `…`.
pub const MAX_TEXT_LEN: usize = 4096;

/// Answers the snapshot requests of one snapshot.
#[derive(Clone, Copy)]
pub struct Answerer<'a> {
    snapshot: SnapshotId,
    kept: &'a Kept,
    /// `last_seq` of the snapshot boundaries before this snapshot, ascending; `None` when
    /// the source keeps no history (ages are then unknown).
    boundaries: Option<&'a [u64]>,
    /// `(sequence number, unix ms)` readings ascending, and the snapshot's time: dates each
    /// block for its wall-clock age (see [`Answerer::with_clock`]).
    clock: Option<(&'a [(u64, u64)], u64)>,
}

type Answer<T> = Result<T, ErrorAnswer>;

fn error(kind: ErrorKind, message: String) -> ErrorAnswer {
    ErrorAnswer { kind, message }
}

impl<'a> Answerer<'a> {
    /// Answers about `kept`; `snapshot` is the id the answers carry.
    pub fn new(snapshot: SnapshotId, kept: &'a Kept) -> Self {
        Answerer {
            snapshot,
            kept,
            boundaries: None,
            clock: None,
        }
    }

    /// Wall-clock ages from an allocation clock: `readings` of the allocation sequence number
    /// against the wall clock (ms since the Unix epoch), ascending, and `now_ms`, when the
    /// snapshot was taken. A block numbered `s` was allocated before the first reading whose
    /// number is at least `s` (after the last reading: just before the snapshot), so its age
    /// is at least `now_ms` minus that reading's time — exact to the clock's resolution.
    pub fn with_clock(mut self, readings: &'a [(u64, u64)], now_ms: u64) -> Self {
        self.clock = Some((readings, now_ms));
        self
    }

    /// When the block numbered `seq` was allocated, by the clock (0 when unknown).
    fn allocated_ms(&self, seq: u64) -> u64 {
        let Some((readings, now_ms)) = self.clock else {
            return 0;
        };
        if seq == engine::NO_SEQ || now_ms == 0 {
            return 0;
        }
        let at = readings.partition_point(|&(s, _)| s < seq);
        readings.get(at).map_or(now_ms, |&(_, ms)| ms.min(now_ms))
    }

    /// Ages count these snapshot boundaries (`last_seq` of each earlier snapshot, ascending):
    /// object rows then carry their age, and [`RequestBody::Ages`] has a history to count.
    pub fn with_boundaries(mut self, sorted_last_seqs: &'a [u64]) -> Self {
        self.boundaries = Some(sorted_last_seqs);
        self
    }

    pub fn snapshot(&self) -> SnapshotId {
        self.snapshot
    }

    /// The snapshot answered about.
    pub fn kept(&self) -> &'a Kept {
        self.kept
    }

    /// The answer to a snapshot request, `None` for requests this module does not answer
    /// (see the module doc). Failures are [`Response::Error`].
    pub fn answer(&self, request: &RequestBody) -> Option<Response> {
        let answer = match request {
            RequestBody::Threads { sort, page } => {
                Ok(Response::Threads(self.threads(*sort, *page)))
            }
            RequestBody::Frames { tid, page } => self.frames(*tid, *page).map(Response::Frames),
            RequestBody::Group { snapshot, group } => self
                .current(*snapshot)
                .and_then(|()| self.group(*group))
                .map(Response::Group),
            RequestBody::GroupObjects {
                snapshot,
                group,
                sort,
                page,
                filter,
            } => self
                .current(*snapshot)
                .and_then(|()| self.group_objects(*group, *sort, *page, filter.as_ref()))
                .map(Response::Objects),
            RequestBody::SiteObjects {
                snapshot,
                site,
                sort,
                page,
                filter,
            } => self
                .current(*snapshot)
                .and_then(|()| self.site_objects(*site, *sort, *page, filter.as_ref()))
                .map(Response::Objects),
            RequestBody::Object {
                snapshot,
                object,
                refs,
            } => self
                .current(*snapshot)
                .and_then(|()| self.object(*object, *refs))
                .map(Response::Object),
            RequestBody::Sites { sort, page } => Ok(Response::Sites(self.sites(*sort, *page))),
            RequestBody::Release { tids } => self.release(tids).map(Response::Release),
            RequestBody::SnapshotData { snapshot, offset } => self
                .current(*snapshot)
                .and_then(|()| self.snapshot_data(*offset))
                .map(Response::SnapshotData),
            RequestBody::KeptData { snapshot, offset } => self
                .current(*snapshot)
                .and_then(|()| self.kept_data(*offset))
                .map(Response::KeptData),
            RequestBody::Leaks { page } => Ok(Response::Leaks(self.leaks(*page))),
            RequestBody::Ages { by, page, oldest } => {
                Ok(Response::Ages(self.ages(*by, *page, *oldest)))
            }
            _ => return None,
        };
        Some(answer.unwrap_or_else(Response::Error))
    }

    /// The snapshot's figures; the caller fills in what only it knows (when it was taken,
    /// the pause, capture and analysis times, the memory held).
    pub fn snapshot_info(&self) -> SnapshotInfo {
        SnapshotInfo {
            snapshot: self.snapshot,
            threads: self.kept.threads().len() as u32,
            threads_not_stopped: self
                .kept
                .threads()
                .iter()
                .filter(|t| t.state != heaptui_analysis::ThreadState::Stopped)
                .count() as u32,
            totals: self.kept.totals().into(),
            leaks: self.kept.leaks().into(),
            ..SnapshotInfo::default()
        }
    }

    /// A page of the thread ranking.
    pub fn threads(&self, sort: Sort<ThreadKey>, page: Page) -> ThreadPage {
        let figures = self.kept.figures();
        let threads = self.kept.threads();
        let mut order: Vec<u32> = (0..threads.len() as u32).collect();
        let window = select_page(&mut order, page, |&a, &b| {
            let (ta, tb) = (&threads[a as usize], &threads[b as usize]);
            let (fa, fb) = (&figures[a as usize], &figures[b as usize]);
            let by_key = match sort.key {
                ThreadKey::Total => fa.total.cmp(&fb.total),
                ThreadKey::Proprietary => fa.proprietary.cmp(&fb.proprietary),
                ThreadKey::Shared => fa.shared.cmp(&fb.shared),
                ThreadKey::Tid => ta.tid.cmp(&tb.tid),
                ThreadKey::Name => ta.name.cmp(&tb.name),
                ThreadKey::Frames => ta.frames.len().cmp(&tb.frames.len()),
            };
            directed(by_key, sort.direction).then(ta.tid.cmp(&tb.tid).then(a.cmp(&b)))
        });
        let rows = fill(window, |&t| {
            let (thread, fig) = (&threads[t as usize], &figures[t as usize]);
            ThreadRow {
                tid: thread.tid,
                name: clip(&thread.name),
                state: ThreadState::from(&thread.state),
                proprietary: fig.proprietary,
                shared: fig.shared,
                total: fig.total,
                frames: thread.frames.len() as u32,
            }
        });
        ThreadPage {
            snapshot: self.snapshot,
            page: info(page, threads.len()),
            rows,
        }
    }

    /// A page of one thread's frames, innermost first, with their referents.
    pub fn frames(&self, tid: u32, page: Page) -> Answer<FramePage> {
        let t = self.thread_index(tid)?;
        let thread = &self.kept.threads()[t];
        let figures = &self.kept.figures()[t].frames;
        let n = thread.frames.len();
        let (start, end) = bounds(page, n);
        let window: Vec<usize> = (start..end).collect();
        let rows = fill(&window, |&i| {
            let frame = &thread.frames[i];
            let fig = &figures[i];
            FrameRow {
                index: i as u32,
                function: clip(&frame.function),
                module: clip(&frame.module),
                kind: frame.kind.into(),
                proprietary: fig.proprietary,
                frame_shared: IdList::capped(fig.frame_shared.iter().copied(), MAX_IDS_PER_ROW),
                thread_shared: IdList::capped(fig.thread_shared.iter().copied(), MAX_IDS_PER_ROW),
                developed: IdList::capped(
                    self.kept.developed_referents(Holder::Frame {
                        thread: t,
                        frame: i,
                    }),
                    MAX_IDS_PER_ROW,
                ),
            }
        });
        Ok(FramePage {
            snapshot: self.snapshot,
            tid,
            page: info(page, n),
            rows,
        })
    }

    /// One group with its entry, sharers and referents.
    pub fn group(&self, id: GroupId) -> Answer<GroupInfo> {
        let engine_id = engine::GroupId::from(id);
        let group = self.kept.group(engine_id).ok_or_else(|| {
            error(
                ErrorKind::UnknownGroup,
                format!("unknown group {id} in snapshot {}", self.snapshot.0),
            )
        })?;
        Ok(GroupInfo {
            snapshot: self.snapshot,
            id,
            entry: self.object_row(group.entry),
            label: clip(self.kept.site_label(group.entry)),
            size: group.size,
            members: group.objects,
            sharers: group.sharers.iter().copied().map(Sharer::from).collect(),
            direct: IdList::capped(group.refs(), MAX_IDS_PER_GROUP),
            developed: IdList::capped(
                self.kept.developed_referents(Holder::Group(engine_id)),
                MAX_IDS_PER_GROUP,
            ),
        })
    }

    /// A sorted page of a group's members (those `filter` matches, with one).
    pub fn group_objects(
        &self,
        id: GroupId,
        sort: Sort<ObjectKey>,
        page: Page,
        filter: Option<&ObjectFilter>,
    ) -> Answer<ObjectPage> {
        let engine_id = engine::GroupId::from(id);
        let Some(group) = self.kept.group(engine_id) else {
            return Err(error(
                ErrorKind::UnknownGroup,
                format!("unknown group {id} in snapshot {}", self.snapshot.0),
            ));
        };
        if filter.is_some_and(|f| !f.query.is_empty()) {
            let members = self.filtered(self.kept.members(engine_id), filter);
            return Ok(self.object_page(members, sort, page));
        }
        // Unfiltered, the members and their keys stream from the slot and key columns, with
        // no list of every member (20 MB at 5M).
        let k = self.kept;
        Ok(
            self.sorted_page(group.objects as usize, sort, page, |column, each| {
                k.for_each_member_chunk(engine_id, column, each)
            }),
        )
    }

    /// A sorted page of the objects allocated at one site (those `filter` matches, with
    /// one); `u32::MAX` names the objects whose site is unknown.
    pub fn site_objects(
        &self,
        site: u32,
        sort: Sort<ObjectKey>,
        page: Page,
        filter: Option<&ObjectFilter>,
    ) -> Answer<ObjectPage> {
        let sites = self.kept.sites().len();
        if site != NO_SITE && site as usize >= sites {
            return Err(error(
                ErrorKind::UnknownSite,
                format!(
                    "unknown site {site} in snapshot {} ({sites} sites)",
                    self.snapshot.0,
                ),
            ));
        }
        let objects = self.kept.site_members(site);
        Ok(self.object_page(self.filtered(objects, filter), sort, page))
    }

    /// The objects whose row text ([`ObjectFilter::row_text`]) `filter` matches; all of them
    /// without a filter or with an empty query. One text buffer is reused across objects, so
    /// filtering a million-member group allocates nothing per object.
    fn filtered(
        &self,
        mut objects: Vec<ObjectIndex>,
        filter: Option<&ObjectFilter>,
    ) -> Vec<ObjectIndex> {
        let Some(filter) = filter.filter(|f| !f.query.is_empty()) else {
            return objects;
        };
        let k = self.kept;
        let mut text = String::new();
        objects.retain(|&o| {
            use std::fmt::Write as _;
            text.clear();
            // Same text as ObjectFilter::row_text, without building a row.
            let label = k.site_label(o);
            let _ = write!(
                text,
                "{:#x} {} {label} {}",
                k.addr(o),
                k.size(o),
                k.thread(o)
            );
            filter.matches(&text)
        });
        objects
    }

    /// One object: its class, group, dominator, allocation stack, and a page of its outgoing
    /// and of its incoming references.
    pub fn object(&self, object: u32, refs: Page) -> Answer<ObjectDetail> {
        let n = self.kept.object_count();
        if object as usize >= n {
            return Err(error(
                ErrorKind::UnknownObject,
                format!(
                    "unknown object index {object} in snapshot {} ({n} objects)",
                    self.snapshot.0
                ),
            ));
        }
        let class = ObjectClass::from_engine(self.kept.class_of(object), self.kept.threads())
            .ok_or_else(|| {
                error(
                    ErrorKind::Internal,
                    format!("object {object}: its class names a thread or frame the snapshot does not have"),
                )
            })?;
        let stack = match self.kept.site(object) {
            NO_SITE => Vec::new(),
            s => stack_text(&self.kept.sites()[s as usize].frames),
        };

        // Both lists share the budget; half each keeps one from starving the other.
        let half = ANSWER_BUDGET / 2;
        let targets: Vec<ObjectIndex> = self.kept.edges_of(object).collect();
        let (start, end) = bounds(refs, targets.len());
        let outgoing = fill_within(&targets[start..end], half, |&o| self.object_row(o));

        let referrers = self.referrers(object);
        let (start, end) = bounds(refs, referrers.len());
        let incoming = fill_within(&referrers[start..end], half, |r| match *r {
            Source::Frame(t, f) => {
                let thread = &self.kept.threads()[t];
                Referrer::Frame {
                    tid: thread.tid,
                    frame: f as u32,
                    function: clip(&thread.frames[f].function),
                }
            }
            Source::Globals => Referrer::Globals,
            Source::Object(o) => Referrer::Object(self.object_row(o)),
        });

        Ok(ObjectDetail {
            snapshot: self.snapshot,
            object: self.object_row(object),
            class,
            possibly_lost: self.kept.is_possibly_lost(object),
            group: self.kept.group_of(object).map(GroupId::from),
            dominator: self.kept.dominator(object),
            stack,
            outgoing_page: info(refs, targets.len()),
            outgoing,
            incoming_page: info(refs, referrers.len()),
            incoming,
        })
    }

    /// A sorted page of the allocation sites that have live blocks (plus one row for blocks of
    /// unknown site, `site = u32::MAX`, when there are any).
    pub fn sites(&self, sort: Sort<SiteKey>, page: Page) -> SitePage {
        let k = self.kept;
        let sites = k.sites();
        let unknown = sites.len();
        // Slot `unknown` gathers the blocks without a site.
        let mut bytes = vec![0u64; sites.len() + 1];
        let mut blocks = vec![0u64; sites.len() + 1];
        for o in 0..k.object_count() as ObjectIndex {
            let s = k.site(o);
            let slot = if s == NO_SITE { unknown } else { s as usize };
            bytes[slot] += k.size(o);
            blocks[slot] += 1;
        }
        let label = |slot: usize| sites.get(slot).map_or("?", |s| s.label());
        let mut order: Vec<u32> = (0..=unknown as u32)
            .filter(|&s| blocks[s as usize] > 0)
            .collect();
        let total = order.len();
        let window = select_page(&mut order, page, |&a, &b| {
            let (a, b) = (a as usize, b as usize);
            let by_key = match sort.key {
                SiteKey::LiveBytes => bytes[a].cmp(&bytes[b]),
                SiteKey::Blocks => blocks[a].cmp(&blocks[b]),
                SiteKey::Label => label(a).cmp(label(b)),
            };
            directed(by_key, sort.direction).then(a.cmp(&b))
        });
        let rows = fill(window, |&slot| {
            let slot = slot as usize;
            let site = sites.get(slot);
            SiteRow {
                site: if slot == unknown {
                    NO_SITE
                } else {
                    slot as u32
                },
                id: site.map_or(0, |s| s.id),
                label: clip(label(slot)),
                frames: site.map_or_else(Vec::new, |s| {
                    s.frames
                        .iter()
                        .take(MAX_STACK_FRAMES)
                        .map(|f| clip(f))
                        .collect()
                }),
                live_bytes: bytes[slot],
                blocks: blocks[slot],
            }
        });
        SitePage {
            snapshot: self.snapshot,
            page: info(page, total),
            rows,
        }
    }

    /// Release of a set of threads (docs/reference.md §3); the answer lists the set sorted, once
    /// each.
    pub fn release(&self, tids: &[u32]) -> Answer<ReleaseAnswer> {
        let bytes = self.kept.release(tids).map_err(|e| {
            error(
                ErrorKind::UnknownThread,
                format!("{e} in snapshot {}", self.snapshot.0),
            )
        })?;
        let mut tids = tids.to_vec();
        tids.sort_unstable();
        tids.dedup();
        Ok(ReleaseAnswer {
            snapshot: self.snapshot,
            tids,
            bytes,
        })
    }

    /// One object as a row.
    pub fn object_row(&self, o: ObjectIndex) -> ObjectRow {
        let r = self.kept.record(o);
        ObjectRow {
            index: o,
            id: r.id,
            addr: r.addr,
            size: r.size,
            site: r.site,
            site_label: clip(self.kept.site_label(o)),
            thread: r.thread,
            seq: r.seq,
            age: match self.boundaries {
                Some(b) if r.seq != engine::NO_SEQ => {
                    Some(u32::try_from(views::ages::age(r.seq, b)).unwrap_or(u32::MAX))
                }
                _ => None,
            },
        }
    }

    /// Leaked blocks by allocation site, one column per leak class: most unreachable bytes
    /// first, then most possibly lost bytes (ties by site index).
    pub fn leaks(&self, page: Page) -> LeakPage {
        let (definitely, indirectly) = self.kept.leaked();
        let possibly = self.kept.possibly_lost();
        // Site index → row; `NO_SITE` gathers the blocks without one.
        let mut by_site: std::collections::HashMap<u32, LeakRow> = Default::default();
        for (objects, class) in [(definitely, 0), (indirectly, 1), (possibly, 2)] {
            for o in objects {
                let site = self.kept.site(o);
                let row = by_site.entry(site).or_insert_with(|| self.leak_row(site));
                let size = self.kept.size(o);
                let (bytes, count) = match class {
                    0 => (&mut row.definitely_lost, &mut row.definitely_lost_objects),
                    1 => (&mut row.indirectly_lost, &mut row.indirectly_lost_objects),
                    _ => (&mut row.possibly_lost, &mut row.possibly_lost_objects),
                };
                *bytes += size;
                *count += 1;
            }
        }
        let mut rows: Vec<LeakRow> = by_site.into_values().collect();
        let total = rows.len();
        let bytes = |r: &LeakRow| (r.definitely_lost + r.indirectly_lost, r.possibly_lost);
        let window = select_page(&mut rows, page, |a, b| {
            bytes(b).cmp(&bytes(a)).then(a.site.cmp(&b.site))
        });
        LeakPage {
            snapshot: self.snapshot,
            page: info(page, total),
            rows: fill(window, Clone::clone),
        }
    }

    fn leak_row(&self, site: u32) -> LeakRow {
        let (label, frames) = match site {
            NO_SITE => ("?".to_string(), Vec::new()),
            s => {
                let site = &self.kept.sites()[s as usize];
                (clip(site.label()), stack_text(&site.frames))
            }
        };
        LeakRow {
            site,
            label,
            frames,
            ..LeakRow::default()
        }
    }

    /// The age view: the histogram of every block, one histogram per site or thread (most
    /// bytes first, ties by key), and the `oldest` longest-lived blocks. Without boundaries
    /// every block has age 0 and `boundaries` is 0.
    pub fn ages(&self, by: AgeScope, page: Page, oldest: u32) -> AgesAnswer {
        let boundaries: Vec<views::ages::Boundary> = self
            .boundaries
            .unwrap_or_default()
            .iter()
            .map(|&last_seq| views::ages::Boundary {
                last_seq,
                unix_ms: 0,
            })
            .collect();
        let oldest = (oldest as usize).min(MAX_PAGE_ROWS as usize);
        let k = self.kept;
        let blocks = (0..k.object_count() as ObjectIndex)
            .filter(|&o| k.seq(o) != engine::NO_SEQ)
            .map(|o| views::ages::AgedBlock {
                seq: k.seq(o),
                size: k.size(o),
                site: k.site(o),
                tid: k.thread(o),
                unix_ms: self.allocated_ms(k.seq(o)),
            });
        let now_ms = self.clock.map_or(0, |(_, now)| now);
        let ages = views::ages::Ages::new(blocks, &boundaries, now_ms, oldest);
        let groups = match by {
            AgeScope::Sites => &ages.by_site,
            AgeScope::Threads => &ages.by_thread,
        };
        let mut rows: Vec<(u32, &views::ages::Histogram)> =
            groups.iter().map(|(&k, h)| (k, h)).collect();
        let total = rows.len();
        let bytes = |h: &views::ages::Histogram| h.bytes.iter().sum::<u64>();
        let window = select_page(&mut rows, page, |a, b| {
            bytes(b.1).cmp(&bytes(a.1)).then(a.0.cmp(&b.0))
        });
        let rows = fill(window, |&(key, h)| AgeRow {
            key,
            label: match by {
                AgeScope::Sites => match key {
                    NO_SITE => "?".to_string(),
                    s => clip(k.sites()[s as usize].label()),
                },
                AgeScope::Threads => match k.thread_index(key) {
                    Some(t) => clip(&k.threads()[t].name),
                    None => format!("thread {key}"),
                },
            },
            histogram: histogram(h),
        });
        // The survivors come as sequence numbers: one pass finds their objects.
        let wanted: std::collections::HashMap<u64, usize> = ages
            .oldest
            .iter()
            .enumerate()
            .map(|(i, s)| (s.seq, i))
            .collect();
        let mut found: Vec<Option<ObjectIndex>> = vec![None; ages.oldest.len()];
        for o in 0..k.object_count() as ObjectIndex {
            if let Some(&i) = wanted.get(&k.seq(o)) {
                found[i].get_or_insert(o);
            }
        }
        let oldest = ages
            .oldest
            .iter()
            .zip(found)
            .filter_map(|(s, o)| {
                o.map(|o| Survivor {
                    object: self.object_row(o),
                    age_ms: s.age_ms,
                })
            })
            .collect();
        AgesAnswer {
            snapshot: self.snapshot,
            by,
            boundaries: u32::try_from(boundaries.len()).unwrap_or(u32::MAX),
            total: histogram(&ages.total),
            page: info(page, total),
            rows,
            oldest,
        }
    }

    /// A chunk of the snapshot as a binary snapshot file. Encodes the whole graph on every
    /// call; a server that keeps the encoding answers with [`snapshot_chunk`] instead.
    pub fn snapshot_data(&self, offset: u64) -> Answer<SnapshotChunk> {
        let mut encoded = Vec::new();
        heaptui_analysis::snapshot::write_binary_kept(self.kept, &mut encoded).map_err(|e| {
            error(
                ErrorKind::Internal,
                format!("cannot encode snapshot {}: {e}", self.snapshot.0),
            )
        })?;
        snapshot_chunk(self.snapshot, &encoded, offset)
    }

    /// A chunk of the kept snapshot in the `Kept` codec. Encodes it on every call; a server
    /// that keeps the encoding answers with [`snapshot_chunk`] instead.
    pub fn kept_data(&self, offset: u64) -> Answer<SnapshotChunk> {
        let mut encoded = Vec::new();
        self.kept.encode(&mut encoded).map_err(|e| {
            error(
                ErrorKind::Internal,
                format!("cannot encode snapshot {}: {e}", self.snapshot.0),
            )
        })?;
        snapshot_chunk(self.snapshot, &encoded, offset)
    }

    fn current(&self, snapshot: SnapshotId) -> Answer<()> {
        if snapshot == self.snapshot {
            Ok(())
        } else {
            Err(error(
                ErrorKind::StaleSnapshot,
                format!(
                    "snapshot {} is gone; the current snapshot is {}: reload",
                    snapshot.0, self.snapshot.0
                ),
            ))
        }
    }

    fn thread_index(&self, tid: u32) -> Answer<usize> {
        self.kept.thread_index(tid).ok_or_else(|| {
            error(
                ErrorKind::UnknownThread,
                format!("unknown thread id {tid} in snapshot {}", self.snapshot.0),
            )
        })
    }

    /// A sorted page of `objects` (ascending indices): their keys are read a chunk at a time
    /// by one loop over the key's column ([`Kept::gather`]; the reads are sequential).
    fn object_page(
        &self,
        objects: Vec<ObjectIndex>,
        sort: Sort<ObjectKey>,
        page: Page,
    ) -> ObjectPage {
        let k = self.kept;
        self.sorted_page(objects.len(), sort, page, |column, each| {
            let mut keys = Vec::with_capacity(KEY_CHUNK);
            for chunk in objects.chunks(KEY_CHUNK) {
                keys.clear();
                if let Some(column) = column {
                    k.gather(column, chunk, &mut keys);
                }
                each(chunk, &keys);
            }
        })
    }

    /// A sorted page of `total` objects that `feed(column, each)` hands to `each` a chunk at
    /// a time, each object with its value of `column` (no values when the key is the index).
    /// The (key, index) pairs stream into the window's selection ([`WindowSelection`]), which
    /// compares plain integers. A descending key is stored complemented so that one
    /// ascending order serves both directions, ties by index ascending.
    fn sorted_page(
        &self,
        total: usize,
        sort: Sort<ObjectKey>,
        page: Page,
        feed: impl FnOnce(Option<ObjectColumn>, &mut dyn FnMut(&[ObjectIndex], &[u64])),
    ) -> ObjectPage {
        let site_rank = match sort.key {
            ObjectKey::Site => self.site_ranks(),
            _ => Vec::new(),
        };
        let column = match sort.key {
            ObjectKey::Size => Some(ObjectColumn::Size),
            ObjectKey::Addr => Some(ObjectColumn::Addr),
            ObjectKey::Seq => Some(ObjectColumn::Seq),
            ObjectKey::Id => Some(ObjectColumn::Id),
            ObjectKey::Site => Some(ObjectColumn::Site),
            ObjectKey::Thread => Some(ObjectColumn::Thread),
            ObjectKey::Index => None,
        };
        let flip = match sort.direction {
            Direction::Ascending => 0,
            Direction::Descending => u64::MAX,
        };
        let mut window = WindowSelection::new(total, page);
        let mut fed = 0usize;
        feed(column, &mut |objects, keys| {
            fed += objects.len();
            match sort.key {
                ObjectKey::Index => {
                    for &o in objects {
                        window.push((u64::from(o) ^ flip, o));
                    }
                }
                ObjectKey::Site => {
                    for (&o, &site) in objects.iter().zip(keys) {
                        let key = match site as u32 {
                            NO_SITE => u64::MAX,
                            s => u64::from(site_rank[s as usize]),
                        };
                        window.push((key ^ flip, o));
                    }
                }
                _ => {
                    for (&o, &key) in objects.iter().zip(keys) {
                        window.push((key ^ flip, o));
                    }
                }
            }
        });
        debug_assert_eq!(fed, total, "the objects fed are the ones counted");
        let window = window.finish();
        let rows = fill(&window, |&(_, o)| self.object_row(o));
        ObjectPage {
            snapshot: self.snapshot,
            page: info(page, total),
            rows,
        }
    }

    /// Rank of each site in alphabetical order of its label, ties by index.
    fn site_ranks(&self) -> Vec<u32> {
        let sites = self.kept.sites();
        let mut order: Vec<u32> = (0..sites.len() as u32).collect();
        order.sort_by(|&a, &b| {
            sites[a as usize]
                .label()
                .cmp(sites[b as usize].label())
                .then(a.cmp(&b))
        });
        let mut rank = vec![0u32; sites.len()];
        for (r, &s) in order.iter().enumerate() {
            rank[s as usize] = r as u32;
        }
        rank
    }

    /// Everything that points at `target`: frames (threads in snapshot order, innermost frame
    /// first), the globals, then objects by index. One pass over all references' targets
    /// ([`Kept::holders_of`]): a drill-down request costs O(edges), and keeps no reverse index
    /// alive between requests.
    fn referrers(&self, target: ObjectIndex) -> Vec<Source> {
        let mut out = Vec::new();
        for (t, thread) in self.kept.threads().iter().enumerate() {
            for (f, frame) in thread.frames.iter().enumerate() {
                if frame.refs.contains(&target) {
                    out.push(Source::Frame(t, f));
                }
            }
        }
        if self.kept.globals().contains(&target) {
            out.push(Source::Globals);
        }
        // A holder that refers to the target twice is listed once.
        out.extend(self.kept.holders_of(target).into_iter().map(Source::Object));
        out
    }
}

/// A referrer before it is turned into a row (only the page's window is).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Frame(usize, usize),
    Globals,
    Object(ObjectIndex),
}

fn directed(order: Ordering, direction: Direction) -> Ordering {
    match direction {
        Direction::Ascending => order,
        Direction::Descending => order.reverse(),
    }
}

/// The row range `[start, end)` a page covers in a list of `n`.
fn bounds(page: Page, n: usize) -> (usize, usize) {
    let start = (page.offset as usize).min(n);
    let end = start.saturating_add(page.clamped_limit() as usize).min(n);
    (start, end)
}

/// The analysis crate's unit configuration for a protocol query (the program module is left
/// for the tracker to learn from the recording).
pub fn unit_config(query: UnitQuery) -> views::units::UnitConfig {
    use views::units::{Charge, Granularity, Position};
    views::units::UnitConfig {
        granularity: match query.granularity {
            UnitGranularity::Library => Granularity::Library,
            UnitGranularity::Function => Granularity::Function,
            UnitGranularity::Thread => Granularity::Thread,
        },
        position: match query.position {
            UnitPosition::Outermost => Position::Outermost,
            UnitPosition::Innermost => Position::Innermost,
            UnitPosition::Inclusive => Position::Inclusive,
        },
        charge: match query.charge {
            UnitCharge::Allocator => Charge::Allocator,
            UnitCharge::Freer => Charge::Freer,
        },
        program: None,
    }
}

/// One page of allocation units in `sort` order, ties by name ascending (so pages neither
/// repeat nor skip a unit); `events` is how many heap events they were computed from. The
/// live agent and a replayed recording answer `Units` with it.
pub fn unit_page(
    figures: &[views::units::UnitFigures],
    unknown: views::units::Unknown,
    query: UnitQuery,
    sort: Sort<UnitKey>,
    page: Page,
    events: u64,
) -> UnitPage {
    let mut rows: Vec<&views::units::UnitFigures> = figures.iter().collect();
    let total = rows.len();
    let page = Page::new(page.offset, page.clamped_limit());
    let window = select_page(&mut rows, page, |a, b| {
        let by_key = match sort.key {
            UnitKey::Live => a.live.cmp(&b.live),
            UnitKey::Max => a.max.cmp(&b.max),
            UnitKey::Malloc => a.malloc.cmp(&b.malloc),
            UnitKey::Free => a.free.cmp(&b.free),
            UnitKey::Name => a.name.cmp(&b.name),
        };
        let by_key = match sort.direction {
            Direction::Ascending => by_key,
            Direction::Descending => by_key.reverse(),
        };
        by_key.then_with(|| a.name.cmp(&b.name))
    });
    UnitPage {
        query,
        events,
        unknown_frees: unknown.frees,
        unknown_reallocs: unknown.reallocs,
        page: info(page, total),
        rows: fill(window, |f| UnitRow {
            name: clip(&f.name),
            live: f.live,
            min: f.min,
            max: f.max,
            malloc: f.malloc,
            realloc: f.realloc,
            free: f.free,
            memalign: f.memalign,
        }),
    }
}

fn histogram(h: &views::ages::Histogram) -> AgeHistogram {
    AgeHistogram {
        blocks: h.blocks,
        bytes: h.bytes,
    }
}

/// A site's frames as sent: at most [`MAX_STACK_FRAMES`], each clipped.
fn stack_text(frames: &[String]) -> Vec<String> {
    frames
        .iter()
        .take(MAX_STACK_FRAMES)
        .map(|f| clip(f))
        .collect()
}

fn info(page: Page, total: usize) -> PageInfo {
    PageInfo {
        offset: page.offset,
        total: u32::try_from(total).unwrap_or(u32::MAX),
    }
}

/// Puts the page's window of `items` in order and returns it: the first `select_nth`
/// partitions off everything before the window, the second everything after it, and only the
/// window is sorted. `cmp` must be a total order (ties broken by a unique key) so that
/// consecutive pages neither repeat nor skip an item.
pub fn select_page<T>(items: &mut [T], page: Page, cmp: impl Fn(&T, &T) -> Ordering) -> &[T] {
    let (start, end) = bounds(page, items.len());
    if start == end {
        return &[];
    }
    if start > 0 {
        items.select_nth_unstable_by(start, &cmp);
    }
    let rest = &mut items[start..];
    let k = end - start;
    if k < rest.len() {
        rest.select_nth_unstable_by(k - 1, &cmp);
    }
    rest[..k].sort_unstable_by(&cmp);
    &items[start..end]
}

/// How near either end of a list a page must lie for [`WindowSelection`] to keep only its
/// candidates instead of collecting the whole list.
const STREAMED_WINDOW: usize = 4096;

/// Objects whose sort keys [`Answerer::object_page`] reads in one go.
const KEY_CHUNK: usize = 4096;

/// A page's window of a stream of `total` items, selected as they go by. A window within
/// `STREAMED_WINDOW` items of either end (the first pages, the last: where a drill lands,
/// and `End`) keeps only the candidates that can still be in it: most items cost
/// one comparison with a bound, and no list of every item is made (at 5M items, the 80 MB
/// list and its two `select_nth` passes cost several times the stream). Any other window
/// collects every item and selects with [`select_page`].
pub struct WindowSelection<T> {
    page: Page,
    way: Way<T>,
}

enum Way<T> {
    /// The `end` smallest, then drop the first `start`.
    Smallest(Extreme<T>, usize),
    /// The `total - start` largest (as the smallest in reverse), then keep `end - start`.
    Largest(Extreme<Reverse<T>>, usize),
    All(Vec<T>),
    Empty,
}

impl<T: Ord + Copy> WindowSelection<T> {
    pub fn new(total: usize, page: Page) -> Self {
        let (start, end) = bounds(page, total);
        let way = if start == end {
            Way::Empty
        } else if end <= STREAMED_WINDOW {
            Way::Smallest(Extreme::new(end), start)
        } else if total - start <= STREAMED_WINDOW {
            Way::Largest(Extreme::new(total - start), end - start)
        } else {
            Way::All(Vec::with_capacity(total))
        };
        WindowSelection { page, way }
    }

    #[inline]
    pub fn push(&mut self, item: T) {
        match &mut self.way {
            Way::Smallest(smallest, _) => smallest.push(item),
            Way::Largest(largest, _) => largest.push(Reverse(item)),
            Way::All(all) => all.push(item),
            Way::Empty => {}
        }
    }

    /// The window, in order.
    pub fn finish(self) -> Vec<T> {
        match self.way {
            Way::Empty => Vec::new(),
            Way::Smallest(smallest, start) => {
                let mut kept = smallest.finish();
                kept.drain(..start.min(kept.len()));
                kept
            }
            Way::Largest(largest, len) => {
                // Ascending by Reverse is descending by item.
                let mut kept: Vec<T> = largest.finish().into_iter().map(|r| r.0).collect();
                kept.reverse();
                kept.truncate(len);
                kept
            }
            Way::All(mut all) => {
                let (start, end) = bounds(self.page, all.len());
                select_page(&mut all, self.page, |a, b| a.cmp(b));
                all.truncate(end);
                all.drain(..start);
                all
            }
        }
    }
}

/// The `keep` smallest items of a stream. Items go into a buffer unless they are above the
/// bound (the `keep`-th smallest so far, once known); a full buffer is cut back to its `keep`
/// smallest by one `select_nth`, which sets the bound. On random keys the bound soon passes
/// almost every item with one comparison; on keys that arrive best first (a list by
/// sequence number, descending) every item is buffered, and each cut costs about the
/// buffer's length for as many new items: linear either way, with no per-item heap sift.
struct Extreme<T> {
    keep: usize,
    /// Buffered items that trigger a cut.
    full: usize,
    buffer: Vec<T>,
    bound: Option<T>,
}

impl<T: Ord + Copy> Extreme<T> {
    fn new(keep: usize) -> Self {
        let full = keep + keep.max(STREAMED_WINDOW);
        Extreme {
            keep,
            full,
            buffer: Vec::with_capacity(full),
            bound: None,
        }
    }

    #[inline]
    fn push(&mut self, item: T) {
        if let Some(bound) = &self.bound
            && item >= *bound
        {
            // The `keep` buffered items at or below the bound already outrank it.
            return;
        }
        self.buffer.push(item);
        if self.buffer.len() == self.full {
            self.cut();
        }
    }

    /// Keeps the `keep` smallest of the buffer; the largest of them is the new bound.
    fn cut(&mut self) {
        let keep = self.keep;
        if self.buffer.len() > keep {
            self.buffer.select_nth_unstable(keep - 1);
            self.buffer.truncate(keep);
            self.bound = Some(self.buffer[keep - 1]);
        }
    }

    /// The `keep` smallest, ascending.
    fn finish(mut self) -> Vec<T> {
        self.cut();
        self.buffer.sort_unstable();
        self.buffer
    }
}

/// Builds rows for `window` in order until the answer budget is spent.
fn fill<T, R: Serialize>(window: &[T], row: impl FnMut(&T) -> R) -> Vec<R> {
    fill_within(window, ANSWER_BUDGET, row)
}

fn fill_within<T, R: Serialize>(
    window: &[T],
    budget: usize,
    mut row: impl FnMut(&T) -> R,
) -> Vec<R> {
    let mut left = budget;
    let mut rows = Vec::with_capacity(window.len());
    for item in window {
        let r = row(item);
        let len = encoded_len(&r);
        if len > left {
            break;
        }
        left -= len;
        rows.push(r);
    }
    rows
}

/// `s` cut to at most [`MAX_TEXT_LEN`] bytes at a character boundary.
pub fn clip(s: &str) -> String {
    clip_to(s, MAX_TEXT_LEN)
}

/// `s` cut to at most `max` bytes (at least 3) at a character boundary, ending in `…` when cut.
pub fn clip_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    const ELLIPSIS: &str = "…";
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_page_agrees_with_a_full_sort_for_every_window() {
        let base: Vec<u32> = (0..97u32).map(|i| (i * 37) % 101).collect();
        let mut sorted = base.clone();
        sorted.sort_unstable();
        for offset in [0u32, 1, 10, 50, 96, 97, 200] {
            for limit in [0u32, 1, 7, 96, 97, 1000] {
                let mut items = base.clone();
                let got =
                    select_page(&mut items, Page::new(offset, limit), |a, b| a.cmp(b)).to_vec();
                let (s, e) = bounds(Page::new(offset, limit), sorted.len());
                assert_eq!(got, sorted[s..e], "offset {offset} limit {limit}");
            }
        }
    }

    /// The page's window of `items` (`total` distinct items), in order: [`WindowSelection`]
    /// fed every item.
    fn select_window<T: Ord + Copy>(
        items: impl Iterator<Item = T>,
        total: usize,
        page: Page,
    ) -> Vec<T> {
        let mut window = WindowSelection::new(total, page);
        for item in items {
            window.push(item);
        }
        window.finish()
    }

    #[test]
    fn select_window_agrees_with_a_full_sort_near_either_end_and_between() {
        let n = 3 * STREAMED_WINDOW as u32 + 5;
        let base: Vec<u32> = (0..n).map(|i| (i * 7919) % n).collect();
        let mut sorted = base.clone();
        sorted.sort_unstable();
        let far = n - STREAMED_WINDOW as u32;
        for offset in [
            0u32,
            1,
            200,
            4000,
            4096,
            6000,
            far - 1,
            far,
            n - 200,
            n - 1,
            n,
            n + 9,
        ] {
            for limit in [0u32, 1, 200, 1000] {
                let page = Page::new(offset, limit);
                let got = select_window(base.iter().copied(), base.len(), page);
                let (s, e) = bounds(page, sorted.len());
                assert_eq!(got, sorted[s..e], "offset {offset} limit {limit}");
            }
        }
    }

    #[test]
    fn clip_cuts_long_text_at_a_char_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(MAX_TEXT_LEN);
        let cut = clip(&long);
        assert!(cut.len() <= MAX_TEXT_LEN, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.starts_with("éé"));
    }

    #[test]
    fn fill_stops_at_the_budget() {
        let items: Vec<u32> = (0..100).collect();
        // Each String row "xxxxxxxxx" encodes to 10 bytes (1 length byte + 9).
        let rows = fill_within(&items, 35, |_| "x".repeat(9));
        assert_eq!(rows.len(), 3);
    }
}
