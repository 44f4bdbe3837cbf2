//! `pi-workflows channel status|reload|recover`: the external decision channels
//! (docs/CHANNELS.md), through the server's `channel.*` operations.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

use super::workflow::{accepted, connect};
use crate::printable::printable;
use crate::protocol::{JsonObject, Operation};

#[derive(Debug, Subcommand)]
pub enum ChannelCommand {
    /// Each Telegram profile's adapter and the decision messages it presents, those needing
    /// attention (an ambiguous send) first. Shows no tokens, chat or user IDs, or content.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Re-read channels.json and credentials.json and restart the adapters whose profile
    /// changed. A refused file changes nothing.
    Reload {
        #[arg(long)]
        json: bool,
    },
    /// Settle an ambiguous send or edit after checking Telegram: `confirm` records that it
    /// happened; `retry` sends it again (people may see it twice).
    Recover {
        /// The channel message (`cm-…`, from `channel status`).
        channel_message_id: String,
        #[arg(value_parser = ["confirm", "retry"])]
        action: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(state_dir: &Path, command: ChannelCommand) -> anyhow::Result<ExitCode> {
    let mut client = connect(state_dir)?;
    let (operation, payload, json) = match command {
        ChannelCommand::Status { json } => (Operation::ChannelStatus, JsonObject::new(), json),
        ChannelCommand::Reload { json } => (Operation::ChannelReload, JsonObject::new(), json),
        ChannelCommand::Recover {
            channel_message_id,
            action,
            json,
        } => {
            let mut payload = JsonObject::new();
            payload.insert("channelMessageId".into(), Value::String(channel_message_id));
            payload.insert("action".into(), Value::String(action));
            (Operation::ChannelRecover, payload, json)
        }
    };
    let response = client.request(operation, payload)?;
    let receipt = accepted(&response)?;
    if json {
        println!("{}", Value::Object(receipt.clone()));
        return Ok(ExitCode::SUCCESS);
    }
    match operation {
        Operation::ChannelStatus => print_status(receipt),
        Operation::ChannelReload => print_reload(receipt),
        _ => print_recovered(receipt),
    }
    Ok(ExitCode::SUCCESS)
}

fn text(value: &Value) -> String {
    printable(value.as_str().unwrap_or("-")).into_owned()
}

fn print_status(receipt: &JsonObject) {
    if let Some(error) = receipt.get("configError").and_then(Value::as_str) {
        println!(
            "configuration refused (the adapters keep the last good one): {}",
            printable(error)
        );
    }
    let profiles = receipt
        .get("profiles")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if profiles.is_empty() {
        println!("no Telegram profiles configured (decisions show in Pi and the CLI); see docs/CHANNELS.md");
    }
    for profile in profiles {
        let last = profile["lastExit"]
            .as_str()
            .map(|why| format!(", last exit: {why}"))
            .unwrap_or_default();
        println!(
            "profile {}: {} (epoch {}, {} launches{last})",
            text(&profile["profile"]),
            text(&profile["state"]),
            profile["epoch"],
            profile["launches"]
        );
    }
    for message in receipt.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let effect = match message["lastEffect"].as_array() {
            Some(pair) => format!("{} {}", text(&pair[0]), text(&pair[1])),
            None => "-".to_string(),
        };
        println!(
            "  {}  run {}  {}  {}  last: {effect}",
            text(&message["channelMessageId"]),
            text(&message["runId"]),
            text(&message["profile"]),
            text(&message["state"])
        );
    }
    let unrouted: Vec<String> = receipt
        .get("unroutedAudiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    if !unrouted.is_empty() {
        println!(
            "waiting decisions name audiences channels.json does not define: {} (shown in Pi and the CLI only; \
             fix the workflow's audience or add it to channels.json and reload)",
            unrouted.join(", ")
        );
    }
    if receipt.get("ambiguous").and_then(Value::as_u64).unwrap_or(0) > 0 {
        println!(
            "an ambiguous attempt may or may not have reached Telegram: check the chat, then \
             `pi-workflows channel recover <cm-id> confirm|retry`"
        );
    }
}

fn print_reload(receipt: &JsonObject) {
    let list = |key: &str| {
        let names: Vec<String> = receipt
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    println!(
        "channels reloaded: started {}; stopped {}; unchanged {}",
        list("started"),
        list("stopped"),
        list("unchanged")
    );
}

fn print_recovered(receipt: &JsonObject) {
    println!(
        "{} of {} recorded as {}",
        text(&receipt["effectType"]),
        text(&receipt["channelMessageId"]),
        text(&receipt["action"])
    );
    if let Some(warning) = receipt.get("warning").and_then(Value::as_str) {
        println!("warning: {warning}");
    }
}
