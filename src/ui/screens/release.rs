//! Release ranking: what ending each thread alone frees, and what ending the marked set frees
//! (asked of the engine: release(S) of docs/reference.md §3 is not the sum of the single releases).

use ratatui::Frame;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::rows::ReleaseRow;
use crate::app::views::HomeView;
use crate::size::human_exact;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, home: &HomeView) {
    widgets::table::draw(
        frame,
        areas.main,
        "Release ranking: bytes freed if the thread ended",
        &home.release,
        app.exact_bytes,
        &colour,
        app.stale,
    );
    let Some(area) = areas.detail else { return };
    let lines = match &home.set_release {
        None => vec![
            Line::from("Space marks threads; the release of the marked set is computed exactly:"),
            Line::styled(
                "objects only the marked threads share are freed too: it is not the sum.",
                theme::dim(),
            ),
        ],
        Some(set) => {
            let tids = set
                .tids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let bytes = match set.bytes {
                Some(b) => Span::styled(human_exact(b), theme::alone().patch(theme::total())),
                None => Span::styled("computing…", theme::dim()),
            };
            // The difference is what only the marked threads share: said when there is one.
            let shared_only = if set.bytes.is_some_and(|b| b != home.sum_of_singles()) {
                " (the difference is what only they share)"
            } else {
                ""
            };
            vec![
                Line::from(vec![
                    Span::raw(format!("Ending threads {{{tids}}} frees ")),
                    bytes,
                ]),
                Line::styled(
                    format!(
                        "sum of their single releases: {}{shared_only}",
                        human_exact(home.sum_of_singles())
                    ),
                    theme::dim(),
                ),
            ]
        }
    };
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(" Marked set ")),
        area,
    );
}

fn colour(row: &ReleaseRow, column: usize) -> Style {
    match column {
        0 | 1 if row.marked => theme::shared().patch(theme::total()),
        3 => theme::alone(),
        4 => theme::bar(),
        5 => theme::shared(),
        _ => Style::default(),
    }
}
