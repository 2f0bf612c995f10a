//! `SIGUSR2` shared between the program and the `HEAPTUI_DUMP` trigger, and the stop signal
//! kept from the program's hands.
//!
//! Without this, a program that installs its own `SIGUSR2` handler silently replaces the dump
//! trigger. With `HEAPTUI_DUMP` set, the agent owns the kernel's disposition of `SIGUSR2` (its
//! [`dispatch`] handler) and keeps the program's disposition beside it: `sigaction`, `signal`,
//! `bsd_signal` and `sysv_signal` are interposed for `SIGUSR2` only, store what the program
//! asked for, and answer `oldact` with what the program installed last (or what the process
//! inherited, before that). Every other signal, and `SIGUSR2` without `HEAPTUI_DUMP`, goes
//! straight to libc.
//!
//! The program's handler runs exactly as it asked: `SA_SIGINFO` handlers get the kernel's
//! `siginfo_t` and `ucontext`, plain ones the signal number; the kernel applies the program's
//! `sa_mask` and its `SA_RESTART`/`SA_ONSTACK`/`SA_NODEFER` (the agent's handler is installed
//! with them); `SA_RESETHAND` is emulated (the stored disposition becomes `SIG_DFL` as the
//! handler is entered, and the kernel flags go back to the agent's). A `SIGUSR2` the process
//! sends itself (`raise`, `kill(getpid())`, `pthread_kill`) is then the program's business
//! only; one sent by another process (the operator's `kill -USR2`) also asks for a dump.
//!
//! With the program's disposition at `SIG_DFL` or `SIG_IGN`, every `SIGUSR2` asks for a dump
//! (that is what `HEAPTUI_DUMP` means: the dump replaces termination), and the agent's
//! signal must then not cut short a blocking call either (see `signals::blocking`).
//!
//! Not covered: `sigset(3)` and a raw `rt_sigaction` system call replace the agent's handler;
//! the program keeps its behaviour and the trigger is lost. A fork child has no agent thread,
//! so it gets the program's disposition back for real ([`release_in_child`]).
//!
//! The agent's stop signal gets the same treatment, always: once its handler is installed,
//! the program's `sigaction`/`signal` calls for that number are stored and read back but never
//! reach the kernel ([`protect_stop_signal`]), so a program that resets every signal to
//! `SIG_DFL` does not make the next stop kill it; a handler the program installs for the
//! number runs when the program (not the agent) sends it ([`program_stop_signal`]).
//!
//! For every signal, the wrapper also removes the stop signal from the handler's `sa_mask`
//! (as the `pthread_sigmask` wrapper does for the thread's mask), so a thread running a
//! program handler stays stoppable.
//!
//! Must never: allocate, lock or print in [`dispatch`]; call the program's handler with
//! arguments it did not ask for.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::Real;
use super::blocking;
use crate::capture::stop::stop_signal;

static SIGACTION: Real = Real::new(c"sigaction");
static SIGNAL: Real = Real::new(c"signal");
static BSD_SIGNAL: Real = Real::new(c"bsd_signal");
static SYSV_SIGNAL: Real = Real::new(c"sysv_signal");

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// The agent owns the kernel's `SIGUSR2` disposition.
static OWNED: AtomicBool = AtomicBool::new(false);
/// What the agent does with a `SIGUSR2` that asks for a dump.
static TRIGGER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The program's `SIGUSR2` disposition, behind a sequence lock: the dispatcher (any thread,
/// in a signal handler) reads it without locking; writers hold `WRITER` with every signal
/// blocked, so no handler on the writing thread can interrupt a write.
struct Stored {
    seq: AtomicU32,
    writer: AtomicBool,
    action: UnsafeCell<libc::sigaction>,
}

// SAFETY: `action` is written only under `writer` with `seq` odd, and read by copying then
// checking that `seq` was even and unchanged (a sequence lock).
unsafe impl Sync for Stored {}

