//! `piw serve`: a loopback WebSocket relay for the client protocol. Each WebSocket
//! connection gets its own server socket connection and lives exactly as long as it: one
//! text message ⇄ one NDJSON frame, bytes unchanged, no multiplexing, no state, no
//! translation, no database. It checks only framing (one canonical JSON object of at most
//! 1 MiB per message), so a peer sending garbage or oversized frames loses its own
//! connection and nobody else's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use pi_workflows::protocol::{FRAME_BYTES_MAX, decode_frame};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use crate::connection::transport::{read_line, websocket_config};

pub const DEFAULT_BIND: &str = "127.0.0.1:9377";
/// The one path the relay serves.
pub const WS_PATH: &str = "/ws";
/// Relayed connections at once: each holds a server connection, and the server bounds its
/// own; a relay must not let one remote user take them all.
pub const CONNECTIONS_MAX: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0}: piw serve binds loopback addresses only (127.0.0.0/8 or ::1); reach it from another machine through an SSH tunnel (docs/PIW.md)"
    )]
    NotLoopback(String),
    #[error("`{0}` is not an address (use 127.0.0.1:PORT)")]
    BadAddress(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
}

/// The bind address, refused unless every address it names is loopback.
pub async fn loopback_address(text: &str) -> Result<SocketAddr, ServeError> {
    let addresses: Vec<SocketAddr> = match text.parse::<SocketAddr>() {
        Ok(addr) => vec![addr],
        Err(_) => tokio::net::lookup_host(text)
            .await
            .map_err(|_| ServeError::BadAddress(text.to_string()))?
            .collect(),
    };
    match addresses.first() {
        None => Err(ServeError::BadAddress(text.to_string())),
        Some(_) if addresses.iter().any(|addr| !addr.ip().is_loopback()) => {
            Err(ServeError::NotLoopback(text.to_string()))
        }
        Some(addr) => Ok(*addr),
    }
}

/// Bind; the caller learns the bound address (port 0 picks one) before connections run.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).await.map_err(|source| ServeError::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// Accept connections until the process ends.
pub async fn serve(listener: TcpListener, socket: PathBuf) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let socket = Arc::new(socket);
    loop {
        let (stream, _) = listener.accept().await?;
        // Over the limit the TCP connection is closed at once: refusing costs nothing.
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            continue;
        };
        let socket = socket.clone();
        tokio::spawn(async move {
            relay(stream, &socket).await;
            drop(permit);
        });
    }
}

/// Only `GET /ws` upgrades.
#[allow(clippy::result_large_err)] // tungstenite's callback signature
fn check_path(request: &Request, response: Response) -> Result<Response, ErrorResponse> {
    if request.uri().path() == WS_PATH {
        return Ok(response);
    }
    let mut refusal = ErrorResponse::new(Some(format!("piw serve relays only {WS_PATH}")));
    *refusal.status_mut() = StatusCode::NOT_FOUND;
    Err(refusal)
}

/// One WebSocket ⇄ one server connection, until either side ends.
async fn relay(stream: TcpStream, socket: &std::path::Path) {
    let config = Some(websocket_config());
    let Ok(ws) = tokio_tungstenite::accept_hdr_async_with_config(stream, check_path, config).await else {
        return;
    };
    let (mut sink, mut incoming) = ws.split();
    let server = match UnixStream::connect(socket).await {
        Ok(server) => server,
        Err(err) => {
            let reason = format!("no pi-workflows server answers ({})", err.kind());
            let _ = sink.send(close(CloseCode::Away, &reason)).await;
            return;
        }
    };
    let (server_read, mut server_write) = server.into_split();
    let mut server_read = BufReader::new(server_read);
    let refusal = tokio::select! {
        refusal = to_server(&mut incoming, &mut server_write) => refusal,
        () = to_client(&mut server_read, &mut sink) => None,
    };
    let _ = server_write.shutdown().await;
    if let Some(reason) = refusal {
        let _ = sink.send(close(CloseCode::Policy, &reason)).await;
    }
    let _ = sink.close().await;
}

fn close(code: CloseCode, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(reason.to_string()),
    }))
}

type Incoming = futures_util::stream::SplitStream<tokio_tungstenite::WebSocketStream<TcpStream>>;
type Outgoing = futures_util::stream::SplitSink<tokio_tungstenite::WebSocketStream<TcpStream>, Message>;

/// WebSocket → socket; `Some(reason)` when the peer broke the framing.
async fn to_server(incoming: &mut Incoming, server: &mut tokio::net::unix::OwnedWriteHalf) -> Option<String> {
    while let Some(message) = incoming.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(Message::Close(_)) => return None,
            Ok(_) => return Some("only text messages are relayed".into()),
            // Oversized messages end here too (the configured 1 MiB limit).
            Err(err) => return Some(format!("bad WebSocket traffic: {err}")),
        };
        let mut line = text.as_bytes().to_vec();
        line.push(b'\n');
        if let Err(err) = check_frame(&line) {
            return Some(err);
        }
        if server.write_all(&line).await.is_err() {
            return None;
        }
    }
    None
}

/// One message must be exactly one frame: a newline inside would make two.
fn check_frame(line: &[u8]) -> Result<(), String> {
    if line.len() > FRAME_BYTES_MAX {
        return Err(format!("a message above {FRAME_BYTES_MAX} bytes"));
    }
    decode_frame(line).map(|_| ()).map_err(|err| err.to_string())
}

/// Socket → WebSocket, frame by frame without the newline.
async fn to_client(server: &mut BufReader<tokio::net::unix::OwnedReadHalf>, sink: &mut Outgoing) {
    while let Ok(Some(line)) = read_line(server).await {
        let Ok(text) = std::str::from_utf8(&line[..line.len() - 1]) else {
            return;
        };
        if sink.send(Message::text(text)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_loopback_addresses_are_accepted() {
        assert!(loopback_address("127.0.0.1:9377").await.is_ok());
        assert!(loopback_address("[::1]:9377").await.is_ok());
        let err = loopback_address("0.0.0.0:9377").await.expect_err("any address");
        assert!(err.to_string().contains("loopback"), "{err}");
        assert!(loopback_address("192.0.2.1:80").await.is_err());
        assert!(matches!(
            loopback_address("nonsense").await,
            Err(ServeError::BadAddress(_))
        ));
    }

    #[test]
    fn a_message_is_one_canonical_frame() {
        assert!(check_frame(b"{\"a\":1}\n").is_ok());
        assert!(check_frame(b"{\"a\":1}\n{}\n").is_err());
        assert!(check_frame(b"{ \"a\": 1 }\n").is_err());
        assert!(check_frame(b"garbage\n").is_err());
    }
}
