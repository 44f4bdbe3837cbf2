//! `pi-workflows run review RUN`: list a run's ambiguous effects, and settle one after the
//! operator inspected the external system (`--applied`, `--retry`, `--failed`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{ArgGroup, Args};
use serde_json::{Value, json};

use super::workflow::accepted;
use crate::client::Client;
use crate::printable::printable;
use crate::protocol::{JsonObject, Operation};
use crate::server::ownership::ServerPaths;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("resolution").args(["applied", "retry", "failed"])))]
pub struct ReviewArgs {
    #[arg(value_parser = super::RunIdParser)]
    pub run_id: String,
    /// The effect to settle (from the listing); may be left out when only one is ambiguous.
    #[arg(long, value_name = "EFFECT_ID")]
    pub effect: Option<String>,
    /// It applied (you saw it in the external system): the node continues with --result.
    #[arg(long)]
    pub applied: bool,
    /// Apply it again as a new numbered attempt. A duplicate is possible if it did apply.
    #[arg(long)]
    pub retry: bool,
    /// Treat it as failed: the node fails and routes through `$result.outcome`.
    #[arg(long)]
    pub failed: bool,
    /// With --applied: the node's output as JSON (default null).
    #[arg(long, value_name = "JSON", requires = "applied")]
    pub result: Option<String>,
    /// With --failed: a short note stored with the failure.
    #[arg(long, value_name = "TEXT", requires = "failed")]
    pub note: Option<String>,
    #[arg(long)]
    pub json: bool,
}

impl ReviewArgs {
    fn resolution(&self) -> Option<&'static str> {
        match (self.applied, self.retry, self.failed) {
            (true, _, _) => Some("applied"),
            (_, true, _) => Some("retry"),
            (_, _, true) => Some("failed"),
            _ => None,
        }
    }
}

pub fn review(state_dir: &Path, args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let mut client = Client::connect(&ServerPaths::new(state_dir).socket)?;
    let listing = client.request_for(Operation::EffectList, Some(&args.run_id), JsonObject::new())?;
    let listing = accepted(&listing)?.clone();
    let Some(resolution) = args.resolution() else {
        return show(&args, &listing);
    };
    let effect_id = chosen_effect(&args, &listing)?;
    let mut payload = JsonObject::new();
    payload.insert("effectId".into(), json!(effect_id));
    payload.insert("resolution".into(), json!(resolution));
    if let Some(result) = &args.result {
        let value: Value = serde_json::from_str(result).context("--result is not valid JSON")?;
        payload.insert("result".into(), value);
    }
    if let Some(note) = &args.note {
        payload.insert("note".into(), json!(note));
    }
    if resolution == "retry" && !args.json {
        eprintln!(
            "warning: the effect is applied again as a new attempt; if it did apply before, the external system may see it twice"
        );
    }
    // Fenced by the revision the listing showed: a run that changed since is refused.
    let revision = listing.get("revision").and_then(Value::as_u64).unwrap_or_default();
    let response = client.request_at_revision(Operation::EffectRecover, &args.run_id, payload, revision)?;
    if args.json {
        println!("{}", serde_json::to_string(&response)?);
        return Ok(match accepted(&response) {
            Ok(_) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(super::EXIT_FAILURE),
        });
    }
    let receipt = accepted(&response)?;
    let remaining = receipt.get("ambiguousRemaining").and_then(Value::as_i64).unwrap_or(0);
    println!("effect {} recorded as {resolution}", printable(&effect_id));
    match remaining {
        0 => println!(
            "nothing of run {} is ambiguous now: continue it with `pi-workflows run resume {}`",
            args.run_id, args.run_id
        ),
        n => println!(
            "{n} more ambiguous effect(s): `pi-workflows run review {}`",
            args.run_id
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn effects_of(listing: &JsonObject) -> &[Value] {
    listing
        .get("effects")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn ambiguous_of(listing: &JsonObject) -> Vec<&Value> {
    effects_of(listing)
        .iter()
        .filter(|effect| effect.get("status").and_then(Value::as_str) == Some("ambiguous"))
        .collect()
}

/// The effect to settle: the named one, or the only ambiguous one.
fn chosen_effect(args: &ReviewArgs, listing: &JsonObject) -> anyhow::Result<String> {
    if let Some(effect) = &args.effect {
        return Ok(effect.clone());
    }
    let ambiguous = ambiguous_of(listing);
    match ambiguous.as_slice() {
        [only] => Ok(text(only, "effectId").to_string()),
        [] => bail!("run {} has no ambiguous effect; nothing was changed", args.run_id),
        many => bail!(
            "run {} has {} ambiguous effects: choose one with --effect (list them with `pi-workflows run review {}`)",
            args.run_id,
            many.len(),
            args.run_id
        ),
    }
}

fn text<'a>(effect: &'a Value, key: &str) -> &'a str {
    effect.get(key).and_then(Value::as_str).unwrap_or("-")
}

fn show(args: &ReviewArgs, listing: &JsonObject) -> anyhow::Result<ExitCode> {
    if args.json {
        println!("{}", serde_json::to_string(listing)?);
        return Ok(ExitCode::SUCCESS);
    }
    let ambiguous = ambiguous_of(listing);
    let run = &args.run_id;
    if ambiguous.is_empty() {
        println!(
            "run {run} has no ambiguous effect ({} effect(s) in all)",
            effects_of(listing).len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "run {run}: {} ambiguous effect(s) — their outcome is unknown",
        ambiguous.len()
    );
    for effect in &ambiguous {
        let number = |key: &str| effect.get(key).and_then(Value::as_i64).unwrap_or(0);
        println!("  {}", printable(text(effect, "effectId")));
        println!(
            "    node {} (visit {}) · {} effect, {} · {} attempt(s) · last change {}",
            printable(text(effect, "nodePath")),
            number("visit"),
            printable(text(effect, "effectType")),
            text(effect, "recovery"),
            number("attemptCount"),
            super::settings::utc_time(number("updatedAtMs")),
        );
        println!(
            "    request: {} · fingerprint {}…",
            printable(text(effect, "requestSummary")),
            text(effect, "requestFingerprintPrefix")
        );
    }
    let pick = if ambiguous.len() == 1 {
        String::new()
    } else {
        " --effect EFFECT_ID".to_string()
    };
    println!("Inspect the external system, then settle it:");
    println!("  pi-workflows run review {run}{pick} --applied [--result JSON]   it applied; the node continues");
    println!(
        "  pi-workflows run review {run}{pick} --retry                     apply it again (a duplicate is possible)"
    );
    println!("  pi-workflows run review {run}{pick} --failed [--note TEXT]      it failed; the node routes on failure");
    Ok(ExitCode::SUCCESS)
}
