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
    screen_of_size(h, WIDTH, HEIGHT)
}

/// [`screen`] in a terminal of `width`×`height` (the app is told the size first).
pub(super) fn screen_of_size(h: &Harness, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
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

/// The bindings (by their help text) whose key line is NOT on `screen`: the keys followed by
/// the first words of the text, as the help draws them wherever its columns put them.
fn key_lines_missing(screen: &str) -> Vec<&'static str> {
    crate::app::action::BINDINGS
        .iter()
        .filter(|b| {
            let first = b.help.split(' ').take(3).collect::<Vec<_>>().join(" ");
            !screen.contains(&format!("{}  {first}", b.shown))
        })
        .map(|b| b.help)
        .collect()
}

#[test]
fn help_at_120x40_shows_every_key_line_whole() {
    let mut h = Harness::new(fixture());
    h.app.on_resize(120, 40);
    h.key(KeyCode::Char('?'));
    let s = screen_of_size(&h, 120, 40);
    assert_eq!(key_lines_missing(&s), Vec::<&str>::new(), "{s}");
    // Whole: the last words of every text are on the screen too (wrapped or not), and no
    // line of the popup runs into its border.
    for b in crate::app::action::BINDINGS {
        let last = b.help.rsplit(' ').next().unwrap();
        assert!(s.contains(last), "{}: {last}\n{s}", b.shown);
    }
    assert!(
        !s.contains("PgDn scroll"),
        "nothing to scroll at 120x40:\n{s}"
    );
    // Nothing is cut at the popup's right border: the column before it is blank on every row.
    let rows: Vec<Vec<char>> = s.lines().map(|l| l.chars().collect()).collect();
    let top = rows
        .iter()
        .position(|r| r.iter().collect::<String>().contains("┌ Help"))
        .unwrap();
    let left = rows[top].iter().position(|&c| c == '┌').unwrap();
    let right = left + rows[top][left..].iter().position(|&c| c == '┐').unwrap();
    for row in &rows[top + 1..] {
        if row[left] == '└' {
            break;
        }
        assert_eq!(
            row[right - 1],
            ' ',
            "cut: {}",
            row.iter().collect::<String>()
        );
    }
    insta::assert_snapshot!(s);
}

