//! `pi-workflows server run|start|status|stop`.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::Value;

use crate::client::{Client, ClientError};
use crate::input_wait::wait_for_input;
use crate::protocol::{JsonObject, Operation, Outcome};
use crate::server::ownership::ServerPaths;
use crate::server::{self, READY_FD_ENV, ServerConfig};

/// How long `server start` waits for the ready handshake.
pub const START_TIMEOUT_MS: u64 = 10_000;
/// Servers one start spawns at most, when each exits and the lock came free meanwhile.
const START_ATTEMPTS: u32 = 3;
/// How long `server stop` waits for the process to be gone.
pub const STOP_WAIT_MS: u64 = 35_000;
const START_ERROR_BYTES_MAX: u64 = 4 * 1024;
/// The server's async workers: one. A user-level server on a laptop, not a service to
/// scale; its work per run is small and mostly waits for the store writer (a thread of its
/// own) and its children. A second worker only added thread wake-ups: with one, a run costs
/// ~25 % fewer context switches and ~5 % less server CPU at the same throughput (issue 14,
/// docs/PERFORMANCE.md). Blocking work still goes to the blocking pool.
const SERVER_WORKER_THREADS: usize = 1;
/// Threads for blocking work at once (store reads, capture writes, `/proc` scans); more wait
/// in tokio's queue. Tokio's default of 512 would let a burst of runs and clients start
/// hundreds of threads, each with its own stack and arena.
const SERVER_BLOCKING_THREADS_MAX: usize = 32;

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Run the server attached to this terminal (for direct operation and tests).
    Run,
    /// Start the server in the background unless one is running; waits until it is ready.
    Start,
    /// Show the server's state and counts (nothing private). Exits 3 when no server runs.
    Status {
        #[arg(long)]
        json: bool,
        /// Also print the live supervision tree.
        #[arg(long)]
        tree: bool,
    },
    /// Stop the server gracefully: commands in flight finish and commit first.
    Stop,
}

pub fn run(state_dir: PathBuf, command: ServerCommand) -> anyhow::Result<ExitCode> {
    let paths = ServerPaths::new(&state_dir);
    match command {
        ServerCommand::Run => run_attached(paths),
        ServerCommand::Start => start(&paths, &state_dir),
        ServerCommand::Status { json, tree } => status(&paths, json, tree),
        ServerCommand::Stop => stop(&paths),
    }
}

fn run_attached(paths: ServerPaths) -> anyhow::Result<ExitCode> {
    // First: it may start this program again, and it changes the environment while the
    // process has one thread.
    if let Some(warning) = server::memory::tune_allocator() {
        eprintln!("pi-workflows: {warning}");
    }
    let config = ServerConfig::from_env(paths)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_WORKER_THREADS)
        .max_blocking_threads(SERVER_BLOCKING_THREADS_MAX)
        .enable_all()
        .build()?;
    let reason = runtime.block_on(server::run(config))?;
    runtime.shutdown_timeout(Duration::from_secs(2));
    Ok(match reason {
        server::StopReason::LeaseLost => ExitCode::from(super::EXIT_FAILURE),
        _ => ExitCode::SUCCESS,
    })
}

fn start(paths: &ServerPaths, state_dir: &Path) -> anyhow::Result<ExitCode> {
    if let Some(epoch) = ensure_started(paths, state_dir)? {
        println!("pi-workflows server started (epoch {epoch})");
    }
    Ok(ExitCode::SUCCESS)
}

