//! Starting the local server: only by running the installed `pi-workflows server start`
//! (spec "Renderers and controls": piw never reimplements the server lifecycle and never
//! opens the database).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The server binary's name.
pub const SERVER_BINARY: &str = "pi-workflows";
/// Overrides where the server binary is.
pub const SERVER_BINARY_ENV: &str = "PI_WORKFLOWS_BIN";
/// `server start` waits for readiness itself (its own bound); this is only a backstop.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Bytes of `server start`'s error output kept for the message.
const START_ERROR_BYTES_MAX: usize = 2_000;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot find `{SERVER_BINARY}`: set {SERVER_BINARY_ENV}, put it next to piw, or on PATH")]
    NotFound,
    #[error("could not run {path}: {source}")]
    Spawn { path: PathBuf, source: std::io::Error },
    #[error("`{SERVER_BINARY} server start` failed: {0}")]
    Failed(String),
    #[error("`{SERVER_BINARY} server start` did not finish within {} s", START_TIMEOUT.as_secs())]
    TimedOut,
}

/// The server binary: `PI_WORKFLOWS_BIN`, then next to this executable, then on PATH.
pub fn server_binary() -> Result<PathBuf, StartError> {
    if let Some(path) = std::env::var_os(SERVER_BINARY_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(SERVER_BINARY)));
    if let Some(path) = beside.filter(|p| p.is_file()) {
        return Ok(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(SERVER_BINARY))
        .find(|candidate| candidate.is_file())
        .ok_or(StartError::NotFound)
}

/// Run `pi-workflows --state-dir DIR server start` and wait for it.
pub async fn start_server(state_dir: &Path) -> Result<(), StartError> {
    let path = server_binary()?;
    let child = tokio::process::Command::new(&path)
        .arg("--state-dir")
        .arg(state_dir)
        .args(["server", "start"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| StartError::Spawn { path, source })?;
    let output = tokio::time::timeout(START_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| StartError::TimedOut)?
        .map_err(|err| StartError::Failed(err.to_string()))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: String = stderr.trim().chars().take(START_ERROR_BYTES_MAX).collect();
    Err(StartError::Failed(
        pi_workflows::printable::printable(&tail).into_owned(),
    ))
}
