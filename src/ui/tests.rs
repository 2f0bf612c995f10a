//! Every screen drawn to a `TestBackend` at 120×36 over the patent fixture (and a big
//! synthetic group), compared with the accepted insta snapshots in `snapshots/`. Addresses and
//! times are redacted so the snapshots say what the operator sees, not where the heap was.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;

use crate::app::testing::{HEIGHT, Harness, WIDTH, big_group_graph, fixture};
use crate::source::SourceEvent;

/// The screen as text, one line per row, trailing blanks cut, redacted.
pub(super) fn screen(h: &Harness) -> String {
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap();
    terminal.draw(|f| super::render(&h.app, f)).unwrap();
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let mut line = String::new();
        for x in 0..buffer.area.width {
            line.push_str(buffer[(x, y)].symbol());
        }
        out.push_str(&redact(line.trim_end()));
        out.push('\n');
    }
    out
}

/// `0x7f0000001200` → `0x············` (same width, so columns stay put); `12 s ago` → `N s ago`.
fn redact(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '0' && chars.get(i + 1) == Some(&'x') {
            out.push_str("0x");
            i += 2;
            while i < chars.len() && chars[i].is_ascii_hexdigit() {
                out.push('·');
                i += 1;
            }
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    for unit in [" s ago", " min ago", " h ago", " ms"] {
        while let Some(at) = out.find(unit) {
            let start = out[..at]
                .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
                .map_or(0, |p| p + 1);
            if start == at {
                break;
            }
            out.replace_range(start..at, "N");
            if !out[start + 1..].contains(unit) || out[start + 1..].find(unit) == Some(0) {
                break;
            }
        }
    }
    out
}

#[test]
fn redaction_hides_addresses_and_times() {
    assert_eq!(redact("at 0x10a00 and 0xff"), "at 0x····· and 0x··");
    assert_eq!(
        redact("snapshot #3 12 s ago, pause 1.5 ms"),
        "snapshot #3 N s ago, pause N ms"
    );
}

#[test]
fn threads() {
    let h = Harness::new(fixture());
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn threads_filtered() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('/'));
    h.type_text("thn");
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn release_with_two_marked() {
    let mut h = Harness::new(fixture());
    h.keys(&[
        KeyCode::Tab,
        KeyCode::Char(' '),
        KeyCode::Down,
        KeyCode::Char(' '),
    ]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn sites() {
    let mut h = Harness::new(fixture());
    h.keys(&[KeyCode::Tab, KeyCode::Tab]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn frames() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Enter);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn group() {
    let mut h = Harness::new(fixture());
    h.keys(&[KeyCode::Down, KeyCode::Down, KeyCode::Enter, KeyCode::Enter]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn objects_of_a_site() {
    let mut h = Harness::new(fixture());
    h.keys(&[KeyCode::Tab, KeyCode::Tab, KeyCode::Enter]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn object() {
    let mut h = Harness::new(fixture());
    h.keys(&[
        KeyCode::Down,
        KeyCode::Down,
        KeyCode::Enter,
        KeyCode::Enter,
        KeyCode::Enter,
    ]);
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn help() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('?'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn disconnected() {
    let mut h = Harness::new(fixture());
    h.app.on_source(SourceEvent::Disconnected {
        reason: "connection refused".into(),
    });
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn objects_of_a_big_group_mid_list() {
    let mut h = Harness::new(big_group_graph(3, 20_000));
    // The cache is the one thread-shared group: thread → frame 0 → T1 → members.
    h.keys(&[
        KeyCode::Enter,
        KeyCode::Enter,
        KeyCode::Down,
        KeyCode::Enter,
    ]);
    for _ in 0..40 {
        h.key(KeyCode::PageDown);
    }
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn threads_with_live_counters() {
    let mut h = Harness::new(fixture());
    for i in 1..=8u64 {
        h.app.on_source(SourceEvent::Push(
            heaptui_protocol::message::Push::Counters(heaptui_protocol::message::LiveCounters {
                live_bytes: i * i * 1000,
                live_blocks: i * 10,
                allocated_bytes: i * 100_000,
                peak_live_bytes: 64_000,
                unix_ms: 1_000 * i,
            }),
        ));
    }
    insta::assert_snapshot!(screen(&h));
}

fn cancel_verdict(
    verdict: heaptui_protocol::message::Verdict,
) -> heaptui_protocol::message::Response {
    use heaptui_protocol::message::{CancelVerdict, Mechanism, Response};
    Response::Cancel(CancelVerdict {
        tid: 1,
        verdict,
        predicted_release: Some(1_468_006),
        rule: Some("thread = \"thread-*\"".into()),
        mechanism: Some(Mechanism::Cooperative),
    })
}

#[test]
fn cancel_dialog() {
    use heaptui_protocol::message::Verdict;
    let mut h = Harness::live(fixture());
    h.cancel_answers.push_back(cancel_verdict(Verdict::DryRun));
    h.key(KeyCode::Char('c'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn cancel_dialog_refused() {
    use heaptui_protocol::message::Verdict;
    let mut h = Harness::live(fixture());
    h.cancel_answers.push_back(cancel_verdict(Verdict::DryRun));
    h.cancel_answers.push_back(cancel_verdict(Verdict::Refused(
        "below min_release (2.0 MiB)".into(),
    )));
    h.keys(&[KeyCode::Char('c'), KeyCode::Char('y')]);
    insta::assert_snapshot!(screen(&h));
}
