//! `channel.present`: one attempt, one API call (none for `track`), one `channel.settle`.

use crate::adapter::{Adapter, Flow, Step};
use crate::api::{ApiError, Failure};
use crate::registry::{PendingPrompt, TrackRefusal, TrackedMessage, tracked_choices};
use crate::render::{keyboard, message_html, prompt_html};
use channel_protocol::limits::{CHANNEL_MESSAGE_ID_BYTES_MAX, ERROR_MESSAGE_CHARS_MAX, bounded_chars, is_printable};
use channel_protocol::payload::{
    ErrorCode, ExitReason, Message, Operation, Outcome, Present, Settle, SettleError, TelegramRef,
};
use channel_protocol::{Frame, Kind, PayloadError};
use serde_json::{Value, json};
use std::io::Write;

/// Telegram's answer to an edit whose text and keyboard are already what was asked: the edit
/// is in place (an earlier attempt did it), so it counts as applied.
const NOT_MODIFIED_DESCRIPTION: &str = "message is not modified";
/// Telegram's words for a text over its length limit.
const TOO_LONG_DESCRIPTION: &str = "too long";
/// Milliseconds per second.
const MS_PER_S: u64 = 1000;

/// Logs a protocol violation and asks the loop to stop with it.
pub(crate) fn violation(reason: &'static str) -> Flow {
    tracing::error!(reason, "protocol violation");
    Flow::Exit(ExitReason::ProtocolViolation)
}

impl<W: Write> Adapter<W> {
    pub(crate) fn on_present(&mut self, frame: &Frame) -> Step {
        let attempt_id = frame.header.attempt_id.as_deref();
        let revision = frame.header.channel_revision;
        let present = match Message::from_payload(Kind::Present, &frame.payload) {
            Ok(Message::Present(present)) => present,
            Ok(_) => return Ok(violation("presentPayload")),
            Err(error) => return self.refuse_unreadable(frame, &error),
        };
        match (present.operation, attempt_id) {
            (Operation::Track, None) => {
                self.track(&present, revision);
                Ok(Flow::Continue)
            }
            (Operation::Track, Some(_)) => Ok(violation("trackWithAttempt")),
            (_, None) => Ok(violation("presentWithoutAttempt")),
            (operation, Some(attempt_id)) => {
                let settle = self.attempt(&present, revision);
                log_settle(operation, &settle);
                self.outbox.send(&Message::Settle(settle), revision, Some(attempt_id))?;
                Ok(Flow::Continue)
            }
        }
    }

    /// A present whose payload fails its checks: settled `invalidPresentation` when it is an
    /// attempt with a usable channel message id, ignored when it is a `track`, a violation
    /// otherwise (nothing could be settled).
    fn refuse_unreadable(&mut self, frame: &Frame, error: &PayloadError) -> Step {
        let Some(attempt_id) = frame.header.attempt_id.as_deref() else {
            tracing::warn!(reason = "invalidTrack", "present refused");
            return Ok(Flow::Continue);
        };
        let channel_message_id = frame.payload.get("channelMessageId").and_then(Value::as_str);
        let Some(channel_message_id) = channel_message_id.filter(|id| usable_channel_message_id(id)) else {
            return Ok(violation("presentWithoutChannelMessageId"));
        };
        tracing::warn!(reason = "invalidPresentation", "present refused");
        let settle = rejected(channel_message_id, ErrorCode::InvalidPresentation, &error.to_string());
        self.outbox.send(
            &Message::Settle(settle),
            frame.header.channel_revision,
            Some(attempt_id),
        )?;
        Ok(Flow::Continue)
    }

    fn attempt(&mut self, present: &Present, revision: u64) -> Settle {
        let id = present.channel_message_id.as_str();
        if !self.chat_allowed(present.chat_id) {
            return rejected(
                id,
                ErrorCode::InvalidPresentation,
                "chatId is not an allowed chat of this profile",
            );
        }
        if self.is_stale(id, revision) {
            return rejected(
                id,
                ErrorCode::StaleRevision,
                "a newer channel revision of this message was already applied",
            );
        }
        match present.operation {
            Operation::Send => self.send(present, revision),
            Operation::Edit => self.edit(present, revision),
            Operation::Prompt => self.prompt(present),
            // Never reached: a track has no attempt (`on_present`).
            Operation::Track => rejected(id, ErrorCode::InvalidPresentation, "track has no attempt"),
        }
    }

