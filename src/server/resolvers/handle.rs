//! The `resolvers` subtree's handle: `run.start` asks it to resolve a workflow, and
//! `workflow.list` to list the discoverable workflows (loading them for their titles). A request
//! goes to the warm resolver, queueing behind it for up to `WARM_QUEUE_WAIT_MS`; while it
//! stays busy longer (a large or hanging workflow), to a one-shot `resolver-N` child started
//! for that request, at most `EXTRA_RESOLVERS_MAX` at once. So one workflow that never
//! finishes loading cannot stall every other start: it costs one resolver for at most the
//! resolve timeout, and other starts wait at most `WARM_QUEUE_WAIT_MS` behind it.
//!
//! An answer marked reusable is kept (`reuse.rs`) and given again, without a resolver, while
//! its workflow is unchanged on disk.
//!
//! Architecture Invariant: the handle only names resolver actors; each actor owns its Node
//! process and channel.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::{Map, Value, json};
use supervisors::{ChildSpec, DetailsCell, Restart, SupervisorMsg};
use tokio::sync::Semaphore;

use super::mailbox::{Resolution, ResolveFailure, ResolverJob, ResolverMsg};
use super::registry::{ResolverArgs, ResolverRegistry};
use super::resolver::Resolver;
use super::reuse::{Reuse, ReuseKey};
use crate::server::shared::Shared;

type JsonMap = Map<String, Value>;

/// One-shot resolvers running at once besides the warm one.
pub const EXTRA_RESOLVERS_MAX: usize = 2;
/// How long a request waits for a free resolver before it is refused as busy (so the
/// client's own wait for `run.start` is never the first to run out).
const RESOLVER_QUEUE_WAIT_MS: u64 = 10_000;
/// How long a request queues for the warm resolver alone before a one-shot one may take it:
/// far above a warm resolve of an unchanged workflow (a few ms), far below a Node start-up
/// plus a load under load (a one-shot process costs 80+ ms of CPU).
const WARM_QUEUE_WAIT_MS: u64 = 250;
const _: () = assert!(WARM_QUEUE_WAIT_MS < RESOLVER_QUEUE_WAIT_MS);
/// How long a request waits for the warm resolver while it (re)starts.
const RESOLVER_WAIT_MS: u64 = 5_000;
const RESOLVER_POLL_MS: u64 = 20;
/// The longest a listing may take in its resolver process: a client waits 30 s for an
/// answer (`client::RESPONSE_TIMEOUT_MS`) and the request may first wait up to
/// `RESOLVER_QUEUE_WAIT_MS` for a free resolver. (A shorter resolve timeout also bounds it.)
pub const LIST_TIMEOUT_MS_MAX: u64 = 15_000;
/// The part of a listing's timeout its resolver may spend loading the page's workflows for
/// their titles; the rest is discovery and the answer. Workflows left unloaded are listed
/// as `loadSkipped`, so a slow page still answers before its process would be killed.
const LIST_LOAD_BUDGET_PERCENT: u128 = 70;
/// Where resolver children run, below the root.
const RESOLVERS_PATH: [&str; 1] = ["resolvers"];

pub struct Resolvers {
    pub registry: Arc<ResolverRegistry>,
    shared: Arc<Shared>,
    /// The warm resolver serves one request at a time.
    warm_free: Semaphore,
    extras_free: Semaphore,
    /// Answers given again while their workflow is unchanged (`reuse.rs`).
    reuse: Reuse,
}

impl Resolvers {
    pub fn new(registry: ResolverRegistry, shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(Self {
            registry: Arc::new(registry),
            shared,
            warm_free: Semaphore::new(1),
            extras_free: Semaphore::new(EXTRA_RESOLVERS_MAX),
            reuse: Reuse::default(),
        })
    }

    /// The warm resolver's start arguments.
    pub fn warm_args(&self) -> ResolverArgs {
        ResolverArgs {
            registry: Arc::clone(&self.registry),
            warm: true,
            details: self.registry.details.clone(),
        }
    }

    /// Resolve `target` for `project` with the raw `input_json` (if any): a kept answer
    /// when its workflow is unchanged on disk (`reuse.rs`), else a resolver's.
    pub async fn resolve(&self, target: &str, project: &str, input_json: Option<&str>) -> Resolution {
        let key = ReuseKey::of(target, project, input_json);
        if let Some(answer) = self.reused(key.as_ref()).await {
            return Ok(answer);
        }
        let mut request = json!({"target": target, "project": project});
        if let Some(input) = input_json {
            request["inputJson"] = Value::String(input.to_string());
        }
        let answer = self
            .dispatch(ResolverJob {
                request,
                timeout: self.registry.timeout,
            })
            .await?;
        if let Some(key) = key {
            self.reuse.remember(key, &answer);
        }
        Ok(answer)
    }

