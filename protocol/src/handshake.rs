//! The handshake that must open every connection (docs/reference.md §6): the client's [`Hello`]
//! (magic, protocol version, token), the server's [`Welcome`] (its version, and either the agent's
//! description or a [`Refusal`] with a reason).
//!
//! Both frames begin with the same frozen prefix — the 8-byte [`MAGIC`], then the version —
//! and the decoders read that prefix before anything else. So whichever side is newer, the
//! other still recognises a heaptui peer and says "version X against Y" instead of "malformed
//! message", whatever a later version appends to these frames. Like lsp-server's
//! `initialize_start`, the server accepts nothing before a valid hello: a request, garbage or a
//! wrong token sent first is refused and the connection closed by the caller.
//!
//! The token is compared in constant time. This module decides whether a peer is admitted; it
//! never does I/O policy (timeouts, logging, closing) beyond the thin blocking helpers.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::codec::{self, DecodeError, HANDSHAKE_CONFIG, HANDSHAKE_MAX_FRAME_LEN, ProtocolError};
use crate::frame::{FrameError, read_frame};
use crate::message::Request;

/// The first 8 bytes of every hello and welcome payload.
pub const MAGIC: [u8; 8] = *b"HEAPTUI\0";

/// The version of everything in this crate that goes on the wire.
pub const PROTOCOL_VERSION: u32 = 3;

/// The client's first frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: [u8; 8],
    pub version: u32,
    /// The agent's token, as read from its token file (whitespace trimmed).
    pub token: String,
    /// Who connects, e.g. `heaptui 0.1.0`, for the agent's log.
    pub client: String,
}

impl Hello {
    /// A hello of this protocol version.
    pub fn new(token: impl Into<String>, client: impl Into<String>) -> Self {
        Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            token: token.into(),
            client: client.into(),
        }
    }
}

/// What the agent says about itself when it admits a client.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub pid: u32,
    pub command: String,
    /// The agent's crate version.
    pub agent_version: String,
    /// When the agent loaded, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
}

/// Why the server refused a connection.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RefusalReason {
    /// The first frame is not a heaptui hello (garbage, another protocol).
    BadMagic,
    /// The first frame is a heaptui request: the hello must come first.
    NotHello,
    VersionMismatch,
    WrongToken,
    /// A hello with the right magic and version that does not decode.
    Malformed,
    /// The agent cannot take another client now.
    Busy,
}

/// A refusal: the reason and one line for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub message: String,
}

/// The server's answer to a hello.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    Accepted(AgentInfo),
    Refused(Refusal),
}

/// The server's first frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    pub magic: [u8; 8],
    pub version: u32,
    pub admission: Admission,
}

/// Longest command line a welcome carries, so that the welcome stays well inside
/// [`HANDSHAKE_MAX_FRAME_LEN`] (Java and Python command lines run to kilobytes).
pub const MAX_WELCOME_COMMAND_LEN: usize = 1024;

impl Welcome {
    /// Admits the client; the command line is clipped to [`MAX_WELCOME_COMMAND_LEN`] bytes
    /// (the full one is in the process info).
    pub fn accepted(mut agent: AgentInfo) -> Self {
        agent.command = crate::answer::clip_to(&agent.command, MAX_WELCOME_COMMAND_LEN);
        Welcome {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            admission: Admission::Accepted(agent),
        }
    }

    pub fn refused(refusal: Refusal) -> Self {
        Welcome {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            admission: Admission::Refused(refusal),
        }
    }
}

/// Which end of the connection a version belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Client,
    Agent,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Peer::Client => "client",
            Peer::Agent => "agent",
        })
    }
}

