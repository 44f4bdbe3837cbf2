//! A small blocking client of `pi-workflows.client.v1` for the CLI: connect, read `hello`,
//! send one request at a time, read its response. Subscription events that arrive before a
//! response are kept (at most [`EVENTS_QUEUED_MAX`]) for `next_event`.
//!
//! Identity and reconnects (docs/CLIENT-PROTOCOL.md, "Client identity and reconnects"):
//! every request carries the installation's stable client ID ([`identity`]), because the
//! server keys receipts by (client ID, idempotency key). When the connection is lost (end of
//! file, reset, broken pipe) after a request was written and before its response, the client
//! reconnects, checks `hello` again and resends the same request (same client ID and
//! idempotency key: the server adopts a committed receipt, or waits again for the verdict of
//! a submission it is still validating) under a new request ID: at most [`RETRIES_MAX`]
//! times, after the waits of [`RETRY_BACKOFF_MS`], none starting later than
//! [`RETRY_WINDOW_MS`] after the first loss. An error response is an answer and is never
//! retried. Subscriptions are restored on the new connection from the newest revision seen,
//! and their events keep the subscription IDs the caller was given.

pub mod identity;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::input_wait::wait_for_input;

use crate::protocol::{
    ClientMessage, ClientSchema, Event, EventKind, FRAME_BYTES_MAX, Hello, JsonObject, OpaqueId, Operation, Outcome,
    Request, Response, Revision, decode_client_message, encode_client_message,
};

/// How long one request may wait for its response (see `response_timeout` for the longer
/// ones: the server bounds its own work, and the client must wait at least that long).
pub const RESPONSE_TIMEOUT_MS: u64 = 30_000;

/// The response wait of one operation: longer for those the server may legitimately work on
/// longer (resolving a workflow ≤ 60 s, a submission's verdict ≤ 120 s, state maintenance on
/// a large database). Each transport attempt gets the whole wait: a resent submission must
/// be able to wait for the same verdict.
pub fn response_timeout(operation: Operation) -> Duration {
    let ms = match operation {
        Operation::RunStart => 90_000,
        Operation::InteractionSubmit | Operation::InteractionAssistant | Operation::DecisionAnswer => 150_000,
        Operation::StateBackup | Operation::StatePrune | Operation::StateVerify => 30 * 60_000,
        _ => RESPONSE_TIMEOUT_MS,
    };
    Duration::from_millis(ms)
}
/// Events kept while a response is awaited; older ones are dropped (a subscriber only
/// needs the newest view, and every event can be replaced by a snapshot).
pub const EVENTS_QUEUED_MAX: usize = 64;
/// Resends of one request after its connection was lost, each on a new connection.
pub const RETRIES_MAX: usize = 3;
/// The wait before each resend: short, because a lost local socket either answers again at
/// once (a replaced connection, a restarted server) or not at all (the server stopped).
pub const RETRY_BACKOFF_MS: [u64; RETRIES_MAX] = [100, 300, 1_000];
/// No resend starts later than this after the first loss of one request; so a request ends
/// within (1 + [`RETRIES_MAX`]) response waits plus this window.
pub const RETRY_WINDOW_MS: u64 = 10_000;
/// How long a reconnect waits for `hello` (the server writes it at once).
pub const HELLO_TIMEOUT_MS: u64 = 5_000;
/// Subscriptions restored after a reconnect (the server's limit per connection).
pub const SUBSCRIPTIONS_KEPT_MAX: usize = 64;

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
    /// The connection ended before an answer (a transport loss: reconnected and retried).
    #[error("the server closed the connection ({0})")]
    Disconnected(String),
    /// The connection was lost and the bounded reconnects and resends got no answer.
    #[error(
        "lost the connection to the server {during}; {attempts} reconnect attempt(s) got no answer (last: {last}); {advice}"
    )]
    ConnectionLost {
        during: String,
        attempts: usize,
        last: String,
        advice: &'static str,
    },
    #[error("connection to the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A lost connection: worth reconnecting and resending. Everything else (an error
