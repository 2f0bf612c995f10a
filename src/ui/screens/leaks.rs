//! Leaks by allocation site (docs/reference.md §8): the kept snapshot's unreachable blocks,
//! definitely and indirectly lost, and its possibly lost ones (reachable only through
//! pointers into their middle); Enter lists the site's objects.

use ratatui::Frame;
use ratatui::style::Style;

use heaptui_protocol::message::LeakRow;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::leaks::LeaksView;
use crate::figures::{count, mostly_possibly_lost};
use crate::size::human;
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &LeaksView) {
    // What the figures mean, then the snapshot's figures: a narrow terminal drops the figures
    // first, which the header shows too.
    let mut title = "Leaks by site: blocks no root reaches".to_string();
    if let Some(s) = &app.snapshot {
        if mostly_possibly_lost(s.leaks.possibly_lost, s.totals.bytes) {
            title = "Leaks by site: most of the heap is possibly lost (interior pointers), \
                     seldom leaks"
                .to_string();
        }
        title.push_str(&format!(
            " · snapshot #{}: {} lost in {}",
            s.snapshot.0,
            human(s.leaks.bytes),
            count(s.leaks.objects, "block", "blocks")
        ));
        if s.leaks.possibly_lost_objects > 0 {
            title.push_str(&format!(
                ", {} possibly lost in {}",
                human(s.leaks.possibly_lost),
                count(s.leaks.possibly_lost_objects, "block", "blocks")
            ));
        }
        if s.threads_not_stopped > 0 {
            title.push_str(" (may be overstated: a thread was not stopped)");
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

fn colour(_: &LeakRow, column: usize) -> Style {
    match column {
        1 | 5 => theme::error(),
        3 | 6 => theme::shared(),
        8 => theme::bar(),
        9 => theme::dim(),
        _ => Style::default(),
    }
}
