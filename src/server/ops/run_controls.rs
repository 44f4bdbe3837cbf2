//! `run.pause`, `run.resume`, `run.cancel`: the change and its receipt commit together. A
//! live runner's run changes through that runner's claim (the runner actor stops its process
//! group after the commit); a run without a live runner here changes directly.
//!
//! Architecture Invariant: controls never signal a process themselves; they ask the run's
//! runner actor, which owns it.

use std::time::Duration;

use serde_json::json;

use super::context::OpsContext;
use crate::protocol::Request;
use crate::server::answers::{Answer, answer_of, command_request, expected_revision_of, rejected, run_id_of};
use crate::server::blocking;
use crate::server::runners::mailbox::{RunControl, RunnerMsg};
use crate::store::commands::{self, Accepted, CommandReceipt, CommandRequest};
use crate::store::runs;
use crate::store::{StoreError, StoreResult, WriteTx};

/// `run.pause`, `run.resume`, `run.cancel`: the change and its receipt commit together; a
/// live runner's run changes through that runner's claim, and its process group is stopped
/// after the commit.
pub async fn run_control(ctx: &OpsContext, request: &Request, control: RunControl) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let expected = expected_revision_of(request);
    // A run being launched holds a live claim before its runner actor is registered: wait
    // for the runner instead of refusing (a claim held elsewhere is not a durable refusal).
    let deadline = tokio::time::Instant::now() + Duration::from_millis(LAUNCH_WAIT_MS);
    loop {
        if control != RunControl::Resume
            && let Some(runner) = ctx.runners.runner_for(&run_id)
        {
            match control_through_runner(&runner, control, command.clone(), expected).await {
                Some(answer) => return answer,
                // The runner was ending (its run paused, resumed and not yet relaunched) and
                // stopped before it took the control: nothing was committed through it, and
                // a retry of the command adopts whatever was. Look again.
                None if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(LAUNCH_POLL_MS)).await;
                    continue;
                }
                None => {
                    return Err(rejected(
                        "unavailable",
                        "the run's runner stopped without an answer; retry",
                    ));
                }
            }
        }
        let stored = control_without_runner(ctx, command.clone(), control, expected).await;
        match stored {
            Err(StoreError::ClaimHeld { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(LAUNCH_POLL_MS)).await;
            }
            stored => {
                // A resumed run is queued: let the scheduler admit it now.
                ctx.shared.wake_scheduler();
                return answer_of(stored);
            }
        }
    }
}

/// How long a control waits for a launching run's runner to register, or an ending one to go.
const LAUNCH_WAIT_MS: u64 = 5_000;
const LAUNCH_POLL_MS: u64 = 25;

/// The control's answer through the run's live runner; `None` when the runner stopped before
/// it answered (gone already, or its mailbox dropped with the control in it).
async fn control_through_runner(
    runner: &ractor::ActorRef<RunnerMsg>,
    control: RunControl,
    command: CommandRequest,
    expected: Option<i64>,
) -> Option<Answer> {
    let stored = runner
        .call(|reply| RunnerMsg::Control(control, command, expected, reply), None)
        .await
        .ok()?;
    match stored {
        ractor::rpc::CallResult::Success(stored) => Some(answer_of(stored)),
        _ => None,
    }
}

async fn control_without_runner(
    ctx: &OpsContext,
    command: CommandRequest,
    control: RunControl,
    expected: Option<i64>,
) -> StoreResult<CommandReceipt> {
    let server_id = ctx.shared.server_id.clone();
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
