//! Blocking calls the agent's signals must not cut short.
//!
//! The stop signal is installed with `SA_RESTART`, but the kernel never restarts a sleep, a
//! wait with a timeout or a wait for signals after a handler ran (signal(7)): `nanosleep`,
//! `clock_nanosleep`, `poll`, `ppoll`, `epoll_wait`, `epoll_pwait`, `select`, `pselect`,
//! `pause`, `sigsuspend`, `sigwaitinfo`, `sigtimedwait`, `epoll_pwait2` and System V's
//! `semop`, `semtimedop`, `msgrcv`, `msgsnd` return `EINTR` (and glibc's
//! `sleep`/`usleep`, which call its internal `__clock_nanosleep` without going through any
//! interposable symbol, return early). Without help, a program sleeping 2 s while a
//! snapshot is taken would wake after a few milliseconds. The same holds for `SIGUSR2` when
//! the agent's dump trigger, not the program, owns it (see `signals::chain`).
//!
//! Design: each of those functions is interposed (exports.rs) and runs the real one through
//! [`run`]:
//! - A per-thread byte in a table indexed by tid (an mmap'd, lazily touched array of 4 Mi
//!   bytes — the kernel's largest pid — so a signal handler reaches it with no TLS, lock or
//!   allocation) says "inside a wrapped blocking call" (`IN_CALL`).
//! - The agent's handlers call [`agent_signal_arrived`]; when the thread is `IN_CALL` and the
//!   interrupted context shows the kernel ending a system call with `EINTR` (`rax == -EINTR`:
//!   the call was cut short by this very signal, not merely about to start), it sets
//!   `BY_AGENT`. A program signal seen while the thread is held in the stop handler (its
//!   futex wait ends with `EINTR` because the program's handler ran on top of ours), or still
//!   pending and deliverable when the stop handler returns, sets `OTHER`
//!   ([`program_signal_arrived`]).
//! - When the real call fails with `EINTR`, the wrapper retries only if `BY_AGENT` is set and
//!   `OTHER` is not; it retries with what is left of the timeout, measured against a deadline
//!   taken before the first call on the call's own clock (`CLOCK_MONOTONIC` for the relative
//!   sleeps, the timespec waits such as `semtimedop` and the millisecond/`timeval` timeouts,
//!   which the kernel measures that way; absolute `clock_nanosleep` retries unchanged). errno
//!   is restored before each retry.
//! - So a program's own signal still interrupts the call exactly as before: its handler ran,
//!   `BY_AGENT` is not set, and the wrapper returns the `EINTR` untouched (with `nanosleep`'s
//!   `rem`, `sleep`'s unslept seconds and `select`'s updated `timeval`, as the kernel gave them).
//!
//! The rest of signal(7)'s list goes through [`run`] too: the socket calls under
//! `SO_RCVTIMEO`/`SO_SNDTIMEO` (`signals::sockets`; `read` and `write` on such sockets reach it
//! only after failing, `signals::read_write`, told apart by the stop handler's note of the call
//! it cut short rather than by an armed byte: see "unarmed calls" below), and every blocking
//! call made by number through libc's `syscall(3)`, libaio's `io_getevents` among them
//! (`signals::raw_syscall`). So do the timed waits whose `EINTR` glibc hands to the caller
//! rather than going back to waiting: `sem_timedwait`, `sem_clockwait` (nptl/sem_waitcommon.c)
//! and `aio_suspend` (sysdeps/pthread/aio_suspend.c); and C11's `thrd_sleep`, which, like
//! `sleep`, reaches the kernel without an interposable call. glibc 2.36's other timed waits
//! loop on their futex's `EINTR` until the deadline (nptl/pthread_cond_wait.c,
//! pthread_mutex_timedlock.c, pthread_rwlock_common.c, pthread_join_common.c), and the waits
//! without a timeout (`sem_wait`, `pthread_cond_wait`, mutexes) are restarted by the kernel
//! after an `SA_RESTART` handler: those need nothing.
//! Not covered: a call made with the `syscall` instruction itself (Go's runtime, for one),
//! which no interposition can see.
//!
//! Residual race, accepted: when a program signal and the stop signal are both pending as the
//! call is cut short, the kernel sets up both handler frames before returning to user space:
//! the signal dequeued first gets the outer frame, runs last, and sees the call's `EINTR` in
//! its context; the other runs first and sees the outer handler's entry. With a standard
//! program signal (dequeued before any real-time one) the stop handler is the inner one,
//! marks nothing, and the `EINTR` is returned as it should. But a program real-time signal
//! numbered above the stop signal is dequeued after it: its handler runs first, and the stop
//! handler then finds the bare `EINTR`; the call goes on to its timeout although the
//! program's handler ran. The same holds when the stop signal lands in the few instructions
//! between the system call's return (after a program handler) and the wrapper's check, and
//! when a program handler blocked the stop signal with the raw `rt_sigprocmask` system call (the
//! libc masks lose it on the way, see `pthread_sigmask`): the stop is then delivered as the
//! handler's `rt_sigreturn` unblocks it, on the very context whose `EINTR` the program's signal
//! caused, and marks it `BY_AGENT`. Closing these would mean wrapping every handler the program
//! installs (as `signals::chain` does for `SIGUSR2`, which is therefore covered); the window is
//! a few instructions wide, so the agent does not.
//!
//! The wrappers use the "C-unwind" ABI, because every one of these functions is a
//! cancellation point: `pthread_cancel` unwinds through them. They hold nothing with drop glue,
//! so they have no cleanup code for the unwinder to run (nor for the cancel policy to refuse).
//! Nested calls (a program handler that sleeps while its thread was in a wrapped call) save and
//! restore the outer call's byte.
//!
//! The signal masks these calls install for their duration (`ppoll`, `pselect`,
//! `epoll_pwait`, `epoll_pwait2`, `sigsuspend`) and the sets they wait for (`sigwaitinfo`, `sigtimedwait`,
//! `sigwait`) lose the stop signal on the way, as the `pthread_sigmask` wrapper does.
//!
//! Must never: allocate, lock, print, or change a call's result when the agent did not cause
//! its `EINTR`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, Ordering};

