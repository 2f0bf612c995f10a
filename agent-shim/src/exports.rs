//! Every symbol the agent exports, and nothing else: the interposed allocation functions,
//! `pthread_create`, `dlclose`, and the C API of include/heaptui.h.
//!
//! The allocation entry points are naked stubs: they read the stack pointer at entry (which
//! points at the caller's return address) and the frame pointer before any agent code can
//! disturb them, pass both as extra arguments, and tail-jump into the hook, which returns
//! straight to the caller. So allocation stacks start at the exact call site, and the stubs
//! add no frame for unwinders to cross (their CFI says just that: the CFA is the caller's
//! stack pointer, the return address at its top). `dlclose` is wrapped for the hooks'
//! unwinder (its rule cache is cleared after a module goes away).

use std::ffi::{c_int, c_void};

use crate::hooks;
use crate::registry::{blocks, counters, stacks};

/// Defines an exported allocation entry point: a naked stub that puts the stack pointer at
/// entry and the frame pointer in the next two argument registers after the function's own
/// (System V: rdi, rsi, rdx, rcx, r8) and jumps to `hook`, which takes them as its last two
/// arguments.
macro_rules! entry_stub {
    ($name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?, $sp:literal, $fp:literal, $hook:path) => {
        #[doc = concat!("# Safety\nAs `", stringify!($name), "(3)`.")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            core::arch::naked_asm!(
                ".cfi_startproc",
                concat!("mov ", $sp, ", rsp"),
                concat!("mov ", $fp, ", rbp"),
                "jmp {hook}",
                ".cfi_endproc",
                hook = sym $hook,
            )
        }
    };
}

entry_stub!(malloc(size: usize) -> *mut c_void, "rsi", "rdx", hooks::malloc);
entry_stub!(calloc(n: usize, size: usize) -> *mut c_void, "rdx", "rcx", hooks::calloc);
entry_stub!(realloc(p: *mut c_void, size: usize) -> *mut c_void, "rdx", "rcx", hooks::realloc);
entry_stub!(
    reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void,
    "rcx",
    "r8",
    hooks::reallocarray
);
entry_stub!(free(p: *mut c_void), "rsi", "rdx", hooks::free);
entry_stub!(
    posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int,
    "rcx",
    "r8",
    hooks::posix_memalign
);
entry_stub!(aligned_alloc(align: usize, size: usize) -> *mut c_void, "rdx", "rcx", hooks::aligned_alloc);
entry_stub!(memalign(align: usize, size: usize) -> *mut c_void, "rdx", "rcx", hooks::memalign);
entry_stub!(valloc(size: usize) -> *mut c_void, "rsi", "rdx", hooks::valloc);
entry_stub!(pvalloc(size: usize) -> *mut c_void, "rsi", "rdx", hooks::pvalloc);

/// # Safety
/// As `dlclose(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    // SAFETY: the caller's dlclose; the hook unwinder's rule cache is cleared after it.
    unsafe { crate::hooks::unwind::dlclose(handle) }
}

/// # Safety
/// As `pthread_create(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: hooks::pthread::StartRoutine,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: the caller's pthread_create.
    unsafe { hooks::pthread::pthread_create(thread, attr, routine, arg) }
}

/// `int heaptui_counters(struct heaptui_counters *out)`: fills `out` with the live counters;
/// returns 0, or -1 if `out` is NULL.
///
/// # Safety
/// `out` is NULL or points to a writable `struct heaptui_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heaptui_counters(out: *mut counters::CCounters) -> c_int {
    if out.is_null() {
        return -1;
    }
    // SAFETY: guaranteed by the caller.
    unsafe { out.write(counters::counters().into()) };
    0
}

/// `size_t heaptui_allocation_stack(const void *block, uint64_t *frames, size_t max)`: copies
/// up to `max` return addresses of the allocation stack of the live block starting at
/// `block` (innermost first) into `frames`; returns how many the stack has (0 for an unknown
/// block or with stacks off).
///
/// # Safety
/// `frames` is NULL (with `max == 0`) or writable for `max` values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heaptui_allocation_stack(
    block: *const c_void,
    frames: *mut u64,
    max: usize,
) -> usize {
    let Some(rec) = blocks::lookup(block as u64) else {
        return 0;
    };
    let stack = stacks::frames(rec.stack);
    let n = stack.len().min(max);
    if n > 0 && !frames.is_null() {
        // SAFETY: the caller guarantees room for `max` >= n values.
        unsafe { std::ptr::copy_nonoverlapping(stack.as_ptr(), frames, n) };
    }
    stack.len()
}

