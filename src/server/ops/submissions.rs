//! `interaction.submit` (an agent step's output) and `interaction.assistant` (its visible
//! reply): the submission is recorded as `validating` and the run queued; a supervised runner judges
//! it with the step's own checks. The response stays pending until that durable verdict and
//! its receipt are committed: `accepted`, or `rejected` with the checks' message. A retry
//! with the same key and payload waits for and returns the same outcome.
//!
//! Architecture Invariant: the server never judges a submission itself, and a command
//! receipt is stored only for a settled outcome (a retry never records a second candidate).

use std::time::Duration;

use serde_json::{Value, json};

use super::authority::require_coordinator;
use super::context::OpsContext;
use crate::protocol::Request;
use crate::server::answers::{Answer, answer_of, command_request, commit_receipt, rejected, run_id_of, stored_answer};
use crate::server::blocking;
use crate::store::commands::{self, CommandRequest};
use crate::store::interactions::{self, ClientValue, Submitted};
use crate::store::{StoreError, blobs};

/// How long a submission waits for its verdict before the client is told to retry.
pub const VERDICT_WAIT_MS: u64 = 120_000;
/// A submitted value, as canonical JSON.
pub const SUBMISSION_BYTES_MAX: usize = 256 * 1024;

/// `interaction.submit` (`payload.output`, optional `payload.requestId`).
pub async fn interaction_submit(ctx: &OpsContext, request: &Request) -> Answer {
    submit_for_verdict(ctx, request, "output", "agent").await
}

/// `interaction.assistant` (`payload.text`, optional `payload.requestId`): the settled visible
/// reply of the origin session for a pending assistant-message step. The runner checks it
/// against the step (non-empty, within its `maxChars`) like any submission.
pub async fn interaction_assistant(ctx: &OpsContext, request: &Request) -> Answer {
    if request
        .payload
        .get("text")
        .and_then(Value::as_str)
        .is_none_or(|text| text.trim().is_empty())
    {
        return Err(rejected(
            "invalidRequest",
            "interaction.assistant needs payload.text: the assistant's visible reply",
        ));
    }
    submit_for_verdict(ctx, request, "text", "assistant").await
}

