//! The `pi-workflows` binary: CLI edge. Errors become one clear message and an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pi_workflows::cli::Cli::parse();
    if !cli.is_server_process() {
        // A CLI piped into `head` should end quietly, not panic on a closed stdout. The server
        // keeps Rust's default (SIGPIPE ignored): a client that hangs up must not kill it.
        // SAFETY: setting a signal to its default disposition installs no handler.
        let _ = unsafe {
            nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl)
        };
    }
    match pi_workflows::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("pi-workflows: {err:#}");
            ExitCode::from(pi_workflows::cli::EXIT_FAILURE)
        }
    }
}
