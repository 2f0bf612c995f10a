//! Which registers of a stopped thread are roots (docs/reference.md §3, "Registers of a
//! blocked thread").
//!
//! A thread stopped inside a system call gives only that call's argument registers (and the
//! callee-saved ones, which the caller hands to the frames that own them); the other
//! caller-saved registers and the red zone below its stack pointer are dead there and hold
//! whatever earlier calls left: a pointer that makes a block look held in one capture and
//! not in the next. A thread stopped anywhere else gives all of its registers.
//!
//! One rule for both captures, so they agree: the agent's, inside the target, reads the
//! registers a signal handler's context saved (no system call number there: the call is
//! recognised by the `syscall` instruction at or right before the program counter, and its
//! number by `rax` when the kernel is restarting it, else by the instruction that loaded it),
//! and the capture from outside reads them with ptrace (the kernel's own record of the
//! call's number, `orig_rax`). When neither tells the agent the number (a call cut short with
//! `EINTR` whose number was loaded from another register), the kernel's record of the call
//! read from `/proc/PID/task/TID/syscall` before the stop does, if the registers show the same
//! call ([`KernelCall`]); else all six argument registers count. Owns the system-call argument
//! table and that recognition; it reads no memory itself (the caller passes a reader of code
//! bytes and the `/proc` text).

/// DWARF register numbers (x86-64 psABI): the index of each register in [`Gprs`].
pub const RAX: usize = 0;
pub const RDX: usize = 1;
pub const RCX: usize = 2;
pub const RBX: usize = 3;
pub const RSI: usize = 4;
pub const RDI: usize = 5;
pub const RBP: usize = 6;
pub const RSP: usize = 7;
pub const R8: usize = 8;
pub const R9: usize = 9;
pub const R10: usize = 10;
pub const R11: usize = 11;
pub const R12: usize = 12;
pub const R13: usize = 13;
pub const R14: usize = 14;
pub const R15: usize = 15;
/// The return-address column, which is also where the program counter is kept.
pub const RIP: usize = 16;

/// A stopped thread's general registers in DWARF order, `rip` last.
pub type Gprs = [u64; 17];

/// The callee-saved registers of the SysV x86-64 ABI.
pub const CALLEE_SAVED: [usize; 6] = [RBX, RBP, R12, R13, R14, R15];

/// The argument registers of a Linux x86-64 system call, in order.
pub const SYSCALL_ARGS: [usize; 6] = [RDI, RSI, RDX, R10, R8, R9];

/// Size of the red zone below the stack pointer that leaf code may use without moving it.
pub const RED_ZONE: u64 = 128;

/// The `syscall` instruction.
const SYSCALL: [u8; 2] = [0x0f, 0x05];

/// `restart_syscall`: what the kernel puts in `rax` to resume an interrupted sleep; the
/// registers still hold the sleep's own arguments.
const RESTART_SYSCALL: u64 = 219;
const FUTEX: u64 = 202;
const FUTEX_WAIT: u64 = 0;

/// Where a thread was stopped, as far as its registers go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Inside a system call: its number when known.
    InSyscall(Option<u64>),
    /// Anywhere else.
    Elsewhere,
}

/// How many arguments Linux x86-64 system call `nr` takes (the registers `gpr` tell a futex's
/// operation); all six for an unknown number and the calls left out of the table.
pub fn syscall_arg_count(nr: Option<u64>, gpr: &Gprs) -> usize {
    match nr {
        // sched_yield, pause, getpid, fork, vfork, gettid
        Some(24 | 34 | 39 | 57 | 58 | 186) => 0,
        // close, brk, pipe, dup, exit, fsync, fdatasync, exit_group
        Some(3 | 12 | 22 | 32 | 60 | 74 | 75 | 231) => 1,
        // stat, fstat, lstat, munmap, access, dup2, nanosleep, listen, kill, flock,
        // gettimeofday, rt_sigsuspend, tkill, clock_gettime, clone3
        Some(4 | 5 | 6 | 11 | 21 | 33 | 35 | 50 | 62 | 73 | 96 | 130 | 200 | 228 | 435) => 2,
        // read, write, open, poll, lseek, mprotect, ioctl, readv, writev, madvise, socket,
        // connect, accept, sendmsg, recvmsg, bind, getsockname, getpeername, execve, semop,
        // fcntl, readlink, getdents64, tgkill, getrandom
        Some(
            0 | 1 | 2 | 7 | 8 | 10 | 16 | 19 | 20 | 28 | 41 | 42 | 43 | 46 | 47 | 49 | 51 | 52 | 59
            | 65 | 72 | 89 | 217 | 234 | 318,
        ) => 3,
        // rt_sigaction, rt_sigprocmask, pread64, pwrite64, socketpair, wait4, msgsnd,
        // rt_sigtimedwait, semtimedop, clock_nanosleep, epoll_wait, openat, accept4, sendmmsg
        Some(13 | 14 | 17 | 18 | 53 | 61 | 69 | 128 | 220 | 230 | 232 | 257 | 288 | 307) => 4,
        // select, mremap, setsockopt, getsockopt, clone, msgrcv, io_getevents, waitid, ppoll,
        // preadv, pwritev, recvmmsg, statx
        Some(23 | 25 | 54 | 55 | 56 | 70 | 208 | 247 | 271 | 295 | 296 | 299 | 332) => 5,
        // A plain FUTEX_WAIT (a condition variable, a mutex) takes four.
        Some(FUTEX) if gpr[RSI] & 0x7f == FUTEX_WAIT => 4,
        _ => 6,
    }
}

