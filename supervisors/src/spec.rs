//! What a supervisor is told: strategies, restart types, intensity, shutdown, child specs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, SpawnErr};
use serde::{Deserialize, Serialize};

/// How the other children react when one child must be restarted (OTP strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Restart only the child that exited.
    OneForOne,
    /// Stop all other children (reverse start order), then restart all (start order).
    OneForAll,
    /// Stop the children started after the exited one (reverse order), then restart it and
    /// them (start order).
    RestForOne,
}

/// When a child that exited is restarted (OTP restart types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// Always restarted.
    Permanent,
    /// Restarted only after an abnormal exit (a failure).
    Transient,
    /// Never restarted; removed from the supervisor when it exits.
    Temporary,
}

/// How a child is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Ask it to stop, wait at most this long, then kill it.
    Timeout(Duration),
    /// Kill it at once (its cleanup does not run).
    BrutalKill,
}

/// The longest a graceful shutdown may wait before the kill.
pub const SHUTDOWN_TIMEOUT_MS_MAX: u64 = 120_000;
/// The default graceful shutdown wait.
pub const SHUTDOWN_TIMEOUT_MS_DEFAULT: u64 = 5_000;

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OneForOne => "one_for_one",
            Self::OneForAll => "one_for_all",
            Self::RestForOne => "rest_for_one",
        }
    }
}

impl Restart {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Permanent => "permanent",
            Self::Transient => "transient",
            Self::Temporary => "temporary",
        }
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::Timeout(Duration::from_millis(SHUTDOWN_TIMEOUT_MS_DEFAULT))
    }
}

/// Restart intensity: more than `max_restarts` restarts within `period` makes the
/// supervisor stop all its children and fail, escalating to its own parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intensity {
    pub max_restarts: u32,
    pub period: Duration,
}

/// Restarts remembered per supervisor at most (bounds the intensity window).
pub const INTENSITY_RESTARTS_MAX: u32 = 1_000;

impl Default for Intensity {
    /// OTP's default: at most 1 restart in 5 seconds.
    fn default() -> Self {
        Self {
            max_restarts: 1,
            period: Duration::from_secs(5),
        }
    }
}

/// How long a supervisor waits for an actor owning a process with this grace to stop: the
/// SIGTERM grace, the SIGKILL wait and a margin, so the owner's cleanup (not a brutal kill)
/// always ends the process group.
pub fn process_shutdown_wait(grace: Duration) -> Duration {
    const MARGIN_MS: u64 = 1_000;
    grace + Duration::from_millis(crate::process::KILL_WAIT_MS_MAX + MARGIN_MS)
}

/// Whether a child is itself a supervisor (its snapshot nests) or a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildKind {
    Worker,
    Supervisor,
}

pub type StartFuture = Pin<Box<dyn Future<Output = Result<ActorCell, SpawnErr>> + Send>>;
/// Starts one instance of a child linked to the given supervisor cell.
pub type StartFn = Arc<dyn Fn(ActorCell) -> StartFuture + Send + Sync>;

/// One child of a supervisor.
#[derive(Clone)]
pub struct ChildSpec {
    /// Unique among its siblings; shown in the tree.
    pub id: String,
    pub restart: Restart,
    pub shutdown: Shutdown,
    pub kind: ChildKind,
    /// A short public label for the tree (e.g. "generation 3, epoch 2"); never private data.
    pub label: Option<String>,
    /// Live facts the child keeps current (its processes, generation, epoch).
    pub details: Option<crate::DetailsCell>,
    pub start: StartFn,
}

impl std::fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildSpec")
            .field("id", &self.id)
            .field("restart", &self.restart)
            .field("shutdown", &self.shutdown)
            .field("kind", &self.kind)
            .field("label", &self.label)
            .field("details", &self.details.as_ref().map(crate::DetailsCell::get))
            .finish()
    }
}

impl ChildSpec {
    /// A child started from a factory: each (re)start builds a fresh handler and arguments.
    pub fn worker<A, F>(id: impl Into<String>, restart: Restart, factory: F) -> Self
    where
        A: Actor,
        F: Fn() -> (A, A::Arguments) + Send + Sync + 'static,
    {
        let factory = Arc::new(factory);
        let start: StartFn = Arc::new(move |supervisor: ActorCell| {
            let (handler, arguments) = factory();
            Box::pin(async move {
                let (actor, _) = supervisor.spawn_linked(None, handler, arguments).await?;
                Ok(actor.get_cell())
            })
        });
        Self {
            id: id.into(),
            restart,
            shutdown: Shutdown::default(),
            kind: ChildKind::Worker,
            label: None,
            details: None,
            start,
        }
    }

    /// A nested supervisor child (restarted as a whole subtree).
    pub fn supervisor(
        id: impl Into<String>,
        restart: Restart,
        spec_factory: impl Fn() -> crate::SupervisorSpec + Send + Sync + 'static,
    ) -> Self {
        let mut child = Self::worker(id, restart, move || (crate::Supervisor, spec_factory()));
        child.kind = ChildKind::Supervisor;
        child.shutdown = Shutdown::Timeout(Duration::from_millis(SHUTDOWN_TIMEOUT_MS_MAX));
        child
    }

    pub fn with_shutdown(mut self, shutdown: Shutdown) -> Self {
        if let Shutdown::Timeout(wait) = shutdown {
            assert!(
                wait.as_millis() <= u128::from(SHUTDOWN_TIMEOUT_MS_MAX),
                "shutdown wait above the maximum"
            );
        }
        self.shutdown = shutdown;
        self
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Show the details the child keeps in `cell` in the tree.
    pub fn with_details(mut self, cell: crate::DetailsCell) -> Self {
        self.details = Some(cell);
        self
    }
}
