//! RFC 8785 (JSON Canonicalization Scheme, "JCS") encoding.
//!
//! Canonical bytes are what every wire frame carries and what every durable fingerprint hashes.
//! The encoder is `serde_json_canonicalizer`; this module only wraps it with a typed error and
//! adds the SHA-256 helpers used for fingerprints.
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
/// [`CanonicalError::Encode`] when the value has no JSON form: a top-level non-finite float, a
/// map whose keys are not strings, or duplicate keys.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    // `&value` is a sized `&T`, which lets unsized `T` (e.g. `str`) through.
    serde_json_canonicalizer::to_vec(&value).map_err(|error| CanonicalError::Encode {
        detail: bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX),
    })
}

/// Lowercase hex SHA-256 of the canonical JSON encoding of `value`.
///
/// # Errors
///
/// [`CanonicalError::Encode`] as for [`to_canonical_vec`]; a `Value` parsed by `serde_json` always
/// encodes, so in practice this only fails for hand-built values.
pub fn canonical_sha256_hex(value: &Value) -> Result<String, CanonicalError> {
    to_canonical_vec(value).map(|bytes| sha256_hex(&bytes))
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

    proptest! {
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
