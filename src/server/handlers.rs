//! Request handling of the front door: `server.status`, `server.stop`, `run.pause`,
//! `run.resume`, `run.cancel`, and (in `run_commands`) `run.start`, `run.restart`,
//! `checkpoint.answer`, `run.status`, `run.list`, and (in their modules) submissions, settings,
//! follow-ups, views and state maintenance. Every other operation is refused with a
//! clear `unsupportedOperation` error until its issue lands.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::blocking;
use super::context::{ServerContext, StopReason};
use super::follow_ups;
use super::run_commands;
use super::runner::{RunControl, RunnerMsg};
use super::settings;
use super::state_ops;
use super::status;
use super::submissions;
use super::views;
use crate::protocol::{
    ClientSchema, JsonObject, Operation, Outcome, Request, Response, ResponseError, request_fingerprint,
};
use crate::store::commands::{self, Accepted, CommandOutcome, CommandReceipt, CommandRequest};
use crate::store::runs;
use crate::store::{StoreError, StoreResult, WriteTx};

pub struct Handled {
    pub response: Response,
    /// Set when the server must stop after this response is written.
    pub stop_after: Option<StopReason>,
}

pub async fn handle_request(ctx: &Arc<ServerContext>, request: Request) -> Handled {
    let result = match request.operation {
        Operation::ServerStatus => server_status(ctx, &request).await,
        Operation::ServerStop => server_stop(ctx, &request).await,
        Operation::RunPause => run_control(ctx, &request, RunControl::Pause).await,
        Operation::RunResume => run_control(ctx, &request, RunControl::Resume).await,
        Operation::RunCancel => run_control(ctx, &request, RunControl::Cancel).await,
        Operation::RunStart => run_commands::run_start(ctx, &request).await,
        Operation::RunRestart => run_commands::run_restart(ctx, &request).await,
        Operation::CheckpointAnswer => run_commands::checkpoint_answer(ctx, &request).await,
        Operation::InteractionSubmit => submissions::interaction_submit(ctx, &request).await,
        Operation::DecisionAnswer => submissions::decision_answer(ctx, &request).await,
        Operation::InteractionAssistant => submissions::interaction_assistant(ctx, &request).await,
        Operation::InteractionUpdate => submissions::interaction_update(ctx, &request).await,
        Operation::FollowUpQueue => follow_ups::queue(ctx, &request).await,
        Operation::FollowUpRemove => follow_ups::remove(ctx, &request).await,
        Operation::RunChangeSettings => settings::change_settings(ctx, &request).await,
        Operation::RunStatus => run_commands::run_status(ctx, &request).await,
        Operation::RunList => run_commands::run_list(ctx, &request).await,
        Operation::ViewRunGet => views::view_run_get(ctx, &request).await,
        Operation::ViewPage => views::view_page(ctx, &request).await,
        Operation::ViewContent => views::view_content(ctx, &request).await,
        Operation::ViewRunsPage => views::view_runs_page(ctx, &request).await,
        Operation::StateStatus => state_ops::state_status(ctx, &request).await,
        Operation::StateVerify => state_ops::state_verify(ctx, &request).await,
        Operation::StateBackup => state_ops::state_backup(ctx, &request).await,
        Operation::StatePrune => state_ops::state_prune(ctx, &request).await,
        other => Err(rejected(
            "unsupportedOperation",
            &format!("{} is not available in this server version yet", other.as_str()),
        )),
    };
    handled(&request, result)
}

/// The response to `request` for a handler's answer.
pub fn handled(request: &Request, result: Answer) -> Handled {
    match result {
        Ok((outcome, receipt, stop_after)) => Handled {
            response: response(request, outcome, Some(receipt), None),
            stop_after,
        },
        Err((outcome, error)) => Handled {
            response: response(request, outcome, None, Some(error)),
            stop_after: None,
        },
    }
}

/// Success: outcome, receipt, and whether to stop afterwards. Failure: outcome and error.
pub(super) type Answer = Result<(Outcome, JsonObject, Option<StopReason>), (Outcome, ResponseError)>;

async fn server_status(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let with_tree = request.payload.get("tree").and_then(Value::as_bool).unwrap_or(false);
    let status = status::collect(ctx, with_tree)
        .await
        .map_err(|err| rejected("unavailable", &format!("status could not be read: {err}")))?;
    Ok((Outcome::Accepted, to_object(&status)?, None))
}

