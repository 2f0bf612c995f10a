//! Draws any [`TableModel`]: the header with the sort arrow, the rows in view with the filter's
//! matches highlighted, the selection, and `rows x–y of N` in the title.
//!
//! Reads the model only; the order and the filter were settled when the data changed.

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, HighlightSpacing, Row, Table, TableState};

use crate::app::table::{Align, TableModel, TableRow, label_fitting, text_width};
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
    let cx = model.context(exact_bytes);
    let len = model.len();
    let cursor = model.cursor();
    let (start, end) = cursor.window(len);
    let shown = model.shown_columns(area.width, exact_bytes);

    let header = Row::new(shown.iter().map(|&(i, _)| {
        let c = &columns[i];
        let mut text = c.header_text(exact_bytes).into_owned();
        if i == sort.column && c.sortable {
            text.push(if sort.descending { '▼' } else { '▲' });
        }
        Cell::from(align(Line::from(text), c.align))
    }))
    .style(theme::header());

    let rows = (start..end).map(|i| {
        let row = match model.row(i) {
            Some(row) => Row::new(shown.iter().map(|&(c, width)| {
                let column = &columns[c];
                let mut matches = model.matches(i);
                let apart = if c == M::Row::FILTER_COLUMN {
                    model.told_apart(i)
                } else {
                    None
                };
                let text = match apart {
                    // A label told apart from another's, fitted to the column: it may have
                    // been cut, and its matches past the cut with it.
                    Some(apart) => {
                        let label = row.cell(c, &cx);
                        match label_fitting(&label, apart, width) {
                            Some(fitting) => {
                                matches = &matches
                                    [..matches.partition_point(|&m| m < fitting.label_kept)];
                                fitting.text
                            }
                            None => label + apart,
                        }
                    }
                    None => row.cell(c, &cx),
                };
                let line = if c == M::Row::FILTER_COLUMN && !matches.is_empty() {
                    highlighted(&text, matches)
                } else {
                    Line::from(text)
                };
                Cell::from(align(line, column.align)).style(colour(row, c))
            })),
            None => Row::new([Cell::from("…")]).style(theme::dim()),
        };
        if stale { row.style(theme::dim()) } else { row }
    });

    let widths = shown.iter().map(|&(_, w)| Constraint::Length(w));
    let position = format!("· {} ", model.position_note());
    let note = model.filter_note();
    let note = if note.is_empty() {
        String::new()
    } else {
        format!("· {note} ")
    };
    // The title gives way before the position and the filter: its last ` · ` parts go first.
    let room = (area.width.saturating_sub(2) as usize)
        .saturating_sub(text_width(&position) as usize + text_width(&note) as usize);
    let mut title_spans = vec![
        Span::styled(format!(" {} ", fitting_title(title, room)), theme::title()),
        Span::raw(position),
    ];
    if !note.is_empty() {
        title_spans.push(Span::styled(note, theme::filter()));
    }
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(theme::selected())
        // A symbol as well as the colour, so the selection shows in any terminal.
        .highlight_symbol(SYMBOL)
        .highlight_spacing(HighlightSpacing::Always)
        .block(Block::bordered().title(Line::from(title_spans)));
    // Only the rows in view were built: the selection is counted from the first of them.
    let mut state = TableState::default()
        .with_selected((len > 0).then(|| cursor.selected.saturating_sub(start)));
    frame.render_stateful_widget(table, area, &mut state);
}

/// `total`, `name (reversed)`: what `model` is sorted by, for a title.
pub fn sorted_by<M: TableModel>(model: &M) -> String {
    let sort = model.sort();
    let column = &M::Row::COLUMNS[sort.column];
    let name = column.header.to_lowercase();
    if sort.descending == column.descending_first {
        name
    } else {
        format!("{name} (reversed)")
    }
}

/// `title` in `room` cells (its blanks either side included): whole, else without its last
/// ` · ` parts, else cut.
fn fitting_title(title: &str, room: usize) -> String {
    let mut title = title;
    while text_width(title) as usize + 2 > room {
        match title.rfind(" · ") {
            Some(at) => title = &title[..at],
            None => break,
        }
    }
    title.to_string()
}

const SYMBOL: &str = "▶ ";

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

#[cfg(test)]
mod tests {
    use heaptui_protocol::message::ThreadRow;

    use crate::app::table::fit;

    use super::*;

    fn headers(shown: &[(usize, u16)]) -> Vec<&'static str> {
        let columns = ThreadRow::COLUMNS;
        shown.iter().map(|&(i, _)| columns[i].header).collect()
    }

    #[test]
    fn a_narrow_screen_drops_state_before_names_and_cuts_no_header() {
        let columns = ThreadRow::COLUMNS;
        let widest = [0, 14, 0, 0, 0, 0, 0, 7];
        // 80 columns less the border and the selection symbol.
        let shown = fit(columns, &widest, 76, false);
        assert_eq!(
            headers(&shown),
            ["TID", "NAME", "PROPRIETARY", "SHARED", "TOTAL", ""]
        );
        for &(i, width) in &shown {
            assert!(width as usize > columns[i].header.len(), "{shown:?}");
        }
        let used: u16 = shown.iter().map(|&(_, w)| w).sum::<u16>() + shown.len() as u16 - 1;
        assert_eq!(used, 76, "the name takes the room left");
        // Wide: every column, and the state as wide as its widest cell.
        let shown = fit(columns, &widest, 156, false);
        assert_eq!(shown.len(), columns.len());
    }

    #[test]
    fn a_wide_screen_gives_a_second_flexible_column_its_widest_cell() {
        let columns = heaptui_protocol::message::FrameRow::COLUMNS;
        let widest = [0, 30, 40, 0, 0, 0, 0];
        let shown = fit(columns, &widest, 156, false);
        assert_eq!(shown[2], (2, 40), "the module whole: {shown:?}");
        assert!(shown[1].1 >= 30, "{shown:?}");
    }
}
