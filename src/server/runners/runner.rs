//! One runner actor per active run generation (a temporary child of `runners`). It owns the
//! server's end of the runner's private channel (fd 3 in the child) and turns the runner's
//! fenced proposals into protected writes. The runner process itself is owned by a linked
//! `ProcessActor` (ready deadline, exit, SIGTERM→SIGKILL of the group, start identity);
//! this actor hears of the process's end from it and settles the run.
//!
//! Architecture Invariant: the generation and runner epoch of a message are checked before
//! its payload is read (`RunnerFence`); a stale runner gets one `claimLost` answer and is
//! stopped.
//!
//! Architecture Invariant: a runner is never restarted in place. When its process ends with
//! the run still running under its claim, the run parks (see `settle`); a later admission
//! launches a new runner with a new claim generation and runner epoch.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use supervisors::process::{ExitOutcome, ProcessChild};
use supervisors::{EndCause, ProcessActor, ProcessConfig, ProcessEnd, ProcessInfo, ProcessMsg, Readiness};
use tokio::io::{AsyncWriteExt, BufReader};

use super::apply::invalid;
use super::mailbox::{RunControl, RunnerMsg, RunnerProcess};
use super::messages;
use super::settle::settle;
use super::state::{RunnerArgs, RunnerFence, RunnerState};
use crate::server::blocking;
use crate::server::frames::{LineRead, read_line};
use crate::server::shared::lock;
use crate::server::socket;
use crate::server::spawn::{CHILD_GRACE_MS, child_mark, spawn_runner_with_channel};
use crate::store::StoreError;
use crate::store::StoreResult;
use crate::store::claims::RUN_CLAIM_LEASE_MS;
use crate::store::commands::{self, CommandOutcome, CommandReceipt, CommandRequest};
use crate::store::runs;
use crate::store::workers::{self, WorkerOutcome};

/// SIGTERM-to-SIGKILL grace of a runner's process group.
pub const RUNNER_GRACE_MS: u64 = CHILD_GRACE_MS;
/// The run claim is renewed after a third of its life, so two renewals can fail before
/// it expires.
const CLAIM_RENEW_MS: u64 = (RUN_CLAIM_LEASE_MS / 3) as u64;
/// Frames handed to the actor at once: a runner that pipelines proposals gets them applied
/// in one group commit (bounded, so one runner cannot hold the writer for long).
pub const PIPELINE_FRAMES_MAX: usize = 32;

pub struct Runner;