// ---- capture ----

/// `pthread_sigmask(3)`, except that the agent's stop signal stays deliverable, so a thread
/// that blocks every signal can still be stopped for a capture.
///
/// # Safety
/// As `pthread_sigmask(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, as pthread_sigmask(3) requires.
    unsafe { crate::capture::stop::sigmask(how, set, old) }
}

/// `sigprocmask(2)`, with the stop signal kept deliverable as in [`pthread_sigmask`].
///
/// # Safety
/// As `sigprocmask(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, as sigprocmask(2) requires.
    match unsafe { crate::capture::stop::sigmask(how, set, old) } {
        0 => 0,
        e => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = e };
            -1
        }
    }
}

// ---- policy ----

/// `int heaptui_on_cancel(void (*handler)(void *), void *arg)`: registers the calling thread's
/// cancel handler (NULL removes it); it runs once, on this thread, at its next
/// `heaptui_cancel_requested()` poll after a cancel was requested. 0, or -1 when the agent's
/// handler table is full.
///
/// # Safety
/// `handler`, when not NULL, must be safe to call with `arg` on this thread at any later
/// `heaptui_cancel_requested()` poll.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heaptui_on_cancel(
    handler: Option<crate::policy::cancel::Handler>,
    arg: *mut c_void,
) -> c_int {
    crate::policy::cancel::on_cancel(handler, arg)
}

/// `int heaptui_cancel_requested(void)`: 1 when a cancel of the calling thread was requested
/// (and from then on), else 0; the first poll that sees it runs the thread's handler.
#[unsafe(no_mangle)]
pub extern "C" fn heaptui_cancel_requested() -> c_int {
    crate::policy::cancel::poll()
}

// ---- signals ----
// The blocking calls that the agent's signals would cut short (signals::blocking); "C-unwind"
// because each is a cancellation point and pthread_cancel unwinds through it. Each first
// zeroes the stack its implementation's frames will occupy (see `scrub_stack`).

/// # Safety
/// As `nanosleep(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn nanosleep(
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::nanosleep(req, rem) }
}

/// # Safety
/// As `clock_nanosleep(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::clock_nanosleep(clock, flags, req, rem) }
}

/// `sleep(3)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn sleep(seconds: libc::c_uint) -> libc::c_uint {
    crate::signals::blocking::scrub_stack();
    crate::signals::blocking::sleep(seconds)
}

/// `usleep(3)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn usleep(usec: libc::useconds_t) -> c_int {
    crate::signals::blocking::scrub_stack();
    crate::signals::blocking::usleep(usec)
}

/// # Safety
/// As `poll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn poll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::poll(fds, n, timeout) }
}

/// # Safety
/// As `ppoll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    tmo: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::ppoll(fds, n, tmo, mask) }
}

/// # Safety
/// As `epoll_wait(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::epoll_wait(epfd, events, max, timeout) }
}

/// # Safety
/// As `epoll_pwait(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::epoll_pwait(epfd, events, max, timeout, mask) }
}

/// # Safety
/// As `select(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::select(n, r, w, e, tv) }
}

/// # Safety
/// As `pselect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tmo: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::pselect(n, r, w, e, tmo, mask) }
}

/// `pause(2)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pause() -> c_int {
    crate::signals::blocking::scrub_stack();
    crate::signals::blocking::pause()
}

/// # Safety
/// As `sigsuspend(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's argument.
    unsafe { crate::signals::blocking::sigsuspend(mask) }
}

/// # Safety
/// As `sigwaitinfo(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sigwaitinfo(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::sigwaitinfo(set, info) }
}

/// # Safety
/// As `sigtimedwait(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    tmo: *const libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::sigtimedwait(set, info, tmo) }
}

