//! The agent's protocol server (docs/reference.md §6): listens on `HEAPTUI_LISTEN`, admits clients
//! that present the token, and answers the protocol's requests from the live counters and the kept
//! snapshot.
//!
//! Owns: the listening socket (TCP on loopback unless `HEAPTUI_LISTEN_PUBLIC=1`, or a Unix
//! socket, mode 0600, whose peers must have our uid), the token file (`token`), the accept
//! thread and one thread per connection (`conn`), all marked as the agent's own so a capture
//! never stops them; the kept snapshot (`state`); the events pushed to clients (`events`).
//! Plain blocking std sockets with timeouts:
//! no async runtime in the target, and every byte of the server's memory comes from the
//! agent's allocator.
//!
//! Must never: run on a hook's path, stop the program when something goes wrong (a port in
//! use, an unwritable token directory: one line on stderr, the program runs on without the
//! server), or let one client hold up another.

pub mod auto;
pub mod conn;
pub mod events;
pub mod metrics;
pub mod state;
pub mod token;

use std::io;
use std::net::TcpListener;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use heaptui_protocol::stream::Stream;
use heaptui_protocol::{Refusal, RefusalReason, Welcome};

use crate::config::{Listen, config};

/// Most clients served at once; more are refused with "busy" (each takes a thread, and the
/// agent's thread table is bounded).
pub const MAX_CLIENTS: usize = 32;

static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The process that owns the server's files (a fork child must not remove them).
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// Set by the server thread just before it first blocks in accept().
static SERVING: AtomicBool = AtomicBool::new(false);
/// Files to remove at exit: the token file and the Unix socket.
static FILES: OnceLock<(PathBuf, Option<PathBuf>)> = OnceLock::new();

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
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
    let (listener, bound) = match bind(&cfg.listen, cfg.listen_public) {
        Ok(x) => x,
        Err(e) => {
            crate::log::to_stderr(format_args!("{e}; the program runs on without it"));
            return;
        }
    };
    let token = match token::random_token() {
        Ok(t) => t,
        Err(e) => {
            crate::log::to_stderr(format_args!(
                "heaptui server off: cannot make a token ({e}); the program runs on without it"
            ));
            return;
        }
    };
    let token_path = match token::write(&bound, &token) {
        Ok(p) => p,
        Err(e) => {
            crate::log::to_stderr(format_args!(
                "heaptui server off: {e}; the program runs on without it"
            ));
            return;
        }
    };
    let socket_path = match &bound {
        Listen::Unix(p) => Some(p.clone()),
        Listen::Tcp(_) => None,
    };
    let _ = FILES.set((token_path.clone(), socket_path));
    // SAFETY: getpid cannot fail.
    OWNER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    // SAFETY: `remove_files` is a plain function that only unlinks two paths.
    unsafe { libc::atexit(remove_files) };
    state::mark_started();
    let shown = describe(&bound);
    // The libc blocks of the server thread's creation (its DTV) are allocated here, on the
    // program's main thread: their sequence numbers are kept so the capture leaves them out.
    let first = crate::registry::blocks::current_seq();
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
    match launched {
        Ok(_) => crate::agent_log!("listening on {shown} (token file {})", token_path.display()),
        Err(e) => {
            remove_files();
            crate::log::to_stderr(format_args!(
                "heaptui server off: cannot start its thread ({e}); the program runs on without it"
            ));
        }
    }
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
                    "heaptui server off: HEAPTUI_LISTEN={addr} is not a loopback address \
                     (set HEAPTUI_LISTEN_PUBLIC=1 to listen on it)"
                ));
            }
            let l = TcpListener::bind(addr)
                .map_err(|e| format!("heaptui server off: cannot listen on {addr}: {e}"))?;
            let bound = l
                .local_addr()
                .map_err(|e| format!("heaptui server off: {addr}: {e}"))?;
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
                .map_err(|e| format!("heaptui server off: cannot listen on unix:{shown}: {e}"))?;
            if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            {
                let _ = std::fs::remove_file(&path);
                return Err(format!(
                    "heaptui server off: cannot make unix:{shown} private: {e}"
                ));
            }
            Ok((Listener::Unix(l), Listen::Unix(path)))
        }
    }
}

extern "C" fn remove_files() {
    // SAFETY: getpid cannot fail.
    if unsafe { libc::getpid() } != OWNER_PID.load(Ordering::Relaxed) {
        return;
    }
    if let Some((token, socket)) = FILES.get() {
        let _ = std::fs::remove_file(token);
        if let Some(socket) = socket {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// The uid of a Unix socket's peer (SO_PEERCRED).
fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
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
    crate::registry::threads::mark_current_as_agent();
    let token: &'static str = Box::leak(token.into_boxed_str());
    SERVING.store(true, Ordering::Release);
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().map(|(s, a)| (Stream::Tcp(s), a.to_string())),
            Listener::Unix(l) => l.accept().and_then(|(s, _)| {
                let uid = peer_uid(&s)?;
                Ok((Stream::Unix(s), format!("unix peer uid {uid}")))
                    .and_then(|x| check_uid(uid).map(|()| x))
            }),
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                crate::agent_log!("connection refused: {e}");
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
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
                crate::registry::threads::mark_current_as_agent();
                conn::serve(stream, peer, token);
                ACTIVE.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            crate::agent_log!("cannot start a client thread: {e}");
        }
    }
}

fn check_uid(uid: u32) -> io::Result<()> {
    // SAFETY: geteuid cannot fail.
    let ours = unsafe { libc::geteuid() };
    if uid == ours {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("unix peer uid {uid} is not the agent's uid {ours}"),
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
    crate::agent_log!("connection from {peer} closed: busy ({MAX_CLIENTS} clients)");
}
