//! The scheduler (a permanent worker under the root): server-lease renewal, run admission
//! (the run's claim, its runner's launch and a warm process's identity in one commit, then a
//! new `runner-N` child under `runners` per admitted run generation) and the idle-exit rule.
//! Claim renewal is each runner's own timer.
//!
//! Idle exit: the server stops after `idle_exit` with no client connection, no runner and
//! no unsettled work (admitted or running runs, deadlines, unsettled effects, validating
//! submissions). A later client starts it again with `pi-workflows server start`.
//!
//! A restart is real: the scheduler keeps nothing that the store, the runner registry and the
//! lease (owned by the server, not by the scheduler) do not know; a restarted scheduler
//! renews the same lease and admits where the old one stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use super::blocking;
use super::empty_look::EmptyLook;
use super::memory;
use super::quiet_spell::QuietSpell;
use super::runners::admission;
use super::runners::registry::Runners;
use super::shared::{Shared, StopReason};
use crate::store::server_lease::{self, Renewal, SERVER_LEASE_MS, ServerLease};
use crate::store::verify;
use crate::store::workers;

/// How often the scheduler looks at its timers while work may be queued or runs.
pub const TICK_MS: u64 = 500;
/// While quiet (nothing queued, no runner) the scheduler sleeps this long at most: any new
/// work is a commit, and a commit wakes it (at most every `TICK_MS`), so an idle server does
/// not wake twice a second for nothing. Still well inside the lease's renewal period.
pub const QUIET_TICK_MS: u64 = 5_000;
/// A server quiet this long gives back the memory its last runs left in caches and
/// allocator arenas (`memory::release`): long enough that back-to-back runs never pay it.
pub const MEMORY_RELEASE_QUIET_MS: u64 = 2_000;
/// The server lease is renewed after a third of its life.
pub const LEASE_RENEW_MS: u64 = (SERVER_LEASE_MS / 3) as u64;
const _: () = assert!(TICK_MS < QUIET_TICK_MS && QUIET_TICK_MS < LEASE_RENEW_MS);

pub struct Scheduler;

#[derive(Clone)]
pub struct SchedulerArgs {
    pub shared: Arc<Shared>,
    pub runners: Arc<Runners>,
    pub lease: ServerLease,
    pub idle_exit: Duration,
}

pub enum SchedulerMsg {
    Tick,
}

