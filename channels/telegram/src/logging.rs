//! Logs: `tracing` to stderr, one line per event, this crate's events only.
//!
//! What a line may hold: a reason, an operation, an error code, a count. Never presentation
//! text, user text, ids or the token. Every line passes the [`Redactor`] anyway, and only this
//! crate's targets are written, so a record from the HTTP stack (which might name a URL, and so
//! the token) never reaches stderr.

use crate::token::Redactor;
use std::io::{self, Write};
use std::sync::OnceLock;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

/// The only target whose events are written.
const LOG_TARGET: &str = "channel_telegram";

static REDACTOR: OnceLock<Redactor> = OnceLock::new();

/// Installs the stderr logger (once; later calls do nothing).
pub fn init() {
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(RedactingStderr)
        .with_ansi(false)
        .with_target(false);
    let filter = Targets::new().with_target(LOG_TARGET, Level::INFO);
    let subscriber = tracing_subscriber::registry().with(layer).with(filter);
    // `set_global_default`, not `init`: `init` would also route the `log` crate's records here.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// From now on every log line is redacted with `redactor`.
pub fn set_redactor(redactor: Redactor) {
    let _ = REDACTOR.set(redactor);
}

/// Panic messages go through the redactor too, as one line.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let line = format!("pi-workflows-telegram: internal error: {info}").replace('\n', " ");
        write_stderr_line(&line);
    }));
}

/// Writes a line to stderr with the token (if known) replaced.
pub fn write_stderr_line(line: &str) {
    let redacted = match REDACTOR.get() {
        Some(redactor) => redactor.redact(line).into_owned(),
        None => line.to_owned(),
    };
    let _ = writeln!(io::stderr().lock(), "{redacted}");
}

/// `MakeWriter` for [`RedactingWriter`].
struct RedactingStderr;

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingWriter;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter
    }
}

/// The formatter writes each event with one `write_all`, so one write is one whole line.
struct RedactingWriter;

impl Write for RedactingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let redacted = match REDACTOR.get() {
            Some(redactor) => redactor.redact(&text).into_owned(),
            None => text.into_owned(),
        };
        io::stderr().lock().write_all(redacted.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().lock().flush()
    }
}
