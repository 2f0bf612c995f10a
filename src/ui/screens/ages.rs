//! Ages (docs/reference.md §8): blocks per age range (snapshots survived: 0, 1, 2, 3, >3) per site
//! or per thread (`t`), or the oldest survivors (`o`); Enter opens the site's objects, the thread's
//! frames, or the object.

use ratatui::Frame;
use ratatui::style::Style;

use heaptui_protocol::message::{AgeRow, AgeScope, Survivor};

use crate::app::App;
use crate::app::ages::{AgeList, AgesView};
use crate::app::layout::Areas;
use crate::figures::{count, histogram_text};
use crate::ui::{theme, widgets};

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &AgesView) {
    let by = match view.by {
        AgeScope::Sites => "site",
        AgeScope::Threads => "thread",
    };
    let mut title = match view.list {
        AgeList::Histogram => format!("Ages by {by}"),
        AgeList::Oldest => "Oldest survivors".to_string(),
    };
    if let Some((total, boundaries)) = &view.total {
        title.push_str(&format!(
            " · {} · all blocks {}",
            count(
                *boundaries as u64,
                "snapshot boundary",
                "snapshot boundaries"
            ),
            histogram_text(total)
        ));
    }
    let error = view.error.as_deref();
    match view.list {
        AgeList::Histogram => widgets::notice::or_table(
            frame,
            areas.main,
            app,
            &title,
            error,
            &view.rows,
            &histogram_colour,
        ),
        AgeList::Oldest => widgets::notice::or_table(
            frame,
            areas.main,
            app,
            &title,
            error,
            &view.oldest,
            &survivor_colour,
        ),
    }
}

fn histogram_colour(_: &AgeRow, column: usize) -> Style {
    match column {
        1 => theme::dim(),
        4 | 5 => theme::shared(),
        7 => theme::total(),
        8 => theme::bar(),
        _ => Style::default(),
    }
}

fn survivor_colour(_: &Survivor, column: usize) -> Style {
    match column {
        1 => theme::total(),
        2 => theme::shared(),
        _ => Style::default(),
    }
}
