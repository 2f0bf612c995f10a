//! Frame-by-frame unwinding of a stopped thread: the unwinder both captures share
//! (`heaptui_capture::unwind`, over this process's [`AddressSpace`](crate::capture::modules::AddressSpace)), and the registers of the
//! calling thread for a capture of itself.

pub use heaptui_capture::registers::{
    CALLEE_SAVED, R8, R9, R10, R12, R15, RAX, RBP, RBX, RCX, RDI, RDX, RED_ZONE, RIP, RSI, RSP,
};
pub use heaptui_capture::unwind::{
    FrameSort, RawFrame, Registers, THREAD_DESCRIPTOR, Unwinder, Unwound,
};

#[cfg(test)]
use super::modules::AddressSpace;

/// The registers of the calling thread, from `getcontext` (for tests and self-capture).
pub fn current_registers() -> Registers {
    // SAFETY: ucontext_t is plain data; zeroed is a valid initial value for getcontext.
    let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
    // SAFETY: `uc` is a valid, writable ucontext_t.
    unsafe { libc::getcontext(&mut uc) };
    let mut fs_base = 0u64;
    // SAFETY: ARCH_GET_FS writes the thread pointer into the u64 we pass.
    unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut fs_base as *mut u64) };
    Registers::from_gregs(&uc.uc_mcontext.gregs, fs_base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    fn owner(u: &Unwound, addr: u64) -> Option<usize> {
        u.frames
            .iter()
            .position(|f| f.ranges.iter().any(|r| r.contains(&addr)))
    }

    #[inline(never)]
    fn innermost(space: &AddressSpace, marks: &mut Vec<u64>) -> Unwound {
        let local = black_box(0x1234u64);
        marks.push(black_box(&local) as *const u64 as u64);
        let regs = current_registers();
        // The "agent" is this test program, every frame of it: nothing to fold.
        let u = Unwinder::new(space).fold_agent(false).unwind(&regs);
        black_box(&local);
        u
    }

    #[inline(never)]
    fn middle(space: &AddressSpace, marks: &mut Vec<u64>) -> Unwound {
        let local = black_box([7u64; 4]);
        marks.push(black_box(&local) as *const u64 as u64);
        let u = innermost(space, marks);
        black_box(&local);
        u
    }

    #[inline(never)]
    fn outer(space: &AddressSpace, marks: &mut Vec<u64>) -> Unwound {
        let local = black_box([9u64; 8]);
        marks.push(black_box(&local) as *const u64 as u64);
        let u = middle(space, marks);
        black_box(&local);
        u
    }

    #[test]
    fn the_current_thread_unwinds_frame_by_frame() {
        let space = AddressSpace::load();
        let mut marks = Vec::new();
        let u = outer(&space, &mut marks);
        assert!(u.frames.len() >= 5, "{:#x?}", u.frames);
        assert_eq!(u.frames.last().unwrap().sort, FrameSort::Thread);
        // Frames are contiguous, CFA strictly increasing.
        for w in u.frames.windows(2) {
            assert!(w[0].cfa > w[0].sp);
            assert!(w[1].sp >= w[0].cfa || w[1].sort == FrameSort::Thread);
        }
        // The locals of outer, middle and innermost sit in three distinct, ordered frames.
        let owners: Vec<usize> = marks
            .iter()
            .map(|&a| owner(&u, a).expect("owned"))
            .collect();
        assert!(owners[0] > owners[1] && owners[1] > owners[2], "{owners:?}");
        // The walk reaches past the test functions, into the test harness.
        assert!(u.frames.len() > owners[0] + 2);
    }
}
