//! Where each part of the screen goes, as plain rectangles: the drawing code fills them and
//! the state uses the same numbers for table heights (paging) and for mouse clicks, so the
//! two agree by construction.
//!
//! Geometry only: nothing here draws or reads the terminal.

use ratatui::layout::Rect;

use super::action::Screen;

pub const HEADER_ROWS: u16 = 3;
pub const FOOTER_ROWS: u16 = 2;
/// Rows under the frames table for the selected frame's referents.
pub const FRAME_DETAIL_ROWS: u16 = 7;
/// Rows under the release table for the marked set.
pub const RELEASE_PANEL_ROWS: u16 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub banner: Option<Rect>,
    /// The tab bar of the home screen.
    pub tabs: Option<Rect>,
    /// The screen's main block (a table or a list, with its border).
    pub main: Rect,
    /// Under the main block: frame referents, or the release of the marked set.
    pub detail: Option<Rect>,
    pub footer: Rect,
}

fn rows(area: Rect, y: u16, height: u16) -> Rect {
    Rect::new(area.x, y, area.width, height)
}

pub fn areas(size: Rect, screen: Screen, banner: bool) -> Areas {
    let mut y = size.y;
    let bottom = size.y + size.height;
    let take = |y: &mut u16, n: u16| {
        let n = n.min(bottom.saturating_sub(*y));
        let r = rows(size, *y, n);
        *y += n;
        r
    };
    let header = take(&mut y, HEADER_ROWS);
    let banner = banner.then(|| take(&mut y, 1));
    let footer_y = bottom.saturating_sub(FOOTER_ROWS).max(y);
    let footer = rows(size, footer_y, bottom - footer_y);
    let tabs = matches!(screen, Screen::Threads | Screen::Release | Screen::Sites)
        .then(|| take(&mut y, 1));
    let body = rows(size, y, footer_y.saturating_sub(y));
    let detail_rows = match screen {
        Screen::Frames => FRAME_DETAIL_ROWS,
        Screen::Release => RELEASE_PANEL_ROWS,
        _ => 0,
    };
    let (main, detail) = if detail_rows > 0 && body.height > detail_rows + 4 {
        (
            rows(body, body.y, body.height - detail_rows),
            Some(rows(body, body.y + body.height - detail_rows, detail_rows)),
        )
    } else {
        (body, None)
    };
    Areas {
        header,
        banner,
        tabs,
        main,
        detail,
        footer,
    }
}

/// Data rows a table in `main` shows: less the border and the header row.
pub fn table_rows(main: Rect) -> usize {
    main.height.saturating_sub(3) as usize
}

/// Which data row of a table in `main` the screen row `y` is, counted from the first visible.
pub fn table_row_at(main: Rect, y: u16) -> Option<usize> {
    let first = main.y + 2;
    (y >= first && y < main.y + main.height.saturating_sub(1)).then(|| (y - first) as usize)
}