/// Start the server in the background unless one already answers; `Some(epoch)` when this
/// call started it. Commands that need a server call this first (start on demand).
pub(super) fn ensure_started(paths: &ServerPaths, state_dir: &Path) -> anyhow::Result<Option<i64>> {
    paths.check_socket_path()?;
    if Client::connect(&paths.socket).is_ok() {
        return Ok(None);
    }
    paths.create_dirs()?;
    let mut attempt = 1;
    loop {
        let (ready_read, ready_write) = nix::unistd::pipe().context("could not create the ready pipe")?;
        let start_errors = paths.logs_dir.join("server-start.err");
        let errors_file = private_file(&start_errors)?;
        let mut child = spawn_detached(state_dir, &ready_write, errors_file)?;
        drop(ready_write);
        let failed = match wait_ready(ready_read, Duration::from_millis(START_TIMEOUT_MS)) {
            Ready::Epoch(epoch) => return Ok(Some(epoch)),
            failed => failed,
        };
        // Another start may have won the race: that is success too, once its server
        // answers (it holds the lock and may still be opening the store or recovering).
        let exited = matches!(failed, Ready::Exited);
        let wait = if exited {
            Duration::from_millis(START_TIMEOUT_MS)
        } else {
            Duration::ZERO
        };
        if answers_after_start(paths, wait) {
            return Ok(None);
        }
        let _ = child.try_wait();
        // The lock is free again and nothing answers: its holder exited meanwhile (a killed
        // server's last threads release it a few ms after it shows as a zombie, or another
        // start's server failed). Try again.
        if exited && attempt < START_ATTEMPTS && crate::server::ownership::lock_is_free(paths) {
            attempt += 1;
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        break start_failure(paths, state_dir, &start_errors, &failed);
    }
}

/// Why a start failed: what its server wrote before exiting, or a full disk.
fn start_failure(
    paths: &ServerPaths,
    state_dir: &Path,
    start_errors: &Path,
    failed: &Ready,
) -> anyhow::Result<Option<i64>> {
    let mut detail = read_bounded(start_errors);
    if detail.trim().is_empty() {
        // Nothing could be written there: a full disk would say so nowhere else.
        detail = disk_full_hint(state_dir);
    }
    let what = match failed {
        Ready::TimedOut => format!("did not become ready within {} s", START_TIMEOUT_MS / 1_000),
        _ => "exited before it was ready".to_string(),
    };
    bail!(
        "the server {what}{}; see {}",
        if detail.is_empty() {
            String::new()
        } else {
            format!(": {}", detail.trim())
        },
        paths.logs_dir.join("server.log").display()
    )
}

/// Free space below which an empty start-errors file is explained by a full disk.
const DISK_FULL_BYTES_MAX: u64 = 1024 * 1024;

/// What to say when the server left no error behind: the disk holding the state directory
/// is full (it could not even write its error), or nothing.
fn disk_full_hint(state_dir: &Path) -> String {
    match rustix::fs::statvfs(state_dir) {
        Ok(fs) if fs.f_bavail.saturating_mul(fs.f_frsize) < DISK_FULL_BYTES_MAX => format!(
            "the disk holding the state directory {} is full ({} bytes free); free space on it and start again",
            state_dir.display(),
            fs.f_bavail.saturating_mul(fs.f_frsize)
        ),
        _ => String::new(),
    }
}

fn private_file(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("could not create {}", path.display()))
}

fn spawn_detached(state_dir: &Path, ready: &OwnedFd, errors: std::fs::File) -> anyhow::Result<std::process::Child> {
    let exe = std::env::current_exe().context("could not find the pi-workflows executable")?;
    let ready_fd = ready.as_raw_fd();
    let mut command = Command::new(exe);
    command
        .arg("--state-dir")
        .arg(state_dir)
        .args(["server", "run"])
        .env(READY_FD_ENV, ready_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(errors);
    // SAFETY: only async-signal-safe calls (setsid, fcntl) run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            rustix::process::setsid().map_err(std::io::Error::from)?;
            // Keep the ready pipe open across exec (pipe() creates it close-on-exec).
            let fd = std::os::fd::BorrowedFd::borrow_raw(ready_fd);
            let flags = rustix::io::fcntl_getfd(fd)?;
            rustix::io::fcntl_setfd(fd, flags - rustix::io::FdFlags::CLOEXEC)?;
            Ok(())
        });
    }
    command.spawn().context("could not start the server process")
}

