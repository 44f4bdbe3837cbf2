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
    let response = client.request(operation, JsonObject::new())?;
    Ok(accepted(&response)?.clone())
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
