//! Wire twins of the analysis engine's small plain-data types: group ids, sharers, frame kinds,
//! thread states and object classes.
//!
//! Why twins rather than the `heaptui_analysis` types themselves: those types carry serde shapes
//! made for the report JSON (docs/reference.md §5) — `GroupId` serializes as the text `"T1"`,
//! `Sharer` is `#[serde(untagged)]` and `ThreadState` adjacently tagged, and bincode cannot decode
//! either of the last two (it is not a self-describing format). More importantly, the wire layout
//! is frozen by [`crate::PROTOCOL_VERSION`]: it must not change when someone reshapes the report
//! JSON or reorders an engine enum. So the wire has its own types, with lossless `From`
//! conversions both ways; the engine stays the only source of the figures.
//!
//! This module owns only the shapes; it never computes anything.

use std::fmt;

use heaptui_analysis as engine;
use serde::{Deserialize, Serialize};

/// The three kinds of shared-memory group (docs/reference.md §3 "Groups").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GroupKind {
    FrameShared,
    ThreadShared,
    GlobalOnly,
}

/// A group's id, shown as `F<n>`, `T<n>` or `G<n>`; stable within one snapshot only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupId {
    pub kind: GroupKind,
    pub number: u32,
}

/// Who reaches a group: a thread (by tid) or the globals root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Sharer {
    Thread(u32),
    Globals,
}

/// Whether a frame belongs to the program or to the system (libc, ld.so, the agent …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FrameKind {
    User,
    System,
}

/// Whether the agent could stop a thread for the capture.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ThreadState {
    Stopped,
    /// Not stoppable; the one-line reason says why (signals blocked, in vfork …).
    NotStoppable(String),
}

/// The class of one object (docs/reference.md §3 table), naming threads by tid and frames by their
/// index (innermost first) so that the answer stands on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectClass {
    FrameProprietary { tid: u32, frame: u32 },
    FrameShared { tid: u32 },
    ThreadShared,
    GlobalOnly,
    DefinitelyLost,
    IndirectlyLost,
}

impl GroupKind {
    pub fn prefix(self) -> char {
        engine::GroupKind::from(self).prefix()
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        engine::GroupId::from(*self).fmt(f)
    }
}

impl std::str::FromStr for GroupId {
    type Err = String;

    /// Parses `F3`, `T1`, `G2` (the engine's parser, so both spell ids alike).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<engine::GroupId>().map(GroupId::from)
    }
}

impl fmt::Display for Sharer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharer::Thread(tid) => write!(f, "{tid}"),
            Sharer::Globals => f.write_str("globals"),
        }
    }
}

impl From<engine::GroupKind> for GroupKind {
    fn from(k: engine::GroupKind) -> Self {
        match k {
            engine::GroupKind::FrameShared => GroupKind::FrameShared,
            engine::GroupKind::ThreadShared => GroupKind::ThreadShared,
            engine::GroupKind::GlobalOnly => GroupKind::GlobalOnly,
        }
    }
}

impl From<GroupKind> for engine::GroupKind {
    fn from(k: GroupKind) -> Self {
        match k {
            GroupKind::FrameShared => engine::GroupKind::FrameShared,
            GroupKind::ThreadShared => engine::GroupKind::ThreadShared,
            GroupKind::GlobalOnly => engine::GroupKind::GlobalOnly,
        }
    }
}

impl From<engine::GroupId> for GroupId {
    fn from(id: engine::GroupId) -> Self {
        GroupId {
            kind: id.kind.into(),
            number: id.number,
        }
    }
}

impl From<GroupId> for engine::GroupId {
    fn from(id: GroupId) -> Self {
        engine::GroupId {
            kind: id.kind.into(),
            number: id.number,
        }
    }
}

impl From<engine::Sharer> for Sharer {
    fn from(s: engine::Sharer) -> Self {
        match s {
            engine::Sharer::Thread(tid) => Sharer::Thread(tid),
            engine::Sharer::Globals => Sharer::Globals,
        }
    }
}

