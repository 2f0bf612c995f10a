//! The agent's life in the process: the constructor (`.init_array`) that sets everything up,
//! the fork handlers, the exec policy (`LD_PRELOAD` cleaned for children) and the exit
//! summary (`.fini_array`; quiet unless something went wrong, see [`fini`]).
//!
//! fork: `prepare` takes every agent lock in one order (thread registry, stack table, block
//! shards, agent allocator), so the child never inherits a lock held by a thread that does
//! not exist there; the parent releases them; the child releases them, forgets the cached
//! tid and keeps a working agent with only the forking thread registered. The child has no
//! agent threads (no dump, no server unless `HEAPTUI_FOLLOW_FORK=1`, see `server`): its
//! `SIGUSR2` goes back to the program's disposition and its exit writes no snapshot.

use std::ffi::{CStr, c_char, c_void};

use crate::alloc::AGENT_ALLOC;
use crate::config::config;
use crate::hooks;
use crate::registry::{blocks, counters, held_frees, stacks, threads};
use crate::sys;

#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = fini;

/// Sets the agent up; runs once, from the constructor.
pub extern "C" fn init() {
    crate::log::keep_stderr();
    // Only as the preloaded library: a test binary that links the agent keeps std's hook
    // for its own assertions.
    if own_file_name().is_some_and(|name| name.windows(3).any(|w| w == b".so")) {
        crate::log::install_panic_hook();
    }
    let cfg = config();
    crate::log::open_file(cfg.log_path.as_deref());
    if !stacks::init(cfg.stack_depth) {
        crate::agent_log!("cannot reserve the stack table; allocation stacks are off");
    }
    threads::register_current();
    if !cfg.hold_frees {
        held_frees::turn_off();
    }
    hooks::pthread::init();
    hooks::unwind::resolve_dlclose();
    // Before any handler is installed and before the program runs: the real functions behind
    // the signal wrappers are resolved here, never inside a signal handler.
    crate::signals::init();
    // SAFETY: the handlers are plain functions that only take and release agent locks.
    let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    if rc != 0 {
        crate::agent_log!("pthread_atfork failed ({rc}); fork children may see a busy table");
    }
    if !cfg.follow_exec {
        remove_self_from_ld_preload();
    }
    crate::dump::start();
    crate::policy::start();
    crate::server::start();
    // Last, so the agent's own start-up is not in the recording.
    crate::record::start();
}

/// Writes the exit summary line: to `HEAPTUI_LOG` in a healthy run, to the log (so to the
/// program's standard error without `HEAPTUI_LOG`) when something went wrong — events lost
/// (blocks or stacks the tables could not take, a recording that fell behind), a server that
/// could not listen, a capture that could not stop every thread (log.rs).
pub extern "C" fn fini() {
    crate::dump::at_exit();
    crate::record::at_exit();
    // The exiting thread's held frees are applied (other threads' are counted as freed).
    held_frees::release_current();
    let counted = counters::counters();
    let troubled = crate::log::went_wrong() || !blocks::tracking() || counted.stacks_dropped > 0;
    let summary = format_args!(
        "exit summary: {} table_bytes={} stacks={} agent_heap_bytes={} tracking_stopped={} blocking_retries={}",
        counted,
        blocks::table_bytes(),
        stacks::len(),
        AGENT_ALLOC.mapped_bytes(),
        u8::from(!blocks::tracking()),
        crate::signals::blocking::retries()
    );
    if troubled {
        crate::log::log(summary);
    } else {
        crate::log::info(summary);
    }
}

// The fork handlers run inside the program's fork(): a lock's futex wait or a syscall of
// theirs must not change the errno fork leaves.

extern "C" fn prepare() {
    let _errno = sys::KeepErrno::new();
    threads::lock();
    stacks::lock();
    blocks::lock_all(sys::current_tid());
    // After the shards, as a capture takes them (it numbers with every shard held).
    blocks::lock_numbering();
    AGENT_ALLOC.lock_all();
}

