//! The live data source of the TUI (the channel of `crate::source`): one tokio task per agent
//! that owns the connection, writes queued requests, matches nothing itself (answers carry
//! their request ids), forwards answers and pushes as [`SourceEvent`]s, and reconnects with
//! backoff when the agent goes away.
//!
//! While disconnected, requests are answered at once with an error (the TUI never waits on a
//! dead connection); after a reconnect the subscription is renewed, and the user asks again
//! for what it shows. Never blocks the caller; never computes figures.

use std::time::Duration;

use heaptui_protocol::handshake::{check_welcome, decode_welcome};
use heaptui_protocol::{
    AgentInfo, ErrorKind, FrameDecoder, HANDSHAKE_MAX_FRAME_LEN, MAX_FRAME_LEN, Request,
    RequestBody, RequestId, Response, ServerMessage, decode_payload, to_frame,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{Address, ClientError, TokenSource, session, token};
use crate::source::{SourceEvent, SourceEvents, SourceHandle};

trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// First wait before reconnecting; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the agent at `address` (the first connection must succeed), then keeps the
/// connection in a background task that reconnects on loss.
pub async fn connect(
    address: &Address,
    token: TokenSource,
) -> Result<(SourceHandle, SourceEvents), ClientError> {
    let (conn, agent) = open(address, &token).await?;
    let (request_tx, request_rx) = mpsc::unbounded_channel::<Request>();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let _ = event_tx.send(SourceEvent::Connected {
        description: describe(&agent),
    });
    tokio::spawn(run(address.clone(), token, conn, request_rx, event_tx));
    Ok((SourceHandle::new(request_tx, true), event_rx))
}

fn describe(agent: &AgentInfo) -> String {
    format!(
        "pid {} {} (agent {})",
        agent.pid,
        crate::figures::one_line(agent.command.clone()),
        agent.agent_version
    )
}

async fn open(
    address: &Address,
    token: &TokenSource,
) -> Result<(Box<dyn Conn>, AgentInfo), ClientError> {
    let mut conn: Box<dyn Conn> = match address {
        Address::Tcp { host, port } => {
            let connect = tokio::net::TcpStream::connect((host.as_str(), *port));
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .map_err(|_| {
                    ClientError::new(format!(
                        "cannot connect to {address}: no answer within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    ))
                })?
                .map_err(|e| session::connect_error(address, &e))?;
            let _ = stream.set_nodelay(true);
            Box::new(stream)
        }
        Address::Unix(path) => Box::new(
            tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| session::connect_error(address, &e))?,
        ),
    };
    let token = token::read(address, token).map_err(ClientError::new)?;
    let shake = async {
        let hello = to_frame(&session::hello(token)).map_err(|e| e.to_string())?;
        conn.write_all(&hello).await.map_err(|e| e.to_string())?;
        let mut decoder = FrameDecoder::new(HANDSHAKE_MAX_FRAME_LEN);
        let mut buf = [0u8; 4096];
        let frame_error = |e| session::handshake_frame_error(address, &e);
        let payload = loop {
            if let Some(p) = decoder.next_frame().map_err(frame_error)? {
                break p;
            }
            let n = conn
                .read(&mut buf)
                .await
                .map_err(|e| format!("{address}: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "{address}: the agent closed the connection during the handshake"
                ));
            }
            decoder.push(&buf[..n]).map_err(frame_error)?;
        };
        let welcome = decode_welcome(&payload).map_err(|e| format!("{address}: {e}"))?;
        check_welcome(&welcome)
            .cloned()
            .map_err(|e| format!("{address}: {e}"))
    };
    let agent = tokio::time::timeout(session::HANDSHAKE_TIMEOUT, shake)
        .await
        .map_err(|_| ClientError::new(session::silent_peer(address, session::HANDSHAKE_TIMEOUT)))?
        .map_err(ClientError::new)?;
    Ok((conn, agent))
}

/// Owns the connection until the user drops the handle (the requests channel closes).
async fn run(
    address: Address,
    token: TokenSource,
    mut conn: Box<dyn Conn>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    events: mpsc::UnboundedSender<SourceEvent>,
) {
    let mut subscribed = false;
    loop {
        let reason = match serve(&mut conn, &mut requests, &events, &mut subscribed).await {
            Ok(()) => return,
            Err(reason) => reason,
        };
        if events.send(SourceEvent::Disconnected { reason }).is_err() {
            return;
        }
        // Reconnect with backoff, answering requests meanwhile with an error.
        let mut backoff = FIRST_BACKOFF;
        conn = loop {
            let wait = tokio::time::sleep(backoff);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = &mut wait => break,
                    request = requests.recv() => {
                        let Some(request) = request else { return };
                        subscribed = track(&request.body, subscribed);
                        let body = Response::error(
                            ErrorKind::Refused,
                            format!("not connected to the agent at {address}; reconnecting"),
                        );
                        if events.send(SourceEvent::Answer { id: request.id, body }).is_err() {
                            return;
                        }
                    }
                }
            }
            match open(&address, &token).await {
                Ok((mut conn, agent)) => {
                    if subscribed {
                        // Renew the subscription; its answer goes to no one.
                        let renew = Request {
                            id: RequestId(u64::MAX),
                            body: RequestBody::Subscribe,
                        };
                        if let Ok(frame) = to_frame(&renew)
                            && conn.write_all(&frame).await.is_err()
                        {
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                            continue;
                        }
                    }
                    let _ = events.send(SourceEvent::Connected {
                        description: describe(&agent),
                    });
                    break conn;
                }
                Err(_) => backoff = (backoff * 2).min(MAX_BACKOFF),
            }
        };
    }
}

