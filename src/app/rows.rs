//! The columns of every list: how the protocol's rows ([`ThreadRow`], [`FrameRow`],
//! [`ObjectRow`], [`SiteRow`]) appear in the generic table and how they compare.
//!
//! Formatting only: no figure is computed here, every number comes from the source.

use std::borrow::Cow;
use std::cmp::Ordering;

use heaptui_protocol::message::{FrameRow, IdList, ObjectKey, ObjectRow, SiteRow, ThreadRow};
use heaptui_protocol::{FrameKind, ThreadState};

use super::table::{CellContext, Column, TableRow};
use crate::size::human;

/// A size cell: human units, or exact bytes when the operator asked for them.
pub fn size_cell(bytes: u64, cx: &CellContext) -> String {
    if cx.exact_bytes {
        bytes.to_string()
    } else {
        human(bytes)
    }
}

/// A bar of `width` cells, `value / max` of it filled, in eighths.
pub fn bar(value: u64, max: u64, width: usize) -> String {
    if max == 0 {
        return String::new();
    }
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let eighths = ((value as u128 * width as u128 * 8) / max as u128) as usize;
    let mut s = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push(PARTS[eighths % 8]);
    }
    s
}

/// `F1 T2 …(+3)`: a bounded id list as one cell.
pub fn ids_cell(list: &IdList) -> String {
    if list.total == 0 {
        return "-".to_string();
    }
    let mut s = list
        .ids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    if list.is_truncated() {
        s.push_str(&format!(" …(+{})", list.total as usize - list.ids.len()));
    }
    s
}

pub fn state_cell(state: &ThreadState) -> String {
    match state {
        ThreadState::Stopped => "stopped".to_string(),
        ThreadState::NotStoppable(reason) => format!("not stoppable: {reason}"),
    }
}

const BAR_WIDTH: u16 = 16;

impl TableRow for ThreadRow {
    const COLUMNS: &'static [Column] = &[
        Column::number("TID", 8).keep(7),
        Column::text("NAME", 0).keep(9),
        Column::bytes("PROPRIETARY", 12).keep(8),
        Column::bytes("SHARED", 10).keep(7),
        Column::bytes("TOTAL", 10).keep(9),
        Column::text("", BAR_WIDTH).unsorted().keep(3),
        Column::number("FRAMES", 6).keep(2),
        Column::text("STATE", 0).min(8).keep(1),
    ];
    const FILTER_COLUMN: usize = 1;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.name)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => self.tid.to_string(),
            1 => self.name.clone(),
            2 => size_cell(self.proprietary, cx),
            3 => size_cell(self.shared, cx),
            4 => size_cell(self.total, cx),
            5 => bar(self.total, cx.max, BAR_WIDTH as usize),
            6 => self.frames.to_string(),
            _ => state_cell(&self.state),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            0 => self.tid.cmp(&other.tid),
            1 => self.name.cmp(&other.name),
            2 => self.proprietary.cmp(&other.proprietary),
            3 => self.shared.cmp(&other.shared),
            4 | 5 => self.total.cmp(&other.total),
            6 => self.frames.cmp(&other.frames),
            _ => state_cell(&self.state).cmp(&state_cell(&other.state)),
        }
    }

    fn metric(&self) -> u64 {
        self.total
    }
}

/// A thread on the release tab: what ending it alone frees, and whether it is marked.
///
/// Ending one thread frees exactly what it holds alone: `release({t}) = Σ size(o) : T(o) = {t}`,
/// which is `proprietary(t)` by definition (docs/reference.md §3); sets are asked of the source,
/// since their release is not the sum of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRow {
    pub thread: ThreadRow,
    pub marked: bool,
}

impl TableRow for ReleaseRow {
    const COLUMNS: &'static [Column] = &[
        Column::text("MARK", 4).unsorted().keep(8),
        Column::number("TID", 8).keep(7),
        Column::text("NAME", 0).keep(9),
        Column::bytes("RELEASE ALONE", 14).keep(9),
        Column::text("", BAR_WIDTH).unsorted().keep(3),
        Column::bytes("SHARED", 10).keep(5),
        Column::bytes("TOTAL", 10).keep(6),
    ];
    const FILTER_COLUMN: usize = 2;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.thread.name)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        let t = &self.thread;
        match column {
            0 => if self.marked { "[x]" } else { "[ ]" }.to_string(),
            1 => t.tid.to_string(),
            2 => t.name.clone(),
            3 => size_cell(t.proprietary, cx),
            4 => bar(t.proprietary, cx.max, BAR_WIDTH as usize),
            5 => size_cell(t.shared, cx),
            _ => size_cell(t.total, cx),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        let (a, b) = (&self.thread, &other.thread);
        match column {
            1 => a.tid.cmp(&b.tid),
            2 => a.name.cmp(&b.name),
            3 | 4 => a.proprietary.cmp(&b.proprietary),
            5 => a.shared.cmp(&b.shared),
            _ => a.total.cmp(&b.total),
        }
    }

    fn metric(&self) -> u64 {
        self.thread.proprietary
    }
}

