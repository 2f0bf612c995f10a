//! Every process of a real program is reachable: fork children under `HEAPTUI_FOLLOW_FORK=1`
//! and exec'd children under `HEAPTUI_FOLLOW_EXEC=1` answer `heaptui report pid:PID` (a
//! child's capture is whole: its threads, its heap), a process whose configured address is
//! taken listens on its per-process socket instead and says so once (an exec'd child does not:
//! the process that started it said where its programs listen), and bad `pid:` arguments
//! get one line and the documented exit code. Real targets under the real agent; each test has
//! a token directory of its own (`XDG_RUNTIME_DIR`), so what it finds there is its own.

mod live_common;
mod tmux_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use live_common::*;
use serde_json::Value;

/// A target whose children are the point. Commands on stdin:
/// - `fork`: forks a child that starts threads `kid-0` and `kid-1` (each holding a block of
///   3000 + i bytes), holds a 7000-byte block on its main frame, and answers `child PID`
///   itself once all of that is in place; it lives until the target's input ends;
/// - `exec`: forks a child that execs this program as `forks relay`, which execs it again as
///   `forks child` (as `sh -c 'exec prog'` does): that holds a 4321-byte block and answers
///   `exec PID`;
/// - `big N`: allocates N 64-byte nodes kept in a list (a heap that takes a while to
///   capture); answers `ok`;
/// - end of input: the children end, are waited for, and the target prints `done`.
const FORKS_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Children read their end of this pipe until the target closes the other: their cue to end. */
static int quit_pipe[2];
static pthread_barrier_t ready;

static void wait_for_quit(void) { char c; while (read(quit_pipe[0], &c, 1) > 0) {} }

static void *kid(void *arg) {
    long i = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "kid-%ld", i);
    pthread_setname_np(pthread_self(), name);
    char *volatile mine = malloc(3000 + i);
    memset(mine, 1, 3000 + i);
    pthread_barrier_wait(&ready);
    wait_for_quit();
    free(mine);
    return 0;
}

static void child(void) {
    close(quit_pipe[1]);
    pthread_barrier_init(&ready, 0, 3);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, kid, (void *)i);
    char *volatile held = malloc(7000);
    memset(held, 2, 7000);
    pthread_barrier_wait(&ready);
    printf("child %d\n", getpid());
    fflush(stdout);
    wait_for_quit();
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    free(held);
    exit(0);
}

struct node { struct node *next; char pad[56]; };

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "relay") == 0) {
        execl("/proc/self/exe", "forks", "child", (char *)0);
        _exit(127);
    }
    if (argc > 1) {
        char *volatile held = malloc(4321);
        memset(held, 3, 4321);
        printf("exec %d\n", getpid());
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {}
        free(held);
        return 0;
    }
    pipe(quit_pipe);
    int exec_in[2];
    pipe(exec_in);
    struct node *volatile list = 0;
    char line[64];
    int children = 0;
    while (fgets(line, sizeof line, stdin)) {
        long n;
        if (strcmp(line, "fork\n") == 0) {
            fflush(stdout);
            if (fork() == 0) child();
            children++;
        } else if (strcmp(line, "exec\n") == 0) {
            fflush(stdout);
            if (fork() == 0) {
                dup2(exec_in[0], 0);
                close(exec_in[1]);
                execl("/proc/self/exe", "forks", "relay", (char *)0);
                _exit(127);
            }
            children++;
        } else if (sscanf(line, "big %ld", &n) == 1) {
            for (long k = 0; k < n; k++) {
                struct node *x = malloc(sizeof *x);
                x->next = list;
                list = x;
            }
            printf("ok\n");
            fflush(stdout);
        } else {
            printf("?\n");
            fflush(stdout);
        }
    }
    close(quit_pipe[1]);
    close(exec_in[1]);
    while (children-- > 0) wait(0);
    while (list) { struct node *x = list->next; free(list); list = x; }
    printf("done\n");
    return 0;
}
"#;

