//! The ages screen's state (docs/reference.md §8 "Ages"): the histogram of block ages (snapshots
//! survived: 0, 1, 2, 3, more than 3) per site or per thread, and the oldest survivors, as the
//! source answered them for the kept snapshot (or a recording's end).
//!
//! Two lists, one shown at a time (`o` switches); `t` regroups by site or thread, which asks
//! the source again. State only: no drawing, no requests.

use std::borrow::Cow;
use std::cmp::Ordering;

use heaptui_protocol::message::{
    AgeHistogram, AgeRow, AgeScope, AgesAnswer, MAX_PAGE_ROWS, Page, RequestBody, Survivor,
};

use super::other::take_page;
use super::rows::size_cell;
use super::table::{CellContext, Column, LocalTable, SortSpec, TableRow};
use crate::figures::wall_age;

/// Survivors asked for.
pub const OLDEST: u32 = 1000;

/// Which list the screen shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgeList {
    Histogram,
    Oldest,
}

#[derive(Debug)]
pub struct AgesView {
    pub by: AgeScope,
    pub list: AgeList,
    pub rows: LocalTable<AgeRow>,
    pub oldest: LocalTable<Survivor>,
    /// The whole heap's histogram and the boundaries counted, as last answered.
    pub total: Option<(AgeHistogram, u32)>,
    pub error: Option<String>,
}

impl AgesView {
    pub fn new() -> Self {
        AgesView {
            by: AgeScope::Sites,
            list: AgeList::Histogram,
            rows: LocalTable::new(SortSpec {
                column: 7,
                descending: true,
            }),
            oldest: LocalTable::new(SortSpec {
                column: 6,
                descending: false,
            }),
            total: None,
            error: None,
        }
    }

    pub fn request(&self, offset: u32) -> RequestBody {
        RequestBody::Ages {
            by: self.by,
            page: Page::new(offset, MAX_PAGE_ROWS),
            // The survivors come with the first page only.
            oldest: if offset == 0 { OLDEST } else { 0 },
        }
    }

    /// An answer arrived; the follow-up request while rows remain. Answers grouped the other
    /// way (asked before a `t`) are dropped.
    pub fn receive(&mut self, answer: AgesAnswer) -> Option<RequestBody> {
        if answer.by != self.by {
            return None;
        }
        self.error = None;
        if answer.page.offset == 0 {
            self.total = Some((answer.total, answer.boundaries));
            let n = answer.oldest.len();
            self.oldest.set_rows(answer.oldest, n);
        }
        take_page(&mut self.rows, answer.page, answer.rows).map(|next| self.request(next))
    }

    pub fn toggle_scope(&mut self) {
        self.by = match self.by {
            AgeScope::Sites => AgeScope::Threads,
            AgeScope::Threads => AgeScope::Sites,
        };
    }

    pub fn toggle_list(&mut self) {
        self.list = match self.list {
            AgeList::Histogram => AgeList::Oldest,
            AgeList::Oldest => AgeList::Histogram,
        };
    }
}

impl Default for AgesView {
    fn default() -> Self {
        Self::new()
    }
}

fn blocks(h: &AgeHistogram) -> u64 {
    h.blocks.iter().sum()
}

fn bytes(h: &AgeHistogram) -> u64 {
    h.bytes.iter().sum()
}

/// Blocks per range as five block characters scaled to the row's largest range.
fn shape(h: &AgeHistogram) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = h.blocks.iter().copied().max().unwrap_or(0);
    h.blocks
        .iter()
        .map(|&n| {
            if n == 0 || max == 0 {
                '·'
            } else {
                LEVELS[((n as u128 * 7) / max as u128) as usize]
            }
        })
        .collect()
}

impl TableRow for AgeRow {
    const COLUMNS: &'static [Column] = &[
        // On a narrow screen the site's whole name and line come first (two sites of one
        // function differ only there), then its bytes and the shape of all five ranges; the
        // counts per range give way, the oldest range first.
        Column::text("SITE / THREAD", 0).keep(9),
        Column::size("AGE 0", 8).keep(4),
        Column::size("1", 8).keep(4),
        Column::size("2", 8).keep(4),
        Column::size("3", 8).keep(4),
        Column::size(">3", 8).keep(4),
        Column::size("BLOCKS", 8).keep(4),
        Column::bytes("BYTES", 10).keep(8),
        Column::text("0 1 2 3 >3", 10).unsorted().keep(5),
    ];
    const FILTER_COLUMN: usize = 0;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.label)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        let h = &self.histogram;
        match column {
            0 => self.label.clone(),
            1..=5 => h.blocks[column - 1].to_string(),
            6 => blocks(h).to_string(),
            7 => size_cell(bytes(h), cx),
            _ => shape(h),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        let (a, b) = (&self.histogram, &other.histogram);
        match column {
            0 => self.label.cmp(&other.label),
            1..=5 => a.blocks[column - 1].cmp(&b.blocks[column - 1]),
            6 => blocks(a).cmp(&blocks(b)),
            _ => bytes(a).cmp(&bytes(b)),
        }
    }

    fn metric(&self) -> u64 {
        bytes(&self.histogram)
    }
}

