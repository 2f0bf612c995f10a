//! Thin, allocation-free wrappers over the system calls the hooks and the registry need:
//! anonymous mappings, `gettid`, reading small `/proc` files into caller buffers, walking
//! `/proc/self/task` and `/proc/self/maps`, and the hooks' per-thread state (csrc/tls.c).
//!
//! Nothing here calls libc malloc, takes a lock or uses Rust thread-locals, so every function
//! is usable from inside a malloc hook.

use std::ffi::{CStr, c_int};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// The per-thread state kept in initial-exec TLS by csrc/tls.c (same layout: each atomic has
/// its integer's size and alignment).
///
/// Shared between the thread's ordinary code and the signal handlers that interrupt it
/// (a handler that allocates runs the hooks on the same thread), so every field is an atomic
/// used with relaxed ordering (a plain load or store on x86-64) rather than a `&mut` that a
/// handler could alias. The marker keeps it `!Sync`, so a reference never leaves its thread,
/// whose TLS outlives every frame of that thread.
#[repr(C)]
pub struct ThreadState {
    /// Cached `gettid()`, 0 until first use.
    tid: AtomicU32,
    /// Re-entrancy depth of the hooks on this thread.
    busy: AtomicU32,
    /// The mapping holding this thread's stack, `0..0` until looked up.
    stack_lo: AtomicUsize,
    stack_hi: AtomicUsize,
    /// 1 on the agent's own threads.
    agent: AtomicU32,
    /// This thread's slot of held-back frees (`registry::held_frees`): 0 = none yet, n =
    /// slot n − 1, `u32::MAX` = never (the thread is ending, or no slot was left).
    held: AtomicU32,
    _this_thread_only: PhantomData<*const ()>,
}

impl ThreadState {
    #[inline]
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed) != 0
    }

    #[inline]
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(u32::from(busy), Ordering::Relaxed);
    }

    #[inline]
    pub fn agent(&self) -> bool {
        self.agent.load(Ordering::Relaxed) != 0
    }

    #[inline]
    pub fn set_agent(&self, agent: bool) {
        self.agent.store(u32::from(agent), Ordering::Relaxed);
    }

    /// The cached bounds of this thread's stack mapping (`0..0` until looked up).
    #[inline]
    pub fn stack(&self) -> (usize, usize) {
        (
            self.stack_lo.load(Ordering::Relaxed),
            self.stack_hi.load(Ordering::Relaxed),
        )
    }

    #[inline]
    pub fn set_stack(&self, (lo, hi): (usize, usize)) {
        self.stack_lo.store(lo, Ordering::Relaxed);
        self.stack_hi.store(hi, Ordering::Relaxed);
    }

    /// `registry::held_frees`' word for this thread.
    #[inline]
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn set_held(&self, held: u32) {
        self.held.store(held, Ordering::Relaxed);
    }
}

/// The calling thread's hook state: csrc/tls.c's `heaptui_thread_state`, found the way C
/// code compiled for initial-exec TLS finds it (its offset from the thread pointer, from the
/// GOT, plus the thread pointer at `%fs:0`), inline: the hooks ask for it several times per
/// call, and a call into C each time was 2–3% of an allocation-heavy program's run.
#[inline]
pub fn thread_state() -> &'static ThreadState {
    let state: *const ThreadState;
    // SAFETY: the initial-exec access sequence of the x86-64 TLS ABI for a variable of this
    // library (built with `-ftls-model=initial-exec`, loaded with the program, so its TLS is
    // in the static block); it reads the GOT and the thread control block, writes only its
    // output register (and flags), and gives the same address every time on one thread.
    // `nomem`, not `readonly`: neither word it reads ever changes under a running function
    // (the GOT entry is fixed at load, `%fs:0` is this thread's), so LLVM may reuse the
    // address within a hook; with `readonly` it computed it again after each store (the
    // walk's start after the busy flag's, 2 instructions a lookup).
    unsafe {
        std::arch::asm!(
            "mov {state}, qword ptr [rip + heaptui_thread_state@GOTTPOFF]",
            "add {state}, qword ptr fs:0",
            state = out(reg) state,
            options(pure, nomem, nostack),
        );
    }
    // SAFETY: the address of this thread's own TLS slot (zero-initialised: valid atomics),
    // which lives as long as the thread; the reference cannot reach another thread
    // (ThreadState is !Sync), and shared access is all it allows (the fields are atomics).
    unsafe { &*state }
}

