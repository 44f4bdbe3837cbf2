//! The bounds of every payload field, and the checks that enforce them.
//!
//! Both ends use the same checks: the server before it records a presentation (so it never asks
//! for something the adapter refuses), the adapter before it calls Telegram. Lengths of text are
//! counted in Unicode scalar values ("characters"), identifiers in bytes of ASCII.

use crate::frame::SAFE_INTEGER_MAX;
use crate::payload::{Answer, Block, Choice, Operation, Outcome, Present, Presentation, Ready, Settle, Stage};
use std::collections::HashSet;
use thiserror::Error;

/// Longest diagnostic kept in an error, in bytes.
pub const DIAGNOSTIC_BYTES_MAX: usize = 160;
/// Longest `attemptId`, in bytes.
pub const ATTEMPT_ID_BYTES_MAX: usize = 256;
/// Longest profile name, in characters of `[A-Za-z0-9_-]`.
pub const PROFILE_CHARS_MAX: usize = 64;
/// Longest `channelMessageId`, in bytes.
pub const CHANNEL_MESSAGE_ID_BYTES_MAX: usize = 64;
/// Shortest nonce, in characters of `[A-Za-z0-9_-]`.
pub const NONCE_CHARS_MIN: usize = 8;
/// Longest nonce, in characters of `[A-Za-z0-9_-]`. With `:` and a two-digit choice index the
/// callback data stays far below Telegram's 64 bytes.
pub const NONCE_CHARS_MAX: usize = 24;
/// Longest choice id, in characters of `[a-z0-9_-]`.
pub const CHOICE_ID_CHARS_MAX: usize = 32;
/// Most choices of one presentation (one keyboard row each).
pub const CHOICES_MAX: usize = 16;
/// Longest choice label (button text), in characters.
pub const CHOICE_LABEL_CHARS_MAX: usize = 64;
/// Longest title, in characters.
pub const TITLE_CHARS_MAX: usize = 256;
/// Longest summary, in characters.
pub const SUMMARY_CHARS_MAX: usize = 4096;
/// Most body blocks.
pub const BLOCKS_MAX: usize = 32;
/// Longest text or code block, in characters (the rendered message is cut to Telegram's limit).
pub const BLOCK_TEXT_CHARS_MAX: usize = 16 * 1024;
/// Most fields of one fields block.
pub const FIELDS_MAX: usize = 32;
/// Longest field label, in characters.
pub const FIELD_LABEL_CHARS_MAX: usize = 256;
/// Longest field value, in characters.
pub const FIELD_VALUE_CHARS_MAX: usize = 4096;
/// Longest input label (the prompt's question), in characters.
pub const INPUT_LABEL_CHARS_MAX: usize = 256;
/// Longest input placeholder, in characters (Telegram's bound).
pub const PLACEHOLDER_CHARS_MAX: usize = 64;
/// Largest `maxLength` of an input, in characters (a Telegram message holds at most 4096).
pub const INPUT_CHARS_MAX: u32 = 4096;
/// Longest closed text, in characters.
pub const CLOSED_TEXT_CHARS_MAX: usize = 1024;
/// Longest settle error message, in characters.
pub const ERROR_MESSAGE_CHARS_MAX: usize = 300;
/// Longest bot username, in characters.
pub const USERNAME_CHARS_MAX: usize = 64;

/// A payload is not acceptable. Messages name fields and rules, never the content.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PayloadError {
    /// The object is not that kind's payload: a missing, unknown or mistyped field.
    #[error("payload is not a {kind} payload ({detail})")]
    Shape {
        /// The frame kind.
        kind: &'static str,
        /// The decoder's diagnostic, bounded.
        detail: String,
    },
    /// A field is out of its bounds.
    #[error("payload field {field} is invalid: {rule}")]
    Invalid {
        /// The field's path, e.g. `presentation.choices[].id`.
        field: &'static str,
        /// What it must be.
        rule: &'static str,
    },
}

type Checked = Result<(), PayloadError>;

fn invalid(field: &'static str, rule: &'static str) -> Checked {
    Err(PayloadError::Invalid { field, rule })
}

