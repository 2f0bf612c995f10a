//! `heaptui attach pid:PID` on a process started without the agent (docs/reference.md §2), in a
//! real terminal: the TUI captures it from outside, ranks its threads, drills into a thread's
//! frames and says that cancelling needs the agent; the process runs on, neither stopped nor
//! traced, after the TUI quits.

mod live_common;
mod outside_common;
mod tmux_common;

use std::process::Command;

use outside_common::{SUM, Target, stopped_or_traced, target_exe};
use tmux_common::{PROMPT, Tmux};

#[test]
fn attach_to_a_process_without_the_agent_shows_its_threads_and_refuses_to_cancel() {
    let dir = live_common::Scratch::new("outside-tui");
    let mut target = Target::start(Command::new(target_exe(dir.path())));
    let pid = target.pid();
    let t = Tmux::start_sized(80, 24);
    t.command(&format!(
        "{} attach pid:{pid}",
        env!("CARGO_BIN_EXE_heaptui")
    ));
    // Its two threads, main and the worker (waited for whole: a screen caught while it is
    // drawn may show one row yet).
    let kept_rows = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with('│') && l.contains(" kept "))
            .count()
    };
    let s = t.wait_for("the threads captured from outside", |s| {
        s.contains("Threads by total")
            && s.contains("from outside")
            && s.contains(&pid.to_string())
            && kept_rows(s) >= 2
    });
    assert_eq!(kept_rows(&s), 2, "{s}");

    // The worker (its 50 blocks are its own) ranks first: unwound frame by frame, its own
    // function among its frames, and its stack above them as `<thread>`.
    t.keys(&["Enter"]);
    let s = t.wait_for("the worker's frames", |s| {
        s.contains("Frames of thread") && s.contains("worker") && s.contains("<thread>")
    });
    assert!(!s.contains("heaptui_agent"), "{s}");
    t.keys(&["Escape"]);
    t.wait_for("the ranking again", |s| s.contains("Threads by total"));

    t.keys(&["c"]);
    let s = t.wait_for("why cancelling is refused", |s| {
        s.contains("cancelling a thread needs the agent")
    });
    assert!(!s.contains("Cancel a thread"), "no dialog opens: {s}");

    t.keys(&["q"]);
    t.wait_for("the shell again", |s| {
        s.matches(PROMPT.trim_end()).count() >= 2
    });
    assert_eq!(stopped_or_traced(pid), None);
    assert_eq!(target.check(), SUM);
    assert_eq!(target.quit(), Some(0));
}
