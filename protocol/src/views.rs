//! The shapes of the views around the core (docs/reference.md §8) on the wire: allocation units,
//! leaks and growth by site, block ages, the counter history, the automatic snapshot rule, and the
//! server-side object filter.
//!
//! Shapes only, like [`crate::message`]: the agent fills them from `heaptui_analysis::views`,
//! clients draw them. Rows are flat and bounded (stacks capped at
//! [`crate::MAX_STACK_FRAMES`], histories at [`MAX_HISTORY`]) so a page stays well under the
//! frame maximum.

use serde::{Deserialize, Serialize};

use crate::message::{LiveCounters, ObjectRow, PageInfo, SnapshotId};

/// Most per-snapshot values one growth row carries (the latest ones).
pub const MAX_HISTORY: usize = 64;

/// Most samples one [`CounterHistory`] carries (the latest ones).
pub const MAX_COUNTER_SAMPLES: usize = 3_600;

/// Number of age ranges of an [`AgeHistogram`]: 0, 1, 2, 3 and more than 3 snapshots.
pub const AGE_RANGES: usize = 5;

/// A filter over object rows, applied by the server before sorting and paging, so that a
/// million-member group is filtered whole rather than the page a client happens to hold.
///
/// `query` matches like the TUI's `/`: its characters must occur in order in the row's text
/// (a fuzzy subsequence), case-insensitive unless the query holds an upper-case letter. The
/// row's text is [`ObjectFilter::row_text`]: what a client shows of an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectFilter {
    pub query: String,
}

impl ObjectFilter {
    pub fn new(query: impl Into<String>) -> Self {
        ObjectFilter {
            query: query.into(),
        }
    }

    /// The text a row is matched against: address, size in bytes, site label, thread.
    pub fn row_text(row: &ObjectRow) -> String {
        format!(
            "{:#x} {} {} {}",
            row.addr, row.size, row.site_label, row.thread
        )
    }

    /// Whether `text` holds the query's characters in order (smart case).
    pub fn matches(&self, text: &str) -> bool {
        subsequence_match(text, &self.query)
    }
}

/// Whether `text` holds `query`'s characters in order; case-insensitive unless `query` holds
/// an upper-case letter (smart case).
pub fn subsequence_match(text: &str, query: &str) -> bool {
    let sensitive = query.chars().any(char::is_uppercase);
    if text.is_ascii() && query.is_ascii() {
        let mut wanted = query.bytes().peekable();
        for b in text.bytes() {
            let Some(&q) = wanted.peek() else { break };
            if b == q || (!sensitive && b.to_ascii_lowercase() == q) {
                wanted.next();
            }
        }
        return wanted.peek().is_none();
    }
    let mut wanted = query.chars().peekable();
    for c in text.chars() {
        let Some(&q) = wanted.peek() else { break };
        let hit = if sensitive {
            c == q
        } else {
            c == q || c.to_lowercase().eq(q.to_lowercase())
        };
        if hit {
            wanted.next();
        }
    }
    wanted.peek().is_none()
}

/// When the agent takes automatic snapshots (docs/reference.md §8 "mark-and-count").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotRule {
    /// Only on request.
    #[default]
    Off,
    /// Each time this many bytes were allocated since the last snapshot.
    EveryBytes(u64),
    /// "allocated since last + live at last > kept peak + tolerance": the kept peak snapshot
    /// is within `tolerance` bytes of the true peak.
    Tolerance(u64),
}

/// The counters of the recent past, sampled by the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterHistory {
    /// The sampling period.
    pub interval_ms: u32,
    /// Oldest first, at most [`MAX_COUNTER_SAMPLES`].
    pub samples: Vec<LiveCounters>,
}

/// What an allocation unit is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnitGranularity {
    #[default]
    Library,
    Function,
    Thread,
}

/// Which frames of an allocation stack make its unit(s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnitPosition {
    /// The outermost library/function below `main`.
    #[default]
    Outermost,
    /// The innermost, skipping the agent's and the allocator's frames.
    Innermost,
    /// Every library/function on the path, once per event.
    Inclusive,
}

/// Who a free is charged to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnitCharge {
    /// The unit that allocated the block.
    #[default]
    Allocator,
    /// The unit that freed it.
    Freer,
}

/// How events are turned into units, chosen at analysis time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UnitQuery {
    pub granularity: UnitGranularity,
    pub position: UnitPosition,
    pub charge: UnitCharge,
}

/// Unit list order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnitKey {
    Live,
    Max,
    Malloc,
    Free,
    Name,
}