impl Stored {
    const fn new() -> Self {
        Stored {
            seq: AtomicU32::new(0),
            writer: AtomicBool::new(false),
            // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask.
            action: UnsafeCell::new(unsafe { std::mem::zeroed() }),
        }
    }

    fn load(&self) -> libc::sigaction {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                // SAFETY: a racy copy, kept only if no write overlapped it (checked below); a
                // sigaction is plain data, so a torn copy is harmless until discarded.
                let copy = unsafe { std::ptr::read_volatile(self.action.get()) };
                std::sync::atomic::fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    return copy;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Replaces the stored disposition; returns the previous one.
    fn store(&self, new: &libc::sigaction) -> libc::sigaction {
        // SAFETY: zeroed sigsets are valid; the raw call blocks every signal on this thread.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_BLOCK,
                &all as *const libc::sigset_t,
                &mut old_mask as *mut libc::sigset_t,
                8usize,
            );
        }
        while self
            .writer
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        self.seq.fetch_add(1, Ordering::AcqRel);
        // SAFETY: we hold `writer`; readers discard copies taken while `seq` is odd.
        let previous = unsafe { std::ptr::replace(self.action.get(), *new) };
        self.seq.fetch_add(1, Ordering::Release);
        self.writer.store(false, Ordering::Release);
        // SAFETY: restores this thread's mask as it was.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &old_mask as *const libc::sigset_t,
                std::ptr::null_mut::<libc::sigset_t>(),
                8usize,
            );
        }
        previous
    }

    /// In a fork child: frees the writer lock, which a thread that does not exist there may
    /// have held at the fork.
    fn unlock_in_child(&self) {
        self.writer.store(false, Ordering::Relaxed);
        if self.seq.load(Ordering::Relaxed) & 1 == 1 {
            self.seq.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The program's `SIGUSR2` disposition.
static STORED: Stored = Stored::new();
/// The program's disposition of the agent's stop signal, which the kernel never gets.
static STOP_STORED: Stored = Stored::new();
/// The agent's stop handler is installed: the program's changes to it are kept apart.
static STOP_OWNED: AtomicBool = AtomicBool::new(false);

fn load() -> libc::sigaction {
    STORED.load()
}

fn store(new: &libc::sigaction) -> libc::sigaction {
    STORED.store(new)
}

pub(super) fn init() {
    SIGACTION.get();
    SIGNAL.get();
    BSD_SIGNAL.get();
    SYSV_SIGNAL.get();
}

/// libc's own `sigaction`, bypassing the agent's wrapper: the agent installs its handlers
/// with this.
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn real_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let p = SIGACTION.get();
    if p.is_null() {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: libc's sigaction, called with the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, SigactionFn>(p)(sig, act, old) }
}

fn is_default_or_ignore(handler: libc::sighandler_t) -> bool {
    handler == libc::SIG_DFL || handler == libc::SIG_IGN
}

/// The kernel disposition that serves the program's `program` disposition.
fn kernel_action(program: &libc::sigaction) -> libc::sigaction {
    // SAFETY: a zeroed sigaction is valid; every field is set below.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = dispatch as *const () as usize;
    if is_default_or_ignore(program.sa_sigaction) {
        // The agent's own: calls cut short by it are resumed by the blocking wrappers, and
        // restartable ones restart.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `sa.sa_mask` is a valid sigset_t.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    } else {
        sa.sa_flags = libc::SA_SIGINFO
            | (program.sa_flags & (libc::SA_RESTART | libc::SA_ONSTACK | libc::SA_NODEFER));
        sa.sa_mask = program.sa_mask;
    }
    sa
}

/// Makes the agent's dispatcher `SIGUSR2`'s handler, keeping the inherited disposition as
/// the program's; `trigger` is called (async-signal-safe) for each `SIGUSR2` that asks for a
/// dump. Called once from the constructor, before the program runs.
pub fn take_over(trigger: extern "C" fn()) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid output space.
    let mut inherited: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the current disposition into `inherited`.
    if unsafe { real_sigaction(libc::SIGUSR2, std::ptr::null(), &mut inherited) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    store(&inherited);
    TRIGGER.store(trigger as usize, Ordering::Release);
    let sa = kernel_action(&inherited);
    // SAFETY: installs our handler with a valid sigaction.
    if unsafe { real_sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    OWNED.store(true, Ordering::Release);
    Ok(())
}

/// In a fork child, which has no agent thread to write a dump: gives `SIGUSR2` back to the
/// program's disposition, so it behaves there exactly as without the agent (`SIG_DFL` ends
/// the child). Also frees the writer lock, which a thread that does not exist in the child
/// may have held at the fork.
pub fn release_in_child() {
    STORED.unlock_in_child();
    STOP_STORED.unlock_in_child();
    if OWNED.swap(false, Ordering::AcqRel) {
        let program = load();
        // SAFETY: the program's own disposition, as it passed it to sigaction.
        unsafe { real_sigaction(libc::SIGUSR2, &program, std::ptr::null_mut()) };
    }
}

/// Called once the agent's stop handler is installed: from then on the program's `sigaction`
/// and `signal` calls for the stop signal are kept apart (read back as the program set them)
/// and never reach the kernel, so a program that resets every signal to `SIG_DFL` (or takes
/// the number for itself) cannot turn the next stop into the default action, termination.
/// `inherited` is what the kernel had before.
pub fn protect_stop_signal(inherited: &libc::sigaction) {
    STOP_STORED.store(inherited);
    STOP_OWNED.store(true, Ordering::Release);
}

/// The stop handler got the stop signal from the program, not from the agent: runs the
/// program's handler for it as the program installed it (nothing for `SIG_DFL`/`SIG_IGN`:
/// the default action would end the process, which the agent never lets its own signal do).
/// Async-signal-safe.
pub fn program_stop_signal(sig: c_int, info: *mut libc::siginfo_t, uctx: *mut c_void) {
    let program = STOP_STORED.load();
    if is_default_or_ignore(program.sa_sigaction) {
        blocking::agent_signal_arrived(uctx);
        return;
    }
    blocking::program_signal_arrived();
    if program.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: zeroed is SIG_DFL with an empty mask.
        STOP_STORED.store(&unsafe { std::mem::zeroed() });
    }
    call_program(&program, sig, info, uctx);
}

/// Calls a program's handler with the arguments its flags ask for.
fn call_program(
    program: &libc::sigaction,
    sig: c_int,
    info: *mut libc::siginfo_t,
    uctx: *mut c_void,
) {
    if program.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this SA_SIGINFO handler for these arguments.
        let f = unsafe {
            std::mem::transmute::<usize, extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void)>(
                program.sa_sigaction,
            )
        };
        f(sig, info, uctx);
    } else {
        // SAFETY: the program installed this plain handler.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int)>(program.sa_sigaction) };
        f(sig);
    }
}

