//! The program's mapped memory, part of the process-wide root `globals` (docs/reference.md
//! §3): every readable, writable mapping that is neither heap-block memory, nor a live
//! thread's stack, TLS or descriptor, nor the agent's own memory — anonymous mmaps of
//! language runtimes and custom allocators (pymalloc arenas, V8 pages), shared memory, the
//! loader's own allocations, and the TLS and descriptors in glibc's cache of finished
//! threads' stacks.
//!
//! Owns: which ranges those are ([`MappedRoots`]: the mappings, as the scanning process sees
//! them, minus [`Exclusions`]) and reading only their pages that are present, so a process
//! that maps gigabytes but touches little costs little: `/proc/self/pagemap` (present or
//! swapped out) for private mappings, `mincore` (resident in the page cache) for shared ones.
//! Anonymous private pages are read directly; file-backed and shared ones with a checked copy
//! (another process may truncate a file or change shared memory while the scan runs).
//!
//! Heap memory is recognised without trusting the program: `[heap]` (the main arena), glibc's
//! other arenas by their `heap_info` header at each 64 MiB boundary, and mmapped chunks by the
//! chunk header of every tracked block (live or held back) big enough to be one.
//!
//! A thread stack glibc allocated that no live thread runs on (glibc's cache of finished
//! threads' stacks, [`Exclusions::add_finished_stacks`]) is a root only from its static TLS
//! up: its TLS and thread descriptor (which points at the thread's TLS vector), not the
//! frames the thread returned from. Why, from evidence:
//! - The agent's own code runs on every program stack and leaves words there, below the
//!   program's frames. In the failing runs of `policy_cancel` (1 in 12 under load, an idle
//!   thread's 32-block list cut in half, its lower half held by `globals`), every word that
//!   held the list lay in the stack of a cancelled thread, 17–21 KiB below its top, among
//!   return addresses of gimli's CFI evaluation: the hooks' unwinder (`hooks::unwind::cfi`),
//!   which runs on the program's stack at a rule-cache miss. The same words sat at the same
//!   depths in every thread's stack, the agent's included. They were not even addresses the
//!   agent held: a small number under the high half of a `0x7fxx…` address (as a 32-bit store
//!   into a slot that held an address leaves), which lands in a block whenever an arena heap
//!   starts at a 4 GiB boundary, as the list's did in both failing runs looked at.
//! - memcheck does not scan them either: it never scans stack memory below a thread's stack
//!   pointer, so a finished thread's popped frames are not roots for it. A thread that leaves
//!   copies of a block's address in a frame it returned from and is joined: memcheck calls
//!   the block definitely lost (with `--run-libc-freeres=no`, the cached stack still mapped),
//!   and it calls the thread's TLS vector possibly lost (its cached descriptor scanned).
//!   So the program's own stale words there are not roots either, and heaptui agrees.
//!
//! Wiping what the agent used instead (a volatile wipe after each hook, an alternate signal
//! stack for the stop handler) would cost the hot path and still leave the program's own
//! stale words, which memcheck does not count.
//!
//! A finished stack is recognised by its shape (`heaptui_capture::stacks`, shared with the
//! capture from outside; no table kept at thread exit, so it covers every stack glibc
//! allocated, whoever started the thread): an anonymous private mapping
//! right above an inaccessible guard, whose top pages are resident and hold a thread
//! descriptor (a word equal to its own address, the same 16 bytes further: `tcbhead_t`'s
//! `tcb` and `self`). A stack without a guard page, or whose top was swapped out, stays a
//! root whole.
//!
//! Runs while the world is stopped or in its copy-on-write child, after the stop: the map it
//! reads is that of the frozen process. Never reads a page the kernel does not call present
//! or mapped, and never reads device mappings.

use std::ops::Range;
use std::sync::atomic::{AtomicI32, Ordering};

use heaptui_capture::stacks;

use super::modules::{AddressSpace, Mapping, parse_maps};
use super::scan::{BlockIndex, Collector, checked_range};
use super::unwind::THREAD_DESCRIPTOR;

const PAGE: u64 = 4096;
/// glibc's `HEAP_MAX_SIZE` on 64-bit targets: every non-main arena heap starts at a multiple
/// of it (`2 * DEFAULT_MMAP_THRESHOLD_MAX`).
const ARENA_HEAP_ALIGN: u64 = 64 << 20;
/// Bit of a chunk's size word: the chunk is a mapping of its own.
const IS_MMAPPED: u64 = 2;

