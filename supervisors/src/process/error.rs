//! Errors of process supervision.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while starting, watching or stopping a child process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The spec is not usable (the message names the offending field, never its value).
    #[error("invalid process spec: {0}")]
    InvalidSpec(String),
    /// The program does not exist.
    #[error("could not start {program}: not found; check PATH or the configured path")]
    NotFound {
        /// The program as configured.
        program: String,
    },
    /// The program exists but cannot be executed.
    #[error("could not start {program}: permission denied; check that the file is executable")]
    PermissionDenied {
        /// The program as configured.
        program: String,
    },
    /// Any other failure of fork/exec or of the child setup before exec.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program as configured.
        program: String,
        /// The underlying error.
        source: io::Error,
    },
    /// An output capture file or its parent directory could not be prepared.
    #[error("could not prepare output capture file {path}: {source}")]
    CaptureFile {
        /// The capture file path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Called outside a Tokio runtime.
    #[error("process supervision must run inside a Tokio runtime (with IO and time enabled)")]
    NoRuntime,
    /// The start identity of a process could not be read.
    #[error("could not read the start identity of process {pid}: {reason}")]
    Identity {
        /// The process id.
        pid: i32,
        /// What was missing or malformed.
        reason: String,
    },
    /// A start identity string is malformed.
    #[error("invalid start identity: {0}; expected boot_id:pid:starttime")]
    IdentityParse(String),
    /// A system call about a child failed unexpectedly.
    #[error("process {pid}: {operation} failed: {source}")]
    Os {
        /// The process (or group) id.
        pid: i32,
        /// The operation, e.g. "waitid".
        operation: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// The leader survived `SIGKILL` for longer than the bound (e.g. stuck in uninterruptible sleep).
    #[error("process {pid} did not exit within {waited_ms} ms after SIGKILL")]
    StillRunning {
        /// The process id.
        pid: i32,
        /// How long we waited.
        waited_ms: u64,
    },
}

impl ProcessError {
    pub(crate) fn os(pid: i32, operation: &'static str, source: impl Into<io::Error>) -> Self {
        Self::Os {
            pid,
            operation,
            source: source.into(),
        }
    }
}
