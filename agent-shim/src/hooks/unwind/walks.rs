//! The walk cache of the hook unwinder: a finished walk, remembered with every stack word it
//! read, so the next allocation from the same place gets its interned stack id by checking
//! those words instead of walking again.
//!
//! Why it is exact: a walk is a function of where it starts (the stack pointer at the hooked
//! call's entry, the return address stored there, the frame pointer when a rule used it before
//! the stack restored it), of the upper bound of the stack it may read (a walk cut short there
//! would go on under a higher one, so an entry holds only for the same bound), of the rules of
//! its return addresses (fixed until a `dlclose` or a module load, which bump the generation),
//! and of the stack words it read. When all of these are as they were, the walk would take the
//! same steps and find the same frames, so it need not be taken.
//! A program allocating in a loop calls malloc from the same site at the same stack depth over
//! and over: the check is up to 32 independent loads of hot stack words, where the walk is 16
//! dependent rule lookups (and the stack's hash and intern probe after it).
//!
//! One set-associative table shared by all threads (their stacks lie at different addresses,
//! so their keys differ), each entry a seqlock: a writer makes the version odd, writes,
//! makes it even again; a reader that saw an odd or changed version treats the entry as a
//! miss. A reader only dereferences words of its own stack: it loads the entry's offsets
//! (four to a word) into registers and checks the version again before it reads the stack
//! at them, so the offsets it uses are those of one finished walk from its own stack pointer
//! and stack top, each inside `[sp, hi - 8]` by construction; a torn entry costs one miss,
//! never a wild read. A thread interrupted while writing (its own signal handler allocating)
//! finds the entry odd and walks; a fork child makes the entries other threads were writing
//! at the fork even and unmatchable again ([`reset_in_child`]), or they would stay odd for
//! good. Walks that read more than [`MAX_READS`] words, left 512 KiB of stack, or ended at a
//! return address in no module (its rule is not cached either) are not kept.
//!
//! Each set has a word of one-byte tags, one per way, from the key's hash: a lookup checks
//! only the ways whose tag matches (one compare of the eight at once), instead of reading
//! every way's key. The tags are hints written after the entry: a stale one costs a miss or
//! a check that fails, never a wrong stack.
//!
//! Never allocates, locks or prints: it is read and written inside the malloc hooks.

use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering, fence};

use crate::sys;

/// Stack words one remembered walk may have read: a return address and a saved rbp per frame
/// at the default depth of 16 (the first return address is the key).
pub const MAX_READS: usize = 32;
/// Words [`check`] compares between two tests of their differences; also the offsets packed
/// in one word of [`Entry::offsets`].
const CHUNK: usize = 4;

/// Sets of [`WAYS`] entries: one call site at one stack depth is often reached from a few
/// different paths (an interpreter's loop calling the same allocator wrapper from several
/// opcodes at the same depth); each path keeps its own entry. Eight ways, not four: sqlite3
/// reaches its allocator through more than four paths from some (stack pointer, return
/// address) pairs, whose walks evicted each other: 400,770 of its 5.8M lookups missed with
/// four ways, 736 (about one per distinct stack) with eight, and its CPU time under the agent
/// fell by 7% (BENCHMARKS.md "Real programs"). More sets would not have helped (8,192 sets of
/// four missed as often: the walks share a key, so a set). 3 MiB of address space (8,192
/// entries of 384 bytes), touched only where walks are kept.
const SET_BITS: u32 = 10;
const SETS: usize = 1 << SET_BITS;
const WAYS: usize = 8;
const ENTRIES: usize = SETS * WAYS;

/// The stack words a walk read, in order, as offsets in words from its entry stack pointer,
/// and which of them its result depends on: every return address, and a saved rbp only when
/// a later rule computed from it (code built without frame pointers keeps data in rbp, so its
/// saved value changes from call to call without changing the stack).
#[derive(Default)]
pub struct Reads {
    offsets: [u16; MAX_READS],
    values: [u64; MAX_READS],
    len: usize,
    /// Bit i: read i matters.
    needed: u32,
    /// The walk cannot be remembered (too many reads, too far, ended at an unknown address).
    unkeepable: bool,
    /// A rule used the entry frame pointer before the stack restored rbp.
    used_fp: bool,
}