pub struct SchedulerState {
    shared: Arc<Shared>,
    runners: Arc<Runners>,
    lease: ServerLease,
    idle_exit: Duration,
    idle_since: Option<Instant>,
    /// Since when nothing was queued, no runner ran and no watched commit came, and whether
    /// memory was released since (once per quiet spell).
    quiet_spell: QuietSpell,
    renewed_at: Instant,
    /// The admission's last look found no queued run at all, and the idle check's no
    /// unsettled work: neither reads again before a watched commit.
    no_queued_run: EmptyLook,
    no_unsettled_work: EmptyLook,
    ticker: Option<JoinHandle<()>>,
    /// Told to the ticker after each tick: nothing queued and no runner.
    quiet: Arc<AtomicBool>,
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SchedulerMsg>,
        args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        // Admit at once at start (crash-to-resume) and whenever capacity or work appears,
        // not only on the next tick.
        let quiet = Arc::new(AtomicBool::new(false));
        let ticks = Ticks {
            wakes: args.shared.scheduler_wakes(),
            commits: args.shared.store.commits(),
            quiet: Arc::clone(&quiet),
            quiet_tick: Duration::from_millis(QUIET_TICK_MS).min(args.idle_exit.max(Duration::from_millis(TICK_MS))),
        };
        let ticker = tokio::spawn(ticks.run(myself.clone()));
        let _ = myself.cast(SchedulerMsg::Tick);
        Ok(SchedulerState {
            shared: args.shared,
            runners: args.runners,
            lease: args.lease,
            idle_exit: args.idle_exit,
            idle_since: None,
            quiet_spell: QuietSpell::new(Duration::from_millis(MEMORY_RELEASE_QUIET_MS)),
            // A restarted scheduler renews at once: it cannot know when the lease was renewed.
            renewed_at: Instant::now()
                .checked_sub(Duration::from_millis(LEASE_RENEW_MS))
                .unwrap_or_else(Instant::now),
            no_queued_run: EmptyLook::default(),
            no_unsettled_work: EmptyLook::default(),
            ticker: Some(ticker),
            quiet,
        })
    }

    async fn post_stop(&self, _: ActorRef<SchedulerMsg>, state: &mut SchedulerState) -> Result<(), ActorProcessingErr> {
        // The lease is the server's: it is released after the whole tree stopped, never by a
        // scheduler that is only being restarted.
        if let Some(ticker) = state.ticker.take() {
            ticker.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SchedulerMsg>,
        message: SchedulerMsg,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SchedulerMsg::Tick => {
                renew_lease_when_due(state).await;
                let admission = admit(state).await;
                if admission == Admission::RetrySoon {
                    // Queued work but the tree is still starting (no `runners` yet): try
                    // again shortly instead of a whole tick later.
                    myself.send_after(Duration::from_millis(ADMISSION_RETRY_MS), || SchedulerMsg::Tick);
                }
                check_idle(state).await;
                let quiet = state.runners.live() == 0
                    && match admission {
                        Admission::NothingAdmissible { queued } => queued == 0,
                        Admission::Done | Admission::RetrySoon => nothing_queued(&state.shared).await,
                    };
                state.quiet.store(quiet, Ordering::Relaxed);
                release_memory_once_quiet(state, quiet).await;
            }
        }
        Ok(())
    }
}

/// What makes the scheduler tick: an explicit wake at once; a timer (`TICK_MS`, or the quiet
/// tick while quiet); and while quiet a commit, which is how any new work arrives.
struct Ticks {
    wakes: Arc<tokio::sync::Notify>,
    commits: tokio::sync::watch::Receiver<u64>,
    quiet: Arc<AtomicBool>,
    quiet_tick: Duration,
}

impl Ticks {
    async fn run(mut self, scheduler: ActorRef<SchedulerMsg>) {
        let busy_tick = Duration::from_millis(TICK_MS);
        loop {
            let since = Instant::now();
            if self.quiet.load(Ordering::Relaxed) {
                tokio::select! {
                    () = self.wakes.notified() => {}
                    () = tokio::time::sleep(self.quiet_tick) => {}
                    changed = self.commits.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        // A commit is only a hint: at most one tick per busy tick for them.
                        tokio::select! {
                            () = self.wakes.notified() => {}
                            () = tokio::time::sleep(busy_tick.saturating_sub(since.elapsed())) => {}
                        }
                    }
                }
            } else {
                tokio::select! {
                    () = self.wakes.notified() => {}
                    () = tokio::time::sleep(busy_tick) => {}
                }
            }
            // Commits from here on are news to the tick about to run: its reads come after.
            self.commits.borrow_and_update();
            if scheduler.cast(SchedulerMsg::Tick).is_err() {
                return;
            }
        }
    }
}

/// Whether no run is queued at all (due or not): a quiet scheduler waits for a commit.
async fn nothing_queued(shared: &Arc<Shared>) -> bool {
    blocking::read_small(&shared.store, workers::queued_runs).is_ok_and(|queued| queued == 0)
}

async fn renew_lease_when_due(state: &mut SchedulerState) {
    if state.renewed_at.elapsed() < Duration::from_millis(LEASE_RENEW_MS) {
        return;
    }
    let lease = state.lease.clone();
    // The lease's expiry is a fact about this server's life, which a power loss ends anyway:
    // no fsync every renewal (`Durability::Kernel`); an idle server then writes no disk. No
    // watcher reads it, so it wakes none.
    match blocking::write_unwatched(&state.shared.store, move |tx| {
        server_lease::renew_server_lease(tx, &lease)
    })
    .await
    {
        Ok(Renewal::Renewed | Renewal::Rearmed) => state.renewed_at = Instant::now(),
        Err(err) if err.claim_lost_reason().is_some() => {
            tracing::error!(epoch = state.lease.epoch, error = %err, "server lease lost; stopping");
            state.shared.request_stop(StopReason::LeaseLost);
        }
        Err(err) => tracing::warn!(error = %err, "server lease renewal failed; will retry"),
    }
}

