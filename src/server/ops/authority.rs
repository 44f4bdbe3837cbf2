//! The origin-session coordinator authority a model-side operation carries
//! (`payload.coordinator: {sessionId, epoch}`, docs/SESSIONS.md "Authority"): for an
//! interactive run, `interaction.submit`, `interaction.assistant` and `interaction.update`
//! must come from the run's own origin session through its active coordinator epoch. Checked
//! before any receipt lookup or change; a headless run needs none.

use serde_json::Value;

use super::context::OpsContext;
use crate::protocol::{Outcome, Request, ResponseError};
use crate::server::answers::{read_refusal, rejected};
use crate::server::blocking;
use crate::server::coordinators::Fenced;
use crate::store::messages;

/// Refused unless `request` may act for `run_id`'s origin session now.
pub async fn require_coordinator(
    ctx: &OpsContext,
    request: &Request,
    run_id: &str,
) -> Result<(), (Outcome, ResponseError)> {
    let owned = run_id.to_string();
    let origin = blocking::read(&ctx.store, move |conn| messages::origin_session_of(conn, &owned))
        .await
        .map_err(read_refusal)?;
    let Some(origin) = origin else {
        return Ok(());
    };
    let operation = request.operation.as_str();
    let coordinator = request.payload.get("coordinator").and_then(Value::as_object);
    let session = coordinator.and_then(|c| c.get("sessionId")).and_then(Value::as_str);
    let epoch = coordinator.and_then(|c| c.get("epoch")).and_then(Value::as_u64);
    let (Some(session), Some(epoch)) = (session, epoch) else {
        return Err(rejected(
            "coordinatorRequired",
            &format!(
                "{operation} for an interactive run comes from its Pi session: send payload.coordinator {{sessionId, epoch}}"
            ),
        ));
    };
    if session != origin {
        return Err(rejected(
            "wrongSession",
            "this run belongs to another Pi session; only its own session may answer its steps",
        ));
    }
    ctx.coordinators.check(session, epoch).map_err(|fenced| {
        let why = match fenced {
            Fenced::Replaced => "another connection coordinates this session now",
            Fenced::NoCoordinator => "this session has no coordinator (watch it with coordinator: true)",
        };
        rejected("coordinatorFenced", &format!("{why}; nothing was changed"))
    })
}