fn ask_for_dump() {
    let t = TRIGGER.load(Ordering::Acquire);
    if t != 0 {
        // SAFETY: TRIGGER only ever holds an `extern "C" fn()` (take_over).
        unsafe { std::mem::transmute::<usize, extern "C" fn()>(t)() };
    }
}

/// The kernel's `SIGUSR2` handler while the agent owns it.
extern "C" fn dispatch(sig: c_int, info: *mut libc::siginfo_t, uctx: *mut c_void) {
    // SAFETY: errno is this thread's; restored before the program's handler runs.
    let saved_errno = unsafe { *libc::__errno_location() };
    let program = load();
    if is_default_or_ignore(program.sa_sigaction) {
        blocking::agent_signal_arrived(uctx);
        ask_for_dump();
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved_errno };
        return;
    }
    // The program's handler runs: a blocking call it cut short must report EINTR even if
    // the stop signal also arrived during it.
    blocking::program_signal_arrived();
    // SAFETY: the kernel passes a valid siginfo_t; getpid is async-signal-safe.
    let from_outside =
        !info.is_null() && unsafe { (*info).si_code <= 0 && (*info).si_pid() != libc::getpid() };
    if from_outside {
        ask_for_dump();
    }
    if program.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: zeroed is SIG_DFL with an empty mask.
        let default: libc::sigaction = unsafe { std::mem::zeroed() };
        store(&default);
        let sa = kernel_action(&default);
        // SAFETY: sigaction is async-signal-safe; `sa` is valid.
        unsafe { real_sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
    call_program(&program, sig, info, uctx);
}

