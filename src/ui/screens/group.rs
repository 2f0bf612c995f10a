//! One shared group: its entry, label, size, members, sharers, and the groups it refers to
//! (direct and developed); Enter opens the entry, the member list or a referent.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use heaptui_protocol::GroupKind;

use crate::app::App;
use crate::app::layout::Areas;
use crate::app::views::{GroupItem, GroupView, group_items};
use crate::size::human_exact;
use crate::ui::{list_window, selectable, theme};

pub fn kind_name(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::FrameShared => "frame-shared",
        GroupKind::ThreadShared => "thread-shared",
        GroupKind::GlobalOnly => "global-only",
    }
}

pub fn draw(frame: &mut Frame, areas: &Areas, app: &App, view: &GroupView) {
    let title = Line::from(vec![
        Span::styled(format!(" Group {} ", view.id), theme::group(view.id.kind)),
        Span::raw(format!("· {} ", kind_name(view.id.kind))),
    ]);
    let block = Block::bordered().title(title);
    let inner = block.inner(areas.main);
    frame.render_widget(block, areas.main);
    let Some(info) = &view.info else {
        frame.render_widget(
            Paragraph::new(Span::styled("loading…", theme::dim())),
            inner,
        );
        return;
    };
    let sharers = info
        .sharers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let about = vec![
        Line::from(vec![
            Span::raw("label    "),
            Span::styled(info.label.clone(), theme::title()),
        ]),
        Line::from(vec![
            Span::raw("size     "),
            Span::styled(human_exact(info.size), theme::total()),
            Span::raw(format!(" in {} objects", info.members)),
        ]),
        Line::from(vec![
            Span::raw("sharers  "),
            Span::styled(
                if sharers.is_empty() {
                    "-".to_string()
                } else {
                    sharers
                },
                theme::shared(),
            ),
        ]),
        Line::default(),
    ];
    let [top, list] =
        Layout::vertical([Constraint::Length(about.len() as u16), Constraint::Fill(1)])
            .areas(inner);
    frame.render_widget(Paragraph::new(about), top);

    let items = group_items(info);
    let (start, end) = list_window(view.selected, items.len(), list.height as usize);
    app.record_list(list, start, items.len());
    let lines: Vec<Line> = items[start..end]
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let line = match item {
                GroupItem::Entry(o) => Line::from(vec![
                    Span::raw("entry      "),
                    Span::raw(format!(
                        "object {:#x}  {}  {}",
                        o.addr,
                        human_exact(o.size),
                        o.site_label
                    )),
                    Span::styled("   Enter: open the object", theme::dim()),
                ]),
                GroupItem::Members(n) => Line::from(vec![
                    Span::raw(format!("members    {n} objects")),
                    Span::styled("   Enter: list them", theme::dim()),
                ]),
                GroupItem::Direct(id) => Line::from(vec![
                    Span::raw("refers to  "),
                    Span::styled(id.to_string(), theme::group(id.kind)),
                    Span::styled(format!("  {}", kind_name(id.kind)), theme::dim()),
                ]),
                GroupItem::Developed(id) => Line::from(vec![
                    Span::raw("developed  "),
                    Span::styled(id.to_string(), theme::group(id.kind)),
                    Span::styled(
                        format!("  {} (through a referent)", kind_name(id.kind)),
                        theme::dim(),
                    ),
                ]),
            };
            selectable(line, start + i == view.selected)
        })
        .collect();
    let mut lines = lines;
    if info.direct.is_truncated() || info.developed.is_truncated() {
        lines.push(Line::styled(
            format!(
                "({} direct and {} developed referents in all; the first are listed)",
                info.direct.total, info.developed.total
            ),
            theme::dim(),
        ));
    }
    frame.render_widget(Paragraph::new(lines), list);
}
