//! Bounded async line reading for client connections: never buffers more than one frame.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::protocol::FRAME_BYTES_MAX;

#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A complete line, including its `\n`, is in the buffer.
    Line,
    /// The peer closed the connection (a partial last line is discarded).
    Closed,
    /// The line passed `FRAME_BYTES_MAX` before its newline.
    TooLarge,
}

/// Read one line into `line` (cleared first), stopping at `FRAME_BYTES_MAX`.
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, line: &mut Vec<u8>) -> std::io::Result<LineRead> {
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(LineRead::Closed);
        }
        let (chunk, complete) = match available.iter().position(|byte| *byte == b'\n') {
            Some(end) => (&available[..=end], true),
            None => (available, false),
        };
        if line.len() + chunk.len() > FRAME_BYTES_MAX {
            return Ok(LineRead::TooLarge);
        }
        line.extend_from_slice(chunk);
        let used = chunk.len();
        reader.consume(used);
        if complete {
            return Ok(LineRead::Line);
        }
    }
}
