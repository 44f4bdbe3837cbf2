//! One struct per message kind, and the closed enums they use.
//!
//! Field names are camelCase on the wire. Optional fields are left out when absent (never
//! `null`), and every struct refuses unknown fields: both ends ship together, so an unknown field
//! is a bug to surface, not a future extension to skip.

use crate::frame::Kind;
use crate::limits::{self, PayloadError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `channel.ready` (adapter → server), sent once after `getMe` succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ready {
    /// Who the bot is, as `getMe` answered.
    pub bot: BotIdentity,
}

/// The bot's public identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BotIdentity {
    /// The bot's Telegram user id.
    pub id: i64,
    /// The bot's username (without `@`).
    pub username: String,
}

/// What a `channel.present` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    /// Send a new message with one button per choice.
    Send,
    /// Edit an already-sent message (with its buttons, or without them when `closed`).
    Edit,
    /// Ask for the text of one input choice, replying to the presented message.
    Prompt,
    /// Register an already-presented open message (after an adapter restart); no API call.
    Track,
}

impl Operation {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Edit => "edit",
            Self::Prompt => "prompt",
            Self::Track => "track",
        }
    }
}

/// `channel.present` (server → adapter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Present {
    /// The server's opaque id of the channel message (1–64 printable bytes).
    pub channel_message_id: String,
    /// What to do.
    pub operation: Operation,
    /// The target chat.
    pub chat_id: i64,
    /// The presented message (edit, prompt: the message to reply to, track).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram_message_id: Option<i64>,
    /// Per channel message, made by the server: `[A-Za-z0-9_-]{8,24}`.
    pub nonce: String,
    /// The complete operator presentation.
    pub presentation: Presentation,
    /// For an edit that shows the decision is settled: no buttons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<Closed>,
    /// For a prompt: the input choice whose text is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_choice_id: Option<String>,
}

/// The complete operator presentation of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Presentation {
    /// Shown first, in bold.
    pub title: String,
    /// Shown under the title (may be empty).
    pub summary: String,
    /// Body blocks, in order.
    pub blocks: Vec<Block>,
    /// The choices, one button each, in order.
    pub choices: Vec<Choice>,
    /// When the decision times out (Unix milliseconds), shown as UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
    /// The choice taken at the deadline, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_choice_id: Option<String>,
}

/// One body block of a presentation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Block {
    /// A paragraph of plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Label / value lines.
    Fields {
        /// The fields, in order.
        fields: Vec<Field>,
    },
    /// Preformatted text.
    Code {
        /// The text.
        text: String,
    },
}

/// One label / value line of a fields block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Field {
    /// Shown in bold.
    pub label: String,
    /// Shown after the label.
    pub value: String,
}

/// One choice: a button.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Choice {
    /// `[a-z0-9_-]{1,32}`, unique in the presentation. Never put on the wire to Telegram.
    pub id: String,
    /// The button text.
    pub label: String,
    /// Present when the choice needs a text (asked for with a prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<ChoiceInput>,
}

/// The text a choice needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChoiceInput {
    /// The question the prompt asks.
    pub label: String,
    /// Shown in the reply field (Telegram's `input_field_placeholder`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// Longest accepted reply, in Unicode scalar values.
    pub max_length: u32,
}

/// How a settled decision is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Closed {
    /// Shown under the presentation, in place of the buttons.
    pub text: String,
}

/// The result of one present attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Telegram confirmed the send or edit.
    Applied,
    /// It did not happen, or it is unknown whether it happened (`error.uncertain`).
    Rejected,
}

/// `channel.settle` (adapter → server): the result of exactly one present attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settle {
    /// The channel message of the present.
    pub channel_message_id: String,
    /// What happened.
    pub outcome: Outcome,
    /// The message Telegram sent or edited (`applied` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramRef>,
    /// Why it was rejected (`rejected` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SettleError>,
}

/// A Telegram message reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TelegramRef {
    /// The chat.
    pub chat_id: i64,
    /// The message in that chat.
    pub message_id: i64,
}

/// Why a present attempt was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettleError {
    /// The class of the failure.
    pub code: ErrorCode,
    /// A short token-free diagnostic (≤ 300 characters), for the operator.
    pub message: String,
    /// Whether a new attempt may simply be made (nothing happened and it may work later).
    pub retryable: bool,
    /// For `rateLimited`: how long Telegram asked to wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The request may have reached Telegram: whether it took effect is unknown.
    pub uncertain: bool,
}

