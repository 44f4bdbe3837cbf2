//! RFC 8785 (JSON Canonicalization Scheme, "JCS") encoding.
//!
//! Canonical bytes are what every wire frame carries and what every durable fingerprint hashes.
//! A value is first made a `serde_json::Value` tree, then written by `write_value` below: its
//! maps hold each key once, its numbers are doubles written the ECMAScript way (`ryu_js`), its
//! strings escaped exactly as `serde_json` escapes them (which is RFC 8785's escaping), its keys
//! sorted by UTF-16 code units. `serde_json_canonicalizer` is the reference: it answers the
//! rare values the tree cannot express exactly (a top-level `null`, which may have been a
//! non-finite float, and anything `serde_json::to_value` refuses), and a property test holds
//! the two to the same bytes. It is not the main path because it boxes a writer per token and
//! re-parses every key, which made canonical JSON a tenth of the server's CPU per run.
//!
//! Number handling follows ECMAScript exactly, which has two consequences worth knowing:
//!
//! * every number is written as the nearest IEEE 754 double, so an integer above 2^53 is rounded
//!   (`9007199254740993` encodes as `9007199254740992`, `u64::MAX` as `18446744073709552000`);
//! * `-0` encodes as `0`.
//!
//! Parsing must use `serde_json`'s `float_roundtrip` feature; without it some 17-digit floats parse
//! one unit in the last place off and then fail to re-encode to the same bytes.

use crate::digest::sha256_hex;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

/// Longest serializer diagnostic kept in a [`CanonicalError`], in bytes.
pub(crate) const DIAGNOSTIC_BYTES_MAX: usize = 160;

/// A value cannot be written as RFC 8785 canonical JSON.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CanonicalError {
    /// The serializer refused the value (a non-finite float, a non-string map key, a duplicate
    /// key or a raw JSON fragment).
    #[error(
        "value cannot be encoded as RFC 8785 canonical JSON ({detail}); \
         use only finite numbers, string map keys and unique keys"
    )]
    Encode {
        /// The serializer's own diagnostic, truncated to a few dozen bytes.
        detail: String,
    },
}

/// Serializes `value` to RFC 8785 canonical JSON bytes (no trailing newline).
///
/// A non-finite float nested inside a struct, map or sequence is written as `null`, exactly as
/// ECMAScript `JSON.stringify` (and so the TypeScript side) writes it; only a non-finite float
/// at the top level is an error. `serde_json::Value` cannot hold non-finite floats at all.
///
/// # Errors
///
/// [`CanonicalError::Encode`] when the value has no JSON form: a top-level non-finite float, or
/// a map whose keys are not strings (integer keys are written as strings, as `serde_json`
/// writes them). A type whose serialization repeats a key (possible only with colliding
/// `#[serde(flatten)]` fields or a hand-written `Serialize`; none of ours does) keeps the last
/// value, as `serde_json::to_value` does.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    match serde_json::to_value(value) {
        Ok(Value::Null) | Err(_) => reference_canonical_vec(value),
        Ok(tree) => Ok(value_to_canonical_vec(&tree)),
    }
}

/// The RFC 8785 bytes of a JSON value (every `Value` has them: it holds finite numbers only).
pub fn value_to_canonical_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(CANONICAL_CAPACITY_BYTES);
    write_value(&mut out, value);
    out
}

/// The RFC 8785 bytes of a JSON object (a decoded frame's, before it is checked).
pub fn map_to_canonical_vec(map: &serde_json::Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(CANONICAL_CAPACITY_BYTES);
    write_object(&mut out, map);
    out
}

/// First allocation of an encoding (`serde_json::to_vec`'s own starting size).
const CANONICAL_CAPACITY_BYTES: usize = 128;

/// `serde_json_canonicalizer`'s encoding: the reference the fast path is tested against.
fn reference_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    // `&value` is a sized `&T`, which lets unsized `T` (e.g. `str`) through.
    serde_json_canonicalizer::to_vec(&value).map_err(|error| CanonicalError::Encode {
        detail: bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX),
    })
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(out, number),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

