//! `syscall(3)`: blocking calls made by number, which the agent's signals must not cut short.
//!
//! A program (or a library: libaio calls `syscall(SYS_io_getevents, …)` for its
//! `io_getevents`) can make any system call through libc's `syscall(3)`; the named wrappers of
//! `signals::blocking` and `signals::sockets` never see those. So the agent exports `syscall`
//! too. Every number but the ones below goes straight to the kernel with the `syscall`
//! instruction and comes back as glibc's `syscall` returns it (the result, or -1 with errno
//! set from a result in -4095..-1): the exported stub is glibc's own instructions, with no
//! frame at all (a `clone` child on its own stack returns from it as from glibc's), and
//! reaches Rust only for the numbers below, found with one bit test.
//!
//! Resumed when only the agent's signal cut them short (`signals::blocking::run`), with what
//! is left of their timeout:
//! - the waits that take a relative timespec the kernel leaves alone: `nanosleep`,
//!   `clock_nanosleep` (absolute ones retried unchanged), `rt_sigtimedwait`, `semtimedop`,
//!   `epoll_pwait2`, and the asynchronous I/O waits `io_getevents` and `io_pgetevents` (an
//!   `EINTR` from them means no event was taken: the kernel returns the count otherwise);
//! - the ones with a millisecond timeout: `poll`, `epoll_wait`, `epoll_pwait`;
//! - the ones whose timeout the kernel updates in place on `EINTR` (`ppoll`, `select`,
//!   `pselect6`), and those with none (`pause`, `rt_sigsuspend`, `semop`, `msgrcv`,
//!   `msgsnd`): retried with the same arguments;
//! - the socket calls (`recvfrom`, `recvmsg`, `recvmmsg`, `accept`, `accept4`, `sendto`,
//!   `sendmsg`, `sendmmsg`, `connect`), as `signals::sockets` resumes them.
//!
//! The signal masks that `ppoll`, `epoll_pwait`, `epoll_pwait2`, `rt_sigsuspend`, and (inside
//! a pointer and length pair) `pselect6` and `io_pgetevents` install, and the set
//! `rt_sigtimedwait` waits for, lose the stop signal as the named wrappers' do: a mask
//! holding it would make the thread unstoppable for the call.
//!
//! Not covered: `futex` (a timed `FUTEX_WAIT` ends with `EINTR` after any handler; every
//! futex user loops on the word's value and takes `EINTR` as the spurious wake-up futex(2)
//! allows, glibc and Rust's standard library among them, so it is passed unchanged), and any
//! system call made without libc's `syscall` (the instruction itself: Go's runtime, static
//! binaries, inline assembly), which no interposition can see.
//!
//! Must never: allocate, lock, print, or change a call's result when the agent did not cause
//! its `EINTR`.

use std::ffi::{c_int, c_long};

use super::blocking::{
    Timeout, clock_timeout, eintr, run, with_millis, with_timeout, with_timespec,
};
use super::sockets::{Way, resume};
use crate::sys::{self, set_errno};

/// `io_pgetevents` on x86-64 (the libc crate does not name it).
const SYS_IO_PGETEVENTS: c_long = 333;

/// The calls that may block in a way the agent's signal would cut short (and so go through
/// [`blocking_call`]).
const RESUMED: [c_long; 27] = [
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_semtimedop,
    libc::SYS_epoll_pwait2,
    libc::SYS_io_getevents,
    SYS_IO_PGETEVENTS,
    libc::SYS_poll,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_pause,
    libc::SYS_rt_sigsuspend,
    libc::SYS_semop,
    libc::SYS_msgrcv,
    libc::SYS_msgsnd,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_recvmmsg,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
    libc::SYS_connect,
];

