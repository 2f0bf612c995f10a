//! Payload encoding: bincode 2 through serde, with a size limit on decoding and trailing bytes
//! rejected (docs/reference.md §6), plus the typed blocking helpers [`send`] and [`recv`].
//!
//! Every message of both directions goes through [`encode_frame`] / [`decode_payload`], so the
//! rules live here once. This module never chooses what to send; it only turns values into
//! frames and back.

use std::io::{Read, Write};

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::frame::{self, FrameError, HEADER_LEN};
use crate::message::{RequestId, Response, ServerMessage, SnapshotChunk, SnapshotId};

/// The largest payload either side accepts after the handshake, and the bincode decoding
/// limit: no length read inside a payload can make the decoder claim more than this.
pub const MAX_FRAME_LEN: usize = 16 << 20;

/// The largest payload accepted before the peer is authenticated: a hello or welcome is a few
/// hundred bytes, so an unauthenticated peer cannot make the agent buffer megabytes.
pub const HANDSHAKE_MAX_FRAME_LEN: usize = 4 << 10;

/// The bincode configuration of the wire: standard (little endian, varint integers) with the
/// decoding limit.
pub type WireConfig = Configuration<LittleEndian, Varint, Limit<MAX_FRAME_LEN>>;

/// The one configuration both ends use.
pub const CONFIG: WireConfig = bincode::config::standard().with_limit::<MAX_FRAME_LEN>();

/// The same encoding with the decoding limit of the handshake: what an unauthenticated peer
/// can make the decoder allocate is bounded by the handshake frame size, not by the full one
/// (a 4 KiB hello claiming a 16 MiB string must not cost 16 MiB).
pub(crate) const HANDSHAKE_CONFIG: Configuration<
    LittleEndian,
    Varint,
    Limit<HANDSHAKE_MAX_FRAME_LEN>,
> = bincode::config::standard().with_limit::<HANDSHAKE_MAX_FRAME_LEN>();

/// Why a payload is not a valid message.
#[derive(Debug, Error)]
pub enum DecodeError {
    #[error("malformed message: {0}")]
    Bincode(#[from] bincode::error::DecodeError),
    #[error("malformed message: {extra} trailing bytes after a {used}-byte message")]
    TrailingBytes { used: usize, extra: usize },
}

/// Why a message cannot be sent.
#[derive(Debug, Error)]
pub enum EncodeError {
    #[error("cannot encode message: {0}")]
    Bincode(#[from] bincode::error::EncodeError),
    #[error("message of {len} bytes exceeds the frame maximum of {max} bytes")]
    TooLong { len: usize, max: usize },
}

/// Any failure of a typed send or receive.
#[derive(Debug, Error)]
pub enum ProtocolError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Decodes one payload as `M`; the whole payload must be consumed.
pub fn decode_payload<M: DeserializeOwned>(payload: &[u8]) -> Result<M, DecodeError> {
    decode_with(payload, CONFIG)
}

/// [`decode_payload`] under another configuration (the handshake's smaller limit).
pub(crate) fn decode_with<M: DeserializeOwned, C: bincode::config::Config>(
    payload: &[u8],
    config: C,
) -> Result<M, DecodeError> {
    let (message, used) = bincode::serde::decode_from_slice(payload, config)?;
    if used != payload.len() {
        return Err(DecodeError::TrailingBytes {
            used,
            extra: payload.len() - used,
        });
    }
    Ok(message)
}

/// A snapshot chunk answer (`KeptData` or `SnapshotData`) read where it lies in its payload:
/// the client copies its bytes once, from the frame it read them into, instead of having
/// them copied into a fresh vector first (8 MiB per chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInPayload<'a> {
    /// The request it answers.
    pub id: RequestId,
    /// `KeptData` (the analysed snapshot) rather than `SnapshotData` (its file).
    pub analysed: bool,
    pub snapshot: SnapshotId,
    pub offset: u64,
    pub total: u64,
    pub bytes: &'a [u8],
}

/// The fields of `ServerMessage::Response { id, body: Response::KeptData(chunk) }` (or
/// `SnapshotData`) in their wire order: bincode writes an enum's variant as its index (a
/// `u32`), a box as what it holds, a struct as its fields, so these decode exactly the
/// messages that are chunk answers, once the two indices are checked.
#[derive(serde::Deserialize)]
struct ChunkAnswer<'a> {
    message: u32,
    id: RequestId,
    response: u32,
    snapshot: SnapshotId,
    offset: u64,
    total: u64,
    bytes: &'a [u8],
}

