//! The scheduler actor: the server's timers. Today: server-lease renewal and the idle-exit
//! rule. (Run admission, claim renewal and deadlines join it with the runner issue.)
//!
//! Idle exit: the server stops after `idle_exit` with no client connection, no runner and
//! no unsettled work (admitted or running runs, deadlines, unsettled effects, validating
//! submissions). A later client starts it again with `pi-workflows server start`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use ractor::rpc::CallResult;
use supervisors::{ChildSpec, Restart, Shutdown, SupervisorMsg};

use super::blocking;
use super::context::{ServerContext, StopReason};
use super::runner::{RUNNER_GRACE_MS, Runner, RunnerArgs, abandon_launch};
use crate::store::runs;
use crate::store::server_lease::{self, Renewal, SERVER_LEASE_MS, ServerLease};
use crate::store::verify;
use crate::store::workers;

/// How often the scheduler looks at its timers.
pub const TICK_MS: u64 = 500;
/// The server lease is renewed after a third of its life.
pub const LEASE_RENEW_MS: u64 = (SERVER_LEASE_MS / 3) as u64;
/// Default idle period before exit; `PI_WORKFLOWS_IDLE_EXIT_MS` overrides it.
pub const IDLE_EXIT_MS_DEFAULT: u64 = 5 * 60 * 1_000;

pub struct Scheduler;

pub struct SchedulerArgs {
    pub ctx: Arc<ServerContext>,
    pub lease: ServerLease,
    pub idle_exit: Duration,
}

pub enum SchedulerMsg {
    Tick,
}

pub struct SchedulerState {
    ctx: Arc<ServerContext>,
    lease: ServerLease,
    idle_exit: Duration,
    idle_since: Option<Instant>,
    renewed_at: Instant,
    ticker: Option<JoinHandle<()>>,
    wake_task: Option<JoinHandle<()>>,
    runners: Option<ActorRef<SupervisorMsg>>,
    launched: u64,
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
        let ticker = myself.send_interval(Duration::from_millis(TICK_MS), || SchedulerMsg::Tick);
        // Admit at once at start (crash-to-resume) and whenever capacity or work appears,
        // not only on the next tick.
        let wakes = args.ctx.scheduler_wakes();
        let waker = myself.clone();
        let wake_task = tokio::spawn(async move {
            loop {
                wakes.notified().await;
                if waker.cast(SchedulerMsg::Tick).is_err() {
                    return;
                }
            }
        });
        let _ = myself.cast(SchedulerMsg::Tick);
        Ok(SchedulerState {
            ctx: args.ctx,
            lease: args.lease,
            idle_exit: args.idle_exit,
            idle_since: None,
            renewed_at: Instant::now(),
            ticker: Some(ticker),
            wake_task: Some(wake_task),
            runners: None,
            launched: 0,
        })
    }

    async fn post_stop(&self, _: ActorRef<SchedulerMsg>, state: &mut SchedulerState) -> Result<(), ActorProcessingErr> {
        for task in [state.ticker.take(), state.wake_task.take()].into_iter().flatten() {
            task.abort();
        }
        let lease = state.lease.clone();
        if let Err(err) = blocking::write(&state.ctx.store, move |tx| {
            server_lease::release_server_lease(tx, &lease)
        })
        .await
        {
            tracing::warn!(error = %err, "server lease was not released");
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
                if admit(state).await == Admission::RetrySoon {
                    // Queued work but the tree is still starting (no `runners` yet): try
                    // again shortly instead of a whole tick later.
                    myself.send_after(Duration::from_millis(ADMISSION_RETRY_MS), || SchedulerMsg::Tick);
                }
                check_idle(state).await;
            }
        }
        Ok(())
    }
}

