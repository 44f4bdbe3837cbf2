//! One runner actor per active run generation (a temporary child of `runners`). It owns the
//! runner process (own process group) and the server's end of its private channel (fd 3 in
//! the child), and turns the runner's fenced proposals into protected writes.
//!
//! Architecture Invariant: the generation and runner epoch of a message are checked before
//! its payload is read; a stale runner gets one `claimLost` answer and is stopped.
//!
//! Architecture Invariant: a runner exit is not a run failure by itself. When a runner ends
//! with the run still running under its claim, the run parks: `runnerNoProgress` when the
//! revision never advanced after ready (not relaunched automatically), else `workerCrashed`.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Map, Value};
use supervisors::process::{ExitOutcome, ProcessChild, ProcessSpec, RlimitResource, spawn};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::task::AbortHandle;

use super::blocking;
use super::context::ServerContext;
use super::frames::{LineRead, read_line};
use super::runner_apply::invalid;
use super::runner_messages;
use crate::digest::sha256_hex;
use crate::protocol::encode_frame;
use crate::protocol::runner::{LAUNCH_SCHEMA, Launch, RUNNER_CHANNEL_FD, RUNNER_PROTOCOL_VERSION};
use crate::store::claims::{ClaimAuthority, RUN_CLAIM_LEASE_MS};
use crate::store::commands::{self, CommandOutcome, CommandReceipt, CommandRequest};
use crate::store::effects;
use crate::store::runs::{self, ParkReason, RunStatus};
use crate::store::workers::{self, Admissible, NewWorker, WorkerOutcome};
use crate::store::{StoreError, StoreResult, WriteTx};

/// SIGTERM-to-SIGKILL grace of a runner's process group.
pub const RUNNER_GRACE_MS: u64 = 5_000;
/// Captured runner output per stream.
pub const RUNNER_CAPTURE_BYTES_MAX: u64 = 1024 * 1024;
const EXIT_CHECK_MS: u64 = 50;
/// Environment a runner inherits (its shell steps and headless Pi need a normal user
/// environment); everything else of the server's environment is withheld.
const RUNNER_ENV_ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PI_CODING_AGENT_DIR",
    "PI_OFFLINE",
    "PI_WORKFLOWS_PI_BIN",
    "PI_WORKFLOWS_TEST_SCRIPT",
];
/// Model-provider credentials for headless agent steps (`OPENAI_API_KEY`, …) pass through
/// by this suffix; they are never logged.
const RUNNER_ENV_ALLOWED_SUFFIX: &str = "_API_KEY";

pub struct Runner;

#[derive(Clone)]
pub struct RunnerArgs {
    pub ctx: Arc<ServerContext>,
    pub run: Admissible,
    pub authority: ClaimAuthority,
    pub runner_epoch: String,
    /// The runner program and its arguments.
    pub program: (PathBuf, Vec<std::ffi::OsString>),
}

/// A client control that changes a live runner's run through its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunControl {
    Pause,
    Resume,
    Cancel,
}

pub enum RunnerMsg {
    /// Lines from the runner, in order (more than one when it pipelines); the reply says
    /// whether to keep reading.
    Frames(Vec<Vec<u8>>, RpcReplyPort<bool>),
    /// Pause or cancel the run as a durable client command, then stop the runner's group.
    Control(
        RunControl,
        CommandRequest,
        Option<i64>,
        RpcReplyPort<StoreResult<CommandReceipt>>,
    ),
    ReadyDeadline,
    CheckExit,
    /// Renew the run claim while the runner works; never waits for a scheduler slot.
    RenewClaim,
}

/// The run claim is renewed after a third of its life, so two renewals can fail before
/// it expires.
const CLAIM_RENEW_MS: u64 = (RUN_CLAIM_LEASE_MS / 3) as u64;

