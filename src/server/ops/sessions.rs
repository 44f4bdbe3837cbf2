//! The origin-session operations (docs/SESSIONS.md): `view.session.window` (one read),
//! `workflowMessage.reportBranch`, `workflowTurn.report` and `sessionView.clearTerminal`.
//! Reports are fenced by the session's active coordinator epoch and are idempotent by
//! themselves (a repeat finds the state it made), so they keep no command receipt; polling a
//! session changes nothing durable.
//!
//! Architecture Invariant: the rules of messages and turns live in the store
//! (`messages::report_branch`, `turns::report_turn`); this file checks authority and shapes.

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::{JsonObject, Outcome, Request, ResponseError};
use crate::server::answers::{Answer, read_refusal, rejected, session_id_of, to_object};
use crate::server::blocking;
use crate::server::coordinators::Fenced;
use crate::server::views::sessions::{build_session_view, render_for};
use crate::store::StoreError;
use crate::store::messages::{self, BranchReport};
use crate::store::turns::{self, TurnOutcome, TurnPhase};

/// Entries one branch report may name, at most (the window holds at most 64 messages; a
/// report names each at most once).
pub const BRANCH_ENTRIES_MAX: usize = 256;
/// The longest Pi entry or turn ID accepted (Pi's entry IDs are 8 hex digits).
pub const PI_ID_BYTES_MAX: usize = 256;

type Refusal = (Outcome, ResponseError);

/// `view.session.window`: the session view now, rendered for `epoch` when given.
pub async fn view_session_window(ctx: &OpsContext, request: &Request) -> Answer {
    let session_id = session_id_of(request)?;
    let epoch = request.payload.get("epoch").and_then(Value::as_u64);
    let view = build_session_view(&ctx.views, &session_id)
        .await
        .map_err(read_refusal)?;
    let rendered = render_for(&view, epoch, ctx.coordinators.active_epoch(&session_id));
    let mut receipt = JsonObject::new();
    receipt.insert("view".into(), rendered);
    Ok((Outcome::Accepted, receipt, None))
}

/// `workflowMessage.reportBranch`: what the coordinator found on Pi's active branch.
pub async fn report_branch(ctx: &OpsContext, request: &Request) -> Answer {
    let session_id = coordinated_session(ctx, request)?;
    let found = found_entries(&request.payload)?;
    let is_idle = required_bool(&request.payload, "isIdle")?;
    let has_pending_messages = required_bool(&request.payload, "hasPendingMessages")?;
    let outcome = blocking::write(&ctx.store, move |tx| {
        messages::report_branch(
            tx,
            &BranchReport {
                session_id: &session_id,
                is_idle,
                has_pending_messages,
                found: &found,
            },
        )
    })
    .await
    .map_err(write_refusal)?;
    // A re-presented step may need no runner, but a failed attempt does: let it continue.
    ctx.shared.wake_scheduler();
    Ok((Outcome::Accepted, to_object(&outcome)?, None))
}

/// `workflowTurn.report`: an exact Pi model turn started or ended.
pub async fn report_turn(ctx: &OpsContext, request: &Request) -> Answer {
    let session_id = coordinated_session(ctx, request)?;
    let turn_id = pi_id(&request.payload, "turnId")?;
    let phase = turn_phase(&request.payload)?;
    let receipt = blocking::write(&ctx.store, move |tx| {
        turns::report_turn(tx, &session_id, &turn_id, &phase)
    })
    .await
    .map_err(write_refusal)?;
    ctx.shared.wake_scheduler();
    Ok((Outcome::Accepted, to_object(&receipt)?, None))
}

/// `sessionView.clearTerminal`: the retained terminal view leaves the session view.
pub async fn clear_terminal(ctx: &OpsContext, request: &Request) -> Answer {
    let session_id = session_id_of(request)?;
    let cleared = blocking::write(&ctx.store, move |tx| messages::clear_terminal(tx, &session_id))
        .await
        .map_err(write_refusal)?;
    let mut receipt = JsonObject::new();
    receipt.insert("cleared".into(), json!(cleared));
    Ok((Outcome::Accepted, receipt, None))
}

