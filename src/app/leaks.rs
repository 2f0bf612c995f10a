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

    fn site_stack(&self) -> Option<(&str, &[String])> {
        Some((&self.label, &self.frames))
    }
}

/// The callers of a site labelled `label` (its frames after the one that names it: the
/// allocator and its wrappers are not callers), outermost last: `a ← b ← main`.
pub fn called_from(frames: &[String], label: &str) -> String {
    frames[caller_start(frames, label)..]
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ← ")
}

/// Where the callers of a site labelled `label` start in its frames (`frames.len()` when it
/// has none).
pub fn caller_start(frames: &[String], label: &str) -> usize {
    frames
        .iter()
        .position(|f| f == label)
        .or_else(|| heaptui_analysis::labels::Wrappers::process().label_index(frames))
        .map_or(0, |i| i + 1)
        .min(frames.len())
}

#[cfg(test)]
mod tests {
    use heaptui_protocol::message::LeakRow;

    use super::{LeaksView, called_from};
    use crate::app::table::{CellContext, TableModel};

    #[test]
    fn leak_rows_with_one_label_show_where_their_stacks_part() {
        let row = |site: u32, label: &str, frames: &[&str], lost: u64| LeakRow {
            site,
            label: label.to_string(),
            frames: frames.iter().map(|f| f.to_string()).collect(),
            definitely_lost: lost,
            ..LeakRow::default()
        };
        let gc = "gc_alloc (gcmodule.c:2283)";
        let mut view = LeaksView::new();
        view.table.set_rows(
            vec![
                row(0, gc, &["malloc", gc, "PyTuple_New (tupleobject.c:60)"], 30),
                row(
                    1,
                    "odd_site (prog)",
                    &["odd_site (prog)", "main (prog)"],
                    20,
                ),
                row(2, gc, &["malloc", gc, "PyList_New (listobject.c:161)"], 10),
            ],
            3,
        );
        let t = &view.table;
        let cx = CellContext::default();
        let labels: Vec<String> = (0..t.len())
            .map(|i| t.cell_text(i, t.row(i).unwrap(), 0, &cx))
            .collect();
        assert_eq!(
            labels,
            [
                "gc_alloc (gcmodule.c:2283) ← PyTuple_New",
                "odd_site (prog)",
                "gc_alloc (gcmodule.c:2283) ← PyList_New",
            ]
        );
    }

    #[test]
    fn rows_arriving_page_by_page_are_told_apart_as_when_they_arrive_at_once() {
        let row = |site: u32, label: &str, caller: &str| LeakRow {
            site,
            label: label.to_string(),
            frames: ["malloc", label, caller].map(String::from).to_vec(),
            definitely_lost: 100 - u64::from(site),
            ..LeakRow::default()
        };
        let rows = vec![
            row(0, "gc_alloc (gcmodule.c:2283)", "PyTuple_New"),
            row(1, "odd_site (prog)", "main"),
            row(2, "xmalloc (w.c:98)", "load_config"),
            // Twins of rows in earlier pages: those rows change when these arrive.
            row(3, "gc_alloc (gcmodule.c:2283)", "PyList_New"),
            row(4, "xmalloc (w.c:98)", "parse_args"),
            row(5, "xmalloc (w.c:98)", "parse_args"),
        ];
        let labels = |view: &LeaksView| -> Vec<String> {
            let (t, cx) = (&view.table, CellContext::default());
            (0..t.len())
                .map(|i| t.cell_text(i, t.row(i).unwrap(), 0, &cx))
                .collect()
        };
        let mut at_once = LeaksView::new();
        at_once.table.set_rows(rows.clone(), rows.len());
        let mut paged = LeaksView::new();
        paged.table.set_rows(rows[..2].to_vec(), rows.len());
        assert_eq!(
            labels(&paged),
            ["gc_alloc (gcmodule.c:2283)", "odd_site (prog)"]
        );
        for page in rows[2..].chunks(2) {
            paged.table.extend(page.to_vec(), rows.len());
        }
        assert_eq!(labels(&paged), labels(&at_once));
        assert_eq!(
            labels(&paged)[0],
            "gc_alloc (gcmodule.c:2283) ← PyTuple_New"
        );
        assert!(labels(&paged)[2].starts_with("xmalloc (w.c:98) ← load_config"));
    }

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