/// A scratch directory with a token directory of its own.
struct Isolated {
    scratch: Scratch,
}

impl Isolated {
    fn new(tag: &str) -> Isolated {
        let scratch = Scratch::new(tag);
        std::fs::create_dir_all(scratch.path().join("xdg")).unwrap();
        Isolated { scratch }
    }

    fn path(&self) -> &Path {
        self.scratch.path()
    }

    fn xdg(&self) -> PathBuf {
        self.path().join("xdg")
    }

    /// Where the agents of this test keep their files.
    fn token_dir(&self) -> PathBuf {
        self.xdg().join("heaptui")
    }

    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.token_dir())
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn start(&self, exe: &Path, listen: &str, env: &[(&str, &str)]) -> Target {
        let xdg = self.xdg();
        let mut env = env.to_vec();
        env.push(("XDG_RUNTIME_DIR", xdg.to_str().unwrap()));
        Target::start(self.path(), exe, listen, &env)
    }

    /// `heaptui ARGS` in this test's token directory, killed (and the test failed) if it has
    /// not ended within a minute.
    fn heaptui(&self, args: &[&str]) -> Output {
        let mut cmd = heaptui();
        cmd.args(args).env("XDG_RUNTIME_DIR", self.xdg());
        output_within(cmd, Duration::from_secs(60))
    }

    fn report(&self, source: &str) -> Value {
        let out = self.heaptui(&["report", source, "--json"]);
        assert!(
            out.status.success(),
            "heaptui report {source}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Runs `cmd` with captured output; kills it and fails if it runs longer than `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} did not end within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn forks(dir: &Path) -> PathBuf {
    compile_c(dir, "forks", FORKS_C)
}

/// The pid in a `WORD PID` answer.
fn pid_in(answer: &str, word: &str) -> u32 {
    answer
        .strip_prefix(word)
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("expected `{word} PID`, got {answer:?}"))
}

fn threads_named<'a>(report: &'a Value, prefix: &str) -> Vec<&'a Value> {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with(prefix))
        .collect()
}

/// The row of process `pid` in `heaptui ps`'s table `text`.
fn ps_row(text: &str, pid: u32) -> &str {
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{pid} ")))
        .unwrap_or_else(|| panic!("no row for {pid}:\n{text}"))
}

/// The one error line of a failed command, with its exit code.
fn failure(out: &Output) -> (Option<i32>, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    (out.status.code(), err)
}

