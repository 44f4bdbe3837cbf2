//! What every resolver actor shares: the program, where captures go, the timeout, the warm
//! resolver's name and tree details, and the counters that survive a restart.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::ActorRef;
use supervisors::DetailsCell;

use super::mailbox::ResolverMsg;
use crate::server::config::{Program, RunnerSettings};
use crate::server::shared::lock;

/// What a resolver actor is started with.
#[derive(Clone)]
pub struct ResolverArgs {
    pub registry: Arc<ResolverRegistry>,
    /// The warm resolver (kept, registered); else a one-shot child for one request.
    pub warm: bool,
    /// Where this child shows its process in the tree.
    pub details: DetailsCell,
}

pub struct ResolverRegistry {
    /// The served resolver program; `None` when the package was not found at start.
    pub program: Option<Program>,
    /// Where children's output is captured (shared with runners).
    pub settings: RunnerSettings,
    pub server_epoch: i64,
    /// How long one resolution may take before its process is killed.
    pub timeout: Duration,
    /// Where the warm resolver shows its process in the tree.
    pub details: DetailsCell,
    current: Mutex<Option<ActorRef<ResolverMsg>>>,
    /// Resolver processes and one-shot children started by this server (names them).
    started: AtomicU64,
    /// Resolver processes in a row that died soon after they started: the next start waits
    /// longer, so a broken installation cannot restart in a tight loop.
    quick_deaths: AtomicU32,
}

impl ResolverRegistry {
    pub fn new(program: Option<Program>, settings: RunnerSettings, server_epoch: i64, timeout: Duration) -> Self {
        Self {
            program,
            settings,
            server_epoch,
            timeout,
            details: DetailsCell::default(),
            current: Mutex::new(None),
            started: AtomicU64::new(0),
            quick_deaths: AtomicU32::new(0),
        }
    }

    pub fn current(&self) -> Option<ActorRef<ResolverMsg>> {
        lock(&self.current).clone()
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
