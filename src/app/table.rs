//! The one generic table state every list screen uses: columns with a header, width and
//! comparator ([`TableRow`]), a cursor, a sort and a fuzzy filter.
//!
//! Two shapes over the same [`TableModel`] seen by the drawing code:
//! - [`LocalTable`]: every row is here (threads, frames, sites); sorting and filtering happen here,
//!   once per change of data, sort or query, never while drawing;
//! - [`PagedTable`]: a window over a remote list of any length (a group's million objects): rows
//!   arrive page by page as the cursor moves, the sort is the server's (a new sort starts over),
//!   and the filter narrows the rows loaded so far.
//!
//! This module keeps state only: it never draws and never talks to a source (it says which
//! pages it wants; `app` asks for them).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use super::fuzzy::{Matcher, Skim};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column: its header, its width (0: takes the room left) and alignment.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub header: &'static str,
    pub width: u16,
    pub align: Align,
    /// Whether a first sort on this column is largest first (sizes) rather than A→Z.
    pub descending_first: bool,
    /// Whether the column can be sorted on.
    pub sortable: bool,
}

impl Column {
    pub const fn text(header: &'static str, width: u16) -> Column {
        Column {
            header,
            width,
            align: Align::Left,
            descending_first: false,
            sortable: true,
        }
    }

    pub const fn number(header: &'static str, width: u16) -> Column {
        Column {
            header,
            width,
            align: Align::Right,
            descending_first: false,
            sortable: true,
        }
    }

    pub const fn size(header: &'static str, width: u16) -> Column {
        Column {
            header,
            width,
            align: Align::Right,
            descending_first: true,
            sortable: true,
        }
    }

    pub const fn unsorted(mut self) -> Column {
        self.sortable = false;
        self
    }
}

/// How cells are written: sizes human (`1.4 MiB`) or exact bytes; `max` scales bar columns.
#[derive(Clone, Copy, Debug, Default)]
pub struct CellContext {
    pub exact_bytes: bool,
    pub max: u64,
}

/// A row type shown by the generic table.
pub trait TableRow {
    const COLUMNS: &'static [Column];
    /// The column the fuzzy filter matches against (and highlights).
    const FILTER_COLUMN: usize;
    fn cell(&self, column: usize, cx: &CellContext) -> String;
    fn compare(&self, other: &Self, column: usize) -> Ordering;
    /// The text the filter matches: the filter column's cell (rows override it to lend the
    /// text rather than build it, since the filter asks it of every row).
    fn filter_text(&self) -> Cow<'_, str> {
        Cow::Owned(self.cell(Self::FILTER_COLUMN, &CellContext::default()))
    }
    /// The figure bar columns are scaled to (the largest over the table is `CellContext::max`).
    fn metric(&self) -> u64 {
        0
    }
}

/// A sort: which column, which way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortSpec {
    pub column: usize,
    pub descending: bool,
}

impl SortSpec {
    /// Sorting on `column`: the same column again reverses, another starts its natural way.
    pub fn toggled(self, column: usize, columns: &[Column]) -> SortSpec {
        if column == self.column {
            SortSpec {
                column,
                descending: !self.descending,
            }
        } else {
            SortSpec {
                column,
                descending: columns[column].descending_first,
            }
        }
    }
}

/// The selected row and the first visible one, within a viewport of `height` rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub selected: usize,
    pub offset: usize,
    pub height: usize,
}

impl Cursor {
    pub fn move_by(&mut self, delta: isize, len: usize) {
        let target = if delta < 0 {
            self.selected.saturating_sub(delta.unsigned_abs())
        } else {
            self.selected.saturating_add(delta as usize)
        };
        self.jump(target, len);
    }

    pub fn jump(&mut self, to: usize, len: usize) {
        self.selected = to.min(len.saturating_sub(1));
        self.fit(len);
    }

    pub fn set_height(&mut self, height: usize, len: usize) {
        self.height = height;
        self.fit(len);
    }

    /// Keeps the selection inside the list and the viewport.
    pub fn fit(&mut self, len: usize) {
        self.selected = self.selected.min(len.saturating_sub(1));
        let height = self.height.max(1);
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if self.selected >= self.offset + height {
            self.offset = self.selected + 1 - height;
        }
        self.offset = self.offset.min(len.saturating_sub(height));
    }

    /// The rows in view, `[offset, end)`.
    pub fn window(&self, len: usize) -> (usize, usize) {
        let end = (self.offset + self.height.max(1)).min(len);
        (self.offset.min(end), end)
    }
}

