//! What the operator can do ([`Action`]) and the one key table ([`BINDINGS`]) that maps keys to
//! actions and feeds the footer hints and the `?` help, so the three cannot drift apart.
//!
//! This module only names and looks up; handlers live in `app`, drawing in `ui`.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

pub use super::other::{OtherKind, Switch};

/// Everything a key can ask for; handlers match on these, never on key codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    Help,
    Back,
    Enter,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    /// Previous/next referent of the selected frame or list entry.
    Left,
    Right,
    NextTab,
    PrevTab,
    /// Mark or unmark the selected thread for the release of a set.
    Mark,
    ClearMarks,
    /// Open the cancel confirmation for the selected thread (live agents only).
    Cancel,
    /// In the cancel dialog: send the real cancel.
    Confirm,
    Filter,
    /// Sort by the n-th column (1-based); again reverses.
    Sort(u8),
    Refresh,
    AutoRefresh,
    ExactBytes,
    /// Open one of the other views (units, leaks, growth, ages).
    Open(OtherKind),
    /// Change what the units or ages view asks for.
    Switch(Switch),
}

/// The screens, for saying where a binding works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    Threads,
    Release,
    Sites,
    Frames,
    Group,
    Objects,
    Object,
    Units,
    Leaks,
    Growth,
    Ages,
}

impl Screen {
    /// Every screen, in the enum's order.
    pub const ALL: [Screen; 11] = [
        Screen::Threads,
        Screen::Release,
        Screen::Sites,
        Screen::Frames,
        Screen::Group,
        Screen::Objects,
        Screen::Object,
        Screen::Units,
        Screen::Leaks,
        Screen::Growth,
        Screen::Ages,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Screen::Threads => "Threads",
            Screen::Release => "Release",
            Screen::Sites => "Sites",
            Screen::Frames => "Frames",
            Screen::Group => "Group",
            Screen::Objects => "Objects",
            Screen::Object => "Object",
            Screen::Units => "Units",
            Screen::Leaks => "Leaks",
            Screen::Growth => "Growth",
            Screen::Ages => "Ages",
        }
    }
}

/// One row of the key table.
#[derive(Debug)]
pub struct Binding {
    pub keys: &'static [KeyCode],
    /// How the keys are written in the footer and the help.
    pub shown: &'static str,
    pub action: Action,
    pub help: &'static str,
    /// Short form for the footer; `None` keeps the binding out of the footer.
    pub hint: Option<&'static str>,
    /// Where it works; empty: everywhere.
    pub screens: &'static [Screen],
}

const LISTS: &[Screen] = &[
    Screen::Threads,
    Screen::Release,
    Screen::Sites,
    Screen::Frames,
    Screen::Objects,
    Screen::Units,
    Screen::Leaks,
    Screen::Growth,
    Screen::Ages,
];
const HOME: &[Screen] = &[Screen::Threads, Screen::Release, Screen::Sites];
const DIGITS: &[KeyCode] = &[
    KeyCode::Char('1'),
    KeyCode::Char('2'),
    KeyCode::Char('3'),
    KeyCode::Char('4'),
    KeyCode::Char('5'),
    KeyCode::Char('6'),
    KeyCode::Char('7'),
    KeyCode::Char('8'),
    KeyCode::Char('9'),
];

