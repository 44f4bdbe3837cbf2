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
use supervisors::SupervisorMsg;

use super::mailbox::{PoolMsg, RunnerMsg};
use crate::server::config::RunnerSettings;
use crate::server::shared::{Shared, lock};

pub struct Runners {
    pub settings: RunnerSettings,
    /// The live runner actor of each run that has one.
    registry: Mutex<HashMap<String, ActorRef<RunnerMsg>>>,
    /// Live runner actors (started, not yet stopped).
    live: AtomicUsize,
    /// Admissions under way (`Slot`s): with `live`, never above `settings.max_workers`.
    reserved: AtomicUsize,
    /// The `runners` supervisor, looked up again when it restarted.
    supervisor: Mutex<Option<ActorRef<SupervisorMsg>>>,
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
            reserved: AtomicUsize::new(0),
            supervisor: Mutex::new(None),
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

    /// Capacity for one more runner, held until the returned slot is dropped; `None` when
    /// live runners and admissions under way already fill `settings.max_workers`. A slot is
    /// dropped only after its runner registered (or its admission failed), so for a moment
    /// a runner counts twice: capacity is never overshot, at worst briefly undershot.
    pub fn reserve(self: &Arc<Self>) -> Option<Slot> {
        let max = self.settings.max_workers;
        let mut reserved = self.reserved.load(Ordering::SeqCst);
        loop {
            // `live` grows only by a runner whose admission holds a slot, so it cannot push
            // the sum past `max` between this check and the exchange.
            if self.live().saturating_add(reserved) >= max {
                return None;
            }
            match self
                .reserved
                .compare_exchange(reserved, reserved + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(Slot(Arc::clone(self))),
                Err(current) => reserved = current,
            }
        }
    }

    /// How many more runners may be admitted now.
    pub fn free(&self) -> usize {
        let taken = self.live().saturating_add(self.reserved.load(Ordering::SeqCst));
        self.settings.max_workers.saturating_sub(taken)
    }

    /// The `runners` supervisor (runner actors are its children), cached until it stops.
    pub async fn supervisor(&self, shared: &Shared) -> Option<ActorRef<SupervisorMsg>> {
        let cached = lock(&self.supervisor).clone();
        if let Some(supervisor) = cached.filter(|cached| cached.get_status() == ractor::ActorStatus::Running) {
            return Some(supervisor);
        }
        let found = shared.supervisor(&["runners"]).await;
        lock(&self.supervisor).clone_from(&found);
        found
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

/// Capacity reserved for one admission (see `Runners::reserve`).
pub struct Slot(Arc<Runners>);

impl Drop for Slot {
    fn drop(&mut self) {
        let before = self.0.reserved.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "a slot is released once");
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