impl TableRow for Survivor {
    const COLUMNS: &'static [Column] = &[
        Column::text("ADDRESS", 16).keep(6),
        Column::bytes("SIZE", 10).keep(8),
        Column::size("AGE", 5).keep(7),
        Column::size("WALL AGE", 9).keep(5),
        Column::text("SITE", 0).keep(9),
        Column::number("THREAD", 8).keep(4),
        Column::number("SEQ", 10).keep(2),
    ];
    const FILTER_COLUMN: usize = 4;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.object.site_label)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        let o = &self.object;
        match column {
            0 => format!("{:#x}", o.addr),
            1 => size_cell(o.size, cx),
            2 => o.age.map_or_else(|| "-".to_string(), |a| a.to_string()),
            3 => wall_age(self.age_ms),
            4 => o.site_label.clone(),
            5 => o.thread.to_string(),
            _ => o.seq.to_string(),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        let (a, b) = (&self.object, &other.object);
        match column {
            0 => a.addr.cmp(&b.addr),
            1 => a.size.cmp(&b.size),
            2 => a.age.cmp(&b.age),
            3 => self.age_ms.cmp(&other.age_ms),
            4 => a.site_label.cmp(&b.site_label),
            5 => a.thread.cmp(&b.thread),
            _ => a.seq.cmp(&b.seq),
        }
    }

    fn metric(&self) -> u64 {
        self.object.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::table::TableModel;
    use heaptui_protocol::message::PageInfo;

    #[test]
    fn the_issue_histogram_reads_per_range() {
        let h = AgeHistogram {
            blocks: [2, 1, 3, 0, 0],
            bytes: [190, 70, 90, 0, 0],
        };
        assert_eq!(shape(&h), "▅▃█··");
        let row = AgeRow {
            key: 1,
            label: "odd_site".into(),
            histogram: h,
        };
        let cx = CellContext::default();
        assert_eq!(row.cell(3, &cx), "3");
        assert_eq!(row.cell(6, &cx), "6");
        assert_eq!(row.cell(7, &cx), "350 B");
    }

    #[test]
    fn a_narrow_screen_keeps_the_sites_whole_name_and_the_shape_of_its_ages() {
        let columns = AgeRow::COLUMNS;
        // `append_rows (workload.c:232)` and its neighbours, at 80 columns less the border
        // and the selection symbol: the counts per range gave the name 20 characters.
        let widest = [30, 0, 0, 0, 0, 0, 0, 0, 10];
        let shown = crate::app::table::fit(columns, &widest, 76, false);
        let headers: Vec<&str> = shown.iter().map(|&(i, _)| columns[i].header).collect();
        assert_eq!(
            headers,
            ["SITE / THREAD", "AGE 0", "1", "BYTES", "0 1 2 3 >3"]
        );
        assert!(shown[0].1 >= 30, "{shown:?}");
        // Wide: every column.
        let shown = crate::app::table::fit(columns, &widest, 156, false);
        assert_eq!(shown.len(), columns.len());
    }

    #[test]
    fn regrouping_drops_answers_of_the_other_grouping() {
        let mut v = AgesView::new();
        let answer = AgesAnswer {
            by: AgeScope::Sites,
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![AgeRow::default()],
            ..AgesAnswer::default()
        };
        v.toggle_scope();
        assert!(matches!(
            v.request(0),
            RequestBody::Ages {
                by: AgeScope::Threads,
                oldest: OLDEST,
                ..
            }
        ));
        assert_eq!(v.receive(answer.clone()), None);
        assert_eq!(v.rows.total(), None);
        v.toggle_scope();
        v.receive(answer);
        assert_eq!(v.rows.total(), Some(1));
        v.toggle_list();
        assert_eq!(v.list, AgeList::Oldest);
    }
}