/// response, a bad message, a timeout, another version) is final.
fn is_transport_loss(err: &ClientError) -> bool {
    use std::io::ErrorKind;
    match err {
        // `Unavailable` only arises here from a reconnect: the server may be coming back.
        ClientError::Disconnected(_) | ClientError::Unavailable(_) => true,
        ClientError::Io(io) => matches!(
            io.kind(),
            ErrorKind::BrokenPipe
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof
                | ErrorKind::NotConnected
        ),
        _ => false,
    }
}

fn is_timeout(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// What to do when the retries are used up.
fn advice(operation: Operation) -> &'static str {
    match operation {
        Operation::ServerStop => "the server may be stopping: check with `pi-workflows server status`",
        op if op.is_state_changing() => {
            "the command may have been applied: check with `pi-workflows runs` or `pi-workflows run status <run-id>` before repeating it"
        }
        _ => "check the server with `pi-workflows server status` and try again",
    }
}

/// Operations never resent automatically: a stop resent to a server started since would
/// stop that one.
fn is_resendable(operation: Operation) -> bool {
    operation != Operation::ServerStop
}

pub struct Client {
    socket: PathBuf,
    /// `None` after a loss, until the next request or event wait reconnects.
    connection: Option<Connection>,
    client_id: OpaqueId,
    events: VecDeque<Event>,
    subscriptions: Vec<Subscription>,
    pub hello: Hello,
}

/// One connection: its read and write halves and the start of a message a read timeout cut.
struct Connection {
    reader: BufReader<InputWait>,
    writer: UnixStream,
    partial: Vec<u8>,
}

impl Connection {
    /// Connect and read `hello` (within `hello_wait`); another package version is refused.
    fn open(socket: &Path, hello_wait: Duration) -> Result<(Self, Hello), ClientError> {
        let writer = UnixStream::connect(socket).map_err(|err| ClientError::Unavailable(err.kind().to_string()))?;
        let mut connection = Self {
            reader: BufReader::new(InputWait::new(writer.try_clone()?, hello_wait)),
            writer,
            partial: Vec::new(),
        };
        let hello = match connection.read() {
            Ok(ClientMessage::Hello(hello)) => hello,
            Ok(_) => return Err(ClientError::Protocol("the first message was not hello".to_string())),
            Err(ClientError::Io(err)) if is_timeout(&err) => {
                return Err(ClientError::Disconnected(format!(
                    "no hello within {} s",
                    hello_wait.as_secs()
                )));
            }
            Err(err) => return Err(err),
        };
        let client = env!("CARGO_PKG_VERSION");
        if hello.package_version != client {
            return Err(ClientError::VersionMismatch {
                server: hello.package_version,
                client: client.to_string(),
            });
        }
        Ok((connection, hello))
    }

    fn read(&mut self) -> Result<ClientMessage, ClientError> {
        read_message(&mut self.reader, &mut self.partial)
    }

    /// How long each following read waits for input before it fails with `WouldBlock`.
    fn set_read_wait(&mut self, wait: Duration) {
        self.reader.get_mut().wait = wait;
    }
}

/// The connection's read side: a read waits with `poll` for input, at most `wait`, then reads
/// what arrived. Why not a `recv` blocked on the socket: the kernel also wakes a reader
/// sleeping on a Unix stream socket each time the server reads what this client wrote (its
/// "writable" signal shares the socket's wait queue), and the server pays for sending each
/// such wake-up too; a `poll` for input alone is not woken by it.
struct InputWait {
    stream: UnixStream,
    wait: Duration,
}

impl InputWait {
    fn new(stream: UnixStream, wait: Duration) -> Self {
        Self { stream, wait }
    }
}

impl Read for InputWait {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match wait_for_input(self.stream.as_fd(), Instant::now() + self.wait)? {
            true => self.stream.read(buf),
            false => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// A subscription the caller holds, restored after a reconnect.
struct Subscription {
    /// The ID the caller was given; its events keep it across reconnects.
    id: OpaqueId,
    /// Its ID on the current connection (`None` until restored there).
    current: Option<OpaqueId>,
    operation: Operation,
    run_id: Option<OpaqueId>,
    payload: JsonObject,
    /// The newest presentation revision an event carried: a restore asks from there.
    revision: Option<u64>,
}

/// The resend budget of one request (or one wait for events).
struct Retry {
    retries: usize,
    first_loss: Option<Instant>,
}

impl Retry {
    fn new() -> Self {
        Self {
            retries: 0,
            first_loss: None,
        }
    }