/// Why a handshake failed. The `Display` text is the one line to show or log.
#[derive(Debug, Error)]
pub enum HandshakeError {
    #[error("the {0}'s first frame is not a heaptui handshake (bad magic): is it a heaptui {0}?")]
    BadMagic(Peer),
    #[error("the client sent a {got} request before its hello; the hello must come first")]
    NotHello { got: &'static str },
    #[error("{}", version_message(*.ours, *.theirs, *.peer))]
    VersionMismatch { ours: u32, theirs: u32, peer: Peer },
    #[error("wrong token: the client's token does not match this agent's token file")]
    WrongToken,
    #[error("malformed handshake from the {peer}: {error}")]
    Malformed { peer: Peer, error: DecodeError },
    #[error("the agent refused the connection: {}", .0.message)]
    Refused(Refusal),
    #[error("handshake failed: {0}")]
    Frame(#[from] FrameError),
    #[error("handshake failed: {0}")]
    Protocol(#[from] ProtocolError),
}

fn version_message(ours: u32, theirs: u32, peer: Peer) -> String {
    let (agent, client) = match peer {
        Peer::Agent => (theirs, ours),
        Peer::Client => (ours, theirs),
    };
    let advice = if client < agent {
        "upgrade heaptui to the release of the agent"
    } else {
        "use the heaptui release that matches the agent, or restart the target with the newer agent"
    };
    format!(
        "protocol version mismatch: the agent speaks heaptui protocol {agent}, the client speaks {client}; {advice}"
    )
}

impl HandshakeError {
    /// The refusal a server sends back for this failure (the reason code and the same line it
    /// logs), so that the client can show why it was turned away.
    pub fn refusal(&self) -> Refusal {
        let reason = match self {
            HandshakeError::BadMagic(_) => RefusalReason::BadMagic,
            HandshakeError::NotHello { .. } => RefusalReason::NotHello,
            HandshakeError::VersionMismatch { .. } => RefusalReason::VersionMismatch,
            HandshakeError::WrongToken => RefusalReason::WrongToken,
            HandshakeError::Refused(r) => r.reason,
            HandshakeError::Malformed { .. }
            | HandshakeError::Frame(_)
            | HandshakeError::Protocol(_) => RefusalReason::Malformed,
        };
        Refusal {
            reason,
            message: self.to_string(),
        }
    }
}

/// Reads the frozen prefix: `Some(version)` when the payload starts with [`MAGIC`].
fn prefix_version(payload: &[u8]) -> Option<u32> {
    // Decoded without the trailing-bytes rule: the rest is whatever that version sends.
    let ((magic, version), _): (([u8; 8], u32), usize) =
        bincode::serde::decode_from_slice(payload, HANDSHAKE_CONFIG).ok()?;
    (magic == MAGIC).then_some(version)
}

/// Server side: decodes the client's first payload as a hello of this version. A request sent
/// first is [`HandshakeError::NotHello`]; anything else without the magic is `BadMagic`.
pub fn decode_hello(payload: &[u8]) -> Result<Hello, HandshakeError> {
    let Some(version) = prefix_version(payload) else {
        return Err(
            match codec::decode_with::<Request, _>(payload, HANDSHAKE_CONFIG) {
                Ok(request) => HandshakeError::NotHello {
                    got: request.body.kind(),
                },
                Err(_) => HandshakeError::BadMagic(Peer::Client),
            },
        );
    };
    if version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: version,
            peer: Peer::Client,
        });
    }
    codec::decode_with(payload, HANDSHAKE_CONFIG).map_err(|error| HandshakeError::Malformed {
        peer: Peer::Client,
        error,
    })
}

/// Server side: admits a decoded hello when its magic, version and token are right.
/// An empty `expected_token` admits nobody (an agent without a token file is misconfigured).
pub fn check_hello(hello: &Hello, expected_token: &str) -> Result<(), HandshakeError> {
    if hello.magic != MAGIC {
        return Err(HandshakeError::BadMagic(Peer::Client));
    }
    if hello.version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: hello.version,
            peer: Peer::Client,
        });
    }
    if expected_token.is_empty() || !tokens_match(hello.token.as_bytes(), expected_token.as_bytes())
    {
        return Err(HandshakeError::WrongToken);
    }
    Ok(())
}

/// Server side, all in one: judges the client's first payload and gives the welcome to send
/// back either way. Proceed only on `Ok`; on `Err`, send the welcome (a refusal), log the
/// error's line and close.
pub fn accept(
    payload: &[u8],
    expected_token: &str,
    agent: AgentInfo,
) -> (Welcome, Result<Hello, HandshakeError>) {
    let judged = decode_hello(payload).and_then(|hello| {
        check_hello(&hello, expected_token)?;
        Ok(hello)
    });
    match judged {
        Ok(hello) => (Welcome::accepted(agent), Ok(hello)),
        Err(e) => (Welcome::refused(e.refusal()), Err(e)),
    }
}

