//! The `?` help laid out for a terminal size, as plain data: the key table ([`BINDINGS`])
//! grouped by the screens each binding works on, word-wrapped, in two columns when the
//! terminal is wide enough, and how far it can scroll when it is still taller than the
//! terminal. The drawing code (`ui::popups::help`) paints this page; the key handling uses
//! the same page to know whether ↑/↓ scroll the help or close it, so the two agree.
//!
//! Geometry and text only: nothing here draws, and nothing here changes the key table.

use ratatui::layout::Rect;

use super::action::{BINDINGS, Binding, Screen};

/// A column narrower than this wraps most help texts twice: one column is used instead.
const MIN_COLUMN: u16 = 48;
/// Blank columns between two columns.
pub const GAP: u16 = 3;
/// The popup never grows wider than this (long lines read badly).
const MAX_WIDTH: u16 = 150;
/// Blank columns before the keys (section titles start at the column's edge).
pub const KEY_INDENT: usize = 1;
/// Blank columns between the keys and their text.
pub const KEY_GAP: usize = 2;

/// What the help says about the mouse (not in the key table: it has no keys).
pub const MOUSE: &str =
    "Mouse: the wheel scrolls; a click selects a row, a click on the selected row opens it.";

/// One line of a help column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// Where the bindings under it work (a piece of it, when it wraps).
    Section {
        text: String,
        here: bool,
    },
    /// A binding's keys (blank on its continuation lines) and a piece of its text.
    Entry {
        keys: &'static str,
        text: String,
        here: bool,
    },
    Blank,
}

/// The help as drawn at one terminal size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The popup's rectangle, border included.
    pub area: Rect,
    /// The columns, left to right, each as tall as it needs.
    pub columns: Vec<Vec<Line>>,
    pub column_width: u16,
    pub key_width: usize,
    /// The mouse line, wrapped to the popup's width.
    pub mouse: Vec<String>,
    /// Rows of the popup the columns are shown in.
    pub rows: u16,
    /// How many rows the columns can scroll by (0: everything is visible).
    pub max_scroll: u16,
}

