//! `followUp.queue` (`payload.prompt`) and `followUp.remove` (`payload.followUpId`): prompts
//! an interactive run's origin Pi session gets as normal turns after the run completed.
//! Delivery is the origin-session coordinator's (with the Pi extension); these commands
//! only record and withdraw them, each with its receipt.

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::Request;
use crate::server::answers::{Answer, answer_of, command_request, rejected, run_id_of};
use crate::server::blocking;
use crate::store::commands::{self, Accepted};
use crate::store::{blobs, messages};

/// `followUp.queue`: record the prompt; answers its `followUpId`.
pub async fn queue(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let prompt = request
        .payload
        .get("prompt")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if prompt.trim().is_empty() || prompt.len() > messages::FOLLOW_UP_PROMPT_BYTES_MAX {
        return Err(rejected(
            "invalidRequest",
            &format!(
                "prompt must be 1 to {} bytes of text",
                messages::FOLLOW_UP_PROMPT_BYTES_MAX
            ),
        ));
    }
    // Derived from the durable request: a retry names the same follow-up.
    let follow_up_id = format!("follow-up-{}", &command.fingerprint[..40]);
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let prompt_hash = blobs::put_json(
                tx,
                &json!({ "prompt": prompt }),
                messages::FOLLOW_UP_PROMPT_BYTES_MAX * 2,
            )?;
            messages::queue_follow_up(tx, &run_id, &follow_up_id, &prompt_hash)?;
            Ok(Accepted {
                revision: None,
                receipt: json!({ "runId": run_id, "followUpId": follow_up_id }),
            })
        })
    })
    .await;
    answer_of(stored)
}

/// `followUp.remove`: withdraw a pending follow-up.
pub async fn remove(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let run_id = run_id_of(request)?;
    let follow_up_id = request
        .payload
        .get("followUpId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !follow_up_id.starts_with("follow-up-") || follow_up_id.len() != "follow-up-".len() + 40 {
        return Err(rejected(
            "invalidRequest",
            "followUpId must be the follow-up-<40 hex> ID that followUp.queue answered",
        ));
    }
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            messages::remove_follow_up(tx, &run_id, &follow_up_id)?;
            Ok(Accepted {
                revision: None,
                receipt: json!({ "runId": run_id, "followUpId": follow_up_id, "removed": true }),
            })
        })
    })
    .await;
    answer_of(stored)
}