/// Stop after answering; the receipt commits first so a retry adopts it.
async fn server_stop(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let command = command_request(request)?;
    let epoch = ctx.epoch;
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |_| {
            Ok(Accepted {
                revision: None,
                receipt: json!({"stopping": true, "epoch": epoch}),
            })
        })
    })
    .await;
    let (outcome, receipt, _) = answer_of(stored)?;
    Ok((outcome, receipt, Some(StopReason::Requested)))
}

/// `run.pause`, `run.resume`, `run.cancel`: the change and its receipt commit together; a
/// live runner's run changes through that runner's claim, and its process group is stopped
/// after the commit.
async fn run_control(ctx: &Arc<ServerContext>, request: &Request, control: RunControl) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let expected = expected_revision_of(request);
    // A run being launched holds a live claim before its runner actor is registered: wait
    // for the runner instead of refusing (a claim held elsewhere is not a durable refusal).
    let deadline = tokio::time::Instant::now() + Duration::from_millis(LAUNCH_WAIT_MS);
    loop {
        if control != RunControl::Resume
            && let Some(runner) = ctx.runner_for(&run_id)
        {
            return control_through_runner(&runner, control, command, expected).await;
        }
        let stored = control_without_runner(ctx, command.clone(), control, expected).await;
        match stored {
            Err(StoreError::ClaimHeld { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(LAUNCH_POLL_MS)).await;
            }
            stored => {
                // A resumed run is queued: let the scheduler admit it now.
                ctx.wake_scheduler();
                return answer_of(stored);
            }
        }
    }
}

/// How long a control waits for a launching run's runner to register.
const LAUNCH_WAIT_MS: u64 = 5_000;
const LAUNCH_POLL_MS: u64 = 25;

async fn control_through_runner(
    runner: &ractor::ActorRef<RunnerMsg>,
    control: RunControl,
    command: CommandRequest,
    expected: Option<i64>,
) -> Answer {
    let stored = runner
        .call(|reply| RunnerMsg::Control(control, command, expected, reply), None)
        .await
        .map_err(|_| rejected("unavailable", "the run's runner stopped; retry"))?;
    match stored {
        ractor::rpc::CallResult::Success(stored) => answer_of(stored),
        _ => Err(rejected("unavailable", "the run's runner did not answer; retry")),
    }
}

async fn control_without_runner(
    ctx: &Arc<ServerContext>,
    command: CommandRequest,
    control: RunControl,
    expected: Option<i64>,
) -> StoreResult<CommandReceipt> {
    let server_id = ctx.server_id.clone();
    blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let run_id = command.run_id.clone().unwrap_or_default();
            let revision = control_unclaimed(tx, &run_id, control, expected, &server_id)?;
            Ok(Accepted {
                revision: Some(revision),
                receipt: json!({"runId": run_id, "revision": revision}),
            })
        })
    })
    .await
}

/// A control on a run without a live runner here: unclaimed work, or (cancel only) a
/// running row whose claim expired, which first takes a new control claim.
fn control_unclaimed(
    tx: &WriteTx<'_>,
    run_id: &str,
    control: RunControl,
    expected: Option<i64>,
    server_id: &str,
) -> StoreResult<i64> {
    match control {
        RunControl::Resume => runs::resume_run(tx, run_id, expected),
        RunControl::Pause => runs::pause_unclaimed(tx, run_id, expected),
        RunControl::Cancel => match runs::cancel_unclaimed(tx, run_id, expected) {
            Err(StoreError::ClaimHeld { .. }) => runs::cancel_expired(tx, run_id, server_id, expected),
            other => other,
        },
    }
}

/// The run a request addresses; a clear refusal when it names none.
pub(super) fn run_id_of(request: &Request) -> Result<String, (Outcome, ResponseError)> {
    request
        .run_id
        .as_ref()
        .map(|id| id.as_str().to_string())
        .ok_or_else(|| rejected("missingRunId", &format!("{} needs a runId", request.operation.as_str())))
}

/// The run revision a request expects, if it names one.
pub(super) fn expected_revision_of(request: &Request) -> Option<i64> {
    request.expected_revision.map(|revision| revision.get() as i64)
}

