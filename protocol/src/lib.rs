//! Wire messages, framing and handshake between `heaptui` and its agent (docs/reference.md §6).
//!
//! - [`frame`]: u32 big-endian length-prefixed frames; a sans-IO [`FrameDecoder`] and blocking
//!   helpers, the maximum length checked before any allocation;
//! - [`codec`]: bincode 2 payloads with a decoding limit and trailing bytes rejected;
//! - [`handshake`]: the hello/welcome exchange that must open every connection;
//! - [`message`] and [`ids`]: the requests, answers and pushes;
//! - [`answer`]: pure functions building every snapshot answer from a heap graph and its
//!   analysis, so that the live agent and the offline `heaptui open` answer identically;
//! - [`token_file`] and [`token_dir`]: where an agent's token file and record live, and which
//!   files of the token directory belong to processes that are gone.
//!
//! No I/O policy lives here (no sockets, threads or async runtime): the agent uses the blocking
//! helpers from its own threads, the tokio client feeds the [`FrameDecoder`]. The one exception
//! is the token directory's housekeeping ([`token_dir::sweep`], file I/O only), kept here so the
//! agent and the client run the same one.
//!
//! A client with any I/O model — write the hello, feed whatever bytes arrive to a decoder
//! limited to the handshake size, check the welcome, then accept full-size frames:
//!
//! ```
//! use heaptui_protocol::*;
//!
//! let hello = to_frame(&Hello::new("token-from-the-token-file", "heaptui 0.1.0")).unwrap();
//! // … write `hello` to the socket; the agent answers with a welcome:
//! # let received = to_frame(&Welcome::accepted(AgentInfo::default())).unwrap();
//! let mut decoder = FrameDecoder::new(HANDSHAKE_MAX_FRAME_LEN);
//! decoder.push(&received).unwrap();
//! let payload = decoder.next_frame().unwrap().expect("one whole frame");
//! let agent = check_welcome(&decode_welcome(&payload).unwrap()).unwrap().clone();
//! decoder.set_max_len(MAX_FRAME_LEN);
//!
//! let request = Request { id: RequestId(1), body: RequestBody::ProcessInfo };
//! let bytes = to_frame(&request).unwrap();
//! // … write `bytes`; push what arrives; pop `ServerMessage`s with `decode_payload`,
//! // matching `ServerMessage::Response { id, .. }` to the request and taking pushes apart.
//! # let _ = (agent, bytes);
//! ```

pub mod answer;
pub mod codec;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod handshake;
pub mod ids;
pub mod message;
pub mod stream;
pub mod token_dir;
pub mod token_file;
pub mod views;

pub use codec::{
    CONFIG, ChunkInPayload, DecodeError, EncodeError, HANDSHAKE_MAX_FRAME_LEN, MAX_FRAME_LEN,
    ProtocolError, chunk_in_payload, decode_payload, encode_frame, encoded_len, recv, send,
    to_frame,
};
pub use frame::{FrameDecoder, FrameError, read_frame, read_frame_into, write_frame};
pub use handshake::{
    Admission, AgentInfo, HandshakeError, Hello, MAGIC, PROTOCOL_VERSION, Peer, Refusal,
    RefusalReason, Welcome, accept, check_hello, check_welcome, decode_hello, decode_welcome,
};
pub use ids::{FrameKind, GroupId, GroupKind, ObjectClass, Sharer, ThreadState};
pub use message::*;
