//! A blocking session with one agent, for the one-shot commands (`report ADDR`, `snapshot`,
//! `run`, `cancel`): connect, handshake, then one request at a time, skipping pushes; a
//! subscribed session may end by waiting for one push ([`Session::wait_push`]).

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use heaptui_protocol::handshake::{HandshakeError, client_handshake};
use heaptui_protocol::stream::Stream;
use heaptui_protocol::{
    AgentInfo, FrameError, Hello, MAX_FRAME_LEN, Push, Request, RequestBody, RequestId, Response,
    ServerMessage, SnapshotId, SnapshotInfo, chunk_in_payload, decode_payload, read_frame,
    read_frame_into,
};

use super::{Address, ClientError, TokenSource, token};

/// How long to wait for the agent's answers (a capture of a big heap takes seconds).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the agent may take to answer the hello: its server thread answers at once, so a
/// peer that stays silent this long is not a heaptui agent (and must not hold a `report` for
/// the [`ANSWER_TIMEOUT`] of a capture). The TUI's connection waits as long.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// One admitted connection.
pub struct Session {
    stream: Stream,
    next_id: u64,
    address: Address,
    agent: AgentInfo,
    /// The last answer's frame, its allocation kept for the next (a kept snapshot comes in
    /// 8 MiB chunks: one buffer for all of them, not a fresh one each).
    frame: Vec<u8>,
}

/// The one sentence for a failed connect.
pub fn connect_error(address: &Address, e: &io::Error) -> ClientError {
    let what = match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        io::ErrorKind::NotFound => "no such socket".to_string(),
        _ => e.to_string(),
    };
    ClientError::new(format!(
        "cannot connect to {address}: {what} — is the target running with \
         LD_PRELOAD=$(heaptui agent-path)?"
    ))
}