/// The calling thread's kernel id, cached in TLS.
#[inline]
pub fn current_tid() -> u32 {
    let state = thread_state();
    let tid = state.tid.load(Ordering::Relaxed);
    if tid != 0 {
        return tid;
    }
    let tid = raw_gettid();
    state.tid.store(tid, Ordering::Relaxed);
    tid
}

/// A system call made with the `syscall` instruction: the kernel's result, a negative error
/// number on failure, errno untouched. The agent exports `syscall(3)` itself
/// (`signals::raw_syscall`), so `libc::syscall` from inside the agent reaches that wrapper.
///
/// # Safety
/// As the system call `n` with arguments `args` (unused ones are ignored by the kernel).
#[inline]
pub unsafe fn raw_syscall(n: libc::c_long, args: [libc::c_long; 6]) -> libc::c_long {
    let ret: libc::c_long;
    // SAFETY: the x86-64 system call convention: number in rax, arguments in rdi, rsi, rdx,
    // r10, r8, r9; the kernel clobbers rcx and r11 and returns in rax. What the call does with
    // memory is the caller's contract.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// `gettid()` straight from the kernel (the cache is wrong in a fork child until reset).
pub fn raw_gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Forgets the cached tid (the fork child's thread has a new one).
pub fn reset_thread_cache() {
    thread_state().tid.store(0, Ordering::Relaxed);
}

/// The calling thread's `errno`.
#[inline]
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot, always addressable.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
#[inline]
pub fn set_errno(value: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// `errno` as it was when this was made, put back when it is dropped: held around the
/// agent's own system calls on paths the program's calls run through (a contended lock's
/// futex wait, a `/proc` read, an mmap that fails), so no failure of the agent's ever shows
/// in the program's errno (glibc's functions leave it alone on success; `free` always).
#[must_use]
pub struct KeepErrno(c_int);

impl KeepErrno {
    #[inline]
    pub fn new() -> Self {
        Self(errno())
    }
}

impl Default for KeepErrno {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KeepErrno {
    #[inline]
    fn drop(&mut self) {
        set_errno(self.0);
    }
}

/// The time on `clock` in nanoseconds (`clock_gettime`: a vDSO call, async-signal-safe).
pub fn clock_ns(clock: libc::clockid_t) -> Option<i128> {
    // The blocking-call wrappers read the program's clock: a clock it got wrong is the
    // program's call to fail, not this one's to report.
    let _errno = KeepErrno::new();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec.
    (unsafe { libc::clock_gettime(clock, &mut ts) } == 0).then(|| ts_ns(&ts))
}

/// A timespec in nanoseconds.
pub fn ts_ns(ts: &libc::timespec) -> i128 {
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// Maps `len` bytes of zeroed anonymous memory for the agent (recorded in `own_memory`, so
/// captures never scan it); `None` when the kernel refuses. `reserve_only` maps with
/// MAP_NORESERVE: pages cost memory only once touched.
pub fn map_anon(len: usize, reserve_only: bool) -> Option<*mut u8> {
    // A refusal (ENOMEM) is the agent's, not the program's.
    let _errno = KeepErrno::new();
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if reserve_only {
        flags |= libc::MAP_NORESERVE;
    }
    // SAFETY: an anonymous private mapping at a kernel-chosen address aliases nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    crate::own_memory::add(p as u64..p as u64 + len as u64);
    Some(p.cast())
}

/// Unmaps a region obtained from [`map_anon`].
///
/// # Safety
/// `ptr..ptr+len` must be a mapping (or the part of one) that nothing will touch again.
pub unsafe fn unmap(ptr: *mut u8, len: usize) {
    let _errno = KeepErrno::new();
    // SAFETY: guaranteed by the caller.
    let ok = unsafe { libc::munmap(ptr.cast(), len) } == 0;
    if ok {
        crate::own_memory::remove(ptr as u64..ptr as u64 + len as u64);
    }
}

/// Resizes a mapping obtained from [`map_anon`] (page multiples), keeping its contents:
/// in place when the kernel can, else by moving its pages onto a fresh mapping that is
/// recorded as the agent's before any agent data lands there. `None` when the kernel refuses
/// (the old mapping is then untouched).
///
/// # Safety
/// `ptr..ptr+old_len` must be a whole mapping from [`map_anon`]; on success it must not be
/// used again unless the result is `ptr`.
pub unsafe fn remap(ptr: *mut u8, old_len: usize, new_len: usize) -> Option<*mut u8> {
    // mremap's refusals (ENOMEM) are the agent's, not the program's.
    let _errno = KeepErrno::new();
    let start = ptr as u64;
    // SAFETY: resizes our own mapping in place (no MREMAP_MAYMOVE: it stays where it is).
    let q = unsafe { libc::mremap(ptr.cast(), old_len, new_len, 0) };
    if q != libc::MAP_FAILED {
        if new_len > old_len {
            crate::own_memory::extend(start, start + old_len as u64, start + new_len as u64);
        } else {
            crate::own_memory::remove(start + new_len as u64..start + old_len as u64);
        }
        return Some(ptr);
    }
    let target = map_anon(new_len, false)?;
    // SAFETY: moves our own mapping's pages onto `target`, our own fresh mapping of
    // `new_len` bytes, which MREMAP_FIXED replaces atomically.
    let q = unsafe {
        libc::mremap(
            ptr.cast(),
            old_len,
            new_len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            target.cast::<libc::c_void>(),
        )
    };
    if q == libc::MAP_FAILED {
        // SAFETY: the fresh mapping was never handed out.
        unsafe { unmap(target, new_len) };
        return None;
    }
    crate::own_memory::remove(start..start + old_len as u64);
    Some(q.cast())
}

/// `fd` (one the agent just opened, close-on-exec) moved above the standard descriptors when
/// it landed on 0, 1 or 2: those numbers are the program's even while it has them closed (a
/// program that closed fd 0 and then opens `/dev/null` expects to get 0 back). Returns the
/// descriptor to use, or -1 (and `fd` closed) when it cannot be moved.
pub fn above_stdio(fd: c_int) -> c_int {
    if !(0..=2).contains(&fd) {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor this code owns; closing the original
    // gives the low number back.
    unsafe {
        let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
        libc::close(fd);
        moved
    }
}

/// A descriptor-owning value of the agent's (a listener, a stream, a file), moved above the
/// standard descriptors if it landed on one (see [`above_stdio`]).
pub fn own_fd<T: std::os::fd::IntoRawFd + std::os::fd::FromRawFd>(owner: T) -> std::io::Result<T> {
    let fd = above_stdio(owner.into_raw_fd());
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is the descriptor `owner` held (or its duplicate), now owned by nobody else.
    Ok(unsafe { T::from_raw_fd(fd) })
}

/// Waits until `listener` (a listening socket of the agent's, non-blocking) has a connection
/// to accept. The agent's accepting threads wait here, not in a blocking accept(2): that
/// reserves the number of the descriptor it will return for as long as it waits — with fd 0
/// closed by the program, the number 0, and the program's next open() would get another
/// number than the one it expects.
pub fn wait_for_connection(listener: c_int) {
    let mut pfd = libc::pollfd {
        fd: listener,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: ppoll reads and writes one pollfd of ours; no timeout, no mask. The raw call:
    // the agent's own `poll` export would work too, but has nothing to add here.
    unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            &mut pfd as *mut libc::pollfd,
            1usize,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<libc::sigset_t>(),
            0usize,
        );
    }
}

/// A file opened read-only with open(2), closed on drop.
pub struct RawFile(i32);

impl RawFile {
    pub fn open(path: &CStr) -> Option<Self> {
        // SAFETY: `path` is NUL-terminated; O_CLOEXEC keeps the fd out of exec'd children.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        let fd = above_stdio(fd);
        (fd >= 0).then_some(Self(fd))
    }

    pub fn fd(&self) -> i32 {
        self.0
    }

    /// Reads once (retrying on EINTR); 0 at end of file or on error.
    pub fn read(&self, buf: &mut [u8]) -> usize {
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return n as usize;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return 0;
            }
        }
    }

    /// Reads until `buf` is full or the file ends; returns the bytes read.
    pub fn read_full(&self, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read(&mut buf[done..]);
            if n == 0 {
                break;
            }
            done += n;
        }
        done
    }
}

impl Drop for RawFile {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe {
            libc::close(self.0);
        }
    }
}

fn parse_hex(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0usize;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | d as usize;
    }
    Some(v)
}