/// Address ranges that are never part of the mapped-memory root, sorted and merged.
#[derive(Default)]
pub struct Exclusions {
    ranges: Vec<Range<u64>>,
}

impl Exclusions {
    pub fn with_capacity(n: usize) -> Exclusions {
        Exclusions {
            ranges: Vec::with_capacity(n),
        }
    }

    pub fn add(&mut self, r: Range<u64>) {
        if r.start < r.end {
            self.ranges.push(r);
        }
    }

    /// A thread's own memory: its stack mapping (the one holding `sp`; up to the end of its
    /// thread descriptor when that lies in the same mapping, so a mapping merged above it
    /// stays a root) and its static TLS and descriptor around the thread pointer `tp`. For a
    /// thread whose stack pointer is unknown (the agent's threads), the mapping holding its
    /// descriptor up to the descriptor's end.
    pub fn add_thread(
        &mut self,
        maps: &[Mapping],
        static_tls: u64,
        sp: Option<u64>,
        tp: Option<u64>,
    ) {
        let descriptor_end = tp.map(|tp| (tp + THREAD_DESCRIPTOR).next_multiple_of(PAGE));
        match (sp.and_then(|sp| mapping_of(maps, sp)), tp) {
            (Some(m), _) => {
                let end = match (tp, descriptor_end) {
                    (Some(tp), Some(end)) if m.start <= tp && tp < m.end => end.min(m.end),
                    _ => m.end,
                };
                self.add(m.start..end);
            }
            (None, Some(tp)) => {
                if let (Some(m), Some(end)) = (mapping_of(maps, tp), descriptor_end) {
                    self.add(m.start..end.min(m.end));
                }
            }
            (None, None) => {}
        }
        if let Some(tp) = tp.filter(|&tp| tp != 0) {
            self.add(tp.saturating_sub(static_tls)..tp + THREAD_DESCRIPTOR);
        }
    }

    /// The stack part of every finished thread's stack that glibc keeps in its cache: from
    /// the mapping's start up to the thread's static TLS. What stays a root of such a mapping
    /// is its TLS and thread descriptor. See the module docs for why.
    ///
    /// A stack whose descriptor is a live thread's (`live`: the thread pointers of the
    /// threads that exist) is left alone: its thread may run on another stack (a fiber
    /// entered with swapcontext, a handler on an alternate signal stack), and the frames
    /// suspended on its own stack are then what it holds. When it runs on its own stack,
    /// [`Exclusions::add_thread`] excludes that stack anyway.
    ///
    /// # Safety
    /// `maps` must describe this process's memory as it is now (read after the stop).
    pub unsafe fn add_finished_stacks(&mut self, maps: &[Mapping], static_tls: u64, live: &[u64]) {
        let view = |m: &Mapping| {
            let extent = stacks::Extent {
                start: m.start,
                end: m.end,
                readable: m.readable,
                writable: m.writable,
            };
            let private_anonymous =
                !m.shared && (m.path.is_empty() || m.path.starts_with("[anon:"));
            (extent, private_anonymous)
        };
        // SAFETY: each mapping is readable as it is now (per the contract; `finished_stacks`
        // asks only of stack-shaped, hence readable, ones).
        let descriptor_of = |m: &Mapping| unsafe { thread_descriptor_at_top(m) };
        for r in stacks::finished_stacks(maps, view, descriptor_of, live, static_tls) {
            self.add(r);
        }
    }

    /// Every module's writable data: the module part of `globals` (the agent's is never
    /// scanned).
    pub fn add_modules(&mut self, space: &AddressSpace) {
        for m in &space.modules {
            for r in &m.writable {
                self.add(r.clone());
            }
        }
    }

    /// glibc's heaps: `[heap]` and every non-main arena heap found in `maps` (its
    /// `heap_info`: arena pointer, previous heap, size, protected size).
    ///
    /// # Safety
    /// `maps` must describe this process's memory as it is now (read after the stop).
    pub unsafe fn add_arena_heaps(&mut self, maps: &[Mapping]) {
        for m in maps.iter().filter(|m| m.readable && m.writable) {
            if m.path == "[heap]" {
                self.add(m.start..m.end);
                continue;
            }
            if !m.path.is_empty() {
                continue;
            }
            let mut at = m.start.next_multiple_of(ARENA_HEAP_ALIGN);
            while at + 4 * 8 <= m.end {
                // SAFETY: four words at the start of a readable mapping (per the contract).
                let [ar_ptr, prev, size, protected] =
                    unsafe { std::ptr::read_volatile(at as *const [u64; 4]) };
                if looks_like_heap_info(ar_ptr, prev, size, protected) {
                    self.add(at..(at + protected).min(m.end));
                }
                at += ARENA_HEAP_ALIGN;
            }
        }
    }

