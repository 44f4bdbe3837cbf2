//! What every server actor shares: the store, the epoch, and the shutdown signal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use ractor::ActorRef;
use supervisors::SupervisorMsg;
use tokio::sync::watch;

use super::runner::RunnerMsg;
use crate::store::Store;

/// Why the server is stopping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `server.stop` from a client.
    Requested,
    /// SIGTERM or SIGINT.
    Signal,
    /// Nothing to do for the idle period.
    Idle,
    /// The server lease was taken by another server.
    LeaseLost,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Signal => "signal",
            Self::Idle => "idle",
            Self::LeaseLost => "leaseLost",
        }
    }
}

/// How runners are launched and how many may run at once.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// The runner program and its arguments (`PI_WORKFLOWS_RUNNER`, else the package's
    /// Node runner); without one, queued runs wait.
    pub program: Option<(std::path::PathBuf, Vec<std::ffi::OsString>)>,
    /// Execution capacity (`PI_WORKFLOWS_MAX_WORKERS`, default 4), pending launches included.
    pub max_workers: usize,
    /// How long a runner has to send `runner.ready`.
    pub ready_timeout: std::time::Duration,
    /// Where runner stdout/stderr are captured (user-only).
    pub logs_dir: std::path::PathBuf,
    /// The bundle cache runners share with the CLI's resolver (`PI_WORKFLOWS_CACHE_DIR`).
    pub cache_dir: std::path::PathBuf,
    /// Runner processes kept started ahead of need (`PI_WORKFLOWS_WARM_RUNNERS`).
    pub warm_runners: usize,
    /// The served source resolver (`resolver-main.js --serve`), when the package is found.
    pub resolver: Option<(std::path::PathBuf, Vec<std::ffi::OsString>)>,
}

pub struct ServerContext {
    pub store: Arc<Store>,
    pub epoch: i64,
    /// This server instance's claim owner ID (never shown in status).
    pub server_id: String,
    pub runner_settings: RunnerSettings,
    pub started: Instant,
    pub package_version: &'static str,
    /// Open client connections (the idle rule needs none).
    pub connections: AtomicUsize,
    /// Live runner children (maintained by the runner supervisor once runners exist).
    pub runners: AtomicUsize,
    /// The root supervisor, for `server status --tree`.
    pub root: OnceLock<ActorRef<SupervisorMsg>>,
    /// Wakes the scheduler when capacity frees up or work is queued.
    scheduler_wakes: Arc<tokio::sync::Notify>,
    /// Asks the retention sweep to look (the last runner exited).
    sweep_wakes: Arc<tokio::sync::Notify>,
    /// Runner processes started ahead of need.
    pub runner_pool: super::runner_pool::RunnerPool,
    /// The warm source resolver of `run.start`.
    pub resolvers: super::resolver::ResolverPool,
    /// Parsed definitions for run views.
    pub views: super::views::ViewCache,
    /// Live run and run-list feeds of subscribed clients.
    pub feeds: super::feeds::Feeds,
    /// Rate limits of `interaction.update`.
    pub update_limiter: super::submissions::UpdateLimiter,
    /// The live runner actor of each run that has one.
    runner_registry: Mutex<HashMap<String, ActorRef<RunnerMsg>>>,
    stop: watch::Sender<Option<StopReason>>,
}

impl ServerContext {
    pub fn new(store: Arc<Store>, epoch: i64, server_id: String, runner_settings: RunnerSettings) -> Arc<Self> {
        let (stop, _) = watch::channel(None);
        Arc::new(Self {
            store,
            epoch,
            server_id,
            runner_settings,
            started: Instant::now(),
            package_version: env!("CARGO_PKG_VERSION"),
            connections: AtomicUsize::new(0),
            runners: AtomicUsize::new(0),
            root: OnceLock::new(),
            runner_registry: Mutex::new(HashMap::new()),
            runner_pool: Default::default(),
            resolvers: Default::default(),
            views: Default::default(),
            feeds: Default::default(),
            update_limiter: Default::default(),
            scheduler_wakes: Arc::new(tokio::sync::Notify::new()),
            sweep_wakes: Arc::new(tokio::sync::Notify::new()),
            stop,
        })
    }

    /// Ask the server to stop; the first reason wins.
    pub fn request_stop(&self, reason: StopReason) {
        self.stop.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
    }

    pub fn stop_requested(&self) -> Option<StopReason> {
        *self.stop.borrow()
    }

    /// Resolves when a stop has been requested.
    pub async fn stopped(&self) -> StopReason {
        let mut receiver = self.stop.subscribe();
        loop {
            if let Some(reason) = *receiver.borrow_and_update() {
                return reason;
            }
            if receiver.changed().await.is_err() {
                return StopReason::Requested;
            }
        }
    }

    /// Ask the scheduler to look for admissible work now.
    pub fn wake_scheduler(&self) {
        self.scheduler_wakes.notify_one();
    }

    pub fn scheduler_wakes(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.scheduler_wakes)
    }

    /// Ask the retention sweep to run if it is due (it checks idleness itself).
    pub fn request_sweep(&self) {
        self.sweep_wakes.notify_one();
    }

    pub fn sweep_wakes(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.sweep_wakes)
    }

    pub fn register_runner(&self, run_id: &str, runner: ActorRef<RunnerMsg>) {
        self.registry().insert(run_id.to_string(), runner);
    }

    /// Forget `run_id`'s runner, unless a newer runner already replaced it.
    pub fn unregister_runner(&self, run_id: &str, runner: &ActorRef<RunnerMsg>) {
        let mut registry = self.registry();
        if registry
            .get(run_id)
            .is_some_and(|current| current.get_id() == runner.get_id())
        {
            registry.remove(run_id);
        }
    }

    pub fn runner_for(&self, run_id: &str) -> Option<ActorRef<RunnerMsg>> {
        self.registry().get(run_id).cloned()
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActorRef<RunnerMsg>>> {
        self.runner_registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::SeqCst);
    }

    pub fn connection_closed(&self) {
        self.connections.fetch_sub(1, Ordering::SeqCst);
    }
}