/// # Safety
/// As `sigwait(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sigwait(set: *const libc::sigset_t, sig: *mut c_int) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::sigwait(set, sig) }
}

/// # Safety
/// As `epoll_pwait2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn epoll_pwait2(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    tmo: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::epoll_pwait2(epfd, events, max, tmo, mask) }
}

/// # Safety
/// As `semop(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn semop(id: c_int, ops: *mut libc::sembuf, n: libc::size_t) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::semop(id, ops, n) }
}

/// # Safety
/// As `semtimedop(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn semtimedop(
    id: c_int,
    ops: *mut libc::sembuf,
    n: libc::size_t,
    tmo: *const libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::semtimedop(id, ops, n, tmo) }
}

/// # Safety
/// As `msgrcv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn msgrcv(
    id: c_int,
    msg: *mut c_void,
    size: libc::size_t,
    kind: libc::c_long,
    flags: c_int,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::msgrcv(id, msg, size, kind, flags) }
}

/// # Safety
/// As `msgsnd(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn msgsnd(
    id: c_int,
    msg: *const c_void,
    size: libc::size_t,
    flags: c_int,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::msgsnd(id, msg, size, flags) }
}

// Socket calls under SO_RCVTIMEO/SO_SNDTIMEO, which the kernel ends with EINTR after any
// handler (signals::sockets); cancellation points, so "C-unwind" as above.

/// # Safety
/// As `recv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn recv(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::recv(fd, buf, len, flags) }
}

/// # Safety
/// As `recvfrom(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::recvfrom(fd, buf, len, flags, addr, addr_len) }
}

/// # Safety
/// As `recvmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn recvmsg(
    fd: c_int,
    msg: *mut libc::msghdr,
    flags: c_int,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::recvmsg(fd, msg, flags) }
}

/// # Safety
/// As `send(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn send(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::send(fd, buf, len, flags) }
}

/// # Safety
/// As `sendto(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    addr_len: libc::socklen_t,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::sendto(fd, buf, len, flags, addr, addr_len) }
}

/// # Safety
/// As `sendmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sendmsg(
    fd: c_int,
    msg: *const libc::msghdr,
    flags: c_int,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::sendmsg(fd, msg, flags) }
}

/// # Safety
/// As `accept(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::accept(fd, addr, addr_len) }
}

/// # Safety
/// As `accept4(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::accept4(fd, addr, addr_len, flags) }
}

/// # Safety
/// As `connect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::connect(fd, addr, len) }
}

// `read`, `write`, `readv`, `writev`, `__read_chk`: resumed after the agent's signal only when
// they fail with EINTR (signals::read_write), and free until then. Each is a naked stub that
// keeps the caller's arguments on the stack (written there, so a capture finds no stale word
// in its frame: the fourth argument's push is repeated to keep the stack aligned, never
// padded), calls libc's function through the address the agent resolved (the first field of
// its `Real`), and returns any result but -1 straight away; on -1 it jumps with the caller's
// arguments to `<name>::failed`, which looks at errno and returns to the caller. Until the
// address is resolved (a call before the agent's constructor) it jumps to `<name>::whole`, the
// whole wrapper. The CFI describes every push, so `pthread_cancel` unwinds through the stub.