fn open(address: &Address, answer_timeout: Duration) -> Result<Stream, ClientError> {
    match address {
        Address::Tcp { host, port } => {
            let addrs: Vec<_> = (host.as_str(), *port)
                .to_socket_addrs()
                .map_err(|e| ClientError::new(format!("cannot resolve {address}: {e}")))?
                .collect();
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for a in addrs {
                match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        s.set_read_timeout(Some(answer_timeout))
                            .and_then(|()| s.set_write_timeout(Some(answer_timeout)))
                            .map_err(|e| connect_error(address, &e))?;
                        return Ok(Stream::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(connect_error(address, &last))
        }
        Address::Unix(path) => {
            let s = UnixStream::connect(path).map_err(|e| connect_error(address, &e))?;
            s.set_read_timeout(Some(answer_timeout))
                .and_then(|()| s.set_write_timeout(Some(answer_timeout)))
                .map_err(|e| connect_error(address, &e))?;
            Ok(Stream::Unix(s))
        }
    }
}

/// The one sentence for a failed handshake: a peer that stays silent or answers with something
/// that is not a heaptui frame (an HTTP server, say) is named as not being an agent.
fn handshake_error(address: &Address, e: &HandshakeError, waited: Duration) -> ClientError {
    ClientError::new(match e {
        HandshakeError::Frame(FrameError::Io(io))
            if matches!(
                io.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            silent_peer(address, waited)
        }
        HandshakeError::Frame(f) => handshake_frame_error(address, f),
        _ => format!("{address}: {e}"),
    })
}

/// The line for a peer that did not answer the hello within `waited`.
pub fn silent_peer(address: &Address, waited: Duration) -> String {
    format!(
        "{address}: no heaptui handshake within {waited:?} — is a heaptui agent listening there?"
    )
}

/// The line for a handshake frame that cannot be read: one longer than any handshake is the
/// first bytes of some other protocol.
pub fn handshake_frame_error(address: &Address, e: &FrameError) -> String {
    match e {
        FrameError::TooLong { .. } => {
            format!("{address}: what answers there is not a heaptui agent ({e})")
        }
        _ => format!("{address}: handshake failed: {e}"),
    }
}

/// The hello this build sends.
pub fn hello(token: String) -> Hello {
    Hello::new(token, format!("heaptui {}", env!("CARGO_PKG_VERSION")))
}

impl Session {
    /// Connects and shakes hands.
    pub fn connect(address: &Address, token: &TokenSource) -> Result<Session, ClientError> {
        Self::connect_within(address, token, ANSWER_TIMEOUT)
    }

    /// [`Session::connect`], giving up on any answer (the handshake's included) that takes
    /// longer than `answer_timeout`: for quick questions to many agents (`heaptui ps`), where
    /// a stopped process must not hold up the rest.
    pub fn connect_within(
        address: &Address,
        token: &TokenSource,
        answer_timeout: Duration,
    ) -> Result<Session, ClientError> {
        let handshake_timeout = answer_timeout.min(HANDSHAKE_TIMEOUT);
        // Connect first: "connection refused" says more than a missing token file.
        let mut stream = open(address, handshake_timeout)?;
        let token = token::read(address, token).map_err(ClientError::new)?;
        let agent = client_handshake(&mut stream, &hello(token))
            .map_err(|e| handshake_error(address, &e, handshake_timeout))?;
        stream
            .set_timeouts(Some(answer_timeout), Some(answer_timeout))
            .map_err(|e| connect_error(address, &e))?;
        Ok(Session {
            stream,
            next_id: 1,
            address: address.clone(),
            agent,
            frame: Vec::new(),
        })
    }

    pub fn agent(&self) -> &AgentInfo {
        &self.agent
    }

    /// Sends one request and waits for its answer; an error answer is an `Err`.
    pub fn request(&mut self, body: RequestBody) -> Result<Response, ClientError> {
        match self.ask(body)? {
            Answer::Decoded(response) => Ok(*response),
            Answer::Chunk => {
                // Asked through `request` rather than `chunk`: decoded whole.
                let message = decode_payload(&self.frame).map_err(|e| self.lost(e))?;
                let ServerMessage::Response { body, .. } = message else {
                    unreachable!("a chunk answer is a response")
                };
                Ok(*body)
            }
        }
    }

    /// Sends one request and waits for its answer: decoded, or, for a snapshot chunk, left
    /// in [`Session::frame`] to be read in place (`chunk_in_payload`). An error answer is
    /// an `Err`.
    fn ask(&mut self, body: RequestBody) -> Result<Answer, ClientError> {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let kind = body.kind();
        heaptui_protocol::send(&mut self.stream, &Request { id, body })
            .map_err(|e| self.lost(e))?;
        loop {
            // Read from the socket itself, not through `Stream`: std's sockets read into the
            // frame's spare capacity as it is, where a reader with only `read` has it zeroed
            // first, at every frame (8 MiB per `KeptData` chunk).
            let read = match &mut self.stream {
                Stream::Tcp(s) => read_frame_into(s, MAX_FRAME_LEN, &mut self.frame),
                Stream::Unix(s) => read_frame_into(s, MAX_FRAME_LEN, &mut self.frame),
            };
            read.map_err(|e| self.lost(e))?;
            if let Some(chunk) = chunk_in_payload(&self.frame) {
                if chunk.id == id {
                    return Ok(Answer::Chunk);
                }
                continue;
            }
            let message: ServerMessage = decode_payload(&self.frame).map_err(|e| self.lost(e))?;
            match message {
                ServerMessage::Response { id: got, body } if got == id => {
                    if let Response::Error(e) = &*body {
                        return Err(ClientError::new(format!(
                            "the agent at {} could not answer {kind}: {}",
                            self.address, e.message
                        )));
                    }
                    return Ok(Answer::Decoded(body));
                }
                // Pushes and answers to nothing we asked are not for this call.
                _ => continue,
            }
        }
    }

    /// Waits until `deadline` for the first push that is `wanted`, skipping the others (and
    /// answers to nothing asked); `Ok(None)` when none came in time. The session must have
    /// subscribed. It is consumed: a deadline that falls inside a frame leaves the rest of
    /// that frame unread, so nothing may be read from the stream afterwards.
    pub fn wait_push(
        mut self,
        deadline: Instant,
        mut wanted: impl FnMut(&Push) -> bool,
    ) -> Result<Option<Push>, ClientError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // A zero read timeout would mean "block forever".
            let left = left.max(Duration::from_millis(1));
            self.stream
                .set_timeouts(Some(left), Some(ANSWER_TIMEOUT))
                .map_err(|e| self.lost(e))?;
            let payload = match read_frame(&mut self.stream, MAX_FRAME_LEN) {
                Ok(p) => p,
                Err(FrameError::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(self.lost(e)),
            };
            match decode_payload(&payload).map_err(|e| self.lost(e))? {
                ServerMessage::Push(p) if wanted(&p) => return Ok(Some(p)),
                _ => continue,
            }
        }
    }

    fn lost(&self, e: impl std::fmt::Display) -> ClientError {
        ClientError::new(format!("lost the agent at {}: {e}", self.address))
    }

    pub fn take_snapshot(&mut self) -> Result<SnapshotInfo, ClientError> {
        match self.request(RequestBody::TakeSnapshot)? {
            Response::Snapshot(s) => Ok(s),
            other => Err(self.unexpected("take-snapshot", &other)),
        }
    }

    /// The kept snapshot as a binary snapshot file, fetched chunk by chunk.
    pub fn snapshot_file(&mut self, snapshot: SnapshotId) -> Result<Vec<u8>, ClientError> {
        let mut bytes = Vec::new();
        loop {
            let chunk = self.chunk(Form::File, snapshot, bytes.len() as u64)?;
            bytes.extend_from_slice(&self.frame[chunk.bytes]);
            if bytes.len() as u64 >= chunk.total {
                return Ok(bytes);
            }
        }
    }

    /// The chunk at `offset` of the snapshot's bytes in `form`, checked to be that chunk;
    /// its bytes are left where they arrived, in [`Session::frame`].
    fn chunk(
        &mut self,
        form: Form,
        snapshot: SnapshotId,
        offset: u64,
    ) -> Result<ChunkInFrame, ClientError> {
        let (body, kind) = match form {
            Form::File => (
                RequestBody::SnapshotData { snapshot, offset },
                "snapshot-data",
            ),
            Form::Analysed => (RequestBody::KeptData { snapshot, offset }, "kept-data"),
        };
        if let Answer::Decoded(other) = self.ask(body)? {
            return Err(self.unexpected(kind, &other));
        }
        let chunk = chunk_in_payload(&self.frame).expect("`ask` found a chunk answer here");
        let end = self.frame.len();
        let in_frame = ChunkInFrame {
            total: chunk.total,
            bytes: end - chunk.bytes.len()..end,
        };
        if chunk.analysed != matches!(form, Form::Analysed) {
            return Err(ClientError::new(format!(
                "the agent at {} answered a {kind} request with another form's chunk",
                self.address
            )));
        }
        if chunk.snapshot != snapshot
            || chunk.offset != offset
            || (chunk.bytes.is_empty() && offset < chunk.total)
        {
            return Err(ClientError::new(format!(
                "the agent at {} sent snapshot bytes out of order",
                self.address
            )));
        }
        Ok(in_frame)
    }

    /// The kept snapshot as the agent analysed it, decoded while its chunks arrive (the
    /// client never holds the encoded bytes whole).
    pub fn kept(&mut self, snapshot: SnapshotId) -> Result<heaptui_analysis::Kept, ClientError> {
        let address = self.address.to_string();
        let mut reader = KeptReader {
            session: self,
            snapshot,
            offset: 0,
            total: None,
            chunk: 0..0,
            failed: None,
        };
        let kept = heaptui_analysis::Kept::decode(&mut reader);
        if let Some(e) = reader.failed {
            return Err(e);
        }
        kept.map_err(|e| {
            ClientError::new(format!(
                "the agent at {address} sent an analysed snapshot that does not read back: {e}"
            ))
        })
    }

    fn unexpected(&self, asked: &str, got: &Response) -> ClientError {
        ClientError::new(format!(
            "the agent at {} answered a {asked} request with {}",
            self.address,
            got.kind()
        ))
    }
}

/// The two forms a kept snapshot is fetched in: its binary file, or the agent's analysis.
#[derive(Clone, Copy)]
enum Form {
    File,
    Analysed,
}

/// An answer as [`Session::ask`] leaves it.
enum Answer {
    Decoded(Box<Response>),
    /// A snapshot chunk, left in the session's frame.
    Chunk,
}

/// A snapshot chunk whose bytes are `bytes` of the session's frame.
struct ChunkInFrame {
    total: u64,
    bytes: std::ops::Range<usize>,
}

/// Reads a kept snapshot's bytes chunk by chunk (`KeptData`), as the decoder asks for them,
/// straight from the frame each chunk arrived in.
struct KeptReader<'a> {
    session: &'a mut Session,
    snapshot: SnapshotId,
    /// Where the next chunk starts.
    offset: u64,
    total: Option<u64>,
    /// The bytes of the current chunk not read yet, in the session's frame.
    chunk: std::ops::Range<usize>,
    /// Why a chunk could not be had (the decoder sees only an I/O error).
    failed: Option<ClientError>,
}

