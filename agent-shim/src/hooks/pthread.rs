//! The `pthread_create` wrapper: every thread started through it runs a trampoline that
//! records it in the thread registry and arms a thread-specific-data destructor that removes
//! it when it ends (return, `pthread_exit` or cancellation alike).
//!
//! A thread whose start routine lies in the agent's own object (every thread the agent
//! spawns, e.g. with `std::thread`) is marked as an agent thread before any of its code runs,
//! so even the allocations of its runtime start-up count in the agent's share.
//!
//! The trampoline uses the "C-unwind" ABI and holds no value with drop glue while the user's
//! start routine runs, so `pthread_exit`/`pthread_cancel` unwind through it as through C.

use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crate::registry::threads;

pub type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> c_int;

static REAL_CREATE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// The pthread key whose destructor deregisters a thread; u32::MAX until created.
static EXIT_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    agent: bool,
}

/// Load address of the agent's own object, 0 until known.
static OWN_BASE: AtomicUsize = AtomicUsize::new(0);

/// The load address of the object containing `addr` (0 if none).
fn object_base(addr: usize) -> usize {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads loader data and fills `info`.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// True when `routine` is code of the agent itself.
fn is_agent_code(routine: usize) -> bool {
    let mut own = OWN_BASE.load(Ordering::Relaxed);
    if own == 0 {
        own = object_base(trampoline as *const () as usize);
        OWN_BASE.store(own, Ordering::Relaxed);
    }
    own != 0 && object_base(routine) == own
}

fn real_create() -> Option<CreateFn> {
    let mut p = REAL_CREATE.load(Ordering::Acquire);
    if p.is_null() {
        let name = c"pthread_create";
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: both strings are NUL-terminated; RTLD_NEXT finds libc's definition.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            // SAFETY: as above.
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        }
        if p.is_null() {
            return None;
        }
        REAL_CREATE.store(p, Ordering::Release);
    }
    // SAFETY: p is libc's pthread_create, whose signature CreateFn is (the start routine type
    // differs only in its unwind ABI, which is what C code has).
    Some(unsafe { std::mem::transmute::<*mut c_void, CreateFn>(p) })
}

/// Creates the exit key (the agent's constructor; lazily if a thread starts earlier).
pub fn init() {
    let _ = real_create();
    let _ = is_agent_code(init as *const () as usize);
    exit_key();
}

fn exit_key() -> Option<libc::pthread_key_t> {
    let k = EXIT_KEY.load(Ordering::Acquire);
    if k != u32::MAX {
        return Some(k);
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: key is a valid out-pointer; on_thread_exit has the destructor signature.
    if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } != 0 {
        return None;
    }
    match EXIT_KEY.compare_exchange(u32::MAX, key, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(key),
        Err(existing) => {
            // SAFETY: our own key, never used.
            unsafe { libc::pthread_key_delete(key) };
            Some(existing)
        }
    }
}

unsafe extern "C" fn on_thread_exit(value: *mut c_void) {
    // The program's own key destructors may run after this one.
    let _errno = crate::sys::KeepErrno::new();
    // The frees this thread held back are applied before it goes (later destructors free
    // directly).
    crate::registry::held_frees::release_current();
    threads::deregister(value as usize as u32);
}

unsafe extern "C-unwind" fn trampoline(start: *mut c_void) -> *mut c_void {
    // The start routine finds errno as a new thread has it, whatever the registration did.
    let errno = crate::sys::errno();
    // SAFETY: `start` is the Box<Start> that pthread_create leaked for this thread.
    let Start {
        routine,
        arg,
        agent,
    } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    if agent {
        threads::mark_current_as_agent();
    } else {
        threads::register_current();
    }
    if let Some(key) = exit_key() {
        let tid = crate::sys::current_tid() as usize;
        // SAFETY: key is live; the value is a non-null tag, never dereferenced.
        unsafe { libc::pthread_setspecific(key, tid as *const c_void) };
    }
    crate::sys::set_errno(errno);
    // SAFETY: the user's start routine with the user's argument, as pthread_create promised.
    unsafe { routine(arg) }
}

/// # Safety
/// As `pthread_create(3)`.
pub unsafe fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let Some(real) = real_create() else {
        crate::agent_log!("cannot find libc's pthread_create: {:?}", dl_error());
        return libc::EAGAIN;
    };
    // libc's pthread_create gets the caller's errno, untouched by the agent's preparations.
    let errno = crate::sys::KeepErrno::new();
    let agent = is_agent_code(routine as usize);
    // Not Box::new, which would abort the program when the agent's allocator is out of
    // memory: the thread is refused the way libc refuses it then.
    // SAFETY: Start has a non-zero size.
    let start = unsafe { std::alloc::alloc(std::alloc::Layout::new::<Start>()) }.cast::<Start>();
    if start.is_null() {
        return libc::EAGAIN;
    }
    // SAFETY: `start` is fresh, aligned memory for one Start; the trampoline (or the failure
    // path below) takes it back with Box::from_raw, which frees it with this same layout.
    unsafe {
        start.write(Start {
            routine,
            arg,
            agent,
        })
    };
    drop(errno);
    // SAFETY: the caller's arguments, with our trampoline and its record in place of the
    // routine and argument.
    // What libc allocates to create an agent thread (its TLS vector) is the agent's share too.
    let state = crate::sys::thread_state();
    let was_agent = state.agent();
    if agent {
        state.set_agent(true);
    }
    // SAFETY: (as above).
    let rc = unsafe { real(thread, attr, trampoline, start.cast()) };
    state.set_agent(was_agent);
    if rc != 0 {
        // SAFETY: the thread was not created; the record is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

fn dl_error() -> Option<String> {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    // SAFETY: non-null, NUL-terminated (see above).
    (!e.is_null()).then(|| unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned())
}
