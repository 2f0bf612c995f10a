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
}

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
/// it grows if the ranges need more). Ranges should be page-aligned and sorted; the parts the
/// kernel refuses are left out (a page at a time), the rest is copied in as few calls as the
/// kernel allows.
pub fn copy(pid: Pid, ranges: &[Range<u64>], buffer: Vec<u8>) -> Image {
    let mut image = Image {
        data: buffer,
        segments: Vec::new(),
    };
    let mut used = 0usize;
    for r in ranges {
        let mut at = r.start;
        while at < r.end {
            let len = (r.end - at) as usize;
            if image.data.len() < used + len {
                image.data.resize(used + len, 0);
            }
            let got = read_into(pid, at, &mut image.data[used..used + len]);
            if got > 0 {
                image.segments.push(Segment {
                    start: at,
                    offset: used,
                    len: got,
                });
                used += got;
                at += got as u64;
            }
            if at < r.end {
                // The page at `at` cannot be read: skip it and go on after it.
                at = (at / PAGE + 1) * PAGE;
            }
        }
    }
    image.data.truncate(used);
    image
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