/// The variant indices of a response and of `KeptData` and `SnapshotData` within responses,
/// read from an encoded answer of each (so they follow the enums' order).
fn chunk_indices() -> (u32, [u32; 2]) {
    static INDICES: std::sync::OnceLock<(u32, [u32; 2])> = std::sync::OnceLock::new();
    *INDICES.get_or_init(|| {
        let chunk = || SnapshotChunk {
            snapshot: SnapshotId(0),
            offset: 0,
            total: 0,
            bytes: Vec::new(),
        };
        let index = |body: Response| {
            let frame = to_frame(&ServerMessage::Response {
                id: RequestId(0),
                body: Box::new(body),
            })
            .expect("a small answer encodes");
            let (answer, _): (ChunkAnswer<'_>, usize) =
                bincode::serde::borrow_decode_from_slice(&frame[HEADER_LEN..], CONFIG)
                    .expect("a chunk answer decodes as one");
            (answer.message, answer.response)
        };
        let (message, kept) = index(Response::KeptData(chunk()));
        let (_, file) = index(Response::SnapshotData(chunk()));
        (message, [kept, file])
    })
}

/// The snapshot chunk `payload` answers with, read in place, when it is a whole
/// `KeptData` or `SnapshotData` answer; `None` for any other payload (which
/// [`decode_payload`] then decodes, or refuses).
pub fn chunk_in_payload(payload: &[u8]) -> Option<ChunkInPayload<'_>> {
    let (message, [kept, file]) = chunk_indices();
    let (answer, used): (ChunkAnswer<'_>, usize) =
        bincode::serde::borrow_decode_from_slice(payload, CONFIG).ok()?;
    if used != payload.len() || answer.message != message {
        return None;
    }
    let analysed = match answer.response {
        r if r == kept => true,
        r if r == file => false,
        _ => return None,
    };
    Some(ChunkInPayload {
        id: answer.id,
        analysed,
        snapshot: answer.snapshot,
        offset: answer.offset,
        total: answer.total,
        bytes: answer.bytes,
    })
}

/// Appends one whole frame (header and payload) carrying `message` to `out`.
pub fn encode_frame<M: Serialize>(message: &M, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    if let Err(e) = bincode::serde::encode_into_std_write(message, out, CONFIG) {
        out.truncate(at);
        return Err(e.into());
    }
    let len = out.len() - at - HEADER_LEN;
    if len > MAX_FRAME_LEN {
        out.truncate(at);
        return Err(EncodeError::TooLong {
            len,
            max: MAX_FRAME_LEN,
        });
    }
    out[at..at + HEADER_LEN].copy_from_slice(&frame::header(len));
    Ok(())
}

/// One whole frame carrying `message`.
pub fn to_frame<M: Serialize>(message: &M) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_frame(message, &mut out)?;
    Ok(out)
}

/// The payload length `message` encodes to, without building it (used by the answer builders
/// to keep pages under the frame maximum).
pub fn encoded_len<M: Serialize>(message: &M) -> usize {
    let mut counter = bincode::enc::write::SizeWriter::default();
    match bincode::serde::encode_into_writer(message, &mut counter, CONFIG) {
        Ok(()) => counter.bytes_written,
        // Only a `Serialize` impl that refuses (none in this crate) gets here; treat it as
        // too large so that callers leave it out rather than send it.
        Err(_) => usize::MAX,
    }
}

/// Blocking send of one message as one frame.
pub fn send<W: Write, M: Serialize>(w: &mut W, message: &M) -> Result<(), ProtocolError> {
    let bytes = to_frame(message)?;
    w.write_all(&bytes).map_err(FrameError::Io)?;
    w.flush().map_err(FrameError::Io)?;
    Ok(())
}

