//! Protected human decisions as pure functions (spec "Interactive Pi execution", docs/STATE.md
//! "Human decisions"): the request a `humanDecision` node makes (audience, title, the
//! operator presentation, declared choices with optional text input, a wall-clock deadline
//! and its default), the digest that binds it, and the check of a response against it.
//!
//! The choices are declared data, not workflow code, so the server verifies an answer itself
//! and settles the decision in one transaction: a person's answer, the timeout default, or an
//! explicit cancel — exactly one wins.
//!
//! Architecture Invariant: pure functions of JSON values — no I/O, no store, no workflow code.
//! The decision subject is bound by its digest here and never enters a presentation.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::protocol::canonical_sha256_hex;
use crate::wire_enum::wire_enum;

/// The schema of an operator presentation.
pub const PRESENTATION_SCHEMA: &str = "pi-workflows.decision-presentation.v1";
/// The schema the request digest is computed over.
pub const REQUEST_DIGEST_SCHEMA: &str = "pi-workflows.decision-request.v1";

/// An audience name (`[a-z0-9_-]`), bytes.
pub const AUDIENCE_BYTES_MAX: usize = 64;
/// A decision title, characters.
pub const TITLE_CHARS_MAX: usize = 200;
/// The presentation's summary, characters.
pub const SUMMARY_CHARS_MAX: usize = 4000;
/// Blocks of one presentation.
pub const BLOCKS_MAX: usize = 32;
/// A text block, characters.
pub const BLOCK_TEXT_CHARS_MAX: usize = 4000;
/// A code block, characters.
pub const CODE_TEXT_CHARS_MAX: usize = 8000;
/// Fields of one fields block.
pub const FIELDS_MAX: usize = 32;
/// A field's label, characters.
pub const FIELD_LABEL_CHARS_MAX: usize = 100;
/// A field's value, characters.
pub const FIELD_VALUE_CHARS_MAX: usize = 1000;
/// One whole presentation as canonical JSON (a Telegram message holds 4096 characters; the
/// adapter cuts, the Pi card shows it whole).
pub const PRESENTATION_BYTES_MAX: usize = 32 * 1024;
/// Choices of one decision (one inline button each).
pub const CHOICES_MAX: usize = 16;
/// A choice ID (`[a-z0-9_-]`), bytes.
pub const CHOICE_ID_BYTES_MAX: usize = 32;
/// A choice's label, characters.
pub const CHOICE_LABEL_CHARS_MAX: usize = 64;
/// A text input's label or placeholder, characters.
pub const INPUT_LABEL_CHARS_MAX: usize = 200;
/// The longest text any input may take, characters.
pub const INPUT_TEXT_CHARS_MAX: usize = 4000;
/// The decision subject (canonical data the digest binds; never presented), bytes.
pub const SUBJECT_BYTES_MAX: usize = 64 * 1024;

wire_enum! {
    /// Who settled a decision (`human_decision_resolutions.provenance`): exactly one wins.
    pub enum Provenance {
        /// A person's answer through `decision.answer` (Pi, CLI, or a channel).
        Human = "human",
        /// The deadline passed and the declared default was recorded.
        TimeoutPolicy = "timeout_policy",
        /// The run was cancelled while the decision was pending.
        ExplicitCancel = "explicit_cancel",
        /// The deadline passed with no default: the step timed out.
        ExpiredNoDefault = "expired_no_default",
        /// The run ended another way while the decision was pending.
        RunEnded = "run_ended",
    }
}

/// Why a decision request or a response was refused. `code()` is the client error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    #[error("the decision request is invalid: {0}")]
    InvalidRequest(String),
    #[error("the answer is invalid: {0}")]
    InvalidAnswer(String),
    #[error(
        "the decision changed since it was shown (its request digest differs); look at it again \
         (`pi-workflows run status`) and answer the current one"
    )]
    Changed,
    #[error("the decision was already settled ({provenance}); nothing was changed")]
    Settled { provenance: String },
    #[error(
        "the decision's deadline passed; its default applies (or the step timed out) and a later answer cannot win"
    )]
    DeadlinePassed,
}

impl DecisionError {
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            DecisionError::InvalidRequest(_) => "invalidDecision",
            DecisionError::InvalidAnswer(_) => "invalidAnswer",
            DecisionError::Changed => "decisionChanged",
            DecisionError::Settled { .. } => "decisionSettled",
            DecisionError::DeadlinePassed => "decisionExpired",
        }
    }
}

type Checked = Result<(), DecisionError>;

/// What a `humanDecision` node asks (the `decision` member of its request contract).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionRequest {
    pub audience: String,
    pub title: String,
    pub presentation: Presentation,
    pub choices: Vec<Choice>,
    /// The wall-clock deadline (ms since the epoch), committed with the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
    /// The response recorded when the deadline passes (`onTimeout.response`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<Response>,
}

