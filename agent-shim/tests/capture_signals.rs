//! The agent's signals as the program sees them (none of it should show): blocking calls
//! under snapshots (System V waits among them, also under snapshots taken over the protocol),
//! threads that cannot be stopped, and a program's own `SIGUSR2` handler beside the
//! `HEAPTUI_DUMP` trigger. Targets compiled here, run under the real preload.

mod common;
mod policy_support;

use std::path::{Path, PathBuf};

use common::{Run, TempDir, compile_c, run_dumping, run_preloaded};
use heaptui_analysis::{HeapGraph, ThreadState, snapshot};

const SYNC: &str = include_str!("targets/sync.h");
const PROC_STATE: &str = include_str!("targets/proc_state.h");

fn c_target(dir: &TempDir, name: &str, src: &str) -> PathBuf {
    compile_c(dir, name, &format!("{SYNC}\n{PROC_STATE}\n{src}"), &[])
}

/// The numbers of the snapshot files the run wrote, sorted.
fn snapshot_numbers(dir: &Path) -> Vec<u32> {
    let mut n: Vec<u32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix("snap.")?.strip_suffix(".hsnap")?;
            rest.rsplit('.').next()?.parse().ok()
        })
        .collect();
    n.sort_unstable();
    n
}

fn read_snapshot(dir: &Path, n: u32) -> HeapGraph {
    let suffix = format!(".{n}.hsnap");
    let path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("snap.") && name.ends_with(&suffix)
        })
        .unwrap_or_else(|| panic!("no snapshot {n} in {}", dir.display()));
    snapshot::read_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The target printed `stdout` and exited with 0 (its stderr and the agent log otherwise).
fn assert_ran(run: &Run, stdout: &str) {
    assert_eq!(
        run.stdout, stdout,
        "stderr:\n{}\nlog:\n{}",
        run.stderr, run.log
    );
    assert_eq!(
        run.code,
        Some(0),
        "stderr:\n{}\nlog:\n{}",
        run.stderr,
        run.log
    );
}