/// The closed set of settle error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorCode {
    /// HTTP 429: Telegram asked to wait (`retryAfterMs`).
    RateLimited,
    /// HTTP 400: Telegram refused the request.
    BadRequest,
    /// HTTP 401: the token is no longer accepted.
    Unauthorized,
    /// HTTP 403: the bot may not write to that chat (blocked, removed, …).
    Forbidden,
    /// HTTP 404.
    NotFound,
    /// HTTP 409.
    Conflict,
    /// HTTP 5xx.
    ServerError,
    /// No answer: the connection failed (`retryable`) or broke after the request was sent
    /// (`uncertain`).
    Network,
    /// Telegram said the message is too long (or HTTP 413).
    TooLarge,
    /// An answer the adapter cannot read (another status, not JSON, too large, no message).
    UnexpectedResponse,
    /// The present failed the adapter's checks ([`crate::limits`]); nothing was sent.
    InvalidPresentation,
    /// The present's `channelRevision` is older than one the adapter already applied for that
    /// channel message; nothing was sent.
    StaleRevision,
    /// The adapter tracks its maximum of open messages; nothing was sent.
    CapacityExceeded,
}

impl ErrorCode {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rateLimited",
            Self::BadRequest => "badRequest",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "notFound",
            Self::Conflict => "conflict",
            Self::ServerError => "serverError",
            Self::Network => "network",
            Self::TooLarge => "tooLarge",
            Self::UnexpectedResponse => "unexpectedResponse",
            Self::InvalidPresentation => "invalidPresentation",
            Self::StaleRevision => "staleRevision",
            Self::CapacityExceeded => "capacityExceeded",
        }
    }
}

/// Where an answer is in its flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Stage {
    /// The answer is complete (a plain choice, or the text of an input choice).
    Final,
    /// An input choice was pressed; its text is still to be asked for (with a prompt).
    WantsText,
}

/// `channel.answer` (adapter → server): a press or reply from an allowed person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    /// The channel message answered.
    pub channel_message_id: String,
    /// The choice taken.
    pub choice_id: String,
    /// The reply text of an input choice (`final` after a prompt only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Where the answer is in its flow.
    pub stage: Stage,
    /// Who answered, and where.
    pub from: AnswerFrom,
    /// Telegram's update id (a repeat after an adapter restart has the same one).
    pub update_id: i64,
    /// The Telegram message pressed, only when the adapter tracked the channel message without
    /// one (a send an operator confirmed): the server keeps it as the send's reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram_message_id: Option<i64>,
}

/// Who answered, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerFrom {
    /// The Telegram user.
    pub user_id: i64,
    /// The chat the press or reply was in.
    pub chat_id: i64,
}

/// `channel.exiting` (both ways).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exiting {
    /// Why (the server sends `requested`).
    pub reason: ExitReason,
}

/// The closed set of reasons an adapter stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExitReason {
    /// The server asked it to stop.
    Requested,
    /// Its standard input ended.
    StdinClosed,
    /// Telegram refused the token.
    CredentialRejected,
    /// Telegram could not be reached within the startup retries.
    ApiUnreachable,
    /// The server sent a frame that breaks this protocol.
    ProtocolViolation,
}

impl ExitReason {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::StdinClosed => "stdinClosed",
            Self::CredentialRejected => "credentialRejected",
            Self::ApiUnreachable => "apiUnreachable",
            Self::ProtocolViolation => "protocolViolation",
        }
    }
}

/// A message kind with its typed payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `channel.ready`.
    Ready(Ready),
    /// `channel.present`.
    Present(Present),
    /// `channel.settle`.
    Settle(Settle),
    /// `channel.answer`.
    Answer(Answer),
    /// `channel.exiting`.
    Exiting(Exiting),
}

