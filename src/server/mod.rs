//! The server daemon: one per state directory. `run` holds the global lock, takes the
//! server lease (epoch + 1), starts the supervision tree and serves the socket until it is
//! asked to stop (client, signal, idle, or lost lease), then stops the tree in reverse order
//! so in-flight commands finish and commit first.
//!
//! Architecture Invariant: the server never loads or runs workflow code.

pub mod blocking;
pub mod connection;
pub mod context;
pub mod feeds;
pub mod follow_ups;
pub mod frames;
pub mod handlers;
pub mod listener;
pub mod logging;
pub mod ownership;
pub mod resolver;
pub mod retention_sweep;
pub mod run_commands;
pub mod runner;
pub mod runner_apply;
pub mod runner_channel;
pub mod runner_messages;
pub mod runner_pool;
pub mod scheduler;
pub mod settings;
pub mod state_ops;
pub mod status;
pub mod submissions;
pub mod subscriptions;
pub mod tree;
pub mod views;

use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ractor::Actor;
use supervisors::Supervisor;

pub use context::{ServerContext, StopReason};
use ownership::ServerPaths;

use crate::store::server_lease::{self, ServerLease};
use crate::store::{Store, SystemClock};

/// How long the whole tree may take to stop before the process exits anyway.
pub const SHUTDOWN_TIMEOUT_MS: u64 = 30_000;
/// Environment variable naming the file descriptor on which `server start` waits for
/// "ready"; set only by `server start`.
pub const READY_FD_ENV: &str = "PI_WORKFLOWS_READY_FD";
pub const IDLE_EXIT_ENV: &str = "PI_WORKFLOWS_IDLE_EXIT_MS";

pub const RUNNER_ENV: &str = "PI_WORKFLOWS_RUNNER";
pub const MAX_WORKERS_ENV: &str = "PI_WORKFLOWS_MAX_WORKERS";
pub const RUNNER_READY_ENV: &str = "PI_WORKFLOWS_RUNNER_READY_MS";
pub const MAX_WORKERS_DEFAULT: usize = 4;
/// A generous bound on capacity: each runner is an OS process.
pub const MAX_WORKERS_LIMIT: usize = 256;
pub const RUNNER_READY_MS_DEFAULT: u64 = 10_000;
pub const WARM_RUNNERS_ENV: &str = "PI_WORKFLOWS_WARM_RUNNERS";

pub struct ServerConfig {
    pub paths: ServerPaths,
    pub idle_exit: Duration,
    pub json_logs: bool,
    pub runner: context::RunnerSettings,
    /// Days finished run trees are kept (`PI_WORKFLOWS_RETENTION_DAYS`); `None`: no sweep.
    pub retention_days: Option<i64>,
}

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .with_context(|| format!("{name} must be a non-negative integer, not {text:?}")),
        Err(_) => Ok(default),
    }
}

impl ServerConfig {
    pub fn from_env(paths: ServerPaths) -> anyhow::Result<Self> {
        let idle_exit_ms = env_number(IDLE_EXIT_ENV, scheduler::IDLE_EXIT_MS_DEFAULT)?;
        let json_logs = std::env::var("PI_WORKFLOWS_LOG_JSON").is_ok_and(|value| value == "1");
        let max_workers = env_number(MAX_WORKERS_ENV, MAX_WORKERS_DEFAULT as u64)? as usize;
        if !(1..=MAX_WORKERS_LIMIT).contains(&max_workers) {
            anyhow::bail!("{MAX_WORKERS_ENV} must be between 1 and {MAX_WORKERS_LIMIT}, not {max_workers}");
        }
        // One warm runner by default with the Node runner; a custom runner program (tests'
        // scripted runner) starts on demand unless asked otherwise.
        let custom_runner = std::env::var_os(RUNNER_ENV).is_some_and(|value| !value.is_empty());
        let warm_runners = env_number(WARM_RUNNERS_ENV, u64::from(!custom_runner))? as usize;
        if warm_runners > runner_pool::WARM_RUNNERS_MAX {
            anyhow::bail!(
                "{WARM_RUNNERS_ENV} must be between 0 and {}, not {warm_runners}",
                runner_pool::WARM_RUNNERS_MAX
            );
        }
        let resolver = crate::package::node_program("resolver-main.js")
            .ok()
            .map(|program| (program.node.clone(), [program.args(), vec!["--serve".into()]].concat()));
        let runner = context::RunnerSettings {
            resolver,
            warm_runners,
            program: runner_program(),
            max_workers,
            ready_timeout: Duration::from_millis(env_number(RUNNER_READY_ENV, RUNNER_READY_MS_DEFAULT)?),
            logs_dir: paths.logs_dir.join("runners"),
            cache_dir: paths.cache_dir.clone(),
        };
        Ok(Self {
            paths,
            idle_exit: Duration::from_millis(idle_exit_ms),
            json_logs,
            runner,
            retention_days: retention_sweep::retention_days()?,
        })
    }
}

