//! Frames of one thread, innermost first: what each frame holds alone, the groups it refers
//! to, and the developed chain of the selected frame.

use ratatui::Frame;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use heaptui_protocol::FrameKind;
use heaptui_protocol::message::FrameRow;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::table::TableModel;
use crate::app::views::{FramesView, frame_referents};
use crate::size::human_exact;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &FramesView) {
    let title = format!(
        "Frames of thread {} {:?}, innermost first",
        view.tid, view.name
    );
    widgets::table::draw(
        frame,
        areas.main,
        &title,
        &view.table,
        app.exact_bytes,
        &colour,
        app.stale,
    );
    let Some(area) = areas.detail else { return };
    let lines = match view.table.selected_row() {
        None => vec![Line::styled("no frame selected", theme::dim())],
        Some(f) => {
            let referents = frame_referents(f);
            let chosen = view.referent.min(referents.len().saturating_sub(1));
            let mut refs = vec![Span::raw(crate::app::layout::REFERS_PREFIX)];
            if referents.is_empty() {
                refs.push(Span::styled("no shared group", theme::dim()));
            }
            for (i, id) in referents.iter().enumerate() {
                let style = theme::group(id.kind);
                let style = if i == chosen {
                    style.patch(theme::selected())
                } else {
                    style
                };
                refs.push(Span::styled(format!("{id}"), style));
                refs.push(Span::raw(" "));
            }
            if !referents.is_empty() {
                refs.push(Span::styled("  (←/→ choose, Enter opens)", theme::dim()));
            }
            let developed = if f.developed.total == 0 {
                "-".to_string()
            } else {
                let mut s = f
                    .developed
                    .ids
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" → ");
                if f.developed.is_truncated() {
                    s.push_str(&format!(" … ({} in all)", f.developed.total));
                }
                s
            };
            vec![
                Line::from(vec![
                    Span::styled(format!("#{} {}", f.index, f.function), theme::title()),
                    Span::raw(format!(
                        " in {} ({}) holds alone ",
                        if f.module.is_empty() { "?" } else { &f.module },
                        crate::app::rows::kind_cell(f.kind)
                    )),
                    Span::styled(human_exact(f.proprietary), theme::alone()),
                ]),
                Line::from(refs),
                Line::from(vec![
                    Span::raw("developed: "),
                    Span::styled(developed, theme::shared()),
                ]),
            ]
        }
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Selected frame ")),
        area,
    );
}

fn colour(row: &FrameRow, column: usize) -> Style {
    match column {
        1..=3 if row.kind == FrameKind::System => theme::dim(),
        4 => theme::alone(),
        5 | 6 => theme::shared(),
        _ => Style::default(),
    }
}
