//! The server log: `logs/server.log` in the state directory, user-only, bounded by
//! rotation (one previous file kept). Log lines carry IDs and counts, never payloads,
//! prompts, tokens or paths of projects.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The log file is rotated when it passes this size; at most two files exist.
pub const LOG_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;
const LOG_FILE_MODE: u32 = 0o600;

#[derive(Clone)]
pub struct BoundedLog {
    inner: Arc<Mutex<LogFile>>,
}

struct LogFile {
    path: PathBuf,
    file: File,
    bytes: u64,
    /// Records that could not be written (a full disk) since the last one that could.
    dropped: u64,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(LOG_FILE_MODE)
        .open(path)
}

impl BoundedLog {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = open_append(path)?;
        let bytes = file.metadata()?.len();
        Ok(Self {
            inner: Arc::new(Mutex::new(LogFile {
                path: path.to_path_buf(),
                file,
                bytes,
                dropped: 0,
            })),
        })
    }
}

impl LogFile {
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.bytes + line.len() as u64 > LOG_FILE_BYTES_MAX {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.bytes += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let previous = self.path.with_extension("log.1");
        std::fs::rename(&self.path, previous)?;
        self.file = open_append(&self.path)?;
        self.bytes = 0;
        Ok(())
    }
}

impl Write for BoundedLog {
    /// One call per record (the formatter writes a whole line at once): its interior control
    /// characters are escaped, so a value in a record can never forge another line.
    ///
    /// A record that cannot be written (the disk is full) is dropped, never an error: the
    /// formatter would report it on stderr, which a full disk also refuses, and a failed
    /// print panics the logging thread (the store's writer among them). The next record
    /// that fits says how many were lost.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = crate::printable::log_line(buf);
        let mut log = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if log.dropped > 0 {
            let note = format!(
                "({} log records were lost: the log could not be written)\n",
                log.dropped
            );
            if log.append(note.as_bytes()).is_err() {
                log.dropped += 1;
                return Ok(buf.len());
            }
            log.dropped = 0;
        }
        if log.append(&line).is_err() {
            log.dropped += 1;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut log = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        log.file.flush()
    }
}

/// The filter when `PI_WORKFLOWS_LOG` sets none. `ractor` opens an INFO span for every actor
/// it starts (named `Actor`, with its numeric ID: two per run); enabled, each cost a registry
/// entry and its formatting (~0.6 % of the server's CPU in a profile of sequential runs) and
/// gave every line of that actor a prefix that names nothing a reader knows.
pub const LOG_FILTER_DEFAULT: &str = "info,ractor=warn";

/// Send `tracing` output to the bounded log (JSON lines when `json`).
pub fn install(path: &Path, json: bool) -> anyhow::Result<()> {
    let log = BoundedLog::open(path)?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PI_WORKFLOWS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(LOG_FILTER_DEFAULT));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        // Never print to stderr from a log call: see `BoundedLog::write`.
        .log_internal_errors(false)
        .with_writer(move || log.clone());
    let installed = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    installed.map_err(|err| anyhow::anyhow!("could not install the server log: {err}"))
}
