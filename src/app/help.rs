//! The `?` help laid out for a terminal size, as plain data: the key table ([`BINDINGS`])
//! grouped by the screens each binding works on (or, on its second page, what the figures and
//! columns mean: [`FIGURES`]), word-wrapped, in two columns when the
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

/// What the figures and columns mean: the help's second page (`Tab` in the help), in the
/// words of docs/reference.md §3 and §8. Each section names where its terms are shown.
pub const FIGURES: &[(&str, &[(&str, &str)])] = &[
    (
        "Threads, Release",
        &[
            (
                "PROPRIETARY",
                "bytes only this thread reaches: what ending it alone frees (RELEASE ALONE)",
            ),
            (
                "SHARED",
                "bytes it reaches that other threads or the globals reach too",
            ),
            ("TOTAL", "proprietary + shared"),
            ("FRAMES", "frames on its stack at the snapshot"),
            (
                "STATE",
                "stopped for the snapshot, or not stoppable (with why): then its figures are what could be read",
            ),
        ],
    ),
    (
        "Frames, Group",
        &[
            ("PROPRIETARY", "bytes only this frame reaches"),
            (
                "FRAME-SHARED",
                "F groups it refers to: bytes shared with other frames of its thread",
            ),
            (
                "THREAD-SHARED",
                "T groups it refers to: bytes shared with other threads",
            ),
            (
                "F T G",
                "a group shared by frames of one thread, by threads, by the globals only",
            ),
            (
                "developed",
                "groups reached only through another group's members, not directly",
            ),
        ],
    ),
    (
        "Header",
        &[
            (
                "snapshot #N",
                "the snapshot the figures come from, and how old it is (r: a new one)",
            ),
            (
                "live",
                "bytes live now, from the agent's counters (they move on their own)",
            ),
            ("alloc", "bytes allocated since the program started"),
            (
                "util",
                "live ÷ allocated: the share of all bytes ever allocated that are still live",
            ),
            ("peak", "the most bytes ever live at once"),
            ("leaks", "bytes no root reaches (Leaks: L)"),
            ("global-only", "bytes only the globals reach"),
        ],
    ),
    (
        "Units, Leaks, Growth, Ages",
        &[
            ("LIVE", "bytes live now, allocated by the unit or site"),
            (
                "MIN MAX",
                "the lowest and highest live bytes of the unit over time",
            ),
            (
                "DEFINITELY",
                "unreachable: one block per lost structure no other lost block points into",
            ),
            (
                "INDIRECTLY",
                "unreachable: the other blocks of a lost structure",
            ),
            (
                "POSSIBLY",
                "reachable, but only through pointers into the middle of blocks",
            ),
            ("AGE n", "blocks that survived n snapshots"),
            (
                "FLAG",
                "growing over the last snapshots in a row, or most of the live bytes",
            ),
        ],
    ),
];

