//! The footer: the current screen's key hints (from the binding table) and one line that is
//! either the filter being typed or the last message.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::app::action::{Screen, live_hints};
use crate::ui::theme;

const SEPARATOR: &str = " · ";
/// Hints kept however narrow the screen: the rest is in the help.
const ALWAYS: [&str; 2] = ["?", "q"];

/// The screen's hints that fit in `width` cells, whole and in table order: the later ones give
/// way first, `?` (where the rest are) and `q` never. Offline (`live` false) nothing that needs
/// a live agent is offered.
fn fitting_hints(screen: Screen, live: bool, width: u16) -> Vec<(&'static str, &'static str)> {
    // Each hint with the separator before it; the first has none, hence the one added to room.
    let separator = Span::raw(SEPARATOR).width();
    let cells = |(shown, hint): &(&str, &str)| {
        Span::raw(*shown).width() + 1 + Span::raw(*hint).width() + separator
    };
    let all: Vec<_> = live_hints(screen, live).collect();
    let mut room = (width as usize + separator).saturating_sub(
        all.iter()
            .filter(|h| ALWAYS.contains(&h.0))
            .map(&cells)
            .sum(),
    );
    all.into_iter()
        .filter(|h| {
            if ALWAYS.contains(&h.0) {
                return true;
            }
            let fits = cells(h) <= room;
            if fits {
                room -= cells(h);
            } else {
                room = 0;
            }
            fits
        })
        .collect()
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [keys, status] = Layout::vertical([Constraint::Length(1); 2]).areas(area);
    let mut line = Vec::new();
    for (i, (shown, hint)) in fitting_hints(app.screen(), app.live, keys.width)
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            line.push(Span::styled(SEPARATOR, theme::dim()));
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