extern "C" fn parent() {
    let _errno = sys::KeepErrno::new();
    AGENT_ALLOC.unlock_all();
    blocks::unlock_numbering();
    blocks::unlock_all();
    stacks::unlock();
    threads::unlock();
}

extern "C" fn child() {
    let _errno = sys::KeepErrno::new();
    sys::reset_thread_cache();
    crate::hooks::unwind::walks::reset_in_child();
    // Fork children print nothing (but to HEAPTUI_LOG).
    crate::log::in_fork_child();
    crate::signals::chain::release_in_child();
    AGENT_ALLOC.unlock_all();
    blocks::unlock_numbering();
    blocks::unlock_all();
    stacks::unlock();
    threads::reset_in_child();
    held_frees::adopt_in_child();
    // Last: with the agent's locks released and the registry reset, the child's own server
    // (HEAPTUI_FOLLOW_FORK) can start.
    crate::server::after_fork_in_child();
}

unsafe extern "C" {
    static mut environ: *mut *mut c_char;
}

/// The file name (after the last `/`) of the agent's shared object.
fn own_file_name() -> Option<&'static [u8]> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr fills `info` for an address inside this object (our own function).
    if unsafe { libc::dladdr(init as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader for the object's life.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    Some(path.rsplit(|&c| c == b'/').next().unwrap_or(path))
}

/// Removes the agent from `LD_PRELOAD` in this process's environment, keeping every other
/// preload, so exec'd children run without it (docs/reference.md §2: unless
/// `HEAPTUI_FOLLOW_EXEC=1`). The string is rewritten in place (it only shrinks), and the variable
/// removed when nothing is left: no allocation, so the process's own counters are not disturbed.
fn remove_self_from_ld_preload() {
    let Some(me) = own_file_name() else { return };
    // SAFETY: the constructor runs before the program's threads exist; environ is a
    // NULL-terminated array of NUL-terminated strings, writable in place.
    unsafe {
        let mut ep = environ;
        if ep.is_null() {
            return;
        }
        while !(*ep).is_null() {
            let entry = CStr::from_ptr(*ep).to_bytes();
            if let Some(value) = entry.strip_prefix(b"LD_PRELOAD=") {
                let kept = filter_preload(value, me);
                if kept.is_empty() {
                    // Shift the rest of the array down over this entry.
                    let mut q = ep;
                    while !(*q).is_null() {
                        *q = *q.add(1);
                        q = q.add(1);
                    }
                    continue;
                }
                let dst = (*ep).add(b"LD_PRELOAD=".len()).cast::<u8>();
                std::ptr::copy_nonoverlapping(kept.as_ptr(), dst, kept.len());
                *dst.add(kept.len()) = 0;
            }
            ep = ep.add(1);
        }
    }
}

/// The entries of an `LD_PRELOAD` value (separated by spaces or colons) whose file name is
/// not `me`, joined by spaces; at most as long as `value`.
fn filter_preload(value: &[u8], me: &[u8]) -> Vec<u8> {
    let mut kept = Vec::with_capacity(value.len());
    for entry in value
        .split(|&c| c == b' ' || c == b':')
        .filter(|e| !e.is_empty())
    {
        let name = entry.rsplit(|&c| c == b'/').next().unwrap_or(entry);
        if name != me {
            if !kept.is_empty() {
                kept.push(b' ');
            }
            kept.extend_from_slice(entry);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_filter_keeps_other_libraries() {
        let me = b"libheaptui_agent.so";
        assert_eq!(
            filter_preload(b"/x/target/debug/libheaptui_agent.so", me),
            b""
        );
        assert_eq!(
            filter_preload(b"/a/libfoo.so:/x/libheaptui_agent.so /b/libbar.so", me),
            b"/a/libfoo.so /b/libbar.so"
        );
        assert_eq!(
            filter_preload(b"libheaptui_agent.so.bak", me),
            b"libheaptui_agent.so.bak"
        );
    }
}
