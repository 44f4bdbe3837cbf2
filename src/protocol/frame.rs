//! One frame = one canonical JSON object followed by `\n`, at most [`FRAME_BYTES_MAX`] bytes.
//!
//! [`decode_frame`] accepts a line only when its bytes are exactly the RFC 8785 encoding of the
//! object they parse to. That single comparison rejects every alternative spelling of the same
//! value: insignificant whitespace, other key orders, other number spellings (`1.0`, `1E2`,
//! `1e+20`, `-0`), escapes the canonical form writes raw (`\u00e9`, `\/`), and duplicate keys
//! (the parsed object keeps one of them, so re-encoding comes out shorter).

use super::canonical::{CanonicalError, DIAGNOSTIC_BYTES_MAX, bounded_text, map_to_canonical_vec, to_canonical_vec};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// Largest frame in bytes, including the trailing newline (1 MiB, the durable event limit).
pub const FRAME_BYTES_MAX: usize = 1024 * 1024;

/// The byte that ends every frame.
pub const FRAME_TERMINATOR: u8 = b'\n';

/// A line is not one acceptable frame. Messages never echo the input, only sizes and offsets.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The frame (newline included) is longer than the limit.
    #[error(
        "frame of {bytes} bytes exceeds the {max}-byte limit (newline included); \
         split the data or send it as referenced content"
    )]
    TooLarge {
        /// Bytes seen; a streaming reader stops counting just past `max`.
        bytes: usize,
        /// The limit, [`FRAME_BYTES_MAX`].
        max: usize,
    },
    /// The line does not end with `\n` (or the stream ended mid-line).
    #[error("frame of {bytes} bytes has no trailing newline; end every frame with one \\n")]
    MissingNewline {
        /// Bytes received before the line ended without a newline.
        bytes: usize,
    },
    /// The line is not valid UTF-8.
    #[error("frame is not valid UTF-8 at byte offset {offset}; send UTF-8 text only")]
    NotUtf8 {
        /// Offset of the first byte that is not part of a valid UTF-8 sequence.
        offset: usize,
    },
    /// The line is not JSON.
    #[error("frame is not valid JSON ({detail}); send one JSON object per line")]
    NotJson {
        /// The parser's diagnostic (kind, line and column), bounded.
        detail: String,
    },
    /// Something other than insignificant whitespace follows the first JSON value.
    #[error("frame has data after its JSON value at byte offset {offset}; send one object per line")]
    TrailingData {
        /// Offset just past the end of the first JSON value.
        offset: usize,
    },
    /// The JSON value is not an object.
    #[error("frame holds a JSON {found}, not an object; every message is one JSON object")]
    NotObject {
        /// The JSON type found instead: `array`, `string`, `number`, `boolean` or `null`.
        found: &'static str,
    },
    /// The bytes are valid JSON but not its RFC 8785 canonical encoding.
    #[error(
        "frame is not RFC 8785 canonical JSON: first difference at byte offset {offset}; \
         encode with sorted keys, no whitespace and ECMAScript number formatting"
    )]
    NotCanonical {
        /// Offset of the first byte that differs from the canonical re-encoding.
        offset: usize,
    },
    /// An outbound value cannot be canonically encoded.
    #[error("cannot encode frame: {0}")]
    Encode(String),
}

impl FrameError {
    /// Short stable code for this error kind, shared with the TypeScript implementation and the
    /// conformance fixtures.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::MissingNewline { .. } => "missing_newline",
            Self::NotUtf8 { .. } => "not_utf8",
            Self::NotJson { .. } => "not_json",
            Self::TrailingData { .. } => "trailing_data",
            Self::NotObject { .. } => "not_object",
            Self::NotCanonical { .. } => "not_canonical",
            Self::Encode(_) => "encode",
        }
    }
}

impl From<CanonicalError> for FrameError {
    fn from(error: CanonicalError) -> Self {
        Self::Encode(error.to_string())
    }
}

/// Decodes one frame: the bytes of one line including its trailing `\n`.
///
/// Checks, in order: size, terminator, UTF-8, JSON syntax, a single value, an object, canonical
/// bytes. Each failure has its own [`FrameError`] variant.
///
/// # Errors
///
/// The first check that fails, as described on each [`FrameError`] variant.
pub fn decode_frame(line: &[u8]) -> Result<Map<String, Value>, FrameError> {
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
    let value = parse_single_value(text)?;
    let Value::Object(object) = value else {
        return Err(FrameError::NotObject {
            found: json_type_name(&value),
        });
    };
    require_canonical(body, &object)?;
    Ok(object)
}

/// Encodes `value` as one frame: its canonical JSON bytes followed by `\n`.
///
/// # Errors
///
/// [`FrameError::Encode`] when the value has no canonical form, [`FrameError::NotObject`] when it
/// is not a JSON object, and [`FrameError::TooLarge`] when the frame would exceed the limit.
pub fn encode_frame<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, FrameError> {
    finish_frame(to_canonical_vec(value)?)
}

/// [`encode_frame`] of an object already built, written as it is: serializing it (what the
/// generic path does) would first copy the whole tree.
///
/// # Errors
///
/// [`FrameError::TooLarge`] when the frame would exceed the limit.
pub fn encode_object_frame(object: &Map<String, Value>) -> Result<Vec<u8>, FrameError> {
    finish_frame(map_to_canonical_vec(object))
}

/// The canonical bytes of one value as a frame: an object, within the limit, with its newline.
fn finish_frame(mut bytes: Vec<u8>) -> Result<Vec<u8>, FrameError> {
    if bytes.first() != Some(&b'{') {
        let found =
            serde_json::from_slice::<Value>(&bytes).map_or("non-object value", |parsed| json_type_name(&parsed));
        return Err(FrameError::NotObject { found });
    }
    let frame_bytes = bytes.len().saturating_add(1);
    if frame_bytes > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge {
            bytes: frame_bytes,
            max: FRAME_BYTES_MAX,
        });
    }
    bytes.push(FRAME_TERMINATOR);
    Ok(bytes)
}

