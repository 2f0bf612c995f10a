//! heaptui's cooperative cancel for Rust programs (the C API of `heaptui.h`, made safe).
//!
//! Copy this file into a program, or include it as a module:
//!
//! ```ignore
//! #[path = "/path/to/heaptui/agent-shim/include/heaptui.rs"]
//! mod heaptui;
//!
//! static CANCEL: AtomicBool = AtomicBool::new(false);
//! heaptui::on_cancel_set(&CANCEL);            // on the worker thread
//! while !CANCEL.load(Ordering::Relaxed) && !heaptui::cancel_requested() { work() }
//! ```
//!
//! The agent's functions are looked up at run time with `dlsym(RTLD_DEFAULT, …)` rather than
//! linked: Rust has no stable weak linkage, and this way the program builds and runs
//! unchanged without the agent (every call then answers "no agent", "not requested").
//! No dependency beyond std; the lookup happens once.

#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

unsafe extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

type Handler = unsafe extern "C" fn(*mut c_void);
type Requested = unsafe extern "C" fn() -> c_int;
type OnCancel = unsafe extern "C" fn(Option<Handler>, *mut c_void) -> c_int;

struct Api {
    requested: Option<Requested>,
    on_cancel: Option<OnCancel>,
}

fn api() -> &'static Api {
    static API: OnceLock<Api> = OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: RTLD_DEFAULT is the null handle on glibc; the names are NUL-terminated.
        let (r, o) = unsafe {
            (
                dlsym(std::ptr::null_mut(), c"heaptui_cancel_requested".as_ptr()),
                dlsym(std::ptr::null_mut(), c"heaptui_on_cancel".as_ptr()),
            )
        };
        Api {
            // SAFETY: when present, the symbols are the agent's functions with these
            // signatures (heaptui.h).
            requested: (!r.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, Requested>(r) }),
            // SAFETY: as above.
            on_cancel: (!o.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, OnCancel>(o) }),
        }
    })
}

/// Whether the heaptui agent is loaded in this process.
pub fn agent_present() -> bool {
    api().requested.is_some()
}

/// Whether a cancel of the calling thread was requested (always false without the agent).
/// The first poll after a request runs the thread's handler (see [`on_cancel_set`]).
pub fn cancel_requested() -> bool {
    match api().requested {
        // SAFETY: the agent's `int heaptui_cancel_requested(void)`, callable from any thread.
        Some(f) => unsafe { f() != 0 },
        None => false,
    }
}

unsafe extern "C" fn set_flag(arg: *mut c_void) {
    // SAFETY: `arg` is the `&'static AtomicBool` given to `on_cancel_set`.
    unsafe { &*(arg as *const AtomicBool) }.store(true, Ordering::SeqCst);
}

/// Registers, for the calling thread, a handler that sets `flag` when its cancel is requested
/// (at its next [`cancel_requested`] poll). False without the agent or when its table is full.
pub fn on_cancel_set(flag: &'static AtomicBool) -> bool {
    match api().on_cancel {
        // SAFETY: `set_flag` only stores into the 'static flag, which is valid for ever and
        // on any thread.
        Some(f) => unsafe { f(Some(set_flag), flag as *const AtomicBool as *mut c_void) == 0 },
        None => false,
    }
}

/// Removes the calling thread's handler.
pub fn clear_on_cancel() {
    if let Some(f) = api().on_cancel {
        // SAFETY: a NULL handler removes the registration.
        unsafe { f(None, std::ptr::null_mut()) };
    }
}
