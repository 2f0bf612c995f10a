//! The few styles the screens use, each with a meaning: green is held alone (proprietary),
//! yellow shared, red trouble (leaks, disconnects, refusals), dim what is stale or system code.
//!
//! Styles only: nothing here draws.

use ratatui::style::{Color, Modifier, Style};

use heaptui_protocol::GroupKind;

pub fn title() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub fn header() -> Style {
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
}

/// A grey background, not reverse video: reversed, a bar's `█` turns into a hollow cell and a
/// large figure looks empty. The grey is dark enough for the dim (stale) text to stay legible.
pub fn selected() -> Style {
    Style::new()
        .bg(Color::Indexed(238))
        .add_modifier(Modifier::BOLD)
}

pub fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub fn matched() -> Style {
    Style::new()
        .fg(Color::Yellow)
        .add_modifier(Modifier::UNDERLINED)
}

pub fn filter() -> Style {
    Style::new().fg(Color::Yellow)
}

pub fn alone() -> Style {
    Style::new().fg(Color::Green)
}

pub fn shared() -> Style {
    Style::new().fg(Color::Yellow)
}

pub fn total() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub fn bar() -> Style {
    Style::new().fg(Color::Blue)
}

pub fn error() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

pub fn banner() -> Style {
    Style::new()
        .fg(Color::White)
        .bg(Color::Red)
        .add_modifier(Modifier::BOLD)
}

pub fn key() -> Style {
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
}

pub fn group(kind: GroupKind) -> Style {
    match kind {
        GroupKind::FrameShared => Style::new().fg(Color::Cyan),
        GroupKind::ThreadShared => Style::new().fg(Color::Magenta),
        GroupKind::GlobalOnly => Style::new().fg(Color::Blue),
    }
}
