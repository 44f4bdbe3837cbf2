//! `interaction.submit` (an agent step's output) and `decision.answer` (a protected decision):
//! the submission is recorded as `validating` and the run queued; a supervised runner judges
//! it with the step's own checks. The response stays pending until that durable verdict and
//! its receipt are committed: `accepted`, or `rejected` with the checks' message. A retry
//! with the same key and payload waits for and returns the same outcome.
//!
//! Architecture Invariant: the server never judges a submission itself, and a command
//! receipt is stored only for a settled outcome (a retry never records a second candidate).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::blocking;
use super::context::ServerContext;
use super::handlers::{Answer, answer_of, command_request, commit_receipt, rejected, run_id_of, stored_answer};
use crate::protocol::Request;
use crate::store::commands::{self, CommandRequest};
use crate::store::interactions::{self, ClientValue, Submitted};
use crate::store::{StoreError, blobs};

/// How long a submission waits for its verdict before the client is told to retry.
pub const VERDICT_WAIT_MS: u64 = 120_000;
/// A submitted value, as canonical JSON.
pub const SUBMISSION_BYTES_MAX: usize = 256 * 1024;

/// `interaction.submit` (`payload.output`, optional `payload.requestId`).
pub async fn interaction_submit(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    submit_for_verdict(ctx, request, "output", "agent").await
}

/// `interaction.assistant` (`payload.text`, optional `payload.requestId`): the settled visible
/// reply of the origin session for a pending assistant-message step. The runner checks it
/// against the step (non-empty, within its `maxChars`) like any submission.
pub async fn interaction_assistant(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
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

/// `decision.answer` (`payload.answer`, optional `payload.requestId`).
pub async fn decision_answer(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    submit_for_verdict(ctx, request, "answer", "decision").await
}

async fn submit_for_verdict(ctx: &Arc<ServerContext>, request: &Request, field: &str, kind: &'static str) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    if let Some(stored) = stored_answer(ctx, &command).await? {
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
        Err(err) => return store_refusal(ctx, command, err).await,
    };
    ctx.wake_scheduler();
    match verdict(ctx, &submission_id).await {
        Verdict::Accepted(detail) => {
            let receipt = json!({"runId": run_id, "requestId": request_id, "submissionId": submission_id,
                                 "outcome": "accepted", "verdict": detail});
            commit_receipt(ctx, command, receipt).await
        }
        Verdict::Rejected(message) => store_refusal(ctx, command, StoreError::SubmissionRejected { message }).await,
        Verdict::Pending => Err(rejected(
            "stillValidating",
            "the step is still checking the submission; retry with the same idempotency key to get its outcome",
        )),
        Verdict::Unreadable(err) => Err(rejected(
            "unavailable",
            &format!("the verdict could not be read: {err}"),
        )),
    }
}

