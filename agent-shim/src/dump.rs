//! Snapshot files on request: `HEAPTUI_DUMP=PREFIX` makes `SIGUSR2`, and the process's exit,
//! write a binary snapshot `PREFIX.<pid>.<n>.hsnap` (docs/reference.md §2, §4).
//!
//! Owns: the agent thread (started from the agent's constructor, marked as the agent's own so
//! it is never stopped or listed), the dump trigger that `SIGUSR2` calls (it only writes one
//! byte to a pipe: async-signal-safe; `signals::chain` keeps it working beside a handler the
//! program installs), the exit hook, and the file writing (a temporary name, then a rename,
//! so a reader never sees half a file). Every capture happens on the agent thread; the
//! exiting thread only asks for one and waits, with a deadline, so it is stopped like any
//! other thread.
//!
//! Must never: capture from a signal handler or a hook, or hold up the program's exit for
//! longer than the deadline.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::capture::{self, stop};
use crate::config::config;
use crate::registry::blocks;

/// The pipe's write end (the signal handler's only resource), and the pid that owns the agent
/// thread (a fork child has none: its signals and exit are ignored here).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// Number of the next snapshot file.
static NEXT: AtomicU32 = AtomicU32::new(1);

const ON_SIGNAL: u8 = b's';
const ON_EXIT: u8 = b'x';

/// Completed exit captures, for the exiting thread to wait on.
static EXIT_DONE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// How long the exit hook waits for the final snapshot.
const EXIT_DEADLINE: Duration = Duration::from_secs(60);

/// Asks the agent thread for a snapshot; called by the `SIGUSR2` dispatcher
/// (`signals::chain`), in a signal handler.
extern "C" fn on_sigusr2() {
    // SAFETY: errno is thread-local and addressable; restored before returning.
    let saved = unsafe { *libc::__errno_location() };
    let fd = WAKE_FD.load(Ordering::Relaxed);
    // SAFETY: getpid and write(2) are async-signal-safe; the buffer is a local byte.
    unsafe {
        if fd >= 0 && libc::getpid() == OWNER_PID.load(Ordering::Relaxed) {
            libc::write(fd, [ON_SIGNAL].as_ptr().cast(), 1);
        }
        *libc::__errno_location() = saved;
    }
}

/// Starts the capture machinery from the agent's constructor: the stop signal's handler
/// always, and with `HEAPTUI_DUMP` the agent thread and the `SIGUSR2` handler.
pub fn start() {
    if let Err(e) = stop::install() {
        crate::agent_log!("cannot install the stop signal handler ({e}); snapshots are off");
        return;
    }
    let Some(prefix) = config().dump_prefix.clone() else {
        return;
    };
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 || {
        fds = fds.map(crate::sys::above_stdio);
        fds.contains(&-1)
    } {
        crate::agent_log!(
            "cannot create the dump pipe: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    let first = blocks::number_waiting();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("heaptui-agent".into())
        .spawn(move || agent_thread(fds[0], PathBuf::from(prefix), ready_tx));
    if let Err(e) = spawned {
        crate::agent_log!("cannot start the agent thread ({e}); HEAPTUI_DUMP is off");
        return;
    }
    // The constructor runs before the program's threads exist: every block allocated until
    // the agent thread is up is the agent's.
    let _ = ready_rx.recv_timeout(Duration::from_secs(5));
    crate::registry::threads::note_agent_spawn(first);
    // SAFETY: getpid cannot fail.
    OWNER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    WAKE_FD.store(fds[1], Ordering::Release);
    // The program may install a SIGUSR2 handler of its own later: the dispatcher keeps both.
    if let Err(e) = crate::signals::chain::take_over(on_sigusr2) {
        crate::agent_log!("cannot install the SIGUSR2 handler ({e}); dumps only at exit");
    }
}

/// Asks the agent thread for the exit snapshot and waits for it (bounded). Called from the
/// agent's destructor.
pub fn at_exit() {
    let fd = WAKE_FD.load(Ordering::Acquire);
    // SAFETY: getpid cannot fail.
    if fd < 0 || unsafe { libc::getpid() } != OWNER_PID.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: write(2) of one local byte to our pipe.
    if unsafe { libc::write(fd, [ON_EXIT].as_ptr().cast(), 1) } != 1 {
        return;
    }
    let (lock, cv) = &EXIT_DONE;
    let done = lock.lock().unwrap_or_else(|e| e.into_inner());
    let _ = cv.wait_timeout_while(done, EXIT_DEADLINE, |d| !*d);
}

fn agent_thread(read_fd: i32, prefix: PathBuf, ready: std::sync::mpsc::Sender<()>) {
    crate::registry::threads::enter_agent_thread();
    // Whatever libc allocates lazily for a new thread (thread-exit destructors, for one) is
    // allocated now, inside the spawn window.
    let _ = std::thread::current();
    let _ = ready.send(());
    loop {
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte into a local.
        let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n != 1 {
            return;
        }
        let result = std::panic::catch_unwind(|| dump_once(&prefix));
        if let Err(e) | Ok(Err(e)) = result.map_err(|_| "the capture panicked".to_string()) {
            crate::agent_log!("snapshot failed: {e}");
        }
        if byte == ON_EXIT {
            let (lock, cv) = &EXIT_DONE;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
            return;
        }
    }
}

/// Captures and writes one snapshot file; returns its path.
pub fn dump_once(prefix: &std::path::Path) -> Result<PathBuf, String> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!(".{}.{n}.hsnap", std::process::id()));
    let path = PathBuf::from(name);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let started = std::time::Instant::now();
    // The capture's child writes the file's bytes, streamed here into the file: the graph
    // never exists in this process.
    let write = || -> Result<capture::FileCapture, String> {
        let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let cap = capture::take_file(&mut out).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(cap)
    };
    let cap = match write() {
        Ok(cap) => cap,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    crate::agent_info!(
        "snapshot {}: {} objects, {} bytes, {} threads; pause_ms={:.3} capture_ms={:.3} write_ms={:.3} (stop_ms={:.3} dontfork_ms={:.3} dontfork_mappings={} fork_ms={:.3}; {}: index_ms={:.3} roots_ms={:.3} blocks_ms={:.3} mapped_ms={:.3} mapped_bytes={})",
        path.display(),
        cap.objects,
        cap.bytes,
        cap.threads,
        cap.pause.as_secs_f64() * 1e3,
        cap.total.as_secs_f64() * 1e3,
        // The file is written while the capture streams it: what is left after is the flush
        // and the rename.
        started.elapsed().saturating_sub(cap.total).as_secs_f64() * 1e3,
        cap.phases.stop.as_secs_f64() * 1e3,
        cap.phases.dontfork.as_secs_f64() * 1e3,
        cap.phases.dontfork_mappings,
        cap.phases.fork.as_secs_f64() * 1e3,
        cap.phases.scanned_in(),
        cap.phases.index.as_secs_f64() * 1e3,
        cap.phases.roots.as_secs_f64() * 1e3,
        cap.phases.blocks.as_secs_f64() * 1e3,
        cap.phases.mapped.as_secs_f64() * 1e3,
        cap.phases.mapped_bytes,
    );
    Ok(path)
}
