//! Mappings the program marked `MADV_DONTFORK` or `MADV_WIPEONFORK`, made visible to the
//! copy-on-write scan child (docs/reference.md §3, mapped memory).
//!
//! A fork leaves out every mapping with `VM_DONTCOPY` (`dc` in `/proc/self/smaps`), so the
//! scan child cannot read them. V8 marks all of its heap pages so (node: some 260 mappings, and
//! the only copies of the pointers to the malloc blocks its objects own): 2% of a node heap
//! came out unreachable. Two ways to show them to the child were weighed:
//! - copy their present pages while the world is stopped: a pause and a memory cost that grow
//!   with the mappings (75 MiB of V8 pages for a node holding 100,000 objects: tens of
//!   milliseconds and as much memory again);
//! - lift the flag on exactly those mappings for the fork (`MADV_DOFORK`), and put it back in
//!   the parent right after (`MADV_DONTFORK`), while the world is still stopped: no copy, the
//!   pages are shared copy-on-write like every other page of the process. Chosen.
//!
//! A mapping marked `MADV_WIPEONFORK` (`wf`: random-number generators' and crypto libraries'
//! state, so a child never repeats it) is in the child, but reads as zeros there: a pointer
//! kept only in it was no root for the scan, where memcheck, which scans the process itself,
//! sees it. The same lift applies: `MADV_KEEPONFORK` for the fork, `MADV_WIPEONFORK` back
//! right after, with the same put-back retries. The child only scans and never runs program
//! code, so the state the flag protects is never used twice. A mapping may carry both flags:
//! each is lifted and put back on its own.
//!
//! What lifting must never do, and how it is kept from it:
//! - Change a mapping that did not have the flag: the mappings are read from
//!   `/proc/self/smaps` while the world is stopped, so they are the ones the flag is on at the
//!   fork; the agent's own threads, which run, never mark a mapping. A program thread that
//!   could not be stopped, or that started after the thread list was taken, runs on and
//!   could remap such a range between the read and the put-back: then nothing is lifted
//!   ([`only_quiet_threads`]), and the child misses those mappings as it did before.
//! - Leave the host changed: the flag is put back, on exactly the lifted ranges, in the parent
//!   right after the clone and before the threads run again, whether the clone succeeded or
//!   not, and by [`Lifted`]'s drop on any other way out. A put-back can fail where the lift
//!   did not: marking a mapping that the lift merged with a neighbour splits it again, and a
//!   split fails with `ENOMEM` when the process is at `vm.max_map_count`. Such a range is
//!   tried again at once (the world still stopped), then once more right after the threads
//!   run again ([`put_back_late`]: the program may have unmapped something meanwhile), and
//!   only if the mapping is still there unmarked, rw, as it was; if that fails too, the agent
//!   says so once (the program's forks then copy that mapping, which it meant them not to).
//!   The late try has one window left: a program thread that, in the microseconds between
//!   the resume and the try, unmapped that very range and mapped another there; the agent
//!   would mark the new mapping. It needs a put-back failure first, which needs a process at
//!   its mapping limit. A range whose lift failed
//!   (`madvise` refuses `VM_IO`/`VM_PFNMAP` device mappings, the only ones it refuses here) is
//!   marked again at once, since a lift can fail part way (on a range that is no longer one
//!   mapping) with part of it lifted; it is then not counted as lifted.
//! - Break what the flag is for: it keeps pages under DMA from being shared copy-on-write
//!   (RDMA, device drivers), since a parent's write after a fork would move its page away from
//!   the device. Linux 5.9 and later copy such pinned pages at fork time instead of sharing
//!   them, so the parent keeps the page the device uses; before 5.9, nothing is lifted.
//!   That copy covers only pages pinned the modern way (`FOLL_PIN`); a driver that still
//!   holds pages by a plain reference is not seen by it. So a process with a descriptor open
//!   on a device that does DMA into user memory (RDMA, VFIO, GPUs, accelerators, UIO, DMA
//!   heaps: [`DMA_DEVICES`]) gets nothing lifted: its mappings stay hidden from the child,
//!   as they were before this module. It is checked before the stop; a device opened between
//!   that check and the pause is the one window left.
//!   Device (`io`, `pf`) and hugetlb (`ht`) mappings are left alone, and only readable,
//!   writable mappings are lifted (the only ones the scan reads).
//!
//! `/proc/self/smaps` costs milliseconds for a big process (the kernel walks every page
//! table to count its pages), so it is read inside the pause only when a first read, before
//! the stop, found a mapping to lift: a program that marks none pays no pause for it. A
//! mapping marked between the two reads is not seen this capture (as before this module).
//! The cost for node is in BENCHMARKS.md, "Mapped memory as a root".

