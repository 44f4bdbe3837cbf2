//! The `piw` binary: argument parsing and exit codes. Everything else is the library.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pi_workflows::client::identity::{self, ClientKind};
use pi_workflows::protocol::OpaqueId;
use piw::config::{self, ConfigError};
use piw::connection::client::new_id;
use piw::connection::session::SessionOptions;
use piw::connection::transport::Endpoint;
use piw::ui::theme::{THEME_NAMES, Theme};
use piw::{exit, once, serve, tui};

/// piw's identity file in the state directory (next to the CLI's `cli.id`).
const PIW_CLIENT: ClientKind = ClientKind {
    file: "piw.id",
    prefix: "piw",
};

#[derive(Debug, Parser)]
#[command(name = "piw", version, about = "Watch and steer pi-workflows runs in the terminal")]
struct Cli {
    /// Pin this run (the browser is hidden and the run stays selected).
    run_id: Option<String>,
    /// Print one plain 120×40 frame of the pinned run and exit.
    #[arg(long, requires = "run_id")]
    once: bool,
    /// How long `--once` waits for a complete view.
    #[arg(long, value_name = "MS", default_value_t = once::DEFAULT_TIMEOUT_MS)]
    timeout_ms: u64,
    /// Use a `piw serve` relay (ws://127.0.0.1:PORT/ws) instead of the local socket.
    #[arg(long, value_name = "URL")]
    connect: Option<String>,
    /// State directory (default: $PI_CODING_AGENT_DIR/workflows or ~/.pi/agent/workflows).
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// Theme (overrides the config file).
    #[arg(long, value_name = "NAME")]
    theme: Option<String>,
    /// List the themes and exit.
    #[arg(long)]
    list_themes: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Relay the client protocol over a loopback WebSocket (for SSH tunnels).
    Serve {
        /// Loopback address to listen on (port 0 picks a free one).
        #[arg(long, default_value = serve::DEFAULT_BIND)]
        bind: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&anyhow::anyhow!(err), exit::FAILURE),
    };
    runtime.block_on(run(cli))
}

fn fail(err: &anyhow::Error, code: u8) -> ExitCode {
    // `{err}`: piw's errors already name their cause; the alternate form would repeat it.
    eprintln!("piw: {err}");
    ExitCode::from(code)
}

async fn run(cli: Cli) -> ExitCode {
    if cli.list_themes {
        println!("{}", THEME_NAMES.join("\n"));
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Serve { bind }) = &cli.command {
        return run_serve(bind, cli.state_dir.clone()).await;
    }
    let theme = match theme(cli.theme.as_deref()) {
        Ok(theme) => theme,
        Err(err) => return fail(&err.into(), exit::USAGE),
    };
    let (endpoint, state_dir) = match endpoint(&cli) {
        Ok(found) => found,
        Err(err) => return fail(&err, exit::USAGE),
    };
    let client_id = client_id(state_dir.as_deref());
    match (&cli.run_id, cli.once) {
        (Some(run_id), true) => run_once(endpoint, client_id, run_id, cli.timeout_ms, theme).await,
        (run_id, _) => {
            let options = SessionOptions {
                endpoint,
                start_in: state_dir,
                client_id,
                watch_runs: run_id.is_none(),
                selected: run_id.clone(),
            };
            match tui::run(options, theme).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(tui::TuiError::Fatal { message, code }) => fail(&anyhow::anyhow!(message), code),
                Err(err) => fail(&err.into(), exit::FAILURE),
            }
        }
    }
}

async fn run_once(endpoint: Endpoint, client_id: OpaqueId, run_id: &str, timeout_ms: u64, theme: Theme) -> ExitCode {
    let options = once::OnceOptions {
        endpoint,
        client_id,
        run_id: run_id.to_string(),
        timeout_ms,
        theme,
    };
    match once::once(options).await {
        Ok(frame) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{frame}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            let code = err.exit_code();
            fail(&err.into(), code)
        }
    }
}

async fn run_serve(bind: &str, state_dir: Option<PathBuf>) -> ExitCode {
    let result = async {
        let addr = serve::loopback_address(bind).await?;
        let socket = socket_of(&state_dir_or_default(state_dir)?);
        let listener = serve::bind(addr).await?;
        let bound = listener.local_addr()?;
        println!(
            "piw serve: relaying ws://{bound}{} to {}",
            serve::WS_PATH,
            socket.display()
        );
        std::io::stdout().flush()?;
        serve::serve(listener, socket).await?;
        anyhow::Ok(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.downcast_ref::<serve::ServeError>().is_some() => fail(&err, exit::USAGE),
        Err(err) => fail(&err, exit::FAILURE),
    }
}

/// `--theme`, else the config file's, else the default.
fn theme(flag: Option<&str>) -> Result<Theme, ConfigError> {
    if let Some(name) = flag {
        return config::theme_named(name, "--theme");
    }
    let config = match config::config_path() {
        Some(path) => config::load(&path)?,
        None => config::Config::default(),
    };
    match config.theme {
        Some(name) => config::theme_named(&name, "the config file"),
        None => Ok(Theme::default()),
    }
}

fn state_dir_or_default(state_dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match state_dir {
        Some(dir) => Ok(dir),
        None => pi_workflows::paths::default_state_dir(),
    }
}

fn socket_of(state_dir: &Path) -> PathBuf {
    state_dir.join("server").join("server.sock")
}

/// The endpoint, and the local state directory when there is one (the server may be
/// started there).
fn endpoint(cli: &Cli) -> anyhow::Result<(Endpoint, Option<PathBuf>)> {
    if let Some(url) = &cli.connect {
        anyhow::ensure!(
            url.starts_with("ws://"),
            "--connect takes a ws:// URL of `piw serve`, e.g. ws://127.0.0.1:9377/ws"
        );
        return Ok((Endpoint::WebSocket(url.clone()), None));
    }
    let state_dir = state_dir_or_default(cli.state_dir.clone())?;
    Ok((Endpoint::Unix(socket_of(&state_dir)), Some(state_dir)))
}

/// The installation's piw ID when the state directory exists; a per-process ID otherwise
/// (remote, or nothing to keep it in): only retries within this process need it.
fn client_id(state_dir: Option<&Path>) -> OpaqueId {
    match state_dir.filter(|dir| dir.is_dir()) {
        Some(dir) => identity::installation_id(dir, &PIW_CLIENT),
        None => new_id("piw"),
    }
}