    fn is_stale(&self, channel_message_id: &str, revision: u64) -> bool {
        self.registry
            .by_channel_message(channel_message_id)
            .is_some_and(|(_, tracked)| tracked.revision > revision)
    }

    fn send(&mut self, present: &Present, revision: u64) -> Settle {
        let id = present.channel_message_id.as_str();
        if let Err(refusal) = self.registry.can_track(&present.nonce, id) {
            return track_refused(id, refusal);
        }
        let body = json!({
            "chat_id": present.chat_id,
            "text": message_html(&present.presentation, None),
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
            "reply_markup": keyboard(&present.nonce, &present.presentation.choices),
        });
        match self.api.send_message(&body) {
            Ok(sent) => {
                self.remember(present, revision, sent.chat.id, Some(sent.message_id));
                applied(id, sent.chat.id, sent.message_id)
            }
            Err(error) => rejected_by_api(id, &error),
        }
    }

    fn edit(&mut self, present: &Present, revision: u64) -> Settle {
        let id = present.channel_message_id.as_str();
        let Some(message_id) = present.telegram_message_id else {
            return rejected(id, ErrorCode::InvalidPresentation, "edit needs telegramMessageId");
        };
        let closed = present.closed.as_ref();
        if closed.is_none()
            && let Err(refusal) = self.registry.can_track(&present.nonce, id)
        {
            return track_refused(id, refusal);
        }
        let mut body = json!({
            "chat_id": present.chat_id,
            "message_id": message_id,
            "text": message_html(&present.presentation, closed),
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
        });
        // No `reply_markup` removes the keyboard: a closed message has no buttons.
        if closed.is_none() {
            body["reply_markup"] = keyboard(&present.nonce, &present.presentation.choices);
        }
        match self.api.edit_message_text(&body) {
            Err(error) if !is_not_modified(&error) => rejected_by_api(id, &error),
            Ok(()) | Err(_) => {
                if closed.is_some() {
                    self.registry.untrack(id);
                } else {
                    self.remember(present, revision, present.chat_id, Some(message_id));
                }
                applied(id, present.chat_id, message_id)
            }
        }
    }

    fn prompt(&mut self, present: &Present) -> Settle {
        let id = present.channel_message_id.as_str();
        let open = self
            .registry
            .by_channel_message(id)
            .is_some_and(|(nonce, tracked)| nonce == present.nonce && tracked.chat_id == present.chat_id);
        if !open {
            return rejected(
                id,
                ErrorCode::InvalidPresentation,
                "the channel message is not open here",
            );
        }
        let choice = present.for_choice_id.as_deref().and_then(|choice_id| {
            present
                .presentation
                .choices
                .iter()
                .find(|choice| choice.id == choice_id)
        });
        let (Some(choice), Some(reply_to)) = (choice, present.telegram_message_id) else {
            return rejected(
                id,
                ErrorCode::InvalidPresentation,
                "prompt needs forChoiceId and telegramMessageId",
            );
        };
        let Some(input) = choice.input.as_ref() else {
            return rejected(
                id,
                ErrorCode::InvalidPresentation,
                "forChoiceId names a choice without input",
            );
        };
        let mut force_reply = json!({"force_reply": true});
        if let Some(placeholder) = &input.placeholder {
            force_reply["input_field_placeholder"] = Value::from(placeholder.as_str());
        }
        let body = json!({
            "chat_id": present.chat_id,
            "text": prompt_html(choice, input),
            "parse_mode": "HTML",
            "reply_markup": force_reply,
            "reply_parameters": {"message_id": reply_to, "allow_sending_without_reply": true},
        });
        match self.api.send_message(&body) {
            Ok(sent) => {
                let prompt = PendingPrompt {
                    nonce: present.nonce.clone(),
                    choice_id: choice.id.clone(),
                    max_length: input.max_length,
                };
                self.registry.add_prompt(sent.chat.id, sent.message_id, prompt);
                applied(id, sent.chat.id, sent.message_id)
            }
            Err(error) => rejected_by_api(id, &error),
        }
    }

