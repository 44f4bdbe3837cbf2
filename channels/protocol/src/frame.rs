//! The envelope of every channel frame, and its canonical line encoding.
//!
//! A frame is one RFC 8785 canonical JSON object followed by `\n`, at most [`FRAME_BYTES_MAX`]
//! bytes with the newline. [`decode_line`] accepts a line only when its bytes are exactly the
//! canonical encoding of what they parse to (as the client protocol does), so one value has one
//! spelling on the wire and duplicate keys cannot hide a second value.
//!
//! Decoding stops at the envelope: the fencing fields ([`Header`]) are checked and the payload
//! stays a raw JSON object until the receiver asks for it ([`Frame::message`]), so a stale frame
//! is refused before its payload is read.

use crate::limits::{
    ATTEMPT_ID_BYTES_MAX, DIAGNOSTIC_BYTES_MAX, PayloadError, bounded_text, is_printable, safe_decoder_detail,
    valid_profile,
};
use crate::payload::Message;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// The `protocol` value of every frame.
pub const PROTOCOL: &str = "pi-workflows.channel.v1";

/// Largest frame in bytes, newline included (1 MiB).
pub const FRAME_BYTES_MAX: usize = 1024 * 1024;

/// The byte that ends every frame.
pub const FRAME_TERMINATOR: u8 = b'\n';

/// Largest integer the canonical encoding writes exactly (2^53 − 1): every number is an IEEE
/// 754 double on the wire, so a larger one would silently change.
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// The five message kinds (closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// adapter → server: the adapter reached its bot and is ready for work.
    #[serde(rename = "channel.ready")]
    Ready,
    /// server → adapter: show, edit, prompt for or track one channel message.
    #[serde(rename = "channel.present")]
    Present,
    /// adapter → server: the result of exactly one present attempt.
    #[serde(rename = "channel.settle")]
    Settle,
    /// adapter → server: a press or reply from an allowed person.
    #[serde(rename = "channel.answer")]
    Answer,
    /// both ways: stop (server → adapter), or why the adapter stops (adapter → server).
    #[serde(rename = "channel.exiting")]
    Exiting,
}

impl Kind {
    /// The wire name, e.g. `channel.present`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "channel.ready",
            Self::Present => "channel.present",
            Self::Settle => "channel.settle",
            Self::Answer => "channel.answer",
            Self::Exiting => "channel.exiting",
        }
    }

    /// Whether the server may send this kind to an adapter.
    #[must_use]
    pub fn server_sends(self) -> bool {
        matches!(self, Self::Present | Self::Exiting)
    }

    /// Whether an adapter may send this kind to the server.
    #[must_use]
    pub fn adapter_sends(self) -> bool {
        !matches!(self, Self::Present)
    }
}

/// The fencing fields every frame carries. The receiver checks them before the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The adapter epoch of the launch (≥ 1); a frame of another epoch is stale.
    pub adapter_epoch: u64,
    /// The profile name of the launch.
    pub profile: String,
    /// Per direction: 1 for the first frame a side sends, + 1 for each next one.
    pub sequence: u64,
    /// The sender's expected revision of the channel message concerned, or 0.
    pub channel_revision: u64,
    /// The present attempt concerned (`channel.present` of a send, edit or prompt and its
    /// `channel.settle`), otherwise `None`.
    pub attempt_id: Option<String>,
}

/// One decoded frame: kind, fencing fields and the still-raw payload object.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The message kind.
    pub kind: Kind,
    /// The fencing fields.
    pub header: Header,
    /// The payload object, decoded by kind on demand ([`Frame::message`]).
    pub payload: Map<String, Value>,
}

impl Frame {
    /// Builds the frame carrying `message` under `header`.
    ///
    /// # Errors
    ///
    /// [`FrameError::Encode`] when the payload has no JSON object form (never for the payload
    /// types of this crate).
    pub fn new(header: Header, message: &Message) -> Result<Self, FrameError> {
        let payload = match message.payload_value() {
            Ok(Value::Object(object)) => object,
            Ok(_) => return Err(FrameError::Encode("payload is not an object".to_owned())),
            Err(error) => {
                return Err(FrameError::Encode(bounded_text(
                    &error.to_string(),
                    DIAGNOSTIC_BYTES_MAX,
                )));
            }
        };
        Ok(Self {
            kind: message.kind(),
            header,
            payload,
        })
    }