pub struct RunnerState {
    pub(super) args: RunnerArgs,
    pub(super) child: ProcessChild,
    pub(super) writer: OwnedWriteHalf,
    pub(super) ready: bool,
    pub(super) revision_at_ready: Option<i64>,
    /// The store refused our claim: another owner has the run; leave it alone.
    pub(super) claim_lost: bool,
    /// The runner sent a stale or foreign stamp and was told `claimLost`.
    pub(super) runner_stale: bool,
    pub(super) timed_out: bool,
    pub(super) finished: bool,
    /// Content offered to this runner (a run state above the frame limit): the only
    /// content `content.read` may return.
    pub(super) advertised: Vec<crate::store::blobs::BlobRef>,
    /// The newest settings version this runner knows (from its run state, its start fields
    /// and answers); an answer carries a newer one. `None`: the run declares no settings.
    pub(super) settings_known: Option<i64>,
    pub(super) tasks: Vec<AbortHandle>,
}

impl Actor for Runner {
    type Msg = RunnerMsg;
    type State = RunnerState;
    type Arguments = RunnerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RunnerMsg>,
        args: RunnerArgs,
    ) -> Result<RunnerState, ActorProcessingErr> {
        let launch = launch_envelope(&args);
        let launch_bytes = encode_frame(&launch)?;
        let worker = NewWorker {
            runner_epoch: args.runner_epoch.clone(),
            run_id: args.run.run_id.clone(),
            generation: args.authority.generation,
            server_epoch: args.ctx.epoch,
            launch_envelope_hash: sha256_hex(&launch_bytes),
        };
        blocking::write(&args.ctx.store, move |tx| workers::record_launch(tx, &worker)).await?;
        // A warm runner (already started, waiting for its launch) saves a Node start-up.
        let (child, parent_end) = match args.ctx.runner_pool.take() {
            Some(warm) => warm.assign(&args.ctx.runner_settings.logs_dir, &args.runner_epoch),
            None => {
                let project = (!args.run.project_path.is_empty()).then(|| PathBuf::from(&args.run.project_path));
                spawn_with_channel(&args.ctx.runner_settings, &args.program, &args.runner_epoch, project)?
            }
        };
        let (epoch, pid, identity) = (args.runner_epoch.clone(), child.pid(), child.identity().to_string());
        blocking::write(&args.ctx.store, move |tx| {
            workers::record_process(tx, &epoch, pid, &identity)
        })
        .await?;
        parent_end.set_nonblocking(true)?;
        let (read_half, mut writer) = tokio::net::UnixStream::from_std(parent_end)?.into_split();
        writer.write_all(&launch_bytes).await?;
        let reader = tokio::spawn(read_frames(read_half, myself.clone())).abort_handle();
        let ready_deadline = myself.send_after(args.ctx.runner_settings.ready_timeout, || RunnerMsg::ReadyDeadline);
        let exit_checks = myself.send_interval(Duration::from_millis(EXIT_CHECK_MS), || RunnerMsg::CheckExit);
        let renewals = myself.send_interval(Duration::from_millis(CLAIM_RENEW_MS), || RunnerMsg::RenewClaim);
        args.ctx.runners.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        args.ctx.register_runner(&args.run.run_id, myself.clone());
        tracing::info!(run_id = %args.run.run_id, generation = args.authority.generation, pid, "runner started");
        Ok(RunnerState {
            args,
            child,
            writer,
            ready: false,
            revision_at_ready: None,
            claim_lost: false,
            runner_stale: false,
            timed_out: false,
            finished: false,
            advertised: Vec::new(),
            settings_known: None,
            tasks: vec![
                reader,
                ready_deadline.abort_handle(),
                exit_checks.abort_handle(),
                renewals.abort_handle(),
            ],
        })
    }

    async fn post_stop(&self, myself: ActorRef<RunnerMsg>, state: &mut RunnerState) -> Result<(), ActorProcessingErr> {
        state.args.ctx.unregister_runner(&state.args.run.run_id, &myself);
        for task in state.tasks.drain(..) {
            task.abort();
        }
        if !state.child.is_reaped() {
            // Stopped from outside (server shutdown, cancellation): stop the whole group.
            let termination = state.child.terminate(Duration::from_millis(RUNNER_GRACE_MS)).await;
            let outcome = termination.map(|t| t.outcome).ok();
            settle(state, outcome, Some(WorkerOutcome::Cancelled)).await;
        }
        let still_running = state.args.ctx.runners.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) - 1;
        state.args.ctx.wake_scheduler();
        if still_running == 0 {
            // Idle now: start the next warm runner while nothing competes for the CPU, and
            // let a due retention sweep run.
            super::runner_pool::refill_soon(&state.args.ctx, Duration::ZERO);
            state.args.ctx.request_sweep();
        }
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
                let keep_reading = runner_messages::on_frames(state, lines).await;
                let _ = reply.send(keep_reading);
                if !keep_reading {
                    // A protocol violation or a stale runner: stop its whole group now.
                    let _ = state.child.terminate(Duration::from_millis(RUNNER_GRACE_MS)).await;
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
                    let termination = state.child.terminate(Duration::from_millis(RUNNER_GRACE_MS)).await;
                    settle(
                        state,
                        termination.map(|t| t.outcome).ok(),
                        Some(WorkerOutcome::Cancelled),
                    )
                    .await;
                    myself.stop(Some("run controlled".to_string()));
                }
            }
            RunnerMsg::ReadyDeadline if !state.ready => {
                tracing::warn!(run_id = %state.args.run.run_id, "runner missed its ready deadline; killing it");
                state.timed_out = true;
                state.child.kill().await?;
            }
            RunnerMsg::ReadyDeadline => {}
            RunnerMsg::RenewClaim if state.claim_lost || state.finished => {}
            RunnerMsg::RenewClaim => {
                let authority = state.args.authority.clone();
                let renewed = blocking::write(&state.args.ctx.store, move |tx| {
                    crate::store::claims::renew(tx, &authority, RUN_CLAIM_LEASE_MS)
                })
                .await;
                if let Err(StoreError::ClaimLost(lost)) = renewed {
                    // Another owner has the run: this runner must not write again.
                    tracing::info!(run_id = %lost.resource_id, reason = %lost.reason, "run claim lost at renewal; stopping the runner");
                    state.claim_lost = true;
                    state.child.terminate(Duration::from_millis(RUNNER_GRACE_MS)).await?;
                }
            }
            RunnerMsg::CheckExit => {
                let Some(outcome) = state.child.try_exit()? else {
                    return Ok(());
                };
                // Kill stragglers of the group and reap the leader by its exact pid.
                state.child.terminate(Duration::ZERO).await?;
                settle(state, Some(outcome), None).await;
                myself.stop(Some("runner exited".to_string()));
            }
        }
        Ok(())
    }
}

