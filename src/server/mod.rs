//! The server daemon: one per state directory. `run` holds the global lock, takes the
//! server lease (epoch + 1), starts the supervision tree and serves the socket until it is
//! asked to stop (client, signal, idle, or lost lease), then stops the tree in reverse order
//! so in-flight commands finish and commit first.
//!
//! Architecture Invariant: the server never loads or runs workflow code.

pub mod blocking;
pub mod connection;
pub mod context;
pub mod frames;
pub mod handlers;
pub mod listener;
pub mod logging;
pub mod ownership;
pub mod scheduler;
pub mod status;
pub mod tree;

use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ractor::Actor;
use supervisors::Supervisor;

pub use context::{ServerContext, StopReason};
use ownership::ServerPaths;

use crate::digest::hex_lower;
use crate::store::server_lease::{self, ServerLease};
use crate::store::{Store, SystemClock};

/// How long the whole tree may take to stop before the process exits anyway.
pub const SHUTDOWN_TIMEOUT_MS: u64 = 30_000;
/// Environment variable naming the file descriptor on which `server start` waits for
/// "ready"; set only by `server start`.
pub const READY_FD_ENV: &str = "PI_WORKFLOWS_READY_FD";
pub const IDLE_EXIT_ENV: &str = "PI_WORKFLOWS_IDLE_EXIT_MS";

pub struct ServerConfig {
    pub paths: ServerPaths,
    pub idle_exit: Duration,
    pub json_logs: bool,
}

impl ServerConfig {
    pub fn from_env(paths: ServerPaths) -> anyhow::Result<Self> {
        let idle_exit_ms = match std::env::var(IDLE_EXIT_ENV) {
            Ok(text) => text
                .parse::<u64>()
                .with_context(|| format!("{IDLE_EXIT_ENV} must be a number of milliseconds"))?,
            Err(_) => scheduler::IDLE_EXIT_MS_DEFAULT,
        };
        let json_logs = std::env::var("PI_WORKFLOWS_LOG_JSON").is_ok_and(|value| value == "1");
        Ok(Self {
            paths,
            idle_exit: Duration::from_millis(idle_exit_ms),
            json_logs,
        })
    }
}

/// Run the server in this process until it stops; returns why it stopped.
pub async fn run(config: ServerConfig) -> anyhow::Result<StopReason> {
    let paths = &config.paths;
    paths.check_socket_path()?;
    paths.create_dirs()?;
    let _lock = ownership::take_lock(paths)?;
    logging::install(&paths.logs_dir.join("server.log"), config.json_logs)?;
    supervisors::process::set_child_subreaper().context("could not become a child subreaper")?;

    let database = paths.database.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&database, Arc::new(SystemClock))).await??;
    let store = Arc::new(store);
    let server_id = new_server_id()?;
    let lease: ServerLease = blocking::write(&store, move |tx| server_lease::take_server_lease(tx, &server_id)).await?;
    tracing::info!(epoch = lease.epoch, pid = std::process::id(), "server starting");

    let ctx = ServerContext::new(Arc::clone(&store), lease.epoch);
    let spec = tree::root_spec(&ctx, &lease, paths.socket.clone(), config.idle_exit);
    let (root, root_done) = Actor::spawn(None, Supervisor, spec)
        .await
        .context("the supervision tree did not start")?;
    let _ = ctx.root.set(root.clone());
    announce_ready(lease.epoch);
    tracing::info!(epoch = lease.epoch, "server ready");

    let reason = tokio::select! {
        reason = ctx.stopped() => reason,
        () = signal_received() => StopReason::Signal,
        _ = wait_root(&root) => StopReason::LeaseLost,
    };
    ctx.request_stop(reason);
    tracing::info!(reason = reason.as_str(), "server stopping");
    let stopped = root
        .stop_and_wait(
            Some(reason.as_str().to_string()),
            Some(Duration::from_millis(SHUTDOWN_TIMEOUT_MS)),
        )
        .await;
    if stopped.is_err() {
        tracing::error!("the supervision tree did not stop in time");
    }
    drop(root_done);
    tracing::info!(reason = reason.as_str(), "server stopped");
    Ok(reason)
}

/// Resolves if the root supervisor dies on its own (it escalated past its intensity).
async fn wait_root(root: &ractor::ActorRef<supervisors::SupervisorMsg>) {
    while root.get_status() <= ractor::ActorStatus::Running {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::error!("the root supervisor stopped on its own");
}

async fn signal_received() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}

fn new_server_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| anyhow::anyhow!("no randomness for the server id: {err}"))?;
    Ok(hex_lower(&bytes))
}

/// Tell a waiting `server start` that the socket accepts clients.
fn announce_ready(epoch: i64) {
    let Some(fd) = std::env::var(READY_FD_ENV)
        .ok()
        .and_then(|text| text.parse::<RawFd>().ok())
    else {
        return;
    };
    // SAFETY: `server start` passed this descriptor for exactly this one write; it is not
    // used anywhere else in this process.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let _ = writeln!(pipe, "ready {epoch}");
}
