//! An async client of `pi-workflows.client.v1` over either transport: read `hello`, check
//! the package version, then send requests and match their responses by request ID while a
//! reader task forwards subscription events. Reconnecting is the session's job
//! (`session.rs`): a `Client` is one connection and ends with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_workflows::protocol::{
    ClientMessage, ClientSchema, Event, Hello, JsonObject, OpaqueId, Operation, Outcome, Request, Response,
    decode_client_message, encode_client_message,
};
use tokio::sync::{mpsc, oneshot};

use super::transport::{self, Endpoint, FrameReader, FrameWriter, TransportError};

/// How long `hello` may take: the server writes it as soon as it accepts.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one read request may wait for its answer (the server bounds its reads).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Events buffered between the reader and the session: the session drains them at once,
/// and a full buffer only slows this connection's reads (the server coalesces views).
pub const EVENTS_BUFFERED_MAX: usize = 256;
/// The server must run the package version this client was built with (one workspace).
pub const PACKAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no pi-workflows server answers: {0}")]
    Unavailable(String),
    #[error("the server runs pi-workflows {server}, piw is {client}; restart the server with this version")]
    VersionMismatch { server: String, client: String },
    #[error("the server sent something unexpected: {0}")]
    Protocol(String),
    #[error("the server did not answer {0} in time")]
    TimedOut(&'static str),
    #[error("the connection to the server was lost")]
    Disconnected,
    #[error("{0}")]
    Transport(#[from] TransportError),
}

impl ClientError {
    /// A lost or missing connection: worth reconnecting (everything else is final).
    pub fn is_transport(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Disconnected | Self::Transport(_))
    }
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Response>>>>;

/// One live connection.
pub struct Client {
    writer: tokio::sync::Mutex<FrameWriter>,
    pending: Pending,
    client_id: OpaqueId,
    pub hello: Hello,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A fresh opaque ID (`<prefix>-<hex>`).
pub fn new_id(prefix: &str) -> OpaqueId {
    pi_workflows::client::identity::new_id(prefix)
        .unwrap_or_else(|_| OpaqueId::new(format!("{prefix}-{}", std::process::id())).expect("a valid ID"))
}

impl Client {
    /// Connect, read `hello` and check the version; events arrive on the returned receiver,
    /// which closes when the connection ends.
    pub async fn connect(
        endpoint: &Endpoint,
        client_id: OpaqueId,
    ) -> Result<(Self, mpsc::Receiver<Event>), ClientError> {
        let (mut reader, writer) = transport::open(endpoint)
            .await
            .map_err(|err| ClientError::Unavailable(err.to_string()))?;
        let hello = match tokio::time::timeout(HELLO_TIMEOUT, reader.next_frame()).await {
            Err(_) => return Err(ClientError::TimedOut("hello")),
            Ok(Ok(Some(line))) => match decode(&line)? {
                ClientMessage::Hello(hello) => hello,
                _ => return Err(ClientError::Protocol("the first message was not hello".into())),
            },
            Ok(Ok(None)) => return Err(ClientError::Disconnected),
            Ok(Err(err)) => return Err(err.into()),
        };
        if hello.package_version != PACKAGE_VERSION {
            return Err(ClientError::VersionMismatch {
                server: hello.package_version,
                client: PACKAGE_VERSION.to_string(),
            });
        }
        let pending: Pending = Arc::default();
        let (events, receiver) = mpsc::channel(EVENTS_BUFFERED_MAX);
        let task = tokio::spawn(read_loop(reader, pending.clone(), events));
        let client = Self {
            writer: tokio::sync::Mutex::new(writer),
            pending,
            client_id,
            hello,
            reader: task,
        };
        Ok((client, receiver))
    }

    /// Send one request and wait for its response (at most `wait`).
    pub async fn request(
        &self,
        operation: Operation,
        run_id: Option<&str>,
        payload: JsonObject,
        idempotency_key: Option<&OpaqueId>,
        wait: Duration,
    ) -> Result<Response, ClientError> {
        let request = Request {
            schema: ClientSchema::V1,
            request_id: new_id("req"),
            client_id: self.client_id.clone(),
            operation,
            idempotency_key: idempotency_key.cloned(),
            run_id: run_id
                .map(OpaqueId::new)
                .transpose()
                .map_err(|e| ClientError::Protocol(e.to_string()))?,
            expected_revision: None,
            payload,
        };
        let bytes = encode_client_message(&ClientMessage::Request(request.clone()))
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let (sender, answer) = oneshot::channel();
        let id = request.request_id.as_str().to_string();
        self.pending.lock().expect("pending lock").insert(id.clone(), sender);
        self.writer.lock().await.send_frame(&bytes).await?;
        let result = tokio::time::timeout(wait, answer).await;
        self.pending.lock().expect("pending lock").remove(&id);
        match result {
            Err(_) => Err(ClientError::TimedOut(operation.as_str())),
            Ok(Err(_)) => Err(ClientError::Disconnected),
            Ok(Ok(response)) => Ok(response),
        }
    }

    /// A read request with the default wait.
    pub async fn read(
        &self,
        operation: Operation,
        run_id: Option<&str>,
        payload: JsonObject,
    ) -> Result<Response, ClientError> {
        self.request(operation, run_id, payload, None, REQUEST_TIMEOUT).await
    }
}

fn decode(line: &[u8]) -> Result<ClientMessage, ClientError> {
    decode_client_message(line).map_err(|err| ClientError::Protocol(err.to_string()))
}

/// Route responses to their waiters and events to the session until the connection ends;
/// then every waiter sees `Disconnected` (its sender is dropped) and the events close.
async fn read_loop(mut reader: FrameReader, pending: Pending, events: mpsc::Sender<Event>) {
    while let Ok(Some(line)) = reader.next_frame().await {
        match decode(&line) {
            Ok(ClientMessage::Response(response)) => {
                let waiter = pending
                    .lock()
                    .expect("pending lock")
                    .remove(response.request_id.as_str());
                if let Some(waiter) = waiter {
                    let _ = waiter.send(response);
                }
            }
            Ok(ClientMessage::Event(event)) => {
                if events.send(event).await.is_err() {
                    break;
                }
            }
            // A bad frame or a second hello breaks the protocol: this connection ends.
            _ => break,
        }
    }
    pending.lock().expect("pending lock").clear();
}

/// The receipt of an accepted or adopted answer, else the server's refusal as an error.
pub fn accepted(response: &Response) -> Result<&JsonObject, Refusal> {
    match (response.outcome, response.receipt.as_ref()) {
        (Outcome::Accepted | Outcome::Adopted, Some(receipt)) => Ok(receipt),
        (outcome, _) => Err(Refusal {
            outcome,
            code: response.error.as_ref().map_or(String::new(), |e| e.code.clone()),
            message: response.error.as_ref().map_or_else(
                || format!("the server answered {}", outcome.as_str()),
                |e| e.message.clone(),
            ),
        }),
    }
}

/// A refused request, as the server explained it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} ({code})")]
pub struct Refusal {
    pub outcome: Outcome,
    pub code: String,
    pub message: String,
}
