//! `pi-workflows state …`: create, verify and count the state database.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;

use crate::paths::{DATABASE_FILE, ensure_private_dir};
use crate::store::{Store, SystemClock, schema, verify};

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

fn open_store(dir: PathBuf) -> anyhow::Result<Store> {
    ensure_private_dir(&dir)?;
    let path = dir.join(DATABASE_FILE);
    Store::open(&path, Arc::new(SystemClock)).context("could not open the state database")
}

pub fn run(state_dir: PathBuf, command: StateCommand) -> anyhow::Result<ExitCode> {
    let store = open_store(state_dir)?;
    match command {
        StateCommand::Init { json } => {
            let digest = schema::schema_digest();
            if json {
                println!(
                    "{}",
                    json!({"schema": schema::SCHEMA_NAME, "version": schema::SCHEMA_VERSION, "digest": digest})
                );
            } else {
                println!(
                    "state database ready: {} v{} ({digest})",
                    schema::SCHEMA_NAME,
                    schema::SCHEMA_VERSION
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Status { json } => {
            let now = store.now_ms();
            let counts = store.read(|conn| verify::state_counts(conn, now))?;
            if json {
                println!("{}", serde_json::to_string(&counts)?);
            } else {
                print_counts(&counts);
            }
            Ok(ExitCode::SUCCESS)
        }
        StateCommand::Verify { json } => {
            let report = store.read(verify::verify)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print_report(&report);
            }
            Ok(if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(super::EXIT_PROBLEMS_FOUND)
            })
        }
    }
}

fn print_counts(counts: &verify::StateCounts) {
    let rows = [
        ("queued", counts.queued),
        ("running", counts.running),
        ("parked", counts.parked),
        ("waiting", counts.waiting),
        ("paused", counts.paused),
        ("finished", counts.terminal),
        ("expired claims", counts.expired_claims),
        ("pending interactions", counts.pending_interactions),
        ("ambiguous effects", counts.ambiguous_effects),
    ];
    for (label, value) in rows {
        println!("{label:>21}: {value}");
    }
}

fn print_report(report: &verify::VerifyReport) {
    println!("integrity: {}", report.integrity.join("; "));
    println!("foreign key violations: {}", report.foreign_key_violations);
    if report.violations.is_empty() {
        println!("lifecycle invariants: all hold");
    }
    for violation in &report.violations {
        println!(
            "lifecycle invariant broken ({} rows): {}",
            violation.rows, violation.invariant
        );
    }
    if !report.is_clean() {
        println!("nothing was repaired; back up the database before any manual change");
    }
}
