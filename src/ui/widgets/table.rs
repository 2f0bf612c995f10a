//! Draws any [`TableModel`]: the header with the sort arrow, the rows in view with the filter's
//! matches highlighted, the selection, and `rows x–y of N` in the title.
//!
//! Reads the model only; the order and the filter were settled when the data changed.

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, HighlightSpacing, Row, Table, TableState};

use crate::app::table::{Align, TableModel, TableRow};
use crate::ui::theme;

/// How a cell is coloured: by column, given its text. Sizes carry meaning (alone, shared).
pub type Colour<'a, R> = &'a dyn Fn(&R, usize) -> Style;

pub fn draw<M: TableModel>(
    frame: &mut Frame,
    area: Rect,
    title: &str,
    model: &M,
    exact_bytes: bool,
    colour: Colour<'_, M::Row>,
    stale: bool,
) {
    let columns = M::Row::COLUMNS;
    let sort = model.sort();
    let header = Row::new(columns.iter().enumerate().map(|(i, c)| {
        let mut text = c.header.to_string();
        if i == sort.column && c.sortable {
            text.push(if sort.descending { '▼' } else { '▲' });
        }
        Cell::from(align(Line::from(text), c.align))
    }))
    .style(theme::header());

    let cx = model.context(exact_bytes);
    let len = model.len();
    let cursor = model.cursor();
    let (start, end) = cursor.window(len);
    let rows = (start..end).map(|i| {
        let row = match model.row(i) {
            Some(row) => Row::new(columns.iter().enumerate().map(|(c, column)| {
                let text = row.cell(c, &cx);
                let line = if c == M::Row::FILTER_COLUMN && !model.matches(i).is_empty() {
                    highlighted(&text, model.matches(i))
                } else {
                    Line::from(text)
                };
                Cell::from(align(line, column.align)).style(colour(row, c))
            })),
            None => Row::new([Cell::from("…")]).style(theme::dim()),
        };
        if stale { row.style(theme::dim()) } else { row }
    });

    let widths = columns.iter().map(|c| match c.width {
        0 => Constraint::Fill(1),
        w => Constraint::Length(w),
    });
    let mut title_spans = vec![
        Span::styled(format!(" {title} "), theme::title()),
        Span::raw(format!("· {} ", model.position_note())),
    ];
    let note = model.filter_note();
    if !note.is_empty() {
        title_spans.push(Span::styled(format!("· {note} "), theme::filter()));
    }
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(theme::selected())
        // A symbol as well as the colour, so the selection shows in any terminal.
        .highlight_symbol("▶ ")
        .highlight_spacing(HighlightSpacing::Always)
        .block(Block::bordered().title(Line::from(title_spans)));
    // Only the rows in view were built: the selection is counted from the first of them.
    let mut state = TableState::default()
        .with_selected((len > 0).then(|| cursor.selected.saturating_sub(start)));
    frame.render_stateful_widget(table, area, &mut state);
}

fn align(line: Line<'static>, a: Align) -> Line<'static> {
    match a {
        Align::Left => line,
        Align::Right => line.alignment(Alignment::Right),
    }
}

/// `text` with the chars at `positions` stood out.
pub fn highlighted(text: &str, positions: &[usize]) -> Line<'static> {
    let mut spans = Vec::new();
    let mut plain = String::new();
    for (i, ch) in text.chars().enumerate() {
        if positions.binary_search(&i).is_ok() {
            if !plain.is_empty() {
                spans.push(Span::raw(std::mem::take(&mut plain)));
            }
            spans.push(Span::styled(
                ch.to_string(),
                theme::matched().add_modifier(Modifier::BOLD),
            ));
        } else {
            plain.push(ch);
        }
    }
    if !plain.is_empty() {
        spans.push(Span::raw(plain));
    }
    Line::from(spans)
}