/// Defines the stub `$name` (see above) and its jump targets in a module of the same name.
macro_rules! unarmed {
    ($name:ident($a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty), $real:path, $whole:path, $failed:path) => {
        unarmed!(@ $name($a: $ta, $b: $tb, $c: $tc), $real, $whole, $failed,
            ["push rdi", ".cfi_adjust_cfa_offset 8", "push rsi", ".cfi_adjust_cfa_offset 8",
             "push rdx", ".cfi_adjust_cfa_offset 8"],
            ["add rsp, 24", ".cfi_adjust_cfa_offset -24"],
            ["pop rdx", ".cfi_adjust_cfa_offset -8", "pop rsi", ".cfi_adjust_cfa_offset -8",
             "pop rdi", ".cfi_adjust_cfa_offset -8"]);
    };
    ($name:ident($a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty, $d:ident: $td:ty), $real:path, $whole:path, $failed:path) => {
        unarmed!(@ $name($a: $ta, $b: $tb, $c: $tc, $d: $td), $real, $whole, $failed,
            ["push rdi", ".cfi_adjust_cfa_offset 8", "push rsi", ".cfi_adjust_cfa_offset 8",
             "push rdx", ".cfi_adjust_cfa_offset 8", "push rcx", ".cfi_adjust_cfa_offset 8",
             "push rcx", ".cfi_adjust_cfa_offset 8"],
            ["add rsp, 40", ".cfi_adjust_cfa_offset -40"],
            ["add rsp, 8", ".cfi_adjust_cfa_offset -8", "pop rcx", ".cfi_adjust_cfa_offset -8",
             "pop rdx", ".cfi_adjust_cfa_offset -8", "pop rsi", ".cfi_adjust_cfa_offset -8",
             "pop rdi", ".cfi_adjust_cfa_offset -8"]);
    };
    (@ $name:ident($($arg:ident: $ty:ty),*), $real:path, $whole:path, $failed:path,
     [$($save:literal),*], [$($drop:literal),*], [$($restore:literal),*]) => {
        mod $name {
            use super::*;

            /// # Safety
            /// As the function it wraps.
            pub unsafe extern "C-unwind" fn whole($($arg: $ty),*) -> libc::ssize_t {
                // SAFETY: the caller's arguments.
                unsafe { $whole($($arg),*) }
            }

            /// Zeroes the stack its implementation's frames will occupy only for an `EINTR`
            /// (see `scrub_stack`): every other failure returns at once.
            ///
            /// # Safety
            /// As the function it wraps, which just returned -1.
            pub unsafe extern "C-unwind" fn failed($($arg: $ty),*) -> libc::ssize_t {
                if !crate::signals::read_write::interrupted() {
                    return -1;
                }
                crate::signals::blocking::scrub_stack();
                // SAFETY: the caller's arguments.
                unsafe { $failed($($arg),*) }
            }
        }

        #[doc = concat!("# Safety\nAs `", stringify!($name), "`.")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($($arg: $ty),*) -> libc::ssize_t {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "mov rax, qword ptr [rip + {real}]",
                "test rax, rax",
                "jz {whole}",
                $($save,)*
                "call rax",
                ".cfi_remember_state",
                "cmp rax, -1",
                "je 2f",
                $($drop,)*
                "ret",
                "2:",
                ".cfi_restore_state",
                $($restore,)*
                "jmp {failed}",
                ".cfi_endproc",
                real = sym $real,
                whole = sym $name::whole,
                failed = sym $name::failed,
            )
        }
    };
}

unarmed!(
    read(fd: c_int, buf: *mut c_void, count: usize),
    crate::signals::read_write::READ,
    crate::signals::read_write::read,
    crate::signals::read_write::read_failed
);
unarmed!(
    write(fd: c_int, buf: *const c_void, count: usize),
    crate::signals::read_write::WRITE,
    crate::signals::read_write::write,
    crate::signals::read_write::write_failed
);
unarmed!(
    readv(fd: c_int, iov: *const libc::iovec, count: c_int),
    crate::signals::read_write::READV,
    crate::signals::read_write::readv,
    crate::signals::read_write::readv_failed
);
unarmed!(
    writev(fd: c_int, iov: *const libc::iovec, count: c_int),
    crate::signals::read_write::WRITEV,
    crate::signals::read_write::writev,
    crate::signals::read_write::writev_failed
);
unarmed!(
    __read_chk(fd: c_int, buf: *mut c_void, count: usize, size: usize),
    crate::signals::read_write::READ_CHK,
    crate::signals::read_write::read_chk,
    crate::signals::read_write::read_chk_failed
);

// Timed waits whose EINTR glibc hands to the caller, and the socket calls on many messages
// (signals::blocking, signals::sockets); cancellation points, so "C-unwind" as above.

/// # Safety
/// As `sem_timedwait(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sem_timedwait(
    sem: *mut libc::sem_t,
    abstime: *const libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::sem_timedwait(sem, abstime) }
}

