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
//! the loader's list, before any of its code runs). That is the documented way to notice
//! loads (dl_iterate_phdr(3)), but not one a hook can use: `dl_iterate_phdr` takes the
//! loader's lock, which every allocating thread would then queue on (bench/load_counter.sh:
//! BENCHMARKS.md "Noticing module loads"), and which a fork child can find held for good by a
//! thread that no longer exists there. So the constructor finds the counter it reports in
//! the loader's `_rtld_global` (whose size the dynamic symbol table gives) by its value: the
//! words that equal `dlpi_adds` then. Not by where it sits among the loader's other fields,
//! which change with glibc's version (the locks before it went from two to three) and its
//! build. Several words can hold that value by chance (the main namespace's count of loaded
//! modules always does); up to [`CANDIDATES`] are all watched, and each hook reads them, a
//! plain load of a line that changes only on loads, and clears both caches when one moved (a
//! word that moved for another reason only clears the caches once more than needed). Each
//! check against `dl_iterate_phdr` (at every `dlclose` of the program, where the lock may be
//! taken) drops the words that disagree with it, so after a module's load and unload the
//! counter is usually the only one left. With more words of that value than that, the one
//! that follows the loader's recursive locks (an unlocked recursive mutex, 40 bytes with its
//! kind, 1, at byte 16) is taken, as before. If none is found (not glibc), every candidate
//! disagreed with `dl_iterate_phdr`, or they changed more often than any program loads
//! modules (4096 times), the caches are cleared at the program's `dlclose` only, and the log
//! says so.
//!
//! Code mapped by other means than the loader (a JIT) is not a module: neither the rule
//! cache nor this counter knows it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::{cache, walks};

/// Words of the loader's data watched as its load counter (see the module docs).
pub const CANDIDATES: usize = 4;

/// The words watched as the loader's load counter and each one's value when the caches were
/// last cleared for it, on one cache line: every hook with stacks on reads them.
#[repr(C, align(64))]
struct Watched {
    /// The words that may be the loader's load counter (null: none, or found wrong).
    counters: [AtomicPtr<u64>; CANDIDATES],
    /// Each one's value when the caches were last cleared for it.
    seen: [AtomicU64; CANDIDATES],
}

static WATCHED: Watched = Watched {
    counters: [const { AtomicPtr::new(std::ptr::null_mut()) }; CANDIDATES],
    seen: [const { AtomicU64::new(0) }; CANDIDATES],
};

/// What a word found wrong by [`verify`] is watched as from then on: a word that never moves
/// (so it costs a compare, never a clear). Not null: [`check`] stops at the first null, and
/// the words after it must still be read.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Whether `counter` (a word of `WATCHED.counters`) is a word of the loader's data.
fn watching(counter: *mut u64) -> bool {
    !counter.is_null() && counter != DROPPED.as_ptr()
}

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

/// The indexes of the words of `words` to watch as the load counter, whose value is `adds`:
/// every word of that value when there are at most [`CANDIDATES`], else the one that follows
/// the loader's locks (if exactly one does). Empty: not found.
fn candidates(words: &[u64], adds: u64) -> Vec<usize> {
    let equal: Vec<usize> = (0..words.len()).filter(|&k| words[k] == adds).collect();
    if equal.len() <= CANDIDATES {
        return equal;
    }
    let mut after_locks = equal
        .into_iter()
        .filter(|&k| looks_like_the_counter(words, k, adds));
    match (after_locks.next(), after_locks.next()) {
        (Some(k), None) => vec![k],
        _ => Vec::new(),
    }
}