    /// `track`: answer for an already-presented open message again. No API call, no settle.
    /// Without `telegramMessageId` (a send an operator confirmed) its first press in its chat
    /// tells which message it is.
    fn track(&mut self, present: &Present, revision: u64) {
        let refused = if !self.chat_allowed(present.chat_id) {
            Some("chatNotAllowed")
        } else if self.is_stale(&present.channel_message_id, revision) {
            Some("staleRevision")
        } else {
            self.registry
                .can_track(&present.nonce, &present.channel_message_id)
                .err()
                .map(track_refusal_name)
        };
        if let Some(reason) = refused {
            tracing::warn!(reason, "track refused");
            return;
        }
        self.remember(present, revision, present.chat_id, present.telegram_message_id);
        tracing::info!(open = self.registry.len(), "message tracked");
    }

    fn remember(&mut self, present: &Present, revision: u64, chat_id: i64, message_id: Option<i64>) {
        let tracked = TrackedMessage {
            channel_message_id: present.channel_message_id.clone(),
            chat_id,
            message_id,
            revision,
            choices: tracked_choices(&present.presentation),
        };
        // `can_track` passed just before, in this same thread.
        if let Err(refusal) = self.registry.track(&present.nonce, tracked) {
            tracing::error!(reason = track_refusal_name(refusal), "track refused after the API call");
        }
    }
}

fn usable_channel_message_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= CHANNEL_MESSAGE_ID_BYTES_MAX && is_printable(id)
}

fn is_not_modified(error: &ApiError) -> bool {
    error.status() == Some(400)
        && error
            .description
            .as_deref()
            .is_some_and(|text| text.contains(NOT_MODIFIED_DESCRIPTION))
}

fn track_refusal_name(refusal: TrackRefusal) -> &'static str {
    match refusal {
        TrackRefusal::Full => "capacityExceeded",
        TrackRefusal::NonceTaken => "nonceTaken",
    }
}

fn track_refused(channel_message_id: &str, refusal: TrackRefusal) -> Settle {
    match refusal {
        TrackRefusal::Full => rejected(
            channel_message_id,
            ErrorCode::CapacityExceeded,
            "the adapter already tracks its maximum of open messages",
        ),
        TrackRefusal::NonceTaken => rejected(
            channel_message_id,
            ErrorCode::InvalidPresentation,
            "the nonce belongs to another channel message",
        ),
    }
}

fn log_settle(operation: Operation, settle: &Settle) {
    match &settle.error {
        None => tracing::info!(operation = operation.as_str(), outcome = "applied", "present settled"),
        Some(error) => tracing::warn!(
            operation = operation.as_str(),
            outcome = "rejected",
            code = error.code.as_str(),
            uncertain = error.uncertain,
            "present settled"
        ),
    }
}

fn applied(channel_message_id: &str, chat_id: i64, message_id: i64) -> Settle {
    Settle {
        channel_message_id: channel_message_id.to_owned(),
        outcome: Outcome::Applied,
        telegram: Some(TelegramRef { chat_id, message_id }),
        error: None,
    }
}

/// A rejection the adapter decided before any API call: certain, not retryable.
fn rejected(channel_message_id: &str, code: ErrorCode, message: &str) -> Settle {
    settle_rejected(
        channel_message_id,
        SettleError {
            code,
            message: bounded_chars(message, ERROR_MESSAGE_CHARS_MAX),
            retryable: false,
            retry_after_ms: None,
            uncertain: false,
        },
    )
}

fn rejected_by_api(channel_message_id: &str, error: &ApiError) -> Settle {
    settle_rejected(channel_message_id, settle_error(error))
}

fn settle_rejected(channel_message_id: &str, error: SettleError) -> Settle {
    Settle {
        channel_message_id: channel_message_id.to_owned(),
        outcome: Outcome::Rejected,
        telegram: None,
        error: Some(error),
    }
}

