//! Growth by allocation site (docs/reference.md §8): each site's live bytes across snapshots as a
//! small sparkline; the rows the source flagged (growing, or over 75% of the heap) stand out.

use ratatui::Frame;
use ratatui::style::{Modifier, Style};

use heaptui_protocol::message::GrowthRow;

use crate::app::App;
use crate::app::growth::{GrowthView, flagged};
use crate::app::layout::Areas;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &GrowthView) {
    let mut title = "Growth by site".to_string();
    if let Some((snapshots, run)) = view.snapshots {
        title.push_str(&format!(
            " · {} · flagged: growing over {run} in a row, or >75% of the heap",
            crate::figures::count(snapshots as u64, "snapshot", "snapshots")
        ));
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

fn colour(row: &GrowthRow, column: usize) -> Style {
    if flagged(row) {
        return theme::error().add_modifier(Modifier::BOLD);
    }
    match column {
        1 => theme::total(),
        2 => theme::bar(),
        4 => theme::dim(),
        _ => Style::default(),
    }
}
