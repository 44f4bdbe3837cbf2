//! Command-line interface. Exit codes are stable: 0 success, 1 failure, 2 usage error
//! (clap), 3 a check found problems; a followed run: 4 failed, timed out or cancelled,
//! 5 waiting for input, 6 parked for review or paused (see `workflow`).

mod channel;
mod herdr;
mod protocol_check;
mod review;
mod run;
mod server;
mod settings;
mod state;
mod view;
mod workflow;
mod workflows;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_PROBLEMS_FOUND: u8 = 3;

#[derive(Debug, Parser)]
#[command(name = "pi-workflows", version, about = "Durable workflows for the Pi coding agent")]
pub struct Cli {
    /// State directory (default: $PI_CODING_AGENT_DIR/workflows or ~/.pi/agent/workflows).
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and check the state database.
    #[command(subcommand)]
    State(state::StateCommand),
    /// Run, start, inspect and stop the workflow server.
    #[command(subcommand)]
    Server(server::ServerCommand),
    /// Start, inspect, pause, resume, cancel or restart a run.
    #[command(subcommand)]
    Run(run::RunCommand),
    /// List runs, newest first.
    Runs {
        /// How many runs (1 to 200).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=200))]
        limit: u64,
        /// Keep the list on screen and redraw it whenever a run changes (until Ctrl-C).
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
    },
    /// List the workflows `run start <name>` finds for a project (its .pi/workflows/, then the
    /// global ones), with titles, a page at a time.
    Workflows(workflows::WorkflowsArgs),
    /// Show one run live (nodes, status, current node, timing) until it ends.
    View {
        #[arg(value_parser = RunIdParser)]
        run_id: String,
        /// Print the view once and exit.
        #[arg(long)]
        once: bool,
        /// Print each view as one JSON document per line.
        #[arg(long)]
        json: bool,
    },
    /// Answer a run's pending checkpoint.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Answer a run's pending decision.
    #[command(subcommand)]
    Decision(DecisionCommand),
    /// The external decision channels (Telegram): status, reload, recovery of a send.
    #[command(subcommand)]
    Channel(channel::ChannelCommand),
    /// Set up the Herdr plugin that opens piw in a Herdr pane (`/piw` in Pi).
    #[command(subcommand)]
    Herdr(herdr::HerdrCommand),
    /// Check client.v1 protocol lines from standard input, one per line.
    #[command(name = "protocol-check")]
    ProtocolCheck(protocol_check::ProtocolCheckArgs),
}

/// Parses a run ID argument: one that is not a safe ID is refused before anything is sent,
/// with a message that never echoes the control characters it may hold.
#[derive(Debug, Clone, Copy)]
pub struct RunIdParser;

impl clap::builder::TypedValueParser for RunIdParser {
    type Value = String;

    fn parse_ref(
        &self,
        _: &clap::Command,
        _: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let text = value.to_str().unwrap_or_default();
        crate::protocol::check_id("runId", text).map_err(|_| {
            let message = format!(
                "`{}` is not a run ID: run IDs are 1 to 256 bytes and may hold only ASCII letters, digits and ._:@|+=~- (list runs with `pi-workflows runs`)\n",
                crate::printable::printable(&value.to_string_lossy())
            );
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message)
        })?;
        Ok(text.to_string())
    }
}

#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Answer the run's pending checkpoint with a JSON value; the run continues.
    Answer {
        #[arg(value_parser = RunIdParser)]
        run_id: String,
        /// The answer as JSON, e.g. '{"approved": true}'.
        answer: String,
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DecisionCommand {
    /// Answer the run's pending protected decision with one of its choices (and the text a
    /// choice asks for); the server checks it against the declared choices and the deadline,
    /// and the first valid answer wins. `run status <id>` shows the decision.
    Answer {
        #[arg(value_parser = RunIdParser)]
        run_id: String,
        /// One of the decision's choice IDs, e.g. `approve`.
        choice: String,
        /// The text for a choice that takes one, e.g. "rename the flag first".
        text: Option<String>,
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
}

impl Cli {
    /// `server run`: the daemon itself (not a short-lived CLI command).
    pub fn is_server_process(&self) -> bool {
        matches!(self.command, Command::Server(server::ServerCommand::Run))
    }
}

fn resolve_state_dir(state_dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match state_dir {
        Some(dir) => Ok(dir),
        None => crate::paths::default_state_dir(),
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::State(command) => state::run(resolve_state_dir(cli.state_dir)?, command),
        Command::Server(command) => server::run(resolve_state_dir(cli.state_dir)?, command),
        Command::Run(command) => run::run(resolve_state_dir(cli.state_dir)?, command),
        Command::Runs { watch: true, json, .. } => view::watch_runs(&resolve_state_dir(cli.state_dir)?, json),
        Command::Runs { limit, json, .. } => workflow::list(&resolve_state_dir(cli.state_dir)?, limit, json),
        Command::Workflows(args) => workflows::list(&resolve_state_dir(cli.state_dir)?, args),
        Command::View { run_id, once, json } => view::view(&resolve_state_dir(cli.state_dir)?, &run_id, once, json),
        Command::Checkpoint(CheckpointCommand::Answer {
            run_id,
            answer,
            follow,
            json,
        }) => workflow::answer(&resolve_state_dir(cli.state_dir)?, &run_id, &answer, follow, json),
        Command::Decision(DecisionCommand::Answer {
            run_id,
            choice,
            text,
            follow,
            json,
        }) => workflow::decide(&resolve_state_dir(cli.state_dir)?, &run_id, &choice, text, follow, json),
        Command::Channel(command) => channel::run(&resolve_state_dir(cli.state_dir)?, command),
        Command::Herdr(command) => herdr::run(cli.state_dir, command),
        Command::ProtocolCheck(args) => protocol_check::run(args),
    }
}