/// The operator presentation (`pi-workflows.decision-presentation.v1`): all a channel shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Presentation {
    pub schema: String,
    pub summary: String,
    #[serde(default)]
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Block {
    Text {
        text: String,
    },
    Fields {
        fields: Vec<Field>,
    },
    Code {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        language: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Field {
    pub label: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Choice {
    pub id: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<TextInput>,
}

/// A choice that takes text (`textInput`): a Telegram ForceReply, the rest of a Pi command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TextInput {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    pub max_length: usize,
    /// An empty text is refused unless `false`.
    #[serde(default = "required_default")]
    pub required: bool,
}

fn required_default() -> bool {
    true
}

/// A response: a choice, with its text when the choice takes one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Response {
    pub choice: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl DecisionRequest {
    /// Parse and check the `decision` member of a request contract.
    pub fn from_contract(contract: &Value) -> Result<Self, DecisionError> {
        let member = contract
            .get("decision")
            .ok_or_else(|| invalid_request("the contract has no `decision` member"))?;
        let request: DecisionRequest =
            serde_json::from_value(member.clone()).map_err(|err| invalid_request(&bounded(&err.to_string())))?;
        request.check()?;
        Ok(request)
    }

    /// Every bound and rule of a request; the default must be a valid response.
    pub fn check(&self) -> Checked {
        check_name("audience", &self.audience, AUDIENCE_BYTES_MAX)?;
        check_text("title", &self.title, 1, TITLE_CHARS_MAX)?;
        self.presentation.check()?;
        check_choices(&self.choices)?;
        if let Some(default) = &self.on_timeout {
            if self.deadline_at.is_none() {
                return Err(invalid_request("onTimeout needs a deadline"));
            }
            self.check_response(default)
                .map_err(|err| invalid_request(&format!("onTimeout.response: {err}")))?;
        }
        Ok(())
    }

    /// A response is one of the choices, with text exactly when that choice takes it.
    pub fn check_response(&self, response: &Response) -> Checked {
        let Some(choice) = self.choices.iter().find(|choice| choice.id == response.choice) else {
            return Err(DecisionError::InvalidAnswer(format!(
                "{} is not one of the choices: {}",
                quoted(&response.choice),
                self.choice_ids().join(", ")
            )));
        };
        match (&choice.input, &response.text) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(DecisionError::InvalidAnswer(format!(
                "choice {} takes no text; answer with the choice alone",
                choice.id
            ))),
            (Some(input), text) => input.check_text(&choice.id, text.as_deref()),
        }
    }

    #[must_use]
    pub fn choice_ids(&self) -> Vec<&str> {
        self.choices.iter().map(|choice| choice.id.as_str()).collect()
    }

    /// The digest that binds what was asked: subject, presentation, title, answer revision,
    /// choices (with their prompts), deadline and default. A person's answer may name it, so an
    /// answer to a presentation that changed is refused.
    #[must_use]
    pub fn digest(&self, subject_hash: &str, revision: i64) -> String {
        let bound = json!({
            "schema": REQUEST_DIGEST_SCHEMA,
            "audience": self.audience,
            "title": self.title,
            "subjectHash": subject_hash,
            "presentation": self.presentation,
            "revision": revision,
            "choices": self.choices,
            "deadlineAt": self.deadline_at,
            "default": self.on_timeout,
        });
        canonical_sha256_hex(&bound).expect("a decision request is plain JSON")
    }
}

impl Presentation {
    fn check(&self) -> Checked {
        if self.schema != PRESENTATION_SCHEMA {
            return Err(invalid_request(&format!(
                "presentation.schema must be {PRESENTATION_SCHEMA}"
            )));
        }
        check_text("presentation.summary", &self.summary, 1, SUMMARY_CHARS_MAX)?;
        if self.blocks.len() > BLOCKS_MAX {
            return Err(invalid_request(&format!(
                "a presentation has at most {BLOCKS_MAX} blocks"
            )));
        }
        self.blocks.iter().try_for_each(Block::check)?;
        let bytes = serde_json::to_vec(self).map_or(usize::MAX, |bytes| bytes.len());
        if bytes > PRESENTATION_BYTES_MAX {
            return Err(invalid_request(&format!(
                "the presentation is {bytes} bytes; the limit is {PRESENTATION_BYTES_MAX}: summarise, and link to details"
            )));
        }
        Ok(())
    }
}

impl Block {
    fn check(&self) -> Checked {
        match self {
            Block::Text { text } => check_text("a text block", text, 1, BLOCK_TEXT_CHARS_MAX),
            Block::Code { text, language } => {
                check_text("a code block", text, 1, CODE_TEXT_CHARS_MAX)?;
                language
                    .as_deref()
                    .map_or(Ok(()), |language| check_name("a code block's language", language, 32))
            }
            Block::Fields { fields } => {
                if fields.is_empty() || fields.len() > FIELDS_MAX {
                    return Err(invalid_request(&format!("a fields block has 1 to {FIELDS_MAX} fields")));
                }
                fields.iter().try_for_each(|field| {
                    check_text("a field label", &field.label, 1, FIELD_LABEL_CHARS_MAX)?;
                    check_text("a field value", &field.value, 0, FIELD_VALUE_CHARS_MAX)
                })
            }
        }
    }
}

impl TextInput {
    fn check(&self, choice: &str) -> Checked {
        check_text("an input label", &self.label, 1, INPUT_LABEL_CHARS_MAX)?;
        if let Some(placeholder) = &self.placeholder {
            check_text("an input placeholder", placeholder, 0, INPUT_LABEL_CHARS_MAX)?;
        }
        if self.max_length == 0 || self.max_length > INPUT_TEXT_CHARS_MAX {
            return Err(invalid_request(&format!(
                "choice {choice}: input.maxLength must be 1 to {INPUT_TEXT_CHARS_MAX}"
            )));
        }
        Ok(())
    }

    fn check_text(&self, choice: &str, text: Option<&str>) -> Checked {
        let text = text.unwrap_or("");
        if self.required && text.trim().is_empty() {
            return Err(DecisionError::InvalidAnswer(format!(
                "choice {choice} needs text ({}); answer with the choice and the text",
                self.label
            )));
        }
        let chars = text.chars().count();
        if chars > self.max_length {
            return Err(DecisionError::InvalidAnswer(format!(
                "the text for choice {choice} has {chars} characters; the limit is {}",
                self.max_length
            )));
        }
        Ok(())
    }
}

fn check_choices(choices: &[Choice]) -> Checked {
    if choices.is_empty() || choices.len() > CHOICES_MAX {
        return Err(invalid_request(&format!("a decision has 1 to {CHOICES_MAX} choices")));
    }
    for (index, choice) in choices.iter().enumerate() {
        check_name("a choice id", &choice.id, CHOICE_ID_BYTES_MAX)?;
        check_text("a choice label", &choice.label, 1, CHOICE_LABEL_CHARS_MAX)?;
        if let Some(input) = &choice.input {
            input.check(&choice.id)?;
        }
        if choices[..index].iter().any(|earlier| earlier.id == choice.id) {
            return Err(invalid_request(&format!("choice {} is declared twice", choice.id)));
        }
    }
    Ok(())
}

/// A person's answer as sent: a bare choice ID, or `{choice, text?}`.
pub fn parse_answer(value: &Value) -> Result<Response, DecisionError> {
    match value {
        Value::String(choice) => Ok(Response {
            choice: choice.clone(),
            text: None,
        }),
        Value::Object(_) => serde_json::from_value(value.clone()).map_err(|err| {
            DecisionError::InvalidAnswer(format!(
                "send a choice ID or {{\"choice\": …, \"text\": …}}: {}",
                bounded(&err.to_string())
            ))
        }),
        _ => Err(DecisionError::InvalidAnswer(
            "send a choice ID or {\"choice\": …, \"text\": …}".to_string(),
        )),
    }
}

/// The node output a settled decision gives its workflow.
#[must_use]
pub fn output_of(response: &Response, provenance: Provenance) -> Value {
    let mut output = json!({ "choice": response.choice, "provenance": provenance.as_str() });
    if let Some(text) = &response.text {
        output["text"] = Value::String(text.clone());
    }
    output
}

fn check_name(what: &str, name: &str, bytes_max: usize) -> Checked {
    let plain = name
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-');
    if name.is_empty() || name.len() > bytes_max || !plain {
        return Err(invalid_request(&format!(
            "{what} must be 1 to {bytes_max} characters of a-z, 0-9, _ and -, not {}",
            quoted(name)
        )));
    }
    Ok(())
}

fn check_text(what: &str, text: &str, chars_min: usize, chars_max: usize) -> Checked {
    let chars = text.chars().count();
    if chars < chars_min || chars > chars_max {
        return Err(invalid_request(&format!(
            "{what} must have {chars_min} to {chars_max} characters, not {chars}"
        )));
    }
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(invalid_request(&format!("{what} has control characters")));
    }
    Ok(())
}

fn invalid_request(detail: &str) -> DecisionError {
    DecisionError::InvalidRequest(detail.to_string())
}

/// A peer-given value quoted in a refusal: a bounded prefix only.
fn quoted(text: &str) -> String {
    let prefix: String = text.chars().take(40).collect();
    let cut = if prefix.len() < text.len() { "…" } else { "" };
    format!("{:?}{cut}", prefix)
}

fn bounded(text: &str) -> String {
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests;