/// The durable identity of a state-changing request.
pub(super) fn command_request(request: &Request) -> Result<CommandRequest, (Outcome, ResponseError)> {
    let operation = request.operation.as_str();
    let key = request.idempotency_key.as_ref().ok_or_else(|| {
        rejected(
            "missingIdempotencyKey",
            &format!("{operation} needs an idempotencyKey; retry with one"),
        )
    })?;
    let fingerprint = request_fingerprint(request).map_err(|err| rejected("invalidRequest", &err.to_string()))?;
    Ok(CommandRequest {
        request_id: request.request_id.as_str().to_string(),
        client_id: request.client_id.as_str().to_string(),
        operation: operation.to_string(),
        idempotency_key: key.as_str().to_string(),
        run_id: request.run_id.as_ref().map(|id| id.as_str().to_string()),
        fingerprint,
    })
}

/// The client answer of a stored command receipt.
pub(super) fn answer_of(stored: StoreResult<CommandReceipt>) -> Answer {
    let stored = stored.map_err(|err| rejected("unavailable", &format!("the command could not be recorded: {err}")))?;
    let receipt = match stored.receipt {
        Some(Value::Object(receipt)) => receipt,
        _ => JsonObject::new(),
    };
    let error = || {
        let error = stored.error.as_ref().map_or_else(
            || ResponseError::new("conflict", "this idempotency key names another request"),
            |error| ResponseError::new(&error.code, &error.message),
        );
        error.unwrap_or_else(|_| rejected("internal", "the stored error is malformed").1)
    };
    match stored.outcome {
        CommandOutcome::Accepted => Ok((Outcome::Accepted, receipt, None)),
        CommandOutcome::Adopted => Ok((Outcome::Adopted, receipt, None)),
        CommandOutcome::Conflict => Err((Outcome::Conflict, error())),
        CommandOutcome::Rejected => {
            let outcome = match stored.error.as_ref().map(|error| error.code.as_str()) {
                Some("notFound") => Outcome::NotFound,
                Some("claimLost") => Outcome::ClaimLost,
                _ => Outcome::Rejected,
            };
            Err((outcome, error()))
        }
    }
}

pub(super) fn to_object(value: &impl serde::Serialize) -> Result<JsonObject, (Outcome, ResponseError)> {
    match serde_json::to_value(value) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(rejected("internal", "the answer could not be encoded")),
    }
}

/// A rejected answer with a bounded error.
pub(super) fn rejected(code: &str, message: &str) -> (Outcome, ResponseError) {
    let error = ResponseError::new(code, message).unwrap_or_else(|_| ResponseError {
        code: "internal".to_string(),
        message: "internal error".to_string(),
    });
    (Outcome::Rejected, error)
}

fn response(
    request: &Request,
    outcome: Outcome,
    receipt: Option<JsonObject>,
    error: Option<ResponseError>,
) -> Response {
    Response {
        schema: ClientSchema::V1,
        request_id: request.request_id.clone(),
        outcome,
        revision: None,
        receipt,
        error,
    }
}

/// The stored answer of a command already run under this identity, for commands whose
/// effect happens before their receipt (a backup, a submission awaiting its verdict).
pub(super) async fn stored_answer(
    ctx: &Arc<ServerContext>,
    command: &CommandRequest,
) -> Result<Option<(Outcome, JsonObject, Option<StopReason>)>, (Outcome, ResponseError)> {
    let owned = command.clone();
    let stored = blocking::write(&ctx.store, move |tx| commands::existing_receipt(tx, &owned)).await;
    match stored {
        Ok(None) => Ok(None),
        Ok(Some(receipt)) => answer_of(Ok(receipt)).map(Some),
        Err(err) => Err(rejected(
            "unavailable",
            &format!("the command could not be checked: {err}"),
        )),
    }
}

/// Store an accepted receipt for `command` (adopted if it was stored meanwhile) and answer.
pub(super) async fn commit_receipt(ctx: &Arc<ServerContext>, command: CommandRequest, receipt: Value) -> Answer {
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |_| {
            Ok(commands::Accepted {
                revision: None,
                receipt,
            })
        })
    })
    .await;
    answer_of(stored)
}
