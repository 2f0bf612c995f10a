//! The agent's protocol server (docs/reference.md §6): listens on `HEAPTUI_LISTEN`, admits
//! clients that present the token, and answers the protocol's requests from the live counters
//! and the kept snapshot.
//!
//! Owns: the listening socket (TCP on loopback unless `HEAPTUI_LISTEN_PUBLIC=1`, or a Unix
//! socket, mode 0600, whose peers must have our uid or be root), the token file and the
//! agent's record in the token directory (`token`), the accept thread and one thread per
//! connection (`conn`), all marked as the agent's own so a capture never stops them; the kept
//! snapshot (`state`); the events pushed to clients (`events`). Plain blocking std sockets with
//! timeouts: no async runtime in the target, and every byte of the server's memory comes from
//! the agent's allocator.
//!
//! Where it listens: a process that cannot take `HEAPTUI_LISTEN` (the port is in use, e.g. by
//! the parent of a child exec'd under `HEAPTUI_FOLLOW_EXEC`) listens on its per-process socket
//! `pid-<PID>.sock` in the token directory instead, and says so in its one `listening on`
//! line, unless its parent serves too: under `HEAPTUI_FOLLOW_EXEC` the process the agent was
//! loaded into says once, for all the programs it starts, where they listen; a fork child under `HEAPTUI_FOLLOW_FORK=1` starts a server of its own there, with its
//! own token, from the fork handler, silently. Either way `heaptui` finds it as `pid:PID`
//! through the record. The agent sweeps the files of dead agents from the token directory when
//! it loads, and removes its own at exit. A fork child always closes its parent's server
//! descriptors (listeners, connections): it must not hold a port or a client it does not serve.
//!
//! Must never: run on a hook's path, stop the program when something goes wrong (a port in
//! use, an unwritable token directory: one line, the program runs on without the server), or
//! let one client hold up another.

pub mod auto;
pub mod conn;
pub mod events;
pub mod metrics;
pub mod state;
pub mod token;

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::time::Duration;

use heaptui_protocol::stream::Stream;
use heaptui_protocol::token_dir;
use heaptui_protocol::{Refusal, RefusalReason, Welcome};

use crate::config::{Listen, config};

/// Most clients served at once; more are refused with "busy" (each takes a thread, and the
/// agent's thread table is bounded).
pub const MAX_CLIENTS: usize = 32;

static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Set by the server thread just before it first blocks in accept().
static SERVING: AtomicBool = AtomicBool::new(false);

/// The files one process's server made, removed when that process exits.
struct Files {
    pid: i32,
    token: PathBuf,
    record: Option<PathBuf>,
    socket: Option<PathBuf>,
}

/// This process's files (leaked, never freed: a fork child replaces the pointer with its own,
/// and the exit handler it inherited then removes the child's, never its parent's).
static FILES: AtomicPtr<Files> = AtomicPtr::new(std::ptr::null_mut());

/// The descriptors of this process's servers: listeners (kept for the process's life) and
/// client connections (forgotten before they close). `-1`: a free slot.
static OWN_FDS: [AtomicI32; MAX_CLIENTS + 4] = [const { AtomicI32::new(-1) }; MAX_CLIENTS + 4];

