//! glibc's thread stacks, recognised by their shape in either capture's view of memory: the
//! thread descriptor glibc puts at the top of each stack it allocates.
//!
//! Both captures scan a finished thread's stack in glibc's cache only from its static TLS
//! up (docs/reference.md §3): the frames the thread returned from hold only stale words,
//! which memcheck does not scan either. The agent's module `capture::mapped` says why, with
//! the evidence; this module is the part the two captures share.

use std::ops::Range;

/// How far below the end of a thread's stack mapping glibc puts the thread descriptor: at
/// `(end − sizeof(struct pthread))`, rounded down to the static TLS alignment (2304 bytes
/// and 64 in glibc 2.35 to 2.41, unless a module's TLS asks for a larger alignment).
pub const DESCRIPTOR_WINDOW: u64 = 8192;
/// Candidate descriptors are this aligned (glibc's `TCB_ALIGNMENT`).
const DESCRIPTOR_ALIGN: u64 = 64;

/// The thread descriptor at the top of the mapping `start..end`, if it is a thread stack glibc
/// allocated: a word in the last [`DESCRIPTOR_WINDOW`] bytes that holds its own address, as
/// does the word 16 bytes further (`tcbhead_t`'s `tcb` and `self`, both the thread pointer).
/// `read` gives the word at an address, or None where it cannot be read (a page not present,
/// not copied); the highest candidate is tried first.
pub fn descriptor_at_top(
    start: u64,
    end: u64,
    mut read: impl FnMut(u64) -> Option<u64>,
) -> Option<u64> {
    let window = end.saturating_sub(DESCRIPTOR_WINDOW).max(start);
    let mut tp = end.checked_sub(24)? & !(DESCRIPTOR_ALIGN - 1);
    while tp >= window {
        if read(tp) == Some(tp) && read(tp + 16) == Some(tp) {
            return Some(tp);
        }
        tp = tp.checked_sub(DESCRIPTOR_ALIGN)?;
    }
    None
}

/// What the stack recogniser needs of a mapping, from either capture's reading of the maps.
#[derive(Clone, Copy, Debug)]
pub struct Extent {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
}

/// Whether `stack`, right above `guard` in the maps, has the shape of a thread stack glibc
/// allocates: private anonymous memory (`private_anonymous`, which the caller reads from its
/// maps: no file, no name but an `[anon:…]` one such as glibc 2.40's decorated stacks),
/// readable and writable, at least four pages, directly above an inaccessible guard.
pub fn stack_shaped(guard: Extent, stack: Extent, private_anonymous: bool) -> bool {
    guard.end == stack.start
        && !guard.readable
        && !guard.writable
        && stack.readable
        && stack.writable
        && private_anonymous
        && stack.end - stack.start >= 4 * 4096
}

/// The stack part of every finished thread's stack in `maps` (sorted by address), as
/// [`below_tls`] gives it: each mapping that `view` shows [`stack_shaped`] above the one
/// before it, whose thread descriptor `descriptor_of` finds at its top and that is no live
/// thread's (`live`: the thread pointers of the threads that exist; a live thread may run on
/// another stack, a fiber or an alternate signal stack, and the frames suspended on its own
/// are then what it holds).
pub fn finished_stacks<M>(
    maps: &[M],
    view: impl Fn(&M) -> (Extent, bool),
    mut descriptor_of: impl FnMut(&M) -> Option<u64>,
    live: &[u64],
    static_tls: u64,
) -> Vec<Range<u64>> {
    let mut live = live.to_vec();
    live.sort_unstable();
    let mut finished = Vec::new();
    for pair in maps.windows(2) {
        let ((guard, _), (stack, private_anonymous)) = (view(&pair[0]), view(&pair[1]));
        if !stack_shaped(guard, stack, private_anonymous) {
            continue;
        }
        if let Some(tp) = descriptor_of(&pair[1])
            && live.binary_search(&tp).is_err()
        {
            finished.push(below_tls(stack.start, tp, static_tls));
        }
    }
    finished
}

/// The part of a thread stack mapping starting at `start`, whose thread pointer is `tp`, that
/// is not a root once the thread has ended: everything below its static TLS (`static_tls`
/// bytes below `tp` at most).
pub fn below_tls(start: u64, tp: u64, static_tls: u64) -> Range<u64> {
    start..tp.saturating_sub(static_tls).max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_private_anonymous_memory_of_four_pages_or_more_right_above_a_guard() {
        let e = |start, end, readable, writable| Extent {
            start,
            end,
            readable,
            writable,
        };
        let guard = e(0x1000, 0x2000, false, false);
        let stack = e(0x2000, 0x6000, true, true);
        assert!(stack_shaped(guard, stack, true));
        assert!(
            !stack_shaped(guard, stack, false),
            "a file or shared mapping"
        );
        assert!(
            !stack_shaped(guard, e(0x2000, 0x5000, true, true), true),
            "three pages"
        );
        assert!(
            !stack_shaped(e(0x1000, 0x2000, true, false), stack, true),
            "a readable guard"
        );
        assert!(
            !stack_shaped(e(0x0, 0x1000, false, false), stack, true),
            "a gap above the guard"
        );
        assert!(
            !stack_shaped(guard, e(0x2000, 0x6000, true, false), true),
            "read-only"
        );
    }

    #[test]
    fn only_stacks_of_threads_that_are_gone_are_cut_below_their_tls() {
        let e = |start, end, open| Extent {
            start,
            end,
            readable: open,
            writable: open,
        };
        // guard, stack of a finished thread, guard, stack of a live thread, a data mapping.
        let maps = [
            e(0x1000, 0x2000, false),
            e(0x2000, 0x8000, true),
            e(0x8000, 0x9000, false),
            e(0x9000, 0xf000, true),
            e(0xf000, 0x1_0000, true),
        ];
        let tp = |m: &Extent| Some(m.end - 0x800);
        let finished = finished_stacks(&maps, |m| (*m, true), tp, &[0xe800], 0x100);
        assert_eq!(finished, vec![0x2000..0x7700]);
        // No descriptor found: scanned whole.
        assert!(finished_stacks(&maps, |m| (*m, true), |_| None, &[], 0x100).is_empty());
    }

    #[test]
    fn the_descriptor_is_the_word_that_holds_its_own_address_twice() {
        let (start, end) = (0x10_0000u64, 0x20_0000u64);
        let tp = (end - 2304) & !63;
        let read = |a: u64| Some(if a == tp || a == tp + 16 { tp } else { 0 });
        assert_eq!(descriptor_at_top(start, end, read), Some(tp));
        assert_eq!(below_tls(start, tp, 0x1000), start..tp - 0x1000);
        // One of the two words only: not a descriptor.
        let half = |a: u64| Some(if a == tp { tp } else { 0 });
        assert_eq!(descriptor_at_top(start, end, half), None);
        // Below the window: not looked at.
        let low = end - DESCRIPTOR_WINDOW - 64;
        let too_low = |a: u64| Some(if a == low || a == low + 16 { low } else { 0 });
        assert_eq!(descriptor_at_top(start, end, too_low), None);
        // Unreadable words are no descriptor.
        assert_eq!(descriptor_at_top(start, end, |_| None), None);
        // A static TLS larger than the stack leaves nothing below it.
        assert_eq!(below_tls(start, start + 64, 4096), start..start);
    }
}
