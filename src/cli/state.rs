//! `pi-workflows state …`: create, verify and count the state database, through the
//! server's `state.*` operations.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};

use super::workflow::{accepted, connect};
use crate::client::Client;
use crate::protocol::{JsonObject, Operation};

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Create the state database if it does not exist, and check its schema digest.
    Init {
        #[arg(long)]
        json: bool,
    },
    /// Show run, claim, interaction and effect counts (no IDs, paths or payloads).
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Run SQLite's integrity and foreign-key checks plus the run-lifecycle invariants.
    /// Never repairs anything. Exits 3 when a problem is found.
    Verify {
        #[arg(long)]
        json: bool,
    },
    /// Write a verified copy of the database to a new file (user-only).
    Backup {
        /// The new file (made absolute; it must not exist).
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Delete finished run trees older than the retention period. Without --apply it only
    /// reports what would go; --apply needs --backup, a new file written and verified first.
    Prune {
        /// Keep runs that finished within this many days.
        #[arg(long, default_value_t = 30)]
        older_than_days: i64,
        #[arg(long, requires = "backup")]
        apply: bool,
        /// The verified backup written before anything is deleted (a new file).
        #[arg(long, value_name = "PATH")]
        backup: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// Every state command goes through the server (started on demand): no CLI command opens
/// the live database.
pub fn run(state_dir: PathBuf, command: StateCommand) -> anyhow::Result<ExitCode> {
    let mut client = connect(&state_dir)?;
    match command {
        StateCommand::Init { json } => {
            let status = read(&mut client, Operation::StateStatus)?;
            let schema = status.get("schema").cloned().unwrap_or_default();
            if json {
                println!("{schema}");
            } else {
                println!(
                    "state database ready: {} v{} ({})",
                    schema["name"].as_str().unwrap_or("-"),
                    schema["version"],
                    schema["digest"].as_str().unwrap_or("-")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Status { json } => {
            let mut counts = read(&mut client, Operation::StateStatus)?;
            counts.remove("schema");
            if json {
                println!("{}", Value::Object(counts));
            } else {
                print_counts(&counts);
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Backup { path, json } => {
            let mut payload = JsonObject::new();
            payload.insert("path".into(), json!(absolute(&path)?));
            let receipt = call(&mut client, Operation::StateBackup, payload)?;
            print_receipt(&receipt, json, |receipt| {
                format!(
                    "backup written and verified: {} ({} bytes, {} runs)",
                    receipt["path"].as_str().unwrap_or("-"),
                    receipt["backup"]["bytes"],
                    receipt["backup"]["runs"]
                )
            });
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Prune {
            older_than_days,
            apply,
            backup,
            json,
        } => {
            let mut payload = JsonObject::new();
            payload.insert("olderThanDays".into(), json!(older_than_days));
            if apply {
                payload.insert("apply".into(), json!(true));
            }
            if let Some(backup) = backup {
                payload.insert("backupPath".into(), json!(absolute(&backup)?));
            }
            let receipt = call(&mut client, Operation::StatePrune, payload)?;
            print_receipt(&receipt, json, describe_prune);
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Verify { json } => {
            let report = read(&mut client, Operation::StateVerify)?;
            if json {
                println!("{}", Value::Object(report.clone()));
            } else {
                print_report(&report);
            }
            Ok(if is_clean(&report) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(super::EXIT_PROBLEMS_FOUND)
            })
        }
    }
}

fn read(client: &mut Client, operation: Operation) -> anyhow::Result<JsonObject> {
    call(client, operation, JsonObject::new())
}

/// One request per user invocation: a fresh idempotency key each time.
fn call(client: &mut Client, operation: Operation, payload: JsonObject) -> anyhow::Result<JsonObject> {
    let response = client.request(operation, payload)?;
    Ok(accepted(&response)?.clone())
}

fn absolute(path: &std::path::Path) -> anyhow::Result<String> {
    let absolute = std::path::absolute(path)?;
    absolute
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("{} is not UTF-8; choose another path", absolute.display()))
}

fn print_receipt(receipt: &JsonObject, json: bool, describe: impl Fn(&Value) -> String) {
    let value = Value::Object(receipt.clone());
    if json {
        println!("{value}");
    } else {
        println!("{}", describe(&value));
    }
}

fn describe_prune(receipt: &Value) -> String {
    let (trees, runs, days) = (&receipt["trees"], &receipt["runs"], &receipt["olderThanDays"]);
    if receipt["applied"] == true {
        format!(
            "deleted {trees} run trees ({runs} runs) finished over {days} days ago; {} unreferenced blobs collected; backup: {}",
            receipt["blobsCollected"],
            receipt["backupPath"].as_str().unwrap_or("-")
        )
    } else {
        format!(
            "{trees} run trees ({runs} runs) finished over {days} days ago would be deleted; \
             run again with --apply --backup <new file> to delete them"
        )
    }
}

fn is_clean(report: &JsonObject) -> bool {
    report.get("integrity") == Some(&json!(["ok"]))
        && report.get("foreignKeyViolations") == Some(&json!(0))
        && report
            .get("violations")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
}

fn print_counts(counts: &JsonObject) {
    let rows = [
        ("queued", "queued"),
        ("running", "running"),
        ("parked", "parked"),
        ("waiting", "waiting"),
        ("paused", "paused"),
        ("finished", "terminal"),
        ("expired claims", "expiredClaims"),
        ("pending interactions", "pendingInteractions"),
        ("ambiguous effects", "ambiguousEffects"),
    ];
    for (label, key) in rows {
        println!("{label:>21}: {}", counts.get(key).and_then(Value::as_i64).unwrap_or(0));
    }
}

fn print_report(report: &JsonObject) {
    let integrity: Vec<&str> = report
        .get("integrity")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    println!("integrity: {}", integrity.join("; "));
    println!(
        "foreign key violations: {}",
        report.get("foreignKeyViolations").and_then(Value::as_i64).unwrap_or(0)
    );
    let violations = report
        .get("violations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if violations.is_empty() {
        println!("lifecycle invariants: all hold");
    }
    for violation in &violations {
        println!(
            "lifecycle invariant broken ({} rows): {}",
            violation["rows"],
            violation["invariant"].as_str().unwrap_or("-")
        );
    }
    if !is_clean(report) {
        println!("nothing was repaired; back up the database before any manual change");
    }
}
