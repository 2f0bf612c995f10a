//! Socket calls under `SO_RCVTIMEO`/`SO_SNDTIMEO` that the agent's signals must not cut short.
//!
//! A blocking socket call is restarted after an `SA_RESTART` handler, unless the socket has a
//! timeout: then the kernel ends it with `EINTR` (signal(7), "Interruption of system calls":
//! `accept`, `recv`, `recvfrom`, `recvmsg` under `SO_RCVTIMEO`; `connect`, `send`, `sendto`,
//! `sendmsg` under `SO_SNDTIMEO`). So a snapshot would end, with `EINTR`, the `recv` of a
//! program that set a 30 s receive timeout and never installed a handler of its own.
//!
//! Each of them (and `accept4`) runs through [`resume`], on top of `signals::blocking::run`:
//! retried only when the agent's signal alone cut it short, with errno as it was. The timeout
//! belongs to the socket, not to the call, and the kernel starts it afresh on every call; so
//! the retry first waits with `poll(2)` for what is left of it (the socket's timeout, read with
//! `getsockopt` only after an interruption, counted from the wrapper's entry), for the
//! readiness the call waits for (`POLLIN`/`POLLPRI` to receive or accept, `POLLOUT` to send
//! or to finish a TCP connect). The entry time is read on `CLOCK_MONOTONIC_COARSE` (one
//! clock tick's resolution, the kernel's own for these timeouts, which it counts in ticks)
//! and the deadline moved one tick later, so a resumed call never ends before its timeout:
//! every socket call pays that read, and the coarse clock's costs a sixth of the precise
//! one's (bench/signals.sh). Then:
//! - nothing by the deadline: the call's own timeout result, `-1` with `EAGAIN` (`EINPROGRESS`
//!   for `connect`), as the kernel would have returned it then. An `EINTR` ended the call
//!   before it moved any byte (the kernel returns a partial count otherwise), so there is
//!   nothing else to report.
//! - ready: the real call again, which finds what it waited for (a repeated `connect` on a TCP
//!   socket that got through returns 0, one that was refused its error, exactly as the first
//!   call would have).
//!
//! What is not exact, accepted: when poll reports readiness but the call then blocks again —
//! another thread took the data or the room first, `MSG_WAITALL` wants more than has come, a
//! send larger than the room made — the call waits on with the socket's whole timeout from
//! there; and a Unix-domain `connect`, whose socket poll reports ready before it is
//! connected, is retried at once with its whole timeout. Either can end later than it would
//! have without the agent, never earlier, and never with an `EINTR` the program would not have
//! seen. `recvmmsg`/`sendmmsg` and the fortified `__recv_chk`/`__recvfrom_chk` go the same way;
//! `read`/`write`/`readv`/`writev` too, from `signals::read_write`, which reaches [`resume`]
//! only after the call failed with the agent's `EINTR`.
//!
//! Must never: allocate, lock, print, or change a call's result when the agent did not cause
//! its `EINTR`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

use super::Real;
use super::blocking::{Timeout, eintr, ns_ms, real, run};
use crate::sys::{self, errno, set_errno};

pub(super) static RECV: Real = Real::new(c"recv");
pub(super) static RECVFROM: Real = Real::new(c"recvfrom");
pub(super) static RECVMSG: Real = Real::new(c"recvmsg");
pub(super) static SEND: Real = Real::new(c"send");
pub(super) static SENDTO: Real = Real::new(c"sendto");
pub(super) static SENDMSG: Real = Real::new(c"sendmsg");
pub(super) static ACCEPT: Real = Real::new(c"accept");
pub(super) static ACCEPT4: Real = Real::new(c"accept4");
pub(super) static CONNECT: Real = Real::new(c"connect");
pub(super) static RECVMMSG: Real = Real::new(c"recvmmsg");
pub(super) static SENDMMSG: Real = Real::new(c"sendmmsg");
pub(super) static RECV_CHK: Real = Real::new(c"__recv_chk");
pub(super) static RECVFROM_CHK: Real = Real::new(c"__recvfrom_chk");