    /// Wait before the next attempt, or give up with what happened and what to do.
    fn next(&mut self, loss: &ClientError, during: &str, advice: &'static str) -> Result<(), ClientError> {
        let first = *self.first_loss.get_or_insert_with(Instant::now);
        let pause = RETRY_BACKOFF_MS.get(self.retries).map(|ms| Duration::from_millis(*ms));
        match pause {
            Some(pause) if first.elapsed() + pause < Duration::from_millis(RETRY_WINDOW_MS) => {
                std::thread::sleep(pause);
                self.retries += 1;
                Ok(())
            }
            _ => Err(ClientError::ConnectionLost {
                during: during.to_string(),
                attempts: self.retries,
                last: loss.to_string(),
                advice,
            }),
        }
    }
}

fn new_id(prefix: &str) -> OpaqueId {
    identity::process_id(prefix)
}

/// The state directory a socket belongs to (`<state>/server/server.sock`); for any other
/// layout (a proxy in a test) the socket's own directory.
fn state_dir_of(socket: &Path) -> PathBuf {
    let parent = socket.parent().unwrap_or(Path::new("."));
    match (parent.file_name(), parent.parent()) {
        (Some(name), Some(state)) if name == "server" => state.to_path_buf(),
        _ => parent.to_path_buf(),
    }
}

impl Client {
    /// Connect and read `hello`; the client ID is the installation's (`identity`), read
    /// from (or created in) the socket's state directory.
    pub fn connect(socket: &Path) -> Result<Self, ClientError> {
        let (connection, hello) = Connection::open(socket, Duration::from_millis(RESPONSE_TIMEOUT_MS))?;
        let client_id = identity::installation_id(&state_dir_of(socket), &identity::CLI);
        Ok(Self {
            socket: socket.to_path_buf(),
            connection: Some(connection),
            client_id,
            events: VecDeque::new(),
            subscriptions: Vec::new(),
            hello,
        })
    }

    /// The client ID every request carries.
    pub fn client_id(&self) -> &str {
        self.client_id.as_str()
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
        let key = operation
            .is_state_changing()
            .then(|| new_id("key").as_str().to_string());
        self.request_keyed(operation, run_id, payload, key)
    }

    /// `request_for` fenced by the run revision the caller last read: the server refuses it
    /// (`revisionMismatch`) if the run changed since, so it acts on what the user saw.
    pub fn request_at_revision(
        &mut self,
        operation: Operation,
        run_id: &str,
        payload: JsonObject,
        expected_revision: u64,
    ) -> Result<Response, ClientError> {
        let key = operation
            .is_state_changing()
            .then(|| new_id("key").as_str().to_string());
        let expected = Revision::new(expected_revision).map_err(|err| ClientError::Protocol(err.to_string()))?;
        self.send(operation, Some(run_id), payload, key, Some(expected))
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
        self.send(operation, run_id, payload, idempotency_key, None)
    }

