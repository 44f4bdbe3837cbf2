//! One actor per client connection (temporary child of `clients`). It writes `hello`, then
//! answers one request at a time: its reader task waits for each answer before reading the
//! next line, so a client can never queue unbounded work. A bad frame closes this
//! connection only.

use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::net::unix::OwnedReadHalf;
use tokio::task::JoinHandle;

use super::subscriptions::{Subscriptions, is_subscription_operation};
use super::writer::{SharedWriter, write_shared};
use crate::protocol::{ClientMessage, ClientSchema, Hello, OpaqueId, decode_client_message};
use crate::server::answers;
use crate::server::frames::{LineRead, read_line};
use crate::server::ops::context::OpsContext;
use crate::server::ops::dispatch;
use crate::server::views::feeds::Feeds;

pub struct Connection;

#[derive(Clone)]
pub struct ConnectionArgs {
    ops: Arc<OpsContext>,
    feeds: Arc<Feeds>,
    stream: Arc<Mutex<Option<UnixStream>>>,
    number: u64,
}

impl ConnectionArgs {
    pub fn new(ops: Arc<OpsContext>, feeds: Arc<Feeds>, stream: UnixStream, number: u64) -> Self {
        Self {
            ops,
            feeds,
            stream: Arc::new(Mutex::new(Some(stream))),
            number,
        }
    }
}

pub enum ConnectionMsg {
    /// One line from the client; the reply says whether to keep reading.
    Line(Vec<u8>, RpcReplyPort<bool>),
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
}

impl Actor for Connection {
    type Msg = ConnectionMsg;
    type State = ConnectionState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ConnectionMsg>,
        args: ConnectionArgs,
    ) -> Result<ConnectionState, ActorProcessingErr> {
        let stream = args
            .stream
            .lock()
            .map_err(|_| "connection stream lock poisoned")?
            .take();
        let stream = stream.ok_or("a connection actor cannot be restarted")?;
        let (read_half, writer) = stream.into_split();
        args.ops.shared.connection_opened();
        let mut state = ConnectionState {
            ops: args.ops,
            feeds: args.feeds,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            reader: None,
            subscriptions: Subscriptions::new(),
            myself: myself.clone(),
            number: args.number,
        };
        let hello = ClientMessage::Hello(Hello {
            schema: ClientSchema::V1,
            connection_id: OpaqueId::new(format!("connection-{}-{}", state.ops.shared.epoch, args.number))?,
            package_version: state.ops.shared.package_version.to_string(),
        });
        write_message(&mut state, &hello).await?;
        state.reader = Some(tokio::spawn(read_lines(read_half, myself)));
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
        state.subscriptions.clear();
        state.ops.shared.connection_closed();
        tracing::debug!(connection = state.number, "connection closed");
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<ConnectionMsg>,
        message: ConnectionMsg,
        state: &mut ConnectionState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConnectionMsg::Line(line, reply) => {
                let keep_reading = answer_line(state, &line).await;
                let _ = reply.send(keep_reading);
            }
        }
        Ok(())
    }
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
    if is_subscription_operation(request.operation) {
        let (answer, pending) = state.subscriptions.handle(&state.feeds, &request).await;
        let handled = answers::handled(&request, answer);
        if write_message(state, &ClientMessage::Response(handled.response))
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
    let written = write_message(state, &ClientMessage::Response(handled.response))
        .await
        .is_ok();
    if let Some(reason) = handled.stop_after {
        state.ops.shared.request_stop(reason);
    }
    written
}

async fn write_message(state: &mut ConnectionState, message: &ClientMessage) -> Result<(), ActorProcessingErr> {
    write_shared(&state.writer, message)
        .await
        .map_err(|()| "client write failed or timed out".into())
}

async fn read_lines(read_half: OwnedReadHalf, connection: ActorRef<ConnectionMsg>) {
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
