//! The header: what is being looked at (process, the agent's address, source, snapshot), the
//! heap's figures with the kept peak snapshot and the automatic-snapshot rule, and the live
//! counters (utilization included) beside a chart of live vs allocated bytes (the agent's
//! counter history, then its pushes; a recording's recorded counters).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};

use heaptui_protocol::message::{ProcessInfo, SnapshotRule};

use crate::app::{App, Connection};
use crate::figures::utilization;
use crate::size::human;
use crate::ui::theme;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [who, figures, spark] = Layout::vertical([Constraint::Length(1); 3]).areas(area);

    let mut line = vec![Span::styled("heaptui ", theme::title())];
    match &app.process {
        Some(p) if p.pid != 0 => line.push(Span::raw(format!("· pid {} {} ", p.pid, p.command))),
        _ => line.push(Span::raw(format!("· {} ", app.description))),
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
            (Connection::Connected, false) if app.recording => "· replayed ".to_string(),
            (Connection::Connected, false) => "· snapshot file ".to_string(),
            (Connection::Disconnected { .. } | Connection::Closed, _) => "· STALE ".to_string(),
        },
        if app.stale {
            theme::error()
        } else {
            theme::dim()
        },
    ));
    // After the state: a long path must not push "live"/"STALE" off the line.
    if let Some(address) = &app.address {
        line.push(Span::raw(format!("· {address} ")));
    }
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
    } else if app.recording {
        line.push(Span::styled(
            "a recording has no heap graph: u units · A ages",
            theme::dim(),
        ));
    } else {
        line.push(Span::styled("waiting for a snapshot…", theme::dim()));
    }
    if let Some(p) = &app.process {
        line.extend(peak(p));
    }
    frame.render_widget(Paragraph::new(Line::from(line)), figures);

    let Some(c) = &app.counters else {
        let text = if app.outside {
            "live bytes: no live counters without the agent (captured from outside)"
        } else if app.live {
            "live bytes: waiting for the agent's counters…"
        } else if app.recording {
            "live bytes: replaying…"
        } else {
            "live bytes: no live counters in a snapshot file"
        };
        frame.render_widget(Paragraph::new(Span::styled(text, theme::dim())), spark);
        return;
    };
    // The counters, then the chart of live vs allocated bytes in the room left.
    let text = Line::from(vec![
        Span::raw("live "),
        Span::styled(human(c.live_bytes), theme::total()),
        Span::raw(format!(
            " in {} blocks · allocated {} · util {} · peak {} ",
            c.live_blocks,
            human(c.allocated_bytes),
            utilization(c),
            human(c.peak_live_bytes)
        )),
    ]);
    let width = (text.width() as u16).min(spark.width.saturating_sub(24));
    let [label, graph] =
        Layout::horizontal([Constraint::Length(width), Constraint::Fill(1)]).areas(spark);
    frame.render_widget(Paragraph::new(text), label);
    if app.chart.is_empty() {
        return;
    }
    // Two series, each on its own scale: allocated only grows, live rises and falls.
    let [live_label, live_graph, alloc_label, alloc_graph] = Layout::horizontal([
        Constraint::Length(5),
        Constraint::Fill(1),
        Constraint::Length(7),
        Constraint::Fill(1),
    ])
    .areas(graph);
    frame.render_widget(
        Paragraph::new(Span::styled("live ", theme::total())),
        live_label,
    );
    frame.render_widget(
        Paragraph::new(Span::styled(" alloc ", theme::shared())),
        alloc_label,
    );
    let live = app
        .chart
        .series(live_graph.width as usize, |s| s.live_bytes);
    let allocated = app
        .chart
        .series(alloc_graph.width as usize, |s| s.allocated_bytes);
    frame.render_widget(
        Sparkline::default().data(&live).style(theme::total()),
        live_graph,
    );
    frame.render_widget(
        Sparkline::default().data(&allocated).style(theme::shared()),
        alloc_graph,
    );
}

/// ` · kept peak #4 1.2 MiB · auto ±1.0 MiB`: the kept peak snapshot and the rule that takes
/// the automatic snapshots (`±T`: within T of the true peak; `every N` allocated), nothing
/// when neither is there. Short: it shares the line with the snapshot's figures.
fn peak(p: &ProcessInfo) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    if let Some(s) = &p.peak_snapshot {
        spans.push(Span::raw(format!(
            " · kept peak #{} {}",
            s.snapshot.0,
            human(s.totals.bytes)
        )));
    }
    let rule = match p.snapshot_rule {
        SnapshotRule::Off => None,
        SnapshotRule::EveryBytes(n) => Some(format!("every {}", human(n))),
        SnapshotRule::Tolerance(t) => Some(format!("±{}", human(t))),
    };
    if let Some(rule) = rule {
        spans.push(Span::styled(format!(" · auto {rule}"), theme::dim()));
    }
    spans
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

#[cfg(test)]
mod tests {
    use crate::app::testing::{Harness, fixture};

    #[test]
    fn the_header_names_the_address_attached_to() {
        let mut h = Harness::live(fixture());
        h.pump();
        let first = |h: &Harness| {
            crate::ui::tests::screen(h)
                .lines()
                .next()
                .unwrap()
                .to_string()
        };
        assert!(!first(&h).contains("unix:"), "{}", first(&h));
        h.app.address = Some("unix:/run/user/1000/heaptui/pid-42.sock".into());
        let line = first(&h);
        let at = line
            .find("· unix:/run/user/1000/heaptui/pid-42.sock")
            .unwrap_or_else(|| panic!("{line}"));
        assert!(line.find("· live").is_some_and(|live| live < at), "{line}");
    }
}
