//! The figures the attribution engine produces (docs/reference.md §3), as plain data.
//!
//! These types are the engine's public answer: the report printer, the protocol and the TUI
//! read them; only `attribution` and `groups` construct them. They hold no references into
//! the graph, so they can be kept, sent and compared freely.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::graph::ObjectIndex;

/// The three kinds of shared-memory entry (docs/reference.md §3 "Groups").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupKind {
    /// Immediate dominator is a thread node: shared by two or more frames of one thread.
    FrameShared,
    /// Immediate dominator is the super-root: reached by two or more threads (or a thread
    /// and the globals).
    ThreadShared,
    /// Immediate dominator is the globals node: reached from globals only.
    GlobalOnly,
}

impl GroupKind {
    pub fn prefix(self) -> char {
        match self {
            GroupKind::FrameShared => 'F',
            GroupKind::ThreadShared => 'T',
            GroupKind::GlobalOnly => 'G',
        }
    }
}

/// A group's id, `F<n>`, `T<n>` or `G<n>` (numbered from 1 within each kind, in the
/// order of the entry objects' indices, so ids are stable within one snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId {
    pub kind: GroupKind,
    pub number: u32,
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.kind.prefix(), self.number)
    }
}

impl std::str::FromStr for GroupId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a group id (expected F<n>, T<n> or G<n>)");
        let mut chars = s.chars();
        let kind = match chars.next() {
            Some('F' | 'f') => GroupKind::FrameShared,
            Some('T' | 't') => GroupKind::ThreadShared,
            Some('G' | 'g') => GroupKind::GlobalOnly,
            _ => return Err(bad()),
        };
        let number: u32 = chars.as_str().parse().map_err(|_| bad())?;
        if number == 0 {
            return Err(bad());
        }
        Ok(GroupId { kind, number })
    }
}

/// `"00" "01" … "99"`: two digits of a number at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// The text of a group id, at the start of a buffer aligned to 8 bytes: `str::from_utf8`
/// checks such a text by its plain ASCII loop, where a text starting anywhere else costs it
/// its general loop per byte (100M instructions of a live report client's 1,265M for a
/// million ids).
#[repr(align(8))]
struct IdText([u8; 16]);

impl Serialize for GroupId {
    /// As its `Display` text, written into a stack buffer rather than through
    /// `collect_str`'s formatting machinery: a live report writes a million ids (a seventh of
    /// its CPU went to formatting them). Two digits at a time, left to right from the start
    /// of an aligned buffer.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut text = IdText([0; 16]);
        let digits = self.number.checked_ilog10().map_or(1, |l| l as usize + 1);
        text.0[0] = self.kind.prefix() as u8;
        let (mut n, mut at) = (self.number as usize, 1 + digits);
        while n >= 10 {
            at -= 2;
            let pair = n % 100 * 2;
            text.0[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
            n /= 100;
        }
        if at > 1 {
            text.0[1] = b'0' + n as u8;
        }
        s.serialize_str(std::str::from_utf8(&text.0[..1 + digits]).expect("ASCII"))
    }
}

impl<'de> Deserialize<'de> for GroupId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Who reaches a group: a thread (by tid) or the globals root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Sharer {
    Thread(u32),
    #[serde(with = "globals_literal")]
    Globals,
}

mod globals_literal {
    //! Serializes the unit variant [`super::Sharer::Globals`] as the string `"globals"`.
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("globals")
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
        let s = String::deserialize(d)?;
        if s == "globals" {
            Ok(())
        } else {
            Err(serde::de::Error::custom(format!(
                "expected \"globals\", got {s:?}"
            )))
        }
    }
}

/// The class of one object (docs/reference.md §3 table). Thread and frame are indices into
/// `HeapGraph::threads` and that thread's `frames`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectClass {
    FrameProprietary { thread: usize, frame: usize },
    FrameShared { thread: usize },
    ThreadShared,
    GlobalOnly,
    DefinitelyLost,
    IndirectlyLost,
}

/// Whole-heap totals (report JSON `totals`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub objects: u64,
    pub bytes: u64,
    pub unreachable_bytes: u64,
    pub global_only_bytes: u64,
}

/// Figures of one frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameFigures {
    /// Bytes frame-proprietary to this frame.
    pub proprietary: u64,
    /// Frame-shared groups this frame (or an object proprietary to it) refers to directly.
    pub frame_shared: Vec<GroupId>,
    /// Thread-shared groups this frame (or an object proprietary to it) refers to directly.
    pub thread_shared: Vec<GroupId>,
}

/// Figures of one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadFigures {
    pub tid: u32,
    /// `Σ size(o) : T(o) = {t}`.
    pub proprietary: u64,
    /// `Σ size(o) : t ∈ T(o), |T(o)| ≥ 2`.
    pub shared: u64,
    /// `proprietary + shared`.
    pub total: u64,
    /// One entry per frame of the thread, innermost first.
    pub frames: Vec<FrameFigures>,
}

/// One shared-memory entry: an entry object and every object it dominates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub id: GroupId,
    /// The entry object.
    pub entry: ObjectIndex,
    /// Sum of the members' sizes.
    pub size: u64,
    /// Number of members.
    pub objects: u64,
    /// Threads (and globals) that reach the group, ascending, globals last.
    pub sharers: Vec<Sharer>,
    /// Groups a member of this group refers to directly, ascending.
    pub refs: Vec<GroupId>,
}

/// Unreachable blocks (docs/reference.md §3, last row).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaks {
    /// Bytes of the unreachable objects (definitely + indirectly lost).
    pub bytes: u64,
    pub objects: u64,
    /// Bytes of the lowest-address member of each lost strongly connected component that no
    /// other unreachable block points into.
    pub definitely_lost: u64,
    /// Bytes of the other unreachable objects.
    pub indirectly_lost: u64,
    pub definitely_lost_objects: u64,
    pub indirectly_lost_objects: u64,
    /// Bytes of reachable objects that no path of start edges reaches (not in `bytes`).
    pub possibly_lost: u64,
    pub possibly_lost_objects: u64,
}

/// Something that refers to groups: a frame (with the objects proprietary to it) or a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    Frame { thread: usize, frame: usize },
    Group(GroupId),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_id_serializes_as_its_display_text() {
        for kind in [
            GroupKind::FrameShared,
            GroupKind::ThreadShared,
            GroupKind::GlobalOnly,
        ] {
            let powers = (0..10).map(|e| 10u32.pow(e));
            let edges = powers.flat_map(|p| [p - 1, p, p + 1, p.saturating_mul(5)]);
            for number in [0, 123_456, 999_999_999, u32::MAX - 1, u32::MAX]
                .into_iter()
                .chain(edges)
                .chain((0..20_000).map(|k| k * 7919))
            {
                let id = GroupId { kind, number };
                let json = serde_json::to_string(&id).unwrap();
                assert_eq!(json, format!("\"{id}\""));
                if number > 0 {
                    assert_eq!(serde_json::from_str::<GroupId>(&json).unwrap(), id);
                }
            }
        }
    }
}
