//! A small blocking client of `pi-workflows.client.v1` for the CLI: connect, read `hello`,
//! send one request at a time, read its response. Subscription events that arrive before a
//! response are kept (at most [`EVENTS_QUEUED_MAX`]) for `next_event`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::digest::hex_lower;
use crate::protocol::{
    ClientMessage, ClientSchema, Event, FRAME_BYTES_MAX, Hello, JsonObject, OpaqueId, Operation, Request, Response,
    decode_client_message, encode_client_message,
};

/// How long one request may wait for its response (see `response_timeout` for the longer
/// ones: the server bounds its own work, and the client must wait at least that long).
pub const RESPONSE_TIMEOUT_MS: u64 = 30_000;

/// The response wait of one operation: longer for those the server may legitimately work on
/// longer (resolving a workflow ≤ 60 s, a submission's verdict ≤ 120 s, state maintenance on
/// a large database).
pub fn response_timeout(operation: Operation) -> Duration {
    let ms = match operation {
        Operation::RunStart => 90_000,
        Operation::InteractionSubmit | Operation::DecisionAnswer => 150_000,
        Operation::StateBackup | Operation::StatePrune | Operation::StateVerify => 30 * 60_000,
        _ => RESPONSE_TIMEOUT_MS,
    };
    Duration::from_millis(ms)
}
/// Events kept while a response is awaited; older ones are dropped (a subscriber only
/// needs the newest view, and every event can be replaced by a snapshot).
pub const EVENTS_QUEUED_MAX: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No server is listening (the `hostUnavailable` failure class).
    #[error(
        "no pi-workflows server is running for this state directory ({0}); start one with `pi-workflows server start`"
    )]
    Unavailable(String),
    #[error("the server runs pi-workflows {server}, this client is {client}; restart the server with this version")]
    VersionMismatch { server: String, client: String },
    #[error("the server sent something unexpected: {0}")]
    Protocol(String),
    /// The server did not answer within the client's wait for this operation.
    #[error(
        "the server did not answer {operation} within {seconds} s; it may still finish it: check with `pi-workflows runs`, or retry"
    )]
    TimedOut { operation: &'static str, seconds: u64 },
    #[error("connection to the server failed: {0}")]
    Io(#[from] std::io::Error),
}

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    client_id: OpaqueId,
    events: std::collections::VecDeque<Event>,
    /// The start of a message a read timeout cut.
    partial: Vec<u8>,
    pub hello: Hello,
}