use std::ops::Range;

/// smaps `VmFlags` that keep a mapping from being lifted: device memory (`madvise` refuses
/// it anyway), hugetlb pages (a shared copy-on-write huge page can fail to be copied) and
/// droppable mappings (`MAP_DROPPABLE`: glibc's getrandom state; always wiped on fork, the
/// kernel refuses `MADV_KEEPONFORK` on them, and they hold no pointers).
const LEFT_ALONE: [&str; 4] = ["io", "pf", "ht", "dp"];

/// A flag that keeps a mapping's contents from a fork child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkFlag {
    /// `MADV_DONTFORK` (`dc`): the child has no such mapping.
    DontFork,
    /// `MADV_WIPEONFORK` (`wf`): the child's mapping reads as zeros.
    WipeOnFork,
}

impl ForkFlag {
    const ALL: [ForkFlag; 2] = [ForkFlag::DontFork, ForkFlag::WipeOnFork];

    /// Its name among smaps' `VmFlags`.
    fn smaps_name(self) -> &'static str {
        match self {
            ForkFlag::DontFork => "dc",
            ForkFlag::WipeOnFork => "wf",
        }
    }

    /// The advice that lifts it.
    fn lift(self) -> libc::c_int {
        match self {
            ForkFlag::DontFork => libc::MADV_DOFORK,
            ForkFlag::WipeOnFork => libc::MADV_KEEPONFORK,
        }
    }

    /// The advice that puts it back.
    fn mark(self) -> libc::c_int {
        match self {
            ForkFlag::DontFork => libc::MADV_DONTFORK,
            ForkFlag::WipeOnFork => libc::MADV_WIPEONFORK,
        }
    }
}

/// A mapping and a flag it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hidden {
    pub range: Range<u64>,
    pub flag: ForkFlag,
}

/// The readable, writable mappings of `smaps` (the text of `/proc/PID/smaps`) that a fork
/// leaves out (`dc`) or wipes (`wf`) and that may be lifted, one entry per flag, in address
/// order.
pub fn hidden_from_fork(smaps: &str) -> Vec<Hidden> {
    let mut hidden: Vec<Hidden> = ForkFlag::ALL
        .into_iter()
        .flat_map(|flag| {
            mappings_where(smaps, |flags| {
                flags.contains(&flag.smaps_name()) && !LEFT_ALONE.iter().any(|f| flags.contains(f))
            })
            .into_iter()
            .map(move |range| Hidden { range, flag })
        })
        .collect();
    hidden.sort_by_key(|h| h.range.start);
    hidden
}

/// The readable, writable mappings of `smaps` whose `VmFlags` satisfy `keep`, in address
/// order.
fn mappings_where(smaps: &str, keep: impl Fn(&[&str]) -> bool) -> Vec<Range<u64>> {
    let mut found = Vec::new();
    let mut current: Option<Range<u64>> = None;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            let flags: Vec<&str> = flags.split_ascii_whitespace().collect();
            if let Some(r) = current.take()
                && keep(&flags)
            {
                found.push(r);
            }
            continue;
        }
        // A mapping's first line is that of /proc/PID/maps: `start-end perms …`; every other
        // line is `Key: value`.
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if range.ends_with(':') {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        current = perms.starts_with("rw").then_some(start..end);
    }
    found.sort_unstable_by_key(|r| r.start);
    found
}

