//! Cooperative cancel: the per-thread request flags and cancel handlers behind
//! `heaptui_on_cancel` and `heaptui_cancel_requested` (include/heaptui.h).
//!
//! Owns two fixed tables in the agent's static memory, keyed by kernel tid: the handlers
//! threads registered (written only by the registering thread itself, so two writers never
//! race on one entry) and the tids a cancel was requested for (written by the agent). A
//! request is sticky: every later poll by that thread answers 1, until the thread is gone and
//! [`sweep`] forgets it (liveness by `tgkill(pid, tid, 0)`), so a reused tid never inherits
//! an old request.
//!
//! A registered handler runs on its own thread, once, at that thread's next
//! `heaptui_cancel_requested()` poll: a point the program chose, where its own locks are in a
//! known state. Never from a signal handler: a handler interrupting arbitrary code (malloc,
//! a held program lock) could deadlock or corrupt the program, and nothing a handler is
//! expected to do (free memory, set a flag, unwind) is async-signal-safe.
//!
//! Must never: allocate, lock, print or touch `thread_local!` in the two C entry points (they
//! may be called from any thread at any rate); the poll's fast path is one relaxed load.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::sys;

/// `void (*handler)(void *)`.
pub type Handler = unsafe extern "C" fn(*mut c_void);

/// Threads that may hold a handler at once (entries of ended threads are reclaimed).
pub const HANDLER_SLOTS: usize = 1024;
/// Outstanding requests at once.
pub const REQUEST_SLOTS: usize = 256;

struct HandlerSlot {
    tid: AtomicU32,
    handler: AtomicUsize,
    arg: AtomicUsize,
}

static HANDLERS: [HandlerSlot; HANDLER_SLOTS] = [const {
    HandlerSlot {
        tid: AtomicU32::new(0),
        handler: AtomicUsize::new(0),
        arg: AtomicUsize::new(0),
    }
}; HANDLER_SLOTS];

static REQUESTS: [AtomicU32; REQUEST_SLOTS] = [const { AtomicU32::new(0) }; REQUEST_SLOTS];
/// Number of nonzero entries of `REQUESTS`: the polls' fast path.
static PENDING: AtomicU32 = AtomicU32::new(0);

/// Whether thread `tid` of this process still exists.
pub fn alive(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists; no signal is sent.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// `heaptui_on_cancel(handler, arg)` for the calling thread: registers (or replaces, or with
/// `None` removes) its handler. 0 on success, -1 when the table is full.
pub fn on_cancel(handler: Option<Handler>, arg: *mut c_void) -> i32 {
    let me = sys::current_tid();
    let slot = match HANDLERS
        .iter()
        .find(|s| s.tid.load(Ordering::Acquire) == me)
    {
        Some(s) => s,
        None if handler.is_none() => return 0,
        None => match claim(me) {
            Some(s) => s,
            None => return -1,
        },
    };
    // Only this thread writes its entry: clear the handler first so that a reader (this
    // thread's own poll, never concurrent with this call) sees an old or a whole new pair.
    slot.handler.store(0, Ordering::Release);
    slot.arg.store(arg as usize, Ordering::Release);
    slot.handler
        .store(handler.map_or(0, |h| h as usize), Ordering::Release);
    0
}

/// A free entry for `tid`, reclaiming entries of threads that have ended when none is free.
fn claim(tid: u32) -> Option<&'static HandlerSlot> {
    for pass in 0..2 {
        for s in &HANDLERS {
            let cur = s.tid.load(Ordering::Acquire);
            let free = cur == 0 || (pass == 1 && !alive(cur));
            if free
                && s.tid
                    .compare_exchange(cur, tid, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                s.handler.store(0, Ordering::Release);
                return Some(s);
            }
        }
    }
    None
}

/// `heaptui_cancel_requested()` for the calling thread: 1 if a cancel was requested for it
/// (and from now on), else 0. The first poll that sees the request runs the thread's
/// registered handler, once, before returning.
pub fn poll() -> i32 {
    if PENDING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let me = sys::current_tid();
    if !REQUESTS.iter().any(|r| r.load(Ordering::Acquire) == me) {
        return 0;
    }
    if let Some(slot) = HANDLERS
        .iter()
        .find(|s| s.tid.load(Ordering::Acquire) == me)
    {
        let h = slot.handler.swap(0, Ordering::AcqRel);
        if h != 0 {
            let arg = slot.arg.load(Ordering::Acquire) as *mut c_void;
            // SAFETY: `h` was stored by this very thread from a `Handler` in `on_cancel`;
            // the program promised (heaptui.h) that it may be called with `arg` on this
            // thread at a poll.
            let h: Handler = unsafe { std::mem::transmute::<usize, Handler>(h) };
            // SAFETY: as above.
            unsafe { h(arg) };
        }
    }
    1
}