fn require(ok: bool, field: &'static str, rule: &'static str) -> Checked {
    if ok { Ok(()) } else { invalid(field, rule) }
}

/// Checks a `channel.ready` payload.
///
/// # Errors
///
/// The first field out of bounds.
pub fn check_ready(ready: &Ready) -> Checked {
    require(
        valid_id(ready.bot.id) && ready.bot.id > 0,
        "bot.id",
        "a positive safe integer",
    )?;
    require(
        bounded_line(&ready.bot.username, 1, USERNAME_CHARS_MAX),
        "bot.username",
        "1-64 characters, no control characters",
    )
}

/// Checks a `channel.present` payload: the fields every operation needs, then the operation's
/// own rules, then the presentation.
///
/// # Errors
///
/// The first field out of bounds.
pub fn check_present(present: &Present) -> Checked {
    check_channel_message_id(&present.channel_message_id)?;
    require(valid_id(present.chat_id), "chatId", "a safe integer")?;
    require(valid_nonce(&present.nonce), "nonce", "8-24 characters of [A-Za-z0-9_-]")?;
    check_operation(present)?;
    check_presentation(&present.presentation)
}

fn check_operation(present: &Present) -> Checked {
    let message_id_ok = present.telegram_message_id.is_some_and(|id| valid_id(id) && id > 0);
    match present.operation {
        Operation::Send => {
            require(
                present.telegram_message_id.is_none(),
                "telegramMessageId",
                "absent for send",
            )?;
            require(present.closed.is_none(), "closed", "only for edit")?;
            require(present.for_choice_id.is_none(), "forChoiceId", "only for prompt")
        }
        Operation::Edit => {
            require(message_id_ok, "telegramMessageId", "a positive safe integer for edit")?;
            require(present.for_choice_id.is_none(), "forChoiceId", "only for prompt")?;
            match &present.closed {
                Some(closed) => require(
                    bounded_text_block(&closed.text, 1, CLOSED_TEXT_CHARS_MAX),
                    "closed.text",
                    "1-1024 characters",
                ),
                None => Ok(()),
            }
        }
        Operation::Prompt => {
            require(message_id_ok, "telegramMessageId", "a positive safe integer for prompt")?;
            require(present.closed.is_none(), "closed", "only for edit")?;
            let input_choice = present
                .for_choice_id
                .as_deref()
                .and_then(|id| present.presentation.choices.iter().find(|choice| choice.id == id))
                .is_some_and(|choice| choice.input.is_some());
            require(input_choice, "forChoiceId", "the id of a choice with input")
        }
        Operation::Track => {
            // Without one: a send an operator confirmed; the first press tells which message.
            let absent_or_ok = present.telegram_message_id.is_none() || message_id_ok;
            require(
                absent_or_ok,
                "telegramMessageId",
                "absent or a positive safe integer for track",
            )?;
            require(present.closed.is_none(), "closed", "only for edit")?;
            require(present.for_choice_id.is_none(), "forChoiceId", "only for prompt")
        }
    }
}

/// Checks a presentation.
///
/// # Errors
///
/// The first field out of bounds.
pub fn check_presentation(presentation: &Presentation) -> Checked {
    require(
        bounded_line(&presentation.title, 1, TITLE_CHARS_MAX),
        "presentation.title",
        "1-256 characters, no control characters",
    )?;
    require(
        bounded_text_block(&presentation.summary, 0, SUMMARY_CHARS_MAX),
        "presentation.summary",
        "at most 4096 characters",
    )?;
    require(
        presentation.blocks.len() <= BLOCKS_MAX,
        "presentation.blocks",
        "at most 32 blocks",
    )?;
    presentation.blocks.iter().try_for_each(check_block)?;
    check_choices(&presentation.choices)?;
    if let Some(deadline_at) = presentation.deadline_at {
        require(
            valid_id(deadline_at) && deadline_at >= 0,
            "presentation.deadlineAt",
            "a safe integer ≥ 0",
        )?;
    }
    if let Some(default_id) = &presentation.default_choice_id {
        let known = presentation.choices.iter().any(|choice| &choice.id == default_id);
        require(known, "presentation.defaultChoiceId", "the id of one of the choices")?;
    }
    Ok(())
}