/// `CLOCK_MONOTONIC_COARSE`'s resolution in nanoseconds (set by [`init`]; 10 ms until then,
/// more than any kernel's tick).
static COARSE_TICK_NS: AtomicI64 = AtomicI64::new(10_000_000);

pub(super) fn init() {
    let mut res = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes the timespec it is given.
    if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut res) } == 0 {
        let ns = res
            .tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(res.tv_nsec);
        if ns > 0 {
            COARSE_TICK_NS.store(ns, Ordering::Relaxed);
        }
    }
    for f in [
        &RECV,
        &RECVFROM,
        &RECVMSG,
        &SEND,
        &SENDTO,
        &SENDMSG,
        &ACCEPT,
        &ACCEPT4,
        &CONNECT,
        &RECVMMSG,
        &SENDMMSG,
        &RECV_CHK,
        &RECVFROM_CHK,
    ] {
        f.get();
    }
}

/// What a socket call waits for, and so which timeout bounds it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `recv`, `recvfrom`, `recvmsg`, `accept`: `SO_RCVTIMEO`, readable.
    Receive,
    /// `send`, `sendto`, `sendmsg`: `SO_SNDTIMEO`, writable.
    Send,
    /// `connect`: `SO_SNDTIMEO`, writable once connected or refused.
    Connect,
}

impl Way {
    fn option(self) -> c_int {
        match self {
            Way::Receive => libc::SO_RCVTIMEO,
            Way::Send | Way::Connect => libc::SO_SNDTIMEO,
        }
    }

    fn events(self) -> libc::c_short {
        match self {
            Way::Receive => libc::POLLIN | libc::POLLPRI,
            Way::Send | Way::Connect => libc::POLLOUT,
        }
    }

    /// errno of the call when its timeout ran out with nothing done.
    fn timed_out(self) -> c_int {
        match self {
            Way::Connect => libc::EINPROGRESS,
            Way::Receive | Way::Send => libc::EAGAIN,
        }
    }
}

/// The socket's timeout for `way` in nanoseconds, None when it has none (or `fd` is no
/// socket, or, for a connect, a Unix-domain one: see the module docs). Leaves errno alone.
pub(super) fn socket_timeout(fd: c_int, way: Way) -> Option<i128> {
    let _errno = sys::KeepErrno::new();
    if way == Way::Connect {
        let mut domain: c_int = 0;
        let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `domain`.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_DOMAIN,
                (&mut domain as *mut c_int).cast(),
                &mut len,
            )
        };
        if r != 0 || domain == libc::AF_UNIX {
            return None;
        }
    }
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `tv`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            way.option(),
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    };
    let ns = i128::from(tv.tv_sec) * 1_000_000_000 + i128::from(tv.tv_usec) * 1000;
    (r == 0 && ns > 0).then_some(ns)
}

/// Polls the one socket of `fds` for up to `ms`: the count, or the negative error number.
/// With `cancel_point`, through libc's `poll`, a cancellation point as the wrapped call is:
/// a `pthread_cancel` of the thread lands while it waits there, as it would have in the call
/// (the kernel's own poll would let the cancel wait for the socket's whole timeout).
fn wait_ready(fds: &mut libc::pollfd, ms: c_int, cancel_point: bool) -> c_int {
    type F = unsafe extern "C-unwind" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
    let real = super::blocking::POLL.get();
    if cancel_point && !real.is_null() {
        // SAFETY: `real` is libc's poll, whose C signature `F` is.
        let poll = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
        // errno kept by hand: a guard's destructor would give this frame unwind cleanup code,
        // which a cancel must not meet (signals::blocking, "C-unwind").
        let entry = errno();
        // SAFETY: poll reads and writes the one pollfd.
        let r = unsafe { poll(fds, 1, ms) };
        let r = if r < 0 { -errno() } else { r };
        set_errno(entry);
        return r;
    }
    // SAFETY: poll reads and writes the one pollfd.
    let r = unsafe {
        sys::raw_syscall(
            libc::SYS_poll,
            [fds as *mut libc::pollfd as i64, 1, i64::from(ms), 0, 0, 0],
        )
    };
    r as c_int
}

