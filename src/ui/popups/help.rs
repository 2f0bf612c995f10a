//! `?`: every binding of the key table, grouped by where it works — the same table the
//! footer reads — or, after `Tab`, what the figures and columns mean, painted from the page `app::help` lays out for the terminal's size (two
//! columns when wide enough, scrolled with ↑/↓ when still too tall).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::app::action::Screen;
use crate::app::help::{self, GAP, HEAD_ROWS, KEY_GAP, KEY_INDENT, Page};
use crate::ui::theme;

pub fn draw(frame: &mut Frame, area: Rect, screen: Screen, scroll: u16, figures: bool) {
    let page = help::page(area, screen, figures);
    let scroll = scroll.min(page.max_scroll);
    let title = match (figures, page.max_scroll > 0) {
        (false, true) => " Help · Tab: figures · ↑/↓ PgUp/PgDn scroll · other keys close ",
        (false, false) => " Help · Tab: what the figures mean · other keys close ",
        (true, true) => " Help: figures · Tab: keys · ↑/↓ PgUp/PgDn scroll · other keys close ",
        (true, false) => " Help: what the figures mean · Tab: keys · other keys close ",
    };
    let mut block = Block::bordered().title(Span::styled(title, theme::title()));
    if page.max_scroll > 0 {
        block = block.title_bottom(Span::styled(
            format!(
                " lines {}–{} of {} ",
                scroll + 1,
                scroll + page.rows,
                page.height()
            ),
            theme::dim(),
        ));
    }
    // The whole screen, not only the popup: a margin showing pieces of the lines behind it
    // reads as part of the help.
    frame.render_widget(Clear, area);
    let inner = block.inner(page.area);
    frame.render_widget(block, page.area);

    let head = Rect {
        height: HEAD_ROWS.min(inner.height),
        ..inner
    };
    frame.render_widget(
        Paragraph::new(Line::styled(
            if figures {
                format!(
                    "What the figures mean (on the {} screen: bright)",
                    screen.title()
                )
            } else {
                format!("On the {} screen (dimmed: elsewhere)", screen.title())
            },
            theme::dim(),
        )),
        head,
    );
    let body = Rect {
        y: head.y + head.height,
        height: page.rows,
        ..inner
    };
    let mut x = body.x;
    for column in &page.columns {
        let lines: Vec<Line> = column
            .iter()
            .skip(scroll as usize)
            .take(page.rows as usize)
            .map(|l| line(l, &page))
            .collect();
        let width = page
            .column_width
            .min((body.x + body.width).saturating_sub(x));
        frame.render_widget(Paragraph::new(lines), Rect { x, width, ..body });
        x += page.column_width + GAP;
    }
    let mouse = Rect {
        y: body.y + body.height + 1,
        height: (inner.y + inner.height).saturating_sub(body.y + body.height + 1),
        ..inner
    };
    frame.render_widget(
        Paragraph::new(
            page.mouse
                .iter()
                .map(|l| Line::styled(l.as_str(), theme::dim()))
                .collect::<Vec<_>>(),
        ),
        mouse,
    );
}

fn line<'a>(l: &'a help::Line, page: &Page) -> Line<'a> {
    let plain = |here: bool| if here { Style::default() } else { theme::dim() };
    match l {
        help::Line::Section { text, here } => Line::styled(
            text.as_str(),
            if *here { theme::header() } else { theme::dim() },
        ),
        help::Line::Entry { keys, text, here } => Line::from(vec![
            Span::styled(
                format!(
                    "{:indent$}{keys:>width$}{:gap$}",
                    "",
                    "",
                    indent = KEY_INDENT,
                    width = page.key_width,
                    gap = KEY_GAP
                ),
                if *here { theme::key() } else { theme::dim() },
            ),
            Span::styled(text.as_str(), plain(*here)),
        ]),
        help::Line::Blank => Line::default(),
    }
}
