//! One object: whose its bytes are (its class), where it was allocated, what it points to and
//! who points at it — the path back to a root. Enter follows the selected reference.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use heaptui_protocol::ObjectClass;
use heaptui_protocol::message::{ObjectDetail, Referrer};

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::views::{ObjectItem, ObjectView, object_items};
use crate::size::human_exact;
use crate::ui::{list_window, selectable, theme};

/// Most allocation-stack lines shown above the references.
const STACK_LINES: usize = 6;

pub fn class_text(class: &ObjectClass) -> String {
    match class {
        ObjectClass::FrameProprietary { tid, frame } => {
            format!("frame-proprietary to frame #{frame} of thread {tid}")
        }
        ObjectClass::FrameShared { tid } => format!("frame-shared within thread {tid}"),
        ObjectClass::ThreadShared => "thread-shared".to_string(),
        ObjectClass::GlobalOnly => "global-only (reachable from the globals only)".to_string(),
        ObjectClass::DefinitelyLost => {
            "definitely lost (leak: no root reaches it; it heads its lost structure)".to_string()
        }
        ObjectClass::IndirectlyLost => {
            "indirectly lost (leak: reached only from another lost block)".to_string()
        }
    }
}

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &ObjectView) {
    let block = Block::bordered().title(Span::styled(
        format!(" Object #{} ", view.index),
        theme::title(),
    ));
    let inner = block.inner(areas.main);
    frame.render_widget(block, areas.main);
    let Some(d) = &view.detail else {
        frame.render_widget(
            Paragraph::new(Span::styled("loading…", theme::dim())),
            inner,
        );
        return;
    };
    let about = about(d);
    let [top, list] =
        Layout::vertical([Constraint::Length(about.len() as u16), Constraint::Fill(1)])
            .areas(inner);
    frame.render_widget(Paragraph::new(about), top);

    let items = object_items(d);
    let (start, end) = list_window(view.selected, items.len(), list.height as usize);
    app.record_list(list, start, items.len());
    let mut lines: Vec<Line> = items[start..end]
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let line = item_line(item);
            selectable(line, start + i == view.selected)
        })
        .collect();
    if items.is_empty() {
        lines.push(Line::styled("no references either way", theme::dim()));
    }
    frame.render_widget(Paragraph::new(lines), list);
}

fn about(d: &ObjectDetail) -> Vec<Line<'static>> {
    let o = &d.object;
    let mut lines = vec![
        Line::from(vec![
            Span::styled(format!("{:#x}", o.addr), theme::title()),
            Span::raw("  "),
            Span::styled(human_exact(o.size), theme::total()),
            Span::raw(format!(
                "  thread {}  seq {}  age {}",
                if o.thread == 0 {
                    "?".to_string()
                } else {
                    o.thread.to_string()
                },
                if o.seq == 0 {
                    "?".to_string()
                } else {
                    o.seq.to_string()
                },
                o.age.map_or_else(|| "-".to_string(), |a| a.to_string())
            )),
        ]),
        Line::from(vec![
            Span::raw("class      "),
            Span::styled(
                class_text(&d.class),
                match d.class {
                    ObjectClass::FrameProprietary { .. } => theme::alone(),
                    ObjectClass::DefinitelyLost | ObjectClass::IndirectlyLost => theme::error(),
                    _ => theme::shared(),
                },
            ),
            Span::styled(
                if d.possibly_lost {
                    ", possibly lost (only pointers into its middle lead to it)"
                } else {
                    ""
                },
                theme::error(),
            ),
        ]),
        Line::from("allocated  "),
    ];
    if d.stack.is_empty() {
        lines.push(Line::styled("  (no allocation stack)", theme::dim()));
    }
    for f in d.stack.iter().take(STACK_LINES) {
        lines.push(Line::from(format!("  {f}")));
    }
    if d.stack.len() > STACK_LINES {
        lines.push(Line::styled(
            format!("  … {} more frames", d.stack.len() - STACK_LINES),
            theme::dim(),
        ));
    }
    lines.push(Line::styled(
        format!(
            "references: {} out, {} in{}",
            d.outgoing_page.total,
            d.incoming_page.total,
            if d.outgoing.len() < d.outgoing_page.total as usize
                || d.incoming.len() < d.incoming_page.total as usize
            {
                " (the first are listed)"
            } else {
                ""
            }
        ),
        theme::dim(),
    ));
    lines
}

fn item_line(item: &ObjectItem) -> Line<'static> {
    match item {
        ObjectItem::Group(id) => Line::from(vec![
            Span::raw("in group   "),
            Span::styled(id.to_string(), theme::group(id.kind)),
        ]),
        ObjectItem::Dominator(o) => Line::from(format!("held via   object #{o} (its dominator)")),
        ObjectItem::Outgoing(o) => Line::from(vec![
            Span::styled("→ points to ", theme::alone()),
            Span::raw(format!(
                "{:#x}  {}  {}",
                o.addr,
                human_exact(o.size),
                o.site_label
            )),
        ]),
        ObjectItem::Incoming(r) => Line::from(vec![
            Span::styled("← held by  ", theme::shared()),
            Span::raw(match r {
                Referrer::Frame {
                    tid,
                    frame,
                    function,
                } => format!("frame #{frame} {function} of thread {tid}"),
                Referrer::Globals => "globals".to_string(),
                Referrer::Object(o) => {
                    format!("{:#x}  {}  {}", o.addr, human_exact(o.size), o.site_label)
                }
            }),
        ]),
    }
}
