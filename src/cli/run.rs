//! `pi-workflows run start|status|restart|pause|resume|cancel|review|settings`: runs through the server.

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
    /// Start a workflow by name (`.pi/workflows/<name>.workflow.ts`, then
    /// `~/.pi/agent/workflows/`) or path, as a headless run. Exit codes with --follow:
    /// 0 completed, 4 failed/timed out/cancelled, 5 waiting for input, 6 parked for review.
    Start {
        /// Workflow name or path to a `*.workflow.ts` file.
        workflow: String,
        /// Free text for the run: its input becomes `{"task": "<the words>"}`.
        #[arg(value_name = "TASK", conflicts_with = "input_json")]
        task: Vec<String>,
        /// The run's input as JSON (normalized by the workflow's `input` function).
        #[arg(long, value_name = "JSON")]
        input_json: Option<String>,
        /// Project directory (default: the current directory).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        /// Run without a Pi session (agent steps use a headless `pi`); the only mode
        /// from the CLI, accepted for clarity.
        #[arg(long)]
        headless: bool,
        /// Show live progress until the run ends, waits for input or parks.
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show one run: status, current node, steps done.
    Status {
        #[arg(value_parser = super::RunIdParser)]
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Start a new run of a finished run's workflow and input, from the start.
    Restart {
        #[arg(value_parser = super::RunIdParser)]
        run_id: String,
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Pause a run: its runner stops; `resume` continues from the last durable boundary.
    Pause {
        #[arg(value_parser = super::RunIdParser)]
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused run, or a run parked for review.
    Resume {
        #[arg(value_parser = super::RunIdParser)]
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run (terminal); its runner's process group is stopped after the commit.
    Cancel {
        #[arg(value_parser = super::RunIdParser)]
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// List a run's ambiguous effects, or settle one after inspecting the external
    /// system: --applied (it happened), --retry (apply again), --failed (it did not).
    Review(super::review::ReviewArgs),
    /// Show a run's settings, or change them (`--set /pointer=VALUE`, `--patch JSON`): only
    /// the paths its workflow declares changeable; nodes started afterwards see the change.
    Settings(super::settings::SettingsArgs),
}

pub fn run(state_dir: PathBuf, command: RunCommand) -> anyhow::Result<ExitCode> {
    let (operation, run_id, json, verb) = match command {
        RunCommand::Start {
            workflow,
            task,
            input_json,
            project,
            headless: _,
            follow,
            json,
        } => {
            // Free text is the run's task; JSON input is given with --input-json instead.
            let input_json = match task.is_empty() {
                true => input_json,
                false => Some(serde_json::json!({"task": task.join(" ")}).to_string()),
            };
            let options = super::workflow::StartOptions {
                target: workflow,
                input_json,
                project,
                follow,
                json,
            };
            return super::workflow::start(&state_dir, options);
        }
        RunCommand::Status { run_id, json } => return super::workflow::status(&state_dir, &run_id, json),
        RunCommand::Restart { run_id, follow, json } => {
            return super::workflow::restart(&state_dir, &run_id, follow, json);
        }
        RunCommand::Settings(args) => return super::settings::settings(&state_dir, args),
        RunCommand::Review(args) => return super::review::review(&state_dir, args),
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
