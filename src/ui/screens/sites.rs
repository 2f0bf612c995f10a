//! Allocation sites: live bytes and blocks per site (the by-class view); Enter lists objects.

use ratatui::Frame;
use ratatui::style::Style;

use heaptui_protocol::message::SiteRow;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::views::HomeView;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, home: &HomeView) {
    widgets::table::draw(
        frame,
        areas.main,
        &format!(
            "Allocation sites by {}",
            widgets::table::sorted_by(&home.sites)
        ),
        &home.sites,
        app.exact_bytes,
        &colour,
        app.stale,
    );
}

fn colour(_: &SiteRow, column: usize) -> Style {
    match column {
        1 => theme::total(),
        3 => theme::bar(),
        4 => theme::dim(),
        _ => Style::default(),
    }
}
