//! The agent's signals as the program must never notice them.
//!
//! Owns: the real libc functions behind the agent's signal-related wrappers (resolved with
//! `dlsym(RTLD_NEXT)` in the constructor, before any program thread exists), the blocking-call
//! wrappers that hide the stop signal's `EINTR` ([`blocking`]), and the `SIGUSR2` chaining
//! that keeps both the program's handler and the `HEAPTUI_DUMP` trigger ([`chain`]).
//!
//! The agent's own code must install its handlers through [`chain::real_sigaction`], never
//! `libc::sigaction`: inside the preloaded object that name binds to the agent's exported
//! wrapper, which would record the agent's handler as the program's.
//!
//! Must never: allocate, lock or print in anything a signal handler calls.

pub mod blocking;
pub mod chain;

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// A libc function looked up once with `dlsym(RTLD_NEXT)`.
pub struct Real {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl Real {
    pub const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The function's address, or null when libc has no such symbol. Resolved in the
    /// constructor ([`init`]); a call before it (another preload's constructor) resolves
    /// here, outside any signal handler the agent owns.
    pub fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT finds the next definition after the
        // agent's own (libc's).
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        self.ptr.store(p, Ordering::Release);
        p
    }
}

/// Resolves every wrapped function (the agent's constructor).
pub fn init() {
    blocking::init();
    chain::init();
}
