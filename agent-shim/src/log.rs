//! The agent log: one line per event, to the `HEAPTUI_LOG` file when set, else stderr.
//!
//! Lines are formatted into a stack buffer and written with one write(2): no allocation, no
//! stdio, no lock, so the log is usable anywhere except inside a malloc hook (hooks never log;
//! they count, and the exit summary reports the counts).

use std::fmt::{self, Write};
use std::sync::atomic::{AtomicI32, Ordering};

/// The log's file descriptor (stderr until [`init`] opens `HEAPTUI_LOG`).
static LOG_FD: AtomicI32 = AtomicI32::new(2);

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

/// Opens the log file named by the configuration (append mode, created 0600); on failure the
/// log stays on stderr and says so once.
pub fn init(path: Option<&str>) {
    let Some(path) = path else { return };
    let mut cpath = [0u8; 4096];
    if path.len() >= cpath.len() || path.as_bytes().contains(&0) {
        log(format_args!(
            "HEAPTUI_LOG={path:?} is not a usable path; logging to stderr"
        ));
        return;
    }
    cpath[..path.len()].copy_from_slice(path.as_bytes());
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
        log(format_args!(
            "cannot open HEAPTUI_LOG={path}: {err}; logging to stderr"
        ));
        return;
    }
    LOG_FD.store(fd, Ordering::Relaxed);
}

/// Writes one line `heaptui[<pid>]: <message>` to the agent log.
pub fn log(args: fmt::Arguments) {
    line_to(LOG_FD.load(Ordering::Relaxed), args);
}

fn line_to(fd: i32, args: fmt::Arguments) {
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

/// Writes one line `heaptui[<pid>]: <message>` to stderr, whatever `HEAPTUI_LOG` says (for
/// problems with the environment, which docs/reference.md §2 puts on stderr).
pub fn to_stderr(args: fmt::Arguments) {
    line_to(2, args);
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

/// `agent_log!("format", args…)`: one line to the agent log (see [`log`]).
#[macro_export]
macro_rules! agent_log {
    ($($arg:tt)*) => {
        $crate::log::log(format_args!($($arg)*))
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
}