impl Reads {
    /// Notes the read of `value` at `offset` bytes above the entry stack pointer; returns its
    /// number for [`Reads::need`] (`MAX_READS` when it could not be noted: the walk is then
    /// not kept).
    #[inline]
    pub fn push(&mut self, offset: usize, value: usize) -> usize {
        let words = u16::try_from(offset / 8)
            .ok()
            .filter(|_| offset.is_multiple_of(8));
        match (words, self.len < MAX_READS) {
            (Some(offset), true) => {
                self.offsets[self.len] = offset;
                self.values[self.len] = value as u64;
                self.len += 1;
                self.len - 1
            }
            _ => {
                self.unkeepable = true;
                MAX_READS
            }
        }
    }

    /// The walk's result depends on read `i`.
    #[inline]
    pub fn need(&mut self, i: usize) {
        if i < MAX_READS {
            self.needed |= 1 << i;
        }
    }

    /// The walk used the frame pointer it started with.
    #[inline]
    pub fn use_fp(&mut self) {
        self.used_fp = true;
    }

    /// The walk ended for a reason that may not hold next time.
    #[inline]
    pub fn unkeepable(&mut self) {
        self.unkeepable = true;
    }
}

/// Where a walk starts: the hooked call's entry stack pointer, the return address stored
/// there, the frame pointer at entry, and the top of the thread's stack mapping.
#[derive(Clone, Copy)]
pub struct Start {
    pub sp: usize,
    pub ret: usize,
    pub fp: usize,
    pub hi: usize,
    /// [`generation`] when the walk began: a walk that went by rules a `dlclose` has since
    /// dropped is not kept.
    pub generation: u32,
}

/// One remembered walk, laid out for [`check`] (whose assembly names the fields by their
/// offsets): the key and the offsets on the first two cache lines, the offsets 16-byte
/// aligned (SSE loads), the values on the next four.
#[repr(C, align(64))]
struct Entry {
    /// Odd while written (see the module docs).
    version: AtomicU64,
    sp: AtomicU64,
    ret: AtomicU64,
    /// The top of the stack the walk could read (see the module docs).
    hi: AtomicU64,
    /// generation (bits 0..32) and depth (32..40): [`want`] of the walk.
    key: AtomicU64,
    /// The entry frame pointer, compared only when `used_fp` is 1.
    fp: AtomicU64,
    /// The offsets of the words read, in words above `sp`, [`CHUNK`] to a word (read `k` in
    /// bits `16 * (k % 4)..` of word `k / 4`, so that the words' little-endian bytes are the
    /// `u16` offsets in order).
    offsets: [AtomicU64; MAX_READS / CHUNK],
    stack: AtomicU32,
    /// The chunks of [`CHUNK`] reads kept: 1 to `MAX_READS / CHUNK` in a finished entry.
    chunks: AtomicU8,
    /// 1 for a walk that used the frame pointer it started with.
    used_fp: AtomicU8,
    values: [AtomicU64; MAX_READS],
}

// What `check`'s assembly relies on: the offsets in four aligned 16-byte loads, the values
// in 32-byte chunks, the words in the order of little-endian u16s (x86-64 only).
const _: () = assert!(std::mem::offset_of!(Entry, offsets) % 16 == 0);
const _: () = assert!(std::mem::size_of::<Entry>() == 384);
const _: () = assert!(MAX_READS == 32 && CHUNK == 4);
const _: () = assert!(cfg!(target_arch = "x86_64") && cfg!(target_endian = "little"));

/// What a lookup reads besides the entries, in one static: each static of its own cost the
/// hooks a load of its address from the GOT (rust-lld does not relax them).
#[repr(C, align(64))]
struct Table {
    /// Bumped when rules may have changed (a `dlclose`, a module load: `loads`): older
    /// entries no longer match.
    generation: AtomicU32,
    /// The entries (null until [`init`], or when the mapping was refused: then nothing is
    /// kept, and every set's tags stay 0).
    entries: AtomicPtr<Entry>,
    /// Each set's tags, byte `w` for way `w` (0: none yet; see the module docs).
    tags: [AtomicU64; SETS],
}

static TABLE: Table = Table {
    generation: AtomicU32::new(1),
    entries: AtomicPtr::new(std::ptr::null_mut()),
    tags: [const { AtomicU64::new(0) }; SETS],
};

/// Reserves the table (pages cost memory when first written). From the constructor.
pub fn init() -> bool {
    if !TABLE.entries.load(Ordering::Acquire).is_null() {
        return true;
    }
    let Some(p) = sys::map_anon(ENTRIES * std::mem::size_of::<Entry>(), true) else {
        return false;
    };
    TABLE.entries.store(p.cast(), Ordering::Release);
    true
}