/// Record the submission (an exact retry finds the one recorded before).
async fn record(
    ctx: &Arc<ServerContext>,
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
async fn store_refusal(ctx: &Arc<ServerContext>, command: CommandRequest, err: StoreError) -> Answer {
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
async fn verdict(ctx: &Arc<ServerContext>, submission_id: &str) -> Verdict {
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
        if tokio::time::timeout_at(deadline, commits.changed()).await.is_err() || ctx.stop_requested().is_some() {
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

/// Update data, as canonical JSON.
pub const UPDATE_DATA_BYTES_MAX: usize = 64 * 1024;
/// Updates one request may send per second, sustained, and in a burst.
pub const UPDATES_PER_SECOND: f64 = 20.0;
pub const UPDATES_BURST: f64 = 100.0;
/// Requests whose update rate is tracked at once (the oldest is forgotten first).
const RATE_TRACKED_MAX: usize = 256;

/// Per-request token buckets for `interaction.update`.
#[derive(Default)]
pub struct UpdateLimiter {
    buckets: std::sync::Mutex<std::collections::HashMap<String, (f64, std::time::Instant)>>,
}

impl UpdateLimiter {
    /// Take one token for `request_id`; false when it sends faster than allowed.
    fn admit(&self, request_id: &str) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = std::time::Instant::now();
        if buckets.len() >= RATE_TRACKED_MAX && !buckets.contains_key(request_id) {
            let oldest = buckets.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                buckets.remove(&oldest);
            }
        }
        let (tokens, at) = buckets.entry(request_id.to_string()).or_insert((UPDATES_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * UPDATES_PER_SECOND).min(UPDATES_BURST);
        *at = now;
        if *tokens < 1.0 {
            return false;
        }
        *tokens -= 1.0;
        true
    }
}

/// `interaction.update` (`payload.update: {type, key, data}`, optional `payload.requestId`):
/// progress of a pending agent step; the latest value per type and key is kept and shown in
/// the run view. Updates never route or complete a node.
pub async fn interaction_update(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let update = request.payload.get("update").cloned().unwrap_or(Value::Null);
    let (update_type, update_key) = update_names(&update)?;
    let data = update.get("data").cloned().unwrap_or(Value::Null);
    let named = request
        .payload
        .get("requestId")
        .and_then(Value::as_str)
        .map(str::to_string);
    // The limit belongs to the real pending request, so naming it or not (or naming one
    // that does not exist) never buys a second allowance.
    let request_id = pending_agent_request(ctx, &run_id, named).await?;
    let limiter_key = format!("{run_id}/{request_id}");
    if !ctx.update_limiter.admit(&limiter_key) {
        return Err(rejected(
            "rateLimited",
            &format!(
                "at most {UPDATES_PER_SECOND} updates a second (bursts of {UPDATES_BURST}); send the latest value later"
            ),
        ));
    }
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let data_hash = blobs::put_json(tx, &data, UPDATE_DATA_BYTES_MAX)?;
            let seq = interactions::record_update(tx, &run_id, &request_id, &update_type, &update_key, &data_hash)?;
            Ok(commands::Accepted {
                revision: None,
                receipt: json!({"runId": run_id, "requestId": request_id, "type": update_type, "key": update_key, "seq": seq}),
            })
        })
    })
    .await;
    answer_of(stored)
}

/// The pending agent request an update is for: the one named, or the run's pending one.
async fn pending_agent_request(
    ctx: &Arc<ServerContext>,
    run_id: &str,
    named: Option<String>,
) -> Result<String, (crate::protocol::Outcome, crate::protocol::ResponseError)> {
    let owned = run_id.to_string();
    let pending = blocking::read(&ctx.store, move |conn| {
        crate::store::run_view::run_facts(conn, &owned)?;
        crate::store::run_view::pending_request_brief(conn, &owned)
    })
    .await
    .map_err(super::views::read_refusal)?;
    match pending {
        Some((request_id, kind)) if kind == "agent" && named.as_ref().is_none_or(|id| *id == request_id) => {
            Ok(request_id)
        }
        _ => Err(rejected(
            "invalidRequest",
            &format!("run {run_id} has no pending agent step with that request; updates go to the step that waits"),
        )),
    }
}

/// `type` like `progress` or `command-batch.item`, `key` like `overall` or `tests/unit`.
fn update_names(
    update: &Value,
) -> Result<(String, String), (crate::protocol::Outcome, crate::protocol::ResponseError)> {
    let text = |name: &str| update.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
    let (update_type, update_key) = (text("type"), text("key"));
    let type_ok = update_type.len() <= 64
        && update_type.starts_with(|c: char| c.is_ascii_lowercase())
        && update_type
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let key_ok = update_key.len() <= 128
        && update_key.starts_with(|c: char| c.is_ascii_alphanumeric())
        && update_key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:/-".contains(c));
    if !type_ok || !key_ok {
        return Err(rejected(
            "invalidRequest",
            "update needs type ([a-z][a-z0-9.-]{0,63}), key ([A-Za-z0-9][A-Za-z0-9._:/-]{0,127}) and data",
        ));
    }
    Ok((update_type, update_key))
}