/// [`RESUMED`] as a bitmap, bit `n` for call `n`: the exported `syscall` stub tests it with
/// one `bt` before any frame exists (exports.rs).
pub static RESUMED_BITS: [u64; 8] = {
    let mut bits = [0u64; 8];
    let mut i = 0;
    while i < RESUMED.len() {
        let n = RESUMED[i] as usize;
        assert!(n < 64 * 8, "a resumed call's number outside the bitmap");
        bits[n / 64] |= 1 << (n % 64);
        i += 1;
    }
    bits
};

/// Whether call `n` goes through [`blocking_call`] (the stub tests [`RESUMED_BITS`] itself).
#[cfg(test)]
pub fn resumed(n: c_long) -> bool {
    usize::try_from(n)
        .ok()
        .and_then(|n| RESUMED_BITS.get(n / 64).map(|w| w >> (n % 64) & 1 != 0))
        .unwrap_or(false)
}

/// The exported `syscall` stub's failure path: `r` is the kernel's result in -4095..-1.
pub extern "C" fn failed(r: c_long) -> c_long {
    set_errno(-r as c_int);
    -1
}

/// System call `n` as glibc's `syscall(3)` makes it: the result, or -1 with errno.
///
/// # Safety
/// As the system call `n` with arguments `args`.
#[inline]
pub unsafe fn pass(n: c_long, args: [c_long; 6]) -> c_long {
    // SAFETY: guaranteed by the caller.
    let r = unsafe { sys::raw_syscall(n, args) };
    if (-4095..0).contains(&r) {
        set_errno(-r as c_int);
        -1
    } else {
        r
    }
}

/// When argument `at` points at a kernel signal set (`size_at` holding its size, 8) that holds
/// the stop signal: a copy without it in `copy`, and the argument pointed there.
///
/// # Safety
/// `args[at]` is null or points at a readable set of `args[size_at]` bytes.
unsafe fn without_stop(args: &mut [c_long; 6], at: usize, size_at: usize, copy: &mut u64) {
    if args[at] == 0 || args[size_at] != 8 {
        return;
    }
    // SAFETY: a readable set of 8 bytes, per the contract (unaligned: the kernel allows it).
    let set = unsafe { std::ptr::read_unaligned(args[at] as *const u64) };
    let Ok(bit) = u32::try_from(crate::capture::stop::stop_signal() - 1) else {
        return;
    };
    let mask = 1u64.checked_shl(bit).unwrap_or(0);
    if set & mask != 0 {
        *copy = set & !mask;
        args[at] = copy as *mut u64 as c_long;
    }
}

/// As [`without_stop`] for a set passed as a `{ pointer, length }` pair that argument `at`
/// points at (`pselect6`, `io_pgetevents`): the pair is copied into `pair` when its set is.
///
/// # Safety
/// `args[at]` is null or points at a readable pair whose pointer is null or points at a
/// readable set of the pair's length.
unsafe fn without_stop_in_pair(
    args: &mut [c_long; 6],
    at: usize,
    pair: &mut [c_long; 2],
    copy: &mut u64,
) {
    if args[at] == 0 {
        return;
    }
    // SAFETY: a readable pair, per the contract.
    let given = unsafe { std::ptr::read_unaligned(args[at] as *const [c_long; 2]) };
    let mut inner = [given[0], given[1], 0, 0, 0, 0];
    // SAFETY: the pair's set, readable per the contract.
    unsafe { without_stop(&mut inner, 0, 1, copy) };
    if inner[0] != given[0] {
        *pair = [inner[0], inner[1]];
        args[at] = pair.as_ptr() as c_long;
    }
}

/// Call `n` with `ts` (the caller's timespec or a live local) as argument `at`.
///
/// # Safety
/// As the call.
unsafe fn pass_timespec_at(
    n: c_long,
    args: [c_long; 6],
    at: usize,
    ts: *const libc::timespec,
) -> c_long {
    let mut args = args;
    args[at] = ts as c_long;
    // SAFETY: the caller's arguments, the timeout theirs or a live local.
    unsafe { pass(n, args) }
}

