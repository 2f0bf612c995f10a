//! `read`, `write`, `readv`, `writev` (and the fortified `__read_chk`) resumed after the agent's
//! signal, at no cost until one fails.
//!
//! These are restarted after an `SA_RESTART` handler on every kind of descriptor but one: a
//! socket with a receive or send timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`), which the kernel ends
//! with `EINTR` after any handler, as it does `recv` and `send` (signal(7); `signals::sockets`).
//! So a snapshot would end, with `EINTR`, the `read` of a program that set a timeout on its
//! socket and installed no handler.
//!
//! But these calls run for every file any program reads or writes, so their wrappers must not
//! pay what the armed ones (`signals::blocking::run`) pay before the call: the thread's byte,
//! a clock read. The exported entry points are naked stubs (exports.rs) that keep the
//! caller's arguments on the stack, call libc's function, and return its result at once
//! unless it is -1; only then do they jump here, where the `EINTR` is told apart: the stop
//! handler noted which call it cut short on a thread in no armed call
//! (`blocking::take_unarmed_cut`), and the call is resumed only when that note is this call's
//! and no program signal erased it. A descriptor's kind is asked only then: on a socket with a
//! timeout the retry goes through `sockets::resume`; on any other descriptor the kernel would
//! have restarted the call after the stop, so the `EINTR` is the program's and stays.
//!
//! What is not exact, accepted: the socket's timeout is counted afresh from the interruption
//! (the wrapper read no clock when the call began, and the kernel gives no way to know when
//! it did), so a resumed call can end up to the time it had already waited later than it would
//! have without the agent, never earlier, and never with an `EINTR` the program would not have
//! seen.
//!
//! Must never: allocate, lock, print, or change a call's result when the agent did not cause
//! its `EINTR`; add anything to the calls' path before they fail.

use std::ffi::{c_int, c_void};

use super::Real;
use super::blocking::{real, take_unarmed_cut};
use super::sockets::{Way, resume, socket_timeout};
use crate::sys::{errno, set_errno};

/// Whether the failed call's errno is `EINTR`: the one failure these wrappers look at (the
/// exported stubs' jump targets test it before anything else, so `EAGAIN` and every other
/// failure return at once).
pub fn interrupted() -> bool {
    errno() == libc::EINTR
}

pub static READ: Real = Real::new(c"read");
pub static WRITE: Real = Real::new(c"write");
pub static READV: Real = Real::new(c"readv");
pub static WRITEV: Real = Real::new(c"writev");
pub static READ_CHK: Real = Real::new(c"__read_chk");

pub(super) fn init() {
    for f in [&READ, &WRITE, &READV, &WRITEV, &READ_CHK] {
        f.get();
    }
}

type ReadFn = unsafe extern "C-unwind" fn(c_int, *mut c_void, usize) -> libc::ssize_t;
type WriteFn = unsafe extern "C-unwind" fn(c_int, *const c_void, usize) -> libc::ssize_t;
type VectorFn = unsafe extern "C-unwind" fn(c_int, *const libc::iovec, c_int) -> libc::ssize_t;
type ReadChkFn = unsafe extern "C-unwind" fn(c_int, *mut c_void, usize, usize) -> libc::ssize_t;

/// After `call` on `fd`, with its first three arguments, failed with `EINTR`: resumes it if
/// the agent's signal alone cut it short, else returns -1 with its errno as it is.
fn resume_if_cut(
    fd: c_int,
    second: u64,
    third: u64,
    way: Way,
    call: &mut dyn FnMut() -> libc::ssize_t,
) -> libc::ssize_t {
    let Some(entry_errno) = take_unarmed_cut(fd as u32 as u64, second, third) else {
        return -1;
    };
    // On any descriptor but a socket with a timeout the kernel restarts the call after the
    // stop (an SA_RESTART handler): its EINTR is the program's, whatever the note says.
    if socket_timeout(fd, way).is_none() {
        set_errno(libc::EINTR);
        return -1;
    }
    set_errno(entry_errno);
    resume(fd, way, true, call)
}

/// `read(2)` after it failed with `EINTR`.
///
/// # Safety
/// As `read(2)`.
pub unsafe fn read_failed(fd: c_int, buf: *mut c_void, count: usize) -> libc::ssize_t {
    let real = real!(READ, ReadFn, -1);
    resume_if_cut(fd, buf as u64, count as u64, Way::Receive, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, buf, count) }
    })
}

