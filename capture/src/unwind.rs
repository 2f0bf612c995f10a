//! Frame-by-frame unwinding of a stopped thread (x86-64), with DWARF CFI from the
//! `.eh_frame_hdr`/`.eh_frame` of each module (gimli), frame pointers as a fallback, and the
//! kernel's signal frames recognised by their `__restore_rt` trampoline.
//!
//! Shared by both captures, over a [`Space`]: the agent's, inside the target, reads its own
//! memory and the tables the loader mapped; the capture from outside reads the copy taken while
//! the process was stopped and the tables of the module files named in its memory map. One
//! unwinder, so that both give a thread the same frames, and each frame the same roots.
//!
//! Owns: turning a thread's saved registers into its frames, each with the stack words it
//! owns (docs/reference.md §3): frame i owns `[SP_i, CFA_i)`, frame 0 also the registers and the
//! 128-byte red zone, and a callee-saved register that a callee spilled on behalf of its callers is
//! given to the frame whose value it is, not to the callee whose range contains the slot. The
//! last frame is the `<thread>` pseudo-frame: the stack above the outermost frame, the static
//! TLS block and the thread descriptor.
//!
//! Two rules keep the roots to what the program holds:
//! - A thread stopped in a system call (its pc at a `syscall` instruction being restarted, or
//!   right after one) gives frame 0 only that call's argument registers — by its number, when
//!   the code, `rax`, ptrace's `orig_rax` or the kernel's record of the call read before the
//!   stop tells it, else all six — and no red zone: the other
//!   caller-saved registers and the stack below its pointer are dead there, and hold whatever
//!   earlier calls left (a pointer that makes a block look held in one capture and not the
//!   next). The rule lives in [`registers`].
//! - The agent's own frames are folded away ([`Unwinder::unwind`]): the innermost run of agent
//!   frames and the library frames they called (a hook in libc's malloc, a blocking-call
//!   wrapper in `nanosleep`, the exit-time capture in `fini`) is dropped and the thread's
//!   registers go to the program frame that called into the agent; an agent frame elsewhere
//!   (the thread trampoline, a signal-handler chain) is dropped alone; the signal frame of one
//!   of the agent's own handlers goes to the frame it interrupted. Their stack words are never
//!   roots; callee-saved values they spilled for program frames still go to those frames.
//!
//! In the agent it runs while the world is stopped: it never calls libc malloc (it allocates
//! with the agent's own allocator), the loader or stdio, and it reads memory only through the
//! [`Space`], which checks it against the memory map read before the stop. It stops cleanly on
//! anything that does not look like a frame.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Range;

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, ParsedEhFrameHdr,
    Register, RegisterRule, UnwindContext, UnwindSection,
};

use crate::FxHasher;
use crate::registers::{self, CALLEE_SAVED, KernelCall, RBP, RED_ZONE, RIP, RSP, Stopped};

/// Bytes of a module's unwind tables: mapped memory in the agent (`'static` while the module
/// stays loaded), a module file's contents read from disk outside.
pub type Bytes<'d> = EndianSlice<'d, LittleEndian>;

/// The unwind tables of a module, parsed from its `.eh_frame_hdr` and `.eh_frame`.
pub struct EhInfo<'d> {
    pub bases: BaseAddresses,
    pub hdr: ParsedEhFrameHdr<Bytes<'d>>,
    pub eh_frame: EhFrame<Bytes<'d>>,
}