/// Runs the socket call `call` on `fd` until it ends for a reason other than the agent's
/// signal, each retry bounded by what is left of the socket's timeout (module docs).
/// `cancel_point`: the call is one (the named wrappers; not a call made through `syscall(3)`,
/// which glibc never makes one), and so is the wait before a retry.
pub fn resume(
    fd: c_int,
    way: Way,
    cancel_point: bool,
    call: &mut dyn FnMut() -> libc::ssize_t,
) -> libc::ssize_t {
    let start = sys::clock_ns(libc::CLOCK_MONOTONIC_COARSE);
    // Looked up at the first retry: None until then, Some(None) when there is no deadline.
    let mut deadline: Option<Option<i128>> = None;
    let mut retry = false;
    run(
        Timeout::Same,
        &mut |_| {
            if !std::mem::replace(&mut retry, true) {
                return call();
            }
            let end = *deadline.get_or_insert_with(|| {
                let tick = i128::from(COARSE_TICK_NS.load(Ordering::Relaxed));
                Some(start? + socket_timeout(fd, way)? + tick)
            });
            let Some(end) = end else {
                return call();
            };
            let left = end - sys::clock_ns(libc::CLOCK_MONOTONIC_COARSE).unwrap_or(end);
            if left <= 0 {
                set_errno(way.timed_out());
                return -1;
            }
            let entry = errno();
            let mut fds = libc::pollfd {
                fd,
                events: way.events(),
                revents: 0,
            };
            let r = wait_ready(&mut fds, ns_ms(left), cancel_point);
            match r {
                // Cut short again: the caller's loop asks whose signal it was.
                r if r == -libc::EINTR => {
                    set_errno(libc::EINTR);
                    -1
                }
                0 => {
                    set_errno(way.timed_out());
                    -1
                }
                // Ready, or poll could not tell (it failed): the call itself decides.
                _ => {
                    set_errno(entry);
                    call()
                }
            }
        },
        &eintr,
    )
}

/// `recv(2)`.
///
/// # Safety
/// As `recv(2)`.
pub unsafe fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(c_int, *mut c_void, usize, c_int) -> libc::ssize_t;
    let real = real!(RECV, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Receive, true, &mut || unsafe {
        real(fd, buf, len, flags)
    })
}

/// `recvfrom(2)`.
///
/// # Safety
/// As `recvfrom(2)`.
pub unsafe fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(
        c_int,
        *mut c_void,
        usize,
        c_int,
        *mut libc::sockaddr,
        *mut libc::socklen_t,
    ) -> libc::ssize_t;
    let real = real!(RECVFROM, F, -1);
    resume(fd, Way::Receive, true, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, buf, len, flags, addr, addr_len) }
    })
}

/// `recvmsg(2)`.
///
/// # Safety
/// As `recvmsg(2)`.
pub unsafe fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(c_int, *mut libc::msghdr, c_int) -> libc::ssize_t;
    let real = real!(RECVMSG, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Receive, true, &mut || unsafe {
        real(fd, msg, flags)
    })
}

/// `send(2)`.
///
/// # Safety
/// As `send(2)`.
pub unsafe fn send(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(c_int, *const c_void, usize, c_int) -> libc::ssize_t;
    let real = real!(SEND, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Send, true, &mut || unsafe {
        real(fd, buf, len, flags)
    })
}

/// `sendto(2)`.
///
/// # Safety
/// As `sendto(2)`.
pub unsafe fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    addr_len: libc::socklen_t,
) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(
        c_int,
        *const c_void,
        usize,
        c_int,
        *const libc::sockaddr,
        libc::socklen_t,
    ) -> libc::ssize_t;
    let real = real!(SENDTO, F, -1);
    resume(fd, Way::Send, true, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, buf, len, flags, addr, addr_len) }
    })
}