#[test]
fn a_fork_child_under_follow_fork_is_captured_whole_through_its_pid() {
    let t = Isolated::new("fork-child");
    let exe = forks(t.path());
    let mut target = t.start(&exe, "127.0.0.1:0", &[("HEAPTUI_FOLLOW_FORK", "1")]);
    let parent = target.child.id();
    let child = pid_in(&target.command("fork"), "child ");

    // The child's own capture: its three threads, stopped and walked, and its own blocks.
    let report = t.report(&format!("pid:{child}"));
    assert_eq!(report["process"]["pid"], child);
    let kids = threads_named(&report, "kid-");
    assert_eq!(kids.len(), 2, "{:#?}", report["threads"]);
    for k in &kids {
        let i: u64 = k["name"].as_str().unwrap()[4..].parse().unwrap();
        assert!(k["proprietary"].as_u64().unwrap() >= 3000 + i, "{k}");
        assert!(k["frames"].as_array().unwrap().len() >= 2, "{k}");
    }
    let threads = report["threads"].as_array().unwrap();
    assert_eq!(
        threads.len(),
        3,
        "the child has its main thread and two kids: {threads:#?}"
    );
    let main = threads
        .iter()
        .find(|t| t["tid"] == child)
        .expect("the child's main thread");
    assert!(main["proprietary"].as_u64().unwrap() >= 7000, "{main}");

    // A snapshot file of the child, and the parent's own report: no kid there.
    let file = t.path().join("child.hsnap");
    let out = t.heaptui(&[
        "snapshot",
        &format!("pid:{child}"),
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let offline = t.report(file.to_str().unwrap());
    assert_eq!(offline["process"]["pid"], child);
    let report = t.report(&format!("pid:{parent}"));
    assert_eq!(report["process"]["pid"], parent);
    assert!(threads_named(&report, "kid-").is_empty());

    // The child listens on its own socket, with its own token, and says nothing.
    let files = t.files();
    let socket = format!("pid-{child}.sock");
    assert!(files.contains(&socket), "{files:?}");
    assert!(files.contains(&format!("pid-{child}.agent")), "{files:?}");
    let child_token = files
        .iter()
        .find(|f| f.starts_with("unix-") && f.contains(&socket))
        .expect("the child's token file");
    assert_ne!(
        std::fs::read_to_string(t.token_dir().join(child_token)).unwrap(),
        target.token() + "\n"
    );
    let (out, log) = target.finish();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !log.contains(&format!("heaptui[{child}]: listening")),
        "fork children say nothing:\n{log}"
    );
    // Both ended normally: their files went with them.
    let left: Vec<String> = t.files().into_iter().filter(|f| f != ".lock").collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn without_follow_fork_a_child_has_no_server_and_its_pid_says_so() {
    let t = Isolated::new("fork-off");
    let exe = forks(t.path());
    let mut target = t.start(&exe, "127.0.0.1:0", &[]);
    let child = pid_in(&target.command("fork"), "child ");
    let out = t.heaptui(&["report", &format!("pid:{child}")]);
    let (code, err) = failure(&out);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("pid:{child} (")) && err.contains("HEAPTUI_FOLLOW_FORK=1"),
        "{err}"
    );
    assert!(!t.files().iter().any(|f| f.contains(&child.to_string())));
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));
}

/// A fork child made while an agent thread of its parent held the server's state (a capture
/// under way: the world runs again while the capture symbolizes and the analysis runs) starts
/// from fresh state: every child answers. A client keeps the parent capturing, back to back,
/// while the children are forked.
#[test]
fn fork_children_made_while_their_parent_is_captured_answer() {
    let t = Isolated::new("fork-busy");
    let exe = forks(t.path());
    let mut target = t.start(&exe, "127.0.0.1:0", &[("HEAPTUI_FOLLOW_FORK", "1")]);
    let _watchdog = Watchdog::new(target.child.id(), Duration::from_secs(300));
    assert_eq!(target.command("big 20000"), "ok");
    let stop = Arc::new(AtomicBool::new(false));
    let captures = Arc::new(AtomicUsize::new(0));
    let mut client = target.client();
    let hammer = {
        let (stop, captures) = (stop.clone(), captures.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                client.snapshot();
                captures.fetch_add(1, Ordering::AcqRel);
            }
        })
    };
    // Once the first capture is done, the next is under way whenever a child is forked.
    while captures.load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let children: Vec<u32> = (0..6)
        .map(|_| pid_in(&target.command("fork"), "child "))
        .collect();
    stop.store(true, Ordering::Release);
    hammer.join().unwrap();
    for child in children {
        let report = t.report(&format!("pid:{child}"));
        assert_eq!(report["process"]["pid"], child);
        assert_eq!(threads_named(&report, "kid-").len(), 2);
    }
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));
}

/// Kills a target that is still running when the limit passes (a deadlocked fork child would
/// otherwise leave the test waiting for its answer forever): its reader then sees the end of
/// its output and the test fails there.
struct Watchdog {
    done: Option<std::sync::mpsc::Sender<()>>,
}

impl Watchdog {
    fn new(pid: u32, limit: Duration) -> Watchdog {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                eprintln!("watchdog: pid {pid} still runs after {limit:?}; killing it");
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        });
        Watchdog { done: Some(done) }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
    }
}