impl<'d> EhInfo<'d> {
    /// Parses a module's tables: `hdr` is its `.eh_frame_hdr`, at run-time address
    /// `hdr_addr`; `eh_frame(addr)` gives the bytes from the run-time address `addr` (where the
    /// header says `.eh_frame` starts) to the end of what holds them (its length is not
    /// recorded anywhere the loader keeps: gimli reads only the CIEs and FDEs the header's
    /// table points at); `read_word` reads an indirect pointer; `text` is where the module's
    /// code starts.
    pub fn parse(
        hdr: &'d [u8],
        hdr_addr: u64,
        text: u64,
        eh_frame: impl FnOnce(u64) -> Option<&'d [u8]>,
        read_word: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<EhInfo<'d>> {
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(hdr_addr)
            .set_text(text);
        let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
        let eh_frame_addr = match parsed.eh_frame_ptr() {
            gimli::Pointer::Direct(a) => a,
            gimli::Pointer::Indirect(p) => read_word(p)?,
        };
        let eh_bytes = eh_frame(eh_frame_addr)?;
        let bases = bases.set_eh_frame(eh_frame_addr);
        parsed.table()?;
        Some(EhInfo {
            bases,
            hdr: parsed,
            eh_frame: EhFrame::new(eh_bytes, LittleEndian),
        })
    }
}

/// The module holding a code address, as the unwinder needs it.
pub struct ModuleView<'s> {
    /// Whether this is the agent itself (its frames are folded away).
    pub is_agent: bool,
    /// Whether its frames are system frames (libc, the loader, libstdc++, … or the agent:
    /// [`is_system_name`]).
    pub is_system: bool,
    pub eh: Option<&'s EhInfo<'s>>,
}

/// A mapping of the address space, as the unwinder needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub end: u64,
    pub readable: bool,
}

/// The address space of the process whose threads are unwound, fixed for the whole capture.
pub trait Space {
    /// The mapping containing `addr`.
    fn mapping(&self, addr: u64) -> Option<Mapped>;
    /// The 8-aligned word at `addr`, when it is mapped and readable (from the stopped
    /// process, or the copy of it taken while it was stopped).
    fn read_word(&self, addr: u64) -> Option<u64>;
    /// Fills `buf` with the code at `at`; false unless every byte lies in one readable
    /// mapping of a module's code.
    fn read_code(&self, at: u64, buf: &mut [u8]) -> bool;
    /// The parts of `range` that lie in readable mappings, as 8-aligned ranges.
    fn clamp(&self, range: Range<u64>) -> Vec<Range<u64>>;
    /// The module whose code contains `pc`.
    fn module_for_pc(&self, pc: u64) -> Option<ModuleView<'_>>;
    /// How far below the thread pointer static TLS may reach.
    fn static_tls(&self) -> u64;
}

/// Module basenames that count as `system` (docs/reference.md §4 `kind`).
pub fn is_system_name(name: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "libc.so",
        "ld-linux",
        "ld64.so",
        "libstdc++",
        "libgcc_s",
        "libm.so",
        "libpthread",
        "linux-vdso",
        "libdl.so",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Size of glibc's thread descriptor (`struct pthread`) that the thread pointer points at.
pub const THREAD_DESCRIPTOR: u64 = 2304;

/// A stopped thread's registers in DWARF order (0..=16, 16 being rip), and its thread
/// pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub gpr: [u64; 17],
    pub fs_base: u64,
}

/// Index of each DWARF register in `mcontext_t.gregs` (REG_R8 = 0 … REG_RIP = 16).
const GREG_OF_DWARF: [usize; 17] = [13, 12, 14, 11, 9, 8, 10, 15, 0, 1, 2, 3, 4, 5, 6, 7, 16];

impl Registers {
    /// Reads the general registers out of a `mcontext_t.gregs` array.
    pub fn from_gregs(gregs: &[i64; 23], fs_base: u64) -> Registers {
        let mut gpr = [0u64; 17];
        for (d, &g) in GREG_OF_DWARF.iter().enumerate() {
            gpr[d] = gregs[g] as u64;
        }
        Registers { gpr, fs_base }
    }
}

/// What kind of frame the unwinder found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameSort {
    /// An ordinary call frame.
    Call,
    /// A kernel signal frame: the target's own signal handler was running above it.
    Signal,
    /// The `<thread>` pseudo-frame.
    Thread,
}

