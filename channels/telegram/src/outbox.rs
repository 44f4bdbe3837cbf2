//! The adapter's half of the channel: frames to stdout, numbered.

use crate::token::Redactor;
use channel_protocol::payload::Message;
use channel_protocol::{ChannelLaunch, Frame, FrameError, Header, encode_line};
use std::io::{self, Write};
use thiserror::Error;

/// A frame could not be written.
#[derive(Debug, Error)]
pub enum OutboxError {
    /// The frame cannot be encoded (a bug: every payload is bounded).
    #[error("cannot encode a {kind} frame: {source}")]
    Encode {
        /// The kind.
        kind: &'static str,
        /// Why.
        source: FrameError,
    },
    /// Stdout failed: the server is gone.
    #[error("cannot write to stdout: {0}")]
    Io(#[from] io::Error),
}

/// Writes frames, each with the next sequence number.
pub struct Outbox<W: Write> {
    out: W,
    adapter_epoch: u64,
    profile: String,
    last_sequence: u64,
    redactor: Redactor,
}

impl<W: Write> Outbox<W> {
    /// An outbox for `launch`'s epoch and profile; the first frame gets sequence 1.
    pub fn new(out: W, launch: &ChannelLaunch, redactor: Redactor) -> Self {
        Self {
            out,
            adapter_epoch: launch.adapter_epoch,
            profile: launch.profile.clone(),
            last_sequence: 0,
            redactor,
        }
    }

    /// Writes `message` as the next frame and flushes it.
    ///
    /// # Errors
    ///
    /// [`OutboxError`] when the frame cannot be encoded or written.
    pub fn send(
        &mut self,
        message: &Message,
        channel_revision: u64,
        attempt_id: Option<&str>,
    ) -> Result<(), OutboxError> {
        let kind = message.kind().as_str();
        let header = Header {
            adapter_epoch: self.adapter_epoch,
            profile: self.profile.clone(),
            sequence: self.last_sequence + 1,
            channel_revision,
            attempt_id: attempt_id.map(str::to_owned),
        };
        let encode_error = |source| OutboxError::Encode { kind, source };
        let frame = Frame::new(header, message).map_err(encode_error)?;
        let line = encode_line(&frame).map_err(encode_error)?;
        // Defence in depth: no frame carries the token, even if some text picked it up. The
        // replacement has no JSON-special characters, so the line stays canonical.
        let text = String::from_utf8_lossy(&line);
        let redacted = self.redactor.redact(&text);
        self.out.write_all(redacted.as_bytes())?;
        self.out.flush()?;
        self.last_sequence += 1;
        Ok(())
    }
}
