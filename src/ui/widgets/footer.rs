//! The footer: the current screen's key hints (from the binding table) and one line that is
//! either the filter being typed or the last message.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::app::action::hints;
use crate::ui::theme;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [keys, status] = Layout::vertical([Constraint::Length(1); 2]).areas(area);
    let mut line = Vec::new();
    for (i, (shown, hint)) in hints(app.screen()).enumerate() {
        if i > 0 {
            line.push(Span::styled(" · ", theme::dim()));
        }
        line.push(Span::styled(shown, theme::key()));
        line.push(Span::raw(format!(" {hint}")));
    }
    frame.render_widget(Paragraph::new(Line::from(line)), keys);

    let line = match (&app.input, &app.status) {
        (Some(input), _) => Line::from(vec![
            Span::styled("filter /", theme::filter()),
            Span::raw(input.text.clone()),
            Span::styled("▏", theme::filter()),
            Span::styled("  Enter keep · Esc clear", theme::dim()),
        ]),
        (None, Some(status)) => Line::from(Span::styled(status.clone(), theme::shared())),
        (None, None) => Line::default(),
    };
    frame.render_widget(Paragraph::new(line), status);
}