#[test]
fn help_at_80x24_scrolls_to_its_last_line() {
    let mut h = Harness::new(fixture());
    h.app.on_resize(80, 24);
    h.key(KeyCode::Char('?'));
    let top = screen_of_size(&h, 80, 24);
    assert!(top.contains("↑/↓ PgUp/PgDn scroll"), "{top}");
    insta::assert_snapshot!("help_80x24_top", top);
    // Down scrolls (rather than closing) while there is more below; End goes to the last line.
    h.key(KeyCode::Down);
    assert!(h.app.help);
    assert!(screen_of_size(&h, 80, 24).contains(" lines 2–"));
    h.key(KeyCode::End);
    assert!(h.app.help);
    let bottom = screen_of_size(&h, 80, 24);
    insta::assert_snapshot!("help_80x24_bottom", bottom);
    // Paged from the top, every key line is on one of the pages.
    h.key(KeyCode::Home);
    let mut missing = key_lines_missing(&screen_of_size(&h, 80, 24));
    for _ in 0..10 {
        h.key(KeyCode::PageDown);
        let page = screen_of_size(&h, 80, 24);
        missing.retain(|k| key_lines_missing(&page).contains(k));
    }
    assert_eq!(missing, Vec::<&str>::new(), "{top}\n{bottom}");
    assert!(h.app.help, "paging never closes the help");
    // The wheel scrolls it too, and a click closes it (and does nothing else).
    use ratatui::crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
    let mouse = |kind| MouseEvent {
        kind,
        column: 40,
        row: 10,
        modifiers: KeyModifiers::NONE,
    };
    h.key(KeyCode::Home);
    h.app.on_mouse(mouse(MouseEventKind::ScrollDown));
    assert_eq!(h.app.help_scroll, 3);
    h.app.on_mouse(mouse(MouseEventKind::ScrollUp));
    assert_eq!(h.app.help_scroll, 0);
    h.app
        .on_mouse(mouse(MouseEventKind::Down(MouseButton::Left)));
    assert!(!h.app.help);
    assert!(!screen_of_size(&h, 80, 24).contains("Help ·"));
    assert_eq!(h.app.stack.len(), 1, "the click opened nothing");
    h.key(KeyCode::Char('?'));
    assert_eq!(h.app.help_scroll, 0, "the help opens at its top again");
    // Any other key still closes it.
    h.key(KeyCode::Char('x'));
    assert!(!h.app.help);
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
fn objects_of_a_big_group_filtered_by_the_agent() {
    let mut h = Harness::new(big_group_graph(3, 20_000));
    h.keys(&[
        KeyCode::Enter,
        KeyCode::Enter,
        KeyCode::Down,
        KeyCode::Enter,
    ]);
    // Smallest first, the entry (4 KiB) is the last of 20 001 rows and not loaded; the agent
    // finds it, the one member allocated by `Cache::new`, over the whole group.
    h.key(KeyCode::Char('2'));
    h.type_text("/Cache::new");
    h.key(KeyCode::Enter);
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

/// A live harness whose agent runs with the demo-like policy (as the app last heard it).
fn with_policy() -> Harness {
    use heaptui_protocol::message::{Mechanism, PermitRule, PolicyAnswer, PolicySummary};
    let mut h = Harness::live(fixture());
    h.app.policy = Some(PolicyAnswer::Loaded {
        path: "/tmp/heaptui-demo/demo-policy.toml".into(),
        text: String::new(),
        summary: PolicySummary {
            dry_run: false,
            min_release: 1 << 20,
            permits: vec![PermitRule {
                thread: Some("thread-*".into()),
                function: None,
                mechanism: Mechanism::Cooperative,
            }],
            trigger: None,
        },
    });
    h
}

#[test]
fn cancel_dialog() {
    use heaptui_protocol::message::Verdict;
    let mut h = with_policy();
    h.cancel_answers.push_back(cancel_verdict(Verdict::DryRun));
    h.key(KeyCode::Char('c'));
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn cancel_dialog_measured() {
    use heaptui_protocol::message::{MeasuredRelease, Push, Verdict};
    let mut h = with_policy();
    h.cancel_answers.push_back(cancel_verdict(Verdict::DryRun));
    h.cancel_answers.push_back(cancel_verdict(Verdict::Done));
    h.keys(&[KeyCode::Char('c'), KeyCode::Char('y')]);
    h.app
        .on_source(SourceEvent::Push(Push::ReleaseMeasured(MeasuredRelease {
            decision: 2,
            tids: vec![1],
            predicted: 1_468_006,
            measured: Some(1_460_000),
        })));
    h.pump();
    insta::assert_snapshot!(screen(&h));
}

#[test]
fn shortage_banner() {
    use heaptui_protocol::message::{Push, ShortageCause, ShortageOutcome, ShortageReport};
    let mut h = Harness::live(fixture());
    h.app
        .on_source(SourceEvent::Push(Push::Shortage(ShortageReport {
            unix_ms: 0,
            cause: ShortageCause::SoftLimit { limit: 512 << 20 },
            live_bytes: 600 << 20,
            need_bytes: 88 << 20,
            outcome: ShortageOutcome::Cancelled {
                tids: vec![3],
                predicted_release: 120 << 20,
            },
        })));
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

/// A left click at the cell where `text` is first drawn on the screen.
fn click_on(h: &mut Harness, text: &str) {
    let shown = screen(h);
    let (row, line) = shown
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains(text))
        .unwrap_or_else(|| panic!("{text:?} is not on the screen:\n{shown}"));
    let column = line[..line.find(text).unwrap()].chars().count() as u16;
    click_at(h, column, row as u16);
}

/// A left click at a cell (the screen is drawn first, as the terminal would have it).
fn click_at(h: &mut Harness, column: u16, row: u16) {
    use ratatui::crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
    screen(h);
    h.app.on_mouse(MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column,
        row,
        modifiers: KeyModifiers::NONE,
    });
    h.pump();
}

#[test]
fn clicks_select_and_open_the_items_of_the_group_and_object_screens() {
    use crate::app::action::Screen;
    use crate::app::views::ViewKind;
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Enter);
    assert_eq!(h.app.screen(), Screen::Frames);
    // On the selected frame's referents: the words before them are no referent; the first
    // id is the chosen one already, so one click opens it.
    let shown = screen(&h);
    let (row, line) = shown
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("refers to: "))
        .expect("the referents line");
    let first = line
        .split("refers to: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a referent")
        .to_string();
    let prefix = line.find("refers to: ").unwrap();
    let column = line[..prefix].chars().count() as u16;
    click_at(&mut h, column, row as u16);
    assert_eq!(h.app.screen(), Screen::Frames);
    click_at(&mut h, column + "refers to: ".len() as u16, row as u16);
    assert_eq!(h.app.screen(), Screen::Group);
    assert!(screen(&h).contains(&format!("Group {first}")));
    let selected = |h: &Harness| match &h.app.top().kind {
        ViewKind::Group(v) => v.selected,
        ViewKind::Object(v) => v.selected,
        _ => usize::MAX,
    };
    assert_eq!(selected(&h), 0);
    // One click selects the members line, a second opens it.
    click_on(&mut h, "members ");
    assert_eq!((h.app.screen(), selected(&h)), (Screen::Group, 1));
    click_on(&mut h, "members ");
    assert_eq!(h.app.screen(), Screen::Objects);
    // A click on the selected object row opens the object.
    click_on(&mut h, "Class1.Session");
    assert_eq!(h.app.screen(), Screen::Object);
    // On the object, the holder line: selected, then followed to its frame.
    let shown = screen(&h);
    let holder = "held by  frame #0";
    assert!(shown.contains(holder), "{shown}");
    click_on(&mut h, holder);
    assert_ne!(selected(&h), usize::MAX);
    click_on(&mut h, holder);
    assert_eq!(h.app.screen(), Screen::Frames);
    // A click outside any item changes nothing.
    h.key(KeyCode::Esc);
    let before = selected(&h);
    click_on(&mut h, "Object #");
    assert_eq!((h.app.screen(), selected(&h)), (Screen::Object, before));
}

