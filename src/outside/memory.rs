//! Copies of the target's memory, read with `process_vm_readv`, and reads from those copies.
//!
//! Owns [`Image`]: a set of disjoint address ranges of the target with their bytes as they
//! were when copied, held in one buffer whose pages were backed before the stop
//! ([`prepared`]), so that the copy is the pause, not heaptui's page faults; and the one way
//! the outside capture reads target memory. Everything after
//! the resume (the arena walk, unwinding, the scan) reads the image, never the live process, so
//! what it finds is the process as it was while stopped.
//!
//! Never writes to the target. A page the kernel refuses to copy (unmapped since the map was
//! read, a guard page) is left out of the image, not an error: reads of it answer `None`.

use std::io::IoSliceMut;
use std::ops::Range;

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;

const PAGE: u64 = 4096;

/// At most this many remote pieces per `process_vm_readv` call (the kernel's `UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

/// One copied range: `len` bytes of the target from `start`, at `offset` in the image's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    offset: usize,
    len: usize,
}

impl Segment {
    fn end(&self) -> u64 {
        self.start + self.len as u64
    }
}

/// Copied target memory, sorted by address, disjoint, in one buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    data: Vec<u8>,
    segments: Vec<Segment>,
}

impl Image {
    /// An image of the given bytes (tests).
    #[cfg(test)]
    pub fn from_parts(mut parts: Vec<(u64, Vec<u8>)>) -> Image {
        parts.sort_by_key(|(start, _)| *start);
        let mut image = Image::default();
        for (start, bytes) in parts {
            image.segments.push(Segment {
                start,
                offset: image.data.len(),
                len: bytes.len(),
            });
            image.data.extend_from_slice(&bytes);
        }
        image
    }

    /// Total bytes copied.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| s.len as u64).sum()
    }

    fn segment(&self, addr: u64) -> Option<&Segment> {
        let i = self.segments.partition_point(|s| s.end() <= addr);
        self.segments.get(i).filter(|s| s.start <= addr)
    }

    fn slice(&self, s: &Segment, range: Range<u64>) -> &[u8] {
        let from = s.offset + (range.start - s.start) as usize;
        &self.data[from..from + (range.end - range.start) as usize]
    }

    /// The copied bytes of `range`, when the whole range was copied in one piece.
    pub fn bytes(&self, range: Range<u64>) -> Option<&[u8]> {
        let s = self.segment(range.start)?;
        if range.end > s.end() || range.end < range.start {
            return None;
        }
        Some(self.slice(s, range))
    }

    /// The little-endian word at `addr` (any alignment), if copied.
    pub fn word(&self, addr: u64) -> Option<u64> {
        let b = self.bytes(addr..addr.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The 4-byte value at `addr`, if copied.
    pub fn u32(&self, addr: u64) -> Option<u32> {
        let b = self.bytes(addr..addr.checked_add(4)?)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }

    /// The parts of `range` that were copied, as `(start, bytes)` pieces in address order.
    pub fn pieces(&self, range: Range<u64>) -> impl Iterator<Item = (u64, &[u8])> {
        let first = self.segments.partition_point(|s| s.end() <= range.start);
        self.segments[first..]
            .iter()
            .take_while(move |s| s.start < range.end)
            .map(move |s| {
                let start = s.start.max(range.start);
                let end = s.end().min(range.end);
                (start, self.slice(s, start..end))
            })
    }

    /// Every copied range, in address order.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.segments.iter().map(|s| s.start..s.end())
    }

    /// Forgets every copied byte at or above `addr` (reads of them answer `None` from now on)
    /// and gives their memory back once at least [`RELEASE_STEP`] bytes at the buffer's end
    /// are free: a reader that goes from the top of the address space down (the block scan of
    /// the graph) frees the copy as it goes, so the whole copy and the whole graph are never
    /// held together. The buffer holds the segments in address order (see [`copy`]), so the
    /// bytes above `addr` are its end; shrinking a buffer this large is an `mremap` in place.
    /// Costs a pass over the segments: call it every few thousand blocks, not for each.
    pub fn release_from(&mut self, addr: u64) {
        let keep = self.segments.partition_point(|s| s.start < addr);
        self.segments.truncate(keep);
        if let Some(last) = self.segments.last_mut()
            && last.end() > addr
        {
            last.len = (addr - last.start) as usize;
        }
        let used = self
            .segments
            .iter()
            .map(|s| s.offset + s.len)
            .max()
            .unwrap_or(0);
        if self.data.len() - used >= RELEASE_STEP {
            self.data.truncate(used);
            self.data.shrink_to_fit();
        }
    }
}