use super::Real;
use crate::sys::{self, errno, set_errno, ts_ns};

/// Inside a wrapped blocking call.
const IN_CALL: u8 = 1;
/// The call was cut short by one of the agent's signals.
const BY_AGENT: u8 = 2;
/// A program signal was handled (or is about to be) during the call.
const OTHER: u8 = 4;

/// One byte per possible tid: `PID_MAX_LIMIT` on 64-bit kernels.
const SLOTS: usize = 1 << 22;

static TABLE: AtomicPtr<AtomicU8> = AtomicPtr::new(std::ptr::null_mut());
/// Calls retried because the agent interrupted them (the exit summary's `blocking_retries`).
static RETRIES: AtomicU64 = AtomicU64::new(0);

pub(super) static NANOSLEEP: Real = Real::new(c"nanosleep");
pub(super) static CLOCK_NANOSLEEP: Real = Real::new(c"clock_nanosleep");
pub(super) static SLEEP: Real = Real::new(c"sleep");
pub(super) static USLEEP: Real = Real::new(c"usleep");
pub(super) static POLL: Real = Real::new(c"poll");
pub(super) static PPOLL: Real = Real::new(c"ppoll");
pub(super) static EPOLL_WAIT: Real = Real::new(c"epoll_wait");
pub(super) static EPOLL_PWAIT: Real = Real::new(c"epoll_pwait");
pub(super) static SELECT: Real = Real::new(c"select");
pub(super) static PSELECT: Real = Real::new(c"pselect");
pub(super) static PAUSE: Real = Real::new(c"pause");
pub(super) static SIGSUSPEND: Real = Real::new(c"sigsuspend");
pub(super) static SIGWAITINFO: Real = Real::new(c"sigwaitinfo");
pub(super) static SIGTIMEDWAIT: Real = Real::new(c"sigtimedwait");
pub(super) static SIGWAIT: Real = Real::new(c"sigwait");
pub(super) static EPOLL_PWAIT2: Real = Real::new(c"epoll_pwait2");
pub(super) static SEMOP: Real = Real::new(c"semop");
pub(super) static SEMTIMEDOP: Real = Real::new(c"semtimedop");
pub(super) static MSGRCV: Real = Real::new(c"msgrcv");
pub(super) static MSGSND: Real = Real::new(c"msgsnd");
pub(super) static SEM_TIMEDWAIT: Real = Real::new(c"sem_timedwait");
pub(super) static SEM_CLOCKWAIT: Real = Real::new(c"sem_clockwait");
pub(super) static AIO_SUSPEND: Real = Real::new(c"aio_suspend");
pub(super) static AIO_SUSPEND64: Real = Real::new(c"aio_suspend64");
pub(super) static THRD_SLEEP: Real = Real::new(c"thrd_sleep");

pub(super) fn init() {
    for f in [
        &NANOSLEEP,
        &CLOCK_NANOSLEEP,
        &SLEEP,
        &USLEEP,
        &POLL,
        &PPOLL,
        &EPOLL_WAIT,
        &EPOLL_PWAIT,
        &SELECT,
        &PSELECT,
        &PAUSE,
        &SIGSUSPEND,
        &SIGWAITINFO,
        &SIGTIMEDWAIT,
        &SIGWAIT,
        &EPOLL_PWAIT2,
        &SEMOP,
        &SEMTIMEDOP,
        &MSGRCV,
        &MSGSND,
        &SEM_TIMEDWAIT,
        &SEM_CLOCKWAIT,
        &AIO_SUSPEND,
        &AIO_SUSPEND64,
        &THRD_SLEEP,
    ] {
        f.get();
    }
    let _ = slot(sys::current_tid(), true);
}

/// How much stack below an exported wrapper its implementation's frames can take (an
/// unoptimised build's frames are several times larger).
const SCRUB_BYTES: usize = if cfg!(debug_assertions) { 4096 } else { 1024 };

/// Zeroes the stack just below the caller. The wrappers' frames lie on the blocked thread's
/// stack while the world is stopped, and the capture scans them conservatively: a slot they
/// leave unwritten on this path (an unoptimised build's spill slots, a branch not taken) would
/// otherwise show whatever an earlier, deeper call left there — a stale pointer that makes a
/// block look held by the sleeping thread in one snapshot and not in the next. Called first
/// by every exported wrapper, so the implementation's frames land on zeroes.
#[inline(never)]
pub fn scrub_stack() {
    let mut area = [0u8; SCRUB_BYTES];
    std::hint::black_box(&mut area);
}

/// Calls retried so far because only the agent interrupted them.
pub fn retries() -> u64 {
    RETRIES.load(Ordering::Relaxed)
}

/// The byte of thread `tid`; the table is mapped on first use when `create`.
fn slot(tid: u32, create: bool) -> Option<&'static AtomicU8> {
    let idx = tid as usize;
    if idx >= SLOTS {
        return None;
    }
    let mut table = TABLE.load(Ordering::Acquire);
    if table.is_null() {
        if !create {
            return None;
        }
        let fresh = sys::map_anon(SLOTS, true)?.cast::<AtomicU8>();
        match TABLE.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => table = fresh,
            Err(winner) => {
                // SAFETY: our own mapping, never published.
                unsafe { sys::unmap(fresh.cast(), SLOTS) };
                table = winner;
            }
        }
    }
    // SAFETY: the table is a zeroed mapping of SLOTS bytes that is never unmapped; AtomicU8
    // has the layout of u8 and zero is a valid value.
    Some(unsafe { &*table.add(idx) })
}