/// What the drawing code reads from a table.
pub trait TableModel {
    type Row: TableRow;
    /// Rows in view order (after filtering).
    fn len(&self) -> usize;
    /// The row at a view position, `None` while its page is on its way.
    fn row(&self, i: usize) -> Option<&Self::Row>;
    /// Match positions (chars of the filter column) of the row at a view position.
    fn matches(&self, i: usize) -> &[usize];
    fn cursor(&self) -> Cursor;
    fn sort(&self) -> SortSpec;
    fn query(&self) -> &str;
    fn context(&self, exact_bytes: bool) -> CellContext;
    /// Rows of the whole list, known or not (`None`: not yet answered).
    fn total(&self) -> Option<usize>;
    /// How the filter relates to the list: "" when no filter is set.
    fn filter_note(&self) -> String;

    fn selected_row(&self) -> Option<&Self::Row> {
        self.row(self.cursor().selected)
    }

    /// `rows x–y of N` for the table's title.
    fn position_note(&self) -> String {
        let len = self.len();
        let (start, end) = self.cursor().window(len);
        let of = match self.total() {
            None => return "loading…".to_string(),
            Some(total) if total == len => format!("{total}"),
            Some(total) => format!("{len} (of {total})"),
        };
        if len == 0 {
            format!("rows 0 of {of}")
        } else {
            format!("rows {}–{} of {of}", start + 1, end)
        }
    }
}

/// A table holding every row.
#[derive(Debug)]
pub struct LocalTable<R> {
    rows: Vec<R>,
    view: Vec<u32>,
    /// With a filter: the match positions of the rows in view order, computed for the rows
    /// that have come into view (a filter over 100k rows only says yes or no to each).
    matches: Vec<Option<Vec<usize>>>,
    matcher: Box<dyn Matcher>,
    sort: SortSpec,
    query: String,
    cursor: Cursor,
    max: u64,
    /// The list's full length as the source gave it; rows may still be arriving.
    total: Option<usize>,
}

impl<R: TableRow> LocalTable<R> {
    pub fn new(sort: SortSpec) -> Self {
        LocalTable {
            rows: Vec::new(),
            view: Vec::new(),
            matches: Vec::new(),
            matcher: Box::new(Skim::default()),
            sort,
            query: String::new(),
            cursor: Cursor::default(),
            max: 0,
            total: None,
        }
    }

    /// Replaces every row (a new snapshot's answer).
    pub fn set_rows(&mut self, rows: Vec<R>, total: usize) {
        self.rows = rows;
        self.total = Some(total);
        self.cursor.selected = 0;
        self.refresh(None);
    }

    /// Adds a further page of rows; the selected row stays selected.
    pub fn extend(&mut self, rows: Vec<R>, total: usize) {
        let keep = self.selected_index();
        self.rows.extend(rows);
        self.total = Some(total);
        self.refresh(keep);
    }

    pub fn rows(&self) -> &[R] {
        &self.rows
    }

    /// For changes that move no row in the order and the filter (a mark).
    pub fn rows_mut(&mut self) -> impl Iterator<Item = &mut R> {
        self.rows.iter_mut()
    }

    pub fn sort_by(&mut self, column: usize) {
        if !R::COLUMNS.get(column).is_some_and(|c| c.sortable) {
            return;
        }
        self.sort = self.sort.toggled(column, R::COLUMNS);
        let keep = self.selected_index();
        self.refresh(keep);
    }

    pub fn set_query(&mut self, query: &str) {
        let keep = self.selected_index();
        self.query = query.to_string();
        self.refresh(keep);
    }

    pub fn move_by(&mut self, delta: isize) {
        let len = self.len();
        self.cursor.move_by(delta, len);
        self.fill_matches();
    }

    pub fn jump(&mut self, to: usize) {
        let len = self.len();
        self.cursor.jump(to, len);
        self.fill_matches();
    }

    pub fn set_height(&mut self, height: usize) {
        let len = self.len();
        self.cursor.set_height(height, len);
        self.fill_matches();
    }

    /// Computes the match positions of the rows in view that do not have them yet.
    fn fill_matches(&mut self) {
        if self.query.is_empty() {
            return;
        }
        let (start, end) = self.cursor.window(self.view.len());
        for i in start..end {
            if self.matches[i].is_none() {
                let row = &self.rows[self.view[i] as usize];
                self.matches[i] = Some(
                    self.matcher
                        .positions(&row.filter_text(), &self.query)
                        .unwrap_or_default(),
                );
            }
        }
    }