    /// Decodes the payload for this frame's kind, with every field check of [`crate::limits`].
    ///
    /// # Errors
    ///
    /// [`PayloadError`] naming the first field that is missing, mistyped or out of bounds.
    pub fn message(&self) -> Result<Message, PayloadError> {
        Message::from_payload(self.kind, &self.payload)
    }
}

/// What goes on the wire (private: [`Frame`] is the public shape).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WireFrame {
    protocol: String,
    kind: Kind,
    adapter_epoch: u64,
    profile: String,
    sequence: u64,
    channel_revision: u64,
    attempt_id: Option<String>,
    payload: Value,
}

/// A line is not one acceptable frame. Messages never echo the input, only sizes, offsets and
/// field names.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The frame (newline included) is longer than the limit.
    #[error("frame of {bytes} bytes exceeds the {max}-byte limit (newline included)")]
    TooLarge {
        /// Bytes seen; a streaming reader stops counting just past `max`.
        bytes: usize,
        /// The limit, [`FRAME_BYTES_MAX`].
        max: usize,
    },
    /// The line does not end with `\n` (or the stream ended mid-line).
    #[error("frame of {bytes} bytes has no trailing newline")]
    MissingNewline {
        /// Bytes received before the line ended.
        bytes: usize,
    },
    /// The line is not valid UTF-8.
    #[error("frame is not valid UTF-8 at byte offset {offset}")]
    NotUtf8 {
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// The line is not one JSON value.
    #[error("frame is not one JSON value ({detail})")]
    NotJson {
        /// The parser's diagnostic (kind, line and column), bounded.
        detail: String,
    },
    /// The JSON value is not an object.
    #[error("frame is not a JSON object")]
    NotObject,
    /// The bytes are valid JSON but not its RFC 8785 canonical encoding.
    #[error("frame is not RFC 8785 canonical JSON: first difference at byte offset {offset}")]
    NotCanonical {
        /// Offset of the first byte that differs from the canonical re-encoding.
        offset: usize,
    },
    /// The object is not a channel envelope (a missing, unknown or mistyped field).
    #[error("frame is not a {PROTOCOL} envelope ({detail})")]
    Envelope {
        /// The decoder's diagnostic, bounded.
        detail: String,
    },
    /// An envelope field is out of its bounds.
    #[error("frame field {field} is invalid: {rule}")]
    BadHeader {
        /// The wire name of the field.
        field: &'static str,
        /// What the field must be.
        rule: &'static str,
    },
    /// An outbound frame cannot be encoded.
    #[error("cannot encode frame: {0}")]
    Encode(String),
}

impl FrameError {
    /// Short stable code for this error kind (for logs and counters).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "tooLarge",
            Self::MissingNewline { .. } => "missingNewline",
            Self::NotUtf8 { .. } => "notUtf8",
            Self::NotJson { .. } => "notJson",
            Self::NotObject => "notObject",
            Self::NotCanonical { .. } => "notCanonical",
            Self::Envelope { .. } => "envelope",
            Self::BadHeader { .. } => "badHeader",
            Self::Encode(_) => "encode",
        }
    }
}

/// Encodes `frame` as one line: canonical JSON bytes followed by `\n`.
///
/// # Errors
///
/// [`FrameError::BadHeader`] when a fencing field is out of bounds (so a frame that the peer
/// would refuse is never written), [`FrameError::Encode`] when the payload has no canonical form,
/// and [`FrameError::TooLarge`] when the line would exceed [`FRAME_BYTES_MAX`].
pub fn encode_line(frame: &Frame) -> Result<Vec<u8>, FrameError> {
    check_header(&frame.header)?;
    let wire = WireFrame {
        protocol: PROTOCOL.to_owned(),
        kind: frame.kind,
        adapter_epoch: frame.header.adapter_epoch,
        profile: frame.header.profile.clone(),
        sequence: frame.header.sequence,
        channel_revision: frame.header.channel_revision,
        attempt_id: frame.header.attempt_id.clone(),
        payload: Value::Object(frame.payload.clone()),
    };
    let mut bytes = serde_json_canonicalizer::to_vec(&wire)
        .map_err(|error| FrameError::Encode(bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX)))?;
    let line_bytes = bytes.len().saturating_add(1);
    if line_bytes > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge {
            bytes: line_bytes,
            max: FRAME_BYTES_MAX,
        });
    }
    bytes.push(FRAME_TERMINATOR);
    Ok(bytes)
}