fn launch_envelope(args: &RunnerArgs) -> Launch {
    Launch {
        schema: LAUNCH_SCHEMA.to_string(),
        run_id: args.run.run_id.clone(),
        generation: args.authority.generation as u64,
        runner_epoch: args.runner_epoch.clone(),
        project_path: args.run.project_path.clone(),
        // Stored canonical by the run's creator; an unreadable value sends `{}` (no file source).
        workflow_source: serde_json::from_str(&args.run.workflow_source_json).unwrap_or(Value::Object(Map::new())),
        definition_digest: args.run.definition_digest.clone(),
        input_hash: args.run.input_hash.clone(),
        protocol_version: RUNNER_PROTOCOL_VERSION,
    }
}

/// Start a child (runner or resolver) with a private channel on its fd 3; returns the child
/// and the server's end of the channel.
pub(super) fn spawn_with_channel(
    settings: &super::context::RunnerSettings,
    program: &(PathBuf, Vec<std::ffi::OsString>),
    log_stem: &str,
    cwd: Option<PathBuf>,
) -> Result<(ProcessChild, StdUnixStream), ActorProcessingErr> {
    let (parent_end, child_end) = StdUnixStream::pair()?;
    let spec = process_spec(settings, program, log_stem, cwd, child_end.into())?;
    Ok((spawn(spec)?, parent_end))
}

