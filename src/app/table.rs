//! The one generic table state every list screen uses: columns with a header, width and
//! comparator ([`TableRow`]), a cursor, a sort and a fuzzy filter.
//!
//! Two shapes over the same [`TableModel`] seen by the drawing code:
//! - [`LocalTable`]: every row is here (threads, frames, sites); sorting and filtering happen here,
//!   once per change of data, sort or query, never while drawing;
//! - [`PagedTable`]: a window over a remote list of any length (a group's million objects): rows
//!   arrive page by page as the cursor moves, and the sort and the filter are the server's (a
//!   new sort or query starts over from the first page, so a filter covers the whole list).
//!
//! This module keeps state only: it never draws and never talks to a source (it says which
//! pages it wants; `app` asks for them).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;

use super::fuzzy::{Matcher, Skim};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column: its header, its width (0: as wide as its cells in view, at least [`Self::min`],
/// and the first such column takes the room left) and alignment.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub header: &'static str,
    pub width: u16,
    pub align: Align,
    /// Whether a first sort on this column is largest first (sizes) rather than A→Z.
    pub descending_first: bool,
    /// Whether the column can be sorted on.
    pub sortable: bool,
    /// How long the column stays on a narrow screen: the lowest goes first (see
    /// [`fit`]), so a thread's name outlasts its state.
    pub keep: u8,
    /// The narrowest a flexible column (width 0) is drawn.
    pub min: u16,
    /// Its cells are sizes in bytes: under `b` (exact bytes) its header says `B`.
    pub bytes: bool,
}

/// The `keep` of a column that says nothing else.
const KEEP: u8 = 5;
/// The narrowest flexible column: room for a short name.
const MIN_FLEX: u16 = 12;

impl Column {
    pub const fn text(header: &'static str, width: u16) -> Column {
        Column {
            header,
            width,
            align: Align::Left,
            descending_first: false,
            sortable: true,
            keep: KEEP,
            min: MIN_FLEX,
            bytes: false,
        }
    }

    pub const fn number(header: &'static str, width: u16) -> Column {
        Column {
            header,
            width,
            align: Align::Right,
            descending_first: false,
            sortable: true,
            keep: KEEP,
            min: MIN_FLEX,
            bytes: false,
        }
    }

    pub const fn size(header: &'static str, width: u16) -> Column {
        Column {
            header,
            width,
            align: Align::Right,
            descending_first: true,
            sortable: true,
            keep: KEEP,
            min: MIN_FLEX,
            bytes: false,
        }
    }

    /// A size column whose cells are bytes (human units, or exact bytes under `b`).
    pub const fn bytes(header: &'static str, width: u16) -> Column {
        let mut c = Column::size(header, width);
        c.bytes = true;
        c
    }

    /// The header as drawn: under `b` a bytes column says so (`TOTAL B`).
    pub fn header_text(&self, exact_bytes: bool) -> std::borrow::Cow<'static, str> {
        if exact_bytes && self.bytes {
            std::borrow::Cow::Owned(format!("{} B", self.header))
        } else {
            std::borrow::Cow::Borrowed(self.header)
        }
    }

    pub const fn unsorted(mut self) -> Column {
        self.sortable = false;
        self
    }

    /// See [`Column::keep`]: 0 goes first, 9 last.
    pub const fn keep(mut self, keep: u8) -> Column {
        self.keep = keep;
        self
    }

    /// See [`Column::min`].
    pub const fn min(mut self, min: u16) -> Column {
        self.min = min;
        self
    }
}

/// Cells between two columns.
const SPACING: u16 = 1;
/// The `keep` of a name column (a thread's, a site's, a function's).
const NAME_KEEP: u8 = 9;
/// Columns kept below this are extras, which give way to a name's width.
const DATA_KEEP: u8 = 5;

