//! The agent's one lock: a futex-based mutex usable from inside malloc hooks.
//!
//! It never allocates and never touches thread-local storage. A waiter spins briefly, then
//! sleeps in `FUTEX_WAIT`, which signal handlers interrupt: a thread waiting on a shard lock
//! can still be stopped by the capture signal. It must never be held across a call to libc
//! malloc/free (the fork handlers take every lock, then glibc takes its arena locks).
//!
//! Beside it, the two cache helpers of the hooks' shared data: [`CacheLine`] and [`prefetch`],
//! and [`PerProcess`], for the agent threads' state that a fork child must start afresh.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
/// Locked, and somebody may sleep in the futex: the unlocker must wake one.
const CONTENDED: u32 = 2;

/// A raw futex lock (Drepper's "mutex 2"), without data; see [`SpinLock`] for the guarded form.
#[derive(Default)]
pub struct RawLock {
    state: AtomicU32,
}

impl RawLock {
    pub const fn new() -> Self {
        Self {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    #[inline]
    pub fn lock(&self) {
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[cold]
    fn lock_slow(&self) {
        // The futex wait fails with EAGAIN (the word changed) or EINTR (a signal): the
        // program, whose malloc is waiting here, must not see either.
        let _errno = crate::sys::KeepErrno::new();
        for _ in 0..100 {
            std::hint::spin_loop();
            if self.state.load(Ordering::Relaxed) == UNLOCKED
                && self
                    .state
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            futex_wait(&self.state, CONTENDED);
        }
    }

    #[inline]
    pub fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the lock. Only the holder may call it (the fork child also may, for locks
    /// its parent's prepare handler took).
    #[inline]
    pub fn unlock(&self) {
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            futex_wake(&self.state);
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT only reads the word, which lives as long as `word`; EINTR and EAGAIN
    // just make the caller re-check the state, so the result needs no handling.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE takes the address as a key only.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// Starts loading the cache line at `addr` (any address: a prefetch is only a hint and
/// never faults), so a miss the caller is about to take overlaps other work.
#[inline]
pub fn prefetch(addr: u64) {
    // SAFETY: a prefetch reads nothing into the program and never faults, even on an
    // unmapped address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
}

/// A value alone on its cache line: a counter written by every hook does not slow down the
/// reads of a read-mostly flag that would otherwise share its line.
#[repr(align(64))]
pub struct CacheLine<T>(pub T);

impl<T> Deref for CacheLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A value of which each process has its own: a fork child that serves clients
/// (`HEAPTUI_FOLLOW_FORK`) calls [`PerProcess::renew`] from its fork handler and starts from a
/// fresh value, whatever state the parent's copy was in (a `std` mutex held by an agent
/// thread that does not exist in the child would otherwise stay locked there forever).
///
/// The renewed value is leaked, never freed: a reference handed out before a renewal stays
/// valid, so renewing is safe even if someone still uses the old value.
pub struct PerProcess<T: 'static> {
    first: T,
    renewed: AtomicPtr<T>,
}

impl<T> PerProcess<T> {
    pub const fn new(first: T) -> Self {
        Self {
            first,
            renewed: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Replaces the value by `fresh` for everyone who asks from now on. The old value is
    /// left as it is, never dropped (in a fork child it may be mid-update by a thread that
    /// is gone).
    pub fn renew(&self, fresh: T) {
        self.renewed
            .store(Box::into_raw(Box::new(fresh)), Ordering::Release);
    }
}

impl<T> Deref for PerProcess<T> {
    type Target = T;
    fn deref(&self) -> &T {
        let renewed = self.renewed.load(Ordering::Acquire);
        if renewed.is_null() {
            return &self.first;
        }
        // SAFETY: a non-null pointer comes from `Box::into_raw` in `renew` and is never freed,
        // so it points at a live `T` for the rest of the process.
        unsafe { &*renewed }
    }
}

/// Data guarded by a [`RawLock`].
pub struct SpinLock<T> {
    raw: RawLock,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises every access to `data`, so sharing it needs only `T: Send`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(data: T) -> Self {
        Self {
            raw: RawLock::new(),
            data: UnsafeCell::new(data),
        }
    }

    pub fn lock(&self) -> SpinGuard<'_, T> {
        self.raw.lock();
        SpinGuard { lock: self }
    }

    /// The raw lock, for the fork handlers that hold it across `fork()` without a guard.
    pub fn raw(&self) -> &RawLock {
        &self.raw
    }
}

pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while the lock is held, and is borrowed mutably.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_stay_exact_under_contention() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 160_000);
    }

    #[test]
    fn a_renewed_value_replaces_the_first_and_old_references_stay_valid() {
        static VALUE: PerProcess<std::sync::Mutex<u32>> = PerProcess::new(std::sync::Mutex::new(1));
        let old = VALUE.lock().unwrap();
        // A lock held by someone else (a thread gone in a fork child) does not hold up the
        // renewed value.
        VALUE.renew(std::sync::Mutex::new(2));
        assert_eq!(*VALUE.lock().unwrap(), 2);
        assert_eq!(*old, 1);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let raw = RawLock::new();
        raw.lock();
        assert!(!raw.try_lock());
        raw.unlock();
        assert!(raw.try_lock());
        raw.unlock();
    }
}
