//! Typed `pi-workflows.client.v1` envelopes and their line codec.

use super::canonical::{CanonicalError, DIAGNOSTIC_BYTES_MAX, bounded_text, map_to_canonical_vec};
use super::error::ProtocolError;
use super::frame::{decode_frame, encode_object_frame};
use super::validate::{check_id, check_text, validate_message};
use super::vocabulary::{EventKind, Operation, Outcome};
use super::{ERROR_CODE_BYTES_MAX, ERROR_MESSAGE_BYTES_MAX, REVISION_MAX};
use crate::digest::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object, the type of every `payload` and `receipt`.
pub type JsonObject = Map<String, Value>;

/// A JSON object of these entries, in order. Unlike `json!`, which serializes each value
/// expression into a new one (a deep copy of every nested object), the values move in.
pub fn json_object<const N: usize>(entries: [(&str, Value); N]) -> JsonObject {
    entries
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
}

/// The `schema` field. client.v1 is the only live protocol; the enum exists so a wrong value is a
/// decoding error rather than a string comparison someone can forget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClientSchema {
    /// `pi-workflows.client.v1`.
    #[default]
    #[serde(rename = "pi-workflows.client.v1")]
    V1,
}

/// An opaque identifier: 1 to [`super::OPAQUE_ID_BYTES_MAX`] bytes of ASCII letters, digits and
/// [`super::OPAQUE_ID_PUNCTUATION`], valid by construction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OpaqueId(String);

impl OpaqueId {
    /// Wraps `id` if its length is in bounds.
    ///
    /// # Errors
    ///
    /// [`ProtocolError::IdLength`] when `id` is empty or longer than 256 bytes,
    /// [`ProtocolError::IdCharacters`] when it holds a character outside the safe set.
    pub fn new(id: impl Into<String>) -> Result<Self, ProtocolError> {
        let id = id.into();
        check_id("id", &id)?;
        Ok(Self(id))
    }

    /// The ID text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for OpaqueId {
    type Error = ProtocolError;

    fn try_from(id: String) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

impl From<OpaqueId> for String {
    fn from(id: OpaqueId) -> Self {
        id.0
    }
}

impl std::fmt::Display for OpaqueId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// A revision: a non-negative integer that survives a round trip through an IEEE 754 double
/// (at most [`REVISION_MAX`] = 2^53 - 1), valid by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Revision(u64);

impl Revision {
    /// Revision zero.
    pub const ZERO: Self = Self(0);

    /// Wraps `revision` if it is at most [`REVISION_MAX`].
    ///
    /// # Errors
    ///
    /// [`ProtocolError::InvalidRevision`] above 2^53 - 1.
    pub const fn new(revision: u64) -> Result<Self, ProtocolError> {
        if revision <= REVISION_MAX {
            Ok(Self(revision))
        } else {
            Err(ProtocolError::InvalidRevision { field: "revision" })
        }
    }

    /// The revision number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl TryFrom<u64> for Revision {
    type Error = ProtocolError;

    fn try_from(revision: u64) -> Result<Self, Self::Error> {
        Self::new(revision)
    }
}

impl From<Revision> for u64 {
    fn from(revision: Revision) -> Self {
        revision.0
    }
}

/// `hello`: the server's first message on every connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hello {
    /// Always [`ClientSchema::V1`].
    pub schema: ClientSchema,
    /// The server's ID for this connection.
    pub connection_id: OpaqueId,
    /// The server's package version; a client with another version stops with a version error.
    pub package_version: String,
}

/// `request`: one operation from a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Request {
    /// Always [`ClientSchema::V1`].
    pub schema: ClientSchema,
    /// Identifies this transport attempt; a retry after reconnecting uses a new one.
    pub request_id: OpaqueId,
    /// Identifies the client across attempts.
    pub client_id: OpaqueId,
    /// What to do.
    pub operation: Operation,
    /// Stable across retries of one user action; with `client_id` it keys the durable receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<OpaqueId>,
    /// The run addressed, when the operation has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<OpaqueId>,
    /// Optimistic-concurrency guard: the revision the client acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
    /// Operation-specific arguments.
    pub payload: JsonObject,
}

/// A bounded, safe error: a short machine code and a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseError {
    /// Machine-readable code, 1 to [`ERROR_CODE_BYTES_MAX`] bytes.
    pub code: String,
    /// Human-readable message, at most [`ERROR_MESSAGE_BYTES_MAX`] bytes.
    pub message: String,
}

impl ResponseError {
    /// Builds an error, cutting `message` to [`ERROR_MESSAGE_BYTES_MAX`] bytes (ending in `…`).
    ///
    /// # Errors
    ///
    /// [`ProtocolError::TextLength`] when `code` is empty or longer than its bound; codes are
    /// chosen by this program, so an oversized code is a bug rather than something to truncate.
    pub fn new(code: &str, message: &str) -> Result<Self, ProtocolError> {
        check_text("error.code", code, 1, ERROR_CODE_BYTES_MAX)?;
        let ellipsis = '…'.len_utf8();
        let message = if message.len() <= ERROR_MESSAGE_BYTES_MAX {
            message.to_owned()
        } else {
            bounded_text(message, ERROR_MESSAGE_BYTES_MAX - ellipsis)
        };
        Ok(Self {
            code: code.to_owned(),
            message,
        })
    }
}

