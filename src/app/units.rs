//! The allocation-units screen's state (docs/reference.md §8 "Allocation units"): the query in
//! force (granularity, position, charge), the units the source answered for it, and the one
//! line the source said when it could not answer.
//!
//! Switching any part of the query asks the source again (the units are computed from the
//! events at analysis time, never re-derived here). State only: no drawing, no requests.

use std::borrow::Cow;
use std::cmp::Ordering;

use heaptui_protocol::message::{
    MAX_PAGE_ROWS, Page, RequestBody, Sort, UnitCharge, UnitGranularity, UnitKey, UnitPage,
    UnitPosition, UnitQuery, UnitRow,
};

use super::other::take_page;
use super::rows::{bar, size_cell};
use super::table::{CellContext, Column, LocalTable, SortSpec, TableRow};

/// The units of one query.
#[derive(Debug)]
pub struct UnitsView {
    pub query: UnitQuery,
    pub table: LocalTable<UnitRow>,
    /// Heap events counted, and frees/reallocs of unknown pointers, as last answered.
    pub events: Option<(u64, u64, u64)>,
    /// Why the source could not answer (e.g. an agent without its event stream).
    pub error: Option<String>,
}

impl UnitsView {
    pub fn new() -> Self {
        UnitsView {
            query: UnitQuery::default(),
            table: LocalTable::new(SortSpec {
                column: 1,
                descending: true,
            }),
            events: None,
            error: None,
        }
    }

    /// The request for the page at `offset` of the current query.
    pub fn request(&self, offset: u32) -> RequestBody {
        RequestBody::Units {
            query: self.query,
            sort: Sort::desc(UnitKey::Live),
            page: Page::new(offset, MAX_PAGE_ROWS),
        }
    }

    /// A page arrived; the follow-up request while rows remain. Pages of an older query are
    /// dropped.
    pub fn receive(&mut self, page: UnitPage) -> Option<RequestBody> {
        if page.query != self.query {
            return None;
        }
        self.error = None;
        self.events = Some((page.events, page.unknown_frees, page.unknown_reallocs));
        take_page(&mut self.table, page.page, page.rows).map(|next| self.request(next))
    }

    /// Next granularity: library → function → thread.
    pub fn next_granularity(&mut self) {
        self.query.granularity = match self.query.granularity {
            UnitGranularity::Library => UnitGranularity::Function,
            UnitGranularity::Function => UnitGranularity::Thread,
            UnitGranularity::Thread => UnitGranularity::Library,
        };
    }

    /// Next position: outermost → innermost → inclusive.
    pub fn next_position(&mut self) {
        self.query.position = match self.query.position {
            UnitPosition::Outermost => UnitPosition::Innermost,
            UnitPosition::Innermost => UnitPosition::Inclusive,
            UnitPosition::Inclusive => UnitPosition::Outermost,
        };
    }

    pub fn toggle_charge(&mut self) {
        self.query.charge = match self.query.charge {
            UnitCharge::Allocator => UnitCharge::Freer,
            UnitCharge::Freer => UnitCharge::Allocator,
        };
    }

    /// `library · outermost · frees charged to the allocator`, for the title.
    pub fn query_text(&self) -> String {
        crate::figures::query_text(self.query)
    }
}

impl Default for UnitsView {
    fn default() -> Self {
        Self::new()
    }
}

/// A signed size: `-50 B` when the freer was charged more than it allocated.
pub fn signed_size_cell(bytes: i64, cx: &CellContext) -> String {
    let abs = size_cell(bytes.unsigned_abs(), cx);
    if bytes < 0 { format!("-{abs}") } else { abs }
}

const BAR_WIDTH: u16 = 12;

impl TableRow for UnitRow {
    const COLUMNS: &'static [Column] = &[
        Column::text("UNIT", 0).keep(9),
        Column::bytes("LIVE", 10).keep(8),
        Column::text("", BAR_WIDTH).unsorted().keep(3),
        Column::bytes("MIN", 10).keep(6),
        Column::bytes("MAX", 10).keep(6),
        Column::size("MALLOC", 8).keep(2),
        Column::size("REALLOC", 8).keep(1),
        Column::size("FREE", 8).keep(2),
        Column::size("MEMALIGN", 8).keep(1),
    ];
    const FILTER_COLUMN: usize = 0;

    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.name)
    }

    fn cell(&self, column: usize, cx: &CellContext) -> String {
        match column {
            0 => self.name.clone(),
            1 => signed_size_cell(self.live, cx),
            2 => bar(self.live.max(0) as u64, cx.max, BAR_WIDTH as usize),
            3 => signed_size_cell(self.min, cx),
            4 => signed_size_cell(self.max, cx),
            5 => self.malloc.to_string(),
            6 => self.realloc.to_string(),
            7 => self.free.to_string(),
            _ => self.memalign.to_string(),
        }
    }

    fn compare(&self, other: &Self, column: usize) -> Ordering {
        match column {
            0 => self.name.cmp(&other.name),
            1 | 2 => self.live.cmp(&other.live),
            3 => self.min.cmp(&other.min),
            4 => self.max.cmp(&other.max),
            5 => self.malloc.cmp(&other.malloc),
            6 => self.realloc.cmp(&other.realloc),
            7 => self.free.cmp(&other.free),
            _ => self.memalign.cmp(&other.memalign),
        }
    }

    fn metric(&self) -> u64 {
        self.live.max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::table::TableModel;
    use heaptui_protocol::message::PageInfo;

    fn row(name: &str, live: i64) -> UnitRow {
        UnitRow {
            name: name.into(),
            live,
            ..UnitRow::default()
        }
    }

    #[test]
    fn switching_walks_every_choice_and_drops_pages_of_the_old_query() {
        let mut v = UnitsView::new();
        assert_eq!(
            v.query_text(),
            "library · outermost · frees charged to the allocator"
        );
        let old = v.query;
        v.next_granularity();
        v.next_position();
        v.toggle_charge();
        assert_eq!(
            v.query_text(),
            "function · innermost · frees charged to the freer"
        );
        let stale = UnitPage {
            query: old,
            page: PageInfo {
                offset: 0,
                total: 1,
            },
            rows: vec![row("liba.so", 1)],
            ..UnitPage::default()
        };
        assert_eq!(v.receive(stale), None);
        assert_eq!(
            v.table.total(),
            None,
            "a page of the old query is not shown"
        );
        v.next_granularity();
        assert_eq!(v.query_text(), "thread · frees charged to the freer");
        v.next_granularity();
        assert_eq!(v.query.granularity, UnitGranularity::Library);
    }

    #[test]
    fn pages_follow_until_the_total_and_negative_live_shows_signed() {
        let mut v = UnitsView::new();
        let first = UnitPage {
            query: v.query,
            page: PageInfo {
                offset: 0,
                total: 3,
            },
            rows: vec![row("liba.so", 100), row("libb.so", -20)],
            ..UnitPage::default()
        };
        let follow = v.receive(first);
        assert!(matches!(
            follow,
            Some(RequestBody::Units { page, .. }) if page.offset == 2
        ));
        let cx = CellContext::default();
        let libb = v.table.row(1).unwrap();
        assert_eq!(libb.cell(1, &cx), "-20 B");
        assert_eq!(v.table.row(0).unwrap().name, "liba.so");
    }
}
