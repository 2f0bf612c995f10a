//! The agent log: one line per event, written only to descriptors the agent owns.
//!
//! Where lines go (docs/reference.md §2): to the `HEAPTUI_LOG` file when set, else to a
//! duplicate of the standard error the program was started with, made at load
//! (close-on-exec, at a high number); with fd 2 closed at start, nowhere. Never to fd 2 itself
//! after load: the program may have closed it and opened a data file there. Before each line
//! the descriptor is checked to still be the file it was made for (a program that closes
//! every descriptor, or `dup2`s onto a high number, may have reused the number): if not, the
//! log falls silent rather than write into the program's file.
//!
//! Quiet by default: a healthy run prints at most the `listening on` line. So there are three
//! kinds of line:
//! - [`agent_log!`](crate::agent_log): a problem, or the one `listening on` line — to the log;
//! - [`agent_info!`](crate::agent_info): what a healthy run does (a client connected, a recording started, the
//!   exit summary of a healthy run) — to the `HEAPTUI_LOG` file only;
//! - [`to_stderr`]: a problem with the environment (a malformed variable, a server that
//!   cannot listen) — to the saved standard error, `HEAPTUI_LOG` or not (docs/reference.md §2: one
//!   clear line on stderr).
//!
//! Anything that went wrong ([`went_wrong`]: a line to stderr, or a reason another module
//! reports through [`note_problem`]) makes the exit summary a problem line too.
//!
//! A fork child prints nothing: [`in_fork_child`] drops its copy of the saved standard error
//! (which would also keep a pipe open that the parent's reader waits to see closed); the
//! `HEAPTUI_LOG` file stays.
//!
//! Lines are formatted into a stack buffer and written with one write(2): no allocation, no
//! stdio, no lock. Hooks never log (they count; the exit summary reports the counts).

use std::fmt::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::sys::KeepErrno;

/// A descriptor of the agent's and the identity of the file it was opened on.
struct Sink {
    fd: AtomicI32,
    /// `st_dev` and `st_ino` of the file behind `fd`.
    dev: AtomicU64,
    ino: AtomicU64,
}

impl Sink {
    const fn none() -> Self {
        Self {
            fd: AtomicI32::new(-1),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
        }
    }

    fn set(&self, fd: i32) {
        match identity(fd) {
            Some((dev, ino)) => {
                self.dev.store(dev, Ordering::Relaxed);
                self.ino.store(ino, Ordering::Relaxed);
                self.fd.store(fd, Ordering::Release);
            }
            None => self.fd.store(-1, Ordering::Release),
        }
    }

    /// The descriptor, if it is still the file it was made for; otherwise the program owns
    /// the number now and the sink gives it up (without closing it).
    fn fd(&self) -> Option<i32> {
        let fd = self.fd.load(Ordering::Acquire);
        if fd < 0 {
            return None;
        }
        let same = identity(fd).is_some_and(|(dev, ino)| {
            dev == self.dev.load(Ordering::Relaxed) && ino == self.ino.load(Ordering::Relaxed)
        });
        if !same {
            self.fd.store(-1, Ordering::Release);
            return None;
        }
        Some(fd)
    }

    /// Closes the descriptor (a fork child's copy of the saved stderr).
    fn close(&self) {
        if let Some(fd) = self.fd() {
            self.fd.store(-1, Ordering::Release);
            // SAFETY: the descriptor is the agent's own (checked by `fd`).
            unsafe { libc::close(fd) };
        }
    }
}

/// `st_dev` and `st_ino` of the file open on `fd`, if it is open.
fn identity(fd: i32) -> Option<(u64, u64)> {
    let _errno = KeepErrno::new();
    // SAFETY: a zeroed stat is valid output space; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The standard error the program was started with (a duplicate), or none.
static STDERR: Sink = Sink::none();
/// The `HEAPTUI_LOG` file, or none.
static FILE: Sink = Sink::none();
/// Something went wrong this run (see the module docs).
static WENT_WRONG: AtomicBool = AtomicBool::new(false);

/// Longest line written; longer ones are cut (and end with `…`).
const LINE_MAX: usize = 4096;

/// A `fmt::Write` into a fixed byte buffer that silently truncates.
pub struct BufWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    truncated: bool,
}

