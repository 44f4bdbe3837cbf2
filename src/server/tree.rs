//! The server's supervision tree, started in this order and stopped in reverse:
//!
//! ```text
//! server (root, one_for_one, 3 restarts / 60 s; details: the server epoch)
//! ├── store        worker, permanent: holds the store, stops last; a dead writer stops the server
//! ├── scheduler    worker, permanent: lease renewal, admission, idle exit
//! ├── reclaimer    task, transient: reclaims running rows whose claim expired (no live runner)
//! ├── deadlines    task, transient: step model time and deadlines (times out waiting steps)
//! ├── retention    task, transient: the daily retention sweep (absent when retention is off)
//! ├── resolvers    one_for_one, 10 / 60 s
//! │   ├── resolver worker, permanent: the warm source resolver and its Node process
//! │   └── resolver-N  worker, temporary: one request while the warm one is busy
//! ├── runners      one_for_one, 5 / 60 s
//! │   ├── reaper   task, transient: reaps orphans reparented to the server (a subreaper)
//! │   ├── pool     worker, permanent: warm runner processes, not yet assigned
//! │   └── runner-N worker, temporary: one per active run generation, with its process
//! ├── clients      one_for_one, 5 / 10 s
//! │   ├── feeds    one_for_one, 20 / 10 s: run-feed-N and run-list-N tasks, transient
//! │   ├── listener worker, permanent: the socket
//! │   └── connection-N  worker, temporary: one per client connection
//! ├── reconciles   one_for_one: one resource-runner child per admitted reconcile (none yet)
//! └── channels     one_for_one, 10 / 60 s
//!     ├── loader   task, transient: loads channels.json and starts the adapters
//!     └── adapter-<profile>  worker, permanent: one Telegram profile and its adapter process
//! ```
//!
//! Why one_for_one at the root: no child depends on a sibling's in-memory state. Everything
//! durable is in the store, which never restarts (a dead writer stops the server), and the
//! handles children share (runner registry, resolver, feeds) outlive any restart, so a
//! restarted child recovers from the store and the handles, and its siblings carry on.
//! Past the root's intensity the root fails and the server stops with `treeFailed`.
//!
//! Why this order: clients stop before runners, so a command in flight finishes (and reaches
//! its runner) before runners stop; runners and resolvers stop before the store, so their
//! last settlements commit; the scheduler outlives the runners it started (it admits nothing
//! once a stop is requested).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use supervisors::{ChildSpec, DetailsCell, Restart, Strategy, SupervisorSpec};

use super::clients::listener::{Listener, ListenerArgs};
use super::deadlines::{DeadlineArgs, deadline_task};
use super::ops::context::OpsContext;
use super::ownership::HeldFiles;
use super::reclaimer::{ReclaimArgs, reclaimer};
use super::resolvers::handle::Resolvers;
use super::resolvers::resolver::Resolver;
use super::retention::{SweepArgs, sweeper};
use super::runners::pool::{Pool, PoolArgs};
use super::runners::reaper::reap_orphans;
use super::runners::registry::Runners;
use super::scheduler::{Scheduler, SchedulerArgs};
use super::shared::Shared;
use super::store_owner::{StoreOwner, StoreOwnerArgs};
use super::views::feeds::Feeds;
use crate::store::server_lease::ServerLease;

/// Root restarts allowed in the period before the server gives up and exits.
const ROOT_RESTARTS_MAX: u32 = 3;
const ROOT_PERIOD_MS: u64 = 60_000;
const RESOLVERS_RESTARTS_MAX: u32 = 10;
const RESOLVERS_PERIOD_MS: u64 = 60_000;
const RUNNERS_RESTARTS_MAX: u32 = 5;
const RUNNERS_PERIOD_MS: u64 = 60_000;
const CLIENTS_RESTARTS_MAX: u32 = 5;
const CLIENTS_PERIOD_MS: u64 = 10_000;
const FEEDS_RESTARTS_MAX: u32 = 20;
const FEEDS_PERIOD_MS: u64 = 10_000;

/// Everything the tree's children are started with.
#[derive(Clone)]
pub struct TreeParts {
    pub shared: Arc<Shared>,
    pub channels: Arc<super::channels::Channels>,
    pub runners: Arc<Runners>,
    pub resolvers: Arc<Resolvers>,
    pub ops: Arc<OpsContext>,
    pub feeds: Arc<Feeds>,
    pub lease: ServerLease,
    pub socket: PathBuf,
    pub idle_exit: Duration,
    /// Days finished runs are kept; `None`: no retention child.
    pub retention_days: Option<i64>,
    /// How often the reclaimer looks for expired running rows.
    pub reclaim_interval: Duration,
    pub connection_deadlines: super::config::ConnectionDeadlines,
    /// The state directory's files this server holds (watched by `store`).
    pub held: HeldFiles,
}

pub fn root_spec(parts: &TreeParts) -> SupervisorSpec {
    let details = DetailsCell::default();
    details.update(|details| details.epoch = Some(parts.shared.epoch as u64));
    let mut root = SupervisorSpec::new("server", Strategy::OneForOne)
        .with_intensity(ROOT_RESTARTS_MAX, Duration::from_millis(ROOT_PERIOD_MS))
        .with_details(details)
        .with_child(store(parts))
        .with_child(scheduler(parts))
        .with_child(reclaim(parts))
        .with_child(deadlines(parts));
    if let Some(days) = parts.retention_days {
        root = root.with_child(retention(parts, days));
    }
    root.with_child(resolvers(parts))
        .with_child(runners(parts))
        .with_child(clients(parts))
        .with_child(empty_supervisor("reconciles"))
        .with_child(super::channels::channels_spec(&parts.channels))
}