fn track(body: &RequestBody, subscribed: bool) -> bool {
    match body {
        RequestBody::Subscribe => true,
        RequestBody::Unsubscribe => false,
        _ => subscribed,
    }
}

/// Serves one connection: `Ok` when the user is gone, `Err(reason)` when the agent is.
async fn serve(
    conn: &mut Box<dyn Conn>,
    requests: &mut mpsc::UnboundedReceiver<Request>,
    events: &mpsc::UnboundedSender<SourceEvent>,
    subscribed: &mut bool,
) -> Result<(), String> {
    let mut decoder = FrameDecoder::new(MAX_FRAME_LEN);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { return Ok(()) };
                *subscribed = track(&request.body, *subscribed);
                let frame = to_frame(&request).map_err(|e| e.to_string())?;
                conn.write_all(&frame).await.map_err(|e| format!("lost the agent: {e}"))?;
            }
            read = conn.read(&mut buf) => {
                let n = read.map_err(|e| format!("lost the agent: {e}"))?;
                if n == 0 {
                    return Err("the agent closed the connection".to_string());
                }
                decoder.push(&buf[..n]).map_err(|e| format!("bad frame from the agent: {e}"))?;
                while let Some(payload) =
                    decoder.next_frame().map_err(|e| format!("bad frame from the agent: {e}"))?
                {
                    let message: ServerMessage = decode_payload(&payload)
                        .map_err(|e| format!("bad message from the agent: {e}"))?;
                    let event = match message {
                        ServerMessage::Response { id: RequestId(u64::MAX), .. } => continue,
                        ServerMessage::Response { id, body } => SourceEvent::Answer { id, body: *body },
                        ServerMessage::Push(push) => SourceEvent::Push(push),
                        _ => continue,
                    };
                    if events.send(event).is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    fn start_target(dir: &std::path::Path, socket: &std::path::Path) -> Child {
        let exe = dir.join("waits");
        if !exe.exists() {
            let src = dir.join("waits.c");
            std::fs::write(
                &src,
                "#include <stdlib.h>\n#include <unistd.h>\n\
                 int main(void) { char *volatile p = malloc(777); char c;\n\
                 while (read(0, &c, 1) > 0) {} free(p); return 0; }\n",
            )
            .unwrap();
            let ok = Command::new("cc")
                .arg("-o")
                .arg(&exe)
                .arg(&src)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        // The agent binds its socket before it writes the token: it is ready once its log says
        // where it listens (a log of its own, the previous target's removed).
        let log = dir.join("agent.log");
        let _ = std::fs::remove_file(&log);
        let child = Command::new(&exe)
            .env("LD_PRELOAD", crate::embedded::agent_path().unwrap())
            .env("HEAPTUI_LISTEN", format!("unix:{}", socket.display()))
            .env("HEAPTUI_LOG", &log)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listening on")) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the agent never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    async fn next(events: &mut SourceEvents) -> SourceEvent {
        tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("an event within 30 s")
            .expect("the source is alive")
    }

    #[tokio::test]
    async fn answers_pushes_and_reconnects_to_a_restarted_agent() {
        let dir = std::env::temp_dir().join(format!("heaptui-live-source-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("agent.sock");
        let mut first = start_target(&dir, &socket);
        let address = Address::Unix(socket.clone());
        let (handle, mut events) = connect(&address, TokenSource::Discover).await.unwrap();
        assert!(handle.is_live());
        let SourceEvent::Connected { description } = next(&mut events).await else {
            panic!("not connected first")
        };
        assert!(
            description.starts_with(&format!("pid {} ", first.id())),
            "{description}"
        );

        let id = handle.request(RequestBody::TakeSnapshot);
        let SourceEvent::Answer { id: got, body } = next(&mut events).await else {
            panic!()
        };
        assert_eq!(got, id);
        let Response::Snapshot(info) = body else {
            panic!("{body:?}")
        };
        assert!(info.totals.bytes >= 777);
        handle.request(RequestBody::Subscribe);
        let mut pushes = 0;
        while pushes < 2 {
            if let SourceEvent::Push(_) = next(&mut events).await {
                pushes += 1;
            }
        }

        // The agent goes away: Disconnected, requests answered with an error meanwhile…
        first.kill().unwrap();
        first.wait().unwrap();
        loop {
            if let SourceEvent::Disconnected { .. } = next(&mut events).await {
                break;
            }
        }
        let id = handle.request(RequestBody::ProcessInfo);
        loop {
            if let SourceEvent::Answer { id: got, body } = next(&mut events).await {
                assert_eq!(got, id);
                assert!(matches!(body, Response::Error(_)), "{body:?}");
                break;
            }
        }
        // …and a new agent on the same socket is found again, with the pushes renewed.
        let mut second = start_target(&dir, &socket);
        loop {
            if let SourceEvent::Connected { description } = next(&mut events).await {
                assert!(description.starts_with(&format!("pid {} ", second.id())));
                break;
            }
        }
        loop {
            if let SourceEvent::Push(_) = next(&mut events).await {
                break;
            }
        }
        drop(second.stdin.take());
        second.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
