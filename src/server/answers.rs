//! What a handler answers a client: the `Answer` type, the bounded refusals, the durable
//! identity of a state-changing request, and the client answer of a stored receipt. Shared
//! by the front door's operations and the subscriptions of a connection.
//!
//! Architecture Invariant: imports no sibling but `shared` (for `StopReason`) and
//! `blocking`; every refusal it builds is bounded (`ResponseError::new` checks it).

use std::sync::Arc;

use serde_json::Value;

use super::blocking;
use super::shared::StopReason;
use crate::protocol::{ClientSchema, JsonObject, Outcome, Request, Response, ResponseError, request_fingerprint};
use crate::store::commands::{self, CommandOutcome, CommandReceipt, CommandRequest};
use crate::store::{Store, StoreError, StoreResult};

pub struct Handled {
    pub response: Response,
    /// Set when the server must stop after this response is written.
    pub stop_after: Option<StopReason>,
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
pub type Answer = Result<(Outcome, JsonObject, Option<StopReason>), (Outcome, ResponseError)>;

/// The run a request addresses; a clear refusal when it names none.
pub fn run_id_of(request: &Request) -> Result<String, (Outcome, ResponseError)> {
    request
        .run_id
        .as_ref()
        .map(|id| id.as_str().to_string())
        .ok_or_else(|| rejected("missingRunId", &format!("{} needs a runId", request.operation.as_str())))
}

/// The origin session a session operation names (`payload.sessionId`): present and an ID by
/// the protocol's rules.
pub fn session_id_of(request: &Request) -> Result<String, (Outcome, ResponseError)> {
    let operation = request.operation.as_str();
    let id = request
        .payload
        .get("sessionId")
        .and_then(Value::as_str)
        .ok_or_else(|| rejected("invalidRequest", &format!("{operation} needs payload.sessionId")))?;
    crate::protocol::OpaqueId::new(id.to_string())
        .map(|id| id.as_str().to_string())
        .map_err(|err| rejected("invalidRequest", &format!("payload.sessionId is invalid: {err}")))
}

/// The run revision a request expects, if it names one.
pub fn expected_revision_of(request: &Request) -> Option<i64> {
    request.expected_revision.map(|revision| revision.get() as i64)
}

/// The durable identity of a state-changing request.
pub fn command_request(request: &Request) -> Result<CommandRequest, (Outcome, ResponseError)> {
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
pub fn answer_of(stored: StoreResult<CommandReceipt>) -> Answer {
    // `diskFull` while the disk is full, else `unavailable`: either way a retry may pass.
    let stored =
        stored.map_err(|err| rejected(err.failure_code(), &format!("the command could not be recorded: {err}")))?;
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

pub fn to_object(value: &impl serde::Serialize) -> Result<JsonObject, (Outcome, ResponseError)> {
    match serde_json::to_value(value) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(rejected("internal", "the answer could not be encoded")),
    }
}

/// A rejected answer with a bounded error.
pub fn rejected(code: &str, message: &str) -> (Outcome, ResponseError) {
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
pub async fn stored_answer(
    store: &Arc<Store>,
    command: &CommandRequest,
) -> Result<Option<(Outcome, JsonObject, Option<StopReason>)>, (Outcome, ResponseError)> {
    let owned = command.clone();
    let stored = blocking::write(store, move |tx| commands::existing_receipt(tx, &owned)).await;
    match stored {
        Ok(None) => Ok(None),
        Ok(Some(receipt)) => answer_of(Ok(receipt)).map(Some),
        Err(err) => Err(rejected(
            err.failure_code(),
            &format!("the command could not be checked: {err}"),
        )),
    }
}

/// Store an accepted receipt for `command` (adopted if it was stored meanwhile) and answer.
pub async fn commit_receipt(store: &Arc<Store>, command: CommandRequest, receipt: Value) -> Answer {
    let stored = blocking::write(store, move |tx| {
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

/// A `limit` from the payload, `default` when absent; 1 to `max`.
pub fn page_limit(payload: &JsonObject, default: usize, max: usize) -> Result<usize, (Outcome, ResponseError)> {
    match payload.get("limit") {
        None => Ok(default),
        Some(limit) => match limit.as_u64() {
            Some(limit) if (1..=max as u64).contains(&limit) => Ok(limit as usize),
            _ => Err(rejected("invalidRequest", &format!("limit must be 1 to {max}"))),
        },
    }
}

/// The refusal of a failed read: an unknown run is `notFound`, anything else `unavailable`.
pub fn read_refusal(err: StoreError) -> (Outcome, ResponseError) {
    match err {
        StoreError::RunNotFound { run_id } => (
            Outcome::NotFound,
            ResponseError::new(
                "notFound",
                &format!("no run {run_id}; list runs with `pi-workflows runs`"),
            )
            .unwrap_or_else(|_| rejected("notFound", "no such run").1),
        ),
        other => rejected("unavailable", &format!("the run could not be read: {other}")),
    }
}