async fn submit_for_verdict(ctx: &OpsContext, request: &Request, field: &str, kind: &'static str) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    require_coordinator(ctx, request, &run_id).await?;
    if let Some(stored) = stored_answer(&ctx.store, &command).await? {
        return Ok(stored);
    }
    let Some(value) = request.payload.get(field).cloned() else {
        return Err(rejected(
            "invalidRequest",
            &format!("{} needs payload.{field}", request.operation.as_str()),
        ));
    };
    let request_id = request
        .payload
        .get("requestId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let recorded = record(ctx, &command, &run_id, request_id, value, kind).await;
    let (submission_id, request_id) = match recorded {
        Ok(recorded) => recorded,
        // The run is busy (queued for or held by a runner checking another submission, or
        // continuing after one): not this command's final answer, so nothing is stored and a
        // retry may pass. An ended run's refusal is final and stored below.
        Err(err) if is_busy(&err) => {
            return Err(rejected(
                "runBusy",
                "the run is busy (a step is checking another submission, or the run is continuing); \
                 retry when its view shows the request pending again",
            ));
        }
        Err(err) => return store_refusal(ctx, command, err).await,
    };
    ctx.shared.wake_scheduler();
    match verdict(ctx, &submission_id).await {
        Verdict::Accepted(detail) => {
            let receipt = json!({"runId": run_id, "requestId": request_id, "submissionId": submission_id,
                                 "outcome": "accepted", "verdict": detail});
            commit_receipt(&ctx.store, command, receipt).await
        }
        Verdict::Rejected(message) => store_refusal(ctx, command, StoreError::SubmissionRejected { message }).await,
        Verdict::Pending => Err(rejected(
            "stillValidating",
            "the step is still checking the submission; its verdict will show in the run's view \
             (`pi-workflows run status`), and a retry with the same idempotency key returns it",
        )),
        Verdict::Unreadable(err) => Err(rejected(
            "unavailable",
            &format!("the verdict could not be read: {err}"),
        )),
    }
}

/// A refusal that only says the run is between states (a runner is on its way or holds it).
fn is_busy(err: &StoreError) -> bool {
    match err {
        StoreError::ClaimHeld { .. } => true,
        StoreError::InvalidTransition { run_status, .. } => matches!(run_status.as_str(), "queued" | "running"),
        _ => false,
    }
}

/// Record the submission (an exact retry finds the one recorded before).
async fn record(
    ctx: &OpsContext,
    command: &CommandRequest,
    run_id: &str,
    request_id: Option<String>,
    value: Value,
    kind: &'static str,
) -> Result<(String, String), StoreError> {
    let (command, run_id) = (command.clone(), run_id.to_string());
    blocking::write(&ctx.store, move |tx| {
        // A retry of a submission recorded before (its request may be settled by now): the
        // same submission, whatever is pending today.
        let submission_id = interactions::submission_id_of(&command.fingerprint);
        if let Some(request_id) = interactions::submission_request(tx.conn(), &submission_id)? {
            return Ok((submission_id, request_id));
        }
        let (request_id, submitted) = interactions::submit_value(
            tx,
            &ClientValue {
                run_id: &run_id,
                request_id: request_id.as_deref(),
                submission_id: &submission_id,
                idempotency_key: &command.idempotency_key,
                kind: Some(kind),
                value: &value,
                value_bytes_max: SUBMISSION_BYTES_MAX,
            },
            None,
        )?;
        let submission_id = match submitted {
            Submitted::Recorded { .. } => submission_id,
            Submitted::Adopted { submission_id } => submission_id,
        };
        Ok((submission_id, request_id))
    })
    .await
}

/// Store a refusal as this command's rejected receipt (a retry gets the same) and answer.
async fn store_refusal(ctx: &OpsContext, command: CommandRequest, err: StoreError) -> Answer {
    let stored = blocking::write(&ctx.store, move |tx| commands::run_command(tx, &command, |_| Err(err))).await;
    answer_of(stored)
}

enum Verdict {
    Accepted(Value),
    Rejected(String),
    Pending,
    Unreadable(StoreError),
}

/// Wait (woken by commits, bounded by [`VERDICT_WAIT_MS`]) until the submission settles.
async fn verdict(ctx: &OpsContext, submission_id: &str) -> Verdict {
    let mut commits = ctx.store.commits();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(VERDICT_WAIT_MS);
    loop {
        commits.borrow_and_update();
        let owned = submission_id.to_string();
        let read = blocking::read(&ctx.store, move |conn| {
            let Some((outcome, receipt_hash)) = interactions::submission_outcome(conn, &owned)? else {
                return Ok(None);
            };
            let detail = match receipt_hash.filter(|hash| crate::digest::is_sha256_hex(hash)) {
                Some(hash) => blobs::read_json(conn, &hash)?,
                None => None,
            };
            Ok(Some((outcome, detail)))
        })
        .await;
        match read {
            Err(err) => return Verdict::Unreadable(err),
            Ok(Some((outcome, detail))) if outcome == "accepted" => {
                return Verdict::Accepted(detail.unwrap_or(Value::Null));
            }
            Ok(Some((outcome, detail))) if outcome == "rejected" => {
                return Verdict::Rejected(rejection_message(detail));
            }
            Ok(_) => {}
        }
        if tokio::time::timeout_at(deadline, commits.changed()).await.is_err() || ctx.shared.stop_requested().is_some()
        {
            return Verdict::Pending;
        }
    }
}

/// The checks' message from a stored verdict (bounded by the error limit downstream).
fn rejection_message(detail: Option<Value>) -> String {
    let detail = detail.unwrap_or(Value::Null);
    let message = detail
        .get("message")
        .or_else(|| detail.get("error").and_then(|error| error.get("message")))
        .and_then(Value::as_str);
    match message {
        Some(message) => message.to_string(),
        None if detail.is_null() => "the step's checks refused it".to_string(),
        None => detail.to_string(),
    }
}
