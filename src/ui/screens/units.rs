//! Allocation units (docs/reference.md §8): live bytes, min/max and call counts per library,
//! function or thread, under the query shown in the title (`f`, `p`, `c` change it).

use ratatui::Frame;
use ratatui::style::Style;

use heaptui_protocol::message::UnitRow;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::units::UnitsView;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &UnitsView) {
    let mut title = format!("Allocation units · {}", view.query_text());
    if let Some((events, frees, reallocs)) = view.events {
        title.push_str(&format!(
            " · {}",
            crate::figures::count(events, "event", "events")
        ));
        if frees + reallocs > 0 {
            title.push_str(&format!(
                " · unknown pointers: {frees} frees, {reallocs} reallocs"
            ));
        }
    }
    widgets::notice::or_table(
        frame,
        areas.main,
        app,
        &title,
        view.error.as_deref(),
        &view.table,
        &colour,
    );
}

fn colour(row: &UnitRow, column: usize) -> Style {
    match column {
        1 if row.live < 0 => theme::error(),
        1 => theme::total(),
        2 => theme::bar(),
        _ => Style::default(),
    }
}