/// The mappings of this process a fork would leave out or wipe now, that may be lifted; none
/// when the kernel is older than 5.9 (see the module doc) or smaps cannot be read.
pub fn hidden_now() -> Vec<Hidden> {
    if !kernel_copies_pinned_pages() {
        return Vec::new();
    }
    std::fs::read_to_string("/proc/self/smaps")
        .map(|t| hidden_from_fork(&t))
        .unwrap_or_default()
}

/// Device paths under which a descriptor may let a driver DMA into the process's memory.
pub const DMA_DEVICES: [&str; 9] = [
    "/dev/infiniband/",
    "/dev/vfio/",
    "/dev/nvidia",
    "/dev/dri/",
    "/dev/kfd",
    "/dev/accel/",
    "/dev/dma_heap/",
    "/dev/uio",
    "/dev/vhost-",
];

/// Whether a descriptor's target (as `/proc/self/fd/N` links read) is such a device.
pub fn is_dma_device(target: &[u8]) -> bool {
    DMA_DEVICES.iter().any(|d| target.starts_with(d.as_bytes()))
}

/// Whether this process has a descriptor open on a device that may DMA into its memory (see
/// the module doc); true when the descriptors cannot be listed, so that nothing is lifted.
pub fn holds_dma_device() -> bool {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return true;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|t| is_dma_device(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str())))
    })
}

/// Whether the running kernel copies DMA-pinned pages at fork (Linux 5.9 and later).
fn kernel_copies_pinned_pages() -> bool {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid utsname to fill.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    // SAFETY: uname NUL-terminates the release.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    release_at_least(&release.to_string_lossy(), (5, 9))
}