/// The columns shown in `room` cells, as (index, width) in table order.
///
/// While they do not fit, the column with the lowest `keep` goes (the rightmost of equals). A
/// fixed column is never narrower than its header and the sort arrow (no `ROPRIETARY`); a
/// flexible one (width 0) gets its minimum, then up to its `widest` cell in view, and the first
/// flexible column takes whatever room is left.
///
/// Then the name (a flexible column kept to the last, `keep` 9) gets its widest cell in view,
/// up to half the room: while it cannot, the extras (`keep` below [`DATA_KEEP`]: bars, callers,
/// counts) go, lowest first, so that `handle_request (workload.c:139)` is not cut for a bar.
pub fn fit(columns: &[Column], widest: &[u16], room: u16, exact_bytes: bool) -> Vec<(usize, u16)> {
    let header_width = |c: &Column| text_width(&c.header_text(exact_bytes)) + u16::from(c.sortable);
    let least = |c: &Column| match c.width {
        0 => c.min.max(header_width(c)),
        w => w.max(header_width(c)),
    };
    let mut shown: Vec<usize> = (0..columns.len()).collect();
    let needed = |shown: &[usize]| -> u16 {
        let cells: u16 = shown.iter().map(|&i| least(&columns[i])).sum();
        cells + SPACING * (shown.len() as u16).saturating_sub(1)
    };
    while shown.len() > 1 && needed(&shown) > room {
        let drop = shown
            .iter()
            .enumerate()
            .rev()
            .min_by_key(|(_, i)| columns[**i].keep)
            .map(|(at, _)| at)
            .expect("more than one column");
        shown.remove(drop);
    }
    let more_for_names = |shown: &[usize]| -> u16 {
        shown
            .iter()
            .filter(|&&i| columns[i].width == 0 && columns[i].keep >= NAME_KEEP)
            .map(|&i| widest[i].min(room / 2).saturating_sub(least(&columns[i])))
            .sum()
    };
    while needed(&shown) + more_for_names(&shown) > room {
        let Some(drop) = shown
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, i)| columns[**i].keep < DATA_KEEP)
            .min_by_key(|(_, i)| columns[**i].keep)
            .map(|(at, _)| at)
        else {
            break;
        };
        shown.remove(drop);
    }
    let mut widths: Vec<u16> = shown.iter().map(|&i| least(&columns[i])).collect();
    let mut spare = room.saturating_sub(needed(&shown));
    for (at, &i) in shown.iter().enumerate() {
        if columns[i].width == 0 {
            let more = widest[i].saturating_sub(widths[at]).min(spare);
            widths[at] += more;
            spare -= more;
        }
    }
    if let Some(first_flexible) = shown.iter().position(|&i| columns[i].width == 0) {
        widths[first_flexible] += spare;
    }
    shown.into_iter().zip(widths).collect()
}

/// A label and what tells it apart as a cell shows them ([`label_fitting`]).
#[derive(Debug, PartialEq, Eq)]
pub struct LabelFitting {
    pub text: String,
    /// How many characters of the label's start `text` keeps as they are (its matches past
    /// them are not shown).
    pub label_kept: usize,
}

/// The fewest characters of a label worth showing before `…`.
const LABEL_FEW: usize = 3;

