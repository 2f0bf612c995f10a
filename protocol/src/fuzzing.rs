//! One entry point that runs every decoder of this crate over untrusted bytes, shared by the
//! cargo-fuzz target (`fuzz/fuzz_targets/decode.rs`) and the random-bytes proptest that runs in
//! CI, so both check the same invariants.
//!
//! It panics only when an invariant breaks — a frame over the maximum handed out, or a decoded
//! message that does not survive its own re-encoding — never on bad input.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{MAX_FRAME_LEN, decode_payload, to_frame};
use crate::frame::{FrameDecoder, read_frame};
use crate::handshake::{Hello, Welcome, decode_hello, decode_welcome};
use crate::message::{Request, ServerMessage};

/// The first byte chooses the frame maximum and the chunk size the stream is pushed in; the
/// rest is the byte stream.
pub fn decode_stream(data: &[u8]) {
    let Some((&knob, stream)) = data.split_first() else {
        return;
    };
    let max = [0, 16, 4096, MAX_FRAME_LEN][usize::from(knob & 3)];
    let chunk = usize::from(knob >> 2) + 1;

    let mut decoder = FrameDecoder::new(max);
    'stream: for piece in stream.chunks(chunk) {
        if decoder.push(piece).is_err() {
            break;
        }
        loop {
            match decoder.next_frame() {
                Ok(Some(payload)) => {
                    assert!(payload.len() <= max, "a frame over the maximum came out");
                    decode_payloads(&payload);
                }
                Ok(None) => break,
                Err(_) => break 'stream,
            }
        }
    }
    let _ = decoder.finish();

    if let Ok(payload) = read_frame(&mut &stream[..], max) {
        assert!(payload.len() <= max, "a frame over the maximum was read");
    }
    decode_payloads(stream);
}

/// Every message decoder over one payload.
pub fn decode_payloads(payload: &[u8]) {
    stable::<Request>(payload);
    stable::<ServerMessage>(payload);
    if let Ok(hello) = decode_hello(payload) {
        assert_stable::<Hello>(&hello);
    }
    if let Ok(welcome) = decode_welcome(payload) {
        assert_stable::<Welcome>(&welcome);
    }
}

fn stable<M>(payload: &[u8])
where
    M: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(message) = decode_payload::<M>(payload) {
        assert_stable(&message);
    }
}

/// A decoded message re-encodes and decodes to itself.
fn assert_stable<M>(message: &M)
where
    M: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let frame = to_frame(message).expect("a decoded message fits in a frame");
    let again: M = decode_payload(&frame[4..]).expect("a re-encoded message decodes");
    assert_eq!(
        &again, message,
        "a decoded message changed through re-encoding"
    );
}
