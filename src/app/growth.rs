//! The growth screen's state (docs/reference.md §8 "Leaks … per-site growth"): each site's live
//! bytes across the snapshots the source has seen, with the sites it flagged (growing over its run
//! of snapshots, or holding over 75% of the heap).
//!
//! State only: no drawing, no requests; the flags are the source's, never recomputed here.

use std::borrow::Cow;
use std::cmp::Ordering;

use heaptui_protocol::message::{GrowthPage, GrowthRow, MAX_PAGE_ROWS, Page, RequestBody};

use super::leaks::called_from;
use super::other::take_page;
use super::rows::size_cell;
use super::table::{CellContext, Column, LocalTable, SortSpec, TableRow};

#[derive(Debug)]
pub struct GrowthView {
    pub table: LocalTable<GrowthRow>,
    /// Snapshots seen and the run a site must grow over, as last answered.
    pub snapshots: Option<(u32, u32)>,
    pub error: Option<String>,
}

impl GrowthView {
    pub fn new() -> Self {
        GrowthView {
            table: LocalTable::new(SortSpec {
                column: 3,
                descending: false,
            }),
            snapshots: None,
            error: None,
        }
    }

    pub fn request(offset: u32) -> RequestBody {
        RequestBody::Growth {
            page: Page::new(offset, MAX_PAGE_ROWS),
        }
    }

    /// A page arrived; the follow-up request while rows remain.
    pub fn receive(&mut self, page: GrowthPage) -> Option<RequestBody> {
        self.error = None;
        self.snapshots = Some((page.snapshots, page.run));
        take_page(&mut self.table, page.page, page.rows).map(Self::request)
    }
}

impl Default for GrowthView {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the source flagged the row.
pub fn flagged(row: &GrowthRow) -> bool {
    row.growing || row.dominant
}

fn latest(row: &GrowthRow) -> u64 {
    row.history.last().copied().unwrap_or(0)
}

fn flag_text(row: &GrowthRow) -> &'static str {
    match (row.growing, row.dominant) {
        (true, true) => "growing, >75%",
        (true, false) => "growing",
        (false, true) => ">75% of heap",
        (false, false) => "",
    }
}

/// Flagged first, then by latest bytes: the sort key of the flag column.
fn flag_rank(row: &GrowthRow) -> (u8, std::cmp::Reverse<u64>) {
    let rank = match (row.growing, row.dominant) {
        (true, true) => 0,
        (true, false) => 1,
        (false, true) => 2,
        (false, false) => 3,
    };
    (rank, std::cmp::Reverse(latest(row)))
}

/// `values` as a line of block characters scaled to their maximum, the latest `width` of them.
pub fn sparkline(values: &[u64], width: usize) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let shown = &values[values.len().saturating_sub(width)..];
    let max = shown.iter().copied().max().unwrap_or(0);
    shown
        .iter()
        .map(|&v| {
            if max == 0 || v == 0 {
                ' '
            } else {
                LEVELS[((v as u128 * 7) / max as u128) as usize]
            }
        })
        .collect()
}

const SPARK_WIDTH: u16 = 16;

impl TableRow for GrowthRow {
    const COLUMNS: &'static [Column] = &[
        Column::text("SITE", 0).keep(9),
        Column::bytes("LATEST", 10).keep(8),
        Column::text("HISTORY", SPARK_WIDTH).unsorted().keep(6),
        Column::text("FLAG", 14).keep(7),
        Column::text("CALLED FROM", 0).keep(3),
    ];
    const FILTER_COLUMN: usize = 0;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.label)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => self.label.clone(),
            1 => size_cell(latest(self), cx),
            2 => sparkline(&self.history, SPARK_WIDTH as usize),
            3 => flag_text(self).to_string(),
            _ => called_from(&self.frames, &self.label),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            0 => self.label.cmp(&other.label),
            1 | 2 => latest(self).cmp(&latest(other)),
            3 => flag_rank(self).cmp(&flag_rank(other)),
            _ => self.frames.cmp(&other.frames),
        }
    }

    fn metric(&self) -> u64 {
        latest(self)
    }

    fn site_stack(&self) -> Option<(&str, &[String])> {
        Some((&self.label, &self.frames))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::table::TableModel;
    use heaptui_protocol::message::PageInfo;

    fn row(label: &str, history: &[u64], growing: bool, dominant: bool) -> GrowthRow {
        GrowthRow {
            label: label.into(),
            history: history.to_vec(),
            growing,
            dominant,
            ..GrowthRow::default()
        }
    }

    #[test]
    fn sparklines_scale_to_the_row_and_keep_the_latest() {
        assert_eq!(sparkline(&[100, 200, 300], 16), "▃▅█");
        assert_eq!(sparkline(&[0, 0], 16), "  ");
        assert_eq!(sparkline(&[1, 2, 3, 4], 2), "▆█");
    }

    #[test]
    fn flagged_rows_come_first() {
        let mut v = GrowthView::new();
        let page = GrowthPage {
            snapshots: 3,
            run: 3,
            page: PageInfo {
                offset: 0,
                total: 3,
            },
            rows: vec![
                row("steady", &[500, 500, 500], false, false),
                row("leaky", &[100, 200, 300], true, false),
                row("big", &[900, 100, 900], false, true),
            ],
        };
        assert_eq!(v.receive(page), None);
        let order: Vec<&str> = (0..3)
            .map(|i| v.table.row(i).unwrap().label.as_str())
            .collect();
        assert_eq!(order, ["leaky", "big", "steady"]);
        assert!(flagged(v.table.row(0).unwrap()));
        assert_eq!(v.snapshots, Some((3, 3)));
    }

    #[test]
    fn sites_with_one_label_show_where_their_stacks_part() {
        let site = |label: &str, frames: &[&str], latest: u64| GrowthRow {
            frames: frames.iter().map(|f| f.to_string()).collect(),
            ..row(label, &[latest], false, false)
        };
        let mut v = GrowthView::new();
        v.receive(GrowthPage {
            snapshots: 1,
            run: 1,
            page: PageInfo {
                offset: 0,
                total: 3,
            },
            rows: vec![
                site(
                    "Perl_reentrant_init",
                    &["Perl_reentrant_init", "perl_construct"],
                    30,
                ),
                site("S_main (perl.c:9)", &["S_main (perl.c:9)"], 20),
                site(
                    "Perl_reentrant_init",
                    &["Perl_reentrant_init", "Perl_new_thread"],
                    10,
                ),
            ],
        });
        let cx = CellContext::default();
        let labels: Vec<String> = (0..3)
            .map(|i| v.table.cell_text(i, v.table.row(i).unwrap(), 0, &cx))
            .collect();
        assert_eq!(
            labels,
            [
                "Perl_reentrant_init ← perl_construct",
                "S_main (perl.c:9)",
                "Perl_reentrant_init ← Perl_new_thread",
            ]
        );
    }
}