    /// The mapping of each mmapped chunk among `blocks` (`(address, size if known)`; live or
    /// held back, the program's or the agent's): a block whose chunk header says it is a
    /// mapping of its own. A header outside the readable mappings of `maps` (read after the
    /// stop) is skipped: a block a realloc is moving may have lost its mapping already (libc
    /// moved it with mremap), and reading its header would fault. So is a block in `[heap]`:
    /// the main arena's brk memory holds no mapping of its own, and [`Self::add_arena_heaps`]
    /// leaves it out whole (perl's many page-sized blocks there would each cost a cache miss
    /// on their header).
    ///
    /// # Safety
    /// Every address must be that of a block glibc has allocated and not freed, or one a
    /// realloc is moving; `maps` is the address space as it is now.
    pub unsafe fn add_mmapped_chunks(
        &mut self,
        maps: &[Mapping],
        blocks: impl Iterator<Item = (u64, Option<u64>)>,
    ) {
        for (addr, size) in blocks {
            // An mmapped chunk spans whole pages: smaller blocks are never one.
            if size.is_some_and(|size| size + 16 < PAGE) {
                continue;
            }
            let chunk = addr.wrapping_sub(16);
            if !mapping_of(maps, chunk)
                .is_some_and(|m| m.readable && chunk + 16 <= m.end && m.path != "[heap]")
            {
                continue;
            }
            // SAFETY: a live glibc block has its chunk's two header words right below it, and
            // they lie in a readable mapping (checked above).
            let [prev_size, head] = unsafe { std::ptr::read_volatile(chunk as *const [u64; 2]) };
            if head & IS_MMAPPED != 0 {
                // prev_size is the offset of the chunk in its mapping (memalign).
                self.add(chunk.wrapping_sub(prev_size)..chunk + (head & !7));
            }
        }
    }

    fn finish(&mut self) {
        self.ranges.sort_unstable_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(self.ranges.len());
        for r in self.ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        self.ranges = merged;
    }
}

/// The thread descriptor glibc put at the top of `m`, if `m` is a thread stack glibc
/// allocated (`heaptui_capture::stacks`). Only resident pages are read; a mapping whose top
/// pages are not (swapped out, or never touched: no thread ran there) is not recognised and
/// stays a root whole.
///
/// # Safety
/// `m` must be a readable mapping of this process as it is now.
unsafe fn thread_descriptor_at_top(m: &Mapping) -> Option<u64> {
    const PAGES: usize = (stacks::DESCRIPTOR_WINDOW / PAGE) as usize;
    let window = m.end.saturating_sub(stacks::DESCRIPTOR_WINDOW).max(m.start);
    let mut resident = [0u8; PAGES];
    let pages = ((m.end - window) / PAGE) as usize;
    // SAFETY: mincore on whole pages of a mapping, into a buffer of `pages` bytes.
    let failed = unsafe {
        libc::mincore(
            window as *mut libc::c_void,
            pages * PAGE as usize,
            resident.as_mut_ptr(),
        )
    } != 0;
    if failed {
        return None;
    }
    stacks::descriptor_at_top(m.start, m.end, |at| {
        let page = ((at.checked_sub(window)?) / PAGE) as usize;
        (at + 8 <= m.end && resident.get(page)? & 1 != 0).then(|| {
            // SAFETY: an aligned word inside a resident page of a readable mapping (per the
            // contract), below its end.
            unsafe { std::ptr::read_volatile(at as *const u64) }
        })
    })
}

/// The mapping of `maps` (sorted) containing `addr`.
pub fn mapping_of(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    let i = maps.partition_point(|m| m.end <= addr);
    maps.get(i).filter(|m| m.start <= addr)
}