/// Called by the agent's own signal handlers (stop, and `SIGUSR2` when the program has no
/// handler of its own) with the handler's `ucontext`: marks the thread's wrapped blocking
/// call, if this signal is what cut it short; on a thread in no wrapped call, notes the
/// system call it cut short for the unarmed wrappers ([`take_unarmed_cut`]), or forgets an
/// earlier note. Async-signal-safe; reads errno before anything changes it (the handlers
/// call this first), which is then the interrupted code's.
pub fn agent_signal_arrived(uctx: *const c_void) {
    let tid = sys::current_tid();
    let armed = slot(tid, false).filter(|s| s.load(Ordering::Relaxed) & IN_CALL != 0);
    if uctx.is_null() {
        return;
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    let gregs = unsafe { &(*(uctx as *const libc::ucontext_t)).uc_mcontext.gregs };
    let cut = gregs[libc::REG_RAX as usize] == -i64::from(libc::EINTR);
    match armed {
        Some(slot) => {
            if cut {
                slot.fetch_or(BY_AGENT, Ordering::Relaxed);
            }
            // An earlier note is of a call long over: it must not match a later one.
            set_unarmed_note(tid, None);
        }
        None => {
            let reg = |r: c_int| gregs[r as usize] as u64;
            let note = cut.then(|| {
                let print = call_print(reg(libc::REG_RDI), reg(libc::REG_RSI), reg(libc::REG_RDX));
                (print, errno())
            });
            set_unarmed_note(tid, note);
        }
    }
}

/// Called by the agent's handlers when a program signal was handled on top of them or is
/// pending for delivery right after: the thread's wrapped call must then report its `EINTR`.
pub fn program_signal_arrived() {
    let tid = sys::current_tid();
    set_unarmed_note(tid, None);
    if let Some(slot) = slot(tid, false)
        && slot.load(Ordering::Relaxed) & IN_CALL != 0
    {
        slot.fetch_or(OTHER, Ordering::Relaxed);
    }
}

// ---- unarmed calls ----
//
// `read`, `write`, `readv` and `writev` run for every file a program touches: their wrappers
// (signals::read_write) must cost nothing until the call fails, so they cannot arm the
// thread's byte before it. Instead the stop handler, finding a thread in no armed call whose
// system call it just ended with EINTR (rax holds -EINTR), notes which call that was: the
// thread, its errno at that moment (the
// call's entry errno: glibc's wrappers touch errno only after the system call), and a print of
// the call's first three argument registers (the kernel leaves them as they were). A wrapper
// whose call failed with EINTR takes the note: the agent alone cut it short when the note
// is this thread's and its print is the call's own arguments', and the descriptor is one the
// kernel ends with EINTR after an SA_RESTART handler (a socket with a timeout: on any other,
// the stop's EINTR is restarted by the kernel, so an EINTR there is the program's, whatever a
// note says — say, a stop that arrived while a program handler without SA_RESTART ran, and
// was delivered as it returned, its registers those of the call it had cut short). A program
// signal handled during or right after the stop erases the note, as it marks an armed call
// OTHER; every later stop of the thread replaces or erases it, so a note never outlives the
// next snapshot. The code before the interrupted instruction is not read to check that a
// `syscall` precedes it: code may be mapped execute-only (protection keys make `PROT_EXEC`
// alone unreadable), and a load there would fault in the program's thread.

/// Notes, one pair of words per thread (indexed by the tid's low bits; a thread sharing its
/// index with another stopped in the same snapshot may lose its note, and its call then
/// reports the `EINTR`, as without the wrapper): the tid in the top [`TID_BITS`] of both, the
/// call's print below it in the first, the errno in the low 32 bits of the second. Zero: no
/// note (no thread has tid 0).
static UNARMED_NOTES: [[AtomicU64; 2]; 1 << 14] =
    [const { [AtomicU64::new(0), AtomicU64::new(0)] }; 1 << 14];
const TID_BITS: u32 = 22;
const PRINT_BITS: u32 = 64 - TID_BITS;
const PRINT_MASK: u64 = (1 << PRINT_BITS) - 1;

fn unarmed_cell(tid: u32) -> &'static [AtomicU64; 2] {
    &UNARMED_NOTES[tid as usize % UNARMED_NOTES.len()]
}

fn tid_bits(tid: u32) -> u64 {
    u64::from(tid) << PRINT_BITS
}

/// The print of a call's first three arguments (the first an `int`: only its low 32 bits
/// are the call's, the rest of the register is whatever the caller left there).
fn call_print(first: u64, second: u64, third: u64) -> u64 {
    let mixed = (first & 0xffff_ffff).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ second.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ third.wrapping_mul(0x1656_67b1_9e37_79f9);
    mixed >> TID_BITS
}