/// `response`: the answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Response {
    /// Always [`ClientSchema::V1`].
    pub schema: ClientSchema,
    /// The request answered.
    pub request_id: OpaqueId,
    /// The outcome.
    pub outcome: Outcome,
    /// The revision after the command, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    /// The committed receipt or read result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<JsonObject>,
    /// Why the request did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ResponseError>,
}

/// `event`: one update on a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Event {
    /// Always [`ClientSchema::V1`].
    pub schema: ClientSchema,
    /// The subscription this event belongs to.
    pub subscription_id: OpaqueId,
    /// What the payload is.
    pub event: EventKind,
    /// The presentation revision of the payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    /// The run concerned, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<OpaqueId>,
    /// Event-specific content.
    pub payload: JsonObject,
}

/// Any client.v1 message, tagged on the wire by its `type` field.
///
/// Read and write messages with [`decode_client_message`] and [`encode_client_message`]: they add
/// the frame rules and the text-length bounds that plain serde (de)serialization does not check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientMessage {
    /// `type: "hello"`.
    Hello(Hello),
    /// `type: "request"`.
    Request(Request),
    /// `type: "response"`.
    Response(Response),
    /// `type: "event"`.
    Event(Event),
}

/// Decodes one line (including its trailing `\n`) into a validated message.
///
/// # Errors
///
/// [`ProtocolError::Frame`] when the bytes are not one canonical JSON object within the frame
/// limit; another variant, one per problem, when the object is not a valid client.v1 envelope.
pub fn decode_client_message(line: &[u8]) -> Result<ClientMessage, ProtocolError> {
    let object = decode_frame(line)?;
    validate_message(&object)?;
    serde_json::from_value(Value::Object(object)).map_err(|error| ProtocolError::Envelope {
        detail: bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX),
    })
}

/// Encodes a message as one frame: canonical JSON followed by `\n`.
///
/// # Errors
///
/// The [`decode_client_message`] error the peer would report (e.g. an over-long
/// `packageVersion` or error message), or [`ProtocolError::Frame`] with
/// [`super::FrameError::TooLarge`] when the frame exceeds 1 MiB.
pub fn encode_client_message(message: &ClientMessage) -> Result<Vec<u8>, ProtocolError> {
    encode_owned_client_message(message.clone())
}

/// [`encode_client_message`] for a message the caller is done with: its payload (or receipt)
/// moves into the encoded object, where serializing the whole message would copy it (a run
/// view's snapshot is the largest part of what the server writes to its clients).
///
/// # Errors
///
/// As [`encode_client_message`].
pub fn encode_owned_client_message(mut message: ClientMessage) -> Result<Vec<u8>, ProtocolError> {
    let content = message.take_content();
    let mut object = to_object(&message)?;
    if let Some((key, content)) = content {
        object.insert(key.to_owned(), Value::Object(content));
    }
    validate_message(&object)?;
    Ok(encode_object_frame(&object)?)
}

impl ClientMessage {
    /// The message's object-valued content and its wire key, left empty (a request's or an
    /// event's `payload`, still written as `{}`) or absent (a response's `receipt`).
    fn take_content(&mut self) -> Option<(&'static str, JsonObject)> {
        match self {
            Self::Hello(_) => None,
            Self::Request(request) => Some(("payload", std::mem::take(&mut request.payload))),
            Self::Response(response) => response.receipt.take().map(|receipt| ("receipt", receipt)),
            Self::Event(event) => Some(("payload", std::mem::take(&mut event.payload))),
        }
    }
}

/// The durable fingerprint of a request: lowercase hex SHA-256 of the canonical JSON of the wire
/// request object without `requestId`.
///
/// The request ID names one transport attempt: a client that reconnects after the server
/// committed but before it answered retries with a new request ID and the same client ID,
/// idempotency key, operation and payload. Leaving the request ID out lets that retry match the
/// stored receipt (`adopted`), while any change to the durable content gives another fingerprint
/// (`conflict`).
///
/// # Errors
///
/// [`ProtocolError::Canonical`] only if the request could not be encoded, which a `Request` built
/// from these types cannot trigger (all numbers are finite, all keys unique strings).
pub fn request_fingerprint(request: &Request) -> Result<String, ProtocolError> {
    let mut object = to_object(request)?;
    object.insert("type".to_owned(), Value::from("request"));
    object.remove("requestId");
    // The coordinator authority (`payload.coordinator`) says who may act, not what is asked:
    // a resend after a reconnect carries a new epoch and must still find its receipt.
    if let Some(Value::Object(payload)) = object.get_mut("payload") {
        payload.remove("coordinator");
    }
    Ok(sha256_hex(&map_to_canonical_vec(&object)))
}

fn to_object<T: Serialize>(message: &T) -> Result<JsonObject, ProtocolError> {
    match serde_json::to_value(message) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(ProtocolError::Envelope {
            detail: "message did not serialize to an object".to_owned(),
        }),
        Err(error) => Err(ProtocolError::Canonical(CanonicalError::Encode {
            detail: bounded_text(&error.to_string(), DIAGNOSTIC_BYTES_MAX),
        })),
    }
}

#[cfg(test)]
mod tests;
