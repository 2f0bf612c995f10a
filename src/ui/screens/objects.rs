//! Objects of a group or of an allocation site, fetched page by page; Enter opens one.

use ratatui::Frame;
use ratatui::style::Style;

use heaptui_protocol::message::ObjectRow;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::views::{ObjectsOrigin, ObjectsView};
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &ObjectsView) {
    let title = match &view.origin {
        ObjectsOrigin::Group(id) => format!("Objects of group {id}"),
        ObjectsOrigin::Site { label, .. } => format!("Objects allocated at {label}"),
    };
    widgets::table::draw(
        frame,
        areas.main,
        &title,
        &view.table,
        app.exact_bytes,
        &colour,
        app.stale,
    );
}

fn colour(_: &ObjectRow, column: usize) -> Style {
    match column {
        0 => theme::dim(),
        1 => theme::total(),
        _ => Style::default(),
    }
}
