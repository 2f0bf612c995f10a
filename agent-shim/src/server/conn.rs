//! One client connection, on its own thread: the handshake, then requests answered in order,
//! and live counters pushed about once a second while subscribed, with the agent's events
//! (`events`: shortage reports, measured releases) forwarded within a [`TICK`] of being
//! published.
//!
//! Bounded by design: the hello must arrive within [`HANDSHAKE_TIMEOUT`] and be at most
//! `HANDSHAKE_MAX_FRAME_LEN` bytes; afterwards a frame that has begun must keep arriving (a
//! client that sends half a frame and stalls is closed after [`STALL_TIMEOUT`]); an answer that
//! the client does not read within [`WRITE_TIMEOUT`] closes it. Memory per connection is one
//! read buffer, the frame being received (at most `MAX_FRAME_LEN`) and the answer being sent
//! (kept, with the chunk's bytes and what the chunks are made from, `state::Fetch`, for the
//! next chunk of a snapshot fetch, until the client has not asked for it for [`FETCH_IDLE`]:
//! an abandoned fetch lets go of the snapshot file's encoding too); the kernel's socket
//! buffer is the only queue. Every
//! connection ends with one log line saying why.
//!
//! Never: block another connection or the target's threads, trust anything before the hello,
//! or keep answering on a stream whose frame boundaries are lost.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use heaptui_protocol::handshake::server_handshake;
use heaptui_protocol::{
    ErrorKind, FrameDecoder, MAX_FRAME_LEN, Push, Request, RequestBody, Response, ServerMessage,
    decode_payload, encode_frame,
};

use super::Stream;
use super::{events, state};

/// How long a client has to send its hello.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a frame that has begun may go without a byte.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one answer may wait for the client to read it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Period of the counters pushes.
pub const PUSH_INTERVAL: Duration = Duration::from_secs(1);
/// How often an idle connection wakes (pushes, stall checks).
const TICK: Duration = Duration::from_millis(100);
/// How long a connection keeps the buffers of a snapshot fetch (the last chunk's bytes and
/// its frame, 16 MiB, and the encoding the chunks are made from: a whole snapshot file for
/// `SnapshotData`) waiting for the next chunk: a client that stops fetching and stays
/// connected must not hold them in the target for the connection's life.
pub const FETCH_IDLE: Duration = Duration::from_secs(1);