/// The help for `screen` in a terminal of `size`: its keys, or with `figures` what the figures
/// and columns mean.
pub fn page(size: Rect, screen: Screen, figures: bool) -> Page {
    // A margin of two columns each side, unless the terminal is too narrow to spare it.
    let width = if size.width > 24 {
        (size.width - 4).min(MAX_WIDTH)
    } else {
        size.width
    };
    let inner = width.saturating_sub(2);
    let sections = if figures {
        figure_sections(screen)
    } else {
        sections(screen)
    };
    let key_width = sections
        .iter()
        .flat_map(|s| s.entries.iter())
        .map(|(keys, _)| keys.chars().count())
        .max()
        .unwrap_or(0);
    let two = (inner.saturating_sub(GAP)) / 2;
    let (columns, column_width) = if two >= MIN_COLUMN {
        let laid: Vec<Vec<Line>> = sections
            .iter()
            .map(|s| section_lines(s, two, key_width))
            .collect();
        (split_in_two(laid), two)
    } else {
        let one: Vec<Line> = sections
            .iter()
            .flat_map(|s| section_lines(s, inner, key_width))
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

/// Entries under one title: bindings that work on the same screens, or a screen's terms.
struct Section {
    title: String,
    /// Whether they concern the screen the help was opened on (the others are dimmed).
    here: bool,
    entries: Vec<(&'static str, &'static str)>,
}

/// The bindings grouped by the screens they work on, in the key table's order of first
/// appearance.
fn sections(screen: Screen) -> Vec<Section> {
    let mut by_screens: Vec<(&'static [Screen], Vec<&'static Binding>)> = Vec::new();
    for b in BINDINGS {
        match by_screens.iter_mut().find(|s| s.0 == b.screens) {
            Some(s) => s.1.push(b),
            None => by_screens.push((b.screens, vec![b])),
        }
    }
    by_screens
        .into_iter()
        .map(|(screens, bindings)| Section {
            title: screens_title(screens),
            here: screens.is_empty() || screens.contains(&screen),
            entries: bindings.iter().map(|b| (b.shown, b.help)).collect(),
        })
        .collect()
}

fn figure_sections(screen: Screen) -> Vec<Section> {
    FIGURES
        .iter()
        .map(|(title, terms)| Section {
            title: (*title).to_string(),
            here: *title == "Header" || title.contains(screen.title()),
            entries: terms.to_vec(),
        })
        .collect()
}

/// Where bindings work: `Everywhere`, `Everywhere but …`, or the screens.
fn screens_title(screens: &[Screen]) -> String {
    let names = |screens: &mut dyn Iterator<Item = &Screen>| {
        screens.map(|s| s.title()).collect::<Vec<_>>().join(", ")
    };
    if screens.is_empty() {
        "Everywhere".to_string()
    } else if screens.len() * 2 > Screen::ALL.len() {
        // Shorter by what it leaves out (most bindings of a list work on most screens).
        let mut others = Screen::ALL.iter().filter(|a| !screens.contains(a));
        format!("Everywhere but {}", names(&mut others))
    } else {
        names(&mut screens.iter())
    }
}

/// A section's lines at `width`, with a blank line after it.
fn section_lines(s: &Section, width: u16, key_width: usize) -> Vec<Line> {
    let here = s.here;
    let mut lines: Vec<Line> = wrap(&s.title, width as usize)
        .into_iter()
        .map(|text| Line::Section { text, here })
        .collect();
    let text_width = (width as usize)
        .saturating_sub(KEY_INDENT + key_width + KEY_GAP)
        .max(8);
    for (keys, help) in &s.entries {
        for (i, text) in wrap(help, text_width).into_iter().enumerate() {
            lines.push(Line::Entry {
                keys: if i == 0 { keys } else { "" },
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
            let page = page(size(w, h), Screen::Threads, false);
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
            let page = page(size(120, h), Screen::Threads, false);
            assert_eq!(page.columns.len(), 2);
            assert_eq!(page.max_scroll, 0, "120x{h}: {} rows", page.height());
        }
    }

    #[test]
    fn a_small_terminal_gets_one_column_that_scrolls() {
        let page = page(size(80, 24), Screen::Units, false);
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
        let page = page(size(120, 40), Screen::Units, false);
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

    #[test]
    fn the_figures_page_explains_every_term_whole_and_fits_at_120_columns() {
        for (w, h) in [(120, 36), (120, 40), (160, 45), (80, 24)] {
            let page = page(size(w, h), Screen::Frames, true);
            let got = shown(&page);
            let expected: Vec<(&str, String)> = FIGURES
                .iter()
                .flat_map(|(_, terms)| terms.iter().map(|(k, t)| (*k, t.to_string())))
                .collect();
            assert_eq!(got, expected, "{w}x{h}");
            if w >= 120 {
                assert_eq!(page.max_scroll, 0, "{w}x{h}: {} rows", page.height());
            } else {
                assert_eq!(page.rows as usize + page.max_scroll as usize, page.height());
            }
        }
        for term in ["developed", "util", "MIN MAX", "STATE"] {
            assert!(
                FIGURES
                    .iter()
                    .any(|(_, t)| t.iter().any(|(k, _)| *k == term)),
                "{term}"
            );
        }
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
