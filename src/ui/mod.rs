//! Drawing: `render(app, frame)` is a pure function of the state — it never awaits, locks,
//! asks the source or changes anything. The layout comes from `app::layout`, the same numbers
//! the state uses for paging and mouse clicks.
//!
//! `screens/` has one file per screen, `popups/` the dialogs, `widgets/` the shared pieces.

pub mod popups;
pub mod screens;
pub mod theme;
pub mod widgets;

use ratatui::Frame;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::app::other::OtherView;
use crate::app::views::{HomeTab, ViewKind};

pub fn render(app: &App, frame: &mut Frame) {
    let areas = app.areas();
    widgets::header::draw(frame, areas.header, app);
    if let (Some(area), Some(text)) = (areas.banner, app.banner()) {
        frame.render_widget(
            Paragraph::new(Span::styled(format!(" {text}"), theme::banner()))
                .style(theme::banner()),
            area,
        );
    }
    match &app.top().kind {
        // A recording has no heap graph to rank: say so, and where its figures are, rather
        // than a table that waits for rows forever.
        ViewKind::Home(_) if app.recording => {
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from(
                        "A recording has no heap graph: threads, release, sites and leaks need \
                         a snapshot (a snapshot file or a live agent).",
                    ),
                    Line::default(),
                    Line::styled(
                        "Its events give: u allocation units · w growth · A ages",
                        theme::key(),
                    ),
                ])
                .wrap(ratatui::widgets::Wrap { trim: true })
                .block(
                    ratatui::widgets::Block::bordered()
                        .title(Span::styled(" Threads ", theme::title())),
                ),
                areas.main,
            );
        }
        ViewKind::Home(home) => {
            if let Some(area) = areas.tabs {
                let mut spans = Vec::new();
                for tab in HomeTab::ALL {
                    let style = if tab == home.tab {
                        theme::selected().patch(theme::title())
                    } else {
                        theme::dim()
                    };
                    spans.push(Span::styled(format!(" {} ", tab.title()), style));
                    spans.push(Span::styled("│", theme::dim()));
                }
                frame.render_widget(Paragraph::new(Line::from(spans)), area);
            }
            match home.tab {
                HomeTab::Threads => screens::threads::draw(frame, &areas, app, home),
                HomeTab::Release => screens::release::draw(frame, &areas, app, home),
                HomeTab::Sites => screens::sites::draw(frame, &areas, app, home),
            }
        }
        ViewKind::Frames(v) => screens::frames::draw(frame, &areas, app, v),
        ViewKind::Group(v) => screens::group::draw(frame, &areas, app, v),
        ViewKind::Objects(v) => screens::objects::draw(frame, &areas, app, v),
        ViewKind::Object(v) => screens::object::draw(frame, &areas, app, v),
        ViewKind::Other(v) => match v {
            OtherView::Units(v) => screens::units::draw(frame, &areas, app, v),
            OtherView::Leaks(v) => screens::leaks::draw(frame, &areas, app, v),
            OtherView::Growth(v) => screens::growth::draw(frame, &areas, app, v),
            OtherView::Ages(v) => screens::ages::draw(frame, &areas, app, v),
        },
    }
    widgets::footer::draw(frame, areas.footer, app);
    if app.help {
        popups::help::draw(
            frame,
            frame.area(),
            app.screen(),
            app.help_scroll,
            app.help_figures,
        );
    }
    if let Some(dialog) = &app.cancel {
        popups::cancel::draw(frame, frame.area(), dialog);
    }
}

/// A list line with the selection marker (a symbol as well as the colour, so it shows in any
/// terminal) or the blank that keeps the others aligned.
pub fn selectable(line: Line<'static>, selected: bool) -> Line<'static> {
    let mut spans = vec![Span::raw(if selected { "▶ " } else { "  " })];
    spans.extend(line.spans);
    let line = Line::from(spans);
    if selected {
        line.style(theme::selected())
    } else {
        line
    }
}

/// The lines `[start, end)` of a list of `len` that a viewport of `height` shows with
/// `selected` in view.
pub fn list_window(selected: usize, len: usize, height: usize) -> (usize, usize) {
    let height = height.max(1);
    let start = selected
        .saturating_sub(height - 1)
        .min(len.saturating_sub(height));
    (start, (start + height).min(len))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod views_tests;