impl From<Sharer> for engine::Sharer {
    fn from(s: Sharer) -> Self {
        match s {
            Sharer::Thread(tid) => engine::Sharer::Thread(tid),
            Sharer::Globals => engine::Sharer::Globals,
        }
    }
}

impl From<engine::FrameKind> for FrameKind {
    fn from(k: engine::FrameKind) -> Self {
        match k {
            engine::FrameKind::User => FrameKind::User,
            engine::FrameKind::System => FrameKind::System,
        }
    }
}

impl From<FrameKind> for engine::FrameKind {
    fn from(k: FrameKind) -> Self {
        match k {
            FrameKind::User => engine::FrameKind::User,
            FrameKind::System => engine::FrameKind::System,
        }
    }
}

impl From<&engine::ThreadState> for ThreadState {
    fn from(s: &engine::ThreadState) -> Self {
        match s {
            engine::ThreadState::Stopped => ThreadState::Stopped,
            engine::ThreadState::NotStoppable(reason) => ThreadState::NotStoppable(reason.clone()),
        }
    }
}

impl From<ThreadState> for engine::ThreadState {
    fn from(s: ThreadState) -> Self {
        match s {
            ThreadState::Stopped => engine::ThreadState::Stopped,
            ThreadState::NotStoppable(reason) => engine::ThreadState::NotStoppable(reason),
        }
    }
}

impl ObjectClass {
    /// Converts the engine's class, whose thread and frame are indices into the snapshot's
    /// `threads`, into the wire's tid + frame index. `None` when the indices do not fit them (a
    /// mismatched graph and analysis: the caller reports an internal error).
    pub fn from_engine(class: engine::ObjectClass, threads: &[engine::Thread]) -> Option<Self> {
        let tid_of = |thread: usize| threads.get(thread).map(|t| t.tid);
        Some(match class {
            engine::ObjectClass::FrameProprietary { thread, frame } => {
                ObjectClass::FrameProprietary {
                    tid: tid_of(thread)?,
                    frame: u32::try_from(frame).ok()?,
                }
            }
            engine::ObjectClass::FrameShared { thread } => ObjectClass::FrameShared {
                tid: tid_of(thread)?,
            },
            engine::ObjectClass::ThreadShared => ObjectClass::ThreadShared,
            engine::ObjectClass::GlobalOnly => ObjectClass::GlobalOnly,
            engine::ObjectClass::DefinitelyLost => ObjectClass::DefinitelyLost,
            engine::ObjectClass::IndirectlyLost => ObjectClass::IndirectlyLost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_print_and_parse_like_the_engine() {
        let id: GroupId = "T12".parse().unwrap();
        assert_eq!(
            id,
            GroupId {
                kind: GroupKind::ThreadShared,
                number: 12
            }
        );
        assert_eq!(id.to_string(), "T12");
        assert!("X1".parse::<GroupId>().is_err());
        assert!("F0".parse::<GroupId>().is_err());
        assert_eq!(GroupKind::GlobalOnly.prefix(), 'G');
    }

    #[test]
    fn conversions_round_trip() {
        for kind in [
            GroupKind::FrameShared,
            GroupKind::ThreadShared,
            GroupKind::GlobalOnly,
        ] {
            let id = GroupId { kind, number: 7 };
            assert_eq!(GroupId::from(engine::GroupId::from(id)), id);
        }
        for s in [Sharer::Thread(9), Sharer::Globals] {
            assert_eq!(Sharer::from(engine::Sharer::from(s)), s);
        }
        for k in [FrameKind::User, FrameKind::System] {
            assert_eq!(FrameKind::from(engine::FrameKind::from(k)), k);
        }
        let st = ThreadState::NotStoppable("signals blocked".into());
        assert_eq!(
            ThreadState::from(&engine::ThreadState::from(st.clone())),
            st
        );
        assert_eq!(Sharer::Globals.to_string(), "globals");
        assert_eq!(Sharer::Thread(3).to_string(), "3");
    }
}