    /// Selects the first row (in view order) for which `pred` holds.
    pub fn select_where(&mut self, pred: impl Fn(&R) -> bool) -> bool {
        match self.view.iter().position(|&r| pred(&self.rows[r as usize])) {
            Some(i) => {
                self.jump(i);
                true
            }
            None => false,
        }
    }

    fn selected_index(&self) -> Option<u32> {
        self.view.get(self.cursor.selected).copied()
    }

    /// Filters, then sorts the survivors; the row that was selected stays selected when it
    /// survives. Linear in the rows plus the sort.
    fn refresh(&mut self, keep: Option<u32>) {
        let mut view: Vec<u32> = if self.query.is_empty() {
            (0..self.rows.len() as u32).collect()
        } else {
            let (matcher, query) = (&self.matcher, &self.query);
            (0..self.rows.len() as u32)
                .filter(|&r| matcher.is_match(&self.rows[r as usize].filter_text(), query))
                .collect()
        };
        let SortSpec { column, descending } = self.sort;
        let rows = &self.rows;
        view.sort_by(|a, b| {
            let order = rows[*a as usize].compare(&rows[*b as usize], column);
            let order = if descending { order.reverse() } else { order };
            // Ties keep the source's order, so equal rows do not jump around.
            order.then(a.cmp(b))
        });
        self.max = self.rows.iter().map(TableRow::metric).max().unwrap_or(0);
        self.matches = if self.query.is_empty() {
            Vec::new()
        } else {
            vec![None; view.len()]
        };
        self.view = view;
        if let Some(keep) = keep
            && let Some(i) = self.view.iter().position(|&r| r == keep)
        {
            self.cursor.selected = i;
        }
        let len = self.view.len();
        self.cursor.fit(len);
        self.fill_matches();
    }
}

impl<R: TableRow> TableModel for LocalTable<R> {
    type Row = R;

    fn len(&self) -> usize {
        self.view.len()
    }

    fn row(&self, i: usize) -> Option<&R> {
        self.view.get(i).map(|&r| &self.rows[r as usize])
    }

    fn matches(&self, i: usize) -> &[usize] {
        self.matches
            .get(i)
            .and_then(Option::as_deref)
            .unwrap_or(&[])
    }

    fn cursor(&self) -> Cursor {
        self.cursor
    }

    fn sort(&self) -> SortSpec {
        self.sort
    }

    fn query(&self) -> &str {
        &self.query
    }

    fn context(&self, exact_bytes: bool) -> CellContext {
        CellContext {
            exact_bytes,
            max: self.max,
        }
    }

    fn total(&self) -> Option<usize> {
        self.total
    }

    fn filter_note(&self) -> String {
        if self.query.is_empty() {
            String::new()
        } else {
            format!(
                "filter “{}”: {} of {}",
                self.query,
                self.len(),
                self.rows.len()
            )
        }
    }
}

/// Rows per page of a [`PagedTable`]: a few screens, small enough to answer at once.
pub const PAGE_ROWS: u32 = 200;

/// A window over a remote list: pages are fetched as the cursor moves, never all at once.
#[derive(Debug)]
pub struct PagedTable<R> {
    pages: BTreeMap<u32, Vec<R>>,
    requested: HashSet<u32>,
    total: Option<usize>,
    sort: SortSpec,
    /// Bumped when the sort changes, so that pages of the old order are dropped.
    generation: u64,
    query: String,
    /// With a filter: the list positions of the matching loaded rows, and their match positions.
    filtered: Option<(Vec<u32>, Vec<Vec<usize>>)>,
    matcher: Box<dyn Matcher>,
    cursor: Cursor,
    max: u64,
}