/// Blocking receive of one message, refusing frames longer than `max`.
pub fn recv<R: Read, M: DeserializeOwned>(r: &mut R, max: usize) -> Result<M, ProtocolError> {
    let payload = frame::read_frame(r, max)?;
    Ok(decode_payload(&payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_bytes_are_rejected() {
        let frame = to_frame(&(7u32, String::from("x"))).unwrap();
        let mut payload = frame[HEADER_LEN..].to_vec();
        assert_eq!(
            decode_payload::<(u32, String)>(&payload).unwrap(),
            (7, "x".into())
        );
        payload.push(0);
        let err = decode_payload::<(u32, String)>(&payload).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::TrailingBytes { used: 3, extra: 1 }
        ));
    }

    #[test]
    fn a_length_claim_inside_a_payload_is_limited() {
        // A Vec<u64> claiming 2^40 elements in a tiny payload: refused, not allocated.
        let mut payload = vec![253u8]; // varint tag: u64 follows
        payload.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let err = decode_payload::<Vec<u64>>(&payload).unwrap_err();
        assert!(matches!(err, DecodeError::Bincode(_)), "{err}");
    }

    #[test]
    fn encoded_len_matches_the_frame() {
        let m = (1u64 << 40, vec![String::from("abc"); 3]);
        assert_eq!(encoded_len(&m) + HEADER_LEN, to_frame(&m).unwrap().len());
    }

    #[test]
    fn a_chunk_answer_is_read_in_place_and_nothing_else_is() {
        let chunk = |bytes: Vec<u8>| SnapshotChunk {
            snapshot: SnapshotId(3),
            offset: 1 << 33,
            total: u64::MAX,
            bytes,
        };
        for (analysed, body) in [
            (true, Response::KeptData(chunk(vec![7; 300]))),
            (false, Response::SnapshotData(chunk(vec![9; 5]))),
            (true, Response::KeptData(chunk(Vec::new()))),
        ] {
            let message = ServerMessage::Response {
                id: RequestId(1 << 40),
                body: Box::new(body.clone()),
            };
            let frame = to_frame(&message).unwrap();
            let payload = &frame[HEADER_LEN..];
            let got = chunk_in_payload(payload).expect("a chunk answer");
            let (Response::KeptData(c) | Response::SnapshotData(c)) = body else {
                unreachable!()
            };
            assert_eq!(
                got,
                ChunkInPayload {
                    id: RequestId(1 << 40),
                    analysed,
                    snapshot: c.snapshot,
                    offset: c.offset,
                    total: c.total,
                    bytes: &c.bytes,
                }
            );
            // Cut short or with a byte more, it is not read in place.
            assert_eq!(chunk_in_payload(&payload[..payload.len() - 1]), None);
            let mut longer = payload.to_vec();
            longer.push(0);
            assert_eq!(chunk_in_payload(&longer), None);
        }
        // Other answers, pushes and errors are not chunks, however their bytes read.
        for message in [
            ServerMessage::Response {
                id: RequestId(2),
                body: Box::new(Response::Unsubscribed),
            },
            ServerMessage::Response {
                id: RequestId(2),
                body: Box::new(Response::Subscribed { interval_ms: 1000 }),
            },
            ServerMessage::Response {
                id: RequestId(2),
                body: Box::new(Response::error(crate::ErrorKind::BadRequest, "no")),
            },
            ServerMessage::Push(crate::Push::Counters(crate::LiveCounters::default())),
        ] {
            let frame = to_frame(&message).unwrap();
            assert_eq!(chunk_in_payload(&frame[HEADER_LEN..]), None, "{message:?}");
        }
    }

    #[test]
    fn typed_helpers_round_trip() {
        let mut wire = Vec::new();
        send(&mut wire, &String::from("hello")).unwrap();
        let got: String = recv(&mut &wire[..], 64).unwrap();
        assert_eq!(got, "hello");
        assert!(matches!(
            recv::<_, String>(&mut &wire[..], 2),
            Err(ProtocolError::Frame(FrameError::TooLong { .. }))
        ));
    }
}