/// Notes the call with `print` and `errno` as this thread's (None: erases this thread's note,
/// leaving another thread's alone).
fn set_unarmed_note(tid: u32, note: Option<(u64, c_int)>) {
    let [print_word, errno_word] = unarmed_cell(tid);
    match note {
        Some((print, errno)) => {
            errno_word.store(tid_bits(tid) | u64::from(errno as u32), Ordering::Relaxed);
            print_word.store(tid_bits(tid) | print, Ordering::Relaxed);
        }
        None => {
            let word = print_word.load(Ordering::Relaxed);
            if word != 0 && word & !PRINT_MASK == tid_bits(tid) {
                let _ = print_word.compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }
}

/// For an unarmed call on this thread that just failed with `EINTR`, with its first three
/// arguments: the errno it was called with when the agent's signal alone cut it short (the
/// note is taken, and the retry counted), None when the `EINTR` is the program's.
pub fn take_unarmed_cut(first: u64, second: u64, third: u64) -> Option<c_int> {
    let tid = sys::current_tid();
    let [print_word, errno_word] = unarmed_cell(tid);
    let word = print_word.load(Ordering::Relaxed);
    if word == 0 || word & !PRINT_MASK != tid_bits(tid) {
        return None;
    }
    print_word
        .compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed)
        .ok()?;
    let errno = errno_word.load(Ordering::Relaxed);
    if word & PRINT_MASK != call_print(first, second, third) || errno & !PRINT_MASK != tid_bits(tid)
    {
        return None;
    }
    RETRIES.fetch_add(1, Ordering::Relaxed);
    Some(errno as u32 as c_int)
}

/// A wrapped call in progress on this thread. Deliberately without `Drop`: a destructor
/// would give the wrappers unwind cleanup code (an LSDA), which the cancel policy rightly
/// refuses to unwind through; see [`Call::leave`].
struct Call {
    slot: Option<&'static AtomicU8>,
    prev: u8,
    errno: c_int,
}

impl Call {
    #[inline]
    fn enter() -> Self {
        let slot = slot(sys::current_tid(), true);
        let prev = slot.map_or(0, |s| s.swap(IN_CALL, Ordering::Relaxed));
        Self {
            slot,
            prev,
            errno: errno(),
        }
    }

    /// After the call failed with `EINTR`: whether only the agent interrupted it. If so, the
    /// call is re-armed and errno restored for the retry.
    fn agent_only(&self) -> bool {
        let Some(slot) = self.slot else {
            return false;
        };
        let state = slot.swap(IN_CALL, Ordering::Relaxed);
        if state & BY_AGENT != 0 && state & OTHER == 0 {
            RETRIES.fetch_add(1, Ordering::Relaxed);
            set_errno(self.errno);
            true
        } else {
            false
        }
    }
}

impl Call {
    /// Restores the outer state. Skipped when `pthread_cancel` unwinds through the call: the
    /// thread's byte then stays `IN_CALL`, which is harmless — the thread is ending, the next
    /// wrapped call on its tid overwrites the byte, and until then the stop handler marks it
    /// only for an `EINTR` that no wrapper will read.
    fn leave(self) {
        if let Some(slot) = self.slot {
            slot.store(self.prev, Ordering::Relaxed);
        }
    }
}

/// What a retry waits for.
#[derive(Clone, Copy)]
pub enum Timeout {
    /// No timeout, or an absolute one: retry with the original arguments.
    Same,
    /// `ns` nanoseconds on `clock`, counted from the first call.
    Relative { clock: libc::clockid_t, ns: i128 },
}

pub fn ns_ts(ns: i128) -> libc::timespec {
    let ns = ns.max(0);
    libc::timespec {
        tv_sec: (ns / 1_000_000_000).min(i128::from(libc::time_t::MAX)) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Milliseconds left, rounded up (a poll timeout never ends before its deadline).
pub fn ns_ms(ns: i128) -> c_int {
    ((ns.max(0) + 999_999) / 1_000_000).min(i128::from(c_int::MAX)) as c_int
}

/// Runs `call` (given `None` for the original arguments, or the nanoseconds left) until it
/// ends for a reason other than one of the agent's signals. `interrupted` says whether a
/// result is an `EINTR`.
///
/// Both are taken by reference: a closure taken by value would be dropped on unwind, and in
/// an unoptimised build that alone gives `run` unwind cleanup code (see [`Call`]).
pub fn run<R: Copy>(
    timeout: Timeout,
    call: &mut dyn FnMut(Option<i128>) -> R,
    interrupted: &dyn Fn(R) -> bool,
) -> R {
    let deadline = match timeout {
        Timeout::Same => None,
        Timeout::Relative { clock, ns } => sys::clock_ns(clock).map(|t| (clock, t + ns)),
    };
    let guard = Call::enter();
    let mut r = call(None);
    while interrupted(r) && guard.agent_only() {
        let left = deadline.map(|(clock, end)| end - sys::clock_ns(clock).unwrap_or(end));
        r = call(left);
    }
    guard.leave();
    r
}

/// A result type of the calls that report failure as -1 and errno.
pub trait MinusOne: Copy + PartialEq {
    const FAILED: Self;
}

impl MinusOne for c_int {
    const FAILED: Self = -1;
}

impl MinusOne for libc::ssize_t {
    const FAILED: Self = -1;
}

impl MinusOne for libc::c_long {
    const FAILED: Self = -1;
}

/// Whether a call that reports failure as -1 and errno ended with `EINTR`.
pub fn eintr<R: MinusOne>(r: R) -> bool {
    r == R::FAILED && errno() == libc::EINTR
}

/// The real function behind `$real` with type `$ty`, or `$fail` returned (errno ENOSYS) when
/// libc has none.
macro_rules! real {
    ($real:expr, $ty:ty, $fail:expr) => {{
        let p = $real.get();
        if p.is_null() {
            set_errno(libc::ENOSYS);
            return $fail;
        }
        // SAFETY: `p` is libc's definition of the function, whose C signature `$ty` is.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}
pub(super) use real;

type NanosleepFn = unsafe extern "C-unwind" fn(*const libc::timespec, *mut libc::timespec) -> c_int;
type ClockNanosleepFn = unsafe extern "C-unwind" fn(
    libc::clockid_t,
    c_int,
    *const libc::timespec,
    *mut libc::timespec,
) -> c_int;
type SleepFn = unsafe extern "C-unwind" fn(libc::c_uint) -> libc::c_uint;
type UsleepFn = unsafe extern "C-unwind" fn(libc::useconds_t) -> c_int;
type PollFn = unsafe extern "C-unwind" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
type PpollFn = unsafe extern "C-unwind" fn(
    *mut libc::pollfd,
    libc::nfds_t,
    *const libc::timespec,
    *const libc::sigset_t,
) -> c_int;
type EpollWaitFn =
    unsafe extern "C-unwind" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
type EpollPwaitFn = unsafe extern "C-unwind" fn(
    c_int,
    *mut libc::epoll_event,
    c_int,
    c_int,
    *const libc::sigset_t,
) -> c_int;
type SelectFn = unsafe extern "C-unwind" fn(
    c_int,
    *mut libc::fd_set,
    *mut libc::fd_set,
    *mut libc::fd_set,
    *mut libc::timeval,
) -> c_int;
type PselectFn = unsafe extern "C-unwind" fn(
    c_int,
    *mut libc::fd_set,
    *mut libc::fd_set,
    *mut libc::fd_set,
    *const libc::timespec,
    *const libc::sigset_t,
) -> c_int;

/// A relative timeout of `ns` on CLOCK_MONOTONIC, or [`Timeout::Same`] when there is nothing
/// to count down (no timeout, or zero: the call cannot block).
pub(super) fn monotonic(ns: Option<i128>) -> Timeout {
    match ns {
        Some(ns) if ns > 0 => Timeout::Relative {
            clock: libc::CLOCK_MONOTONIC,
            ns,
        },
        _ => Timeout::Same,
    }
}

/// What a retry of `clock_nanosleep(clock, flags, req, _)` waits for: what is left of a
/// relative sleep on its own clock, an absolute one unchanged.
///
/// # Safety
/// `req` is null or readable.
pub(super) unsafe fn clock_timeout(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
) -> Timeout {
    // SAFETY: guaranteed by the caller.
    match unsafe { read_ts(req) }.map(|t| ts_ns(&t)) {
        Some(ns) if flags & libc::TIMER_ABSTIME == 0 && ns > 0 => Timeout::Relative { clock, ns },
        _ => Timeout::Same,
    }
}

/// Reads a caller's timespec (None for a null pointer).
///
/// # Safety
/// `ts` is null or readable.
pub(super) unsafe fn read_ts(ts: *const libc::timespec) -> Option<libc::timespec> {
    // SAFETY: guaranteed by the caller.
    (!ts.is_null()).then(|| unsafe { *ts })
}

/// Runs an errno-reporting `call` with the caller's relative timeout `tmo` (null: none), then,
/// after an interruption by the agent, with what is left of it.
///
/// # Safety
/// `tmo` is null or readable; `call` gets `tmo` itself or a pointer to a live local.
pub(super) unsafe fn with_timespec<R: MinusOne>(
    tmo: *const libc::timespec,
    call: &mut dyn FnMut(*const libc::timespec) -> R,
) -> R {
    // SAFETY: guaranteed by the caller.
    let timeout = monotonic(unsafe { read_ts(tmo) }.map(|t| ts_ns(&t)));
    with_timeout(timeout, tmo, call)
}

/// As [`with_timespec`], counting down `timeout` (the caller's reading of `tmo`).
pub(super) fn with_timeout<R: MinusOne>(
    timeout: Timeout,
    tmo: *const libc::timespec,
    call: &mut dyn FnMut(*const libc::timespec) -> R,
) -> R {
    run(
        timeout,
        &mut |left| match left {
            None => call(tmo),
            Some(ns) => call(&ns_ts(ns)),
        },
        &eintr,
    )
}

/// As [`with_timespec`] for a timeout in milliseconds (negative: none).
pub(super) fn with_millis<R: MinusOne>(timeout: c_int, call: &mut dyn FnMut(c_int) -> R) -> R {
    run(
        monotonic((timeout >= 0).then(|| i128::from(timeout) * 1_000_000)),
        &mut |left| call(left.map_or(timeout, ns_ms)),
        &eintr,
    )
}

/// A copy of the signal set at `set` without the stop signal, when it holds it: a mask
/// installed for the length of a call must not block the stop signal (the thread would be
/// unstoppable meanwhile), and a set waited for must not take it (the program would receive
/// the agent's signal instead of its handler running).
///
/// # Safety
/// `set` is null or readable.
unsafe fn without_stop(set: *const libc::sigset_t) -> Option<libc::sigset_t> {
    if set.is_null() {
        return None;
    }
    let stop = crate::capture::stop::stop_signal();
    // SAFETY: `set` is readable per the contract.
    let mut copy = unsafe { *set };
    super::has_signal(&copy, stop).then(|| {
        super::remove_signal(&mut copy, stop);
        copy
    })
}

/// `set`, or the filtered copy of it in `copy`.
fn pick(set: *const libc::sigset_t, copy: &Option<libc::sigset_t>) -> *const libc::sigset_t {
    copy.as_ref().map_or(set, |c| c as *const libc::sigset_t)
}

/// `nanosleep(2)`.
///
/// # Safety
/// As `nanosleep(2)`.
pub unsafe fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    let real = real!(NANOSLEEP, NanosleepFn, -1);
    // SAFETY: the caller's pointers, as nanosleep(2) requires (or a local timespec).
    unsafe { with_timespec(req, &mut |ts| real(ts, rem)) }
}

/// `clock_nanosleep(2)`: returns 0 or an error number.
///
/// # Safety
/// As `clock_nanosleep(2)`.
pub unsafe fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    let real = real!(CLOCK_NANOSLEEP, ClockNanosleepFn, libc::ENOSYS);
    // SAFETY: the caller's pointer.
    let timeout = unsafe { clock_timeout(clock, flags, req) };
    run(
        timeout,
        &mut |left| match left {
            // SAFETY: the caller's arguments.
            None => unsafe { real(clock, flags, req, rem) },
            // SAFETY: a local timespec and the caller's `rem`.
            Some(ns) => unsafe { real(clock, flags, &ns_ts(ns), rem) },
        },
        &|r| r == libc::EINTR,
    )
}

/// `sleep(3)`: the unslept seconds when a program signal ends it early. glibc may report
/// less than a second left as 0, so an interruption is told by errno, not by the result.
pub fn sleep(seconds: libc::c_uint) -> libc::c_uint {
    let real = real!(SLEEP, SleepFn, seconds);
    let nano = real!(NANOSLEEP, NanosleepFn, seconds);
    let entry_errno = errno();
    let (left, _) = run(
        monotonic(Some(i128::from(seconds) * 1_000_000_000)),
        &mut |left| match left {
            None => {
                set_errno(0);
                // SAFETY: sleep has no pointer arguments.
                let r = unsafe { real(seconds) };
                let interrupted = errno() == libc::EINTR;
                if !interrupted {
                    set_errno(entry_errno);
                }
                (r, interrupted)
            }
            Some(ns) => {
                let mut rem = ns_ts(0);
                // SAFETY: two local timespecs.
                let r = unsafe { nano(&ns_ts(ns), &mut rem) };
                if r == 0 {
                    (0, false)
                } else {
                    (rem.tv_sec as libc::c_uint, errno() == libc::EINTR)
                }
            }
        },
        &|(_, interrupted)| interrupted,
    );
    left
}

/// `usleep(3)`.
pub fn usleep(usec: libc::useconds_t) -> c_int {
    let real = real!(USLEEP, UsleepFn, -1);
    run(
        monotonic(Some(i128::from(usec) * 1000)),
        &mut |left| {
            let us = left.map_or(usec, |ns| ((ns.max(0) + 999) / 1000) as libc::useconds_t);
            // SAFETY: usleep has no pointer arguments.
            unsafe { real(us) }
        },
        &eintr,
    )
}

/// `poll(2)`.
///
/// # Safety
/// As `poll(2)`.
pub unsafe fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    let real = real!(POLL, PollFn, -1);
    // SAFETY: the caller's arguments, with what is left of the timeout.
    with_millis(timeout, &mut |ms| unsafe { real(fds, n, ms) })
}

/// `ppoll(2)`.
///
/// # Safety
/// As `ppoll(2)`.
pub unsafe fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    tmo: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let real = real!(PPOLL, PpollFn, -1);
    // SAFETY: the caller's mask, null or readable.
    let filtered = unsafe { without_stop(mask) };
    let mask = pick(mask, &filtered);
    // SAFETY: the caller's arguments, the timeout theirs or a local one.
    unsafe { with_timespec(tmo, &mut |ts| real(fds, n, ts, mask)) }
}

/// `epoll_wait(2)`.
///
/// # Safety
/// As `epoll_wait(2)`.
pub unsafe fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let real = real!(EPOLL_WAIT, EpollWaitFn, -1);
    // SAFETY: the caller's arguments, with what is left of the timeout.
    with_millis(timeout, &mut |ms| unsafe { real(epfd, events, max, ms) })
}

/// `epoll_pwait(2)`.
///
/// # Safety
/// As `epoll_pwait(2)`.
pub unsafe fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    let real = real!(EPOLL_PWAIT, EpollPwaitFn, -1);
    // SAFETY: the caller's mask, null or readable.
    let filtered = unsafe { without_stop(mask) };
    let mask = pick(mask, &filtered);
    // SAFETY: the caller's arguments (the mask filtered), with what is left of the timeout.
    with_millis(timeout, &mut |ms| unsafe {
        real(epfd, events, max, ms, mask)
    })
}