/// The keys from the home screen to each screen of the fixture.
const SCREENS: &[(&str, &[KeyCode])] = &[
    ("threads", &[]),
    ("release", &[KeyCode::Tab]),
    ("sites", &[KeyCode::Tab, KeyCode::Tab]),
    ("frames", &[KeyCode::Enter]),
    (
        "group",
        &[KeyCode::Down, KeyCode::Down, KeyCode::Enter, KeyCode::Enter],
    ),
    ("objects", &[KeyCode::Tab, KeyCode::Tab, KeyCode::Enter]),
    (
        "object",
        &[
            KeyCode::Down,
            KeyCode::Down,
            KeyCode::Enter,
            KeyCode::Enter,
            KeyCode::Enter,
        ],
    ),
];

/// Every screen at the smallest size the TUI is made for and at a wide one, live, with the
/// counters and a long command: the header's lines end inside the screen (they shorten), the
/// table headers are whole (a column that does not fit goes, lowest `keep` first) and names
/// stay when state goes.
#[test]
fn every_screen_at_80x24_and_160x45() {
    for (width, height) in [(80, 24), (160, 45)] {
        for (name, keys) in SCREENS {
            let mut h = Harness::live(fixture());
            h.pump();
            if let Some(p) = h.app.process.as_mut() {
                p.command =
                    "/home/someone/.cache/heaptui/heaptui-demo-0.1.0-f2e7a580066328d9".into();
            }
            h.app.address = Some("unix:/run/user/0/heaptui/pid-4242.sock".into());
            if let Some(snapshot) = h.app.snapshot.as_mut() {
                snapshot.taken_unix_ms = 1_000;
            }
            h.app.now_ms = 43_000;
            for i in 1..=8u64 {
                h.app.on_source(SourceEvent::Push(
                    heaptui_protocol::message::Push::Counters(
                        heaptui_protocol::message::LiveCounters {
                            live_bytes: i * 2_000_000,
                            live_blocks: i * 1000,
                            allocated_bytes: i * 3_000_000,
                            peak_live_bytes: 16_000_000,
                            unix_ms: 1_000 * i,
                        },
                    ),
                ));
            }
            h.app.on_resize(width, height);
            h.keys(keys);
            let s = screen_of_size(&h, width, height);
            let lines: Vec<&str> = s.lines().collect();
            for line in &lines[..2] {
                assert!(
                    line.chars().count() < width as usize,
                    "{name} {width}x{height}: header line cut: {line}\n{s}"
                );
            }
            assert!(lines[0].contains("· live"), "{name}: {}", lines[0]);
            assert!(lines[0].contains("snapshot #1"), "{name}: {}", lines[0]);
            assert!(
                !s.contains(" ROPRIETARY") && !s.contains(" RAMES"),
                "{name} {width}x{height}: a header cut\n{s}"
            );
            if *name == "threads" {
                assert!(s.contains("NAME") && s.contains("thread-1"), "{s}");
            }
            insta::assert_snapshot!(format!("{name}_{width}x{height}"), s);
        }
    }
}