    /// The kept answer of `key` if its witness still holds on disk (checked off the async
    /// workers: it reads and hashes the sources).
    async fn reused(&self, key: Option<&ReuseKey>) -> Option<JsonMap> {
        let key = key?;
        let (answer, witness) = self.reuse.candidate(key)?;
        let holds = tokio::task::spawn_blocking(move || witness.holds())
            .await
            .unwrap_or(false);
        if !holds {
            self.reuse.forget(key);
            return None;
        }
        tracing::debug!("reused the resolution of an unchanged workflow");
        Some(answer)
    }

    /// One page of the workflows discoverable for `project` (project ones first, then
    /// global ones, by name), each with its title or why it does not load.
    pub async fn list(&self, project: &str, offset: u64, limit: usize) -> Resolution {
        let timeout = self.registry.timeout.min(Duration::from_millis(LIST_TIMEOUT_MS_MAX));
        let budget_ms = (timeout.as_millis() * LIST_LOAD_BUDGET_PERCENT / 100).max(1) as u64;
        let request = json!({"list": {"project": project, "offset": offset, "limit": limit, "budgetMs": budget_ms}});
        self.dispatch(ResolverJob { request, timeout }).await
    }

    async fn dispatch(&self, job: ResolverJob) -> Resolution {
        if self.registry.program.is_none() {
            return Err(ResolveFailure::Unavailable(
                "the pi-workflows package or node was not found when the server started (see the server log)"
                    .to_string(),
            ));
        }
        // The warm resolver, queueing behind its current request for a while: an unchanged
        // workflow resolves there in a few milliseconds, while a one-shot process costs a
        // Node start-up. Only a longer wait (a slow or hanging load) takes a one-shot one.
        let warm = self.warm_free.acquire();
        tokio::pin!(warm);
        tokio::select! {
            biased;
            Ok(_permit) = &mut warm => return self.resolve_warm(job).await,
            () = tokio::time::sleep(Duration::from_millis(WARM_QUEUE_WAIT_MS)) => {}
        }
        let rest = Duration::from_millis(RESOLVER_QUEUE_WAIT_MS - WARM_QUEUE_WAIT_MS);
        tokio::select! {
            biased;
            Ok(_permit) = &mut warm => self.resolve_warm(job).await,
            Ok(_permit) = self.extras_free.acquire() => self.resolve_once(job).await,
            () = tokio::time::sleep(rest) => Err(ResolveFailure::Busy),
        }
    }

    async fn resolve_warm(&self, job: ResolverJob) -> Resolution {
        let Some(resolver) = self.wait_for_warm().await else {
            return Err(ResolveFailure::Unavailable(
                "no resolver is running (the server is stopping?)".to_string(),
            ));
        };
        self.ask(&resolver, job).await
    }

    /// A one-shot `resolver-N` child under `resolvers`, for one request; it stops after it.
    async fn resolve_once(&self, job: ResolverJob) -> Resolution {
        let unavailable = |why: &str| ResolveFailure::Unavailable(why.to_string());
        let supervisor = self
            .shared
            .supervisor(&RESOLVERS_PATH)
            .await
            .ok_or_else(|| unavailable("the resolvers are not running (the server is stopping?)"))?;
        let id = format!("resolver-{}", self.registry.next_process_number());
        let details = DetailsCell::default();
        let args = ResolverArgs {
            registry: Arc::clone(&self.registry),
            warm: false,
            details: details.clone(),
        };
        let spec =
            ChildSpec::worker(id.clone(), Restart::Temporary, move || (Resolver, args.clone())).with_details(details);
        let started = supervisor
            .call(|reply| SupervisorMsg::StartChild(spec, reply), None)
            .await;
        if !matches!(started, Ok(ractor::rpc::CallResult::Success(Ok(())))) {
            return Err(unavailable("a resolver could not be started"));
        }
        let child = match supervisor.call(|reply| SupervisorMsg::Child(id, reply), None).await {
            Ok(ractor::rpc::CallResult::Success(Some(cell))) => ActorRef::<ResolverMsg>::from(cell),
            _ => return Err(unavailable("the resolver stopped before its request")),
        };
        self.ask(&child, job).await
    }

    async fn ask(&self, resolver: &ActorRef<ResolverMsg>, job: ResolverJob) -> Resolution {
        // Two tries at most inside the resolver, each bounded by the job's timeout.
        let limit = 2 * job.timeout + Duration::from_millis(RESOLVER_WAIT_MS);
        match resolver
            .call(|reply| ResolverMsg::Resolve(job, reply), Some(limit))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(resolution)) => resolution,
            Ok(_) => Err(ResolveFailure::Unavailable(
                "the resolver did not answer in time".to_string(),
            )),
            Err(_) => Err(ResolveFailure::Unavailable("the resolver stopped; retry".to_string())),
        }
    }

    async fn wait_for_warm(&self) -> Option<ActorRef<ResolverMsg>> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(RESOLVER_WAIT_MS);
        loop {
            if let Some(resolver) = self.registry.current() {
                return Some(resolver);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(RESOLVER_POLL_MS)).await;
        }
    }
}