#[test]
fn an_exec_child_that_cannot_take_the_address_falls_back_to_its_pid_socket_as_its_parent_said() {
    exec_child_falls_back(&[("HEAPTUI_FOLLOW_EXEC", "1")]);
}

/// As pg_ctl starts the postmaster: the fork child's own server is silent, and so is the
/// program it execs.
#[test]
fn an_exec_child_of_a_followed_fork_child_falls_back_as_its_parent_said() {
    exec_child_falls_back(&[("HEAPTUI_FOLLOW_EXEC", "1"), ("HEAPTUI_FOLLOW_FORK", "1")]);
}

fn exec_child_falls_back(env: &[(&str, &str)]) {
    let t = Isolated::new("exec");
    let exe = forks(t.path());
    let listen = format!("unix:{}", t.path().join("agent.sock").display());
    let mut target = t.start(&exe, &listen, env);
    let parent = target.child.id();
    let child = pid_in(&target.command("exec"), "exec ");
    let report = t.report(&format!("pid:{child}"));
    assert_eq!(report["process"]["pid"], child);
    assert!(
        report["process"]["command"]
            .as_str()
            .unwrap()
            .contains("child"),
        "the exec'd program: {}",
        report["process"]
    );
    assert!(
        report["totals"]["bytes"].as_u64().unwrap() >= 4321,
        "{}",
        report["totals"]
    );
    // The parent still answers on the configured address.
    assert_eq!(t.report(&listen)["process"]["pid"], parent);
    // The parent said, once, where the programs it starts listen; the child (relay, then
    // child, two programs in that process) landed there and said nothing.
    let log = target.log_text();
    let said_by = |pid: u32| -> Vec<&str> {
        log.lines()
            .filter(|l| l.starts_with(&format!("heaptui[{pid}]: ")) && l.contains("listen"))
            .collect()
    };
    assert_eq!(said_by(child), Vec::<&str>::new(), "{log}");
    let parent_said = said_by(parent);
    assert!(
        parent_said.len() == 1
            && parent_said[0].contains(&format!("listening on {listen}"))
            && parent_said[0].contains("per-process sockets: heaptui ps lists them"),
        "{log}"
    );
    let socket = t.token_dir().join(format!("pid-{child}.sock"));
    assert!(socket.exists(), "{}", socket.display());
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_process_whose_port_is_taken_listens_on_its_pid_socket() {
    let t = Isolated::new("port-taken");
    let exe = shapes(t.path());
    // The port is held here for the whole test: the agent cannot have it.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    holder.set_nonblocking(true).unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let target = t.start(&exe, &taken, &[]);
    let pid = target.child.id();
    assert_eq!(
        target.address,
        format!(
            "unix:{}",
            t.token_dir().join(format!("pid-{pid}.sock")).display()
        )
    );
    let log = target.log_text();
    assert!(
        log.contains(&format!("cannot listen on {taken}: Address already in use")),
        "{log}"
    );
    let report = t.report(&format!("pid:{pid}"));
    assert_eq!(report["process"]["pid"], pid);
    assert_eq!(threads_named(&report, "worker-").len(), 4);
    assert!(
        holder.accept().is_err(),
        "nothing reached the holder of the port"
    );
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn ps_lists_the_agents_that_answer_and_sweeps_the_files_of_dead_ones() {
    let t = Isolated::new("ps");
    let exe = shapes(t.path());
    let tcp = t.start(&exe, "127.0.0.1:0", &[]);
    let unix_listen = format!("unix:{}", t.token_dir().join("run-1.sock").display());
    let unix = t.start(&exe, &unix_listen, &[]);
    let mut dead = t.start(&exe, "127.0.0.1:0", &[]);
    let dead_pid = dead.child.id();
    let dead_token = dead.token_file.clone();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    // Killed: its exit handler never ran.
    let dead_record = t.token_dir().join(format!("pid-{dead_pid}.agent"));
    assert!(dead_record.exists() && dead_token.exists());

    let out = t.heaptui(&["ps", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mine: Vec<&Value> = listed
        .iter()
        .filter(|r| {
            [tcp.child.id(), unix.child.id(), dead_pid]
                .contains(&(r["pid"].as_u64().unwrap() as u32))
        })
        .collect();
    assert_eq!(mine.len(), 2, "{listed:#?}");
    for (row, target) in mine.iter().zip([&tcp, &unix]) {
        assert_eq!(row["pid"], target.child.id());
        assert_eq!(row["address"], target.address.as_str());
        assert_eq!(row["token_file"], target.token_file.to_str().unwrap());
        assert!(row["command"].as_str().unwrap().contains("shapes"), "{row}");
        // The four workers' blocks, the shared one and the global one at least.
        assert!(
            row["live_bytes"].as_u64().unwrap() >= 4 * 2000 + 3000 + 1000,
            "{row}"
        );
    }
    assert!(
        !dead_record.exists() && !dead_token.exists(),
        "{:?}",
        t.files()
    );
    for live in [&tcp, &unix] {
        assert!(live.token_file.exists());
        let record = t.token_dir().join(format!("pid-{}.agent", live.child.id()));
        assert!(record.exists());
    }
    assert!(t.token_dir().join("run-1.sock").exists());

    let out = t.heaptui(&["ps"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text.lines().next().unwrap();
    for column in ["PID", "UPTIME", "LIVE HEAP", "ADDRESS", "COMMAND"] {
        assert!(header.contains(column), "{text}");
    }
    for target in [&tcp, &unix] {
        let row = ps_row(&text, target.child.id());
        assert!(row.contains(&target.address), "{row}");
    }
    for target in [tcp, unix] {
        let (out, _) = target.finish();
        assert_eq!(out.status.code(), Some(0));
    }
}

#[test]
fn an_agent_sweeps_the_files_of_dead_agents_when_it_starts() {
    let t = Isolated::new("sweep-start");
    let exe = shapes(t.path());
    let mut dead = t.start(&exe, "127.0.0.1:0", &[]);
    let dead_pid = dead.child.id();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let before = t.files();
    assert!(
        before.contains(&format!("pid-{dead_pid}.agent")),
        "{before:?}"
    );
    // A socket nobody listens on any more, as a killed `heaptui run` target leaves.
    drop(std::os::unix::net::UnixListener::bind(t.token_dir().join("run-2.sock")).unwrap());
    let live = t.start(&exe, "127.0.0.1:0", &[]);
    let after = t.files();
    let expected = vec![
        ".lock".to_string(),
        format!("pid-{}.agent", live.child.id()),
        live.token_file
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string(),
    ];
    let mut expected = expected;
    expected.sort();
    assert_eq!(after, expected);
    let (out, _) = live.finish();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn command_lines_with_control_characters_are_printed_on_one_line_without_them() {
    // A program started through a name holding a newline and a terminal escape: `heaptui ps`
    // shows it on its one row, each control character a space; so does the one line that says
    // a process has no agent.
    let t = Isolated::new("cmd-escape");
    let exe = shapes(t.path());
    let odd = t.path().join("shapes\n\u{1b}[31mred");
    std::os::unix::fs::symlink(&exe, &odd).unwrap();
    let target = t.start(&odd, "127.0.0.1:0", &[]);
    let out = t.heaptui(&["ps"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let row = ps_row(&text, target.child.id());
    assert!(row.ends_with("shapes  [31mred"), "{row:?}");
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));

    let mut bare = Command::new("sh")
        .args(["-c", "read line", "sh", "a\nb\u{1b}[2J"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // The command line is the shell's once it has exec'd (before, it is the test's own, or
    // empty): wait for that, as heaptui reads it from /proc.
    let cmdline = format!("/proc/{}/cmdline", bare.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read(&cmdline).is_ok_and(|c| c.ends_with(b"a\nb\x1b[2J\0")) {
        assert!(std::time::Instant::now() < deadline, "sh never exec'd");
        std::thread::yield_now();
    }
    let pid = format!("pid:{}", bare.id());
    let (_, err) = failure(&t.heaptui(&["cancel", &pid, "1", "--dry-run"]));
    drop(bare.stdin.take());
    bare.wait().unwrap();
    assert!(err.contains("a b [2J) has no heaptui agent"), "{err:?}");
}

#[test]
fn bad_pid_arguments_get_one_line_and_the_documented_exit_code() {
    let t = Isolated::new("bad-pid");
    let exe = shapes(t.path());
    for command in [
        &["report"][..],
        &["snapshot", "-o", "/nonexistent/x"],
        &["cancel", "--dry-run"],
        &["attach"],
    ] {
        for (arg, code, says) in [
            (
                "pid:abc",
                2,
                "invalid process \"pid:abc\": \"abc\" is not a process id",
            ),
            ("pid:", 2, "invalid process \"pid:\""),
        ] {
            let mut args = vec![command[0], arg];
            args.extend(&command[1..]);
            if command[0] == "cancel" {
                args.push("1");
            }
            let out = t.heaptui(&args);
            let (got, err) = failure(&out);
            assert_eq!(got, Some(code), "{args:?}: {err}");
            assert!(
                err.starts_with(&format!("heaptui: {says}")),
                "{args:?}: {err}"
            );
        }
    }
    // Above the kernel's largest pid: no such process, now or ever.
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let none = format!("pid:{}", pid_max + 1);
    let (code, err) = failure(&t.heaptui(&["report", &none]));
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        format!(
            "heaptui: {none}: no such process (heaptui ps lists the processes with an agent)\n"
        )
    );
    // A process started without the agent: `report` and `snapshot` capture it from outside
    // (tests/outside_cli.rs), `cancel` needs its agent.
    let mut bare = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (code, err) =
        failure(&t.heaptui(&["cancel", &format!("pid:{}", bare.id()), "1", "--dry-run"]));
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(&format!("heaptui: pid:{} (", bare.id()))
            && err.contains("has no heaptui agent: start it with LD_PRELOAD=$(heaptui agent-path)"),
        "{err}"
    );
    drop(bare.stdin.take());
    assert!(bare.wait().unwrap().success());
    // Another user's process, asked by someone who is not root.
    let nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_heaptui"))
        .args(["report", &format!("pid:{}", std::process::id())])
        .env("XDG_RUNTIME_DIR", t.xdg())
        .output()
        .expect("setpriv (util-linux) runs a command as another user");
    let (code, err) = failure(&nobody);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("pid:{} (", std::process::id()))
            && err.contains("belongs to uid 0: only that user or root can reach it"),
        "{err}"
    );
}

#[test]
fn attach_pid_opens_the_tui_with_the_address_in_its_header() {
    let t = Isolated::new("attach-pid");
    let exe = shapes(t.path());
    let target = t.start(&exe, "127.0.0.1:0", &[]);
    let tmux = tmux_common::Tmux::start();
    tmux.literal(&format!(
        "XDG_RUNTIME_DIR={} {} attach pid:{}",
        t.xdg().display(),
        env!("CARGO_BIN_EXE_heaptui"),
        target.child.id()
    ));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_within("the live ranking", Duration::from_secs(30), |s| {
        s.contains("live (agent") && s.contains("worker-3")
    });
    let header = screen.lines().next().unwrap();
    assert!(
        header.contains(&format!("pid {}", target.child.id()))
            && header.contains(&format!("· {} ", target.address)),
        "{header}"
    );
    tmux.keys(&["q"]);
    tmux.wait_for("the shell", |s| {
        s.lines()
            .last()
            .is_some_and(|l| l.contains(tmux_common::PROMPT.trim_end()))
            || s.trim_end().ends_with(tmux_common::PROMPT.trim_end())
    });
    let (out, _) = target.finish();
    assert_eq!(out.status.code(), Some(0));
}