impl TableRow for FrameRow {
    const COLUMNS: &'static [Column] = &[
        Column::number("#", 4).keep(6),
        Column::text("FUNCTION", 0).min(20).keep(9),
        Column::text("MODULE", 0).min(10).keep(3),
        Column::text("KIND", 6).keep(1),
        Column::bytes("PROPRIETARY", 12).keep(8),
        Column::text("FRAME-SHARED", 14).keep(5),
        Column::text("THREAD-SHARED", 14).keep(5),
    ];
    const FILTER_COLUMN: usize = 1;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.function)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => self.index.to_string(),
            1 => self.function.clone(),
            2 => self.module.clone(),
            3 => kind_cell(self.kind).to_string(),
            4 => size_cell(self.proprietary, cx),
            5 => ids_cell(&self.frame_shared),
            _ => ids_cell(&self.thread_shared),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            1 => self.function.cmp(&other.function),
            2 => self.module.cmp(&other.module),
            3 => kind_cell(self.kind).cmp(kind_cell(other.kind)),
            4 => self.proprietary.cmp(&other.proprietary),
            5 => self.frame_shared.total.cmp(&other.frame_shared.total),
            6 => self.thread_shared.total.cmp(&other.thread_shared.total),
            _ => Ordering::Equal,
        }
    }

    fn metric(&self) -> u64 {
        self.proprietary
    }
}

pub fn kind_cell(kind: FrameKind) -> &'static str {
    match kind {
        FrameKind::User => "user",
        FrameKind::System => "system",
    }
}

/// The object list's columns, with the server's sort key of each (`None`: not sortable, the
/// list being sorted remotely).
pub const OBJECT_KEYS: &[Option<ObjectKey>] = &[
    Some(ObjectKey::Addr),
    Some(ObjectKey::Size),
    Some(ObjectKey::Site),
    Some(ObjectKey::Thread),
    Some(ObjectKey::Seq),
    None,
];

impl TableRow for ObjectRow {
    const COLUMNS: &'static [Column] = &[
        Column::text("ADDRESS", 16).keep(6),
        Column::bytes("SIZE", 10).keep(8),
        Column::text("SITE", 0).keep(9),
        Column::number("THREAD", 8).keep(4),
        Column::number("SEQ", 10).keep(2),
        Column::number("AGE", 5).unsorted().keep(3),
    ];
    const FILTER_COLUMN: usize = 2;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.site_label)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => format!("{:#x}", self.addr),
            1 => size_cell(self.size, cx),
            2 => self.site_label.clone(),
            3 => match self.thread {
                0 => "?".to_string(),
                tid => tid.to_string(),
            },
            4 => match self.seq {
                0 => "?".to_string(),
                seq => seq.to_string(),
            },
            _ => self.age.map_or_else(|| "-".to_string(), |a| a.to_string()),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            0 => self.addr.cmp(&other.addr),
            1 => self.size.cmp(&other.size),
            2 => self.site_label.cmp(&other.site_label),
            3 => self.thread.cmp(&other.thread),
            4 => self.seq.cmp(&other.seq),
            _ => self.age.cmp(&other.age),
        }
    }

    fn metric(&self) -> u64 {
        self.size
    }
}

impl TableRow for SiteRow {
    const COLUMNS: &'static [Column] = &[
        Column::text("SITE", 0).keep(9),
        Column::bytes("LIVE", 10).keep(8),
        Column::number("BLOCKS", 9).keep(5),
        Column::text("", BAR_WIDTH).unsorted().keep(3),
        Column::text("CALLED FROM", 0).keep(4),
    ];
    const FILTER_COLUMN: usize = 0;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.label)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => self.label.clone(),
            1 => size_cell(self.live_bytes, cx),
            2 => self.blocks.to_string(),
            3 => bar(self.live_bytes, cx.max, BAR_WIDTH as usize),
            _ => super::leaks::called_from(&self.frames, &self.label),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            0 => self.label.cmp(&other.label),
            1 | 3 => self.live_bytes.cmp(&other.live_bytes),
            2 => self.blocks.cmp(&other.blocks),
            _ => self.frames.cmp(&other.frames),
        }
    }

    fn metric(&self) -> u64 {
        self.live_bytes
    }

    fn site_stack(&self) -> Option<(&str, &[String])> {
        Some((&self.label, &self.frames))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_in_eighths() {
        assert_eq!(bar(10, 10, 4), "████");
        assert_eq!(bar(5, 10, 4), "██");
        assert_eq!(bar(1, 16, 2), "▏");
        assert_eq!(bar(0, 10, 4), "");
        assert_eq!(bar(3, 0, 4), "");
    }
}
