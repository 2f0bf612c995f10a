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
use crate::figures::{count, one_line, utilization};
use crate::size::human;
use crate::ui::theme;

/// The narrowest the two charts are drawn: their labels and a few cells each.
const CHART_MIN_WIDTH: u16 = 20;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [who, figures, spark] = Layout::vertical([Constraint::Length(1); 3]).areas(area);
    let line = fitting(who.width, (0..=3).map(|terse| who_line(app, terse)));
    frame.render_widget(Paragraph::new(line), who);
    let line = fitting(figures.width, (0..=2).map(|terse| figures_line(app, terse)));
    frame.render_widget(Paragraph::new(line), figures);
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
    let counters = |terse: bool| {
        let rest = if terse {
            format!(
                " · alloc {} · util {} · peak {} ",
                human(c.allocated_bytes),
                utilization(c),
                human(c.peak_live_bytes)
            )
        } else {
            format!(
                " in {} · allocated {} · util {} · peak {} ",
                count(c.live_blocks, "block", "blocks"),
                human(c.allocated_bytes),
                utilization(c),
                human(c.peak_live_bytes)
            )
        };
        Line::from(vec![
            Span::raw("live "),
            Span::styled(human(c.live_bytes), theme::total()),
            Span::raw(rest),
        ])
    };
    // The counters, then the chart of live vs allocated bytes in the room left; the chart
    // goes when even the short counters would not leave it its least width.
    let chart = !app.chart.is_empty()
        && counters(true).width() as u16 <= spark.width.saturating_sub(CHART_MIN_WIDTH);
    let room = if chart {
        spark.width.saturating_sub(CHART_MIN_WIDTH)
    } else {
        spark.width
    };
    let text = fitting(room, [counters(false), counters(true)]);
    let width = (text.width() as u16).min(room);
    let [label, graph] =
        Layout::horizontal([Constraint::Length(width), Constraint::Fill(1)]).areas(spark);
    frame.render_widget(Paragraph::new(text), label);
    if !chart {
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

/// The first of `lines` (longest first) that fits in `width` cells, else the last, cut.
fn fitting(width: u16, lines: impl IntoIterator<Item = Line<'static>>) -> Line<'static> {
    let mut last = Line::default();
    for line in lines {
        if line.width() <= width as usize {
            return line;
        }
        last = line;
    }
    last
}

/// What is looked at: the process, the connection, the address, the snapshot. `terse` 1 names
/// the program by its file name, 2 also drops its arguments, the agent's version and the
/// capture's pause and puts the address last, 3 drops the address and the program's own name (a cut address
/// would name a wrong socket).
fn who_line(app: &App, terse: u8) -> Line<'static> {
    let mut line = Vec::new();
    // The separator follows "heaptui": a line that starts without it starts with the pid.
    let lead = if terse < 3 {
        line.push(Span::styled("heaptui ", theme::title()));
        "· "
    } else {
        ""
    };
    match &app.process {
        Some(p) if p.pid != 0 => {
            // A command line with newlines (`python3 -c '…'`) would break the header's line.
            let command = one_line(p.command.clone());
            let command = match terse {
                0 => command,
                1 => short_command(&command),
                // The program alone: its arguments give way to the address.
                _ => short_command(command.split(' ').next().unwrap_or_default()),
            };
            line.push(Span::raw(format!("{lead}pid {} {command} ", p.pid)));
        }
        _ => line.push(Span::raw(format!("{lead}{} ", app.description))),
    }
    line.push(Span::styled(
        match (&app.connection, app.live) {
            (Connection::Connecting, _) => "· connecting… ".to_string(),
            (Connection::Connected, true) => match &app.process {
                Some(p) if !p.agent_version.is_empty() && terse < 2 => {
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
    // After the state: a long path must not push "live"/"STALE" off the line; when even the
    // terse line is too long, it goes last, where the cut falls.
    let address = app.address.as_ref().map(|a| Span::raw(format!("· {a} ")));
    if terse < 2 {
        line.extend(address.clone());
    }
    if let Some(s) = &app.snapshot {
        let when = if s.taken_unix_ms == 0 {
            "from the file".to_string()
        } else {
            format!("{} ago", age(app.now_ms.saturating_sub(s.taken_unix_ms)))
        };
        line.push(Span::raw(format!("· snapshot #{} {when}", s.snapshot.0)));
        if s.pause_us > 0 && terse < 2 {
            line.push(Span::raw(format!(
                ", pause {:.1} ms",
                s.pause_us as f64 / 1000.0
            )));
        }
    }
    if app.auto_refresh {
        line.push(Span::styled(" · auto-refresh", theme::shared()));
    }
    if terse == 2
        && let Some(address) = address
    {
        line.push(Span::raw(" "));
        line.push(address);
    }
    Line::from(line)
}

/// `/tmp/cache/heaptui-demo --port 9` → `heaptui-demo --port 9`: the program by its file name.
fn short_command(command: &str) -> String {
    let (program, args) = command.split_once(' ').unwrap_or((command, ""));
    let name = program.rsplit('/').next().unwrap_or(program);
    if args.is_empty() {
        name.to_string()
    } else {
        format!("{name} {args}")
    }
}

/// The snapshot's figures and the kept peak. `terse` 1 shortens the words, 2 also drops the
/// global-only bytes.
fn figures_line(app: &App, terse: u8) -> Line<'static> {
    let mut line = Vec::new();
    if let Some(s) = &app.snapshot {
        line.push(Span::raw(if terse == 0 {
            format!(
                "snapshot heap {} in {}, {} · ",
                human(s.totals.bytes),
                count(s.totals.objects, "object", "objects"),
                count(s.threads as u64, "thread", "threads")
            )
        } else {
            format!(
                "heap {}, {}, {} · ",
                human(s.totals.bytes),
                count(s.totals.objects, "object", "objects"),
                count(s.threads as u64, "thread", "threads")
            )
        }));
        if s.threads_not_stopped > 0 {
            // Said first: every figure after it may be off (docs/reference.md §3).
            line.push(Span::styled(
                format!(
                    "INCOMPLETE: {} not stopped · ",
                    count(u64::from(s.threads_not_stopped), "thread", "threads")
                ),
                theme::error(),
            ));
        }
        line.push(Span::styled(
            format!(
                "leaks {}{}",
                human(s.leaks.bytes),
                if s.threads_not_stopped > 0 {
                    " (may be overstated)"
                } else {
                    ""
                }
            ),
            if s.leaks.bytes > 0 {
                theme::error()
            } else {
                theme::dim()
            },
        ));
        if terse < 2 {
            line.push(Span::raw(format!(
                " · global-only {}",
                human(s.totals.global_only_bytes)
            )));
        }
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
    Line::from(line)
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

    #[test]
    fn a_snapshot_with_a_thread_that_was_not_stopped_is_said_incomplete() {
        let complete = Harness::live(fixture());
        let mut graph = fixture();
        graph.threads[0].state =
            heaptui_analysis::ThreadState::NotStoppable("stop signal blocked".into());
        let mut incomplete = Harness::live(graph);
        incomplete.pump();
        let mut complete = complete;
        complete.pump();
        let screen = crate::ui::tests::screen(&incomplete);
        assert!(
            screen.contains("INCOMPLETE: 1 thread not stopped · leaks "),
            "{screen}"
        );
        assert!(screen.contains("(may be overstated)"), "{screen}");
        let screen = crate::ui::tests::screen(&complete);
        assert!(!screen.contains("INCOMPLETE"), "{screen}");
    }
}