/// Fewest free bytes at the end of an image's buffer worth giving back
/// ([`Image::release_from`]).
const RELEASE_STEP: usize = 8 << 20;

/// A buffer of `bytes` whose every page is already backed by memory, made before the stop so
/// that the copy made while the target is stopped ([`copy`]) costs no page fault in heaptui.
pub fn prepared(bytes: u64) -> Vec<u8> {
    let mut buffer = vec![0u8; bytes as usize];
    // A zeroed allocation is backed lazily: a write to each page backs it. (A store of the zero
    // it already holds could be optimised away; a one cannot.)
    for page in buffer.chunks_mut(PAGE as usize) {
        page[0] = 1;
    }
    buffer
}

/// Copies `ranges` of process `pid` into an image whose buffer is `buffer` (see [`prepared`];
/// it grows if the ranges need more). Ranges should be sorted and disjoint; the parts the
/// kernel refuses are left out (a page at a time), the rest is copied in as few calls as the
/// kernel allows.
///
/// A large copy is shared among up to [`MAX_COPIERS`] threads, one per core, each with its own
/// part of the ranges and of the buffer: one thread's `process_vm_readv` is bound by the
/// kernel's per-page work (pinning each page of the target, then copying it), so the pause
/// falls with the cores heaptui can use.
pub fn copy(pid: Pid, ranges: &[Range<u64>], buffer: Vec<u8>) -> Image {
    let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    let mut data = buffer;
    if (data.len() as u64) < total {
        data.resize(total as usize, 0);
    }
    let copiers = if total < PARALLEL_FROM {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_COPIERS))
    };
    let shares = shares(ranges, total, copiers);
    let mut parts: Vec<&mut [u8]> = Vec::with_capacity(shares.len());
    let mut rest = &mut data[..];
    for share in &shares {
        let len: u64 = share.iter().map(|r| r.end - r.start).sum();
        let (mine, after) = rest.split_at_mut(len as usize);
        parts.push(mine);
        rest = after;
    }
    let mut offset = 0usize;
    let mut segments: Vec<Segment> = Vec::new();
    let found: Vec<Vec<Segment>> = if shares.len() <= 1 {
        shares
            .iter()
            .zip(parts)
            .map(|(share, part)| copy_share(pid, share, part))
            .collect()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = shares
                .iter()
                .zip(parts)
                .map(|(share, part)| s.spawn(move || copy_share(pid, share, part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    for (share, found) in shares.iter().zip(found) {
        for mut seg in found {
            seg.offset += offset;
            // A range cut between two shares is one segment again.
            match segments.last_mut() {
                Some(last) if last.end() == seg.start && last.offset + last.len == seg.offset => {
                    last.len += seg.len
                }
                _ => segments.push(seg),
            }
        }
        offset += share
            .iter()
            .map(|r| (r.end - r.start) as usize)
            .sum::<usize>();
    }
    data.truncate(offset);
    Image { data, segments }
}

/// A copy smaller than this is made by one thread: starting others would cost more.
const PARALLEL_FROM: u64 = 32 << 20;

/// The most threads a copy is shared among.
const MAX_COPIERS: usize = 8;

/// Splits `ranges` (`total` bytes) into `n` consecutive shares of about equal size, cutting
/// ranges at page boundaries.
fn shares(ranges: &[Range<u64>], total: u64, n: usize) -> Vec<Vec<Range<u64>>> {
    let target = total.div_ceil(n.max(1) as u64).next_multiple_of(PAGE);
    let mut out: Vec<Vec<Range<u64>>> = vec![Vec::new()];
    let mut filled = 0u64;
    for r in ranges {
        let mut at = r.start;
        while at < r.end {
            let room = target - filled;
            let mut end = r.end;
            if end - at > room && out.len() < n {
                // Cut at a page boundary, at least one page in.
                end = ((at + room) & !(PAGE - 1))
                    .max((at & !(PAGE - 1)) + PAGE)
                    .min(r.end);
            }
            if let Some(share) = out.last_mut() {
                share.push(at..end);
            }
            filled += end - at;
            at = end;
            if filled >= target && out.len() < n {
                out.push(Vec::new());
                filled = 0;
            }
        }
    }
    out.retain(|share| !share.is_empty());
    out
}

/// Copies one share of the ranges into `buf` (exactly their total size), range after range.
/// Returns the segments copied, with offsets into `buf`.
fn copy_share(pid: Pid, ranges: &[Range<u64>], buf: &mut [u8]) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut used = 0usize;
    for r in ranges {
        let mut at = r.start;
        let range_end = used + (r.end - r.start) as usize;
        while at < r.end {
            let from = used + (at - r.start) as usize;
            let got = read_into(pid, at, &mut buf[from..range_end]);
            if got > 0 {
                segments.push(Segment {
                    start: at,
                    offset: from,
                    len: got,
                });
                at += got as u64;
            }
            if at < r.end {
                // The page at `at` cannot be read: skip it and go on after it.
                at = ((at / PAGE + 1) * PAGE).min(r.end);
            }
        }
        used = range_end;
    }
    segments
}

/// Reads as much of `buf.len()` bytes at `addr` as the kernel copies in one go (it stops at
/// the first page it cannot read). Returns the number of bytes read.
fn read_into(pid: Pid, addr: u64, buf: &mut [u8]) -> usize {
    let mut done = 0usize;
    while done < buf.len() {
        // One call copies at most MAX_IOV pieces: split the request into page-aligned pieces of
        // at most 1 GiB each so that huge mappings need few calls.
        let rest = &mut buf[done..];
        let start = addr + done as u64;
        let mut remote = Vec::new();
        let mut off = 0usize;
        while off < rest.len() && remote.len() < MAX_IOV {
            let len = (rest.len() - off).min(1 << 30);
            remote.push(RemoteIoVec {
                base: (start + off as u64) as usize,
                len,
            });
            off += len;
        }
        let mut local = [IoSliceMut::new(&mut rest[..off])];
        match process_vm_readv(pid, &mut local, &remote) {
            Ok(0) | Err(_) => break,
            Ok(n) => done += n,
        }
        if done < buf.len() && !(done as u64).is_multiple_of(PAGE) {
            // A short read ends at a page the kernel refused.
            break;
        }
    }
    done
}

/// The pages of the target's page map (`/proc/PID/pagemap`): one 64-bit entry per page of its
/// address space, bit 63 set when the page is in memory, bit 62 when it is swapped out. Readable
/// without privileges by whoever may ptrace the process (only the frame numbers are hidden).
pub struct PageMap(std::fs::File);

/// Bits of a page map entry: the page is in memory, or swapped out (it holds data either way).
const PAGE_PRESENT: u64 = 1 << 63;
const PAGE_SWAPPED: u64 = 1 << 62;

/// Entries read per `pread` of the page map (256 KiB of entries, 512 MiB of address space).
const PAGEMAP_BATCH: usize = 32 * 1024;

impl PageMap {
    pub fn open(pid: Pid) -> Option<PageMap> {
        std::fs::File::open(format!("/proc/{pid}/pagemap"))
            .ok()
            .map(PageMap)
    }

    /// The parts of the page-aligned `range` of private anonymous memory that hold data: its
    /// pages in memory or in swap. A page that was never touched is neither, and reads as
    /// zeros: nothing there to copy, and copying it would make the kernel map it in the
    /// target. None when the page map cannot be read (then copy it all).
    pub fn touched(&self, range: Range<u64>) -> Option<Vec<Range<u64>>> {
        use std::os::unix::fs::FileExt;
        let first = range.start / PAGE;
        let pages = range.end.div_ceil(PAGE).saturating_sub(first) as usize;
        let mut out: Vec<Range<u64>> = Vec::new();
        let mut entries = vec![0u8; 8 * pages.min(PAGEMAP_BATCH)];
        let mut done = 0usize;
        while done < pages {
            let n = (pages - done).min(PAGEMAP_BATCH);
            let buf = &mut entries[..8 * n];
            self.0.read_exact_at(buf, 8 * (first + done as u64)).ok()?;
            for (k, e) in buf.chunks_exact(8).enumerate() {
                let e = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
                if e & (PAGE_PRESENT | PAGE_SWAPPED) == 0 {
                    continue;
                }
                let at = (first + (done + k) as u64) * PAGE;
                match out.last_mut() {
                    Some(last) if last.end == at => last.end = at + PAGE,
                    _ => out.push(at..at + PAGE),
                }
            }
            done += n;
        }
        if let Some(first) = out.first_mut() {
            first.start = first.start.max(range.start);
        }
        if let Some(last) = out.last_mut() {
            last.end = last.end.min(range.end);
        }
        Some(out)
    }
}

/// Whether heaptui may read process `pid`'s memory, tried on one word at `addr` (a mapped,
/// readable address): the kernel applies ptrace's access rules to `process_vm_readv`, so
/// `EPERM` here is the refusal a `PTRACE_SEIZE` would meet.
pub fn may_read(pid: Pid, addr: u64) -> Result<(), nix::errno::Errno> {
    let mut word = [0u8; 8];
    let mut local = [IoSliceMut::new(&mut word)];
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: 8,
    }];
    process_vm_readv(pid, &mut local, &remote).map(|_| ())
}

