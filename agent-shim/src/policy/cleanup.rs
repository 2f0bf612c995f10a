//! Whether a thread's stack has cleanup code that `pthread_cancel` must not unwind through.
//!
//! glibc cancels a thread by a forced unwind. C frames built without exceptions have nothing
//! to run; C++ and Rust frames do (destructors, `catch (...)` blocks that swallow the unwind
//! and abort, Rust `extern "C"` boundaries that abort on unwind). The unwind tables say which:
//! a frame has cleanup code when its FDE has an LSDA, or its CIE names a personality routine.
//! glibc's own frames (libc, ld.so, libpthread) are exempt: their cleanups are the
//! cancellation handlers glibc wrote for exactly this.
//!
//! Owns: stopping one thread for a moment (the capture's stop-the-world, for one tid, with the
//! block table frozen as it requires), unwinding it with the capture's unwinder, and reading
//! each frame's FDE. Must never run on a hook's path or while the world is stopped by anyone
//! else (the frozen table serializes it with captures).

use gimli::{EhFrame, UnwindSection};

use crate::capture::modules::{AddressSpace, Bytes};
use crate::capture::stop::{self, Outcome, Timeouts};
use crate::capture::symbolize::Symbolizer;
use crate::capture::unwind::{FrameSort, Unwinder};
use crate::registry::blocks;

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// No frame has cleanup code.
    None,
    /// The innermost frame that has: its position (0 = innermost), function and module, and
    /// what its unwind entry has.
    Found {
        frame: usize,
        function: String,
        module: String,
        what: &'static str,
    },
    /// The thread ended before it could be stopped.
    Gone,
    /// It could not be stopped (the reason).
    NotStoppable(String),
}

/// Modules whose cleanup code is glibc's own cancellation handling.
fn exempt(module_name: &str) -> bool {
    ["libc.so", "ld-linux", "ld64.so", "libpthread"]
        .iter()
        .any(|p| module_name.starts_with(p))
}

/// Stops thread `tid`, unwinds it and checks every frame's unwind entry.
pub fn check(tid: u32) -> Cleanup {
    let space = AddressSpace::load();
    let mut unwinder = Unwinder::new(&space).fold_agent(!cfg!(test));
    let frozen = blocks::freeze();
    let world = stop::stop(&[tid], Timeouts::default());
    let pcs: Vec<(FrameSort, u64)> = match world.threads.first().map(|(_, o)| o) {
        Some(Outcome::Stopped(regs)) => unwinder
            .unwind(regs)
            .frames
            .iter()
            .map(|f| (f.sort, f.pc))
            .collect(),
        Some(Outcome::NotStoppable(why)) => {
            let why = why.to_string();
            world.resume();
            drop(frozen);
            return Cleanup::NotStoppable(why);
        }
        Some(Outcome::Gone) | None => {
            world.resume();
            drop(frozen);
            return Cleanup::Gone;
        }
    };
    world.resume();
    drop(frozen);
    first_cleanup(&space, &pcs)
}

/// Whether a frame of the agent's own module is one that a cancel may unwind through: the
/// blocking-call wrappers (`signals::blocking`, on the stack of every thread sleeping in
/// `nanosleep`, `poll`… — the usual cancellation points) are built for it: `C-unwind` entry
/// points, no state that must be restored, only cleanup landing pads (an unoptimised build
/// gives them an LSDA all the same).
fn unwind_safe_agent_frame(function: &str) -> bool {
    function.starts_with("heaptui_agent::signals::blocking::")
}

/// The innermost call frame of `pcs` whose FDE has an LSDA or a personality.
fn first_cleanup(space: &AddressSpace, pcs: &[(FrameSort, u64)]) -> Cleanup {
    let mut symbols = Symbolizer::new(space);
    // After a signal frame the next pc is an interrupted instruction, not a return address.
    let mut exact = true;
    for (i, &(sort, pc)) in pcs.iter().enumerate() {
        if sort != FrameSort::Call {
            exact = sort == FrameSort::Signal;
            continue;
        }
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        exact = false;
        let Some(module) = space.module_for_pc(lookup) else {
            continue;
        };
        if exempt(&module.name) {
            continue;
        }
        let Some(what) = fde_cleanup(module.eh.as_ref(), lookup) else {
            continue;
        };
        let s = symbols.symbolize(pc, i == 0);
        if module.is_agent && unwind_safe_agent_frame(&s.function) {
            continue;
        }
        return Cleanup::Found {
            frame: i,
            function: s.function,
            module: s.module,
            what,
        };
    }
    Cleanup::None
}

/// `Some("an LSDA")` / `Some("a personality routine")` when the FDE covering `pc` has one.
fn fde_cleanup(
    eh: Option<&heaptui_capture::unwind::EhInfo<'static>>,
    pc: u64,
) -> Option<&'static str> {
    let eh = eh?;
    let table = eh.hdr.table()?;
    let fde = table
        .fde_for_address(
            &eh.eh_frame,
            &eh.bases,
            pc,
            EhFrame::<Bytes>::cie_from_offset,
        )
        .ok()?;
    if fde.lsda().is_some() {
        Some("an LSDA (C++/Rust cleanup or catch code)")
    } else if fde.personality().is_some() {
        Some("a personality routine (C++/Rust frame)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_is_exempt_and_programs_are_not() {
        assert!(exempt("libc.so.6"));
        assert!(exempt("ld-linux-x86-64.so.2"));
        assert!(!exempt("libstdc++.so.6"));
        assert!(!exempt("target"));
    }

    #[test]
    fn only_the_blocking_wrappers_of_the_agent_are_unwind_safe() {
        assert!(unwind_safe_agent_frame(
            "heaptui_agent::signals::blocking::run"
        ));
        assert!(unwind_safe_agent_frame(
            "heaptui_agent::signals::blocking::nanosleep::{{closure}}"
        ));
        assert!(!unwind_safe_agent_frame("heaptui_agent::hooks::malloc"));
        assert!(!unwind_safe_agent_frame(
            "heaptui_agent::signals::chain::handler"
        ));
    }

    #[test]
    fn rust_frames_of_this_test_have_cleanup_code() {
        // This test's own stack is Rust (the test harness catches panics: landing pads),
        // so unwinding the current thread must find a frame with cleanup code.
        let space = AddressSpace::load();
        let regs = crate::capture::unwind::current_registers();
        let mut unwinder = Unwinder::new(&space).fold_agent(!cfg!(test));
        let pcs: Vec<(FrameSort, u64)> = unwinder
            .unwind(&regs)
            .frames
            .iter()
            .map(|f| (f.sort, f.pc))
            .collect();
        assert!(pcs.len() > 3, "{pcs:x?}");
        match first_cleanup(&space, &pcs) {
            Cleanup::Found { what, .. } => {
                assert!(what.contains("LSDA") || what.contains("personality"))
            }
            other => panic!("no cleanup found on a Rust stack: {other:?}"),
        }
    }
}