/// `label` then `apart` in `width` cells. What tells rows apart is the part that differs, so
/// it is the last to give way; in turn: both whole; the label cut in its place (`gc_alloc
/// (gcmodu… ← PyTuple_New`); the label's function alone (`PyUnicode_New ← … ←
/// PyUnicode_FromStringAndSize:1234`); the label cut further, to its first few characters
/// (`PyU… ← … ← PyUnicode_FromStringAndSize:1234`); then what tells it apart cut at its
/// start, its end kept (`PyU… ← …FromStringAndSize:1234`); last, that end alone. `None` only
/// in no room.
pub fn label_fitting(label: &str, apart: &str, width: u16) -> Option<LabelFitting> {
    let label_chars = label.chars().count();
    if text_width(label) + text_width(apart) <= width {
        return Some(LabelFitting {
            text: format!("{label}{apart}"),
            label_kept: label_chars,
        });
    }
    // The label cut in its place (`(file:line)`), or else its function alone, or else cut
    // in its function, while a few characters of it stay.
    let room = width.saturating_sub(text_width(apart) + 1);
    let cut = cut_to(label, room);
    let function = heaptui_analysis::labels::function_of(label);
    let cut_fitting = |least: usize| {
        let label_kept = cut.chars().count();
        (room > 0 && label_kept >= least).then(|| LabelFitting {
            text: format!("{cut}…{apart}"),
            label_kept,
        })
    };
    if let Some(fitting) = cut_fitting(function.chars().count()) {
        return Some(fitting);
    }
    if text_width(function) + text_width(apart) <= width {
        return Some(LabelFitting {
            text: format!("{function}{apart}"),
            label_kept: function.chars().count(),
        });
    }
    if let Some(fitting) = cut_fitting(LABEL_FEW.min(label_chars)) {
        return Some(fitting);
    }
    // The label to a few characters; what tells it apart, if it must be cut, after its
    // first arrow (` ← `, ` via `) from the start, so that the end of the frame that
    // differs stays (`… ← ` goes first: the `…` that marks the cut says as much).
    let few: String = function.chars().take(LABEL_FEW).collect();
    let (short, label_kept) = if few == function {
        (few, function.chars().count())
    } else {
        (format!("{few}…"), LABEL_FEW)
    };
    let (lead, name) = [" ← ", " via "]
        .iter()
        .filter_map(|arrow| apart.find(arrow).map(|at| at + arrow.len()))
        .min()
        .map_or(("", apart), |at| apart.split_at(at));
    // (The short label with the whole of `apart` never fits here: `cut_fitting` above
    // would have kept as many characters of the label.)
    let room = width.saturating_sub(text_width(&short) + text_width(lead) + 1);
    if room > 0 {
        return Some(LabelFitting {
            text: format!("{short}{lead}…{}", end_in(name, room)),
            label_kept,
        });
    }
    (width > 1).then(|| LabelFitting {
        text: format!("…{}", end_in(apart, width - 1)),
        label_kept: 0,
    })
}

/// The longest start of `text` in `room` cells.
fn cut_to(text: &str, room: u16) -> String {
    let mut cut = String::new();
    for ch in text.chars() {
        cut.push(ch);
        if text_width(&cut) > room {
            cut.pop();
            break;
        }
    }
    cut
}

/// The longest end of `text` in `room` cells.
fn end_in(text: &str, room: u16) -> &str {
    let mut start = text.len();
    for (at, _) in text.char_indices().rev() {
        if text_width(&text[at..]) > room {
            break;
        }
        start = at;
    }
    &text[start..]
}

/// Terminal cells `text` takes.
pub fn text_width(text: &str) -> u16 {
    ratatui::text::Span::raw(text).width() as u16
}