/// Whether the four words at a 64 MiB boundary are a glibc `heap_info`: its arena lives right
/// after the first heap's header (so the arena pointer is 32 or 48 bytes past a boundary,
/// depending on the glibc version), the previous heap is at a boundary too, and the sizes are
/// whole pages within the heap's reservation.
fn looks_like_heap_info(ar_ptr: u64, prev: u64, size: u64, protected: u64) -> bool {
    let offset = ar_ptr % ARENA_HEAP_ALIGN;
    (offset == 32 || offset == 48)
        && prev.is_multiple_of(ARENA_HEAP_ALIGN)
        && size.is_multiple_of(PAGE)
        && protected.is_multiple_of(PAGE)
        && size > 0
        && size <= protected
        && protected <= ARENA_HEAP_ALIGN
}

/// Special mappings that are never read: the kernel's, and devices (reading a device's
/// registers can have effects). Shared memory through `/dev/zero` and `/dev/shm` is memory.
fn never_read(path: &str) -> bool {
    matches!(
        path,
        "[vvar]" | "[vvar_vclock]" | "[vdso]" | "[vsyscall]" | "[uprobes]"
    ) || (path.starts_with("/dev/")
        && !path.starts_with("/dev/zero")
        && !path.starts_with("/dev/shm/"))
}

/// One range of the mapped-memory root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    pub range: Range<u64>,
    /// Anonymous and private: present pages can be read directly.
    pub anonymous_private: bool,
    pub shared: bool,
}

/// The mapped-memory root of the process as it is now.
pub struct MappedRoots {
    pub roots: Vec<Root>,
}

impl MappedRoots {
    /// The readable, writable mappings of `maps` minus `exclude`.
    pub fn new(maps: &[Mapping], mut exclude: Exclusions) -> MappedRoots {
        exclude.finish();
        let holes = &exclude.ranges;
        let mut roots = Vec::new();
        for m in maps
            .iter()
            .filter(|m| m.readable && m.writable && !never_read(&m.path))
        {
            let mut at = m.start;
            let mut i = holes.partition_point(|h| h.end <= m.start);
            while at < m.end {
                let next_hole = holes.get(i).filter(|h| h.start < m.end);
                let end = next_hole.map_or(m.end, |h| h.start.max(at));
                if at < end {
                    roots.push(Root {
                        range: at..end,
                        anonymous_private: !m.shared && m.path.is_empty(),
                        shared: m.shared,
                    });
                }
                match next_hole {
                    Some(h) => {
                        at = at.max(h.end);
                        i += 1;
                    }
                    None => break,
                }
            }
        }
        MappedRoots { roots }
    }

    /// Scans the present pages of every root into the current holder of `c`. Returns how many
    /// bytes were read.
    pub fn scan(&self, index: &BlockIndex, c: &mut Collector) -> u64 {
        let pagemap = Pagemap::open();
        let mut scanned = 0;
        for root in &self.roots {
            for_each_present_run(root, pagemap.as_ref(), |run| {
                scanned += run.end - run.start;
                if root.anonymous_private {
                    // SAFETY: present pages of a private anonymous mapping of the frozen
                    // process (or of its copy-on-write child): readable, and nobody else can
                    // unmap or truncate them.
                    unsafe { c.range(index, run, &[]) };
                } else {
                    checked_range(index, run, c);
                }
            });
        }
        scanned
    }
}

/// Reads this process's memory map now (after the stop: the map of the frozen process).
pub fn current_maps() -> Vec<Mapping> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

/// `/proc/self/pagemap`, read with `pread`.
pub(super) struct Pagemap(i32);

/// The scan child's pagemap, opened by [`open_pagemap_early`] (-1: none).
static EARLY_PAGEMAP: AtomicI32 = AtomicI32::new(-1);

/// Opens this process's pagemap now, for every later [`Pagemap::open`]: the scan child calls
/// it before it makes itself undumpable (`capture::build`). An undumpable process's `/proc`
/// files belong to root, and the pagemap's mode is 0400: a program not run as root could not
/// open its own any more. The open checks access; reads through the descriptor do not.
/// Nothing allocates.
pub(super) fn open_pagemap_early() {
    if let Some(map) = Pagemap::open() {
        EARLY_PAGEMAP.store(map.0, Ordering::Relaxed);
        std::mem::forget(map);
    }
}

