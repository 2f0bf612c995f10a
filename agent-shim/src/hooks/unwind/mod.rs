//! The allocation-stack unwinder of the hooks: the return addresses of the calling thread's
//! stack at a hooked call, from DWARF CFI reduced to a compact rule per return address and
//! cached, with the frame pointer where a function has no usable CFI.
//!
//! Why CFI first: a frame-pointer walk cannot tell when it went wrong. Code built with
//! `-fomit-frame-pointer` (glibc, most distribution libraries, `-O2` C) leaves rbp holding
//! whatever an older frame put there — often a perfectly valid-looking frame pointer of an
//! outer function, so the walk silently skips every frame in between (checking that rbp lies
//! in the stack, rises, and that the return addresses are code does not catch it). So the
//! frame pointer is trusted only for a frame whose own CFI says it is an rbp frame (its rule
//! is then exactly the frame-pointer step), or whose module has no usable CFI for it
//! ([`Rule::FramePointer`]: then rbp must point into the thread's stack above the current
//! frame, 8-aligned, or the walk ends).
//!
//! Per frame: the rule of the return address comes from a lock-free cache ([`cache`]), so
//! the steady state is one hashed slot per frame; a miss computes it ([`cfi`]: glibc's
//! lock-free `_dl_find_object`, the module's `.eh_frame_hdr` binary search, gimli with an
//! on-stack context) and caches it. A rule is `CFA = rsp|rbp + offset`, the return address at
//! CFA − 8, rbp unchanged or restored from a slot below the CFA. Every read is checked to lie
//! in the calling thread's stack mapping, between the current stack pointer and its top, and
//! every step must move the stack pointer up, so a wrong rule ends the walk early instead of
//! reading wild memory.
//!
//! A whole walk is remembered too ([`walks`]): with every stack word it read that its result
//! depended on, so the next allocation from the same place checks those words (independent
//! loads of hot stack lines) instead of walking again, and reuses the interned stack id.
//!
//! Both caches are cleared after each `dlclose` (exports.rs wraps it) and after each module
//! load, however it came (glibc unloads some modules itself; [`loads`]): a module loaded later
//! at the same address must not inherit rules. Inside a hook: no allocation, no lock, no
//! printing, no `thread_local!` (the stack bounds live in the agent's initial-exec TLS).
//!
//! Return addresses into the agent's own code (the thread trampoline, the `pthread_create`
//! wrapper whose libc call allocates, a signal-handler chain) are walked through but left out
//! of the stack: a stack shows the program's frames only (docs/reference.md §3).

pub mod cache;
pub mod cfi;
pub mod loads;
pub mod walks;

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// How to find the caller of a function, given a return address into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// CFA = (rbp if `from_rbp`, else rsp) + `offset`; the return address is at CFA − 8;
    /// rbp is unchanged (`rbp_slot == 0`) or saved at CFA − 8 × `rbp_slot`.
    Cfa {
        from_rbp: bool,
        offset: u32,
        rbp_slot: u16,
    },
    /// No usable CFI: follow rbp as a frame pointer, if it looks like one.
    FramePointer,
    /// The outermost frame (its CFI leaves the return address undefined): the walk ends.
    End,
    /// An address in no loaded module: the walk ends (never cached).
    Unknown,
}

impl Rule {
    /// Packs the rule into a non-zero word (kind in bits 0..3, offset in 3..35, slot in 35..51).
    pub fn encode(self) -> u64 {
        match self {
            Rule::Cfa {
                from_rbp,
                offset,
                rbp_slot,
            } => (1 + u64::from(from_rbp)) | u64::from(offset) << 3 | u64::from(rbp_slot) << 35,
            Rule::FramePointer => 3,
            Rule::End => 4,
            Rule::Unknown => 5,
        }
    }

