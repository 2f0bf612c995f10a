//! The other views (docs/reference.md §8) on the drill-down stack — allocation units, leaks by
//! site, growth, ages — behind one [`OtherView`], so that `app` handles them with one arm per
//! operation: what to ask, where an answer goes, which table keys act on, what Enter opens.
//!
//! State only: no drawing, no requests sent (it says what to ask; `app` asks).

use heaptui_protocol::message::{AgeScope, PageInfo, RequestBody, Response};

use super::action::Screen;
use super::ages::{AgeList, AgesView};
use super::growth::GrowthView;
use super::leaks::LeaksView;
use super::table::{Cursor, LocalTable, TableModel, TableRow};
use super::units::UnitsView;

/// Which of the other views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherKind {
    Units,
    Leaks,
    Growth,
    Ages,
}

impl OtherKind {
    /// The view a key of the `u/L/w/A` binding opens.
    pub fn from_key(c: char) -> Option<OtherKind> {
        Some(match c {
            'u' => OtherKind::Units,
            'L' => OtherKind::Leaks,
            'w' => OtherKind::Growth,
            'A' => OtherKind::Ages,
            _ => return None,
        })
    }
}

/// A change of what a view asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Units: library → function → thread.
    Granularity,
    /// Units: outermost → innermost → inclusive.
    Position,
    /// Units: frees charged to the allocator or to the freer.
    Charge,
    /// Ages: per site or per thread.
    AgeScope,
    /// Ages: the histogram or the oldest survivors.
    AgeList,
}

#[derive(Debug)]
pub enum OtherView {
    Units(UnitsView),
    Leaks(LeaksView),
    Growth(GrowthView),
    /// Boxed: two tables, twice the others' size.
    Ages(Box<AgesView>),
}

/// What Enter on one of these views opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OtherOpen {
    SiteObjects { site: u32, label: String },
    Object(u32),
    Frames(u32, String),
    Nothing(&'static str),
}

/// Puts a page of a list that is loaded whole into `table` (the first page replaces the
/// rows, later ones add to them); the offset of the next page while rows remain.
pub fn take_page<R: TableRow>(
    table: &mut LocalTable<R>,
    page: PageInfo,
    rows: Vec<R>,
) -> Option<u32> {
    let total = page.total as usize;
    let got = rows.len();
    if page.offset == 0 {
        table.set_rows(rows, total);
    } else {
        table.extend(rows, total);
    }
    let next = page.offset as usize + got;
    (got > 0 && next < total).then_some(next as u32)
}

/// Runs `$body` with `$t` bound to the table the view shows.
macro_rules! with_table {
    ($view:expr, $t:ident => $body:expr) => {
        match $view {
            OtherView::Units(v) => {
                let $t = &mut v.table;
                $body
            }
            OtherView::Leaks(v) => {
                let $t = &mut v.table;
                $body
            }
            OtherView::Growth(v) => {
                let $t = &mut v.table;
                $body
            }
            OtherView::Ages(v) => match v.list {
                AgeList::Histogram => {
                    let $t = &mut v.rows;
                    $body
                }
                AgeList::Oldest => {
                    let $t = &mut v.oldest;
                    $body
                }
            },
        }
    };
}

macro_rules! with_table_ref {
    ($view:expr, $t:ident => $body:expr) => {
        match $view {
            OtherView::Units(v) => {
                let $t = &v.table;
                $body
            }
            OtherView::Leaks(v) => {
                let $t = &v.table;
                $body
            }
            OtherView::Growth(v) => {
                let $t = &v.table;
                $body
            }
            OtherView::Ages(v) => match v.list {
                AgeList::Histogram => {
                    let $t = &v.rows;
                    $body
                }
                AgeList::Oldest => {
                    let $t = &v.oldest;
                    $body
                }
            },
        }
    };
}

impl OtherView {
    pub fn new(kind: OtherKind) -> Self {
        match kind {
            OtherKind::Units => OtherView::Units(UnitsView::new()),
            OtherKind::Leaks => OtherView::Leaks(LeaksView::new()),
            OtherKind::Growth => OtherView::Growth(GrowthView::new()),
            OtherKind::Ages => OtherView::Ages(Box::default()),
        }
    }

    pub fn screen(&self) -> Screen {
        match self {
            OtherView::Units(_) => Screen::Units,
            OtherView::Leaks(_) => Screen::Leaks,
            OtherView::Growth(_) => Screen::Growth,
            OtherView::Ages(_) => Screen::Ages,
        }
    }