/// Serves one connection to its end and logs why it ended.
pub fn serve(stream: &mut Stream, peer: String, token: &str) {
    let reason = match run(stream, &peer, token) {
        Ok(()) => "the client closed the connection".to_string(),
        Err(reason) => reason,
    };
    crate::agent_info!("connection from {peer} closed: {reason}");
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn run(stream: &mut Stream, peer: &str, token: &str) -> Result<(), String> {
    stream
        .set_timeouts(Some(HANDSHAKE_TIMEOUT), Some(WRITE_TIMEOUT))
        .map_err(|e| format!("cannot set socket timeouts: {e}"))?;
    let hello = server_handshake(stream, token, state::agent_info())
        .map_err(|e| format!("refused at the handshake: {e}"))?;
    crate::agent_info!("client {:?} connected from {peer}", hello.client);
    stream
        .set_timeouts(Some(TICK), Some(WRITE_TIMEOUT))
        .map_err(|e| format!("cannot set socket timeouts: {e}"))?;

    let mut decoder = FrameDecoder::new(MAX_FRAME_LEN);
    let mut buf = vec![0u8; 64 << 10];
    let mut out = Vec::new();
    // While a client fetches a snapshot: the bytes of the last chunk sent (the next chunk is
    // copied into them; see `send` for the frame's own buffer) and what the chunks are made
    // from (`state::Fetch`).
    let mut fetch = state::Fetch::default();
    // When the last chunk of an unfinished fetch was sent: `out` and `fetch` are kept for
    // the next one until [`FETCH_IDLE`] has passed without it.
    let mut fetch_sent: Option<Instant> = None;
    let mut subscribed = false;
    let mut last_push: Option<Instant> = None;
    // Where this connection is in the agent's events, while subscribed.
    let mut cursor: Option<events::Cursor> = None;
    let mut last_byte = Instant::now();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => {
                return decoder.finish().map_err(|e| format!("bad frame: {e}"));
            }
            Ok(n) => {
                last_byte = Instant::now();
                decoder
                    .push(&buf[..n])
                    .map_err(|e| format!("bad frame: {e}"))?;
                while let Some(payload) = decoder
                    .next_frame()
                    .map_err(|e| format!("bad frame: {e}"))?
                {
                    let request: Request = decode_payload(&payload)
                        .map_err(|e| format!("bad request ({} bytes): {e}", payload.len()))?;
                    let body = match request.body {
                        // The audit log names the operator's client and address.
                        RequestBody::Cancel { tid, dry_run } => {
                            Response::Cancel(crate::policy::operator_cancel(
                                tid,
                                dry_run,
                                crate::policy::Who::Operator(format!(
                                    "{:?} from {peer}",
                                    hello.client
                                )),
                            ))
                        }
                        _ => answer(&request.body, &mut subscribed, &mut fetch),
                    };
                    if subscribed && last_push.is_none() {
                        // The first push follows the subscription at once.
                        last_push = Some(Instant::now() - PUSH_INTERVAL);
                        cursor = Some(events::Cursor::now());
                    } else if !subscribed {
                        last_push = None;
                        cursor = None;
                    }
                    let fetching = more_to_fetch(&body);
                    if matches!(body, Response::KeptData(_) | Response::SnapshotData(_)) {
                        fetch_sent = fetching.then(Instant::now);
                    }
                    let message = ServerMessage::Response {
                        id: request.id,
                        body: Box::new(body),
                    };
                    // Other requests asked between a fetch's chunks leave its buffers be.
                    send(stream, &mut out, &message, fetch_sent.is_some())?;
                    if fetching
                        && let ServerMessage::Response { body, .. } = message
                        && let Response::KeptData(c) | Response::SnapshotData(c) = *body
                    {
                        fetch.spare = c.bytes;
                    }
                }
            }
            Err(e) if is_timeout(&e) => {
                if !decoder.is_at_boundary() && last_byte.elapsed() >= STALL_TIMEOUT {
                    return Err(format!(
                        "sent {} bytes of a frame, then nothing for {} s",
                        decoder.buffered(),
                        STALL_TIMEOUT.as_secs()
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
        // Checked on every wake-up, not only on idle ones: a client that keeps asking other
        // things after abandoning a fetch must not keep its buffers either.
        if let Some(sent) = fetch_sent
            && sent.elapsed() >= FETCH_IDLE
        {
            fetch_sent = None;
            let held = fetch.held_bytes() + out.capacity();
            fetch = state::Fetch::default();
            out = Vec::new();
            crate::agent_info!(
                "client at {peer} stopped fetching a snapshot: let go of the {held} bytes kept for its next chunk"
            );
        }
        if let Some(last) = last_push
            && last.elapsed() >= PUSH_INTERVAL
        {
            let push = ServerMessage::Push(Push::Counters(state::live_counters()));
            send(stream, &mut out, &push, fetch_sent.is_some())?;
            last_push = Some(Instant::now());
        }
        if let Some(c) = &mut cursor
            && c.behind()
        {
            let (pushes, missed) = c.take();
            if missed > 0 {
                crate::agent_info!(
                    "client at {peer} missed {missed} event(s): more than {} came between two of its wake-ups",
                    events::RING
                );
            }
            for push in pushes {
                send(
                    stream,
                    &mut out,
                    &ServerMessage::Push(push),
                    fetch_sent.is_some(),
                )?;
            }
        }
    }
}

/// Whether `body` is a snapshot chunk with more chunks after it (the client goes on
/// fetching: the buffers of this one serve the next).
fn more_to_fetch(body: &Response) -> bool {
    matches!(body, Response::KeptData(c) | Response::SnapshotData(c)
        if c.offset + (c.bytes.len() as u64) < c.total)
}

/// Encodes and writes one message; an answer too big for a frame becomes an error answer.
/// `fetching`: a client is fetching a snapshot (this is one of its chunks, or came between
/// two of them): the frame's buffer is kept for the next chunk instead of being given back
/// (fresh pages for every 8 MiB chunk cost more than the copy into them).
fn send(
    stream: &mut Stream,
    out: &mut Vec<u8>,
    message: &ServerMessage,
    fetching: bool,
) -> Result<(), String> {
    out.clear();
    if let Err(e) = encode_frame(message, out) {
        let ServerMessage::Response { id, .. } = message else {
            return Err(format!("cannot encode a push: {e}"));
        };
        out.clear();
        let fallback = ServerMessage::Response {
            id: *id,
            body: Box::new(Response::error(ErrorKind::Internal, e.to_string())),
        };
        encode_frame(&fallback, out).map_err(|e| format!("cannot encode an answer: {e}"))?;
    }
    stream.write_all(out).map_err(|e| {
        if is_timeout(&e) {
            format!(
                "the client did not read a {}-byte answer within {} s",
                out.len(),
                WRITE_TIMEOUT.as_secs()
            )
        } else {
            format!("write failed: {e}")
        }
    })?;
    // Large answers leave a large buffer behind; idle connections should not keep it.
    if out.capacity() > 1 << 20 && !fetching {
        *out = Vec::new();
    }
    Ok(())
}

/// The answer to one request.
/// `fetch`: what the connection holds for a snapshot fetch (see `state::Kept::chunk`).
pub fn answer(request: &RequestBody, subscribed: &mut bool, fetch: &mut state::Fetch) -> Response {
    match request {
        RequestBody::ProcessInfo => Response::ProcessInfo(state::process_info()),
        RequestBody::Subscribe => {
            *subscribed = true;
            Response::Subscribed {
                interval_ms: PUSH_INTERVAL.as_millis() as u32,
            }
        }
        RequestBody::Unsubscribe => {
            *subscribed = false;
            Response::Unsubscribed
        }
        RequestBody::TakeSnapshot => match state::take_snapshot() {
            Ok(info) => Response::Snapshot(info),
            Err(e) => Response::error(ErrorKind::Internal, format!("snapshot failed: {e}")),
        },
        RequestBody::Policy => Response::Policy(crate::policy::policy_answer()),
        RequestBody::Units { query, sort, page } => {
            crate::record::units::answer(*query, *sort, *page)
        }
        RequestBody::Growth { page } => Response::Growth(state::growth_page(*page)),
        RequestBody::CounterHistory => Response::CounterHistory(super::auto::counter_history()),
        RequestBody::Cancel { tid, dry_run } => Response::Cancel(crate::policy::operator_cancel(
            *tid,
            *dry_run,
            crate::policy::Who::Operator("(client unknown)".into()),
        )),
        other => {
            let Some(kept) = state::kept() else {
                return Response::error(
                    ErrorKind::NoSnapshot,
                    "no snapshot taken yet: take one first (heaptui asks with TakeSnapshot)",
                );
            };
            // The peak snapshot's bytes are served too (`heaptui snapshot --peak`).
            let chunk_asked = match other {
                RequestBody::SnapshotData { snapshot, offset } => {
                    Some((*snapshot, *offset, state::Form::File))
                }
                RequestBody::KeptData { snapshot, offset } => {
                    Some((*snapshot, *offset, state::Form::Analysed))
                }
                _ => None,
            };
            if let Some((snapshot, offset, form)) = chunk_asked
                && let Some(kept) = state::kept_by_id(snapshot)
            {
                let chunk = kept.chunk(form, offset, fetch);
                return match form {
                    state::Form::File => chunk.map_or_else(Response::Error, Response::SnapshotData),
                    state::Form::Analysed => chunk.map_or_else(Response::Error, Response::KeptData),
                };
            }
            kept.answerer().answer(other).unwrap_or_else(|| {
                Response::error(
                    ErrorKind::BadRequest,
                    format!("this agent does not answer {} requests", other.kind()),
                )
            })
        }
    }
}
