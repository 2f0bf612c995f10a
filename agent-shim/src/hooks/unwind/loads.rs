//! Noticing every module load, so the rule and walk caches are cleared even when a module
//! was unloaded without the program's `dlclose` (which the agent wraps): glibc unloads some
//! modules itself (`__libc_dlclose` of a gconv converter no longer used, an NSS module, the
//! dependencies of a `dlopen` that failed half way), and a module loaded later at the same
//! address must not inherit the old one's rules or walks.
//!
//! Why loads are the signal: a cached rule or walk is only ever looked up for return
//! addresses on a live stack, and a live stack holds no return address into code that was
//! unloaded (returning there would crash). It can only be met again once new code sits at
//! that address, and for a module that takes a load, which glibc counts: `dl_iterate_phdr`
//! reports the count as `dlpi_adds` (its `_dl_load_adds`, bumped when the new module joins
//! the loader's list, before any of its code runs). Asking `dl_iterate_phdr` in every hook
//! would take the loader's lock each time, so the constructor finds the counter itself once,
//! in the loader's `_rtld_global` (whose size the dynamic symbol table gives): the one word
//! that equals `dlpi_adds` and follows the loader's recursive locks (an unlocked recursive
//! mutex, 40 bytes with its kind, 1, at byte 16 — two or three of them, by glibc version).
//! Then each hook reads that word, a plain load of a line that changes only on loads, and
//! clears both caches when it moved. If the word is not found (not glibc, another layout),
//! or a later check against `dl_iterate_phdr` (at each `dlclose` of the program) disagrees,
//! or it changed more often than any program loads modules (4096 times), the caches are
//! cleared at the program's `dlclose` only, as before, and the log says so.
//!
//! Code mapped by other means than the loader (a JIT) is not a module: neither the rule
//! cache nor this counter knows it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::{cache, walks};

/// The loader's load counter, once found (null: not found, or found wrong).
static COUNTER: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
/// Its value when the caches were last cleared for it.
static SEEN: AtomicU64 = AtomicU64::new(0);

/// `dl_iterate_phdr`'s count of loads (`dlpi_adds`). Takes the loader lock: never from a hook.
fn loads_so_far() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> i32 {
        // SAFETY: the loader passes a valid `info`; `data` is the u64 below.
        unsafe { *data.cast::<u64>() = (*info).dlpi_adds };
        1
    }
    let mut adds = 0u64;
    // SAFETY: the callback writes only the u64 it is given, during this call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut adds).cast()) };
    adds
}

/// Whether `words[k]` is the load counter: it equals `adds` and follows two recursive
/// mutexes (see the module docs).
fn looks_like_the_counter(words: &[u64], k: usize, adds: u64) -> bool {
    const MUTEX_WORDS: usize = 5;
    const RECURSIVE: u64 = 1;
    let mutex_at = |end: usize| {
        end.checked_sub(MUTEX_WORDS)
            .and_then(|start| words.get(start..end))
            .is_some_and(|m| {
                m[0] == 0 && m[1] == 0 && m[2] & 0xffff_ffff == RECURSIVE && m[3] == 0 && m[4] == 0
            })
    };
    words.get(k) == Some(&adds) && mutex_at(k) && mutex_at(k.saturating_sub(MUTEX_WORDS))
}

