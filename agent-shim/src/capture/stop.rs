//! Stop-the-world, Boehm-GC style, with a real-time signal.
//!
//! Owns: the stop signal (`SIGRTMIN + 4`, chosen above the three that glibc keeps for itself:
//! cancellation, setxid, and timers), its handler, and the protocol between the agent thread
//! and the threads it stops. The agent thread sends the signal with `tgkill` to every listed
//! thread; each handler saves its registers (from the `ucontext`) and its thread pointer into a
//! slot prepared beforehand, acknowledges, and sleeps on a futex until the agent resumes the
//! world. Unanswered threads get the signal again after a while; a thread that has not answered
//! by the deadline (signal blocked by a raw syscall, parent of a vfork, stuck in the kernel) is
//! reported as not stoppable, with the reason read from `/proc`.
//!
//! A thread with the stop signal blocked is waited for like any other: programs and glibc block
//! every signal for short sections (a new thread runs with all signals blocked until glibc's
//! thread start restores its creator's mask; `raise`, `posix_spawn` and PostgreSQL's postmaster
//! do the same around their work), and the queued signal reaches the handler the moment the
//! section ends. Only a thread that is gone, stopped by a debugger or a zombie cannot answer
//! however long we wait: a couple of milliseconds after the first signal, the
//! `/proc/self/task/<tid>/status` of each thread that has not answered is read once (raw
//! `open`/`read` into a stack buffer) and such a thread is reported at once. Checking before
//! sending would cost every thread a `/proc` read; after the first ack window it costs only the
//! few that are late. A thread that had to be waited out (a raw mask that stays blocked, a vfork
//! parent) is remembered, and the next stop waits for it only `Timeouts::repeat` (50 ms): it
//! still gets the signal and is reported stopped if it answers, or not stoppable with the reason
//! `/proc` gives, as before.
//!
//! The handler also tells `signals::blocking` that this signal, not the program's, cut short
//! the thread's blocking call (and whether a program signal was handled on top of it), so the
//! wrapped `nanosleep`, `poll`, … carry on as if nothing happened.
//!
//! The signal is queued with `rt_tgsigqueueinfo` and a value of the agent's own, so the
//! handler tells the agent's stops from the same number sent by the program, whose own
//! handler for it (kept by `signals::chain`, which also keeps a program's `SIG_DFL` for it
//! from ever reaching the kernel) then runs instead.
//!
//! Must never: allocate with libc, take a lock, or use stdio in the handler or while the world
//! is stopped; wait on any thread without a deadline; free the slot table while a handler may
//! still touch it.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::unwind::Registers;
use crate::signals::{blocking, chain};

/// The stop signal.
pub fn stop_signal() -> libc::c_int {
    libc::SIGRTMIN() + 4
}

const IDLE: u32 = 0;
const REQUESTED: u32 = 1;
const SAVED: u32 = 2;
const LEFT: u32 = 3;

/// One thread's slot, written by its handler.
struct Slot {
    tid: u32,
    state: AtomicU32,
    regs: UnsafeCell<Registers>,
}

// SAFETY: `regs` is written only by the handler of thread `tid` while `state` is REQUESTED,
// and read by the agent only after it observed SAVED (release/acquire on `state`).
unsafe impl Sync for Slot {}

struct Table {
    /// Sorted by tid.
    slots: Vec<Slot>,
    /// Bumped to release the stopped threads.
    resume: AtomicU32,
    /// Number of handlers that saved their registers; futex word the agent sleeps on.
    acks: AtomicU32,
}

