//! `pi-workflows run pause|resume|cancel <run-id>`: durable run controls through the server.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use serde_json::Value;

use crate::client::Client;
use crate::protocol::{JsonObject, Operation, Outcome};
use crate::server::ownership::ServerPaths;

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Pause a run: its runner stops; `resume` continues from the last durable boundary.
    Pause {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused run, or a run parked for review.
    Resume {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run (terminal); its runner's process group is stopped after the commit.
    Cancel {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(state_dir: PathBuf, command: RunCommand) -> anyhow::Result<ExitCode> {
    let (operation, run_id, json, verb) = match command {
        RunCommand::Pause { run_id, json } => (Operation::RunPause, run_id, json, "paused"),
        RunCommand::Resume { run_id, json } => (Operation::RunResume, run_id, json, "resumed"),
        RunCommand::Cancel { run_id, json } => (Operation::RunCancel, run_id, json, "cancelled"),
    };
    let paths = ServerPaths::new(&state_dir);
    let mut client = Client::connect(&paths.socket)?;
    let response = client.request_for(operation, Some(&run_id), JsonObject::new())?;
    if json {
        println!("{}", serde_json::to_string(&response)?);
    }
    match response.outcome {
        Outcome::Accepted | Outcome::Adopted => {
            if !json {
                let revision = response
                    .receipt
                    .as_ref()
                    .and_then(|r| r.get("revision"))
                    .and_then(Value::as_i64);
                println!("run {run_id} {verb} (revision {})", revision.unwrap_or_default());
            }
            Ok(ExitCode::SUCCESS)
        }
        outcome => {
            let message = response.error.map(|error| error.message).unwrap_or_default();
            if json {
                return Ok(ExitCode::from(super::EXIT_FAILURE));
            }
            bail!("the server answered {}: {message}", outcome.as_str())
        }
    }
}