/// Every JSON number is the double ECMAScript would print: integers beyond 2^53 round, `-0`
/// prints as `0`, large and small magnitudes use exponents.
fn write_number(out: &mut Vec<u8>, number: &serde_json::Number) {
    // Without `arbitrary_precision` every `Number` is an i64, u64 or finite f64.
    let double = number.as_f64().expect("a serde_json number is a double");
    assert!(double.is_finite(), "a serde_json number is finite");
    out.extend_from_slice(ryu_js::Buffer::new().format_finite(double).as_bytes());
}

/// RFC 8785 escapes only `"`, `\` and control characters (short forms where JSON has them,
/// else lowercase `\u00xx`): exactly `serde_json`'s compact escaping.
fn write_string(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(&mut *out, text).expect("writing a string to a Vec cannot fail");
}

/// Members sorted by their keys' UTF-16 code units. A map iterates in UTF-8 byte order, the
/// same order for ASCII keys; any other key set is sorted here.
fn write_object(out: &mut Vec<u8>, map: &serde_json::Map<String, Value>) {
    out.push(b'{');
    let ascii_sorted = map.keys().all(|key| key.is_ascii())
        && map.keys().zip(map.keys().skip(1)).all(|(before, after)| before < after);
    if ascii_sorted {
        write_members(out, map.iter());
    } else {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|(left, _), (right, _)| left.encode_utf16().cmp(right.encode_utf16()));
        write_members(out, members.into_iter());
    }
    out.push(b'}');
}

fn write_members<'a>(out: &mut Vec<u8>, members: impl Iterator<Item = (&'a String, &'a Value)>) {
    for (index, (key, value)) in members.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_string(out, key);
        out.push(b':');
        write_value(out, value);
    }
}

/// Lowercase hex SHA-256 of the canonical JSON encoding of `value`.
///
/// # Errors
///
/// [`CanonicalError::Encode`] as for [`to_canonical_vec`]; a `Value` parsed by `serde_json` always
/// encodes, so in practice this only fails for hand-built values.
pub fn canonical_sha256_hex(value: &Value) -> Result<String, CanonicalError> {
    Ok(sha256_hex(&value_to_canonical_vec(value)))
}

