//! Threads (home): the ranking by the bytes each thread holds, alone and shared.

use ratatui::Frame;
use ratatui::style::Style;

use heaptui_protocol::ThreadState;
use heaptui_protocol::message::ThreadRow;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::views::HomeView;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, home: &HomeView) {
    let marked = home.marked.len();
    let mut title = format!("Threads by {}", widgets::table::sorted_by(&home.threads));
    if marked > 0 {
        title.push_str(&format!(" · {marked} marked"));
    }
    widgets::table::draw(
        frame,
        areas.main,
        &title,
        &home.threads,
        app.exact_bytes,
        &|row: &ThreadRow, column| colour(row, column, home.marked.contains(&row.tid)),
        app.stale,
    );
}

fn colour(row: &ThreadRow, column: usize, marked: bool) -> Style {
    match column {
        0 if marked => theme::shared(),
        2 => theme::alone(),
        3 => theme::shared(),
        4 => theme::total(),
        5 => theme::bar(),
        7 if row.state != ThreadState::Stopped => theme::error(),
        _ => Style::default(),
    }
}
