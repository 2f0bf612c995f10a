//! The slow path of the hook unwinder: the unwind rule of one return address, computed from
//! the `.eh_frame_hdr` binary-search table and `.eh_frame` CFI of the module that holds it.
//!
//! The module is found with glibc's `_dl_find_object` (2.35+), which the unwinder of libgcc
//! uses for the same purpose: it takes no lock and never allocates (a lock-free read of a
//! double-buffered array that `dlopen` updates; glibc `elf/dl-find_object.c`), so it is safe
//! inside a malloc hook — unlike `dl_iterate_phdr`, which takes the loader lock. The CFI is
//! evaluated by gimli with a fixed-size [`UnwindContextStorage`] on the stack: gimli
//! documents its "signal safe methods" as free of allocation and locks with such a storage
//! (gimli `read/cfi.rs`, `UnwindContextStorage`).
//!
//! Reading the module's tables is safe for the same reason as in libgcc: the address comes
//! from a return address on the calling thread's own stack, so its module cannot be unloaded
//! while the walk runs (the thread will return into it).
//!
//! Never allocates, locks or prints.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, Register, RegisterRule,
    UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow, constants as dw,
};

use super::Rule;

/// DWARF register numbers (x86-64 psABI) the rules use.
const RSP: u16 = 7;
const RBP: u16 = 6;
const RA: u16 = 16;

/// `struct dl_find_object` of glibc's `<dlfcn.h>` (x86-64).
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 7],
}

type FindObject = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> i32;

/// `_dl_find_object`, or 0 when this glibc lacks it (then only frame pointers are used).
static FIND_OBJECT: AtomicUsize = AtomicUsize::new(0);

/// Resolves `_dl_find_object`. Calls `dlsym`: only from the constructor, never in a hook.
pub fn init() -> bool {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    FIND_OBJECT.store(f as usize, Ordering::Release);
    !f.is_null()
}

/// Whether the CFI slow path is available (glibc ≥ 2.35).
pub fn available() -> bool {
    FIND_OBJECT.load(Ordering::Relaxed) != 0
}

/// gimli's unwind context with room for 24 register rules and 4 remembered states, held on
/// the stack (about 7 KiB): x86-64 CFI describes at most the 17 integer registers.
pub struct Small;

impl UnwindContextStorage<usize> for Small {
    type Rules = [(Register, RegisterRule<usize>); 24];
    type Stack = [UnwindTableRow<usize, Self>; 4];
}

type Bytes = EndianSlice<'static, LittleEndian>;

/// Byte size of a DWARF EH pointer encoding's value (None for `omit`/unknown ones).
fn encoded_size(enc: u8) -> Option<usize> {
    match enc & 0x0f {
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        0x04 | 0x0c => Some(8),
        _ => None,
    }
}

/// The length of the `.eh_frame_hdr` at `hdr`: its 4-byte header, the `.eh_frame` pointer,
/// the FDE count and `count` table rows of two values each.
///
/// # Safety
/// `hdr` must point at a mapped `.eh_frame_hdr` (the loader's PT_GNU_EH_FRAME).
unsafe fn hdr_len(hdr: *const u8) -> Option<usize> {
    // SAFETY: the header's first 4 bytes exist in every .eh_frame_hdr.
    let head = unsafe { std::ptr::read_unaligned(hdr as *const [u8; 4]) };
    if head[0] != 1 || head[2] == dw::DW_EH_PE_omit.0 || head[3] == dw::DW_EH_PE_omit.0 {
        return None;
    }
    let ptr_size = encoded_size(head[1])?;
    let count_size = encoded_size(head[2])?;
    let row = 2 * encoded_size(head[3])?;
    let at = 4 + ptr_size;
    // SAFETY: the FDE count follows the eh_frame pointer inside the header.
    let count = unsafe {
        match count_size {
            2 => u64::from(std::ptr::read_unaligned(hdr.add(at) as *const u16)),
            4 => u64::from(std::ptr::read_unaligned(hdr.add(at) as *const u32)),
            _ => std::ptr::read_unaligned(hdr.add(at) as *const u64),
        }
    };
    let rows = usize::try_from(count).ok()?.checked_mul(row)?;
    (at + count_size).checked_add(rows)
}

/// The rule of the function that `pc` (a return address) returns into.
pub fn lookup(pc: u64) -> Rule {
    let f = FIND_OBJECT.load(Ordering::Acquire);
    if f == 0 {
        return Rule::FramePointer;
    }
    // SAFETY: a non-zero FIND_OBJECT is `_dl_find_object`, whose signature this is.
    let find: FindObject = unsafe { std::mem::transmute::<usize, FindObject>(f) };
    // SAFETY: plain data; zero is a valid value of every field.
    let mut obj: DlFindObject = unsafe { std::mem::zeroed() };
    // SAFETY: `obj` is a writable dl_find_object; the call takes no lock and never allocates.
    if unsafe { find(pc as *mut c_void, &mut obj) } != 0 {
        // Not in any loaded object: not a return address (not cached: a module may be loaded
        // there later, and dlopen does not clear the cache).
        return Rule::Unknown;
    }
    if obj.eh_frame.is_null() {
        return Rule::FramePointer;
    }
    // SAFETY: eh_frame is the module's mapped PT_GNU_EH_FRAME segment, and the module stays
    // loaded during this walk (see the module docs).
    match unsafe { rule_from_tables(pc, obj.eh_frame as *const u8, obj.map_end as u64) } {
        Some(rule) => rule,
        None => Rule::FramePointer,
    }
}