/// The agent's reported pause (`pause_ms=`) of snapshot `n`, from its log.
fn pause_ms(run: &Run, n: u32) -> f64 {
    let suffix = format!(".{n}.hsnap:");
    let line = run
        .log
        .lines()
        .find(|l| l.contains(&suffix) && l.contains("pause_ms="))
        .unwrap_or_else(|| panic!("no log line for snapshot {n}:\n{}", run.log));
    let value = line.split("pause_ms=").nth(1).unwrap();
    value.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn blocking_calls_sleep_their_full_time_under_snapshots_and_program_signals_still_interrupt() {
    let dir = TempDir::new("sig-blocking");
    let exe = c_target(&dir, "blocking", include_str!("targets/blocking.c"));
    let run = run_dumping(&dir, &exe);
    let functions = [
        "nanosleep",
        "clock_nanosleep",
        "clock_nanosleep_abs",
        "sleep",
        "usleep",
        "poll",
        "ppoll",
        "epoll_wait",
        "epoll_pwait",
        "select",
        "pselect",
        "pause",
        "sigsuspend",
        "sigwaitinfo",
        "sigtimedwait",
        "epoll_pwait2",
        "semop",
        "semtimedop",
        "msgrcv",
        "msgsnd",
        "recv",
        "recvfrom",
        "recvmsg",
        "send",
        "sendto",
        "sendmsg",
        "accept",
        "accept4",
        "connect_tcp",
        "connect_unix",
        "raw_nanosleep",
        "raw_ppoll",
        "raw_recvfrom",
        "raw_io_getevents",
        "libaio_io_getevents",
        "raw_pselect6",
        "raw_io_pgetevents",
        "read_socket",
        "write_socket",
        "readv_socket",
        "writev_socket",
        "read_chk_socket",
        "recvmmsg",
        "sendmmsg",
        "raw_recvmmsg",
        "sem_timedwait",
        "sem_clockwait",
        "aio_suspend",
        "thrd_sleep",
        "recv_chk",
        "recvfrom_chk",
    ];
    let mut expected: String = functions
        .iter()
        .map(|f| format!("{f} full=ok intr=eintr\n"))
        .collect();
    expected.push_str(&format!("usr1 handled: {}\n", functions.len()));
    assert_ran(&run, &expected);
    // Snapshots 1-3 were taken while every worker was inside its call, 4 before SIGUSR1, 5
    // at exit; each of the first three interrupted every worker's call, which the agent
    // resumed: so the test cannot pass without the retry path running.
    assert_eq!(snapshot_numbers(dir.path()), vec![1, 2, 3, 4, 5]);
    let retries = run.summary().get("blocking_retries");
    assert!(
        retries >= functions.len() as i64,
        "blocking_retries={retries}:\n{}",
        run.log
    );
    // The workers and the main thread were really stopped for the snapshots taken during
    // their calls. One more thread is glibc's POSIX AIO helper (reading the pipe aio_suspend
    // waits on), which glibc starts with every signal blocked: not stoppable, and said so.
    for n in 1..=4 {
        let graph = read_snapshot(dir.path(), n);
        assert_eq!(graph.threads.len(), functions.len() + 2, "snapshot {n}");
        let (stopped, others): (Vec<_>, Vec<_>) = graph
            .threads
            .iter()
            .partition(|t| t.state == ThreadState::Stopped);
        assert_eq!(stopped.len(), functions.len() + 1, "snapshot {n}");
        assert_eq!(
            others[0].state,
            ThreadState::NotStoppable("stop signal blocked".into()),
            "snapshot {n}"
        );
    }
}

#[test]
fn a_thread_in_a_recv_or_read_resumed_after_a_snapshot_is_cancelled_at_once() {
    // recv and read are cancellation points; after a snapshot cut one short the agent waits
    // for the rest of the socket's hour-long timeout before calling it again, and that wait
    // must be one too, or pthread_cancel would wait the hour out. A read nothing cut short is
    // cancelled inside libc, under the agent's naked stub, which the unwinder must cross.
    let dir = TempDir::new("sig-cancel-socket");
    let exe = c_target(
        &dir,
        "cancel_socket",
        include_str!("targets/cancel_socket.c"),
    );
    let run = run_dumping(&dir, &exe);
    assert_ran(
        &run,
        "recv cancelled\nread cancelled\nread_resumed cancelled\n",
    );
    // Both snapshots cut their call short, which the agent resumed.
    let retries = run.summary().get("blocking_retries");
    assert!(retries >= 2, "blocking_retries={retries}:\n{}", run.log);
}

#[test]
fn a_programs_eintr_on_a_pipe_stays_its_own_when_a_stop_lands_during_its_handler() {
    let dir = TempDir::new("sig-in-handler");
    let exe = c_target(
        &dir,
        "eintr_in_handler",
        include_str!("targets/eintr_in_handler.c"),
    );
    let mut target = policy_support::Target::start(&dir, &exe, &[], None);
    let mut client = target.client();
    // The handler runs with every signal blocked: the snapshot's stop waits for it to return,
    // and is then delivered over the registers of the read the program's signal ended.
    target.ask("interrupt", "in handler");
    let graph = client.graph();
    assert!(graph.threads.len() >= 2);
    assert_eq!(target.ask("result", "read:"), "read: EINTR");
    target.quit();
}

#[test]
fn system_v_waits_survive_snapshots_taken_over_the_protocol_and_program_signals_still_end_them() {
    let dir = TempDir::new("sig-sysv");
    let exe = c_target(&dir, "sysv_waits", include_str!("targets/sysv_waits.c"));
    // "ready": one thread asleep in semop, one in msgrcv, neither with anything to take.
    let mut target = policy_support::Target::start(&dir, &exe, &[], None);
    let mut client = target.client();
    for n in 1..=3 {
        let graph = client.graph();
        assert_eq!(graph.threads.len(), 3, "snapshot {n}");
        for t in &graph.threads {
            assert_eq!(
                t.state,
                ThreadState::Stopped,
                "snapshot {n}, thread {}",
                t.tid
            );
        }
    }
    // Every snapshot cut both calls short; each was resumed, so each still waits for what
    // the program gives it now.
    target.ask("release", "blocked again");
    client.snapshot();
    target.ask("interrupt", "usr1 handled");
    let log_path = target.log.clone();
    let lines = target.quit();
    assert_eq!(
        lines,
        [
            "ready",
            "semop 1: 0",
            "msgrcv 1: 5 hello",
            "blocked again",
            "semop 2: EINTR",
            "msgrcv 2: EINTR",
            "usr1 handled: 2",
        ]
    );
    // The three snapshots taken during round 1 interrupted both calls: so the test cannot
    // pass without the retry path running.
    let log = std::fs::read_to_string(&log_path).unwrap();
    let retries: u64 = log
        .split("blocking_retries=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no blocking_retries in the log:\n{log}"));
    assert!(retries >= 6, "blocking_retries={retries}:\n{log}");
}