/// Whether a server answers within `wait`, waiting only while another process holds the
/// server lock (a concurrent start's server, not ready yet).
fn answers_after_start(paths: &ServerPaths, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if Client::connect(&paths.socket).is_ok() {
            return true;
        }
        if crate::server::ownership::lock_is_free(paths) || Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

enum Ready {
    Epoch(i64),
    /// The pipe closed without "ready": the server exited.
    Exited,
    TimedOut,
}

/// Wait for "ready <epoch>" on the pipe.
fn wait_ready(pipe: OwnedFd, timeout: Duration) -> Ready {
    let deadline = Instant::now() + timeout;
    let mut file = std::fs::File::from(pipe);
    let mut text = Vec::new();
    loop {
        match wait_for_input(std::os::fd::AsFd::as_fd(&file), deadline) {
            Ok(true) => {}
            Ok(false) => return Ready::TimedOut,
            Err(_) => return Ready::Exited,
        }
        let mut chunk = [0u8; 64];
        let read = file.read(&mut chunk).unwrap_or(0);
        if read == 0 {
            return Ready::Exited;
        }
        text.extend_from_slice(&chunk[..read]);
        if let Some(end) = text.iter().position(|byte| *byte == b'\n') {
            let line = String::from_utf8_lossy(&text[..end]).into_owned();
            return match line.strip_prefix("ready ").and_then(|epoch| epoch.trim().parse().ok()) {
                Some(epoch) => Ready::Epoch(epoch),
                None => Ready::Exited,
            };
        }
    }
}

fn read_bounded(path: &Path) -> String {
    let Ok(file) = std::fs::File::open(path) else {
        return String::new();
    };
    let mut text = String::new();
    let _ = file.take(START_ERROR_BYTES_MAX).read_to_string(&mut text);
    text
}

fn status(paths: &ServerPaths, json: bool, tree: bool) -> anyhow::Result<ExitCode> {
    let mut client = match Client::connect(&paths.socket) {
        Ok(client) => client,
        Err(ClientError::Unavailable(_)) => {
            if json {
                println!("{}", serde_json::json!({"state": "stopped", "socket": "unavailable"}));
            } else {
                println!("server: not running");
            }
            return Ok(ExitCode::from(super::EXIT_PROBLEMS_FOUND));
        }
        Err(err) => return Err(err.into()),
    };
    let mut payload = JsonObject::new();
    if tree {
        payload.insert("tree".to_string(), Value::Bool(true));
    }
    let response = client.request(Operation::ServerStatus, payload)?;
    let receipt = match (response.outcome, response.receipt) {
        (Outcome::Accepted, Some(receipt)) => receipt,
        (_, _) => bail!(
            "the server refused the status request: {:?}",
            response.error.map(|e| e.message)
        ),
    };
    if json {
        println!("{}", Value::Object(receipt));
    } else {
        print_status(&receipt, tree)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(status: &JsonObject, tree: bool) -> anyhow::Result<()> {
    let number = |key: &str| status.get(key).and_then(Value::as_i64).unwrap_or(0);
    let text = |key: &str| status.get(key).and_then(Value::as_str).unwrap_or("unknown").to_string();
    println!(
        "server: {} (epoch {}, up {} s)",
        text("state"),
        number("epoch"),
        number("uptimeMs") / 1_000
    );
    println!("socket: {}", text("socket"));
    println!(
        "environment: the server's, from its start {} min ago (runners and their steps inherit it; \
         `pi-workflows server stop` and start again to pick up a changed one)",
        number("environmentAgeMs") / 60_000
    );
    println!(
        "clients: {}, active runners: {}",
        number("clients"),
        number("activeRunners")
    );
    println!(
        "runs: {} queued, {} running, {} parked, {} waiting ({} paused)",
        number("queued"),
        number("running"),
        number("parked"),
        number("waiting"),
        number("paused")
    );
    println!("expired claims: {}", number("expiredClaims"));
    println!("pending interactions: {}", number("pendingInteractions"));
    println!("ambiguous effects: {}", number("ambiguousEffects"));
    if tree {
        let snapshot: supervisors::TreeSnapshot = match status.get("tree") {
            Some(tree) => serde_json::from_value(tree.clone()).context("the server sent an unreadable tree")?,
            None => bail!("the server did not include the supervision tree"),
        };
        print!("{}", snapshot.render());
    }
    Ok(())
}

fn stop(paths: &ServerPaths) -> anyhow::Result<ExitCode> {
    let mut client = match Client::connect(&paths.socket) {
        Ok(client) => client,
        Err(ClientError::Unavailable(_)) => {
            println!("pi-workflows server is not running");
            return Ok(ExitCode::SUCCESS);
        }
        Err(err) => return Err(err.into()),
    };
    // The server process as it is now: "stopped" means gone, not only its lock released (a
    // process frees its lock while it still exits).
    let server = crate::server::ownership::lock_holder(paths).and_then(supervisors::process::identity_of);
    let response = client.request(Operation::ServerStop, JsonObject::new())?;
    if !matches!(response.outcome, Outcome::Accepted | Outcome::Adopted) {
        bail!("the server refused to stop: {:?}", response.error.map(|e| e.message));
    }
    drop(client);
    let deadline = Instant::now() + Duration::from_millis(STOP_WAIT_MS);
    while Instant::now() < deadline {
        if Client::connect(&paths.socket).is_err()
            && crate::server::ownership::lock_is_free(paths)
            && !server.as_ref().is_some_and(supervisors::process::is_running)
        {
            println!("pi-workflows server stopped");
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "the server accepted the stop but is still running after {} s",
        STOP_WAIT_MS / 1_000
    )
}