fn parse_single_value(text: &str) -> Result<Value, FrameError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = Value::deserialize(&mut deserializer).map_err(|error| FrameError::NotJson {
        detail: bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX),
    })?;
    deserializer.end().map_err(|_| FrameError::TrailingData {
        offset: value_end_offset(text),
    })?;
    Ok(value)
}

/// Offset just past the first JSON value in `text` (which is known to parse).
fn value_end_offset(text: &str) -> usize {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match stream.next() {
        Some(Ok(_)) => stream.byte_offset(),
        _ => 0,
    }
}

fn require_canonical(body: &[u8], object: &Map<String, Value>) -> Result<(), FrameError> {
    let canonical = map_to_canonical_vec(object);
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

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(text: &str) -> Result<Map<String, Value>, FrameError> {
        decode_frame(format!("{text}\n").as_bytes())
    }

    #[test]
    fn accepts_canonical_objects() {
        let object = decode(r#"{"a":[1,"x",null],"b":{"c":0.5}}"#).expect("canonical");
        assert_eq!(Value::Object(object), json!({"a": [1, "x", null], "b": {"c": 0.5}}));
        decode("{}").expect("empty object");
    }

    #[test]
    fn rejects_each_failure_with_its_own_variant() {
        let cases: &[(&[u8], &str)] = &[
            (b"{}", "missing_newline"),
            (b"", "missing_newline"),
            (b"{\"a\":\"\xff\"}\n", "not_utf8"),
            (b"\n", "not_json"),
            (b"{\"a\":\n", "not_json"),
            (b"{}{}\n", "trailing_data"),
            (b"{} x\n", "trailing_data"),
            (b"[]\n", "not_object"),
            (b"\"s\"\n", "not_object"),
            (b"{\"a\": 1}\n", "not_canonical"),
            (b"{}\r\n", "not_canonical"),
            (b" {}\n", "not_canonical"),
            (b"{\"b\":1,\"a\":1}\n", "not_canonical"),
            (b"{\"a\":1,\"a\":1}\n", "not_canonical"),
            (b"{\"a\":-0}\n", "not_canonical"),
            (b"{\"a\":1.0}\n", "not_canonical"),
            (b"{\"a\":1e+20}\n", "not_canonical"),
            (b"{\"a\":\"\\u00e9\"}\n", "not_canonical"),
        ];
        for (line, code) in cases {
            let error = decode_frame(line).expect_err("invalid line");
            assert_eq!(error.code(), *code, "{:?}: {error}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn offsets_point_at_the_problem() {
        assert_eq!(decode("{\"a\": 1}"), Err(FrameError::NotCanonical { offset: 5 }));
        assert_eq!(decode("{}{}"), Err(FrameError::TrailingData { offset: 2 }));
        assert_eq!(
            decode_frame(b"{\"a\":\"\xc3\"}\n"),
            Err(FrameError::NotUtf8 { offset: 6 })
        );
    }

    #[test]
    fn size_limit_counts_the_newline() {
        let overhead = r#"{"p":""}"#.len() + 1;
        let fits = format!("{{\"p\":\"{}\"}}\n", "x".repeat(FRAME_BYTES_MAX - overhead));
        assert_eq!(fits.len(), FRAME_BYTES_MAX);
        decode_frame(fits.as_bytes()).expect("exactly the limit is accepted");
        let over = format!("{{\"p\":\"{}\"}}\n", "x".repeat(FRAME_BYTES_MAX - overhead + 1));
        assert_eq!(
            decode_frame(over.as_bytes()),
            Err(FrameError::TooLarge {
                bytes: FRAME_BYTES_MAX + 1,
                max: FRAME_BYTES_MAX
            })
        );
    }

    #[test]
    fn encode_writes_canonical_bytes_and_a_newline() {
        let frame = encode_frame(&json!({"b": 1.0, "a": "é"})).expect("encodes");
        assert_eq!(frame, "{\"a\":\"é\",\"b\":1}\n".as_bytes());
        assert_eq!(decode_frame(&frame).map(Value::Object), Ok(json!({"a": "é", "b": 1})));
    }

    #[test]
    fn encode_refuses_non_objects_and_oversized_frames() {
        assert_eq!(encode_frame(&json!([1])), Err(FrameError::NotObject { found: "array" }));
        let big = json!({"p": "x".repeat(FRAME_BYTES_MAX)});
        assert_eq!(encode_frame(&big).map_err(|e| e.code()), Err("too_large"));
        assert_eq!(encode_frame(&f64::NAN).map_err(|e| e.code()), Err("encode"));
    }

    #[test]
    fn an_object_frame_is_the_generic_frame_of_that_object() {
        let object = json!({"b": [1.5, {"d": null, "c": "é"}], "a": "\u{1F600}"});
        let map = object.as_object().expect("an object");
        assert_eq!(encode_object_frame(map), encode_frame(&object));
        let big = json!({"p": "x".repeat(FRAME_BYTES_MAX)});
        let too_large = encode_object_frame(big.as_object().expect("an object"));
        assert_eq!(too_large.map_err(|e| e.code()), Err("too_large"));
    }

    #[test]
    fn error_messages_stay_short_for_hostile_input() {
        let hostile = format!("{{\"{}\":1,\"a\":{}}}\n", "k".repeat(5000), "[".repeat(200));
        let error = decode_frame(hostile.as_bytes()).expect_err("too deep");
        assert!(error.to_string().len() < 400, "{error}");
    }
}
