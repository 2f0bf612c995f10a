//! A screen's main block holding one line instead of a table: what the source said when it
//! could not answer (an agent without its event stream, a recording without a graph).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use crate::app::App;
use crate::app::table::TableModel;
use crate::ui::theme;
use crate::ui::widgets::table::{self, Colour};

/// The table, or the source's one line in its place.
pub fn or_table<M: TableModel>(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    title: &str,
    error: Option<&str>,
    model: &M,
    colour: Colour<'_, M::Row>,
) {
    match error {
        Some(message) => draw(frame, area, title, message),
        None => table::draw(
            frame,
            area,
            title,
            model,
            app.exact_bytes,
            colour,
            app.stale,
        ),
    }
}

pub fn draw(frame: &mut Frame, area: Rect, title: &str, message: &str) {
    let block = Block::bordered().title(Line::from(Span::styled(
        format!(" {title} "),
        theme::title(),
    )));
    frame.render_widget(
        Paragraph::new(Span::styled(message.to_string(), theme::error()))
            .wrap(Wrap { trim: true })
            .block(block),
        area,
    );
}