/// The number a system call instruction at `at` is made with, from the instruction that
/// loaded `eax` before it: `mov $n, %eax` or `mov $n, %rax` right before, `xor %eax, %eax`,
/// or `mov $n, %eax` followed by one short instruction of up to 8 bytes that loads an argument
/// (glibc's cancellable calls: `mov $n, %eax; mov 0x8(%rsp), %edi; syscall`).
fn number_before(at: u64, code: &impl Fn(u64, &mut [u8]) -> bool) -> Option<u64> {
    let read = |back: u64, buf: &mut [u8]| at.checked_sub(back).is_some_and(|a| code(a, buf));
    let imm = |b: &[u8]| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let mut two = [0u8; 2];
    if read(2, &mut two) && two == [0x31, 0xc0] {
        return Some(0);
    }
    let mut seven = [0u8; 7];
    if read(7, &mut seven) && seven[..3] == [0x48, 0xc7, 0xc0] {
        return Some(imm(&seven[3..]));
    }
    let mut five = [0u8; 5];
    for gap in 0..=8 {
        if read(5 + gap, &mut five) && five[0] == 0xb8 {
            let n = imm(&five[1..]);
            // Right before the call, any number; further back, only one that looks like a
            // system call's, so that a 0xb8 byte inside another instruction is not taken.
            if gap == 0 || n < 1024 {
                return Some(n);
            }
        }
    }
    None
}

/// Where a thread with registers `gpr` was stopped. `kernel_nr` is the number of the system
/// call the kernel says the thread is in (ptrace's `orig_rax`, when not -1); None when the
/// registers come from a signal handler's context, which has no such record. `code(at, buf)`
/// fills `buf` with the bytes of executable code at `at`, false when they are not code.
pub fn where_stopped(
    gpr: &Gprs,
    kernel_nr: Option<u64>,
    code: impl Fn(u64, &mut [u8]) -> bool,
) -> Stopped {
    let pc = gpr[RIP];
    let mut insn = [0u8; 2];
    let at = if let Some(nr) = kernel_nr {
        // Stopped by ptrace on the call's way out: `pc` follows the instruction.
        if nr != RESTART_SYSCALL {
            return Stopped::InSyscall(Some(nr));
        }
        pc.checked_sub(2)
    } else if code(pc, &mut insn) && insn == SYSCALL {
        // The kernel is restarting the call (its number back in rax), or the thread is about
        // to make it: the arguments are in place either way.
        if gpr[RAX] != RESTART_SYSCALL {
            return Stopped::InSyscall(Some(gpr[RAX]));
        }
        Some(pc)
    } else if pc
        .checked_sub(2)
        .is_some_and(|at| code(at, &mut insn) && insn == SYSCALL)
    {
        // The call just ended: cut short by the stop, or on its way out.
        pc.checked_sub(2)
    } else {
        return Stopped::Elsewhere;
    };
    Stopped::InSyscall(at.and_then(|at| number_before(at, &code)))
}

/// A system call a thread was blocked in, as `/proc/PID/task/TID/syscall` shows it: the
/// kernel's own record of its number (what ptrace calls `orig_rax`), its six arguments, and
/// the thread's stack pointer and program counter (right after the call's instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCall {
    pub nr: u64,
    pub args: [u64; 6],
    pub sp: u64,
    pub pc: u64,
}

impl KernelCall {
    /// Parses the text of `/proc/PID/task/TID/syscall` (`nr arg1 … arg6 sp pc`); None when
    /// the thread was running or not in a system call.
    pub fn parse(text: &str) -> Option<KernelCall> {
        let mut fields = text.split_ascii_whitespace();
        let nr = fields.next()?.parse::<u64>().ok()?;
        let mut hex = || {
            let f = fields.next()?;
            u64::from_str_radix(f.strip_prefix("0x").unwrap_or(f), 16).ok()
        };
        let mut args = [0u64; 6];
        for a in &mut args {
            *a = hex()?;
        }
        let (sp, pc) = (hex()?, hex()?);
        Some(KernelCall { nr, args, sp, pc })
    }