static TABLE: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
/// How many handlers are inside the part that touches the table.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// Sleeps while `word == expected`; true when a signal handler interrupted the wait.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT_PRIVATE reads the word (a valid AtomicU32) and sleeps; `tsp` is null
    // or points at a live timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            tsp,
        )
    };
    // SAFETY: errno is this thread's.
    r != 0 && unsafe { *libc::__errno_location() } == libc::EINTR
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE_PRIVATE on a valid futex word; wakes every waiter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The `siginfo_t` the agent queues with its stop signal (`rt_tgsigqueueinfo`, `SI_QUEUE`):
/// the value says it is the agent's, so the same number sent by the program reaches the
/// program's own handler instead.
#[repr(C)]
struct StopInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    pid: libc::pid_t,
    uid: libc::uid_t,
    value: u64,
    _rest: [u64; 12],
}

const _: () = assert!(std::mem::size_of::<StopInfo>() == std::mem::size_of::<libc::siginfo_t>());

/// "heaptui" and a version byte.
const COOKIE: u64 = 0x6865_6170_7475_6901;

fn from_agent(info: *const libc::siginfo_t) -> bool {
    if info.is_null() {
        return false;
    }
    // SAFETY: the kernel's siginfo_t, read through a layout of the same size whose fields
    // are those of the SI_QUEUE member of its union.
    let q = unsafe { &*(info as *const StopInfo) };
    // SAFETY: getpid is async-signal-safe and cannot fail.
    let me = unsafe { libc::getpid() };
    q.code == libc::SI_QUEUE && q.value == COOKIE && q.pid == me
}