impl<R: TableRow> PagedTable<R> {
    pub fn new(sort: SortSpec) -> Self {
        PagedTable {
            pages: BTreeMap::new(),
            requested: HashSet::new(),
            total: None,
            sort,
            generation: 0,
            query: String::new(),
            filtered: None,
            matcher: Box::new(Skim::default()),
            cursor: Cursor::default(),
            max: 0,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The pages the viewport (plus a screen either side) needs that are neither here nor
    /// asked for. With a filter on, nothing: the filter narrows the rows loaded so far.
    pub fn wanted_pages(&self) -> Vec<u32> {
        if self.filtered.is_some() {
            return Vec::new();
        }
        let height = self.cursor.height.max(1);
        let first = self.cursor.offset.saturating_sub(height);
        let last = match self.total {
            None => 0,
            Some(0) => return Vec::new(),
            Some(total) => (self.cursor.offset + 2 * height).min(total - 1),
        };
        let (first, last) = (first as u32 / PAGE_ROWS, last as u32 / PAGE_ROWS);
        (first..=last)
            .filter(|p| !self.pages.contains_key(p) && !self.requested.contains(p))
            .collect()
    }

    pub fn mark_requested(&mut self, page: u32) {
        self.requested.insert(page);
    }

    /// A page arrived; `generation` is the one it was asked under.
    pub fn receive(&mut self, generation: u64, offset: u32, total: u32, rows: Vec<R>) {
        if generation != self.generation {
            return;
        }
        let page = offset / PAGE_ROWS;
        self.requested.remove(&page);
        self.total = Some(total as usize);
        self.max = self
            .max
            .max(rows.iter().map(TableRow::metric).max().unwrap_or(0));
        self.pages.insert(page, rows);
        if self.filtered.is_some() {
            self.refilter();
        }
        let len = self.len();
        self.cursor.fit(len);
    }

    /// A new order: the server sorts, so everything loaded is dropped and paging starts over.
    pub fn sort_by(&mut self, column: usize) {
        if !R::COLUMNS.get(column).is_some_and(|c| c.sortable) {
            return;
        }
        self.sort = self.sort.toggled(column, R::COLUMNS);
        self.generation += 1;
        self.pages.clear();
        self.requested.clear();
        self.cursor.selected = 0;
        self.cursor.offset = 0;
        if self.filtered.is_some() {
            self.filtered = Some((Vec::new(), Vec::new()));
        }
    }

    pub fn set_query(&mut self, query: &str) {
        self.query = query.to_string();
        if query.is_empty() {
            // Back to the whole list, at the row that was selected.
            let at = self
                .filtered
                .take()
                .and_then(|(pos, _)| pos.get(self.cursor.selected).copied());
            if let Some(at) = at {
                let len = self.len();
                self.cursor.jump(at as usize, len);
            }
        } else {
            self.refilter();
            self.cursor.selected = 0;
            let len = self.len();
            self.cursor.fit(len);
        }
    }

    /// The loaded rows are at most a few pages: their positions are computed at once.
    fn refilter(&mut self) {
        let mut positions = Vec::new();
        let mut matches = Vec::new();
        for (&page, rows) in &self.pages {
            for (i, row) in rows.iter().enumerate() {
                if let Some(at) = self.matcher.positions(&row.filter_text(), &self.query) {
                    positions.push(page * PAGE_ROWS + i as u32);
                    matches.push(at);
                }
            }
        }
        self.filtered = Some((positions, matches));
    }

    pub fn loaded(&self) -> usize {
        self.pages.values().map(Vec::len).sum()
    }

    pub fn move_by(&mut self, delta: isize) {
        let len = self.len();
        self.cursor.move_by(delta, len);
    }

    pub fn set_height(&mut self, height: usize) {
        let len = self.len();
        self.cursor.set_height(height, len);
    }

    fn at(&self, position: u32) -> Option<&R> {
        self.pages
            .get(&(position / PAGE_ROWS))?
            .get((position % PAGE_ROWS) as usize)
    }
}

impl<R: TableRow> TableModel for PagedTable<R> {
    type Row = R;

    fn len(&self) -> usize {
        match &self.filtered {
            Some((positions, _)) => positions.len(),
            None => self.total.unwrap_or(0),
        }
    }

    fn row(&self, i: usize) -> Option<&R> {
        match &self.filtered {
            Some((positions, _)) => self.at(*positions.get(i)?),
            None => self.at(u32::try_from(i).ok()?),
        }
    }

    fn matches(&self, i: usize) -> &[usize] {
        match &self.filtered {
            Some((_, matches)) => matches.get(i).map_or(&[], Vec::as_slice),
            None => &[],
        }
    }

    fn cursor(&self) -> Cursor {
        self.cursor
    }

    fn sort(&self) -> SortSpec {
        self.sort
    }

    fn query(&self) -> &str {
        &self.query
    }

    fn context(&self, exact_bytes: bool) -> CellContext {
        CellContext {
            exact_bytes,
            max: self.max,
        }
    }

    fn total(&self) -> Option<usize> {
        match &self.filtered {
            Some(_) => Some(self.loaded()),
            None => self.total,
        }
    }

    fn filter_note(&self) -> String {
        match &self.filtered {
            Some((positions, _)) => format!(
                "filter “{}”: {} of the {} rows loaded (of {})",
                self.query,
                positions.len(),
                self.loaded(),
                self.total.unwrap_or(0)
            ),
            None => String::new(),
        }
    }
}
