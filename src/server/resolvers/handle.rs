//! The `resolvers` subtree's handle: `run.start` asks it to resolve a workflow, and it hands
//! the request to the running resolver child (waiting briefly while one restarts).
//!
//! Architecture Invariant: the handle only names the resolver actor; the actor owns the
//! Node process and its channel.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use serde_json::{Map, Value, json};
use supervisors::DetailsCell;

use crate::server::config::{Program, RunnerSettings};

/// How long one resolution may take (loading a large workflow tree included).
pub const RESOLVE_TIMEOUT_MS: u64 = 60_000;
/// How long a request waits for a resolver child that is (re)starting.
const RESOLVER_WAIT_MS: u64 = 5_000;
const RESOLVER_POLL_MS: u64 = 20;

/// Why a resolution gave no answer.
#[derive(Debug)]
pub enum ResolveFailure {
    /// The workflow itself: not found, an invalid definition, rejected input.
    Workflow { code: String, message: String },
    /// The resolver could not run (no Node, a crash, a timeout).
    Unavailable(String),
}

pub type Resolution = Result<Map<String, Value>, ResolveFailure>;

pub enum ResolverMsg {
    /// Resolve one request (`target`, `project`, optional `inputJson`).
    Resolve(Value, RpcReplyPort<Resolution>),
    /// Start the Node process ahead of the first request.
    Prewarm,
}

pub struct Resolvers {
    /// The served resolver program; `None` when the package was not found at start.
    pub program: Option<Program>,
    /// Where children's output is captured (shared with runners).
    pub settings: RunnerSettings,
    pub server_epoch: i64,
    /// Where the resolver child shows its process in the tree.
    pub details: DetailsCell,
    current: Mutex<Option<ActorRef<ResolverMsg>>>,
    /// Resolver processes started by this server (names their captures).
    started: AtomicU64,
    /// Resolver processes in a row that died soon after they started: the next start waits
    /// longer, so a broken installation cannot restart in a tight loop.
    quick_deaths: AtomicU32,
}

impl Resolvers {
    pub fn new(program: Option<Program>, settings: RunnerSettings, server_epoch: i64) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            program,
            settings,
            server_epoch,
            details: DetailsCell::default(),
            current: Mutex::new(None),
            started: AtomicU64::new(0),
            quick_deaths: AtomicU32::new(0),
        })
    }

    /// Resolve `target` for `project` with the raw `input_json` (if any).
    pub async fn resolve(&self, target: &str, project: &str, input_json: Option<&str>) -> Resolution {
        if self.program.is_none() {
            return Err(ResolveFailure::Unavailable(
                "the pi-workflows package or node was not found when the server started (see the server log)"
                    .to_string(),
            ));
        }
        let mut request = json!({"target": target, "project": project});
        if let Some(input) = input_json {
            request["inputJson"] = Value::String(input.to_string());
        }
        let Some(resolver) = self.wait_for_resolver().await else {
            return Err(ResolveFailure::Unavailable(
                "no resolver is running (the server is stopping?)".to_string(),
            ));
        };
        // Two tries at most inside the resolver, each bounded.
        let limit = Duration::from_millis(2 * RESOLVE_TIMEOUT_MS + RESOLVER_WAIT_MS);
        match resolver
            .call(|reply| ResolverMsg::Resolve(request, reply), Some(limit))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(resolution)) => resolution,
            Ok(_) => Err(ResolveFailure::Unavailable(
                "the resolver did not answer in time".to_string(),
            )),
            Err(_) => Err(ResolveFailure::Unavailable("the resolver stopped; retry".to_string())),
        }
    }

    async fn wait_for_resolver(&self) -> Option<ActorRef<ResolverMsg>> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(RESOLVER_WAIT_MS);
        loop {
            if let Some(resolver) = lock(&self.current).clone() {
                return Some(resolver);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(RESOLVER_POLL_MS)).await;
        }
    }

    pub fn set_current(&self, resolver: Option<ActorRef<ResolverMsg>>) {
        *lock(&self.current) = resolver;
    }

    /// Forget `resolver` unless a newer one replaced it already.
    pub fn clear_current(&self, resolver: &ActorRef<ResolverMsg>) {
        let mut current = lock(&self.current);
        if current
            .as_ref()
            .is_some_and(|known| known.get_id() == resolver.get_id())
        {
            *current = None;
        }
    }

    pub fn next_process_number(&self) -> u64 {
        self.started.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A resolver process died: `quickly` when it had lived only briefly.
    pub fn note_death(&self, quickly: bool) {
        if quickly {
            self.quick_deaths.fetch_add(1, Ordering::SeqCst);
        } else {
            self.quick_deaths.store(0, Ordering::SeqCst);
        }
    }

    pub fn note_healthy(&self) {
        self.quick_deaths.store(0, Ordering::SeqCst);
    }

    pub fn quick_deaths(&self) -> u32 {
        self.quick_deaths.load(Ordering::SeqCst)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