impl<'a> BufWriter<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self {
            buf,
            len: 0,
            truncated: false,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            self.truncated = true;
        }
        Ok(())
    }
}

/// The lowest number the agent's own long-lived descriptors take: high, out of the way of
/// programs that expect small numbers, below the usual 1024 limit of `select`.
fn high_fd_floor() -> i32 {
    // SAFETY: a zeroed rlimit is valid output space.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit only writes `lim`.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(1024) as i32
    } else {
        64
    };
    (soft - 64).max(3)
}

/// A close-on-exec duplicate of `fd` at a high number (see [`high_fd_floor`]), or None.
fn high_duplicate(fd: i32) -> Option<i32> {
    let _errno = KeepErrno::new();
    for floor in [high_fd_floor(), 3] {
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor for the same open file.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) };
        if dup >= 0 {
            return Some(dup);
        }
    }
    None
}

/// Saves the standard error the program was started with: first thing at load, before
/// anything (the configuration's complaints) is written.
pub fn keep_stderr() {
    if let Some(dup) = high_duplicate(2) {
        STDERR.set(dup);
    }
}

/// Opens the log file named by the configuration (append mode, created 0600); on failure
/// the log stays on the saved standard error and says so once.
pub fn open_file(path: Option<&str>) {
    let Some(path) = path else { return };
    let mut cpath = [0u8; 4096];
    if path.len() >= cpath.len() || path.as_bytes().contains(&0) {
        to_stderr(format_args!(
            "HEAPTUI_LOG={path:?} is not a usable path; logging to stderr"
        ));
        return;
    }
    cpath[..path.len()].copy_from_slice(path.as_bytes());
    let _errno = KeepErrno::new();
    // SAFETY: cpath is NUL-terminated (zero-filled past the copied path).
    let fd = unsafe {
        libc::open(
            cpath.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        to_stderr(format_args!(
            "cannot open HEAPTUI_LOG={path}: {err}; logging to stderr"
        ));
        return;
    }
    match high_duplicate(fd) {
        Some(high) => FILE.set(high),
        None => to_stderr(format_args!(
            "cannot keep HEAPTUI_LOG={path} open: no descriptor left; logging to stderr"
        )),
    }
    // SAFETY: the original descriptor, replaced by its duplicate (or useless).
    unsafe { libc::close(fd) };
}

/// Makes a panic of the agent's a line in its log (and something that went wrong), instead of
/// std's message on fd 2, which may be a file of the program's by then. The panicking agent
/// thread ends (its feature with it); the program runs on. The hooks and wrappers the
/// program calls are written not to panic (registry/blocks.rs, registry/held_frees.rs: an
/// invariant that breaks there stops tracking instead).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        note_problem();
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info.payload_as_str().unwrap_or("(no message)");
        crate::agent_log!("agent panic at {location}: {message}; that part of the agent stops");
    }));
}

/// In a fork child (its fork handler): prints nothing from now on but to `HEAPTUI_LOG`.
pub fn in_fork_child() {
    STDERR.close();
}

/// Whether the log goes to a `HEAPTUI_LOG` file.
pub fn to_file() -> bool {
    FILE.fd().is_some()
}

/// Writes one line `heaptui[<pid>]: <message>` to the agent log (see the module docs).
pub fn log(args: fmt::Arguments) {
    if let Some(fd) = FILE.fd().or_else(|| STDERR.fd()) {
        line_to(fd, args);
    }
}

/// Writes one line to the `HEAPTUI_LOG` file, if there is one (what a healthy run does).
pub fn info(args: fmt::Arguments) {
    if let Some(fd) = FILE.fd() {
        line_to(fd, args);
    }
}