/// The selected row's bar is drawn as a bar: its `█` cells keep their colour and are not
/// reversed (reversed, a full block shows as an empty cell and the largest thread looks hollow).
#[test]
fn the_selected_rows_bar_stays_solid() {
    let h = Harness::new(fixture());
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap();
    terminal.draw(|f| super::render(&h.app, f)).unwrap();
    let buffer = terminal.backend().buffer();
    let row = (0..HEIGHT)
        .find(|&y| buffer[(1, y)].symbol() == "▶")
        .expect("a selected row");
    let bar: Vec<_> = (0..WIDTH)
        .map(|x| &buffer[(x, row)])
        .filter(|c| c.symbol() == "█")
        .collect();
    assert!(!bar.is_empty(), "the selected thread has a bar");
    for cell in bar {
        assert_eq!(cell.fg, ratatui::style::Color::Blue);
        assert!(!cell.modifier.contains(ratatui::style::Modifier::REVERSED));
    }
}

#[test]
fn titles_say_the_sort_and_messages_stay_on_their_screen() {
    let mut h = Harness::new(fixture());
    assert!(screen(&h).contains("Threads by total ·"));
    h.key(KeyCode::Char('2'));
    assert!(screen(&h).contains("Threads by name ·"), "{}", screen(&h));
    h.key(KeyCode::Char('2'));
    assert!(screen(&h).contains("Threads by name (reversed) ·"));
    h.keys(&[KeyCode::Tab, KeyCode::Tab, KeyCode::Char('3')]);
    assert!(screen(&h).contains("Allocation sites by blocks ·"));
    h.keys(&[KeyCode::Tab]);

    // A message given on one screen is gone on the next.
    h.key(KeyCode::Char('r'));
    assert!(screen(&h).contains("a snapshot file does not change"));
    h.key(KeyCode::Enter);
    let s = screen(&h);
    assert!(s.contains("Frames of thread"), "{s}");
    assert!(!s.contains("a snapshot file does not change"), "{s}");
}

/// The agent acted on another prediction than the dry run's (the thread's heap changed in
/// between, as the demo's runaway does when it starts over): the dialog shows both and why.
#[test]
fn cancel_dialog_says_why_the_agent_acted_on_another_prediction() {
    use heaptui_protocol::message::{Response, Verdict};
    let mut h = with_policy();
    h.cancel_answers.push_back(cancel_verdict(Verdict::DryRun));
    let Response::Cancel(mut done) = cancel_verdict(Verdict::Done) else {
        unreachable!()
    };
    done.predicted_release = Some(8_912_896);
    h.cancel_answers.push_back(Response::Cancel(done));
    h.keys(&[KeyCode::Char('c'), KeyCode::Char('y')]);
    let s = screen(&h);
    let flat: String = s
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        flat.contains("Acted on 8.5 MiB (8912896 bytes) predicted when the agent cancelled")
            && flat.contains("not the dry run's 1.4 MiB")
            && flat.contains("changed in between"),
        "{s}"
    );
}