/// One of the calls [`RESUMED_BITS`] names, resumed after the agent's signal (module docs).
///
/// # Safety
/// As the system call `n` with arguments `args`.
pub unsafe fn blocking_call(n: c_long, args: [c_long; 6]) -> c_long {
    let mut args = args;
    let mut mask_copy = 0u64;
    let mut pair_copy: [c_long; 2] = [0; 2];
    // SAFETY: every call below gets the caller's arguments, which the kernel would read as the
    // call's contract says; the masks and timeouts replaced by live locals.
    unsafe {
        match n {
            libc::SYS_ppoll => without_stop(&mut args, 3, 4, &mut mask_copy),
            libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => {
                without_stop(&mut args, 4, 5, &mut mask_copy)
            }
            libc::SYS_rt_sigsuspend => without_stop(&mut args, 0, 1, &mut mask_copy),
            libc::SYS_rt_sigtimedwait => without_stop(&mut args, 0, 3, &mut mask_copy),
            libc::SYS_pselect6 | SYS_IO_PGETEVENTS => {
                without_stop_in_pair(&mut args, 5, &mut pair_copy, &mut mask_copy)
            }
            _ => {}
        }
        let timespec_at = |at: usize| {
            with_timespec(args[at] as *const libc::timespec, &mut |ts| {
                pass_timespec_at(n, args, at, ts)
            })
        };
        let millis_at = |at: usize| {
            with_millis(args[at] as c_int, &mut |ms| {
                let mut args = args;
                args[at] = c_long::from(ms);
                pass(n, args)
            })
        };
        let socket = |way: Way| {
            resume(args[0] as c_int, way, false, &mut || pass(n, args) as isize) as c_long
        };
        match n {
            libc::SYS_nanosleep => timespec_at(0),
            libc::SYS_clock_nanosleep => {
                let tmo = args[2] as *const libc::timespec;
                let timeout = clock_timeout(args[0] as libc::clockid_t, args[1] as c_int, tmo);
                with_timeout(timeout, tmo, &mut |ts| pass_timespec_at(n, args, 2, ts))
            }
            libc::SYS_rt_sigtimedwait => timespec_at(2),
            libc::SYS_semtimedop | libc::SYS_epoll_pwait2 => timespec_at(3),
            libc::SYS_io_getevents | SYS_IO_PGETEVENTS => timespec_at(4),
            libc::SYS_poll => millis_at(2),
            libc::SYS_epoll_wait | libc::SYS_epoll_pwait => millis_at(3),
            libc::SYS_recvfrom
            | libc::SYS_recvmsg
            | libc::SYS_recvmmsg
            | libc::SYS_accept
            | libc::SYS_accept4 => socket(Way::Receive),
            libc::SYS_sendto | libc::SYS_sendmsg | libc::SYS_sendmmsg => socket(Way::Send),
            libc::SYS_connect => socket(Way::Connect),
            // The rest: no timeout, or one the kernel updates in place on EINTR.
            _ => run(Timeout::Same, &mut |_| pass(n, args), &eintr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::errno;

    #[test]
    fn passes_results_and_errno_as_glibc_does() {
        set_errno(1234);
        // SAFETY: getpid has no arguments.
        let pid = unsafe { pass(libc::SYS_getpid, [0; 6]) };
        assert_eq!((pid, errno()), (i64::from(std::process::id()), 1234));
        // SAFETY: closing a descriptor that cannot be open fails with EBADF and touches nothing.
        let r = unsafe { pass(libc::SYS_close, [-1, 0, 0, 0, 0, 0]) };
        assert_eq!((r, errno()), (-1, libc::EBADF));
        assert!(resumed(libc::SYS_io_getevents) && !resumed(libc::SYS_futex));
        assert!(RESUMED.iter().all(|&n| resumed(n)));
        assert!(!resumed(libc::SYS_clone) && !resumed(-1) && !resumed(1 << 40));
    }
}
