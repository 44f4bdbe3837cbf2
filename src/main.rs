//! The `pi-workflows` binary: CLI edge. Errors become one clear message and an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pi_workflows::cli::Cli::parse();
    match pi_workflows::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("pi-workflows: {err:#}");
            ExitCode::from(pi_workflows::cli::EXIT_FAILURE)
        }
    }
}