    /// The first request of what the view shows (further pages follow the answers).
    pub fn request(&self) -> RequestBody {
        match self {
            OtherView::Units(v) => v.request(0),
            OtherView::Leaks(_) => LeaksView::request(0),
            OtherView::Growth(_) => GrowthView::request(0),
            OtherView::Ages(v) => v.request(0),
        }
    }

    /// An answer for this view: the follow-up request, or the kind of the answer when it is
    /// not one this view asked for.
    pub fn receive(&mut self, body: Response) -> Result<Option<RequestBody>, &'static str> {
        Ok(match (self, body) {
            (OtherView::Units(v), Response::Units(page)) => v.receive(page),
            (OtherView::Leaks(v), Response::Leaks(page)) => v.receive(page),
            (OtherView::Growth(v), Response::Growth(page)) => v.receive(page),
            (OtherView::Ages(v), Response::Ages(answer)) => v.receive(answer),
            (_, other) => return Err(other.kind()),
        })
    }

    /// The source could not answer: the screen shows why, in one line, instead of rows.
    pub fn failed(&mut self, message: String) {
        let error = match self {
            OtherView::Units(v) => &mut v.error,
            OtherView::Leaks(v) => &mut v.error,
            OtherView::Growth(v) => &mut v.error,
            OtherView::Ages(v) => &mut v.error,
        };
        *error = Some(message);
    }

    /// Applies a switch; whether the view must be asked for again.
    pub fn switch(&mut self, switch: Switch) -> bool {
        match (self, switch) {
            (OtherView::Units(v), Switch::Granularity) => v.next_granularity(),
            (OtherView::Units(v), Switch::Position) => v.next_position(),
            (OtherView::Units(v), Switch::Charge) => v.toggle_charge(),
            (OtherView::Ages(v), Switch::AgeScope) => v.toggle_scope(),
            (OtherView::Ages(v), Switch::AgeList) => {
                v.toggle_list();
                return false;
            }
            _ => return false,
        }
        true
    }

    pub fn query(&self) -> String {
        with_table_ref!(self, t => t.query().to_string())
    }

    pub fn set_query(&mut self, query: &str) {
        with_table!(self, t => t.set_query(query))
    }

    pub fn sort_by(&mut self, column: usize) {
        with_table!(self, t => t.sort_by(column))
    }

    /// The column shown `n`-th (from 0) in a table `width` cells wide.
    pub fn shown_column(&self, n: usize, width: u16, exact_bytes: bool) -> Option<usize> {
        with_table_ref!(self, t => t.shown_columns(width, exact_bytes).get(n).map(|c| c.0))
    }

    pub fn move_by(&mut self, delta: isize) {
        with_table!(self, t => t.move_by(delta))
    }

    pub fn set_height(&mut self, rows: usize) {
        if let OtherView::Ages(v) = self {
            // Both lists, so that switching shows the right window at once.
            v.rows.set_height(rows);
            v.oldest.set_height(rows);
            return;
        }
        with_table!(self, t => t.set_height(rows))
    }

    pub fn cursor(&self) -> Cursor {
        with_table_ref!(self, t => t.cursor())
    }

    /// What Enter opens on the selected row. `graph`: whether the source has a heap graph
    /// (a recording has none, so its blocks cannot be opened).
    pub fn enter(&self, graph: bool) -> Option<OtherOpen> {
        const NO_GRAPH: &str =
            "a recording has no heap graph: its blocks cannot be opened (take a snapshot)";
        match self {
            OtherView::Units(v) => v.table.selected_row().map(|_| {
                OtherOpen::Nothing(
                    "a unit sums allocation events, not live blocks: Sites (Tab on home) lists objects",
                )
            }),
            OtherView::Leaks(v) => v.table.selected_row().map(|r| OtherOpen::SiteObjects {
                site: r.site,
                label: r.label.clone(),
            }),
            OtherView::Growth(v) => v.table.selected_row().map(|_| {
                OtherOpen::Nothing(
                    "growth rows follow a stack across snapshots: Sites (Tab on home) lists the objects of the latest",
                )
            }),
            OtherView::Ages(v) => match v.list {
                AgeList::Histogram => v.rows.selected_row().map(|r| match v.by {
                    _ if !graph => OtherOpen::Nothing(NO_GRAPH),
                    AgeScope::Sites => OtherOpen::SiteObjects {
                        site: r.key,
                        label: r.label.clone(),
                    },
                    AgeScope::Threads => OtherOpen::Frames(r.key, r.label.clone()),
                }),
                AgeList::Oldest => v.oldest.selected_row().map(|s| {
                    if graph {
                        OtherOpen::Object(s.object.index)
                    } else {
                        OtherOpen::Nothing(NO_GRAPH)
                    }
                }),
            },
        }
    }
}