/// Queues the stop signal to thread `tid` of process `pid`; false when the thread is gone.
fn send_stop(pid: libc::pid_t, tid: u32, sig: libc::c_int) -> bool {
    let info = StopInfo {
        signo: sig,
        errno: 0,
        code: libc::SI_QUEUE,
        _pad: 0,
        pid,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        value: COOKIE,
        _rest: [0; 12],
    };
    // SAFETY: rt_tgsigqueueinfo to a thread of our own process (so SI_QUEUE is allowed) with
    // a siginfo of the kernel's size.
    unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            pid,
            tid as libc::pid_t,
            sig,
            &info as *const StopInfo,
        ) == 0
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local and always addressable; restored before returning so the
    // interrupted code never sees our syscalls' errors.
    let saved_errno = unsafe { *libc::__errno_location() };
    if !from_agent(info) {
        // The program's use of this signal number, run as the program asked.
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved_errno };
        chain::program_stop_signal(sig, info, uctx);
        return;
    }
    // Whatever the table says, this signal is the agent's: a blocking call it cut short is
    // resumed by its wrapper (signals::blocking).
    blocking::agent_signal_arrived(uctx);
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let table = TABLE.load(Ordering::SeqCst);
    if !table.is_null() {
        // SAFETY: the agent keeps the table alive while INSIDE is non-zero or any slot has not
        // reached LEFT (see `World::drop`).
        let table = unsafe { &*table };
        let tid = gettid();
        if let Ok(i) = table.slots.binary_search_by_key(&tid, |s| s.tid) {
            let slot = &table.slots[i];
            if slot.state.load(Ordering::Acquire) == REQUESTED {
                let generation = table.resume.load(Ordering::Acquire);
                let mut fs_base = 0u64;
                // SAFETY: ARCH_GET_FS writes the thread pointer into `fs_base`; a raw syscall
                // is async-signal-safe.
                unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut fs_base as *mut u64) };
                // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
                let uc = unsafe { &*(uctx as *const libc::ucontext_t) };
                let regs = Registers::from_gregs(&uc.uc_mcontext.gregs, fs_base);
                // SAFETY: only this thread writes this slot, and only while REQUESTED.
                unsafe { *slot.regs.get() = regs };
                slot.state.store(SAVED, Ordering::Release);
                table.acks.fetch_add(1, Ordering::SeqCst);
                futex_wake(&table.acks);
                while table.resume.load(Ordering::Acquire) == generation {
                    if futex_wait(&table.resume, generation, None) {
                        // A program handler ran on top of this one: the program expects
                        // its EINTR.
                        blocking::program_signal_arrived();
                    }
                }
                slot.state.store(LEFT, Ordering::Release);
            }
        }
    }
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    if program_signal_pending(uctx) {
        blocking::program_signal_arrived();
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Whether a signal other than the stop signal is pending and will be delivered as soon as
/// the stop handler returns (not blocked in the interrupted context's mask).
fn program_signal_pending(uctx: *mut libc::c_void) -> bool {
    if uctx.is_null() {
        return false;
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    let uc = unsafe { &*(uctx as *const libc::ucontext_t) };
    // SAFETY: a zeroed sigset_t is valid; rt_sigpending writes the kernel's 8 bytes of it.
    let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; a raw system call is async-signal-safe.
    if unsafe {
        libc::syscall(
            libc::SYS_rt_sigpending,
            &mut pending as *mut libc::sigset_t,
            8usize,
        )
    } != 0
    {
        return false;
    }
    let stop = stop_signal();
    (1..=64).any(|sig| {
        // SAFETY: both sets are valid sigset_t values.
        sig != stop
            && unsafe {
                libc::sigismember(&pending, sig) == 1 && libc::sigismember(&uc.uc_sigmask, sig) == 0
            }
    })
}

/// Installs the stop signal's handler. Called once at agent start, on the agent thread.
pub fn install() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; we fill in the handler, flags and an empty mask.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as *const () as usize;
    // SA_RESTART: a thread stopped in read(2) or similar resumes its call transparently.
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `sa.sa_mask` is a valid sigset_t.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: a zeroed sigaction is valid output space.
    let mut inherited: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: installs a handler for our own real-time signal; `sa` is valid, `inherited`
    // receives what was there.
    if unsafe { chain::real_sigaction(stop_signal(), &sa, &mut inherited) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if inherited.sa_sigaction != handler as *const () as usize {
        chain::protect_stop_signal(&inherited);
    }
    Ok(())
}

/// A thread as the capture saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Stopped; its registers at the stop.
    Stopped(Registers),
    /// Not stopped by the deadline, with the reason.
    NotStoppable(&'static str),
    /// The thread had exited before the signal reached it.
    Gone,
}

/// How long to wait before resending the signal, and in all.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub resend: Duration,
    pub deadline: Duration,
    /// After this, the threads that have not answered have their `/proc` status read once:
    /// one that is gone, stopped by a debugger or a zombie cannot answer, and is reported at
    /// once instead of costing the whole deadline. (One with the stop signal blocked can: it is
    /// waited for.)
    pub probe: Duration,
    /// The deadline of a thread that did not answer the previous stop either (a vfork
    /// parent, a thread stuck in the kernel): it is still signalled and waited for, only not
    /// for the full deadline every time.
    pub repeat: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            resend: Duration::from_millis(20),
            // Long enough for a runnable thread on a loaded machine to be scheduled; a thread
            // that truly cannot be stopped costs this much pause once, then `repeat`.
            deadline: Duration::from_millis(1000),
            probe: Duration::from_millis(2),
            repeat: Duration::from_millis(50),
        }
    }
}

/// Threads that did not answer a stop, remembered for the next one (tids; 0 is free). A
/// thread that answers again is forgotten; one that ends leaves a stale tid, which only
/// shortens the deadline of a later thread reusing it once.
const SLOW_SLOTS: usize = 64;
static SLOW: [AtomicU32; SLOW_SLOTS] = [const { AtomicU32::new(0) }; SLOW_SLOTS];

fn was_slow(tid: u32) -> bool {
    SLOW.iter().any(|s| s.load(Ordering::Relaxed) == tid)
}