impl KeptReader<'_> {
    fn next_chunk(&mut self) -> Result<(), ClientError> {
        let chunk = self
            .session
            .chunk(Form::Analysed, self.snapshot, self.offset)?;
        self.offset += chunk.bytes.len() as u64;
        self.total = Some(chunk.total);
        self.chunk = chunk.bytes;
        Ok(())
    }
}

impl io::BufRead for KeptReader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.chunk.is_empty()
            && self.total.is_none_or(|t| self.offset < t)
            && let Err(e) = self.next_chunk()
        {
            let text = e.to_string();
            self.failed = Some(e);
            return Err(io::Error::other(text));
        }
        Ok(&self.session.frame[self.chunk.clone()])
    }

    fn consume(&mut self, n: usize) {
        self.chunk.start = (self.chunk.start + n).min(self.chunk.end);
    }
}

impl io::Read for KeptReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let got = io::BufRead::fill_buf(self)?;
        let n = buf.len().min(got.len());
        buf[..n].copy_from_slice(&got[..n]);
        io::BufRead::consume(self, n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::sync::mpsc;

    use super::*;

    /// A token file for a peer that never reads it.
    fn token_file(name: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("heaptui-{}-{name}.token", std::process::id()));
        std::fs::write(&path, "0123456789abcdef").unwrap();
        path
    }

    /// Connects to a local peer that runs `serve` on the one connection it accepts, which it
    /// holds open until the connect has returned.
    fn connect_to(name: &str, serve: fn(&mut std::net::TcpStream)) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let peer = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            serve(&mut conn);
            let _ = done_rx.recv();
        });
        let address = Address::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let token = TokenSource::File(token_file(name));
        let result = Session::connect(&address, &token);
        done_tx.send(()).unwrap();
        peer.join().unwrap();
        match result {
            Ok(_) => panic!("a peer that is not an agent was admitted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_silent_peer_fails_the_handshake_instead_of_holding_the_command() {
        // Without the handshake's own timeout this waits out the 300 s answer timeout.
        let error = connect_to("silent", |conn| {
            let mut hello = [0u8; 16];
            let _ = conn.read(&mut hello);
        });
        assert!(
            error.contains("no heaptui handshake within 5s")
                && error.contains("is a heaptui agent listening there?"),
            "{error}"
        );
    }

    #[test]
    fn an_http_server_is_named_as_not_an_agent() {
        let error = connect_to("http", |conn| {
            conn.write_all(b"HTTP/1.0 200 OK\r\n\r\nhello\n").unwrap();
        });
        assert!(
            error.starts_with("127.0.0.1:") && error.contains("is not a heaptui agent"),
            "{error}"
        );
    }
}
