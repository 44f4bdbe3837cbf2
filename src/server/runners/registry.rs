//! The `runners` subtree's handle: how runners are launched, which runner actor serves each
//! run, how many live, and the warm pool. The scheduler admits through it, client controls
//! find a run's runner through it.
//!
//! Architecture Invariant: the registry only names actors; it never owns a process (each
//! runner actor owns its process through a `ProcessActor`, the pool owns the warm ones).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ractor::ActorRef;

use super::mailbox::{PoolMsg, RunnerMsg};
use crate::server::config::RunnerSettings;
use crate::server::shared::{Shared, lock};

pub struct Runners {
    pub settings: RunnerSettings,
    /// The live runner actor of each run that has one.
    registry: Mutex<HashMap<String, ActorRef<RunnerMsg>>>,
    /// Live runner actors (started, not yet stopped).
    live: AtomicUsize,
    /// Runner children started by this server: names them uniquely (`runner-N`) across a
    /// restart of the scheduler that starts them.
    launched: AtomicU64,
    /// The running warm pool, if any.
    pool: Mutex<Option<ActorRef<PoolMsg>>>,
    /// The memory bound each definition declares (`limits.runnerMemoryMb`, MiB), by digest:
    /// a definition never changes, so a launch reads and parses it only once.
    declared_memory: Mutex<HashMap<String, Option<u64>>>,
}

/// Definitions whose declared memory bound is remembered at most.
const DECLARED_MEMORY_CACHED_MAX: usize = 64;

impl Runners {
    pub fn new(settings: RunnerSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            registry: Mutex::new(HashMap::new()),
            live: AtomicUsize::new(0),
            launched: AtomicU64::new(0),
            pool: Mutex::new(None),
            declared_memory: Mutex::new(HashMap::new()),
        })
    }

    /// Count `runner` as live and name it for `run_id` until the returned value is dropped —
    /// however its actor ends, a panic included (ractor runs no `post_stop` then), so a
    /// crashed runner actor never holds capacity or keeps the server from idling.
    pub fn register(self: &Arc<Self>, shared: &Arc<Shared>, run_id: &str, runner: ActorRef<RunnerMsg>) -> Registration {
        self.live.fetch_add(1, Ordering::SeqCst);
        lock(&self.registry).insert(run_id.to_string(), runner.clone());
        Registration {
            runners: Arc::clone(self),
            shared: Arc::clone(shared),
            run_id: run_id.to_string(),
            runner,
        }
    }

    /// Forget `run_id`'s runner, unless a newer runner already replaced it; returns how many
    /// runners still live.
    fn unregister(&self, run_id: &str, runner: &ActorRef<RunnerMsg>) -> usize {
        let mut registry = lock(&self.registry);
        if registry
            .get(run_id)
            .is_some_and(|current| current.get_id() == runner.get_id())
        {
            registry.remove(run_id);
        }
        self.live.fetch_sub(1, Ordering::SeqCst) - 1
    }

    pub fn runner_for(&self, run_id: &str) -> Option<ActorRef<RunnerMsg>> {
        lock(&self.registry).get(run_id).cloned()
    }

    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// The next runner child's number.
    pub fn next_launch(&self) -> u64 {
        self.launched.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The declared memory bound of the definition `digest`, if it was read before.
    pub fn declared_memory(&self, digest: &str) -> Option<Option<u64>> {
        lock(&self.declared_memory).get(digest).copied()
    }

    pub fn remember_declared_memory(&self, digest: &str, declared: Option<u64>) {
        let mut cached = lock(&self.declared_memory);
        if cached.len() >= DECLARED_MEMORY_CACHED_MAX {
            cached.clear();
        }
        cached.insert(digest.to_string(), declared);
    }

    pub fn set_pool(&self, pool: Option<ActorRef<PoolMsg>>) {
        *lock(&self.pool) = pool;
    }

    pub fn pool(&self) -> Option<ActorRef<PoolMsg>> {
        lock(&self.pool).clone()
    }
}

/// A live runner's place in the registry (see `Runners::register`).
pub struct Registration {
    runners: Arc<Runners>,
    shared: Arc<Shared>,
    run_id: String,
    runner: ActorRef<RunnerMsg>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let still_running = self.runners.unregister(&self.run_id, &self.runner);
        self.shared.wake_scheduler();
        if self.shared.stop_requested().is_some() {
            return;
        }
        // A core just came free: the pool starts what its target asks for (pool.rs).
        if let Some(pool) = self.runners.pool() {
            let _ = pool.cast(PoolMsg::Refill);
        }
        if still_running == 0 {
            // Idle now: let a due retention sweep run.
            self.shared.request_sweep();
        }
    }
}