    /// Whether registers `gpr` are those of a thread still in this call, or cut short in it:
    /// the same stack pointer, the program counter right after the call's instruction, and
    /// the same six arguments (which the kernel leaves as they were).
    pub fn is_call_of(&self, gpr: &Gprs) -> bool {
        self.sp == gpr[RSP]
            && self.pc == gpr[RIP]
            && SYSCALL_ARGS
                .iter()
                .zip(&self.args)
                .all(|(&r, &a)| gpr[r] == a)
    }
}

/// Where a thread with registers `gpr`, taken from a signal handler's context, was stopped:
/// [`where_stopped`], and when the number of the call it is in cannot be told from its
/// registers and code (a call cut short with `EINTR`, its number loaded from another
/// register: `mov %r8d,%eax; syscall`), the number of `seen` (what the kernel showed of the
/// thread before the stop) if that is the same call.
pub fn where_stopped_seen(
    gpr: &Gprs,
    seen: Option<&KernelCall>,
    code: impl Fn(u64, &mut [u8]) -> bool,
) -> Stopped {
    match where_stopped(gpr, None, code) {
        Stopped::InSyscall(None) => Stopped::InSyscall(
            seen.filter(|c| c.is_call_of(gpr) && c.nr != RESTART_SYSCALL)
                .map(|c| c.nr),
        ),
        other => other,
    }
}

/// The register values that are roots of the frame a thread stopped in, the callee-saved
/// ones left out (an unwinder hands those to the frames that own them): a system call's
/// arguments, or every other register (`rsp` and `rip` included) when it was not in one.
pub fn context_roots(gpr: &Gprs, stopped: Stopped) -> Vec<u64> {
    match stopped {
        Stopped::InSyscall(nr) => SYSCALL_ARGS[..syscall_arg_count(nr, gpr)]
            .iter()
            .map(|&r| gpr[r])
            .collect(),
        Stopped::Elsewhere => (0..gpr.len())
            .filter(|r| !CALLEE_SAVED.contains(r))
            .map(|r| gpr[r])
            .collect(),
    }
}

/// Every register root of a thread whose frames are not unwound: [`context_roots`] and the
/// callee-saved registers.
pub fn thread_roots(gpr: &Gprs, stopped: Stopped) -> Vec<u64> {
    let mut roots = context_roots(gpr, stopped);
    roots.extend(CALLEE_SAVED.iter().map(|&r| gpr[r]));
    roots
}

