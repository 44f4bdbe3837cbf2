//! Request handling of the front door: `server.status` and `server.stop` today. Every other
//! operation is refused with a clear `unsupportedOperation` error until its issue lands.

use std::sync::Arc;

use serde_json::{Value, json};

use super::blocking;
use super::context::{ServerContext, StopReason};
use super::status;
use crate::protocol::{
    ClientSchema, JsonObject, Operation, Outcome, Request, Response, ResponseError, request_fingerprint,
};
use crate::store::commands::{self, Accepted, CommandOutcome, CommandRequest};

pub struct Handled {
    pub response: Response,
    /// Set when the server must stop after this response is written.
    pub stop_after: Option<StopReason>,
}

pub async fn handle_request(ctx: &Arc<ServerContext>, request: Request) -> Handled {
    let result = match request.operation {
        Operation::ServerStatus => server_status(ctx, &request).await,
        Operation::ServerStop => server_stop(ctx, &request).await,
        other => Err(rejected(
            "unsupportedOperation",
            &format!("{} is not available in this server version yet", other.as_str()),
        )),
    };
    match result {
        Ok((outcome, receipt, stop_after)) => Handled {
            response: response(&request, outcome, Some(receipt), None),
            stop_after,
        },
        Err((outcome, error)) => Handled {
            response: response(&request, outcome, None, Some(error)),
            stop_after: None,
        },
    }
}

/// Success: outcome, receipt, and whether to stop afterwards. Failure: outcome and error.
type Answer = Result<(Outcome, JsonObject, Option<StopReason>), (Outcome, ResponseError)>;

async fn server_status(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let with_tree = request.payload.get("tree").and_then(Value::as_bool).unwrap_or(false);
    let status = status::collect(ctx, with_tree)
        .await
        .map_err(|err| rejected("unavailable", &format!("status could not be read: {err}")))?;
    Ok((Outcome::Accepted, to_object(&status)?, None))
}

/// Stop after answering; the receipt commits first so a retry adopts it.
async fn server_stop(ctx: &Arc<ServerContext>, request: &Request) -> Answer {
    let key = request.idempotency_key.as_ref().ok_or_else(|| {
        rejected(
            "missingIdempotencyKey",
            "server.stop needs an idempotencyKey; retry with one",
        )
    })?;
    let fingerprint = request_fingerprint(request).map_err(|err| rejected("invalidRequest", &err.to_string()))?;
    let command = CommandRequest {
        request_id: request.request_id.as_str().to_string(),
        client_id: request.client_id.as_str().to_string(),
        operation: request.operation.as_str().to_string(),
        idempotency_key: key.as_str().to_string(),
        run_id: None,
        fingerprint,
    };
    let epoch = ctx.epoch;
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |_| {
            Ok(Accepted {
                revision: None,
                receipt: json!({"stopping": true, "epoch": epoch}),
            })
        })
    })
    .await
    .map_err(|err| rejected("unavailable", &format!("the stop could not be recorded: {err}")))?;
    let receipt = match stored.receipt {
        Some(Value::Object(receipt)) => receipt,
        _ => JsonObject::new(),
    };
    match stored.outcome {
        CommandOutcome::Accepted => Ok((Outcome::Accepted, receipt, Some(StopReason::Requested))),
        CommandOutcome::Adopted => Ok((Outcome::Adopted, receipt, Some(StopReason::Requested))),
        CommandOutcome::Rejected | CommandOutcome::Conflict => {
            let outcome = if stored.outcome == CommandOutcome::Conflict {
                Outcome::Conflict
            } else {
                Outcome::Rejected
            };
            let error = stored.error.map_or_else(
                || ResponseError::new("conflict", "this idempotency key names another request"),
                |error| ResponseError::new(&error.code, &error.message),
            );
            let error = error.unwrap_or_else(|_| rejected("internal", "the stored error is malformed").1);
            Err((outcome, error))
        }
    }
}

fn to_object(value: &impl serde::Serialize) -> Result<JsonObject, (Outcome, ResponseError)> {
    match serde_json::to_value(value) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(rejected("internal", "the answer could not be encoded")),
    }
}

/// A rejected answer with a bounded error.
fn rejected(code: &str, message: &str) -> (Outcome, ResponseError) {
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
