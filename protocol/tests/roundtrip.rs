//! Every message survives encode → frame → decode unchanged, whatever the chunking of the
//! byte stream; and no byte sequence makes the decoders panic.

mod common;

use std::collections::BTreeSet;

use heaptui_protocol::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// Pushes `bytes` into a decoder in chunks of the given sizes (cycled) and pops every frame.
fn reassemble(bytes: &[u8], chunks: &[usize]) -> Vec<Vec<u8>> {
    let mut decoder = FrameDecoder::new(MAX_FRAME_LEN);
    let mut frames = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = chunks[i % chunks.len()].clamp(1, bytes.len() - at);
        decoder.push(&bytes[at..at + n]).unwrap();
        at += n;
        i += 1;
        while let Some(frame) = decoder.next_frame().unwrap() {
            frames.push(frame);
        }
    }
    decoder.finish().unwrap();
    frames
}

fn round_trip<M>(messages: &[M], chunks: &[usize])
where
    M: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut stream = Vec::new();
    for m in messages {
        encode_frame(m, &mut stream).unwrap();
    }
    let frames = reassemble(&stream, chunks);
    assert_eq!(frames.len(), messages.len());
    for (frame, m) in frames.iter().zip(messages) {
        assert_eq!(&decode_payload::<M>(frame).unwrap(), m);
    }
}

proptest! {
    #[test]
    fn requests_round_trip(
        messages in proptest::collection::vec(common::request(), 1..4),
        chunks in proptest::collection::vec(1usize..64, 1..5),
    ) {
        round_trip(&messages, &chunks);
    }

    #[test]
    fn server_messages_round_trip(
        messages in proptest::collection::vec(common::server_message(), 1..4),
        chunks in proptest::collection::vec(1usize..64, 1..5),
    ) {
        round_trip(&messages, &chunks);
    }

    #[test]
    fn handshakes_round_trip(hello in common::hello(), welcome in common::welcome()) {
        round_trip(std::slice::from_ref(&hello), &[7]);
        round_trip(std::slice::from_ref(&welcome), &[3]);
        // The handshake decoders take well-formed frames of this version as they are.
        if hello.magic == MAGIC && hello.version == PROTOCOL_VERSION {
            let frame = to_frame(&hello).unwrap();
            prop_assert_eq!(decode_hello(&frame[4..]).unwrap(), hello);
        }
        if welcome.magic == MAGIC && welcome.version == PROTOCOL_VERSION {
            let frame = to_frame(&welcome).unwrap();
            prop_assert_eq!(decode_welcome(&frame[4..]).unwrap(), welcome);
        }
    }

    /// The CI stand-in for the fuzz target (the same function): random bytes through the
    /// frame decoder and every message decoder give frames or errors, never a panic.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        heaptui_protocol::fuzzing::decode_stream(&bytes);
    }

    /// Random bytes behind a valid header and a valid variant tag reach deeper decoding paths.
    #[test]
    fn random_bodies_never_panic(
        tag in 0u8..16,
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut payload = vec![1u8, tag];
        payload.extend(&body);
        heaptui_protocol::fuzzing::decode_payloads(&payload);
        let mut hello = MAGIC.to_vec();
        hello.push(PROTOCOL_VERSION as u8);
        hello.extend(&body);
        heaptui_protocol::fuzzing::decode_payloads(&hello);
    }

    /// Valid frames with bytes flipped: the decoders must refuse or decode, never panic.
    #[test]
    fn corrupted_messages_never_panic(
        message in common::server_message(),
        request in common::request(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        for mut payload in [
            to_frame(&message).unwrap()[4..].to_vec(),
            to_frame(&request).unwrap()[4..].to_vec(),
        ] {
            for (at, byte) in &flips {
                let i = at.index(payload.len());
                payload[i] ^= byte | 1;
            }
            heaptui_protocol::fuzzing::decode_payloads(&payload);
        }
    }
}

/// The strategies reach every message kind, so the round trips above cover them all.
#[test]
fn strategies_cover_every_kind() {
    let mut runner = TestRunner::deterministic();
    let mut requests = BTreeSet::new();
    let mut responses = BTreeSet::new();
    let (req, resp) = (common::request_body(), common::response());
    for _ in 0..2000 {
        requests.insert(req.new_tree(&mut runner).unwrap().current().kind());
        responses.insert(resp.new_tree(&mut runner).unwrap().current().kind());
    }
    assert_eq!(
        requests,
        RequestBody::KINDS.iter().copied().collect::<BTreeSet<_>>()
    );
    assert_eq!(
        responses,
        Response::KINDS.iter().copied().collect::<BTreeSet<_>>()
    );
    let push = common::push();
    let pushes: BTreeSet<_> = (0..500)
        .map(|_| push.new_tree(&mut runner).unwrap().current().kind())
        .collect();
    assert_eq!(pushes, Push::KINDS.iter().copied().collect::<BTreeSet<_>>());
}

#[test]
fn a_truncated_message_is_refused_at_every_cut() {
    for request in common::sample_requests() {
        let frame = to_frame(&request).unwrap();
        let payload = &frame[4..];
        for cut in 0..payload.len() {
            assert!(
                decode_payload::<Request>(&payload[..cut]).is_err(),
                "{} cut at {cut} decoded",
                request.body.kind()
            );
        }
    }
}