impl Actor for Runner {
    type Msg = RunnerMsg;
    type State = RunnerState;
    type Arguments = RunnerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RunnerMsg>,
        args: RunnerArgs,
    ) -> Result<RunnerState, ActorProcessingErr> {
        args.details.update(|details| {
            details.generation = Some(args.authority.generation as u64);
            details.processes.clear();
        });
        let memory_bytes_max = super::memory::bound_for(&args).await;
        let (child, parent_end, mark) = match args
            .launch
            .take_warm(&args.runners.settings.logs_dir, &args.runner_epoch)
        {
            Some(warm) => warm,
            None => spawn_runner(&args).await?,
        };
        let pid = child.pid();
        // From here on the process belongs to its actor; the identity is recorded first, so
        // a later server can stop it only while it is provably the same process.
        let end_slot: Arc<Mutex<Option<ProcessEnd>>> = Arc::default();
        let process = own_process(&myself, &args, child, &end_slot).await?;
        let (read_half, mut writer) = socket::split(parent_end)?;
        writer.write_all(args.launch.envelope()).await?;
        let reader = tokio::spawn(read_frames(read_half, myself.clone())).abort_handle();
        let renewals = myself.send_interval(Duration::from_millis(CLAIM_RENEW_MS), || RunnerMsg::RenewClaim);
        let pings = myself.send_interval(args.runners.settings.ping_interval, || RunnerMsg::Ping);
        let registration = args.runners.register(&args.shared, &args.run.run_id, myself.clone());
        tracing::info!(run_id = %args.run.run_id, generation = args.authority.generation, pid, "runner started");
        Ok(RunnerState {
            fence: RunnerFence::new(
                args.shared.epoch,
                &args.run.run_id,
                args.authority.generation,
                &args.runner_epoch,
            ),
            args,
            process,
            pid,
            end_slot,
            mark,
            settled: false,
            channel_closed: false,
            ended_undrained: None,
            writer,
            ready_at_ms: None,
            revision_at_ready: None,
            ready_recorded: false,
            claim_lost: false,
            runner_stale: false,
            timed_out: false,
            stalled: false,
            out_of_memory: false,
            disk_full: false,
            memory_bytes_max,
            finished: false,
            advertised: Vec::new(),
            settings_known: None,
            tasks: vec![reader, renewals.abort_handle(), pings.abort_handle()],
            liveness: super::state::Liveness::default(),
            _registration: registration,
        })
    }

    async fn post_stop(&self, _: ActorRef<RunnerMsg>, state: &mut RunnerState) -> Result<(), ActorProcessingErr> {
        for task in state.tasks.drain(..) {
            task.abort();
        }
        if !state.settled {
            // Stopped from outside (server shutdown, cancellation): stop the whole group.
            let outcome = terminate(state).await;
            settle(state, outcome, Some(WorkerOutcome::Cancelled)).await;
        }
        state.args.details.update(|details| details.processes.clear());
        // The registration (in the state) is dropped after this: it frees the runner's slot.
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<RunnerMsg>,
        message: RunnerMsg,
        state: &mut RunnerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RunnerMsg::Frames(lines, reply) => {
                let was_ready = state.ready();
                let keep_reading = messages::on_frames(state, lines).await;
                if !was_ready && state.ready() {
                    let wait = Duration::from_millis(messages::READY_RECORD_WAIT_MS);
                    let timer = myself.send_after(wait, || RunnerMsg::RecordReady);
                    state.tasks.push(timer.abort_handle());
                }
                let _ = reply.send(keep_reading);
                if !keep_reading {
                    // A protocol violation, a stale runner, or a full disk (stopped by the
                    // server: recorded `cancelled`): stop its whole group now.
                    let forced = state.disk_full.then_some(WorkerOutcome::Cancelled);
                    stop_after_end(&myself, state, forced).await;
                }
            }
            RunnerMsg::Control(control, command, expected, reply) => {
                let stored = control_run(state, control, command, expected).await;
                let committed = stored
                    .as_ref()
                    .is_ok_and(|receipt| receipt.outcome == CommandOutcome::Accepted);
                let _ = reply.send(stored);
                if committed {
                    // The run's new state is durable: now stop the whole runner group.
                    state.finished = true;
                    stop_after_end(&myself, state, Some(WorkerOutcome::Cancelled)).await;
                }
            }
            RunnerMsg::Ping => {
                if super::memory::over_bound(state) {
                    state.out_of_memory = true;
                    stop_after_end(&myself, state, None).await;
                    return Ok(());
                }
                if super::liveness::on_tick(state).await == super::liveness::Tick::Stalled {
                    // It cannot act on anything we send; renewing for it would hold its run
                    // forever. Kill it and leave the run to the reclaimer (`settle`).
                    state.stalled = true;
                    stop_after_end(&myself, state, None).await;
                }
            }
            RunnerMsg::ChannelClosed => {
                state.channel_closed = true;
                if let Some(outcome) = state.ended_undrained.take() {
                    settle_ended(&myself, state, outcome).await;
                }
            }
            RunnerMsg::DrainTimeout => {
                if let Some(outcome) = state.ended_undrained.take() {
                    tracing::warn!(run_id = %state.args.run.run_id, "an ended runner's channel stayed open; settling it");
                    settle_ended(&myself, state, outcome).await;
                }
            }
            RunnerMsg::Overdue if state.claim_lost || state.finished || state.stalled => {}
            RunnerMsg::Overdue => {
                tracing::warn!(run_id = %state.args.run.run_id, "the running step passed its deadline and its runner did not end it; stopping the runner");
                state.stalled = true;
                stop_after_end(&myself, state, None).await;
            }
            RunnerMsg::RecordReady
                if state.ready_recorded || state.claim_lost || state.finished || state.stalled || state.settled => {}
            RunnerMsg::RecordReady => {
                if !messages::record_ready_alone(state).await {
                    // Another owner has the run: this runner must not write again.
                    state.claim_lost = true;
                    stop_after_end(&myself, state, None).await;
                }
            }
            RunnerMsg::RenewClaim if state.claim_lost || state.finished || state.stalled => {}
            RunnerMsg::RenewClaim => {
                let authority = state.args.authority.clone();
                // A claim's expiry is a fact about this runner's life, which a power loss
                // ends anyway: no fsync (`Durability::Kernel`); and no watcher reads it.
                let renewed = blocking::write_unwatched(&state.args.shared.store, move |tx| {
                    crate::store::claims::renew(tx, &authority, RUN_CLAIM_LEASE_MS)
                })
                .await;
                if let Err(StoreError::ClaimLost(lost)) = renewed {
                    // Another owner has the run: this runner must not write again.
                    tracing::info!(run_id = %lost.resource_id, reason = %lost.reason, "run claim lost at renewal; stopping the runner");
                    state.claim_lost = true;
                    stop_after_end(&myself, state, None).await;
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RunnerMsg>,
        event: SupervisionEvent,
        state: &mut RunnerState,
    ) -> Result<(), ActorProcessingErr> {
        let ended = match &event {
            SupervisionEvent::ActorTerminated(cell, _, _) | SupervisionEvent::ActorFailed(cell, _) => {
                cell.get_id() == state.process.get_id()
            }
            _ => false,
        };
        if !ended || state.settled {
            return Ok(());
        }
        // The process ended on its own (or missed its ready deadline); its actor told us how.
        // Read, not taken: a frame handled while the channel drains may stop the runner, and
        // `terminate` then finds the outcome there.
        let end = *lock(&state.end_slot);
        state.timed_out |= end.is_some_and(|end| end.cause == EndCause::ReadyDeadlineMissed);
        if end.is_some_and(|end| end.cause == EndCause::ReadyDeadlineMissed) {
            tracing::warn!(run_id = %state.args.run.run_id, "runner missed its ready deadline and was killed");
        }
        let outcome = end.and_then(|end| end.outcome);
        if state.channel_closed {
            settle_ended(&myself, state, outcome).await;
            return Ok(());
        }
        // Supervision events overtake queued frames: what the runner sent just before it
        // exited (an effect's settle) is handled first, then the end is settled.
        state.ended_undrained = Some(outcome);
        myself.send_after(Duration::from_millis(CHANNEL_DRAIN_MS), || RunnerMsg::DrainTimeout);
        Ok(())
    }
}

/// How long an ended runner's channel may stay open before its end is settled anyway (its
/// group was stopped, so only an escaped descendant could still hold the channel).
const CHANNEL_DRAIN_MS: u64 = 2_000;

/// Settle a runner whose process ended, once: its outcome recorded, the actor stopped.
async fn settle_ended(myself: &ActorRef<RunnerMsg>, state: &mut RunnerState, outcome: Option<ExitOutcome>) {
    state.ended_undrained = None;
    if state.settled {
        return;
    }
    settle(state, outcome, None).await;
    myself.stop(Some("runner exited".to_string()));
}

/// A new runner process in the run's project (the pool had none ready), spawned only now that
/// its launch is recorded; its identity is recorded right after.
async fn spawn_runner(args: &RunnerArgs) -> Result<RunnerProcess, ActorProcessingErr> {
    let project = (!args.run.project_path.is_empty()).then(|| PathBuf::from(&args.run.project_path));
    let (child, channel) =
        spawn_runner_with_channel(&args.runners.settings, &args.program, &args.runner_epoch, project)?;
    let (pid, identity, epoch) = (child.pid(), child.identity().to_string(), args.runner_epoch.clone());
    blocking::write_without_fsync(&args.shared.store, move |tx| {
        workers::record_process(tx, &epoch, pid, &identity)
    })
    .await?;
    Ok((child, channel, child_mark(&args.runner_epoch)))
}

/// Hand the process to a linked `ProcessActor`: it enforces the ready deadline (this actor
/// sends `Ready` once `runner.ready` is accepted), notices the exit, and stops the group.
async fn own_process(
    myself: &ActorRef<RunnerMsg>,
    args: &RunnerArgs,
    child: ProcessChild,
    end_slot: &Arc<Mutex<Option<ProcessEnd>>>,
) -> Result<ActorRef<ProcessMsg>, ActorProcessingErr> {
    let info = ProcessInfo {
        pid: child.pid(),
        process_group: child.pgid(),
    };
    let slot = Arc::clone(end_slot);
    let readiness = Readiness::Message {
        deadline: args.runners.settings.ready_timeout,
    };
    let config = ProcessConfig::adopt(child, readiness).on_exit(move |end| {
        *lock(&slot) = Some(end);
    });
    let (process, _) = Actor::spawn_linked(None, ProcessActor, config, myself.get_cell()).await?;
    args.details.set_processes([info]);
    Ok(process)
}

/// Stop the runner's whole group (SIGTERM, then SIGKILL after the grace); its exit status.
/// A stalled runner gets no grace: stopped or wedged, it cannot act on SIGTERM.
async fn terminate(state: &RunnerState) -> Option<ExitOutcome> {
    let grace = match state.stalled {
        true => Duration::ZERO,
        false => Duration::from_millis(RUNNER_GRACE_MS),
    };
    let wait = Some(supervisors::process_shutdown_wait(grace));
    match state
        .process
        .call(|reply| ProcessMsg::Terminate(grace, reply), wait)
        .await
    {
        Ok(ractor::rpc::CallResult::Success(outcome)) => outcome,
        // Its actor already stopped (the process ended): the end slot says how.
        _ => lock(&state.end_slot).and_then(|end| end.outcome),
    }
}

/// Stop the group, settle the runner's end, and stop this actor.
async fn stop_after_end(myself: &ActorRef<RunnerMsg>, state: &mut RunnerState, forced: Option<WorkerOutcome>) {
    let outcome = terminate(state).await;
    settle(state, outcome, forced).await;
    myself.stop(Some("runner stopped".to_string()));
}

/// Pause or cancel through this runner's claim, with the command receipt in the same
/// transaction.
async fn control_run(
    state: &RunnerState,
    control: RunControl,
    command: CommandRequest,
    expected: Option<i64>,
) -> StoreResult<CommandReceipt> {
    let authority = state.args.authority.clone();
    blocking::write(&state.args.shared.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let revision = match control {
                RunControl::Pause => runs::pause_claimed(tx, &authority, expected)?,
                RunControl::Cancel => runs::cancel_claimed(tx, &authority, expected)?,
                RunControl::Resume => return Err(invalid("a live run is not paused")),
            };
            let receipt = serde_json::json!({"runId": authority.resource_id, "revision": revision});
            Ok(commands::Accepted {
                revision: Some(revision),
                receipt,
            })
        })
    })
    .await
}