/// The key table. Order is the order of the footer and of the help.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: &[KeyCode::Enter],
        shown: "Enter",
        action: Action::Enter,
        help: "open the selected row (thread → frames → group → objects → object)",
        hint: Some("open"),
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Esc, KeyCode::Backspace],
        shown: "Esc",
        action: Action::Back,
        help: "back to the previous screen, its selection kept",
        hint: Some("back"),
        screens: &[
            Screen::Frames,
            Screen::Group,
            Screen::Objects,
            Screen::Object,
            Screen::Units,
            Screen::Leaks,
            Screen::Growth,
            Screen::Ages,
        ],
    },
    Binding {
        keys: &[KeyCode::Tab],
        shown: "Tab",
        action: Action::NextTab,
        help: "next tab: threads, release ranking, allocation sites",
        hint: Some("tab"),
        screens: HOME,
    },
    Binding {
        keys: &[KeyCode::BackTab],
        shown: "S-Tab",
        action: Action::PrevTab,
        help: "previous tab",
        hint: None,
        screens: HOME,
    },
    Binding {
        keys: &[KeyCode::Char(' ')],
        shown: "Space",
        action: Action::Mark,
        help: "mark/unmark the thread; the release of the marked set is computed exactly",
        hint: Some("mark"),
        screens: &[Screen::Threads, Screen::Release],
    },
    Binding {
        keys: &[KeyCode::Char('x')],
        shown: "x",
        action: Action::ClearMarks,
        help: "clear the marks",
        hint: None,
        screens: &[Screen::Threads, Screen::Release],
    },
    Binding {
        keys: &[KeyCode::Char('c')],
        shown: "c",
        action: Action::Cancel,
        help: "cancel the thread, after a confirmation with the policy's verdict",
        hint: Some("cancel"),
        screens: &[Screen::Threads, Screen::Release],
    },
    Binding {
        keys: &[KeyCode::Left, KeyCode::Char('h')],
        shown: "←/→",
        action: Action::Left,
        help: "choose the referent group Enter opens",
        hint: Some("referent"),
        screens: &[Screen::Frames],
    },
    Binding {
        keys: &[KeyCode::Right, KeyCode::Char('l')],
        shown: "→",
        action: Action::Right,
        help: "next referent group",
        hint: None,
        screens: &[Screen::Frames],
    },
    Binding {
        keys: &[
            KeyCode::Char('u'),
            KeyCode::Char('L'),
            KeyCode::Char('w'),
            KeyCode::Char('A'),
        ],
        shown: "u/L/w/A",
        action: Action::Open(OtherKind::Units),
        help: "open a view: allocation units (u), leaks (L), growth (w), ages (A)",
        hint: Some("views"),
        screens: HOME,
    },
    Binding {
        keys: &[KeyCode::Char('f')],
        shown: "f",
        action: Action::Switch(Switch::Granularity),
        help: "units per library, function or thread",
        hint: Some("unit"),
        screens: &[Screen::Units],
    },
    Binding {
        keys: &[KeyCode::Char('p')],
        shown: "p",
        action: Action::Switch(Switch::Position),
        help: "unit of a stack: outermost, innermost, or every one on it (inclusive)",
        hint: Some("position"),
        screens: &[Screen::Units],
    },
    Binding {
        keys: &[KeyCode::Char('c')],
        shown: "c",
        action: Action::Switch(Switch::Charge),
        help: "frees charged to the allocating unit or to the freeing one",
        hint: Some("charge"),
        screens: &[Screen::Units],
    },
    Binding {
        keys: &[KeyCode::Char('t')],
        shown: "t",
        action: Action::Switch(Switch::AgeScope),
        help: "ages per allocation site or per thread",
        hint: Some("sites/threads"),
        screens: &[Screen::Ages],
    },
    Binding {
        keys: &[KeyCode::Char('o')],
        shown: "o",
        action: Action::Switch(Switch::AgeList),
        help: "the age histogram or the oldest survivors",
        hint: Some("oldest"),
        screens: &[Screen::Ages],
    },
    Binding {
        keys: &[KeyCode::Char('/')],
        shown: "/",
        action: Action::Filter,
        help: "fuzzy filter the list (Enter keeps it, Esc clears it)",
        hint: Some("filter"),
        screens: LISTS,
    },
    Binding {
        keys: DIGITS,
        shown: "1-9",
        action: Action::Sort(0),
        help: "sort by the n-th column; the same key again reverses",
        hint: Some("sort"),
        screens: LISTS,
    },
    Binding {
        keys: &[KeyCode::Char('r')],
        shown: "r",
        action: Action::Refresh,
        help: "take a new snapshot (live agents only)",
        hint: Some("snapshot"),
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Char('a')],
        shown: "a",
        action: Action::AutoRefresh,
        help: "toggle automatic snapshots (interval: --refresh)",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Char('b')],
        shown: "b",
        action: Action::ExactBytes,
        help: "sizes in exact bytes / human units",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Up, KeyCode::Char('k')],
        shown: "↑/k",
        action: Action::Up,
        help: "move up",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Down, KeyCode::Char('j')],
        shown: "↓/j",
        action: Action::Down,
        help: "move down",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::PageUp],
        shown: "PgUp",
        action: Action::PageUp,
        help: "one screen up",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::PageDown],
        shown: "PgDn",
        action: Action::PageDown,
        help: "one screen down",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Home, KeyCode::Char('g')],
        shown: "Home/g",
        action: Action::Top,
        help: "first row",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::End, KeyCode::Char('G')],
        shown: "End/G",
        action: Action::Bottom,
        help: "last row (pages load as needed)",
        hint: None,
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Char('?')],
        shown: "?",
        action: Action::Help,
        help: "this help; Tab in it: what the figures and columns mean",
        hint: Some("help"),
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Char('q')],
        shown: "q",
        action: Action::Quit,
        help: "quit",
        hint: Some("quit"),
        screens: &[],
    },
];

/// The keys of the cancel dialog, which takes every key while open; the dialog shows them.
pub const CANCEL_DIALOG: &[Binding] = &[
    Binding {
        keys: &[KeyCode::Char('y'), KeyCode::Enter],
        shown: "y/Enter",
        action: Action::Confirm,
        help: "cancel the thread",
        hint: Some("cancel the thread"),
        screens: &[],
    },
    Binding {
        keys: &[KeyCode::Char('n'), KeyCode::Esc],
        shown: "n/Esc",
        action: Action::Back,
        help: "close, sending nothing more",
        hint: Some("close"),
        screens: &[],
    },
];