fn random_id(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    // Without randomness, fall back to time and pid: IDs only need to be unique per client.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes[..8].copy_from_slice(&(nanos as u64).to_le_bytes());
        bytes[8..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    format!("{prefix}-{}", hex_lower(&bytes))
}

impl Client {
    pub fn connect(socket: &Path) -> Result<Self, ClientError> {
        let writer = UnixStream::connect(socket).map_err(|err| ClientError::Unavailable(err.kind().to_string()))?;
        writer.set_read_timeout(Some(Duration::from_millis(RESPONSE_TIMEOUT_MS)))?;
        let mut reader = BufReader::new(writer.try_clone()?);
        let hello = match read_message(&mut reader, &mut Vec::new())? {
            ClientMessage::Hello(hello) => hello,
            _ => return Err(ClientError::Protocol("the first message was not hello".to_string())),
        };
        let client = env!("CARGO_PKG_VERSION");
        if hello.package_version != client {
            return Err(ClientError::VersionMismatch {
                server: hello.package_version,
                client: client.to_string(),
            });
        }
        let client_id = OpaqueId::new(random_id("cli")).map_err(|err| ClientError::Protocol(err.to_string()))?;
        Ok(Self {
            reader,
            writer,
            client_id,
            events: std::collections::VecDeque::new(),
            partial: Vec::new(),
            hello,
        })
    }

    /// Send one request and wait for its response. State-changing operations get a fresh
    /// idempotency key per call (one user invocation).
    pub fn request(&mut self, operation: Operation, payload: JsonObject) -> Result<Response, ClientError> {
        self.request_for(operation, None, payload)
    }

    /// `request` addressed to one run.
    pub fn request_for(
        &mut self,
        operation: Operation,
        run_id: Option<&str>,
        payload: JsonObject,
    ) -> Result<Response, ClientError> {
        let key = operation.is_state_changing().then(|| random_id("key"));
        self.request_keyed(operation, run_id, payload, key)
    }

    /// `request_for` with a chosen idempotency key: an automatic retry of one user action
    /// keeps its key (and gets the stored receipt).
    pub fn request_keyed(
        &mut self,
        operation: Operation,
        run_id: Option<&str>,
        payload: JsonObject,
        idempotency_key: Option<String>,
    ) -> Result<Response, ClientError> {
        let run_id = run_id
            .map(OpaqueId::new)
            .transpose()
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let idempotency_key = idempotency_key
            .map(OpaqueId::new)
            .transpose()
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let request = Request {
            schema: ClientSchema::V1,
            request_id: OpaqueId::new(random_id("req")).map_err(|err| ClientError::Protocol(err.to_string()))?,
            client_id: self.client_id.clone(),
            operation,
            idempotency_key,
            run_id,
            expected_revision: None,
            payload,
        };
        let bytes = encode_client_message(&ClientMessage::Request(request.clone()))
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let wait = response_timeout(operation);
        self.writer.set_read_timeout(Some(wait))?;
        self.writer.write_all(&bytes)?;
        loop {
            let message = read_message(&mut self.reader, &mut self.partial).map_err(|err| match err {
                ClientError::Io(io)
                    if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    ClientError::TimedOut {
                        operation: operation.as_str(),
                        seconds: wait.as_secs(),
                    }
                }
                other => other,
            })?;
            match message {
                ClientMessage::Response(response) if response.request_id == request.request_id => return Ok(response),
                ClientMessage::Event(event) => self.keep_event(event),
                _ => {
                    return Err(ClientError::Protocol(
                        "expected the response to this request".to_string(),
                    ));
                }
            }
        }
    }

    fn keep_event(&mut self, event: Event) {
        if self.events.len() >= EVENTS_QUEUED_MAX {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// Events that arrived before the last response (without reading the socket).
    pub fn take_queued_events(&mut self) -> Vec<Event> {
        self.events.drain(..).collect()
    }

    /// The next subscription event; `Ok(None)` when none arrives within `timeout`.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(event) = self.events.pop_front() {
            return Ok(Some(event));
        }
        self.writer
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let read = read_message(&mut self.reader, &mut self.partial);
        self.writer
            .set_read_timeout(Some(Duration::from_millis(RESPONSE_TIMEOUT_MS)))?;
        match read {
            Ok(ClientMessage::Event(event)) => Ok(Some(event)),
            Ok(_) => Err(ClientError::Protocol("expected an event".to_string())),
            Err(ClientError::Io(err))
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }
}

/// Read one message; bytes of a line cut by a read timeout stay in `partial` for the next
/// call, so a timeout never loses part of a message.
fn read_message(reader: &mut BufReader<UnixStream>, partial: &mut Vec<u8>) -> Result<ClientMessage, ClientError> {
    loop {
        let budget = FRAME_BYTES_MAX.saturating_sub(partial.len()) as u64;
        let read = std::io::Read::take(&mut *reader, budget).read_until(b'\n', partial)?;
        if partial.ends_with(b"\n") {
            let line = std::mem::take(partial);
            return decode_client_message(&line).map_err(|err| ClientError::Protocol(err.to_string()));
        }
        if read == 0 && budget > 0 {
            return Err(ClientError::Protocol("the server closed the connection".to_string()));
        }
        if partial.len() >= FRAME_BYTES_MAX {
            return Err(ClientError::Protocol("the server sent a frame above 1 MiB".to_string()));
        }
    }
}
