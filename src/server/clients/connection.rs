//! One actor per client connection (temporary child of `clients`). It writes `hello`, then
//! answers one request at a time: its reader task waits for each answer before reading the
//! next line, so a client can never queue unbounded work. A bad frame closes this
//! connection only.
//!
//! A connection holds a slot for as long as its actor or its start lives; a connection
//! that sends no request within the first-request deadline, or (holding no subscription)
//! nothing within the idle deadline, is closed. A connection in the reserve (past the normal
//! limit) may only ask `server.status` or `server.stop`, so those always get in.

use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::io::BufReader;
use tokio::task::JoinHandle;

use super::subscriptions::{Subscriptions, Watcher, is_subscription_operation};
use super::writer::{SharedWriter, write_shared};
use crate::protocol::{ClientMessage, ClientSchema, Hello, OpaqueId, Operation, decode_client_message};
use crate::server::answers;
pub use crate::server::config::ConnectionDeadlines;
use crate::server::frames::{LineRead, read_line};
use crate::server::ops::context::OpsContext;
use crate::server::ops::dispatch;
use crate::server::shared::ConnectionSlot;
use crate::server::socket;
use crate::server::views::feeds::Feeds;

pub struct Connection;

/// The soonest a connection checks its deadlines again after a check (it checks when its
/// next deadline falls, not on a timer, so a quiet client costs no wake-ups).
const DEADLINE_RECHECK_MS_MIN: u64 = 10;

#[derive(Clone)]
pub struct ConnectionArgs {
    ops: Arc<OpsContext>,
    feeds: Arc<Feeds>,
    /// The stream and its slot, taken once by the actor's start.
    accepted: Arc<Mutex<Option<(UnixStream, ConnectionSlot)>>>,
    number: u64,
    /// Past the normal limit: only `server.status` and `server.stop` are served.
    reserved: bool,
    deadlines: ConnectionDeadlines,
}

impl ConnectionArgs {
    pub fn new(
        ops: Arc<OpsContext>,
        feeds: Arc<Feeds>,
        accepted: (UnixStream, ConnectionSlot),
        number: u64,
        reserved: bool,
        deadlines: ConnectionDeadlines,
    ) -> Self {
        Self {
            ops,
            feeds,
            accepted: Arc::new(Mutex::new(Some(accepted))),
            number,
            reserved,
            deadlines,
        }
    }
}

pub enum ConnectionMsg {
    /// One line from the client; the reply says whether to keep reading.
    Line(Vec<u8>, RpcReplyPort<bool>),
    CheckDeadlines,
}

pub struct ConnectionState {
    ops: Arc<OpsContext>,
    feeds: Arc<Feeds>,
    /// Shared with this connection's subscription forwarders.
    writer: SharedWriter,
    reader: Option<JoinHandle<()>>,
    subscriptions: Subscriptions,
    myself: ActorRef<ConnectionMsg>,
    number: u64,
    reserved: bool,
    deadlines: ConnectionDeadlines,
    /// Requests answered so far.
    requests: u64,
    /// When the last request was answered (or `hello` written).
    last_activity: Instant,
    _slot: ConnectionSlot,
    /// The next deadline check (`until_next_deadline`).
    deadline_check: Option<DeadlineCheck>,
}

type DeadlineCheck = tokio::task::JoinHandle<Result<(), ractor::MessagingErr<ConnectionMsg>>>;

impl Actor for Connection {
    type Msg = ConnectionMsg;
    type State = ConnectionState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ConnectionMsg>,
        args: ConnectionArgs,
    ) -> Result<ConnectionState, ActorProcessingErr> {
        let accepted = args
            .accepted
            .lock()
            .map_err(|_| "connection stream lock poisoned")?
            .take();
        // The slot is released whenever this state (or, before it exists, the spec) drops.
        let (stream, slot) = accepted.ok_or("a connection actor cannot be restarted")?;
        let (read_half, writer) = socket::split(stream)?;
        let mut state = ConnectionState {
            ops: args.ops,
            feeds: args.feeds,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            reader: None,
            subscriptions: Subscriptions::new(),
            myself: myself.clone(),
            number: args.number,
            reserved: args.reserved,
            deadlines: args.deadlines,
            requests: 0,
            last_activity: Instant::now(),
            _slot: slot,
            deadline_check: None,
        };
        let hello = ClientMessage::Hello(Hello {
            schema: ClientSchema::V1,
            // Random, so the tree's `connection-N` names never reveal a client's connection ID.
            connection_id: OpaqueId::new(format!(
                "connection-{}",
                crate::digest::random_hex(8).ok_or("no randomness for a connection ID")?
            ))?,
            package_version: state.ops.shared.package_version.to_string(),
        });
        write_message(&mut state, hello).await?;
        state.last_activity = Instant::now();
        state.reader = Some(tokio::spawn(read_lines(read_half, myself.clone())));
        state.deadline_check = Some(myself.send_after(until_next_deadline(&state), || ConnectionMsg::CheckDeadlines));
        Ok(state)
    }

    async fn post_stop(
        &self,
        _: ActorRef<ConnectionMsg>,
        state: &mut ConnectionState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(reader) = state.reader.take() {
            reader.abort();
        }
        if let Some(check) = state.deadline_check.take() {
            check.abort();
        }
        state.subscriptions.clear();
        // Its coordinator epochs end with it (an open Pi turn does not).
        state.ops.coordinators.release_connection(state.number);
        tracing::debug!(connection = state.number, "connection closed");
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ConnectionMsg>,
        message: ConnectionMsg,
        state: &mut ConnectionState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConnectionMsg::Line(line, reply) => {
                let keep_reading = answer_line(state, &line).await;
                state.requests += 1;
                state.last_activity = Instant::now();
                let _ = reply.send(keep_reading);
            }
            ConnectionMsg::CheckDeadlines => {
                if let Some(why) = missed_deadline(state) {
                    tracing::info!(connection = state.number, why, "closing a silent connection");
                    myself.stop(Some(why.to_string()));
                } else {
                    let wait = until_next_deadline(state);
                    state.deadline_check = Some(myself.send_after(wait, || ConnectionMsg::CheckDeadlines));
                }
            }
        }
        Ok(())
    }
}