async fn renew_lease_when_due(state: &mut SchedulerState) {
    if state.renewed_at.elapsed() < Duration::from_millis(LEASE_RENEW_MS) {
        return;
    }
    let lease = state.lease.clone();
    match blocking::write(&state.ctx.store, move |tx| server_lease::renew_server_lease(tx, &lease)).await {
        Ok(Renewal::Renewed | Renewal::Rearmed) => state.renewed_at = Instant::now(),
        Err(err) if err.claim_lost_reason().is_some() => {
            tracing::error!(epoch = state.lease.epoch, error = %err, "server lease lost; stopping");
            state.ctx.request_stop(StopReason::LeaseLost);
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
}

/// Start queued runs while capacity allows (running and pending launches both count).
async fn admit(state: &mut SchedulerState) -> Admission {
    let ctx = Arc::clone(&state.ctx);
    let Some(program) = ctx.runner_settings.program.clone() else {
        return Admission::Done;
    };
    let running = ctx.runners.load(std::sync::atomic::Ordering::SeqCst);
    let free = ctx.runner_settings.max_workers.saturating_sub(running);
    if free == 0 || ctx.stop_requested().is_some() {
        return Admission::Done;
    }
    let now = ctx.store.now_ms();
    let Ok(queued) = blocking::read(&ctx.store, move |conn| workers::admissible_runs(conn, now, free)).await else {
        return Admission::Done;
    };
    if queued.is_empty() {
        return Admission::Done;
    }
    let Some(supervisor) = runners_supervisor(state).await else {
        return Admission::RetrySoon;
    };
    for run in queued {
        let (run_id, owner) = (run.run_id.clone(), ctx.server_id.clone());
        let authority = match blocking::write(&ctx.store, move |tx| runs::start_run(tx, &run_id, &owner)).await {
            Ok(started) => started.value,
            Err(err) => {
                tracing::warn!(run_id = %run.run_id, error = %err, "could not admit a run");
                continue;
            }
        };
        state.launched += 1;
        let runner_epoch = format!(
            "e{}-{}",
            ctx.epoch,
            crate::digest::random_hex(8).unwrap_or_else(|| state.launched.to_string())
        );
        let args = RunnerArgs {
            ctx: Arc::clone(&ctx),
            run,
            authority: authority.clone(),
            runner_epoch: runner_epoch.clone(),
            program: program.clone(),
        };
        let shutdown = Duration::from_millis(RUNNER_GRACE_MS + supervisors::process::KILL_WAIT_MS_MAX + 1_000);
        let spec = ChildSpec::worker(format!("runner-{}", state.launched), Restart::Temporary, move || {
            (Runner, args.clone())
        })
        .with_label(format!("generation {}", authority.generation))
        .with_shutdown(Shutdown::Timeout(shutdown));
        match supervisor
            .call(|reply| SupervisorMsg::StartChild(spec, reply), None)
            .await
        {
            Ok(CallResult::Success(Ok(()))) => {}
            other => {
                let why = match other {
                    Ok(CallResult::Success(Err(err))) => err.to_string(),
                    Ok(_) => "the runners supervisor did not answer".to_string(),
                    Err(err) => err.to_string(),
                };
                tracing::warn!(run_id = %authority.resource_id, error = %why, "runner launch failed; parking the run");
                abandon_launch(&ctx, authority, runner_epoch).await;
            }
        }
    }
    Admission::Done
}

async fn runners_supervisor(state: &mut SchedulerState) -> Option<ActorRef<SupervisorMsg>> {
    if state
        .runners
        .as_ref()
        .is_some_and(|runners| runners.get_status() != ractor::ActorStatus::Running)
    {
        state.runners = None;
    }
    if state.runners.is_none() {
        let root = state.ctx.root.get()?;
        let cell = match root
            .call(|reply| SupervisorMsg::Child("runners".to_string(), reply), None)
            .await
        {
            Ok(CallResult::Success(Some(cell))) => cell,
            _ => return None,
        };
        state.runners = Some(cell.into());
    }
    state.runners.clone()
}

async fn check_idle(state: &mut SchedulerState) {
    let ctx = &state.ctx;
    let busy_in_memory = ctx.connections.load(std::sync::atomic::Ordering::SeqCst) > 0
        || ctx.runners.load(std::sync::atomic::Ordering::SeqCst) > 0;
    let busy = busy_in_memory
        || blocking::read(&ctx.store, verify::unsettled_work)
            .await
            .map_or(true, |work| work > 0);
    if busy {
        state.idle_since = None;
        return;
    }
    let idle_since = *state.idle_since.get_or_insert_with(Instant::now);
    if idle_since.elapsed() >= state.idle_exit {
        tracing::info!(idle_ms = state.idle_exit.as_millis() as u64, "idle; stopping");
        ctx.request_stop(StopReason::Idle);
    }
}