/// `PI_WORKFLOWS_RUNNER` (a program taking no arguments, e.g. the scripted test runner),
/// else the package's Node runner. Without either, queued runs wait (logged at start).
fn runner_program() -> Option<(std::path::PathBuf, Vec<std::ffi::OsString>)> {
    if let Some(program) = std::env::var_os(RUNNER_ENV).filter(|value| !value.is_empty()) {
        return Some((program.into(), Vec::new()));
    }
    match crate::package::node_program("runner-main.js") {
        Ok(program) => Some((program.node.clone(), program.args())),
        Err(err) => {
            tracing::warn!(error = %err, "no runner program: queued runs wait");
            None
        }
    }
}

/// Run the server in this process until it stops; returns why it stopped.
pub async fn run(config: ServerConfig) -> anyhow::Result<StopReason> {
    let paths = &config.paths;
    paths.check_socket_path()?;
    paths.create_dirs()?;
    let _lock = ownership::take_lock(paths)?;
    logging::install(&paths.logs_dir.join("server.log"), config.json_logs)?;
    let mut signals = StopSignals::install()?;
    supervisors::process::set_child_subreaper().context("could not become a child subreaper")?;

    let database = paths.database.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&database, Arc::new(SystemClock))).await??;
    let store = Arc::new(store);
    let server_id = new_server_id()?;
    let owner = server_id.clone();
    let lease: ServerLease = blocking::write(&store, move |tx| server_lease::take_server_lease(tx, &owner)).await?;
    tracing::info!(epoch = lease.epoch, pid = std::process::id(), "server starting");

    recover(&store, &server_id).await?;

    let ctx = ServerContext::new(Arc::clone(&store), lease.epoch, server_id, config.runner.clone());
    let spec = tree::root_spec(&ctx, &lease, paths.socket.clone(), config.idle_exit);
    let (root, root_done) = Actor::spawn(None, Supervisor, spec)
        .await
        .context("the supervision tree did not start")?;
    let _ = ctx.root.set(root.clone());
    announce_ready(lease.epoch);
    tracing::info!(epoch = lease.epoch, "server ready");
    runner_pool::refill_soon(&ctx, Duration::ZERO);
    let warming = Arc::clone(&ctx);
    tokio::spawn(async move { warming.resolvers.prewarm(&warming).await });
    // Startup recovery is done: the retention sweep may look now (recovery step 12).
    if let Some(days) = config.retention_days {
        retention_sweep::spawn(Arc::clone(&ctx), days);
    }

    let reason = tokio::select! {
        reason = ctx.stopped() => reason,
        () = signals.received() => StopReason::Signal,
        _ = wait_root(&root) => StopReason::LeaseLost,
    };
    ctx.request_stop(reason);
    tracing::info!(reason = reason.as_str(), "server stopping");
    ctx.runner_pool.shutdown().await;
    ctx.resolvers.shutdown().await;
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

/// Startup recovery before any runner is admitted: stop processes an older server left
/// behind (only when their start identity still matches), then settle their runs.
async fn recover(store: &Arc<Store>, server_id: &str) -> anyhow::Result<()> {
    use supervisors::process::{ProcessSignal, StartIdentity, signal_group_if_identity_matches};
    let stale = blocking::read(store, crate::store::recovery::stale_workers).await?;
    for worker in &stale {
        let Some(identity) = worker
            .process_start_identity
            .as_deref()
            .and_then(|text| text.parse::<StartIdentity>().ok())
        else {
            continue;
        };
        match signal_group_if_identity_matches(&identity, ProcessSignal::Kill) {
            Ok(outcome) => tracing::info!(pid = identity.pid, ?outcome, "stale runner from an older server"),
            Err(err) => tracing::warn!(pid = identity.pid, error = %err, "could not check a stale runner"),
        }
    }
    // Registered headless Pi groups of those runners: no runner of this server lives yet.
    runner::reap_registered(store, None).await;
    let owner = server_id.to_string();
    let report = blocking::write(store, move |tx| crate::store::recovery::recover(tx, &owner, &stale)).await?;
    tracing::info!(?report, "startup recovery done");
    Ok(())
}

/// Resolves if the root supervisor dies on its own (it escalated past its intensity).
async fn wait_root(root: &ractor::ActorRef<supervisors::SupervisorMsg>) {
    while root.get_status() <= ractor::ActorStatus::Running {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::error!("the root supervisor stopped on its own");
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
