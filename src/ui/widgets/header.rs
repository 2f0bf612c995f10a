//! The header: what is being looked at (process, source, snapshot), the heap's figures, and a
//! sparkline of live bytes from the agent's pushed counters.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};

use crate::app::{App, Connection};
use crate::size::human;
use crate::ui::theme;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [who, figures, spark] = Layout::vertical([Constraint::Length(1); 3]).areas(area);

    let mut line = vec![Span::styled("heaptui ", theme::title())];
    match &app.process {
        Some(p) => line.push(Span::raw(format!("· pid {} {} ", p.pid, p.command))),
        None => line.push(Span::raw(format!("· {} ", app.description))),
    }
    line.push(Span::styled(
        match (&app.connection, app.live) {
            (Connection::Connecting, _) => "· connecting… ".to_string(),
            (Connection::Connected, true) => match &app.process {
                Some(p) if !p.agent_version.is_empty() => {
                    format!("· live (agent {}) ", p.agent_version)
                }
                _ => "· live ".to_string(),
            },
            (Connection::Connected, false) => "· snapshot file ".to_string(),
            (Connection::Disconnected { .. } | Connection::Closed, _) => "· STALE ".to_string(),
        },
        if app.stale {
            theme::error()
        } else {
            theme::dim()
        },
    ));
    if let Some(s) = &app.snapshot {
        let when = if s.taken_unix_ms == 0 {
            "from the file".to_string()
        } else {
            format!("{} ago", age(app.now_ms.saturating_sub(s.taken_unix_ms)))
        };
        line.push(Span::raw(format!("· snapshot #{} {when}", s.snapshot.0)));
        if s.pause_us > 0 {
            line.push(Span::raw(format!(
                ", pause {:.1} ms",
                s.pause_us as f64 / 1000.0
            )));
        }
    }
    if app.auto_refresh {
        line.push(Span::styled(" · auto-refresh", theme::shared()));
    }
    frame.render_widget(Paragraph::new(Line::from(line)), who);

    let mut line = Vec::new();
    if let Some(s) = &app.snapshot {
        line.push(Span::raw(format!(
            "snapshot heap {} in {} objects, {} threads · ",
            human(s.totals.bytes),
            s.totals.objects,
            s.threads
        )));
        line.push(Span::styled(
            format!("leaks {}", human(s.leaks.bytes)),
            if s.leaks.bytes > 0 {
                theme::error()
            } else {
                theme::dim()
            },
        ));
        line.push(Span::raw(format!(
            " · global-only {}",
            human(s.totals.global_only_bytes)
        )));
    } else {
        line.push(Span::styled("waiting for a snapshot…", theme::dim()));
    }
    frame.render_widget(Paragraph::new(Line::from(line)), figures);

    if app.history.is_empty() {
        let text = if app.live {
            "live bytes: waiting for the agent's counters…"
        } else {
            "live bytes: no live counters in a snapshot file"
        };
        frame.render_widget(Paragraph::new(Span::styled(text, theme::dim())), spark);
    } else {
        // The agent's live counters, then the sparkline of live bytes in the room left.
        let mut text = vec![Span::raw("live ")];
        if let Some(c) = &app.counters {
            text.push(Span::styled(human(c.live_bytes), theme::total()));
            text.push(Span::raw(format!(
                " in {} blocks · allocated {} · peak {} ",
                c.live_blocks,
                human(c.allocated_bytes),
                human(c.peak_live_bytes)
            )));
        }
        let text = Line::from(text);
        let width = (text.width() as u16).min(spark.width.saturating_sub(16));
        let [label, graph] =
            Layout::horizontal([Constraint::Length(width), Constraint::Fill(1)]).areas(spark);
        frame.render_widget(Paragraph::new(text), label);
        // The newest samples, right-aligned in the space there is.
        let width = graph.width as usize;
        let data: Vec<u64> = app
            .history
            .iter()
            .rev()
            .take(width)
            .rev()
            .copied()
            .collect();
        frame.render_widget(Sparkline::default().data(&data).style(theme::bar()), graph);
    }
}

/// `42 s`, `3 min`, `2 h`.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}
