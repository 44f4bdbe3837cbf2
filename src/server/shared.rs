//! What every part of the server shares: the store, the epoch, the stop signal and the
//! wake-ups, and a way to find a subtree of the running supervision tree.
//!
//! Architecture Invariant: this file imports no sibling. A part that needs more than this
//! (the runner registry, the resolver, the view cache) gets that part's own handle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ractor::ActorRef;
use ractor::rpc::CallResult;
use supervisors::SupervisorMsg;
use tokio::sync::watch;

use crate::store::Store;

/// How long a lookup of a subtree may wait for each supervisor on the path.
const TREE_LOOKUP_TIMEOUT_MS: u64 = 2_000;

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
    /// The store's writer thread died: nothing durable can happen any more.
    StoreFailed,
    /// A subtree kept failing past the root's restart intensity.
    TreeFailed,
    /// The state directory, its lock, database or socket was removed or replaced: this
    /// server no longer owns what a new server would find.
    StateRemoved,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Signal => "signal",
            Self::Idle => "idle",
            Self::LeaseLost => "leaseLost",
            Self::StoreFailed => "storeFailed",
            Self::TreeFailed => "treeFailed",
            Self::StateRemoved => "stateRemoved",
        }
    }
}

/// Start `spec` as a dynamic child of `supervisor`; why it did not start, otherwise (the
/// supervisor's refusal, or its silence).
pub async fn start_child(supervisor: &ActorRef<SupervisorMsg>, spec: supervisors::ChildSpec) -> Result<(), String> {
    match supervisor
        .call(|reply| SupervisorMsg::StartChild(spec, reply), None)
        .await
    {
        Ok(CallResult::Success(Ok(()))) => Ok(()),
        Ok(CallResult::Success(Err(err))) => Err(err.to_string()),
        Ok(_) => Err("the supervisor did not answer".to_string()),
        Err(err) => Err(err.to_string()),
    }
}

/// Lock `mutex`, taking over a poisoned one: every value the server guards this way stays
/// consistent at each step (a panicking holder cannot leave it half-changed).
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One open client connection, counted while this value lives.
#[derive(Debug)]
pub struct ConnectionSlot(Arc<AtomicUsize>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Shared {
    pub store: Arc<Store>,
    /// The server epoch (the server lease's generation).
    pub epoch: i64,
    /// This server instance's claim owner ID (never shown in status).
    pub server_id: String,
    pub started: Instant,
    pub package_version: &'static str,
    /// Open client connections (the idle rule needs none), counted by their slots.
    connections: Arc<AtomicUsize>,
    /// The root supervisor, set once the tree runs.
    root: OnceLock<ActorRef<SupervisorMsg>>,
    /// Turns true when `root` is set: a child that looks the tree up while the tree is still
    /// starting (the channels loader) waits for it instead of finding nothing.
    root_set: watch::Sender<bool>,
    /// The socket the listener bound: its path and (device, inode), for status to check.
    socket: std::sync::Mutex<Option<(std::path::PathBuf, (u64, u64))>>,
    /// Wakes the scheduler when capacity frees up or work is queued.
    scheduler_wakes: Arc<tokio::sync::Notify>,
    /// Asks the retention sweep to look (the last runner exited).
    sweep_wakes: Arc<tokio::sync::Notify>,
    stop: watch::Sender<Option<StopReason>>,
}

impl Shared {
    pub fn new(store: Arc<Store>, epoch: i64, server_id: String) -> Arc<Self> {
        let (stop, _) = watch::channel(None);
        Arc::new(Self {
            store,
            epoch,
            server_id,
            started: Instant::now(),
            package_version: env!("CARGO_PKG_VERSION"),
            connections: Arc::new(AtomicUsize::new(0)),
            root: OnceLock::new(),
            root_set: watch::channel(false).0,
            socket: std::sync::Mutex::new(None),
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

    /// Take a connection slot if fewer than `limit` are taken. The slot is given back when
    /// it is dropped, on every path a connection can end by (even one that never started).
    pub fn open_connection(&self, limit: usize) -> Option<ConnectionSlot> {
        self.connections
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < limit).then_some(open + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(Arc::clone(&self.connections)))
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The listener bound `path`, a file with this (device, inode).
    pub fn set_socket(&self, path: std::path::PathBuf, identity: (u64, u64)) {
        *lock(&self.socket) = Some((path, identity));
    }

    /// The socket the listener bound, if it did.
    pub fn socket(&self) -> Option<(std::path::PathBuf, (u64, u64))> {
        lock(&self.socket).clone()
    }

    /// Remember the running root supervisor (once, when the tree started).
    pub fn set_root(&self, root: ActorRef<SupervisorMsg>) {
        let _ = self.root.set(root);
        self.root_set.send_replace(true);
    }

    pub fn root(&self) -> Option<&ActorRef<SupervisorMsg>> {
        self.root.get()
    }

    /// The running supervisor at `path` below the root (e.g. `["clients", "feeds"]`), if the
    /// tree runs and every supervisor on the way answers.
    pub async fn supervisor(&self, path: &[&str]) -> Option<ActorRef<SupervisorMsg>> {
        if self.root().is_none() {
            let mut set = self.root_set.subscribe();
            let wait = Duration::from_millis(TREE_LOOKUP_TIMEOUT_MS);
            let _ = tokio::time::timeout(wait, set.wait_for(|set| *set)).await;
        }
        let mut current = self.root()?.clone();
        for id in path {
            let timeout = Some(Duration::from_millis(TREE_LOOKUP_TIMEOUT_MS));
            let cell = match current
                .call(|reply| SupervisorMsg::Child((*id).to_string(), reply), timeout)
                .await
            {
                Ok(CallResult::Success(Some(cell))) => cell,
                _ => return None,
            };
            current = cell.into();
        }
        Some(current)
    }
}
