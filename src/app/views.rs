//! The drill-down stack's plain-data views: one per screen, each with what it shows and where
//! its cursor is, so Esc pops back to exactly the selection that was left.
//!
//! State only: no drawing, no requests (`app` asks; a view just holds the answers).

use std::collections::BTreeSet;

use heaptui_protocol::GroupId;
use heaptui_protocol::message::{
    FrameRow, GroupInfo, ObjectDetail, ObjectRow, Referrer, SiteRow, ThreadRow,
};

use super::action::Screen;
use super::other::OtherView;
use super::rows::ReleaseRow;
use super::table::{LocalTable, PagedTable, SortSpec};

/// One entry of the view stack; `serial` routes answers to the view that asked.
#[derive(Debug)]
pub struct View {
    pub serial: u64,
    pub kind: ViewKind,
}

#[derive(Debug)]
pub enum ViewKind {
    Home(Box<HomeView>),
    Frames(FramesView),
    Group(GroupView),
    Objects(ObjectsView),
    Object(ObjectView),
    /// Units, leaks, growth or ages (docs/reference.md §8).
    Other(OtherView),
}

impl View {
    pub fn screen(&self) -> Screen {
        match &self.kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => Screen::Threads,
                HomeTab::Release => Screen::Release,
                HomeTab::Sites => Screen::Sites,
            },
            ViewKind::Frames(_) => Screen::Frames,
            ViewKind::Group(_) => Screen::Group,
            ViewKind::Objects(_) => Screen::Objects,
            ViewKind::Object(_) => Screen::Object,
            ViewKind::Other(v) => v.screen(),
        }
    }

    /// Whether the view names things (groups, objects, sites) that only mean something in
    /// the snapshot it was opened in.
    pub fn snapshot_scoped(&self) -> bool {
        matches!(
            self.kind,
            ViewKind::Group(_) | ViewKind::Objects(_) | ViewKind::Object(_)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeTab {
    Threads,
    Release,
    Sites,
}

impl HomeTab {
    pub const ALL: [HomeTab; 3] = [HomeTab::Threads, HomeTab::Release, HomeTab::Sites];

    pub fn title(self) -> &'static str {
        match self {
            HomeTab::Threads => "Threads",
            HomeTab::Release => "Release ranking",
            HomeTab::Sites => "Allocation sites",
        }
    }
}

/// The release of the marked set, as asked of the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetRelease {
    pub tids: Vec<u32>,
    /// `None` until the answer comes.
    pub bytes: Option<u64>,
}

/// Home: the thread ranking, the release ranking and the allocation sites, as tabs.
#[derive(Debug)]
pub struct HomeView {
    pub tab: HomeTab,
    pub threads: LocalTable<ThreadRow>,
    pub release: LocalTable<ReleaseRow>,
    pub marked: BTreeSet<u32>,
    pub set_release: Option<SetRelease>,
    pub sites: LocalTable<SiteRow>,
    pub sites_asked: bool,
}

impl HomeView {
    pub fn new() -> Self {
        HomeView {
            tab: HomeTab::Threads,
            threads: LocalTable::new(SortSpec {
                column: 4,
                descending: true,
            }),
            release: LocalTable::new(SortSpec {
                column: 3,
                descending: true,
            }),
            marked: BTreeSet::new(),
            set_release: None,
            sites: LocalTable::new(SortSpec {
                column: 1,
                descending: true,
            }),
            sites_asked: false,
        }
    }

    /// The sum of the marked threads' single releases, to show how far the set's release is
    /// from it.
    pub fn sum_of_singles(&self) -> u64 {
        self.release
            .rows()
            .iter()
            .filter(|r| self.marked.contains(&r.thread.tid))
            .map(|r| r.thread.proprietary)
            .sum()
    }
}

/// A thread's frames, innermost first.
#[derive(Debug)]
pub struct FramesView {
    pub tid: u32,
    pub name: String,
    pub table: LocalTable<FrameRow>,
    /// Which of the selected frame's direct referents Enter opens.
    pub referent: usize,
    /// A frame to select once the rows arrive (coming from an object's referrers).
    pub select_frame: Option<u32>,
}

impl FramesView {
    pub fn new(tid: u32, name: String) -> Self {
        FramesView {
            tid,
            name,
            table: LocalTable::new(SortSpec {
                column: 0,
                descending: false,
            }),
            referent: 0,
            select_frame: None,
        }
    }
}

/// The groups a frame refers to directly, frame-shared first: what Enter can open.
pub fn frame_referents(frame: &FrameRow) -> Vec<GroupId> {
    frame
        .frame_shared
        .ids
        .iter()
        .chain(&frame.thread_shared.ids)
        .copied()
        .collect()
}

/// One shared group.
#[derive(Debug)]
pub struct GroupView {
    pub id: GroupId,
    pub info: Option<GroupInfo>,
    pub selected: usize,
}

/// The selectable lines of a group screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupItem {
    Entry(ObjectRow),
    Members(u64),
    Direct(GroupId),
    Developed(GroupId),
}

pub fn group_items(info: &GroupInfo) -> Vec<GroupItem> {
    let mut items = vec![
        GroupItem::Entry(info.entry.clone()),
        GroupItem::Members(info.members),
    ];
    items.extend(info.direct.ids.iter().map(|&id| GroupItem::Direct(id)));
    items.extend(
        info.developed
            .ids
            .iter()
            .filter(|id| !info.direct.ids.contains(id))
            .map(|&id| GroupItem::Developed(id)),
    );
    items
}

/// Where an object list comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectsOrigin {
    Group(GroupId),
    Site { site: u32, label: String },
}

/// A page-by-page list of objects.
#[derive(Debug)]
pub struct ObjectsView {
    pub origin: ObjectsOrigin,
    pub table: PagedTable<ObjectRow>,
}

/// One object.
#[derive(Debug)]
pub struct ObjectView {
    pub index: u32,
    pub detail: Option<ObjectDetail>,
    pub selected: usize,
}

/// The selectable lines of an object screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectItem {
    Group(GroupId),
    Dominator(u32),
    Outgoing(ObjectRow),
    Incoming(Referrer),
}

pub fn object_items(detail: &ObjectDetail) -> Vec<ObjectItem> {
    let mut items = Vec::new();
    if let Some(group) = detail.group {
        items.push(ObjectItem::Group(group));
    }
    if let Some(d) = detail.dominator {
        items.push(ObjectItem::Dominator(d));
    }
    items.extend(detail.outgoing.iter().cloned().map(ObjectItem::Outgoing));
    items.extend(detail.incoming.iter().cloned().map(ObjectItem::Incoming));
    items
}