/// One unit's figures (docs/reference.md §8).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRow {
    /// `liba.so`, `func_a0 (liba.so)` or `thread 42`.
    pub name: String,
    /// Bytes charged in minus bytes charged out (negative when frees go to the freer).
    pub live: i64,
    /// Lowest and highest `live` ever, starting from 0.
    pub min: i64,
    pub max: i64,
    pub malloc: u64,
    pub realloc: u64,
    pub free: u64,
    pub memalign: u64,
}

/// A page of allocation units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitPage {
    pub query: UnitQuery,
    /// Allocation events seen so far.
    pub events: u64,
    /// Frees and reallocs of pointers no block starts at (reported, totals unchanged).
    pub unknown_frees: u64,
    pub unknown_reallocs: u64,
    pub page: PageInfo,
    pub rows: Vec<UnitRow>,
}

/// The leaked blocks of one allocation site, per leak class (docs/reference.md §3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakRow {
    /// Site index for [`crate::RequestBody::SiteObjects`], `u32::MAX` without a site.
    pub site: u32,
    pub label: String,
    /// Allocation stack, innermost first (capped).
    pub frames: Vec<String>,
    pub definitely_lost: u64,
    pub definitely_lost_objects: u64,
    pub indirectly_lost: u64,
    pub indirectly_lost_objects: u64,
    /// Reachable blocks of the site that no path of start edges reaches.
    pub possibly_lost: u64,
    pub possibly_lost_objects: u64,
}

/// A page of leaks by site of one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakPage {
    pub snapshot: SnapshotId,
    pub page: PageInfo,
    pub rows: Vec<LeakRow>,
}

/// One site's live bytes across snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrowthRow {
    pub label: String,
    /// Allocation stack, innermost first (capped).
    pub frames: Vec<String>,
    /// Live bytes at each snapshot, oldest first, the latest [`MAX_HISTORY`].
    pub history: Vec<u64>,
    /// Grew strictly over the last `run` snapshots.
    pub growing: bool,
    /// Holds more than 75% of the latest snapshot's live bytes.
    pub dominant: bool,
}

/// A page of per-site growth.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrowthPage {
    /// Snapshots seen.
    pub snapshots: u32,
    /// Snapshots in a row over which a site must grow to be flagged.
    pub run: u32,
    pub page: PageInfo,
    pub rows: Vec<GrowthRow>,
}

/// How the age rows are grouped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgeScope {
    #[default]
    Sites,
    Threads,
}

/// Blocks and bytes per age range: `[0]` survived no snapshot, …, `[4]` more than three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgeHistogram {
    pub blocks: [u64; AGE_RANGES],
    pub bytes: [u64; AGE_RANGES],
}

/// The age histogram of one site or thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgeRow {
    /// Site index or thread id, per [`AgeScope`].
    pub key: u32,
    /// Site label or thread name.
    pub label: String,
    pub histogram: AgeHistogram,
}

/// A long-lived block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Survivor {
    /// The block, with its age in snapshots.
    pub object: ObjectRow,
    /// Wall-clock age in milliseconds, when known.
    pub age_ms: Option<u64>,
}

/// The age view of one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgesAnswer {
    pub snapshot: SnapshotId,
    pub by: AgeScope,
    /// Snapshot boundaries the ages count.
    pub boundaries: u32,
    pub total: AgeHistogram,
    pub page: PageInfo,
    pub rows: Vec<AgeRow>,
    /// Oldest first.
    pub oldest: Vec<Survivor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_in_order_with_smart_case() {
        let f = ObjectFilter::new("cach");
        assert!(f.matches("0x1000 64 cache_insert (demo.c:10) 42"));
        assert!(!ObjectFilter::new("hcac").matches("cache"));
        assert!(!ObjectFilter::new("Cache").matches("cache_insert"));
        assert!(ObjectFilter::new("").matches("anything"));
        assert!(subsequence_match("ÉCOLE", "é"));
    }

    #[test]
    fn the_row_text_holds_what_a_client_shows() {
        let row = ObjectRow {
            index: 3,
            id: 9,
            addr: 0x7f00_1000,
            size: 4096,
            site: 1,
            site_label: "make_buffer (demo.c:12)".into(),
            thread: 4242,
            seq: 9,
            age: Some(1),
        };
        let text = ObjectFilter::row_text(&row);
        for part in ["0x7f001000", "4096", "make_buffer", "4242"] {
            assert!(text.contains(part), "{text}");
        }
    }
}