/// The spec of a runner process: its own group, fd 3 channel, bounded captures named
/// `<log_stem>.out|.err`, no core dumps, an allow-listed environment. `cwd` is the
/// project when known (a warm runner changes there itself once launched).
fn process_spec(
    settings: &super::context::RunnerSettings,
    program: &(PathBuf, Vec<std::ffi::OsString>),
    log_stem: &str,
    cwd: Option<PathBuf>,
    channel: std::os::fd::OwnedFd,
) -> std::io::Result<ProcessSpec> {
    let logs = &settings.logs_dir;
    let mut spec = ProcessSpec::new(&program.0)
        .args(program.1.iter().cloned())
        .env_clear(true)
        .stdout_to(logs.join(format!("{log_stem}.out")))
        .stderr_to(logs.join(format!("{log_stem}.err")))
        .capture_bytes_max(RUNNER_CAPTURE_BYTES_MAX)
        .grace(Duration::from_millis(RUNNER_GRACE_MS))
        // A core dump could hold workflow data: none, ever.
        .rlimit(RlimitResource::Core, Some(0), Some(0))
        .inherit_fd(channel, RUNNER_CHANNEL_FD);
    if let Some(dir) = cwd.filter(|dir| dir.is_dir()) {
        spec = spec.cwd(dir);
    }
    spec = spec.env(crate::package::CACHE_DIR_ENV, &settings.cache_dir);
    for name in RUNNER_ENV_ALLOWED {
        if let Some(value) = std::env::var_os(name) {
            spec = spec.env(*name, value);
        }
    }
    for (name, value) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(|name| name.ends_with(RUNNER_ENV_ALLOWED_SUFFIX))
        {
            spec = spec.env(name, value);
        }
    }
    Ok(spec)
}

/// Frames handed to the actor at once: a runner that pipelines proposals gets them applied
/// in one group commit (bounded, so one runner cannot hold the writer for long).
pub const PIPELINE_FRAMES_MAX: usize = 32;

async fn read_frames(read_half: tokio::net::unix::OwnedReadHalf, runner: ActorRef<RunnerMsg>) {
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
                Ok(LineRead::Closed) | Err(_) if frames.is_empty() => return,
                Ok(LineRead::Closed) | Err(_) => break,
            };
            frames.push(frame);
            if frames.len() >= PIPELINE_FRAMES_MAX || !reader.buffer().contains(&b'\n') {
                break;
            }
        }
        match runner.call(|reply| RunnerMsg::Frames(frames, reply), None).await {
            Ok(ractor::rpc::CallResult::Success(true)) => continue,
            _ => return,
        }
    }
}

/// After the runner process ended: record its one outcome and decide the run's state.
async fn settle(state: &mut RunnerState, exit: Option<ExitOutcome>, forced: Option<WorkerOutcome>) {
    let outcome = forced.unwrap_or(if state.claim_lost || state.runner_stale {
        WorkerOutcome::ClaimLost
    } else if state.timed_out {
        WorkerOutcome::TimedOut
    } else if exit.is_some_and(ExitOutcome::success) {
        WorkerOutcome::Exited
    } else {
        WorkerOutcome::Crashed
    });
    let leave_alone = state.claim_lost || state.finished;
    let park = match state.revision_at_ready {
        _ if leave_alone => None,
        // Stopped by the server (shutdown, cancellation): a durable boundary, resumable.
        _ if forced == Some(WorkerOutcome::Cancelled) => Some((i64::MAX, ParkReason::Boundary)),
        Some(ready) => Some((ready, ParkReason::WorkerCrashed)),
        None => Some((i64::MIN, ParkReason::RunnerNoProgress)),
    };
    // Children the runner registered die first: until the run is parked and the epoch
    // recorded, no other runner can be admitted for it, so none can overlap with them.
    reap_registered(&state.args.ctx.store, Some(state.args.runner_epoch.clone())).await;
    let (authority, epoch) = (state.args.authority.clone(), state.args.runner_epoch.clone());
    let (code, signal) = (exit.and_then(ExitOutcome::code), exit.and_then(ExitOutcome::signal));
    let settled = blocking::write(&state.args.ctx.store, move |tx| {
        if let Some((revision_at_ready, reason)) = park {
            park_if_still_running(tx, &authority, revision_at_ready, reason)?;
        }
        workers::record_outcome(tx, &epoch, outcome, code, signal)
    })
    .await;
    match settled {
        Ok(_) => tracing::info!(run_id = %state.args.run.run_id, outcome = outcome.as_str(), "runner ended"),
        Err(err) => tracing::warn!(run_id = %state.args.run.run_id, error = %err, "runner end was not recorded"),
    }
}