/// Finds the loader's load counter. From the constructor (single-threaded, no lock held);
/// false when it is not found.
pub fn init() -> bool {
    if found() {
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
    let watched = candidates(words, adds);
    for (i, &k) in watched.iter().enumerate() {
        WATCHED.seen[i].store(adds, Ordering::Relaxed);
        WATCHED.counters[i].store(global.cast::<u64>().wrapping_add(k), Ordering::Release);
    }
    !watched.is_empty()
}

/// Clears the rule and walk caches if a module was loaded since they were last cleared for
/// it. Inside the hooks: a load and a compare per watched word when nothing was loaded, up
/// to the first empty slot (`init` fills them from the first; most processes watch two
/// words, the counter and the main namespace's count of modules: the test of the fourth
/// slot cost sqlite3 3 instructions a lookup).
#[inline(always)]
pub fn check() {
    for i in 0..CANDIDATES {
        let counter = WATCHED.counters[i].load(Ordering::Relaxed);
        if counter.is_null() {
            break;
        }
        // SAFETY: `counter` points at a word of the loader's data (found by `init`),
        // aligned, mapped for good; the loader writes it under its own lock, so it is read
        // atomically.
        let now = unsafe { AtomicU64::from_ptr(counter) }.load(Ordering::Relaxed);
        let seen = WATCHED.seen[i].load(Ordering::Relaxed);
        if now != seen {
            loaded(i, seen, now);
        }
    }
}

/// Watched word `i` moved from `seen` to `now`: clears the caches and counts the change,
/// once. Every busy thread may notice the same move; only the one whose compare-exchange
/// moves `WATCHED.seen[i]` from `seen` to `now` clears and counts it, so `CHANGES` counts moves of
/// the words, not moves times threads. The others go on at once, without waiting for the
/// winner's clear (waiting inside a hook could wait on a thread stopped for good); a walk in
/// that short window may still meet the old caches, as it could before the claim. Returns
/// whether this thread claimed the change.
#[cold]
#[inline(never)]
fn loaded(i: usize, seen: u64, now: u64) -> bool {
    if WATCHED.seen[i]
        .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    cache::clear();
    walks::clear();
    // The words were found by their value: a wrong one could change far more often than
    // modules load, and each change clears both caches. Past [`MOST_LOADS`] changes none is
    // trusted any more (checking them against `dl_iterate_phdr` here would take the
    // loader's lock inside a hook, which a fork child could find held for good).
    if CHANGES.fetch_add(1, Ordering::Relaxed) + 1 >= MOST_LOADS {
        for c in &WATCHED.counters {
            c.store(std::ptr::null_mut(), Ordering::Release);
        }
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

/// At the program's `dlclose` (not from a hook): each watched word must agree with
/// `dl_iterate_phdr`, and those that do not are dropped; when none is left, the caches are
/// cleared at each `dlclose` only (and the log says so).
pub fn verify() {
    if !found() {
        return;
    }
    let word = |i: usize| {
        let counter = WATCHED.counters[i].load(Ordering::Acquire);
        // SAFETY: as in `check`.
        watching(counter).then(|| unsafe { AtomicU64::from_ptr(counter) })
    };
    let before: [Option<u64>; CANDIDATES] =
        std::array::from_fn(|i| word(i).map(|w| w.load(Ordering::Relaxed)));
    let adds = loads_so_far();
    for (i, before) in before.into_iter().enumerate() {
        let (Some(before), Some(w)) = (before, word(i)) else {
            continue;
        };
        if !agrees(before, adds, w.load(Ordering::Relaxed)) {
            // Not null, which would hide the words after it from `check`. A hook between the
            // two stores sees a move and clears the caches once more than needed.
            WATCHED.counters[i].store(DROPPED.as_ptr(), Ordering::Release);
            WATCHED.seen[i].store(0, Ordering::Relaxed);
        }
    }
    if !found() {
        crate::agent_log!(
            "no word of the loader's data follows dl_iterate_phdr's count of loads ({adds}): unwind caches are now cleared at dlclose only"
        );
    }
}

/// Whether a word read as `before` and `after` around `dl_iterate_phdr`'s count `adds` can
/// be that count (loads only add: a load in between moves both).
fn agrees(before: u64, adds: u64, after: u64) -> bool {
    before <= adds && adds <= after
}

/// Whether a load counter is watched (for the tests and the log).
pub fn found() -> bool {
    WATCHED
        .counters
        .iter()
        .any(|c| watching(c.load(Ordering::Relaxed)))
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
    fn every_word_of_the_counters_value_is_watched_and_the_locks_decide_among_many() {
        let lock = [0, 0, 1, 0, 0];
        // Two words of the value (one after the locks, one not): both watched.
        let mut words = vec![7, 0];
        words.extend(lock);
        words.extend(lock);
        words.push(7);
        assert_eq!(candidates(&words, 7), vec![0, 12]);
        assert_eq!(candidates(&words, 9), Vec::<usize>::new());
        // More than CANDIDATES: only the one after the locks.
        let mut many = vec![7; CANDIDATES + 1];
        many.extend(&words);
        assert_eq!(candidates(&many, 7), vec![CANDIDATES + 1 + 12]);
        // A load between the reads moves a real counter with it; another word is dropped.
        assert!(agrees(7, 7, 7) && agrees(7, 8, 8) && agrees(7, 7, 8));
        assert!(!agrees(7, 8, 7) && !agrees(6, 8, 6) && !agrees(9, 8, 9));
    }

    #[test]
    fn a_load_clears_the_caches_wherever_it_came_from() {
        assert!(init(), "the loader's load counter is found (glibc)");
        let watched = || {
            WATCHED
                .counters
                .iter()
                .filter(|c| watching(c.load(Ordering::Relaxed)))
                .count()
        };
        // The counter and, by its value, the main namespace's count of loaded modules.
        let at_init = watched();
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
        // The unload took the module count back: that word no longer follows the loads.
        assert!(
            watched() == 1 || watched() < at_init,
            "{at_init} words watched, {} after a load and an unload",
            watched()
        );
    }

    /// `check` stops at the first empty slot: a word `verify` dropped must not hide the
    /// words watched after it.
    #[test]
    fn a_word_found_wrong_does_not_hide_the_words_after_it() {
        static COUNTER: AtomicU64 = AtomicU64::new(7);
        WATCHED.counters[0].store(DROPPED.as_ptr(), Ordering::Relaxed);
        WATCHED.seen[0].store(0, Ordering::Relaxed);
        WATCHED.counters[1].store(COUNTER.as_ptr(), Ordering::Relaxed);
        WATCHED.seen[1].store(7, Ordering::Relaxed);
        for c in &WATCHED.counters[2..] {
            c.store(std::ptr::null_mut(), Ordering::Relaxed);
        }
        assert!(found());
        let before = walks::generation();
        check();
        assert_eq!(walks::generation(), before, "nothing moved");
        COUNTER.store(8, Ordering::Relaxed);
        check();
        assert!(
            walks::generation() > before,
            "the second word's move is seen"
        );
        WATCHED.counters[1].store(std::ptr::null_mut(), Ordering::Relaxed);
        assert!(!found(), "a dropped word is not a counter");
    }

    #[test]
    fn a_change_seen_by_many_threads_is_cleared_and_counted_once() {
        const THREADS: usize = 8;
        let seen = WATCHED.seen[0].load(Ordering::Relaxed);
        let changes = CHANGES.load(Ordering::Relaxed);
        let before = walks::generation();
        let start = std::sync::Barrier::new(THREADS);
        let claimed = std::thread::scope(|s| {
            let runs: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        loaded(0, seen, seen + 1)
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
        assert_eq!(WATCHED.seen[0].load(Ordering::Relaxed), seen + 1);
        assert!(walks::generation() > before, "the claim cleared the walks");
    }
}
