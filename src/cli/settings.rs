//! `pi-workflows run settings <runId>`: show a run's settings, or change them with a JSON
//! Patch (`--patch`) or `--set /pointer=value` shortcuts (each a `replace`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use super::workflow::{accepted, connect};
use crate::protocol::{JsonObject, Operation};

#[derive(Debug, Args)]
pub struct SettingsArgs {
    #[arg(value_parser = super::RunIdParser)]
    pub run_id: String,
    /// A JSON Patch (RFC 6902) array, e.g. '[{"op":"add","path":"/reviewers/-","value":"ann"}]'.
    #[arg(long, value_name = "JSON", conflicts_with = "set")]
    pub patch: Option<String>,
    /// Replace one value: `/pointer=VALUE` (VALUE is JSON, or else taken as a string); repeatable.
    #[arg(long, value_name = "POINTER=VALUE")]
    pub set: Vec<String>,
    /// Refuse the change if the settings are no longer at this change number.
    #[arg(long, value_name = "N")]
    pub expect: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

pub fn settings(state_dir: &Path, args: SettingsArgs) -> anyhow::Result<ExitCode> {
    let patch = match (&args.patch, args.set.is_empty()) {
        (Some(patch), _) => {
            Some(serde_json::from_str::<Value>(patch).context("--patch must be a JSON array of operations")?)
        }
        (None, false) => Some(Value::Array(
            args.set
                .iter()
                .map(|set| set_operation(set))
                .collect::<anyhow::Result<_>>()?,
        )),
        (None, true) => None,
    };
    let mut client = connect(state_dir)?;
    let Some(patch) = patch else {
        let mut payload = JsonObject::new();
        payload.insert("kind".into(), json!("settings"));
        let response = client.request_for(Operation::ViewPage, Some(&args.run_id), payload)?;
        let page = accepted(&response)?;
        print_page(page, args.json)?;
        return Ok(ExitCode::SUCCESS);
    };
    let mut payload = JsonObject::new();
    payload.insert("patch".into(), patch);
    if let Some(expect) = args.expect {
        payload.insert("expectedChangeNumber".into(), json!(expect));
    }
    let response = client.request_for(Operation::RunChangeSettings, Some(&args.run_id), payload)?;
    let receipt = accepted(&response)?;
    let number = receipt.get("changeNumber").and_then(Value::as_i64).unwrap_or_default();
    if args.json {
        println!("{}", json!({ "runId": args.run_id, "changeNumber": number }));
    } else {
        println!(
            "run {} settings changed (change {number}); nodes started from now on see it",
            args.run_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `/pointer=VALUE` as a `replace` operation.
fn set_operation(set: &str) -> anyhow::Result<Value> {
    let Some((pointer, raw)) = set.split_once('=') else {
        bail!("--set takes /pointer=VALUE, e.g. --set /limits/retries=3");
    };
    if !pointer.starts_with('/') {
        bail!("--set {set}: the pointer must start with \"/\" (a JSON Pointer), e.g. /limits/retries");
    }
    let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    Ok(json!({ "op": "replace", "path": pointer, "value": value }))
}

fn print_page(page: &JsonObject, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        println!("{}", serde_json::to_string(page)?);
        return Ok(());
    }
    let number = page.get("changeNumber").and_then(Value::as_i64).unwrap_or_default();
    println!("settings (change {number}):");
    println!(
        "{}",
        serde_json::to_string_pretty(page.get("settings").unwrap_or(&Value::Null))?
    );
    println!("changeable:");
    for path in page.get("paths").and_then(Value::as_array).into_iter().flatten() {
        let allow: Vec<&str> = path["allow"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let pointer = path["path"].as_str().unwrap_or_default();
        println!(
            "  {:<24} {}",
            if pointer.is_empty() {
                "(whole document)"
            } else {
                pointer
            },
            allow.join(", ")
        );
    }
    println!("changes (newest first):");
    for change in page.get("changes").and_then(Value::as_array).into_iter().flatten() {
        println!(
            "  #{:<4} by {:<8} at {}",
            change["changeNumber"].as_i64().unwrap_or_default(),
            change["actor"].as_str().unwrap_or_default(),
            utc_time(change["changedAt"].as_i64().unwrap_or_default()),
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix milliseconds (civil-from-days, proleptic Gregorian).
pub(super) fn utc_time(ms: i64) -> String {
    let (days, seconds) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000) / 1000);
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let (hour, minute, second) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02} UTC")
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_time_formats_known_instants() {
        assert_eq!(super::utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc_time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::utc_time(1_796_000_000_000), "2026-11-30 00:53:20 UTC");
    }

    #[test]
    fn set_shortcuts_become_replace_operations() {
        assert_eq!(
            super::set_operation("/limits/retries=3").expect("valid"),
            serde_json::json!({"op": "replace", "path": "/limits/retries", "value": 3})
        );
        assert_eq!(super::set_operation("/mode=slow").expect("valid")["value"], "slow");
        assert!(super::set_operation("mode=slow").is_err());
        assert!(super::set_operation("/mode").is_err());
    }
}