/// The closed error code, retryability and certainty of a failed API call.
///
/// `retryable`: nothing happened and a new attempt may work. `uncertain`: the request may have
/// reached Telegram, so the server must treat the attempt as ambiguous and never resend it by
/// itself.
#[must_use]
pub fn settle_error(error: &ApiError) -> SettleError {
    let (code, retryable, uncertain) = match error.failure {
        Failure::Status(429) => (ErrorCode::RateLimited, true, false),
        Failure::Status(400) if mentions(error, TOO_LONG_DESCRIPTION) => (ErrorCode::TooLarge, false, false),
        Failure::Status(400) => (ErrorCode::BadRequest, false, false),
        Failure::Status(401) => (ErrorCode::Unauthorized, false, false),
        Failure::Status(403) => (ErrorCode::Forbidden, false, false),
        Failure::Status(404) => (ErrorCode::NotFound, false, false),
        Failure::Status(409) => (ErrorCode::Conflict, false, false),
        Failure::Status(413) => (ErrorCode::TooLarge, false, false),
        // A gateway timeout says nothing about whether Telegram did the work.
        Failure::Status(504) => (ErrorCode::ServerError, false, true),
        Failure::Status(500..=599) => (ErrorCode::ServerError, true, false),
        Failure::Status(_) | Failure::BadResponse => (ErrorCode::UnexpectedResponse, false, true),
        Failure::Transport { reached: false } => (ErrorCode::Network, true, false),
        Failure::Transport { reached: true } => (ErrorCode::Network, false, true),
    };
    let retry_after_ms = match code {
        ErrorCode::RateLimited => error.retry_after_s.map(|seconds| seconds.saturating_mul(MS_PER_S)),
        _ => None,
    };
    SettleError {
        code,
        message: bounded_chars(&settle_message(error), ERROR_MESSAGE_CHARS_MAX),
        retryable,
        retry_after_ms,
        uncertain,
    }
}

fn mentions(error: &ApiError, words: &str) -> bool {
    error
        .description
        .as_deref()
        .is_some_and(|text| text.to_ascii_lowercase().contains(words))
}

/// Telegram's own description when it gave one (already redacted and bounded), else a fixed
/// sentence. Never a URL or an HTTP library error.
fn settle_message(error: &ApiError) -> String {
    if let Some(description) = &error.description {
        return description.clone();
    }
    match error.failure {
        Failure::Status(status) => format!("the Bot API answered HTTP {status}"),
        Failure::Transport { reached: false } => "the Bot API could not be reached; nothing was sent".to_owned(),
        Failure::Transport { reached: true } => {
            "the connection failed after the request was sent; it may have been applied".to_owned()
        }
        Failure::BadResponse => "the Bot API answer could not be read; the request may have been applied".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(failure: Failure, description: Option<&str>, retry_after_s: Option<u64>) -> ApiError {
        ApiError {
            failure,
            description: description.map(str::to_owned),
            retry_after_s,
        }
    }

    #[test]
    fn maps_failures_to_closed_codes() {
        let limited = settle_error(&api_error(Failure::Status(429), Some("Too Many Requests"), Some(7)));
        assert_eq!(
            (
                limited.code,
                limited.retryable,
                limited.retry_after_ms,
                limited.uncertain
            ),
            (ErrorCode::RateLimited, true, Some(7000), false)
        );
        let bad = settle_error(&api_error(
            Failure::Status(400),
            Some("Bad Request: chat not found"),
            None,
        ));
        assert_eq!((bad.code, bad.retryable), (ErrorCode::BadRequest, false));
        assert_eq!(bad.message, "Bad Request: chat not found");
        let long = settle_error(&api_error(
            Failure::Status(400),
            Some("Bad Request: message is too long"),
            None,
        ));
        assert_eq!(long.code, ErrorCode::TooLarge);
        let broken = settle_error(&api_error(Failure::Transport { reached: true }, None, None));
        assert_eq!(
            (broken.code, broken.retryable, broken.uncertain),
            (ErrorCode::Network, false, true)
        );
        let refused = settle_error(&api_error(Failure::Transport { reached: false }, None, None));
        assert_eq!(
            (refused.code, refused.retryable, refused.uncertain),
            (ErrorCode::Network, true, false)
        );
        let gateway = settle_error(&api_error(Failure::Status(504), None, None));
        assert!(gateway.uncertain && !gateway.retryable);
        let unreadable = settle_error(&api_error(Failure::BadResponse, None, None));
        assert_eq!(
            (unreadable.code, unreadable.uncertain),
            (ErrorCode::UnexpectedResponse, true)
        );
    }

    #[test]
    fn an_unmodified_edit_counts_as_done() {
        let error = api_error(
            Failure::Status(400),
            Some(
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same",
            ),
            None,
        );
        assert!(is_not_modified(&error));
        assert!(!is_not_modified(&api_error(
            Failure::Status(400),
            Some("Bad Request"),
            None
        )));
    }
}