impl Page {
    /// The tallest column's height.
    pub fn height(&self) -> usize {
        self.columns.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// Rows above the columns: the "On the … screen" line and a blank one.
pub const HEAD_ROWS: u16 = 2;

/// The help for `screen` in a terminal of `size`.
pub fn page(size: Rect, screen: Screen) -> Page {
    // A margin of two columns each side, unless the terminal is too narrow to spare it.
    let width = if size.width > 24 {
        (size.width - 4).min(MAX_WIDTH)
    } else {
        size.width
    };
    let inner = width.saturating_sub(2);
    let key_width = BINDINGS
        .iter()
        .map(|b| b.shown.chars().count())
        .max()
        .unwrap_or(0);
    let sections = sections();
    let two = (inner.saturating_sub(GAP)) / 2;
    let (columns, column_width) = if two >= MIN_COLUMN {
        let laid: Vec<Vec<Line>> = sections
            .iter()
            .map(|s| section_lines(s, screen, two, key_width))
            .collect();
        (split_in_two(laid), two)
    } else {
        let one: Vec<Line> = sections
            .iter()
            .flat_map(|s| section_lines(s, screen, inner, key_width))
            .collect();
        (vec![trim_blank(one)], inner)
    };
    let mouse = wrap(MOUSE, inner as usize);
    let tallest = columns.iter().map(Vec::len).max().unwrap_or(0) as u16;
    // Border, head, columns, a blank row, the mouse line(s).
    let fixed = 2 + HEAD_ROWS + 1 + mouse.len() as u16;
    let height = (fixed + tallest).min(size.height);
    let rows = height.saturating_sub(fixed);
    let area = Rect {
        x: size.x + (size.width.saturating_sub(width)) / 2,
        y: size.y + (size.height.saturating_sub(height)) / 2,
        width,
        height,
    };
    Page {
        area,
        columns,
        column_width,
        key_width,
        mouse,
        rows,
        max_scroll: tallest.saturating_sub(rows),
    }
}

/// Bindings that work on the same screens, in the key table's order of first appearance.
struct Section {
    screens: &'static [Screen],
    bindings: Vec<&'static Binding>,
}

fn sections() -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for b in BINDINGS {
        match out.iter_mut().find(|s| s.screens == b.screens) {
            Some(s) => s.bindings.push(b),
            None => out.push(Section {
                screens: b.screens,
                bindings: vec![b],
            }),
        }
    }
    out
}

/// A section's lines at `width`, with a blank line after it.
fn section_lines(s: &Section, screen: Screen, width: u16, key_width: usize) -> Vec<Line> {
    let here = s.screens.is_empty() || s.screens.contains(&screen);
    let names = |screens: &mut dyn Iterator<Item = &Screen>| {
        screens.map(|s| s.title()).collect::<Vec<_>>().join(", ")
    };
    let title = if s.screens.is_empty() {
        "Everywhere".to_string()
    } else if s.screens.len() * 2 > Screen::ALL.len() {
        // Shorter by what it leaves out (most bindings of a list work on most screens).
        let mut others = Screen::ALL.iter().filter(|a| !s.screens.contains(a));
        format!("Everywhere but {}", names(&mut others))
    } else {
        names(&mut s.screens.iter())
    };
    let mut lines: Vec<Line> = wrap(&title, width as usize)
        .into_iter()
        .map(|text| Line::Section { text, here })
        .collect();
    let text_width = (width as usize)
        .saturating_sub(KEY_INDENT + key_width + KEY_GAP)
        .max(8);
    for b in &s.bindings {
        for (i, text) in wrap(b.help, text_width).into_iter().enumerate() {
            lines.push(Line::Entry {
                keys: if i == 0 { b.shown } else { "" },
                text,
                here,
            });
        }
    }
    lines.push(Line::Blank);
    lines
}

/// Two columns of whole sections, split where the taller one is shortest.
fn split_in_two(sections: Vec<Vec<Line>>) -> Vec<Vec<Line>> {
    let heights: Vec<usize> = sections.iter().map(Vec::len).collect();
    let total: usize = heights.iter().sum();
    let mut best = (usize::MAX, sections.len());
    let mut left = 0;
    for (at, h) in heights.iter().enumerate() {
        let taller = left.max(total - left);
        if taller < best.0 {
            best = (taller, at);
        }
        left += h;
    }
    let mut sections = sections;
    let right: Vec<Line> = sections.split_off(best.1).into_iter().flatten().collect();
    let left: Vec<Line> = sections.into_iter().flatten().collect();
    vec![trim_blank(left), trim_blank(right)]
}

fn trim_blank(mut lines: Vec<Line>) -> Vec<Line> {
    while lines.last() == Some(&Line::Blank) {
        lines.pop();
    }
    lines
}

/// `text` broken at spaces into lines of at most `width` characters (a word longer than
/// `width` is cut). Every glyph the help uses is one column wide, so characters are columns.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        if len > 0 && len + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
            len = 0;
        }
        while word.len() > width {
            let rest = word.split_off(width);
            lines.push(word.into_iter().collect());
            word = rest;
        }
        if len > 0 {
            line.push(' ');
            len += 1;
        }
        len += word.len();
        line.extend(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(width: u16, height: u16) -> Rect {
        Rect::new(0, 0, width, height)
    }

    /// Every binding's keys and the whole of its help text, as the page shows them.
    fn shown(page: &Page) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        for column in &page.columns {
            for line in column {
                if let Line::Entry { keys, text, .. } = line {
                    if keys.is_empty() {
                        let last = out.last_mut().expect("a continuation follows its keys");
                        last.1.push(' ');
                        last.1.push_str(text);
                    } else {
                        out.push((keys, text.clone()));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_cuts_only_long_words() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("abcdefgh ij", 3), ["abc", "def", "gh", "ij"]);
        assert_eq!(wrap("", 5), [""]);
        assert_eq!(wrap("fits exactly", 12), ["fits exactly"]);
    }

    #[test]
    fn every_binding_is_on_the_page_whole_at_every_size() {
        for (w, h) in [(120, 40), (120, 36), (80, 24), (200, 60), (60, 20)] {
            let page = page(size(w, h), Screen::Threads);
            let mut expected: Vec<(&str, String)> = BINDINGS
                .iter()
                .map(|b| (b.shown, b.help.to_string()))
                .collect();
            let mut got = shown(&page);
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "{w}x{h}");
            for column in &page.columns {
                for line in column {
                    let width = match line {
                        Line::Section { text, .. } => text.chars().count(),
                        Line::Entry { text, .. } => {
                            KEY_INDENT + page.key_width + KEY_GAP + text.chars().count()
                        }
                        Line::Blank => 0,
                    };
                    assert!(width <= page.column_width as usize, "{w}x{h}: {line:?}");
                }
            }
            let columns = page.columns.len() as u16;
            assert!(
                columns * page.column_width + (columns - 1) * GAP + 2 <= page.area.width,
                "{w}x{h}"
            );
            assert!(page.area.width <= w && page.area.height <= h, "{w}x{h}");
        }
    }

    #[test]
    fn two_columns_fit_without_scrolling_at_120_columns() {
        for h in [36, 40] {
            let page = page(size(120, h), Screen::Threads);
            assert_eq!(page.columns.len(), 2);
            assert_eq!(page.max_scroll, 0, "120x{h}: {} rows", page.height());
        }
    }

    #[test]
    fn a_small_terminal_gets_one_column_that_scrolls() {
        let page = page(size(80, 24), Screen::Units);
        assert_eq!(page.columns.len(), 1);
        assert_eq!(page.area.height, 24);
        assert!(page.max_scroll > 0);
        assert_eq!(
            page.rows as usize + page.max_scroll as usize,
            page.height(),
            "scrolling to the end shows the last line"
        );
    }

    #[test]
    fn sections_say_where_and_dim_what_does_not_work_here() {
        let page = page(size(120, 40), Screen::Units);
        let lines: Vec<&Line> = page.columns.iter().flatten().collect();
        let section = |name: &str| {
            lines
                .iter()
                .find_map(|l| match l {
                    Line::Section { text, here } if text == name => Some(*here),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("no section {name}"))
        };
        assert!(section("Everywhere"));
        assert!(section("Units"));
        assert!(section("Everywhere but Threads, Release, Sites"));
        assert!(section("Everywhere but Group, Object"));
        assert!(!section("Ages"));
        assert!(!section("Threads, Release"));
        assert!(!section("Threads, Release, Sites"));
    }

    /// Fails to compile when a screen is added, until it is added to [`Screen::ALL`] too
    /// (the help names sections by the screens they leave out of it).
    #[test]
    fn all_screens_lists_every_screen() {
        for s in Screen::ALL {
            match s {
                Screen::Threads
                | Screen::Release
                | Screen::Sites
                | Screen::Frames
                | Screen::Group
                | Screen::Objects
                | Screen::Object
                | Screen::Units
                | Screen::Leaks
                | Screen::Growth
                | Screen::Ages => {}
            }
        }
        let mut titles: Vec<&str> = Screen::ALL.iter().map(|s| s.title()).collect();
        titles.sort();
        titles.dedup();
        assert_eq!(titles.len(), Screen::ALL.len());
    }
}