/// The lowest stack address the stopped frame owns: its stack pointer, less the red zone
/// unless it is in a system call (where the red zone is dead).
pub fn frame_low(sp: u64, stopped: Stopped) -> u64 {
    match stopped {
        Stopped::InSyscall(_) => sp,
        Stopped::Elsewhere => sp.saturating_sub(RED_ZONE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x1000;

    /// A code reader over `bytes` laid out at `BASE`.
    fn code_at(bytes: &[u8]) -> impl Fn(u64, &mut [u8]) -> bool + '_ {
        move |at, buf| {
            let Some(start) = at.checked_sub(BASE) else {
                return false;
            };
            let start = start as usize;
            match bytes.get(start..start + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        }
    }

    fn regs(pc: u64, rax: u64) -> Gprs {
        let mut g: Gprs = std::array::from_fn(|r| 0x100 + r as u64);
        g[RIP] = pc;
        g[RAX] = rax;
        g
    }

    #[test]
    fn a_call_is_recognised_at_and_after_its_instruction() {
        // glibc's read: `xor %eax,%eax; syscall; cmp …`.
        let read = [0x31, 0xc0, 0x0f, 0x05, 0x48, 0x3d];
        let code = code_at(&read);
        // Restarted by the kernel: the pc at the instruction, the number back in rax.
        assert_eq!(
            where_stopped(&regs(BASE + 2, 0), None, &code),
            Stopped::InSyscall(Some(0))
        );
        // Cut short with EINTR: the pc after it, the number from the instruction before.
        assert_eq!(
            where_stopped(&regs(BASE + 4, (-4i64) as u64), None, &code),
            Stopped::InSyscall(Some(0))
        );
        assert_eq!(
            where_stopped(&regs(BASE, 0), None, &code),
            Stopped::Elsewhere
        );
        // ptrace says which call, whatever the code.
        assert_eq!(
            where_stopped(&regs(0x9999, 0), Some(232), &code),
            Stopped::InSyscall(Some(232))
        );
    }

    #[test]
    fn the_number_comes_from_the_instruction_that_loaded_it() {
        // `mov $0xe8,%eax; mov 0xc(%rsp),%edi; syscall` (glibc's cancellable epoll_wait).
        let epoll = [0xb8, 0xe8, 0, 0, 0, 0x8b, 0x7c, 0x24, 0x0c, 0x0f, 0x05];
        assert_eq!(
            where_stopped(&regs(BASE + 11, (-4i64) as u64), None, code_at(&epoll)),
            Stopped::InSyscall(Some(232))
        );
        // `mov $0xe6,%rax; syscall`.
        let sleep = [0x48, 0xc7, 0xc0, 0xe6, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(
            where_stopped(&regs(BASE + 9, (-4i64) as u64), None, code_at(&sleep)),
            Stopped::InSyscall(Some(230))
        );
        // A resumed sleep (restart_syscall in rax) is still the sleep.
        assert_eq!(
            where_stopped(&regs(BASE + 7, RESTART_SYSCALL), None, code_at(&sleep)),
            Stopped::InSyscall(Some(230))
        );
        // Loaded from another register: unknown.
        let unknown = [0x44, 0x89, 0xc0, 0x0f, 0x05];
        assert_eq!(
            where_stopped(&regs(BASE + 5, 0), None, code_at(&unknown)),
            Stopped::InSyscall(None)
        );
    }

    #[test]
    fn the_kernels_record_tells_a_call_cut_short_when_it_is_the_same_call() {
        // `mov %r8d,%eax; syscall`, cut short with EINTR: the pc after the instruction.
        let code = [0x44, 0x89, 0xc0, 0x0f, 0x05];
        let mut g = regs(BASE + 5, (-4i64) as u64);
        g[R8] = 35;
        let text = format!(
            "35 {:#x} {:#x} {:#x} {:#x} 0x23 {:#x} {:#x} {:#x}\n",
            g[RDI], g[RSI], g[RDX], g[R10], g[R9], g[RSP], g[RIP]
        );
        let seen = KernelCall::parse(&text).expect("parses");
        assert_eq!(seen.nr, 35);
        assert!(seen.is_call_of(&g));
        assert_eq!(
            where_stopped_seen(&g, Some(&seen), code_at(&code)),
            Stopped::InSyscall(Some(35))
        );
        assert_eq!(
            where_stopped_seen(&g, None, code_at(&code)),
            Stopped::InSyscall(None)
        );
        // Another call (an argument changed, another stack pointer): not trusted.
        for moved in [RDX, RSP] {
            let mut other = g;
            other[moved] += 8;
            assert_eq!(
                where_stopped_seen(&other, Some(&seen), code_at(&code)),
                Stopped::InSyscall(None)
            );
        }
        // A number the registers tell is theirs.
        let read = [0x31, 0xc0, 0x0f, 0x05];
        let g = regs(BASE + 4, (-4i64) as u64);
        let seen = KernelCall {
            nr: 7,
            args: SYSCALL_ARGS.map(|r| g[r]),
            sp: g[RSP],
            pc: g[RIP],
        };
        assert_eq!(
            where_stopped_seen(&g, Some(&seen), code_at(&read)),
            Stopped::InSyscall(Some(0))
        );
        assert_eq!(KernelCall::parse("running\n"), None);
        assert_eq!(KernelCall::parse("-1 0x7ffd0000 0x401000\n"), None);
    }

    #[test]
    fn a_call_gives_only_its_arguments_and_elsewhere_every_register_counts() {
        let g = regs(0, 0);
        assert_eq!(
            context_roots(&g, Stopped::InSyscall(Some(0))),
            vec![g[RDI], g[RSI], g[RDX]]
        );
        assert_eq!(context_roots(&g, Stopped::InSyscall(None)).len(), 6);
        assert_eq!(context_roots(&g, Stopped::Elsewhere).len(), 11);
        let all = thread_roots(&g, Stopped::Elsewhere);
        assert_eq!(all.len(), 17);
        let blocked = thread_roots(&g, Stopped::InSyscall(Some(35)));
        assert_eq!(blocked.len(), 2 + 6);
        assert!(!blocked.contains(&g[R8]) && !blocked.contains(&g[RAX]));
        assert_eq!(frame_low(0x8000, Stopped::InSyscall(None)), 0x8000);
        assert_eq!(frame_low(0x8000, Stopped::Elsewhere), 0x8000 - RED_ZONE);
    }

    #[test]
    fn system_call_argument_counts() {
        let mut g = regs(0, 0);
        assert_eq!(syscall_arg_count(Some(0), &g), 3); // read
        assert_eq!(syscall_arg_count(Some(35), &g), 2); // nanosleep
        assert_eq!(syscall_arg_count(Some(232), &g), 4); // epoll_wait
        g[RSI] = 128; // FUTEX_WAIT_PRIVATE
        assert_eq!(syscall_arg_count(Some(FUTEX), &g), 4);
        g[RSI] = 128 | 9; // FUTEX_WAIT_BITSET_PRIVATE
        assert_eq!(syscall_arg_count(Some(FUTEX), &g), 6);
        assert_eq!(syscall_arg_count(None, &g), 6);
    }
}
