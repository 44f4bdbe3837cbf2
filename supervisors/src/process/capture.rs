//! Bounded capture of a child's stdout/stderr into user-only files.
//!
//! A capture file is created at its stream's first byte, not at the spawn: most children of a
//! workflow server print nothing, and creating two files per child was a measurable part of a
//! run's cost (ext4's inode allocation, then a rename and a later delete of each).

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::error::ProcessError;
use super::{CAPTURE_READ_CHUNK_BYTES, CAPTURE_TRUNCATION_MARKER_PREFIX};

const CAPTURE_FILE_MODE: u32 = 0o600;
const CAPTURE_DIR_MODE: u32 = 0o700;

/// What happened to one captured stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCapture {
    /// Output bytes written to the file (excluding the truncation marker).
    pub bytes_written: u64,
    /// Output bytes read from the pipe and discarded after the bound (or after a write failure).
    pub bytes_discarded: u64,
    /// The bound was reached and the marker line was appended.
    pub truncated: bool,
    /// Writing to the file failed at some point (the stream was still drained).
    pub write_failed: bool,
    /// The stream reached end of file and the file was flushed.
    pub complete: bool,
}

/// Capture results for both streams (`None` for a stream that was not captured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureReport {
    /// Stdout capture.
    pub stdout: Option<StreamCapture>,
    /// Stderr capture.
    pub stderr: Option<StreamCapture>,
}

/// Where one stream's capture goes, shared by its pump (which creates the file at the first
/// byte) and its `ProcessChild` (which may move it, before or after the file exists). The
/// file is created under the lock, so a move never races a creation.
#[derive(Debug, Clone)]
pub(crate) struct CaptureTarget(Arc<Mutex<TargetState>>);

#[derive(Debug)]
struct TargetState {
    path: PathBuf,
    created: bool,
}

impl CaptureTarget {
    /// A capture to `path`. A file already there is removed now: it must never pass for this
    /// child's output when the child prints nothing.
    pub(crate) fn prepare(path: &Path) -> Result<Self, ProcessError> {
        remove_stale(path).map_err(|source| ProcessError::CaptureFile {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self(Arc::new(Mutex::new(TargetState {
            path: path.to_owned(),
            created: false,
        }))))
    }

    fn state(&self) -> MutexGuard<'_, TargetState> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Create the file (the stream's first byte arrived).
    fn create(&self) -> Result<File, ProcessError> {
        let mut state = self.state();
        let file = open_capture_file(&state.path)?;
        state.created = true;
        Ok(file)
    }

    /// Capture to `to` from now on; a file already created is renamed there (replacing what
    /// was at `to`), else a file at `to` is removed, as at the spawn.
    pub(crate) fn move_to(&self, to: &Path) -> std::io::Result<()> {
        let mut state = self.state();
        if state.created {
            std::fs::rename(&state.path, to)?;
        } else {
            remove_stale(to)?;
        }
        state.path = to.to_owned();
        Ok(())
    }
}

/// Remove a file left at a capture path, so it never passes for a child's output.
fn remove_stale(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        removed => removed,
    }
}

/// Creates (or truncates) a capture file with mode 0600, creating missing parents with mode 0700.
/// Refuses to follow a symlink at the final path component.
fn open_capture_file(path: &Path) -> Result<File, ProcessError> {
    let fail = |source| ProcessError::CaptureFile {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        DirBuilder::new()
            .recursive(true)
            .mode(CAPTURE_DIR_MODE)
            .create(parent)
            .map_err(fail)?;
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(CAPTURE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(fail)?;
    // An existing file keeps its old mode on open: force user-only.
    file.set_permissions(Permissions::from_mode(CAPTURE_FILE_MODE))
        .map_err(fail)?;
    Ok(file)
}

/// Starts a task draining `reader` into `target`'s file, writing at most `bytes_max` bytes.
pub(crate) fn start_capture<R>(reader: R, target: CaptureTarget, bytes_max: u64) -> JoinHandle<StreamCapture>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(pump(reader, target, bytes_max))
}

fn truncation_marker(bytes_max: u64, last_byte: Option<u8>) -> String {
    let newline = if matches!(last_byte, None | Some(b'\n')) {
        ""
    } else {
        "\n"
    };
    format!("{newline}{CAPTURE_TRUNCATION_MARKER_PREFIX}{bytes_max} bytes]\n")
}

struct Sink {
    target: CaptureTarget,
    /// Created at the first byte.
    file: Option<tokio::fs::File>,
    bytes_max: u64,
    last_byte: Option<u8>,
    report: StreamCapture,
}

impl Sink {
    async fn accept(&mut self, chunk: &[u8]) {
        if self.report.write_failed {
            self.report.bytes_discarded += chunk.len() as u64;
            return;
        }
        let room = self.bytes_max.saturating_sub(self.report.bytes_written);
        let keep = usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len());
        if keep > 0 {
            if self.write(&chunk[..keep]).await {
                self.last_byte = chunk[..keep].last().copied();
                self.report.bytes_written += keep as u64;
            } else {
                self.report.bytes_discarded += keep as u64;
            }
        }
        let rest = (chunk.len() - keep) as u64;
        if rest > 0 {
            self.report.bytes_discarded += rest;
            self.mark_truncated().await;
        }
    }

    async fn mark_truncated(&mut self) {
        if self.report.truncated || self.report.write_failed {
            return;
        }
        self.report.truncated = true;
        let marker = truncation_marker(self.bytes_max, self.last_byte);
        self.write(marker.as_bytes()).await;
    }

    /// Writes `bytes`; on failure marks the stream failed (the rest is discarded) and returns false.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        let file = match &mut self.file {
            Some(file) => file,
            // The stream's first byte: only now is there output to keep.
            None => match self.target.create() {
                Ok(file) => self.file.insert(tokio::fs::File::from_std(file)),
                Err(error) => {
                    tracing::warn!(%error, "creating the capture file failed; discarding the output");
                    self.report.write_failed = true;
                    return false;
                }
            },
        };
        match file.write_all(bytes).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "writing captured output failed; discarding the rest");
                self.report.write_failed = true;
                false
            }
        }
    }

    async fn finish(mut self) -> StreamCapture {
        let Some(file) = self.file.as_mut() else {
            return self.report;
        };
        if let Err(error) = file.flush().await {
            tracing::warn!(%error, "flushing captured output failed");
            self.report.write_failed = true;
        }
        self.report
    }
}

async fn pump<R: AsyncRead + Unpin>(mut reader: R, target: CaptureTarget, bytes_max: u64) -> StreamCapture {
    let mut sink = Sink {
        target,
        file: None,
        bytes_max,
        last_byte: None,
        report: StreamCapture::default(),
    };
    let mut buf = vec![0_u8; CAPTURE_READ_CHUNK_BYTES];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => sink.accept(&buf[..n]).await,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                tracing::debug!(%error, "reading child output failed");
                return sink.finish().await;
            }
        }
    }
    let mut report = sink.finish().await;
    report.complete = true;
    report
}