/// `select(2)`: Linux writes the time left into `tv`; each retry passes what is left of the
/// original timeout there, so the caller sees the last call's value as it would have.
///
/// # Safety
/// As `select(2)`.
pub unsafe fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    let real = real!(SELECT, SelectFn, -1);
    // SAFETY: the caller's pointer, null or readable.
    let timeout = monotonic((!tv.is_null()).then(|| unsafe {
        i128::from((*tv).tv_sec) * 1_000_000_000 + i128::from((*tv).tv_usec) * 1000
    }));
    run(
        timeout,
        &mut |left| {
            if let Some(ns) = left {
                let us = (ns.max(0) + 999) / 1000;
                // SAFETY: `tv` is non-null whenever a time is left to pass (a relative
                // timeout came from it); the sets are unchanged after EINTR (select(2)).
                unsafe {
                    (*tv).tv_sec = (us / 1_000_000) as libc::time_t;
                    (*tv).tv_usec = (us % 1_000_000) as libc::suseconds_t;
                }
            }
            // SAFETY: the caller's arguments.
            unsafe { real(n, r, w, e, tv) }
        },
        &eintr,
    )
}

/// `pause(2)`: only a program signal ends it.
pub fn pause() -> c_int {
    type PauseFn = unsafe extern "C-unwind" fn() -> c_int;
    let real = real!(PAUSE, PauseFn, -1);
    // SAFETY: pause has no arguments.
    run(Timeout::Same, &mut |_| unsafe { real() }, &eintr)
}

