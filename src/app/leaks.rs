//! The leaks screen's state (docs/reference.md §8 "Leaks"): the kept snapshot's leaked blocks
//! by allocation site, definitely, indirectly and possibly lost (docs/reference.md §3), as the
//! source answered them.
//!
//! State only: no drawing, no requests; every figure comes from the source.

use std::borrow::Cow;
use std::cmp::Ordering;

use heaptui_protocol::message::{LeakPage, LeakRow, MAX_PAGE_ROWS, Page, RequestBody};

use super::other::take_page;
use super::rows::{bar, size_cell};
use super::table::{CellContext, Column, LocalTable, SortSpec, TableRow};

#[derive(Debug)]
pub struct LeaksView {
    pub table: LocalTable<LeakRow>,
    pub error: Option<String>,
}

impl LeaksView {
    pub fn new() -> Self {
        LeaksView {
            table: LocalTable::new(SortSpec {
                column: 5,
                descending: true,
            }),
            error: None,
        }
    }

    pub fn request(offset: u32) -> RequestBody {
        RequestBody::Leaks {
            page: Page::new(offset, MAX_PAGE_ROWS),
        }
    }

    /// A page arrived; the follow-up request while rows remain.
    pub fn receive(&mut self, page: LeakPage) -> Option<RequestBody> {
        self.error = None;
        take_page(&mut self.table, page.page, page.rows).map(Self::request)
    }
}

impl Default for LeaksView {
    fn default() -> Self {
        Self::new()
    }
}

/// Bytes lost at a site, definitely and indirectly.
pub fn lost(row: &LeakRow) -> u64 {
    row.definitely_lost + row.indirectly_lost
}

const BAR_WIDTH: u16 = 12;

impl TableRow for LeakRow {
    const COLUMNS: &'static [Column] = &[
        Column::text("SITE", 0).keep(9),
        Column::bytes("DEFINITELY", 11).keep(7),
        Column::size("BLOCKS", 7).keep(4),
        Column::bytes("INDIRECTLY", 11).keep(6),
        Column::size("BLOCKS", 7).keep(3),
        Column::bytes("LOST", 10).keep(8),
        Column::bytes("POSSIBLY", 10).keep(5),
        Column::size("BLOCKS", 7).keep(2),
        Column::text("", BAR_WIDTH).unsorted().keep(2),
        Column::text("CALLED FROM", 0).keep(1),
    ];
    const FILTER_COLUMN: usize = 0;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.label)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => self.label.clone(),
            1 => size_cell(self.definitely_lost, cx),
            2 => self.definitely_lost_objects.to_string(),
            3 => size_cell(self.indirectly_lost, cx),
            4 => self.indirectly_lost_objects.to_string(),
            5 => size_cell(lost(self), cx),
            6 => size_cell(self.possibly_lost, cx),
            7 => self.possibly_lost_objects.to_string(),
            8 => bar(lost(self), cx.max, BAR_WIDTH as usize),
            _ => called_from(&self.frames, &self.label),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            0 => self.label.cmp(&other.label),
            1 => self.definitely_lost.cmp(&other.definitely_lost),
            2 => self
                .definitely_lost_objects
                .cmp(&other.definitely_lost_objects),
            3 => self.indirectly_lost.cmp(&other.indirectly_lost),
            4 => self
                .indirectly_lost_objects
                .cmp(&other.indirectly_lost_objects),
            5 | 8 => lost(self).cmp(&lost(other)),
            6 => self.possibly_lost.cmp(&other.possibly_lost),
            7 => self.possibly_lost_objects.cmp(&other.possibly_lost_objects),
            _ => self.frames.cmp(&other.frames),
        }
    }

    fn metric(&self) -> u64 {
        lost(self)
    }
}

/// The callers of a site labelled `label` (its frames after the one that names it: the
/// allocator and its wrappers are not callers), outermost last: `a ← b ← main`.
pub fn called_from(frames: &[String], label: &str) -> String {
    let after = frames
        .iter()
        .position(|f| f == label)
        .or_else(|| heaptui_analysis::labels::Wrappers::process().label_index(frames))
        .map_or(0, |i| i + 1);
    frames[after.min(frames.len())..]
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ← ")
}

#[cfg(test)]
mod tests {
    use super::called_from;

    #[test]
    fn a_site_is_called_from_the_frames_after_the_one_that_names_it() {
        let frames: Vec<String> = [
            "xmalloc (w.c:98)",
            "build_cache (w.c:108)",
            "main (w.c:290)",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            called_from(&frames, "build_cache (w.c:108)"),
            "main (w.c:290)"
        );
        // A label the frames do not hold whole (clipped): the wrappers say which names it.
        assert_eq!(
            called_from(&frames, "build_cache (w.c:1…"),
            "main (w.c:290)"
        );
        assert_eq!(called_from(&[], "?"), "");
    }
}