fn check_block(block: &Block) -> Checked {
    match block {
        Block::Text { text } | Block::Code { text } => require(
            bounded_text_block(text, 0, BLOCK_TEXT_CHARS_MAX),
            "presentation.blocks[].text",
            "at most 16384 characters",
        ),
        Block::Fields { fields } => {
            require(
                fields.len() <= FIELDS_MAX,
                "presentation.blocks[].fields",
                "at most 32 fields",
            )?;
            fields.iter().try_for_each(|field| {
                require(
                    bounded_line(&field.label, 1, FIELD_LABEL_CHARS_MAX),
                    "presentation.blocks[].fields[].label",
                    "1-256 characters, no control characters",
                )?;
                require(
                    bounded_text_block(&field.value, 0, FIELD_VALUE_CHARS_MAX),
                    "presentation.blocks[].fields[].value",
                    "at most 4096 characters",
                )
            })
        }
    }
}

fn check_choices(choices: &[Choice]) -> Checked {
    require(
        (1..=CHOICES_MAX).contains(&choices.len()),
        "presentation.choices",
        "1-16 choices",
    )?;
    let mut seen = HashSet::new();
    for choice in choices {
        require(
            valid_choice_id(&choice.id),
            "presentation.choices[].id",
            "1-32 characters of [a-z0-9_-]",
        )?;
        require(seen.insert(choice.id.as_str()), "presentation.choices[].id", "unique")?;
        require(
            bounded_line(&choice.label, 1, CHOICE_LABEL_CHARS_MAX),
            "presentation.choices[].label",
            "1-64 characters, no control characters",
        )?;
        if let Some(input) = &choice.input {
            require(
                bounded_line(&input.label, 1, INPUT_LABEL_CHARS_MAX),
                "presentation.choices[].input.label",
                "1-256 characters, no control characters",
            )?;
            if let Some(placeholder) = &input.placeholder {
                require(
                    bounded_line(placeholder, 1, PLACEHOLDER_CHARS_MAX),
                    "presentation.choices[].input.placeholder",
                    "1-64 characters, no control characters",
                )?;
            }
            require(
                (1..=INPUT_CHARS_MAX).contains(&input.max_length),
                "presentation.choices[].input.maxLength",
                "1-4096",
            )?;
        }
    }
    Ok(())
}

/// Checks a `channel.settle` payload: `applied` carries `telegram` and no `error`, `rejected`
/// the reverse.
///
/// # Errors
///
/// The first field out of bounds.
pub fn check_settle(settle: &Settle) -> Checked {
    check_channel_message_id(&settle.channel_message_id)?;
    match settle.outcome {
        Outcome::Applied => {
            let reference_ok = settle
                .telegram
                .is_some_and(|reference| valid_id(reference.chat_id) && valid_id(reference.message_id));
            require(reference_ok, "telegram", "present with safe integers when applied")?;
            require(settle.error.is_none(), "error", "absent when applied")
        }
        Outcome::Rejected => {
            require(settle.telegram.is_none(), "telegram", "absent when rejected")?;
            let Some(error) = &settle.error else {
                return invalid("error", "present when rejected");
            };
            require(
                bounded_text_block(&error.message, 0, ERROR_MESSAGE_CHARS_MAX),
                "error.message",
                "at most 300 characters",
            )?;
            let retry_ok = error.retry_after_ms.is_none_or(|ms| ms <= SAFE_INTEGER_MAX);
            require(retry_ok, "error.retryAfterMs", "a safe integer")
        }
    }
}

/// Checks a `channel.answer` payload: text only on a `final` answer.
///
/// # Errors
///
/// The first field out of bounds.
pub fn check_answer(answer: &Answer) -> Checked {
    check_channel_message_id(&answer.channel_message_id)?;
    require(
        valid_choice_id(&answer.choice_id),
        "choiceId",
        "1-32 characters of [a-z0-9_-]",
    )?;
    if let Some(text) = &answer.text {
        require(answer.stage == Stage::Final, "text", "only on a final answer")?;
        let chars = text.chars().count();
        require(chars <= INPUT_CHARS_MAX as usize, "text", "at most 4096 characters")?;
    }
    require(
        valid_id(answer.from.user_id) && valid_id(answer.from.chat_id),
        "from",
        "safe integers",
    )?;
    require(
        valid_id(answer.update_id) && answer.update_id >= 0,
        "updateId",
        "a safe integer ≥ 0",
    )?;
    require(
        answer.telegram_message_id.is_none_or(|id| valid_id(id) && id > 0),
        "telegramMessageId",
        "a positive safe integer",
    )
}