/// # Safety
/// `hdr` is a mapped `.eh_frame_hdr` of a loaded module ending at `map_end`.
unsafe fn rule_from_tables(pc: u64, hdr: *const u8, map_end: u64) -> Option<Rule> {
    // SAFETY: the caller's contract.
    let len = unsafe { hdr_len(hdr) }?;
    // SAFETY: hdr_len computed the header's exact extent from its own fields.
    let hdr_bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(hdr, len) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr as u64);
    let parsed = EhFrameHdr::new(hdr_bytes, LittleEndian)
        .parse(&bases, 8)
        .ok()?;
    let gimli::Pointer::Direct(eh_frame) = parsed.eh_frame_ptr() else {
        return None;
    };
    if eh_frame >= map_end {
        return None;
    }
    // The section's length is not recorded anywhere the loader keeps; gimli reads only the
    // CIE and FDE that the binary-search table points at, all inside `.eh_frame`.
    // SAFETY: `.eh_frame` lies inside the module's mapping, which ends at map_end.
    let eh_bytes: &'static [u8] =
        unsafe { std::slice::from_raw_parts(eh_frame as *const u8, (map_end - eh_frame) as usize) };
    let eh: EhFrame<Bytes> = EhFrame::new(eh_bytes, LittleEndian);
    let bases = bases.set_eh_frame(eh_frame);
    let table = parsed.table()?;
    let mut ctx = UnwindContext::<usize, Small>::new_in();
    // A return address may be one past the function's last byte (a call to a noreturn
    // function): the call instruction itself is what to look up.
    let row = table
        .unwind_info_for_address(
            &eh,
            &bases,
            &mut ctx,
            pc.wrapping_sub(1),
            EhFrame::<Bytes>::cie_from_offset,
        )
        .ok()?;
    reduce(row)
}

/// The compact rule of a CFI row, when it has the shape compilers emit for ordinary x86-64
/// code: CFA = rsp or rbp + a non-negative offset, the return address at CFA − 8, rbp
/// unchanged or saved in a slot below the CFA. Anything else (CFA expressions, realigned
/// stacks) gets None, and the walk falls back to the frame pointer.
fn reduce(row: &UnwindTableRow<usize, Small>) -> Option<Rule> {
    match row.register(Register(RA)) {
        Some(RegisterRule::Undefined) => return Some(Rule::End),
        Some(RegisterRule::Offset(-8)) => {}
        _ => return None,
    }
    let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
        return None;
    };
    let from_rbp = match register.0 {
        RSP => false,
        RBP => true,
        _ => return None,
    };
    let offset = u32::try_from(offset).ok().filter(|&o| o >= 8)?;
    let rbp_slot = match row.register(Register(RBP)) {
        None | Some(RegisterRule::SameValue) => 0,
        Some(RegisterRule::Offset(n)) if n < 0 && n % 8 == 0 => u16::try_from(-n / 8).ok()?,
        _ => return None,
    };
    Some(Rule::Cfa {
        from_rbp,
        offset,
        rbp_slot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_is_small_enough_for_a_hook() {
        assert!(std::mem::size_of::<UnwindContext<usize, Small>>() <= 8 * 1024);
    }

    #[test]
    fn a_function_of_this_binary_has_an_rsp_or_rbp_rule_and_libc_has_one_too() {
        assert!(init(), "glibc has _dl_find_object");
        // A return address inside this test function's caller chain: the test harness's
        // code has CFI like any Rust code.
        let here = a_function_of_this_binary_has_an_rsp_or_rbp_rule_and_libc_has_one_too
            as *const () as u64;
        assert!(matches!(lookup(here + 16), Rule::Cfa { offset, .. } if offset >= 8));
        let libc_fn = libc::getpid as *const () as u64;
        assert!(matches!(lookup(libc_fn + 4), Rule::Cfa { .. }));
        // The null page is in no module.
        assert_eq!(lookup(0x1000), Rule::Unknown);
    }

    #[test]
    fn header_lengths_follow_the_encodings() {
        // version 1, eh_frame_ptr pcrel|sdata4, count udata4, table datarel|sdata4, 3 rows.
        let hdr: [u8; 12] = [1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 3, 0, 0, 0];
        // SAFETY: the 12 bytes hold the whole header the function reads.
        assert_eq!(unsafe { hdr_len(hdr.as_ptr()) }, Some(12 + 3 * 8));
        let bad: [u8; 4] = [2, 0x1b, 0x03, 0x3b];
        // SAFETY: it reads only the version byte block.
        assert_eq!(unsafe { hdr_len(bad.as_ptr()) }, None);
    }
}