    pub fn decode(w: u64) -> Option<Rule> {
        match w & 7 {
            k @ (1 | 2) => Some(Rule::Cfa {
                from_rbp: k == 2,
                offset: (w >> 3) as u32,
                rbp_slot: (w >> 35) as u16,
            }),
            3 => Some(Rule::FramePointer),
            4 => Some(Rule::End),
            5 => Some(Rule::Unknown),
            _ => None,
        }
    }
}

/// Sets the unwinder up (the rule and walk caches, `_dl_find_object` and where the agent's
/// code is). From the constructor only. Returns false when only frame pointers can be used.
pub fn init() -> bool {
    // In the agent's own unit tests the "agent" is the test program, every frame of it.
    if !cfg!(test) {
        find_agent_text();
    }
    let cached = cache::init();
    // Without the walk cache every allocation walks: slower, not wrong.
    walks::init();
    if !loads::init() {
        crate::agent_log!(
            "cannot find the loader's load counter: unwind caches are cleared at the program's dlclose only"
        );
    }
    cfi::init() && cached
}

/// The agent's executable segment `[lo, hi)` (0, 0 until found).
static AGENT_TEXT: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Whether `pc` is in the agent's own code.
#[inline]
fn in_agent(pc: usize) -> bool {
    AGENT_TEXT[0].load(Ordering::Relaxed) <= pc && pc < AGENT_TEXT[1].load(Ordering::Relaxed)
}

/// Finds the executable segment holding this very function. Takes the loader lock
/// (`dl_iterate_phdr`): from the constructor only.
fn find_agent_text() {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        _data: *mut c_void,
    ) -> i32 {
        let here = find_agent_text as *const () as usize;
        // SAFETY: the loader passes a valid `info` whose `dlpi_phdr` holds `dlpi_phnum`
        // program headers, for the duration of this call.
        let (base, phdrs) = unsafe {
            let info = &*info;
            (
                info.dlpi_addr as usize,
                std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)),
            )
        };
        for ph in phdrs {
            const PT_LOAD: u32 = 1;
            const PF_X: u32 = 1;
            if ph.p_type != PT_LOAD || ph.p_flags & PF_X == 0 {
                continue;
            }
            let lo = base + ph.p_vaddr as usize;
            let hi = lo + ph.p_memsz as usize;
            if (lo..hi).contains(&here) {
                AGENT_TEXT[0].store(lo, Ordering::Relaxed);
                AGENT_TEXT[1].store(hi, Ordering::Relaxed);
                return 1;
            }
        }
        0
    }
    // SAFETY: the callback only reads the loader's data for the object it is given.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::null_mut()) };
}

/// The rule for return address `pc`, from the cache or computed and cached.
#[inline]
fn rule_of(pc: u64) -> Rule {
    if let Some(rule) = cache::get(pc) {
        return rule;
    }
    let rule = cfi::lookup(pc);
    if rule != Rule::Unknown {
        cache::put(pc, rule);
    }
    rule
}

/// The bounds of the calling thread's stack mapping if the word at `sp` (8-aligned) lies
/// inside them, cached per thread in the agent's TLS; looked up again when it is outside the
/// cached ones (first call, a signal alternate stack, a coroutine). None when it is in no
/// mapping. A mapping's bounds are page-aligned, so for an 8-aligned `sp` the word lies
/// inside when `sp` does (`sp < hi`, not `sp + 8 <= hi`: one instruction less a lookup).
#[inline(always)]
fn stack_bounds(sp: usize) -> Option<(usize, usize)> {
    debug_assert!(sp.is_multiple_of(8));
    let st = sys::thread_state();
    let (lo, hi) = st.stack();
    if lo <= sp && sp < hi {
        return Some((lo, hi));
    }
    let (lo, hi) = look_up_stack(sp, st);
    (lo <= sp && sp < hi).then_some((lo, hi))
}

/// [`stack_bounds`]' miss: the mapping holding `sp`, read from `/proc/self/maps`.
#[cold]
#[inline(never)]
fn look_up_stack(sp: usize, st: &sys::ThreadState) -> (usize, usize) {
    let found = sys::mapping_containing(sp).unwrap_or((0, 0));
    st.set_stack(found);
    found
}