/// Forgets every walk (after a `dlclose` or a load: the rules they went by may be gone).
pub fn clear() {
    TABLE.generation.fetch_add(1, Ordering::Relaxed);
}

/// In a fork child: an entry another thread of the parent was writing at the fork is odd,
/// and its writer does not exist here to finish it: it is emptied and made even, so it can
/// be used again.
pub fn reset_in_child() {
    let base = TABLE.entries.load(Ordering::Acquire);
    if base.is_null() {
        return;
    }
    for i in 0..ENTRIES {
        // SAFETY: i < ENTRIES, the mapping's length in entries (as in `set`).
        let e = unsafe { &*base.add(i) };
        let version = e.version.load(Ordering::Relaxed);
        if version & 1 != 0 {
            // No stack pointer is 0: no lookup matches the entry, so none reads its offsets
            // (half written); and a stack id of 0 is never a hit.
            e.sp.store(0, Ordering::Relaxed);
            e.stack.store(0, Ordering::Relaxed);
            e.version.store(version + 1, Ordering::Release);
        }
    }
}

/// The generation walks starting now go by (see [`Start::generation`]).
pub fn generation() -> u32 {
    TABLE.generation.load(Ordering::Relaxed)
}

/// Where walks from one key are kept: its set of [`WAYS`] entries, that set's tags and the
/// key's tag (a byte with its top bit set, so never the 0 of a way without one).
struct Place {
    /// The set's first entry: dangling when the table has no entries, whose tags are then
    /// all 0, so that no lookup is led to a way (and `store` keeps nothing).
    set: *const Entry,
    tags: &'static AtomicU64,
    tag: u8,
}

impl Place {
    /// Way `way` of the set.
    ///
    /// # Safety
    /// The table has entries: `TABLE.entries` is not null (it never goes back to null), as
    /// it is when a way's tag is not 0.
    unsafe fn way(&self, way: usize) -> &'static Entry {
        // SAFETY: way < WAYS and the set lies in the mapping of SETS * WAYS entries (`place`);
        // it is never unmapped, and zeroed memory is a valid entry of atomics.
        unsafe { &*self.set.add(way % WAYS) }
    }
}

/// The place of walks from `start`. No test of the table's address: a lookup without
/// entries finds no way whose tag matches ([`Place::set`]).
#[inline]
fn place(start: &Start) -> Place {
    let base = TABLE.entries.load(Ordering::Relaxed);
    let h =
        (start.sp as u64 ^ (start.ret as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let i = (h >> (64 - SET_BITS)) as usize;
    Place {
        set: base.wrapping_add(i * WAYS),
        tags: &TABLE.tags[i],
        tag: (h >> 32) as u8 | 0x80,
    }
}

/// The ways of a set whose tag in `tags` is `tag`: bit `w` for way `w`. With SSE2 (part of
/// x86-64): the eight bytes compared at once and their results gathered in one instruction,
/// which gives the way's number directly. The borrow trick on a word it replaces took three
/// 64-bit constants and a shift per way: 4 more instructions a lookup on sqlite3
/// (BENCHMARKS.md "Real programs", 2026-11-28 18:03 UTC).
#[inline]
fn candidates(tags: u64, tag: u8) -> u32 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_cvtsi64_si128, _mm_movemask_epi8, _mm_set1_epi8};
    // SAFETY: SSE2 is part of the x86-64 baseline every build of the agent targets (the
    // intrinsics only ask for the feature).
    let mask = unsafe {
        let equal = _mm_cmpeq_epi8(_mm_cvtsi64_si128(tags as i64), _mm_set1_epi8(tag as i8));
        _mm_movemask_epi8(equal)
    };
    // The upper eight bytes are 0 on both sides: only the low eight bits are ways.
    mask as u32 & 0xff
}

/// The [`Entry::key`] of walks of `depth` frames in `generation`.
#[inline]
fn want(generation: u32, depth: usize) -> u64 {
    u64::from(generation) | (depth as u64 & 0xff) << 32
}

