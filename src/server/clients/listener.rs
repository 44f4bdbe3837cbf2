//! The listener actor: owns the user-only socket and starts one connection actor per client
//! under the `clients` supervisor. It checks that the socket path is still its socket
//! whenever the socket's directory reports a change (`path_watch.rs`): one removed or
//! replaced stops the server (`stateRemoved`), and it never removes a socket that is not its
//! own.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use supervisors::{ChildSpec, Restart, SupervisorMsg};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;

use super::connection::{Connection, ConnectionArgs, ConnectionDeadlines};
use crate::server::ops::context::OpsContext;
use crate::server::ownership::{FileIdentity, file_identity};
use crate::server::path_watch::PathWatch;
use crate::server::shared::StopReason;
use crate::server::views::feeds::Feeds;

const SOCKET_MODE: u32 = 0o600;
/// Client connections at once for any operation.
pub const CONNECTIONS_MAX: usize = 256;
/// Connections past `CONNECTIONS_MAX` kept for `server.status` and `server.stop`, so a user
/// can always see and stop a server that clients have filled up; more are closed at accept.
pub const CONNECTIONS_RESERVE: usize = 8;
/// Refused connections are logged at most once in this period (with their count).
const REFUSAL_LOG_PERIOD_MS: u64 = 10_000;

pub struct Listener;

#[derive(Clone)]
pub struct ListenerArgs {
    pub ops: Arc<OpsContext>,
    pub feeds: Arc<Feeds>,
    pub socket: PathBuf,
    /// Connections accepted so far: names each connection child uniquely, also across a
    /// restart of the listener.
    pub accepted: Arc<AtomicU64>,
    pub deadlines: ConnectionDeadlines,
}

pub enum ListenerMsg {
    CheckSocket,
}

pub struct ListenerState {
    args: ListenerArgs,
    /// Device and inode of the socket this listener bound.
    bound: Option<FileIdentity>,
    /// Bound in `pre_start`, served from `post_start` (once linked to `clients`).
    listener: Option<UnixListener>,
    accept_loop: Option<JoinHandle<()>>,
    /// Sends `CheckSocket` when the socket's directory reports a change (`path_watch.rs`).
    socket_watch: Option<JoinHandle<()>>,
}

impl Actor for Listener {
    type Msg = ListenerMsg;
    type State = ListenerState;
    type Arguments = ListenerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ListenerMsg>,
        args: ListenerArgs,
    ) -> Result<ListenerState, ActorProcessingErr> {
        // The global lock is held, so a socket file left here belongs to a dead server.
        match std::fs::remove_file(&args.socket) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Box::new(err)),
        }
        let listener = UnixListener::bind(&args.socket)?;
        std::fs::set_permissions(&args.socket, std::fs::Permissions::from_mode(SOCKET_MODE))?;
        let bound = file_identity(&args.socket);
        if let Some(identity) = bound {
            args.ops.shared.set_socket(args.socket.clone(), identity);
        }
        let watch = PathWatch::new([args.socket.as_path()]);
        let socket_watch = tokio::spawn(watch_socket(myself, watch));
        tracing::info!("listening");
        Ok(ListenerState {
            args,
            bound,
            listener: Some(listener),
            accept_loop: None,
            socket_watch: Some(socket_watch),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<ListenerMsg>,
        state: &mut ListenerState,
    ) -> Result<(), ActorProcessingErr> {
        let clients: ActorRef<SupervisorMsg> = myself
            .try_get_supervisor()
            .ok_or("the listener must run under the clients supervisor")?
            .into();
        let listener = state.listener.take().ok_or("the listener socket was not bound")?;
        state.accept_loop = Some(tokio::spawn(accept_loop(listener, clients, state.args.clone())));
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<ListenerMsg>, state: &mut ListenerState) -> Result<(), ActorProcessingErr> {
        for task in [state.accept_loop.take(), state.socket_watch.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
        if state.bound.is_some() && file_identity(&state.args.socket) == state.bound {
            let _ = std::fs::remove_file(&state.args.socket);
        }
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<ListenerMsg>,
        message: ListenerMsg,
        state: &mut ListenerState,
    ) -> Result<(), ActorProcessingErr> {
        let ListenerMsg::CheckSocket = message;
        let shared = &state.args.ops.shared;
        if shared.stop_requested().is_none() && file_identity(&state.args.socket) != state.bound {
            tracing::error!("the server socket was removed or replaced; stopping (start the server again)");
            shared.request_stop(StopReason::StateRemoved);
        }
        Ok(())
    }
}

/// Ask for a socket check whenever the watch says to look.
async fn watch_socket(myself: ActorRef<ListenerMsg>, mut watch: PathWatch) {
    loop {
        watch.next().await;
        if myself.cast(ListenerMsg::CheckSocket).is_err() {
            return;
        }
    }
}

async fn accept_loop(listener: UnixListener, clients: ActorRef<SupervisorMsg>, args: ListenerArgs) {
    let mut refusals = RefusalLog::default();
    loop {
        // The connection registers its socket itself, for reading only (`server::socket`).
        let stream = match listener.accept().await.and_then(|(stream, _)| stream.into_std()) {
            Ok(stream) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = &args.ops.shared;
        let Some(slot) = shared.open_connection(CONNECTIONS_MAX + CONNECTIONS_RESERVE) else {
            refusals.refused();
            continue;
        };
        let reserved = shared.connections() > CONNECTIONS_MAX;
        let number = args.accepted.fetch_add(1, Ordering::SeqCst) + 1;
        let connection = ConnectionArgs::new(
            Arc::clone(&args.ops),
            Arc::clone(&args.feeds),
            (stream, slot),
            number,
            reserved,
            args.deadlines,
        );
        let spec = ChildSpec::worker(format!("connection-{number}"), Restart::Temporary, move || {
            (Connection, connection.clone())
        });
        // A connection that fails to start (e.g. its peer is gone before `hello`) gives its
        // slot back as its spec is dropped.
        match clients.call(|reply| SupervisorMsg::StartChild(spec, reply), None).await {
            Ok(ractor::rpc::CallResult::Success(Ok(()))) => {}
            other => tracing::debug!(result = ?other.map(|_| ()), "a connection did not start"),
        }
    }
}

/// Refused connections, logged at most once a period: a client that loops cannot fill the log.
#[derive(Default)]
struct RefusalLog {
    last_logged: Option<std::time::Instant>,
    since_last: u64,
}

impl RefusalLog {
    fn refused(&mut self) {
        self.since_last += 1;
        let period = std::time::Duration::from_millis(REFUSAL_LOG_PERIOD_MS);
        if self.last_logged.is_some_and(|at| at.elapsed() < period) {
            return;
        }
        tracing::warn!(
            max = CONNECTIONS_MAX + CONNECTIONS_RESERVE,
            refused = self.since_last,
            "too many client connections; refusing new ones"
        );
        self.last_logged = Some(std::time::Instant::now());
        self.since_last = 0;
    }
}