/// One caller's registers during the walk.
#[derive(Clone, Copy)]
struct Frame {
    pc: usize,
    sp: usize,
    rbp: usize,
    /// Where rbp came from: the walk's read of that number (`walks::Reads::push`), or None
    /// for the frame pointer the walk started with.
    rbp_read: Option<usize>,
}

/// The reads of one walk: only 8-aligned words inside `[lo, hi)`, each noted in `reads`
/// (for the walk cache, [`walks`]).
struct Stack<'a> {
    lo: usize,
    hi: usize,
    reads: &'a mut walks::Reads,
}

impl Stack<'_> {
    /// The word at `addr` and the number of its read.
    #[inline]
    fn read(&mut self, addr: usize) -> Option<(usize, usize)> {
        if addr < self.lo || addr > self.hi.saturating_sub(8) || !addr.is_multiple_of(8) {
            return None;
        }
        // SAFETY: the word lies inside the calling thread's own stack mapping, at or above
        // the current stack pointer (lo), so it is mapped and readable.
        let word = unsafe { *(addr as *const usize) };
        Some((word, self.reads.push(addr - self.lo, word)))
    }

    /// The caller of frame `f`, or None when the walk ends here.
    #[inline]
    fn step(&mut self, f: Frame) -> Option<Frame> {
        let rule = rule_of(f.pc as u64);
        let uses_rbp = matches!(rule, Rule::FramePointer | Rule::Cfa { from_rbp: true, .. });
        if uses_rbp {
            match f.rbp_read {
                Some(i) => self.reads.need(i),
                None => self.reads.use_fp(),
            }
        }
        let (cfa, rbp_at) = match rule {
            Rule::Cfa {
                from_rbp,
                offset,
                rbp_slot,
            } => {
                let base = if from_rbp { f.rbp } else { f.sp };
                let cfa = base.checked_add(offset as usize)?;
                let rbp_at = (rbp_slot != 0).then(|| cfa.wrapping_sub(8 * rbp_slot as usize));
                (cfa, rbp_at)
            }
            Rule::FramePointer => (f.rbp.checked_add(16)?, Some(f.rbp)),
            Rule::End => return None,
            Rule::Unknown => {
                // Not cached: a module loaded later may know this address.
                self.reads.unkeepable();
                return None;
            }
        };
        // The caller's stack pointer is the CFA: it must be above this frame's.
        if cfa <= f.sp {
            return None;
        }
        let (pc, pc_read) = self.read(cfa - 8)?;
        // The return address is the result (and picks the next rule).
        self.reads.need(pc_read);
        let (rbp, rbp_read) = match rbp_at {
            Some(at) if at >= f.sp => {
                let (rbp, i) = self.read(at)?;
                (rbp, Some(i))
            }
            Some(_) => return None,
            None => (f.rbp, f.rbp_read),
        };
        (pc >= 4096).then_some(Frame {
            pc,
            sp: cfa,
            rbp,
            rbp_read,
        })
    }
}

/// Where the walk of the hooked call whose export stub was entered with stack pointer
/// `entry_sp` and frame pointer `fp` starts; None when `entry_sp` is not in this thread's
/// stack (no stack is captured then).
///
/// # Safety
/// `entry_sp` must be the stack pointer at the entry of the hooked function on this thread
/// (the export stubs pass it), and the hook must still be running on that stack.
#[inline(always)]
pub unsafe fn start(entry_sp: usize, fp: usize) -> Option<walks::Start> {
    // A module loaded since the last walk: the caches go (loads.rs).
    loads::check();
    if !entry_sp.is_multiple_of(8) {
        return None;
    }
    let (_, hi) = stack_bounds(entry_sp)?;
    // SAFETY: entry_sp is inside this thread's stack mapping (checked above) and holds the
    // hooked call's return address.
    let ret = unsafe { *(entry_sp as *const usize) };
    Some(walks::Start {
        sp: entry_sp,
        ret,
        fp,
        hi,
        generation: walks::generation(),
    })
}