/// Whether a kernel release string (`6.18.44-foo`) is at least `major.minor`.
fn release_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Whether every thread of this process is `quiet` (stopped, the caller or the agent's own:
/// none of them remaps anything until the put-back); false when `/proc/self/task` cannot be
/// read. Checked while the world is stopped, before the smaps read: a thread that runs could
/// remap a lifted range, and only a running program thread can start a new one.
pub fn only_quiet_threads(quiet: impl Fn(u32) -> bool) -> bool {
    let mut all = true;
    crate::sys::for_each_task(|tid| all &= quiet(tid)) && all
}

/// Mappings whose `MADV_DONTFORK` is lifted; putting it back is [`Lifted::restore`], or the
/// drop.
pub struct Lifted {
    ranges: Vec<Hidden>,
}

impl Lifted {
    /// Lifts each flag of `hidden`, whose mappings must carry it now; the ones `madvise`
    /// refuses are marked again (a refusal may come part way through a range) and skipped.
    ///
    /// # Safety
    /// `hidden` must be exactly the mappings of this process that carry those flags now (read
    /// from smaps while no thread that could change them runs), and the caller must put the
    /// flags back before any such thread runs.
    pub unsafe fn lift(hidden: &[Hidden]) -> Lifted {
        let mut lifted = Vec::with_capacity(hidden.len());
        for h in hidden {
            if advise(&h.range, h.flag.lift()) {
                lifted.push(h.clone());
            } else if !advise(&h.range, h.flag.mark()) {
                crate::log::note_problem();
            }
        }
        Lifted { ranges: lifted }
    }

    /// How many flags of mappings are lifted.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Puts every lifted flag back, in the reverse order of the lift (a lift may have merged
    /// a mapping with a neighbour: each put-back splits one off again), a failed one tried
    /// again at once. Returns the ranges still unmarked, for [`put_back_late`] once the
    /// threads run again.
    #[must_use]
    pub fn restore(mut self) -> Vec<Hidden> {
        self.put_back()
    }

    /// In a fork child: its mappings are its own, nothing to put back.
    pub fn forget_in_child(mut self) {
        self.ranges.clear();
    }

    fn put_back(&mut self) -> Vec<Hidden> {
        let mut failed = Vec::new();
        for h in self.ranges.drain(..).rev() {
            if !advise(&h.range, h.flag.mark()) && !advise(&h.range, h.flag.mark()) {
                failed.push(h);
            }
        }
        failed
    }
}

impl Drop for Lifted {
    fn drop(&mut self) {
        put_back_late(self.put_back());
    }
}

/// Tries once more, with the threads running again, to put the flag back on the ranges
/// [`Lifted::restore`] could not: each only while smaps still shows it inside one readable,
/// writable mapping without that flag (see the module doc for the window left). Says once per
/// process when one still fails. Returns whether every range is marked.
pub fn put_back_late(failed: Vec<Hidden>) -> bool {
    if failed.is_empty() {
        return true;
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut left = 0;
    for flag in ForkFlag::ALL {
        let still_lifted = lifted_mappings(&smaps, flag);
        for h in failed.iter().filter(|h| h.flag == flag) {
            let unchanged = still_lifted
                .iter()
                .any(|m| m.start <= h.range.start && h.range.end <= m.end);
            if !(unchanged && advise(&h.range, flag.mark())) {
                left += 1;
            }
        }
    }
    if left > 0 {
        crate::log::note_problem();
        if !SAID_PUT_BACK_FAILED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::agent_log!(
                "could not mark {left} of the program's MADV_DONTFORK or MADV_WIPEONFORK \
                 mapping(s) again after a capture (at the mapping limit, vm.max_map_count?): \
                 its forks will copy them"
            );
        }
    }
    left == 0
}

static SAID_PUT_BACK_FAILED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The readable, writable mappings of `smaps` without `flag`, device, hugetlb and droppable
/// ones left out: what a range with `flag` lifted still looks like.
fn lifted_mappings(smaps: &str, flag: ForkFlag) -> Vec<Range<u64>> {
    mappings_where(smaps, |flags| {
        !flags.contains(&flag.smaps_name()) && !LEFT_ALONE.iter().any(|f| flags.contains(f))
    })
}

/// `madvise(range, advice)`; true when it succeeded.
fn advise(r: &Range<u64>, advice: libc::c_int) -> bool {
    #[cfg(test)]
    if matches!(advice, libc::MADV_DONTFORK | libc::MADV_WIPEONFORK) && tests::refuse_put_back() {
        return false;
    }
    // SAFETY: MADV_DOFORK, MADV_DONTFORK, MADV_KEEPONFORK and MADV_WIPEONFORK change only
    // what a fork gives the child, never the memory's contents or protection in this process.
    unsafe {
        libc::madvise(
            r.start as *mut libc::c_void,
            (r.end - r.start) as usize,
            advice,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// How many put-backs (`MADV_DONTFORK`, `MADV_WIPEONFORK`) of this test thread fail
        /// before they reach the kernel (the mapping limit is hard to reach on purpose in a
        /// test).
        static REFUSE_PUT_BACKS: Cell<u32> = const { Cell::new(0) };
    }

    pub(super) fn refuse_put_back() -> bool {
        REFUSE_PUT_BACKS.with(|n| {
            let left = n.get();
            n.set(left.saturating_sub(1));
            left > 0
        })
    }

    const SMAPS: &str = "\
35508c0000-3550900000 rw-p 00000000 00:00 0 
Size:                256 kB
Rss:                 256 kB
VmFlags: rd wr mr mw me dc nr 
3550900000-3550940000 rw-p 00000000 00:00 0 
Size:                256 kB
VmFlags: rd wr mr mw me nr 
3560000000-3560040000 ---p 00000000 00:00 0 
VmFlags: mr mw me dc nr 
7f0000000000-7f0000001000 rw-s 00000000 00:06 12 /dev/dri/card0
VmFlags: rd wr sh mr mw me ms dc io pf 
7f0000100000-7f0000300000 rw-p 00000000 00:0f 3 /anon_hugepage (deleted)
VmFlags: rd wr mr mw me dc ht 
7f0000400000-7f0000401000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me dc 
7f0000500000-7f0000502000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me ac wf 
7f0000600000-7f0000601000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me dc wf 
7f0000700000-7f0000701000 r--p 00000000 00:00 0 
VmFlags: rd mr mw me wf 
7f0000800000-7f0000801000 rw-p 00000000 00:00 0 
VmFlags: rd wr mr mw me wf dp 
";

    fn hidden(range: Range<u64>, flag: ForkFlag) -> Hidden {
        Hidden { range, flag }
    }

    #[test]
    fn only_plain_readable_writable_mappings_marked_dontfork_or_wipeonfork_are_lifted() {
        use ForkFlag::{DontFork, WipeOnFork};
        assert_eq!(
            hidden_from_fork(SMAPS),
            vec![
                hidden(0x35508c0000..0x3550900000, DontFork),
                hidden(0x7f0000400000..0x7f0000401000, DontFork),
                hidden(0x7f0000500000..0x7f0000502000, WipeOnFork),
                hidden(0x7f0000600000..0x7f0000601000, DontFork),
                hidden(0x7f0000600000..0x7f0000601000, WipeOnFork),
            ]
        );
    }

    #[test]
    fn descriptors_on_dma_capable_devices_are_told_apart() {
        for dma in [
            "/dev/infiniband/uverbs0",
            "/dev/vfio/12",
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/dri/renderD128",
            "/dev/kfd",
            "/dev/accel/accel0",
            "/dev/dma_heap/system",
            "/dev/uio0",
            "/dev/vhost-net",
        ] {
            assert!(is_dma_device(dma.as_bytes()), "{dma}");
        }
        for plain in [
            "/dev/null",
            "/dev/pts/3",
            "/tmp/x",
            "socket:[123]",
            "anon_inode:[eventfd]",
        ] {
            assert!(!is_dma_device(plain.as_bytes()), "{plain}");
        }
        // This test process holds none (the machines that run the suite have no such device
        // open in a test).
        assert!(!holds_dma_device());
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.44-fc-v509", (5, 9)));
        assert!(release_at_least("5.9.0", (5, 9)));
        assert!(release_at_least("5.10", (5, 9)));
        assert!(!release_at_least("5.8.18-generic", (5, 9)));
        assert!(!release_at_least("4.19.0", (5, 9)));
        assert!(!release_at_least("garbage", (5, 9)));
    }

    /// Three fresh pages, only the middle one marked with `flag`: its own mapping, between
    /// two that are not marked. Returns the mapping, its length and the middle page.
    fn three_pages_middle_marked(flag: ForkFlag) -> (*mut u8, usize, Hidden) {
        let len = 3 * 4096usize;
        let p = crate::sys::map_anon(len, false).expect("map");
        let base = p as u64;
        let middle = hidden(base + 4096..base + 2 * 4096, flag);
        assert!(advise(&middle.range, flag.mark()));
        (p, len, middle)
    }

    /// A mapping marked DONTFORK or WIPEONFORK is seen whole by a fork child while lifted,
    /// and marked again, with the same boundaries, after.
    fn a_lifted_mapping_is_copied_by_a_fork_and_marked_again_after(flag: ForkFlag) {
        if !kernel_copies_pinned_pages() {
            return;
        }
        let (p, len, middle) = three_pages_middle_marked(flag);
        // SAFETY: our own fresh mapping.
        unsafe { *(middle.range.start as *mut u64) = 0x5eed };
        let hidden = hidden_now();
        assert!(hidden.contains(&middle), "{hidden:x?}");
        // SAFETY: exactly the mappings marked now; put back below.
        let lifted = unsafe { Lifted::lift(std::slice::from_ref(&middle)) };
        assert_eq!(lifted.len(), 1);
        assert!(!hidden_now().contains(&middle));
        // SAFETY: a fork whose child only reads one word and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the page is in the child (copy-on-write): readable.
            let v = unsafe { std::ptr::read_volatile(middle.range.start as *const u64) };
            // SAFETY: the child ends here.
            unsafe { libc::_exit(if v == 0x5eed { 0 } else { 1 }) };
        }
        assert!(lifted.restore().is_empty());
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{flag:?}: status {status}"
        );
        assert!(hidden_now().contains(&middle));
        // SAFETY: our own mapping, no longer used.
        unsafe { crate::sys::unmap(p, len) };
    }

    #[test]
    fn a_lifted_dontfork_mapping_is_copied_by_a_fork_and_marked_again_after() {
        a_lifted_mapping_is_copied_by_a_fork_and_marked_again_after(ForkFlag::DontFork);
    }

    #[test]
    fn a_lifted_wipeonfork_mapping_is_copied_by_a_fork_and_marked_again_after() {
        a_lifted_mapping_is_copied_by_a_fork_and_marked_again_after(ForkFlag::WipeOnFork);
    }

    /// A lift that fails part way (a range running past its mapping into a hole) marks the
    /// part it had lifted again, and counts nothing as lifted.
    #[test]
    fn a_range_whose_lift_fails_part_way_is_marked_again() {
        if !kernel_copies_pinned_pages() {
            return;
        }
        let len = 3 * 4096usize;
        let p = crate::sys::map_anon(len, false).expect("map");
        let base = p as u64;
        let marked = hidden(base..base + 2 * 4096, ForkFlag::DontFork);
        assert!(advise(&marked.range, libc::MADV_DONTFORK));
        // SAFETY: the last page of our own fresh mapping: a hole after the marked pages.
        unsafe { crate::sys::unmap((base + 2 * 4096) as *mut u8, 4096) };
        let past_the_end = hidden(base..base + 3 * 4096, ForkFlag::DontFork);
        // SAFETY: the range covers only our own mapping (and a hole), put back below.
        let lifted = unsafe { Lifted::lift(std::slice::from_ref(&past_the_end)) };
        assert!(lifted.is_empty());
        assert!(hidden_now().contains(&marked), "{:x?}", hidden_now());
        drop(lifted);
        // SAFETY: our own mapping, no longer used.
        unsafe { crate::sys::unmap(p, 2 * 4096) };
    }

    /// A put-back that fails in the pause and on its immediate retry is done once the
    /// threads run again; one that fails then too is left unmarked and said once.
    fn a_failed_put_back_is_retried_after_the_resume(flag: ForkFlag) {
        if !kernel_copies_pinned_pages() {
            return;
        }
        let (p, len, middle) = three_pages_middle_marked(flag);
        // SAFETY: exactly the mappings marked now; put back below.
        let lifted = unsafe { Lifted::lift(std::slice::from_ref(&middle)) };
        assert_eq!(lifted.len(), 1);
        REFUSE_PUT_BACKS.with(|n| n.set(2));
        let failed = lifted.restore();
        assert_eq!(failed, vec![middle.clone()]);
        assert!(!hidden_now().contains(&middle), "still lifted");
        assert!(put_back_late(failed));
        assert!(hidden_now().contains(&middle), "{:x?}", hidden_now());

        // Refused every time: left unmarked, and said.
        // SAFETY: as above.
        let lifted = unsafe { Lifted::lift(std::slice::from_ref(&middle)) };
        REFUSE_PUT_BACKS.with(|n| n.set(3));
        let failed = lifted.restore();
        assert!(!put_back_late(failed));
        assert!(SAID_PUT_BACK_FAILED.load(std::sync::atomic::Ordering::Relaxed));
        assert!(!hidden_now().contains(&middle));
        // A range no longer mapped is not marked late (the mapping could be another's now).
        assert!(advise(&middle.range, flag.mark()));
        // SAFETY: our own mapping, no longer used.
        unsafe { crate::sys::unmap(p, len) };
        assert!(!put_back_late(vec![middle]));
    }

    #[test]
    fn a_failed_dontfork_put_back_is_retried_after_the_resume() {
        a_failed_put_back_is_retried_after_the_resume(ForkFlag::DontFork);
    }

    #[test]
    fn a_failed_wipeonfork_put_back_is_retried_after_the_resume() {
        a_failed_put_back_is_retried_after_the_resume(ForkFlag::WipeOnFork);
    }

    /// The thread check sees every thread of the process: this one at least.
    #[test]
    fn the_thread_check_sees_the_calling_thread() {
        // SAFETY: gettid has no arguments.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        assert!(!only_quiet_threads(|tid| tid != me));
        assert!(only_quiet_threads(|_| true));
    }
}