fn remember_slow(tid: u32, slow: bool) {
    if slow {
        if was_slow(tid) {
            return;
        }
        for s in &SLOW {
            if s.compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    } else {
        for s in &SLOW {
            let _ = s.compare_exchange(tid, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// The stopped world. Dropping it resumes every stopped thread.
pub struct World {
    table: *mut Table,
    /// `(tid, outcome)`, in the order of the tids passed to [`stop`].
    pub threads: Vec<(u32, Outcome)>,
    /// When the first signal was sent.
    pub started: Instant,
    resumed: bool,
}

/// What `/proc/self/task/<tid>/status` says about a thread that has not answered.
struct Status {
    /// The stop signal is in its blocked mask (`SigBlk`).
    blocked: bool,
    /// Its one-letter scheduler state (`State`), 0 when unreadable.
    state: u8,
    /// The file could not be opened: the thread has ended.
    gone: bool,
}

/// Reads a thread's status with raw system calls into a stack buffer: no allocation while
/// the world is stopped.
fn status(tid: u32, sig: libc::c_int) -> Status {
    let mut path = [0u8; 64];
    let prefix = b"/proc/self/task/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut n = prefix.len();
    let mut digits = [0u8; 10];
    let mut d = 0;
    let mut t = tid;
    loop {
        digits[d] = b'0' + (t % 10) as u8;
        d += 1;
        t /= 10;
        if t == 0 {
            break;
        }
    }
    for i in (0..d).rev() {
        path[n] = digits[i];
        n += 1;
    }
    path[n..n + 7].copy_from_slice(b"/status");
    let mut buf = [0u8; 2048];
    // SAFETY: `path` is NUL-terminated (zero-filled beyond the copied bytes).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Status {
            blocked: false,
            state: 0,
            gone: true,
        };
    }
    // SAFETY: reads into our stack buffer of the given length.
    let len = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: closes the descriptor we opened.
    unsafe { libc::close(fd) };
    let text = &buf[..len.max(0) as usize];
    let field = |name: &[u8]| -> Option<&[u8]> {
        text.split(|&b| b == b'\n')
            .find(|l| l.starts_with(name))
            .map(|l| l[name.len()..].trim_ascii())
    };
    let bit_set = |mask: &[u8]| -> bool {
        let bit = (sig - 1) as usize;
        let digit = mask
            .len()
            .checked_sub(1 + bit / 4)
            .and_then(|i| mask.get(i));
        digit
            .and_then(|c| (*c as char).to_digit(16))
            .is_some_and(|v| v & (1 << (bit % 4)) != 0)
    };
    Status {
        blocked: field(b"SigBlk:").is_some_and(bit_set),
        state: field(b"State:")
            .and_then(|s| s.first().copied())
            .unwrap_or(0),
        gone: false,
    }
}

/// Why a thread cannot answer however long we wait, if its status says so. A blocked stop
/// signal is not such a reason: the signal stays queued and is handled when the thread's
/// signals-blocked section ends, usually within microseconds.
fn hopeless(st: &Status) -> Option<&'static str> {
    if st.gone {
        return Some("exited");
    }
    match st.state {
        b'T' | b't' => Some("stopped or traced"),
        b'Z' | b'X' => Some("exited"),
        _ => None,
    }
}

/// Why a thread did not answer by its deadline.
fn why_not_stopped(tid: u32, sig: libc::c_int) -> &'static str {
    let st = status(tid, sig);
    if let Some(reason) = hopeless(&st) {
        return reason;
    }
    if st.blocked {
        return "stop signal blocked";
    }
    match st.state {
        b'D' => "in uninterruptible sleep (vfork or I/O)",
        _ => "did not answer the stop signal",
    }
}

/// Stops the threads `tids` (never the caller). The caller must hold the block table frozen
/// and must not call libc malloc until the returned [`World`] is dropped.
pub fn stop(tids: &[u32], timeouts: Timeouts) -> World {
    let me = gettid();
    let mut sorted: Vec<u32> = tids.iter().copied().filter(|&t| t != me).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let table = Box::into_raw(Box::new(Table {
        slots: sorted
            .iter()
            .map(|&tid| Slot {
                tid,
                state: AtomicU32::new(REQUESTED),
                regs: UnsafeCell::new(Registers::default()),
            })
            .collect(),
        resume: AtomicU32::new(0),
        acks: AtomicU32::new(0),
    }));
    TABLE.store(table, Ordering::SeqCst);
    // SAFETY: just created; freed only in `World::drop`.
    let t = unsafe { &*table };
    let pid = std::process::id() as libc::pid_t;
    let sig = stop_signal();
    // Everything the wait needs is allocated before the first signal: a stopped thread may
    // hold a lock of the agent's allocator.
    let deadlines: Vec<Duration> = sorted
        .iter()
        .map(|&tid| {
            if was_slow(tid) {
                timeouts.repeat.min(timeouts.deadline)
            } else {
                timeouts.deadline
            }
        })
        .collect();
    let mut verdict: Vec<Option<&'static str>> = vec![None; t.slots.len()];
    let mut gone = vec![false; t.slots.len()];
    let mut pending: Vec<usize> = Vec::with_capacity(t.slots.len());
    let mut threads: Vec<(u32, Outcome)> = Vec::with_capacity(t.slots.len());
    let started = Instant::now();
    let send = |i: usize, gone: &mut Vec<bool>| {
        if !send_stop(pid, t.slots[i].tid, sig) {
            gone[i] = true;
        }
    };
    for i in 0..t.slots.len() {
        send(i, &mut gone);
    }
    let mut last_send = Instant::now();
    let mut probed = false;
    loop {
        let acks = t.acks.load(Ordering::SeqCst);
        let elapsed = started.elapsed();
        pending.clear();
        pending.extend((0..t.slots.len()).filter(|&i| {
            !gone[i]
                && verdict[i].is_none()
                && elapsed < deadlines[i]
                && t.slots[i].state.load(Ordering::Acquire) == REQUESTED
        }));
        if pending.is_empty() {
            break;
        }
        if !probed && elapsed >= timeouts.probe {
            probed = true;
            for &i in &pending {
                verdict[i] = hopeless(&status(t.slots[i].tid, sig));
            }
            continue;
        }
        if last_send.elapsed() >= timeouts.resend {
            // Real-time signals queue, so this is only for signals that were somehow lost
            // (a handler replaced and restored by the program, for instance).
            for &i in &pending {
                send(i, &mut gone);
            }
            last_send = Instant::now();
        }
        futex_wait(&t.acks, acks, Some(Duration::from_millis(1)));
    }
    threads.extend((0..t.slots.len()).map(|i| {
        let slot = &t.slots[i];
        let outcome = if gone[i] {
            Outcome::Gone
        } else if slot.state.load(Ordering::Acquire) == SAVED {
            // SAFETY: SAVED was observed with acquire: the handler's write is visible and
            // it will not write again.
            Outcome::Stopped(unsafe { *slot.regs.get() })
        } else {
            // Never answered: make sure a late signal does not stop it after the fact.
            slot.state.store(IDLE, Ordering::Release);
            if slot.state.load(Ordering::Acquire) == SAVED {
                // SAFETY: as above.
                Outcome::Stopped(unsafe { *slot.regs.get() })
            } else {
                Outcome::NotStoppable(verdict[i].unwrap_or_else(|| why_not_stopped(slot.tid, sig)))
            }
        };
        // A thread the probe found gone or traced is found by it each time; only the ones
        // that had to be waited for (a stop signal that stayed blocked included) are
        // remembered.
        let slow = matches!(outcome, Outcome::NotStoppable(_)) && verdict[i].is_none();
        remember_slow(slot.tid, slow);
        (slot.tid, outcome)
    }));
    World {
        table,
        threads,
        started,
        resumed: false,
    }
}

impl World {
    /// Resumes every stopped thread and frees the slot table (also done on drop).
    pub fn resume(mut self) {
        self.finish();
    }

    /// Releases every stopped thread (they run again as soon as this returns). Freeing the
    /// slot table waits for the handlers to leave it, which happens on drop.
    pub fn wake(&mut self) {
        if self.table.is_null() || self.resumed {
            return;
        }
        self.resumed = true;
        // SAFETY: the table is alive until freed in `finish`.
        let t = unsafe { &*self.table };
        // A slot still REQUESTED (its thread never answered) must not stop on a late signal.
        for s in &t.slots {
            let _ = s
                .state
                .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Acquire);
        }
        t.resume.fetch_add(1, Ordering::SeqCst);
        futex_wake(&t.resume);
    }

    fn finish(&mut self) {
        self.wake();
        if self.table.is_null() {
            return;
        }
        // SAFETY: the table is alive until freed below.
        let t = unsafe { &*self.table };
        // Wait (bounded) until every handler has left the table before freeing it.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let busy = t
                .slots
                .iter()
                .any(|s| s.state.load(Ordering::Acquire) == SAVED);
            if !busy && INSIDE.load(Ordering::SeqCst) == 0 {
                break;
            }
            if Instant::now() >= deadline {
                // A handler is still inside (descheduled for seconds): leak the table rather
                // than free memory it may read.
                TABLE.store(std::ptr::null_mut(), Ordering::SeqCst);
                self.table = std::ptr::null_mut();
                return;
            }
            std::thread::yield_now();
        }
        TABLE.store(std::ptr::null_mut(), Ordering::SeqCst);
        // SAFETY: no handler is inside or will enter with this table (TABLE cleared, INSIDE
        // drained after it), so we are the last user; created by Box::into_raw in `stop`.
        drop(unsafe { Box::from_raw(self.table) });
        self.table = std::ptr::null_mut();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The stack pointer of a thread of process `pid` that is blocked in a system call, from
/// `/proc/<pid>/task/<tid>/syscall` (`NR args… sp pc`, or `-1 sp pc`); None when it runs.
/// Lets the capture read what a thread that could not be stopped holds on its stack.
pub fn blocked_stack_pointer(pid: u32, tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    if fields.len() < 3 {
        return None;
    }
    let sp = fields[fields.len() - 2];
    u64::from_str_radix(sp.trim_start_matches("0x"), 16).ok()
}

/// Removes the stop signal from a mask the program is about to block, so it stays
/// deliverable. Used by the `pthread_sigmask`/`sigprocmask` wrappers.
///
/// # Safety
/// `set` must be null or point at a valid `sigset_t`; `copy` receives the filtered copy.
pub unsafe fn filter_mask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    copy: &mut libc::sigset_t,
) -> *const libc::sigset_t {
    if set.is_null() || how == libc::SIG_UNBLOCK {
        return set;
    }
    // SAFETY: `set` is non-null and valid per the contract.
    *copy = unsafe { *set };
    crate::signals::remove_signal(copy, stop_signal());
    copy
}