/// The action a key asks for while the cancel dialog is open. Ctrl-C still quits.
pub fn dialog_action(key: KeyEvent) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return (key.code == KeyCode::Char('c')).then_some(Action::Quit);
    }
    CANCEL_DIALOG
        .iter()
        .find(|b| b.keys.contains(&key.code))
        .map(|b| b.action)
}

impl Binding {
    pub fn applies(&self, screen: Screen) -> bool {
        self.screens.is_empty() || self.screens.contains(&screen)
    }

    /// Whether it asks a live agent for something (a snapshot, a cancel): a snapshot file or a
    /// recording cannot do it, so the footer does not offer it there.
    pub fn live_only(&self) -> bool {
        matches!(
            self.action,
            Action::Cancel | Action::Refresh | Action::AutoRefresh
        )
    }
}

/// The action a key asks for on `screen`, if any. Ctrl-C always quits.
pub fn action_for(key: KeyEvent, screen: Screen) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return (key.code == KeyCode::Char('c')).then_some(Action::Quit);
    }
    let binding = BINDINGS
        .iter()
        .find(|b| b.applies(screen) && b.keys.contains(&key.code))?;
    Some(match (binding.action, key.code) {
        (Action::Sort(_), KeyCode::Char(d)) => Action::Sort(d as u8 - b'0'),
        (Action::Open(_), KeyCode::Char(c)) => Action::Open(OtherKind::from_key(c)?),
        (action, _) => action,
    })
}

/// The footer's hints for `screen` on a live agent, in table order.
#[cfg(test)]
pub fn hints(screen: Screen) -> impl Iterator<Item = (&'static str, &'static str)> {
    live_hints(screen, true)
}

/// The footer's hints for `screen`, without what only a live agent can do when `live` is false.
pub fn live_hints(
    screen: Screen,
    live: bool,
) -> impl Iterator<Item = (&'static str, &'static str)> {
    BINDINGS
        .iter()
        .filter(move |b| b.applies(screen) && (live || !b.live_only()))
        .filter_map(|b| b.hint.map(|h| (b.shown, h)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_map_to_actions_where_they_apply() {
        assert_eq!(
            action_for(key(KeyCode::Char('q')), Screen::Object),
            Some(Action::Quit)
        );
        assert_eq!(
            action_for(key(KeyCode::Char('3')), Screen::Threads),
            Some(Action::Sort(3))
        );
        assert_eq!(action_for(key(KeyCode::Char('3')), Screen::Group), None);
        assert_eq!(
            action_for(key(KeyCode::Char(' ')), Screen::Release),
            Some(Action::Mark)
        );
        assert_eq!(action_for(key(KeyCode::Char(' ')), Screen::Frames), None);
        assert_eq!(
            action_for(key(KeyCode::Char('c')), Screen::Release),
            Some(Action::Cancel)
        );
        assert_eq!(action_for(key(KeyCode::Char('c')), Screen::Sites), None);
        assert_eq!(dialog_action(key(KeyCode::Enter)), Some(Action::Confirm));
        assert_eq!(dialog_action(key(KeyCode::Esc)), Some(Action::Back));
        assert_eq!(dialog_action(key(KeyCode::Char('q'))), None);
        assert_eq!(
            action_for(
                KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
                Screen::Frames
            ),
            Some(Action::Quit)
        );
    }

    #[test]
    fn every_key_is_bound_once_per_screen() {
        for screen in Screen::ALL {
            let mut seen = Vec::new();
            for b in BINDINGS.iter().filter(|b| b.applies(screen)) {
                for k in b.keys {
                    assert!(!seen.contains(k), "{k:?} bound twice on {screen:?}");
                    seen.push(*k);
                }
            }
        }
    }

    #[test]
    fn the_view_keys_open_their_view_from_home_and_switch_on_it() {
        for (c, kind) in [
            ('u', OtherKind::Units),
            ('L', OtherKind::Leaks),
            ('w', OtherKind::Growth),
            ('A', OtherKind::Ages),
        ] {
            assert_eq!(
                action_for(key(KeyCode::Char(c)), Screen::Sites),
                Some(Action::Open(kind))
            );
            assert_eq!(action_for(key(KeyCode::Char(c)), Screen::Object), None);
        }
        assert_eq!(
            action_for(key(KeyCode::Char('c')), Screen::Units),
            Some(Action::Switch(Switch::Charge))
        );
        assert_eq!(
            action_for(key(KeyCode::Char('t')), Screen::Ages),
            Some(Action::Switch(Switch::AgeScope))
        );
        assert_eq!(action_for(key(KeyCode::Char('t')), Screen::Units), None);
        assert!(hints(Screen::Threads).any(|(k, h)| k == "u/L/w/A" && h == "views"));
        assert!(hints(Screen::Units).any(|(_, h)| h == "position"));
    }

    #[test]
    fn the_footer_comes_from_the_table() {
        let threads: Vec<_> = hints(Screen::Threads).map(|(_, h)| h).collect();
        assert!(threads.contains(&"mark") && threads.contains(&"quit"));
        assert!(!hints(Screen::Group).any(|(_, h)| h == "mark"));
    }
}
