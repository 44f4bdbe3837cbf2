//! `channel.status`, `channel.reload` and `channel.recover` (docs/CHANNELS.md): the adapters'
//! live state and the messages they present (no tokens, chat or user IDs, or decision
//! content), a reload of the private configuration, and an operator's explicit recovery of an
//! ambiguous send or edit after checking Telegram.

use serde_json::{Value, json};

use super::context::OpsContext;
use crate::protocol::Request;
use crate::server::answers::{Answer, answer_of, command_request, commit_receipt, read_refusal, rejected, to_object};
use crate::server::blocking;
use crate::store::channels::{self as store, ChannelRecovery};
use crate::store::commands::{self, Accepted};

/// `channel.status`: each profile's adapter state and the messages needing attention first.
pub async fn channel_status(ctx: &OpsContext, _request: &Request) -> Answer {
    let (profiles, config_error) = ctx.channels.status();
    let messages = blocking::read(&ctx.store, store::status).await.map_err(read_refusal)?;
    // With channels configured, a pending decision whose audience none of them names is
    // shown in Pi and the CLI only: say so (a typo in a workflow would otherwise go unseen).
    let unrouted = match ctx.channels.audiences() {
        Some(known) => blocking::read(&ctx.store, move |conn| store::unrouted_audiences(conn, &known))
            .await
            .map_err(read_refusal)?,
        None => Vec::new(),
    };
    let ambiguous = messages
        .iter()
        .filter(|message| {
            message
                .last_effect
                .as_ref()
                .is_some_and(|(_, status)| status == "ambiguous")
        })
        .count();
    let receipt = json!({
        "profiles": profiles,
        "configError": config_error,
        "messages": messages,
        "ambiguous": ambiguous,
        "unroutedAudiences": unrouted,
    });
    Ok((crate::protocol::Outcome::Accepted, to_object(&receipt)?, None))
}

/// `channel.reload`: re-read `channels.json` and `credentials.json`; a refused configuration
/// changes nothing (the adapters keep the last good one) and says why.
pub async fn channel_reload(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let report = ctx
        .channels
        .reload()
        .await
        .map_err(|why| rejected("invalidConfiguration", &why))?;
    let receipt = serde_json::to_value(&report).unwrap_or(Value::Null);
    commit_receipt(&ctx.store, command, receipt).await
}

/// `channel.recover` (`payload.channelMessageId`, `payload.action`: `confirm` | `retry`).
pub async fn channel_recover(ctx: &OpsContext, request: &Request) -> Answer {
    let command = command_request(request)?;
    let text = |member: &str| request.payload.get(member).and_then(Value::as_str).map(str::to_string);
    let Some(message_id) =
        text("channelMessageId").filter(|id| crate::protocol::check_id("channelMessageId", id).is_ok())
    else {
        return Err(rejected(
            "invalidRequest",
            "channel.recover needs payload.channelMessageId (see `pi-workflows channel status`)",
        ));
    };
    let Some(action) = text("action").and_then(|action| ChannelRecovery::from_wire(&action)) else {
        return Err(rejected(
            "invalidRequest",
            "channel.recover needs payload.action: confirm (it happened) or retry (send again; a duplicate is possible)",
        ));
    };
    let stored = blocking::write(&ctx.store, move |tx| {
        commands::run_command(tx, &command, |tx| {
            let effect_type = store::recover(tx, &message_id, action)?;
            let warning = (action == ChannelRecovery::Retry)
                .then_some("a new attempt will be made; if the first one reached Telegram, people see it twice");
            Ok(Accepted {
                revision: None,
                receipt: json!({"channelMessageId": message_id, "action": action.as_str(),
                                "effectType": effect_type, "warning": warning}),
            })
        })
    })
    .await;
    answer_of(stored)
}
