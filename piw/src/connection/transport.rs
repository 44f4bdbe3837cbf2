//! The two transports of one client connection: the server's Unix socket (one NDJSON frame
//! per message) and a `piw serve` relay (one WebSocket text message per frame). Both carry
//! the same canonical client.v1 bytes; only the framing differs, so the client above never
//! knows which one it uses.

use std::path::PathBuf;

use futures_util::{SinkExt, StreamExt};
use pi_workflows::protocol::FRAME_BYTES_MAX;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Where the client connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The server's socket, `<state dir>/server/server.sock`.
    Unix(PathBuf),
    /// A `piw serve` relay, `ws://127.0.0.1:PORT/ws` (usually through an SSH tunnel).
    WebSocket(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "{}", path.display()),
            Self::WebSocket(url) => f.write_str(url),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot connect to {endpoint}: {reason}")]
    Connect { endpoint: String, reason: String },
    #[error("the peer sent a frame above {FRAME_BYTES_MAX} bytes")]
    TooLarge,
    #[error("the peer sent a message that is not one text frame")]
    NotText,
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("WebSocket failed: {0}")]
    WebSocket(String),
}

type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// The read half of a connection.
pub enum FrameReader {
    Unix(BufReader<OwnedReadHalf>),
    WebSocket(futures_util::stream::SplitStream<Ws>),
}

/// The write half of a connection.
pub enum FrameWriter {
    Unix(OwnedWriteHalf),
    WebSocket(futures_util::stream::SplitSink<Ws, Message>),
}

/// The WebSocket limits of both the relay and its clients: one message is one frame of at
/// most 1 MiB, as on the socket.
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(FRAME_BYTES_MAX))
        .max_frame_size(Some(FRAME_BYTES_MAX))
}

/// Open a connection to `endpoint`.
pub async fn open(endpoint: &Endpoint) -> Result<(FrameReader, FrameWriter), TransportError> {
    let failed = |reason: String| TransportError::Connect {
        endpoint: endpoint.to_string(),
        reason,
    };
    match endpoint {
        Endpoint::Unix(path) => {
            let stream = UnixStream::connect(path)
                .await
                .map_err(|err| failed(err.kind().to_string()))?;
            let (read, write) = stream.into_split();
            Ok((FrameReader::Unix(BufReader::new(read)), FrameWriter::Unix(write)))
        }
        Endpoint::WebSocket(url) => {
            let config = Some(websocket_config());
            let (stream, _) = tokio_tungstenite::connect_async_with_config(url.as_str(), config, false)
                .await
                .map_err(|err| failed(err.to_string()))?;
            let (write, read) = stream.split();
            Ok((FrameReader::WebSocket(read), FrameWriter::WebSocket(write)))
        }
    }
}

impl FrameReader {
    /// The next frame with its newline; `None` at the end of the connection.
    pub async fn next_frame(&mut self) -> Result<Option<Vec<u8>>, TransportError> {
        match self {
            Self::Unix(reader) => read_line(reader).await,
            Self::WebSocket(stream) => loop {
                match stream.next().await {
                    None | Some(Ok(Message::Close(_))) => return Ok(None),
                    Some(Ok(Message::Text(text))) => {
                        let mut line = text.as_bytes().to_vec();
                        line.push(b'\n');
                        return Ok(Some(line));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(_)) => return Err(TransportError::NotText),
                    Some(Err(err)) => return Err(TransportError::WebSocket(err.to_string())),
                }
            },
        }
    }
}

/// One newline-ended line of at most [`FRAME_BYTES_MAX`] bytes; `None` at a clean end.
pub async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<Vec<u8>>, TransportError> {
    let mut line = Vec::new();
    let read = (&mut *reader)
        .take(FRAME_BYTES_MAX as u64)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\n") {
        // Either the limit cut the line or the peer stopped mid-frame: both end the connection.
        return Err(if line.len() >= FRAME_BYTES_MAX {
            TransportError::TooLarge
        } else {
            TransportError::Io(std::io::ErrorKind::UnexpectedEof.into())
        });
    }
    Ok(Some(line))
}

impl FrameWriter {
    /// Write one frame (`line` ends with its newline).
    pub async fn send_frame(&mut self, line: &[u8]) -> Result<(), TransportError> {
        match self {
            Self::Unix(writer) => Ok(writer.write_all(line).await?),
            Self::WebSocket(sink) => {
                let text = std::str::from_utf8(line.strip_suffix(b"\n").unwrap_or(line))
                    .map_err(|_| TransportError::NotText)?;
                sink.send(Message::text(text))
                    .await
                    .map_err(|err| TransportError::WebSocket(err.to_string()))
            }
        }
    }

    /// Close the write side, so the peer sees the end at once.
    pub async fn close(&mut self) {
        match self {
            Self::Unix(writer) => {
                let _ = writer.shutdown().await;
            }
            Self::WebSocket(sink) => {
                let _ = sink.close().await;
            }
        }
    }
}