/// Reads `len` bytes at `addr` of process `pid`, all or nothing (for small reads before the
/// stop: headers, tables).
pub fn read_exact(pid: Pid, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    (read_into(pid, addr, &mut buf) == len).then_some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_read_from_the_top_down_forgets_and_gives_back_what_is_above() {
        let big = RELEASE_STEP + 4096;
        let mut image = Image::from_parts(vec![
            (0x1000, vec![7; 4096]),
            (0x10_0000, vec![8; big]),
            (0x7f00_0000, vec![9; 4096]),
        ]);
        image.release_from(0x10_0000 + 4096);
        assert_eq!(image.word(0x7f00_0000), None, "a segment above is gone");
        assert_eq!(
            image.word(0x10_0000 + 4096),
            None,
            "the cut segment's top is gone"
        );
        assert_eq!(image.word(0x10_0000 + 4088), Some(0x0808_0808_0808_0808));
        assert_eq!(image.word(0x1000), Some(0x0707_0707_0707_0707));
        assert_eq!(
            image.ranges().collect::<Vec<_>>(),
            vec![0x1000..0x2000, 0x10_0000..0x10_1000]
        );
        assert!(
            image.data.capacity() < 3 * 4096,
            "the buffer's end was given back"
        );
        // Less than a step above the cut: forgotten, the memory kept for now.
        image.release_from(0x10_0800);
        assert_eq!(image.word(0x10_0800), None);
        assert_eq!(image.data.len(), 2 * 4096);
        image.release_from(0);
        assert_eq!(image.ranges().count(), 0);
        assert_eq!(image.word(0x1000), None);
    }

    #[test]
    fn an_image_answers_words_and_pieces_from_its_segments() {
        let image = Image::from_parts(vec![
            (0x2000, (0u8..16).collect()),
            (0x1000, vec![1, 0, 0, 0, 0, 0, 0, 0]),
        ]);
        assert_eq!(image.word(0x1000), Some(1));
        assert_eq!(image.word(0x1001), None, "runs past the segment");
        assert_eq!(
            image.word(0x2008),
            Some(u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]))
        );
        assert_eq!(image.u32(0x2000), Some(u32::from_le_bytes([0, 1, 2, 3])));
        assert_eq!(image.word(0x1800), None);
        let pieces: Vec<(u64, usize)> = image
            .pieces(0x1004..0x2004)
            .map(|(a, b)| (a, b.len()))
            .collect();
        assert_eq!(pieces, vec![(0x1004, 4), (0x2000, 4)]);
        assert_eq!(image.len(), 24);
    }

    #[test]
    fn only_the_touched_pages_of_a_large_reservation_are_listed() {
        // 64 MiB that malloc maps and nobody touches, but for three pages.
        let mut big: Vec<u8> = Vec::with_capacity(64 << 20);
        let ptr = big.as_ptr() as u64;
        let base = ptr.next_multiple_of(PAGE);
        let end = (ptr + (64 << 20)) & !(PAGE - 1);
        let spare = big.spare_capacity_mut();
        for page in [1u64, 2, 1000] {
            let at = (base - ptr + page * PAGE) as usize;
            spare[at].write(7);
        }
        std::hint::black_box(&mut big);
        let map = PageMap::open(Pid::this()).expect("our own page map");
        let touched = map.touched(base..end).unwrap();
        assert_eq!(
            touched,
            vec![
                base + PAGE..base + 3 * PAGE,
                base + 1000 * PAGE..base + 1001 * PAGE
            ]
        );
        drop(big);
    }

    #[test]
    fn shares_are_consecutive_about_equal_and_cut_at_pages() {
        let ranges = vec![0x1000..0x9000u64, 0x20008..0x23000];
        let total = 0x8000 + 0x2ff8;
        let shares = shares(&ranges, total, 3);
        assert_eq!(shares.len(), 3, "{shares:x?}");
        let flat: Vec<Range<u64>> = shares.iter().flatten().cloned().collect();
        // Together they are the ranges, in order.
        let mut joined: Vec<Range<u64>> = Vec::new();
        for r in flat {
            match joined.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => joined.push(r),
            }
        }
        assert_eq!(joined, ranges);
        for share in &shares {
            let len: u64 = share.iter().map(|r| r.end - r.start).sum();
            assert!(
                len <= total.div_ceil(3).next_multiple_of(PAGE),
                "{shares:x?}"
            );
            for r in share {
                assert!(r.start.is_multiple_of(PAGE) || ranges.iter().any(|x| x.start == r.start));
            }
        }
        assert_eq!(super::shares(&ranges, total, 1), vec![ranges.clone()]);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn a_copy_shared_among_threads_is_the_same_as_one() {
        // 40 MiB of our own memory (more than one thread copies alone), with a pattern.
        let words: Vec<u64> = (0..5u64 << 20).map(|i| i * 0x9e37_79b9).collect();
        let start = words.as_ptr() as u64;
        let end = start + 8 * words.len() as u64;
        let image = copy(Pid::this(), &[start..end], Vec::new());
        assert_eq!(image.len(), end - start);
        for i in (0..words.len()).step_by(4099) {
            assert_eq!(image.word(start + 8 * i as u64), Some(words[i]));
        }
        assert_eq!(
            image.bytes(start..end).map(|b| b.len()),
            Some((end - start) as usize)
        );
    }

    #[test]
    fn a_copy_of_this_process_skips_the_pages_it_cannot_read() {
        // Our own memory, through the same system call: a buffer we own, then an unmapped
        // page (the null page) that the copy leaves out.
        let data: Vec<u64> = (0..1024).collect();
        let start = data.as_ptr() as u64;
        let end = start + 8 * 1024;
        let me = Pid::this();
        let image = copy(me, &[0..PAGE, start..end], prepared(PAGE));
        assert_eq!(image.word(0), None);
        for (i, &v) in data.iter().enumerate() {
            assert_eq!(image.word(start + 8 * i as u64), Some(v));
        }
        assert_eq!(
            read_exact(me, start + 8, 8),
            Some(1u64.to_le_bytes().to_vec())
        );
        assert_eq!(read_exact(me, 16, 8), None);
    }
}