/// Why the connection must close now, if it must: silent too long.
fn missed_deadline(state: &ConnectionState) -> Option<&'static str> {
    let silent = state.last_activity.elapsed();
    if state.requests == 0 && silent >= first_request_deadline(state) {
        return Some("no request before the first-request deadline");
    }
    if state.subscriptions.is_empty() && silent >= state.deadlines.idle {
        return Some("idle past the idle deadline without a subscription");
    }
    None
}

fn first_request_deadline(state: &ConnectionState) -> Duration {
    match state.reserved {
        true => state.deadlines.reserved_first_request,
        false => state.deadlines.first_request,
    }
}

/// When the deadline that applies now would fall if the client stays silent (activity in
/// between only makes the next check find it later). A connection with subscriptions is
/// checked again an idle deadline later: it may have none by then.
fn until_next_deadline(state: &ConnectionState) -> Duration {
    let limit = match state.requests {
        0 => first_request_deadline(state),
        _ => state.deadlines.idle,
    };
    let silent = state.last_activity.elapsed();
    let rest = limit
        .checked_sub(silent)
        .filter(|rest| !rest.is_zero())
        .unwrap_or(limit);
    rest.max(Duration::from_millis(DEADLINE_RECHECK_MS_MIN))
}

/// Operations a connection in the reserve may ask.
fn allowed_in_reserve(operation: Operation) -> bool {
    matches!(operation, Operation::ServerStatus | Operation::ServerStop)
}

/// Answer one line; false closes the connection.
async fn answer_line(state: &mut ConnectionState, line: &[u8]) -> bool {
    let request = match decode_client_message(line) {
        Ok(ClientMessage::Request(request)) => request,
        Ok(_) => {
            tracing::info!(connection = state.number, "client sent a non-request message; closing");
            return false;
        }
        Err(err) => {
            tracing::info!(
                connection = state.number,
                code = err.code(),
                "bad frame; closing this connection"
            );
            return false;
        }
    };
    if state.reserved && !allowed_in_reserve(request.operation) {
        let refusal = answers::rejected(
            "tooManyConnections",
            "the server has too many client connections open; close some (e.g. stale `view` or `runs --watch`) and retry",
        );
        let handled = answers::handled(&request, Err(refusal));
        let _ = write_message(state, ClientMessage::Response(handled.response)).await;
        return false;
    }
    if is_subscription_operation(request.operation) {
        let watcher = Watcher {
            connection: state.number,
            coordinators: Arc::clone(&state.ops.coordinators),
        };
        let (answer, pending) = state.subscriptions.handle(&state.feeds, &watcher, &request).await;
        let handled = answers::handled(&request, answer);
        if write_message(state, ClientMessage::Response(handled.response))
            .await
            .is_err()
        {
            return false;
        }
        if let Some(pending) = pending {
            let (writer, myself) = (Arc::clone(&state.writer), state.myself.get_cell());
            state.subscriptions.start(pending, writer, myself);
        }
        return true;
    }
    let handled = dispatch::handle_request(&state.ops, request).await;
    let written = write_message(state, ClientMessage::Response(handled.response))
        .await
        .is_ok();
    if let Some(reason) = handled.stop_after {
        state.ops.shared.request_stop(reason);
    }
    written
}

async fn write_message(state: &mut ConnectionState, message: ClientMessage) -> Result<(), ActorProcessingErr> {
    write_shared(&state.writer, message)
        .await
        .map_err(|()| "client write failed or timed out".into())
}

async fn read_lines(read_half: socket::ReadHalf, connection: ActorRef<ConnectionMsg>) {
    let mut reader = BufReader::new(read_half);
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line).await {
            Ok(LineRead::Line) => {}
            Ok(LineRead::Closed) | Err(_) => break,
            Ok(LineRead::TooLarge) => {
                tracing::info!("oversized frame; closing this connection");
                break;
            }
        }
        let frame = std::mem::take(&mut line);
        match connection.call(|reply| ConnectionMsg::Line(frame, reply), None).await {
            Ok(ractor::rpc::CallResult::Success(true)) => continue,
            _ => break,
        }
    }
    connection.stop(None);
}
