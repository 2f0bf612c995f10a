//! The handshake gate: only a hello of this version with the right token gets in; every
//! other first frame is refused with a reason the client can show, in both directions.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::thread;

use heaptui_protocol::handshake::{client_handshake, server_handshake};
use heaptui_protocol::*;
use serde::Serialize;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn agent() -> AgentInfo {
    AgentInfo {
        pid: 4242,
        command: "./server".into(),
        agent_version: "0.1.0".into(),
        started_unix_ms: 1,
    }
}

fn payload<M: Serialize>(m: &M) -> Vec<u8> {
    to_frame(m).unwrap()[4..].to_vec()
}

/// A later version's hello: same prefix, then fields this version does not know.
#[derive(Serialize)]
struct FutureHello {
    magic: [u8; 8],
    version: u32,
    token: String,
    client: String,
    compression: bool,
    features: Vec<String>,
}

#[derive(Serialize)]
struct FutureWelcome {
    magic: [u8; 8],
    version: u32,
    admission_tag: u32,
    something_new: String,
}

#[test]
fn the_right_hello_is_admitted() {
    let hello = Hello::new(TOKEN, "heaptui test");
    let (welcome, verdict) = accept(&payload(&hello), TOKEN, agent());
    assert_eq!(verdict.unwrap(), hello);
    assert_eq!(check_welcome(&welcome).unwrap(), &agent());
    // And the client reads that welcome back from its bytes.
    let decoded = decode_welcome(&payload(&welcome)).unwrap();
    assert_eq!(check_welcome(&decoded).unwrap().pid, 4242);
}

fn refused(first: &[u8]) -> (RefusalReason, HandshakeError) {
    let (welcome, verdict) = accept(first, TOKEN, agent());
    let error = verdict.unwrap_err();
    let Admission::Refused(refusal) = &welcome.admission else {
        panic!("admitted after {error}");
    };
    assert_eq!(refusal.message, error.to_string());
    // The client turns the refusal into an error carrying the same line.
    let client_side = check_welcome(&decode_welcome(&payload(&welcome)).unwrap()).unwrap_err();
    assert!(matches!(client_side, HandshakeError::Refused(_)));
    assert!(client_side.to_string().contains(&refusal.message));
    (refusal.reason, error)
}

#[test]
fn a_wrong_token_is_refused() {
    let (reason, error) = refused(&payload(&Hello::new(
        "0123456789abcdef0123456789abcdeX",
        "t",
    )));
    assert_eq!(reason, RefusalReason::WrongToken);
    assert!(error.to_string().contains("wrong token"), "{error}");
    let (reason, _) = refused(&payload(&Hello::new("", "t")));
    assert_eq!(reason, RefusalReason::WrongToken);
}

#[test]
fn a_wrong_magic_is_refused() {
    let mut hello = Hello::new(TOKEN, "t");
    hello.magic = *b"HEAPTUI\x01";
    let (reason, error) = refused(&payload(&hello));
    assert_eq!(reason, RefusalReason::BadMagic);
    assert!(error.to_string().contains("bad magic"), "{error}");
    assert!(matches!(
        check_hello(&hello, TOKEN),
        Err(HandshakeError::BadMagic(Peer::Client))
    ));
}

#[test]
fn garbage_first_is_refused_as_bad_magic() {
    for garbage in [&b""[..], b"GET / HTTP/1.1\r\n\r\n", &[0xff; 40], &[0; 3]] {
        let (reason, _) = refused(garbage);
        assert_eq!(reason, RefusalReason::BadMagic, "{garbage:?}");
    }
}

#[test]
fn a_request_before_the_hello_is_refused() {
    for request in common::sample_requests() {
        let (reason, error) = refused(&payload(&request));
        assert_eq!(reason, RefusalReason::NotHello, "{}", request.body.kind());
        assert!(
            error.to_string().contains(request.body.kind()),
            "{error} should name the {} request",
            request.body.kind()
        );
    }
}