/// The `lo..hi` range of the mapping of /proc/self/maps that contains `addr`, read with a
/// stack buffer and no allocation.
pub fn mapping_containing(addr: usize) -> Option<(usize, usize)> {
    // Called from the hooks: a failed open (EMFILE) or read must not reach the program.
    let _errno = KeepErrno::new();
    let file = RawFile::open(c"/proc/self/maps")?;
    let mut buf = [0u8; 4096];
    let mut filled = 0;
    loop {
        let n = file.read(&mut buf[filled..]);
        let end = filled + n;
        let mut start = 0;
        while let Some(nl) = buf[start..end].iter().position(|&c| c == b'\n') {
            let line = &buf[start..start + nl];
            if let Some(range) = parse_maps_range(line)
                && range.0 <= addr
                && addr < range.1
            {
                return Some(range);
            }
            start += nl + 1;
        }
        if n == 0 {
            return None;
        }
        // Keep the partial line; a line longer than the buffer is skipped (maps lines are short).
        if start == 0 && end == buf.len() {
            filled = 0;
        } else {
            buf.copy_within(start..end, 0);
            filled = end - start;
        }
    }
}

fn parse_maps_range(line: &[u8]) -> Option<(usize, usize)> {
    let dash = line.iter().position(|&c| c == b'-')?;
    let space = line.iter().position(|&c| c == b' ')?;
    if space <= dash {
        return None;
    }
    Some((
        parse_hex(&line[..dash])?,
        parse_hex(&line[dash + 1..space])?,
    ))
}