/// `pthread_sigmask` semantics with the stop signal (and glibc's internal cancellation and
/// setxid signals, as glibc itself does) never blocked: returns 0 or an errno value.
///
/// # Safety
/// `set` and `old` are null or point at valid `sigset_t`s, as for `pthread_sigmask(3)`.
pub unsafe fn sigmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    if !set.is_null()
        && how != libc::SIG_BLOCK
        && how != libc::SIG_UNBLOCK
        && how != libc::SIG_SETMASK
    {
        return libc::EINVAL;
    }
    // SAFETY: a zeroed sigset_t is a valid empty set.
    let mut copy: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is null or valid per the contract.
    let filtered = unsafe { filter_mask(how, set, &mut copy) };
    if !filtered.is_null() && how != libc::SIG_UNBLOCK {
        // glibc keeps the two signals below SIGRTMIN (SIGCANCEL, SIGSETXID) unblockable the
        // same way (and, like it, without a word in errno: sigdelset would refuse them).
        let sigrtmin = libc::SIGRTMIN();
        crate::signals::remove_signal(&mut copy, sigrtmin - 2);
        crate::signals::remove_signal(&mut copy, sigrtmin - 1);
    }
    // The raw syscall() reports failure in errno; pthread_sigmask returns it instead.
    let errno = crate::sys::KeepErrno::new();
    // SAFETY: the raw system call with valid (or null) pointers and the kernel's set size.
    let r = unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, filtered, old, 8usize) };
    if r == 0 {
        0
    } else {
        let e = crate::sys::errno();
        drop(errno);
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// The system call `tid` of this process is blocked in, from `/proc` (None when it runs).
    fn syscall_of(tid: u32) -> Option<i64> {
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap();
        text.split_ascii_whitespace().next()?.parse().ok()
    }

    /// A set holding only the stop signal.
    fn stop_set() -> libc::sigset_t {
        // SAFETY: a zeroed sigset_t is valid; sigemptyset/sigaddset fill in our local.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, stop_signal());
            set
        }
    }

    /// `how` on this thread's mask with the raw system call, which no wrapper sees.
    fn raw_sigmask(how: libc::c_int, set: &libc::sigset_t) {
        // SAFETY: rt_sigprocmask on this thread with a valid set of the kernel's size.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                how,
                set as *const libc::sigset_t,
                0usize,
                8usize,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    }

    fn stop_signal_pending() -> bool {
        // SAFETY: a zeroed sigset_t is valid output space of the kernel's size.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            let r = libc::syscall(
                libc::SYS_rt_sigpending,
                &mut pending as *mut libc::sigset_t,
                8usize,
            );
            assert_eq!(r, 0);
            libc::sigismember(&pending, stop_signal()) == 1
        }
    }

    #[test]
    fn running_and_blocked_threads_stop_and_resume() {
        install().unwrap();
        let quit = Arc::new(AtomicBool::new(false));
        let counter = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let mut handles = Vec::new();
        for _ in 0..3 {
            let (q, c, tx) = (quit.clone(), counter.clone(), tx.clone());
            handles.push(std::thread::spawn(move || {
                tx.send((gettid(), false)).unwrap();
                while !q.load(Ordering::Relaxed) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        // One thread blocks every signal with the raw syscall for good, and waits in read(2).
        let (gate_rx, mut gate_tx) = std::io::pipe().unwrap();
        let tx2 = tx.clone();
        handles.push(std::thread::spawn(move || {
            // SAFETY: a zeroed sigset_t is valid; sigfillset fills our local.
            let all = unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                all
            };
            raw_sigmask(libc::SIG_BLOCK, &all);
            tx2.send((gettid(), true)).unwrap();
            let mut byte = [0u8; 1];
            std::io::Read::read_exact(&mut { gate_rx }, &mut byte).unwrap();
        }));
        let got: Vec<(u32, bool)> = (0..4).map(|_| rx.recv().unwrap()).collect();
        let tids: Vec<u32> = got.iter().map(|g| g.0).collect();
        let blocked = got.iter().find(|g| g.1).unwrap().0;
        // The blocked thread is waited for until the deadline, then reported with its reason.
        let world = stop(
            &tids,
            Timeouts {
                resend: Duration::from_millis(10),
                deadline: Duration::from_millis(200),
                ..Timeouts::default()
            },
        );
        let before = counter.load(Ordering::SeqCst);
        for (tid, outcome) in &world.threads {
            if *tid == blocked {
                assert_eq!(outcome, &Outcome::NotStoppable("stop signal blocked"));
            } else {
                let Outcome::Stopped(regs) = outcome else {
                    panic!("{tid}: {outcome:?}")
                };
                assert_ne!(regs.gpr[super::super::unwind::RSP], 0);
                assert_ne!(regs.fs_base, 0);
                // A busy thread that answered goes to sleep in its handler's futex wait (it
                // acknowledged just before).
                let waited = Instant::now();
                while syscall_of(*tid) != Some(libc::SYS_futex) {
                    assert!(
                        waited.elapsed() < Duration::from_secs(10),
                        "thread {tid} runs"
                    );
                    std::thread::yield_now();
                }
            }
        }
        assert_eq!(
            counter.load(Ordering::SeqCst),
            before,
            "busy threads are stopped"
        );
        drop(world);
        // Resumed: the busy threads count again (each is runnable, so this ends).
        while counter.load(Ordering::SeqCst) == before {
            std::thread::yield_now();
        }
        quit.store(true, Ordering::SeqCst);
        gate_tx.write_all(b"x").unwrap();
        for h in handles {
            h.join().unwrap();
        }
    }

    /// A thread inside a signals-blocked section when the stop begins (a thread glibc has just
    /// created, a postmaster handling a connection) is waited for, not given up: it answers as
    /// soon as its section ends, here after the agent has probed it and sent the signal again.
    #[test]
    fn a_thread_that_blocks_the_stop_signal_for_a_while_is_waited_for() {
        install().unwrap();
        let stop_returned = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let returned = stop_returned.clone();
        let worker = std::thread::spawn(move || {
            let set = stop_set();
            raw_sigmask(libc::SIG_BLOCK, &set);
            tx.send(gettid()).unwrap();
            // The first signal: the stop has begun. Taken off the queue, so that the one this
            // thread answers is the one sent again after the probe.
            let mut took_first = false;
            while !took_first && !returned.load(Ordering::SeqCst) {
                let wait = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 10_000_000,
                };
                // SAFETY: rt_sigtimedwait for a blocked signal, with valid set and timeout and
                // no siginfo wanted.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_rt_sigtimedwait,
                        &set as *const libc::sigset_t,
                        std::ptr::null_mut::<libc::siginfo_t>(),
                        &wait as *const libc::timespec,
                        8usize,
                    )
                };
                took_first = r == stop_signal() as libc::c_long;
            }
            // The probe runs before any resend (Timeouts::probe < Timeouts::resend): a signal
            // pending again means the agent probed this thread and kept waiting for it.
            while !stop_signal_pending() && !returned.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            raw_sigmask(libc::SIG_UNBLOCK, &set);
            took_first
        });
        let tid = rx.recv().unwrap();
        let world = stop(
            &[tid],
            Timeouts {
                resend: Duration::from_millis(10),
                deadline: Duration::from_secs(20),
                probe: Duration::from_millis(2),
                ..Timeouts::default()
            },
        );
        stop_returned.store(true, Ordering::SeqCst);
        let outcome = world.threads[0].1.clone();
        drop(world);
        assert!(worker.join().unwrap(), "the first stop signal never came");
        assert!(
            matches!(outcome, Outcome::Stopped(_)),
            "the thread was given up: {outcome:?}"
        );
    }

    #[test]
    fn blocking_every_signal_keeps_the_stop_signal_deliverable() {
        std::thread::spawn(|| {
            // SAFETY: sigset manipulation on locals and this thread's own mask.
            unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                assert_eq!(sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut()), 0);
                let mut now: libc::sigset_t = std::mem::zeroed();
                assert_eq!(sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now), 0);
                assert_eq!(libc::sigismember(&now, stop_signal()), 0);
                assert_eq!(libc::sigismember(&now, libc::SIGUSR1), 1);
                assert_eq!(sigmask(99, &all, std::ptr::null_mut()), libc::EINVAL);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_stop_signal_is_removed_from_blocked_sets() {
        // SAFETY: plain sigset manipulation on local values.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let mut copy: libc::sigset_t = std::mem::zeroed();
            let p = filter_mask(libc::SIG_BLOCK, &all, &mut copy);
            assert_eq!(libc::sigismember(p, stop_signal()), 0);
            assert_eq!(libc::sigismember(p, libc::SIGUSR1), 1);
            let p = filter_mask(libc::SIG_UNBLOCK, &all, &mut copy);
            assert_eq!(libc::sigismember(p, stop_signal()), 1);
        }
    }
}
