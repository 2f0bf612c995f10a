//! The agent's signals as the program must never notice them.
//!
//! Owns: the real libc functions behind the agent's signal-related wrappers (resolved with
//! `dlsym(RTLD_NEXT)` in the constructor, before any program thread exists), the blocking-call
//! wrappers that hide the stop signal's `EINTR` ([`blocking`], [`sockets`] for the socket calls
//! under a timeout, [`read_write`] for `read` and `write` on such sockets, [`raw_syscall`] for
//! the calls made through `syscall(3)`), and the `SIGUSR2` chaining
//! that keeps both the program's handler and the `HEAPTUI_DUMP` trigger ([`chain`]).
//!
//! The agent's own code must install its handlers through [`chain::real_sigaction`], never
//! `libc::sigaction`: inside the preloaded object that name binds to the agent's exported
//! wrapper, which would record the agent's handler as the program's.
//!
//! Must never: allocate, lock or print in anything a signal handler calls.

pub mod blocking;
pub mod chain;
pub mod raw_syscall;
pub mod read_write;
pub mod sockets;

use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// A libc function looked up once with `dlsym(RTLD_NEXT)`. `repr(C)` with the address first:
/// the naked stubs of `read` and `write` (exports.rs) load it from the static's own address.
#[repr(C)]
pub struct Real {
    ptr: AtomicPtr<c_void>,
    name: &'static CStr,
}

const _: () = assert!(std::mem::offset_of!(Real, ptr) == 0);

impl Real {
    pub const fn new(name: &'static CStr) -> Self {
        Self {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            name,
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

/// The word and bit of signal `sig` in a `sigset_t` (glibc's: an array of 64-bit words, bit
/// n − 1 for signal n), None outside 1..=1024.
fn signal_bit(sig: c_int) -> Option<(usize, u64)> {
    let bit = usize::try_from(sig).ok()?.checked_sub(1)?;
    (bit < 8 * std::mem::size_of::<libc::sigset_t>()).then(|| (bit / 64, 1u64 << (bit % 64)))
}

/// The words of a `sigset_t`.
fn words(set: &mut libc::sigset_t) -> &mut [u64; SIGSET_WORDS] {
    // SAFETY: a sigset_t is SIGSET_WORDS 64-bit words (checked below), any bits valid.
    unsafe { &mut *(set as *mut libc::sigset_t).cast::<[u64; SIGSET_WORDS]>() }
}

const SIGSET_WORDS: usize = std::mem::size_of::<libc::sigset_t>() / 8;
const _: () = assert!(std::mem::size_of::<libc::sigset_t>() == 8 * SIGSET_WORDS);

/// Removes `sig` from `set` by clearing its bit. Unlike `sigdelset(3)`, which refuses the two
/// signals glibc keeps for itself (32 and 33) with `EINVAL` in errno, this takes any number
/// and never touches errno: the wrappers run it on the program's behalf, in calls that
/// succeed and must leave errno as they found it.
pub fn remove_signal(set: &mut libc::sigset_t, sig: c_int) {
    if let Some((word, mask)) = signal_bit(sig) {
        words(set)[word] &= !mask;
    }
}

/// Whether `set` holds `sig` (as [`remove_signal`], without errno).
pub fn has_signal(set: &libc::sigset_t, sig: c_int) -> bool {
    let mut copy = *set;
    signal_bit(sig).is_some_and(|(word, mask)| words(&mut copy)[word] & mask != 0)
}

/// Resolves every wrapped function (the agent's constructor).
pub fn init() {
    blocking::init();
    sockets::init();
    read_write::init();
    chain::init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_leave_sets_without_touching_errno() {
        // SAFETY: zeroed is an empty set; sigfillset fills it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t.
        unsafe { libc::sigfillset(&mut set) };
        crate::sys::set_errno(0);
        for sig in [1, 32, 33, 38, 64] {
            assert!(has_signal(&set, sig) || sig == 32 || sig == 33, "{sig}");
            remove_signal(&mut set, sig);
            assert!(!has_signal(&set, sig), "{sig}");
        }
        // Out of range: nothing happens.
        remove_signal(&mut set, 0);
        remove_signal(&mut set, 5000);
        assert!(has_signal(&set, 2) && !has_signal(&set, 0));
        assert_eq!(crate::sys::errno(), 0);
        // SAFETY: `set` is a valid sigset_t.
        assert_eq!(unsafe { libc::sigismember(&set, 38) }, 0);
    }
}
