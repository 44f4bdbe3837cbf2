//! The live client protocol, `pi-workflows.client.v1`, and its framing.
//!
//! # Wire rules
//!
//! * **Frames.** One message is one JSON object on one line, ended by `\n`, at most
//!   [`FRAME_BYTES_MAX`] (1 MiB) bytes including the newline. The same framing carries the runner
//!   channel and every other child channel. A WebSocket relay carries one object per text frame.
//! * **Canonical bytes.** A frame's bytes must be exactly the RFC 8785 (JCS) encoding of the
//!   object they parse to: keys sorted by UTF-16 code units, no insignificant whitespace,
//!   ECMAScript number formatting, the JCS string escapes. The receiver re-encodes what it parsed
//!   and compares bytes, so any other spelling of the same value is rejected.
//! * **Closed envelopes.** Every message has `schema: "pi-workflows.client.v1"` and a `type` of
//!   `hello`, `request`, `response` or `event`; unknown fields, operations, outcomes and event
//!   kinds are rejected. Opaque IDs are 1 to 256 bytes of UTF-8 and revisions are integers in
//!   `0..=2^53-1`, so every value survives TypeScript's `number`.
//! * **Failure.** Any framing or validation error closes only the offending connection. Errors
//!   report sizes, offsets and short escaped excerpts, never the whole input.
//!
//! # Why canonical bytes
//!
//! The server fingerprints each state-changing request (SHA-256 of its canonical encoding without
//! `requestId`, see [`request_fingerprint`]) to tell an exact retry (`adopted`) from a conflicting
//! reuse of an idempotency key (`conflict`). The TypeScript client computes the same bytes with
//! sorted keys and `JSON.stringify` numbers. Requiring canonical bytes on the wire makes "the same
//! message" mean "the same bytes" in both languages, so fingerprints, digests and fixtures agree
//! without a second normalization step that could drift.
//!
//! The wire contract itself is `protocol/client.v1.schema.json` plus the conformance fixtures in
//! `protocol/fixtures/`; `tests/protocol_fixtures.rs` checks this module against both.

mod canonical;
mod envelope;
mod error;
mod frame;
mod reader;
pub mod runner;
mod validate;
pub use validate::check_id;
mod vocabulary;

pub(crate) use canonical::bounded_text;
pub use canonical::{CanonicalError, canonical_sha256_hex, to_canonical_vec, value_to_canonical_vec};
pub use envelope::{
    ClientMessage, ClientSchema, Event, Hello, JsonObject, OpaqueId, Request, Response, ResponseError, Revision,
    decode_client_message, encode_client_message, encode_owned_client_message, json_object, request_fingerprint,
};
pub use error::ProtocolError;
pub use frame::{FRAME_BYTES_MAX, FRAME_TERMINATOR, FrameError, decode_frame, encode_frame};
pub use reader::{FrameReadError, FrameReader};
pub use vocabulary::{EventKind, Operation, Outcome};

/// The `schema` value of every client.v1 message.
pub const CLIENT_SCHEMA_V1: &str = "pi-workflows.client.v1";

/// Shortest opaque ID, in UTF-8 bytes.
pub const OPAQUE_ID_BYTES_MIN: usize = 1;

/// Longest opaque ID (request, client, connection, subscription and run IDs and idempotency
/// keys), in UTF-8 bytes.
pub const OPAQUE_ID_BYTES_MAX: usize = 256;

/// The punctuation an opaque ID may hold besides ASCII letters and digits. No spaces, control
/// characters, quotes, slashes or backslashes: an ID is printed in tables, logs and file
/// names, so it must never break a line, move the cursor or name another path.
pub const OPAQUE_ID_PUNCTUATION: &str = "._:@|+=~-";

/// Whether `c` may appear in an opaque ID.
#[must_use]
pub fn is_opaque_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || OPAQUE_ID_PUNCTUATION.contains(c)
}

/// Nesting levels of a run's input: well below the JSON parser's 128, so the resolver's
/// answer that carries the input (three levels deeper) always decodes.
pub const INPUT_DEPTH_MAX: usize = 64;

#[must_use]
/// How deeply `json` nests arrays and objects, read from its text (brackets inside strings
/// do not count); malformed text is measured as far as it goes, the resolver refuses it.
pub fn json_text_depth(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0_usize, 0, false, false);
    for byte in json.bytes() {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            (false, _, _) => {}
        }
    }
    deepest
}

/// Largest revision: 2^53 - 1 (`Number.MAX_SAFE_INTEGER`), the largest integer `n` such that `n`
/// and every integer below it are exact IEEE 754 doubles.
pub const REVISION_MAX: u64 = (1 << 53) - 1;

/// Longest `hello.packageVersion`, in UTF-8 bytes.
pub const PACKAGE_VERSION_BYTES_MAX: usize = 128;

/// Longest `response.error.code`, in UTF-8 bytes.
pub const ERROR_CODE_BYTES_MAX: usize = 128;

/// Longest `response.error.message`, in UTF-8 bytes.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 4096;

#[cfg(test)]
mod depth_tests {
    use super::json_text_depth;

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert_eq!(json_text_depth("42"), 0);
        assert_eq!(json_text_depth(r#"{"a":[1,{"b":[]}]}"#), 4);
        assert_eq!(json_text_depth(r#"{"a":"[[[[{{{{\\"}"#), 1);
        assert_eq!(
            json_text_depth(&format!("{}{}", "[".repeat(1000), "]".repeat(1000))),
            1000
        );
    }
}
