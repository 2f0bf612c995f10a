//! The other views in a real terminal (tmux, 120×36): `heaptui open REC` of recordings written
//! by the test with the issue's vectors, and `heaptui attach` to the test's own agent over the
//! real protocol — the screens must show exactly those figures. Every wait polls the pane
//! against a deadline.
//!
//! tmux is required (CI installs it); without it these tests fail and say so.

mod tmux_common;
mod views_common;

use tmux_common::{PROMPT, Tmux};
use views_common::{FakeAgent, Scratch, ages_vector, counters_vector};

impl Tmux {
    /// Esc back to the home screen (its own key press: Esc and a key at once read as Alt+key).
    fn back_home(&self) {
        self.keys(&["Escape"]);
        self.wait_for("the home screen", |s| s.contains("Tab tab"));
    }

    /// `q`, then the shell is back.
    fn quit(&self) {
        self.keys(&["q"]);
        self.wait_for("the shell after quitting", |s| {
            s.lines().rev().find(|l| !l.trim().is_empty()) == Some(PROMPT.trim_end())
        });
    }
}

fn heaptui() -> &'static str {
    env!("CARGO_BIN_EXE_heaptui")
}

/// The table line that mentions `name`, its cells split on runs of spaces.
fn cells(screen: &str, name: &str) -> Vec<String> {
    let line = screen
        .lines()
        .find(|l| l.contains(name) && l.starts_with('│'))
        .unwrap_or_else(|| panic!("no row for {name} in\n{screen}"));
    line.trim_matches('│')
        .trim_start_matches("▶ ")
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn open_a_recording_shows_its_units_ages_and_why_it_has_no_leaks() {
    let dir = Scratch::new("open-ages");
    let rec = dir.write("ages.rec", &ages_vector());
    let t = Tmux::start();
    t.command(&format!("{} open {}", heaptui(), rec.display()));
    let s = t.wait_for("the units of the recording", |s| {
        s.contains("Allocation units · library · outermost") && s.contains("│▶ prog")
    });
    assert!(
        s.contains("(recording: 26 records, 2 snapshot boundaries)"),
        "{s}"
    );
    t.keys(&["f"]);
    let s = t.wait_for("units per function", |s| s.contains("odd_site (prog)"));
    // LIVE, then its bar.
    assert!(
        cells(&s, "odd_site (prog)")[1].starts_with("250 B █"),
        "{s}"
    );
    assert!(
        cells(&s, "even_site (prog)")[1].starts_with("100 B █"),
        "{s}"
    );

    t.back_home();
    t.keys(&["A"]);
    let s = t.wait_for("the ages", |s| s.contains("snapshot boundaries ·"));
    assert!(
        s.contains("2 snapshot boundaries · all blocks 0: 2, 1: 1, 2: 3, 3: 0, >3: 0"),
        "{s}"
    );
    assert_eq!(
        cells(&s, "odd_site (prog)")[..7],
        ["odd_site (prog)", "1", "1", "3", "0", "0", "5"]
    );
    t.keys(&["o"]);
    let s = t.wait_for("the oldest survivors", |s| s.contains("Oldest survivors"));
    let first = s
        .lines()
        .find(|l| l.starts_with("│▶"))
        .expect("a selected survivor");
    assert!(first.contains("10 B") && first.ends_with(" 1│"), "{s}");

    t.back_home();
    t.keys(&["L"]);
    let s = t.wait_for("the leaks screen's refusal", |s| {
        s.contains("leaks: a recording has no heap graph")
    });
    assert!(s.contains("Leaks by site"), "{s}");
    t.quit();
}

#[test]
fn open_a_recording_shows_the_issue_counters_in_the_header() {
    let dir = Scratch::new("open-counters");
    let rec = dir.write("counters.rec", &counters_vector());
    let t = Tmux::start();
    t.command(&format!("{} open {}", heaptui(), rec.display()));
    let s = t.wait_for("the counters", |s| s.contains("util "));
    assert!(
        s.contains("live 200 B in 1 block · allocated 300 B · util 66.7% · peak 300 B"),
        "{s}"
    );
    assert!(
        s.contains("live ") && s.contains(" alloc "),
        "the chart: {s}"
    );
    t.quit();
}

#[test]
fn attach_shows_what_the_agent_answers_for_ages_and_units() {
    let dir = Scratch::new("attach-views");
    let agent = FakeAgent::start(dir.path());
    let t = Tmux::start();
    t.command(&format!(
        "{} attach {} --token-file {}",
        heaptui(),
        agent.address(),
        agent.token_file.display()
    ));
    let s = t.wait_for("the ranking and the counters", |s| {
        s.contains("│▶") && s.contains("util ")
    });
    // The agent's counter history and counters: 170 of 510 bytes live.
    assert!(
        s.contains("live 170 B in 3 blocks · allocated 510 B · util 33.3% · peak 200 B"),
        "{s}"
    );
    t.keys(&["A"]);
    let s = t.wait_for("the agent's ages", |s| s.contains("snapshot boundaries ·"));
    assert!(
        s.contains("2 snapshot boundaries · all blocks 0: 1, 1: 1, 2: 1, 3: 0, >3: 0"),
        "{s}"
    );
    t.back_home();
    t.keys(&["u"]);
    t.wait_for("the agent's units", |s| s.contains("libb.so"));
    t.keys(&["c"]);
    let s = t.wait_for("units charged to the freer", |s| {
        s.contains("frees charged to the freer") && s.contains("-20 B")
    });
    assert_eq!(
        cells(&s, "libb.so")[..4],
        ["libb.so", "-20 B", "-50 B", "50 B"]
    );
    t.quit();
}

/// The screen as a snapshot: trailing blanks cut, the test agent's port and the snapshot's
/// age (which change from run to run) replaced by the same number of `#`.
fn stable(screen: &str, port: &str) -> String {
    let mut out = String::new();
    for line in screen.lines() {
        let mut line = line.trim_end().replace(port, &"#".repeat(port.len()));
        for unit in [" s ago", " min ago"] {
            if let Some(at) = line.find(unit) {
                let start = line[..at]
                    .rfind(|c: char| !c.is_ascii_digit())
                    .map_or(0, |p| p + 1);
                line.replace_range(start..at, &"#".repeat(at - start));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Units, Leaks, Growth and Ages in real terminals of 80×24 (the smallest the TUI is made for)
/// and 160×45, attached to the test agent: every figure it answers is on the screen, no header
/// is cut, and the screens are the accepted insta snapshots.
#[test]
fn the_other_views_at_80x24_and_160x45() {
    let dir = Scratch::new("views-sizes");
    let agent = FakeAgent::start(dir.path());
    let port = agent.port.to_string();
    for (width, height) in [(80u16, 24u16), (160, 45)] {
        let t = Tmux::start_sized(width, height);
        t.command(&format!(
            "{} attach {} --token-file {}",
            heaptui(),
            agent.address(),
            agent.token_file.display()
        ));
        t.wait_for("the ranking and the counters", |s| {
            s.contains("│▶") && s.contains("util ")
        });
        // Each view, its key and a text that shows its answer has arrived.
        let views = [
            ("units", "u", "liba.so"),
            ("leaks", "L", "Leak.Node"),
            ("growth", "w", "keep (aged.c:7)"),
            ("ages", "A", "snapshot boundaries ·"),
        ];
        for (name, key, shown) in views {
            t.keys(&[key]);
            let s = t.wait_settled(name, |s| s.contains(shown) && !s.contains("loading…"));
            let s = stable(&s, &port);
            for cut in [
                "ROPRIETARY",
                "EFINITELY",
                "NDIRECTLY",
                "ATEST",
                "ALLOC▲",
                "IVE▼",
            ] {
                assert!(
                    !s.contains(&format!(" {cut}")) && !s.contains(&format!("│{cut}")),
                    "{name} {width}x{height}: a header cut ({cut})\n{s}"
                );
            }
            match name {
                // The site is named by its caller, not the wrapper; its callers follow it.
                "growth" => {
                    assert!(!s.contains("xmalloc"), "{s}");
                    assert!(cells(&s, "keep (aged.c:7)")[0] == "keep (aged.c:7)", "{s}");
                }
                "units" => assert!(cells(&s, "libb.so")[1].starts_with("80 B"), "{s}"),
                "leaks" => assert!(s.contains("40 B"), "{s}"),
                _ => {}
            }
            insta::assert_snapshot!(format!("{name}_{width}x{height}"), s);
            t.back_home();
        }
        t.quit();
    }
}

/// Offline, every screen says what it can and cannot show: a recording's home screen says it
/// has no heap graph (Esc from its units went to a Threads screen "loading…" forever), a JSON
/// snapshot's ages and units say in one line what they need, and the footer offers neither
/// `r` nor `c` (they need a live agent).
#[test]
fn offline_screens_say_what_they_need() {
    let dir = Scratch::new("offline-needs");
    let rec = dir.write("ages.rec", &ages_vector());
    let t = Tmux::start_sized(80, 24);
    t.command(&format!("{} open {}", heaptui(), rec.display()));
    t.wait_for("the units of the recording", |s| s.contains("│▶ prog"));
    t.keys(&["Escape"]);
    let s = t.wait_for("the recording's home screen", |s| {
        s.contains("A recording has no heap graph")
    });
    assert!(!s.contains("loading…"), "{s}");
    assert!(s.contains("u allocation units"), "{s}");
    assert!(!s.contains("r snapshot") && !s.contains("c cancel"), "{s}");
    t.keys(&["A"]);
    t.wait_for("the recording's ages", |s| s.contains("odd_site (prog)"));
    t.quit();

    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/patent-example.json"
    );
    t.command(&format!("{} open {fixture}", heaptui()));
    let s = t.wait_for("the file's threads", |s| s.contains("thread-1"));
    assert!(!s.contains("r snapshot") && !s.contains("c cancel"), "{s}");
    t.keys(&["A"]);
    let s = t.wait_for("why the file has no ages", |s| {
        s.contains("has no allocation order")
    });
    assert!(s.contains("ages need a recording"), "{s}");
    t.back_home();
    t.keys(&["u"]);
    let s = t.wait_for("why the file has no units", |s| {
        s.contains("no allocation events")
    });
    assert!(s.contains("open a recording"), "{s}");
    assert!(!s.contains("heaptui attach`"), "{s}");
    t.quit();
}
