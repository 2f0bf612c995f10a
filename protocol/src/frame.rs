//! Framing: a u32 big-endian payload length, then the payload (docs/reference.md §6).
//!
//! Two ways to use it, so that the blocking agent and the tokio client share one
//! implementation of the rules:
//! - [`FrameDecoder`], sans-IO: push whatever bytes arrived, pop complete payloads. It works with
//!   any I/O model (tokio's `AsyncRead`, a non-blocking socket, a fuzzer);
//! - [`read_frame`] / [`write_frame`], thin blocking helpers over `std::io::Read`/`Write`.
//!
//! The length is checked against the configured maximum as soon as its four bytes are seen and
//! before anything is reserved for the payload (tokio-util `LengthDelimitedCodec` semantics), so
//! a peer announcing 4 GiB costs nothing. Buffers grow only with bytes actually received.
//! This module never interprets payloads (see `codec`) and never decides what to do with a bad
//! peer (the server logs and closes).

use std::io::{self, Read, Write};

use thiserror::Error;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Why a stream of frames cannot be read on.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The peer announced a payload longer than the maximum; nothing was allocated for it.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    TooLong { len: usize, max: usize },
    /// The stream ended in the middle of a frame.
    #[error("connection closed in the middle of a frame ({got} of {want} bytes)")]
    Truncated { got: usize, want: usize },
    /// The stream ended cleanly between two frames.
    #[error("connection closed")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// Sans-IO frame decoder: [`push`](Self::push) received bytes, then call
/// [`next_frame`](Self::next_frame) until it returns `Ok(None)`.
///
/// After an error the decoder is poisoned (every later call returns the same error): a stream
/// with a bad length has lost its frame boundaries and cannot be resynchronised.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Start of the first unconsumed byte in `buf`; consumed bytes are dropped lazily so that
    /// popping a frame is not a memmove of everything behind it.
    start: usize,
    max: usize,
    poisoned: Option<(usize, usize)>,
}

impl FrameDecoder {
    /// A decoder refusing payloads longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            max,
            poisoned: None,
        }
    }

    /// The maximum payload length in force.
    pub fn max_len(&self) -> usize {
        self.max
    }

    /// Changes the maximum payload length, e.g. from the small handshake limit to the full one
    /// once the peer is authenticated. A frame whose header was already accepted is re-checked
    /// on the next call.
    pub fn set_max_len(&mut self, max: usize) {
        self.max = max;
    }

    /// Bytes received and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the decoder holds no partial frame, i.e. the stream may end here cleanly.
    pub fn is_at_boundary(&self) -> bool {
        self.buffered() == 0
    }

    /// Appends received bytes. Fails at once when the pending frame's header announces a
    /// payload over the maximum, so a caller stops reading from that peer before buffering more.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), FrameError> {
        self.check_poison()?;
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
        self.pending_len().map(|_| ())
    }

    /// Pops the next complete payload, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(len) = self.pending_len()? else {
            return Ok(None);
        };
        let begin = self.start + HEADER_LEN;
        if self.buf.len() - begin < len {
            return Ok(None);
        }
        let payload = self.buf[begin..begin + len].to_vec();
        self.start = begin + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(payload))
    }

    /// Call when the stream has ended: `Ok(())` at a frame boundary, else the truncation error.
    pub fn finish(&self) -> Result<(), FrameError> {
        self.check_poison()?;
        match self.buffered() {
            0 => Ok(()),
            got => {
                let want = match self.header() {
                    Some(len) => HEADER_LEN + len,
                    None => HEADER_LEN,
                };
                Err(FrameError::Truncated { got, want })
            }
        }
    }

    fn header(&self) -> Option<usize> {
        let bytes = self.buf.get(self.start..self.start + HEADER_LEN)?;
        Some(u32::from_be_bytes(bytes.try_into().expect("four bytes")) as usize)
    }

    /// Length of the pending frame once its header is complete, checked against the maximum.
    fn pending_len(&mut self) -> Result<Option<usize>, FrameError> {
        self.check_poison()?;
        match self.header() {
            Some(len) if len > self.max => {
                self.poisoned = Some((len, self.max));
                Err(FrameError::TooLong { len, max: self.max })
            }
            other => Ok(other),
        }
    }

    fn check_poison(&self) -> Result<(), FrameError> {
        match self.poisoned {
            Some((len, max)) => Err(FrameError::TooLong { len, max }),
            None => Ok(()),
        }
    }
}