/// One frame and the memory it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    pub sort: FrameSort,
    /// Program counter: the interrupted instruction for frame 0, a return address above (but
    /// inside the call instruction for a first frame whose callees were folded away).
    pub pc: u64,
    pub sp: u64,
    pub cfa: u64,
    /// Stack (or TLS) ranges this frame owns, 8-aligned and readable.
    pub ranges: Vec<Range<u64>>,
    /// Words that are roots of this frame but are not read from `ranges`: registers, and
    /// callee-saved values spilled by callees.
    pub values: Vec<u64>,
    /// For a signal frame, the register roots of the context it interrupted (its saved
    /// caller-saved registers, by the system-call rule): the signal frame's own when the
    /// handler is the program's, the interrupted frame's when it is the agent's. Empty once
    /// [`Unwinder::unwind`] returns.
    pub context: Vec<u64>,
}

impl RawFrame {
    /// A placeholder for a frame moved out of a list.
    const EMPTY: RawFrame = RawFrame {
        sort: FrameSort::Thread,
        pc: 0,
        sp: 0,
        cfa: 0,
        ranges: Vec::new(),
        values: Vec::new(),
        context: Vec::new(),
    };
}

/// The result of unwinding one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unwound {
    /// Innermost first; the last one is the `<thread>` pseudo-frame.
    pub frames: Vec<RawFrame>,
    /// Stack slots holding a callee-saved register of another frame; a range scan skips
    /// them (sorted). The frame the value belongs to has it in its `values`.
    pub skip: Vec<u64>,
}

/// A CFI row reduced to what x86-64 unwinding needs, cached by address.
#[derive(Clone, Copy, Debug)]
struct Row {
    cfa_reg: u16,
    cfa_off: i64,
    /// Rules for the callee-saved registers (`CALLEE_SAVED` order) and the return address.
    saved: [Rule; 7],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Same,
    Undefined,
    Offset(i64),
    ValOffset(i64),
    Register(u16),
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Where the current value of a callee-saved register lives while unwinding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    /// In the thread's register set.
    Reg,
    /// Spilled into this stack slot.
    Slot(u64),
    /// Unknown (an unsupported rule): nobody gets it.
    Lost,
}

/// What the kernel says of the system call a stopped thread is in.
#[derive(Clone, Copy)]
enum Kernel<'a> {
    /// ptrace's `orig_rax`: the thread is in this call.
    InCall(u64),
    /// `/proc/PID/task/TID/syscall` read before the stop (or nothing): this call if the
    /// registers show the same one.
    Seen(Option<&'a KernelCall>),
}

/// A DWARF unwinder over a fixed address space. In the agent, create it before the stop (it
/// allocates its cache with the agent's own allocator, which is safe while stopped too).
pub struct Unwinder<'a, S: Space> {
    space: &'a S,
    ctx: Box<UnwindContext<usize>>,
    cache: FastMap<u64, Option<Row>>,
    /// Whether the agent's frames are folded away ([`Unwinder::fold_agent`]).
    fold_agent: bool,
}

/// The most frames one thread may have; deeper stacks end in the `<thread>` pseudo-frame.
const MAX_FRAMES: usize = 4096;

impl<'a, S: Space> Unwinder<'a, S> {
    /// An unwinder that folds the agent's frames away.
    pub fn new(space: &'a S) -> Unwinder<'a, S> {
        let mut cache = FastMap::default();
        cache.reserve(4096);
        Unwinder {
            space,
            ctx: Box::new(UnwindContext::new()),
            cache,
            fold_agent: true,
        }
    }

    /// Whether the agent's frames are folded away: not in the agent's own unit tests, where
    /// the "agent" module is the test program itself, every frame of it.
    pub fn fold_agent(mut self, fold: bool) -> Unwinder<'a, S> {
        self.fold_agent = fold;
        self
    }

    /// The CFI row for `pc` (already adjusted for return addresses), cached.
    fn row(&mut self, pc: u64) -> Option<Row> {
        if let Some(row) = self.cache.get(&pc) {
            return *row;
        }
        let row = self.lookup(pc);
        self.cache.insert(pc, row);
        row
    }