/// Whether thread `tid` has a handler registered now.
pub fn has_handler(tid: u32) -> bool {
    HANDLERS
        .iter()
        .any(|s| s.tid.load(Ordering::Acquire) == tid && s.handler.load(Ordering::Acquire) != 0)
}

/// Whether a cancel was requested for `tid` and not yet forgotten.
pub fn is_requested(tid: u32) -> bool {
    REQUESTS.iter().any(|r| r.load(Ordering::Acquire) == tid)
}

/// Records a cancel request for `tid`. False when the request table is full.
pub fn request(tid: u32) -> bool {
    if tid == 0 {
        return false;
    }
    if is_requested(tid) {
        return true;
    }
    for _ in 0..2 {
        for r in &REQUESTS {
            if r.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                PENDING.fetch_add(1, Ordering::AcqRel);
                return true;
            }
        }
        sweep();
    }
    false
}

/// Forgets the requests and handlers of threads that have ended. Called from the agent's
/// policy thread (about every 100 ms) and when a table is full.
pub fn sweep() {
    for r in &REQUESTS {
        let tid = r.load(Ordering::Acquire);
        if tid != 0
            && !alive(tid)
            && r.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            PENDING.fetch_sub(1, Ordering::AcqRel);
        }
    }
    for s in &HANDLERS {
        let tid = s.tid.load(Ordering::Acquire);
        if tid != 0 && !alive(tid) {
            s.handler.store(0, Ordering::Release);
            let _ = s
                .tid
                .compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    unsafe extern "C" fn set_flag(arg: *mut c_void) {
        // SAFETY: the tests pass a pointer to a static AtomicU32.
        let counter = unsafe { &*(arg as *const AtomicU32) };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_request_runs_the_handler_once_on_its_thread_and_stays_set() {
        static RAN: AtomicU32 = AtomicU32::new(0);
        static GO: AtomicBool = AtomicBool::new(false);
        let (tid_tx, tid_rx) = mpsc::channel();
        let other = std::thread::spawn(|| {
            // A bystander thread: never sees the request.
            while !GO.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            poll()
        });
        let t = std::thread::spawn(move || {
            let me = sys::current_tid();
            assert_eq!(
                on_cancel(Some(set_flag), &RAN as *const AtomicU32 as *mut c_void),
                0
            );
            assert!(has_handler(me));
            tid_tx.send(me).unwrap();
            let mut polls = 0;
            while poll() == 0 {
                polls += 1;
                std::thread::yield_now();
            }
            // Sticky, and the handler ran exactly once.
            assert_eq!((poll(), poll()), (1, 1));
            assert!(!has_handler(me));
            polls
        });
        let tid = tid_rx.recv().unwrap();
        assert_eq!(RAN.load(Ordering::SeqCst), 0);
        assert!(request(tid));
        assert!(request(tid), "a second request for the same thread is fine");
        assert!(is_requested(tid));
        t.join().unwrap();
        GO.store(true, Ordering::SeqCst);
        assert_eq!(other.join().unwrap(), 0);
        assert_eq!(RAN.load(Ordering::SeqCst), 1);
        // The thread is gone: the sweep forgets its request.
        sweep();
        assert!(!is_requested(tid));
        assert!(!alive(tid));
    }

    #[test]
    fn removing_a_handler_and_polling_without_one() {
        let t = std::thread::spawn(|| {
            let me = sys::current_tid();
            assert_eq!(on_cancel(Some(set_flag), std::ptr::null_mut()), 0);
            assert_eq!(on_cancel(None, std::ptr::null_mut()), 0);
            assert!(!has_handler(me));
            assert_eq!(poll(), 0);
            assert!(request(me));
            // No handler: the poll alone reports it (set_flag with a NULL arg would crash).
            assert_eq!(poll(), 1);
        });
        t.join().unwrap();
        sweep();
    }
}