/// The session a report names, once its `epoch` is the session's active coordinator.
fn coordinated_session(ctx: &OpsContext, request: &Request) -> Result<String, Refusal> {
    let session_id = session_id_of(request)?;
    let operation = request.operation.as_str();
    let epoch = request
        .payload
        .get("epoch")
        .and_then(Value::as_u64)
        .ok_or_else(|| rejected("invalidRequest", &format!("{operation} needs payload.epoch")))?;
    match ctx.coordinators.check(&session_id, epoch) {
        Ok(()) => Ok(session_id),
        Err(Fenced::Replaced) => Err(rejected(
            "coordinatorFenced",
            "another connection coordinates this session now; this one must stop sending and reporting",
        )),
        Err(Fenced::NoCoordinator) => Err(rejected(
            "coordinatorFenced",
            "this session has no coordinator; watch it with coordinator: true first",
        )),
    }
}

fn required_bool(payload: &JsonObject, key: &str) -> Result<bool, Refusal> {
    payload
        .get(key)
        .and_then(Value::as_bool)
        .ok_or_else(|| rejected("invalidRequest", &format!("payload.{key} must be true or false")))
}

/// A Pi-made ID (an entry or turn ID): printable, bounded.
fn pi_id(payload: &JsonObject, key: &str) -> Result<String, Refusal> {
    let id = payload.get(key).and_then(Value::as_str).unwrap_or_default();
    if id.is_empty() || id.len() > PI_ID_BYTES_MAX || id.chars().any(char::is_control) {
        return Err(rejected(
            "invalidRequest",
            &format!("payload.{key} must be 1 to {PI_ID_BYTES_MAX} bytes of printable text"),
        ));
    }
    Ok(id.to_string())
}

/// `found: [{workflowMessageId, piEntryId}]`, bounded.
fn found_entries(payload: &JsonObject) -> Result<Vec<(String, String)>, Refusal> {
    let entries = payload.get("found").and_then(Value::as_array).ok_or_else(|| {
        rejected(
            "invalidRequest",
            "payload.found must be an array of {workflowMessageId, piEntryId}",
        )
    })?;
    if entries.len() > BRANCH_ENTRIES_MAX {
        return Err(rejected(
            "invalidRequest",
            &format!("payload.found names at most {BRANCH_ENTRIES_MAX} entries"),
        ));
    }
    entries
        .iter()
        .map(|entry| {
            let entry = entry
                .as_object()
                .ok_or_else(|| rejected("invalidRequest", "each found entry is an object"))?;
            Ok((pi_id(entry, "workflowMessageId")?, pi_id(entry, "piEntryId")?))
        })
        .collect()
}

fn turn_phase(payload: &JsonObject) -> Result<TurnPhase, Refusal> {
    match payload.get("phase").and_then(Value::as_str) {
        Some("start") => Ok(TurnPhase::Start {
            workflow_message_id: pi_id(payload, "workflowMessageId")?,
        }),
        Some("end") => {
            let outcome = payload
                .get("outcome")
                .and_then(Value::as_str)
                .and_then(TurnOutcome::from_wire)
                .ok_or_else(|| rejected("invalidRequest", "payload.outcome must be completed, aborted or error"))?;
            let response_entry_id = match payload.get("responseEntryId") {
                None | Some(Value::Null) => None,
                Some(_) => Some(pi_id(payload, "responseEntryId")?),
            };
            Ok(TurnPhase::End {
                outcome,
                response_entry_id,
            })
        }
        _ => Err(rejected("invalidRequest", "payload.phase must be start or end")),
    }
}

/// A store refusal as the client's answer: a domain refusal keeps its code; anything else is
/// a failure a retry may get past.
fn write_refusal(err: StoreError) -> Refusal {
    match err.refusal_code() {
        Some("notFound") => (
            Outcome::NotFound,
            ResponseError::new("notFound", &err.to_string()).unwrap_or_else(|_| rejected("notFound", "not found").1),
        ),
        Some(code) => rejected(code, &err.to_string()),
        None => rejected(
            "unavailable",
            &format!("the report could not be recorded: {err}; retry"),
        ),
    }
}