    fn lookup(&mut self, pc: u64) -> Option<Row> {
        let module = self.space.module_for_pc(pc)?;
        let eh = module.eh?;
        let table = eh.hdr.table()?;
        let fde = table
            .fde_for_address(
                &eh.eh_frame,
                &eh.bases,
                pc,
                EhFrame::<Bytes<'_>>::cie_from_offset,
            )
            .ok()?;
        let row = fde
            .unwind_info_for_address(&eh.eh_frame, &eh.bases, &mut self.ctx, pc)
            .ok()?;
        let (cfa_reg, cfa_off) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => (register.0, *offset),
            // PLT stubs and hand-written code use CFA expressions; frame pointers (or the end
            // of the walk) take over there.
            CfaRule::Expression(_) => return None,
        };
        let convert = |r: Option<RegisterRule<usize>>| match r {
            None | Some(RegisterRule::SameValue) => Rule::Same,
            Some(RegisterRule::Offset(n)) => Rule::Offset(n),
            Some(RegisterRule::ValOffset(n)) => Rule::ValOffset(n),
            Some(RegisterRule::Register(Register(x))) => Rule::Register(x),
            Some(_) => Rule::Undefined,
        };
        let mut saved = [Rule::Same; 7];
        for (i, &r) in CALLEE_SAVED.iter().enumerate() {
            saved[i] = convert(row.register(Register(r as u16)));
        }
        saved[6] = match row.register(Register(RIP as u16)) {
            None | Some(RegisterRule::Undefined) => Rule::Undefined,
            other => convert(other),
        };
        Some(Row {
            cfa_reg,
            cfa_off,
            saved,
        })
    }

    /// The `N` bytes of code at `at`, when they lie in a readable mapping of a module's text.
    fn code<const N: usize>(&self, at: u64) -> Option<[u8; N]> {
        let mut buf = [0u8; N];
        self.space.read_code(at, &mut buf).then_some(buf)
    }

    /// Whether `pc` is glibc's `__restore_rt` (`mov $15, %rax; syscall`), the return address
    /// the kernel puts above a signal handler.
    fn is_sigreturn(&self, pc: u64) -> bool {
        const CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
        self.code::<9>(pc) == Some(CODE)
    }

    /// Where the stopped context is and the registers of it that are roots, callee-saved
    /// ones aside (see the module docs). `kernel` is what the kernel says of the system call
    /// the thread is in.
    fn context_values(&self, regs: &Registers, kernel: Kernel<'_>) -> (Vec<u64>, Stopped) {
        let code = |at, buf: &mut [u8]| self.space.read_code(at, buf);
        let at = match kernel {
            Kernel::InCall(nr) => registers::where_stopped(&regs.gpr, Some(nr), code),
            Kernel::Seen(seen) => registers::where_stopped_seen(&regs.gpr, seen, code),
        };
        (registers::context_roots(&regs.gpr, at), at)
    }

    /// Whether a frame runs the agent's own code.
    fn is_agent(&self, f: &RawFrame) -> bool {
        self.fold_agent
            && f.sort == FrameSort::Call
            && self.space.module_for_pc(f.pc).is_some_and(|m| m.is_agent)
    }

    /// Whether a frame runs a system library's code (libc, the loader, libstdc++, … or the
    /// agent itself).
    fn is_system(&self, f: &RawFrame) -> bool {
        f.sort == FrameSort::Call && self.space.module_for_pc(f.pc).is_some_and(|m| m.is_system)
    }

    /// Folds the agent's frames into the program's (see the module docs). `context` is the
    /// stopped context's register roots: they go to the first frame kept.
    fn fold_agent_frames(&self, mut frames: Vec<RawFrame>, context: Vec<u64>) -> Vec<RawFrame> {
        let agent: Vec<bool> = frames.iter().map(|f| self.is_agent(f)).collect();
        if !agent.contains(&true) {
            frames[0].values.extend(context);
            for f in &mut frames {
                let mut context = std::mem::take(&mut f.context);
                f.values.append(&mut context);
            }
            return frames;
        }
        let system: Vec<bool> = frames.iter().map(|f| self.is_system(f)).collect();
        let mut out: Vec<RawFrame> = Vec::with_capacity(frames.len());
        // Roots waiting for the next frame kept: the stopped context's registers, or the
        // saved context of a signal that one of the agent's own handlers took.
        let mut pending_values = context;
        let mut segment_start = true;
        // The next frame kept called into a folded run: its pc is a return address, but it
        // now comes first, where pcs are exact (`symbolize`): it gets its call's address.
        let mut called_folded = false;
        let mut i = 0;
        while i < frames.len() {
            if std::mem::take(&mut segment_start) {
                // The innermost run of agent frames and the system code they called.
                let run = (i..frames.len()).take_while(|&k| agent[k] || system[k]);
                if let Some(last) = run.filter(|&k| agent[k]).last() {
                    i = last + 1;
                    called_folded = out.is_empty();
                    if frames[i].sort == FrameSort::Signal {
                        called_folded = false;
                        // The agent's own handler: the registers were its own, and so is the
                        // signal frame but for the interrupted context's saved registers,
                        // which go to the frame it interrupted.
                        pending_values = std::mem::take(&mut frames[i].context);
                        i += 1;
                        segment_start = true;
                    }
                    continue;
                }
            }
            let mut f = std::mem::replace(&mut frames[i], RawFrame::EMPTY);
            if agent[i] {
                i += 1;
                continue;
            }
            i += 1;
            if std::mem::take(&mut called_folded) && f.sort == FrameSort::Call {
                f.pc -= 1;
            }
            f.values.append(&mut pending_values);
            let mut context = std::mem::take(&mut f.context);
            f.values.append(&mut context);
            segment_start = f.sort == FrameSort::Signal;
            out.push(f);
        }
        out
    }

    /// Unwinds one thread from the registers a signal handler's context saved (the agent).
    pub fn unwind(&mut self, regs: &Registers) -> Unwound {
        self.unwind_with(regs, Kernel::Seen(None))
    }

    /// Unwinds one thread from its saved registers; `kernel_nr` is the system call the
    /// kernel says it is in (ptrace's `orig_rax`, when not -1), None when unknown.
    pub fn unwind_stopped(&mut self, regs: &Registers, kernel_nr: Option<u64>) -> Unwound {
        self.unwind_with(regs, kernel_nr.map_or(Kernel::Seen(None), Kernel::InCall))
    }

    /// Unwinds one thread from the registers a signal handler's context saved (the agent),
    /// given what `/proc/PID/task/TID/syscall` showed of it before the stop: the number of a
    /// call its registers cannot tell, when it is the same call
    /// ([`registers::where_stopped_seen`]).
    pub fn unwind_seen(&mut self, regs: &Registers, seen: Option<&KernelCall>) -> Unwound {
        self.unwind_with(regs, Kernel::Seen(seen))
    }

    fn unwind_with(&mut self, regs: &Registers, kernel: Kernel<'_>) -> Unwound {
        let space = self.space;
        let sp0 = regs.gpr[RSP];
        let stack_end = space.mapping(sp0).map_or(sp0, |m| m.end);
        let mut frames: Vec<RawFrame> = Vec::with_capacity(32);
        let mut skip: Vec<u64> = Vec::new();
        let mut cur = regs.gpr;
        let mut loc = [Loc::Reg; 6];
        let (context, stopped_at) = self.context_values(regs, kernel);
        // Where the context a signal frame saved was interrupted.
        let mut interrupted_at = Stopped::Elsewhere;
        let value_of = |l: Loc| -> Option<u64> {
            match l {
                Loc::Reg => None,
                Loc::Slot(a) => space.read_word(a),
                Loc::Lost => None,
            }
        };
        let mut after_signal = true; // frame 0's pc is exact, like a frame above a signal
        let mut outer = sp0; // the end of the last frame pushed
        while frames.len() < MAX_FRAMES {
            let index = frames.len();
            let pc = cur[RIP];
            let sp = cur[RSP];
            // A context stopped or interrupted in a system call has no live red zone.
            let low = if after_signal {
                registers::frame_low(
                    sp,
                    if index == 0 {
                        stopped_at
                    } else {
                        interrupted_at
                    },
                )
            } else {
                sp
            };
            let mut values = Vec::new();
            let give = |l: Loc, values: &mut Vec<u64>, r: usize| match l {
                Loc::Reg => values.push(regs.gpr[r]),
                other => values.extend(value_of(other)),
            };
            if index > 0 && self.is_sigreturn(pc) {
                // rt_sigframe: after the handler's `ret`, sp points at the ucontext; its
                // mcontext gregs start 40 bytes in.
                let gregs = sp + 40;
                let mut next = cur;
                let mut ok = true;
                for (d, &g) in GREG_OF_DWARF.iter().enumerate() {
                    match space.read_word(gregs + 8 * g as u64) {
                        Some(v) => next[d] = v,
                        None => ok = false,
                    }
                }
                let int_sp = next[RSP];
                if !ok || int_sp <= sp || int_sp > stack_end {
                    break;
                }
                for (i, &r) in CALLEE_SAVED.iter().enumerate() {
                    give(loc[i], &mut values, r);
                    loc[i] = Loc::Slot(gregs + 8 * GREG_OF_DWARF[r] as u64);
                }
                // The saved registers are roots by the same rule as a stopped thread's: read
                // as values, not as words of the frame.
                skip.extend(GREG_OF_DWARF.iter().map(|&g| gregs + 8 * g as u64));
                let interrupted = Registers {
                    gpr: next,
                    fs_base: regs.fs_base,
                };
                let context;
                // A call the interrupted context is in is not ptrace's (the thread is in the
                // handler's); the record seen before the stop is trusted only if it is the
                // same call.
                let seen = match kernel {
                    Kernel::Seen(seen) => seen,
                    Kernel::InCall(_) => None,
                };
                (context, interrupted_at) = self.context_values(&interrupted, Kernel::Seen(seen));
                let end = int_sp.saturating_sub(RED_ZONE).max(sp);
                frames.push(RawFrame {
                    sort: FrameSort::Signal,
                    pc,
                    sp,
                    cfa: end,
                    ranges: space.clamp(low..end),
                    values,
                    context,
                });
                outer = end;
                cur = next;
                after_signal = true;
                continue;
            }
            let lookup_pc = if after_signal { pc } else { pc.wrapping_sub(1) };
            let row = self.row(lookup_pc).or_else(|| {
                // No CFI: trust rbp as a frame pointer when it points up the same stack.
                let rbp = cur[RBP];
                (rbp >= sp && rbp < stack_end && rbp.is_multiple_of(8)).then_some(Row {
                    cfa_reg: RBP as u16,
                    cfa_off: 16,
                    saved: [
                        Rule::Same,
                        Rule::Offset(-16),
                        Rule::Same,
                        Rule::Same,
                        Rule::Same,
                        Rule::Same,
                        Rule::Offset(-8),
                    ],
                })
            });
            let Some(row) = row else { break };
            let Some(&base) = cur.get(row.cfa_reg as usize) else {
                break;
            };
            let cfa = base.wrapping_add(row.cfa_off as u64);
            if cfa <= sp || cfa > stack_end || !cfa.is_multiple_of(8) {
                break;
            }
            let mut next = cur;
            next[RSP] = cfa;
            let mut lost = false;
            for (i, &r) in CALLEE_SAVED.iter().enumerate() {
                match row.saved[i] {
                    Rule::Same => {}
                    Rule::Offset(n) => {
                        // This frame uses r: the value it had is this frame's; its caller's
                        // value now lives in the slot.
                        let slot = cfa.wrapping_add(n as u64);
                        give(loc[i], &mut values, r);
                        match space.read_word(slot) {
                            Some(v) => {
                                next[r] = v;
                                loc[i] = Loc::Slot(slot);
                                skip.push(slot);
                            }
                            None => loc[i] = Loc::Lost,
                        }
                    }
                    Rule::ValOffset(n) => {
                        give(loc[i], &mut values, r);
                        next[r] = cfa.wrapping_add(n as u64);
                        loc[i] = Loc::Lost;
                    }
                    Rule::Register(x) => {
                        give(loc[i], &mut values, r);
                        next[r] = cur.get(x as usize).copied().unwrap_or(0);
                        loc[i] = Loc::Lost;
                    }
                    Rule::Undefined => {
                        give(loc[i], &mut values, r);
                        loc[i] = Loc::Lost;
                    }
                }
            }
            let ra = match row.saved[6] {
                Rule::Offset(n) => space.read_word(cfa.wrapping_add(n as u64)),
                Rule::Register(x) => cur.get(x as usize).copied(),
                Rule::Undefined => {
                    lost = true;
                    None
                }
                _ => None,
            };
            frames.push(RawFrame {
                sort: FrameSort::Call,
                pc,
                sp,
                cfa,
                ranges: space.clamp(low..cfa),
                values,
                context: Vec::new(),
            });
            outer = cfa;
            let Some(ra) = ra.filter(|&ra| !lost && space.module_for_pc(ra).is_some()) else {
                break;
            };
            next[RIP] = ra;
            cur = next;
            after_signal = false;
        }
        // Values still pending belong to the outermost real frame.
        if let Some(last) = frames.last_mut() {
            for (i, &r) in CALLEE_SAVED.iter().enumerate() {
                match loc[i] {
                    Loc::Reg => last.values.push(regs.gpr[r]),
                    l => last.values.extend(value_of(l)),
                }
            }
        } else {
            // Not even one frame: the registers and the red zone (but in a system call) still
            // are the thread's.
            outer = registers::frame_low(sp0, stopped_at);
        }
        let mut thread_ranges = space.clamp(outer..stack_end);
        if regs.fs_base != 0 {
            let tls =
                regs.fs_base.saturating_sub(space.static_tls())..regs.fs_base + THREAD_DESCRIPTOR;
            thread_ranges.extend(space.clamp(tls));
        }
        let thread_values = if frames.is_empty() {
            CALLEE_SAVED.iter().map(|&r| regs.gpr[r]).collect()
        } else {
            Vec::new()
        };
        frames.push(RawFrame {
            sort: FrameSort::Thread,
            pc: 0,
            sp: outer,
            cfa: stack_end,
            ranges: crate::ranges::merge(thread_ranges),
            values: thread_values,
            context: Vec::new(),
        });
        let frames = self.fold_agent_frames(frames, context);
        skip.sort_unstable();
        skip.dedup();
        Unwound { frames, skip }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_modules_are_known_by_name() {
        assert!(is_system_name("libc.so.6") && is_system_name("linux-vdso.so.1"));
        assert!(!is_system_name("myprog") && !is_system_name("libfoo.so"));
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod fold_tests {
    use super::*;

    const PROG: u64 = 0x1000;
    const LIBC: u64 = 0x3000;
    const AGENT: u64 = 0x5000;

    /// Three modules of 4 KiB of code each and nothing else.
    struct Fake;

    impl Space for Fake {
        fn mapping(&self, _: u64) -> Option<Mapped> {
            None
        }
        fn read_word(&self, _: u64) -> Option<u64> {
            None
        }
        fn read_code(&self, _: u64, _: &mut [u8]) -> bool {
            false
        }
        fn clamp(&self, _: Range<u64>) -> Vec<Range<u64>> {
            Vec::new()
        }
        fn module_for_pc(&self, pc: u64) -> Option<ModuleView<'_>> {
            let (is_agent, is_system) = match pc & !0xfff {
                PROG => (false, false),
                LIBC => (false, true),
                AGENT => (true, true),
                _ => return None,
            };
            Some(ModuleView {
                is_agent,
                is_system,
                eh: None,
            })
        }
        fn static_tls(&self) -> u64 {
            0
        }
    }

    /// A frame at `pc` whose own stack word (its range) and own value are `tag`.
    fn frame(sort: FrameSort, pc: u64, tag: u64) -> RawFrame {
        RawFrame {
            sort,
            pc,
            sp: tag,
            cfa: tag + 8,
            ranges: vec![tag..tag + 8],
            values: vec![tag],
            context: Vec::new(),
        }
    }

    fn fold(frames: Vec<RawFrame>, context: Vec<u64>) -> Vec<(FrameSort, u64, Vec<u64>, u64)> {
        Unwinder::new(&Fake)
            .fold_agent_frames(frames, context)
            .into_iter()
            .map(|f| (f.sort, f.pc, f.values, f.sp))
            .collect()
    }

    #[test]
    fn a_hook_and_the_libc_code_it_called_fold_into_the_program_frame() {
        // libc's malloc inside the agent's hook, called by two program frames.
        let got = fold(
            vec![
                frame(FrameSort::Call, LIBC + 0x10, 1),
                frame(FrameSort::Call, AGENT + 0x10, 2),
                frame(FrameSort::Call, AGENT + 0x20, 3),
                frame(FrameSort::Call, PROG + 0x10, 4),
                frame(FrameSort::Call, PROG + 0x20, 5),
                frame(FrameSort::Thread, 0, 6),
            ],
            vec![100, 101],
        );
        assert_eq!(
            got,
            vec![
                // The caller gets the registers and its call's address, not its return's.
                (FrameSort::Call, PROG + 0x0f, vec![4, 100, 101], 4),
                (FrameSort::Call, PROG + 0x20, vec![5], 5),
                (FrameSort::Thread, 0, vec![6], 6),
            ]
        );
    }

    #[test]
    fn the_trampoline_is_dropped_alone_and_program_frames_keep_the_registers() {
        let got = fold(
            vec![
                frame(FrameSort::Call, PROG + 0x10, 1),
                frame(FrameSort::Call, AGENT + 0x10, 2),
                frame(FrameSort::Call, LIBC + 0x10, 3),
                frame(FrameSort::Thread, 0, 4),
            ],
            vec![100],
        );
        assert_eq!(
            got,
            vec![
                (FrameSort::Call, PROG + 0x10, vec![1, 100], 1),
                (FrameSort::Call, LIBC + 0x10, vec![3], 3),
                (FrameSort::Thread, 0, vec![4], 4),
            ]
        );
    }

    #[test]
    fn the_agents_signal_handler_leaves_the_interrupted_registers_to_the_interrupted_frame() {
        let mut signal = frame(FrameSort::Signal, LIBC + 0x40, 3);
        signal.context = vec![200, 201];
        let got = fold(
            vec![
                frame(FrameSort::Call, LIBC + 0x10, 1),
                frame(FrameSort::Call, AGENT + 0x10, 2),
                signal,
                frame(FrameSort::Call, PROG + 0x10, 4),
                frame(FrameSort::Thread, 0, 5),
            ],
            vec![100],
        );
        assert_eq!(
            got,
            vec![
                (FrameSort::Call, PROG + 0x10, vec![4, 200, 201], 4),
                (FrameSort::Thread, 0, vec![5], 5),
            ]
        );
    }

    #[test]
    fn a_program_handler_over_a_blocking_wrapper_keeps_its_signal_frame() {
        let mut signal = frame(FrameSort::Signal, LIBC + 0x40, 2);
        signal.context = vec![200];
        let got = fold(
            vec![
                frame(FrameSort::Call, PROG + 0x30, 1),
                signal,
                frame(FrameSort::Call, LIBC + 0x10, 3),
                frame(FrameSort::Call, AGENT + 0x10, 4),
                frame(FrameSort::Call, PROG + 0x10, 5),
                frame(FrameSort::Thread, 0, 6),
            ],
            vec![100],
        );
        assert_eq!(
            got,
            vec![
                (FrameSort::Call, PROG + 0x30, vec![1, 100], 1),
                (FrameSort::Signal, LIBC + 0x40, vec![2, 200], 2),
                (FrameSort::Call, PROG + 0x10, vec![5], 5),
                (FrameSort::Thread, 0, vec![6], 6),
            ]
        );
    }
}
