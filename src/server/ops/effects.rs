//! `effect.list` and `effect.recover`: an operator's reviewed recovery of an ambiguous
//! effect (spec "Effects and retry safety"). Listing shows what, where and when — never a
//! request's content. Recovery is a receipted command fenced by the run revision and the
//! effect's own state: of two concurrent reviews one wins, the other is refused.

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::{JsonObject, Outcome, Request, ResponseError};
use crate::server::answers::{
    Answer, answer_of, command_request, expected_revision_of, read_refusal, rejected, run_id_of,
};
use crate::server::blocking;
use crate::server::runners::apply::VALUE_BYTES_MAX;
use crate::store::blobs::put_json;
use crate::store::commands::{self, Accepted};
use crate::store::effects::{self, ReviewResolution};
use crate::store::{run_summary, runs};

/// An operator's note on a `failed` review, at most (bytes).
pub const REVIEW_NOTE_BYTES_MAX: usize = 500;

/// `effect.list`: the run's revision and its effects, ambiguous ones first.
pub async fn effect_list(ctx: &OpsContext, request: &Request) -> Answer {
    let run_id = run_id_of(request)?;
    let read = blocking::read(&ctx.store, move |conn| {
        let summary = run_summary::run_summary(conn, &run_id)?;
        let listed = effects::list_for_review(conn, &run_id)?;
        Ok((summary, listed))
    })
    .await;
    let (summary, listed) = read.map_err(read_refusal)?;
    let ambiguous = listed.iter().filter(|effect| effect.status == "ambiguous").count();
    let mut receipt = JsonObject::new();
    receipt.insert("runId".into(), json!(summary.run_id));
    receipt.insert("revision".into(), json!(summary.revision));
    receipt.insert("ambiguous".into(), json!(ambiguous));
    receipt.insert("effects".into(), serde_json::to_value(listed).unwrap_or(Value::Null));
    Ok((Outcome::Accepted, receipt, None))
}

/// What `effect.recover` asks, checked before anything is written.
struct Recovery {
    effect_id: String,
    resolution: ReviewResolution,
    /// `applied`: the node's output (default null); `failed`: the stored error.
    value: Option<Value>,
}

fn recovery_of(payload: &JsonObject) -> Result<Recovery, (Outcome, ResponseError)> {
    let effect_id = payload
        .get("effectId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 4096)
        .ok_or_else(|| {
            rejected(
                "invalidRequest",
                "effect.recover needs payload.effectId (from effect.list)",
            )
        })?
        .to_string();
    let resolution = payload
        .get("resolution")
        .and_then(Value::as_str)
        .and_then(ReviewResolution::from_wire)
        .ok_or_else(|| rejected("invalidRequest", "payload.resolution must be applied, retry or failed"))?;
    let value = match resolution {
        ReviewResolution::Applied => Some(payload.get("result").cloned().unwrap_or(Value::Null)),
        ReviewResolution::Retry => {
            if payload.contains_key("result") {
                return Err(rejected("invalidRequest", "a retry takes no result"));
            }
            None
        }
        ReviewResolution::Failed => Some(failure_of(payload.get("note"))?),
    };
    Ok(Recovery {
        effect_id,
        resolution,
        value,
    })
}

/// The error a `failed` review stores: the node fails with it (code `effectRejected`).
fn failure_of(note: Option<&Value>) -> Result<Value, (Outcome, ResponseError)> {
    let note = match note {
        None | Some(Value::Null) => None,
        Some(Value::String(note)) if note.len() <= REVIEW_NOTE_BYTES_MAX && !note.chars().any(char::is_control) => {
            Some(note.as_str())
        }
        Some(_) => {
            return Err(rejected(
                "invalidRequest",
                &format!("payload.note must be printable text of at most {REVIEW_NOTE_BYTES_MAX} bytes"),
            ));
        }
    };
    let message = match note {
        Some(note) => format!("an operator reviewed it as failed: {note}"),
        None => "an operator reviewed it as failed".to_string(),
    };
    Ok(json!({"error": {"code": "effectReviewedFailed", "message": message}}))
}

/// `effect.recover`: settle one ambiguous effect (`applied`, `retry` or `failed`); the run
/// stays parked, and a resume continues it once nothing is ambiguous.
pub async fn effect_recover(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let recovery = recovery_of(&request.payload)?;
    let expected = expected_revision_of(request);
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let result_hash = match &recovery.value {
                Some(value) => Some(put_json(tx, value, VALUE_BYTES_MAX)?),
                None => None,
            };
            let revision = runs::review_effect(
                tx,
                &run_id,
                expected,
                &recovery.effect_id,
                recovery.resolution,
                result_hash.as_deref(),
            )?;
            let remaining = effects::ambiguous_count(tx.conn(), &run_id)?;
            Ok(Accepted {
                revision: Some(revision),
                receipt: json!({
                    "runId": run_id, "revision": revision, "effectId": recovery.effect_id,
                    "resolution": recovery.resolution, "ambiguousRemaining": remaining,
                }),
            })
        })
    })
    .await;
    answer_of(stored)
}