/// Hand the runner's frames to its actor, in order; at the channel's end say so (after the
/// last frame was handled: each hand-over waits for its answer).
async fn read_frames(read_half: socket::ReadHalf, runner: ActorRef<RunnerMsg>) {
    if hand_over_frames(read_half, &runner).await {
        let _ = runner.cast(RunnerMsg::ChannelClosed);
    }
}

/// True when the channel ended; false when the actor stopped reading (or is gone).
async fn hand_over_frames(read_half: socket::ReadHalf, runner: &ActorRef<RunnerMsg>) -> bool {
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let mut line = Vec::new();
    loop {
        let mut frames = Vec::new();
        // Wait for one frame, then take the complete frames already buffered behind it.
        loop {
            let frame = match read_line(&mut reader, &mut line).await {
                Ok(LineRead::Line) => std::mem::take(&mut line),
                // An oversized frame is a protocol violation: hand the runner a frame that fails.
                Ok(LineRead::TooLarge) => b"oversized\n".to_vec(),
                Ok(LineRead::Closed) | Err(_) if frames.is_empty() => return true,
                Ok(LineRead::Closed) | Err(_) => break,
            };
            frames.push(frame);
            if frames.len() >= PIPELINE_FRAMES_MAX || !reader.buffer().contains(&b'\n') {
                break;
            }
        }
        match runner.call(|reply| RunnerMsg::Frames(frames, reply), None).await {
            Ok(ractor::rpc::CallResult::Success(true)) => continue,
            _ => return false,
        }
    }
}
