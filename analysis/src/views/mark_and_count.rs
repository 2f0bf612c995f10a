//! Mark-and-count (docs/reference.md §8): the live counters of a process and the rule that decides
//! when to take an automatic snapshot so that the kept snapshot is close to the true peak.
//!
//! [`MarkAndCount`] is a plain state machine of a few integers, fed one allocation or free at a
//! time. It owns the counters (live bytes and blocks, bytes allocated so far, true peak of live
//! bytes), the automatic-snapshot rule and the live figure of the kept peak snapshot. It never
//! allocates, locks, reads a clock or performs I/O, so an agent can drive it from its hooks.
//!
//! # The rules, and the reading under which every vector of issue 7 holds
//! - [`SnapshotRule::EveryBytes`]`(N)`: a snapshot is due as soon as the bytes allocated since
//!   the last snapshot (`X`) reach `N` (`X ≥ N`). (Counting crossings of multiples of `N`
//!   satisfies the vectors too; "since the last snapshot" was chosen because it shares `X`
//!   with the tolerance rule, and a manual snapshot restarts both rules alike.)
//! - [`SnapshotRule::Tolerance`]`(T)`: a snapshot is due when `X + Y > Z + T`, with `Y` the live
//!   bytes at the last snapshot (0 before the first) and `Z` the live bytes of the *kept*
//!   snapshot (0 before the first) — not the true peak: with `Z` the true peak the first vector
//!   would never fire. The comparison is strict: in `a150 f150 a100 f100 a100 …` the second
//!   `a100` gives `100 + 150 = 250`, which must not fire for the vector's "150 and 100".
//! - Every rule is checked after an allocation only (a free cannot raise the peak). When it
//!   fires, the snapshot is taken at the live bytes of that moment: `X` restarts at 0, `Y`
//!   becomes the live bytes, and the kept snapshot is replaced only if the new one is strictly
//!   higher. A snapshot that fires but is not higher still restarts `X` and `Y` (the vector
//!   `a150 f150 a100 f100 …` lists the snapshot "at 100" although 150 stays kept).
//!
//! Why the tolerance guarantee holds: between two firings `live ≤ Y + X ≤ Z + T`, and each
//! firing looks at the live bytes of its own moment, so `true peak − kept peak ≤ T`. For
//! `EveryBytes(N)`, `live < Y + N ≤ Z + N` in the same way.
//!
//! # Driving it from the agent
//! Keep one `MarkAndCount` per process and call [`MarkAndCount::alloc`], [`MarkAndCount::free`]
//! and [`MarkAndCount::realloc`] in the order the events happen (under whatever serialises the
//! agent's live-byte counter, or on the agent thread when replaying its event stream). Each call
//! is a handful of integer operations. When `alloc`/`realloc` return a [`Trigger`] with
//! `keep == true`, the agent should capture a snapshot and keep it as the new peak; with
//! `keep == false` the rule has already restarted and the capture may be skipped, since it
//! would be dropped anyway. A capture that lands later than the triggering event, or a manual
//! snapshot, is reported with [`MarkAndCount::snapshot_taken`] and its real live bytes.

use serde::{Deserialize, Serialize};

/// When to take an automatic snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotRule {
    /// No automatic snapshots; counters only.
    #[default]
    Off,
    /// A snapshot each time this many bytes were allocated since the last one (0 acts as 1).
    EveryBytes(u64),
    /// "allocated since last + live at last > kept peak + tolerance": the kept snapshot is
    /// within this many bytes of the true peak.
    Tolerance(u64),
}

/// The counters of one moment (docs/reference.md §8 "Live counters").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Bytes allocated so far, freed or not (a realloc counts its new size).
    pub allocated_bytes: u64,
    /// The highest live bytes ever reached.
    pub peak_live_bytes: u64,
    /// Live bytes of the kept snapshot, if one was taken.
    pub kept_peak_bytes: Option<u64>,
    /// Snapshots taken (by the rule or reported with `snapshot_taken`).
    pub snapshots: u64,
}