/// Stop the process groups a runner registered and did not unregister (its runner ended
/// first), each only while its recorded start identity still matches; `None` reaps those
/// of every runner epoch (startup recovery, when no runner of this server is alive yet).
pub async fn reap_registered(store: &Arc<crate::store::Store>, runner_epoch: Option<String>) {
    use supervisors::process::{ProcessSignal, StartIdentity, signal_group_if_identity_matches};
    let attached = blocking::read(store, move |conn| {
        crate::store::processes::attached(conn, runner_epoch.as_deref())
    })
    .await;
    let Ok(attached) = attached.inspect_err(|err| tracing::warn!(error = %err, "registered processes unreadable"))
    else {
        return;
    };
    if attached.is_empty() {
        return;
    }
    for process in &attached {
        match process.start_identity.parse::<StartIdentity>() {
            Ok(identity) => match signal_group_if_identity_matches(&identity, ProcessSignal::Kill) {
                Ok(outcome) => {
                    tracing::info!(pid = process.pid, ?outcome, "stopped a registered process group");
                    // Reparented to this server (a subreaper) when its runner died: reap it.
                    supervisors::process::reap_group(identity.pid).await;
                }
                Err(err) => tracing::warn!(pid = process.pid, error = %err, "registered process group not stopped"),
            },
            Err(_) => tracing::warn!(pid = process.pid, "registered process has a malformed start identity"),
        }
    }
    let reaped = blocking::write(store, move |tx| crate::store::processes::mark_reaped(tx, &attached)).await;
    if let Err(err) = reaped {
        tracing::warn!(error = %err, "reaped processes not recorded");
    }
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
    blocking::write(&state.args.ctx.store, move |tx| {
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

/// A launch that failed before its runner could run (e.g. the program is missing): the run
/// must not stay `starting`, so it parks for an explicit resume.
pub async fn abandon_launch(ctx: &Arc<ServerContext>, authority: ClaimAuthority, runner_epoch: String) {
    let parked = blocking::write(&ctx.store, move |tx| {
        park_if_still_running(tx, &authority, i64::MIN, ParkReason::RunnerNoProgress)?;
        workers::record_outcome(tx, &runner_epoch, WorkerOutcome::Crashed, None, None)
    })
    .await;
    if let Err(err) = parked {
        tracing::warn!(error = %err, "a failed launch could not be parked");
    }
}

/// Park a run its runner left running: `runnerNoProgress` when the revision did not advance
/// after ready (or ready never came), else `workerCrashed`. A lost claim changes nothing.
fn park_if_still_running(
    tx: &WriteTx<'_>,
    authority: &ClaimAuthority,
    revision_at_ready: i64,
    reason: ParkReason,
) -> StoreResult<()> {
    let run = runs::read_run(tx, &authority.resource_id)?;
    if run.status != RunStatus::Running || !run.queue.holds_claim() {
        return Ok(());
    }
    // A validating runner that ended without a verdict: the request stays ready for a
    // corrected retry; the run waits again instead of parking.
    match crate::store::interactions::abandon_validation(tx, authority) {
        Ok(true) | Err(StoreError::ClaimLost(_)) => return Ok(()),
        Ok(false) => {}
        Err(err) => return Err(err),
    }
    let no_progress = reason != ParkReason::Boundary && run.revision <= revision_at_ready;
    let reason = if no_progress {
        ParkReason::RunnerNoProgress
    } else {
        reason
    };
    // An effect the runner was applying when it ended cannot be proved either way.
    let applying = effects::applying_count(tx, &authority.resource_id)?;
    let reason = if applying > 0 {
        ParkReason::EffectAmbiguous
    } else {
        reason
    };
    match runs::park_run(tx, authority, None, reason) {
        Ok(_) => {
            effects::mark_applying_ambiguous(tx, &authority.resource_id)?;
            Ok(())
        }
        // Another owner has the run now; its effects are not ours to judge.
        Err(StoreError::ClaimLost(_)) => Ok(()),
        Err(err) => Err(err),
    }
}