impl Pagemap {
    pub(super) fn open() -> Option<Pagemap> {
        let early = EARLY_PAGEMAP.load(Ordering::Relaxed);
        // SAFETY: a NUL-terminated path, or a duplicate of our own open descriptor; the
        // descriptor is closed on drop.
        let fd = unsafe {
            if early >= 0 {
                libc::fcntl(early, libc::F_DUPFD_CLOEXEC, 0)
            } else {
                libc::open(
                    c"/proc/self/pagemap".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            }
        };
        (fd >= 0).then_some(Pagemap(fd))
    }

    /// Fills `out` with the entries of the pages from `first_page` on; false on failure.
    pub(super) fn read(&self, first_page: u64, out: &mut [u64]) -> bool {
        let bytes = std::mem::size_of_val(out);
        // SAFETY: pread into our own buffer of `bytes` bytes.
        let n = unsafe {
            libc::pread(
                self.0,
                out.as_mut_ptr().cast(),
                bytes,
                (first_page * 8) as libc::off_t,
            )
        };
        n == bytes as isize
    }
}

impl Drop for Pagemap {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Page table entry bits of `/proc/pid/pagemap`: present in memory, swapped out.
const PM_PRESENT: u64 = 1 << 63;
const PM_SWAPPED: u64 = 1 << 62;
/// Pages looked up per system call.
const BATCH: usize = 512;

/// Calls `f` with each maximal run of `root.range` whose pages hold data: present or swapped
/// out (pagemap) for a private mapping, resident (mincore) for a shared one or when pagemap
/// cannot be read.
fn for_each_present_run(root: &Root, pagemap: Option<&Pagemap>, mut f: impl FnMut(Range<u64>)) {
    let range = root.range.start.next_multiple_of(8)..root.range.end & !7;
    if range.start >= range.end {
        return;
    }
    let first = range.start / PAGE;
    let last = (range.end - 1) / PAGE;
    let mut run: Option<u64> = None; // first page of the current run
    let mut entries = [0u64; BATCH];
    let mut resident = [0u8; BATCH];
    let mut page = first;
    while page <= last {
        let n = ((last - page + 1) as usize).min(BATCH);
        let from_pagemap = match pagemap.filter(|_| !root.shared) {
            Some(pm) if pm.read(page, &mut entries[..n]) => {
                for (r, e) in resident[..n].iter_mut().zip(&entries[..n]) {
                    *r = u8::from(e & (PM_PRESENT | PM_SWAPPED) != 0);
                }
                true
            }
            _ => false,
        };
        if !from_pagemap {
            // SAFETY: mincore on whole pages of a mapping, into a buffer of n bytes.
            let failed = unsafe {
                libc::mincore(
                    (page * PAGE) as *mut libc::c_void,
                    n * PAGE as usize,
                    resident.as_mut_ptr(),
                )
            } != 0;
            if failed {
                resident[..n].iter_mut().for_each(|r| *r = 0);
            }
        }
        for (k, &r) in resident[..n].iter().enumerate() {
            let p = page + k as u64;
            match (r & 1 != 0, run) {
                (true, None) => run = Some(p),
                (false, Some(start)) => {
                    f((start * PAGE).max(range.start)..(p * PAGE).min(range.end));
                    run = None;
                }
                _ => {}
            }
        }
        page += n as u64;
    }
    if let Some(start) = run {
        f((start * PAGE).max(range.start)..range.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_blocks_header_is_not_read_once_its_mapping_is_gone() {
        // A page-sized "mmapped chunk" whose mapping was unmapped (as mremap leaves the old
        // address of a block a realloc moved): its header must not be read.
        let page = sys_page();
        let chunk = page as u64;
        // SAFETY: our own mapping of one page.
        unsafe { libc::munmap(page, 4096) };
        let maps = current_maps();
        let mut ex = Exclusions::default();
        // SAFETY: the block is "being moved" (its memory gone): the case the check is for.
        unsafe { ex.add_mmapped_chunks(&maps, [(chunk + 16, Some(100_000))].into_iter()) };
        assert!(ex.ranges.is_empty());
    }

    #[test]
    fn a_block_in_the_brk_heap_is_no_mapping_of_its_own() {
        // A page whose first words read as the header of an mmapped chunk of one page.
        let page = sys_page();
        let chunk = page as u64;
        // SAFETY: our own page, writable.
        unsafe { std::ptr::write(page.cast::<[u64; 2]>(), [0, 4096 | IS_MMAPPED]) };
        let block = [(chunk + 16, Some(4080))];
        let listed = |path: &str| {
            let maps = vec![mapping(chunk, chunk + 4096, path)];
            let mut ex = Exclusions::default();
            // SAFETY: the header lies in our own readable page.
            unsafe { ex.add_mmapped_chunks(&maps, block.into_iter()) };
            ex.ranges
        };
        assert_eq!(listed(""), vec![chunk..chunk + 4096]);
        // In `[heap]` its header is not read: the arena's exclusion covers it whole.
        assert!(listed("[heap]").is_empty());
        // SAFETY: our own mapping of one page.
        unsafe { libc::munmap(page, 4096) };
    }

    fn sys_page() -> *mut libc::c_void {
        // SAFETY: an anonymous private mapping of one page.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p
    }

    fn mapping(start: u64, end: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            readable: true,
            writable: true,
            shared: false,
            path: path.into(),
        }
    }

    #[test]
    fn roots_are_writable_mappings_minus_the_exclusions() {
        let maps = vec![
            mapping(0x1000, 0x9000, ""),
            mapping(0x10000, 0x12000, "[heap]"),
            mapping(0x20000, 0x21000, "[vvar]"),
            mapping(0x30000, 0x31000, "/dev/dri/card0"),
            Mapping {
                writable: false,
                ..mapping(0x40000, 0x41000, "/usr/lib/libc.so.6")
            },
            Mapping {
                shared: true,
                ..mapping(0x50000, 0x52000, "/dev/zero (deleted)")
            },
        ];
        let mut ex = Exclusions::default();
        ex.add(0x2000..0x3000);
        ex.add(0x2800..0x4000); // overlapping: merged
        ex.add(0x8000..0xa000); // reaches past the mapping
        ex.add(0x10000..0x12000);
        let roots = MappedRoots::new(&maps, ex);
        let ranges: Vec<(Range<u64>, bool, bool)> = roots
            .roots
            .iter()
            .map(|r| (r.range.clone(), r.anonymous_private, r.shared))
            .collect();
        assert_eq!(
            ranges,
            vec![
                (0x1000..0x2000, true, false),
                (0x4000..0x8000, true, false),
                (0x50000..0x52000, false, true),
            ]
        );
    }

    #[test]
    fn heap_info_is_recognised_by_its_shape() {
        let heap = 0x7f00_0400_0000u64;
        assert!(looks_like_heap_info(heap + 32, 0, 0x21000, 0x21000));
        assert!(looks_like_heap_info(
            heap + 48,
            heap - ARENA_HEAP_ALIGN,
            4096,
            8192
        ));
        assert!(!looks_like_heap_info(heap + 40, 0, 4096, 4096));
        assert!(!looks_like_heap_info(heap + 32, 0x1234, 4096, 4096));
        assert!(!looks_like_heap_info(heap + 32, 0, 4097, 8192));
        assert!(!looks_like_heap_info(heap + 32, 0, 8192, 4096));
        assert!(!looks_like_heap_info(heap + 32, 0, 0, 4096));
        assert!(!looks_like_heap_info(
            heap + 32,
            0,
            4096,
            2 * ARENA_HEAP_ALIGN
        ));
    }

    #[test]
    fn only_present_pages_are_visited() {
        // A fresh private anonymous mapping of 64 pages, three of them touched.
        let len = 64 * PAGE as usize;
        let p = crate::sys::map_anon(len, true).expect("map");
        let base = p as u64;
        for k in [3u64, 4, 40] {
            // SAFETY: inside our own fresh mapping.
            unsafe { *((base + k * PAGE) as *mut u64) = 1 };
        }
        let root = Root {
            range: base + 8..base + len as u64,
            anonymous_private: true,
            shared: false,
        };
        let mut runs = Vec::new();
        for_each_present_run(&root, Pagemap::open().as_ref(), |r| runs.push(r));
        assert_eq!(
            runs,
            vec![
                base + 3 * PAGE..base + 5 * PAGE,
                base + 40 * PAGE..base + 41 * PAGE
            ]
        );
        // mincore (the fallback) finds the same pages resident.
        let mut runs = Vec::new();
        for_each_present_run(&root, None, |r| runs.push(r));
        assert_eq!(
            runs,
            vec![
                base + 3 * PAGE..base + 5 * PAGE,
                base + 40 * PAGE..base + 41 * PAGE
            ]
        );
        // SAFETY: our own mapping, no longer used.
        unsafe { crate::sys::unmap(p, len) };
    }
}