/// `sigsuspend(2)`.
///
/// # Safety
/// As `sigsuspend(2)`.
pub unsafe fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    type SigsuspendFn = unsafe extern "C-unwind" fn(*const libc::sigset_t) -> c_int;
    let real = real!(SIGSUSPEND, SigsuspendFn, -1);
    // SAFETY: the caller's mask, null or readable.
    let filtered = unsafe { without_stop(mask) };
    let mask = pick(mask, &filtered);
    // SAFETY: the caller's argument.
    run(Timeout::Same, &mut |_| unsafe { real(mask) }, &eintr)
}

/// `sigwaitinfo(2)`.
///
/// # Safety
/// As `sigwaitinfo(2)`.
pub unsafe fn sigwaitinfo(set: *const libc::sigset_t, info: *mut libc::siginfo_t) -> c_int {
    type SigwaitinfoFn =
        unsafe extern "C-unwind" fn(*const libc::sigset_t, *mut libc::siginfo_t) -> c_int;
    let real = real!(SIGWAITINFO, SigwaitinfoFn, -1);
    // SAFETY: the caller's set, null or readable.
    let filtered = unsafe { without_stop(set) };
    let set = pick(set, &filtered);
    // SAFETY: the caller's arguments.
    run(Timeout::Same, &mut |_| unsafe { real(set, info) }, &eintr)
}

