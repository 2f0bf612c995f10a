//! The cancel confirmation (`c` on Threads and Release): the thread, the agent's policy file
//! (or why it has none that works), its predicted release and verdict, the keys, then the
//! outcome and the release the agent measured, drawn from `app::cancel` state.
//!
//! It only draws: the figures are the agent's, the keys come from `action::CANCEL_DIALOG`.

use heaptui_protocol::message::{CancelVerdict, PolicyAnswer, Verdict};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use crate::app::action::{Action, CANCEL_DIALOG};
use crate::app::cancel::{CancelDialog, CancelPhase, mechanism_name, policy_line};
use crate::app::verdict_line;
use crate::size::{human, human_exact};
use crate::ui::theme;

pub fn draw(frame: &mut Frame, area: Rect, dialog: &CancelDialog) {
    let mut lines = vec![Line::from(vec![
        Span::styled("Thread     ", theme::dim()),
        Span::styled(format!("{} ", dialog.tid), theme::title()),
        Span::raw(dialog.name.clone()),
    ])];
    if let Some(policy) = &dialog.policy {
        let style = match policy {
            PolicyAnswer::Loaded { .. } => theme::dim(),
            _ => theme::error(),
        };
        lines.push(Line::from(vec![
            Span::styled("Policy     ", theme::dim()),
            Span::styled(policy_line(policy), style),
        ]));
    }
    lines.push(Line::default());
    match &dialog.prediction {
        None if dialog.phase == CancelPhase::Predicting => lines.push(Line::styled(
            "asking the agent for a dry run on a fresh snapshot…",
            theme::dim(),
        )),
        None => {}
        Some(p) => {
            lines.push(Line::from(vec![
                Span::styled("Predicted  ", theme::dim()),
                Span::styled(
                    p.predicted_release.map_or_else(
                        || "unknown".to_string(),
                        |b| format!("{} freed", human_exact(b)),
                    ),
                    theme::total(),
                ),
            ]));
            lines.push(Line::from(vec![
                Span::styled("Verdict    ", theme::dim()),
                policy_span(p),
            ]));
        }
    }
    if let Some(o) = &dialog.outcome {
        let style = match o.verdict {
            Verdict::Done => theme::alone(),
            Verdict::Refused(_) => theme::error(),
            Verdict::DryRun => theme::shared(),
        };
        lines.push(Line::default());
        lines.push(Line::from(vec![
            Span::styled("Outcome    ", theme::dim()),
            Span::styled(verdict_line(o), style),
        ]));
        if let Some((acted, dry_run)) = dialog.acted_on() {
            lines.push(Line::from(vec![
                Span::styled("Acted on   ", theme::dim()),
                Span::styled(format!("{} predicted", human_exact(acted)), theme::total()),
                Span::styled(
                    format!(
                        " when the agent cancelled, not the dry run's {}: the thread's heap \
                         changed in between",
                        human(dry_run)
                    ),
                    theme::dim(),
                ),
            ]));
        }
    } else if dialog.phase == CancelPhase::Sending {
        lines.push(Line::default());
        lines.push(Line::styled("cancelling…", theme::dim()));
    }
    if let Some(m) = &dialog.measured {
        // One line per figure ("measured …; predicted …"): together they would wrap, and
        // a wrapped exact byte count is hard to read.
        for (i, part) in m.split("; ").enumerate() {
            let label = if i == 0 { "Released   " } else { "           " };
            lines.push(Line::from(vec![
                Span::styled(label, theme::dim()),
                Span::styled(part.to_string(), theme::total()),
            ]));
        }
    }
    if let Some(e) = &dialog.error {
        lines.push(Line::default());
        lines.push(Line::styled(format!("failed: {e}"), theme::error()));
    }
    lines.push(Line::default());
    let mut keys = Vec::new();
    for b in CANCEL_DIALOG {
        // The confirm key is shown only while confirming can send something.
        if b.action == Action::Confirm && !dialog.can_confirm() {
            continue;
        }
        if !keys.is_empty() {
            keys.push(Span::styled(" · ", theme::dim()));
        }
        keys.push(Span::styled(b.shown, theme::key()));
        keys.push(Span::raw(format!(" {}", b.help)));
    }
    lines.push(Line::from(keys));

    let width = area.width.saturating_sub(4).min(80);
    // Wrapped lines take more rows: size the box for them so the keys stay in view.
    let inner = usize::from(width.saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let height = (rows as u16 + 2).min(area.height);
    let popup = area.centered(Constraint::Length(width), Constraint::Length(height));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(Span::styled(" Cancel a thread ", theme::title()))),
        popup,
    );
}

/// The dry run's verdict: permitted (rule, mechanism) or refused with the agent's reason.
fn policy_span(p: &CancelVerdict) -> Span<'static> {
    match &p.verdict {
        Verdict::Refused(reason) => Span::styled(format!("refused: {reason}"), theme::error()),
        Verdict::Done | Verdict::DryRun => {
            let rule = p.rule.as_deref().unwrap_or("?");
            let text = match p.mechanism {
                // The agent's rule text names its mechanism already.
                Some(m) if rule.contains(mechanism_name(m)) => {
                    format!("permitted by rule `{rule}`")
                }
                Some(m) => format!(
                    "permitted by rule `{rule}` with mechanism {}",
                    mechanism_name(m)
                ),
                None => format!("permitted by rule `{rule}`"),
            };
            Span::styled(text, Style::default())
        }
    }
}