#[test]
fn a_newer_client_is_told_the_versions() {
    let future = FutureHello {
        magic: MAGIC,
        version: PROTOCOL_VERSION + 1,
        token: TOKEN.into(),
        client: "heaptui 9".into(),
        compression: true,
        features: vec!["zstd".into()],
    };
    let (reason, error) = refused(&payload(&future));
    assert_eq!(reason, RefusalReason::VersionMismatch);
    let line = error.to_string();
    let ours = PROTOCOL_VERSION;
    let theirs = PROTOCOL_VERSION + 1;
    assert!(
        line.contains(&format!("agent speaks heaptui protocol {ours}")),
        "{line}"
    );
    assert!(line.contains(&format!("client speaks {theirs}")), "{line}");
    // A hello struct of this shape with another version is refused by the checker too.
    let mut hello = Hello::new(TOKEN, "t");
    hello.version = 0;
    assert!(matches!(
        check_hello(&hello, TOKEN),
        Err(HandshakeError::VersionMismatch {
            theirs: 0,
            peer: Peer::Client,
            ..
        })
    ));
}

#[test]
fn an_older_or_newer_agent_is_told_apart_by_the_client() {
    for theirs in [0, PROTOCOL_VERSION + 1] {
        let future = FutureWelcome {
            magic: MAGIC,
            version: theirs,
            admission_tag: 7,
            something_new: "x".into(),
        };
        let err = decode_welcome(&payload(&future)).unwrap_err();
        let HandshakeError::VersionMismatch {
            ours,
            theirs: got,
            peer,
        } = err
        else {
            panic!("{err}");
        };
        assert_eq!((ours, got, peer), (PROTOCOL_VERSION, theirs, Peer::Agent));
        assert!(
            err.to_string()
                .contains(&format!("agent speaks heaptui protocol {theirs}"))
        );
    }
    // A welcome value of another version is refused by the checker.
    let mut welcome = common::sample_welcome();
    welcome.version = PROTOCOL_VERSION + 1;
    assert!(matches!(
        check_welcome(&welcome),
        Err(HandshakeError::VersionMismatch { theirs, .. }) if theirs == PROTOCOL_VERSION + 1
    ));
}

#[test]
fn a_server_that_is_not_an_agent_is_recognised() {
    assert!(matches!(
        decode_welcome(b"HTTP/1.1 400 Bad Request\r\n\r\n"),
        Err(HandshakeError::BadMagic(Peer::Agent))
    ));
    // A right prefix with a broken body is malformed, not a version problem.
    let mut bytes = payload(&common::sample_welcome());
    bytes.truncate(10);
    assert!(matches!(
        decode_welcome(&bytes),
        Err(HandshakeError::Malformed {
            peer: Peer::Agent,
            ..
        })
    ));
}

#[test]
fn a_hello_with_trailing_bytes_is_malformed() {
    let mut bytes = payload(&Hello::new(TOKEN, "t"));
    bytes.push(0);
    let (reason, _) = refused(&bytes);
    assert_eq!(reason, RefusalReason::Malformed);
}

#[test]
fn blocking_handshake_over_a_socket_pair() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    let agent_thread = thread::spawn(move || {
        let hello = server_handshake(&mut server, TOKEN, agent()).unwrap();
        // After the gate: requests and answers flow.
        let request: Request = recv(&mut server, MAX_FRAME_LEN).unwrap();
        send(
            &mut server,
            &ServerMessage::Response {
                id: request.id,
                body: Box::new(Response::Unsubscribed),
            },
        )
        .unwrap();
        hello.client
    });
    let info = client_handshake(&mut client, &Hello::new(TOKEN, "heaptui test")).unwrap();
    assert_eq!(info, agent());
    send(
        &mut client,
        &Request {
            id: RequestId(9),
            body: RequestBody::Unsubscribe,
        },
    )
    .unwrap();
    let answer: ServerMessage = recv(&mut client, MAX_FRAME_LEN).unwrap();
    assert_eq!(
        answer,
        ServerMessage::Response {
            id: RequestId(9),
            body: Box::new(Response::Unsubscribed)
        }
    );
    assert_eq!(agent_thread.join().unwrap(), "heaptui test");
}

