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

/// Where a screen drew its selectable list (the Group and Object screens' items, which are
/// not tables): the rows it covers, the item in its first row, how many items there are, and
/// the view it belongs to. The drawing code records it as it draws and a click reads it, so
/// the two agree by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListHit {
    pub serial: u64,
    pub area: Rect,
    pub first: usize,
    pub len: usize,
}

impl ListHit {
    /// The item under the cell (`column`, `row`), if one was drawn there.
    pub fn item_at(&self, column: u16, row: u16) -> Option<usize> {
        let a = self.area;
        let inside = (a.x..a.x + a.width).contains(&column) && (a.y..a.y + a.height).contains(&row);
        if !inside {
            return None;
        }
        let i = self.first + usize::from(row - a.y);
        (i < self.len).then_some(i)
    }
}

/// What the Frames screen's detail box writes before the selected frame's referents, which
/// follow one per id and a space (`refers to: F1 T2 `); the box's second text row.
pub const REFERS_PREFIX: &str = "refers to: ";

/// Which of `ids` (as the detail box writes them) is under the cell (`column`, `row`), for a
/// detail box at `detail`.
pub fn referent_at<T: std::fmt::Display>(
    detail: Rect,
    ids: &[T],
    column: u16,
    row: u16,
) -> Option<usize> {
    if row != detail.y + 2 || column <= detail.x {
        return None;
    }
    let x = usize::from(column - detail.x - 1);
    let mut start = REFERS_PREFIX.chars().count();
    for (i, id) in ids.iter().enumerate() {
        let width = id.to_string().chars().count();
        if (start..start + width).contains(&x) {
            return Some(i);
        }
        start += width + 1;
    }
    None
}