/// # Safety
/// As `sem_clockwait(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sem_clockwait(
    sem: *mut libc::sem_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::sem_clockwait(sem, clock, abstime) }
}

/// # Safety
/// As `aio_suspend(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn aio_suspend(
    list: *const *const c_void,
    count: c_int,
    tmo: *const libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::aio_suspend(list, count, tmo, false) }
}

/// # Safety
/// As `aio_suspend(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn aio_suspend64(
    list: *const *const c_void,
    count: c_int,
    tmo: *const libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::aio_suspend(list, count, tmo, true) }
}

/// # Safety
/// As `thrd_sleep(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn thrd_sleep(
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::blocking::thrd_sleep(req, rem) }
}

/// # Safety
/// As `recvmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    count: libc::c_uint,
    flags: c_int,
    tmo: *mut libc::timespec,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::recvmmsg(fd, msgs, count, flags, tmo) }
}

/// # Safety
/// As `sendmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sendmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    count: libc::c_uint,
    flags: c_int,
) -> c_int {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::sendmmsg(fd, msgs, count, flags) }
}

/// # Safety
/// As `recv(2)`, `buf` holding `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    size: usize,
    flags: c_int,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::recv_chk(fd, buf, len, size, flags) }
}

/// # Safety
/// As `recvfrom(2)`, `buf` holding `size` bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    size: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> libc::ssize_t {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::sockets::recvfrom_chk(fd, buf, len, size, flags, addr, addr_len) }
}

/// `syscall(3)`, variadic in C: on x86-64 a variadic call passes its integer arguments as a
/// fixed one does (registers, the sixth on the stack), so the six that any system call can
/// take are read as parameters, as glibc's own `syscall` reads them; the ones the caller did
/// not pass are whatever its registers and stack slot held, which the kernel ignores.
///
/// A naked stub, instruction for instruction glibc's for every call but the blocking ones
/// (`signals::raw_syscall`): no frame, nothing on the stack, the result or -1 with errno. A
/// call that returns twice or elsewhere must find exactly that: a `clone` (or `clone3`) child
/// given its own stack comes back from the instruction on that stack and returns with `ret`
/// from its top, as the caller laid it out; an agent frame there would be popped from the
/// child's stack (and a `vfork` child would run agent code on its parent's frames). The
/// blocking calls, whose numbers a bitmap holds, jump to the resuming wrapper with the
/// caller's registers and stack argument untouched.
///
/// # Safety
/// As `syscall(2)` for call `n`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn syscall(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "cmp rdi, {bits_len}",
        "jae 2f",
        "bt qword ptr [rip + {bits}], rdi",
        "jc {blocking}",
        "2:",
        "mov rax, rdi",
        "mov rdi, rsi",
        "mov rsi, rdx",
        "mov rdx, rcx",
        "mov r10, r8",
        "mov r8, r9",
        "mov r9, [rsp + 8]",
        "syscall",
        "cmp rax, -4095",
        "jae 3f",
        "ret",
        "3:",
        "mov rdi, rax",
        "jmp {failed}",
        ".cfi_endproc",
        bits_len = const crate::signals::raw_syscall::RESUMED_BITS.len() * 64,
        bits = sym crate::signals::raw_syscall::RESUMED_BITS,
        blocking = sym blocking_syscall,
        failed = sym crate::signals::raw_syscall::failed,
    )
}

/// The blocking calls of [`syscall`], reached by its jump with the caller's arguments.
///
/// # Safety
/// As `syscall(2)` for call `n`.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn blocking_syscall(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    crate::signals::blocking::scrub_stack();
    // SAFETY: the caller's call.
    unsafe { crate::signals::raw_syscall::blocking_call(n, [a1, a2, a3, a4, a5, a6]) }
}

// `SIGUSR2` kept for both the program and HEAPTUI_DUMP (signals::chain).

/// # Safety
/// As `sigaction(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { crate::signals::chain::sigaction(sig, act, old) }
}

/// `signal(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    crate::signals::chain::signal(sig, handler)
}

/// `bsd_signal(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    crate::signals::chain::bsd_signal(sig, handler)
}

/// `sysv_signal(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    crate::signals::chain::sysv_signal(sig, handler)
}
