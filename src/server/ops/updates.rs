//! `interaction.update`: progress of a pending agent step. The latest value per type and key
//! is kept and shown in the run view; updates never route or complete a node.

use serde_json::{Value, json};

use super::authority::require_coordinator;
use super::context::OpsContext;
use super::rate_limit::{UPDATES_BURST, UPDATES_PER_SECOND};
use crate::protocol::Request;
use crate::server::answers::{Answer, answer_of, command_request, read_refusal, rejected, run_id_of};
use crate::server::blocking;
use crate::store::commands;
use crate::store::{blobs, interactions};

/// Update data, as canonical JSON.
pub const UPDATE_DATA_BYTES_MAX: usize = 64 * 1024;

/// `interaction.update` (`payload.update: {type, key, data}`, optional `payload.requestId`):
/// progress of a pending agent step; the latest value per type and key is kept and shown in
/// the run view. Updates never route or complete a node.
pub async fn interaction_update(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    require_coordinator(ctx, request, &run_id).await?;
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
    ctx: &OpsContext,
    run_id: &str,
    named: Option<String>,
) -> Result<String, (crate::protocol::Outcome, crate::protocol::ResponseError)> {
    let owned = run_id.to_string();
    let pending = blocking::read(&ctx.store, move |conn| {
        crate::store::run_view::run_facts(conn, &owned)?;
        crate::store::run_view::pending_request_brief(conn, &owned)
    })
    .await
    .map_err(read_refusal)?;
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
