//! The capture from outside never leaves its target stopped or traced, whichever way heaptui
//! leaves the stop: done, failing, panicking, or killed (docs/reference.md §2). The test hook
//! `HEAPTUI_TEST_STOPPED_FIFO` holds heaptui while every thread of the target is stopped,
//! says `stopped` on stderr, and takes the way out from the FIFO.

mod live_common;
mod outside_common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use live_common::{Scratch, heaptui};
use outside_common::{SUM, Target, stopped_or_traced, target_exe};

/// `heaptui report pid:PID` held by the test hook once it has stopped the target.
struct Held {
    heaptui: Option<Child>,
    fifo: std::path::PathBuf,
}

impl Held {
    fn start(dir: &Path, pid: u32) -> Held {
        let fifo = dir.join("hold");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let mut heaptui = heaptui()
            .args(["report", &format!("pid:{pid}")])
            .env("HEAPTUI_TEST_STOPPED_FIFO", &fifo)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(heaptui.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert_eq!(line, "stopped\n");
        // The rest of its stderr is read when it ends.
        heaptui.stderr = Some(err.into_inner());
        Held {
            heaptui: Some(heaptui),
            fifo,
        }
    }

    fn pid(&self) -> u32 {
        self.heaptui.as_ref().map_or(0, Child::id)
    }

    /// Tells heaptui how to leave the stop; returns its exit code and stderr.
    fn leave(mut self, how: &str) -> (Option<i32>, String) {
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.fifo)
            .unwrap();
        writeln!(fifo, "{how}").unwrap();
        drop(fifo);
        let out = self.heaptui.take().unwrap().wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(mut child) = self.heaptui.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every thread of `pid` is in a tracing stop, traced by a thread of process `tracer`.
fn assert_stopped_by(pid: u32, tracer: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let tracing_thread = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .unwrap()
        .trim();
    assert!(
        Path::new(&format!("/proc/{tracer}/task/{tracing_thread}")).exists(),
        "traced by {tracing_thread}, not by a thread of heaptui {tracer}"
    );
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
        let state = stat.rsplit_once(')').unwrap().1.trim_start();
        assert!(state.starts_with('t'), "{stat}");
    }
}

/// The target was let go: it answers (so it runs), its heap intact, and no thread of it is
/// stopped or traced.
fn assert_let_go(target: &mut Target) {
    assert_eq!(target.check(), SUM);
    assert_eq!(stopped_or_traced(target.pid()), None);
}

#[test]
fn every_way_out_of_the_stop_lets_the_target_go() {
    let dir = Scratch::new("outside-safety");
    let exe = target_exe(dir.path());
    let mut target = Target::start(Command::new(&exe));
    let pid = target.pid();

    for (how, code, says) in [
        ("go", Some(0), ""),
        (
            "error",
            Some(1),
            "heaptui: test hook: stopped on request (\"error\")",
        ),
        (
            "panic",
            Some(101),
            "test hook: panic while the target is stopped",
        ),
    ] {
        let held = Held::start(dir.path(), pid);
        assert_stopped_by(pid, held.pid());
        let fifo = held.fifo.clone();
        let (got, err) = held.leave(how);
        assert_eq!(got, code, "{how}: {err}");
        assert!(err.contains(says), "{how}: {err}");
        assert_let_go(&mut target);
        std::fs::remove_file(fifo).unwrap();
    }

    // Killed while the target is stopped: the kernel lets every thread go.
    let mut held = Held::start(dir.path(), pid);
    assert_stopped_by(pid, held.pid());
    let mut heaptui = held.heaptui.take().unwrap();
    heaptui.kill().unwrap();
    heaptui.wait().unwrap();
    assert_let_go(&mut target);
    assert_eq!(target.quit(), Some(0));
}
