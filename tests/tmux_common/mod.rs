//! A real terminal for the TUI tests: a detached tmux session (120×36 unless asked) on a tmux server of its
//! own, a plain shell with a known prompt in it; keys go in with `send-keys`, the screen comes
//! back with `capture-pane`. Every wait polls the pane against a deadline — no fixed sleeps.
//!
//! tmux is required (CI installs it); without it the tests fail and say so.

#![allow(dead_code)]

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a wait lasts unless the test gives its own limit.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// The shell's prompt, so that quitting can be seen to give it back.
pub const PROMPT: &str = "ready> ";

/// A tmux server of its own (its own socket), killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn start() -> Tmux {
        Tmux::start_sized(120, 36)
    }

    /// A terminal of `width`×`height` (80×24 is the smallest the TUI is made for).
    pub fn start_sized(width: u16, height: u16) -> Tmux {
        match Command::new("tmux").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => panic!(
                "tmux is required for the terminal tests and was not found: install it \
                 (apt-get install tmux; .ci/run does)"
            ),
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let t = Tmux {
            socket: format!(
                "heaptui-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        };
        t.run(&[
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &format!("env 'PS1={PROMPT}' sh"),
        ]);
        t.run(&["set-option", "-g", "escape-time", "0"]);
        t.wait_for("the shell prompt", |s| s.contains(PROMPT.trim_end()));
        t
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("running tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend(keys);
        self.run(&args);
    }

    /// Types `text` as it is (no key names).
    pub fn literal(&self, text: &str) {
        self.run(&["send-keys", "-t", "0", "-l", text]);
    }

    /// Types a shell command line and Enter.
    pub fn command(&self, line: &str) {
        self.literal(line);
        self.keys(&["Enter"]);
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "0"]).stdout).into_owned()
    }

    /// Polls the pane until `ok` holds; fails with the last screen after [`DEADLINE`].
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_within(what, DEADLINE, ok)
    }

    /// Polls the pane until `ok` holds and the screen stays the same over three polls (the
    /// program may still be drawing the frame whose first lines made `ok` true); for
    /// snapshots of whole screens.
    pub fn wait_settled(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        let mut last = self.wait_for(what, &ok);
        let mut same = 0;
        while same < 2 {
            std::thread::sleep(Duration::from_millis(50));
            let s = self.screen();
            if s == last && ok(&s) {
                same += 1;
            } else {
                same = 0;
                last = s;
            }
            if start.elapsed() > DEADLINE {
                panic!("the screen never settled for {what}; it was:\n{last}");
            }
        }
        last
    }

    /// Polls the pane until `ok` holds on two captures in a row that read the same: a single
    /// capture can catch a frame half drawn (its first rows new, the rest not yet; seen in
    /// CI), and the caller reads more of the screen than `ok` looked at. Fails with the last
    /// screen after `limit`.
    pub fn wait_within(&self, what: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        let mut last: Option<String> = None;
        loop {
            let s = self.screen();
            if ok(&s) {
                if last.as_deref() == Some(s.as_str()) {
                    return s;
                }
                last = Some(s);
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            last = None;
            if start.elapsed() > limit {
                panic!("waited {limit:?} for {what}; the screen was:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}