impl Message {
    /// The frame kind that carries this message.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Self::Ready(_) => Kind::Ready,
            Self::Present(_) => Kind::Present,
            Self::Settle(_) => Kind::Settle,
            Self::Answer(_) => Kind::Answer,
            Self::Exiting(_) => Kind::Exiting,
        }
    }

    /// The payload as a JSON value.
    ///
    /// # Errors
    ///
    /// Only if serialization fails, which these types never do.
    pub fn payload_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Self::Ready(payload) => serde_json::to_value(payload),
            Self::Present(payload) => serde_json::to_value(payload),
            Self::Settle(payload) => serde_json::to_value(payload),
            Self::Answer(payload) => serde_json::to_value(payload),
            Self::Exiting(payload) => serde_json::to_value(payload),
        }
    }

    /// Decodes and checks the payload of a `kind` frame.
    ///
    /// # Errors
    ///
    /// [`PayloadError::Shape`] when the object is not that kind's payload (a missing, unknown or
    /// mistyped field), [`PayloadError::Invalid`] when a field is out of its bounds.
    pub fn from_payload(kind: Kind, payload: &Map<String, Value>) -> Result<Self, PayloadError> {
        let message = match kind {
            Kind::Ready => Self::Ready(decode(kind, payload)?),
            Kind::Present => Self::Present(decode(kind, payload)?),
            Kind::Settle => Self::Settle(decode(kind, payload)?),
            Kind::Answer => Self::Answer(decode(kind, payload)?),
            Kind::Exiting => Self::Exiting(decode(kind, payload)?),
        };
        message.check()?;
        Ok(message)
    }

    /// Checks every field bound of the payload ([`crate::limits`]).
    ///
    /// # Errors
    ///
    /// [`PayloadError::Invalid`] naming the first field out of its bounds.
    pub fn check(&self) -> Result<(), PayloadError> {
        match self {
            Self::Ready(payload) => limits::check_ready(payload),
            Self::Present(payload) => limits::check_present(payload),
            Self::Settle(payload) => limits::check_settle(payload),
            Self::Answer(payload) => limits::check_answer(payload),
            Self::Exiting(_) => Ok(()),
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(kind: Kind, payload: &Map<String, Value>) -> Result<T, PayloadError> {
    serde_json::from_value(Value::Object(payload.clone())).map_err(|error| PayloadError::Shape {
        kind: kind.as_str(),
        detail: limits::safe_decoder_detail(&error.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn present_json() -> Value {
        json!({
            "channelMessageId": "cm-1",
            "operation": "send",
            "chatId": -1001,
            "nonce": "abcdefgh12",
            "presentation": {
                "title": "Deploy?",
                "summary": "",
                "blocks": [
                    {"kind": "text", "text": "hello"},
                    {"kind": "fields", "fields": [{"label": "a", "value": "b"}]},
                    {"kind": "code", "text": "x = 1"}
                ],
                "choices": [
                    {"id": "ok", "label": "OK"},
                    {"id": "why", "label": "Why", "input": {"label": "Say", "maxLength": 10}}
                ]
            }
        })
    }

    #[test]
    fn decodes_a_present() {
        let message = Message::from_payload(Kind::Present, &object(present_json())).expect("present");
        let Message::Present(present) = message else {
            panic!("not a present")
        };
        assert_eq!(present.operation, Operation::Send);
        assert_eq!(present.presentation.blocks.len(), 3);
        assert_eq!(
            present.presentation.choices[1]
                .input
                .as_ref()
                .map(|input| input.max_length),
            Some(10)
        );
        let again = serde_json::to_value(&present).expect("value");
        assert_eq!(again, present_json(), "absent options stay absent");
    }

    #[test]
    fn refuses_unknown_fields_everywhere() {
        let mut top = present_json();
        top["extra"] = json!(1);
        assert!(matches!(
            Message::from_payload(Kind::Present, &object(top)),
            Err(PayloadError::Shape { .. })
        ));
        let mut block = present_json();
        block["presentation"]["blocks"][0]["style"] = json!("bold");
        assert!(matches!(
            Message::from_payload(Kind::Present, &object(block)),
            Err(PayloadError::Shape { .. })
        ));
        let mut kind = present_json();
        kind["presentation"]["blocks"][0]["kind"] = json!("image");
        assert!(matches!(
            Message::from_payload(Kind::Present, &object(kind)),
            Err(PayloadError::Shape { .. })
        ));
        let mut operation = present_json();
        operation["operation"] = json!("delete");
        assert!(matches!(
            Message::from_payload(Kind::Present, &object(operation)),
            Err(PayloadError::Shape { .. })
        ));
    }

    #[test]
    fn encodes_settle_and_answer_shapes() {
        let settle = Message::Settle(Settle {
            channel_message_id: "cm-1".to_owned(),
            outcome: Outcome::Rejected,
            telegram: None,
            error: Some(SettleError {
                code: ErrorCode::RateLimited,
                message: "Too Many Requests".to_owned(),
                retryable: true,
                retry_after_ms: Some(3000),
                uncertain: false,
            }),
        });
        assert_eq!(
            settle.payload_value().expect("value"),
            json!({"channelMessageId": "cm-1", "outcome": "rejected", "error": {
                "code": "rateLimited", "message": "Too Many Requests", "retryable": true,
                "retryAfterMs": 3000, "uncertain": false}})
        );
        let answer = Message::Answer(Answer {
            channel_message_id: "cm-1".to_owned(),
            choice_id: "why".to_owned(),
            text: None,
            stage: Stage::WantsText,
            from: AnswerFrom {
                user_id: 7,
                chat_id: -1,
            },
            update_id: 99,
            telegram_message_id: None,
        });
        assert_eq!(
            answer.payload_value().expect("value"),
            json!({"channelMessageId": "cm-1", "choiceId": "why", "stage": "wantsText",
                "from": {"userId": 7, "chatId": -1}, "updateId": 99})
        );
        assert_eq!(answer.kind(), Kind::Answer);
    }

    #[test]
    fn wire_names_match_serde() {
        for code in [
            ErrorCode::RateLimited,
            ErrorCode::UnexpectedResponse,
            ErrorCode::CapacityExceeded,
        ] {
            assert_eq!(serde_json::to_value(code).expect("code"), json!(code.as_str()));
        }
        for reason in [ExitReason::StdinClosed, ExitReason::ProtocolViolation] {
            assert_eq!(serde_json::to_value(reason).expect("reason"), json!(reason.as_str()));
        }
        for operation in [Operation::Send, Operation::Track] {
            assert_eq!(
                serde_json::to_value(operation).expect("operation"),
                json!(operation.as_str())
            );
        }
    }
}