/// `sigtimedwait(2)`.
///
/// # Safety
/// As `sigtimedwait(2)`.
pub unsafe fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    tmo: *const libc::timespec,
) -> c_int {
    type SigtimedwaitFn = unsafe extern "C-unwind" fn(
        *const libc::sigset_t,
        *mut libc::siginfo_t,
        *const libc::timespec,
    ) -> c_int;
    let real = real!(SIGTIMEDWAIT, SigtimedwaitFn, -1);
    // SAFETY: the caller's set, null or readable.
    let filtered = unsafe { without_stop(set) };
    let set = pick(set, &filtered);
    // SAFETY: the caller's arguments, the timeout theirs or a local one.
    unsafe { with_timespec(tmo, &mut |ts| real(set, info, ts)) }
}

/// `sigwait(3)`: glibc's retries its own `EINTR`; only the set is filtered here.
///
/// # Safety
/// As `sigwait(3)`.
pub unsafe fn sigwait(set: *const libc::sigset_t, sig: *mut c_int) -> c_int {
    type SigwaitFn = unsafe extern "C-unwind" fn(*const libc::sigset_t, *mut c_int) -> c_int;
    let real = real!(SIGWAIT, SigwaitFn, libc::ENOSYS);
    // SAFETY: the caller's set, null or readable.
    let filtered = unsafe { without_stop(set) };
    // SAFETY: the caller's arguments, the set filtered.
    unsafe { real(pick(set, &filtered), sig) }
}

/// `pselect(2)`.
///
/// # Safety
/// As `pselect(2)`.
pub unsafe fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tmo: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let real = real!(PSELECT, PselectFn, -1);
    // SAFETY: the caller's mask, null or readable.
    let filtered = unsafe { without_stop(mask) };
    let mask = pick(mask, &filtered);
    // SAFETY: the caller's arguments, the timeout theirs or a local one.
    unsafe { with_timespec(tmo, &mut |ts| real(n, r, w, e, ts, mask)) }
}

/// `epoll_pwait2(2)`: `epoll_pwait` with a timespec timeout (glibc 2.35 and later; ENOSYS
/// from an older libc, as the program would get from the kernel without it).
///
/// # Safety
/// As `epoll_pwait2(2)`.
pub unsafe fn epoll_pwait2(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    tmo: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    type EpollPwait2Fn = unsafe extern "C-unwind" fn(
        c_int,
        *mut libc::epoll_event,
        c_int,
        *const libc::timespec,
        *const libc::sigset_t,
    ) -> c_int;
    let real = real!(EPOLL_PWAIT2, EpollPwait2Fn, -1);
    // SAFETY: the caller's mask, null or readable.
    let filtered = unsafe { without_stop(mask) };
    let mask = pick(mask, &filtered);
    // SAFETY: the caller's arguments (the mask filtered), the timeout theirs or a local one.
    unsafe { with_timespec(tmo, &mut |ts| real(epfd, events, max, ts, mask)) }
}

/// `semop(2)`: no timeout, so a retry passes the same operations (none of them was applied:
/// the kernel applies a call's operations all at once or not at all).
///
/// # Safety
/// As `semop(2)`.
pub unsafe fn semop(id: c_int, ops: *mut libc::sembuf, n: libc::size_t) -> c_int {
    type SemopFn = unsafe extern "C-unwind" fn(c_int, *mut libc::sembuf, libc::size_t) -> c_int;
    let real = real!(SEMOP, SemopFn, -1);
    // SAFETY: the caller's arguments.
    run(Timeout::Same, &mut |_| unsafe { real(id, ops, n) }, &eintr)
}

/// `semtimedop(2)`: its timeout is relative, on the kernel's monotonic clock.
///
/// # Safety
/// As `semtimedop(2)`.
pub unsafe fn semtimedop(
    id: c_int,
    ops: *mut libc::sembuf,
    n: libc::size_t,
    tmo: *const libc::timespec,
) -> c_int {
    type SemtimedopFn = unsafe extern "C-unwind" fn(
        c_int,
        *mut libc::sembuf,
        libc::size_t,
        *const libc::timespec,
    ) -> c_int;
    let real = real!(SEMTIMEDOP, SemtimedopFn, -1);
    // SAFETY: the caller's arguments, the timeout theirs or a local one.
    unsafe { with_timespec(tmo, &mut |ts| real(id, ops, n, ts)) }
}

/// `msgrcv(2)`.
///
/// # Safety
/// As `msgrcv(2)`.
pub unsafe fn msgrcv(
    id: c_int,
    msg: *mut c_void,
    size: libc::size_t,
    kind: libc::c_long,
    flags: c_int,
) -> libc::ssize_t {
    type MsgrcvFn = unsafe extern "C-unwind" fn(
        c_int,
        *mut c_void,
        libc::size_t,
        libc::c_long,
        c_int,
    ) -> libc::ssize_t;
    let real = real!(MSGRCV, MsgrcvFn, -1);
    run(
        Timeout::Same,
        // SAFETY: the caller's arguments.
        &mut |_| unsafe { real(id, msg, size, kind, flags) },
        &eintr,
    )
}

