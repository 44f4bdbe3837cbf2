//! Memory-bounded line reading over any [`BufRead`].
//!
//! The reader never holds more than [`FRAME_BYTES_MAX`] bytes of one line. A longer line is
//! reported as [`FrameError::TooLarge`] as soon as the limit is passed, without reading the rest
//! of it: for this protocol an oversized frame ends the conversation, so there is nothing to
//! resynchronise.

use crate::frame::{FRAME_BYTES_MAX, FRAME_TERMINATOR, Frame, FrameError, decode_line};
use std::io::{self, BufRead};
use thiserror::Error;

/// Reading a frame failed.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The underlying stream failed.
    #[error("cannot read a frame: {0}")]
    Io(#[from] io::Error),
    /// A line arrived (or began) that is not an acceptable frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Splits a byte stream into lines of at most [`FRAME_BYTES_MAX`] bytes.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    line: Vec<u8>,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps `inner`. Nothing is read until [`Self::read_line`] or [`Self::read_frame`].
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            line: Vec::new(),
        }
    }

    /// Reads the next line, its trailing `\n` included, without looking at its content.
    /// `Ok(None)` means the stream ended cleanly between lines.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] once a line passes [`FRAME_BYTES_MAX`] bytes,
    /// [`FrameError::MissingNewline`] when the stream ends mid-line, [`ReadError::Io`] when the
    /// stream fails.
    pub fn read_line(&mut self) -> Result<Option<&[u8]>, ReadError> {
        self.line.clear();
        loop {
            let chunk = fill_buf_retrying(&mut self.inner)?;
            if chunk.is_empty() {
                return self.end_of_stream();
            }
            let newline = chunk.iter().position(|&byte| byte == FRAME_TERMINATOR);
            let take = newline.map_or(chunk.len(), |index| index + 1);
            let total = self.line.len().saturating_add(take);
            if total > FRAME_BYTES_MAX {
                self.line.clear();
                return Err(FrameError::TooLarge {
                    bytes: total,
                    max: FRAME_BYTES_MAX,
                }
                .into());
            }
            self.line.extend_from_slice(chunk.get(..take).unwrap_or(chunk));
            self.inner.consume(take);
            if newline.is_some() {
                return Ok(Some(&self.line));
            }
        }
    }

    /// Reads and decodes the next frame. `Ok(None)` means the stream ended cleanly between frames.
    ///
    /// # Errors
    ///
    /// As [`Self::read_line`], and [`ReadError::Frame`] when the line is not one envelope
    /// ([`decode_line`]).
    pub fn read_frame(&mut self) -> Result<Option<Frame>, ReadError> {
        match self.read_line()? {
            Some(line) => Ok(Some(decode_line(line)?)),
            None => Ok(None),
        }
    }

    /// Returns the wrapped stream.
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn end_of_stream(&mut self) -> Result<Option<&[u8]>, ReadError> {
        if self.line.is_empty() {
            return Ok(None);
        }
        let bytes = self.line.len();
        self.line.clear();
        Err(FrameError::MissingNewline { bytes }.into())
    }
}

/// `fill_buf`, retried on `Interrupted` (a signal is not an error of the stream).
fn fill_buf_retrying<R: BufRead>(reader: &mut R) -> io::Result<&[u8]> {
    loop {
        match reader.fill_buf() {
            Ok(_) => break,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    reader.fill_buf()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};

    #[test]
    fn splits_lines_across_small_buffers() {
        let data = b"{\"a\":1}\n{\"b\":2}\n".to_vec();
        let mut reader = LineReader::new(BufReader::with_capacity(3, Cursor::new(data)));
        assert_eq!(reader.read_line().expect("line"), Some(&b"{\"a\":1}\n"[..]));
        assert_eq!(reader.read_line().expect("line"), Some(&b"{\"b\":2}\n"[..]));
        assert_eq!(reader.read_line().expect("end"), None);
    }

    #[test]
    fn reports_a_line_cut_by_the_end_of_the_stream() {
        let mut reader = LineReader::new(Cursor::new(b"{\"a\":1}".to_vec()));
        assert!(matches!(
            reader.read_line(),
            Err(ReadError::Frame(FrameError::MissingNewline { bytes: 7 }))
        ));
    }

    #[test]
    fn stops_an_oversized_line_at_the_limit() {
        let data = vec![b'x'; FRAME_BYTES_MAX * 2];
        let mut reader = LineReader::new(BufReader::new(Cursor::new(data)));
        match reader.read_line() {
            Err(ReadError::Frame(FrameError::TooLarge { bytes, max })) => {
                assert!(bytes > max && bytes <= max + 8 * 1024, "counted {bytes}");
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_line_of_exactly_the_limit() {
        let mut data = vec![b' '; FRAME_BYTES_MAX - 1];
        data.push(b'\n');
        let mut reader = LineReader::new(BufReader::new(Cursor::new(data)));
        assert_eq!(
            reader.read_line().expect("line").map(<[u8]>::len),
            Some(FRAME_BYTES_MAX)
        );
    }

    #[test]
    fn decodes_frames() {
        let mut reader = LineReader::new(Cursor::new(b"[]\n".to_vec()));
        assert!(matches!(
            reader.read_frame(),
            Err(ReadError::Frame(FrameError::NotObject))
        ));
    }
}