fn store(parts: &TreeParts) -> ChildSpec {
    let args = StoreOwnerArgs {
        shared: Arc::clone(&parts.shared),
        held: parts.held.clone(),
    };
    ChildSpec::worker("store", Restart::Permanent, move || (StoreOwner, args.clone()))
}

fn scheduler(parts: &TreeParts) -> ChildSpec {
    let args = SchedulerArgs {
        shared: Arc::clone(&parts.shared),
        runners: Arc::clone(&parts.runners),
        lease: parts.lease.clone(),
        idle_exit: parts.idle_exit,
    };
    ChildSpec::worker("scheduler", Restart::Permanent, move || (Scheduler, args.clone()))
}

fn reclaim(parts: &TreeParts) -> ChildSpec {
    let args = ReclaimArgs {
        shared: Arc::clone(&parts.shared),
        runners: Arc::clone(&parts.runners),
        interval: parts.reclaim_interval,
    };
    ChildSpec::task("reclaimer", Restart::Transient, move || reclaimer(args.clone()))
}

fn deadlines(parts: &TreeParts) -> ChildSpec {
    let args = DeadlineArgs {
        shared: Arc::clone(&parts.shared),
        coordinators: Arc::clone(&parts.ops.coordinators),
        runners: Arc::clone(&parts.runners),
    };
    ChildSpec::task("deadlines", Restart::Transient, move || deadline_task(args.clone()))
}

fn retention(parts: &TreeParts, days: i64) -> ChildSpec {
    let args = SweepArgs {
        shared: Arc::clone(&parts.shared),
        runners: Arc::clone(&parts.runners),
        days,
    };
    ChildSpec::task("retention", Restart::Transient, move || sweeper(args.clone()))
}

fn resolvers(parts: &TreeParts) -> ChildSpec {
    let resolvers = Arc::clone(&parts.resolvers);
    ChildSpec::supervisor("resolvers", Restart::Permanent, move || {
        let spec = SupervisorSpec::new("resolvers", Strategy::OneForOne)
            .with_intensity(RESOLVERS_RESTARTS_MAX, Duration::from_millis(RESOLVERS_PERIOD_MS));
        if resolvers.registry.program.is_none() {
            // Without the package there is nothing to run; `run.start` says so.
            return spec;
        }
        let args = resolvers.warm_args();
        let details = args.details.clone();
        let resolver = ChildSpec::worker("resolver", Restart::Permanent, move || (Resolver, args.clone()))
            .with_details(details)
            .with_shutdown(supervisors::Shutdown::Timeout(supervisors::process_shutdown_wait(
                Duration::from_millis(super::spawn::CHILD_GRACE_MS),
            )));
        spec.with_child(resolver)
    })
}

fn runners(parts: &TreeParts) -> ChildSpec {
    let shared = Arc::clone(&parts.shared);
    let args = PoolArgs {
        runners: Arc::clone(&parts.runners),
        shared: Arc::clone(&parts.shared),
        details: DetailsCell::default(),
    };
    ChildSpec::supervisor("runners", Restart::Permanent, move || {
        let args = args.clone();
        let details = args.details.clone();
        let pool = ChildSpec::worker("pool", Restart::Permanent, move || (Pool, args.clone())).with_details(details);
        let shared = Arc::clone(&shared);
        let reaper = ChildSpec::task("reaper", Restart::Transient, move || reap_orphans(Arc::clone(&shared)));
        SupervisorSpec::new("runners", Strategy::OneForOne)
            .with_intensity(RUNNERS_RESTARTS_MAX, Duration::from_millis(RUNNERS_PERIOD_MS))
            .with_child(reaper)
            .with_child(pool)
    })
}

fn clients(parts: &TreeParts) -> ChildSpec {
    let args = ListenerArgs {
        ops: Arc::clone(&parts.ops),
        feeds: Arc::clone(&parts.feeds),
        socket: parts.socket.clone(),
        accepted: Arc::new(AtomicU64::new(0)),
        deadlines: parts.connection_deadlines,
    };
    ChildSpec::supervisor("clients", Restart::Permanent, move || {
        let args = args.clone();
        let feeds = ChildSpec::supervisor("feeds", Restart::Permanent, || {
            SupervisorSpec::new("feeds", Strategy::OneForOne)
                .with_intensity(FEEDS_RESTARTS_MAX, Duration::from_millis(FEEDS_PERIOD_MS))
        });
        let listener = ChildSpec::worker("listener", Restart::Permanent, move || (Listener, args.clone()));
        SupervisorSpec::new("clients", Strategy::OneForOne)
            .with_intensity(CLIENTS_RESTARTS_MAX, Duration::from_millis(CLIENTS_PERIOD_MS))
            .with_child(feeds)
            .with_child(listener)
    })
}

fn empty_supervisor(id: &'static str) -> ChildSpec {
    ChildSpec::supervisor(id, Restart::Permanent, move || {
        SupervisorSpec::new(id, Strategy::OneForOne)
    })
}