    fn send(
        &mut self,
        operation: Operation,
        run_id: Option<&str>,
        mut payload: JsonObject,
        idempotency_key: Option<String>,
        expected_revision: Option<Revision>,
    ) -> Result<Response, ClientError> {
        let run_id = run_id
            .map(OpaqueId::new)
            .transpose()
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let idempotency_key = idempotency_key
            .map(OpaqueId::new)
            .transpose()
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let unwatched = self.forget_subscription(operation, &mut payload);
        let mut request = Request {
            schema: ClientSchema::V1,
            request_id: new_id("req"),
            client_id: self.client_id.clone(),
            operation,
            idempotency_key,
            run_id,
            expected_revision,
            payload,
        };
        let wait = response_timeout(operation);
        let during = format!("waiting for the answer to {}", operation.as_str());
        let mut retry = Retry::new();
        loop {
            let reconnected = self.connection.is_none();
            if reconnected && let Some(original) = unwatched.as_ref() {
                // The subscription ended with the lost connection; resending its old ID
                // could remove another subscription restored under the same ID.
                return Ok(unwatch_answer(&request, original));
            }
            let result = self.connected().and_then(|()| self.exchange(&request, wait));
            match result {
                Ok(response) => return Ok(self.answered(&request, response, unwatched.as_ref())),
                Err(err) if is_transport_loss(&err) => {
                    self.lose_connection();
                    if !is_resendable(operation) {
                        return Err(ClientError::ConnectionLost {
                            during,
                            attempts: 0,
                            last: err.to_string(),
                            advice: advice(operation),
                        });
                    }
                    retry.next(&err, &during, advice(operation))?;
                    // Same client ID and idempotency key; a new transport attempt.
                    request.request_id = new_id("req");
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Connect again after a loss (and restore the subscriptions there); nothing when
    /// connected.
    fn connected(&mut self) -> Result<(), ClientError> {
        if self.connection.is_some() {
            return Ok(());
        }
        let (connection, hello) = Connection::open(&self.socket, Duration::from_millis(HELLO_TIMEOUT_MS))?;
        self.connection = Some(connection);
        self.hello = hello;
        self.restore_subscriptions()
    }

    fn lose_connection(&mut self) {
        self.connection = None;
        for subscription in &mut self.subscriptions {
            subscription.current = None;
        }
    }

    fn read(&mut self) -> Result<ClientMessage, ClientError> {
        match self.connection.as_mut() {
            Some(connection) => connection.read(),
            None => Err(ClientError::Disconnected("not connected".to_string())),
        }
    }

    /// Write `request` and read until its response (keeping events that arrive first).
    fn exchange(&mut self, request: &Request, wait: Duration) -> Result<Response, ClientError> {
        let bytes = encode_client_message(&ClientMessage::Request(request.clone()))
            .map_err(|err| ClientError::Protocol(err.to_string()))?;
        let Some(connection) = self.connection.as_mut() else {
            return Err(ClientError::Disconnected("not connected".to_string()));
        };
        connection.set_read_wait(wait);
        connection.writer.write_all(&bytes)?;
        loop {
            let message = match self.read() {
                Ok(message) => message,
                Err(ClientError::Io(io)) if is_timeout(&io) => {
                    // Its answer may still come on this connection and would be mistaken
                    // for the next one's: start the next request on a new connection.
                    self.lose_connection();
                    return Err(ClientError::TimedOut {
                        operation: request.operation.as_str(),
                        seconds: wait.as_secs(),
                    });
                }
                Err(err) => return Err(err),
            };
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

    /// Note a new subscription from its answer; an unwatch answer names the caller's ID.
    fn answered(&mut self, request: &Request, mut response: Response, unwatched: Option<&OpaqueId>) -> Response {
        let is_watch = matches!(request.operation, Operation::ViewRunWatch | Operation::ViewRunsWatch);
        if is_watch
            && self.subscriptions.len() < SUBSCRIPTIONS_KEPT_MAX
            && let Some(id) = subscription_id_of(&response)
        {
            let mut payload = request.payload.clone();
            payload.remove("sinceRevision");
            self.subscriptions.push(Subscription {
                id: id.clone(),
                current: Some(id),
                operation: request.operation,
                run_id: request.run_id.clone(),
                payload,
                revision: None,
            });
        }
        if let (Some(original), Some(receipt)) = (unwatched, response.receipt.as_mut())
            && receipt.contains_key("subscriptionId")
        {
            receipt.insert("subscriptionId".into(), json!(original.as_str()));
        }
        response
    }

    /// For an unwatch of a subscription this client restores: stop restoring it and name
    /// its ID on the current connection. Returns the caller's ID.
    fn forget_subscription(&mut self, operation: Operation, payload: &mut JsonObject) -> Option<OpaqueId> {
        if !matches!(operation, Operation::ViewRunUnwatch | Operation::ViewUnwatch) {
            return None;
        }
        let named = payload.get("subscriptionId").and_then(Value::as_str)?;
        let index = self.subscriptions.iter().position(|s| s.id.as_str() == named)?;
        let subscription = self.subscriptions.remove(index);
        // Without a current ID the connection is lost (a restore names every subscription
        // it keeps), and the request loop answers for the ended subscription itself.
        if let Some(current) = subscription.current.as_ref() {
            payload.insert("subscriptionId".into(), json!(current.as_str()));
        }
        Some(subscription.id)
    }

    /// Watch again, on a new connection, what the caller holds: from the newest revision
    /// seen (the server answers a patch if it still has it, else a snapshot). A watch the
    /// server now refuses (the run was deleted) ends with an `unavailable` event.
    fn restore_subscriptions(&mut self) -> Result<(), ClientError> {
        for index in 0..self.subscriptions.len() {
            let subscription = &self.subscriptions[index];
            let mut payload = subscription.payload.clone();
            if let (Operation::ViewRunWatch, Some(revision)) = (subscription.operation, subscription.revision) {
                payload.insert("sinceRevision".into(), json!(revision));
            }
            let request = Request {
                schema: ClientSchema::V1,
                request_id: new_id("req"),
                client_id: self.client_id.clone(),
                operation: subscription.operation,
                idempotency_key: None,
                run_id: subscription.run_id.clone(),
                expected_revision: None,
                payload,
            };
            let response = self.exchange(&request, Duration::from_millis(RESPONSE_TIMEOUT_MS))?;
            self.subscriptions[index].current = subscription_id_of(&response);
        }
        let (restored, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut self.subscriptions)
            .into_iter()
            .partition(|subscription| subscription.current.is_some());
        self.subscriptions = restored;
        for subscription in refused {
            self.keep_event(Event {
                schema: ClientSchema::V1,
                subscription_id: subscription.id.clone(),
                event: EventKind::Unavailable,
                revision: None,
                run_id: subscription.run_id,
                payload: JsonObject::new(),
            });
        }
        Ok(())
    }

    /// An event with the subscription ID the caller knows; its revision is remembered. An
    /// `unavailable` event ends the subscription on the server: it is not restored.
    fn translated(&mut self, mut event: Event) -> Event {
        let Some(index) = self
            .subscriptions
            .iter()
            .position(|s| s.current.as_ref() == Some(&event.subscription_id))
        else {
            return event;
        };
        let subscription = &mut self.subscriptions[index];
        event.subscription_id = subscription.id.clone();
        if let Some(revision) = event.revision {
            subscription.revision = Some(revision.get());
        }
        if event.event == EventKind::Unavailable {
            self.subscriptions.remove(index);
        }
        event
    }

    fn keep_event(&mut self, event: Event) {
        let event = self.translated(event);
        if self.events.len() >= EVENTS_QUEUED_MAX {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// Events that arrived before the last response (without reading the socket).
    pub fn take_queued_events(&mut self) -> Vec<Event> {
        self.events.drain(..).collect()
    }

    /// The next subscription event; `Ok(None)` when none arrives within `timeout`. A lost
    /// connection is reconnected (bounded, as for requests) while subscriptions are held.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        let mut retry = Retry::new();
        loop {
            if let Some(event) = self.events.pop_front() {
                return Ok(Some(event));
            }
            match self.connected().and_then(|()| self.read_event(timeout)) {
                Ok(event) => return Ok(event),
                Err(err) if is_transport_loss(&err) && !self.subscriptions.is_empty() => {
                    self.lose_connection();
                    retry.next(
                        &err,
                        "while waiting for subscription events",
                        advice(Operation::ViewRunWatch),
                    )?;
                }
                Err(err) => {
                    if is_transport_loss(&err) {
                        self.lose_connection();
                    }
                    return Err(err);
                }
            }
        }
    }

    fn read_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(connection) = self.connection.as_mut() {
            connection.set_read_wait(timeout.max(Duration::from_millis(1)));
        }
        match self.read() {
            Ok(ClientMessage::Event(event)) => Ok(Some(self.translated(event))),
            Ok(_) => Err(ClientError::Protocol("expected an event".to_string())),
            Err(ClientError::Io(err)) if is_timeout(&err) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// The subscription ID of an accepted watch answer.
fn subscription_id_of(response: &Response) -> Option<OpaqueId> {
    if !matches!(response.outcome, Outcome::Accepted | Outcome::Adopted) {
        return None;
    }
    let id = response.receipt.as_ref()?.get("subscriptionId")?.as_str()?;
    OpaqueId::new(id).ok()
}

/// The answer to an unwatch whose subscription ended with a lost connection.
fn unwatch_answer(request: &Request, original: &OpaqueId) -> Response {
    let mut receipt = JsonObject::new();
    receipt.insert("subscriptionId".into(), json!(original.as_str()));
    receipt.insert("removed".into(), json!(true));
    Response {
        schema: ClientSchema::V1,
        request_id: request.request_id.clone(),
        outcome: Outcome::Accepted,
        revision: None,
        receipt: Some(receipt),
        error: None,
    }
}

/// Read one message; bytes of a line cut by a read timeout stay in `partial` for the next
/// call, so a timeout never loses part of a message.
fn read_message(reader: &mut BufReader<InputWait>, partial: &mut Vec<u8>) -> Result<ClientMessage, ClientError> {
    loop {
        let budget = FRAME_BYTES_MAX.saturating_sub(partial.len()) as u64;
        let read = std::io::Read::take(&mut *reader, budget).read_until(b'\n', partial)?;
        if partial.ends_with(b"\n") {
            let line = std::mem::take(partial);
            return decode_client_message(&line).map_err(|err| ClientError::Protocol(err.to_string()));
        }
        if read == 0 && budget > 0 {
            return Err(ClientError::Disconnected("end of file".to_string()));
        }
        if partial.len() >= FRAME_BYTES_MAX {
            return Err(ClientError::Protocol("the server sent a frame above 1 MiB".to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many times a thread went to sleep (`voluntary_ctxt_switches` in its status).
    fn sleeps_of(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("own thread");
        let line = status
            .lines()
            .find(|line| line.starts_with("voluntary_ctxt_switches:"))
            .expect("a context switch count");
        line.split_whitespace()
            .nth(1)
            .and_then(|count| count.parse().ok())
            .expect("a number")
    }

    /// A reader thread blocked with `read` while the peer reads, one by one and slowly, the
    /// 200 lines the reader's side wrote before: how often the reader went to sleep meanwhile.
    /// (The kernel signals "writable" once less than a quarter of the send buffer is in
    /// flight, so a blocked `recv` is woken for about the last 70 of them here, and for every
    /// request of a client that has one in flight.)
    fn sleeps_while_the_peer_reads(read: impl FnOnce(UnixStream) + Send + 'static) -> u64 {
        const LINES: usize = 200;
        let (client, mut server) = UnixStream::pair().unwrap();
        let mut writer = client.try_clone().unwrap();
        for _ in 0..LINES {
            writer.write_all(b"request\n").unwrap();
        }
        let (tid_sender, tid) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            tid_sender
                .send(rustix::thread::gettid().as_raw_nonzero().get())
                .unwrap();
            read(client);
        });
        let tid = tid.recv().unwrap();
        // Wait until the reader sleeps in its read.
        while !std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).is_ok_and(|stat| stat.contains(") S ")) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = sleeps_of(tid);
        let mut line = [0u8; 8];
        for _ in 0..LINES {
            server.read_exact(&mut line).unwrap();
            std::thread::sleep(Duration::from_micros(500));
        }
        let slept = sleeps_of(tid) - before;
        server.write_all(b"answer\n").unwrap();
        reader.join().unwrap();
        slept
    }

    #[test]
    fn a_wait_for_the_answer_is_not_woken_by_the_server_reading_the_request() {
        let polled = sleeps_while_the_peer_reads(|client| {
            let mut input = InputWait::new(client, Duration::from_secs(10));
            let mut answer = [0u8; 7];
            input.read_exact(&mut answer).unwrap();
            assert_eq!(&answer, b"answer\n");
        });
        // What a `recv` blocked on the socket goes through, so this test can see the difference.
        let blocked = sleeps_while_the_peer_reads(|mut client| {
            let mut answer = [0u8; 7];
            client.read_exact(&mut answer).unwrap();
        });
        assert!(polled <= 10, "the waiting reader woke {polled} times");
        assert!(
            blocked >= 40,
            "a blocked recv woke only {blocked} times: the test cannot tell"
        );
    }

    #[test]
    fn a_wait_for_input_ends_at_its_time_with_would_block_and_loses_nothing() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let mut input = BufReader::new(InputWait::new(client, Duration::from_millis(30)));
        let started = Instant::now();
        let mut partial = Vec::new();
        server.write_all(b"{\"cut").unwrap();
        let err = read_message(&mut input, &mut partial).unwrap_err();
        assert!(matches!(&err, ClientError::Io(io) if is_timeout(io)), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(partial, b"{\"cut", "the cut line is kept for the next read");
    }
}