/// `msgsnd(2)`.
///
/// # Safety
/// As `msgsnd(2)`.
pub unsafe fn msgsnd(id: c_int, msg: *const c_void, size: libc::size_t, flags: c_int) -> c_int {
    type MsgsndFn = unsafe extern "C-unwind" fn(c_int, *const c_void, libc::size_t, c_int) -> c_int;
    let real = real!(MSGSND, MsgsndFn, -1);
    // SAFETY: the caller's arguments.
    run(
        Timeout::Same,
        &mut |_| unsafe { real(id, msg, size, flags) },
        &eintr,
    )
}

/// `sem_timedwait(3)`: glibc's hands the `EINTR` of its timed futex wait to the caller
/// (nptl/sem_waitcommon.c), which the kernel returns after any handler when the wait has a
/// timeout. The deadline is absolute: a retry passes it unchanged. (`sem_wait` has no
/// timeout, and the kernel restarts its wait after the agent's `SA_RESTART` handler.)
///
/// # Safety
/// As `sem_timedwait(3)`.
pub unsafe fn sem_timedwait(sem: *mut libc::sem_t, abstime: *const libc::timespec) -> c_int {
    type F = unsafe extern "C-unwind" fn(*mut libc::sem_t, *const libc::timespec) -> c_int;
    let real = real!(SEM_TIMEDWAIT, F, -1);
    // SAFETY: the caller's arguments.
    run(
        Timeout::Same,
        &mut |_| unsafe { real(sem, abstime) },
        &eintr,
    )
}

/// `sem_clockwait(3)`: as [`sem_timedwait`], on the caller's clock.
///
/// # Safety
/// As `sem_clockwait(3)`.
pub unsafe fn sem_clockwait(
    sem: *mut libc::sem_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    type F = unsafe extern "C-unwind" fn(
        *mut libc::sem_t,
        libc::clockid_t,
        *const libc::timespec,
    ) -> c_int;
    let real = real!(SEM_CLOCKWAIT, F, -1);
    // SAFETY: the caller's arguments.
    run(
        Timeout::Same,
        &mut |_| unsafe { real(sem, clock, abstime) },
        &eintr,
    )
}

/// `aio_suspend(3)` (and `aio_suspend64`, the same function under the name that
/// `_FILE_OFFSET_BITS=64` gives it): glibc's waits on a futex until the relative timeout and
/// returns the wait's `EINTR` (sysdeps/pthread/aio_suspend.c). A retry passes what is left.
///
/// # Safety
/// As `aio_suspend(3)`.
pub unsafe fn aio_suspend(
    list: *const *const c_void,
    count: c_int,
    tmo: *const libc::timespec,
    large_file: bool,
) -> c_int {
    type F =
        unsafe extern "C-unwind" fn(*const *const c_void, c_int, *const libc::timespec) -> c_int;
    let real = if large_file {
        real!(AIO_SUSPEND64, F, -1)
    } else {
        real!(AIO_SUSPEND, F, -1)
    };
    // SAFETY: the caller's arguments, the timeout theirs or a local one.
    unsafe { with_timespec(tmo, &mut |ts| real(list, count, ts)) }
}

/// `thrd_sleep(3)`: C11's sleep, which reaches the kernel through glibc's internal
/// `__clock_nanosleep` (no interposable symbol on the way) and reports an interruption as -1
/// (errno untouched; the time left in `rem`).
///
/// # Safety
/// As `thrd_sleep(3)`.
pub unsafe fn thrd_sleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    let real = real!(THRD_SLEEP, NanosleepFn, -2);
    // SAFETY: the caller's pointer.
    let timeout = monotonic(unsafe { read_ts(req) }.map(|t| ts_ns(&t)));
    run(
        timeout,
        &mut |left| match left {
            // SAFETY: the caller's arguments.
            None => unsafe { real(req, rem) },
            // SAFETY: a local timespec and the caller's `rem`.
            Some(ns) => unsafe { real(&ns_ts(ns), rem) },
        },
        &|r| r == -1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_conversions_round_the_right_way() {
        assert_eq!(ns_ms(1), 1);
        assert_eq!(ns_ms(1_000_000), 1);
        assert_eq!(ns_ms(1_000_001), 2);
        assert_eq!(ns_ms(-5), 0);
        let ts = ns_ts(2_500_000_000);
        assert_eq!((ts.tv_sec, ts.tv_nsec), (2, 500_000_000));
        assert_eq!(ts_ns(&ts), 2_500_000_000);
        assert_eq!(ns_ts(-1).tv_sec, 0);
    }

    #[test]
    fn retries_only_what_the_agent_interrupted() {
        // Simulated interruptions: the first two "calls" are cut short, by the agent and
        // then by a program signal; the wrapper retries the first and reports the second.
        let mut calls = 0;
        let r = run(
            Timeout::Relative {
                clock: libc::CLOCK_MONOTONIC,
                ns: 5_000_000_000,
            },
            &mut |left| {
                calls += 1;
                let slot = slot(sys::current_tid(), false).unwrap();
                match calls {
                    1 => {
                        assert!(left.is_none());
                        slot.fetch_or(BY_AGENT, Ordering::Relaxed);
                        set_errno(libc::EINTR);
                        -1
                    }
                    2 => {
                        let left = left.unwrap();
                        assert!(left > 4_000_000_000 && left <= 5_000_000_000, "{left}");
                        slot.fetch_or(BY_AGENT | OTHER, Ordering::Relaxed);
                        set_errno(libc::EINTR);
                        -1
                    }
                    _ => unreachable!(),
                }
            },
            &eintr,
        );
        assert_eq!((r, errno(), calls), (-1, libc::EINTR, 2));
        assert_eq!(
            slot(sys::current_tid(), false)
                .unwrap()
                .load(Ordering::Relaxed),
            0,
            "the thread's byte is restored"
        );
    }
}