/// Decodes one line (its bytes including the trailing `\n`) into a [`Frame`].
///
/// Checks, in order: size, terminator, UTF-8, one JSON value, an object, canonical bytes, the
/// envelope's fields and types, the header bounds. The payload is only required to be an object.
///
/// # Errors
///
/// The first check that fails, as a [`FrameError`] variant.
pub fn decode_line(line: &[u8]) -> Result<Frame, FrameError> {
    if line.len() > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge {
            bytes: line.len(),
            max: FRAME_BYTES_MAX,
        });
    }
    let Some((&FRAME_TERMINATOR, body)) = line.split_last() else {
        return Err(FrameError::MissingNewline { bytes: line.len() });
    };
    let text = std::str::from_utf8(body).map_err(|error| FrameError::NotUtf8 {
        offset: error.valid_up_to(),
    })?;
    let value: Value = serde_json::from_str(text).map_err(|error| FrameError::NotJson {
        detail: bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX),
    })?;
    if !value.is_object() {
        return Err(FrameError::NotObject);
    }
    require_canonical(body, &value)?;
    let wire: WireFrame = serde_json::from_value(value).map_err(|error| FrameError::Envelope {
        detail: safe_decoder_detail(&error.to_string()),
    })?;
    into_frame(wire)
}

fn into_frame(wire: WireFrame) -> Result<Frame, FrameError> {
    if wire.protocol != PROTOCOL {
        return Err(FrameError::BadHeader {
            field: "protocol",
            rule: "must be pi-workflows.channel.v1",
        });
    }
    let Value::Object(payload) = wire.payload else {
        return Err(FrameError::BadHeader {
            field: "payload",
            rule: "must be a JSON object",
        });
    };
    let header = Header {
        adapter_epoch: wire.adapter_epoch,
        profile: wire.profile,
        sequence: wire.sequence,
        channel_revision: wire.channel_revision,
        attempt_id: wire.attempt_id,
    };
    check_header(&header)?;
    Ok(Frame {
        kind: wire.kind,
        header,
        payload,
    })
}

fn check_header(header: &Header) -> Result<(), FrameError> {
    let bad = |field, rule| Err(FrameError::BadHeader { field, rule });
    if !(1..=SAFE_INTEGER_MAX).contains(&header.adapter_epoch) {
        return bad("adapterEpoch", "an integer from 1 to 2^53 - 1");
    }
    if !valid_profile(&header.profile) {
        return bad("profile", "1-64 characters of [A-Za-z0-9_-]");
    }
    if !(1..=SAFE_INTEGER_MAX).contains(&header.sequence) {
        return bad("sequence", "an integer from 1 to 2^53 - 1");
    }
    if header.channel_revision > SAFE_INTEGER_MAX {
        return bad("channelRevision", "an integer from 0 to 2^53 - 1");
    }
    if let Some(attempt_id) = &header.attempt_id
        && (attempt_id.is_empty() || attempt_id.len() > ATTEMPT_ID_BYTES_MAX || !is_printable(attempt_id))
    {
        return bad("attemptId", "null or 1-256 bytes of printable text");
    }
    Ok(())
}