#[test]
fn blocking_handshake_with_a_wrong_token_fails_on_both_sides() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    let agent_thread = thread::spawn(move || server_handshake(&mut server, TOKEN, agent()));
    let err = client_handshake(&mut client, &Hello::new("nope", "t")).unwrap_err();
    assert!(
        matches!(&err, HandshakeError::Refused(r) if r.reason == RefusalReason::WrongToken),
        "{err}"
    );
    assert!(matches!(
        agent_thread.join().unwrap(),
        Err(HandshakeError::WrongToken)
    ));
}

#[test]
fn an_oversized_first_frame_is_refused_before_reading_it() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    let agent_thread = thread::spawn(move || server_handshake(&mut server, TOKEN, agent()));
    // Announce 1 MiB (over the handshake limit) and send none of it.
    client.write_all(&(1u32 << 20).to_be_bytes()).unwrap();
    let err = agent_thread.join().unwrap().unwrap_err();
    assert!(
        matches!(err, HandshakeError::Frame(FrameError::TooLong { len, max })
            if len == 1 << 20 && max == HANDSHAKE_MAX_FRAME_LEN),
        "{err}"
    );
    // The client still learns why.
    let welcome =
        decode_welcome(&read_frame(&mut client, HANDSHAKE_MAX_FRAME_LEN).unwrap()).unwrap();
    assert!(matches!(
        check_welcome(&welcome),
        Err(HandshakeError::Refused(Refusal {
            reason: RefusalReason::BadMagic,
            ..
        }))
    ));
}

#[test]
fn a_peer_that_hangs_up_is_a_closed_connection() {
    let (client, mut server) = UnixStream::pair().unwrap();
    drop(client);
    let err = server_handshake(&mut server, TOKEN, agent()).unwrap_err();
    assert!(
        matches!(err, HandshakeError::Frame(FrameError::Closed)),
        "{err}"
    );
    // And half a header then a hang-up is a truncation.
    let (mut client, mut server) = UnixStream::pair().unwrap();
    client.write_all(&[0, 0]).unwrap();
    drop(client);
    let err = server_handshake(&mut server, TOKEN, agent()).unwrap_err();
    assert!(
        matches!(
            err,
            HandshakeError::Frame(FrameError::Truncated { got: 2, want: 4 })
        ),
        "{err}"
    );
    let mut rest = Vec::new();
    let _ = server.read_to_end(&mut rest);
}

#[test]
fn a_hello_claiming_a_huge_token_is_refused_before_allocating_it() {
    // Magic, version 1, then a token length of 10 MiB (varint tag 252 = u32 follows) and a
    // few bytes: under the full-size limit the decoder would allocate 10 MiB before finding
    // the bytes missing; under the handshake limit the claim itself is refused.
    let mut payload = MAGIC.to_vec();
    payload.push(PROTOCOL_VERSION as u8);
    payload.push(252);
    payload.extend_from_slice(&(10u32 << 20).to_le_bytes());
    payload.extend_from_slice(b"abc");
    let err = decode_hello(&payload).unwrap_err();
    assert!(
        matches!(
            &err,
            HandshakeError::Malformed {
                peer: Peer::Client,
                error: DecodeError::Bincode(bincode::error::DecodeError::LimitExceeded)
            }
        ),
        "{err}"
    );
}

#[test]
fn a_long_command_line_is_clipped_in_the_welcome() {
    let welcome = Welcome::accepted(AgentInfo {
        command: "java -cp ".to_string() + &"lib/x.jar:".repeat(2000),
        ..agent()
    });
    let Admission::Accepted(info) = &welcome.admission else {
        unreachable!()
    };
    assert!(info.command.len() <= heaptui_protocol::handshake::MAX_WELCOME_COMMAND_LEN);
    assert!(info.command.starts_with("java -cp lib/x.jar:"));
    assert!(to_frame(&welcome).unwrap().len() < HANDSHAKE_MAX_FRAME_LEN);
}