#[test]
fn unstoppable_threads_are_waited_out_once_then_briefly() {
    let dir = TempDir::new("sig-unstoppable");
    let exe = c_target(&dir, "unstoppable", include_str!("targets/unstoppable.c"));
    let run = run_dumping(&dir, &exe);
    assert_ran(&run, "sigwait got SIGUSR1: 1\ndone\n");
    let state = |graph: &HeapGraph, name: &str| {
        graph
            .threads
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no thread {name}"))
            .state
            .clone()
    };
    let blocked = ThreadState::NotStoppable("stop signal blocked".into());
    let in_vfork = ThreadState::NotStoppable("in uninterruptible sleep (vfork or I/O)".into());
    let first = read_snapshot(dir.path(), 1);
    assert_eq!(state(&first, "rawmask"), blocked);
    assert_eq!(state(&first, "unstoppable"), ThreadState::Stopped);
    for n in [1, 2, 3] {
        let graph = read_snapshot(dir.path(), n);
        assert_eq!(
            state(&graph, "sigwaiter"),
            ThreadState::Stopped,
            "snapshot {n}"
        );
    }
    // Each thread that cannot answer is waited for the whole deadline once (the raw mask in
    // snapshot 1, the vfork parent in 2), then only briefly, and reported the same way each time.
    for n in [2, 3] {
        let graph = read_snapshot(dir.path(), n);
        assert_eq!(state(&graph, "rawmask"), blocked, "snapshot {n}");
        assert_eq!(state(&graph, "vforker"), in_vfork, "snapshot {n}");
    }
    // A loose bound only (timing goals belong to benchmarks): threads that did not answer the
    // last stop must not cost the 1 s deadline again.
    let pause = pause_ms(&run, 3);
    assert!(pause < 500.0, "snapshot 3 paused {pause} ms:\n{}", run.log);
    // Three incomplete captures: the first is said in the log, the others only counted in the
    // exit summary that then goes to stderr too. The line names the thread and the reason.
    let rawmask = first
        .threads
        .iter()
        .find(|t| t.name == "rawmask")
        .unwrap()
        .tid;
    let said: Vec<&str> = run
        .log
        .lines()
        .filter(|l| l.contains("a capture was incomplete"))
        .collect();
    assert_eq!(said.len(), 1, "{}", run.log);
    assert!(
        said[0].contains(&format!(
            "a capture was incomplete: thread {rawmask} was not stopped (stop signal blocked)"
        )),
        "{}",
        said[0]
    );
}