/// Calls `f` with the tid of every entry of /proc/self/task (getdents64, no allocation).
pub fn for_each_task(mut f: impl FnMut(u32)) -> bool {
    let Some(dir) = RawFile::open(c"/proc/self/task") else {
        return false;
    };
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: getdents64 writes at most buf.len() bytes of dirents into buf.
        let n =
            unsafe { libc::syscall(libc::SYS_getdents64, dir.fd(), buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            return n == 0;
        }
        let n = n as usize;
        let mut off = 0;
        // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name (NUL-terminated).
        while off + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen == 0 || off + reclen > n {
                break;
            }
            let name = &buf[off + 19..off + reclen];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            if let Some(tid) = parse_decimal(name) {
                f(tid);
            }
            off += reclen;
        }
    }
}

fn parse_decimal(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(c - b'0');
    }
    u32::try_from(v).ok()
}

/// The `comm` name of thread `tid` of this process, written into `out`; returns its length.
pub fn thread_comm(tid: u32, out: &mut [u8; 32]) -> usize {
    let mut path = [0u8; 48];
    let mut w = crate::log::BufWriter::new(&mut path);
    let _ = std::fmt::Write::write_fmt(&mut w, format_args!("/proc/self/task/{tid}/comm\0"));
    let len = w.len();
    let Ok(path) = CStr::from_bytes_with_nul(&path[..len]) else {
        return 0;
    };
    let Some(file) = RawFile::open(path) else {
        return 0;
    };
    let mut n = file.read_full(out);
    while n > 0 && (out[n - 1] == b'\n' || out[n - 1] == 0) {
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_mapping_of_a_stack_variable() {
        let local = 5u64;
        let addr = &local as *const u64 as usize;
        let (lo, hi) = mapping_containing(addr).expect("stack is mapped");
        assert!(lo <= addr && addr < hi);
        assert_eq!(mapping_containing(8), None);
    }

    #[test]
    fn lists_the_current_thread_and_reads_its_name() {
        let me = raw_gettid();
        let mut seen = false;
        assert!(for_each_task(|tid| seen |= tid == me));
        assert!(seen);
        let mut name = [0u8; 32];
        let n = thread_comm(me, &mut name);
        assert!(n > 0 && !name[..n].contains(&b'\n'));
    }

    #[test]
    fn caches_the_tid_per_thread() {
        assert_eq!(current_tid(), raw_gettid());
        let other = std::thread::spawn(current_tid).join().unwrap();
        assert_ne!(other, current_tid());
    }

    #[test]
    fn parses_numbers() {
        assert_eq!(parse_hex(b"7ffc0a"), Some(0x7ffc0a));
        assert_eq!(parse_hex(b"x1"), None);
        assert_eq!(parse_decimal(b"1234"), Some(1234));
        assert_eq!(parse_decimal(b".."), None);
        assert_eq!(
            parse_maps_range(b"1000-2000 rw-p 0 0:0 0"),
            Some((0x1000, 0x2000))
        );
    }
}