/// Writes one line `heaptui[<pid>]: <message>` to the saved standard error, whatever
/// `HEAPTUI_LOG` says (problems with the environment, which docs/reference.md §2 puts on stderr), and
/// remembers that something went wrong.
pub fn to_stderr(args: fmt::Arguments) {
    note_problem();
    if let Some(fd) = STDERR.fd() {
        line_to(fd, args);
    }
}

/// Remembers that something went wrong this run (a capture that could not stop a thread,
/// events lost, a feature disabled): the exit summary is then a problem line.
pub fn note_problem() {
    WENT_WRONG.store(true, Ordering::Relaxed);
}

/// Whether something went wrong this run (see [`note_problem`]).
pub fn went_wrong() -> bool {
    WENT_WRONG.load(Ordering::Relaxed)
}

fn line_to(fd: i32, args: fmt::Arguments) {
    let _errno = KeepErrno::new();
    let mut buf = [0u8; LINE_MAX];
    let mut w = BufWriter::new(&mut buf[..LINE_MAX - 4]);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = write!(w, "heaptui[{pid}]: ");
    let _ = w.write_fmt(args);
    let (mut len, truncated) = (w.len(), w.truncated());
    if truncated {
        buf[len..len + 3].copy_from_slice("…".as_bytes());
        len += 3;
    }
    buf[len] = b'\n';
    write_all(fd, &buf[..=len]);
}

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is readable for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return;
        }
    }
}

/// `agent_log!("format", args…)`: a problem (or the `listening on` line), to the agent log
/// (see [`log`]).
#[macro_export]
macro_rules! agent_log {
    ($($arg:tt)*) => {
        $crate::log::log(format_args!($($arg)*))
    };
}

/// `agent_info!("format", args…)`: what a healthy run does, to the `HEAPTUI_LOG` file only
/// (see [`info`]).
#[macro_export]
macro_rules! agent_info {
    ($($arg:tt)*) => {
        $crate::log::info(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buf_writer_truncates_and_says_so() {
        let mut buf = [0u8; 8];
        let mut w = BufWriter::new(&mut buf);
        w.write_str("0123456789").unwrap();
        assert_eq!(w.len(), 8);
        assert!(w.truncated());
        assert_eq!(&buf, b"01234567");
    }

    #[test]
    fn a_panic_is_a_line_in_the_log_and_something_that_went_wrong() {
        let path = std::env::temp_dir().join(format!("heaptui-panic-{}.log", std::process::id()));
        open_file(path.to_str());
        install_panic_hook();
        assert!(!went_wrong());
        let _ = std::thread::spawn(|| panic!("boom {}", 42)).join();
        let _ = std::panic::take_hook();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(
            text.contains("agent panic at agent-shim/src/log.rs:") && text.contains("boom 42"),
            "{text}"
        );
        assert!(went_wrong());
    }

    #[test]
    fn a_sink_gives_up_a_number_the_program_reused() {
        let sink = Sink::none();
        let dir = std::env::temp_dir().join(format!("heaptui-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ours = std::fs::File::create(dir.join("ours")).unwrap();
        let theirs = std::fs::File::create(dir.join("theirs")).unwrap();
        use std::os::fd::AsRawFd;
        let fd = high_duplicate(ours.as_raw_fd()).unwrap();
        assert!(fd >= 3);
        sink.set(fd);
        assert_eq!(sink.fd(), Some(fd));
        // The program dup2s its own file onto our number.
        // SAFETY: both descriptors are open; dup2 replaces `fd` with a copy of `theirs`.
        assert_eq!(unsafe { libc::dup2(theirs.as_raw_fd(), fd) }, fd);
        assert_eq!(sink.fd(), None);
        assert_eq!(sink.fd(), None, "given up for good");
        // SAFETY: `fd` is now a copy of `theirs` that this test made.
        unsafe { libc::close(fd) };
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