/// Remembers `fd` as a server descriptor that a fork child must close; returns its slot (none
/// when all are taken: the child then keeps a copy, as it did before slots existed).
pub(crate) fn own_fd(fd: i32) -> Option<usize> {
    OWN_FDS.iter().position(|slot| {
        slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// Forgets the descriptor of `slot`, before it is closed (a fork child must never close a
/// number the program may have reused).
fn forget_fd(slot: Option<usize>) {
    if let Some(slot) = slot {
        OWN_FDS[slot].store(-1, Ordering::Release);
    }
}

/// Why a process starts a server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The agent was loaded into it: the configured address, else its per-process socket.
    Loaded,
    /// A fork child under `HEAPTUI_FOLLOW_FORK=1`: its per-process socket.
    ForkChild,
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn fd(&self) -> i32 {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }
}

/// Starts the server from the agent's constructor. Any failure is one line on stderr and the
/// program runs on without the server.
pub fn start() {
    let cfg = config();
    // Neither needs the protocol socket: they run whether or not it can be bound.
    auto::start(cfg.auto_snapshot);
    if let Some(addr) = cfg.metrics {
        metrics::start(addr);
    }
    state::mark_started();
    // Once, here: a fork child inherits it and `remove_files` removes that process's files.
    // SAFETY: `remove_files` is a plain function that only unlinks paths.
    unsafe { libc::atexit(remove_files) };
    if let Err(e) = serve(Origin::Loaded) {
        crate::log::to_stderr(format_args!(
            "heaptui server off: {e}; the program runs on without it"
        ));
    }
}

/// In a fork child, from the fork handler: closes the parent's server descriptors, and under
/// `HEAPTUI_FOLLOW_FORK=1` starts the child's own server on its per-process socket. The child
/// has a single thread here, so the state its parent's agent threads may have held locked is
/// renewed before anything uses it.
pub fn after_fork_in_child() {
    for slot in &OWN_FDS {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the descriptor was the parent's server's (remembered while open, and
            // forgotten before it closed); the child has no thread that uses it.
            unsafe { libc::close(fd) };
        }
    }
    ACTIVE.store(0, Ordering::Relaxed);
    SERVING.store(false, Ordering::Relaxed);
    if !config().follow_fork {
        return;
    }
    state::renew_in_child();
    auto::renew_in_child();
    events::renew_in_child();
    crate::capture::symbolize::renew_in_child();
    crate::policy::renew_in_child();
    if let Err(e) = serve(Origin::ForkChild) {
        crate::agent_log!("fork child without a server: {e}");
    }
}

/// Binds, writes the token file and the record (holding the token directory's lock, so a sweep
/// never sees half of it), starts the accept thread and says where it listens.
fn serve(origin: Origin) -> Result<(), String> {
    let cfg = config();
    let (dir, lock) = token::open_directory()?;
    // Read before the sweep removes it (its socket closed at the exec).
    let said_before_exec = token::said_before_exec(dir);
    if origin == Origin::Loaded && lock.is_some() {
        token_dir::sweep(dir);
    }
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    let own = Listen::Unix(dir.join(token_dir::pid_socket_name(pid as u32)));
    let (listener, bound, fell_back) = match origin {
        Origin::ForkChild => {
            let (listener, bound) = bind(&own, false)?;
            (listener, bound, None)
        }
        Origin::Loaded => match bind(&cfg.listen, cfg.listen_public) {
            Ok((listener, bound)) => (listener, bound, None),
            Err(why) => {
                let (listener, bound) = bind(&own, false).map_err(|e| format!("{why}; {e}"))?;
                (listener, bound, Some(why))
            }
        },
    };
    let token = token::random_token().map_err(|e| format!("cannot make a token ({e})"))?;
    let unlink_socket = |bound: &Listen| {
        if let Listen::Unix(path) = bound {
            let _ = std::fs::remove_file(path);
        }
    };
    let token_path = token::write(dir, &bound, &token).inspect_err(|_| unlink_socket(&bound))?;
    let shown = describe(&bound);
    let record = token::write_record(dir, &shown, origin == Origin::ForkChild);
    drop(lock);
    let files = Files {
        pid,
        token: token_path.clone(),
        record: record.as_ref().ok().cloned(),
        socket: match &bound {
            Listen::Unix(p) => Some(p.clone()),
            Listen::Tcp(_) => None,
        },
    };
    FILES.store(Box::into_raw(Box::new(files)), Ordering::Release);
    let listener_fd = listener.fd();
    // The libc blocks of the server thread's creation (its DTV) are allocated here, while no
    // program thread runs (the constructor; a fork child's handler): their sequence numbers
    // are kept so the capture leaves them out.
    let first = crate::registry::blocks::number_waiting();
    let launched = std::thread::Builder::new()
        .name("heaptui-server".into())
        .spawn(move || accept_loop(listener, token));
    // Wait until the thread is about to block in accept(): what it allocates while starting
    // then happens here, before the program's main, never racing with it (the exit summary
    // and the hook tests count every block). A flag and a sleep, no channel: a channel's
    // wake-up would itself allocate on both threads.
    if launched.is_ok() {
        let started = std::time::Instant::now();
        while !SERVING.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    crate::registry::threads::note_agent_spawn(first);
    if let Err(e) = launched {
        remove_files();
        return Err(format!("cannot start its thread ({e})"));
    }
    own_fd(listener_fd);
    if let Err(e) = record {
        crate::agent_log!("{e}: heaptui ps and pid:{pid} will not find this process");
    }
    // Under HEAPTUI_FOLLOW_EXEC the process the agent was loaded into says, in its one line,
    // where the programs it starts will listen; those say nothing when they land there.
    let started_by_agent = cfg.follow_exec && token::parent_serves(dir);
    let followers = if cfg.follow_exec && !started_by_agent {
        "; programs it starts (HEAPTUI_FOLLOW_EXEC) listen on per-process sockets: heaptui ps \
         lists them"
    } else {
        ""
    };
    match (origin, fell_back) {
        (Origin::ForkChild, _) => {}
        // Said once per process: a program exec'd from one that said it already (`sh -c
        // 'exec prog'`) is at the same place. A fork child's server said nothing.
        (Origin::Loaded, _) if said_before_exec.as_deref() == Some(shown.as_str()) => {}
        // Said once per program tree: a shell script's every command would say it otherwise.
        (Origin::Loaded, Some(_)) if started_by_agent => {}
        (Origin::Loaded, None) => crate::agent_log!(
            "listening on {shown} (token file {}){followers}",
            token_path.display()
        ),
        (Origin::Loaded, Some(why)) => crate::agent_log!(
            "{why}; per-process socket for pid:{pid}: listening on {shown} (token file \
             {}){followers}",
            token_path.display()
        ),
    }
    Ok(())
}

/// How an address is written for users: `127.0.0.1:8000` or `unix:/path`.
fn describe(listen: &Listen) -> String {
    match listen {
        Listen::Tcp(a) => a.to_string(),
        Listen::Unix(p) => format!("unix:{}", p.display()),
    }
}

/// Binds the listening socket; returns it with the address actually bound (port 0 resolved,
/// Unix paths made absolute).
fn bind(listen: &Listen, public: bool) -> Result<(Listener, Listen), String> {
    match listen {
        Listen::Tcp(addr) => {
            if !addr.ip().is_loopback() && !public {
                return Err(format!(
                    "HEAPTUI_LISTEN={addr} is not a loopback address \
                     (set HEAPTUI_LISTEN_PUBLIC=1 to listen on it)"
                ));
            }
            let l = TcpListener::bind(addr)
                .and_then(crate::sys::own_fd)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            let bound = l.local_addr().map_err(|e| format!("{addr}: {e}"))?;
            Ok((Listener::Tcp(l), Listen::Tcp(bound)))
        }
        Listen::Unix(path) => {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let shown = path.display();
            // A socket file nobody listens on is left over from a dead agent: reuse its name.
            if let Ok(meta) = std::fs::symlink_metadata(&path)
                && meta.file_type().is_socket()
                && UnixStream::connect(&path).is_err()
            {
                let _ = std::fs::remove_file(&path);
            }
            let l = UnixListener::bind(&path)
                .and_then(crate::sys::own_fd)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| format!("cannot listen on unix:{shown}: {e}"))?;
            if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            {
                let _ = std::fs::remove_file(&path);
                return Err(format!("cannot make unix:{shown} private: {e}"));
            }
            Ok((Listener::Unix(l), Listen::Unix(path)))
        }
    }
}

extern "C" fn remove_files() {
    let files = FILES.load(Ordering::Acquire);
    if files.is_null() {
        return;
    }
    // SAFETY: FILES holds null or a pointer from `Box::into_raw`, never freed.
    let files = unsafe { &*files };
    // SAFETY: getpid cannot fail.
    if unsafe { libc::getpid() } != files.pid {
        return;
    }
    for path in [
        Some(&files.token),
        files.record.as_ref(),
        files.socket.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        let _ = std::fs::remove_file(path);
    }
}

/// The uid of a Unix socket's peer (SO_PEERCRED).
fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a `ucred` of `len` bytes on a connected Unix socket we own.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

fn accept_loop(listener: Listener, token: String) {
    crate::registry::threads::enter_agent_thread();
    let token: &'static str = Box::leak(token.into_boxed_str());
    SERVING.store(true, Ordering::Release);
    let listener_fd = match &listener {
        Listener::Tcp(l) => l.as_raw_fd(),
        Listener::Unix(l) => l.as_raw_fd(),
    };
    loop {
        // Non-blocking listener: accept only what is there (sys::wait_for_connection).
        crate::sys::wait_for_connection(listener_fd);
        let accepted = match &listener {
            Listener::Tcp(l) => l
                .accept()
                .and_then(|(s, a)| Ok((Stream::Tcp(crate::sys::own_fd(s)?), a.to_string()))),
            Listener::Unix(l) => l.accept().and_then(|(s, _)| {
                let s = crate::sys::own_fd(s)?;
                let uid = peer_uid(&s)?;
                Ok((Stream::Unix(s), format!("unix peer uid {uid}")))
                    .and_then(|x| check_uid(uid).map(|()| x))
            }),
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                crate::agent_info!("connection refused: {e}");
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                continue;
            }
            Err(e) => {
                // Out of descriptors or memory: wait rather than spin.
                crate::agent_log!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if ACTIVE.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            refuse_busy(stream, &peer);
            continue;
        }
        let spawned = std::thread::Builder::new()
            .name("heaptui-client".into())
            .spawn(move || {
                crate::registry::threads::enter_agent_thread();
                let mut stream = stream;
                let slot = own_fd(stream_fd(&stream));
                conn::serve(&mut stream, peer, token);
                forget_fd(slot);
                drop(stream);
                ACTIVE.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            crate::agent_log!("cannot start a client thread: {e}");
        }
    }
}

fn stream_fd(stream: &Stream) -> i32 {
    match stream {
        Stream::Tcp(s) => s.as_raw_fd(),
        Stream::Unix(s) => s.as_raw_fd(),
    }
}

/// Our own uid, and root (who may read the token anyway, e.g. `heaptui ps` as root).
fn check_uid(uid: u32) -> io::Result<()> {
    // SAFETY: geteuid cannot fail.
    let ours = unsafe { libc::geteuid() };
    if uid == ours || uid == 0 {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("unix peer uid {uid} is neither the agent's uid {ours} nor root"),
        ))
    }
}

/// Tells a client over the limit why it is turned away, without waiting for its hello.
fn refuse_busy(mut stream: Stream, peer: &str) {
    let _ = stream.set_timeouts(
        Some(Duration::from_millis(100)),
        Some(Duration::from_millis(100)),
    );
    let refusal = Welcome::refused(Refusal {
        reason: RefusalReason::Busy,
        message: format!("the agent already serves {MAX_CLIENTS} clients; try again later"),
    });
    let _ = heaptui_protocol::send(&mut stream, &refusal);
    crate::agent_info!("connection from {peer} closed: busy ({MAX_CLIENTS} clients)");
}