/// The stack id of the walk from `start` to `depth` frames, if it is remembered and every
/// word it read still holds what it held. Inlined into the hooks: its call and the registers
/// it saved were a tenth of its cost.
#[inline(always)]
pub fn lookup(start: &Start, depth: usize) -> Option<u32> {
    let place = place(start);
    // The start's generation, not read again: a walk cleared since the start was taken is
    // one cleared just after this lookup.
    let want = want(start.generation, depth);
    let mut ways = candidates(place.tags.load(Ordering::Relaxed), place.tag);
    while ways != 0 {
        let way = ways.trailing_zeros() as usize;
        let stack: u32;
        // A direct call, with the registers `check` really changes: the hooks keep `sp` and
        // what they hold in r10 and r11 across it (an `extern "C"` call went through the
        // GOT, an indirect call, and lost every argument register).
        // SAFETY: `check`'s contract: way `way` of the set is an entry of the table (its tag
        // is not 0, so the table has entries: `Place::set`), and `start` a walk's start on
        // this thread's stack `[sp, hi)` (`unwind::start`); `check` reads memory only, uses
        // no stack but its return address, and changes only the registers named here (and
        // the flags).
        unsafe {
            std::arch::asm!(
                "call {check}",
                check = sym check,
                in("rdi") place.set.wrapping_add(way),
                in("rsi") start.sp,
                inout("rdx") start.ret => _,
                inout("rcx") start.hi => _,
                inout("r8") start.fp => _,
                inout("r9") want => _,
                lateout("eax") stack,
                lateout("xmm0") _,
                lateout("xmm1") _,
                lateout("xmm2") _,
                lateout("xmm3") _,
                options(readonly),
            );
        }
        if stack != 0 {
            return Some(stack);
        }
        ways &= ways - 1;
    }
    None
}