/// Finds the loader's load counter. From the constructor (single-threaded, no lock held);
/// false when it is not found.
pub fn init() -> bool {
    if !COUNTER.load(Ordering::Acquire).is_null() {
        return true;
    }
    let adds = loads_so_far();
    // SAFETY: dlsym with a NUL-terminated name.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_rtld_global".as_ptr()) };
    if global.is_null() || !global.cast::<u64>().is_aligned() {
        return false;
    }
    // SAFETY: Dl_info is plain pointers, for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut sym: *const libc::Elf64_Sym = std::ptr::null();
    const RTLD_DL_SYMENT: i32 = 1;
    // SAFETY: valid out-pointers; with RTLD_DL_SYMENT the extra one receives a pointer to the
    // symbol's entry in the loader's dynamic symbol table.
    let found = unsafe {
        libc::dladdr1(
            global,
            &mut info,
            (&raw mut sym).cast::<*mut c_void>(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || sym.is_null() {
        return false;
    }
    // SAFETY: the symbol table entry stays mapped as long as the loader (for good).
    let size = unsafe { (*sym).st_size } as usize;
    // SAFETY: `_rtld_global` is an object of `size` bytes of the loader's writable data,
    // 8-aligned (checked), mapped for good; read once here, while no other thread loads.
    let words = unsafe { std::slice::from_raw_parts(global.cast::<u64>(), size / 8) };
    let mut candidates = (0..words.len()).filter(|&k| looks_like_the_counter(words, k, adds));
    let (Some(k), None) = (candidates.next(), candidates.next()) else {
        return false;
    };
    SEEN.store(adds, Ordering::Relaxed);
    COUNTER.store(global.cast::<u64>().wrapping_add(k), Ordering::Release);
    true
}

/// Clears the rule and walk caches if a module was loaded since they were last cleared for
/// it. Inside the hooks: one load and one compare when nothing was loaded.
#[inline]
pub fn check() {
    let counter = COUNTER.load(Ordering::Relaxed);
    if counter.is_null() {
        return;
    }
    // SAFETY: `counter` points at the loader's load counter (found by `init`), an aligned
    // word of its data, mapped for good; the loader writes it under its own lock, so it is
    // read atomically.
    let now = unsafe { AtomicU64::from_ptr(counter) }.load(Ordering::Relaxed);
    let seen = SEEN.load(Ordering::Relaxed);
    if now != seen {
        loaded(seen, now);
    }
}

/// The counter moved from `seen` to `now`: clears the caches and counts the change, once.
/// Every busy thread may notice the same move; only the one whose compare-exchange moves
/// `SEEN` from `seen` to `now` clears and counts it, so `CHANGES` counts moves of the
/// counter, not moves times threads. The others go on at once, without waiting for the
/// winner's clear (waiting inside a hook could wait on a thread stopped for good); a walk in
/// that short window may still meet the old caches, as it could before the claim. Returns
/// whether this thread claimed the change.
#[cold]
#[inline(never)]
fn loaded(seen: u64, now: u64) -> bool {
    if SEEN
        .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    cache::clear();
    walks::clear();
    // The word was found by its pattern: were it the wrong one, it could change far more
    // often than modules load, and each change clears both caches. Past [`MOST_LOADS`]
    // changes it is no longer trusted (checking it against `dl_iterate_phdr` here would take
    // the loader's lock inside a hook, which a fork child could find held for good).
    if CHANGES.fetch_add(1, Ordering::Relaxed) + 1 >= MOST_LOADS {
        COUNTER.store(std::ptr::null_mut(), Ordering::Release);
        crate::agent_log!(
            "the loader's load counter changed {MOST_LOADS} times: unwind caches are now cleared at dlclose only"
        );
    }
    true
}

/// Loads a process may make before the counter is distrusted (see [`loaded`]).
const MOST_LOADS: u64 = 4096;
/// Changes of the counter seen by the hooks.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// At the program's `dlclose` (not from a hook): the counter found must agree with
/// `dl_iterate_phdr`; when it does not, it is dropped (and the caches are cleared at each
/// `dlclose` only).
pub fn verify() {
    let counter = COUNTER.load(Ordering::Acquire);
    if counter.is_null() {
        return;
    }
    // SAFETY: as in `check`.
    let word = unsafe { AtomicU64::from_ptr(counter) };
    let before = word.load(Ordering::Relaxed);
    let adds = loads_so_far();
    let after = word.load(Ordering::Relaxed);
    if !(before <= adds && adds <= after) {
        COUNTER.store(std::ptr::null_mut(), Ordering::Release);
        crate::agent_log!(
            "the loader's load counter read {after}, dl_iterate_phdr says {adds}: unwind caches are now cleared at dlclose only"
        );
    }
}

/// Whether the counter was found (for the tests and the log).
pub fn found() -> bool {
    !COUNTER.load(Ordering::Relaxed).is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_counter_after_the_loaders_locks_only() {
        let lock = [0, 0, 1, 0, 0];
        let mut words = vec![7, 0, 7];
        words.extend(lock);
        words.extend(lock);
        words.extend(lock);
        words.push(7);
        let k = words.len() - 1;
        assert!(looks_like_the_counter(&words, k, 7));
        assert!(!looks_like_the_counter(&words, k, 8));
        assert!(!looks_like_the_counter(&words, 0, 7));
        assert!(!looks_like_the_counter(&words, 2, 7));
        // A held lock (owner set) is not the pattern.
        words[k - 4] = 1234;
        assert!(!looks_like_the_counter(&words, k, 7));
    }

    #[test]
    fn a_load_clears_the_caches_wherever_it_came_from() {
        assert!(init(), "the loader's load counter is found (glibc)");
        check();
        let before = walks::generation();
        // Loaded and unloaded without the agent's dlclose wrapper (libc's own, as glibc's
        // internal unloads are): the load is seen.
        // SAFETY: a plain dlopen of a system library whose constructors do not matter here.
        let h = unsafe {
            libc::dlopen(
                c"libresolv.so.2".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        };
        assert!(!h.is_null(), "libresolv.so.2 loads");
        check();
        assert!(walks::generation() > before, "the load cleared the walks");
        // SAFETY: the handle just opened.
        unsafe { libc::dlclose(h) };
        verify();
        assert!(found(), "the counter agrees with dl_iterate_phdr");
    }

    #[test]
    fn a_change_seen_by_many_threads_is_cleared_and_counted_once() {
        const THREADS: usize = 8;
        let seen = SEEN.load(Ordering::Relaxed);
        let changes = CHANGES.load(Ordering::Relaxed);
        let before = walks::generation();
        let start = std::sync::Barrier::new(THREADS);
        let claimed = std::thread::scope(|s| {
            let runs: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        loaded(seen, seen + 1)
                    })
                })
                .collect();
            runs.into_iter()
                .map(|r| r.join().unwrap())
                .filter(|&won| won)
                .count()
        });
        assert_eq!(claimed, 1, "one thread claims the change");
        assert_eq!(CHANGES.load(Ordering::Relaxed), changes + 1);
        assert_eq!(SEEN.load(Ordering::Relaxed), seen + 1);
        assert!(walks::generation() > before, "the claim cleared the walks");
    }
}