/// Copies at most `max_bytes` of `text`, cut at a character boundary, marking a cut with `…`.
///
/// Used for every diagnostic that may carry peer-controlled text, so error messages stay short.
pub(crate) fn bounded_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + '…'.len_utf8());
    out.push_str(&text[..end]);
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    const RFC8785_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/protocol/fixtures/rfc8785");

    #[test]
    fn every_rfc8785_vector_canonicalizes_to_its_expected_bytes() {
        let input_dir = Path::new(RFC8785_DIR).join("input");
        let mut names: Vec<_> = std::fs::read_dir(&input_dir)
            .expect("rfc8785 input directory is readable")
            .map(|entry| entry.expect("directory entry").file_name())
            .collect();
        names.sort();
        assert!(names.len() >= 6, "expected the six RFC 8785 vectors, found {names:?}");
        for name in names {
            let input = std::fs::read(input_dir.join(&name)).expect("input vector");
            let expected = std::fs::read(Path::new(RFC8785_DIR).join("output").join(&name)).expect("output");
            let value: Value = serde_json::from_slice(&input).expect("input vector parses");
            let actual = to_canonical_vec(&value).expect("input vector encodes");
            assert_eq!(
                String::from_utf8_lossy(&actual),
                String::from_utf8_lossy(&expected),
                "vector {name:?}"
            );
        }
    }

    #[test]
    fn integers_above_2_pow_53_round_to_the_nearest_double() {
        let value: Value = serde_json::from_str("[9007199254740993,-0,1e21,-0.0]").expect("parse");
        let bytes = to_canonical_vec(&value).expect("encode");
        assert_eq!(bytes, b"[9007199254740992,0,1e+21,0]");
    }

    #[test]
    fn nested_non_finite_floats_become_null_like_json_stringify() {
        let nested = std::collections::BTreeMap::from([("x", f64::NAN), ("y", f64::INFINITY)]);
        assert_eq!(to_canonical_vec(&nested).expect("nested"), br#"{"x":null,"y":null}"#);
    }

    #[test]
    fn non_finite_floats_are_refused_with_a_bounded_message() {
        let error = to_canonical_vec(&f64::NAN).expect_err("NaN has no JSON form");
        let message = error.to_string();
        assert!(message.contains("finite"), "{message}");
        assert!(message.len() < 400, "{message}");
    }

    #[test]
    fn canonical_sha256_hashes_the_canonical_bytes() {
        let value: Value = serde_json::from_str(r#"{"b":1,"a":2}"#).expect("parse");
        assert_eq!(
            canonical_sha256_hex(&value).expect("encode"),
            sha256_hex(br#"{"a":2,"b":1}"#)
        );
    }

    #[test]
    fn bounded_text_cuts_at_a_character_boundary() {
        assert_eq!(bounded_text("short", 10), "short");
        assert_eq!(bounded_text("ééé", 3), "é…");
        assert_eq!(bounded_text("abcdef", 0), "…");
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON numbers are finite", |x| x.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// Short keys mixing ASCII, characters from U+E000 and beyond the basic plane: the ones
    /// whose UTF-8 byte order and UTF-16 order disagree.
    fn utf16_sensitive_key() -> impl Strategy<Value = String> {
        let character = prop_oneof![
            Just('a'),
            Just('z'),
            Just('\u{e000}'),
            Just('\u{ffff}'),
            Just('\u{10000}'),
            Just('\u{1f600}'),
            Just('é'),
        ];
        prop::collection::vec(character, 0..4).prop_map(|characters| characters.into_iter().collect())
    }

    proptest! {
        #[test]
        fn the_fast_encoding_matches_the_reference_encoder(value in json_value()) {
            let reference = reference_canonical_vec(&value).expect("finite values encode");
            prop_assert_eq!(value_to_canonical_vec(&value), reference.clone());
            prop_assert_eq!(to_canonical_vec(&value).expect("finite values encode"), reference);
        }

        #[test]
        fn keys_beyond_the_basic_plane_sort_by_utf16_units(keys in prop::collection::btree_set(utf16_sensitive_key(), 0..8)) {
            let map: serde_json::Map<String, Value> = keys.into_iter().map(|key| (key, Value::from(1))).collect();
            let value = Value::Object(map);
            prop_assert_eq!(value_to_canonical_vec(&value), reference_canonical_vec(&value).expect("encodes"));
        }

        #[test]
        fn canonical_encoding_is_idempotent(value in json_value()) {
            let first = to_canonical_vec(&value).expect("finite values encode");
            let reparsed: Value = serde_json::from_slice(&first).expect("canonical bytes parse");
            let second = to_canonical_vec(&reparsed).expect("reparsed value encodes");
            prop_assert_eq!(first, second);
        }

        #[test]
        fn finite_doubles_round_trip_exactly(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
            let bytes = to_canonical_vec(&x).expect("finite doubles encode");
            // Parse through `Value`, the path every inbound frame takes.
            let parsed: Value = serde_json::from_slice(&bytes).expect("canonical number parses");
            let parsed = parsed.as_f64().expect("a JSON number");
            // `-0` is written as `0` by design (ECMAScript `String(-0)`), so compare as numbers.
            prop_assert!(parsed == x, "{x:e} encoded as {:?} parsed as {parsed:e}", String::from_utf8_lossy(&bytes));
            if x != 0.0 {
                prop_assert_eq!(parsed.to_bits(), x.to_bits());
            }
        }
    }
}
