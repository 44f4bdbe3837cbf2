//! The server daemon: one per state directory. `run` holds the global lock, takes the
//! server lease (epoch + 1), recovers, starts the supervision tree (`tree.rs`) and serves the
//! socket until it is asked to stop (client, signal, idle, lost lease, a dead store, or a
//! tree that kept failing), then stops the tree in reverse order so in-flight commands finish
//! and commit first, and releases the lease last.
//!
//! The folders follow the tree: `clients/`, `runners/`, `resolvers/` hold their subtrees'
//! children; `ops/` the operations behind the front door; `views/` view building and feeds;
//! the root files are what everything shares (`shared`, `config`, `answers`, `spawn`, …).
//!
//! Architecture Invariant: the server never loads or runs workflow code.

pub mod answers;
pub mod blocking;
pub mod channels;
pub mod clients;
pub mod config;
pub mod coordinators;
pub mod deadlines;
pub mod empty_look;
pub mod frames;
pub mod logging;
pub mod memory;
pub mod ops;
pub mod ownership;
pub mod path_watch;
pub mod quiet_spell;
pub mod reclaimer;
pub mod resolvers;
pub mod retention;
pub mod runners;
pub mod scheduler;
pub mod shared;
pub mod socket;
pub mod spawn;
pub mod store_owner;
pub mod tree;
pub mod views;

use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ractor::Actor;
use supervisors::Supervisor;

pub use config::{READY_FD_ENV, ServerConfig};
pub use shared::StopReason;

use crate::store::server_lease::{self, ServerLease};
use crate::store::{Store, SystemClock};

/// How long the whole tree may take to stop before the process exits anyway.
pub const SHUTDOWN_TIMEOUT_MS: u64 = 30_000;

/// Run the server in this process until it stops; returns why it stopped.
pub async fn run(config: ServerConfig) -> anyhow::Result<StopReason> {
    let paths = &config.paths;
    paths.check_socket_path()?;
    paths.create_dirs()?;
    let _lock = ownership::take_lock(paths)?;
    logging::install(&paths.logs_dir.join("server.log"), config.json_logs)?;
    let mut signals = StopSignals::install()?;
    supervisors::process::set_child_subreaper().context("could not become a child subreaper")?;
    if let Err(error) = spawn::adopt_child_limits() {
        // Children still get their limits, set between fork and exec: slower, not wrong.
        tracing::warn!(%error, "could not take on the resource limits of children; starting them by fork");
    }

    let database = paths.database.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&database, Arc::new(SystemClock))).await??;
    let store = Arc::new(store);
    let server_id = new_server_id()?;
    let owner = server_id.clone();
    let lease: ServerLease = blocking::write(&store, move |tx| server_lease::take_server_lease(tx, &owner)).await?;
    tracing::info!(epoch = lease.epoch, pid = std::process::id(), "server starting");

    recover(&store, &server_id).await?;

    let held = ownership::HeldFiles::snapshot(paths)?;
    let parts = tree_parts(&config, Arc::clone(&store), &lease, server_id, held);
    let shared = Arc::clone(&parts.shared);
    // Startup recovery is done: the tree starts, the retention sweep among its children may
    // look now (recovery step 12).
    let (root, mut root_done) = Actor::spawn(None, Supervisor, tree::root_spec(&parts))
        .await
        .context("the supervision tree did not start")?;
    shared.set_root(root.clone());
    announce_ready(lease.epoch);
    tracing::info!(epoch = lease.epoch, "server ready");

    let reason = tokio::select! {
        reason = shared.stopped() => reason,
        () = signals.received() => StopReason::Signal,
        // The root supervisor died on its own (a child kept failing past the root's restart
        // intensity): its task ended. Awaited, not polled, so an idle server sleeps.
        _ = &mut root_done => {
            tracing::error!("the root supervisor stopped on its own");
            StopReason::TreeFailed
        }
    };
    shared.request_stop(reason);
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
    if reason != StopReason::LeaseLost {
        release_lease(&store, lease).await;
    }
    tracing::info!(reason = reason.as_str(), "server stopped");
    Ok(reason)
}

/// The handles the tree's children share, built once per server.
fn tree_parts(
    config: &ServerConfig,
    store: Arc<Store>,
    lease: &ServerLease,
    server_id: String,
    held: ownership::HeldFiles,
) -> tree::TreeParts {
    let shared = shared::Shared::new(store, lease.epoch, server_id);
    let runners = runners::registry::Runners::new(config.runner.clone());
    let registry = resolvers::registry::ResolverRegistry::new(
        config.resolver.clone(),
        config.runner.clone(),
        lease.epoch,
        config.resolve_timeout,
    );
    let resolvers = resolvers::handle::Resolvers::new(registry, Arc::clone(&shared));
    let views = views::cache::Views::new(Arc::clone(&shared.store));
    let channel_settings = channels::ChannelSettings::from_env(config.paths.logs_dir.clone());
    let channels = channels::Channels::new(Arc::clone(&shared), channel_settings);
    let ops = ops::context::OpsContext::new(
        Arc::clone(&shared),
        Arc::clone(&runners),
        Arc::clone(&resolvers),
        Arc::clone(&views),
        Arc::clone(&channels),
    );
    let feeds = views::feeds::Feeds::new(Arc::clone(&shared), views);
    tree::TreeParts {
        shared,
        channels,
        runners,
        resolvers,
        ops,
        feeds,
        lease: lease.clone(),
        socket: config.paths.socket.clone(),
        idle_exit: config.idle_exit,
        retention_days: config.retention_days,
        reclaim_interval: config.reclaim_interval,
        connection_deadlines: config.connection_deadlines,
        held,
    }
}

/// The lease is released last, after every child that could write under it has stopped.
async fn release_lease(store: &Arc<Store>, lease: ServerLease) {
    if let Err(err) = blocking::write(store, move |tx| server_lease::release_server_lease(tx, &lease)).await {
        tracing::warn!(error = %err, "server lease was not released");
    }
}

/// Startup recovery before any runner is admitted: stop processes an older server left
/// behind (only when their start identity still matches), then settle their runs.
async fn recover(store: &Arc<Store>, server_id: &str) -> anyhow::Result<()> {
    let stale = blocking::read(store, crate::store::recovery::stale_workers).await?;
    runners::settle::stop_stale_runners(&stale).await;
    // Registered headless Pi groups of those runners: no runner of this server lives yet.
    runners::settle::reap_registered(store, None).await;
    let owner = server_id.to_string();
    let report = blocking::write(store, move |tx| crate::store::recovery::recover(tx, &owner, &stale)).await?;
    tracing::info!(?report, "startup recovery done");
    Ok(())
}

/// SIGTERM and SIGINT handlers, installed before the server announces it is ready, so a
/// signal sent right after `server start` returns still stops it gracefully.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = signal(SignalKind::terminate()).context("could not handle SIGTERM")?;
        let interrupt = signal(SignalKind::interrupt()).context("could not handle SIGINT")?;
        Ok(Self { terminate, interrupt })
    }

    async fn received(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

fn new_server_id() -> anyhow::Result<String> {
    crate::digest::random_hex(16).ok_or_else(|| anyhow::anyhow!("no randomness for the server id"))
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