/// `read(2)` when the stub found no address for libc's yet (a call before the agent's
/// constructor): the whole wrapper.
///
/// # Safety
/// As `read(2)`.
pub unsafe fn read(fd: c_int, buf: *mut c_void, count: usize) -> libc::ssize_t {
    let real = real!(READ, ReadFn, -1);
    // SAFETY: the caller's arguments.
    match unsafe { real(fd, buf, count) } {
        // SAFETY: the caller's arguments.
        -1 if interrupted() => unsafe { read_failed(fd, buf, count) },
        r => r,
    }
}

/// `write(2)` after it failed with `EINTR`.
///
/// # Safety
/// As `write(2)`.
pub unsafe fn write_failed(fd: c_int, buf: *const c_void, count: usize) -> libc::ssize_t {
    let real = real!(WRITE, WriteFn, -1);
    resume_if_cut(fd, buf as u64, count as u64, Way::Send, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, buf, count) }
    })
}

/// `write(2)` before the agent's constructor (see [`read`]).
///
/// # Safety
/// As `write(2)`.
pub unsafe fn write(fd: c_int, buf: *const c_void, count: usize) -> libc::ssize_t {
    let real = real!(WRITE, WriteFn, -1);
    // SAFETY: the caller's arguments.
    match unsafe { real(fd, buf, count) } {
        // SAFETY: the caller's arguments.
        -1 if interrupted() => unsafe { write_failed(fd, buf, count) },
        r => r,
    }
}

/// `readv(2)` after it failed with `EINTR`.
///
/// # Safety
/// As `readv(2)`.
pub unsafe fn readv_failed(fd: c_int, iov: *const libc::iovec, count: c_int) -> libc::ssize_t {
    let real = real!(READV, VectorFn, -1);
    resume_if_cut(
        fd,
        iov as u64,
        count as u32 as u64,
        Way::Receive,
        &mut || {
            // SAFETY: the caller's arguments.
            unsafe { real(fd, iov, count) }
        },
    )
}

/// `readv(2)` before the agent's constructor (see [`read`]).
///
/// # Safety
/// As `readv(2)`.
pub unsafe fn readv(fd: c_int, iov: *const libc::iovec, count: c_int) -> libc::ssize_t {
    let real = real!(READV, VectorFn, -1);
    // SAFETY: the caller's arguments.
    match unsafe { real(fd, iov, count) } {
        // SAFETY: the caller's arguments.
        -1 if interrupted() => unsafe { readv_failed(fd, iov, count) },
        r => r,
    }
}

/// `writev(2)` after it failed with `EINTR`.
///
/// # Safety
/// As `writev(2)`.
pub unsafe fn writev_failed(fd: c_int, iov: *const libc::iovec, count: c_int) -> libc::ssize_t {
    let real = real!(WRITEV, VectorFn, -1);
    resume_if_cut(fd, iov as u64, count as u32 as u64, Way::Send, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, iov, count) }
    })
}

/// `writev(2)` before the agent's constructor (see [`read`]).
///
/// # Safety
/// As `writev(2)`.
pub unsafe fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> libc::ssize_t {
    let real = real!(WRITEV, VectorFn, -1);
    // SAFETY: the caller's arguments.
    match unsafe { real(fd, iov, count) } {
        // SAFETY: the caller's arguments.
        -1 if interrupted() => unsafe { writev_failed(fd, iov, count) },
        r => r,
    }
}

/// `__read_chk`, the `read` that `_FORTIFY_SOURCE` compiles a read into a buffer of known size
/// to: glibc's checks the size and calls its internal `read`, which no wrapper sees; so it is
/// resumed here as `read` is (the system call's arguments are the same three).
///
/// # Safety
/// As `read(2)`, `buf` holding `size` bytes.
pub unsafe fn read_chk_failed(
    fd: c_int,
    buf: *mut c_void,
    count: usize,
    size: usize,
) -> libc::ssize_t {
    let real = real!(READ_CHK, ReadChkFn, -1);
    resume_if_cut(fd, buf as u64, count as u64, Way::Receive, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, buf, count, size) }
    })
}

/// `__read_chk` before the agent's constructor (see [`read`]).
///
/// # Safety
/// As [`read_chk_failed`].
pub unsafe fn read_chk(fd: c_int, buf: *mut c_void, count: usize, size: usize) -> libc::ssize_t {
    let real = real!(READ_CHK, ReadChkFn, -1);
    // SAFETY: the caller's arguments.
    match unsafe { real(fd, buf, count, size) } {
        // SAFETY: the caller's arguments.
        -1 if interrupted() => unsafe { read_chk_failed(fd, buf, count, size) },
        r => r,
    }
}