/// Captures up to `out.len()` return addresses from `start`: the hooked call's return
/// address, then one per caller, innermost first, leaving the agent's own frames out; every
/// stack word read goes to `reads`.
///
/// # Safety
/// `start` comes from [`start`] on this thread, whose hook is still running on that stack.
pub unsafe fn walk(start: &walks::Start, out: &mut [u64], reads: &mut walks::Reads) -> usize {
    if out.is_empty() {
        return 0;
    }
    let mut stack = Stack {
        lo: start.sp,
        hi: start.hi,
        reads,
    };
    let mut frame = Frame {
        pc: start.ret,
        sp: start.sp + 8,
        rbp: start.fp,
        rbp_read: None,
    };
    let mut n = 0;
    // The agent's frames are a handful per stack: the walk still ends after `out.len()`
    // frames plus a margin for them, whatever the stack holds.
    for _ in 0..out.len() + 64 {
        if !in_agent(frame.pc) {
            out[n] = frame.pc as u64;
            n += 1;
            if n == out.len() {
                break;
            }
        }
        let Some(caller) = stack.step(frame) else {
            break;
        };
        frame = caller;
    }
    n
}

/// Captures up to `out.len()` return addresses of the hooked call whose export stub was
/// entered with stack pointer `entry_sp` (pointing at the call's return address) and frame
/// pointer `fp`: the return address, then one per caller, innermost first.
///
/// # Safety
/// As [`start`].
#[cfg(test)]
pub unsafe fn unwind(entry_sp: usize, fp: usize, out: &mut [u64]) -> usize {
    // SAFETY: as the caller's.
    match unsafe { start(entry_sp, fp) } {
        // SAFETY: `start` just came from this thread's stack.
        Some(start) => unsafe { walk(&start, out, &mut walks::Reads::default()) },
        None => 0,
    }
}

/// libc's `dlclose`, looked up by [`resolve_dlclose`].
static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

/// Looks libc's `dlclose` up. From the constructor, so the program's first `dlclose` does
/// not run a `dlsym` of the agent's first (which would replace the `dlerror()` message of a
/// failed `dlopen` the program has yet to read).
pub fn resolve_dlclose() -> usize {
    let mut f = REAL_DLCLOSE.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: dlsym with a NUL-terminated name; not inside a malloc hook.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) } as usize;
        REAL_DLCLOSE.store(f, Ordering::Release);
    }
    f
}