/// The four header bytes announcing `len` payload bytes.
///
/// # Panics
/// When `len` does not fit in a u32; encoders check the frame maximum first.
pub fn header(len: usize) -> [u8; HEADER_LEN] {
    u32::try_from(len)
        .expect("frame payloads are bounded by the frame maximum")
        .to_be_bytes()
}

/// Writes one frame (header and payload in a single buffered write, so that a frame is never
/// interleaved with another writer's bytes by a partial `write`).
pub fn write_frame<W: Write>(w: &mut W, payload: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&header(payload.len()));
    frame.extend_from_slice(payload);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame's payload, refusing a length over `max` before reading or allocating it.
/// A clean end of stream before the header is [`FrameError::Closed`].
pub fn read_frame<R: Read>(r: &mut R, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut payload = Vec::new();
    read_frame_into(r, max, &mut payload)?;
    Ok(payload)
}

/// [`read_frame`] into `payload` (cleared first), whose allocation is reused: a client that
/// reads many large frames (the 8 MiB chunks of a kept snapshot) then touches its pages once
/// instead of growing and faulting in a fresh buffer for every frame.
pub fn read_frame_into<R: Read>(
    r: &mut R,
    max: usize,
    payload: &mut Vec<u8>,
) -> Result<(), FrameError> {
    payload.clear();
    let mut head = [0u8; HEADER_LEN];
    let got = read_full(r, &mut head)?;
    if got == 0 {
        return Err(FrameError::Closed);
    }
    if got < HEADER_LEN {
        return Err(FrameError::Truncated {
            got,
            want: HEADER_LEN,
        });
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > max {
        return Err(FrameError::TooLong { len, max });
    }
    // Grow with the bytes that actually arrive rather than trusting `len` up front: a peer
    // that announces the maximum and stalls then holds at most one read's worth of memory.
    payload.reserve(len.min(64 * 1024));
    r.take(len as u64).read_to_end(payload)?;
    if payload.len() < len {
        return Err(FrameError::Truncated {
            got: HEADER_LEN + payload.len(),
            want: HEADER_LEN + len,
        });
    }
    Ok(())
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut v = header(payload.len()).to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn two_frames_in_one_push_come_out_in_order() {
        let mut d = FrameDecoder::new(16);
        let mut bytes = frame(b"abc");
        bytes.extend(frame(b""));
        bytes.extend(frame(b"defg"));
        d.push(&bytes).unwrap();
        assert_eq!(d.next_frame().unwrap().as_deref(), Some(&b"abc"[..]));
        assert_eq!(d.next_frame().unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(d.next_frame().unwrap().as_deref(), Some(&b"defg"[..]));
        assert_eq!(d.next_frame().unwrap(), None);
        assert!(d.is_at_boundary());
        d.finish().unwrap();
    }

    #[test]
    fn a_frame_split_byte_by_byte_is_reassembled() {
        let mut d = FrameDecoder::new(16);
        let bytes = frame(b"hello");
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(d.next_frame().unwrap(), None, "complete too early at {i}");
            d.push(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!(d.next_frame().unwrap().as_deref(), Some(&b"hello"[..]));
    }

    #[test]
    fn an_oversized_length_is_refused_from_the_header_alone_and_poisons() {
        let mut d = FrameDecoder::new(16);
        d.push(&[0, 0]).unwrap();
        let err = d.push(&[0, 17]).unwrap_err();
        assert!(matches!(err, FrameError::TooLong { len: 17, max: 16 }));
        // Nothing was reserved for the announced payload.
        assert!(d.buf.capacity() < 17);
        assert!(matches!(d.next_frame(), Err(FrameError::TooLong { .. })));
        assert!(matches!(d.push(b"x"), Err(FrameError::TooLong { .. })));
    }

    #[test]
    fn a_4_gib_announcement_is_refused_without_allocating() {
        let mut d = FrameDecoder::new(1 << 20);
        let err = d.push(&[0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLong {
                len: 0xffff_ffff,
                ..
            }
        ));
    }

    #[test]
    fn lowering_the_maximum_rechecks_the_pending_frame() {
        let mut d = FrameDecoder::new(100);
        d.push(&header(50)).unwrap();
        d.set_max_len(10);
        assert!(matches!(
            d.next_frame(),
            Err(FrameError::TooLong { len: 50, max: 10 })
        ));
    }

    #[test]
    fn finishing_mid_frame_is_a_truncation() {
        let mut d = FrameDecoder::new(16);
        d.push(&frame(b"abcdef")[..7]).unwrap();
        assert_eq!(d.next_frame().unwrap(), None);
        assert!(matches!(
            d.finish(),
            Err(FrameError::Truncated { got: 7, want: 10 })
        ));
        let mut d = FrameDecoder::new(16);
        d.push(&[0, 0]).unwrap();
        assert!(matches!(
            d.finish(),
            Err(FrameError::Truncated { got: 2, want: 4 })
        ));
    }

    #[test]
    fn the_buffer_is_compacted_as_frames_are_consumed() {
        let mut d = FrameDecoder::new(1024);
        let stream: Vec<u8> = (0..1000u32).flat_map(|i| frame(&i.to_be_bytes())).collect();
        // Chunks of 12 bytes never line up with the 8-byte frames, so a partial frame is
        // always left behind; the buffer must still not grow with the stream.
        let mut popped = 0u32;
        for chunk in stream.chunks(12) {
            d.push(chunk).unwrap();
            while let Some(p) = d.next_frame().unwrap() {
                assert_eq!(p, popped.to_be_bytes());
                popped += 1;
            }
        }
        assert_eq!(popped, 1000);
        assert!(d.buf.capacity() < 64, "capacity {}", d.buf.capacity());
    }

    #[test]
    fn blocking_helpers_round_trip_and_report_the_end() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"one").unwrap();
        write_frame(&mut wire, b"").unwrap();
        let mut r = &wire[..];
        assert_eq!(read_frame(&mut r, 8).unwrap(), b"one");
        assert_eq!(read_frame(&mut r, 8).unwrap(), b"");
        assert!(matches!(read_frame(&mut r, 8), Err(FrameError::Closed)));
    }

    #[test]
    fn a_reused_buffer_holds_only_the_last_frame_and_keeps_its_allocation() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &[7u8; 100]).unwrap();
        write_frame(&mut wire, b"two").unwrap();
        write_frame(&mut wire, b"").unwrap();
        let mut r = &wire[..];
        let mut payload = b"left over".to_vec();
        read_frame_into(&mut r, 128, &mut payload).unwrap();
        assert_eq!(payload, [7u8; 100]);
        let grown = payload.capacity();
        read_frame_into(&mut r, 128, &mut payload).unwrap();
        assert_eq!(payload, b"two");
        assert_eq!(payload.capacity(), grown);
        read_frame_into(&mut r, 128, &mut payload).unwrap();
        assert!(payload.is_empty());
        assert!(matches!(
            read_frame_into(&mut r, 128, &mut payload),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn blocking_read_refuses_oversize_and_truncation() {
        let mut r = &frame(&[0u8; 9])[..];
        assert!(matches!(
            read_frame(&mut r, 8),
            Err(FrameError::TooLong { len: 9, max: 8 })
        ));
        let bytes = frame(b"abcdef");
        let mut r = &bytes[..6];
        assert!(matches!(
            read_frame(&mut r, 8),
            Err(FrameError::Truncated { got: 6, want: 10 })
        ));
        let mut r = &[0u8, 0][..];
        assert!(matches!(
            read_frame(&mut r, 8),
            Err(FrameError::Truncated { got: 2, want: 4 })
        ));
        // An announced 4 GiB with nothing behind it must not allocate 4 GiB.
        let mut r = &[0xffu8, 0xff, 0xff, 0xff][..];
        assert!(matches!(
            read_frame(&mut r, usize::MAX),
            Err(FrameError::Truncated { got: 4, .. })
        ));
    }
}
