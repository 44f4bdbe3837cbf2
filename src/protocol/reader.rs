//! Incremental, memory-bounded frame reading over any [`BufRead`].
//!
//! The reader never holds more than [`FRAME_BYTES_MAX`] bytes of one line. A longer line is
//! reported as [`FrameError::TooLarge`] as soon as the limit is passed; the rest of that line is
//! then skipped (without buffering it) before the next line is read. Callers on the client socket
//! close the connection on any frame error; the skip only keeps the reader well defined.

use super::frame::{FRAME_BYTES_MAX, FRAME_TERMINATOR, FrameError, decode_frame};
use serde_json::{Map, Value};
use std::io::{self, BufRead};
use thiserror::Error;

/// Reading a frame failed.
#[derive(Debug, Error)]
pub enum FrameReadError {
    /// The underlying stream failed.
    #[error("cannot read frame from the connection: {0}")]
    Io(#[from] io::Error),
    /// A complete line arrived but is not an acceptable frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Splits a byte stream into frames of at most [`FRAME_BYTES_MAX`] bytes.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    line: Vec<u8>,
    skipping_oversized_line: bool,
}

impl<R: BufRead> FrameReader<R> {
    /// Wraps `inner`. Nothing is read until [`Self::read_line`] or [`Self::read_frame`].
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            line: Vec::new(),
            skipping_oversized_line: false,
        }
    }

    /// Reads and decodes the next frame. `Ok(None)` means the stream ended cleanly between frames.
    ///
    /// # Errors
    ///
    /// [`FrameReadError::Io`] when the stream fails, [`FrameReadError::Frame`] when the line is too
    /// large, ends without a newline, or is not one canonical JSON object.
    pub fn read_frame(&mut self) -> Result<Option<Map<String, Value>>, FrameReadError> {
        match self.read_line()? {
            Some(line) => Ok(Some(decode_frame(line)?)),
            None => Ok(None),
        }
    }

    /// Reads the next raw line, including its trailing `\n`, without validating its content.
    ///
    /// `Ok(None)` means the stream ended cleanly between lines.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] once a line passes [`FRAME_BYTES_MAX`] bytes (its `bytes` is the
    /// count seen so far, just past the limit), [`FrameError::MissingNewline`] when the stream
    /// ends mid-line, and [`FrameReadError::Io`] when the stream fails.
    pub fn read_line(&mut self) -> Result<Option<&[u8]>, FrameReadError> {
        self.line.clear();
        if self.skipping_oversized_line && !self.skip_to_next_line()? {
            return Ok(None);
        }
        loop {
            let chunk = fill_buf_retrying(&mut self.inner)?;
            if chunk.is_empty() {
                return self.end_of_stream();
            }
            let newline = chunk.iter().position(|&byte| byte == FRAME_TERMINATOR);
            let take = newline.map_or(chunk.len(), |index| index + 1);
            let total = self.line.len().saturating_add(take);
            if total > FRAME_BYTES_MAX {
                return Err(self.oversized(total).into());
            }
            self.line.extend_from_slice(chunk.get(..take).unwrap_or(chunk));
            self.inner.consume(take);
            if newline.is_some() {
                return Ok(Some(&self.line));
            }
        }
    }

    /// Returns the wrapped stream.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Borrows the wrapped stream.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    fn end_of_stream(&mut self) -> Result<Option<&[u8]>, FrameReadError> {
        if self.line.is_empty() {
            return Ok(None);
        }
        let bytes = self.line.len();
        self.line.clear();
        Err(FrameError::MissingNewline { bytes }.into())
    }

    /// Records an oversized line. Its unbuffered remainder (still unconsumed in `inner`, up to and
    /// including the newline) is skipped by the next read.
    fn oversized(&mut self, total: usize) -> FrameError {
        self.line.clear();
        self.skipping_oversized_line = true;
        FrameError::TooLarge {
            bytes: total,
            max: FRAME_BYTES_MAX,
        }
    }

    /// Consumes the rest of an oversized line. Returns `false` if the stream ended first.
    fn skip_to_next_line(&mut self) -> io::Result<bool> {
        loop {
            let chunk = fill_buf_retrying(&mut self.inner)?;
            if chunk.is_empty() {
                self.skipping_oversized_line = false;
                return Ok(false);
            }
            let newline = chunk.iter().position(|&byte| byte == FRAME_TERMINATOR);
            let take = newline.map_or(chunk.len(), |index| index + 1);
            self.inner.consume(take);
            if newline.is_some() {
                self.skipping_oversized_line = false;
                return Ok(true);
            }
        }
    }
}