#[test]
fn a_message_with_a_trailing_byte_is_refused() {
    for response in common::sample_responses() {
        let message = ServerMessage::Response {
            id: RequestId(1),
            body: Box::new(response),
        };
        let mut payload = to_frame(&message).unwrap()[4..].to_vec();
        payload.push(0);
        assert!(matches!(
            decode_payload::<ServerMessage>(&payload),
            Err(DecodeError::TrailingBytes { extra: 1, .. })
        ));
    }
}

#[test]
fn an_unknown_variant_is_refused() {
    // Variant index 200 of RequestBody does not exist.
    let mut payload = to_frame(&Request {
        id: RequestId(1),
        body: RequestBody::Policy,
    })
    .unwrap()[4..]
        .to_vec();
    let last = payload.len() - 1;
    payload[last] = 200;
    assert!(decode_payload::<Request>(&payload).is_err());
}

#[test]
fn garbage_after_a_good_frame_keeps_the_good_frame() {
    let good = common::sample_requests()[0].clone();
    let mut stream = to_frame(&good).unwrap();
    stream.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
    let mut decoder = FrameDecoder::new(1024);
    decoder.push(&stream).unwrap();
    let frame = decoder.next_frame().unwrap().unwrap();
    assert_eq!(decode_payload::<Request>(&frame).unwrap(), good);
    // Then the garbage header: refused, and the stream stays refused.
    assert!(matches!(
        decoder.next_frame(),
        Err(FrameError::TooLong {
            len: 0xdead_beef,
            max: 1024
        })
    ));
    assert!(decoder.push(b"more").is_err());
}

#[test]
fn a_page_at_the_row_cap_fits_in_one_frame() {
    // 10k object rows with long labels: the rows the answer builder would emit stay under the
    // frame maximum once text is clipped to MAX_TEXT_LEN (the budget cuts pages anyway).
    let row = ObjectRow {
        site_label: "x".repeat(1000),
        ..common::sample_object_row()
    };
    let page = ObjectPage {
        snapshot: SnapshotId(1),
        page: PageInfo {
            offset: 0,
            total: MAX_PAGE_ROWS,
        },
        rows: vec![row; MAX_PAGE_ROWS as usize],
    };
    let len = encoded_len(&page);
    assert!(len < MAX_FRAME_LEN, "{len}");
    assert_eq!(to_frame(&page).unwrap().len(), len + 4);
}

#[test]
fn an_oversized_message_is_refused_when_encoding() {
    let huge = "x".repeat(MAX_FRAME_LEN + 1);
    assert!(matches!(to_frame(&huge), Err(EncodeError::TooLong { .. })));
    let mut out = vec![9u8];
    assert!(encode_frame(&huge, &mut out).is_err());
    assert_eq!(out, [9], "a refused message leaves the buffer as it was");
}

/// A frame row as heavy in integers as rows get: full id lists, whose ids cost 2 bytes on the
/// wire and 8 when decoded.
fn heavy_frame_row(index: u32) -> FrameRow {
    let ids = |kind| IdList {
        ids: vec![GroupId { kind, number: 1 }; MAX_IDS_PER_ROW],
        total: u32::MAX,
    };
    FrameRow {
        index,
        function: "f".into(),
        module: "m".into(),
        kind: FrameKind::User,
        proprietary: 1,
        frame_shared: ids(GroupKind::FrameShared),
        thread_shared: ids(GroupKind::ThreadShared),
        developed: ids(GroupKind::GlobalOnly),
    }
}

fn frame_page_of(wire_bytes: usize) -> ServerMessage {
    let row_len = encoded_len(&heavy_frame_row(0));
    let rows = (0..(wire_bytes / row_len) as u32)
        .map(heavy_frame_row)
        .collect();
    ServerMessage::Response {
        id: RequestId(1),
        body: Box::new(Response::Frames(FramePage {
            snapshot: SnapshotId(1),
            tid: 1,
            page: PageInfo::default(),
            rows,
        })),
    }
}

#[test]
fn an_answer_filling_the_budget_decodes_whatever_its_shape() {
    use heaptui_protocol::answer::ANSWER_BUDGET;
    let message = frame_page_of(ANSWER_BUDGET);
    let frame = to_frame(&message).unwrap();
    assert!(frame.len() > ANSWER_BUDGET * 9 / 10, "{}", frame.len());
    assert_eq!(
        decode_payload::<ServerMessage>(&frame[4..]).unwrap(),
        message
    );
    // Why the budget is an eighth of the frame: a legal 4.5 MB frame of one-byte tids is
    // charged four bytes a tid when decoded, over the limit.
    let big = to_frame(&ServerMessage::Response {
        id: RequestId(1),
        body: Box::new(Response::Release(ReleaseAnswer {
            snapshot: SnapshotId(1),
            tids: vec![1; 4_500_000],
            bytes: 0,
        })),
    })
    .unwrap();
    assert!(big.len() < MAX_FRAME_LEN);
    assert!(matches!(
        decode_payload::<ServerMessage>(&big[4..]),
        Err(DecodeError::Bincode(
            bincode::error::DecodeError::LimitExceeded
        ))
    ));
}