/// `sendmsg(2)`.
///
/// # Safety
/// As `sendmsg(2)`.
pub unsafe fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(c_int, *const libc::msghdr, c_int) -> libc::ssize_t;
    let real = real!(SENDMSG, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Send, true, &mut || unsafe { real(fd, msg, flags) })
}

/// `accept(2)`.
///
/// # Safety
/// As `accept(2)`.
pub unsafe fn accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;
    let real = real!(ACCEPT, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Receive, true, &mut || unsafe {
        real(fd, addr, addr_len) as libc::ssize_t
    }) as c_int
}

/// `accept4(2)`.
///
/// # Safety
/// As `accept4(2)`.
pub unsafe fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(
        c_int,
        *mut libc::sockaddr,
        *mut libc::socklen_t,
        c_int,
    ) -> c_int;
    let real = real!(ACCEPT4, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Receive, true, &mut || unsafe {
        real(fd, addr, addr_len, flags) as libc::ssize_t
    }) as c_int
}

/// `connect(2)`.
///
/// # Safety
/// As `connect(2)`.
pub unsafe fn connect(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int {
    type F = unsafe extern "C-unwind" fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int;
    let real = real!(CONNECT, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Connect, true, &mut || unsafe {
        real(fd, addr, len) as libc::ssize_t
    }) as c_int
}

/// `recvmmsg(2)`: its own timeout is checked only after a datagram arrived (the kernel leaves
/// it unchanged when the call fails), so the wait for the first one is the socket's, as for
/// `recvmsg`; a retry passes the same arguments.
///
/// # Safety
/// As `recvmmsg(2)`.
pub unsafe fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    count: libc::c_uint,
    flags: c_int,
    tmo: *mut libc::timespec,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(
        c_int,
        *mut libc::mmsghdr,
        libc::c_uint,
        c_int,
        *mut libc::timespec,
    ) -> c_int;
    let real = real!(RECVMMSG, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Receive, true, &mut || unsafe {
        real(fd, msgs, count, flags, tmo) as libc::ssize_t
    }) as c_int
}

/// `sendmmsg(2)`: an `EINTR` means no message went (the count of those sent otherwise).
///
/// # Safety
/// As `sendmmsg(2)`.
pub unsafe fn sendmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    count: libc::c_uint,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int) -> c_int;
    let real = real!(SENDMMSG, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Send, true, &mut || unsafe {
        real(fd, msgs, count, flags) as libc::ssize_t
    }) as c_int
}

/// `__recv_chk`, the `recv` that `_FORTIFY_SOURCE` compiles a receive into a buffer of known
/// size to: glibc's checks the size and calls its internal `recv`, which no wrapper sees.
///
/// # Safety
/// As `recv(2)`, `buf` holding `size` bytes.
pub unsafe fn recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    size: usize,
    flags: c_int,
) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(c_int, *mut c_void, usize, usize, c_int) -> libc::ssize_t;
    let real = real!(RECV_CHK, F, -1);
    // SAFETY: the caller's arguments.
    resume(fd, Way::Receive, true, &mut || unsafe {
        real(fd, buf, len, size, flags)
    })
}

/// `__recvfrom_chk`: as [`recv_chk`] for `recvfrom`.
///
/// # Safety
/// As `recvfrom(2)`, `buf` holding `size` bytes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    size: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> libc::ssize_t {
    type F = unsafe extern "C-unwind" fn(
        c_int,
        *mut c_void,
        usize,
        usize,
        c_int,
        *mut libc::sockaddr,
        *mut libc::socklen_t,
    ) -> libc::ssize_t;
    let real = real!(RECVFROM_CHK, F, -1);
    resume(fd, Way::Receive, true, &mut || {
        // SAFETY: the caller's arguments.
        unsafe { real(fd, buf, len, size, flags, addr, addr_len) }
    })
}