/// `Tab` in the help turns to what the figures mean (developed, util, MIN/MAX, STATE, …), whole
/// at 120×40 and scrolling at 80×24; the screen behind the help does not show through.
#[test]
fn help_explains_the_figures_on_its_second_page() {
    let mut h = Harness::new(fixture());
    h.app.on_resize(120, 40);
    h.keys(&[KeyCode::Char('?'), KeyCode::Tab]);
    let s = screen_of_size(&h, 120, 40);
    for term in [
        "developed  groups reached only through",
        "util  live ÷ allocated",
        "MIN MAX  the lowest and highest live bytes",
        "STATE  stopped for the snapshot",
        "FRAME-SHARED  F groups",
    ] {
        assert!(s.contains(term), "{term}:\n{s}");
    }
    assert!(
        !s.contains("PgDn scroll"),
        "nothing to scroll at 120x40:\n{s}"
    );
    assert!(!s.contains("thread-1"), "the screen shows through:\n{s}");
    insta::assert_snapshot!(s);
    h.key(KeyCode::Tab);
    assert!(screen_of_size(&h, 120, 40).contains("On the Threads screen"));
    h.app.on_resize(80, 24);
    h.key(KeyCode::Tab);
    h.key(KeyCode::End);
    let s = screen_of_size(&h, 80, 24);
    assert!(h.app.help, "{s}");
    assert!(
        s.contains("FLAG  growing over"),
        "the last term at the end:\n{s}"
    );
    assert!(!s.contains("thread-"), "the screen shows through:\n{s}");
}

/// Under `b` the size columns say they are in bytes.
#[test]
fn exact_bytes_headers_say_bytes() {
    let mut h = Harness::new(fixture());
    h.key(KeyCode::Char('b'));
    let s = screen(&h);
    assert!(
        s.contains("PROPRIETARY B") && s.contains("SHARED B") && s.contains("TOTAL B▼"),
        "{s}"
    );
    assert!(s.contains("  264 "), "exact bytes:\n{s}");
    h.key(KeyCode::Char('b'));
    assert!(!screen(&h).contains("TOTAL B"));
}

/// On a narrow screen the digit keys count the columns the operator sees: where some gave
/// way, `n` sorts the n-th column shown (and its header gets the arrow), not a hidden one.
#[test]
fn digits_sort_the_columns_on_the_screen() {
    let mut h = Harness::new(fixture());
    h.app.on_resize(70, 24);
    h.key(KeyCode::Char('L'));
    let s = screen_of_size(&h, 70, 24);
    let header = s
        .lines()
        .find(|l| l.contains("SITE"))
        .unwrap_or_else(|| panic!("{s}"));
    let shown: Vec<&str> = header
        .trim_matches('│')
        .split_whitespace()
        .map(|n| n.trim_end_matches(['▲', '▼']))
        .collect();
    let all: Vec<&str> =
        <heaptui_protocol::message::LeakRow as crate::app::table::TableRow>::COLUMNS
            .iter()
            .map(|c| c.header)
            .collect();
    // A column in the middle gave way: the n-th shown is not the n-th of the table.
    let n = (0..shown.len())
        .find(|&i| shown[i] != all[i])
        .unwrap_or_else(|| panic!("no column gave way in the middle:\n{s}"));
    h.key(KeyCode::Char((b'1' + n as u8) as char));
    let s = screen_of_size(&h, 70, 24);
    let sorted = shown[n];
    assert!(
        s.contains(&format!("{sorted}▼")) || s.contains(&format!("{sorted}▲")),
        "key {} sorts {sorted}:\n{s}",
        n + 1
    );
}