fn require_canonical(body: &[u8], value: &Value) -> Result<(), FrameError> {
    let canonical = serde_json_canonicalizer::to_vec(value)
        .map_err(|error| FrameError::Encode(bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX)))?;
    if canonical == body {
        return Ok(());
    }
    let offset = body
        .iter()
        .zip(&canonical)
        .position(|(received, expected)| received != expected)
        .unwrap_or_else(|| body.len().min(canonical.len()));
    Err(FrameError::NotCanonical { offset })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{ExitReason, Exiting};

    fn header(sequence: u64) -> Header {
        Header {
            adapter_epoch: 3,
            profile: "ops".to_owned(),
            sequence,
            channel_revision: 0,
            attempt_id: None,
        }
    }

    fn exiting_frame() -> Frame {
        let message = Message::Exiting(Exiting {
            reason: ExitReason::Requested,
        });
        Frame::new(header(1), &message).expect("frame")
    }

    #[test]
    fn encodes_canonically_with_a_newline() {
        let line = encode_line(&exiting_frame()).expect("encode");
        let text = String::from_utf8(line).expect("utf8");
        assert_eq!(
            text,
            "{\"adapterEpoch\":3,\"attemptId\":null,\"channelRevision\":0,\"kind\":\"channel.exiting\",\
             \"payload\":{\"reason\":\"requested\"},\"profile\":\"ops\",\"protocol\":\"pi-workflows.channel.v1\",\
             \"sequence\":1}\n"
        );
    }

    #[test]
    fn round_trips() {
        let frame = exiting_frame();
        let line = encode_line(&frame).expect("encode");
        assert_eq!(decode_line(&line).expect("decode"), frame);
    }

    #[test]
    fn refuses_non_canonical_spellings() {
        let line = encode_line(&exiting_frame()).expect("encode");
        let text = String::from_utf8(line).expect("utf8");
        let spaced = text.replacen(":3,", ": 3,", 1);
        assert!(matches!(
            decode_line(spaced.as_bytes()),
            Err(FrameError::NotCanonical { .. })
        ));
        let float = text.replacen(":3,", ":3.0,", 1);
        assert!(matches!(
            decode_line(float.as_bytes()),
            Err(FrameError::NotCanonical { .. })
        ));
        let duplicate = text.replacen("{", "{\"adapterEpoch\":4,", 1);
        assert!(matches!(
            decode_line(duplicate.as_bytes()),
            Err(FrameError::NotCanonical { .. })
        ));
    }

    #[test]
    fn refuses_malformed_lines() {
        assert!(matches!(decode_line(b"{}"), Err(FrameError::MissingNewline { .. })));
        assert!(matches!(decode_line(b"[1]\n"), Err(FrameError::NotObject)));
        assert!(matches!(decode_line(b"{\n"), Err(FrameError::NotJson { .. })));
        assert!(matches!(decode_line(b"{\"a\":1} x\n"), Err(FrameError::NotJson { .. })));
        assert!(matches!(decode_line(b"\xff\n"), Err(FrameError::NotUtf8 { offset: 0 })));
        assert!(matches!(decode_line(b"{\"a\":1}\n"), Err(FrameError::Envelope { .. })));
    }

    #[test]
    fn refuses_unknown_kinds_fields_and_protocols() {
        let text = String::from_utf8(encode_line(&exiting_frame()).expect("encode")).expect("utf8");
        let kind = text.replace("channel.exiting", "channel.other");
        assert!(matches!(decode_line(kind.as_bytes()), Err(FrameError::Envelope { .. })));
        let extra = text.replace("\"sequence\":1}", "\"sequence\":1,\"zz\":1}");
        assert!(matches!(
            decode_line(extra.as_bytes()),
            Err(FrameError::Envelope { .. })
        ));
        let protocol = text.replace("channel.v1", "channel.v2");
        assert!(matches!(
            decode_line(protocol.as_bytes()),
            Err(FrameError::BadHeader { field: "protocol", .. })
        ));
    }

    #[test]
    fn refuses_out_of_bounds_headers_both_ways() {
        let mut frame = exiting_frame();
        frame.header.sequence = 0;
        assert!(matches!(
            encode_line(&frame),
            Err(FrameError::BadHeader { field: "sequence", .. })
        ));
        frame.header.sequence = SAFE_INTEGER_MAX + 1;
        assert!(matches!(
            encode_line(&frame),
            Err(FrameError::BadHeader { field: "sequence", .. })
        ));
        frame.header.sequence = 1;
        frame.header.profile = "bad profile".to_owned();
        assert!(matches!(
            encode_line(&frame),
            Err(FrameError::BadHeader { field: "profile", .. })
        ));
        let text = String::from_utf8(encode_line(&exiting_frame()).expect("encode")).expect("utf8");
        let epoch = text.replace("\"adapterEpoch\":3", "\"adapterEpoch\":0");
        assert!(matches!(
            decode_line(epoch.as_bytes()),
            Err(FrameError::BadHeader {
                field: "adapterEpoch",
                ..
            })
        ));
        let attempt = text.replace("\"attemptId\":null", "\"attemptId\":\"\"");
        assert!(matches!(
            decode_line(attempt.as_bytes()),
            Err(FrameError::BadHeader { field: "attemptId", .. })
        ));
    }

    #[test]
    fn refuses_oversized_lines() {
        let mut line = vec![b' '; FRAME_BYTES_MAX];
        line.push(b'\n');
        assert!(matches!(decode_line(&line), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn kinds_have_directions() {
        assert!(Kind::Present.server_sends() && !Kind::Present.adapter_sends());
        assert!(Kind::Exiting.server_sends() && Kind::Exiting.adapter_sends());
        for kind in [Kind::Ready, Kind::Settle, Kind::Answer] {
            assert!(kind.adapter_sends() && !kind.server_sends(), "{}", kind.as_str());
        }
    }
}