/// Cells a table's border and selection symbol (`▶ `) take from its width.
pub const TABLE_FRAME: u16 = 2 + 2;

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
    /// A row naming an allocation site: its label (the filter column's text) and its frames,
    /// so that rows with one label are told apart ([`super::told_apart`]).
    fn site_stack(&self) -> Option<(&str, &[String])> {
        None
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

    /// What tells the label of the row at view position `i` apart from another row's with
    /// the same label (` ← caller`), when another row has it.
    fn told_apart(&self, i: usize) -> Option<&str> {
        let _ = i;
        None
    }

    /// The text of cell `column` of `row`, the row at view position `i`: the row's own, and
    /// in the label column what tells it apart.
    fn cell_text(&self, i: usize, row: &Self::Row, column: usize, cx: &CellContext) -> String {
        let mut text = row.cell(column, cx);
        if column == Self::Row::FILTER_COLUMN
            && let Some(apart) = self.told_apart(i)
        {
            text.push_str(apart);
        }
        text
    }

    /// The columns a table `width` cells wide shows, as (index, width) in table order (see
    /// [`fit`]): the drawing code draws these, and the digit keys sort by them.
    fn shown_columns(&self, width: u16, exact_bytes: bool) -> Vec<(usize, u16)> {
        let columns = Self::Row::COLUMNS;
        let cx = self.context(exact_bytes);
        let (start, end) = self.cursor().window(self.len());
        // The widest cell in view of each column, for the flexible ones.
        let mut widest: Vec<u16> = vec![0; columns.len()];
        for (i, row) in (start..end).filter_map(|i| Some((i, self.row(i)?))) {
            for (c, w) in widest.iter_mut().enumerate() {
                if columns[c].width == 0 {
                    *w = (*w).max(text_width(&self.cell_text(i, row, c, &cx)));
                }
            }
        }
        fit(
            columns,
            &widest,
            width.saturating_sub(TABLE_FRAME),
            exact_bytes,
        )
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
    /// Per row (source order): what tells its label apart from another row's with the same
    /// label, computed when rows arrive.
    told_apart: Vec<Option<String>>,
    /// The rows (source order) of each label, by the label's hash: a page that arrives settles
    /// only the labels it shows (rows whose labels' hashes collide are settled together, which
    /// [`super::told_apart::told_apart`] sorts out by the labels themselves).
    rows_by_label: HashMap<u64, Vec<u32>>,
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
            told_apart: Vec::new(),
            rows_by_label: HashMap::new(),
        }
    }

    /// Replaces every row (a new snapshot's answer).
    pub fn set_rows(&mut self, rows: Vec<R>, total: usize) {
        self.rows = rows;
        self.total = Some(total);
        self.told_apart.clear();
        self.rows_by_label.clear();
        self.tell_apart(0);
        self.cursor.selected = 0;
        self.refresh(None);
    }

    /// Adds a further page of rows; the selected row stays selected.
    pub fn extend(&mut self, rows: Vec<R>, total: usize) {
        let keep = self.selected_index();
        let first_new = self.rows.len();
        self.rows.extend(rows);
        self.total = Some(total);
        self.tell_apart(first_new);
        self.refresh(keep);
    }

    /// Settles what tells apart rows with one label once the rows from `first_new` on have
    /// arrived: only the labels they show can have changed, so a list that arrives page by
    /// page costs its length, not its length times its pages.
    fn tell_apart(&mut self, first_new: usize) {
        let mut touched: HashSet<u64> = HashSet::new();
        for (r, row) in self.rows.iter().enumerate().skip(first_new) {
            let Some((label, _)) = row.site_stack() else {
                // Rows that name no site (objects, frames) have nothing to tell apart.
                return;
            };
            let hash = self.rows_by_label.hasher().hash_one(label);
            self.rows_by_label.entry(hash).or_default().push(r as u32);
            touched.insert(hash);
        }
        self.told_apart.resize(self.rows.len(), None);
        for hash in touched {
            let rows = &self.rows_by_label[&hash];
            if rows.len() < 2 {
                continue;
            }
            let stacks: Vec<(&str, &[String])> = rows
                .iter()
                .filter_map(|&r| self.rows[r as usize].site_stack())
                .collect();
            for (&r, apart) in rows.iter().zip(super::told_apart::told_apart(&stacks)) {
                self.told_apart[r as usize] = apart;
            }
        }
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

    fn told_apart(&self, i: usize) -> Option<&str> {
        let &r = self.view.get(i)?;
        self.told_apart.get(r as usize)?.as_deref()
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

/// Most pages asked for in one request ([`PagedTable::wanted_runs`]): as many as the
/// agent's answer budget holds at the longest rows (a label of `MAX_TEXT_LEN` bytes and the
/// row's numbers), so that a run is never cut short.
const MAX_RUN_PAGES: u32 = {
    let longest_row = heaptui_protocol::answer::MAX_TEXT_LEN + 256;
    let pages = heaptui_protocol::answer::ANSWER_BUDGET / (PAGE_ROWS as usize * longest_row);
    if pages < 1 { 1 } else { pages as u32 }
};

/// A window over a remote list: pages are fetched as the cursor moves, never all at once.
///
/// The filter is applied by the server: a new query starts a new generation fetched from the
/// first page with the query sent along, and the total is the count of matches in the whole
/// list. Typing is coalesced rather than timed: a query is applied at once when no page of
/// the current one is on its way, else it waits for that answer and only the latest query
/// typed meanwhile is asked for.
#[derive(Debug)]
pub struct PagedTable<R> {
    pages: BTreeMap<u32, Vec<R>>,
    /// With a filter: the match positions (chars of the filter column) of each loaded row.
    marks: BTreeMap<u32, Vec<Vec<usize>>>,
    requested: HashSet<u32>,
    total: Option<usize>,
    sort: SortSpec,
    /// Bumped when the sort or the applied filter changes, so that pages of the old list are
    /// dropped.
    generation: u64,
    /// The query as typed.
    query: String,
    /// The query the loaded pages were asked with.
    applied: String,
    matcher: Box<dyn Matcher>,
    cursor: Cursor,
    max: u64,
}

impl<R: TableRow> PagedTable<R> {
    pub fn new(sort: SortSpec) -> Self {
        PagedTable {
            pages: BTreeMap::new(),
            marks: BTreeMap::new(),
            requested: HashSet::new(),
            total: None,
            sort,
            generation: 0,
            query: String::new(),
            applied: String::new(),
            matcher: Box::new(Skim::default()),
            cursor: Cursor::default(),
            max: 0,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The filter to send with page requests: the applied query, if any.
    pub fn filter(&self) -> Option<&str> {
        (!self.applied.is_empty()).then_some(self.applied.as_str())
    }

    /// A typed query that has not been applied yet (it waits for the pages on their way).
    pub fn query_pending(&self) -> bool {
        self.query != self.applied
    }

    /// The pages the viewport (plus a screen either side) needs that are neither here nor
    /// asked for.
    pub fn wanted_pages(&self) -> Vec<u32> {
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

    /// [`PagedTable::wanted_pages`] as runs of consecutive pages, `(first, count)`: each run
    /// is asked for in one request, so the agent orders the list once for it (`End` in a new
    /// order wants the last page and the one before: one pass over a 5M-member group's sort
    /// keys instead of two).
    pub fn wanted_runs(&self) -> Vec<(u32, u32)> {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for p in self.wanted_pages() {
            match runs.last_mut() {
                Some((first, count)) if *first + *count == p && *count < MAX_RUN_PAGES => {
                    *count += 1
                }
                _ => runs.push((p, 1)),
            }
        }
        runs
    }

    /// A page, or a run of pages ([`PagedTable::wanted_runs`]), arrived; `generation` is the
    /// one it was asked under.
    pub fn receive(&mut self, generation: u64, offset: u32, total: u32, rows: Vec<R>) {
        if generation != self.generation {
            return;
        }
        if rows.len() <= PAGE_ROWS as usize {
            self.receive_page(offset, total, rows);
        } else {
            let mut rows = rows.into_iter();
            let mut offset = offset;
            while rows.len() > 0 {
                let page: Vec<R> = rows.by_ref().take(PAGE_ROWS as usize).collect();
                self.receive_page(offset, total, page);
                offset += PAGE_ROWS;
            }
        }
        // Pages past the end of the list have nothing to wait for.
        self.requested
            .retain(|&p| u64::from(p) * u64::from(PAGE_ROWS) < u64::from(total));
        self.apply_if_due();
    }

    fn receive_page(&mut self, offset: u32, total: u32, rows: Vec<R>) {
        let page = offset / PAGE_ROWS;
        self.requested.remove(&page);
        self.total = Some(total as usize);
        self.max = self
            .max
            .max(rows.iter().map(TableRow::metric).max().unwrap_or(0));
        if !self.applied.is_empty() {
            let marks = rows
                .iter()
                .map(|row| {
                    self.matcher
                        .positions(&row.filter_text(), &self.applied)
                        .unwrap_or_default()
                })
                .collect();
            self.marks.insert(page, marks);
        }
        self.pages.insert(page, rows);
        let len = self.len();
        self.cursor.fit(len);
    }

    /// A page request of generation `generation` failed: the pages on their way may be
    /// asked again, and a waiting query goes ahead.
    pub fn failed(&mut self, generation: u64) {
        if generation == self.generation {
            self.requested.clear();
            self.apply_if_due();
        }
    }

    /// Drops everything loaded: the next [`PagedTable::wanted_pages`] starts from page 0.
    fn start_over(&mut self) {
        self.generation += 1;
        self.pages.clear();
        self.marks.clear();
        self.requested.clear();
        self.cursor.selected = 0;
        self.cursor.offset = 0;
    }

    /// A new order: the server sorts, so everything loaded is dropped and paging starts over.
    pub fn sort_by(&mut self, column: usize) {
        if !R::COLUMNS.get(column).is_some_and(|c| c.sortable) {
            return;
        }
        self.sort = self.sort.toggled(column, R::COLUMNS);
        self.applied = self.query.clone();
        self.start_over();
    }

    /// Rows loaded (of the current order and filter).
    #[cfg(test)]
    pub fn loaded(&self) -> usize {
        self.pages.values().map(Vec::len).sum()
    }

    /// The operator typed: the query is applied now, or when the pages on their way arrive.
    pub fn set_query(&mut self, query: &str) {
        self.query = query.to_string();
        self.apply_if_due();
    }

    fn apply_if_due(&mut self) {
        if self.query_pending() && self.requested.is_empty() {
            self.applied = self.query.clone();
            self.total = None;
            self.max = 0;
            self.start_over();
        }
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
        self.total.unwrap_or(0)
    }

    fn row(&self, i: usize) -> Option<&R> {
        self.at(u32::try_from(i).ok()?)
    }

    fn matches(&self, i: usize) -> &[usize] {
        let Ok(i) = u32::try_from(i) else { return &[] };
        self.marks
            .get(&(i / PAGE_ROWS))
            .and_then(|m| m.get((i % PAGE_ROWS) as usize))
            .map_or(&[], Vec::as_slice)
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
        if self.query_pending() {
            format!("filter “{}”: asking the agent…", self.query)
        } else if self.applied.is_empty() {
            String::new()
        } else {
            match self.total {
                Some(n) => format!("filter “{}”: {n} matching in the whole list", self.applied),
                None => format!("filter “{}”: asking the agent…", self.applied),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_protocol::message::ObjectRow;

    #[test]
    fn a_label_told_apart_is_cut_before_what_tells_it_apart() {
        let label = "gc_alloc (gcmodule.c:2283)";
        assert_eq!(
            label_fitting(label, " ← PyTuple_New", 40).map(|f| f.text),
            Some("gc_alloc (gcmodule.c:2283) ← PyTuple_New".to_string())
        );
        assert_eq!(
            label_fitting(label, " ← PyTuple_New", 31),
            Some(LabelFitting {
                text: "gc_alloc (gcmodu… ← PyTuple_New".to_string(),
                label_kept: 16
            })
        );
        // Too narrow for the label cut: a few characters of it, and the end of the caller.
        assert_eq!(
            label_fitting(label, " ← PyTuple_New", 15).map(|f| f.text),
            Some("gc_… ← …ple_New".to_string())
        );
        assert_eq!(label_fitting(label, " ← PyTuple_New", 0), None);
    }

    fn rows(n: u32) -> Vec<ObjectRow> {
        (0..n)
            .map(|i| ObjectRow {
                index: i,
                id: u64::from(i),
                addr: 0x1000 + u64::from(i) * 16,
                size: 16,
                site: 0,
                site_label: format!("site-{i}"),
                thread: 1,
                seq: u64::from(i),
                age: None,
            })
            .collect()
    }

    #[test]
    fn consecutive_wanted_pages_are_asked_for_as_one_run_and_split_on_arrival() {
        const { assert!(MAX_RUN_PAGES >= 2, "End's two pages fit one request") };
        let mut t: PagedTable<ObjectRow> = PagedTable::new(SortSpec {
            column: 1,
            descending: true,
        });
        t.set_height(20);
        t.mark_requested(0);
        t.receive(0, 0, 1001, rows(PAGE_ROWS));
        // The last row: its page (5) and the one before it, which the screen shows too.
        t.move_by(isize::MAX / 2);
        assert_eq!(t.wanted_pages(), [4, 5]);
        assert_eq!(t.wanted_runs(), [(4, 2)]);
        (4..6).for_each(|p| t.mark_requested(p));
        assert!(t.wanted_runs().is_empty(), "nothing asked twice");
        t.receive(0, 4 * PAGE_ROWS, 1001, rows(PAGE_ROWS + 1));
        assert_eq!(t.loaded(), 2 * PAGE_ROWS as usize + 1);
        assert!(t.wanted_runs().is_empty(), "both pages arrived");
        assert!(t.at(1000).is_some() && t.at(800).is_some() && t.at(1001).is_none());
    }

    #[test]
    fn queries_typed_while_a_page_is_on_its_way_are_coalesced() {
        let mut t: PagedTable<ObjectRow> = PagedTable::new(SortSpec {
            column: 1,
            descending: true,
        });
        t.set_height(20);
        assert_eq!(t.wanted_pages(), [0]);
        t.mark_requested(0);
        t.receive(0, 0, 1000, rows(PAGE_ROWS));
        assert_eq!(t.filter(), None);

        // Nothing on its way: the query applies at once, from page 0 of a new generation.
        t.set_query("s");
        assert_eq!((t.filter(), t.generation(), t.len()), (Some("s"), 1, 0));
        assert_eq!(t.wanted_pages(), [0]);
        t.mark_requested(0);
        // Two more keys while that page is on its way: they wait.
        t.set_query("si");
        t.set_query("sit");
        assert!(t.query_pending());
        assert_eq!((t.filter(), t.generation()), (Some("s"), 1));
        assert_eq!(t.filter_note(), "filter “sit”: asking the agent…");
        assert!(t.wanted_pages().is_empty(), "nothing more asked meanwhile");
        // Its answer lands, and the latest query goes out next: one request for two keys.
        t.receive(1, 0, 900, rows(PAGE_ROWS));
        assert!(!t.query_pending());
        assert_eq!((t.filter(), t.generation(), t.len()), (Some("sit"), 2, 0));
        assert_eq!(t.wanted_pages(), [0]);
        t.mark_requested(0);
        // An answer of an old generation changes nothing; a failure lets a waiting query go.
        t.receive(1, 0, 900, rows(3));
        assert_eq!(t.len(), 0);
        t.set_query("site");
        assert!(t.query_pending());
        t.failed(2);
        assert_eq!((t.filter(), t.generation()), (Some("site"), 3));
        t.mark_requested(0);
        t.receive(3, 0, 42, rows(42));
        assert_eq!(t.total(), Some(42));
        assert_eq!(
            t.filter_note(),
            "filter “site”: 42 matching in the whole list"
        );
        assert!(
            !t.matches(0).is_empty(),
            "the matched letters are highlighted"
        );
        // Clearing the query goes back to the whole list.
        t.set_query("");
        assert_eq!((t.filter(), t.generation()), (None, 4));
    }
}
