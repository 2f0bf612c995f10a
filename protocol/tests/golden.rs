//! Golden byte fixtures of the current protocol version: one whole frame per message kind,
//! committed in `tests/golden/v<version>/`. Any change to the wire — a field added, reordered or retyped, a variant
//! moved — fails here, which is the cue to bump `PROTOCOL_VERSION` (and add version-2
//! fixtures) rather than silently break agents and clients of another release.
//!
//! The files were written once by this test with `HEAPTUI_BLESS_GOLDEN=1`; a normal run only
//! reads and compares them.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use heaptui_protocol::*;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/v{PROTOCOL_VERSION}"))
}

/// A decoder for one fixture: decodes the payload and says whether it equals the sample.
type Check = Box<dyn Fn(&[u8]) -> Result<(), String>>;

fn check_as<M>(sample: M) -> Check
where
    M: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug + 'static,
{
    Box::new(move |payload| {
        let got: M = decode_payload(payload).map_err(|e| e.to_string())?;
        if got == sample {
            Ok(())
        } else {
            Err(format!("decoded {got:?}\n  expected {sample:?}"))
        }
    })
}

/// Every fixture: its file name, its frame as encoded today, and its decoder check.
fn fixtures() -> Vec<(String, Vec<u8>, Check)> {
    let mut out: Vec<(String, Vec<u8>, Check)> = Vec::new();
    out.push((
        "hello".into(),
        to_frame(&common::sample_hello()).unwrap(),
        check_as(common::sample_hello()),
    ));
    out.push((
        "welcome-accepted".into(),
        to_frame(&common::sample_welcome()).unwrap(),
        check_as(common::sample_welcome()),
    ));
    out.push((
        "welcome-refused".into(),
        to_frame(&common::sample_refusal()).unwrap(),
        check_as(common::sample_refusal()),
    ));
    for request in common::sample_requests() {
        out.push((
            format!("request-{}", request.body.kind()),
            to_frame(&request).unwrap(),
            check_as(request),
        ));
    }
    for (i, response) in common::sample_responses().into_iter().enumerate() {
        let message = ServerMessage::Response {
            id: RequestId(1000 + i as u64),
            body: Box::new(response.clone()),
        };
        out.push((
            format!("response-{}", response.kind()),
            to_frame(&message).unwrap(),
            check_as(message),
        ));
    }
    for push in common::sample_pushes() {
        let message = ServerMessage::Push(push.clone());
        out.push((
            format!("push-{}", push.kind()),
            to_frame(&message).unwrap(),
            check_as(message),
        ));
    }
    out
}

#[test]
fn the_samples_cover_every_message_kind() {
    let requests: BTreeSet<_> = common::sample_requests()
        .iter()
        .map(|r| r.body.kind())
        .collect();
    let responses: BTreeSet<_> = common::sample_responses()
        .iter()
        .map(|r| r.kind())
        .collect();
    let pushes: BTreeSet<_> = common::sample_pushes().iter().map(|p| p.kind()).collect();
    assert_eq!(requests, RequestBody::KINDS.iter().copied().collect());
    assert_eq!(responses, Response::KINDS.iter().copied().collect());
    assert_eq!(pushes, Push::KINDS.iter().copied().collect());
}

#[test]
fn version_1_fixtures_decode_and_encode_byte_for_byte() {
    let dir = golden_dir();
    let fixtures = fixtures();
    if std::env::var_os("HEAPTUI_BLESS_GOLDEN").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes, _) in &fixtures {
            std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
        }
        eprintln!("wrote {} fixtures to {}", fixtures.len(), dir.display());
    }

    let mut failures = Vec::new();
    for (name, encoded, check) in &fixtures {
        let path = dir.join(format!("{name}.bin"));
        let golden = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                failures.push(format!("{name}: cannot read {}: {e}", path.display()));
                continue;
            }
        };
        // Old bytes must still decode to the same value…
        let mut decoder = FrameDecoder::new(MAX_FRAME_LEN);
        decoder.push(&golden).unwrap();
        match decoder.next_frame() {
            Ok(Some(payload)) => {
                if let Err(e) = check(&payload) {
                    failures.push(format!("{name}: golden bytes decode differently: {e}"));
                }
            }
            other => failures.push(format!("{name}: golden file is not one frame: {other:?}")),
        }
        if !decoder.is_at_boundary() {
            failures.push(format!("{name}: golden file has bytes after its frame"));
        }
        // …and today's encoder must produce the very same bytes.
        if &golden != encoded {
            failures.push(format!(
                "{name}: encoding changed ({} golden bytes, {} now); bump PROTOCOL_VERSION",
                golden.len(),
                encoded.len()
            ));
        }
    }

    let expected: BTreeSet<String> = fixtures
        .iter()
        .map(|(n, _, _)| format!("{n}.bin"))
        .collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for stray in present.difference(&expected) {
        failures.push(format!("{stray}: a golden file no message kind produces"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_handshake_prefix_is_frozen() {
    // Whatever later versions change, a hello and a welcome start with the magic and then the
    // version as a varint, so every release can tell another release's version apart.
    let hello = to_frame(&common::sample_hello()).unwrap();
    assert_eq!(&hello[4..12], b"HEAPTUI\0");
    assert_eq!(u32::from(hello[12]), PROTOCOL_VERSION);
    let welcome = to_frame(&common::sample_welcome()).unwrap();
    assert_eq!(&welcome[4..12], b"HEAPTUI\0");
    assert_eq!(u32::from(welcome[12]), PROTOCOL_VERSION);
}