/// Client side: decodes the server's first payload. A version mismatch is reported from the
/// prefix alone, whatever the agent's version put after it.
pub fn decode_welcome(payload: &[u8]) -> Result<Welcome, HandshakeError> {
    let version = prefix_version(payload).ok_or(HandshakeError::BadMagic(Peer::Agent))?;
    if version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: version,
            peer: Peer::Agent,
        });
    }
    codec::decode_with(payload, HANDSHAKE_CONFIG).map_err(|error| HandshakeError::Malformed {
        peer: Peer::Agent,
        error,
    })
}

/// Client side: the agent's description when the welcome admits us.
pub fn check_welcome(welcome: &Welcome) -> Result<&AgentInfo, HandshakeError> {
    if welcome.magic != MAGIC {
        return Err(HandshakeError::BadMagic(Peer::Agent));
    }
    if welcome.version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: welcome.version,
            peer: Peer::Agent,
        });
    }
    match &welcome.admission {
        Admission::Accepted(agent) => Ok(agent),
        Admission::Refused(refusal) => Err(HandshakeError::Refused(refusal.clone())),
    }
}

/// Blocking client handshake: sends the hello, reads and checks the welcome.
pub fn client_handshake<S: Read + Write>(
    stream: &mut S,
    hello: &Hello,
) -> Result<AgentInfo, HandshakeError> {
    codec::send(stream, hello)?;
    let payload = read_frame(stream, HANDSHAKE_MAX_FRAME_LEN)?;
    let welcome = decode_welcome(&payload)?;
    check_welcome(&welcome).cloned()
}

/// Blocking server handshake: reads the first frame (at most [`HANDSHAKE_MAX_FRAME_LEN`]
/// bytes), answers with a welcome or a refusal, and returns the admitted hello. On `Err` the
/// refusal has been sent when the stream allowed it; the caller logs the error and closes.
pub fn server_handshake<S: Read + Write>(
    stream: &mut S,
    expected_token: &str,
    agent: AgentInfo,
) -> Result<Hello, HandshakeError> {
    let payload = match read_frame(stream, HANDSHAKE_MAX_FRAME_LEN) {
        Ok(payload) => payload,
        Err(e @ FrameError::TooLong { .. }) => {
            // An oversized first frame is garbage or another protocol: say so, then close.
            let error = HandshakeError::BadMagic(Peer::Client);
            let _ = codec::send(stream, &Welcome::refused(error.refusal()));
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let (welcome, verdict) = accept(&payload, expected_token, agent);
    let sent = codec::send(stream, &welcome);
    let hello = verdict?;
    sent?;
    Ok(hello)
}

/// Compares a secret in time independent of where the first difference is. Lengths are not
/// secret (tokens have a fixed length), so a length mismatch may be seen in the timing.
pub fn tokens_match(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, &e) in expected.iter().enumerate() {
        // Every byte of `expected` is visited whatever `given` holds.
        let g = given.get(i).copied().unwrap_or(!e);
        diff |= g ^ e;
    }
    // Keep the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(tokens_match(b"abc", b"abc"));
        assert!(!tokens_match(b"abd", b"abc"));
        assert!(!tokens_match(b"ab", b"abc"));
        assert!(!tokens_match(b"abcd", b"abc"));
        assert!(!tokens_match(b"", b"abc"));
        assert!(tokens_match(b"", b""));
    }

    #[test]
    fn an_empty_expected_token_admits_nobody() {
        let hello = Hello::new("", "test");
        assert!(matches!(
            check_hello(&hello, ""),
            Err(HandshakeError::WrongToken)
        ));
    }

    #[test]
    fn version_messages_name_both_versions_and_the_fix() {
        let old_client = HandshakeError::VersionMismatch {
            ours: 1,
            theirs: 2,
            peer: Peer::Agent,
        }
        .to_string();
        assert!(
            old_client.contains("agent speaks heaptui protocol 2"),
            "{old_client}"
        );
        assert!(old_client.contains("client speaks 1"), "{old_client}");
        assert!(old_client.contains("upgrade heaptui"), "{old_client}");
        let new_client = HandshakeError::VersionMismatch {
            ours: 1,
            theirs: 2,
            peer: Peer::Client,
        }
        .to_string();
        assert!(
            new_client.contains("agent speaks heaptui protocol 1"),
            "{new_client}"
        );
        assert!(new_client.contains("client speaks 2"), "{new_client}");
    }
}