/// The stack id of entry `e` if it holds the walk from the [`Start`] whose fields are `sp`,
/// `ret`, `hi` and `fp` (of the generation and depth `want` gives, as [`want`]), else 0 (no
/// stack id is 0). The seqlock read of the module docs, in this order: the version, the key
/// (sp, ret, hi, generation and depth, and fp if the walk used it), the offsets, the version
/// again; only then the stack at those offsets, [`CHUNK`] words at a time, each chunk's
/// differences or-ed and tested once; then the stack id and the version a third time. On
/// x86-64 loads are not reordered with older loads, so the order of the instructions is the
/// order of the reads (what `fence(Acquire)` gave the Rust version).
///
/// Called from [`lookup`] only, by an `asm!` call that names the registers it changes: `rax`,
/// `rcx`, `rdx`, `r8`, `r9` (its arguments but `e` and `sp`) and `xmm0`–`xmm3`. It leaves
/// `r10` and `r11` alone, so the hook need not save what it holds there around the call.
///
/// Why assembly: this is most of a stack's cost in a hook (1.28 checks a lookup on sqlite3),
/// and LLVM's code for it was 139 instructions for a hit on a 16-word stack: the offsets
/// copied to the stack (8 loads, 8 stores, a `black_box` to keep them there), four registers
/// saved, each word compared and branched on apart, an `Option` built and tested. Here the
/// offsets stay in four SSE registers (`pextrw` takes each out, as `movzx` did from the
/// copy), nothing is saved, a word costs four instructions and a chunk's test one branch:
/// 98 for the same hit (sqlite3 50k rows: 132 → 87 a call on average; BENCHMARKS.md "Real
/// programs", 2026-11-28 17:42 UTC). The offsets of chunks 4 to 7 are loaded (and the version
/// tested again) only for a walk that has them: 96 (18:03 UTC).
///
/// A torn entry: a version that is odd or moved between the reads is a miss, so the offsets
/// used are those of one finished walk from this `sp` under this `hi`, each inside
/// `[sp, hi - 8]`, and the stack is read only there. `store` pads the last chunk with offset 0
/// (the return address, matched by `ret` already) and keeps at least one chunk.
///
/// # Safety
/// `e` points at an entry of the table; `sp` is the entry stack pointer of a hooked call on
/// this thread, 8-aligned, in the thread's stack whose top is `hi`, and the hook still runs
/// on that stack.
#[unsafe(naked)]
unsafe extern "C" fn check(
    e: *const Entry,
    sp: usize,
    ret: usize,
    hi: usize,
    fp: usize,
    want: u64,
) -> u32 {
    // rdi = e, rsi = sp, rdx = ret, rcx = hi, r8 = fp, r9 = want; rax = the version, ecx the
    // chunks left; in a chunk, edx an offset, r9 the or-ed differences, r8 a word.
    // Word `$j` of chunk `$c` (its offset word `4 * $half + $j` of `xmm$xmm`), its difference
    // from the stored value left in `$reg`.
    macro_rules! word {
        ($reg:literal, $xmm:literal, $half:literal, $c:literal, $j:literal) => {
            concat!(
                "pextrw edx, xmm",
                $xmm,
                ", 4*",
                $half,
                "+",
                $j,
                "\n",
                "mov ",
                $reg,
                ", [rsi + rdx*8]\n",
                "xor ",
                $reg,
                ", [rdi + {values} + 32*",
                $c,
                "+8*",
                $j,
                "]\n",
            )
        };
    }
    // Chunk `$c`, whose offsets are the half `$half` of `xmm$xmm`: its four differences or-ed
    // into r9 and tested once.
    macro_rules! chunk {
        ($xmm:literal, $half:literal, $c:literal) => {
            concat!(
                word!("r9", $xmm, $half, $c, "0"),
                word!("r8", $xmm, $half, $c, "1"),
                "or r9, r8\n",
                word!("r8", $xmm, $half, $c, "2"),
                "or r9, r8\n",
                word!("r8", $xmm, $half, $c, "3"),
                "or r9, r8\n",
                "jnz 9f\n",
            )
        };
    }
    // The two chunks whose offsets are in `xmm$xmm`, chunks `$first` and `$second`, with the
    // test of the chunks left between them.
    macro_rules! chunks {
        ($xmm:literal, $first:literal, $second:literal) => {
            concat!(
                chunk!($xmm, "0", $first),
                "dec ecx\n",
                "jz 7f\n",
                chunk!($xmm, "1", $second),
            )
        };
    }
    core::arch::naked_asm!(
        // The key: one or-ed difference, one branch; an odd version is a miss.
        "mov rax, [rdi + {version}]",
        "xor rdx, [rdi + {ret}]",
        "xor rcx, [rdi + {hi}]",
        "xor r9, [rdi + {key}]",
        "or rdx, rcx",
        "or rdx, r9",
        "jnz 9f",
        "cmp rsi, [rdi + {sp}]",
        "jne 9f",
        "test al, 1",
        "jnz 9f",
        "test byte ptr [rdi + {used_fp}], 1",
        "jnz 8f",
        "2:",
        "movzx ecx, byte ptr [rdi + {chunks}]",
        // The offsets of the first four chunks (a 16-frame stack has 13 to 16 reads); those
        // of the others only when there are more, with the version tested again.
        "movdqa xmm0, [rdi + {offsets}]",
        "movdqa xmm1, [rdi + {offsets} + 16]",
        "cmp rax, [rdi + {version}]",
        "jne 9f",
        chunks!("0", "0", "1"),
        "dec ecx",
        "jz 7f",
        chunks!("1", "2", "3"),
        "dec ecx",
        "jz 7f",
        "movdqa xmm2, [rdi + {offsets} + 32]",
        "movdqa xmm3, [rdi + {offsets} + 48]",
        "cmp rax, [rdi + {version}]",
        "jne 9f",
        chunks!("2", "4", "5"),
        "dec ecx",
        "jz 7f",
        chunks!("3", "6", "7"),
        // Every word matched: the stack id, if the version still has not moved.
        "7:",
        "mov edx, [rdi + {stack}]",
        "cmp rax, [rdi + {version}]",
        "jne 9f",
        "mov eax, edx",
        "ret",
        // A walk that used the entry frame pointer needs the same one.
        "8:",
        "cmp r8, [rdi + {fp}]",
        "je 2b",
        "9:",
        "xor eax, eax",
        "ret",
        version = const std::mem::offset_of!(Entry, version),
        sp = const std::mem::offset_of!(Entry, sp),
        ret = const std::mem::offset_of!(Entry, ret),
        hi = const std::mem::offset_of!(Entry, hi),
        key = const std::mem::offset_of!(Entry, key),
        fp = const std::mem::offset_of!(Entry, fp),
        offsets = const std::mem::offset_of!(Entry, offsets),
        stack = const std::mem::offset_of!(Entry, stack),
        chunks = const std::mem::offset_of!(Entry, chunks),
        used_fp = const std::mem::offset_of!(Entry, used_fp),
        values = const std::mem::offset_of!(Entry, values),
    )
}

