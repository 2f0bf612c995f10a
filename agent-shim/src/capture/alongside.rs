//! A second thread in the scan child, so that the child's work can use the machine's second
//! core: [`alongside`] runs one closure on a thread of its own while the calling thread runs
//! another, and returns both results.
//!
//! The child is a raw clone of one agent thread (`build::fork_child`): glibc's fork handlers
//! never ran in it, so its thread bookkeeping is the program's, copied mid-flight. A
//! `pthread_create` there is not safe: the copied stack-cache and loader locks may be held by
//! a program thread that was stopped holding them (they would never be released in the
//! child), and the thread descriptor's tid is still the parent thread's. So the second thread
//! is a bare `clone` sharing the address space, on a stack of its own mapped here, and no
//! glibc thread: it shares the calling thread's thread pointer, so its closure must touch no
//! thread-local storage (no `thread_local!`, no std `HashMap` with its random keys, no
//! printing, no `std::thread`), and it must not panic (a panic cannot unwind out of the
//! thread: the child aborts, which the parent reports as a failed capture). Memory comes from
//! the agent's allocator, which locks per size class and never touches thread-local storage.
//! The calling thread waits for the second to be gone (the kernel clears and wakes the
//! thread-id word, `CLONE_CHILD_CLEARTID`) before it reads its result or unmaps its stack.
//!
//! Only for the scan child: in the program's own process, threads are glibc's business.

use std::sync::atomic::{AtomicI32, Ordering};

/// The second thread's stack: enough for closures that loop rather than recurse (the
/// analysis's passes are iterative); the pages are touched only as used.
const STACK: usize = 8 << 20;
/// A guard page below the stack, so that an overflow faults instead of writing past it.
const GUARD: usize = 4096;

/// What the second thread runs, and where its result goes.
struct Job<F, T> {
    work: Option<F>,
    result: Option<T>,
}

extern "C" fn run<F: FnOnce() -> T, T>(job: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `alongside` passes a `Job<F, T>` that outlives this thread (it waits for the
    // thread to be gone) and does not touch it meanwhile.
    let job = unsafe { &mut *job.cast::<Job<F, T>>() };
    if let Some(work) = job.work.take() {
        job.result = Some(work());
    }
    0
}

/// Runs `second` on a thread of its own while this thread runs `first`; returns both results
/// once both are done. When no thread can be made, runs `second` after `first` here.
///
/// # Safety
/// Only in the scan child (see the module docs), and `second` must touch no thread-local
/// storage and must not panic.
pub unsafe fn alongside<A, B, Second: FnOnce() -> B>(
    first: impl FnOnce() -> A,
    second: Second,
) -> (A, B) {
    let mut job = Job {
        work: Some(second),
        result: None,
    };
    // SAFETY: a fresh private mapping; its address is checked below.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK + GUARD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    // Nonzero until the kernel clears it when the thread is gone.
    let alive = AtomicI32::new(1);
    let started = stack != libc::MAP_FAILED
        // SAFETY: the lowest page of our own mapping becomes the guard.
        && unsafe { libc::mprotect(stack, GUARD, libc::PROT_NONE) } == 0
        && {
            // SAFETY: the thread runs `run` on its own stack (the top of the mapping, 16-byte
            // aligned: the mapping is page-aligned) with `job`, which lives until the wait
            // below; CLONE_CHILD_CLEARTID makes the kernel clear `alive` and wake its waiters
            // once the thread is gone.
            let tid = unsafe {
                libc::clone(
                    run::<Second, B>,
                    stack.cast::<u8>().add(STACK + GUARD).cast(),
                    libc::CLONE_VM
                        | libc::CLONE_FS
                        | libc::CLONE_FILES
                        | libc::CLONE_SIGHAND
                        | libc::CLONE_THREAD
                        | libc::CLONE_SYSVSEM
                        | libc::CLONE_CHILD_CLEARTID,
                    (&raw mut job).cast(),
                    std::ptr::null_mut::<libc::pid_t>(),
                    std::ptr::null_mut::<libc::c_void>(),
                    alive.as_ptr(),
                )
            };
            tid > 0
        };
    if !started {
        if stack != libc::MAP_FAILED {
            // SAFETY: our own mapping, unused.
            unsafe { libc::munmap(stack, STACK + GUARD) };
        }
        let a = first();
        let second = job.work.take().expect("the job was not run");
        return (a, second());
    }
    let joined = Joined {
        alive: &alive,
        stack,
    };
    let a = first();
    // Waits for the thread also when `first` panics: the thread still reads `job`, which
    // lives in this frame, and runs on `stack`.
    drop(joined);
    let b = job
        .result
        .take()
        .expect("the second thread ran its closure");
    (a, b)
}

/// Waits, when dropped, until the second thread is gone, then unmaps its stack.
struct Joined<'a> {
    alive: &'a AtomicI32,
    stack: *mut libc::c_void,
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        loop {
            let now = self.alive.load(Ordering::Acquire);
            if now == 0 {
                break;
            }
            // SAFETY: FUTEX_WAIT reads `alive`, which outlives this guard, and sleeps while it
            // still holds `now`; not private: the kernel's wake at the thread's exit is a
            // shared one.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.alive.as_ptr(),
                    libc::FUTEX_WAIT,
                    now,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
        // SAFETY: the thread is gone: nothing runs on its stack any more.
        unsafe { libc::munmap(self.stack, STACK + GUARD) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid() -> libc::c_long {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) }
    }

    fn pid() -> libc::pid_t {
        // SAFETY: getpid has no preconditions.
        unsafe { libc::getpid() }
    }

    /// As in the scan child (a copy of one thread of a threaded process): the second closure
    /// runs on a thread of its own in the same process, both results come back, and what the
    /// second thread allocated is the first's to use.
    #[test]
    fn the_second_closure_runs_on_a_thread_of_its_own_and_both_results_come_back() {
        // Held across the fork as `build::fork_child` does: the child allocates.
        crate::alloc::AGENT_ALLOC.lock_all();
        // SAFETY: the child computes, allocates from the agent's allocator and ends by _exit.
        let child = unsafe { libc::fork() };
        crate::alloc::AGENT_ALLOC.unlock_all();
        if child == 0 {
            // SAFETY: in a child of its own; the second closure touches no thread-local
            // storage and does not panic.
            let (first, second) = unsafe {
                alongside(
                    || (tid(), (0..1_000_000u64).sum::<u64>()),
                    || {
                        let squares: Vec<u64> = (0..100_000u64).map(|i| i * i).collect();
                        (tid(), pid(), squares)
                    },
                )
            };
            let ok = first.0 != second.0
                && second.1 == pid()
                && first.1 == 499_999_500_000
                && second.2.len() == 100_000
                && second.2[99_999] == 99_999 * 99_999;
            // SAFETY: ends the child.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x}"
        );
    }
}