impl Counters {
    /// `live / allocated`, 0 when nothing was allocated.
    pub fn utilization(&self) -> f64 {
        if self.allocated_bytes == 0 {
            0.0
        } else {
            self.live_bytes as f64 / self.allocated_bytes as f64
        }
    }
}

/// A snapshot the rule decided to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// Live bytes at the moment of the decision.
    pub live_bytes: u64,
    /// Whether this snapshot becomes the kept peak (it is strictly higher than the kept one).
    pub keep: bool,
}

/// The mark-and-count state machine; see the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MarkAndCount {
    rule: SnapshotRule,
    live_bytes: u64,
    live_blocks: u64,
    allocated_bytes: u64,
    peak_live_bytes: u64,
    /// `X`: bytes allocated since the last snapshot.
    since_last: u64,
    /// `Y`: live bytes at the last snapshot.
    live_at_last: u64,
    /// `Z`: live bytes of the kept snapshot.
    kept: Option<u64>,
    snapshots: u64,
}

impl MarkAndCount {
    pub const fn new(rule: SnapshotRule) -> Self {
        MarkAndCount {
            rule,
            live_bytes: 0,
            live_blocks: 0,
            allocated_bytes: 0,
            peak_live_bytes: 0,
            since_last: 0,
            live_at_last: 0,
            kept: None,
            snapshots: 0,
        }
    }

    pub fn rule(&self) -> SnapshotRule {
        self.rule
    }

    /// A block of `size` bytes was allocated.
    #[inline]
    pub fn alloc(&mut self, size: u64) -> Option<Trigger> {
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.live_blocks += 1;
        self.allocated(size)
    }

    /// A block of `size` bytes was freed (`free(NULL)` and unknown pointers are not frees of a
    /// block: do not report them here).
    #[inline]
    pub fn free(&mut self, size: u64) {
        // Saturating: a recording that starts mid-run may free blocks it never saw allocated.
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.live_blocks = self.live_blocks.saturating_sub(1);
    }

    /// A block of `old` bytes became one of `new` bytes (in place or moved): the old block is
    /// freed and the new one allocated, and the rule is checked once.
    #[inline]
    pub fn realloc(&mut self, old: u64, new: u64) -> Option<Trigger> {
        self.live_bytes = self.live_bytes.saturating_sub(old).saturating_add(new);
        self.allocated(new)
    }

    fn allocated(&mut self, size: u64) -> Option<Trigger> {
        self.allocated_bytes = self.allocated_bytes.saturating_add(size);
        self.since_last = self.since_last.saturating_add(size);
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        let due = match self.rule {
            SnapshotRule::Off => false,
            SnapshotRule::EveryBytes(n) => self.since_last >= n.max(1),
            SnapshotRule::Tolerance(t) => {
                self.since_last.saturating_add(self.live_at_last)
                    > self.kept.unwrap_or(0).saturating_add(t)
            }
        };
        if !due {
            return None;
        }
        let live_bytes = self.live_bytes;
        let keep = self.snapshot_taken(live_bytes);
        Some(Trigger { live_bytes, keep })
    }

    /// A snapshot with `live_bytes` live was taken (by the rule, late, or on request): the rule
    /// restarts from it. Returns whether it replaces the kept peak snapshot.
    pub fn snapshot_taken(&mut self, live_bytes: u64) -> bool {
        self.snapshots += 1;
        self.since_last = 0;
        self.live_at_last = live_bytes;
        let keep = self.kept.is_none_or(|kept| live_bytes > kept);
        if keep {
            self.kept = Some(live_bytes);
        }
        keep
    }

    pub fn counters(&self) -> Counters {
        Counters {
            live_bytes: self.live_bytes,
            live_blocks: self.live_blocks,
            allocated_bytes: self.allocated_bytes,
            peak_live_bytes: self.peak_live_bytes,
            kept_peak_bytes: self.kept,
            snapshots: self.snapshots,
        }
    }
}