/// Remembers the walk from `start` to `depth` frames that read `reads` and was interned as
/// `stack` (unless another thread is writing the same entry: then it is not kept).
pub fn store(start: &Start, depth: usize, reads: &Reads, stack: u32) {
    if reads.unkeepable || stack == 0 || start.generation != generation() {
        return;
    }
    if TABLE.entries.load(Ordering::Relaxed).is_null() {
        return;
    }
    let place = place(start);
    // The stack id picks the way: the paths that share a set usually differ in it.
    let way = stack as usize % WAYS;
    // SAFETY: the table has entries (above).
    let e = unsafe { place.way(way) };
    let version = e.version.load(Ordering::Relaxed);
    if version & 1 != 0
        || e.version
            .compare_exchange(version, version + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    fence(Ordering::Release);
    e.sp.store(start.sp as u64, Ordering::Relaxed);
    e.ret.store(start.ret as u64, Ordering::Relaxed);
    e.fp.store(start.fp as u64, Ordering::Relaxed);
    e.hi.store(start.hi as u64, Ordering::Relaxed);
    let kept = reads.needed.count_ones() as usize;
    // At least one chunk, so that `check` need not test for none.
    let chunks = kept.div_ceil(CHUNK).max(1);
    e.key
        .store(want(start.generation, depth), Ordering::Relaxed);
    e.used_fp.store(u8::from(reads.used_fp), Ordering::Relaxed);
    e.chunks.store(chunks as u8, Ordering::Relaxed);
    e.stack.store(stack, Ordering::Relaxed);
    // The rest of the last chunk of four: offset 0, the return address at the entry stack
    // pointer, which every lookup that reads these has matched already (`check`).
    let mut offsets = [0u64; MAX_READS / CHUNK];
    let needed = (0..reads.len).filter(|&i| reads.needed & 1 << i != 0);
    for (k, i) in needed.enumerate() {
        offsets[k / CHUNK] |= u64::from(reads.offsets[i]) << (16 * (k % CHUNK));
        e.values[k].store(reads.values[i], Ordering::Relaxed);
    }
    for k in kept..chunks * CHUNK {
        e.values[k].store(start.ret as u64, Ordering::Relaxed);
    }
    for (packed, &value) in e.offsets.iter().zip(&offsets).take(chunks) {
        packed.store(value, Ordering::Relaxed);
    }
    e.version.store(version + 2, Ordering::Release);
    // The tag last: a lookup led here by it finds the entry finished (or being rewritten,
    // which its check rejects).
    let shift = 8 * way;
    let _ = place
        .tags
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tags| {
            Some((tags & !(0xff << shift)) | (u64::from(place.tag) << shift))
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered walk over a stack laid out in `words`: word 0 is the return address at
    /// entry, words 2 and 5 are read and needed, word 3 read and not needed.
    fn remember(words: &[usize; 8], used_fp: bool) -> Start {
        assert!(init());
        let sp = words.as_ptr() as usize;
        let start = Start {
            sp,
            ret: words[0],
            fp: 0x5000,
            hi: sp + 8 * words.len(),
            generation: generation(),
        };
        let mut reads = Reads::default();
        let i = reads.push(16, words[2]);
        reads.need(i);
        reads.push(24, words[3]);
        let i = reads.push(40, words[5]);
        reads.need(i);
        if used_fp {
            reads.use_fp();
        }
        store(&start, 16, &reads, 77);
        start
    }

    /// The ways a plain loop over the bytes of `tags` finds holding `tag`, as [`candidates`]
    /// gives them (bit `w` for way `w`).
    fn ways_holding(tags: u64, tag: u8) -> u32 {
        (0..WAYS)
            .filter(|way| (tags >> (8 * way)) as u8 == tag)
            .fold(0, |ways, way| ways | 1 << way)
    }

    #[test]
    fn the_candidates_are_the_ways_whose_tag_matches_the_key() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Each byte of one way against every key, the other ways random.
        for tag in 0..=0xffu8 {
            for way in 0..WAYS {
                for byte in 0..=0xffu64 {
                    let tags = next() & !(0xff << (8 * way)) | byte << (8 * way);
                    assert_eq!(
                        candidates(tags, tag),
                        ways_holding(tags, tag),
                        "tags {tags:#018x} tag {tag:#04x}"
                    );
                }
            }
        }
        // Whole words of tags as a set holds them (0 for a way without one, else the top bit
        // set) mixed with the key and its neighbours.
        for _ in 0..200_000 {
            let r = next();
            let tag = (r >> 56) as u8 | 0x80;
            let mut tags = 0;
            for way in 0..WAYS {
                let byte = match (r >> (3 * way)) & 7 {
                    0 => 0,
                    1 | 2 => tag,
                    3 => tag.wrapping_sub(1),
                    4 => tag.wrapping_add(1),
                    5 => tag ^ 0x80,
                    _ => next() as u8 | 0x80,
                };
                tags |= u64::from(byte) << (8 * way);
            }
            assert_eq!(
                candidates(tags, tag),
                ways_holding(tags, tag),
                "tags {tags:#018x} tag {tag:#04x}"
            );
        }
    }

    /// Every count of words a walk may keep (none to [`MAX_READS`]: one to eight chunks, the
    /// last one padded), with and without the frame pointer: a change in any word the walk
    /// depended on is a miss, whichever chunk and place in its chunk it has; a change in a
    /// word it read without depending on it, or never read, is not.
    #[test]
    fn a_change_in_any_word_the_walk_depended_on_is_a_miss() {
        assert!(init());
        const WORDS: usize = 2 * MAX_READS + 8;
        let mut words: [usize; WORDS] = std::array::from_fn(|w| 0x7000_0000 + 8 * w);
        for kept in 0..=MAX_READS {
            for used_fp in [false, true] {
                // A fresh generation: no entry of an earlier round (same key, fewer words)
                // can answer for this one.
                clear();
                std::hint::black_box(&mut words);
                let sp = words.as_ptr() as usize;
                let start = Start {
                    sp,
                    ret: words[0],
                    fp: 0x5000,
                    hi: sp + 8 * WORDS,
                    generation: generation(),
                };
                // Needed reads at the odd words, a read not needed after each while that
                // leaves room for the needed ones (a walk reads at most MAX_READS words).
                let mut reads = Reads::default();
                let mut needed = [false; WORDS];
                for k in 0..kept {
                    let w = 2 * k + 1;
                    let i = reads.push(8 * w, words[w]);
                    reads.need(i);
                    needed[w] = true;
                    if MAX_READS - reads.len > kept - k - 1 {
                        reads.push(8 * (w + 1), words[w + 1]);
                    }
                }
                if used_fp {
                    reads.use_fp();
                }
                let id = 1000 + 2 * kept as u32 + u32::from(used_fp);
                store(&start, 16, &reads, id);
                assert_eq!(lookup(&start, 16), Some(id), "{kept} kept, fp {used_fp}");
                // Word 0 is the return address of the key, `start.ret`.
                for w in 1..WORDS {
                    words[w] ^= 0x1_0000_0000;
                    std::hint::black_box(&mut words);
                    let want = (!needed[w]).then_some(id);
                    assert_eq!(
                        lookup(&start, 16),
                        want,
                        "{kept} kept, fp {used_fp}: word {w} changed"
                    );
                    words[w] ^= 0x1_0000_0000;
                    std::hint::black_box(&mut words);
                }
                assert_eq!(lookup(&start, 16), Some(id), "{kept} kept, fp {used_fp}");
                let other_fp = Start {
                    fp: 0x6000,
                    ..start
                };
                let want = (!used_fp).then_some(id);
                assert_eq!(lookup(&other_fp, 16), want, "{kept} kept, fp {used_fp}");
            }
        }
    }

    #[test]
    fn a_walk_that_read_beyond_the_offsets_range_is_not_kept() {
        let mut reads = Reads::default();
        let i = reads.push(8 * usize::from(u16::MAX), 1);
        reads.need(i);
        assert!(!reads.unkeepable, "the last word an offset can name");
        assert_eq!(reads.push(8 * (usize::from(u16::MAX) + 1), 2), MAX_READS);
        assert!(reads.unkeepable, "512 KiB above the stack pointer");
    }

    /// One test, not three: a `clear` or a store to the same set from a test running in
    /// parallel would make the others' lookups miss.
    #[test]
    fn a_walk_is_reused_only_while_everything_it_depended_on_holds() {
        let mut words = [0x1000usize, 1, 0x2000, 3, 4, 0x3000, 6, 7];
        std::hint::black_box(&mut words);
        let start = remember(&words, false);
        assert_eq!(lookup(&start, 16), Some(77));
        // Another depth is another walk.
        assert_eq!(lookup(&start, 8), None);
        // A word the walk read but did not depend on (a saved rbp no rule used).
        words[3] = 33;
        std::hint::black_box(&mut words);
        assert_eq!(lookup(&start, 16), Some(77));
        // A frame pointer the walk did not use.
        assert_eq!(
            lookup(
                &Start {
                    fp: 0x6000,
                    ..start
                },
                16
            ),
            Some(77)
        );
        // The same walk seen from a thread whose stack ends below word 5.
        assert_eq!(
            lookup(
                &Start {
                    hi: start.sp + 40,
                    ..start
                },
                16
            ),
            None
        );
        // The same walk from a thread whose stack bound grew: a walk cut short at the old
        // bound would go further now.
        assert_eq!(
            lookup(
                &Start {
                    hi: start.hi + 4096,
                    ..start
                },
                16
            ),
            None
        );
        // A return address further up.
        words[5] = 0x3008;
        std::hint::black_box(&mut words);
        assert_eq!(lookup(&start, 16), None);
        words[5] = 0x3000;
        std::hint::black_box(&mut words);
        assert_eq!(lookup(&start, 16), Some(77));
        // A dlclose since (a start taken after it has its generation).
        clear();
        let start = Start {
            generation: generation(),
            ..start
        };
        assert_eq!(lookup(&start, 16), None);
        // A walk that began before a dlclose and ends after it is not kept: it went by rules
        // the dlclose may have dropped.
        let before = Start {
            generation: generation() - 1,
            ..start
        };
        let mut reads = Reads::default();
        let i = reads.push(16, words[2]);
        reads.need(i);
        store(&before, 16, &reads, 78);
        assert_eq!(lookup(&start, 16), None);

        // An entry left odd by a writer that did not finish (a thread of a fork's parent)
        // misses, and a fork child makes it usable again.
        let start = remember(&words, false);
        assert_eq!(lookup(&start, 16), Some(77));
        // SAFETY: the table has entries (`init` in `remember`).
        let e = unsafe { place(&start).way(77 % WAYS) };
        e.version.fetch_add(1, Ordering::Relaxed);
        assert_eq!(lookup(&start, 16), None);
        let start = remember(&words, false);
        assert_eq!(lookup(&start, 16), None, "an odd entry is not written over");
        reset_in_child();
        assert_eq!(e.version.load(Ordering::Relaxed) & 1, 0);
        assert_eq!(
            lookup(&start, 16),
            None,
            "the unfinished walk is not reused"
        );
        let start = remember(&words, false);
        assert_eq!(lookup(&start, 16), Some(77));

        // A walk that used the frame pointer it started with needs the same one.
        let start = remember(&words, true);
        assert_eq!(lookup(&start, 16), Some(77));
        assert_eq!(
            lookup(
                &Start {
                    fp: 0x6000,
                    ..start
                },
                16
            ),
            None
        );

        // Eight paths to the same call site at the same stack depth (one key, so one set),
        // each with its own caller further up: all eight stay remembered.
        let mut paths = [0x1000usize, 1, 0x2000, 3, 4, 0x3000, 6, 7];
        let start = Start {
            sp: paths.as_ptr() as usize,
            ret: paths[0],
            fp: 0x5000,
            hi: paths.as_ptr() as usize + 8 * paths.len(),
            generation: generation(),
        };
        let caller = |path: u32| 0x4000 + 8 * path as usize;
        for path in 0..8u32 {
            paths[5] = caller(path);
            std::hint::black_box(&mut paths);
            let mut reads = Reads::default();
            let i = reads.push(40, paths[5]);
            reads.need(i);
            store(&start, 16, &reads, 100 + path);
        }
        for path in (0..8u32).rev() {
            paths[5] = caller(path);
            std::hint::black_box(&mut paths);
            assert_eq!(lookup(&start, 16), Some(100 + path), "path {path}");
        }

        // Words are compared four at a time: a walk of five reads misses when only its fifth
        // word (in the second group, padded with the return address) changed.
        let mut deep = [0x1000usize, 1, 2, 3, 4, 5, 6, 7];
        let start = Start {
            sp: deep.as_ptr() as usize,
            ret: deep[0],
            fp: 0x5000,
            hi: deep.as_ptr() as usize + 8 * deep.len(),
            generation: generation(),
        };
        let mut reads = Reads::default();
        for (word, &value) in deep.iter().enumerate().take(6).skip(1) {
            let i = reads.push(8 * word, value);
            reads.need(i);
        }
        store(&start, 16, &reads, 200);
        assert_eq!(lookup(&start, 16), Some(200));
        deep[5] = 55;
        std::hint::black_box(&mut deep);
        assert_eq!(lookup(&start, 16), None);
        deep[5] = 5;
        deep[6] = 66;
        std::hint::black_box(&mut deep);
        assert_eq!(lookup(&start, 16), Some(200), "word 6 was not read");
    }
}
