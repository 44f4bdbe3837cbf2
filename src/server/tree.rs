//! The server's supervision tree (ARCHITECTURE §5):
//!
//! ```text
//! server (root, rest_for_one; label: epoch)
//! ├── store       owns the state store (its writer thread); stops last
//! ├── scheduler   timers: server lease, idle exit
//! ├── clients     one_for_one: the listener and one temporary actor per connection
//! ├── runners     one_for_one: one temporary child per active run generation
//! ├── resolvers   one_for_one: short-lived source-resolver children
//! ├── reconciles  one_for_one: one resource-runner child per admitted reconcile
//! └── channels    one_for_one: one adapter per channel profile
//! ```
//!
//! rest_for_one at the root: if the store fails, everything started after it restarts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use supervisors::{ChildSpec, Restart, Strategy, SupervisorSpec};

use super::context::ServerContext;
use super::listener::{Listener, ListenerArgs};
use super::scheduler::{Scheduler, SchedulerArgs};
use crate::store::server_lease::ServerLease;

/// Root restarts allowed in the period before the server gives up and exits.
const ROOT_RESTARTS_MAX: u32 = 3;
const ROOT_PERIOD_MS: u64 = 60_000;

/// Owns a reference to the store so the store outlives every actor started after it.
pub struct StoreOwner;

pub enum StoreOwnerMsg {}

impl Actor for StoreOwner {
    type Msg = StoreOwnerMsg;
    type State = Arc<ServerContext>;
    type Arguments = Arc<ServerContext>;

    async fn pre_start(
        &self,
        _: ActorRef<StoreOwnerMsg>,
        ctx: Arc<ServerContext>,
    ) -> Result<Arc<ServerContext>, ActorProcessingErr> {
        // Fail fast (and let the root decide) when the writer cannot commit.
        super::blocking::write(&ctx.store, |_| Ok(())).await?;
        Ok(ctx)
    }
}

fn empty_supervisor(id: &'static str) -> ChildSpec {
    ChildSpec::supervisor(id, Restart::Permanent, move || {
        SupervisorSpec::new(id, Strategy::OneForOne)
    })
}

pub fn root_spec(
    ctx: &Arc<ServerContext>,
    lease: &ServerLease,
    socket: PathBuf,
    idle_exit: Duration,
) -> SupervisorSpec {
    let store_ctx = Arc::clone(ctx);
    let store = ChildSpec::worker("store", Restart::Permanent, move || {
        (StoreOwner, Arc::clone(&store_ctx))
    });
    let scheduler_ctx = Arc::clone(ctx);
    let lease = lease.clone();
    let scheduler = ChildSpec::worker("scheduler", Restart::Permanent, move || {
        (
            Scheduler,
            SchedulerArgs {
                ctx: Arc::clone(&scheduler_ctx),
                lease: lease.clone(),
                idle_exit,
            },
        )
    });
    let listener_ctx = Arc::clone(ctx);
    let clients = ChildSpec::supervisor("clients", Restart::Permanent, move || {
        let listener_ctx = Arc::clone(&listener_ctx);
        let socket = socket.clone();
        let listener = ChildSpec::worker("listener", Restart::Permanent, move || {
            (
                Listener,
                ListenerArgs {
                    ctx: Arc::clone(&listener_ctx),
                    socket: socket.clone(),
                },
            )
        });
        SupervisorSpec::new("clients", Strategy::OneForOne)
            .with_intensity(5, Duration::from_secs(10))
            .with_child(listener)
    });
    SupervisorSpec::new("server", Strategy::RestForOne)
        .with_intensity(ROOT_RESTARTS_MAX, Duration::from_millis(ROOT_PERIOD_MS))
        .with_child(store)
        .with_child(scheduler)
        .with_child(clients)
        .with_child(empty_supervisor("runners"))
        .with_child(empty_supervisor("resolvers"))
        .with_child(empty_supervisor("reconciles"))
        .with_child(empty_supervisor("channels"))
}
