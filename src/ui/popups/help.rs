//! `?`: every binding of the key table, with where it works — the same table the footer reads.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::app::action::{BINDINGS, Screen};
use crate::ui::theme;

pub fn draw(frame: &mut Frame, area: Rect, screen: Screen) {
    let mut lines = vec![
        Line::styled(
            format!("On the {} screen (dimmed: elsewhere)", screen.title()),
            theme::dim(),
        ),
        Line::default(),
    ];
    for b in BINDINGS {
        let here = b.applies(screen);
        let style = if here { theme::key() } else { theme::dim() };
        let mut spans = vec![
            Span::styled(format!("{:>8}  ", b.shown), style),
            Span::styled(
                b.help.to_string(),
                if here {
                    ratatui::style::Style::default()
                } else {
                    theme::dim()
                },
            ),
        ];
        if !b.screens.is_empty() {
            let wheres = b
                .screens
                .iter()
                .map(|s| s.title())
                .collect::<Vec<_>>()
                .join(", ");
            spans.push(Span::styled(format!("  [{wheres}]"), theme::dim()));
        }
        lines.push(Line::from(spans));
    }
    lines.push(Line::default());
    lines.push(Line::styled(
        "Mouse: the wheel scrolls; a click selects a row, a click on the selected row opens it.",
        theme::dim(),
    ));
    let height = (lines.len() as u16 + 2).min(area.height);
    let width = area.width.saturating_sub(4).min(110);
    let popup = area.centered(Constraint::Length(width), Constraint::Length(height));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::bordered().title(Span::styled(" Help · any key closes ", theme::title())),
        ),
        popup,
    );
}