fn check_channel_message_id(id: &str) -> Checked {
    require(
        !id.is_empty() && id.len() <= CHANNEL_MESSAGE_ID_BYTES_MAX && is_printable(id),
        "channelMessageId",
        "1-64 bytes of printable text",
    )
}

/// Whether `id` is exact on the wire (|id| ≤ 2^53 − 1).
#[must_use]
pub fn valid_id(id: i64) -> bool {
    id.unsigned_abs() <= SAFE_INTEGER_MAX
}

/// A profile name: 1–64 characters of `[A-Za-z0-9_-]`.
#[must_use]
pub fn valid_profile(name: &str) -> bool {
    (1..=PROFILE_CHARS_MAX).contains(&name.len()) && name.bytes().all(is_token_byte)
}

/// A nonce: 8–24 characters of `[A-Za-z0-9_-]`.
#[must_use]
pub fn valid_nonce(nonce: &str) -> bool {
    (NONCE_CHARS_MIN..=NONCE_CHARS_MAX).contains(&nonce.len()) && nonce.bytes().all(is_token_byte)
}

/// A choice id: 1–32 characters of `[a-z0-9_-]`.
#[must_use]
pub fn valid_choice_id(id: &str) -> bool {
    (1..=CHOICE_ID_CHARS_MAX).contains(&id.len())
        && id
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-')
}

fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// No control characters at all (C0, DEL, C1).
#[must_use]
pub fn is_printable(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

/// A single line of `min..=max` characters without control characters.
fn bounded_line(text: &str, min: usize, max: usize) -> bool {
    is_printable(text) && (min..=max).contains(&text.chars().count())
}

/// Text of `min..=max` characters whose only control characters are `\n` and `\t`.
fn bounded_text_block(text: &str, min: usize, max: usize) -> bool {
    let controls_ok = text.chars().all(|ch| !ch.is_control() || ch == '\n' || ch == '\t');
    controls_ok && (min..=max).contains(&text.chars().count())
}

/// Longest identifier a decoder diagnostic may keep (a field or variant name).
const DIAGNOSTIC_NAME_BYTES_MAX: usize = 64;

/// A decoder's diagnostic without the input's values: `serde` quotes a value with `"` (always
/// dropped) and a field or variant name with backticks (kept when it is a short identifier),
/// then names the line and column. Bounded to [`DIAGNOSTIC_BYTES_MAX`].
#[must_use]
pub fn safe_decoder_detail(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(start) = rest.find(['"', '`']) {
        out.push_str(&rest[..start]);
        let quote = &rest[start..=start];
        let after = &rest[start + 1..];
        let (inner, remainder) = match after.find(quote) {
            Some(end) => (&after[..end], &after[end + 1..]),
            None => (after, ""),
        };
        let name_like = quote == "`"
            && inner.len() <= DIAGNOSTIC_NAME_BYTES_MAX
            && inner.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
        out.push_str(quote);
        out.push_str(if name_like { inner } else { "…" });
        out.push_str(quote);
        rest = remainder;
    }
    out.push_str(rest);
    bounded_text(&out, DIAGNOSTIC_BYTES_MAX)
}

/// Copies at most `max_bytes` of `text`, cut at a character boundary, marking a cut with `…`.
#[must_use]
pub fn bounded_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Copies at most `max_chars` characters of `text`, the last one `…` when cut.
#[must_use]
pub fn bounded_chars(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{AnswerFrom, ChoiceInput, Closed, ErrorCode, SettleError, TelegramRef};

    fn presentation() -> Presentation {
        Presentation {
            title: "Deploy?".to_owned(),
            summary: "Release 1.2\nto production".to_owned(),
            blocks: vec![
                Block::Text {
                    text: "Plan".to_owned(),
                },
                Block::Fields {
                    fields: vec![crate::payload::Field {
                        label: "Env".to_owned(),
                        value: "prod".to_owned(),
                    }],
                },
            ],
            choices: vec![
                Choice {
                    id: "approve".to_owned(),
                    label: "Approve".to_owned(),
                    input: None,
                },
                Choice {
                    id: "replan".to_owned(),
                    label: "Replan".to_owned(),
                    input: Some(ChoiceInput {
                        label: "What should change?".to_owned(),
                        placeholder: Some("Your notes".to_owned()),
                        max_length: 200,
                    }),
                },
            ],
            deadline_at: Some(1_700_000_000_000),
            default_choice_id: Some("approve".to_owned()),
        }
    }

    fn present(operation: Operation) -> Present {
        Present {
            channel_message_id: "cm-1".to_owned(),
            operation,
            chat_id: -100_123,
            telegram_message_id: None,
            nonce: "n0nce-abc".to_owned(),
            presentation: presentation(),
            closed: None,
            for_choice_id: None,
        }
    }

    fn field_of(result: Checked) -> &'static str {
        match result {
            Err(PayloadError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_each_operation_with_its_fields() {
        check_present(&present(Operation::Send)).expect("send");
        let mut edit = present(Operation::Edit);
        edit.telegram_message_id = Some(7);
        edit.closed = Some(Closed {
            text: "Approved".to_owned(),
        });
        check_present(&edit).expect("edit");
        let mut prompt = present(Operation::Prompt);
        prompt.telegram_message_id = Some(7);
        prompt.for_choice_id = Some("replan".to_owned());
        check_present(&prompt).expect("prompt");
        let mut track = present(Operation::Track);
        track.telegram_message_id = Some(7);
        check_present(&track).expect("track");
        track.telegram_message_id = None;
        check_present(&track).expect("a track without its message (a confirmed send)");
        track.telegram_message_id = Some(0);
        assert_eq!(field_of(check_present(&track)), "telegramMessageId");
    }

    #[test]
    fn refuses_operation_field_mismatches() {
        let mut send = present(Operation::Send);
        send.telegram_message_id = Some(7);
        assert_eq!(field_of(check_present(&send)), "telegramMessageId");
        let edit = present(Operation::Edit);
        assert_eq!(field_of(check_present(&edit)), "telegramMessageId");
        let mut prompt = present(Operation::Prompt);
        prompt.telegram_message_id = Some(7);
        prompt.for_choice_id = Some("approve".to_owned());
        assert_eq!(field_of(check_present(&prompt)), "forChoiceId");
        let mut track = present(Operation::Track);
        track.telegram_message_id = Some(7);
        track.closed = Some(Closed { text: "x".to_owned() });
        assert_eq!(field_of(check_present(&track)), "closed");
    }

    #[test]
    fn refuses_bad_identifiers() {
        let mut bad = present(Operation::Send);
        bad.nonce = "short".to_owned();
        assert_eq!(field_of(check_present(&bad)), "nonce");
        let mut bad = present(Operation::Send);
        bad.nonce = "has:colon-inside".to_owned();
        assert_eq!(field_of(check_present(&bad)), "nonce");
        let mut bad = present(Operation::Send);
        bad.channel_message_id = "x".repeat(65);
        assert_eq!(field_of(check_present(&bad)), "channelMessageId");
        let mut bad = present(Operation::Send);
        bad.chat_id = i64::MAX;
        assert_eq!(field_of(check_present(&bad)), "chatId");
    }

    #[test]
    fn refuses_bad_choices() {
        let mut bad = present(Operation::Send);
        bad.presentation.choices[1].id = "approve".to_owned();
        bad.presentation.default_choice_id = None;
        assert_eq!(field_of(check_present(&bad)), "presentation.choices[].id");
        let mut bad = present(Operation::Send);
        bad.presentation.choices[0].id = "Approve".to_owned();
        bad.presentation.default_choice_id = None;
        assert_eq!(field_of(check_present(&bad)), "presentation.choices[].id");
        let mut bad = present(Operation::Send);
        bad.presentation.choices.clear();
        bad.presentation.default_choice_id = None;
        assert_eq!(field_of(check_present(&bad)), "presentation.choices");
        let mut bad = present(Operation::Send);
        bad.presentation.default_choice_id = Some("other".to_owned());
        assert_eq!(field_of(check_present(&bad)), "presentation.defaultChoiceId");
        let mut bad = present(Operation::Send);
        if let Some(input) = bad.presentation.choices[1].input.as_mut() {
            input.max_length = 0;
        }
        assert_eq!(field_of(check_present(&bad)), "presentation.choices[].input.maxLength");
    }

    #[test]
    fn refuses_control_characters_and_long_texts() {
        let mut bad = present(Operation::Send);
        bad.presentation.title = "two\nlines".to_owned();
        assert_eq!(field_of(check_present(&bad)), "presentation.title");
        let mut bad = present(Operation::Send);
        bad.presentation.summary = "x".repeat(SUMMARY_CHARS_MAX + 1);
        assert_eq!(field_of(check_present(&bad)), "presentation.summary");
        let mut bad = present(Operation::Send);
        bad.presentation.blocks = vec![Block::Code {
            text: "\u{7}".to_owned(),
        }];
        assert_eq!(field_of(check_present(&bad)), "presentation.blocks[].text");
    }

    #[test]
    fn settle_outcomes_carry_their_own_fields() {
        let applied = Settle {
            channel_message_id: "cm-1".to_owned(),
            outcome: Outcome::Applied,
            telegram: Some(TelegramRef {
                chat_id: 1,
                message_id: 2,
            }),
            error: None,
        };
        check_settle(&applied).expect("applied");
        let mut bad = applied.clone();
        bad.telegram = None;
        assert_eq!(field_of(check_settle(&bad)), "telegram");
        let rejected = Settle {
            channel_message_id: "cm-1".to_owned(),
            outcome: Outcome::Rejected,
            telegram: None,
            error: Some(SettleError {
                code: ErrorCode::Network,
                message: "x".repeat(ERROR_MESSAGE_CHARS_MAX + 1),
                retryable: false,
                retry_after_ms: None,
                uncertain: true,
            }),
        };
        assert_eq!(field_of(check_settle(&rejected)), "error.message");
    }

    #[test]
    fn answer_text_only_when_final() {
        let mut answer = Answer {
            channel_message_id: "cm-1".to_owned(),
            choice_id: "replan".to_owned(),
            text: Some("more tests".to_owned()),
            stage: Stage::Final,
            from: AnswerFrom { user_id: 1, chat_id: 1 },
            update_id: 10,
            telegram_message_id: None,
        };
        check_answer(&answer).expect("final");
        answer.stage = Stage::WantsText;
        assert_eq!(field_of(check_answer(&answer)), "text");
    }

    #[test]
    fn decoder_details_keep_names_but_no_values() {
        let error = serde_json::from_str::<crate::payload::Exiting>(r#"{"reason":"123:secret"}"#).expect_err("variant");
        let detail = safe_decoder_detail(&error.to_string());
        assert!(!detail.contains("secret"), "{detail}");
        assert!(detail.contains("`requested`") && detail.contains("line 1"), "{detail}");
        assert_eq!(
            safe_decoder_detail("invalid type: string \"abc\", expected u64"),
            "invalid type: string \"…\", expected u64"
        );
        assert_eq!(safe_decoder_detail("unknown field `extra`"), "unknown field `extra`");
        assert_eq!(safe_decoder_detail("unknown variant `a:b`"), "unknown variant `…`");
        assert_eq!(safe_decoder_detail("cut \"open"), "cut \"…\"");
    }

    #[test]
    fn bounds_texts_at_boundaries() {
        assert_eq!(bounded_text("héllo", 2), "h…");
        assert_eq!(bounded_text("abc", 3), "abc");
        assert_eq!(bounded_chars("abcdef", 4), "abc…");
        assert_eq!(bounded_chars("abc", 4), "abc");
        assert!(valid_profile("ops_1-a") && !valid_profile("") && !valid_profile(&"a".repeat(65)));
    }
}