fn fill_buf_retrying<R: BufRead>(reader: &mut R) -> io::Result<&[u8]> {
    loop {
        match reader.fill_buf() {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // Re-borrow through a second call so the returned slice's lifetime is the caller's.
            Ok(_) => return reader.fill_buf(),
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor, Read};

    fn reader(bytes: Vec<u8>, capacity: usize) -> FrameReader<BufReader<Cursor<Vec<u8>>>> {
        FrameReader::new(BufReader::with_capacity(capacity, Cursor::new(bytes)))
    }

    fn codes<R: BufRead>(reader: &mut FrameReader<R>) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match reader.read_frame() {
                Ok(None) => return out,
                Ok(Some(object)) => out.push(Value::Object(object).to_string()),
                Err(FrameReadError::Frame(error)) => out.push(error.code().to_owned()),
                Err(FrameReadError::Io(error)) => panic!("unexpected io error {error}"),
            }
        }
    }

    #[test]
    fn reads_frames_across_small_buffers() {
        let mut frames = reader(b"{\"a\":1}\n{}\n{\"b\":[]}\n".to_vec(), 3);
        assert_eq!(codes(&mut frames), [r#"{"a":1}"#, "{}", r#"{"b":[]}"#]);
    }

    #[test]
    fn a_truncated_last_line_is_missing_its_newline() {
        let mut frames = reader(b"{}\n{\"a\"".to_vec(), 8);
        assert_eq!(codes(&mut frames), ["{}", "missing_newline"]);
    }

    #[test]
    fn an_oversized_line_is_reported_then_skipped() {
        for capacity in [1, 7, 4096, 2 * FRAME_BYTES_MAX] {
            let mut bytes = vec![b'x'; FRAME_BYTES_MAX + 10];
            bytes.extend_from_slice(b"\n{\"ok\":true}\n");
            let mut frames = reader(bytes, capacity);
            assert_eq!(codes(&mut frames), ["too_large", r#"{"ok":true}"#], "{capacity}");
        }
    }

    #[test]
    fn a_line_of_exactly_the_limit_fits() {
        let mut bytes = vec![b' '; FRAME_BYTES_MAX - 3];
        bytes.extend_from_slice(b"{}\n");
        let mut frames = reader(bytes, 64 * 1024);
        let line = frames.read_line().expect("read").expect("one line");
        assert_eq!(line.len(), FRAME_BYTES_MAX);
    }

    #[test]
    fn an_oversized_line_is_not_buffered_whole() {
        let mut frames = reader(vec![b'x'; 3 * FRAME_BYTES_MAX], 64 * 1024);
        let error = frames.read_line().expect_err("too large");
        assert!(matches!(
            error,
            FrameReadError::Frame(FrameError::TooLarge { bytes, .. }) if bytes <= FRAME_BYTES_MAX + 64 * 1024
        ));
        assert!(frames.line.capacity() <= 2 * FRAME_BYTES_MAX);
        assert!(frames.read_line().expect("stream ends").is_none());
    }

    struct Interrupting {
        interrupted: bool,
        inner: Cursor<Vec<u8>>,
    }

    impl Read for Interrupting {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(io::ErrorKind::Interrupted.into());
            }
            self.inner.read(buf)
        }
    }

    #[test]
    fn interrupted_reads_are_retried() {
        let source = Interrupting {
            interrupted: false,
            inner: Cursor::new(b"{}\n".to_vec()),
        };
        let mut frames = FrameReader::new(BufReader::new(source));
        assert_eq!(codes(&mut frames), ["{}"]);
    }
}