/// How soon admission is retried while the supervision tree is still starting.
const ADMISSION_RETRY_MS: u64 = 10;

#[derive(Debug, PartialEq, Eq)]
enum Admission {
    Done,
    RetrySoon,
    /// The queue was read and held nothing to admit now; `queued` runs wait (not yet due,
    /// or paused), read in the same snapshot, so the quiet check needs no read of its own.
    NothingAdmissible {
        queued: u64,
    },
}

/// Start queued runs while capacity allows (running runs and admissions under way both
/// count: `run.start` may be admitting its own new run at the same time).
async fn admit(state: &mut SchedulerState) -> Admission {
    let (shared, runners) = (Arc::clone(&state.shared), Arc::clone(&state.runners));
    let free = runners.free();
    if runners.settings.program.is_none() || free == 0 || shared.stop_requested().is_some() {
        return Admission::Done;
    }
    let count = shared.store.commit_count();
    if state.no_queued_run.still_empty(count) {
        return Admission::NothingAdmissible { queued: 0 };
    }
    let now = shared.store.now_ms();
    // At most `free` candidates and a count over the queue's index: read in place.
    let read = blocking::read_small(&shared.store, move |conn| {
        Ok((workers::admissible_runs(conn, now, free)?, workers::queued_runs(conn)?))
    });
    let Ok((queued, queued_total)) = read else {
        return Admission::Done;
    };
    // No queued row at all, due or not: only a commit can queue one.
    state.no_queued_run.record(count, queued_total == 0);
    if queued.is_empty() {
        return Admission::NothingAdmissible { queued: queued_total };
    }
    if runners.supervisor(&shared).await.is_none() {
        return Admission::RetrySoon;
    }
    for run in queued {
        let Some(admission) = admission::prepare(&shared, &runners).await else {
            break;
        };
        admission::admit_queued(&shared, &runners, run, admission).await;
    }
    Admission::Done
}

/// Once per quiet spell, after `MEMORY_RELEASE_QUIET_MS`: a burst of runs grows the caches
/// and arenas, and a server that then idles for hours should not keep them. A run that
/// began and ended between two ticks ends the spell too (`quiet_spell.rs`).
async fn release_memory_once_quiet(state: &mut SchedulerState, quiet: bool) {
    let commits = state.shared.store.commit_count();
    if state.quiet_spell.look(quiet, commits, Instant::now()) {
        memory::release(&state.shared.store).await;
    }
}

/// Whether the store holds work to settle (a failed read counts as work: the server stays).
async fn has_unsettled_work(state: &mut SchedulerState) -> bool {
    let count = state.shared.store.commit_count();
    if state.no_unsettled_work.still_empty(count) {
        return false;
    }
    let work = blocking::read(&state.shared.store, verify::unsettled_work).await;
    let unsettled = work.map_or(true, |work| work > 0);
    state.no_unsettled_work.record(count, !unsettled);
    unsettled
}

async fn check_idle(state: &mut SchedulerState) {
    let busy = state.shared.connections() > 0 || state.runners.live() > 0 || has_unsettled_work(state).await;
    if busy {
        state.idle_since = None;
        return;
    }
    let idle_since = *state.idle_since.get_or_insert_with(Instant::now);
    if idle_since.elapsed() >= state.idle_exit {
        tracing::info!(idle_ms = state.idle_exit.as_millis() as u64, "idle; stopping");
        state.shared.request_stop(StopReason::Idle);
    }
}