#[test]
fn a_program_sigusr2_handler_runs_as_installed_and_the_dump_trigger_stays() {
    let dir = TempDir::new("sig-usr2");
    let exe = c_target(&dir, "usr2", include_str!("targets/usr2.c"));
    let run = run_dumping(&dir, &exe);
    let expected = "inherited default: 1\n\
                    old was default: 1\n\
                    reads back: 1 1 1\n\
                    own raise: calls=1 info=1 mask=1\n\
                    outside: calls=2\n\
                    signal returned previous: 1\n\
                    plain: 1\n\
                    old was plain: 1\n\
                    oneshot: 1, then default: 1\n\
                    default dumps: oneshot=1\n\
                    ignored: 1\n\
                    usr1 direct: 1\n";
    assert_ran(&run, expected);
    // 1: sent from another process; 2: SIGUSR2 at SIG_DFL; 3: exit. The program's own raise
    // to its own handler (step 3) and the plain and one-shot ones asked for none.
    assert_eq!(snapshot_numbers(dir.path()), vec![1, 2, 3]);
}

#[test]
fn without_the_dump_trigger_sigusr2_is_the_programs_alone() {
    // The same program without HEAPTUI_DUMP: identical up to step 7, where SIG_DFL kills it
    // as it would without the agent.
    let dir = TempDir::new("sig-usr2-plain");
    let exe = c_target(&dir, "usr2", include_str!("targets/usr2.c"));
    let run = run_preloaded(&dir, &exe, &[], &[]);
    assert!(
        run.stdout
            .starts_with("inherited default: 1\nold was default: 1\nreads back: 1 1 1\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("oneshot: 1, then default: 1\n"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("default dumps"), "{}", run.stdout);
    assert_eq!(run.code, None, "killed by SIGUSR2 at SIG_DFL");
}

#[test]
fn fork_children_under_the_dump_trigger_work_alone_and_are_never_stuck() {
    let dir = TempDir::new("sig-fork");
    let exe = c_target(&dir, "forkdump", include_str!("targets/forkdump.c"));
    let run = run_dumping(&dir, &exe);
    assert_ran(&run, "children ok: 20/20, killed by SIGUSR2: 1\n");
    // Only the parent writes snapshots (1-3 on request, 4 at exit); the children, which have
    // no agent thread, write none at their exit.
    assert_eq!(snapshot_numbers(dir.path()), vec![1, 2, 3, 4]);
    let summaries = run.summaries();
    let parent = summaries.last().unwrap().pid;
    let snapshot_pids: Vec<u32> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("snap.")?.split('.').next()?.parse().ok()
        })
        .collect();
    assert!(
        snapshot_pids.iter().all(|&p| p == parent),
        "{snapshot_pids:?}"
    );
    // One exit summary per process that exited normally (the parent and its 20 children),
    // each child's allocations tracked exactly: its 101 mallocs on top of what it inherited.
    assert_eq!(summaries.len(), 21, "{}", run.log);
    for s in &summaries {
        for key in ["unknown_frees", "unknown_reallocs", "stale_entries"] {
            assert_eq!(s.get(key), 0, "{key} in process {}: {:?}", s.pid, s.values);
        }
    }
    let parent_summary = summaries.iter().find(|s| s.pid == parent).unwrap();
    for child in summaries.iter().filter(|s| s.pid != parent) {
        let mallocs = child.user("malloc");
        assert!(mallocs >= 101, "child {}: {mallocs} mallocs", child.pid);
        assert!(
            mallocs <= parent_summary.user("malloc") + 101,
            "child {}: {mallocs} mallocs",
            child.pid
        );
    }
}

#[test]
fn the_stop_signal_survives_a_program_that_resets_or_takes_its_number() {
    let dir = TempDir::new("sig-stopnum");
    let exe = c_target(&dir, "stopnum", include_str!("targets/stopnum.c"));
    let run = run_dumping(&dir, &exe);
    assert_ran(
        &run,
        "alive after resetting all signals\n\
         old was default: 1, reads back: 1\n\
         own handler: 1\n\
         after a snapshot: 1\n",
    );
    for n in [1, 2] {
        let graph = read_snapshot(dir.path(), n);
        assert_eq!(graph.threads.len(), 2, "snapshot {n}");
        for t in &graph.threads {
            assert_eq!(
                t.state,
                ThreadState::Stopped,
                "snapshot {n}, thread {}",
                t.tid
            );
        }
    }
}
