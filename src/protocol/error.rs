//! Errors of the `pi-workflows.client.v1` envelope layer.

use super::canonical::CanonicalError;
use super::frame::FrameError;
use thiserror::Error;

/// A message was rejected. The frame layer's [`FrameError`] covers the bytes; every other variant
/// covers the envelope. Messages quote at most a short, escaped prefix of peer-supplied text.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// The line is not one canonical JSON object.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A required field is absent.
    #[error("message has no `{field}` field; add it (see protocol/client.v1.schema.json)")]
    MissingField {
        /// The wire name of the missing field (`error.code` for nested fields).
        field: &'static str,
    },
    /// `schema` is not `pi-workflows.client.v1`.
    #[error(
        "message schema is not \"pi-workflows.client.v1\"; \
         the peer runs another pi-workflows package version, install matching versions"
    )]
    WrongSchema,
    /// `type` is not one of `hello`, `request`, `response`, `event`.
    #[error("message type {found} is not hello, request, response or event")]
    UnknownType {
        /// A short escaped prefix of the received `type` value.
        found: String,
    },
    /// A field that this message type does not define.
    #[error("{message_type} has unknown field {field}; remove it, unknown fields are rejected")]
    UnknownField {
        /// `hello`, `request`, `response`, `event` or `error`.
        message_type: &'static str,
        /// A short escaped prefix of the unknown field name.
        field: String,
    },
    /// A field holds the wrong JSON type (including `null` for an optional field: omit it).
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The wire name of the field.
        field: &'static str,
        /// What the field must hold, e.g. `a string` or `an object`.
        expected: &'static str,
    },
    /// An opaque ID is empty or longer than [`super::OPAQUE_ID_BYTES_MAX`] bytes.
    #[error("field `{field}` is {bytes} bytes long; opaque IDs must be 1 to 256 bytes")]
    IdLength {
        /// The wire name of the ID field (`id` when built directly).
        field: &'static str,
        /// The length received.
        bytes: usize,
    },
    /// An opaque ID holds a character outside the safe set (`is_opaque_id_char`).
    #[error("field `{field}` may hold only ASCII letters, digits and `._:@|+=~-`")]
    IdCharacters {
        /// The wire name of the ID field (`id` when built directly).
        field: &'static str,
    },
    /// A revision is not an integer in `0..=2^53-1`.
    #[error("field `{field}` must be an integer from 0 to 9007199254740991")]
    InvalidRevision {
        /// The wire name of the revision field.
        field: &'static str,
    },
    /// `operation` names no client.v1 operation.
    #[error("operation {found} is not a client.v1 operation; check the client and server versions")]
    UnknownOperation {
        /// A short escaped prefix of the received name.
        found: String,
    },
    /// `outcome` is outside the closed outcome set.
    #[error("outcome {found} is not a client.v1 outcome")]
    UnknownOutcome {
        /// A short escaped prefix of the received name.
        found: String,
    },
    /// `event` is outside the closed event-kind set.
    #[error("event kind {found} is not a client.v1 event kind")]
    UnknownEvent {
        /// A short escaped prefix of the received name.
        found: String,
    },
    /// A bounded text field is too short or too long.
    #[error("field `{field}` is {bytes} bytes long; it must be {min} to {max} bytes of UTF-8")]
    TextLength {
        /// The wire name of the field.
        field: &'static str,
        /// The length received.
        bytes: usize,
        /// Smallest accepted length.
        min: usize,
        /// Largest accepted length.
        max: usize,
    },
    /// The message passed validation but not typed decoding (a bug: report it).
    #[error("message does not fit its typed envelope ({detail}); this is a pi-workflows bug")]
    Envelope {
        /// The decoder's diagnostic, bounded.
        detail: String,
    },
    /// A value could not be canonically encoded.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

impl ProtocolError {
    /// Short stable code for this error kind, shared with the TypeScript implementation and the
    /// conformance fixtures (`reason`). Frame errors return their [`FrameError::code`].
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Frame(error) => error.code(),
            Self::MissingField { .. } => "missing_field",
            Self::WrongSchema => "wrong_schema",
            Self::UnknownType { .. } => "unknown_type",
            Self::UnknownField { .. } => "unknown_field",
            Self::WrongType { .. } => "wrong_type",
            Self::IdLength { .. } => "id_length",
            Self::IdCharacters { .. } => "id_characters",
            Self::InvalidRevision { .. } => "invalid_revision",
            Self::UnknownOperation { .. } => "unknown_operation",
            Self::UnknownOutcome { .. } => "unknown_outcome",
            Self::UnknownEvent { .. } => "unknown_event",
            Self::TextLength { .. } => "text_length",
            Self::Envelope { .. } => "invalid_envelope",
            Self::Canonical(_) => "encode",
        }
    }

    /// Whether the error was found in the frame (bytes) layer rather than the envelope layer.
    #[must_use]
    pub fn is_frame_error(&self) -> bool {
        matches!(self, Self::Frame(_))
    }
}