/// `sigaction(2)`, with `SIGUSR2` kept by the agent while it owns it.
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // A handler's sa_mask must not block the stop signal either (as the sigmask wrappers
    // ensure for the thread's own mask): a thread in such a handler would read as unstoppable.
    let mut filtered: libc::sigaction;
    let act = if act.is_null() {
        act
    } else {
        // SAFETY: `act` is readable per the contract.
        filtered = unsafe { *act };
        super::remove_signal(&mut filtered.sa_mask, stop_signal());
        &filtered as *const libc::sigaction
    };
    if sig == stop_signal() && STOP_OWNED.load(Ordering::Acquire) {
        // SAFETY: `act` is null or our filtered copy.
        let previous = match unsafe { act.as_ref() } {
            Some(new) => STOP_STORED.store(new),
            None => STOP_STORED.load(),
        };
        if !old.is_null() {
            // SAFETY: `old` is writable per the contract.
            unsafe { *old = previous };
        }
        return 0;
    }
    if sig != libc::SIGUSR2 || !OWNED.load(Ordering::Acquire) {
        // SAFETY: the caller's arguments (the mask filtered).
        return unsafe { real_sigaction(sig, act, old) };
    }
    if act.is_null() {
        if !old.is_null() {
            // SAFETY: `old` is writable per the contract.
            unsafe { *old = load() };
        }
        return 0;
    }
    // SAFETY: `act` is readable per the contract.
    let new = unsafe { *act };
    let previous = store(&new);
    let sa = kernel_action(&new);
    // SAFETY: our handler with a valid sigaction.
    unsafe { real_sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) };
    if !old.is_null() {
        // SAFETY: `old` is writable per the contract.
        unsafe { *old = previous };
    }
    0
}

/// The `signal`-family functions for `SIGUSR2`: installs `handler` with `flags` (glibc's
/// choices for each) and the signal itself in the mask unless `SA_NODEFER`.
fn install_simple(sig: c_int, handler: libc::sighandler_t, flags: c_int) -> libc::sighandler_t {
    // SAFETY: a zeroed sigaction is valid; fields set below.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = flags;
    // SAFETY: `sa.sa_mask` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut sa.sa_mask);
        if flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut sa.sa_mask, sig);
        }
    }
    // SAFETY: a zeroed sigaction is valid output space.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals.
    unsafe { sigaction(sig, &sa, &mut old) };
    old.sa_sigaction
}

fn forward_signal(real: &Real, sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let p = real.get();
    if p.is_null() {
        return libc::SIG_ERR;
    }
    // SAFETY: libc's function of that signature, with the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, SignalFn>(p)(sig, handler) }
}

fn owned(sig: c_int) -> bool {
    (sig == libc::SIGUSR2 && OWNED.load(Ordering::Acquire))
        || (sig == stop_signal() && STOP_OWNED.load(Ordering::Acquire))
}

/// `signal(2)` (BSD semantics, as glibc's).
pub fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if owned(sig) {
        install_simple(sig, handler, libc::SA_RESTART)
    } else {
        forward_signal(&SIGNAL, sig, handler)
    }
}

/// `bsd_signal(3)`.
pub fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if owned(sig) {
        install_simple(sig, handler, libc::SA_RESTART)
    } else {
        forward_signal(&BSD_SIGNAL, sig, handler)
    }
}

/// `sysv_signal(3)`: one-shot, not deferred, not restarted.
pub fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if owned(sig) {
        install_simple(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER)
    } else {
        forward_signal(&SYSV_SIGNAL, sig, handler)
    }
}