/// `dlclose`, forwarded to libc; the rule cache is cleared once the module is gone.
///
/// # Safety
/// As `dlclose(3)`.
pub unsafe fn dlclose(handle: *mut c_void) -> i32 {
    let f = resolve_dlclose();
    if f == 0 {
        return -1;
    }
    // SAFETY: `f` is libc's dlclose.
    let real = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> i32>(f) };
    // SAFETY: the caller's handle, as dlclose(3) requires.
    let rc = unsafe { real(handle) };
    cache::clear();
    walks::clear();
    loads::verify();
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_encode_and_decode() {
        for rule in [
            Rule::Cfa {
                from_rbp: true,
                offset: 16,
                rbp_slot: 2,
            },
            Rule::Cfa {
                from_rbp: false,
                offset: u32::MAX,
                rbp_slot: u16::MAX,
            },
            Rule::FramePointer,
            Rule::End,
            Rule::Unknown,
        ] {
            assert_ne!(rule.encode(), 0);
            assert_eq!(Rule::decode(rule.encode()), Some(rule));
        }
        assert_eq!(Rule::decode(0), None);
    }

    #[test]
    fn a_frame_pointer_chain_is_followed_where_there_is_no_cfi() {
        // A chain laid out in this frame's stack memory: [next_fp, ret] pairs, upwards, with
        // return addresses that no module holds (their rule is Unknown: the walk would end).
        let mut words = [0usize; 12];
        std::hint::black_box(&mut words);
        let base = words.as_mut_ptr() as usize;
        words[0] = base + 4 * 8;
        words[1] = 0x1111_0000;
        std::hint::black_box(&mut words);
        cache::init();
        cache::put(0xaaaa_0000, Rule::FramePointer);
        let mut reads = walks::Reads::default();
        let mut stack = Stack {
            lo: base,
            hi: base + 12 * 8,
            reads: &mut reads,
        };
        let caller = stack
            .step(Frame {
                pc: 0xaaaa_0000,
                sp: base,
                rbp: base,
                rbp_read: None,
            })
            .unwrap();
        assert_eq!(
            (caller.pc, caller.sp, caller.rbp),
            (0x1111_0000, base + 16, base + 32)
        );
        // A frame pointer below the stack pointer ends the walk.
        assert!(
            stack
                .step(Frame {
                    pc: 0xaaaa_0000,
                    sp: base + 8,
                    rbp: base,
                    rbp_read: None,
                })
                .is_none()
        );
    }

    #[inline(never)]
    fn leaf(out: &mut [u64]) -> usize {
        // SAFETY: `out` is a valid buffer; the probe runs on this thread's stack.
        let n = unsafe { unwind_from_here(out) };
        std::hint::black_box(n)
    }

    /// Unwinds the calling thread from a real call: `call` pushes the return address, so the
    /// callee sees exactly what an export stub sees.
    #[inline(never)]
    unsafe fn unwind_from_here(out: &mut [u64]) -> usize {
        let n: usize;
        // SAFETY: calls `probe` like a hooked function is called: rdi = out pointer,
        // rsi = out length; probe reads rsp (pointing at the return address) and rbp.
        unsafe {
            std::arch::asm!(
                "call {probe}",
                probe = sym probe,
                inout("rdi") out.as_mut_ptr() => _,
                inout("rsi") out.len() => _,
                lateout("rax") n,
                clobber_abi("C"),
            )
        };
        n
    }

    #[unsafe(naked)]
    unsafe extern "C" fn probe(out: *mut u64, len: usize) -> usize {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "mov rdx, rsp",
            "mov rcx, rbp",
            "jmp {walk}",
            ".cfi_endproc",
            walk = sym probe_walk,
        )
    }

    unsafe extern "C" fn probe_walk(
        out: *mut u64,
        len: usize,
        entry_sp: usize,
        fp: usize,
    ) -> usize {
        // SAFETY: `out` is the caller's buffer of `len` words; entry_sp/fp come from the stub.
        unsafe { unwind(entry_sp, fp, std::slice::from_raw_parts_mut(out, len)) }
    }

    #[inline(never)]
    fn middle(out: &mut [u64]) -> usize {
        let n = leaf(out);
        std::hint::black_box(n)
    }

    #[inline(never)]
    fn outer(out: &mut [u64]) -> usize {
        let n = middle(out);
        std::hint::black_box(n)
    }

    #[test]
    fn the_current_thread_unwinds_through_its_callers() {
        assert!(init());
        let mut out = [0u64; 16];
        let n = outer(&mut out);
        assert!(n >= 5, "{:#x?}", &out[..n]);
        // Each return address belongs to the function of the test chain that starts closest
        // below it: after unwind_from_here's own return address come leaf, middle and outer.
        let starts = [
            (leaf as *const () as u64, "leaf"),
            (middle as *const () as u64, "middle"),
            (outer as *const () as u64, "outer"),
            (unwind_from_here as *const () as u64, "unwind_from_here"),
        ];
        let owner = |pc: u64| {
            starts
                .iter()
                .filter(|(s, _)| *s < pc)
                .max_by_key(|(s, _)| *s)
                .map(|(_, name)| *name)
        };
        let names: Vec<Option<&str>> = out[..4].iter().map(|&pc| owner(pc)).collect();
        assert_eq!(
            names,
            [
                Some("unwind_from_here"),
                Some("leaf"),
                Some("middle"),
                Some("outer")
            ],
            "{:#x?} {starts:#x?}",
            &out[..n]
        );
    }
}
